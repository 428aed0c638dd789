//! cuBLAS statuses: their names and descriptions, and refusing a call with one.

use gpupool_shim::cublas::cublasStatus_t as S;

/// Every fallible step inside the library ends in the status the call returns.
pub type BlasResult<T> = Result<T, S>;

/// Logs why a call failed, then returns the status. Like the simulator's driver, the library
/// writes nothing unless `GPUPOOL_SIM_LOG` is set: a library must not write to a program's stderr.
pub fn fail<T>(status: S, why: impl FnOnce() -> String) -> BlasResult<T> {
    if log_enabled() {
        eprintln!("gpupool-sim-blas: {} ({}): {}", name(status), status.0, why());
    }
    Err(status)
}

fn log_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var_os("GPUPOOL_SIM_LOG").is_some_and(|v| !v.is_empty() && v != "0"))
}

/// `cublasGetStatusName`, NUL-terminated for the C side.
pub fn name_c(status: S) -> &'static std::ffi::CStr {
    match status {
        S::CUBLAS_STATUS_SUCCESS => c"CUBLAS_STATUS_SUCCESS",
        S::CUBLAS_STATUS_NOT_INITIALIZED => c"CUBLAS_STATUS_NOT_INITIALIZED",
        S::CUBLAS_STATUS_ALLOC_FAILED => c"CUBLAS_STATUS_ALLOC_FAILED",
        S::CUBLAS_STATUS_INVALID_VALUE => c"CUBLAS_STATUS_INVALID_VALUE",
        S::CUBLAS_STATUS_ARCH_MISMATCH => c"CUBLAS_STATUS_ARCH_MISMATCH",
        S::CUBLAS_STATUS_MAPPING_ERROR => c"CUBLAS_STATUS_MAPPING_ERROR",
        S::CUBLAS_STATUS_EXECUTION_FAILED => c"CUBLAS_STATUS_EXECUTION_FAILED",
        S::CUBLAS_STATUS_INTERNAL_ERROR => c"CUBLAS_STATUS_INTERNAL_ERROR",
        S::CUBLAS_STATUS_NOT_SUPPORTED => c"CUBLAS_STATUS_NOT_SUPPORTED",
        S::CUBLAS_STATUS_LICENSE_ERROR => c"CUBLAS_STATUS_LICENSE_ERROR",
        _ => c"CUBLAS_STATUS_UNKNOWN",
    }
}

pub fn name(status: S) -> &'static str {
    name_c(status).to_str().unwrap_or("CUBLAS_STATUS_UNKNOWN")
}

/// `cublasGetStatusString`: NVIDIA's wording.
pub fn string_c(status: S) -> &'static std::ffi::CStr {
    match status {
        S::CUBLAS_STATUS_SUCCESS => c"success",
        S::CUBLAS_STATUS_NOT_INITIALIZED => c"the library was not initialized",
        S::CUBLAS_STATUS_ALLOC_FAILED => c"the resource allocation failed",
        S::CUBLAS_STATUS_INVALID_VALUE => c"an invalid numeric value was used as an argument",
        S::CUBLAS_STATUS_ARCH_MISMATCH => c"an absent device architectural feature is required",
        S::CUBLAS_STATUS_MAPPING_ERROR => c"an access to GPU memory space failed",
        S::CUBLAS_STATUS_EXECUTION_FAILED => c"the GPU program failed to execute",
        S::CUBLAS_STATUS_INTERNAL_ERROR => c"an internal operation failed",
        S::CUBLAS_STATUS_NOT_SUPPORTED => c"the functionality requested is not supported",
        S::CUBLAS_STATUS_LICENSE_ERROR => c"an error was detected when checking the current licensing",
        _ => c"unknown error",
    }
}

/// Runs the body of an export: `Ok` is SUCCESS, and a panic becomes INTERNAL_ERROR (logged),
/// so no unwinding crosses `extern "C"`.
pub fn entry(body: impl FnOnce() -> BlasResult<()>) -> S {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => S::CUBLAS_STATUS_SUCCESS,
        Ok(Err(s)) => s,
        Err(_) => {
            eprintln!("gpupool-sim-blas: internal panic in a cuBLAS call; returning CUBLAS_STATUS_INTERNAL_ERROR");
            S::CUBLAS_STATUS_INTERNAL_ERROR
        }
    }
}
