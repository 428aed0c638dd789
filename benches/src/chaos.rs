//! `gpupool-bench chaos`: the release daemon under client churn. Rounds of `--clients`
//! processes (`tests/c/churn_client.c` under `gpupool run`: allocations, pageable and
//! page-locked copies, kernels) are SIGKILLed at random moments of a window; after each round
//! the bench waits for the daemon to settle and prints what it still holds (sessions, ledger
//! bytes, fds, threads, shared-memory mappings: all must be back, else the run fails) and its
//! RSS: fresh, at peak, after, and after/fresh against the target (within 2x).

use crate::pool::{Daemon, build_pool, loadavg, release_dir};
use crate::report::{cpus, grid, json_str};
use gpupool_e2e::churn::{self, ClientSpec, Held, ProcSample, Rng};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const USAGE: &str = "usage: gpupool-bench chaos [--clients N] [--rounds M] [--seed S] [--window-ms MS] \
                     [--max-bytes BYTES] [--json PATH]";
/// The target: the daemon's RSS after churn within this many times a fresh daemon's.
const TARGET_RATIO: f64 = 2.0;
/// How long the daemon may take to give everything back after a round's last kill.
const SETTLE: Duration = Duration::from_secs(60);

struct Options {
    clients: usize,
    rounds: usize,
    seed: u64,
    window: Duration,
    max_bytes: u64,
    json: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        clients: 64,
        rounds: 5,
        seed: 1,
        window: Duration::from_millis(3000),
        max_bytes: 16 << 20,
        json: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        let number = |v: &String| v.parse::<u64>().map_err(|e| format!("{a} {v}: {e}"));
        match a.as_str() {
            "--clients" => o.clients = number(value()?)? as usize,
            "--rounds" => o.rounds = number(value()?)? as usize,
            "--seed" => o.seed = number(value()?)?,
            "--window-ms" => o.window = Duration::from_millis(number(value()?)?),
            "--max-bytes" => o.max_bytes = number(value()?)?,
            "--json" => o.json = Some(PathBuf::from(value()?)),
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    if o.clients == 0 || o.rounds == 0 || o.window.is_zero() || o.max_bytes < 1 << 20 {
        return Err("--clients, --rounds and --window-ms must be positive, --max-bytes at least 1 MiB".into());
    }
    Ok(o)
}

/// One round's figures.
struct RoundRow {
    round: churn::Round,
    /// The largest RSS sampled during the round, and the ledger's bytes in that sample.
    peak_kib: u64,
    ledger_at_peak: u64,
    settle_ms: f64,
    held: Held,
    after: ProcSample,
    settled: bool,
}

struct ChaosRun {
    fresh: ProcSample,
    rows: Vec<RoundRow>,
    after: ProcSample,
    /// `cleanup_us` and `trim_us` of every session end in the daemon's log.
    cleanup_us: Vec<f64>,
    trim_us: Vec<f64>,
    load: (String, String),
}

impl ChaosRun {
    fn ratio(&self) -> f64 {
        self.after.rss_kib as f64 / self.fresh.rss_kib.max(1) as f64
    }

    /// What the daemon still held after the last round, if anything.
    fn leaks(&self) -> Vec<String> {
        let (f, a) = (&self.fresh, &self.after);
        let mut l = Vec::new();
        for r in self.rows.iter().filter(|r| !r.settled) {
            l.push(format!("not settled within {SETTLE:?}: {:?}, {:?}", r.held, r.after));
        }
        if a.fds > f.fds {
            l.push(format!("{} fds more than fresh", a.fds - f.fds));
        }
        if a.threads > f.threads {
            l.push(format!("{} threads more than fresh", a.threads - f.threads));
        }
        l
    }
}

fn settled_state(fresh: ProcSample) -> impl Fn(&Held, &ProcSample) -> bool {
    move |h, p| {
        h.sessions == 0
            && h.device_bytes == 0
            && h.pinned_bytes == 0
            && p.fds <= fresh.fds
            && p.threads <= fresh.threads
            && p.shm_maps == 0
    }
}

fn run(o: &Options) -> Result<ChaosRun, String> {
    let load_start = loadavg();
    build_pool()?;
    gpupool_e2e::build_sim_libdir(true)?; // the release simulator, which `daemon --sim` loads
    let rel = release_dir();
    let program = gpupool_e2e::compile_c("churn_client", &rel.join("bench-c"));
    let dir = std::env::temp_dir().join(format!("gpupool-bench-chaos-{}", std::process::id()));
    let d = Daemon::start_with(&rel.join("gpupool"), dir, &[])?;
    let endpoint = d.endpoint();
    let socket = PathBuf::from(endpoint.trim_start_matches("unix://"));
    let pid = Held::read(&socket)?.daemon_pid;
    let fresh = ProcSample::read(pid).map_err(|e| format!("/proc/{pid}: {e}"))?;
    let spec = ClientSpec { gpupool: rel.join("gpupool"), endpoint, program, max_bytes: o.max_bytes };
    let mut rng = Rng::new(o.seed);
    let mut rows = Vec::new();
    for r in 1..=o.rounds {
        let (mut peak_kib, mut ledger_at_peak) = (0, 0);
        let mut sample = || {
            if let (Ok(p), Ok(h)) = (ProcSample::read(pid), Held::read(&socket))
                && p.rss_kib > peak_kib
            {
                (peak_kib, ledger_at_peak) = (p.rss_kib, h.device_bytes);
            }
        };
        let round = churn::round(&spec, o.clients, o.window, &mut rng, &mut sample)?;
        let t = Instant::now();
        let (held, after, settled) = churn::settle(&socket, pid, SETTLE, settled_state(fresh))?;
        let settle_ms = t.elapsed().as_secs_f64() * 1e3;
        eprintln!("chaos: round {r}/{}: {} killed, settled {settled} in {settle_ms:.0} ms", o.rounds, round.killed);
        rows.push(RoundRow { round, peak_kib, ledger_at_peak, settle_ms, held, after, settled });
        if !settled {
            break;
        }
    }
    let after = ProcSample::read(pid).map_err(|e| format!("/proc/{pid}: {e}"))?;
    let log = d.log();
    let field = |name: &str| -> Vec<f64> {
        log.lines()
            .filter(|l| l.contains("session end"))
            .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix(name)?.parse().ok()))
            .collect()
    };
    let (cleanup_us, trim_us) = (field("cleanup_us="), field("trim_us="));
    Ok(ChaosRun { fresh, rows, after, cleanup_us, trim_us, load: (load_start, loadavg()) })
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// Median and p99 (nearest rank) of `v`, formatted, or "-".
fn p50_p99(v: &[f64]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let s = crate::stats::summarize(v.to_vec());
    format!("p50 {:.0} us, p99 {:.0} us, max {:.0} us", s.median, s.p99, v.iter().copied().fold(0.0, f64::max))
}

fn table(o: &Options, run: &ChaosRun) -> String {
    let mut out = format!(
        "gpupool-bench chaos: {} clients x {} rounds, seed {}, SIGKILL at random in {} ms, allocations up to {} ({} CPUs, load {} -> {})\n\n",
        o.clients,
        o.rounds,
        o.seed,
        o.window.as_millis(),
        mib(o.max_bytes >> 10),
        cpus(),
        run.load.0,
        run.load.1
    );
    let rows: Vec<Vec<String>> = run
        .rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            vec![
                (i + 1).to_string(),
                r.round.killed.to_string(),
                r.round.before_ready.to_string(),
                r.round.rounds_done.to_string(),
                mib(r.peak_kib),
                mib(r.ledger_at_peak >> 10),
                format!("{:.0} ms", r.settle_ms),
                r.held.sessions.to_string(),
                (r.held.device_bytes + r.held.pinned_bytes).to_string(),
                r.after.fds.to_string(),
                r.after.threads.to_string(),
                r.after.shm_maps.to_string(),
                mib(r.after.rss_kib),
            ]
        })
        .collect();
    out += &grid(
        &[
            "round",
            "killed",
            "before 1st round",
            "rounds of work",
            "peak RSS",
            "ledger at peak",
            "settled in",
            "sessions",
            "bytes held",
            "fds",
            "threads",
            "shm maps",
            "RSS after",
        ],
        &rows,
        &[],
    );
    let line = |name: &str, p: &ProcSample, rss: u64| {
        vec![
            name.to_string(),
            mib(rss),
            mib(p.anon_kib),
            mib(p.file_kib),
            mib(p.shmem_kib),
            p.threads.to_string(),
            p.fds.to_string(),
        ]
    };
    out += "\n";
    out += &grid(
        &["daemon", "RSS", "anon", "file", "shmem", "threads", "fds"],
        &[
            line("fresh", &run.fresh, run.fresh.rss_kib),
            vec!["peak (VmHWM)".into(), mib(run.after.hwm_kib)],
            line("after churn", &run.after, run.after.rss_kib),
        ],
        &[0],
    );
    let ratio = run.ratio();
    let verdict = if ratio <= TARGET_RATIO { "PASS" } else { "MISS" };
    out += &format!("\nafter / fresh: {ratio:.2}x (target <= {TARGET_RATIO}x: {verdict})\n");
    let leaks = run.leaks();
    out += &format!("leaks: {}\n", if leaks.is_empty() { "none".to_string() } else { leaks.join("; ") });
    out += &format!("session end, freeing (cleanup_us): {}\n", p50_p99(&run.cleanup_us));
    out += &format!("session end, malloc_trim (trim_us): {}\n", p50_p99(&run.trim_us));
    out += "  note: peak RSS includes the clients' device memory (the simulator's backing store is the daemon's \
            memory); 'ledger at peak' is the device memory charged at that sample\n";
    out
}

fn json(o: &Options, run: &ChaosRun) -> String {
    let p = |s: &ProcSample| {
        format!(
            "{{\"rss_kib\": {}, \"hwm_kib\": {}, \"anon_kib\": {}, \"file_kib\": {}, \"shmem_kib\": {}, \"threads\": {}, \"fds\": {}, \"shm_maps\": {}}}",
            s.rss_kib, s.hwm_kib, s.anon_kib, s.file_kib, s.shmem_kib, s.threads, s.fds, s.shm_maps
        )
    };
    let rounds: Vec<String> = run
        .rows
        .iter()
        .map(|r| {
            format!(
                "    {{\"killed\": {}, \"before_first_round\": {}, \"rounds_of_work\": {}, \"peak_rss_kib\": {}, \"ledger_at_peak\": {}, \"settle_ms\": {:.1}, \"sessions\": {}, \"bytes_held\": {}, \"after\": {}}}",
                r.round.killed,
                r.round.before_ready,
                r.round.rounds_done,
                r.peak_kib,
                r.ledger_at_peak,
                r.settle_ms,
                r.held.sessions,
                r.held.device_bytes + r.held.pinned_bytes,
                p(&r.after)
            )
        })
        .collect();
    format!(
        "{{\n  \"bench\": \"chaos\",\n  \"clients\": {},\n  \"rounds\": {},\n  \"seed\": {},\n  \"cpus\": {},\n  \"fresh\": {},\n  \"after\": {},\n  \"after_over_fresh\": {},\n  \"target_ratio\": {TARGET_RATIO},\n  \"leaks\": [{}],\n  \"per_round\": [\n{}\n  ]\n}}\n",
        o.clients,
        o.rounds,
        o.seed,
        cpus(),
        p(&run.fresh),
        p(&run.after),
        run.ratio(),
        run.leaks().iter().map(|l| json_str(l)).collect::<Vec<_>>().join(", "),
        rounds.join(",\n")
    )
}

/// `gpupool-bench chaos ARGS`: exits 1 if the daemon kept anything (or the run failed), 0
/// otherwise; the RSS ratio is a target, printed with its verdict.
pub fn main(args: &[String]) -> ExitCode {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let run = match run(&o) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gpupool-bench chaos: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", table(&o, &run));
    if let Some(path) = &o.json {
        if let Err(e) = std::fs::write(path, json(&o, &run)) {
            eprintln!("writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("JSON written to {}", path.display());
    }
    if run.leaks().is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn flags_parse_and_bad_ones_are_refused() {
        let o = parse(&args("--clients 8 --rounds 2 --seed 9 --window-ms 300 --max-bytes 2097152")).unwrap();
        assert_eq!(
            (o.clients, o.rounds, o.seed, o.window, o.max_bytes),
            (8, 2, 9, Duration::from_millis(300), 2 << 20)
        );
        assert!(parse(&args("--clients 0")).is_err());
        assert!(parse(&args("--max-bytes 4096")).is_err());
        assert!(parse(&args("--rounds")).is_err());
        assert!(parse(&args("--bogus 1")).is_err());
    }
}
