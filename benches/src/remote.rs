//! The `remote` figures: the network transport (`tls://`, `tcp://`) between `libgpupool.so`
//! and the release daemon on loopback, as ratios to plain-TCP baselines measured in the same run.
//!
//! The bench builds the daemon and the interposer (release), makes a CA and a daemon
//! certificate with `gpupool cert`, writes a quota config with one token tenant, and starts
//! `gpupool daemon --sim` on a unix socket, `tls://127.0.0.1:0` and `tcp://127.0.0.1:0` (the
//! ports it bound come from its "ready" log line). The interposer reads its endpoint once per
//! process, so each endpoint gets its own client process: this binary re-executed as
//! `gpupool-bench __remote-client client LIB` with `GPUPOOL_ENDPOINT` / `GPUPOOL_TOKEN` /
//! `GPUPOOL_CA` set. A client sets up a context, a stream, the empty kernel and 64 MiB of device
//! memory, then answers one command per stdin line (`rtt N`, `copy`, `launch N DEADLINE_MS`,
//! `check`) with one stdout line of its own timings, so the parent can interleave the endpoints
//! and the baselines round by round.
//!
//! Baselines: a second helper process (`__remote-client peer`) serves plain blocking TCP on
//! loopback with `TCP_NODELAY`: a 64-byte echo (the ping-pong), a 64 MiB sink that reads into a
//! buffer and acknowledges, and a 64 MiB source; the bench's main thread is the other end. The
//! same sink and source in TLS (rustls, the daemon's certificate) show what TLS alone costs.
//!
//! Added delay (part 3) is `tc qdisc add dev lo root netem delay D`, removed by a guard's `Drop`
//! (also on error and panic). Where `tc` or netem is missing, delay relays on loopback stand in
//! (a client of their own through one, the raw ping-pong through another); the notes say which.

use std::ffi::c_void;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, ExitCode, Stdio};
use std::ptr::null_mut;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use gpupool_e2e::cu::{CUdeviceptr, CUfunction, CUstream};
use gpupool_e2e::delay_relay::DelayRelay;
use gpupool_e2e::{Driver, EMPTY_PTX, call};

use crate::pool::{
    Daemon, Kids, Unit, build_pool, clock_ns, fmt_ns, fmt_ratio, fmt_value, loadavg, pass, primary_context,
    rate_summary, release_dir, time_each,
};
use crate::report::{cpus, grid, json_str, json_summary};
use crate::sim::ok;
use crate::stats::{Summary, summarize};

/// The hidden subcommand of the helper processes.
pub const CLIENT_COMMAND: &str = "__remote-client";

const FRAME: usize = 64;
const COPY_BYTES: usize = 64 << 20;
/// Part 1: rounds of (tls, tcp, unix, raw TCP) round trips, interleaved.
const RTT_ROUNDS: usize = 10;
const RTT_PER_ROUND: usize = 1000;
const RTT_WARMUP: usize = 300;
/// Part 2: 64 MiB copies per direction and endpoint, after warm-up.
const COPY_SAMPLES: usize = 9;
const COPY_WARMUP: usize = 2;
/// Part 3: launches per sample (a sample stops early at the deadline), samples per delay.
const LAUNCHES: usize = 10_000;
const LAUNCH_SAMPLES: usize = 7;
const LAUNCH_DEADLINE: Duration = Duration::from_secs(3);
/// Round trips measured under each added delay, for the RTT column.
const DELAY_RTTS: usize = 200;
/// Added delay on lo, microseconds (each direction).
const DELAYS_US: [u32; 3] = [0, 100, 1000];
/// How long the parent waits for one reply of a client before calling it hung.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------

pub struct Row {
    name: String,
    unit: Unit,
    /// The figure, or why it could not be measured.
    value: Result<Summary, String>,
    base_name: String,
    base: Option<Summary>,
    /// The target from the task, with PASS/MISS; empty where the row has none.
    verdict: String,
    /// Part 3: the delay added on lo (each way), and the round trips measured under it
    /// (forwarded `cuCtxSynchronize` over tls://, raw TCP ping-pong).
    delay_us: Option<u32>,
    rtt: Option<(Summary, Summary)>,
}

pub struct Section {
    title: String,
    rows: Vec<Row>,
    notes: Vec<String>,
}

pub struct RemoteRun {
    daemon: String,
    client_lib: String,
    endpoints: Vec<String>,
    cpus: usize,
    /// Which CPUs the server and the client side ran on.
    placement: String,
    clock_ns: f64,
    wall_s: f64,
    load: (String, String),
    sections: Vec<Section>,
}

fn row(name: &str, unit: Unit, value: Summary, base_name: &str, base: Summary) -> Row {
    Row {
        name: name.into(),
        unit,
        value: Ok(value),
        base_name: base_name.into(),
        base: Some(base),
        verdict: String::new(),
        delay_us: None,
        rtt: None,
    }
}

fn ratios(r: &Row) -> Option<(f64, f64)> {
    match (&r.value, &r.base) {
        (Ok(v), Some(b)) => Some((v.median / b.median, v.p99 / b.p99)),
        _ => None,
    }
}

fn unit_name(u: Unit) -> &'static str {
    match u {
        Unit::Ns => "ns",
        Unit::PerSec => "per_s",
        Unit::GbS => "GB/s",
    }
}

pub fn table(run: &RemoteRun) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "gpupool-bench remote: daemon {} --sim, client {}", run.daemon, run.client_lib);
    let _ = writeln!(out, "endpoints: {}", run.endpoints.join(", "));
    let _ = writeln!(
        out,
        "{} CPUs; run took {:.1} s; load average (1 min) {} at the start, {} at the end (other work on the machine skews every figure)",
        run.cpus, run.wall_s, run.load.0, run.load.1
    );
    let _ = writeln!(out, "placement: {}", run.placement);
    let _ = writeln!(
        out,
        "p50 = median, p99 = 99th percentile of per-sample time (for rates: the rate at that slow sample);\n\
         ratio = figure / baseline (time: x the baseline's; rate: share of the baseline's); clock read pair {:.0} ns, inside every timed call\n",
        run.clock_ns
    );
    let dash = || "-".to_string();
    for s in &run.sections {
        let _ = writeln!(out, "{}", s.title);
        let delay_section = s.rows.iter().any(|r| r.delay_us.is_some());
        if delay_section {
            let head = [
                "figure",
                "added delay (each way)",
                "RTT: cuCtxSynchronize p50",
                "RTT: raw TCP p50",
                "p50",
                "p99",
                "baseline",
                "base p50",
                "p50 ratio",
            ];
            let rows: Vec<Vec<String>> = s
                .rows
                .iter()
                .map(|r| {
                    let delay = r.delay_us.map_or_else(dash, |d| format!("{} ms", f64::from(d) / 1000.0));
                    let (sync, tcp) =
                        r.rtt.map_or_else(|| (dash(), dash()), |(a, b)| (fmt_ns(a.median), fmt_ns(b.median)));
                    let (p50, p99) = match &r.value {
                        Ok(v) => (fmt_value(r.unit, v.median), fmt_value(r.unit, v.p99)),
                        Err(_) => ("unavailable".to_string(), dash()),
                    };
                    vec![
                        r.name.clone(),
                        delay,
                        sync,
                        tcp,
                        p50,
                        p99,
                        r.base_name.clone(),
                        r.base.map_or_else(dash, |b| fmt_value(r.unit, b.median)),
                        ratios(r).map_or_else(dash, |(p50, _)| fmt_ratio(r.unit, p50)),
                    ]
                })
                .collect();
            out.push_str(&grid(&head, &rows, &[0, 4, 6]));
        } else {
            let head = ["figure", "p50", "p99", "baseline", "base p50", "base p99", "p50 ratio", "p99 ratio", "target"];
            let rows: Vec<Vec<String>> = s
                .rows
                .iter()
                .map(|r| {
                    let (p50, p99) = match &r.value {
                        Ok(v) => (fmt_value(r.unit, v.median), fmt_value(r.unit, v.p99)),
                        Err(why) => (format!("unavailable: {why}"), dash()),
                    };
                    let (r50, r99) = ratios(r)
                        .map_or_else(|| (dash(), dash()), |(a, b)| (fmt_ratio(r.unit, a), fmt_ratio(r.unit, b)));
                    vec![
                        r.name.clone(),
                        p50,
                        p99,
                        r.base_name.clone(),
                        r.base.map_or_else(dash, |b| fmt_value(r.unit, b.median)),
                        r.base.map_or_else(dash, |b| fmt_value(r.unit, b.p99)),
                        r50,
                        r99,
                        r.verdict.clone(),
                    ]
                })
                .collect();
            out.push_str(&grid(&head, &rows, &[0, 3, 8]));
        }
        for n in &s.notes {
            let _ = writeln!(out, "  note: {n}");
        }
        out.push('\n');
    }
    out
}

pub fn json(run: &RemoteRun) -> String {
    let opt = |s: Option<Summary>| s.map_or_else(|| "null".to_string(), |s| json_summary(&s));
    let num = |x: Option<f64>| x.filter(|x| x.is_finite()).map_or_else(|| "null".to_string(), |x| x.to_string());
    let mut rows = Vec::new();
    for s in &run.sections {
        for r in &s.rows {
            let rt = ratios(r);
            rows.push(format!(
                "    {{\"section\": {}, \"name\": {}, \"unit\": {}, \"value\": {}, \"unavailable\": {}, \"baseline\": {{\"name\": {}, \"summary\": {}}}, \"ratio_p50\": {}, \"ratio_p99\": {}, \"verdict\": {}, \"added_delay_us\": {}, \"rtt_cuCtxSynchronize_ns\": {}, \"rtt_raw_tcp_ns\": {}}}",
                json_str(&s.title),
                json_str(&r.name),
                json_str(unit_name(r.unit)),
                opt(r.value.as_ref().ok().copied()),
                r.value.as_ref().err().map_or_else(|| "null".to_string(), |e| json_str(e)),
                json_str(&r.base_name),
                opt(r.base),
                num(rt.map(|x| x.0)),
                num(rt.map(|x| x.1)),
                json_str(&r.verdict),
                r.delay_us.map_or_else(|| "null".to_string(), |d| d.to_string()),
                opt(r.rtt.map(|x| x.0)),
                opt(r.rtt.map(|x| x.1)),
            ));
        }
    }
    let notes: Vec<String> =
        run.sections.iter().flat_map(|s| s.notes.iter().map(|n| format!("    {}", json_str(n)))).collect();
    let endpoints: Vec<String> = run.endpoints.iter().map(|e| json_str(e)).collect();
    format!(
        "{{\n  \"bench\": \"remote\",\n  \"daemon\": {},\n  \"client_library\": {},\n  \"endpoints\": [{}],\n  \"cpus\": {},\n  \"placement\": {},\n  \"wall_s\": {},\n  \"load_average_1min\": [{}, {}],\n  \"clock_ns\": {},\n  \"p99_meaning\": \"99th percentile of per-sample time; for rates the rate at that sample\",\n  \"rows\": [\n{}\n  ],\n  \"notes\": [\n{}\n  ]\n}}\n",
        json_str(&run.daemon),
        json_str(&run.client_lib),
        endpoints.join(", "),
        run.cpus,
        json_str(&run.placement),
        run.wall_s,
        json_str(&run.load.0),
        json_str(&run.load.1),
        run.clock_ns,
        rows.join(",\n"),
        notes.join(",\n"),
    )
}

// ---------------------------------------------------------------------------------------
// Helper processes: this binary re-executed.
// ---------------------------------------------------------------------------------------

/// `gpupool-bench __remote-client client LIB` or `... peer`.
pub fn client_main(args: &[String]) -> ExitCode {
    let r = match args {
        [mode, lib] if mode == "client" => client(Path::new(lib)),
        [mode, cert, key] if mode == "peer" => peer(Path::new(cert), Path::new(key)),
        _ => Err(format!("usage: gpupool-bench {CLIENT_COMMAND} client LIB | peer CERT KEY")),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpupool-bench {CLIENT_COMMAND}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What a client process holds: the driver, a non-blocking stream with the empty kernel,
/// 64 MiB of device memory and two 64 MiB pageable host buffers.
struct ClientState {
    d: Driver,
    stream: CUstream,
    func: CUfunction,
    dev: CUdeviceptr,
    src: Vec<u8>,
    dst: Vec<u8>,
}

impl ClientState {
    fn new(lib: &Path) -> Result<ClientState, String> {
        let d = Driver::load(lib)?;
        primary_context(&d)?;
        let mut stream = null_mut();
        ok(call!(d.cuStreamCreate(&mut stream, 1)), "cuStreamCreate")?;
        let mut module = null_mut();
        ok(call!(d.cuModuleLoadData(&mut module, EMPTY_PTX.as_ptr().cast())), "cuModuleLoadData")?;
        let mut func = null_mut();
        ok(call!(d.cuModuleGetFunction(&mut func, module, c"empty".as_ptr())), "cuModuleGetFunction")?;
        let mut dev = 0;
        ok(call!(d.cuMemAlloc_v2(&mut dev, COPY_BYTES)), "cuMemAlloc_v2 64 MiB")?;
        // Both buffers are written here, so page faults stay out of the timed copies.
        let src: Vec<u8> = (0..COPY_BYTES).map(|i| (i * 7 + 1) as u8).collect();
        let dst = vec![0x33u8; COPY_BYTES];
        Ok(ClientState { d, stream, func, dev, src, dst })
    }

    fn htod(&self) -> Result<(), String> {
        let d = &self.d;
        ok(call!(d.cuMemcpyHtoD_v2(self.dev, self.src.as_ptr().cast(), COPY_BYTES)), "cuMemcpyHtoD_v2")
    }

    fn dtoh(&mut self) -> Result<(), String> {
        let d = &self.d;
        ok(call!(d.cuMemcpyDtoH_v2(self.dst.as_mut_ptr().cast(), self.dev, COPY_BYTES)), "cuMemcpyDtoH_v2")
    }

    /// Up to `n` empty launches on the stream (fewer if `deadline` passes first), then one
    /// `cuStreamSynchronize`; returns how many were launched.
    fn launches(&self, n: usize, deadline: Instant) -> Result<usize, String> {
        let d = &self.d;
        let mut p0: u64 = 0;
        let mut p1: u32 = 0;
        let mut params: [*mut c_void; 2] = [(&raw mut p0).cast(), (&raw mut p1).cast()];
        let mut done = 0;
        while done < n {
            let r =
                call!(d.cuLaunchKernel(self.func, 1, 1, 1, 1, 1, 1, 0, self.stream, params.as_mut_ptr(), null_mut()));
            ok(r, "cuLaunchKernel")?;
            done += 1;
            if done % 256 == 0 && Instant::now() >= deadline {
                break;
            }
        }
        ok(call!(d.cuStreamSynchronize(self.stream)), "cuStreamSynchronize")?;
        Ok(done)
    }

    /// One command line -> one reply line (without "ok ").
    fn command(&mut self, line: &str) -> Result<String, String> {
        let f: Vec<&str> = line.split_whitespace().collect();
        let arg = |i: usize| -> Result<u64, String> {
            f.get(i).and_then(|v| v.parse().ok()).ok_or_else(|| format!("bad command {line:?}"))
        };
        match f.first().copied() {
            Some("rtt") => {
                let n = arg(1)? as usize;
                let d = &self.d;
                let mut v = Vec::with_capacity(n);
                time_each(n, &mut v, || ok(call!(d.cuCtxSynchronize()), "cuCtxSynchronize"))?;
                Ok(v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(" "))
            }
            Some("copy") => {
                let t = Instant::now();
                self.htod()?;
                let htod = t.elapsed().as_nanos();
                let t = Instant::now();
                self.dtoh()?;
                let dtoh = t.elapsed().as_nanos();
                Ok(format!("{htod} {dtoh}"))
            }
            Some("launch") => {
                let (n, ms) = (arg(1)? as usize, arg(2)?);
                let t = Instant::now();
                let done = self.launches(n, t + Duration::from_millis(ms))?;
                Ok(format!("{done} {}", t.elapsed().as_nanos()))
            }
            Some("check") => {
                self.htod()?;
                self.dst.fill(0);
                self.dtoh()?;
                if self.dst != self.src {
                    let at = self.dst.iter().zip(&self.src).position(|(a, b)| a != b).unwrap_or(0);
                    return Err(format!("DtoH did not return the HtoD data (first difference at byte {at})"));
                }
                Ok(String::new())
            }
            _ => Err(format!("unknown command {line:?}")),
        }
    }
}

fn client(lib: &Path) -> Result<(), String> {
    let mut st = ClientState::new(lib)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").and_then(|_| out.flush()).map_err(|e| e.to_string())?;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let reply = st.command(line.trim());
        let text = match &reply {
            Ok(s) => format!("ok {s}"),
            Err(e) => format!("err {e}"),
        };
        writeln!(out, "{}", text.trim_end()).and_then(|_| out.flush()).map_err(|e| e.to_string())?;
        reply?;
    }
    Ok(())
}

/// The raw side of the baselines: prints `port N tls M`, then serves every connection on
/// its own thread by the connection's first byte: `p` echoes 64-byte frames, `r` reads
/// 64 MiB into a buffer and answers one byte, `s` sends 64 MiB for every byte it reads. Port
/// M is the same service in TLS (rustls, the daemon's certificate), for the TLS reference.
/// Exits when stdin closes.
fn peer(cert: &Path, key: &Path) -> Result<(), String> {
    let tls = gpupool_protocol::transport::net::tls::server_config(cert, key)?;
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let lt = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let port = |l: &TcpListener| l.local_addr().map(|a| a.port()).map_err(|e| e.to_string());
    println!("port {} tls {}", port(&l)?, port(&lt)?);
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || {
                s.set_nodelay(true)?;
                serve(s)
            });
        }
    });
    std::thread::spawn(move || {
        for s in lt.incoming().flatten() {
            let tls = tls.clone();
            std::thread::spawn(move || -> std::io::Result<()> {
                s.set_nodelay(true)?;
                let conn = rustls::ServerConnection::new(tls).map_err(std::io::Error::other)?;
                serve(rustls::StreamOwned::new(conn, s))
            });
        }
    });
    let mut sink = String::new();
    let _ = std::io::stdin().read_to_string(&mut sink);
    Ok(())
}

fn serve(mut s: impl Read + Write) -> std::io::Result<()> {
    let mut mode = [0u8; 1];
    s.read_exact(&mut mode)?;
    match mode[0] {
        b'p' => {
            let mut buf = [0u8; FRAME];
            loop {
                s.read_exact(&mut buf)?;
                s.write_all(&buf)?;
                s.flush()?;
            }
        }
        b'r' => {
            let mut buf = vec![0u8; COPY_BYTES];
            loop {
                s.read_exact(&mut buf)?;
                s.write_all(&[buf[COPY_BYTES - 1]])?;
                s.flush()?;
            }
        }
        b's' => {
            let buf: Vec<u8> = (0..COPY_BYTES).map(|i| (i * 7 + 1) as u8).collect();
            let mut req = [0u8; 1];
            loop {
                s.read_exact(&mut req)?;
                s.write_all(&buf)?;
                s.flush()?;
            }
        }
        _ => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------
// The parent's ends of the helpers.
// ---------------------------------------------------------------------------------------

/// A client process on one endpoint. Its stdout lines arrive through a reader thread, so a
/// hung client becomes an error after [`REPLY_TIMEOUT`] instead of a hung bench.
struct Client {
    label: String,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    kids: Kids,
}

impl Client {
    fn start(exe: &Path, lib: &Path, label: &str, env: &[(&str, String)]) -> Result<Client, String> {
        let mut cmd = Command::new(exe);
        cmd.args([CLIENT_COMMAND, "client"]).arg(lib);
        for v in ["GPUPOOL_ENDPOINT", "GPUPOOL_TOKEN", "GPUPOOL_CA", "LD_PRELOAD"] {
            cmd.env_remove(v);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting the {label} client: {e}"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines() {
                let Ok(l) = l else { return };
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        let mut c = Client { label: label.into(), stdin, lines, kids: Kids(vec![child]) };
        let first = c.line("start-up (cuInit, context, module, 64 MiB cuMemAlloc)")?;
        if first != "ready" {
            return Err(format!("{label} client: expected ready, got {first:?}"));
        }
        Ok(c)
    }

    fn line(&mut self, what: &str) -> Result<String, String> {
        match self.lines.recv_timeout(REPLY_TIMEOUT) {
            Ok(l) => Ok(l),
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "{} client: no reply to {what} within {} s (hung; the process is killed)",
                self.label,
                REPLY_TIMEOUT.as_secs()
            )),
            Err(RecvTimeoutError::Disconnected) => {
                let st = self.kids.0[0].wait().map_or_else(|e| e.to_string(), |s| s.to_string());
                Err(format!("{} client exited ({st}) during {what} (its stderr is above)", self.label))
            }
        }
    }

    /// Sends one command; its reply without the leading "ok".
    fn ask(&mut self, cmd: &str) -> Result<String, String> {
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        writeln!(stdin, "{cmd}").and_then(|_| stdin.flush()).map_err(|e| format!("{} client: {e}", self.label))?;
        let l = self.line(&format!("`{cmd}`"))?;
        match l.split_once(' ').map_or((l.as_str(), ""), |(a, b)| (a, b)) {
            ("ok", rest) => Ok(rest.to_string()),
            ("err", why) => Err(format!("{} client, `{cmd}`: {why}", self.label)),
            _ if l == "ok" => Ok(String::new()),
            _ => Err(format!("{} client, `{cmd}`: unexpected reply {:?}", self.label, &l[..l.len().min(80)])),
        }
    }

    fn rtt(&mut self, n: usize) -> Result<Vec<f64>, String> {
        let v = parse_numbers(&self.ask(&format!("rtt {n}"))?)?;
        if v.len() != n {
            return Err(format!("{} client: {} round trips for {n}", self.label, v.len()));
        }
        Ok(v)
    }

    /// (HtoD ns, DtoH ns) of one 64 MiB copy each.
    fn copy(&mut self) -> Result<(f64, f64), String> {
        match parse_numbers(&self.ask("copy")?)?[..] {
            [h, d] => Ok((h, d)),
            _ => Err(format!("{} client: bad copy reply", self.label)),
        }
    }

    /// (launches, ns) of one sample.
    fn launch(&mut self) -> Result<(f64, f64), String> {
        match parse_numbers(&self.ask(&format!("launch {LAUNCHES} {}", LAUNCH_DEADLINE.as_millis()))?)?[..] {
            [n, ns] if n > 0.0 => Ok((n, ns)),
            _ => Err(format!("{} client: bad launch reply", self.label)),
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // EOF on stdin ends the client; give it a moment to leave on its own (a clean session
        // end at the daemon), then `kids` kills whatever is left.
        drop(self.stdin.take());
        let t0 = Instant::now();
        while matches!(self.kids.0[0].try_wait(), Ok(None)) && t0.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn parse_numbers(s: &str) -> Result<Vec<f64>, String> {
    s.split_whitespace()
        .map(|x| x.parse::<f64>().map_err(|_| format!("not a number: {:?}", &x[..x.len().min(20)])))
        .collect()
}

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// The raw baselines: the peer process and one connection per kind.
struct Raw {
    port: u16,
    ping: TcpStream,
    sink: TcpStream,
    source: TcpStream,
    /// The same bulk services in TLS: what TLS alone costs on this path.
    tls_sink: TlsStream,
    tls_source: TlsStream,
    data: Vec<u8>,
    back: Vec<u8>,
    _peer: Kids,
    _peer_stdin: ChildStdin,
}

impl Raw {
    /// The peer serves TLS with the daemon's `cert`/`key`; `ca` signed them.
    fn start(exe: &Path, cert: &Path, key: &Path, ca: &Path) -> Result<Raw, String> {
        let mut child = Command::new(exe)
            .args([CLIENT_COMMAND, "peer"])
            .arg(cert)
            .arg(key)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting the TCP peer: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let kids = Kids(vec![child]);
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map_err(|e| e.to_string())?;
        let (port, tls_port): (u16, u16) = match line.split_whitespace().collect::<Vec<_>>()[..] {
            ["port", p, "tls", t] => (p.parse().map_err(|_| "bad port")?, t.parse().map_err(|_| "bad port")?),
            _ => return Err(format!("TCP peer said {line:?}")),
        };
        let conn = |mode: u8| Raw::connect(port, mode);
        let client = gpupool_protocol::transport::net::tls::client_config(ca)?;
        let tls = |mode: u8| -> Result<TlsStream, String> {
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").map_err(|e| e.to_string())?;
            let conn = rustls::ClientConnection::new(client.clone(), name).map_err(|e| e.to_string())?;
            let sock = TcpStream::connect(("127.0.0.1", tls_port)).map_err(|e| format!("TLS peer: {e}"))?;
            sock.set_nodelay(true).map_err(|e| e.to_string())?;
            let mut s = rustls::StreamOwned::new(conn, sock);
            s.write_all(&[mode]).and_then(|_| s.flush()).map_err(|e| format!("TLS peer: {e}"))?;
            Ok(s)
        };
        Ok(Raw {
            port,
            ping: conn(b'p')?,
            sink: conn(b'r')?,
            source: conn(b's')?,
            tls_sink: tls(b'r')?,
            tls_source: tls(b's')?,
            data: (0..COPY_BYTES).map(|i| (i * 13) as u8).collect(),
            back: vec![0x44u8; COPY_BYTES],
            _peer: kids,
            _peer_stdin: stdin,
        })
    }

    /// A connection to port `port` on loopback (the peer's, or a relay's in front of it)
    /// in the peer's `mode`.
    fn connect(port: u16, mode: u8) -> Result<TcpStream, String> {
        let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("TCP peer: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.write_all(&[mode]).map_err(|e| e.to_string())?;
        Ok(s)
    }

    /// `n` 64-byte ping-pongs, each timed alone.
    fn ping(&mut self, n: usize) -> Result<Vec<f64>, String> {
        ping_on(&mut self.ping, n)
    }

    /// 64 MiB sent to the peer, which reads it into a buffer and answers a byte; ns.
    fn send(&mut self) -> Result<f64, String> {
        bulk_send(&mut self.sink, &self.data).map_err(|e| format!("TCP bulk send: {e}"))
    }

    /// One byte asks the peer for 64 MiB, read here into a buffer; ns.
    fn receive(&mut self) -> Result<f64, String> {
        bulk_receive(&mut self.source, &mut self.back).map_err(|e| format!("TCP bulk receive: {e}"))
    }

    /// [`Self::send`] and [`Self::receive`] in TLS.
    fn tls_send(&mut self) -> Result<f64, String> {
        bulk_send(&mut self.tls_sink, &self.data).map_err(|e| format!("TLS bulk send: {e}"))
    }
    fn tls_receive(&mut self) -> Result<f64, String> {
        bulk_receive(&mut self.tls_source, &mut self.back).map_err(|e| format!("TLS bulk receive: {e}"))
    }
}

fn bulk_send(s: &mut (impl Read + Write), data: &[u8]) -> Result<f64, String> {
    let t = Instant::now();
    let mut ack = [0u8; 1];
    s.write_all(data).and_then(|_| s.flush()).and_then(|_| s.read_exact(&mut ack)).map_err(|e| e.to_string())?;
    let ns = t.elapsed().as_nanos() as f64;
    if ack[0] != data[COPY_BYTES - 1] {
        return Err("the peer saw other bytes".into());
    }
    Ok(ns)
}

fn bulk_receive(s: &mut (impl Read + Write), back: &mut [u8]) -> Result<f64, String> {
    let t = Instant::now();
    s.write_all(b"s").and_then(|_| s.flush()).and_then(|_| s.read_exact(back)).map_err(|e| e.to_string())?;
    let ns = t.elapsed().as_nanos() as f64;
    if back[COPY_BYTES - 1] != ((COPY_BYTES - 1) * 7 + 1) as u8 {
        return Err("other bytes than the peer sent".into());
    }
    Ok(ns)
}

/// `n` 64-byte ping-pongs with the peer's echo on `s`, each timed alone.
fn ping_on(s: &mut TcpStream, n: usize) -> Result<Vec<f64>, String> {
    let frame = [0x5au8; FRAME];
    let mut back = [0u8; FRAME];
    let mut v = Vec::with_capacity(n);
    time_each(n, &mut v, || {
        s.write_all(&frame).and_then(|_| s.read_exact(&mut back)).map_err(|e| format!("TCP ping-pong: {e}"))
    })?;
    if back != frame {
        return Err("TCP echo returned other bytes".into());
    }
    Ok(v)
}

/// Whether a netem qdisc this process added is on `lo` now. Held across `tc qdisc add`, so the
/// signal thread ([`remove_netem_on_signals`]) never removes a qdisc that is not ours.
static NETEM_ON: Mutex<bool> = Mutex::new(false);

/// `tc qdisc del dev lo root`; an error message if that failed.
fn netem_del() -> Option<String> {
    match Command::new("tc").args(["qdisc", "del", "dev", "lo", "root"]).stdin(Stdio::null()).output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(String::from_utf8_lossy(&o.stderr).trim().to_string()),
        Err(e) => Some(e.to_string()),
    }
}

/// `tc qdisc add dev lo root netem delay D`; the qdisc is deleted on drop (error and panic
/// paths included; SIGINT/SIGTERM/SIGHUP through [`remove_netem_on_signals`]). Only a qdisc this
/// guard added is ever deleted: `add` fails, rather than replaces, where `lo` has a root qdisc.
struct Netem {
    delay_us: u32,
}

impl Netem {
    fn add(delay_us: u32) -> Result<Netem, String> {
        let mut on = NETEM_ON.lock().unwrap_or_else(|e| e.into_inner());
        let args = ["qdisc", "add", "dev", "lo", "root", "netem", "delay", &format!("{delay_us}us")];
        let out = Command::new("tc").args(args).stdin(Stdio::null()).output().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "`tc` not found (iproute2 is not installed)".to_string(),
            _ => format!("running tc: {e}"),
        })?;
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr).split_whitespace().collect::<Vec<_>>().join(" ");
            return Err(format!("`tc {}` failed ({}): {why}", args.join(" "), out.status));
        }
        *on = true;
        eprintln!(
            "gpupool-bench remote: netem delay {delay_us}us on lo (all loopback traffic) for one row; if this run \
             is killed with SIGKILL, remove it with `tc qdisc del dev lo root`"
        );
        Ok(Netem { delay_us })
    }
}

impl Drop for Netem {
    fn drop(&mut self) {
        let mut on = NETEM_ON.lock().unwrap_or_else(|e| e.into_inner());
        match netem_del() {
            None => *on = false,
            Some(why) => eprintln!(
                "gpupool-bench remote: REMOVING the netem qdisc ({} us) on lo FAILED: {why}; run `tc qdisc del dev lo root`",
                self.delay_us
            ),
        }
    }
}

/// The write end of the pipe [`on_signal`] reports signals on (-1 before
/// [`remove_netem_on_signals`]).
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    let b = sig as u8;
    // SAFETY: write(2) is async-signal-safe; `b` is a live local byte.
    unsafe { libc::write(fd, (&raw const b).cast(), 1) };
}

/// SIGINT, SIGTERM and SIGHUP end a process without unwinding, so no `Drop` would remove a
/// netem qdisc. A handler (which only writes the signal number to a close-on-exec pipe, so
/// child processes are unaffected: handlers reset to the default at exec) wakes a thread that
/// removes the qdisc if one is on, then exits with 128 + the signal. Called first in [`run`].
fn remove_netem_on_signals() {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the live array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return;
    }
    SIGNAL_PIPE.store(fds[1], Ordering::Relaxed);
    std::thread::spawn(move || {
        let mut b = 0u8;
        loop {
            // SAFETY: reads one byte into the live local `b` from our own pipe.
            let n = unsafe { libc::read(fds[0], (&raw mut b).cast(), 1) };
            if n == 1 {
                break;
            }
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        let on = NETEM_ON.lock().unwrap_or_else(|e| e.into_inner());
        if *on {
            match netem_del() {
                None => eprintln!("gpupool-bench remote: signal {b}: removed the netem qdisc on lo"),
                Some(why) => eprintln!(
                    "gpupool-bench remote: signal {b}: REMOVING the netem qdisc on lo FAILED: {why}; run `tc qdisc del dev lo root`"
                ),
            }
        }
        std::process::exit(128 + i32::from(b));
    });
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction is a valid starting value; the handler only calls write(2)
        // on an fd set before it is installed, and SA_RESTART keeps blocking calls elsewhere in
        // the bench from failing with EINTR.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, null_mut());
        }
    }
}

/// A directory removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `tls://` and `tcp://` URLs of the daemon's "gpupool daemon ready" log line (it lists
/// the ports it bound for `:0`).
pub fn parse_ready(log: &str) -> Option<(String, String)> {
    let line = log.lines().find(|l| l.contains("gpupool daemon ready"))?;
    let url = |scheme: &str| {
        let at = line.find(&format!("{scheme}://127.0.0.1:"))?;
        let rest = &line[at..];
        let end = rest.find(|c: char| c == '"' || c == ',' || c == ']' || c.is_whitespace()).unwrap_or(rest.len());
        let u = &rest[..end];
        u.rsplit(':').next()?.parse::<u16>().ok().filter(|p| *p != 0).map(|_| u.to_string())
    };
    Some((url("tls")?, url("tcp")?))
}

// ---------------------------------------------------------------------------------------
// The parts.
// ---------------------------------------------------------------------------------------

struct Clients<'a> {
    tls: Client,
    tcp: Client,
    unix: Client,
    /// The daemon's tls:// listener, `127.0.0.1:PORT`.
    tls_addr: String,
    /// Starts another client: (label, endpoint).
    spawn: &'a dyn Fn(&str, &str) -> Result<Client, String>,
}

/// Part 3's path under an added delay when netem is missing: a delay relay in front of the
/// daemon's tls:// listener with its own client process, and one in front of the raw peer
/// with its own ping-pong connection.
fn relayed(c: &Clients, raw: &Raw, delay_us: u32) -> Result<(Client, TcpStream), String> {
    let delay = Duration::from_micros(delay_us.into());
    let daemon = DelayRelay::start(None, &c.tls_addr, delay)?;
    let peer = DelayRelay::start(None, &format!("127.0.0.1:{}", raw.port), delay)?;
    let client = (c.spawn)("tls:// through the delay relay", &format!("tls://127.0.0.1:{}", daemon.port))?;
    Ok((client, Raw::connect(peer.port, b'p')?))
}

fn part1(c: &mut Clients<'_>, raw: &mut Raw) -> Result<Section, String> {
    c.tls.rtt(RTT_WARMUP)?;
    c.tcp.rtt(RTT_WARMUP)?;
    c.unix.rtt(RTT_WARMUP)?;
    raw.ping(RTT_WARMUP)?;
    let (mut vt, mut vc, mut vu, mut vr) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RTT_ROUNDS {
        vt.extend(c.tls.rtt(RTT_PER_ROUND)?);
        vr.extend(raw.ping(RTT_PER_ROUND / 2)?);
        vc.extend(c.tcp.rtt(RTT_PER_ROUND)?);
        vr.extend(raw.ping(RTT_PER_ROUND / 2)?);
        vu.extend(c.unix.rtt(RTT_PER_ROUND)?);
    }
    let (t, tc, u, r) = (summarize(vt), summarize(vc), summarize(vu), summarize(vr));
    let base = "raw TCP 64 B ping-pong, 2 processes";
    let target = |s: &Summary| format!("p50 <= 2x raw TCP {}", pass(s.median <= 2.0 * r.median));
    let mut rows = vec![
        row("cuCtxSynchronize over tls://", Unit::Ns, t, base, r),
        row("cuCtxSynchronize over tcp://", Unit::Ns, tc, base, r),
        row("cuCtxSynchronize over unix:// (shm, reference)", Unit::Ns, u, base, r),
    ];
    rows[0].verdict = target(&t);
    rows[1].verdict = target(&tc);
    let notes = vec![
        format!(
            "{RTT_ROUNDS} rounds of {RTT_PER_ROUND} calls per endpoint (after {RTT_WARMUP} warm-up), the raw ping-pong between them; every sample one call timed alone"
        ),
        "each endpoint is its own client process (the interposer connects once per process); raw TCP: \
         blocking read/write with TCP_NODELAY between this process and a peer process, 64 bytes each way"
            .into(),
    ];
    Ok(Section {
        title: "1. Sync round trip of a forwarded call on loopback (each call timed alone)".into(),
        rows,
        notes,
    })
}

fn part2(c: &mut Clients<'_>, raw: &mut Raw) -> Result<Section, String> {
    let (mut th, mut td, mut ch, mut cd, mut uh, mut ud, mut rs, mut rr) =
        (vec![], vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
    let (mut ts, mut tr) = (vec![], vec![]);
    for i in 0..COPY_WARMUP + COPY_SAMPLES {
        let (t, cc, u) = (c.tls.copy()?, c.tcp.copy()?, c.unix.copy()?);
        let (s, r) = (raw.send()?, raw.receive()?);
        let (tsend, trecv) = (raw.tls_send()?, raw.tls_receive()?);
        if i >= COPY_WARMUP {
            ts.push(tsend);
            tr.push(trecv);
            th.push(t.0);
            td.push(t.1);
            ch.push(cc.0);
            cd.push(cc.1);
            uh.push(u.0);
            ud.push(u.1);
            rs.push(s);
            rr.push(r);
        }
    }
    for cl in [&mut c.tls, &mut c.tcp, &mut c.unix] {
        cl.ask("check")?;
    }
    let gb = COPY_BYTES as f64 / 1e9;
    let (send, recv) = (rate_summary(rs, gb), rate_summary(rr, gb));
    let (send_name, recv_name) = ("raw TCP send 64 MiB, same run", "raw TCP receive 64 MiB, same run");
    let mut rows = Vec::new();
    for (ep, h, d, target) in
        [("tls://", th, td, true), ("tcp://", ch, cd, true), ("unix:// (shm, reference)", uh, ud, false)]
    {
        let (h, d) = (rate_summary(h, gb), rate_summary(d, gb));
        let mut a = row(&format!("HtoD pageable over {ep}"), Unit::GbS, h, send_name, send);
        let mut b = row(&format!("DtoH pageable over {ep}"), Unit::GbS, d, recv_name, recv);
        if target {
            a.verdict = format!(">= 80% of raw TCP {}", pass(h.median >= 0.8 * send.median));
            b.verdict = format!(">= 80% of raw TCP {}", pass(d.median >= 0.8 * recv.median));
        }
        rows.push(a);
        rows.push(b);
    }
    // What TLS alone costs on this path: the tls:// rows' ceiling.
    let (tls_send, tls_recv) = (rate_summary(ts, gb), rate_summary(tr, gb));
    rows.push(row("raw TLS send 64 MiB (rustls, reference)", Unit::GbS, tls_send, send_name, send));
    rows.push(row("raw TLS receive 64 MiB (rustls, reference)", Unit::GbS, tls_recv, recv_name, recv));
    let share = |r: &Row, base: Summary| r.value.as_ref().map_or(0.0, |v| 100.0 * v.median / base.median);
    let tls_share = format!(
        "over tls://, HtoD is {:.0}% of raw TLS send and DtoH {:.0}% of raw TLS receive (p50s, same run)",
        share(&rows[0], tls_send),
        share(&rows[1], tls_recv)
    );
    let notes = vec![
        format!(
            "64 MiB per copy (cuMemcpyHtoD_v2 / cuMemcpyDtoH_v2 from/to a Vec), {COPY_SAMPLES} samples after {COPY_WARMUP} warm-up; \
             each round: tls, tcp, unix clients, then the raw sends; data checked after timing"
        ),
        "raw TCP send: write_all of 64 MiB to the peer, which read_exacts it into a 64 MiB buffer and answers one \
         byte (timed to that byte); raw TCP receive: one byte asks the peer for 64 MiB, read_exact into a 64 MiB \
         buffer here; plain TCP, no encryption, so the tls:// ratio includes the cost of TLS; raw TLS: the same \
         in rustls (ring, the daemon's certificate), a stream of 16 KiB records, no protocol of ours"
            .into(),
        tls_share,
    ];
    Ok(Section { title: "2. Copy bandwidth, 64 MiB pageable (GB/s = 10^9 bytes/s)".into(), rows, notes })
}

fn part3(c: &mut Clients<'_>, raw: &mut Raw) -> Result<Section, String> {
    let rate = |v: Vec<(f64, f64)>| {
        // Launches per second from per-sample times; samples cut at the deadline are scaled.
        let n = v.iter().map(|x| x.0).fold(0.0, f64::max);
        rate_summary(v.iter().map(|(k, ns)| ns * n / k).collect(), n)
    };
    let mut rows = Vec::new();
    let (mut notes, mut missing, mut how) = (Vec::new(), Vec::new(), Vec::new());
    let mut zero: Option<Summary> = None;
    let mut cut = 0;
    for delay in DELAYS_US {
        // The delayed path: netem on lo (the standing clients and connections), else relays
        // (a client and a ping-pong connection of their own).
        let mut relay = None;
        let guard = if delay == 0 {
            None
        } else {
            match Netem::add(delay) {
                Ok(g) => {
                    how.push(format!("{} ms: netem on lo", f64::from(delay) / 1000.0));
                    Some(g)
                }
                Err(netem_why) => match relayed(c, raw, delay) {
                    Ok(r) => {
                        how.push(format!("{} ms: delay relays (netem: {netem_why})", f64::from(delay) / 1000.0));
                        relay = Some(r);
                        None
                    }
                    Err(relay_why) => {
                        let why = format!("netem: {netem_why}; relay: {relay_why}");
                        missing.push(format!("{} ms row unavailable: {why}", f64::from(delay) / 1000.0));
                        rows.push(Row {
                            name: "empty launches (async) + 1 sync over tls://".into(),
                            unit: Unit::PerSec,
                            value: Err(why),
                            base_name: "same, no added delay".into(),
                            base: zero,
                            verdict: String::new(),
                            delay_us: Some(delay),
                            rtt: None,
                        });
                        continue;
                    }
                },
            }
        };
        let (tls, ping) = match &mut relay {
            Some((client, ping)) => (client, ping),
            None => (&mut c.tls, &mut raw.ping),
        };
        // Warm-up first (discarded): the first calls after the copies pay wake-ups.
        tls.rtt(DELAY_RTTS / 4)?;
        ping_on(ping, DELAY_RTTS / 4)?;
        let sync = summarize(tls.rtt(DELAY_RTTS)?);
        let ping = summarize(ping_on(ping, DELAY_RTTS)?);
        tls.launch()?;
        let (mut vt, mut vu) = (Vec::new(), Vec::new());
        for _ in 0..LAUNCH_SAMPLES {
            vt.push(tls.launch()?);
            if delay == 0 {
                vu.push(c.unix.launch()?);
            }
        }
        drop(guard);
        cut += vt.iter().filter(|x| (x.0 as usize) < LAUNCHES).count();
        let t = rate(vt);
        let mut r = if delay == 0 {
            zero = Some(t);
            row(
                "empty launches (async) + 1 sync over tls://",
                Unit::PerSec,
                t,
                "same over unix:// (shm), alternately",
                rate(vu),
            )
        } else {
            let base = zero.ok_or("no 0-delay figure")?;
            row("empty launches (async) + 1 sync over tls://", Unit::PerSec, t, "same, no added delay", base)
        };
        r.delay_us = Some(delay);
        r.rtt = Some((sync, ping));
        rows.push(r);
    }
    notes.push(format!(
        "{LAUNCH_SAMPLES} samples of {LAUNCHES} launches of the empty kernel on a non-blocking stream + cuStreamSynchronize \
         (a sample stops launching at {} s); RTT columns: {DELAY_RTTS} forwarded cuCtxSynchronize over tls:// and \
         {DELAY_RTTS} raw TCP ping-pongs under the same delay (after {} of each discarded), p50",
        LAUNCH_DEADLINE.as_secs(),
        DELAY_RTTS / 4
    ));
    notes.push(
        "added delay: `tc qdisc add dev lo root netem delay D` for the row only (removed after it); netem on lo delays \
         every packet, so both directions: the round trip grows by 2 x D, and all loopback traffic on the machine is \
         delayed meanwhile. Where the kernel has no netem: relays on loopback (gpupool_e2e::delay_relay) that hold \
         every byte D in each direction, one before the daemon's tls:// port (a client process of its own) and one \
         before the raw TCP peer; the relay's own hop is in both RTT columns"
            .into(),
    );
    notes.push(format!("how the delay was added: {}", how.join("; ")));
    if cut > 0 {
        notes.push(format!(
            "{cut} samples stopped at the deadline before {LAUNCHES} launches; their rate is what they reached"
        ));
    }
    notes.extend(missing);
    Ok(Section { title: "3. Async launch rate over tls:// with added delay (launches per second)".into(), rows, notes })
}

/// The CPUs this thread may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity writes at most
    // size_of::<cpu_set_t>() bytes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// Restricts this thread (and the processes it starts from now on, which inherit the mask)
/// to `cpus`.
fn pin_self(cpus: &[usize]) -> Result<(), String> {
    // SAFETY: as in `allowed_cpus`; CPU_SET only writes inside the set for c < CPU_SETSIZE.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        return Err(format!("sched_setaffinity({cpus:?}): {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Where the two sides run: the server side (daemon, raw peer) on one CPU, the client side
/// (client processes, the raw ends in this process, relays) on another, as two hosts would
/// be. Left to the scheduler, a pair sometimes shares a CPU and sometimes not, and on a VM a
/// wake-up across CPUs costs tens of microseconds more, so either side of a ratio could look
/// faster at random. `None` with fewer than 2 CPUs.
struct Placement {
    server: usize,
    client: usize,
    all: Vec<usize>,
}

impl Placement {
    fn new() -> Option<Placement> {
        let all = allowed_cpus();
        (all.len() >= 2).then(|| Placement { server: all[0], client: all[1], all })
    }
    fn describe(p: &Option<Placement>) -> String {
        match p {
            Some(p) => format!(
                "server side (daemon, raw peer) pinned to CPU {}, client side (clients, raw ends, relays) to CPU {}",
                p.server, p.client
            ),
            None => "not pinned (fewer than 2 CPUs)".into(),
        }
    }
}

pub fn run() -> Result<RemoteRun, String> {
    let placement = Placement::new();
    let result = run_placed(&placement);
    if let Some(p) = &placement {
        let _ = pin_self(&p.all);
    }
    result
}

fn run_placed(placement: &Option<Placement>) -> Result<RemoteRun, String> {
    remove_netem_on_signals();
    let started = Instant::now();
    let load_start = loadavg();
    build_pool()?;
    let rel = release_dir();
    let gpupool = rel.join("gpupool");
    let lib = rel.join("libgpupool.so");
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let pid = std::process::id();
    let base = TempDir(std::env::temp_dir().join(format!("gpupool-bench-remote-{pid}")));
    let _ = std::fs::remove_dir_all(&base.0);
    std::fs::create_dir_all(&base.0).map_err(|e| format!("creating {}: {e}", base.0.display()))?;
    let certs = base.0.join("certs");
    let out = Command::new(&gpupool)
        .arg("cert")
        .arg("--out")
        .arg(&certs)
        .args(["--name", "localhost", "--name", "127.0.0.1"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running gpupool cert: {e}"))?;
    if !out.status.success() {
        return Err(format!("gpupool cert failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let token = format!("gpupool-bench-remote-{pid}-{nanos}");
    let config = base.0.join("quota.toml");
    std::fs::write(
        &config,
        format!("[[tenant]]\nname = \"bench\"\ntoken_sha256 = \"{}\"\n", gpupool_quota::hash_token(&token)),
    )
    .map_err(|e| format!("writing {}: {e}", config.display()))?;
    let path = |p: PathBuf| p.display().to_string();
    let extra = [
        "--config".to_string(),
        path(config),
        "--listen".into(),
        "tls://127.0.0.1:0".into(),
        "--listen".into(),
        "tcp://127.0.0.1:0".into(),
        "--tls-cert".into(),
        path(certs.join("cert.pem")),
        "--tls-key".into(),
        path(certs.join("key.pem")),
    ];
    if let Some(p) = placement {
        pin_self(&[p.server])?;
    }
    let mut daemon = Daemon::start_with(&gpupool, base.0.join("d"), &extra)?;
    let t0 = Instant::now();
    let (tls_url, tcp_url) = loop {
        if let Some(u) = parse_ready(&daemon.log()) {
            break u;
        }
        if !daemon.alive() || t0.elapsed() > Duration::from_secs(10) {
            return Err(format!("no tls/tcp endpoints in the daemon's ready line: {}", daemon.log()));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let unix_url = daemon.endpoint();
    let ca = path(certs.join("ca.pem"));
    let env = |ep: &str| {
        vec![("GPUPOOL_ENDPOINT", ep.to_string()), ("GPUPOOL_TOKEN", token.clone()), ("GPUPOOL_CA", ca.clone())]
    };
    let mut raw = Raw::start(&exe, &certs.join("cert.pem"), &certs.join("key.pem"), &certs.join("ca.pem"))?;
    if let Some(p) = placement {
        pin_self(&[p.client])?;
    }
    let spawn = |label: &str, ep: &str| Client::start(&exe, &lib, label, &env(ep));
    let mut clients = Clients {
        tls: spawn("tls://", &tls_url)?,
        tcp: spawn("tcp://", &tcp_url)?,
        unix: spawn("unix://", &unix_url)?,
        tls_addr: tls_url.trim_start_matches("tls://").to_string(),
        spawn: &spawn,
    };
    let clock = clock_ns();
    let timed = |t: Instant, s: Result<Section, String>| {
        s.map(|mut s| {
            let _ = write!(s.title, " [{:.1} s]", t.elapsed().as_secs_f64());
            s
        })
    };
    let mut sections = vec![timed(Instant::now(), part1(&mut clients, &mut raw))?];
    sections.push(timed(Instant::now(), part2(&mut clients, &mut raw))?);
    sections.push(timed(Instant::now(), part3(&mut clients, &mut raw))?);
    drop(clients);
    drop(raw);
    if !daemon.alive() {
        return Err(format!("the daemon died during the run: {}", daemon.log()));
    }
    drop(daemon);
    Ok(RemoteRun {
        daemon: gpupool.display().to_string(),
        client_lib: lib.display().to_string(),
        endpoints: vec![tls_url, tcp_url, unix_url],
        cpus: placement.as_ref().map_or_else(cpus, |p| p.all.len()),
        placement: Placement::describe(placement),
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
    fn ready_line_gives_the_bound_ports() {
        let log = "2026-11-25T10:00:00Z  INFO gpupool::daemon: gpupool daemon ready devices=2 driver=\"12.9\" \
                   endpoints=[\"/tmp/x/s.sock\"] remote=[\"tls://127.0.0.1:41234\", \"tcp://127.0.0.1:41235\"] config=None\n";
        assert_eq!(parse_ready(log), Some(("tls://127.0.0.1:41234".to_string(), "tcp://127.0.0.1:41235".to_string())));
        assert_eq!(parse_ready("INFO listening for remote clients\n"), None);
        assert_eq!(parse_ready("gpupool daemon ready remote=[\"tls://127.0.0.1:0\", \"tcp://127.0.0.1:5\"]"), None);
    }

    #[test]
    fn numbers_parse() {
        assert_eq!(parse_numbers("1 2.5 300").unwrap(), vec![1.0, 2.5, 300.0]);
        assert_eq!(parse_numbers("").unwrap(), Vec::<f64>::new());
        assert!(parse_numbers("1 x").is_err());
    }

    #[test]
    fn unavailable_rows_have_no_ratio() {
        let s = Summary { median: 2.0, p99: 1.0, samples: 3 };
        let mut r = row("x", Unit::PerSec, s, "b", Summary { median: 4.0, p99: 2.0, samples: 3 });
        assert_eq!(ratios(&r), Some((0.5, 0.5)));
        r.value = Err("no tc".into());
        assert_eq!(ratios(&r), None);
    }
}
