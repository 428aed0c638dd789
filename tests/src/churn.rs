//! Client churn against a running daemon, shared by `pool-daemon/tests/churn.rs` and
//! `gpupool-bench chaos`: `tests/c/churn_client.c` processes under `gpupool run`, each in
//! its own process group and SIGKILLed (with its `gpupool run`) at a random moment; what the
//! daemon process holds, read from `/proc/PID` ([`ProcSample`]); and what its status
//! document says is still held ([`Held`]).

use std::io::{BufRead as _, BufReader, Read as _};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// xorshift64: kill moments and client seeds reproducible from one `--seed`.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `[0, n)` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// What a process holds, from `/proc/PID/status`, `/proc/PID/fd` and `/proc/PID/maps`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcSample {
    pub rss_kib: u64,
    /// The peak RSS since the process started.
    pub hwm_kib: u64,
    pub anon_kib: u64,
    pub file_kib: u64,
    pub shmem_kib: u64,
    pub threads: u64,
    pub fds: u64,
    /// Mappings of the pool's shared-memory segments (`memfd:gpupool-*`).
    pub shm_maps: u64,
}

impl ProcSample {
    pub fn read(pid: u32) -> std::io::Result<ProcSample> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))?.count() as u64;
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
        Ok(ProcSample {
            rss_kib: field("VmRSS"),
            hwm_kib: field("VmHWM"),
            anon_kib: field("RssAnon"),
            file_kib: field("RssFile"),
            shmem_kib: field("RssShmem"),
            threads: field("Threads"),
            fds,
            shm_maps: maps.lines().filter(|l| l.contains("memfd:gpupool-")).count() as u64,
        })
    }
}

/// What the daemon's status document (its control socket, `<socket>.ctl`) says is held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub sessions: u64,
    /// Device memory used and reserved in the ledger, all tenants and devices.
    pub device_bytes: u64,
    /// Page-locked host memory charged to tenants.
    pub pinned_bytes: u64,
    pub daemon_pid: u32,
}

impl Held {
    pub fn read(socket: &Path) -> Result<Held, String> {
        let ctl = format!("{}.ctl", socket.display());
        let mut text = String::new();
        UnixStream::connect(&ctl)
            .and_then(|mut s| s.read_to_string(&mut text))
            .map_err(|e| format!("reading the status document at {ctl}: {e}"))?;
        let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("status document: {e}"))?;
        let tenants = doc["tenants"].as_array().cloned().unwrap_or_default();
        let device_bytes = tenants
            .iter()
            .flat_map(|t| t["devices"].as_array().cloned().unwrap_or_default())
            .map(|d| d["used"].as_u64().unwrap_or(0) + d["pending"].as_u64().unwrap_or(0))
            .sum();
        Ok(Held {
            sessions: doc["sessions"].as_array().map_or(0, |s| s.len() as u64),
            device_bytes,
            pinned_bytes: tenants.iter().map(|t| t["pinned"].as_u64().unwrap_or(0)).sum(),
            daemon_pid: doc["daemon"]["pid"].as_u64().unwrap_or(0) as u32,
        })
    }
}

/// How to start a churn client.
pub struct ClientSpec {
    /// The `gpupool` executable (its `libgpupool.so` beside it).
    pub gpupool: PathBuf,
    pub endpoint: String,
    /// `tests/c/churn_client.c`, compiled ([`crate::compile_c`]).
    pub program: PathBuf,
    /// The largest allocation and copy a round makes (at least 1 MiB).
    pub max_bytes: u64,
}

/// One churn client: `gpupool run -- churn_client` as the leader of its own process group.
struct Running {
    child: Child,
    rounds: Arc<AtomicU32>,
    reader: std::thread::JoinHandle<()>,
}

impl Running {
    fn start(spec: &ClientSpec, seed: u64) -> Result<Running, String> {
        let mut child = Command::new(&spec.gpupool)
            .args(["run", "--endpoint", &spec.endpoint, "--"])
            .arg(&spec.program)
            .args(["--seed", &seed.to_string(), "--max-bytes", &spec.max_bytes.to_string()])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {} run: {e}", spec.gpupool.display()))?;
        let rounds = Arc::new(AtomicU32::new(0));
        let out = child.stdout.take().expect("piped");
        let seen = rounds.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if line.starts_with("round ") {
                    seen.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Ok(Running { child, rounds, reader })
    }

    /// SIGKILL to the whole group (`gpupool run` and the client), then reaped. Returns the
    /// rounds the client had finished and, if it had ended by itself with a failure, why.
    fn kill(mut self) -> (u32, Option<String>) {
        let ended_before = self.child.try_wait().ok().flatten();
        if ended_before.is_none() {
            // SAFETY: kill(2) with plain integers, on the process group our own unreaped
            // child leads (so the id cannot have been reused by anyone else).
            unsafe { libc::kill(-(self.child.id() as libc::pid_t), libc::SIGKILL) };
        }
        let _ = self.child.wait();
        let _ = self.reader.join();
        let rounds = self.rounds.load(Ordering::Relaxed);
        let failure = ended_before.filter(|st| !st.success()).map(|st| {
            let mut err = String::new();
            if let Some(mut e) = self.child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            format!("a churn client ended by itself ({st}) after {rounds} rounds: {}", err.trim())
        });
        (rounds, failure)
    }
}

/// One round of churn.
#[derive(Debug, Default)]
pub struct Round {
    pub killed: usize,
    /// Killed before finishing a round of work (starting up, connecting, in its first round).
    pub before_ready: usize,
    /// Rounds of work the clients finished in all.
    pub rounds_done: u64,
}

/// Starts `clients` churn clients at once and SIGKILLs each at a moment drawn uniformly from
/// `[0, window)` after the start; `tick` runs between kills (to sample the daemon). A client
/// that fails by itself (a CUDA error, a wrong byte) fails the round.
pub fn round(
    spec: &ClientSpec,
    clients: usize,
    window: Duration,
    rng: &mut Rng,
    mut tick: impl FnMut(),
) -> Result<Round, String> {
    let t0 = Instant::now();
    let mut plan: Vec<(Duration, u64)> = (0..clients)
        .map(|_| (Duration::from_micros(rng.below(window.as_micros().max(1) as u64)), rng.next_u64()))
        .collect();
    let mut running = Vec::new();
    for &(_, seed) in &plan {
        running.push(Some(Running::start(spec, seed)?));
    }
    let mut order: Vec<usize> = (0..clients).collect();
    order.sort_by_key(|&i| plan[i].0);
    let mut r = Round::default();
    let mut failure = None;
    for i in order {
        while t0.elapsed() < plan[i].0 {
            tick();
            std::thread::sleep((plan[i].0 - t0.elapsed().min(plan[i].0)).min(Duration::from_millis(5)));
        }
        let (rounds, failed) = running[i].take().expect("killed once").kill();
        r.killed += 1;
        r.rounds_done += u64::from(rounds);
        if rounds == 0 {
            r.before_ready += 1;
        }
        failure = failure.or(failed);
    }
    plan.clear();
    match failure {
        Some(f) => Err(f),
        None => Ok(r),
    }
}

/// Polls until `settled` holds for the daemon's status and its process, or `deadline`
/// passes; returns the last of each either way, and whether it settled.
pub fn settle(
    socket: &Path,
    pid: u32,
    deadline: Duration,
    settled: impl Fn(&Held, &ProcSample) -> bool,
) -> Result<(Held, ProcSample, bool), String> {
    let t0 = Instant::now();
    loop {
        let held = Held::read(socket)?;
        let proc = ProcSample::read(pid).map_err(|e| format!("reading /proc/{pid}: {e}"))?;
        if settled(&held, &proc) {
            return Ok((held, proc, true));
        }
        if t0.elapsed() > deadline {
            return Ok((held, proc, false));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
