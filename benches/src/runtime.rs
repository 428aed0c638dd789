//! `gpupool-bench runtime`: what the CUDA runtime front-end adds to the driver-API
//! forwarding path. One nvcc-built program (tests/cuda/runtime_cost.cu) runs under
//! `gpupool run` against the release daemon on the release simulator and, in each
//! round, launches the same empty kernel with `<<<>>>` and with `cuLaunchKernel`, and
//! makes the same 4-byte host-to-device copy with `cudaMemcpy` and with `cuMemcpyHtoD`
//! (the driver functions from `cudaGetDriverEntryPointByVersion`, i.e. the interposer's
//! own driver exports). Rounds alternate which path goes first; within a round the copies
//! alternate in blocks of 250 and each path's figure is the median of its blocks (a sync
//! round trip's time swings with how each side is woken); figures are medians over rounds.
//! The target (issue 6): the runtime adds at most 10% to the driver path's cost.

use crate::pool::{Daemon, build_pool, release_dir};
use std::process::Command;

pub struct Round {
    pub launch_rt: f64,
    pub launch_drv: f64,
    pub copy_rt_ns: f64,
    pub copy_drv_ns: f64,
}

pub struct RuntimeRun {
    pub rounds: Vec<Round>,
    pub launches: u64,
    pub copies: u64,
    pub loadavg: String,
}

const ROUNDS: u32 = 11;
const LAUNCHES: u64 = 100_000;
const COPIES: u64 = 50_000;

fn parse(line: &str) -> Result<Round, String> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let num = |key: &str| -> Result<f64, String> {
        let i = f.iter().position(|w| *w == key).ok_or_else(|| format!("no {key} in {line:?}"))?;
        f.get(i + 1).and_then(|v| v.parse().ok()).ok_or_else(|| format!("bad {key} in {line:?}"))
    };
    Ok(Round {
        launch_rt: num("launch_rt")?,
        launch_drv: num("launch_drv")?,
        copy_rt_ns: num("copy_rt_ns")?,
        copy_drv_ns: num("copy_drv_ns")?,
    })
}

pub fn run() -> Result<RuntimeRun, String> {
    build_pool()?;
    let rel = release_dir();
    let exe = gpupool_e2e::compile_cu("runtime_cost", &rel.join("bench-cuda"), &[]);
    let dir = std::env::temp_dir().join(format!("gpupool-bench-runtime-{}", std::process::id()));
    let d = Daemon::start_with(&rel.join("gpupool"), dir, &[])?;
    let out = Command::new(rel.join("gpupool"))
        .args(["run", "--endpoint", &d.endpoint(), "--"])
        .arg(&exe)
        .args([ROUNDS.to_string(), LAUNCHES.to_string(), COPIES.to_string()])
        .output()
        .map_err(|e| format!("running runtime_cost: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("runtime_cost failed ({}): {text}{}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    let rounds = text.lines().filter(|l| l.starts_with("round ")).map(parse).collect::<Result<Vec<_>, _>>()?;
    if rounds.len() != ROUNDS as usize {
        return Err(format!("expected {ROUNDS} rounds, got {}: {text}", rounds.len()));
    }
    Ok(RuntimeRun { rounds, launches: LAUNCHES, copies: COPIES, loadavg: crate::pool::loadavg() })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// (runtime, driver, overhead %) with overhead the median of per-round cost ratios:
/// each round's two paths ran back to back, so the ratio cancels most machine noise.
pub struct Figures {
    pub launch: (f64, f64, f64),
    pub copy: (f64, f64, f64),
}

pub fn figures(run: &RuntimeRun) -> Figures {
    let r = &run.rounds;
    // Cost per launch is 1/rate, so the runtime's extra cost is drv_rate/rt_rate - 1.
    let launch_over = median(r.iter().map(|x| (x.launch_drv / x.launch_rt - 1.0) * 100.0).collect());
    let copy_over = median(r.iter().map(|x| (x.copy_rt_ns / x.copy_drv_ns - 1.0) * 100.0).collect());
    Figures {
        launch: (
            median(r.iter().map(|x| x.launch_rt).collect()),
            median(r.iter().map(|x| x.launch_drv).collect()),
            launch_over,
        ),
        copy: (
            median(r.iter().map(|x| x.copy_rt_ns).collect()),
            median(r.iter().map(|x| x.copy_drv_ns).collect()),
            copy_over,
        ),
    }
}

pub fn table(run: &RuntimeRun) -> String {
    let f = figures(run);
    let verdict = |over: f64| if over <= 10.0 { "meets <= 10%" } else { "MISSES <= 10%" };
    format!(
        "gpupool-bench runtime: {} rounds under gpupool run (release daemon on the release simulator), \
         load average {}\n\
         | path | runtime API | driver API | runtime adds (median of per-round ratios) |\n\
         | --- | --- | --- | --- |\n\
         | empty-kernel launches, {} per round, then one sync | {:.0}/s | {:.0}/s | {:+.1}% ({}) |\n\
         | 4-byte cudaMemcpy H2D vs cuMemcpyHtoD, {} per round in alternating blocks | {:.2} us | {:.2} us | {:+.1}% ({}) |\n",
        run.rounds.len(),
        run.loadavg,
        run.launches,
        f.launch.0,
        f.launch.1,
        f.launch.2,
        verdict(f.launch.2),
        run.copies,
        f.copy.0 / 1000.0,
        f.copy.1 / 1000.0,
        f.copy.2,
        verdict(f.copy.2),
    )
}

pub fn json(run: &RuntimeRun) -> String {
    let f = figures(run);
    let rounds: Vec<String> = run
        .rounds
        .iter()
        .map(|r| {
            format!(
                "{{\"launch_rt\":{},\"launch_drv\":{},\"copy_rt_ns\":{},\"copy_drv_ns\":{}}}",
                r.launch_rt, r.launch_drv, r.copy_rt_ns, r.copy_drv_ns
            )
        })
        .collect();
    format!(
        "{{\"launch_runtime_per_s\":{},\"launch_driver_per_s\":{},\"launch_overhead_pct\":{},\
         \"copy_runtime_ns\":{},\"copy_driver_ns\":{},\"copy_overhead_pct\":{},\"rounds\":[{}]}}\n",
        f.launch.0,
        f.launch.1,
        f.launch.2,
        f.copy.0,
        f.copy.1,
        f.copy.2,
        rounds.join(",")
    )
}
