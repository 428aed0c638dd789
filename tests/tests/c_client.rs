//! A plain C client of the driver API (tests/c/driver_api.c), compiled with `cc` against
//! gpupool's own headers (shim-headers/include) and run against the simulator as its
//! libcuda.so.1 (found through LD_LIBRARY_PATH, exactly as a real program finds the driver).
//!
//! The C program prints one `PASS name` / `FAIL name: detail` line per check and exits
//! non-zero on any failure. Each test here runs it once, in its own process, with one
//! simulator configuration; the program reads the same GPUPOOL_SIM_* variables to know
//! what to expect.
//!
//! Sim lib dir: `$GPUPOOL_SIM_LIBDIR`, else `scripts/sim-libdir` (see `gpupool_e2e::sim_libdir`).
//! Compiler: `$CC`, else `cc`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use gpupool_e2e::{output_with_sim_env, sim_libdir};

/// Compiles tests/c/driver_api.c once per test binary and returns the executable.
fn driver_api_exe() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        gpupool_e2e::compile_c("driver_api", &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c_client"))
    })
}

struct Run {
    stdout: String,
    stderr: String,
    success: bool,
    status: String,
}

/// Runs the C program with the simulator on LD_LIBRARY_PATH and only the given GPUPOOL_SIM_*.
fn run_driver_api(env: &[(&str, &str)]) -> Run {
    let exe = driver_api_exe();
    let libdir = sim_libdir();
    assert!(
        libdir.join("libcuda.so.1").exists(),
        "{} holds no libcuda.so.1 (set GPUPOOL_SIM_LIBDIR or fix scripts/sim-libdir)",
        libdir.display()
    );
    let ld_path = match std::env::var("LD_LIBRARY_PATH") {
        Ok(old) if !old.is_empty() => format!("{}:{old}", libdir.display()),
        _ => libdir.display().to_string(),
    };
    let mut cmd = Command::new(exe);
    cmd.env("LD_LIBRARY_PATH", ld_path);
    let Some(out) = output_with_sim_env(cmd, env, Duration::from_secs(180)) else {
        panic!("driver_api did not finish within 180 s (killed); env {env:?}");
    };
    Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        success: out.status.success(),
        status: out.status.to_string(),
    }
}

/// Fails with every FAIL line (and the full output) unless the run passed cleanly.
fn assert_clean(run: &Run, env: &[(&str, &str)]) {
    let fails: Vec<&str> = run.stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    let passes = run.stdout.lines().filter(|l| l.starts_with("PASS")).count();
    let summary = run.stdout.lines().any(|l| l.starts_with("SUMMARY"));
    if !run.success || !fails.is_empty() || !summary || passes == 0 {
        panic!(
            "driver_api with {env:?}: {} ({} passed, {} failed, summary printed: {summary})\n\
             --- failures ---\n{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            run.status,
            passes,
            fails.len(),
            fails.join("\n"),
            run.stdout,
            run.stderr
        );
    }
}

fn assert_ran(run: &Run, check: &str) {
    let line = format!("PASS {check}");
    assert!(
        run.stdout.lines().any(|l| l == line),
        "expected the check `{check}` to run and pass; output:\n{}",
        run.stdout
    );
}

/// Default simulator: 2 H100-like devices of 80 GiB, driver 13.0.
#[test]
fn c_driver_api_default_sim() {
    let env = [];
    let run = run_driver_api(&env);
    assert_clean(&run, &env);
    for check in [
        "before_init.cuDeviceGetCount",
        "device1.attr.sm_count.value",
        "proc.cuMemAlloc@12000.value",
        "isolation.free_other_context_pointer",
        "oom.larger_than_total",
        "threads.shared_primary_context",
        "threads.own_contexts",
    ] {
        assert_ran(&run, check);
    }
}

/// A small device: the program fills it to CUDA_ERROR_OUT_OF_MEMORY; also three devices and
/// a CUDA 12.8 driver, to see that the configuration is honoured.
#[test]
fn c_driver_api_small_memory_oom() {
    let env = [("GPUPOOL_SIM_MEMORY", "256MiB"), ("GPUPOOL_SIM_DEVICES", "3"), ("GPUPOOL_SIM_DRIVER_VERSION", "12.8")];
    let run = run_driver_api(&env);
    assert_clean(&run, &env);
    for check in
        ["oom.fill", "oom.fill.boundary", "oom.fill.error_code", "device2.total_mem.value", "device.count.value"]
    {
        assert_ran(&run, check);
    }
}

/// One device, driver version given in its integer form.
#[test]
fn c_driver_api_single_device() {
    let env = [("GPUPOOL_SIM_DEVICES", "1"), ("GPUPOOL_SIM_DRIVER_VERSION", "13000"), ("GPUPOOL_SIM_MEMORY", "1GiB")];
    let run = run_driver_api(&env);
    assert_clean(&run, &env);
    assert_ran(&run, "device.count.value");
    assert_ran(&run, "oom.fill");
    assert!(!run.stdout.contains("device1."), "checks ran against a second device that should not exist");
}

/// Graph memory nodes on the simulator (tests/c/graph_mem_client.c --sim, a 64 MiB device): the
/// address when the node is added, memory allocated at upload or launch and counted by
/// cuMemGetInfo and the graph memory attributes, kept after the instantiated graph and reused,
/// freed by cuDeviceGraphMemTrim; an allocation past the device's memory fails the upload with
/// CUDA_ERROR_OUT_OF_MEMORY; CUDA's rules for graphs with memory nodes.
#[test]
fn c_graph_memory_nodes_on_the_simulator() {
    assert_eq!(
        graph_client_on_sim(
            "graph_mem_client",
            &["--sim"],
            &[("GPUPOOL_SIM_MEMORY", "64MiB"), ("GPUPOOL_SIM_DEVICES", "1")]
        ),
        7
    );
}

/// Conditional graph nodes on the simulator (tests/c/graph_cond_client.c): WHILE, IF/ELSE and SWITCH
/// nodes over body graphs the driver makes, on values kernels set with cudaGraphSetConditional.
#[test]
fn c_graph_conditional_nodes_on_the_simulator() {
    assert_eq!(graph_client_on_sim("graph_cond_client", &[], &[]), 3);
}

/// Memset and memcpy node parameters on the simulator (tests/c/graph_params_client.c): read back,
/// changed on the graph and on one instantiated graph, bad changes refused.
#[test]
fn c_graph_node_parameters_on_the_simulator() {
    assert_eq!(graph_client_on_sim("graph_params_client", &[], &[]), 11);
}

/// Capture into an existing graph on the simulator (tests/c/graph_capture_client.c): after an
/// explicit node, cuStreamGetCaptureInfo_v2's graph and dependencies, dependencies set and added
/// with cuStreamUpdateCaptureDependencies, the replay in dependency order.
#[test]
fn c_capture_to_graph_on_the_simulator() {
    assert_eq!(graph_client_on_sim("graph_capture_client", &[], &[]), 5);
}

/// Runs tests/c/NAME.c (compiled here) on the simulator with ARGS and the simulator's ENV; it must
/// exit 0 and end with "done". Answers its number of "ok" lines.
fn graph_client_on_sim(name: &str, args: &[&str], env: &[(&str, &str)]) -> usize {
    let exe = gpupool_e2e::compile_c(name, &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c_client"));
    let mut cmd = Command::new(exe);
    cmd.args(args).env("LD_LIBRARY_PATH", sim_libdir());
    let out =
        output_with_sim_env(cmd, env, Duration::from_secs(120)).unwrap_or_else(|| panic!("{name} did not finish"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{name}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.ends_with("done\n"), "{stdout}");
    stdout.lines().filter(|l| l.starts_with("ok ")).count()
}
