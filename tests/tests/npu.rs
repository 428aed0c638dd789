//! The simulated NPU (sim-npu) driven by a plain C client (tests/c/npu_quickstart.c) compiled
//! against gpupool's CANN headers and linked with -lascendcl -lopapi -ldcmi against the
//! simulator's libdir, exactly as a CANN program links against CANN: the quickstart sequence
//! with aclnnAdd/Mul/Matmul/Softmax/ReduceSum checked against the CPU, fp16, streams and
//! events, the documented errors, out of memory at the device's size (207001), the sticky
//! fault of an out-of-range operand (507015), and DCMI against aclrtGetMemInfo.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use gpupool_e2e::{output_with_sim_env, sim_libdir};

fn exe() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("npu");
        std::fs::create_dir_all(&dir).expect("creating the output directory");
        let exe = dir.join("npu_quickstart");
        let libdir = sim_libdir();
        assert!(
            libdir.join("libascendcl.so").exists(),
            "{} holds no libascendcl.so (scripts/sim-libdir)",
            libdir.display()
        );
        let l = format!("-L{}", libdir.display());
        gpupool_e2e::compile_c_into("npu_quickstart.c", &exe, &[&l, "-lascendcl", "-lopapi", "-ldcmi", "-lm"]);
        exe
    })
}

/// Runs the client with the simulator configured by `env` alone; fails on any FAIL line.
fn run(env: &[(&str, &str)], must_run: &[&str]) {
    let mut cmd = Command::new(exe());
    cmd.env("LD_LIBRARY_PATH", sim_libdir());
    let Some(out) = output_with_sim_env(cmd, env, Duration::from_secs(120)) else {
        panic!("npu_quickstart did not finish within 120 s; env {env:?}");
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let fails: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        out.status.success() && fails.is_empty() && stdout.contains("SUMMARY"),
        "npu_quickstart with {env:?}: {}\n--- failures ---\n{}\n--- stdout ---\n{stdout}\n--- stderr ---\n{}",
        out.status,
        fails.join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    for check in must_run {
        assert!(stdout.lines().any(|l| l == format!("PASS {check}")), "check {check} did not run; output:\n{stdout}");
    }
}

/// The default configuration: two 64 GiB Ascend 910B3s.
#[test]
fn npu_quickstart_default_sim() {
    run(
        &[],
        &[
            "quickstart.add_matches_cpu",
            "quickstart.matmul_matches_cpu",
            "fp16.matmul_then_add_match_cpu",
            "views.transposed_matmul_matches_cpu",
            "views.sparse_and_offset_views",
            "events.ordered_across_streams",
            "errors.aclnn_executor_runs_once",
            "dcmi.hbm_usage_is_used",
            "dcmi.aicore_utilization_of_idle_device",
            "oom.larger_than_the_device",
            "fault.synchronize_reports_aicore_exception",
            "fault.nothing_written",
            "threads.other_context_unaffected",
            "errors.aclnn_too_many_elements",
            "reset.healthy_again",
        ],
    );
}

/// Three devices of 256 MiB: the client fills device 0 to ACL_ERROR_RT_MEMORY_ALLOCATION.
#[test]
fn npu_small_devices_run_out_of_memory_exactly() {
    run(
        &[("GPUPOOL_SIM_NPU_DEVICES", "3"), ("GPUPOOL_SIM_NPU_MEMORY", "256MiB")],
        &[
            "device.count.value",
            "meminfo.total_is_the_device",
            "oom.nothing_left",
            "oom.one_more_byte",
            "oom.fits_again",
        ],
    );
}
