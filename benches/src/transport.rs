//! The `transport` figures: client<->daemon round trips and staging bandwidth of the
//! protocol crate's transports, as ratios to baselines measured in the same run.
//!
//! Round trip: one end sends a 64-byte frame, an echo thread holding the other end sends
//! it back; each round trip is timed alone (so the p99 is real; the clock's own cost is
//! printed next to it). Both ends are threads of this process: the memory, futex and
//! socket paths are those two processes would take. Baseline: the unix-socket transport.
//!
//! Staging: 64 MiB written into the shared-memory staging area by the client end, then
//! read out by the daemon end on its own thread; each direction as a share of a plain
//! 64 MiB memcpy (`copy_from_slice`) sampled alternately with it.

use std::fmt::Write;
use std::hint::black_box;
use std::thread;
use std::time::{Duration, Instant};

use gpupool_protocol::transport::shm::{ShmConfig, ShmTransport, WaitPolicy};
use gpupool_protocol::transport::unix::UnixTransport;
use gpupool_protocol::transport::{Transport, TransportError};

use crate::stats::{Summary, summarize};

const FRAME: usize = 64;
const STAGING: usize = 64 << 20;
const BW_SAMPLES: usize = 11;
const BW_WARMUP: usize = 2;

pub struct Rtt {
    name: &'static str,
    policy: String,
    ns: Summary,
}

pub struct Bandwidth {
    name: &'static str,
    gb_s: Summary,
    memcpy: Summary,
}

pub struct TransportRun {
    cpus: usize,
    clock_ns: f64,
    spin_budget_us: f64,
    default_spin: u32,
    rtts: Vec<Rtt>,
    bandwidth: Vec<Bandwidth>,
}

fn err(e: TransportError) -> String {
    e.to_string()
}

/// Echoes every frame until the peer leaves.
fn echo(mut t: impl Transport + 'static) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        while t.recv_into(&mut buf, None).is_ok() {
            if t.send(&buf).is_err() {
                return;
            }
        }
    })
}

/// Round trips of a 64-byte frame through `a` and an echo thread holding `b`.
fn rtt(mut a: impl Transport, b: impl Transport + 'static, iters: usize) -> Result<Vec<f64>, String> {
    let peer = echo(b);
    let frame = [0x5au8; FRAME];
    let mut buf = Vec::with_capacity(FRAME);
    let mut v = Vec::with_capacity(iters);
    for i in 0..iters + iters / 10 {
        let t = Instant::now();
        a.send(&frame).map_err(err)?;
        a.recv_into(&mut buf, Some(Duration::from_secs(5))).map_err(err)?;
        let ns = t.elapsed().as_nanos() as f64;
        if i >= iters / 10 {
            v.push(ns);
        }
    }
    drop(a);
    peer.join().map_err(|_| "echo thread panicked".to_string())?;
    Ok(v)
}

fn shm_pair(wait: WaitPolicy) -> Result<(ShmTransport, ShmTransport), String> {
    let config = ShmConfig { ring_capacity: 1 << 16, staging_size: STAGING, wait };
    ShmTransport::pair(&config).map_err(err)
}

/// Cost of one `Instant::now()` + `elapsed()`, the timing overhead inside every RTT sample.
fn clock_ns() -> f64 {
    let n = 100_000;
    let t = Instant::now();
    for _ in 0..n {
        black_box(Instant::now().elapsed());
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

/// How long the default spin phase lasts: a receive with timeout zero on an empty ring
/// spins the whole budget, then returns Timeout.
fn spin_budget_us() -> Result<f64, String> {
    let (mut c, _s) = shm_pair(WaitPolicy::default())?;
    let mut v = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        let _ = c.recv(Some(Duration::ZERO));
        v.push(t.elapsed().as_nanos() as f64 / 1e3);
    }
    Ok(summarize(v).median)
}

fn bandwidth() -> Result<Vec<Bandwidth>, String> {
    let (c, s) = shm_pair(WaitPolicy::default())?;
    let src: Vec<u8> = (0..STAGING).map(|i| (i * 13) as u8).collect();
    let mut dst = vec![0u8; STAGING];
    // The daemon end: on request, reads the whole staging area and replies with the time.
    let reader = thread::spawn(move || {
        let mut s = s;
        let mut out = vec![0u8; STAGING];
        let mut buf = Vec::new();
        while s.recv_into(&mut buf, None).is_ok() {
            let t = Instant::now();
            s.staging().expect("shm has staging").read(0, &mut out).expect("in range");
            let ns = t.elapsed().as_nanos() as u64;
            black_box(&out);
            if s.send(&ns.to_le_bytes()).is_err() {
                return;
            }
        }
    });
    let mut c = c;
    let gb = |ns: f64| STAGING as f64 / ns;
    let (mut copy, mut write, mut read) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..BW_WARMUP + BW_SAMPLES {
        let t = Instant::now();
        dst.copy_from_slice(black_box(&src));
        let copy_ns = t.elapsed().as_nanos() as f64;
        black_box(&dst);
        let t = Instant::now();
        c.staging().expect("shm has staging").write(0, black_box(&src)).map_err(err)?;
        let write_ns = t.elapsed().as_nanos() as f64;
        c.send(b"read").map_err(err)?;
        let reply = c.recv(Some(Duration::from_secs(5))).map_err(err)?;
        let read_ns = u64::from_le_bytes(reply[..8].try_into().map_err(|_| "bad reply")?) as f64;
        if i >= BW_WARMUP {
            copy.push(gb(copy_ns));
            write.push(gb(write_ns));
            read.push(gb(read_ns));
        }
    }
    drop(c);
    reader.join().map_err(|_| "reader thread panicked".to_string())?;
    let memcpy = summarize(copy);
    Ok(vec![
        Bandwidth { name: "staging write (client end)", gb_s: summarize(write), memcpy },
        Bandwidth { name: "staging read (daemon end, its thread)", gb_s: summarize(read), memcpy },
    ])
}

pub fn run() -> Result<TransportRun, String> {
    let cpus = thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let unix = || UnixTransport::pair(1 << 20).map_err(|e| e.to_string());
    let default = WaitPolicy::default();
    let spin_forever = WaitPolicy { spin: u32::MAX, spin_max: u32::MAX, ..default };
    // The default until 2026-11-28, spelled out: it must not follow today's default.
    let adaptive = WaitPolicy { spin: 100, spin_max: 2000, yield_for: Duration::ZERO, ..default };
    let fixed = WaitPolicy { spin_max: default.spin, yield_for: Duration::ZERO, ..default };
    let futex_only = WaitPolicy { spin: 0, spin_max: 0, yield_for: Duration::ZERO, ..default };
    let mut rtts = Vec::new();
    // The baseline first, then the shared-memory regimes, then the baseline again (the
    // baseline figure pools both runs' samples: same machine conditions as the rest).
    let (a, b) = unix()?;
    let base1 = rtt(a, b, 20_000)?;
    let regimes = [
        ("shm, both ends spin", "spin without limit".to_string(), spin_forever, 200_000),
        (
            "shm, default policy",
            format!("spin {}, yield {:?}, futex", default.spin, default.yield_for),
            default,
            200_000,
        ),
        (
            "shm, old adaptive default",
            format!("spin {}..{} adaptive, futex", adaptive.spin, adaptive.spin_max),
            adaptive,
            200_000,
        ),
        ("shm, fixed short spin", format!("spin {}, futex (no yield)", default.spin), fixed, 20_000),
        ("shm, futex path", "spin 0: sleep every time".to_string(), futex_only, 20_000),
    ];
    for (name, policy, wait, iters) in regimes {
        let (a, b) = shm_pair(wait)?;
        rtts.push(Rtt { name, policy, ns: summarize(rtt(a, b, iters)?) });
    }
    let (a, b) = unix()?;
    let mut base = base1;
    base.extend(rtt(a, b, 20_000)?);
    let base = summarize(base);
    rtts.push(Rtt { name: "unix socket (baseline)", policy: "blocking poll + read".into(), ns: base });
    Ok(TransportRun {
        cpus,
        clock_ns: clock_ns(),
        spin_budget_us: spin_budget_us()?,
        default_spin: default.spin,
        rtts,
        bandwidth: bandwidth()?,
    })
}

fn baseline(run: &TransportRun) -> f64 {
    run.rtts.last().map(|r| r.ns.median).unwrap_or(f64::NAN)
}

fn fmt_ns(ns: f64) -> String {
    if ns >= 10_000.0 { format!("{:.1} us", ns / 1e3) } else { format!("{ns:.0} ns") }
}

pub fn table(run: &TransportRun) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "gpupool-bench transport ({} CPUs; both ends are threads of one process)\n", run.cpus);
    let _ = writeln!(out, "1. Round trip of a {FRAME}-byte frame (send + echo + receive), each timed alone");
    let _ = writeln!(
        out,
        "{:<26} | {:<34} | {:>9} | {:>9} | {:>8} | {:>9}",
        "transport", "wait policy", "p50", "p99", "samples", "p50/unix"
    );
    let _ = writeln!(out, "{}", "-".repeat(26 + 34 + 9 * 3 + 8 + 15));
    let base = baseline(run);
    for r in &run.rtts {
        let _ = writeln!(
            out,
            "{:<26} | {:<34} | {:>9} | {:>9} | {:>8} | {:>8.4}x",
            r.name,
            r.policy,
            fmt_ns(r.ns.median),
            fmt_ns(r.ns.p99),
            r.ns.samples,
            r.ns.median / base
        );
    }
    let _ = writeln!(
        out,
        "(each sample includes one clock read pair, {:.0} ns; the default initial spin budget lasts {:.1} us ({} spins))\n",
        run.clock_ns, run.spin_budget_us, run.default_spin
    );
    let _ =
        writeln!(out, "2. Staging bandwidth, {} MiB, vs plain memcpy of the same size in the same run", STAGING >> 20);
    let _ = writeln!(
        out,
        "{:<38} | {:>10} | {:>10} | {:>12} | {:>8}",
        "copy", "p50 GB/s", "p99 GB/s", "memcpy GB/s", "share"
    );
    let _ = writeln!(out, "{}", "-".repeat(38 + 10 * 2 + 12 + 8 + 12));
    for b in &run.bandwidth {
        let _ = writeln!(
            out,
            "{:<38} | {:>10.2} | {:>10.2} | {:>12.2} | {:>7.0}%",
            b.name,
            b.gb_s.median,
            b.gb_s.p99,
            b.memcpy.median,
            100.0 * b.gb_s.median / b.memcpy.median
        );
    }
    let _ = writeln!(out, "(GB/s = 10^9 bytes/s; p99 column is the 99th-percentile sample, i.e. the fastest)");
    out
}

fn js(s: &Summary) -> String {
    format!("{{\"median\": {}, \"p99\": {}, \"samples\": {}}}", s.median, s.p99, s.samples)
}

pub fn json(run: &TransportRun) -> String {
    let base = baseline(run);
    let rtts: Vec<String> = run
        .rtts
        .iter()
        .map(|r| {
            format!(
                "    {{\"name\": \"{}\", \"policy\": \"{}\", \"ns\": {}, \"ratio_to_unix_socket\": {}}}",
                r.name,
                r.policy,
                js(&r.ns),
                r.ns.median / base
            )
        })
        .collect();
    let bws: Vec<String> = run
        .bandwidth
        .iter()
        .map(|b| {
            format!(
                "    {{\"name\": \"{}\", \"gb_per_s\": {}, \"memcpy_gb_per_s\": {}, \"ratio_to_memcpy\": {}}}",
                b.name,
                js(&b.gb_s),
                js(&b.memcpy),
                b.gb_s.median / b.memcpy.median
            )
        })
        .collect();
    format!(
        "{{\n  \"bench\": \"transport\",\n  \"cpus\": {},\n  \"frame_bytes\": {FRAME},\n  \"clock_ns\": {},\n  \"spin_budget_us\": {},\n  \"round_trips\": [\n{}\n  ],\n  \"staging\": [\n{}\n  ]\n}}\n",
        run.cpus,
        run.clock_ns,
        run.spin_budget_us,
        rtts.join(",\n"),
        bws.join(",\n")
    )
}
