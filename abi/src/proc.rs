//! `cuGetProcAddress`: one line per base name lists, from oldest ABI to newest, the CUDA
//! version each variant appeared in, the export that implements it and, where one
//! exists, its per-thread-default-stream twin. A variant whose ABI is not implemented is
//! listed as `!`, so a caller asking for that ABI gets "not found" instead of a function
//! with the wrong signature.

use gpupool_shim::cuda::{
    CUdriverProcAddress_flags as Flags, CUdriverProcAddressQueryResult as Q, CUresult, cuuint64_t,
};
use std::os::raw::c_void;

pub type Ptr = *const c_void;

/// One ABI variant of a base name: introduced in `version`; `None` if unimplemented.
pub struct Variant {
    pub version: i32,
    pub default: Option<Ptr>,
    pub per_thread: Option<Ptr>,
}

pub struct Entry {
    pub name: &'static str,
    pub variants: Vec<Variant>,
}

/// The entry points of a library, built once by [`driver_entry_points!`].
pub struct Table(pub Vec<Entry>);

// SAFETY: the table holds addresses of functions of the library that built it:
// immutable data, valid for the life of the process.
unsafe impl Send for Table {}
// SAFETY: as above.
unsafe impl Sync for Table {}

impl Table {
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.0.iter().map(|e| e.name)
    }

    /// Looks `symbol` up for ABI `version`; `per_thread` prefers the `_ptds`/`_ptsz` twin.
    pub fn lookup(&self, symbol: &str, version: i32, per_thread: bool) -> (Option<Ptr>, Q) {
        let Some(entry) = self.0.iter().find(|e| e.name == symbol) else {
            return (None, Q::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
        };
        match entry.variants.iter().rev().find(|v| v.version <= version) {
            None => (None, Q::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT),
            Some(v) => {
                let f = if per_thread { v.per_thread.or(v.default) } else { v.default };
                match f {
                    Some(f) => (Some(f), Q::CU_GET_PROC_ADDRESS_SUCCESS),
                    None => (None, Q::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND),
                }
            }
        }
    }
}

impl Table {
    /// Answers a `cuGetProcAddress(_v2)` call: writes the function (or NULL) to `pfn`
    /// and, when given, the query result to `status`.
    ///
    /// # Safety
    /// `symbol` is NULL or NUL-terminated; `pfn` and `status` are NULL or writable.
    pub unsafe fn answer(
        &self,
        symbol: *const std::os::raw::c_char,
        pfn: *mut *mut c_void,
        version: i32,
        flags: cuuint64_t,
        status: *mut Q,
        driver_version: i32,
    ) -> Result<(), (CUresult, String)> {
        if symbol.is_null() || pfn.is_null() {
            return Err((CUresult::CUDA_ERROR_INVALID_VALUE, "null symbol or pfn".into()));
        }
        let per_thread = validate(version, flags, driver_version).map_err(|why| (why.code(), why.to_string()))?;
        // SAFETY: non-null and NUL-terminated per the CUDA contract.
        let name = unsafe { std::ffi::CStr::from_ptr(symbol) }.to_str().unwrap_or("");
        let (f, q) = self.lookup(name, version, per_thread);
        // SAFETY: `pfn` is non-null and writable per the contract; `status` likewise when non-null.
        unsafe {
            pfn.write(f.unwrap_or(std::ptr::null()) as *mut c_void);
            if !status.is_null() {
                status.write(q);
            }
        }
        Ok(())
    }
}

/// Why a `cuGetProcAddress` request is refused outright (`CUDA_ERROR_INVALID_VALUE`).
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    NewerThanDriver { requested: i32, driver: i32 },
    UnknownFlags(u64),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NewerThanDriver { requested, driver } => {
                write!(f, "ABI version {requested} is newer than the driver ({driver})")
            }
            Refusal::UnknownFlags(x) => write!(f, "unknown flags {x:#x}"),
        }
    }
}

impl Refusal {
    pub fn code(&self) -> CUresult {
        CUresult::CUDA_ERROR_INVALID_VALUE
    }
}

/// Checks a request's version and flags; returns whether the per-thread-default-stream
/// variants are wanted.
pub fn validate(version: i32, flags: cuuint64_t, driver_version: i32) -> Result<bool, Refusal> {
    if version > driver_version {
        return Err(Refusal::NewerThanDriver { requested: version, driver: driver_version });
    }
    match flags {
        f if f == Flags::CU_GET_PROC_ADDRESS_DEFAULT.0 as u64
            || f == Flags::CU_GET_PROC_ADDRESS_LEGACY_STREAM.0 as u64 =>
        {
            Ok(false)
        }
        f if f == Flags::CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.0 as u64 => Ok(true),
        other => Err(Refusal::UnknownFlags(other)),
    }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __variant {
    ($v:literal => !) => {
        $crate::proc::Variant { version: $v, default: None, per_thread: None }
    };
    ($v:literal => $f:ident) => {{
        $crate::__check_signature!($f);
        $crate::proc::Variant { version: $v, default: Some($f as $crate::proc::Ptr), per_thread: None }
    }};
    ($v:literal => $f:ident | $p:ident) => {{
        $crate::__check_signature!($f);
        $crate::__check_signature!($p);
        $crate::proc::Variant {
            version: $v,
            default: Some($f as $crate::proc::Ptr),
            per_thread: Some($p as $crate::proc::Ptr),
        }
    }};
}

/// Fails to compile if the invoking crate's export differs in signature from the
/// declaration bindgen generated from our header (itself checked against NVIDIA's):
/// both must coerce to one function-pointer type.
#[doc(hidden)]
#[macro_export]
macro_rules! __check_signature {
    ($f:ident) => {
        let _ = [$crate::shim::cuda::$f, $f];
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __table {
    ($($name:literal => [$($v:literal => $a:tt $(| $b:ident)?),+ $(,)?];)*) => {
        $crate::proc::Table(vec![$($crate::proc::Entry { name: $name, variants: vec![$($crate::__variant!($v => $a $(| $b)?)),+] }),*])
    };
}

/// The table of every entry point a driver library exports, built from the invoking
/// crate's own functions: the names below resolve where the macro is invoked, so each
/// library must have every one of them in scope (exported with the signature our header
/// declares, which the expansion checks at compile time).
#[macro_export]
macro_rules! driver_entry_points {
    () => {
        $crate::__table! {
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
        "cuDeviceGetP2PAttribute" => [8000 => cuDeviceGetP2PAttribute];
        "cuDevicePrimaryCtxRetain" => [7000 => cuDevicePrimaryCtxRetain];
        // NVIDIA's runtime 13.0 asks for Release and Reset at 7000: the v7000 ABI is the
        // same signature, served by the _v2 behaviour (interpose/EXPORT_TABLES.md).
        "cuDevicePrimaryCtxRelease" => [7000 => cuDevicePrimaryCtxRelease_v2, 11000 => cuDevicePrimaryCtxRelease_v2];
        "cuDevicePrimaryCtxReset" => [7000 => cuDevicePrimaryCtxReset_v2, 11000 => cuDevicePrimaryCtxReset_v2];
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
        "cuMemAllocFromPoolAsync" => [11020 => cuMemAllocFromPoolAsync | cuMemAllocFromPoolAsync_ptsz];
        "cuMemPoolCreate" => [11020 => cuMemPoolCreate];
        "cuMemPoolDestroy" => [11020 => cuMemPoolDestroy];
        "cuMemPoolTrimTo" => [11020 => cuMemPoolTrimTo];
        "cuMemPoolSetAccess" => [11020 => cuMemPoolSetAccess];
        "cuMemPoolGetAccess" => [11020 => cuMemPoolGetAccess];
        "cuMemPoolSetAttribute" => [11020 => cuMemPoolSetAttribute];
        "cuMemPoolGetAttribute" => [11020 => cuMemPoolGetAttribute];
        "cuDeviceGetDefaultMemPool" => [11020 => cuDeviceGetDefaultMemPool];
        "cuDeviceGetMemPool" => [11020 => cuDeviceGetMemPool];
        "cuDeviceSetMemPool" => [11020 => cuDeviceSetMemPool];
        "cuMemPoolExportToShareableHandle" => [11020 => cuMemPoolExportToShareableHandle];
        "cuMemPoolImportFromShareableHandle" => [11020 => cuMemPoolImportFromShareableHandle];
        "cuMemPoolExportPointer" => [11020 => cuMemPoolExportPointer];
        "cuMemPoolImportPointer" => [11020 => cuMemPoolImportPointer];
        "cuMemAllocManaged" => [6000 => cuMemAllocManaged];
        "cuIpcGetMemHandle" => [4010 => cuIpcGetMemHandle];
        "cuIpcOpenMemHandle" => [4010 => !, 11000 => cuIpcOpenMemHandle_v2];
        "cuIpcCloseMemHandle" => [4010 => cuIpcCloseMemHandle];
        "cuIpcGetEventHandle" => [4010 => cuIpcGetEventHandle];
        "cuIpcOpenEventHandle" => [4010 => cuIpcOpenEventHandle];
        "cuArrayCreate" => [2000 => !, 3020 => cuArrayCreate_v2];
        "cuArrayGetDescriptor" => [2000 => !, 3020 => cuArrayGetDescriptor_v2];
        "cuArray3DCreate" => [2000 => !, 3020 => cuArray3DCreate_v2];
        "cuArray3DGetDescriptor" => [2000 => !, 3020 => cuArray3DGetDescriptor_v2];
        "cuArrayDestroy" => [2000 => cuArrayDestroy];
        "cuMipmappedArrayCreate" => [5000 => cuMipmappedArrayCreate];
        "cuMipmappedArrayGetLevel" => [5000 => cuMipmappedArrayGetLevel];
        "cuMipmappedArrayDestroy" => [5000 => cuMipmappedArrayDestroy];
        "cuMemcpyHtoA" => [2000 => !, 3020 => cuMemcpyHtoA_v2 | cuMemcpyHtoA_v2_ptds];
        "cuMemcpyAtoH" => [2000 => !, 3020 => cuMemcpyAtoH_v2 | cuMemcpyAtoH_v2_ptds];
        "cuMemcpyHtoAAsync" => [2000 => !, 3020 => cuMemcpyHtoAAsync_v2 | cuMemcpyHtoAAsync_v2_ptsz];
        "cuMemcpyAtoHAsync" => [2000 => !, 3020 => cuMemcpyAtoHAsync_v2 | cuMemcpyAtoHAsync_v2_ptsz];
        "cuMemcpyAtoD" => [2000 => !, 3020 => cuMemcpyAtoD_v2 | cuMemcpyAtoD_v2_ptds];
        "cuMemcpyDtoA" => [2000 => !, 3020 => cuMemcpyDtoA_v2 | cuMemcpyDtoA_v2_ptds];
        "cuMemcpyAtoA" => [2000 => !, 3020 => cuMemcpyAtoA_v2 | cuMemcpyAtoA_v2_ptds];
        "cuTexObjectCreate" => [5000 => cuTexObjectCreate];
        "cuTexObjectDestroy" => [5000 => cuTexObjectDestroy];
        "cuTexObjectGetResourceDesc" => [5000 => cuTexObjectGetResourceDesc];
        "cuTexObjectGetTextureDesc" => [5000 => cuTexObjectGetTextureDesc];
        "cuTexObjectGetResourceViewDesc" => [5000 => cuTexObjectGetResourceViewDesc];
        "cuSurfObjectCreate" => [5000 => cuSurfObjectCreate];
        "cuSurfObjectDestroy" => [5000 => cuSurfObjectDestroy];
        "cuSurfObjectGetResourceDesc" => [5000 => cuSurfObjectGetResourceDesc];
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
        "cuThreadExchangeStreamCaptureMode" => [10010 => cuThreadExchangeStreamCaptureMode];
        "cuStreamBeginCapture" => [10000 => !, 10010 => cuStreamBeginCapture_v2 | cuStreamBeginCapture_v2_ptsz];
        "cuStreamEndCapture" => [10000 => cuStreamEndCapture | cuStreamEndCapture_ptsz];
        "cuStreamBeginCaptureToGraph" => [12030 => cuStreamBeginCaptureToGraph | cuStreamBeginCaptureToGraph_ptsz];
        "cuStreamGetCaptureInfo" => [10010 => !, 11030 => cuStreamGetCaptureInfo_v2 | cuStreamGetCaptureInfo_v2_ptsz,
            12030 => cuStreamGetCaptureInfo_v3 | cuStreamGetCaptureInfo_v3_ptsz];
        "cuStreamUpdateCaptureDependencies" => [11030 => cuStreamUpdateCaptureDependencies
            | cuStreamUpdateCaptureDependencies_ptsz, 12030 => cuStreamUpdateCaptureDependencies_v2
            | cuStreamUpdateCaptureDependencies_v2_ptsz];
        "cuGraphCreate" => [10000 => cuGraphCreate];
        "cuGraphDestroy" => [10000 => cuGraphDestroy];
        "cuGraphInstantiate" => [10000 => !, 11000 => !, 12000 => cuGraphInstantiateWithFlags];
        "cuGraphInstantiateWithFlags" => [11040 => cuGraphInstantiateWithFlags];
        "cuGraphLaunch" => [10000 => cuGraphLaunch | cuGraphLaunch_ptsz];
        "cuGraphExecDestroy" => [10000 => cuGraphExecDestroy];
        "cuGraphExecGetFlags" => [12000 => cuGraphExecGetFlags];
        "cuGraphUpload" => [11010 => cuGraphUpload | cuGraphUpload_ptsz];
        "cuGraphAddKernelNode" => [10000 => !, 12000 => cuGraphAddKernelNode_v2];
        "cuGraphAddMemsetNode" => [10000 => cuGraphAddMemsetNode];
        "cuGraphAddHostNode" => [10000 => cuGraphAddHostNode];
        "cuGraphHostNodeGetParams" => [10000 => cuGraphHostNodeGetParams];
        "cuGraphHostNodeSetParams" => [10000 => cuGraphHostNodeSetParams];
        "cuGraphExecHostNodeSetParams" => [10020 => cuGraphExecHostNodeSetParams];
        "cuGraphAddEmptyNode" => [10000 => cuGraphAddEmptyNode];
        "cuGraphAddChildGraphNode" => [10000 => cuGraphAddChildGraphNode];
        "cuGraphChildGraphNodeGetGraph" => [10000 => cuGraphChildGraphNodeGetGraph];
        "cuGraphConditionalHandleCreate" => [12030 => cuGraphConditionalHandleCreate];
        "cuGraphAddEventRecordNode" => [11010 => cuGraphAddEventRecordNode];
        "cuGraphAddEventWaitNode" => [11010 => cuGraphAddEventWaitNode];
        "cuGraphEventRecordNodeGetEvent" => [11010 => cuGraphEventRecordNodeGetEvent];
        "cuGraphEventRecordNodeSetEvent" => [11010 => cuGraphEventRecordNodeSetEvent];
        "cuGraphEventWaitNodeGetEvent" => [11010 => cuGraphEventWaitNodeGetEvent];
        "cuGraphEventWaitNodeSetEvent" => [11010 => cuGraphEventWaitNodeSetEvent];
        "cuGraphExecEventRecordNodeSetEvent" => [11010 => cuGraphExecEventRecordNodeSetEvent];
        "cuGraphExecEventWaitNodeSetEvent" => [11010 => cuGraphExecEventWaitNodeSetEvent];
        "cuGraphAddNode" => [12020 => cuGraphAddNode, 12030 => cuGraphAddNode_v2];
        "cuGraphNodeSetParams" => [12020 => cuGraphNodeSetParams];
        "cuGraphExecNodeSetParams" => [12020 => cuGraphExecNodeSetParams];
        "cuGraphAddDependencies" => [10000 => cuGraphAddDependencies, 12030 => cuGraphAddDependencies_v2];
        "cuGraphRemoveDependencies" => [10000 => cuGraphRemoveDependencies, 12030 => cuGraphRemoveDependencies_v2];
        "cuGraphDestroyNode" => [10000 => cuGraphDestroyNode];
        "cuGraphNodeFindInClone" => [10000 => cuGraphNodeFindInClone];
        "cuGraphExecKernelNodeSetParams" => [10010 => !, 12000 => cuGraphExecKernelNodeSetParams_v2];
        "cuGraphKernelNodeGetParams" => [10000 => cuGraphKernelNodeGetParams, 12000 => cuGraphKernelNodeGetParams_v2];
        "cuGraphKernelNodeSetParams" => [10000 => cuGraphKernelNodeSetParams, 12000 => cuGraphKernelNodeSetParams_v2];
        "cuGraphAddMemcpyNode" => [10000 => cuGraphAddMemcpyNode];
        "cuGraphMemsetNodeGetParams" => [10000 => cuGraphMemsetNodeGetParams];
        "cuGraphMemsetNodeSetParams" => [10000 => cuGraphMemsetNodeSetParams];
        "cuGraphExecMemsetNodeSetParams" => [10020 => cuGraphExecMemsetNodeSetParams];
        "cuGraphMemcpyNodeGetParams" => [10000 => cuGraphMemcpyNodeGetParams];
        "cuGraphMemcpyNodeSetParams" => [10000 => cuGraphMemcpyNodeSetParams];
        "cuGraphExecMemcpyNodeSetParams" => [10020 => cuGraphExecMemcpyNodeSetParams];
        "cuGraphExecUpdate" => [10020 => !, 12000 => cuGraphExecUpdate_v2];
        "cuGraphClone" => [10000 => cuGraphClone];
        "cuGraphDebugDotPrint" => [11030 => cuGraphDebugDotPrint];
        "cuGraphNodeGetType" => [10000 => cuGraphNodeGetType];
        "cuGraphGetNodes" => [10000 => cuGraphGetNodes];
        "cuGraphGetEdges" => [10000 => cuGraphGetEdges, 12030 => !];
        "cuGraphGetRootNodes" => [10000 => cuGraphGetRootNodes];
        "cuGraphNodeGetDependencies" => [10000 => cuGraphNodeGetDependencies, 12030 => !];
        "cuGraphNodeGetDependentNodes" => [10000 => cuGraphNodeGetDependentNodes, 12030 => !];
        "cuGraphAddMemAllocNode" => [11040 => cuGraphAddMemAllocNode];
        "cuGraphAddMemFreeNode" => [11040 => cuGraphAddMemFreeNode];
        "cuGraphMemAllocNodeGetParams" => [11040 => cuGraphMemAllocNodeGetParams];
        "cuGraphMemFreeNodeGetParams" => [11040 => cuGraphMemFreeNodeGetParams];
        "cuDeviceGraphMemTrim" => [11040 => cuDeviceGraphMemTrim];
        "cuDeviceGetGraphMemAttribute" => [11040 => cuDeviceGetGraphMemAttribute];
        "cuDeviceSetGraphMemAttribute" => [11040 => cuDeviceSetGraphMemAttribute];
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
        "cuModuleGetLoadingMode" => [11070 => cuModuleGetLoadingMode];
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
        "cuMemAddressReserve" => [10020 => cuMemAddressReserve];
        "cuMemAddressFree" => [10020 => cuMemAddressFree];
        "cuMemCreate" => [10020 => cuMemCreate];
        "cuMemRelease" => [10020 => cuMemRelease];
        "cuMemMap" => [10020 => cuMemMap];
        "cuMemUnmap" => [10020 => cuMemUnmap];
        "cuMemSetAccess" => [10020 => cuMemSetAccess];
        "cuMemGetAccess" => [10020 => cuMemGetAccess];
        "cuMemGetAllocationGranularity" => [10020 => cuMemGetAllocationGranularity];
        "cuMemGetAllocationPropertiesFromHandle" => [10020 => cuMemGetAllocationPropertiesFromHandle];
        "cuMemRetainAllocationHandle" => [11000 => cuMemRetainAllocationHandle];
        "cuMemExportToShareableHandle" => [10020 => cuMemExportToShareableHandle];
        "cuMemImportFromShareableHandle" => [10020 => cuMemImportFromShareableHandle];
        "cuMulticastCreate" => [12010 => cuMulticastCreate];
        "cuMulticastAddDevice" => [12010 => cuMulticastAddDevice];
        "cuMulticastBindMem" => [12010 => cuMulticastBindMem];
        "cuMulticastUnbind" => [12010 => cuMulticastUnbind];
        "cuMulticastGetGranularity" => [12010 => cuMulticastGetGranularity];
        "cuGreenCtxCreate" => [12040 => cuGreenCtxCreate];
        "cuGreenCtxDestroy" => [12040 => cuGreenCtxDestroy];
        "cuCtxFromGreenCtx" => [12040 => cuCtxFromGreenCtx];
        "cuDeviceGetDevResource" => [12040 => cuDeviceGetDevResource];
        "cuDevSmResourceSplitByCount" => [12040 => cuDevSmResourceSplitByCount];
        "cuDevResourceGenerateDesc" => [12040 => cuDevResourceGenerateDesc];
        "cuGreenCtxStreamCreate" => [12050 => cuGreenCtxStreamCreate];
        "cuLogsRegisterCallback" => [12090 => cuLogsRegisterCallback];
        "cuLogsUnregisterCallback" => [12090 => cuLogsUnregisterCallback];
        "cuStreamWriteValue32" => [8000 => !, 11070 => cuStreamWriteValue32_v2 | cuStreamWriteValue32_v2_ptsz];
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_flags() {
        assert_eq!(validate(12090, 0, 13000), Ok(false));
        assert_eq!(validate(12090, 1, 13000), Ok(false));
        assert_eq!(validate(12090, 2, 13000), Ok(true));
        assert_eq!(validate(13010, 0, 13000), Err(Refusal::NewerThanDriver { requested: 13010, driver: 13000 }));
        assert_eq!(validate(12000, 7, 13000), Err(Refusal::UnknownFlags(7)));
    }

    #[test]
    fn lookup_picks_the_newest_variant_not_newer_than_asked() {
        let (a, b, c) = (1usize as Ptr, 2usize as Ptr, 3usize as Ptr);
        let t = Table(vec![Entry {
            name: "cuThing",
            variants: vec![
                Variant { version: 3020, default: Some(a), per_thread: Some(b) },
                Variant { version: 12050, default: None, per_thread: None },
                Variant { version: 12080, default: Some(c), per_thread: None },
            ],
        }]);
        assert_eq!(t.lookup("cuThing", 12000, false), (Some(a), Q::CU_GET_PROC_ADDRESS_SUCCESS));
        assert_eq!(t.lookup("cuThing", 12000, true), (Some(b), Q::CU_GET_PROC_ADDRESS_SUCCESS));
        // An ABI variant that is not implemented is "not found", never an older signature.
        assert_eq!(t.lookup("cuThing", 12060, false), (None, Q::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND));
        assert_eq!(t.lookup("cuThing", 12090, true), (Some(c), Q::CU_GET_PROC_ADDRESS_SUCCESS));
        assert_eq!(t.lookup("cuThing", 2000, false), (None, Q::CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT));
        assert_eq!(t.lookup("cuOther", 12000, false), (None, Q::CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND));
    }
}
