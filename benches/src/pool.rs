//! The `pool` figures: the whole pool (release `gpupool daemon --sim` + `libgpupool.so`)
//! next to baselines measured in the same run.
//!
//! The bench builds the daemon, the interposer and the simulator (release), starts
//! `target/release/gpupool daemon --sim --listen unix:///tmp/gpupool-bench-<pid>/s.sock`,
//! loads `target/release/libgpupool.so` into this process through the same driver table
//! as the simulator (`gpupool_e2e::Driver`), and loads the simulator itself next to it
//! (the "direct" baseline). Client processes are this binary re-executed as
//! `gpupool-bench __pool-client start|rtt|launches LIB ...` with `GPUPOOL_ENDPOINT` set; they print
//! one line of results that the parent parses ([`parse_start`], [`parse_rtt`]).
//!
//! Every latency is one call timed alone (p99 is a real tail); rates and bandwidths are
//! computed from per-sample times, so their "p99" is the rate at the 99th-percentile
//! (slowest) sample, the slow tail as well.

use std::ffi::{OsStr, c_void};
use std::fmt::Write as _;
use std::hint::black_box;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use gpupool_e2e::cu::{CUcontext, CUdevice, CUdeviceptr, CUfunction, CUmodule, CUstream};
use gpupool_e2e::{Driver, EMPTY_PTX, build_sim_libdir, call};

use crate::report::{cpus, grid, json_str, json_summary};
use crate::sim::ok;
use crate::stats::{Summary, monotonic_ns, summarize};

/// The hidden subcommand a client process runs.
pub const CLIENT_COMMAND: &str = "__pool-client";

const FRAME: usize = 64;
const COPY_BYTES: usize = 64 << 20;
/// Part 1: rounds of (pool, direct, unix) samples, interleaved.
const RTT_ROUNDS: usize = 10;
const RTT_PER_ROUND: usize = 2000;
const UNIX_PER_ROUND: usize = 1000;
const IDLE_SAMPLES: usize = 300;
const IDLE_GAP: Duration = Duration::from_millis(1);
/// Part 2: launches per sample.
const LAUNCHES: usize = 5000;
const LAUNCH_SAMPLES: usize = 15;
/// Part 3.
const COPY_SAMPLES: usize = 10;
const COPY_WARMUP: usize = 2;
/// Part 4: client processes of each kind.
const START_SAMPLES: usize = 25;
/// Part 5: (clients, the window all of them make round trips in).
const CONCURRENCY: [(usize, Duration); 4] = [
    (1, Duration::from_millis(300)),
    (2, Duration::from_millis(500)),
    (16, Duration::from_millis(500)),
    (128, Duration::from_millis(1000)),
];
/// Part 5: how far ahead of "go" the common window opens, so that every client has read it.
const WINDOW_LEAD: Duration = Duration::from_millis(30);

// ---------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Nanoseconds per operation; ratio = pool / baseline (lower is better).
    Ns,
    /// Operations per second; ratio = pool / baseline (higher is better).
    PerSec,
    /// 10^9 bytes per second; ratio = pool / baseline (higher is better).
    GbS,
}

pub struct Row {
    name: String,
    unit: Unit,
    pool: Summary,
    base_name: String,
    base: Summary,
    /// PASS/MISS against DESIGN.md §6, or empty where the row has no target.
    verdict: String,
}

pub struct Section {
    title: String,
    rows: Vec<Row>,
    notes: Vec<String>,
}

pub struct PoolRun {
    daemon: String,
    client_lib: String,
    sim_lib: String,
    cpus: usize,
    clock_ns: f64,
    wall_s: f64,
    /// 1-minute load average at the start and at the end of the run.
    load: (String, String),
    sections: Vec<Section>,
}

/// The 1-minute load average (first field of /proc/loadavg), "?" if unreadable.
pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

fn row(name: &str, unit: Unit, pool: Summary, base_name: &str, base: Summary) -> Row {
    Row { name: name.into(), unit, pool, base_name: base_name.into(), base, verdict: String::new() }
}

pub(crate) fn pass(ok: bool) -> &'static str {
    if ok { "PASS" } else { "MISS" }
}

/// The round-trip target of DESIGN.md §6: p50 <= 1 us, p99 <= 5 us.
fn rtt_verdict(s: &Summary) -> String {
    format!("p50<=1us {}, p99<=5us {}", pass(s.median <= 1_000.0), pass(s.p99 <= 5_000.0))
}

/// Rates from per-sample times: `work` units per sample of `ns` nanoseconds. The median
/// is the rate at the median time; "p99" is the rate at the 99th-percentile time, the
/// slow tail (so it is the lower figure).
pub fn rate_summary(times_ns: Vec<f64>, work: f64) -> Summary {
    let t = summarize(times_ns);
    Summary { median: work / t.median * 1e9, p99: work / t.p99 * 1e9, samples: t.samples }
}

pub(crate) fn fmt_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e4 {
        format!("{:.1} us", ns / 1e3)
    } else if ns >= 1e3 {
        format!("{:.2} us", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

pub(crate) fn fmt_value(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Ns => fmt_ns(v),
        Unit::PerSec if v >= 1e6 => format!("{:.2} M/s", v / 1e6),
        Unit::PerSec => format!("{:.0} k/s", v / 1e3),
        Unit::GbS => format!("{v:.2} GB/s"),
    }
}

pub(crate) fn fmt_ratio(unit: Unit, r: f64) -> String {
    match unit {
        Unit::Ns if r >= 100.0 => format!("{r:.0}x"),
        Unit::Ns if r >= 10.0 => format!("{r:.1}x"),
        Unit::Ns if r < 0.1 => format!("{r:.3}x"),
        Unit::Ns => format!("{r:.2}x"),
        _ => format!("{:.0}%", r * 100.0),
    }
}

pub fn table(run: &PoolRun) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "gpupool-bench pool: daemon {} --sim ({}), client {}, direct {}",
        run.daemon, run.sim_lib, run.client_lib, run.sim_lib
    );
    let _ = writeln!(
        out,
        "{} CPUs; run took {:.1} s; load average (1 min) {} at the start, {} at the end (other work on the machine skews every figure)",
        run.cpus, run.wall_s, run.load.0, run.load.1
    );
    let _ = writeln!(
        out,
        "p50 = median, p99 = 99th percentile of per-sample time (for rates: the rate at that slow sample);\n\
         ratio = pool / baseline (time: x the baseline's; rate: share of the baseline's); clock read pair {:.0} ns, inside every timed call\n",
        run.clock_ns
    );
    let head = [
        "figure",
        "pool p50",
        "pool p99",
        "baseline",
        "base p50",
        "base p99",
        "p50 ratio",
        "p99 ratio",
        "target (DESIGN 6)",
    ];
    for s in &run.sections {
        let _ = writeln!(out, "{}", s.title);
        let rows: Vec<Vec<String>> = s
            .rows
            .iter()
            .map(|r| {
                vec![
                    r.name.clone(),
                    fmt_value(r.unit, r.pool.median),
                    fmt_value(r.unit, r.pool.p99),
                    r.base_name.clone(),
                    fmt_value(r.unit, r.base.median),
                    fmt_value(r.unit, r.base.p99),
                    fmt_ratio(r.unit, r.pool.median / r.base.median),
                    fmt_ratio(r.unit, r.pool.p99 / r.base.p99),
                    r.verdict.clone(),
                ]
            })
            .collect();
        out.push_str(&grid(&head, &rows, &[0, 3, 8]));
        for n in &s.notes {
            let _ = writeln!(out, "  note: {n}");
        }
        out.push('\n');
    }
    out
}

pub fn json(run: &PoolRun) -> String {
    let mut rows = Vec::new();
    for s in &run.sections {
        for r in &s.rows {
            rows.push(format!(
                "    {{\"section\": {}, \"name\": {}, \"unit\": {}, \"pool\": {}, \"baseline\": {{\"name\": {}, \"summary\": {}}}, \"ratio_p50\": {}, \"ratio_p99\": {}, \"verdict\": {}}}",
                json_str(&s.title),
                json_str(&r.name),
                json_str(match r.unit {
                    Unit::Ns => "ns",
                    Unit::PerSec => "per_s",
                    Unit::GbS => "GB/s",
                }),
                json_summary(&r.pool),
                json_str(&r.base_name),
                json_summary(&r.base),
                r.pool.median / r.base.median,
                r.pool.p99 / r.base.p99,
                json_str(&r.verdict),
            ));
        }
    }
    let notes: Vec<String> =
        run.sections.iter().flat_map(|s| s.notes.iter().map(|n| format!("    {}", json_str(n)))).collect();
    format!(
        "{{\n  \"bench\": \"pool\",\n  \"daemon\": {},\n  \"client_library\": {},\n  \"sim_library\": {},\n  \"cpus\": {},\n  \"load_average_1min\": [{}, {}],\n  \"clock_ns\": {},\n  \"p99_meaning\": \"99th percentile of per-sample time; for rates the rate at that sample\",\n  \"rows\": [\n{}\n  ],\n  \"notes\": [\n{}\n  ]\n}}\n",
        json_str(&run.daemon),
        json_str(&run.client_lib),
        json_str(&run.sim_lib),
        run.cpus,
        json_str(&run.load.0),
        json_str(&run.load.1),
        run.clock_ns,
        rows.join(",\n"),
        notes.join(",\n"),
    )
}

// ---------------------------------------------------------------------------------------
// Client processes: this binary re-executed. One line of output each, parsed by the parent.
// ---------------------------------------------------------------------------------------

/// `start LOAD_NS INIT_NS COUNT_NS`: the client's own timing of dlopen of the library,
/// `cuInit` (for the pool: connect + shared-memory attach + hello) and the first
/// `cuDeviceGetCount`.
pub fn parse_start(line: &str) -> Result<[f64; 3], String> {
    let mut it = line.split_whitespace();
    if it.next() != Some("start") {
        return Err(format!("not a start line: {line:?}"));
    }
    let mut v = [0.0; 3];
    for x in &mut v {
        *x = it.next().and_then(|s| s.parse::<u64>().ok()).ok_or_else(|| format!("bad start line: {line:?}"))? as f64;
    }
    if it.next().is_some() {
        return Err(format!("trailing fields in start line: {line:?}"));
    }
    Ok(v)
}

/// `rtt WALL_NS N NS...`: the loop's wall time and the N round trips it timed.
pub fn parse_rtt(line: &str) -> Result<(f64, Vec<f64>), String> {
    let mut it = line.split_whitespace();
    if it.next() != Some("rtt") {
        return Err(format!("not an rtt line: {:?}", &line[..line.len().min(40)]));
    }
    let mut num = || -> Result<u64, String> {
        it.next().and_then(|s| s.parse::<u64>().ok()).ok_or_else(|| "bad rtt line".to_string())
    };
    let wall = num()? as f64;
    let n = num()? as usize;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(num()? as f64);
    }
    if num().is_ok() {
        return Err("more samples than announced in rtt line".into());
    }
    Ok((wall, v))
}

/// The `hello_us=N` field of a daemon `session start` log line (its time from accepting
/// the connection to the hello reply), in microseconds.
pub fn parse_hello_us(line: &str) -> Option<f64> {
    if !line.contains("session start") {
        return None;
    }
    let v = line.split_whitespace().find_map(|f| f.strip_prefix("hello_us="))?;
    v.parse::<u64>().ok().map(|x| x as f64)
}

/// `gpupool-bench __pool-client start LIB`, `... rtt LIB`, `... echo SOCKET` ([`crate::ceiling`])
/// or `... launches LIB SAMPLES`.
pub fn client_main(args: &[String]) -> ExitCode {
    let r = match args {
        [mode, lib] if mode == "start" => client_start(Path::new(lib)),
        [mode, lib] if mode == "rtt" => client_rtt(Path::new(lib)),
        [mode, socket] if mode == "echo" => crate::ceiling::client_echo(Path::new(socket)),
        [mode, lib, samples] if mode == "launches" => match samples.parse() {
            Ok(n) => client_launches(Path::new(lib), n),
            Err(_) => Err("launches SAMPLES must be a number".into()),
        },
        _ => Err(format!(
            "usage: gpupool-bench {CLIENT_COMMAND} start LIB | rtt LIB | echo SOCKET | launches LIB SAMPLES"
        )),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpupool-bench {CLIENT_COMMAND}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn client_start(lib: &Path) -> Result<(), String> {
    let t0 = Instant::now();
    let d = Driver::load(lib)?;
    let t1 = Instant::now();
    ok(call!(d.cuInit(0)), "cuInit")?;
    let t2 = Instant::now();
    let mut n = 0;
    ok(call!(d.cuDeviceGetCount(&mut n)), "cuDeviceGetCount")?;
    let t3 = Instant::now();
    if n < 1 {
        return Err(format!("cuDeviceGetCount gave {n}"));
    }
    println!("start {} {} {}", (t1 - t0).as_nanos(), (t2 - t1).as_nanos(), (t3 - t2).as_nanos());
    Ok(())
}

/// Sets up the primary context of device 0 and makes it current.
pub(crate) fn primary_context(d: &Driver) -> Result<CUcontext, String> {
    ok(call!(d.cuInit(0)), "cuInit")?;
    let mut dev: CUdevice = 0;
    ok(call!(d.cuDeviceGet(&mut dev, 0)), "cuDeviceGet")?;
    let mut ctx = null_mut();
    ok(call!(d.cuDevicePrimaryCtxRetain(&mut ctx, dev)), "cuDevicePrimaryCtxRetain")?;
    ok(call!(d.cuCtxSetCurrent(ctx)), "cuCtxSetCurrent")?;
    Ok(ctx)
}

/// Part 5's client: `cuCtxSynchronize` round trips through the pool ([`round_trips_in_window`]).
fn client_rtt(lib: &Path) -> Result<(), String> {
    let d = Driver::load(lib)?;
    primary_context(&d)?;
    round_trips_in_window(&mut || ok(call!(d.cuCtxSynchronize()), "cuCtxSynchronize"))
}

/// A part 5 client's window: 200 warm-up calls of `round_trip`, then `ready`; reads `go
/// OPEN_NS CLOSE_NS` (CLOCK_MONOTONIC), sleeps until the window opens and makes back-to-back
/// calls until it closes; prints `rtt WALL N ...` with WALL from the opening to its last reply,
/// so that every client's count is of the same window and the parent's aggregate is a rate
/// over it.
pub(crate) fn round_trips_in_window(round_trip: &mut dyn FnMut() -> Result<(), String>) -> Result<(), String> {
    for _ in 0..200 {
        round_trip()?;
    }
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "ready").and_then(|_| stdout.flush()).map_err(|e| e.to_string())?;
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).map_err(|e| e.to_string())?;
    let window: Vec<f64> = go.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let [open, close] = window[..] else { return Err(format!("expected `go OPEN_NS CLOSE_NS`, got {go:?}")) };
    let ahead = open - monotonic_ns();
    if ahead > 0.0 {
        std::thread::sleep(Duration::from_nanos(ahead as u64));
    }
    let mut v = Vec::with_capacity(1 << 16);
    let mut last = monotonic_ns();
    while last < close {
        let t = Instant::now();
        round_trip()?;
        v.push(t.elapsed().as_nanos() as u64);
        last = monotonic_ns();
    }
    let wall = (last - open).max(1.0) as u64;
    let mut line = format!("rtt {wall} {}", v.len());
    for x in &v {
        let _ = write!(line, " {x}");
    }
    writeln!(stdout, "{line}").map_err(|e| e.to_string())
}

/// Part 2's launch samples in a process of its own (against another daemon): prints
/// `launches N POST_NS TOTAL_NS ...`, each sample's posting time and its total.
fn client_launches(lib: &Path, samples: usize) -> Result<(), String> {
    let d = Driver::load(lib)?;
    let side = Side::new(&d)?;
    side.launches(LAUNCHES)?;
    let mut line = format!("launches {samples}");
    for _ in 0..samples {
        let t = Instant::now();
        let post = side.launches(LAUNCHES)?;
        let _ = write!(line, " {} {}", post.as_nanos(), t.elapsed().as_nanos());
    }
    println!("{line}");
    Ok(())
}

/// `launches N POST_NS TOTAL_NS ...` of [`client_launches`]: (posting times, totals).
pub fn parse_launches(line: &str) -> Result<(Vec<f64>, Vec<f64>), String> {
    let mut it = line.split_whitespace();
    if it.next() != Some("launches") {
        return Err(format!("not a launches line: {line:?}"));
    }
    let mut num = || -> Result<f64, String> {
        it.next().and_then(|s| s.parse::<u64>().ok()).map(|v| v as f64).ok_or_else(|| "bad launches line".to_string())
    };
    let n = num()? as usize;
    let (mut post, mut total) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        post.push(num()?);
        total.push(num()?);
    }
    if num().is_ok() {
        return Err("more samples than announced in launches line".into());
    }
    Ok((post, total))
}

// ---------------------------------------------------------------------------------------
// The parent: builds, starts the daemon, measures.
// ---------------------------------------------------------------------------------------

fn root() -> PathBuf {
    let r = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    r.canonicalize().unwrap_or(r)
}

pub(crate) fn release_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("release"),
        _ => root().join("target/release"),
    }
}

/// The release daemon, `libgpupool.so` and the simulator libraries `gpupool daemon --sim` looks
/// for next to its executable (a no-op when fresh). The simulator is named here, not left to
/// whichever benchmark happened to build it first: a fresh checkout has no release
/// `libgpupool_sim.so` until something asks for it.
pub(crate) fn build_pool() -> Result<(), String> {
    let packages = ["gpupool-daemon", "gpupool-interpose", "gpupool-sim", "gpupool-sim-blas", "gpupool-sim-npu"];
    let st = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["build", "--quiet", "--release"])
        .args(packages.iter().flat_map(|p| ["-p", p]))
        .current_dir(root())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| format!("running cargo build: {e}"))?;
    if !st.success() {
        return Err(format!("cargo build --release of the daemon, interposer and simulator: {st}"));
    }
    Ok(())
}

/// The release daemon on the release simulator, on a socket in its own temp dir; stopped
/// (SIGTERM, then SIGKILL after 5 s) and the dir removed on drop.
pub(crate) struct Daemon {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
}

impl Daemon {
    fn start(exe: &Path, dir: PathBuf) -> Result<Daemon, String> {
        Self::start_with(exe, dir, &[])
    }

    /// As [`Daemon::start`], with more `gpupool daemon` arguments.
    pub(crate) fn start_with(exe: &Path, dir: PathBuf, extra: &[String]) -> Result<Daemon, String> {
        Self::start_env(exe, dir, extra, &[])
    }

    /// As [`Daemon::start_with`], with `env` added to the daemon's environment.
    pub(crate) fn start_env(
        exe: &Path,
        dir: PathBuf,
        extra: &[String],
        env: &[(&str, &str)],
    ) -> Result<Daemon, String> {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let socket = dir.join("s.sock");
        let log = std::fs::File::create(dir.join("daemon.log")).map_err(|e| e.to_string())?;
        let child = Command::new(exe)
            .arg("daemon")
            .arg("--sim")
            .arg("--listen")
            .arg(format!("unix://{}", socket.display()))
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", exe.display()))?;
        let mut d = Daemon { child, dir, socket };
        let t0 = Instant::now();
        while UnixStream::connect(&d.socket).is_err() {
            if let Ok(Some(st)) = d.child.try_wait() {
                return Err(format!("daemon exited ({st}): {}", d.log()));
            }
            if t0.elapsed() > Duration::from_secs(10) {
                return Err(format!("daemon did not listen within 10 s: {}", d.log()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(d)
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    /// Bytes in the daemon's log so far (a mark for [`Daemon::hello_us_since`]).
    fn log_len(&self) -> usize {
        self.log().len()
    }

    /// The daemon's own `hello_us` of every session started after the log `mark`.
    fn hello_us_since(&self, mark: usize) -> Vec<f64> {
        let log = self.log();
        log.get(mark..).unwrap_or("").lines().filter_map(parse_hello_us).collect()
    }

    /// Whether the daemon process is still running.
    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid, with plain integers.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let t0 = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) {
            if t0.elapsed() > Duration::from_secs(5) {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Child processes killed (if still running) and reaped on drop, so an error path never
/// leaves clients behind.
pub(crate) struct Kids(pub(crate) Vec<Child>);
impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

/// A second process that echoes whatever arrives on its end of a unix socket pair: the
/// plain unix-socket ping-pong baseline (DESIGN.md §5 measured the same between two
/// processes). Stopped by closing our end; reaped on drop.
struct Echo {
    sock: UnixStream,
    pid: libc::pid_t,
}

impl Echo {
    fn start() -> Result<Echo, String> {
        let (a, b) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
        let (afd, bfd) = (a.as_raw_fd(), b.as_raw_fd());
        // SAFETY: after fork the child only calls async-signal-safe functions (close, read,
        // write, _exit) on fds it inherited and a buffer on its own stack, and never
        // returns into Rust code, so forking a process that may have other threads is sound.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(format!("fork: {}", std::io::Error::last_os_error()));
        }
        if pid == 0 {
            // SAFETY: as above; `buf` is a live local array and every length passed is
            // within it.
            unsafe {
                libc::close(afd);
                let mut buf = [0u8; 256];
                loop {
                    let n = libc::read(bfd, buf.as_mut_ptr().cast(), buf.len());
                    if n <= 0 {
                        libc::_exit(0);
                    }
                    let n = n as usize;
                    let mut off = 0;
                    while off < n {
                        let w = libc::write(bfd, buf.as_ptr().add(off).cast(), n - off);
                        if w <= 0 {
                            libc::_exit(0);
                        }
                        off += w as usize;
                    }
                }
            }
        }
        drop(b);
        Ok(Echo { sock: a, pid })
    }

    fn round_trip(&mut self, frame: &[u8; FRAME], back: &mut [u8; FRAME]) -> Result<(), String> {
        self.sock.write_all(frame).and_then(|_| self.sock.read_exact(back)).map_err(|e| format!("unix ping-pong: {e}"))
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        // SAFETY: waits for our own forked child, writing no status.
        unsafe { libc::waitpid(self.pid, null_mut(), 0) };
    }
}

/// Cost of one `Instant::now()` pair, inside every single-call sample.
pub(crate) fn clock_ns() -> f64 {
    let n = 100_000;
    let t = Instant::now();
    for _ in 0..n {
        black_box(Instant::now().elapsed());
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

/// Times `op` once per sample; the first error stops the run.
pub(crate) fn time_each(n: usize, v: &mut Vec<f64>, mut op: impl FnMut() -> Result<(), String>) -> Result<(), String> {
    for _ in 0..n {
        let t = Instant::now();
        let r = op();
        v.push(t.elapsed().as_nanos() as f64);
        r?;
    }
    Ok(())
}

/// One driver's state for parts 1-3: its primary context on device 0, a stream, the
/// empty kernel, a 64 MiB device buffer and 64 MiB of its pinned host memory.
struct Side<'d> {
    d: &'d Driver,
    stream: CUstream,
    module: CUmodule,
    func: CUfunction,
    dev_buf: CUdeviceptr,
    pinned: *mut c_void,
}

impl<'d> Side<'d> {
    fn new(d: &'d Driver) -> Result<Side<'d>, String> {
        primary_context(d)?;
        let mut stream = null_mut();
        ok(call!(d.cuStreamCreate(&mut stream, 1)), "cuStreamCreate")?;
        let mut module = null_mut();
        ok(call!(d.cuModuleLoadData(&mut module, EMPTY_PTX.as_ptr().cast())), "cuModuleLoadData")?;
        let mut func = null_mut();
        ok(call!(d.cuModuleGetFunction(&mut func, module, c"empty".as_ptr())), "cuModuleGetFunction")?;
        let mut dev_buf = 0;
        ok(call!(d.cuMemAlloc_v2(&mut dev_buf, COPY_BYTES)), "cuMemAlloc_v2 64 MiB")?;
        let mut pinned = null_mut();
        ok(call!(d.cuMemAllocHost_v2(&mut pinned, COPY_BYTES)), "cuMemAllocHost_v2 64 MiB")?;
        // SAFETY: `cuMemAllocHost_v2` succeeded, so `pinned` points to COPY_BYTES writable
        // bytes of host memory, ours until `cuMemFreeHost` in `drop`.
        unsafe { std::ptr::write_bytes(pinned.cast::<u8>(), 0x33, COPY_BYTES) };
        Ok(Side { d, stream, module, func, dev_buf, pinned })
    }

    /// `n` empty launches on the stream, then one `cuStreamSynchronize`; returns how long
    /// the launches took to post (the rest is waiting for the work they queued).
    fn launches(&self, n: usize) -> Result<Duration, String> {
        let d = self.d;
        let mut p0: u64 = 0;
        let mut p1: u32 = 0;
        let mut params: [*mut c_void; 2] = [(&raw mut p0).cast(), (&raw mut p1).cast()];
        let t = Instant::now();
        for _ in 0..n {
            let r =
                call!(d.cuLaunchKernel(self.func, 1, 1, 1, 1, 1, 1, 0, self.stream, params.as_mut_ptr(), null_mut(),));
            ok(r, "cuLaunchKernel")?;
        }
        let posted = t.elapsed();
        ok(call!(d.cuStreamSynchronize(self.stream)), "cuStreamSynchronize")?;
        Ok(posted)
    }

    /// The pinned buffer's bytes, for checking after the copies into it have completed.
    fn pinned_bytes(&self) -> &[u8] {
        // SAFETY: `pinned` is COPY_BYTES of initialised host memory owned by this `Side`
        // (see `new`); callers only write it (raw pointer, or the driver's synchronous
        // copies) while no slice from here is alive, and the slice cannot outlive `self`.
        unsafe { std::slice::from_raw_parts(self.pinned.cast::<u8>(), COPY_BYTES) }
    }
}

impl Drop for Side<'_> {
    fn drop(&mut self) {
        let d = self.d;
        let _ = call!(d.cuMemFreeHost(self.pinned));
        let _ = call!(d.cuMemFree_v2(self.dev_buf));
        let _ = call!(d.cuModuleUnload(self.module));
        let _ = call!(d.cuStreamDestroy_v2(self.stream));
    }
}

fn part1(pool: &Driver, sim: &Driver, echo: &mut Echo) -> Result<Section, String> {
    let sync_pool = || ok(call!(pool.cuCtxSynchronize()), "pool cuCtxSynchronize");
    let sync_sim = || ok(call!(sim.cuCtxSynchronize()), "sim cuCtxSynchronize");
    let info_pool = || {
        let (f, t) = (&mut 0usize, &mut 0usize);
        ok(call!(pool.cuMemGetInfo_v2(f, t)), "pool cuMemGetInfo_v2")
    };
    let info_sim = || {
        let (f, t) = (&mut 0usize, &mut 0usize);
        ok(call!(sim.cuMemGetInfo_v2(f, t)), "sim cuMemGetInfo_v2")
    };
    let frame = [0x5au8; FRAME];
    let mut back = [0u8; FRAME];
    // Warm-up, discarded.
    let mut scratch = Vec::new();
    time_each(2000, &mut scratch, sync_pool)?;
    time_each(2000, &mut scratch, sync_sim)?;
    time_each(200, &mut scratch, || echo.round_trip(&frame, &mut back))?;
    let (mut vp, mut vs, mut vu, mut ip, mut is) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RTT_ROUNDS {
        time_each(RTT_PER_ROUND, &mut vp, sync_pool)?;
        time_each(RTT_PER_ROUND, &mut vs, sync_sim)?;
        time_each(UNIX_PER_ROUND, &mut vu, || echo.round_trip(&frame, &mut back))?;
        time_each(RTT_PER_ROUND / 2, &mut ip, info_pool)?;
        time_each(RTT_PER_ROUND / 2, &mut is, info_sim)?;
    }
    if back != frame {
        return Err("unix echo returned other bytes".into());
    }
    // The sleeping regime: each call after 1 ms idle.
    let (mut ipl, mut isl) = (Vec::new(), Vec::new());
    for _ in 0..IDLE_SAMPLES {
        std::thread::sleep(IDLE_GAP);
        time_each(1, &mut ipl, sync_pool)?;
        std::thread::sleep(IDLE_GAP);
        time_each(1, &mut isl, sync_sim)?;
    }
    let (p, s, u) = (summarize(vp), summarize(vs), summarize(vu));
    let unix_name = "unix socket 64 B ping-pong, 2 processes";
    let mut rows = vec![
        row("cuCtxSynchronize", Unit::Ns, p, "direct call into the sim", s),
        row("cuCtxSynchronize", Unit::Ns, p, unix_name, u),
    ];
    rows[0].verdict = rtt_verdict(&p);
    rows[1].verdict = rtt_verdict(&p);
    let ip = summarize(ip);
    let mut r = row("cuMemGetInfo_v2", Unit::Ns, ip, "direct call into the sim", summarize(is));
    r.verdict = rtt_verdict(&ip);
    rows.push(r);
    let idle = summarize(ipl);
    let mut r =
        row("cuCtxSynchronize after 1 ms idle", Unit::Ns, idle, "direct call into the sim, same", summarize(isl));
    r.verdict = rtt_verdict(&idle);
    rows.push(r);
    rows.push(row("cuCtxSynchronize after 1 ms idle", Unit::Ns, idle, unix_name, u));
    let mut notes = vec![format!(
        "back-to-back calls: {} per series in {RTT_ROUNDS} interleaved rounds; idle: {IDLE_SAMPLES} calls, each after a 1 ms sleep",
        p.samples
    )];
    if p.median > 1_000.0 || p.p99 > 5_000.0 {
        notes.push(
            "a round trip needs the daemon's session thread and this thread on two cores at once; \
             when either is descheduled or asleep (futex, ~60 us to wake here per DESIGN 5) the call \
             pays a wake-up, which is what the tail (and the idle row) shows"
                .into(),
        );
    }
    Ok(Section { title: "1. Sync round trip of a forwarded call (each call timed alone)".into(), rows, notes })
}

/// Part 2's rounds: in each, `LAUNCH_SAMPLES / LAUNCH_ROUNDS` samples of the pool, of the
/// simulator, and of a client process on the daemon without the compute scheduler.
const LAUNCH_ROUNDS: usize = 3;

/// The simulator setting that makes a backend that does nothing (sim/src/config.rs).
const DISCARD_KERNELS: (&str, &str) = ("GPUPOOL_SIM_KERNELS", "discard");

/// Runs `samples` samples of [`client_launches`] in a client process loading `lib`, with
/// `env` added: (posting times, totals).
fn launches_client(
    exe: &Path,
    lib: &Path,
    samples: usize,
    env: &[(&str, &str)],
) -> Result<(Vec<f64>, Vec<f64>), String> {
    let out = Command::new(exe)
        .args([CLIENT_COMMAND, "launches", &lib.display().to_string(), &samples.to_string()])
        .envs(env.iter().copied())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("starting a launches client: {e}"))?;
    let line = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("launches client failed ({}): {line}", out.status));
    }
    parse_launches(line.trim())
}

/// The daemons part 2 measures besides the main one: without the compute scheduler, and on a
/// simulator that discards kernels (the pool's own cost per launch).
struct LaunchDaemons<'a> {
    plain: &'a Daemon,
    null: &'a Daemon,
}

fn part2(
    pool: &Side,
    sim: &Side,
    exe: &Path,
    libs: (&Path, &Path),
    daemons: LaunchDaemons<'_>,
) -> Result<Section, String> {
    let (lib, sim_lib) = libs;
    pool.launches(LAUNCHES)?;
    sim.launches(LAUNCHES)?;
    let per_round = LAUNCH_SAMPLES / LAUNCH_ROUNDS;
    let (mut vp, mut vs, mut pp, mut ps) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut vu, mut pu, mut vn, mut pn, mut vd, mut pd) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..LAUNCH_ROUNDS {
        for _ in 0..per_round {
            time_each(1, &mut vp, || pool.launches(LAUNCHES).map(|d| pp.push(d.as_nanos() as f64)))?;
            time_each(1, &mut vs, || sim.launches(LAUNCHES).map(|d| ps.push(d.as_nanos() as f64)))?;
        }
        let plain = ("GPUPOOL_ENDPOINT", daemons.plain.endpoint());
        let (post, total) = launches_client(exe, lib, per_round, &[(plain.0, &plain.1)])?;
        pu.extend(post);
        vu.extend(total);
        let null = ("GPUPOOL_ENDPOINT", daemons.null.endpoint());
        let (post, total) = launches_client(exe, lib, per_round, &[(null.0, &null.1)])?;
        pn.extend(post);
        vn.extend(total);
        let (post, total) = launches_client(exe, sim_lib, per_round, &[DISCARD_KERNELS])?;
        pd.extend(post);
        vd.extend(total);
    }
    let n = LAUNCHES as f64;
    let p = rate_summary(vp, n);
    let s = rate_summary(vs, n);
    let u = rate_summary(vu, n);
    let nul = rate_summary(vn, n);
    let dis = rate_summary(vd, n);
    let of_direct = |x: &Summary| format!(">= 90% of direct {}", pass(x.median >= 0.9 * s.median));
    let mut r = row("empty kernel launches (async) + 1 sync", Unit::PerSec, p, "same, direct into the sim", s);
    r.verdict = of_direct(&p);
    let mut r2 = row("same, daemon --no-compute-scheduler", Unit::PerSec, u, "same, direct into the sim", s);
    r2.verdict = of_direct(&u);
    let mut r3 = row("same, simulator discarding kernels", Unit::PerSec, nul, "same, direct into that simulator", dis);
    r3.verdict = format!(">= 2 M/s {}", pass(nul.median >= 2e6));
    let per = |v: Vec<f64>| summarize(v).median / n;
    let mut notes = vec![
        format!(
            "{LAUNCH_ROUNDS} rounds of {per_round} samples of {LAUNCHES} launches + cuStreamSynchronize each: pool and \
             direct alternately, then client processes: one on a second daemon started with --no-compute-scheduler, \
             one on a third daemon whose simulator discards kernels (GPUPOOL_SIM_KERNELS=discard: each launch is \
             checked, then dropped: a backend that does nothing), one loading that simulator directly"
        ),
        format!(
            "per launch: {:.0} ns through the pool ({:.0} ns of it posting, the rest waiting in cuStreamSynchronize \
             for the daemon to catch up), {:.0} ns without the scheduler ({:.0} ns posting), {:.0} ns direct \
             ({:.0} ns posting); the scheduler's share is the difference of the first two",
            1e9 / p.median,
            per(pp),
            1e9 / u.median,
            per(pu),
            1e9 / s.median,
            per(ps)
        ),
        format!(
            "with kernels discarded: {:.0} ns per launch through the pool ({:.0} ns posting), {:.0} ns direct \
             ({:.0} ns posting): what the pool itself costs per launch",
            1e9 / nul.median,
            per(pn),
            1e9 / dis.median,
            per(pd)
        ),
    ];
    if p.median < 0.9 * s.median {
        notes.push(format!(
            "a forwarded launch: the client encodes and posts a frame, the daemon's session \
             thread decodes it, checks the handles and calls the sim, whose stream worker runs it; \
             on {} CPUs these three threads share the cores",
            cpus()
        ));
    }
    Ok(Section { title: "2. Async launch rate (launches per second)".into(), rows: vec![r, r2, r3], notes })
}

fn part3(pool: &Side, sim: &Side) -> Result<Section, String> {
    let n = COPY_BYTES;
    let src: Vec<u8> = (0..n).map(|i| (i * 7 + 1) as u8).collect();
    let mut dst = vec![0u8; n];
    let mut scratch = vec![0u8; n];
    let mut memcpy = Vec::new();
    // Two memcpys at once (another thread copies its own 64 MiB meanwhile): the rate each
    // gets is what a copy made of two overlapping memory passes can reach on this machine.
    let mut memcpy_pair = Vec::new();
    let (other_src, mut other_dst) = (src.clone(), vec![0u8; n]);
    // (name, pool times, sim times)
    let names = ["HtoD pageable", "DtoH pageable", "HtoD pinned", "DtoH pinned"];
    let mut times: Vec<(Vec<f64>, Vec<f64>)> = vec![Default::default(); names.len()];
    let copy = |side: &Side, which: usize, dst: &mut [u8]| -> Result<(), String> {
        let d = side.d;
        match which {
            0 => ok(call!(d.cuMemcpyHtoD_v2(side.dev_buf, src.as_ptr().cast(), n)), "cuMemcpyHtoD_v2"),
            1 => ok(call!(d.cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), side.dev_buf, n)), "cuMemcpyDtoH_v2"),
            2 => ok(call!(d.cuMemcpyHtoD_v2(side.dev_buf, side.pinned, n)), "cuMemcpyHtoD_v2 (pinned)"),
            _ => ok(call!(d.cuMemcpyDtoH_v2(side.pinned, side.dev_buf, n)), "cuMemcpyDtoH_v2 (pinned)"),
        }
    };
    let (mut sink, mut sink2) = (Vec::new(), Vec::new());
    for i in 0..COPY_WARMUP + COPY_SAMPLES {
        let keep = i >= COPY_WARMUP;
        let v = if keep { &mut memcpy } else { &mut sink };
        time_each(1, v, || {
            // SAFETY: `src` and `scratch` are two distinct live buffers of `n` bytes each
            // (`black_box` hands back the pointer it is given).
            unsafe { std::ptr::copy_nonoverlapping(black_box(src.as_ptr()), black_box(scratch.as_mut_ptr()), n) };
            Ok(())
        })?;
        let v = if keep { &mut memcpy_pair } else { &mut sink };
        let start = std::sync::Barrier::new(2);
        std::thread::scope(|sc| {
            let (os, od, start) = (&other_src, &mut other_dst, &start);
            sc.spawn(move || {
                start.wait();
                od.copy_from_slice(black_box(os));
            });
            start.wait();
            time_each(1, v, || {
                scratch.copy_from_slice(black_box(&src));
                Ok(())
            })
        })?;
        for (w, (tp, ts)) in times.iter_mut().enumerate() {
            let (tp, ts) = if keep { (tp, ts) } else { (&mut sink, &mut sink2) };
            time_each(1, tp, || copy(pool, w, &mut dst))?;
            time_each(1, ts, || copy(sim, w, &mut dst))?;
        }
    }
    black_box(&scratch);
    // Check the data once, outside the timing: HtoD then DtoH returns what was sent.
    for side in [pool, sim] {
        dst.fill(0);
        copy(side, 0, &mut dst)?;
        copy(side, 1, &mut dst)?;
        if dst != src {
            return Err(format!("{}: DtoH did not return the HtoD data", side.d.path.display()));
        }
        // SAFETY: `pinned` is COPY_BYTES (= n) bytes of host memory owned by `side` (see
        // `Side::new`), distinct from `src`; no reference into it is alive here.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), side.pinned.cast::<u8>(), n) };
        copy(side, 2, &mut dst)?;
        // SAFETY: as above.
        unsafe { std::ptr::write_bytes(side.pinned.cast::<u8>(), 0, n) };
        copy(side, 3, &mut dst)?;
        if side.pinned_bytes() != &src[..] {
            return Err(format!("{}: pinned DtoH did not return the pinned HtoD data", side.d.path.display()));
        }
    }
    black_box(&other_dst);
    let bytes = n as f64 / 1e9;
    let m = rate_summary(memcpy, bytes);
    let pair = rate_summary(memcpy_pair, bytes);
    let mut rows = vec![row(
        "memcpy 64 MiB beside another thread's (two-pass ceiling)",
        Unit::GbS,
        pair,
        "memcpy 64 MiB, same run",
        m,
    )];
    for (name, (tp, ts)) in names.iter().zip(times) {
        let p = rate_summary(tp, bytes);
        let s = rate_summary(ts, bytes);
        let mut r = row(&format!("{name}, pool"), Unit::GbS, p, "memcpy 64 MiB, same run", m);
        r.verdict = format!(">= 80% of memcpy {}", pass(p.median >= 0.8 * m.median));
        rows.push(r);
        rows.push(row(&format!("{name}, pool"), Unit::GbS, p, "same copy, direct into the sim", s));
        rows.push(row(&format!("{name}, direct into the sim"), Unit::GbS, s, "memcpy 64 MiB, same run", m));
    }
    let notes = vec![
        format!(
            "64 MiB per copy, {COPY_SAMPLES} samples after {COPY_WARMUP} warm-up; memcpy, then each copy through the pool and direct, round-robin; data checked after timing"
        ),
        "through the pool a pageable copy crosses the shared staging area in slots (HtoD 2 of 256 KiB, \
         DtoH 4 of 512 KiB in flight): the client copies one slot while the daemon copies others into \
         the sim's device memory (the reverse for DtoH), so a copy is two overlapping copies where the \
         direct sim does one; what is in flight fits in a core's cache, so the reader takes a slot from \
         the writer's cache and the staging area never goes to memory, which is what lifts the pool \
         above two memory passes at once (first row); libgpupool's pinned memory is a shared region \
         the daemon maps, so a pinned copy is one request and one pass"
            .into(),
    ];
    Ok(Section { title: "3. Copy bandwidth, 64 MiB (GB/s = 10^9 bytes/s)".into(), rows, notes })
}

fn part4(exe: &Path, pool_lib: &Path, sim_lib: &Path, daemon: &Daemon) -> Result<Section, String> {
    let endpoint = daemon.endpoint();
    let endpoint = endpoint.as_str();
    let one = |lib: &Path| -> Result<([f64; 3], f64), String> {
        let t = Instant::now();
        let out = Command::new(exe)
            .args([CLIENT_COMMAND, "start"])
            .arg(lib)
            .env("GPUPOOL_ENDPOINT", endpoint)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("starting a client: {e}"))?;
        let wall = t.elapsed().as_nanos() as f64;
        if !out.status.success() {
            return Err(format!("start client ({}) failed: {}", lib.display(), out.status));
        }
        let line = String::from_utf8_lossy(&out.stdout);
        Ok((parse_start(line.trim())?, wall))
    };
    one(pool_lib)?;
    one(sim_lib)?;
    let mark = daemon.log_len();
    let mut v: [[Vec<f64>; 5]; 2] = Default::default();
    for _ in 0..START_SAMPLES {
        for (k, lib) in [pool_lib, sim_lib].into_iter().enumerate() {
            let (t, wall) = one(lib)?;
            v[k][0].push(t[0]);
            v[k][1].push(t[1]);
            v[k][2].push(t[2]);
            v[k][3].push(t[1] + t[2]);
            v[k][4].push(wall);
        }
    }
    let [p, s] = v;
    let names = [
        "dlopen of the library",
        "cuInit (pool: connect + shm attach + hello)",
        "first cuDeviceGetCount after cuInit",
        "cuInit -> first reply (the two above)",
        "whole client process (spawn .. exit)",
    ];
    let mut rows = Vec::new();
    for (i, (vp, vs)) in p.into_iter().zip(s).enumerate() {
        let ps = summarize(vp);
        let mut r = row(names[i], Unit::Ns, ps, "same process, sim loaded directly", summarize(vs));
        if i == 3 {
            r.verdict = format!("<= 1 ms {}", pass(ps.median <= 1e6));
        }
        rows.push(r);
    }
    let mut notes = vec![format!(
        "{START_SAMPLES} client processes of each kind, alternately: this binary re-executed as `{CLIENT_COMMAND} start LIB`, timing itself; the parent times spawn to exit"
    )];
    let hello = daemon.hello_us_since(mark);
    if !hello.is_empty() {
        let h = summarize(hello);
        notes.push(format!(
            "the daemon's side of cuInit (its log's hello_us: accept to hello reply, shared-memory setup included), {} sessions: p50 {}, p99 {}",
            h.samples,
            fmt_ns(h.median * 1e3),
            fmt_ns(h.p99 * 1e3)
        ));
    }
    Ok(Section { title: "4. Client start-up".into(), rows, notes })
}

struct Phase {
    clients: usize,
    window: Duration,
    samples: Vec<f64>,
    /// Round trips of each client in the window.
    counts: Vec<usize>,
    /// From the window's opening to the last reply of any client.
    max_wall_ns: f64,
}

/// Jain's fairness index of the clients' round-trip counts: (sum x)^2 / (n sum x^2), 1 when all
/// made the same number, 1/n when one client made them all.
fn jain_fairness(counts: &[usize]) -> f64 {
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let squares: f64 = counts.iter().map(|&c| (c as f64).powi(2)).sum();
    if squares == 0.0 { 0.0 } else { sum * sum / (counts.len() as f64 * squares) }
}

/// `clients` processes (`gpupool-bench __pool-client` with `client`, the rtt or echo client and
/// its argument), each connected and warm, make round trips in one common window.
fn concurrent(
    exe: &Path,
    client: [&OsStr; 2],
    endpoint: &str,
    clients: usize,
    window: Duration,
) -> Result<Phase, String> {
    let mut kids = Kids(Vec::with_capacity(clients));
    for _ in 0..clients {
        let c = Command::new(exe)
            .arg(CLIENT_COMMAND)
            .args(client)
            .env("GPUPOOL_ENDPOINT", endpoint)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting client {}: {e}", kids.0.len()))?;
        kids.0.push(c);
    }
    let mut readers = Vec::with_capacity(clients);
    for c in &mut kids.0 {
        let mut r = BufReader::new(c.stdout.take().ok_or("no stdout")?);
        let mut line = String::new();
        r.read_line(&mut line).map_err(|e| e.to_string())?;
        if line.trim() != "ready" {
            return Err(format!("a client did not get ready: {:?}", line.trim()));
        }
        readers.push(r);
    }
    let open = monotonic_ns() + WINDOW_LEAD.as_nanos() as f64;
    let go = format!("go {open:.0} {:.0}\n", open + window.as_nanos() as f64);
    for c in &mut kids.0 {
        let mut stdin = c.stdin.take().ok_or("no stdin")?;
        stdin.write_all(go.as_bytes()).map_err(|e| e.to_string())?;
    }
    let mut phase = Phase { clients, window, samples: Vec::new(), counts: Vec::new(), max_wall_ns: 0.0 };
    for (c, mut r) in kids.0.iter_mut().zip(readers) {
        let mut s = String::new();
        r.read_to_string(&mut s).map_err(|e| e.to_string())?;
        let st = c.wait().map_err(|e| e.to_string())?;
        if !st.success() {
            return Err(format!("a round-trip client failed: {st}"));
        }
        let (wall, v) = parse_rtt(s.trim())?;
        phase.counts.push(v.len());
        phase.max_wall_ns = phase.max_wall_ns.max(wall);
        phase.samples.extend(v);
    }
    Ok(phase)
}

fn part5(exe: &Path, lib: &Path, endpoint: &str) -> Result<Section, String> {
    let mut phases = Vec::new();
    for (k, window) in CONCURRENCY {
        phases.push(concurrent(exe, [OsStr::new("rtt"), lib.as_os_str()], endpoint, k, window)?);
    }
    let one = summarize(phases[0].samples.clone());
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let rate = |ph: &Phase| ph.samples.len() as f64 / ph.max_wall_ns * 1e9;
    let one_rate = rate(&phases[0]);
    for ph in &phases {
        let s = summarize(ph.samples.clone());
        let mut r = row(
            &format!("cuCtxSynchronize, {} client process{}", ph.clients, if ph.clients == 1 { "" } else { "es" }),
            Unit::Ns,
            s,
            "1 client process",
            one,
        );
        r.verdict = rtt_verdict(&s);
        rows.push(r);
        notes.push(format!(
            "{} client{}: {} round trips in a common {:?} window (per client {}..{}, Jain's fairness {:.2}), {:.0} k round trips/s in aggregate{}",
            ph.clients,
            if ph.clients == 1 { "" } else { "s" },
            ph.samples.len(),
            ph.window,
            ph.counts.iter().min().unwrap_or(&0),
            ph.counts.iter().max().unwrap_or(&0),
            jain_fairness(&ph.counts),
            rate(ph) / 1e3,
            if ph.clients == 1 {
                String::new()
            } else {
                let share = rate(ph) / one_rate;
                format!(", {:.0}% of 1 client's (target >= 100% {})", share * 100.0, pass(share >= 1.0))
            },
        ));
    }
    notes.push(echo_ceiling(exe, endpoint, one_rate, rate(&phases[phases.len() - 1]))?);
    let n = cpus();
    if phases.iter().any(|p| p.clients > n) {
        notes.push(format!(
            "{n} CPUs: with more clients than cores, every client and its daemon session thread \
             spin and then sleep in turn; a round trip then waits for the scheduler (time slices \
             of milliseconds), so the p50/p99 of many clients measures the CPU share, not the pool"
        ));
    }
    Ok(Section {
        title:
            "5. Sync round trip with concurrent client processes (each client times its own calls; aggregate p50/p99)"
                .into(),
        rows,
        notes,
    })
}

/// Part 5's clients with nothing of the pool behind the transport ([`crate::ceiling`]): one
/// client, then the most clients part 5 has with each kind of echo server. A note that puts
/// the pool's rates (`pool_one`: one client; `pool_most`: the most clients) beside them, so
/// that a missed target says whether the pool or the machine fell short.
fn echo_ceiling(exe: &Path, endpoint: &str, pool_one: f64, pool_most: f64) -> Result<String, String> {
    use crate::ceiling::{EchoServer, Server};
    let socket = std::env::temp_dir().join(format!("gpupool-bench-echo-{}.sock", std::process::id()));
    let (one_window, (most, most_window)) = (CONCURRENCY[0].1, CONCURRENCY[CONCURRENCY.len() - 1]);
    let mut rates = Vec::new();
    for (server, clients, window) in [
        (Server::ThreadPerClient, 1, one_window),
        (Server::ThreadPerClient, most, most_window),
        (Server::OnePoller, most, most_window),
    ] {
        let _echo = EchoServer::start(&socket, server)?;
        let ph = concurrent(exe, [OsStr::new("echo"), socket.as_os_str()], endpoint, clients, window)?;
        rates.push((ph.samples.len() as f64 / ph.max_wall_ns * 1e9, jain_fairness(&ph.counts)));
    }
    let [(one, _), (per_client, per_client_jain), (poller, poller_jain)] = rates[..] else {
        unreachable!("three phases")
    };
    let best = per_client.max(poller);
    Ok(format!(
        "this machine's ceiling (`__pool-client echo`: the same client processes echoing 64 B over the \
         same shared-memory transport and wait policy to a server that does nothing else): 1 client {:.0} k/s; \
         {most} clients {:.0} k/s with {} ({:.0}% of 1 client's, Jain's fairness {:.2}), {:.0} k/s with {} ({:.0}%, \
         {:.2}). The pool's \
         {most} clients reach {:.0}% of the first ceiling (its design's); the higher ceiling is {:.0}% of the \
         pool's 1 client, so the target is {} on {} CPUs",
        one / 1e3,
        per_client / 1e3,
        Server::ThreadPerClient.describe(),
        per_client / one * 100.0,
        per_client_jain,
        poller / 1e3,
        Server::OnePoller.describe(),
        poller / one * 100.0,
        poller_jain,
        pool_most / per_client * 100.0,
        best / pool_one * 100.0,
        if best >= pool_one { "within reach" } else { "out of this machine's reach with either design" },
        cpus(),
    ))
}

pub fn run() -> Result<PoolRun, String> {
    let started = Instant::now();
    let load_start = loadavg();
    let dir = std::env::temp_dir().join(format!("gpupool-bench-{}", std::process::id()));
    let socket_url = format!("unix://{}", dir.join("s.sock").display());
    // SAFETY: this runs first in `pool`, before the bench has started any thread or loaded
    // any library that could read the environment concurrently.
    unsafe { std::env::set_var("GPUPOOL_ENDPOINT", &socket_url) };
    build_pool()?;
    let sim_dir = match std::env::var_os(gpupool_e2e::LIBDIR_ENV) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => build_sim_libdir(true)?,
    };
    let sim_lib = sim_dir.join("libcuda.so.1");
    let rel = release_dir();
    let daemon_exe = rel.join("gpupool");
    let pool_lib = rel.join("libgpupool.so");
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    // The echo process is forked before anything starts threads in this process.
    let mut echo = Echo::start()?;
    let mut daemon = Daemon::start(&daemon_exe, dir)?;
    if daemon.endpoint() != socket_url {
        return Err("endpoint mismatch".into());
    }
    let clock = clock_ns();

    let pool = Driver::load(&pool_lib)?;
    let sim = Driver::load(&sim_lib)?;
    let pool_side = Side::new(&pool)?;
    let sim_side = Side::new(&sim)?;
    // Each section's title ends with how long it took.
    let timed = |t: Instant, s: Result<Section, String>| {
        s.map(|mut s| {
            let _ = write!(s.title, " [{:.1} s]", t.elapsed().as_secs_f64());
            s
        })
    };
    // GPUPOOL_BENCH_PARTS=2,3 runs only those parts (while working on one figure).
    let only = std::env::var("GPUPOOL_BENCH_PARTS").ok().filter(|v| !v.trim().is_empty());
    let want = |n: char| only.as_deref().is_none_or(|v| v.split(',').any(|p| p.trim().starts_with(n)));
    let mut sections = Vec::new();
    if want('1') {
        sections.push(timed(Instant::now(), part1(&pool, &sim, &mut echo))?);
    }
    drop(echo);
    if want('2') {
        let plain = Daemon::start_with(
            &daemon_exe,
            std::env::temp_dir().join(format!("gpupool-bench-{}-plain", std::process::id())),
            &["--no-compute-scheduler".to_string()],
        )?;
        let null = Daemon::start_env(
            &daemon_exe,
            std::env::temp_dir().join(format!("gpupool-bench-{}-null", std::process::id())),
            &[],
            &[DISCARD_KERNELS],
        )?;
        let daemons = LaunchDaemons { plain: &plain, null: &null };
        sections.push(timed(Instant::now(), part2(&pool_side, &sim_side, &exe, (&pool_lib, &sim_lib), daemons))?);
    }
    if want('3') {
        sections.push(timed(Instant::now(), part3(&pool_side, &sim_side))?);
    }
    drop(pool_side);
    drop(sim_side);
    if want('4') {
        let t = Instant::now();
        sections.push(timed(t, part4(&exe, &pool_lib, &sim_lib, &daemon))?);
    }
    if want('5') {
        let t = Instant::now();
        sections.push(timed(t, part5(&exe, &pool_lib, &socket_url))?);
    }
    if !daemon.alive() {
        return Err(format!("the daemon died during the run: {}", daemon.log()));
    }
    drop(daemon);
    Ok(PoolRun {
        daemon: daemon_exe.display().to_string(),
        client_lib: pool_lib.display().to_string(),
        sim_lib: sim_lib.display().to_string(),
        cpus: cpus(),
        clock_ns: clock,
        wall_s: started.elapsed().as_secs_f64(),
        load: (load_start, loadavg()),
        sections,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_lines_parse() {
        assert_eq!(parse_start("start 10 2000 30").unwrap(), [10.0, 2000.0, 30.0]);
        assert!(parse_start("start 10 20").is_err());
        assert!(parse_start("start 10 20 30 40").is_err());
        assert!(parse_start("rtt 10 20 30").is_err());
        assert!(parse_start("start 1 x 3").is_err());
    }

    #[test]
    fn rtt_lines_parse() {
        let (wall, v) = parse_rtt("rtt 5000 3 100 200 300").unwrap();
        assert_eq!(wall, 5000.0);
        assert_eq!(v, vec![100.0, 200.0, 300.0]);
        assert_eq!(parse_rtt("rtt 7 0").unwrap(), (7.0, vec![]));
        assert!(parse_rtt("rtt 5000 3 100 200").is_err());
        assert!(parse_rtt("rtt 5000 1 100 200").is_err());
        assert!(parse_rtt("start 1 2 3").is_err());
        assert!(parse_rtt("rtt").is_err());
    }

    #[test]
    fn launches_lines_parse() {
        let (post, total) = parse_launches("launches 2 10 30 11 40").unwrap();
        assert_eq!(post, vec![10.0, 11.0]);
        assert_eq!(total, vec![30.0, 40.0]);
        assert!(parse_launches("launches 2 10 30 11").is_err());
        assert!(parse_launches("launches 1 10 30 11 40").is_err());
        assert!(parse_launches("rtt 1 2").is_err());
    }

    #[test]
    fn hello_us_comes_from_session_start_lines() {
        let line = "2026-11-22T06:33:21.558311Z  INFO gpupool::daemon::session: session start session=1 pid=18678 uid=0 gid=0 tenant=default client=/x memory=MemoryQuota { default: None, devices: {} } compute=100 clamped=0 hello_us=209";
        assert_eq!(parse_hello_us(line), Some(209.0));
        assert_eq!(parse_hello_us("INFO session end session=1 cleanup_us=25"), None);
        assert_eq!(parse_hello_us("INFO session start session=1"), None);
    }

    #[test]
    fn rates_use_the_slow_tail_for_p99() {
        // 100 samples of 1..=100 ms for 1000 units: median 50 ms -> 20000/s, p99 99 ms.
        let s = rate_summary((1..=100).map(|i| i as f64 * 1e6).collect(), 1000.0);
        assert!((s.median - 20_000.0).abs() < 1e-6);
        assert!((s.p99 - 1000.0 / 0.099).abs() < 1e-6);
        assert!(s.p99 < s.median);
        assert_eq!(s.samples, 100);
    }

    #[test]
    fn round_trip_verdicts() {
        let s = |median, p99| Summary { median, p99, samples: 1 };
        assert_eq!(rtt_verdict(&s(900.0, 4000.0)), "p50<=1us PASS, p99<=5us PASS");
        assert_eq!(rtt_verdict(&s(1500.0, 4000.0)), "p50<=1us MISS, p99<=5us PASS");
        assert_eq!(rtt_verdict(&s(900.0, 6000.0)), "p50<=1us PASS, p99<=5us MISS");
    }

    #[test]
    fn values_and_ratios_format() {
        assert_eq!(fmt_value(Unit::Ns, 812.0), "812 ns");
        assert_eq!(fmt_value(Unit::Ns, 1500.0), "1.50 us");
        assert_eq!(fmt_value(Unit::Ns, 56_200.0), "56.2 us");
        assert_eq!(fmt_value(Unit::Ns, 2_500_000.0), "2.50 ms");
        assert_eq!(fmt_value(Unit::PerSec, 2_310_000.0), "2.31 M/s");
        assert_eq!(fmt_value(Unit::PerSec, 450_000.0), "450 k/s");
        assert_eq!(fmt_value(Unit::GbS, 9.814), "9.81 GB/s");
        assert_eq!(fmt_ratio(Unit::Ns, 2.345), "2.35x");
        assert_eq!(fmt_ratio(Unit::GbS, 0.8), "80%");
    }
}
