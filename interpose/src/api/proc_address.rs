//! `cuGetProcAddress`, answered from the entry-point table shared with the simulator
//! (`gpupool_abi::driver_entry_points!`), built from this library's own exports.

use crate::util::R;
use gpupool_abi::proc::Table;
use gpupool_shim::cuda::{CUdriverProcAddressQueryResult as Q, cuuint64_t};
use std::os::raw::{c_char, c_int, c_void};

use super::exports::*;

fn table() -> &'static Table {
    static TABLE: std::sync::OnceLock<Table> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| gpupool_abi::driver_entry_points!())
}

pub(super) fn get_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: cuuint64_t,
) -> R<()> {
    get_proc_address_v2(symbol, pfn, version, flags, std::ptr::null_mut())
}

pub(super) fn get_proc_address_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: cuuint64_t,
    status: *mut Q,
) -> R<()> {
    // SAFETY: the CUDA contract for cuGetProcAddress's pointers, passed on unchanged.
    unsafe { table().answer(symbol, pfn, version, flags, status, super::init::driver_version()) }
        .map_err(|(code, _)| code)
}
