//! `cuGetProcAddress`: the table (built as the simulator's is) through which cudart and cuda-python find every
//! entry point. One line per base name lists, from oldest ABI to newest, the CUDA
//! version each variant appeared in, the export that implements it and, where one
//! exists, its per-thread-default-stream twin. A variant whose ABI we do not
//! implement is listed as `!`, so a caller asking for that ABI gets "not found"
//! instead of a function with the wrong signature.

use crate::util::{R as CuResult, entry as cuda_entry, out};
use gpupool_shim::cuda::{
    CUdriverProcAddress_flags as Flags, CUdriverProcAddressQueryResult as Q, CUresult, cuuint64_t,
};
use std::os::raw::{c_char, c_int, c_void};

type Ptr = *const c_void;

/// One ABI variant of a base name: introduced in `version`; `None` if unimplemented.
struct Variant {
    version: i32,
    default: Option<Ptr>,
    per_thread: Option<Ptr>,
}

struct Entry {
    name: &'static str,
    variants: Vec<Variant>,
}

macro_rules! variant {
    ($v:literal => !) => {
        Variant {
            version: $v,
            default: None,
            per_thread: None,
        }
    };
    ($v:literal => $f:ident) => {{
        check_signature!($f);
        Variant {
            version: $v,
            default: Some($f as Ptr),
            per_thread: None,
        }
    }};
    ($v:literal => $f:ident | $p:ident) => {{
        check_signature!($f);
        check_signature!($p);
        Variant {
            version: $v,
            default: Some($f as Ptr),
            per_thread: Some($p as Ptr),
        }
    }};
}

/// Fails to compile if our export's signature differs from the declaration bindgen
/// generated from our header (itself checked against NVIDIA's): both must coerce to
/// one function-pointer type.
macro_rules! check_signature {
    ($f:ident) => {
        let _ = [gpupool_shim::cuda::$f, $f];
    };
}

macro_rules! table {
    ($($name:literal => [$($v:literal => $a:tt $(| $b:ident)?),+ $(,)?];)*) => {
        vec![$(Entry { name: $name, variants: vec![$(variant!($v => $a $(| $b)?)),+] }),*]
    };
}

use super::context::*;
use super::copy::*;
use super::device::*;
use super::event::*;
use super::extra::*;
use super::init::*;
use super::launch::*;
use super::memory::*;
use super::memset::*;
use super::module::*;
use super::stream::*;

fn build() -> Vec<Entry> {
    table! {
        "cuInit" => [2000 => cuInit];
        "cuDriverGetVersion" => [2020 => cuDriverGetVersion];
        "cuGetErrorString" => [6000 => cuGetErrorString];
        "cuGetErrorName" => [6000 => cuGetErrorName];
        "cuGetProcAddress" => [11030 => cuGetProcAddress, 12000 => cuGetProcAddress_v2];
        "cuGetExportTable" => [3000 => cuGetExportTable];
        "cuDeviceGet" => [2000 => cuDeviceGet];
        "cuDeviceGetCount" => [2000 => cuDeviceGetCount];
        "cuDeviceGetName" => [2000 => cuDeviceGetName];
        "cuDeviceGetUuid" => [9020 => cuDeviceGetUuid, 11040 => cuDeviceGetUuid_v2];
        "cuDeviceTotalMem" => [2000 => !, 3020 => cuDeviceTotalMem_v2];
        "cuDeviceGetAttribute" => [2000 => cuDeviceGetAttribute];
        "cuDeviceGetProperties" => [2000 => cuDeviceGetProperties];
        "cuDeviceComputeCapability" => [2000 => cuDeviceComputeCapability];
        "cuDeviceGetPCIBusId" => [4010 => cuDeviceGetPCIBusId];
        "cuDeviceGetByPCIBusId" => [4010 => cuDeviceGetByPCIBusId];
        "cuDeviceCanAccessPeer" => [4000 => cuDeviceCanAccessPeer];
        "cuDevicePrimaryCtxRetain" => [7000 => cuDevicePrimaryCtxRetain];
        "cuDevicePrimaryCtxRelease" => [7000 => !, 11000 => cuDevicePrimaryCtxRelease_v2];
        "cuDevicePrimaryCtxReset" => [7000 => !, 11000 => cuDevicePrimaryCtxReset_v2];
        "cuDevicePrimaryCtxGetState" => [7000 => cuDevicePrimaryCtxGetState];
        "cuDevicePrimaryCtxSetFlags" => [7000 => !, 11000 => cuDevicePrimaryCtxSetFlags_v2];
        "cuCtxCreate" => [2000 => !, 3020 => cuCtxCreate_v2, 11040 => cuCtxCreate_v3, 12050 => cuCtxCreate_v4];
        "cuCtxDestroy" => [2000 => !, 4000 => cuCtxDestroy_v2];
        "cuCtxPushCurrent" => [2000 => !, 4000 => cuCtxPushCurrent_v2];
        "cuCtxPopCurrent" => [2000 => !, 4000 => cuCtxPopCurrent_v2];
        "cuCtxSetCurrent" => [4000 => cuCtxSetCurrent];
        "cuCtxGetCurrent" => [4000 => cuCtxGetCurrent];
        "cuCtxGetDevice" => [2000 => cuCtxGetDevice];
        "cuCtxGetFlags" => [7000 => cuCtxGetFlags];
        "cuCtxGetApiVersion" => [3020 => cuCtxGetApiVersion];
        "cuCtxSynchronize" => [2000 => cuCtxSynchronize];
        "cuCtxGetLimit" => [3010 => cuCtxGetLimit];
        "cuCtxSetLimit" => [3010 => cuCtxSetLimit];
        "cuCtxGetCacheConfig" => [3020 => cuCtxGetCacheConfig];
        "cuCtxSetCacheConfig" => [3020 => cuCtxSetCacheConfig];
        "cuCtxGetStreamPriorityRange" => [5050 => cuCtxGetStreamPriorityRange];
        "cuMemGetInfo" => [2000 => !, 3020 => cuMemGetInfo_v2];
        "cuMemAlloc" => [2000 => !, 3020 => cuMemAlloc_v2];
        "cuMemAllocPitch" => [2000 => !, 3020 => cuMemAllocPitch_v2];
        "cuMemFree" => [2000 => !, 3020 => cuMemFree_v2];
        "cuMemGetAddressRange" => [2000 => !, 3020 => cuMemGetAddressRange_v2];
        "cuMemAllocHost" => [2000 => !, 3020 => cuMemAllocHost_v2];
        "cuMemHostAlloc" => [2020 => cuMemHostAlloc];
        "cuMemFreeHost" => [2000 => cuMemFreeHost];
        "cuMemHostGetDevicePointer" => [2020 => !, 3020 => cuMemHostGetDevicePointer_v2];
        "cuMemHostGetFlags" => [2030 => cuMemHostGetFlags];
        "cuMemHostRegister" => [4000 => !, 6050 => cuMemHostRegister_v2];
        "cuMemHostUnregister" => [4000 => cuMemHostUnregister];
        "cuMemAllocAsync" => [11020 => cuMemAllocAsync | cuMemAllocAsync_ptsz];
        "cuMemFreeAsync" => [11020 => cuMemFreeAsync | cuMemFreeAsync_ptsz];
        "cuPointerGetAttribute" => [4000 => cuPointerGetAttribute];
        "cuPointerGetAttributes" => [7000 => cuPointerGetAttributes];
        "cuMemcpy" => [4000 => cuMemcpy | cuMemcpy_ptds];
        "cuMemcpyAsync" => [4000 => cuMemcpyAsync | cuMemcpyAsync_ptsz];
        "cuMemcpyPeer" => [4000 => cuMemcpyPeer | cuMemcpyPeer_ptds];
        "cuMemcpyPeerAsync" => [4000 => cuMemcpyPeerAsync | cuMemcpyPeerAsync_ptsz];
        "cuMemcpyHtoD" => [2000 => !, 3020 => cuMemcpyHtoD_v2 | cuMemcpyHtoD_v2_ptds];
        "cuMemcpyDtoH" => [2000 => !, 3020 => cuMemcpyDtoH_v2 | cuMemcpyDtoH_v2_ptds];
        "cuMemcpyDtoD" => [2000 => !, 3020 => cuMemcpyDtoD_v2 | cuMemcpyDtoD_v2_ptds];
        "cuMemcpyHtoDAsync" => [2000 => !, 3020 => cuMemcpyHtoDAsync_v2 | cuMemcpyHtoDAsync_v2_ptsz];
        "cuMemcpyDtoHAsync" => [2000 => !, 3020 => cuMemcpyDtoHAsync_v2 | cuMemcpyDtoHAsync_v2_ptsz];
        "cuMemcpyDtoDAsync" => [3000 => !, 3020 => cuMemcpyDtoDAsync_v2 | cuMemcpyDtoDAsync_v2_ptsz];
        "cuMemcpy2D" => [2000 => !, 3020 => cuMemcpy2D_v2 | cuMemcpy2D_v2_ptds];
        "cuMemcpy2DUnaligned" => [2000 => !, 3020 => cuMemcpy2DUnaligned_v2 | cuMemcpy2DUnaligned_v2_ptds];
        "cuMemcpy2DAsync" => [2000 => !, 3020 => cuMemcpy2DAsync_v2 | cuMemcpy2DAsync_v2_ptsz];
        "cuMemcpy3D" => [2000 => !, 3020 => cuMemcpy3D_v2 | cuMemcpy3D_v2_ptds];
        "cuMemcpy3DAsync" => [2000 => !, 3020 => cuMemcpy3DAsync_v2 | cuMemcpy3DAsync_v2_ptsz];
        "cuMemsetD8" => [2000 => !, 3020 => cuMemsetD8_v2 | cuMemsetD8_v2_ptds];
        "cuMemsetD16" => [2000 => !, 3020 => cuMemsetD16_v2 | cuMemsetD16_v2_ptds];
        "cuMemsetD32" => [2000 => !, 3020 => cuMemsetD32_v2 | cuMemsetD32_v2_ptds];
        "cuMemsetD2D8" => [2000 => !, 3020 => cuMemsetD2D8_v2 | cuMemsetD2D8_v2_ptds];
        "cuMemsetD2D16" => [2000 => !, 3020 => cuMemsetD2D16_v2 | cuMemsetD2D16_v2_ptds];
        "cuMemsetD2D32" => [2000 => !, 3020 => cuMemsetD2D32_v2 | cuMemsetD2D32_v2_ptds];
        "cuMemsetD8Async" => [3020 => cuMemsetD8Async | cuMemsetD8Async_ptsz];
        "cuMemsetD16Async" => [3020 => cuMemsetD16Async | cuMemsetD16Async_ptsz];
        "cuMemsetD32Async" => [3020 => cuMemsetD32Async | cuMemsetD32Async_ptsz];
        "cuMemsetD2D8Async" => [3020 => cuMemsetD2D8Async | cuMemsetD2D8Async_ptsz];
        "cuMemsetD2D16Async" => [3020 => cuMemsetD2D16Async | cuMemsetD2D16Async_ptsz];
        "cuMemsetD2D32Async" => [3020 => cuMemsetD2D32Async | cuMemsetD2D32Async_ptsz];
        "cuStreamCreate" => [2000 => cuStreamCreate];
        "cuStreamCreateWithPriority" => [5050 => cuStreamCreateWithPriority];
        "cuStreamDestroy" => [2000 => !, 4000 => cuStreamDestroy_v2];
        "cuStreamGetFlags" => [5050 => cuStreamGetFlags | cuStreamGetFlags_ptsz];
        "cuStreamGetPriority" => [5050 => cuStreamGetPriority | cuStreamGetPriority_ptsz];
        "cuStreamGetCtx" => [9020 => cuStreamGetCtx | cuStreamGetCtx_ptsz, 12050 => cuStreamGetCtx_v2 | cuStreamGetCtx_v2_ptsz];
        "cuStreamQuery" => [2000 => cuStreamQuery | cuStreamQuery_ptsz];
        "cuStreamSynchronize" => [2000 => cuStreamSynchronize | cuStreamSynchronize_ptsz];
        "cuStreamWaitEvent" => [3020 => cuStreamWaitEvent | cuStreamWaitEvent_ptsz];
        "cuStreamAddCallback" => [5000 => cuStreamAddCallback | cuStreamAddCallback_ptsz];
        "cuStreamIsCapturing" => [10000 => cuStreamIsCapturing | cuStreamIsCapturing_ptsz];
        "cuStreamBeginCapture" => [10000 => !, 10010 => cuStreamBeginCapture_v2 | cuStreamBeginCapture_v2_ptsz];
        "cuStreamEndCapture" => [10000 => cuStreamEndCapture | cuStreamEndCapture_ptsz];
        "cuGraphCreate" => [10000 => cuGraphCreate];
        "cuGraphDestroy" => [10000 => cuGraphDestroy];
        "cuGraphInstantiate" => [10000 => !, 11000 => !, 12000 => cuGraphInstantiateWithFlags];
        "cuGraphInstantiateWithFlags" => [11040 => cuGraphInstantiateWithFlags];
        "cuGraphLaunch" => [10000 => cuGraphLaunch | cuGraphLaunch_ptsz];
        "cuGraphExecDestroy" => [10000 => cuGraphExecDestroy];
        "cuLaunchHostFunc" => [10000 => cuLaunchHostFunc | cuLaunchHostFunc_ptsz];
        "cuEventCreate" => [2000 => cuEventCreate];
        "cuEventRecord" => [2000 => cuEventRecord | cuEventRecord_ptsz];
        "cuEventRecordWithFlags" => [11010 => cuEventRecordWithFlags | cuEventRecordWithFlags_ptsz];
        "cuEventQuery" => [2000 => cuEventQuery];
        "cuEventSynchronize" => [2000 => cuEventSynchronize];
        "cuEventElapsedTime" => [2000 => cuEventElapsedTime, 12080 => cuEventElapsedTime_v2];
        "cuEventDestroy" => [2000 => !, 4000 => cuEventDestroy_v2];
        "cuModuleLoadData" => [2000 => cuModuleLoadData];
        "cuModuleLoadDataEx" => [2010 => cuModuleLoadDataEx];
        "cuModuleLoadFatBinary" => [2000 => cuModuleLoadFatBinary];
        "cuModuleUnload" => [2000 => cuModuleUnload];
        "cuModuleGetFunction" => [2000 => cuModuleGetFunction];
        "cuModuleGetGlobal" => [2000 => !, 3020 => cuModuleGetGlobal_v2];
        "cuFuncGetAttribute" => [2020 => cuFuncGetAttribute];
        "cuFuncSetAttribute" => [9000 => cuFuncSetAttribute];
        "cuFuncSetCacheConfig" => [3000 => cuFuncSetCacheConfig];
        "cuFuncGetParamInfo" => [12040 => cuFuncGetParamInfo];
        "cuFuncGetName" => [12030 => cuFuncGetName];
        "cuLaunchKernel" => [4000 => cuLaunchKernel | cuLaunchKernel_ptsz];
        "cuLaunchKernelEx" => [11060 => cuLaunchKernelEx | cuLaunchKernelEx_ptsz];
        "cuLaunchCooperativeKernel" => [9000 => cuLaunchCooperativeKernel | cuLaunchCooperativeKernel_ptsz];
    }
}

struct Table(Vec<Entry>);
// SAFETY: the table holds addresses of functions in this library: immutable data.
unsafe impl Send for Table {}
// SAFETY: as above.
unsafe impl Sync for Table {}

fn table() -> &'static [Entry] {
    static TABLE: std::sync::OnceLock<Table> = std::sync::OnceLock::new();
    &TABLE.get_or_init(|| Table(build())).0
}

/// Looks `symbol` up for ABI `version`; `per_thread` prefers the `_ptds`/`_ptsz` twin.
pub fn lookup(symbol: &str, version: i32, per_thread: bool) -> (Option<Ptr>, Q) {
    let Some(entry) = table().iter().find(|e| e.name == symbol) else {
        return (None, Q::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    };
    match entry.variants.iter().rev().find(|v| v.version <= version) {
        None => (None, Q::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT),
        Some(v) => {
            let f = if per_thread {
                v.per_thread.or(v.default)
            } else {
                v.default
            };
            match f {
                Some(f) => (Some(f), Q::CU_GET_PROC_ADDRESS_SUCCESS),
                None => (None, Q::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND),
            }
        }
    }
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
    let driver_version = super::init::driver_version();
    if version > driver_version {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let per_thread = match flags {
        f if f == Flags::CU_GET_PROC_ADDRESS_DEFAULT.0 as u64
            || f == Flags::CU_GET_PROC_ADDRESS_LEGACY_STREAM.0 as u64 =>
        {
            false
        }
        f if f == Flags::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.0 as u64 => true,
        _ => return Err(CUresult::CUDA_ERROR_INVALID_VALUE),
    };
    // SAFETY: non-null and NUL-terminated per the CUDA contract.
    let name = unsafe { std::ffi::CStr::from_ptr(symbol) }
        .to_str()
        .unwrap_or("");
    let (f, q) = lookup(name, version, per_thread);
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
