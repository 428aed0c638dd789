//! CuPy 14 (the latest `cupy-cuda12x`) through the pool: its `cupy_backends` carry NVIDIA's CUDA
//! runtime 12.9 statically, which runs over libgpupool.so's driver API through the driver's
//! private export tables (interpose/EXPORT_TABLES.md). tests/python/cupy_checks.py (arrays and
//! copies, elementwise arithmetic, reductions, ElementwiseKernel / ReductionKernel / RawKernel,
//! a CUDA graph captured on two streams, the memory pool, OutOfMemoryError at the quota and recovery), each result compared with
//! NumPy, runs unmodified under `gpupool run` with CuPy 14 from target/venv-cupy14
//! (`scripts/setup-venv venv-cupy14 tests/python/requirements-cupy14.txt`).
//!
//! On the simulator: `CUPY_COMPILE_WITH_PTX=1` (NVRTC otherwise emits SASS, and the simulated
//! devices run PTX) and `CUPY_ACCELERATORS=` (CuPy's prebuilt CUB, Thrust and cupy.random
//! kernels are SASS for sm_50..sm_120 plus PTX for compute_100 only, so a compute 9.0 device
//! without SASS has no image for them; CuPy then reduces with its NVRTC-compiled kernels). On a
//! GPU host neither is needed.

mod common;

use common::{Daemon, ensure_interposer, gpupool_run_script, run_checks, tenant_config};
use std::path::PathBuf;
use std::time::Duration;

fn venv() -> PathBuf {
    let v = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv-cupy14");
    assert!(
        v.join("bin/python").exists(),
        "{} missing: run scripts/setup-venv venv-cupy14 tests/python/requirements-cupy14.txt",
        v.display()
    );
    v
}

#[test]
fn cupy14_static_runtime_arrays_kernels_memory_pool_and_quota_match_numpy() {
    ensure_interposer();
    let venv = venv();
    let quota_mib = 512;
    let d = Daemon::start(Some(&tenant_config(&format!("{quota_mib}MiB"))));
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cupy14-cache");
    let mut cmd = gpupool_run_script(&d, &venv.join("bin/python"), "cupy_checks.py");
    cmd.arg(quota_mib.to_string())
        .env_remove("LD_LIBRARY_PATH")
        .env("CUPY_COMPILE_WITH_PTX", "1")
        .env("CUPY_ACCELERATORS", "")
        .env("CUPY_CACHE_DIR", &cache)
        .env("GPUPOOL_TRACE_EXPORT_TABLES", "1")
        .env("GPUPOOL_LOG", "1");
    let stderr = run_checks(cmd, "cupy_checks", 30, &d).stderr;
    // It was NVIDIA's runtime 12.9, linked into CuPy, that ran: it proved the driver with the
    // integrity table and kept its per-context state in the context-local storage.
    assert!(
        stderr.contains("INTEGRITY_CHECK[1] integrity_check(version=12092")
            && stderr.contains("CONTEXT_LOCAL_STORAGE[0] put(")
            && !stderr.contains("not established"),
        "no trace of NVIDIA's static runtime 12.9 using the export tables:\n{stderr}"
    );
    // Everything the program held is back when it is gone.
    let t0 = std::time::Instant::now();
    while d.used("team", 0) != 0 || d.used("team", 1) != 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "memory still held after CuPy exited: {}", d.status());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `cupy.matmul` / `cupy.dot` with CuPy 14 (fp32, fp64, fp16, batched, transposed,
/// matrix-vector): CuPy's cuBLAS calls reach libgpupool.so's libcublas.so.12 stand-in (no NVIDIA
/// cuBLAS in this venv) and run in the daemon's cuBLAS, against NumPy.
#[test]
fn cupy14_matmul_and_dot_run_cublas_in_the_daemon() {
    ensure_interposer();
    let venv = venv();
    let d = Daemon::start(Some(&tenant_config("512MiB")));
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cupy14-cache");
    let mut cmd = gpupool_run_script(&d, &venv.join("bin/python"), "cupy_blas_checks.py");
    cmd.env_remove("LD_LIBRARY_PATH")
        .env("CUPY_COMPILE_WITH_PTX", "1")
        .env("CUPY_ACCELERATORS", "")
        .env("CUPY_CACHE_DIR", &cache)
        .env("GPUPOOL_LOG", "1");
    // cupy_blas_checks.py also checks that no NVIDIA cuBLAS is mapped in the client (this venv has
    // none): the GEMMs ran in the daemon.
    run_checks(cmd, "cupy_blas_checks", 8, &d);
}
