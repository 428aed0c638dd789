//! `gpupool-bench torch-start`: how long an unmodified PyTorch process takes from its start to
//! its first CUDA allocation returning under `gpupool run`, against the same process without
//! the pool, in one run.
//!
//! NVIDIA's CUDA runtime (which PyTorch links) needs the driver's private `cuGetExportTable`
//! tables, which only NVIDIA's driver has: on the simulator loaded directly `torch.cuda` fails
//! its first call (`cudaGetDeviceCount`, error 801), and only through the pool (libgpupool.so
//! serves the runtime API) does it start. So the bench first tries that direct run and uses it
//! as the baseline only if it works; the baselines that always run are the same script with the
//! allocation on the CPU, without the pool and under `gpupool run`, which split the pool's
//! start cost into what `gpupool run` and the preloaded interposer add to a process that never
//! touches CUDA, and what the CUDA start through the pool adds on top. The script stamps
//! CLOCK_MONOTONIC when the interpreter runs its first line, after `import torch`, and after
//! `torch.empty(1, device=...)` (then `torch.cuda.synchronize()`) returns; the parent stamps
//! the same clock just before spawning and after reaping. Variants run round-robin, the order
//! rotating each round, after one untimed warm-up round (the page cache holds torch's
//! libraries for everyone); figures are medians over the rounds.

use crate::pool::{Daemon, build_pool, loadavg, release_dir};
use crate::report::{cpus, grid};
use crate::stats::monotonic_ns;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Instant;

const USAGE: &str = "usage: gpupool-bench torch-start [--quick]";

const SCRIPT: &str = "\
import sys, time
t_start = time.monotonic_ns()
import torch
t_import = time.monotonic_ns()
dev = sys.argv[1]
x = torch.empty(1, device=dev)
if dev == 'cuda':
    torch.cuda.synchronize()
t_alloc = time.monotonic_ns()
print('stamps', t_start, t_import, t_alloc, flush=True)
";

/// How a variant's process is started.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Launch {
    Pool,
    Plain,
    /// The simulator's libdir on `LD_LIBRARY_PATH`, no pool.
    SimDirect,
}

#[derive(Clone, Copy)]
struct Variant {
    name: &'static str,
    launch: Launch,
    device: &'static str,
}

const POOL_CUDA: Variant = Variant { name: "gpupool run, cuda", launch: Launch::Pool, device: "cuda" };
const SIM_CUDA: Variant = Variant { name: "simulator directly, cuda", launch: Launch::SimDirect, device: "cuda" };
const PLAIN_CPU: Variant = Variant { name: "no pool, cpu", launch: Launch::Plain, device: "cpu" };
const POOL_CPU: Variant = Variant { name: "gpupool run, cpu", launch: Launch::Pool, device: "cpu" };

/// Milliseconds from the parent's spawn stamp to each of the script's stamps, and to exit.
#[derive(Clone, Copy)]
struct Sample {
    started: f64,
    imported: f64,
    allocated: f64,
    exited: f64,
}

struct Env {
    python: PathBuf,
    gpupool: PathBuf,
    endpoint: String,
    sim_libdir: PathBuf,
}

/// One process of `v`: its stamps, or its output when it failed.
fn sample(env: &Env, v: Variant) -> Result<Sample, String> {
    let mut cmd = match v.launch {
        Launch::Pool => {
            let mut c = Command::new(&env.gpupool);
            c.args(["run", "--endpoint", &env.endpoint, "--"]).arg(&env.python);
            c
        }
        Launch::Plain | Launch::SimDirect => Command::new(&env.python),
    };
    cmd.args(["-c", SCRIPT, v.device]);
    for k in ["LD_PRELOAD", "LD_LIBRARY_PATH", "GPUPOOL_ENDPOINT"] {
        cmd.env_remove(k);
    }
    if v.launch == Launch::SimDirect {
        cmd.env("LD_LIBRARY_PATH", &env.sim_libdir);
    }
    let t0 = monotonic_ns();
    let out = cmd.output().map_err(|e| format!("starting {}: {e}", env.python.display()))?;
    let exited = monotonic_ns();
    let text = String::from_utf8_lossy(&out.stdout);
    let stamps: Vec<f64> = text
        .lines()
        .find_map(|l| l.strip_prefix("stamps "))
        .map(|s| s.split_whitespace().filter_map(|w| w.parse().ok()).collect())
        .unwrap_or_default();
    if !out.status.success() || stamps.len() != 3 {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
        return Err(format!("{} ({}): {last}", v.name, out.status));
    }
    let ms = |t: f64| (t - t0) / 1e6;
    Ok(Sample { started: ms(stamps[0]), imported: ms(stamps[1]), allocated: ms(stamps[2]), exited: ms(exited) })
}

struct TorchRun {
    variants: Vec<(Variant, Vec<Sample>)>,
    /// Why the simulator-direct baseline is missing, when it is.
    sim_direct_error: Option<String>,
    rounds: usize,
    python: String,
    wall_s: f64,
    load: (String, String),
}

pub fn main(args: &[String]) -> ExitCode {
    let mut rounds = 7;
    for a in args {
        match a.as_str() {
            "--quick" => rounds = 2,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("gpupool-bench torch-start: unexpected argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    match run(rounds) {
        Ok(r) => {
            print!("{}", table(&r));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpupool-bench torch-start: {e}");
            ExitCode::FAILURE
        }
    }
}

fn torch_python() -> Result<PathBuf, String> {
    let p = gpupool_e2e::workspace_root().join("target/venv-torch/bin/python");
    if p.exists() {
        Ok(p)
    } else {
        Err(format!(
            "{} is missing: scripts/test installs it (or scripts/setup-venv venv-torch tests/python/requirements-torch.txt)",
            p.display()
        ))
    }
}

fn run(rounds: usize) -> Result<TorchRun, String> {
    let started = Instant::now();
    let load_start = loadavg();
    let python = torch_python()?;
    build_pool()?;
    let sim_libdir = gpupool_e2e::build_sim_libdir(true)?;
    let rel = release_dir();
    let dir = std::env::temp_dir().join(format!("gpupool-bench-torch-{}", std::process::id()));
    let daemon = Daemon::start_with(&rel.join("gpupool"), dir, &[])?;
    let env = Env { python: python.clone(), gpupool: rel.join("gpupool"), endpoint: daemon.endpoint(), sim_libdir };
    // The warm-up round, which also finds out whether torch starts on the simulator directly.
    sample(&env, POOL_CUDA)?;
    let sim_direct_error = sample(&env, SIM_CUDA).err();
    let mut order = vec![POOL_CUDA, PLAIN_CPU, POOL_CPU];
    if sim_direct_error.is_none() {
        order.insert(1, SIM_CUDA);
    }
    for v in &order[1..] {
        sample(&env, *v)?;
    }
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); order.len()];
    for round in 0..rounds {
        eprintln!("torch-start: round {}/{rounds}", round + 1);
        for i in 0..order.len() {
            let at = (i + round) % order.len();
            samples[at].push(sample(&env, order[at])?);
        }
    }
    Ok(TorchRun {
        variants: order.into_iter().zip(samples).collect(),
        sim_direct_error,
        rounds,
        python: python.display().to_string(),
        wall_s: started.elapsed().as_secs_f64(),
        load: (load_start, loadavg()),
    })
}

fn median(v: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Medians of a variant's phases: interpreter up, `import torch`, first allocation, start to
/// allocation, start to exit.
fn phases(s: &[Sample]) -> [f64; 5] {
    [
        median(s.iter().map(|x| x.started)),
        median(s.iter().map(|x| x.imported - x.started)),
        median(s.iter().map(|x| x.allocated - x.imported)),
        median(s.iter().map(|x| x.allocated)),
        median(s.iter().map(|x| x.exited)),
    ]
}

fn table(run: &TorchRun) -> String {
    let find = |v: Variant| run.variants.iter().find(|(x, _)| x.name == v.name).map(|(_, s)| phases(s));
    let pool = find(POOL_CUDA).expect("always measured");
    let plain = find(PLAIN_CPU).expect("always measured");
    let pool_cpu = find(POOL_CPU).expect("always measured");
    let sim = find(SIM_CUDA);
    let mut t = format!(
        "gpupool-bench torch-start: {} (release daemon --sim), {} rounds after a warm-up round, medians\n\
         {} CPUs; run took {:.1} s; load average (1 min) {} at the start, {} at the end (a shared machine: other work\n\
         moves every figure)\n\
         ms from spawn; first allocation = torch.empty(1, device=...) (+ torch.cuda.synchronize() on cuda)\n\n",
        run.python,
        run.rounds,
        cpus(),
        run.wall_s,
        run.load.0,
        run.load.1
    );
    let base = sim.unwrap_or(plain);
    let base_name = if sim.is_some() { SIM_CUDA.name } else { PLAIN_CPU.name };
    let rows: Vec<Vec<String>> = run
        .variants
        .iter()
        .map(|(v, s)| {
            let p = phases(s);
            let mut row = vec![v.name.to_string()];
            row.extend(p.iter().map(|x| format!("{x:.1}")));
            row.push(format!("{:.2}x", p[3] / base[3]));
            row
        })
        .collect();
    let ratio_head = format!("start..alloc / {base_name}");
    let head = [
        "process",
        "interpreter up",
        "import torch",
        "first allocation",
        "start..allocation",
        "start..exit",
        ratio_head.as_str(),
    ];
    t += &grid(&head, &rows, &[0]);
    t += &format!(
        "\npool's start cost (start..allocation, medians): {:.1} ms over the process without the pool on the CPU;\n\
         gpupool run + the preloaded interposer without CUDA ({} - {}): {:.1} ms;\n\
         CUDA start and first allocation through the pool: {:.1} ms (the cuda row's first-allocation phase)\n",
        pool[3] - plain[3],
        POOL_CPU.name,
        PLAIN_CPU.name,
        pool_cpu[3] - plain[3],
        pool[2]
    );
    let plain_samples = &run.variants.iter().find(|(x, _)| x.name == PLAIN_CPU.name).expect("measured").1;
    let imports: Vec<f64> = plain_samples.iter().map(|x| x.imported - x.started).collect();
    let spread = imports.iter().copied().fold(f64::MIN, f64::max) - imports.iter().copied().fold(f64::MAX, f64::min);
    t += &format!(
        "  note: `import torch` alone varied by {spread:.1} ms (max - min) across the {} rounds of {}: differences\n  \
         of the totals smaller than that are noise, the first-allocation phase is not\n",
        run.rounds, PLAIN_CPU.name
    );
    if let Some(e) = &run.sim_direct_error {
        t += &format!(
            "  note: no simulator-direct baseline: torch on the simulator's libcuda without the pool fails\n  \
             (NVIDIA's cudart needs the driver's private export tables, which only NVIDIA's driver has): {e}\n"
        );
    }
    t
}
