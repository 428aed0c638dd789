//! `cuGetProcAddress`, answered from the entry-point table shared with the simulator
//! (`gpupool_abi::driver_entry_points!`), built from this library's own exports.

use crate::util::{R as CuResult, entry as cuda_entry, out};
use gpupool_abi::proc::{Table, validate};
use gpupool_shim::cuda::{CUdriverProcAddressQueryResult as Q, CUresult, cuuint64_t};
use std::os::raw::{c_char, c_int, c_void};

use super::context::*;
use super::copy::*;
use super::copy3d::*;
use super::device::*;
use super::event::*;
use super::extra::*;
use super::init::*;
use super::launch::*;
use super::memory::*;
use super::memset::*;
use super::module::*;
use super::stream::*;

fn table() -> &'static Table {
    static TABLE: std::sync::OnceLock<Table> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| gpupool_abi::driver_entry_points!())
}

fn get_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: cuuint64_t,
    status: *mut Q,
) -> CuResult<()> {
    if symbol.is_null() || pfn.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let per_thread = validate(version, flags, super::init::driver_version()).map_err(|why| why.code())?;
    // SAFETY: non-null and NUL-terminated per the CUDA contract.
    let name = unsafe { std::ffi::CStr::from_ptr(symbol) }.to_str().unwrap_or("");
    let (f, q) = table().lookup(name, version, per_thread);
    out(pfn, f.unwrap_or(std::ptr::null()) as *mut c_void)?;
    if !status.is_null() {
        out(status, q)?;
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: cuuint64_t,
) -> CUresult {
    cuda_entry(|| get_proc_address(symbol, pfn, version, flags, std::ptr::null_mut()))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: cuuint64_t,
    status: *mut Q,
) -> CUresult {
    cuda_entry(|| get_proc_address(symbol, pfn, version, flags, status))
}
