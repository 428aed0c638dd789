//! `gpupool-bench containers`: how long a container takes from `runc run` to its first CUDA
//! call returning (`cuInit` then `cuDeviceGetCount`, tests/c/container_client.c `first-call`),
//! with `gpupool oci-hook` putting it in the pool, against the same container put in the pool
//! by hand (the bare runtime: `libgpupool.so` and the daemon's socket bind-mounted by the
//! config, `LD_PRELOAD` and `GPUPOOL_ENDPOINT` in its environment), in one run. A third row,
//! the simulator's `libcuda.so.1` mounted and loaded directly (no pool), shows what the
//! runtime and the CUDA start cost without the pool at all.
//!
//! Bundles as pool-daemon/tests/containers.rs makes them (tests/src/containers.rs), the release
//! daemon on the release simulator. The parent stamps CLOCK_REALTIME before spawning `runc run`
//! and after reaping it (after poststop); the client stamps the same clock (namespaces share it)
//! when its first call has returned. Variants run round-robin, the order rotating each round,
//! after one untimed warm-up round; figures are medians. Needs root, runc and the release build.

use crate::pool::{Daemon, build_pool, loadavg, release_dir};
use crate::report::{cpus, grid};
use gpupool_e2e::containers::{self as ct, Spec};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

const USAGE: &str = "usage: gpupool-bench containers [--quick]";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Hook,
    ByHand,
    SimDirect,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Hook => "runc + gpupool oci-hook",
            Variant::ByHand => "runc, pool mounted by hand (no hook)",
            Variant::SimDirect => "runc, simulator's libcuda directly (no pool)",
        }
    }
}

/// Milliseconds from the spawn of `runc run` to the first call's return, and to `runc run`'s exit.
#[derive(Clone, Copy)]
struct Sample {
    first_call: f64,
    exited: f64,
}

fn realtime_ns() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own; CLOCK_REALTIME always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut t) };
    t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
}

struct Bench {
    daemon: Daemon,
    bundles: Vec<(Variant, PathBuf)>,
    n: usize,
}

impl Bench {
    fn sample(&mut self, v: Variant) -> Result<Sample, String> {
        let dir = &self.bundles.iter().find(|(x, _)| *x == v).expect("made").1;
        self.n += 1;
        let id = format!("gpupool-bench-{}-{}", std::process::id(), self.n);
        let t0 = realtime_ns();
        let out = ct::runc_run(dir, &id).stdin(Stdio::null()).output().map_err(|e| format!("runc run: {e}"))?;
        let exited = realtime_ns();
        let text = String::from_utf8_lossy(&out.stdout);
        let stamp = text
            .lines()
            .find_map(|l| l.strip_prefix("first_call_ns="))
            .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse::<f64>().ok()));
        match stamp {
            Some(t) if out.status.success() => Ok(Sample { first_call: (t - t0) / 1e6, exited: (exited - t0) / 1e6 }),
            _ => Err(format!("{}: {}\n{}", v.name(), gpupool_e2e::output_text(&out), self.daemon.log())),
        }
    }
}

fn bundle(dir: &Path, client: &Path, spec: Spec) -> PathBuf {
    ct::rootfs(dir, client);
    ct::write_config(dir, &spec);
    dir.to_path_buf()
}

fn setup(work: &Path) -> Result<Bench, String> {
    build_pool()?;
    let sim = gpupool_e2e::build_sim_libdir(true)?;
    let rel = release_dir();
    let gpupool = rel.join("gpupool");
    let daemon = Daemon::start_with(&gpupool, work.join("daemon"), &[])?;
    let client = gpupool_e2e::compile_c("container_client", &work.join("bin"));
    let args = vec!["/app/container_client".to_string(), "first-call".into()];
    let socket = daemon.endpoint().trim_start_matches("unix://").to_string();
    let hook = bundle(
        &work.join("hook"),
        &client,
        Spec {
            args: args.clone(),
            hooks: Some(ct::pool_hooks(&gpupool, &daemon.endpoint(), &work.join("lib"))),
            ..Default::default()
        },
    );
    let by_hand = bundle(
        &work.join("by-hand"),
        &client,
        Spec {
            args: args.clone(),
            env: vec!["LD_PRELOAD=/opt/gpupool/libgpupool.so".into(), "GPUPOOL_ENDPOINT=unix:///run/pool.sock".into()],
            binds: vec![
                (rel.join("libgpupool.so"), "/opt/gpupool/libgpupool.so".into()),
                (PathBuf::from(socket), "/run/pool.sock".into()),
            ],
            ..Default::default()
        },
    );
    let direct = bundle(
        &work.join("direct"),
        &client,
        Spec {
            args,
            // The libdir's links point into its parent (`../libgpupool_sim.so`): mount both.
            env: vec![format!("LD_LIBRARY_PATH=/opt/sim/{}", dir_name(&sim)), "GPUPOOL_SIM_DEVICES=2".into()],
            binds: vec![(sim.parent().expect("the libdir has a parent").to_path_buf(), "/opt/sim".into())],
            ..Default::default()
        },
    );
    let bundles = vec![(Variant::Hook, hook), (Variant::ByHand, by_hand), (Variant::SimDirect, direct)];
    Ok(Bench { daemon, bundles, n: 0 })
}

fn dir_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn main(args: &[String]) -> ExitCode {
    let mut rounds = 15;
    for a in args {
        match a.as_str() {
            "--quick" => rounds = 3,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("gpupool-bench containers: unexpected argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let work = std::env::temp_dir().join(format!("gpupool-bench-containers-{}", std::process::id()));
    let result = run(&work, rounds);
    let _ = std::fs::remove_dir_all(&work);
    match result {
        Ok(t) => {
            print!("{t}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpupool-bench containers: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(work: &Path, rounds: usize) -> Result<String, String> {
    if real_uid() != 0 {
        return Err("runc needs root".into());
    }
    let started = Instant::now();
    let load_start = loadavg();
    let mut b = setup(work)?;
    let order = [Variant::Hook, Variant::ByHand, Variant::SimDirect];
    for v in order {
        b.sample(v)?;
    }
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); order.len()];
    for round in 0..rounds {
        for i in 0..order.len() {
            let at = (i + round) % order.len();
            samples[at].push(b.sample(order[at])?);
        }
    }
    let medians: Vec<(f64, f64)> = samples
        .iter()
        .map(|s| (median(s.iter().map(|x| x.first_call).collect()), median(s.iter().map(|x| x.exited).collect())))
        .collect();
    let base = medians[1];
    let rows: Vec<Vec<String>> = order
        .iter()
        .zip(&medians)
        .map(|(v, (f, e))| {
            vec![v.name().to_string(), format!("{f:.1}"), format!("{e:.1}"), format!("{:.2}x", f / base.0)]
        })
        .collect();
    let mut t = format!(
        "gpupool-bench containers: runc {} (release daemon --sim), {rounds} rounds after a warm-up round, medians\n\
         {} CPUs; run took {:.1} s; load average (1 min) {load_start} at the start, {} at the end\n\
         ms from spawning `runc run`; first call = cuInit + cuDeviceGetCount returned in the container\n\n",
        runc_version(),
        cpus(),
        started.elapsed().as_secs_f64(),
        loadavg()
    );
    let head = ["container", "start..first call", "start..runc exit", "first call / by hand"];
    t += &grid(&head, &rows, &[0]);
    t += &format!(
        "\nthe hook's cost (medians): {:.1} ms to the first call, {:.1} ms to runc's exit (createRuntime: the daemon's\n\
         endpoint, setns, mounts, ldconfig over the image; poststop: the endpoint's removal)\n",
        medians[0].0 - base.0,
        medians[0].1 - base.1
    );
    Ok(t)
}

fn real_uid() -> u32 {
    // SAFETY: getuid(2) takes nothing and cannot fail.
    unsafe { libc::getuid() }
}

fn runc_version() -> String {
    Command::new(ct::require_tool("runc"))
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).lines().next().map(str::to_string))
        .unwrap_or_default()
}
