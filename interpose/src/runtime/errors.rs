//! The thread's last error, error names and descriptions, driver entry points (which
//! are this library's driver exports), and the small utilities a runtime exports.

use super::{Rt, cu, rt_exports, take_last_error};
use crate::api::exports::cuGetProcAddress_v2;
use gpupool_shim::cuda::CUdriverProcAddressQueryResult;
use gpupool_shim::cudart::{cudaChannelFormatDesc, cudaChannelFormatKind, cudaDriverEntryPointQueryResult, cudaError};
use std::os::raw::{c_char, c_int, c_uint, c_ulonglong, c_void};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGetLastError() -> cudaError {
    take_last_error(true)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaPeekAtLastError() -> cudaError {
    take_last_error(false)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGetErrorName(code: cudaError) -> *const c_char {
    gpupool_abi::errors::runtime_name_c(code).unwrap_or(c"cudaErrorUnknown").as_ptr()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaGetErrorString(code: cudaError) -> *const c_char {
    gpupool_abi::errors::runtime_description_c(code).unwrap_or(c"unrecognized error code").as_ptr()
}

/// The driver function `symbol` at the runtime's CUDA version (or `version`), from this
/// library's `cuGetProcAddress`: a program that asks the runtime for driver entry
/// points gets the forwarding ones.
fn entry_point(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: c_ulonglong,
    status: *mut cudaDriverEntryPointQueryResult,
) -> Rt<()> {
    if symbol.is_null() || pfn.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    let mut st = CUdriverProcAddressQueryResult::CU_GET_PROC_ADDRESS_SUCCESS;
    // SAFETY: our own export with the caller's checked pointers and our status slot.
    let r = cu(unsafe { cuGetProcAddress_v2(symbol, pfn, version, flags, &mut st) });
    if !status.is_null() {
        // SAFETY: non-null per the check; the enums share numbers and size.
        unsafe { status.write_unaligned(cudaDriverEntryPointQueryResult(st.0 as _)) };
    }
    r
}

fn driver_entry_point(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    flags: c_ulonglong,
    status: *mut cudaDriverEntryPointQueryResult,
) -> Rt<()> {
    entry_point(symbol, pfn, super::runtime_version(), flags, status)
}

fn driver_entry_point_by_version(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_uint,
    flags: c_ulonglong,
    status: *mut cudaDriverEntryPointQueryResult,
) -> Rt<()> {
    entry_point(symbol, pfn, c_int::try_from(version).map_err(|_| cudaError::cudaErrorInvalidValue)?, flags, status)
}

/// Without a profiler attached NVIDIA's runtime accepts these and does nothing; there
/// is no profiler behind the pool either.
fn profiler_toggle() -> Rt<()> {
    Ok(())
}

rt_exports! {
    cudaGetDriverEntryPoint => driver_entry_point(
        symbol: *const c_char, pfn: *mut *mut c_void, flags: c_ulonglong, status: *mut cudaDriverEntryPointQueryResult);
    cudaGetDriverEntryPoint_ptsz => driver_entry_point(
        symbol: *const c_char, pfn: *mut *mut c_void, flags: c_ulonglong, status: *mut cudaDriverEntryPointQueryResult);
    cudaGetDriverEntryPointByVersion => driver_entry_point_by_version(
        symbol: *const c_char, pfn: *mut *mut c_void, version: c_uint, flags: c_ulonglong,
        status: *mut cudaDriverEntryPointQueryResult);
    cudaGetDriverEntryPointByVersion_ptsz => driver_entry_point_by_version(
        symbol: *const c_char, pfn: *mut *mut c_void, version: c_uint, flags: c_ulonglong,
        status: *mut cudaDriverEntryPointQueryResult);
    cudaProfilerStart => profiler_toggle();
    cudaProfilerStop => profiler_toggle();
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cudaCreateChannelDesc(
    x: c_int,
    y: c_int,
    z: c_int,
    w: c_int,
    f: cudaChannelFormatKind,
) -> cudaChannelFormatDesc {
    cudaChannelFormatDesc { x, y, z, w, f }
}
