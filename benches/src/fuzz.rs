//! `gpupool-bench fuzz`: the stateful driver-API fuzzer (`gpupool_e2e::fuzz`) for a long run
//! against the release daemon on the release simulator. Rounds of `--tenants` concurrent
//! tenants (this binary re-executed as `__fuzz-tenant`), each sequence first run directly on
//! the simulator (the reference, as one timed batch) and then through the pool under
//! `gpupool run` (one timed batch, some tenants SIGKILLed), until `--seconds` have passed.
//! Prints sequences and calls per second through the pool and directly on the simulator,
//! medians of the rounds, and every finding with its seed and its sequence, one call a line,
//! as the reproducer (`--replay SEED` runs that one sequence again). Exit 1 on a finding.

use crate::pool::{build_pool, loadavg, release_dir};
use crate::report::{cpus, grid};
use crate::stats::summarize;
use gpupool_e2e::fuzz::harness::{Finding, Fuzz, Options, RoundReport, Setup};
use gpupool_e2e::fuzz::parse_u64;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The hidden subcommand that runs one fuzzing tenant.
pub const TENANT_COMMAND: &str = "__fuzz-tenant";
const USAGE: &str = "usage: gpupool-bench fuzz [--seconds 60] [--seed 1] [--tenants 4] [--len 120] \
                     [--kill-percent 20] [--replay SEED]";

struct Args {
    seconds: u64,
    replay: Option<u64>,
    opts: Options,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        seconds: 60,
        replay: None,
        opts: Options {
            tenants: 4,
            seed: 1,
            len: 120,
            kill_percent: 20,
            kill_window: Duration::from_millis(20),
            timeout: Duration::from_secs(60),
        },
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let n = parse_u64(v).map_err(|e| format!("{flag}: {e}"))?;
        match flag.as_str() {
            "--seconds" => a.seconds = n,
            "--seed" => a.opts.seed = n,
            "--tenants" => a.opts.tenants = n as usize,
            "--len" => a.opts.len = n as usize,
            "--kill-percent" => a.opts.kill_percent = n.min(100),
            "--replay" => a.replay = Some(n),
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    if a.opts.tenants == 0 || a.opts.len == 0 {
        return Err("--tenants and --len must be positive".into());
    }
    Ok(a)
}

pub fn main(args: &[String]) -> ExitCode {
    let a = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gpupool-bench fuzz: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&a) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("gpupool-bench fuzz: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the fuzzer; `Ok(false)` when it found something.
fn run(a: &Args) -> Result<bool, String> {
    let load_start = loadavg();
    build_pool()?;
    // The release simulator, unless GPUPOOL_SIM_LIBDIR names one (as for `sim`).
    let sim_libdir = match std::env::var_os(gpupool_e2e::LIBDIR_ENV) {
        Some(d) if !d.is_empty() => std::path::PathBuf::from(d),
        _ => gpupool_e2e::build_sim_libdir(true)?,
    };
    let rel = release_dir();
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut opts = a.opts.clone();
    if a.replay.is_some() {
        opts.tenants = 1;
    }
    let setup = Setup {
        gpupool: rel.join("gpupool"),
        sim_libdir,
        tenant: vec![exe.to_string_lossy().into_owned(), TENANT_COMMAND.to_string()],
        dir: std::env::temp_dir().join(format!("gpupool-bench-fuzz-{}", std::process::id())),
    };
    let dir = setup.dir.clone();
    let mut fuzz = Fuzz::start(setup, opts.clone())?;
    if let Some(seed) = a.replay {
        let listing = gpupool_e2e::fuzz::ops::generate(seed, opts.len, true).listing();
        print!("{listing}");
        let r = fuzz.run_round(0, &[seed], &[None]);
        let _ = std::fs::remove_dir_all(&dir);
        return Ok(report_findings(&opts, r.err()));
    }
    let t0 = Instant::now();
    let mut rounds: Vec<RoundReport> = Vec::new();
    let mut findings = None;
    while t0.elapsed() < Duration::from_secs(a.seconds) {
        match fuzz.round() {
            Ok(r) => rounds.push(r),
            Err(f) => {
                findings = Some(f);
                break;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    print!("{}", table(&opts, &rounds, t0.elapsed(), (&load_start, &loadavg())));
    Ok(report_findings(&opts, findings))
}

/// Prints the findings with their reproducers; `true` when there are none.
fn report_findings(opts: &Options, findings: Option<Vec<Finding>>) -> bool {
    let Some(findings) = findings else {
        println!("no finding");
        return true;
    };
    for f in &findings {
        println!("\n{f}");
        for (seed, _) in &f.sequences {
            println!("reproduce: cargo run --release -p gpupool-benches -- fuzz --replay {seed} --len {}", opts.len);
        }
    }
    false
}

fn table(o: &Options, rounds: &[RoundReport], wall: Duration, load: (&str, &str)) -> String {
    let mut total = RoundReport::default();
    for r in rounds {
        total.add(r);
    }
    let mut out = format!(
        "gpupool-bench fuzz: {} rounds of {} tenants x {} ops in {:.1} s, seed {} ({} CPUs, load {} -> {})\n\n",
        rounds.len(),
        o.tenants,
        o.len,
        wall.as_secs_f64(),
        o.seed,
        cpus(),
        load.0,
        load.1
    );
    if rounds.is_empty() {
        return out;
    }
    let per_round = |f: &dyn Fn(&RoundReport) -> f64| summarize(rounds.iter().map(f).collect()).median;
    let seq_rate = |n: usize, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    let pool_seq = per_round(&|r| seq_rate(r.sequences(), r.pool_wall));
    let sim_seq = per_round(&|r| seq_rate(r.sequences(), r.sim_wall));
    let pool_calls = per_round(&|r| seq_rate(r.pool_calls, r.pool_wall));
    let sim_calls = per_round(&|r| seq_rate(r.sim_calls, r.sim_wall));
    let rows = vec![
        vec![
            "sequences/s".into(),
            format!("{pool_seq:.1}"),
            format!("{sim_seq:.1}"),
            format!("{:.2}", pool_seq / sim_seq),
        ],
        vec![
            "driver calls/s".into(),
            format!("{pool_calls:.0}"),
            format!("{sim_calls:.0}"),
            format!("{:.2}", pool_calls / sim_calls),
        ],
    ];
    out += &grid(&["median of rounds", "through the pool", "simulator directly", "pool/sim"], &rows, &[0]);
    let settle = summarize(rounds.iter().map(|r| r.settle.as_secs_f64() * 1e3).collect()).median;
    out += &format!(
        "\n{} sequences through the pool: {} ran to their end or their own exit, \
         {} SIGKILLed part-way ({} kills sent); {} drew an exit of their own, {} of them after a faulting kernel; {} driver calls compared; ledger back to the watcher's bytes in \
         {settle:.0} ms (median)\n",
        total.sequences(),
        total.completed,
        total.killed,
        total.kills_sent,
        total.exits_drawn,
        total.faults,
        total.pool_calls,
    );
    out
}
