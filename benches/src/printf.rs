//! `gpupool-bench printf`: what device printf through the pool (README.md, "The pool"; the
//! daemon's `backend/device_output.rs`) costs, against baselines from the same run. The release
//! daemon serves one simulated GPU to tenants `a` and `b`; every client is a process of its own
//! loading `libgpupool.so`.
//!
//! 1. **Launches on a printing context**: 1000 empty launches and one `cuStreamSynchronize` per
//!    sample, the kernel from a module that names `vprintf` (never reached: nothing prints) against
//!    the same kernel from a module that does not (the baseline). Each flushing call on a context
//!    whose kernels may print runs in a window (a lock, `fflush`, a read of the pipe), so this is
//!    the window's cost per launch.
//! 2. **A tenant beside another one in long synchronizations**: `b`'s rounds (a kernel printing
//!    one line, `cuStreamSynchronize`, the line delivered) alone (the baseline), and while `a`
//!    synchronizes with 200 ms kernels, from a module without `vprintf` and from one naming it.
//!    The daemon waits for a printing context's work by queries before the synchronization's
//!    window, so `b` should not wait for `a`'s kernels either way. The daemon runs without the
//!    compute scheduler, whose time-sharing would itself hold `b`'s kernels behind `a`'s one-block
//!    kernels (which cannot be preempted).

use crate::evict::Daemon;
use crate::pool::{build_pool, release_dir};
use crate::sim::ok;
use crate::stats::summarize;
use gpupool_e2e::{Driver, EMPTY_PTX, call};
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

pub const CLIENT_COMMAND: &str = "__printf-client";
const A_TOKEN: &str = "bench-printf-a";
const B_TOKEN: &str = "bench-printf-b";
const LAUNCHES: usize = 1000;

/// `spin(ns)`: waits `ns` of device time.
macro_rules! spin_ptx {
    () => {
        ".visible .entry spin(.param .u64 ns)
{
\t.reg .b64 %t<4>;
\t.reg .pred %q;
\tld.param.u64 %t0, [ns];
\tmov.u64 %t1, %globaltimer;
LOOP:
\tnanosleep.u32 1000000;
\tmov.u64 %t2, %globaltimer;
\tsub.u64 %t3, %t2, %t1;
\tsetp.lt.u64 %q, %t3, %t0;
\t@%q bra LOOP;
\tret;
}
"
    };
}

/// `spin(ns)` waits `ns` of device time, in a module that does not name `vprintf`.
const QUIET_SPIN_PTX: &str = concat!(".version 8.0\n.target sm_90\n.address_size 64\n", spin_ptx!(), "\0");

/// `empty(p0, p1)` prints `line <p1>` when `p1` is not 0 (the module names `vprintf`), and
/// `spin` as in [`QUIET_SPIN_PTX`].
const PRINTING_PTX: &str = concat!(
    "\
.version 8.0
.target sm_90
.address_size 64
.extern .func (.param .b32 func_retval0) vprintf (.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);
.global .align 1 .b8 fmt[9] = {108, 105, 110, 101, 32, 37, 117, 10, 0};
.visible .entry empty(.param .u64 p0, .param .u32 p1)
{
\t.local .align 8 .b8 depot[8];
\t.reg .b64 %SP;
\t.reg .b64 %SPL;
\t.reg .pred %p<2>;
\t.reg .b32 %r<3>;
\t.reg .b64 %rd<5>;
\tmov.u64 %SPL, depot;
\tcvta.local.u64 %SP, %SPL;
\tld.param.u32 %r1, [p1];
\tsetp.eq.s32 %p1, %r1, 0;
\t@%p1 bra DONE;
\tadd.u64 %rd1, %SP, 0;
\tadd.u64 %rd2, %SPL, 0;
\tst.local.u32 [%rd2], %r1;
\tmov.u64 %rd3, fmt;
\tcvta.global.u64 %rd4, %rd3;
\t{
\t.param .b64 param0;
\tst.param.b64 [param0+0], %rd4;
\t.param .b64 param1;
\tst.param.b64 [param1+0], %rd1;
\t.param .b32 retval0;
\tcall.uni (retval0), vprintf, (param0, param1);
\tld.param.b32 %r2, [retval0+0];
\t}
DONE:
\tret;
}
",
    spin_ptx!(),
    "\0"
);

/// A client's context: device 0's primary context, a stream and a module.
struct Side {
    d: Driver,
    stream: gpupool_e2e::cu::CUstream,
    module: gpupool_e2e::cu::CUmodule,
}

impl Side {
    fn new(lib: &Path, ptx: &str) -> Result<Side, String> {
        let d = Driver::load(lib)?;
        crate::pool::primary_context(&d)?;
        let mut stream = null_mut();
        ok(call!(d.cuStreamCreate(&mut stream, 1)), "cuStreamCreate")?;
        let mut module = null_mut();
        ok(call!(d.cuModuleLoadData(&mut module, ptx.as_ptr().cast())), "cuModuleLoadData")?;
        Ok(Side { d, stream, module })
    }

    fn function(&self, name: &std::ffi::CStr) -> Result<gpupool_e2e::cu::CUfunction, String> {
        let mut f = null_mut();
        let d = &self.d;
        ok(call!(d.cuModuleGetFunction(&mut f, self.module, name.as_ptr())), "cuModuleGetFunction")?;
        Ok(f)
    }

    /// `n` launches of `empty(0, line)`, then one synchronization.
    fn launches(&self, f: gpupool_e2e::cu::CUfunction, n: usize, line: u32) -> Result<(), String> {
        let (mut p0, mut p1): (u64, u32) = (0, line);
        let mut params: [*mut std::ffi::c_void; 2] = [(&raw mut p0).cast(), (&raw mut p1).cast()];
        let d = &self.d;
        for _ in 0..n {
            let r = call!(d.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, self.stream, params.as_mut_ptr(), null_mut()));
            ok(r, "cuLaunchKernel")?;
        }
        ok(call!(d.cuStreamSynchronize(self.stream)), "cuStreamSynchronize")
    }
}

/// `gpupool-bench __printf-client launches LIB printing|quiet SAMPLES`, `... rounds LIB
/// printing SECONDS` or `... spin LIB printing|quiet SECONDS`: prints `samples NS...` (ns per
/// sample).
pub fn client_main(args: &[String]) -> ExitCode {
    let r = (|| -> Result<Vec<u64>, String> {
        match args {
            [mode, lib, kind, samples] if mode == "launches" => {
                let ptx = if kind == "printing" { PRINTING_PTX } else { EMPTY_PTX };
                let side = Side::new(Path::new(lib), ptx)?;
                let f = side.function(c"empty")?;
                side.launches(f, LAUNCHES, 0)?;
                let n: usize = samples.parse().map_err(|_| "SAMPLES must be a number")?;
                (0..n)
                    .map(|_| {
                        let t = Instant::now();
                        side.launches(f, LAUNCHES, 0).map(|()| t.elapsed().as_nanos() as u64 / LAUNCHES as u64)
                    })
                    .collect()
            }
            [mode, lib, kind, seconds] if mode == "rounds" || mode == "spin" => {
                let ptx = if kind == "printing" { PRINTING_PTX } else { QUIET_SPIN_PTX };
                let side = Side::new(Path::new(lib), ptx)?;
                let secs: f64 = seconds.parse().map_err(|_| "SECONDS must be a number")?;
                let end = Instant::now() + Duration::from_secs_f64(secs);
                let mut v = Vec::new();
                if mode == "rounds" {
                    let f = side.function(c"empty")?;
                    while Instant::now() < end {
                        let t = Instant::now();
                        side.launches(f, 1, 7)?;
                        v.push(t.elapsed().as_nanos() as u64);
                    }
                } else {
                    let f = side.function(c"spin")?;
                    let mut ns: u64 = 200_000_000;
                    let mut params: [*mut std::ffi::c_void; 1] = [(&raw mut ns).cast()];
                    let d = &side.d;
                    while Instant::now() < end {
                        let t = Instant::now();
                        let r = call!(d.cuLaunchKernel(
                            f,
                            1,
                            1,
                            1,
                            1,
                            1,
                            1,
                            0,
                            side.stream,
                            params.as_mut_ptr(),
                            null_mut()
                        ));
                        ok(r, "cuLaunchKernel spin")?;
                        ok(call!(d.cuStreamSynchronize(side.stream)), "cuStreamSynchronize")?;
                        v.push(t.elapsed().as_nanos() as u64);
                    }
                }
                Ok(v)
            }
            _ => Err(format!(
                "usage: gpupool-bench {CLIENT_COMMAND} launches|rounds|spin LIB printing|quiet SAMPLES|SECONDS"
            )),
        }
    })();
    match r {
        Ok(v) => {
            let mut line = String::from("samples");
            for x in v {
                let _ = write!(line, " {x}");
            }
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpupool-bench {CLIENT_COMMAND}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a client; returns its samples (ns) and how many kernel lines it printed.
fn client(d: &Daemon, token: &str, args: &[&str]) -> Result<(Vec<f64>, usize), String> {
    let out = Command::new(release_dir().join("gpupool-bench"))
        .arg(CLIENT_COMMAND)
        .args(args)
        .env("GPUPOOL_ENDPOINT", format!("unix://{}", d.socket().display()))
        .env("GPUPOOL_TOKEN", token)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("starting a client: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("client {args:?} failed ({}): {text}\n{}", out.status, d.log()));
    }
    let lines = text.lines().filter(|l| l.starts_with("line ")).count();
    let samples = text
        .lines()
        .find_map(|l| l.strip_prefix("samples"))
        .ok_or_else(|| format!("client {args:?} printed no samples: {text}"))?
        .split_whitespace()
        .filter_map(|x| x.parse::<f64>().ok())
        .collect();
    Ok((samples, lines))
}

pub fn main(args: &[String]) -> ExitCode {
    if !args.is_empty() {
        eprintln!("usage: gpupool-bench printf");
        return ExitCode::from(2);
    }
    match run() {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpupool-bench printf: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<String, String> {
    build_pool()?;
    let lib = release_dir().join("libgpupool.so");
    let lib = lib.display().to_string();
    let tenant = |name: &str, token: &str| {
        format!("[[tenant]]\nname = \"{name}\"\ntoken_sha256 = \"{}\"\n", gpupool_quota::hash_token(token))
    };
    // Without the compute scheduler, whose time-sharing would hold b's kernels behind a's
    // (a one-block kernel cannot be preempted): what is left between them is printf's.
    let config = tenant("a", A_TOKEN) + &tenant("b", B_TOKEN);
    let d = Daemon::start_config_with(&config, "1GiB", "printf", &["--no-compute-scheduler".as_ref()], &[])?;
    // The same on a simulator that discards kernels: what is left of a launch is the pool's own
    // cost, against which a window's shows.
    let discarding = Daemon::start_config_with(
        &config,
        "1GiB",
        "printf-discard",
        &["--no-compute-scheduler".as_ref()],
        &[("GPUPOOL_SIM_KERNELS", "discard")],
    )?;
    let mut out = String::from("# gpupool-bench printf\n\n## 1. Launches on a printing context\n\n");
    out.push_str("| module | ns per launch, median | p99 | vs quiet |\n| --- | --- | --- | --- |\n");
    for (daemon, kernels) in [(&d, "run"), (&discarding, "discarded")] {
        let (mut printing, mut quiet) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            printing.extend(client(daemon, A_TOKEN, &["launches", &lib, "printing", "15"])?.0);
            quiet.extend(client(daemon, A_TOKEN, &["launches", &lib, "quiet", "15"])?.0);
        }
        let (p, q) = (summarize(printing), summarize(quiet));
        let _ = writeln!(
            out,
            "| printing, kernels {kernels} | {:.0} | {:.0} | {:.2}x |",
            p.median,
            p.p99,
            p.median / q.median
        );
        let _ = writeln!(out, "| quiet, kernels {kernels} | {:.0} | {:.0} | 1.00x |", q.median, q.p99);
    }
    drop(discarding);
    out.push_str(
        "\n1000 empty launches + 1 cuStreamSynchronize per sample, 5 alternate rounds of 15 samples; printing: \
         the module names vprintf (every launch and synchronization in a window), quiet: it does not. Kernels \
         discarded: GPUPOOL_SIM_KERNELS=discard (each launch checked, then dropped).\n\n",
    );

    out.push_str("## 2. A tenant's rounds beside another's 200 ms synchronizations\n\n");
    let mut rows: Vec<(&str, usize, Vec<f64>)> =
        ["idle", "quiet", "printing"].into_iter().map(|a| (a, 0, Vec::new())).collect();
    for i in 0..2 * rows.len() {
        let (beside, spins_total, samples) = &mut rows[i % 3];
        let beside = *beside;
        let spinner = (beside != "idle").then(|| {
            let (lib, socket) = (lib.clone(), d.socket());
            std::thread::spawn(move || {
                Command::new(release_dir().join("gpupool-bench"))
                    .args([CLIENT_COMMAND, "spin", &lib, beside, "4.5"])
                    .env("GPUPOOL_ENDPOINT", format!("unix://{}", socket.display()))
                    .env("GPUPOOL_TOKEN", A_TOKEN)
                    .stdin(Stdio::null())
                    .output()
            })
        });
        if spinner.is_some() {
            std::thread::sleep(Duration::from_millis(700));
        }
        let (rounds, lines) = client(&d, B_TOKEN, &["rounds", &lib, "printing", "3"])?;
        if lines != rounds.len() {
            return Err(format!("b printed {lines} lines in {} rounds", rounds.len()));
        }
        if let Some(t) = spinner {
            let done = t.join().map_err(|_| "the spinning client's thread panicked")?.map_err(|e| e.to_string())?;
            let n = String::from_utf8_lossy(&done.stdout).split_whitespace().count().saturating_sub(1);
            if !done.status.success() || n == 0 {
                return Err(format!("the spinning client failed ({}): {}", done.status, d.log()));
            }
            *spins_total += n;
        }
        samples.extend(rounds);
    }
    out.push_str(
        "| a | a's synchronizations | b's round, median us | p99 us | vs a idle |\n| --- | --- | --- | --- | --- |\n",
    );
    let rows: Vec<_> = rows.into_iter().map(|(a, spins, v)| (a, spins, summarize(v))).collect();
    let idle = rows[0].2.median;
    for (a, spins, s) in &rows {
        let _ =
            writeln!(out, "| {a} | {spins} | {:.1} | {:.1} | {:.2}x |", s.median / 1e3, s.p99 / 1e3, s.median / idle);
    }
    out.push_str(
        "\nb: a kernel printing one line + cuStreamSynchronize per round, its module names vprintf; a: idle, or \
         200 ms one-block kernels + cuStreamSynchronize from a quiet or a printing module. 2 alternating rounds \
         of 3 s per row. Every round's line reached b.\n",
    );
    Ok(out)
}
