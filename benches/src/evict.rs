//! `gpupool-bench evict [--quick]`: what memory preemption (README.md, "Memory preemption")
//! costs, against baselines from the same run. The release daemon serves one simulated GPU
//! (1 GiB; `--quick` 256 MiB) to a `low` tenant that fills 75% of it and a `high` tenant that
//! then arrives and allocates 80% of it, which evicts `low`. Per round:
//!
//! - **Eviction** and **restore** bandwidth: the bytes moved over the daemon's own timing of the
//!   move (the status document's `last_evict_ns`, `last_restore_ns`: context synchronize, copies,
//!   unmap and release; map and copy back), next to the same simulator's plain
//!   `cuMemcpyDtoH_v2` of the same bytes, loaded in this process (the baseline).
//! - **Arrival to first allocation**: `high`'s hello, context and 80% allocation, timed by the
//!   client, with the device full (the allocation evicts) and with the device empty (the
//!   baseline: what arriving costs without preemption).
//!
//! After a round `high` exits, `low` makes a call (which brings its memory back), and the next
//! round waits out the anti-thrash hold.

use crate::pool::{build_pool, release_dir};
use crate::sim::{filled_buffer, ok};
use gpupool_e2e::call;
use gpupool_protocol::ops::{Memset, MemsetValue};
use gpupool_protocol::transport::Transport;
use gpupool_protocol::transport::shm::{ShmTransport, WaitPolicy};
use gpupool_protocol::{CtxId, DevicePtr, Message, PROTOCOL_VERSION, Reply, Request};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
pub(crate) const LOW_TOKEN: &str = "bench-evict-low";
const HIGH_TOKEN: &str = "bench-evict-high";

pub(crate) struct Client {
    pub(crate) t: ShmTransport,
    next: u64,
    /// The daemon's id for the session.
    pub(crate) session: u64,
}

impl Client {
    pub(crate) fn connect(socket: &Path, token: &str) -> Result<Client, String> {
        let s = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
        let t = ShmTransport::connect(s, WaitPolicy::default()).map_err(|e| format!("shm: {e}"))?;
        let mut c = Client { t, next: 1, session: 0 };
        let hello = Request::Hello {
            pid: std::process::id(),
            uid: rustix_uid(),
            gid: 0,
            protocol_version: PROTOCOL_VERSION,
            memory_limit: None,
            compute_percent: None,
            client_name: "bench-evict".into(),
            token: Some(token.into()),
            gpus: None,
        };
        match c.call(hello)? {
            Reply::HelloReply { session_id, .. } => {
                c.session = session_id;
                Ok(c)
            }
            r => Err(format!("hello refused: {r:?}")),
        }
    }

    pub(crate) fn call(&mut self, op: Request) -> Result<Reply, String> {
        let id = self.next;
        self.next += 1;
        let frame = Message::Request { id, no_reply: false, op }.encode().map_err(|e| e.to_string())?;
        self.t.send(&frame).map_err(|e| e.to_string())?;
        loop {
            let f = self.t.recv(Some(Duration::from_secs(60))).map_err(|e| format!("reply: {e}"))?;
            match Message::decode(&f).map_err(|e| e.to_string())?.0 {
                Message::Reply { id: rid, op } if rid == id => return Ok(op),
                // A checkpoint notice concerns a client that replays (libgpupool); this one does not.
                Message::Reply { .. } | Message::AsyncError { .. } | Message::Checkpointed { .. } => {}
                other => return Err(format!("unexpected {other:?}")),
            }
        }
    }

    pub(crate) fn ctx(&mut self) -> Result<CtxId, String> {
        match self.call(Request::PrimaryCtxRetain { device: 0 })? {
            Reply::Context { ctx } => Ok(ctx),
            r => Err(format!("cuDevicePrimaryCtxRetain: {r:?}")),
        }
    }

    pub(crate) fn alloc(&mut self, ctx: CtxId, bytes: u64) -> Result<DevicePtr, String> {
        match self.call(Request::MemAlloc { ctx, bytes })? {
            Reply::MemPtr { ptr } => Ok(ptr),
            r => Err(format!("cuMemAlloc of {} MiB: {r:?}", bytes / MIB)),
        }
    }
}

/// The daemon's uid is ours; tokens name the tenants, so the uid only has to be plausible.
fn rustix_uid() -> u32 {
    // SAFETY: getuid cannot fail and touches no memory.
    unsafe { libc::getuid() }
}

pub(crate) struct Daemon {
    child: Child,
    dir: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Daemon {
    pub(crate) fn socket(&self) -> PathBuf {
        self.dir.join("s.sock")
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    pub(crate) fn start(memory: &str) -> Result<Daemon, String> {
        Self::start_with(memory, &[])
    }

    /// [`Daemon::start`] with more `gpupool daemon` arguments (`--restore DIR`).
    pub(crate) fn start_with(memory: &str, extra: &[&std::ffi::OsStr]) -> Result<Daemon, String> {
        let tenant = |name: &str, token: &str, priority: &str| {
            format!(
                "[[tenant]]\nname = \"{name}\"\ntoken_sha256 = \"{}\"\npriority = \"{priority}\"\n",
                gpupool_quota::hash_token(token)
            )
        };
        let text = tenant("low", LOW_TOKEN, "low") + &tenant("high", HIGH_TOKEN, "high");
        Self::start_config_with(&text, memory, "evict", extra, &[])
    }

    /// A daemon on one simulated GPU of `memory` with the quota file `config`, in a directory
    /// named for `bench`, with more `gpupool daemon` arguments `extra` and environment `env`.
    pub(crate) fn start_config_with(
        config: &str,
        memory: &str,
        bench: &str,
        extra: &[&std::ffi::OsStr],
        env: &[(&str, &str)],
    ) -> Result<Daemon, String> {
        let dir = std::env::temp_dir().join(format!("gpupool-bench-{bench}-{}", std::process::id()));
        let env = env.to_vec();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let cfg = dir.join("quota.toml");
        std::fs::write(&cfg, config).map_err(|e| e.to_string())?;
        let log = std::fs::File::create(dir.join("daemon.log")).map_err(|e| e.to_string())?;
        let child = Command::new(release_dir().join("gpupool"))
            .args(["daemon", "--sim", "--config"])
            .arg(&cfg)
            .arg("--listen")
            .arg(format!("unix://{}", dir.join("s.sock").display()))
            .args(extra)
            .env("GPUPOOL_SIM_MEMORY", memory)
            .env("GPUPOOL_SIM_DEVICES", "1")
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting the daemon: {e}"))?;
        let d = Daemon { child, dir };
        let t0 = Instant::now();
        while UnixStream::connect(d.socket()).is_err() {
            if t0.elapsed() > Duration::from_secs(10) {
                return Err(format!("daemon did not listen within 10 s: {}", d.log()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(d)
    }

    /// The status document (`<socket>.ctl`), waiting up to `patience` for the control socket:
    /// a daemon restoring checkpoints binds it only when it serves.
    pub(crate) fn status(&self, patience: Duration) -> Result<serde_json::Value, String> {
        use std::io::Read;
        let path = format!("{}.ctl", self.socket().display());
        let t0 = Instant::now();
        let mut s = loop {
            match UnixStream::connect(&path) {
                Ok(s) => break s,
                Err(e) if t0.elapsed() >= patience => return Err(format!("{path}: {e}")),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        let mut text = String::new();
        s.read_to_string(&mut text).map_err(|e| e.to_string())?;
        serde_json::from_str(&text).map_err(|e| e.to_string())
    }

    /// `evictions.tenants[low]` of the status document: (last_evict_ns, last_restore_ns, restores).
    fn low_evictions(&self) -> Result<(f64, f64, u64), String> {
        let doc = self.status(Duration::ZERO)?;
        let t = doc["evictions"]["tenants"]
            .as_array()
            .and_then(|ts| ts.iter().find(|t| t["tenant"] == "low"))
            .ok_or_else(|| format!("no evictions of tenant low in the status: {}", doc["evictions"]))?;
        let n = |k: &str| t[k].as_f64().unwrap_or(0.0);
        Ok((n("last_evict_ns"), n("last_restore_ns"), t["restores"].as_u64().unwrap_or(0)))
    }
}

struct Round {
    evict_gbs: f64,
    restore_gbs: f64,
    arrival_full_ms: f64,
    arrival_empty_ms: f64,
}

/// One high-priority arrival: hello, context, 80% allocation, timed; the client is returned so
/// the caller decides when it leaves.
fn arrive(d: &Daemon, bytes: u64) -> Result<(Client, f64), String> {
    let t0 = Instant::now();
    let mut c = Client::connect(&d.socket(), HIGH_TOKEN)?;
    let ctx = c.ctx()?;
    c.alloc(ctx, bytes)?;
    Ok((c, t0.elapsed().as_secs_f64() * 1e3))
}

fn measure(quick: bool) -> Result<(Vec<Round>, f64, u64), String> {
    let total = if quick { 256 * MIB } else { 1024 * MIB };
    let rounds = if quick { 2 } else { 5 };
    let d = Daemon::start(&format!("{}MiB", total / MIB))?;
    let fail = |e: String| format!("{e}\ndaemon log:\n{}", d.log());
    let high_bytes = total * 8 / 10;
    let mut out = Vec::new();
    // The baseline arrival: nobody else on the device.
    let mut empty = Vec::new();
    for _ in 0..rounds {
        let (c, ms) = arrive(&d, high_bytes).map_err(fail)?;
        drop(c);
        empty.push(ms);
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut low = Client::connect(&d.socket(), LOW_TOKEN).map_err(fail)?;
    let lctx = low.ctx().map_err(fail)?;
    let chunk = 32 * MIB;
    let low_bytes = total * 3 / 4 / chunk * chunk;
    for i in 0..low_bytes / chunk {
        let p = low.alloc(lctx, chunk).map_err(fail)?;
        let set = Memset { dst: p, value: MemsetValue::U32(i as u32 + 1), width: chunk / 4, height: 1, pitch: 0 };
        low.call(Request::Memset { set }).map_err(fail)?;
    }
    for (r, &arrival_empty_ms) in empty.iter().enumerate() {
        let (high, arrival_full_ms) = arrive(&d, high_bytes).map_err(fail)?;
        let (evict_ns, _, restores) = d.low_evictions().map_err(fail)?;
        drop(high);
        // low's next call brings its memory back (once high's session has ended).
        low.call(Request::MemGetInfo { ctx: lctx }).map_err(fail)?;
        let (_, restore_ns, after) = d.low_evictions().map_err(fail)?;
        if after != restores + 1 {
            return Err(fail(format!("round {r}: low was not restored ({restores} -> {after} restores)")));
        }
        out.push(Round {
            evict_gbs: low_bytes as f64 / evict_ns,
            restore_gbs: low_bytes as f64 / restore_ns,
            arrival_full_ms,
            arrival_empty_ms,
        });
        // The anti-thrash hold (0.5 s, or 10 x the last move) before low may be evicted again.
        std::thread::sleep(
            Duration::from_millis(600).max(Duration::from_nanos((evict_ns.max(restore_ns) * 10.0) as u64)),
        );
    }
    let baseline = plain_dtoh(low_bytes, rounds)?;
    Ok((out, baseline, low_bytes))
}

/// The same simulator's `cuMemcpyDtoH_v2` of `bytes`, in this process: GB/s, median of `n`.
fn plain_dtoh(bytes: u64, n: usize) -> Result<f64, String> {
    let (d, _ctx, p) = filled_buffer(bytes, 7)?;
    let mut host = vec![0u8; bytes as usize];
    let mut v = Vec::new();
    for _ in 0..n {
        let t0 = Instant::now();
        ok(call!(d.cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), p, bytes as usize)), "cuMemcpyDtoH_v2")?;
        v.push(bytes as f64 / t0.elapsed().as_nanos() as f64);
    }
    if host[bytes as usize - 1] != 7 {
        return Err("cuMemcpyDtoH_v2 did not copy".into());
    }
    let _ = call!(d.cuMemFree_v2(p));
    Ok(median(v))
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn main(args: &[String]) -> ExitCode {
    let quick = match args {
        [] => false,
        [q] if q == "--quick" => true,
        _ => {
            eprintln!("usage: gpupool-bench evict [--quick]");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = build_pool() {
        eprintln!("gpupool-bench evict: {e}");
        return ExitCode::FAILURE;
    }
    let (rounds, baseline, bytes) = match measure(quick) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gpupool-bench evict: {e}");
            return ExitCode::FAILURE;
        }
    };
    let med = |f: fn(&Round) -> f64| median(rounds.iter().map(f).collect());
    let (ev, re) = (med(|r| r.evict_gbs), med(|r| r.restore_gbs));
    println!("memory preemption, {} MiB moved, {} rounds (medians)", bytes / MIB, rounds.len());
    println!("{:<44} | {:>10} | vs plain cuMemcpyDtoH", "figure", "value");
    println!("{:<44} | {:>10.2} | {:.2}x", "eviction GB/s", ev, ev / baseline);
    println!("{:<44} | {:>10.2} | {:.2}x", "restore GB/s", re, re / baseline);
    println!("{:<44} | {:>10.2} | 1.00x", "plain cuMemcpyDtoH GB/s (same bytes)", baseline);
    let (full, empty) = (med(|r| r.arrival_full_ms), med(|r| r.arrival_empty_ms));
    println!(
        "{:<44} | {:>10.1} | {:.2}x of the empty device",
        "high arrival to first alloc, evicting (ms)",
        full,
        full / empty
    );
    println!("{:<44} | {:>10.1} | 1.00x", "high arrival to first alloc, device empty (ms)", empty);
    ExitCode::SUCCESS
}
