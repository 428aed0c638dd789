//! Results inside the simulator, and how they cross the C boundary.

use gpupool_shim::cuda::CUresult;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Every internal operation returns the vendor's status code on failure.
pub type CuResult<T> = Result<T, CUresult>;

/// Logs why a call failed, then returns the code. The sim prints nothing unless
/// `GPUPOOL_SIM_LOG` is set, as a driver must not write to a program's stderr.
pub fn fail<T>(code: CUresult, why: impl FnOnce() -> String) -> CuResult<T> {
    if log_enabled() {
        eprintln!("gpupool-sim: {} ({}): {}", gpupool_abi::errors::name(code), code.0, why());
    }
    Err(code)
}

pub fn log_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var_os("GPUPOOL_SIM_LOG").is_some_and(|v| !v.is_empty() && v != "0"))
}

/// Runs the body of an exported CUDA function: maps `Ok` to `CUDA_SUCCESS` and a
/// panic to `CUDA_ERROR_UNKNOWN`, so no unwinding crosses `extern "C"`.
pub fn cuda_entry(body: impl FnOnce() -> CuResult<()>) -> CUresult {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => CUresult::CUDA_SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => {
            eprintln!("gpupool-sim: internal panic in a driver call; returning CUDA_ERROR_UNKNOWN");
            CUresult::CUDA_ERROR_UNKNOWN
        }
    }
}
