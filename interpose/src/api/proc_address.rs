//! `cuGetProcAddress`, answered from the entry-point table shared with the simulator
//! (`gpupool_abi::driver_entry_points!`), built from this library's own exports.

use crate::util::R;
use gpupool_abi::proc::Table;
use gpupool_shim::cuda::{CUdriverProcAddressQueryResult as Q, cuuint64_t};
use std::os::raw::{c_char, c_int, c_void};

use super::array::*;
use super::exports::*;

fn table() -> &'static Table {
    static TABLE: std::sync::OnceLock<Table> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| gpupool_abi::driver_entry_points!())
}

/// Entry points this library serves beyond the simulator's table, which NVIDIA's runtime
/// needs: the library API (the simulator, loaded by the daemon, is handed modules) occupancy
/// (answered here from the function's attributes) and capture queries.
fn pool_only() -> &'static Table {
    static TABLE: std::sync::OnceLock<Table> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        gpupool_abi::__table! {
            "cuLibraryLoadData" => [12000 => cuLibraryLoadData];
            "cuLibraryLoadFromFile" => [12000 => cuLibraryLoadFromFile];
            "cuLibraryUnload" => [12000 => cuLibraryUnload];
            "cuLibraryGetKernel" => [12000 => cuLibraryGetKernel];
            "cuLibraryGetModule" => [12000 => cuLibraryGetModule];
            "cuLibraryGetGlobal" => [12000 => cuLibraryGetGlobal];
            "cuKernelGetFunction" => [12000 => cuKernelGetFunction];
            "cuKernelGetAttribute" => [12000 => cuKernelGetAttribute];
            "cuKernelSetAttribute" => [12000 => cuKernelSetAttribute];
            "cuKernelSetCacheConfig" => [12000 => cuKernelSetCacheConfig];
            "cuKernelGetName" => [12030 => cuKernelGetName];
            "cuKernelGetParamInfo" => [12040 => cuKernelGetParamInfo];
            "cuStreamGetCaptureInfo" => [10010 => !, 11030 => cuStreamGetCaptureInfo_v2 | cuStreamGetCaptureInfo_v2_ptsz,
                12030 => cuStreamGetCaptureInfo_v3 | cuStreamGetCaptureInfo_v3_ptsz];
            "cuOccupancyMaxActiveBlocksPerMultiprocessor" => [6050 => cuOccupancyMaxActiveBlocksPerMultiprocessor];
            "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"
                => [7000 => cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags];
            "cuGraphGetEdges" => [10000 => cuGraphGetEdges, 12030 => cuGraphGetEdges_v2];
            "cuGraphNodeGetDependencies" => [10000 => cuGraphNodeGetDependencies, 12030 => cuGraphNodeGetDependencies_v2];
            "cuGraphNodeGetDependentNodes" => [10000 => cuGraphNodeGetDependentNodes,
                12030 => cuGraphNodeGetDependentNodes_v2];
            "cuOccupancyMaxPotentialBlockSize" => [6050 => cuOccupancyMaxPotentialBlockSize];
            "cuOccupancyMaxPotentialBlockSizeWithFlags" => [7000 => cuOccupancyMaxPotentialBlockSizeWithFlags];
        }
    })
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
    let driver = super::init::driver_version();
    // SAFETY: the CUDA contract for cuGetProcAddress's pointers, passed on unchanged.
    unsafe { pool_only().answer(symbol, pfn, version, flags, status, driver) }.map_err(|(code, _)| code)?;
    // SAFETY: `answer` succeeded, so `pfn` is non-null and was written.
    if !unsafe { *pfn }.is_null() {
        return Ok(());
    }
    // SAFETY: as above.
    unsafe { table().answer(symbol, pfn, version, flags, status, driver) }.map_err(|(code, _)| code)
}
