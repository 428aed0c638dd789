//! `gpupool-bench compute`: how well the compute scheduler holds quotas, and what it costs.
//!
//! - **Accuracy**: configured against achieved share for a matrix of quotas (1 to 100%), client counts
//!   (1 to 8), kernel lengths (50 us to 100 ms) and both modes. Each client is a real process
//!   (tests/c/compute_load.c under `LD_PRELOAD=libgpupool.so`, its own tenant by token) saturating the
//!   device with timed PTX kernels; its share is the kernel-body time that completed in a window of
//!   wall time, measured from outside the pool. `limit` cells compare each share with its quota;
//!   `share` cells compare each tenant's part of what the device delivered with its weight.
//! - **Cost**: the launch rate of empty kernels at quota 100 with the scheduler on, against the same
//!   daemon with `--no-compute-scheduler`, alternated three times in this run (medians).

use crate::pool::{Daemon, Kids, build_pool, release_dir};
use gpupool_e2e::compute_load::{LoadReport, SEC};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One cell of the matrix.
pub struct Cell {
    pub mode: &'static str,
    pub kernel_us: u64,
    /// (quota or weight, achieved %) per client.
    pub clients: Vec<(u8, f64)>,
    pub window_s: f64,
}

impl Cell {
    fn delivered(&self) -> f64 {
        self.clients.iter().map(|c| c.1).sum()
    }
    /// Per client: the figure compared and its target.
    fn compared(&self) -> Vec<(f64, f64)> {
        let weights: f64 = self.clients.iter().map(|c| f64::from(c.0)).sum();
        let total = self.delivered();
        self.clients
            .iter()
            .map(|&(q, got)| match self.mode {
                "share" => (got * 100.0 / total, f64::from(q) * 100.0 / weights),
                _ => (got, f64::from(q)),
            })
            .collect()
    }
    /// The largest distance from target, in points.
    pub fn worst(&self) -> f64 {
        self.compared().iter().map(|(g, w)| (g - w).abs()).fold(0.0, f64::max)
    }
}

pub struct ComputeRun {
    pub cells: Vec<Cell>,
    /// Launches per second with the scheduler, and without, three alternated runs each.
    pub rate_on: Vec<f64>,
    pub rate_off: Vec<f64>,
    pub loadavg: String,
}

struct Setup {
    gpupool: PathBuf,
    lib: PathBuf,
    load: PathBuf,
}

fn config(tenants: &[(String, u8, &str)]) -> String {
    tenants
        .iter()
        .map(|(name, q, mode)| {
            format!(
                "[[tenant]]\nname = \"{name}\"\ntoken_sha256 = \"{}\"\ncompute = {q}\nmode = \"{mode}\"\n\n",
                sha256_hex(&format!("token-{name}"))
            )
        })
        .collect()
}

/// sha256 of a token, by the system's `sha256sum` (what quota/README.md suggests to operators).
fn sha256_hex(text: &str) -> String {
    use std::io::Write;
    let mut c = Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("sha256sum");
    c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or_default().to_string()
}

fn daemon(s: &Setup, name: &str, config_text: &str, scheduler: bool) -> Result<Daemon, String> {
    let dir = std::env::temp_dir().join(format!("gpupool-bench-compute-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let cfg = dir.join("quota.toml");
    std::fs::write(&cfg, config_text).map_err(|e| e.to_string())?;
    let mut extra = vec!["--config".to_string(), cfg.display().to_string()];
    if !scheduler {
        extra.push("--no-compute-scheduler".into());
    }
    Daemon::start_with(&s.gpupool, dir.join("d"), &extra)
}

/// Runs one client per `(tenant, args)` at once; returns their reports.
fn clients(s: &Setup, d: &Daemon, runs: &[(String, Vec<String>)]) -> Result<Vec<LoadReport>, String> {
    let mut kids = Kids(Vec::new());
    for (tenant, args) in runs {
        let c = Command::new(&s.load)
            .args(args)
            .env("LD_PRELOAD", &s.lib)
            .env("GPUPOOL_ENDPOINT", d.endpoint())
            .env("GPUPOOL_TOKEN", format!("token-{tenant}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting compute_load: {e}"))?;
        kids.0.push(c);
    }
    let mut reports = Vec::new();
    while !kids.0.is_empty() {
        // Taken in order; on an error the rest are killed when `kids` drops.
        let c = kids.0.remove(0);
        let out = c.wait_with_output().map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "compute_load failed ({}): {text}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        reports.push(LoadReport::parse(&text)?);
    }
    Ok(reports)
}

fn cell(s: &Setup, mode: &'static str, kernel_us: u64, quotas: &[u8]) -> Result<Cell, String> {
    let long = kernel_us >= 10_000;
    let window = if long { 10 * SEC } else { 5 * SEC };
    let tenants: Vec<(String, u8, &str)> =
        quotas.iter().enumerate().map(|(i, &q)| (format!("t{i}"), q, mode)).collect();
    let d = daemon(s, &format!("{mode}-{kernel_us}-{}", quotas.len()), &config(&tenants), true)?;
    let duration = format!("{:.1}", (window + SEC) as f64 / 1e9 + 0.2);
    // Long kernels one at a time (--sync), so that each sample is taken right at a completion.
    let pace: &[&str] = if long {
        &["--sync"]
    } else if kernel_us < 200 {
        &["--batch", "32"]
    } else {
        &["--batch", "4"]
    };
    let runs: Vec<_> = tenants
        .iter()
        .map(|t| {
            let k = kernel_us.to_string();
            let args =
                ["--duration", duration.as_str(), "--kernel-us", k.as_str()].into_iter().chain(pace.iter().copied());
            (t.0.clone(), args.map(str::to_string).collect())
        })
        .collect();
    let reports = clients(s, &d, &runs)?;
    let from = reports.iter().map(|r| r.start).max().unwrap_or(0) + SEC / 2;
    let mut out = Vec::new();
    for (r, q) in reports.iter().zip(quotas) {
        let got = if long { r.share_between_completions(from)?.0 } else { r.share(from, from + window)? };
        out.push((*q, got));
    }
    Ok(Cell { mode, kernel_us, clients: out, window_s: window as f64 / 1e9 })
}

fn launch_rate(s: &Setup, scheduler: bool) -> Result<f64, String> {
    let d =
        daemon(s, if scheduler { "rate-on" } else { "rate-off" }, &config(&[("t0".into(), 100, "limit")]), scheduler)?;
    let args = ["--duration", "2", "--kernel-us", "0", "--batch", "256"].iter().map(|a| a.to_string()).collect();
    let r = clients(s, &d, &[("t0".into(), args)])?;
    let (first, last) = (r[0].samples.first().copied().unwrap_or_default(), r[0].end());
    let kernels = r[0].samples.last().map_or(0, |x| x.1) - first.1;
    Ok(kernels as f64 * SEC as f64 / (last - first.0).max(1) as f64)
}

pub fn run() -> Result<ComputeRun, String> {
    build_pool()?;
    let rel = release_dir();
    let load = gpupool_e2e::compile_c("compute_load", &rel.join("bench-c"));
    let s = Setup { gpupool: rel.join("gpupool"), lib: rel.join("libgpupool.so"), load };
    for p in [&s.gpupool, &s.lib] {
        if !Path::new(p).exists() {
            return Err(format!("{} missing after the build", p.display()));
        }
    }
    let mut cells = Vec::new();
    let matrix: &[(&'static str, u64, &[u8])] = &[
        ("limit", 1000, &[1]),
        ("limit", 1000, &[7]),
        ("limit", 1000, &[25]),
        ("limit", 1000, &[50]),
        ("limit", 1000, &[100]),
        ("limit", 50, &[10]),
        ("limit", 100_000, &[10]),
        ("limit", 1000, &[10, 30, 60]),
        ("limit", 1000, &[5, 5, 10, 10, 15, 15, 20, 15]),
        ("share", 1000, &[25, 75]),
        ("share", 50, &[25, 75]),
        ("share", 1000, &[5, 5, 10, 10, 15, 15, 20, 20]),
    ];
    for &(mode, k, q) in matrix {
        eprintln!("compute: {mode} {k} us {q:?}");
        cells.push(cell(&s, mode, k, q)?);
    }
    let (mut rate_on, mut rate_off) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        rate_off.push(launch_rate(&s, false)?);
        rate_on.push(launch_rate(&s, true)?);
    }
    Ok(ComputeRun { cells, rate_on, rate_off, loadavg: crate::pool::loadavg() })
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn table(run: &ComputeRun) -> String {
    let mut t = format!("gpupool-bench compute (load average {})\n\n", run.loadavg);
    t += "mode   kernel    clients  configured                   achieved                              delivered  worst\n";
    for c in &run.cells {
        let cmp = c.compared();
        let conf: Vec<String> = cmp.iter().map(|x| format!("{:.1}", x.1)).collect();
        let got: Vec<String> = cmp.iter().map(|x| format!("{:.2}", x.0)).collect();
        t += &format!(
            "{:<6} {:<9} {:<8} {:<28} {:<37} {:>7.2}%  {:.2} pt\n",
            c.mode,
            if c.kernel_us >= 1000 { format!("{} ms", c.kernel_us / 1000) } else { format!("{} us", c.kernel_us) },
            c.clients.len(),
            conf.join(" "),
            got.join(" "),
            c.delivered(),
            c.worst()
        );
    }
    t += "\n(limit: each client's kernel-body share of wall time against its quota; share: each client's part of\n";
    t += " what the device delivered against its weight; windows of 5 s, 10 s for 100 ms kernels)\n\n";
    let (on, off) = (median(&run.rate_on), median(&run.rate_off));
    t += &format!(
        "launch rate, empty kernels, quota 100: scheduler on {:.0}/s, off {:.0}/s: {:.1}% of off (runs on {:?}, off {:?})\n",
        on,
        off,
        on * 100.0 / off,
        run.rate_on.iter().map(|x| *x as u64).collect::<Vec<_>>(),
        run.rate_off.iter().map(|x| *x as u64).collect::<Vec<_>>()
    );
    t
}

pub fn json(run: &ComputeRun) -> String {
    let cells: Vec<String> = run
        .cells
        .iter()
        .map(|c| {
            let cl: Vec<String> =
                c.clients.iter().map(|(q, g)| format!("{{\"quota\":{q},\"achieved_percent\":{g:.4}}}")).collect();
            format!(
                "{{\"mode\":\"{}\",\"kernel_us\":{},\"window_s\":{},\"worst_points\":{:.4},\"clients\":[{}]}}",
                c.mode,
                c.kernel_us,
                c.window_s,
                c.worst(),
                cl.join(",")
            )
        })
        .collect();
    format!(
        "{{\"cells\":[{}],\"launch_rate_on\":{:?},\"launch_rate_off\":{:?}}}\n",
        cells.join(","),
        run.rate_on,
        run.rate_off
    )
}
