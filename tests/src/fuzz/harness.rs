//! The fuzzer's harness: a `gpupool daemon` on the simulator with one token-matched tenant per
//! fuzzing tenant and a watcher tenant, and rounds of concurrent tenant processes.
//!
//! Each round draws one sequence per tenant, runs them all directly on the simulator (the
//! reference, timed as one batch), then all at once through the pool under `gpupool run` (timed
//! likewise), SIGKILLing some at random moments (process group: `gpupool run` and the tenant).
//! Then it checks: every tenant's result lines equal the reference's (a prefix of them for a
//! killed tenant), every canary is intact (the tenants' own, and the watcher's, which lives
//! across all rounds and is what other tenants' faulting kernels aim at), the daemon is alive,
//! and its ledger settles to what is live: one session (the watcher's) holding the watcher's
//! bytes, nothing else. Quotas are far above what a sequence allocates, so no result depends
//! on them and the comparison stays exact.

use std::fmt;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::ops::{Op, generate};
use crate::churn::{Held, Rng, settle};

/// The simulated machine, the same for the daemon and the reference runs.
const SIM_ENV: [(&str, &str); 2] = [("GPUPOOL_SIM_DEVICES", "1"), ("GPUPOOL_SIM_MEMORY", "1GiB")];
/// Each tenant's quota: far above what a sequence allocates, so no result depends on it.
const TENANT_MEMORY: &str = "256MiB";
/// How long the daemon may take to free what the round's tenants held.
const SETTLE: Duration = Duration::from_secs(20);

/// Where the programs are.
pub struct Setup {
    /// The `gpupool` executable, `libgpupool.so` beside it.
    pub gpupool: PathBuf,
    /// The simulator's directory (`libcuda.so.1`).
    pub sim_libdir: PathBuf,
    /// The tenant program and its leading arguments (it then takes [`super::tenant_main`]'s).
    pub tenant: Vec<String>,
    /// A scratch directory for the daemon's socket, config and logs (created, emptied).
    pub dir: PathBuf,
}

/// What a run draws.
#[derive(Clone, Debug)]
pub struct Options {
    pub tenants: usize,
    pub seed: u64,
    /// Ops per sequence.
    pub len: usize,
    /// Percent of the pool's tenant processes SIGKILLed at a moment drawn from `kill_window`.
    pub kill_percent: u64,
    pub kill_window: Duration,
    /// A tenant process still running after this is a hang (killed, and a finding).
    pub timeout: Duration,
}

/// One round's figures.
#[derive(Clone, Debug, Default)]
pub struct RoundReport {
    /// Sequences the pool ran to their end (or their own exit), and those SIGKILLed.
    pub completed: usize,
    pub killed: usize,
    /// Sequences that ended the process part-way by their own `Exit` op.
    pub exited: usize,
    /// Driver calls the pool answered (killed tenants' included), and the reference's.
    pub pool_calls: usize,
    pub sim_calls: usize,
    /// Wall time of the two batches.
    pub pool_wall: Duration,
    pub sim_wall: Duration,
    /// From the pool batch's end to the ledger back at the watcher's bytes.
    pub settle: Duration,
    /// What the seeds drew: SIGKILLs sent (a tenant may have finished before its moment),
    /// sequences ending in a faulting kernel, sequences ending in an exit of their own.
    pub kills_sent: usize,
    pub faults: usize,
    pub exits_drawn: usize,
    /// Cross-stream captures drawn (`Op::CaptureForkJoin`), of any end.
    pub captures: usize,
}

impl RoundReport {
    /// Sequences run through the pool.
    pub fn sequences(&self) -> usize {
        self.completed + self.killed
    }

    /// Adds another round's figures to these.
    pub fn add(&mut self, r: &RoundReport) {
        self.completed += r.completed;
        self.killed += r.killed;
        self.exited += r.exited;
        self.pool_calls += r.pool_calls;
        self.sim_calls += r.sim_calls;
        self.pool_wall += r.pool_wall;
        self.sim_wall += r.sim_wall;
        self.settle += r.settle;
        self.kills_sent += r.kills_sent;
        self.faults += r.faults;
        self.exits_drawn += r.exits_drawn;
        self.captures += r.captures;
    }
}

/// Something wrong, with what reproduces it.
#[derive(Clone, Debug)]
pub struct Finding {
    pub round: u64,
    pub what: String,
    /// `(seed, listing)` of the sequences it involves.
    pub sequences: Vec<(u64, String)>,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "FINDING in round {}: {}", self.round, self.what)?;
        for (_, listing) in &self.sequences {
            write!(f, "{listing}")?;
        }
        Ok(())
    }
}

/// A tenant process and the lines it printed.
struct Proc {
    child: Child,
    lines: JoinHandle<Vec<String>>,
    killed: bool,
    timed_out: bool,
    status: Option<std::process::ExitStatus>,
}

fn spawn(mut cmd: Command, stderr: &Path) -> Result<Proc, String> {
    let err = std::fs::File::create(stderr).map_err(|e| format!("{}: {e}", stderr.display()))?;
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .map_err(|e| format!("starting {cmd:?}: {e}"))?;
    let out = child.stdout.take().expect("piped");
    let lines = std::thread::spawn(move || BufReader::new(out).lines().map_while(Result::ok).collect());
    Ok(Proc { child, lines, killed: false, timed_out: false, status: None })
}

fn kill_group(child: &Child) {
    // SAFETY: kill(2) with plain integers, on the process group our own unreaped child leads
    // (so the id cannot have been reused).
    unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
}

/// Waits for every process; SIGKILLs `kills[i]` (if any) at its moment, and any still running
/// at `timeout`. Returns each one's lines.
fn wait_all(procs: &mut [Proc], kills: &[Option<Duration>], timeout: Duration) -> Vec<Vec<String>> {
    let t0 = Instant::now();
    while procs.iter().any(|p| p.status.is_none()) {
        for (p, kill) in procs.iter_mut().zip(kills) {
            if p.status.is_some() {
                continue;
            }
            if let Ok(Some(st)) = p.child.try_wait() {
                p.status = Some(st);
            } else if kill.is_some_and(|k| t0.elapsed() >= k) && !p.killed {
                kill_group(&p.child);
                p.killed = true;
            } else if t0.elapsed() > timeout && !p.timed_out {
                kill_group(&p.child);
                p.timed_out = true;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    procs
        .iter_mut()
        .map(|p| std::mem::replace(&mut p.lines, std::thread::spawn(Vec::new)).join().unwrap_or_default())
        .collect()
}

/// Compares a pool run's lines with the reference's; `None` when they agree.
fn compare(pool: &[String], sim: &[String], killed: bool) -> Option<String> {
    let mut op = None;
    for (i, (p, s)) in pool.iter().zip(sim).enumerate() {
        if let Some(n) = s.strip_prefix("op ") {
            op = Some(n.to_string());
        }
        if p != s {
            let at = op.map_or("the prologue".to_string(), |n| format!("op {n}"));
            return Some(format!("line {i} (in {at}): pool `{p}`, simulator `{s}`"));
        }
    }
    if pool.len() > sim.len() {
        return Some(format!("the pool printed {} lines, the simulator {}", pool.len(), sim.len()));
    }
    if pool.len() < sim.len() && !killed {
        return Some(format!(
            "the pool run ended after {} lines (next expected `{}`), the simulator's printed {}",
            pool.len(),
            sim[pool.len()],
            sim.len()
        ));
    }
    None
}

fn calls(lines: &[String]) -> usize {
    lines.iter().filter(|l| !l.starts_with("op ")).count()
}

/// The watcher tenant: holds a canary for the whole run and reads it back on demand.
struct Watcher {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// Its canary's device address: other tenants' faulting kernels aim at it.
    canary: u64,
}

impl Watcher {
    /// Reads the canary back; `Err` unless it is intact.
    fn check(&mut self) -> Result<(), String> {
        writeln!(self.stdin, "check").map_err(|e| format!("the watcher's stdin: {e}"))?;
        loop {
            match self.lines.recv_timeout(Duration::from_secs(30)) {
                Ok(l) if l.contains(" canary-intact 0 ") => return Ok(()),
                Ok(l) if l.contains(" canary-") => return Err(format!("the watcher's canary: `{l}`")),
                Ok(l) if super::exec::CallResult::parse(&l).is_some_and(|(_, r)| r.code != 0) => {
                    return Err(format!("the watcher's call failed: `{l}`"));
                }
                Ok(_) => {}
                Err(e) => return Err(format!("the watcher did not answer: {e}")),
            }
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        kill_group(&self.child);
        let _ = self.child.wait();
    }
}

/// The daemon, SIGKILLed on drop.
struct Daemon {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

/// A fuzzing run: the daemon, the watcher, and the seed stream.
pub struct Fuzz {
    setup: Setup,
    opts: Options,
    // Field order: the watcher goes before the daemon.
    watcher: Watcher,
    daemon: Daemon,
    rng: Rng,
    round: u64,
    /// What the ledger holds with only the watcher connected.
    baseline: Held,
}

fn token(tenant: &str) -> String {
    format!("fuzz-token-{tenant}")
}

impl Fuzz {
    /// Starts the daemon and the watcher.
    pub fn start(setup: Setup, opts: Options) -> Result<Fuzz, String> {
        let _ = std::fs::remove_dir_all(&setup.dir);
        std::fs::create_dir_all(&setup.dir).map_err(|e| format!("{}: {e}", setup.dir.display()))?;
        let mut config = String::new();
        for name in (0..opts.tenants).map(|i| format!("t{i}")).chain(["watch".to_string()]) {
            config += &format!(
                "[[tenant]]\nname = \"{name}\"\ntoken_sha256 = \"{}\"\nmemory = \"{TENANT_MEMORY}\"\n\n",
                sha256_hex(&token(&name))
            );
        }
        let config_path = setup.dir.join("quota.toml");
        std::fs::write(&config_path, config).map_err(|e| e.to_string())?;
        let socket = setup.dir.join("s.sock");
        let log = setup.dir.join("daemon.log");
        let child = Command::new(&setup.gpupool)
            .arg("daemon")
            .arg("--listen")
            .arg(format!("unix://{}", socket.display()))
            .arg("--driver-dir")
            .arg(&setup.sim_libdir)
            .arg("--config")
            .arg(&config_path)
            .envs(SIM_ENV)
            .env("GPUPOOL_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("starting {} daemon: {e}", setup.gpupool.display()))?;
        let mut daemon = Daemon { child, socket, log };
        let ctl = format!("{}.ctl", daemon.socket.display());
        let t0 = Instant::now();
        while UnixStream::connect(&ctl).is_err() {
            if let Ok(Some(st)) = daemon.child.try_wait() {
                return Err(format!("the daemon exited ({st}): {}", daemon.log_tail()));
            }
            if t0.elapsed() > Duration::from_secs(20) {
                return Err(format!("the daemon did not come up: {}", daemon.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut cmd = pool_command(&setup, &daemon.socket, "watch");
        let mut child = cmd
            .args(["--watch", "--seed", &opts.seed.to_string()])
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(setup.dir.join("watch.err")).map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("starting the watcher: {e}"))?;
        let (tx, lines) = channel();
        let out = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take().expect("piped");
        let mut watcher = Watcher { child, stdin, lines, canary: 0 };
        watcher.canary = loop {
            match watcher.lines.recv_timeout(Duration::from_secs(30)) {
                Ok(l) => match l.strip_prefix("canary-at ") {
                    Some(a) => break super::parse_u64(a)?,
                    None => continue,
                },
                Err(e) => return Err(format!("the watcher did not start: {e}")),
            }
        };
        watcher.check()?;
        let baseline = Held::read(&daemon.socket)?;
        if baseline.sessions != 1 || baseline.device_bytes < super::exec::CANARY_BYTES as u64 {
            return Err(format!("with the watcher alone the daemon holds {baseline:?}"));
        }
        let rng = Rng::new(opts.seed);
        Ok(Fuzz { setup, opts, watcher, daemon, rng, round: 0, baseline })
    }

    /// Runs one round; `Err` with every finding of the round.
    pub fn round(&mut self) -> Result<RoundReport, Vec<Finding>> {
        let round = self.round;
        self.round += 1;
        let n = self.opts.tenants;
        let seeds: Vec<u64> = (0..n).map(|_| self.rng.next_u64() >> 1).collect();
        let kills: Vec<Option<Duration>> = (0..n)
            .map(|_| {
                let kill = self.rng.below(100) < self.opts.kill_percent;
                let at = Duration::from_micros(self.rng.below(self.opts.kill_window.as_micros().max(1) as u64));
                kill.then_some(at)
            })
            .collect();
        self.run_round(round, &seeds, &kills)
    }

    /// Runs the given sequences as one round (`kills[i]`: when to SIGKILL tenant i's pool run).
    pub fn run_round(
        &mut self,
        round: u64,
        seeds: &[u64],
        kills: &[Option<Duration>],
    ) -> Result<RoundReport, Vec<Finding>> {
        let listing = |s: u64| (s, generate(s, self.opts.len, true).listing());
        let fail = |what: String, seqs: Vec<u64>| {
            vec![Finding { round, what, sequences: seqs.into_iter().map(listing).collect() }]
        };
        let mut report = RoundReport { kills_sent: kills.iter().flatten().count(), ..RoundReport::default() };
        for &seed in seeds {
            let ops = generate(seed, self.opts.len, true).ops;
            report.faults += usize::from(ops.iter().any(|o| matches!(o, Op::LaunchOutOfRange { .. })));
            report.exits_drawn += usize::from(matches!(ops.last(), Some(Op::Exit { .. })));
            report.captures += ops.iter().filter(|o| matches!(o, Op::CaptureForkJoin { .. })).count();
        }

        // The reference: every sequence directly on the simulator, all at once.
        let lib = self.setup.sim_libdir.join("libcuda.so.1");
        let t0 = Instant::now();
        let mut sim = Vec::new();
        for (i, &seed) in seeds.iter().enumerate() {
            let mut cmd = tenant_command(&self.setup);
            cmd.arg("--lib").arg(&lib).args(self.seq_args(seed)).envs(SIM_ENV);
            let err = self.setup.dir.join(format!("t{i}.sim.err"));
            sim.push(spawn(cmd, &err).map_err(|e| fail(e, vec![seed]))?);
        }
        let sim_lines = wait_all(&mut sim, &vec![None; seeds.len()], self.opts.timeout);
        report.sim_wall = t0.elapsed();
        // A sequence the simulator itself fails on is a finding; the pool still runs it (the
        // daemon runs the same simulator), but has no reference to be compared with.
        let mut findings = Vec::new();
        let mut no_reference = vec![false; seeds.len()];
        for (i, p) in sim.iter().enumerate() {
            if p.timed_out || !p.status.is_some_and(|s| s.success()) {
                let err = std::fs::read_to_string(self.setup.dir.join(format!("t{i}.sim.err"))).unwrap_or_default();
                let how = if p.timed_out { "hung".to_string() } else { format!("failed ({:?})", p.status) };
                findings.extend(fail(
                    format!("tenant {i} on the simulator directly {how}: {}", tail(&err)),
                    vec![seeds[i]],
                ));
                no_reference[i] = true;
            }
        }

        // The same sequences through the pool, concurrently, some SIGKILLed.
        let t0 = Instant::now();
        let mut pool = Vec::new();
        for (i, &seed) in seeds.iter().enumerate() {
            let mut cmd = pool_command(&self.setup, &self.daemon.socket, &format!("t{i}"));
            cmd.args(self.seq_args(seed));
            let err = self.setup.dir.join(format!("t{i}.pool.err"));
            pool.push(spawn(cmd, &err).map_err(|e| fail(e, vec![seed]))?);
        }
        let pool_lines = wait_all(&mut pool, kills, self.opts.timeout);
        report.pool_wall = t0.elapsed();

        // A dead daemon explains every divergence of the round: no tenant is compared.
        if let Ok(Some(st)) = self.daemon.child.try_wait() {
            findings.extend(fail(format!("the daemon died ({st}): {}", self.daemon.log_tail()), seeds.to_vec()));
            return Err(findings);
        }
        for (i, p) in pool.iter().enumerate().filter(|(i, _)| !no_reference[*i]) {
            let (pl, sl) = (&pool_lines[i], &sim_lines[i]);
            report.pool_calls += calls(pl);
            report.sim_calls += calls(sl);
            // A tenant that had finished before its kill moment counts as completed.
            let killed = p.killed && !(p.status.is_some_and(|s| s.success()) && pl.len() == sl.len());
            if killed {
                report.killed += 1;
            } else {
                report.completed += 1;
                report.exited += usize::from(sl.last().is_some_and(|l| !l.contains("cuCtxDestroy(home)")));
            }
            let err =
                || tail(&std::fs::read_to_string(self.setup.dir.join(format!("t{i}.pool.err"))).unwrap_or_default());
            let what = if p.timed_out {
                Some(format!("tenant {i} hung through the pool (killed after {:?})", self.opts.timeout))
            } else if !killed && !p.status.is_some_and(|s| s.success()) {
                Some(format!("tenant {i} failed through the pool ({:?}): {}", p.status, err()))
            } else if let Some(l) = pl.iter().find(|l| l.contains("canary-CHANGED")) {
                Some(format!("tenant {i}'s canary changed through the pool: `{l}`"))
            } else {
                compare(pl, sl, killed)
                    .map(|d| format!("tenant {i} differs from the simulator: {d}; stderr: {}", err()))
            };
            if let Some(what) = what {
                findings.extend(fail(what, vec![seeds[i]]));
            }
        }

        // The daemon: its ledger back to the watcher's alone, the watcher's canary intact.
        let t0 = Instant::now();
        let base = self.baseline;
        match settle(&self.daemon.socket, self.daemon.child.id(), SETTLE, |h, _| {
            h.sessions == base.sessions && h.device_bytes == base.device_bytes && h.pinned_bytes == base.pinned_bytes
        }) {
            Ok((_, _, true)) => report.settle = t0.elapsed(),
            Ok((held, _, false)) => findings.extend(fail(
                format!("the ledger did not settle within {SETTLE:?}: {held:?}, with the watcher alone {base:?}"),
                seeds.to_vec(),
            )),
            Err(e) => findings.extend(fail(format!("reading the daemon's status: {e}"), seeds.to_vec())),
        }
        if let Err(e) = self.watcher.check() {
            findings.extend(fail(e, seeds.to_vec()));
        }
        if findings.is_empty() { Ok(report) } else { Err(findings) }
    }

    fn seq_args(&self, seed: u64) -> Vec<String> {
        let (len, foreign) = (self.opts.len.to_string(), format!("{:#x}", self.watcher.canary));
        vec!["--seed".into(), seed.to_string(), "--len".into(), len, "--foreign".into(), foreign]
    }

    /// The daemon's log so far.
    pub fn daemon_log(&self) -> String {
        std::fs::read_to_string(&self.daemon.log).unwrap_or_default()
    }
}

fn tenant_command(setup: &Setup) -> Command {
    let mut cmd = Command::new(&setup.tenant[0]);
    cmd.args(&setup.tenant[1..]);
    for k in crate::SIM_ENV {
        cmd.env_remove(k);
    }
    cmd
}

/// `gpupool run --endpoint unix://SOCKET -- TENANT --lib libcuda.so.1` as `tenant`'s token.
fn pool_command(setup: &Setup, socket: &Path, tenant: &str) -> Command {
    let mut cmd = Command::new(&setup.gpupool);
    cmd.args(["run", "--endpoint", &format!("unix://{}", socket.display()), "--"]).args(&setup.tenant);
    cmd.args(["--lib", "libcuda.so.1"]).env("GPUPOOL_TOKEN", token(tenant));
    for k in crate::SIM_ENV {
        cmd.env_remove(k);
    }
    cmd
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join(" | ")
}

fn sha256_hex(s: &str) -> String {
    gpupool_quota::hash_token(s)
}
