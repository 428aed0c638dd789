//! CuPy through the pool: tests/python/cupy_checks.py (array creation and copies, elementwise
//! arithmetic, reductions, ElementwiseKernel / ReductionKernel / RawKernel, a CUDA graph captured
//! on two streams and replayed, the memory quota), each
//! result compared with NumPy, run unmodified under `gpupool run` with CuPy 12 from
//! target/venv-cupy (`scripts/setup-venv venv-cupy tests/python/requirements-cupy.txt`; see that
//! file for why CuPy 12). CuPy loads `libcudart.so.12` and `libcuda.so.1`, both served by
//! libgpupool.so, and compiles its kernels with NVRTC at run time.
//!
//! `CUPY_COMPILE_WITH_PTX=1`: CuPy otherwise asks NVRTC for machine code (SASS) for the device's
//! architecture, and the simulated devices execute PTX. On a real GPU host it is not needed.

mod common;

use common::{Daemon, ensure_interposer, gpupool_run_script, run_checks, tenant_config};
use std::path::PathBuf;
use std::time::Duration;

fn venv() -> PathBuf {
    let v = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/venv-cupy");
    assert!(
        v.join("bin/python").exists(),
        "{} missing: run scripts/setup-venv venv-cupy tests/python/requirements-cupy.txt",
        v.display()
    );
    v
}

/// The lib directories of the NVIDIA wheels CuPy's modules name in DT_NEEDED.
fn wheel_libs(venv: &std::path::Path) -> String {
    let site = std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("site-packages/nvidia"))
        .find(|p| p.exists())
        .expect("the CuPy venv has NVIDIA wheels");
    let mut dirs: Vec<String> = std::fs::read_dir(&site)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("lib"))
        .filter(|p| p.exists())
        .map(|p| p.display().to_string())
        .collect();
    dirs.sort();
    dirs.join(":")
}

#[test]
fn cupy_arrays_elementwise_reductions_and_kernels_match_numpy() {
    ensure_interposer();
    let venv = venv();
    let quota_mib = 512;
    let d = Daemon::start(Some(&tenant_config(&format!("{quota_mib}MiB"))));
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cupy-cache");
    let mut cmd = gpupool_run_script(&d, &venv.join("bin/python"), "cupy_checks.py");
    cmd.arg(quota_mib.to_string())
        .env("LD_LIBRARY_PATH", wheel_libs(&venv))
        .env("CUPY_COMPILE_WITH_PTX", "1")
        .env("CUPY_CACHE_DIR", &cache)
        .env("GPUPOOL_LOG", "1");
    run_checks(cmd, "cupy_checks", 30, &d);
    // Everything the program held is back when it is gone.
    let t0 = std::time::Instant::now();
    while d.used("team", 0) != 0 || d.used("team", 1) != 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "memory still held after CuPy exited: {}", d.status());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `cupy.matmul` / `cupy.dot` (fp32, fp64, fp16, batched, transposed, matrix-vector) through the
/// pool: CuPy's cublas module loads `libcublas.so.12` by DT_NEEDED, which `gpupool run` serves
/// with a stand-in, so each call goes to the daemon and runs in the simulator's cuBLAS.
#[test]
fn cupy_matmul_and_dot_run_cublas_in_the_daemon() {
    ensure_interposer();
    let venv = venv();
    let d = Daemon::start(Some(&tenant_config("512MiB")));
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cupy-cache");
    let mut cmd = gpupool_run_script(&d, &venv.join("bin/python"), "cupy_blas_checks.py");
    cmd.env("LD_LIBRARY_PATH", wheel_libs(&venv))
        .env("CUPY_COMPILE_WITH_PTX", "1")
        .env("CUPY_CACHE_DIR", &cache)
        .env("GPUPOOL_LOG", "1");
    run_checks(cmd, "cupy_blas_checks", 8, &d);
}
