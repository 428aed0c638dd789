//! `cuGetProcAddress`, answered from the entry-point table shared with the simulator
//! (`gpupool_abi::driver_entry_points!`), built from this library's own exports.

use crate::util::{R as CuResult, entry as cuda_entry};
use gpupool_abi::proc::Table;
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
    // SAFETY: the CUDA contract for cuGetProcAddress's pointers, passed on unchanged.
    unsafe { table().answer(symbol, pfn, version, flags, status, super::init::driver_version()) }
        .map_err(|(code, _)| code)
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
