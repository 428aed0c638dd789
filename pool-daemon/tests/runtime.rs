//! The CUDA runtime API end to end: the programs of tests/cuda, CUDA C++ built with NVIDIA's nvcc 13
//! (`-cudart shared`, PTX for compute_90; `gpupool_e2e::compile_cu`), run unmodified under
//! `gpupool run` against a daemon on two simulated 1 GiB devices. libgpupool.so provides their
//! `libcudart.so.13`. Each program checks itself and prints `PASS <check>` / `FAIL <check>: ...`
//! lines and `SUMMARY <passed>/<total>`; a test passes when the program exits 0, printed no FAIL,
//! and its summary counts every check it printed as passed.
//!
//! tests/cuda12 holds the CUDA 12 ABI's counterpart: host-only C++ built against CUDA 12's headers
//! and linked with the wheel's `libcudart.so.12` (`gpupool_e2e::compile_cuda12_host`; there is no
//! nvcc 12), run the same way, with libgpupool.so standing in for `libcudart.so.12`.
//!
//! The cases run one at a time: the simulator interprets kernels on the CPU, and the machine has
//! two cores.

mod common;

use common::{Daemon, MIB, ensure_interposer, tenant_config};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long one program may run (each takes a few seconds; the slack is for a loaded machine).
const TIMEOUT: Duration = Duration::from_secs(120);

fn serial() -> MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|e| e.into_inner())
}

/// tests/cuda/<name>.cu, built once per test binary.
fn program(name: &str) -> PathBuf {
    gpupool_e2e::compile_cu(name, &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("runtime"), &[])
}

/// tests/cuda12/<name>.cpp, built once per test binary.
fn program12(name: &str) -> PathBuf {
    gpupool_e2e::compile_cuda12_host(name, &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("runtime12"))
}

/// The dynamic symbols `exe` imports (`nm -D --undefined-only`), as `name@version` or `name`.
fn imported_symbols(exe: &Path) -> Vec<String> {
    let out = Command::new("nm")
        .args(["-D", "--undefined-only"])
        .arg(exe)
        .output()
        .unwrap_or_else(|e| panic!("running nm on {}: {e}", exe.display()));
    assert!(out.status.success(), "nm -D {} failed: {}", exe.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect()
}

struct Finished {
    /// None: killed after [`TIMEOUT`].
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
}

impl Finished {
    fn describe(&self, d: &Daemon) -> String {
        let status = self.status.map_or_else(|| format!("killed after {TIMEOUT:?}"), |s| s.to_string());
        format!(
            "status: {status}\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- daemon log ---\n{}",
            self.stdout,
            self.stderr,
            d.log()
        )
    }
}

/// Runs `exe args` under `gpupool run --endpoint <daemon>` in its own process group, which is
/// killed as a whole if it outlives [`TIMEOUT`].
fn run(d: &Daemon, exe: &Path, args: &[&str]) -> Finished {
    run_opts(d, &[], exe, args)
}

/// As [`run`], with more `gpupool run` options (`--compute PCT`).
fn run_opts(d: &Daemon, opts: &[&str], exe: &Path, args: &[&str]) -> Finished {
    use std::os::unix::process::CommandExt as _;
    ensure_interposer();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpupool"))
        .args(["run", "--endpoint", &d.endpoint()])
        .args(opts)
        .arg("--")
        .arg(exe)
        .args(args)
        .env("GPUPOOL_SIM_DEVICES", "2")
        .env("GPUPOOL_SIM_MEMORY", "1GiB")
        // One stderr line per refused call: shown only when a test fails.
        .env("GPUPOOL_LOG", "1")
        .env_remove("LD_LIBRARY_PATH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("starting the program under gpupool run");
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let reader_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("waiting for gpupool run") {
            break Some(st);
        }
        if t0.elapsed() > TIMEOUT {
            // `gpupool run` is not reaped yet, so the group id is still ours.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = String::from_utf8_lossy(&reader_out.join().unwrap()).into_owned();
    let stderr = String::from_utf8_lossy(&reader_err.join().unwrap()).into_owned();
    Finished { status, stdout, stderr }
}

/// Asserts the program passed: exit 0, no FAIL line, and a `SUMMARY n/n` that counts the PASS
/// lines it printed, at least `min_checks` of them (the number of checks the program makes when
/// it runs to the end: a program cut short cannot pass). Returns the number of checks.
fn assert_passed(name: &str, f: &Finished, d: &Daemon, min_checks: usize) -> usize {
    let passes = f.stdout.lines().filter(|l| l.starts_with("PASS ")).count();
    let fails: Vec<&str> = f.stdout.lines().filter(|l| l.starts_with("FAIL ")).collect();
    let summary = f.stdout.lines().rev().find_map(|l| l.strip_prefix("SUMMARY ")).and_then(|s| {
        let (p, t) = s.trim().split_once('/')?;
        Some((p.parse::<usize>().ok()?, t.parse::<usize>().ok()?))
    });
    let ok = f.status.is_some_and(|s| s.success())
        && fails.is_empty()
        && summary == Some((passes, passes))
        && passes >= min_checks;
    assert!(
        ok,
        "{name}: {passes} passed, {} failed, summary {summary:?} (want at least {min_checks} checks, all passed)\n{}\n{}",
        fails.len(),
        fails.join("\n"),
        f.describe(d)
    );
    eprintln!("{name}: {passes} checks passed");
    passes
}

fn run_passing(name: &str, args: &[&str], min_checks: usize) {
    let _s = serial();
    let exe = program(name);
    let d = Daemon::start(None);
    let f = run(&d, &exe, args);
    assert_passed(name, &f, &d, min_checks);
}

#[test]
fn vector_add_device_queries_memory_symbols_errors_occupancy() {
    run_passing("vector_add", &[], 66);
}

/// Device printf reaches the program's standard output at its synchronizations and blocking
/// copies, after its own earlier printf (tests/python/printf_checks.py checks the rest through the
/// driver API).
#[test]
fn device_printf_is_written_at_synchronizations() {
    run_passing("device_printf", &[], 9);
}

#[test]
fn streams_events_pinned_memory_and_host_callbacks() {
    run_passing("streams_events", &[], 21);
}

#[test]
fn malloc_async_frees_in_stream_order_and_gives_memory_back() {
    run_passing("malloc_async", &[], 32);
}

/// cudaGraphAddMemcpyNodeToSymbol / FromSymbol (tests/cuda/graph_symbol_nodes.cu): a `__device__`
/// variable written from page-locked memory and read back when the graph runs, twice; refusals; the
/// nodes changed with cudaGraphMemcpyNodeSetParamsToSymbol and cudaGraphExecMemcpyNodeSetParamsFromSymbol;
/// a kernel node (cudaGraphAddKernelNode), cudaGraphExecKernelNodeSetParams, and the node read back
/// (cudaGraphKernelNodeGetParams) and changed (cudaGraphKernelNodeSetParams); cudaGraphExecGetFlags.
#[test]
fn graph_memcpy_nodes_to_and_from_a_symbol() {
    run_passing("graph_symbol_nodes", &[], 11);
}

#[test]
fn per_thread_default_streams_from_several_threads() {
    // Built with `--default-stream per-thread` (the `// nvcc-flags:` line of the source).
    run_passing("per_thread_stream", &[], 34);
}

#[test]
fn one_thread_per_device() {
    run_passing("multi_thread_devices", &["2"], 18);
}

#[test]
fn memory_quota_holds_through_the_runtime_and_is_released_at_exit() {
    let _s = serial();
    let exe = program("memory_quota");
    let quota_mib = 512u64;
    let d = Daemon::start(Some(&tenant_config(&format!("{quota_mib}MiB"))));
    let f = run(&d, &exe, &[&quota_mib.to_string()]);
    assert_passed("memory_quota", &f, &d, 20);
    // The session is gone with the process: the tenant's usage is back to zero on every device.
    let t0 = Instant::now();
    loop {
        let used: Vec<u64> = (0..2).map(|dev| d.used("team", dev)).collect();
        if used.iter().all(|&u| u == 0) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "tenant `team` still uses {:?} MiB after memory_quota exited\n{}\n{}",
            used.iter().map(|u| u / MIB).collect::<Vec<_>>(),
            d.status(),
            d.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A program built against CUDA 12 (headers and `libcudart.so.12`): the runtime version it is
/// told is 12.x, `cudaGetDeviceProperties_v2` fills CUDA 12's `cudaDeviceProp` (fields after
/// `clockRate` checked against `cudaDeviceGetAttribute`, nothing written past the struct),
/// memory and error calls, and a hand-written PTX kernel loaded and launched through driver
/// entry points from CUDA 12's `cudaGetDriverEntryPoint` on a runtime stream.
#[test]
fn cuda12_program_gets_a_12_runtime_its_device_prop_layout_and_driver_entry_points() {
    let _s = serial();
    let exe = program12("host_api");
    // What makes it a CUDA 12 program, as the loader sees it.
    let imports = imported_symbols(&exe);
    let cuda: Vec<&String> = imports.iter().filter(|s| s.starts_with("cuda")).collect();
    assert!(!cuda.is_empty(), "{} imports no cuda* symbol: {imports:?}", exe.display());
    let unversioned: Vec<&&String> = cuda.iter().filter(|s| !s.ends_with("@libcudart.so.12")).collect();
    assert!(unversioned.is_empty(), "runtime imports not bound to libcudart.so.12: {unversioned:?}");
    for want in ["cudaGetDeviceProperties_v2@libcudart.so.12", "cudaGetDriverEntryPoint@libcudart.so.12"] {
        assert!(cuda.iter().any(|s| *s == want), "{} does not import {want}: {cuda:?}", exe.display());
    }
    // CUDA 12's header renames it to the _v2 export; the plain name takes CUDA 13's layout.
    assert!(
        !cuda.iter().any(|s| s.starts_with("cudaGetDeviceProperties@")),
        "{} imports the plain cudaGetDeviceProperties: {cuda:?}",
        exe.display()
    );
    let d = Daemon::start(None);
    let f = run(&d, &exe, &[]);
    assert_passed("cuda12/host_api", &f, &d, 133);
}

/// The share of wall time a compute_share run's kernels got on the device (its `share` line).
fn share_of(f: &Finished) -> Option<f64> {
    f.stdout.lines().find_map(|l| l.strip_prefix("share ")?.split_whitespace().next()?.parse().ok())
}

/// `<<<>>>` launches are held to the tenant's compute quota like driver launches: a loop of
/// 1 ms kernels (synchronising every 8) gets 30% of the device under `--compute 30`, and most of
/// it without a quota, measured on the device by the kernels themselves.
#[test]
fn runtime_launches_are_held_to_the_compute_quota() {
    let _s = serial();
    let exe = program("compute_share");
    let d = Daemon::start(None);
    let free = run(&d, &exe, &["2", "1000"]);
    assert_passed("compute_share without a quota", &free, &d, 1);
    let unthrottled = share_of(&free).expect("a share line");
    assert!(unthrottled >= 70.0, "without a quota the kernels got only {unthrottled:.1}% of the device");
    // The quota is device time, and the simulator's work around each kernel is device time the
    // program's kernel bodies do not show: held to 30%, the bodies get 30% of what they got
    // unthrottled (as tests/compute.rs converts with the charged/body ratio).
    let want = 30.0 * unthrottled / 100.0;
    // The machine is shared: a miss while the host was busy is the machine's (tests/compute.rs).
    gpupool_e2e::timed::measured(|| {
        let held = run_opts(&d, &["--compute", "30"], &exe, &["4", "1000"]);
        assert_passed("compute_share --compute 30", &held, &d, 1);
        let share = share_of(&held).expect("a share line");
        assert!(share <= 31.0, "--compute 30: the runtime's kernels got {share:.2}% of the device, over the cap");
        eprintln!("compute_share: {unthrottled:.1}% unthrottled, {share:.1}% under --compute 30 (want {want:.1})");
        if (share - want).abs() > 1.5 {
            return Err(format!(
                "--compute 30: the runtime's kernels got {share:.2}% of the device (want {want:.1} +- 1.5)"
            ));
        }
        Ok(())
    });
}
