//! `cuGetProcAddress`, answered from the entry-point table shared with the interposer
//! (`gpupool_abi::driver_entry_points!`), built from this library's own exports.

use super::out;
use crate::driver::state;
use crate::error::{CuResult, cuda_entry, fail};
use gpupool_abi::proc::{Table, validate};
use gpupool_shim::cuda::{CUdriverProcAddressQueryResult as Q, CUresult, cuuint64_t};
use std::os::raw::{c_char, c_int, c_void};

use super::context::*;
use super::copy::*;
use super::device::*;
use super::event::*;
use super::graph::*;
use super::init::*;
use super::launch::*;
use super::memory::*;
use super::module::*;
use super::stream::*;

fn table() -> &'static Table {
    static TABLE: std::sync::OnceLock<Table> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| gpupool_abi::driver_entry_points!())
}

/// Every base name the table knows (for tests and diagnostics).
pub fn names() -> impl Iterator<Item = &'static str> {
    table().names()
}

fn get_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: cuuint64_t,
    status: *mut Q,
) -> CuResult<()> {
    if symbol.is_null() || pfn.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null symbol or pfn".into());
    }
    let per_thread = match validate(version, flags, state().config.driver_version) {
        Ok(p) => p,
        Err(why) => return fail(why.code(), || why.to_string()),
    };
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
