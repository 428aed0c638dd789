//! `cuGetProcAddress`, answered from the entry-point table shared with the interposer
//! (`gpupool_abi::driver_entry_points!`), built from this library's own exports.

use crate::driver::state;
use crate::error::{CuResult, cuda_entry, fail};
use gpupool_abi::proc::Table;
use gpupool_shim::cuda::{CUdriverProcAddressQueryResult as Q, CUresult, cuuint64_t};
use std::os::raw::{c_char, c_int, c_void};

use super::array::*;
use super::context::*;
use super::copy::*;
use super::device::*;
use super::event::*;
use super::features::*;
use super::graph::*;
use super::graph_node::*;
use super::init::*;
use super::ipc::*;
use super::launch::*;
use super::memory::*;
use super::mempool::*;
use super::module::*;
use super::stream::*;
use super::texture::*;
use super::vmm::*;

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
    // SAFETY: the CUDA contract for cuGetProcAddress's pointers, passed on unchanged.
    match unsafe { table().answer(symbol, pfn, version, flags, status, state().config.driver_version) } {
        Ok(()) => Ok(()),
        Err((code, why)) => fail(code, || why),
    }
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
