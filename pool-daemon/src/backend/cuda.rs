//! The CUDA driver API as the daemon calls it: each entry point resolved once by
//! its exported (versioned) name, typed with the signatures bindgen generated from
//! our checked headers.

use gpupool_shim::cuda::{self as cu, CUcontext, CUdevice, CUdevice_attribute, CUdeviceptr, CUresult};
use libloading::Library;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("cannot load {path}: {source}")]
    Load { path: String, source: libloading::Error },
    #[error("{call} failed: {name} ({code})")]
    Call { call: &'static str, name: String, code: u32 },
}

macro_rules! driver_table {
    ($($name:ident: fn($($arg:ty),*);)*) => {
        /// A loaded CUDA driver. Keeps the library mapped while any pointer is held.
        #[allow(non_snake_case)]
        pub struct Cuda {
            $(pub $name: unsafe extern "C" fn($($arg),*) -> CUresult,)*
            get_error_name: unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult,
            /// The simulator's compute preemption, absent from NVIDIA's driver.
            pub sim_preempt: Option<SimPreempt>,
            _lib: Library,
        }

        impl Cuda {
            pub fn load(path: &Path) -> Result<Cuda, CudaError> {
                let err = |source| CudaError::Load { path: path.display().to_string(), source };
                // SAFETY: loading the vendor driver runs its initialisers; that is the
                // documented way to use it.
                let lib = unsafe { Library::new(path) }.map_err(err)?;
                // SAFETY: each symbol is typed with the signature our header declares
                // for that exported name, and that header is checked against NVIDIA's.
                unsafe {
                    Ok(Cuda {
                        $($name: *lib.get(concat!(stringify!($name), "\0").as_bytes()).map_err(err)?,)*
                        get_error_name: *lib.get(b"cuGetErrorName\0").map_err(err)?,
                        sim_preempt: SimPreempt::find(&lib),
                        _lib: lib,
                    })
                }
            }
        }
    };
}

driver_table! {
    cuInit: fn(u32);
    cuDriverGetVersion: fn(*mut c_int);
    cuDeviceGetCount: fn(*mut c_int);
    cuDeviceGet: fn(*mut CUdevice, c_int);
    cuDeviceGetName: fn(*mut c_char, c_int, CUdevice);
    cuDeviceGetUuid_v2: fn(*mut cu::CUuuid, CUdevice);
    cuDeviceTotalMem_v2: fn(*mut usize, CUdevice);
    cuDeviceGetAttribute: fn(*mut c_int, CUdevice_attribute, CUdevice);
    cuDevicePrimaryCtxRetain: fn(*mut CUcontext, CUdevice);
    cuDevicePrimaryCtxRelease_v2: fn(CUdevice);
    cuCtxSetCurrent: fn(CUcontext);
    cuCtxGetCurrent: fn(*mut CUcontext);
    cuCtxSynchronize: fn();
    cuMemAlloc_v2: fn(*mut CUdeviceptr, usize);
    cuMemFree_v2: fn(CUdeviceptr);
    cuMemcpyHtoD_v2: fn(CUdeviceptr, *const c_void, usize);
    cuMemcpyDtoH_v2: fn(*mut c_void, CUdeviceptr, usize);
    cuMemcpyDtoD_v2: fn(CUdeviceptr, CUdeviceptr, usize);
    cuMemsetD32_v2: fn(CUdeviceptr, u32, usize);
    cuModuleLoadData: fn(*mut cu::CUmodule, *const c_void);
    cuModuleUnload: fn(cu::CUmodule);
    cuModuleGetFunction: fn(*mut cu::CUfunction, cu::CUmodule, *const c_char);
    cuLaunchKernel: fn(cu::CUfunction, u32, u32, u32, u32, u32, u32, u32, cu::CUstream, *mut *mut c_void, *mut *mut c_void);
    // What the daemon's dispatch adds (pool-daemon/src/daemon/dispatch.rs).
    cuCtxCreate_v2: fn(*mut CUcontext, u32, CUdevice);
    cuCtxDestroy_v2: fn(CUcontext);
    cuMemGetInfo_v2: fn(*mut usize, *mut usize);
    cuMemAllocPitch_v2: fn(*mut CUdeviceptr, *mut usize, usize, usize, u32);
    cuMemcpyHtoDAsync_v2: fn(CUdeviceptr, *const c_void, usize, cu::CUstream);
    cuMemcpyDtoHAsync_v2: fn(*mut c_void, CUdeviceptr, usize, cu::CUstream);
    cuMemcpyDtoDAsync_v2: fn(CUdeviceptr, CUdeviceptr, usize, cu::CUstream);
    cuMemcpyPeer: fn(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, usize);
    cuMemcpyPeerAsync: fn(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, usize, cu::CUstream);
    cuMemsetD8_v2: fn(CUdeviceptr, u8, usize);
    cuMemsetD16_v2: fn(CUdeviceptr, u16, usize);
    cuMemsetD2D8_v2: fn(CUdeviceptr, usize, u8, usize, usize);
    cuMemsetD2D16_v2: fn(CUdeviceptr, usize, u16, usize, usize);
    cuMemsetD2D32_v2: fn(CUdeviceptr, usize, u32, usize, usize);
    cuMemsetD8Async: fn(CUdeviceptr, u8, usize, cu::CUstream);
    cuMemsetD16Async: fn(CUdeviceptr, u16, usize, cu::CUstream);
    cuMemsetD32Async: fn(CUdeviceptr, u32, usize, cu::CUstream);
    cuMemsetD2D8Async: fn(CUdeviceptr, usize, u8, usize, usize, cu::CUstream);
    cuMemsetD2D16Async: fn(CUdeviceptr, usize, u16, usize, usize, cu::CUstream);
    cuMemsetD2D32Async: fn(CUdeviceptr, usize, u32, usize, usize, cu::CUstream);
    cuModuleGetGlobal_v2: fn(*mut CUdeviceptr, *mut usize, cu::CUmodule, *const c_char);
    cuFuncGetAttribute: fn(*mut c_int, cu::CUfunction_attribute, cu::CUfunction);
    cuFuncSetAttribute: fn(cu::CUfunction, cu::CUfunction_attribute, c_int);
    cuFuncGetParamInfo: fn(cu::CUfunction, usize, *mut usize, *mut usize);
    cuLaunchCooperativeKernel: fn(cu::CUfunction, u32, u32, u32, u32, u32, u32, u32, cu::CUstream, *mut *mut c_void);
    cuStreamCreateWithPriority: fn(*mut cu::CUstream, u32, c_int);
    cuStreamDestroy_v2: fn(cu::CUstream);
    cuStreamSynchronize: fn(cu::CUstream);
    cuStreamQuery: fn(cu::CUstream);
    cuStreamWaitEvent: fn(cu::CUstream, cu::CUevent, u32);
    cuEventCreate: fn(*mut cu::CUevent, u32);
    cuEventRecord: fn(cu::CUevent, cu::CUstream);
    cuEventRecordWithFlags: fn(cu::CUevent, cu::CUstream, u32);
    cuEventSynchronize: fn(cu::CUevent);
    cuEventQuery: fn(cu::CUevent);
    cuEventElapsedTime: fn(*mut f32, cu::CUevent, cu::CUevent);
    cuEventDestroy_v2: fn(cu::CUevent);
    cuTexObjectCreate: fn(*mut u64, *const cu::CUDA_RESOURCE_DESC, *const cu::CUDA_TEXTURE_DESC,
        *const cu::CUDA_RESOURCE_VIEW_DESC);
    cuTexObjectDestroy: fn(u64);
    // CUDA arrays and surfaces (pool-daemon/src/daemon/array.rs).
    cuArray3DCreate_v2: fn(*mut cu::CUarray, *const cu::CUDA_ARRAY3D_DESCRIPTOR);
    cuArray3DGetDescriptor_v2: fn(*mut cu::CUDA_ARRAY3D_DESCRIPTOR, cu::CUarray);
    cuArrayDestroy: fn(cu::CUarray);
    cuMipmappedArrayCreate: fn(*mut cu::CUmipmappedArray, *const cu::CUDA_ARRAY3D_DESCRIPTOR, u32);
    cuMipmappedArrayGetLevel: fn(*mut cu::CUarray, cu::CUmipmappedArray, u32);
    cuMipmappedArrayDestroy: fn(cu::CUmipmappedArray);
    cuSurfObjectCreate: fn(*mut u64, *const cu::CUDA_RESOURCE_DESC);
    cuSurfObjectDestroy: fn(u64);
    cuMemcpy2D_v2: fn(*const cu::CUDA_MEMCPY2D);
    cuMemcpy2DAsync_v2: fn(*const cu::CUDA_MEMCPY2D, cu::CUstream);
    cuMemcpy3D_v2: fn(*const cu::CUDA_MEMCPY3D);
    cuMemcpy3DAsync_v2: fn(*const cu::CUDA_MEMCPY3D, cu::CUstream);
    // Client host-memory regions (pool-daemon/src/daemon/regions.rs).
    cuMemHostRegister_v2: fn(*mut c_void, usize, u32);
    cuMemHostUnregister: fn(*mut c_void);
    // Virtual memory management (pool-daemon/src/daemon/vmm.rs).
    cuMemAddressReserve: fn(*mut CUdeviceptr, usize, usize, CUdeviceptr, u64);
    cuMemAddressFree: fn(CUdeviceptr, usize);
    cuMemCreate: fn(*mut cu::CUmemGenericAllocationHandle, usize, *const cu::CUmemAllocationProp, u64);
    cuMemRelease: fn(cu::CUmemGenericAllocationHandle);
    cuMemMap: fn(CUdeviceptr, usize, usize, cu::CUmemGenericAllocationHandle, u64);
    cuMemUnmap: fn(CUdeviceptr, usize);
    cuMemSetAccess: fn(CUdeviceptr, usize, *const cu::CUmemAccessDesc, usize);
    cuMemGetAccess: fn(*mut u64, *const cu::CUmemLocation, CUdeviceptr);
    cuMemGetAllocationGranularity: fn(*mut usize, *const cu::CUmemAllocationProp, cu::CUmemAllocationGranularity_flags);
    // Graphs and stream capture (pool-daemon/src/daemon/graph.rs).
    cuStreamBeginCapture_v2: fn(cu::CUstream, cu::CUstreamCaptureMode);
    cuStreamEndCapture: fn(cu::CUstream, *mut cu::CUgraph);
    cuStreamIsCapturing: fn(cu::CUstream, *mut cu::CUstreamCaptureStatus);
    cuStreamBeginCaptureToGraph: fn(cu::CUstream, cu::CUgraph, *const cu::CUgraphNode, *const cu::CUgraphEdgeData, usize, cu::CUstreamCaptureMode);
    cuStreamGetCaptureInfo_v2: fn(cu::CUstream, *mut cu::CUstreamCaptureStatus, *mut u64, *mut cu::CUgraph, *mut *const cu::CUgraphNode, *mut usize);
    cuStreamUpdateCaptureDependencies: fn(cu::CUstream, *mut cu::CUgraphNode, usize, u32);
    cuGraphGetNodes: fn(cu::CUgraph, *mut cu::CUgraphNode, *mut usize);
    cuGraphNodeGetType: fn(cu::CUgraphNode, *mut cu::CUgraphNodeType);
    cuGraphNodeGetDependencies: fn(cu::CUgraphNode, *mut cu::CUgraphNode, *mut usize);
    cuGraphCreate: fn(*mut cu::CUgraph, u32);
    cuGraphDestroy: fn(cu::CUgraph);
    cuGraphInstantiateWithFlags: fn(*mut cu::CUgraphExec, cu::CUgraph, u64);
    cuGraphExecDestroy: fn(cu::CUgraphExec);
    cuGraphUpload: fn(cu::CUgraphExec, cu::CUstream);
    cuGraphLaunch: fn(cu::CUgraphExec, cu::CUstream);
    cuGraphAddKernelNode_v2: fn(*mut cu::CUgraphNode, cu::CUgraph, *const cu::CUgraphNode, usize, *const cu::CUDA_KERNEL_NODE_PARAMS);
    cuGraphAddMemsetNode: fn(*mut cu::CUgraphNode, cu::CUgraph, *const cu::CUgraphNode, usize, *const cu::CUDA_MEMSET_NODE_PARAMS, CUcontext);
    cuGraphAddMemcpyNode: fn(*mut cu::CUgraphNode, cu::CUgraph, *const cu::CUgraphNode, usize, *const cu::CUDA_MEMCPY3D, CUcontext);
    cuGraphAddEmptyNode: fn(*mut cu::CUgraphNode, cu::CUgraph, *const cu::CUgraphNode, usize);
    cuGraphAddChildGraphNode: fn(*mut cu::CUgraphNode, cu::CUgraph, *const cu::CUgraphNode, usize, cu::CUgraph);
    cuGraphAddEventRecordNode: fn(*mut cu::CUgraphNode, cu::CUgraph, *const cu::CUgraphNode, usize, cu::CUevent);
    cuGraphAddEventWaitNode: fn(*mut cu::CUgraphNode, cu::CUgraph, *const cu::CUgraphNode, usize, cu::CUevent);
    cuGraphAddDependencies: fn(cu::CUgraph, *const cu::CUgraphNode, *const cu::CUgraphNode, usize);
    cuGraphChildGraphNodeGetGraph: fn(cu::CUgraphNode, *mut cu::CUgraph);
    cuGraphConditionalHandleCreate: fn(*mut u64, cu::CUgraph, CUcontext, u32, u32);
    cuGraphAddNode: fn(*mut cu::CUgraphNode, cu::CUgraph, *const cu::CUgraphNode, usize, *mut cu::CUgraphNodeParams);
    cuGraphEventRecordNodeGetEvent: fn(cu::CUgraphNode, *mut cu::CUevent);
    cuGraphEventWaitNodeGetEvent: fn(cu::CUgraphNode, *mut cu::CUevent);
    cuGraphEventRecordNodeSetEvent: fn(cu::CUgraphNode, cu::CUevent);
    cuGraphEventWaitNodeSetEvent: fn(cu::CUgraphNode, cu::CUevent);
    cuGraphExecEventRecordNodeSetEvent: fn(cu::CUgraphExec, cu::CUgraphNode, cu::CUevent);
    cuGraphExecEventWaitNodeSetEvent: fn(cu::CUgraphExec, cu::CUgraphNode, cu::CUevent);
    cuGraphExecKernelNodeSetParams_v2: fn(cu::CUgraphExec, cu::CUgraphNode, *const cu::CUDA_KERNEL_NODE_PARAMS);
    cuGraphKernelNodeGetParams_v2: fn(cu::CUgraphNode, *mut cu::CUDA_KERNEL_NODE_PARAMS);
    cuGraphKernelNodeSetParams_v2: fn(cu::CUgraphNode, *const cu::CUDA_KERNEL_NODE_PARAMS);
    cuGraphClone: fn(*mut cu::CUgraph, cu::CUgraph);
    cuGraphDestroyNode: fn(cu::CUgraphNode);
    cuGraphRemoveDependencies: fn(cu::CUgraph, *const cu::CUgraphNode, *const cu::CUgraphNode, usize);
    cuGraphNodeFindInClone: fn(*mut cu::CUgraphNode, cu::CUgraphNode, cu::CUgraph);
    cuGraphExecUpdate_v2: fn(cu::CUgraphExec, cu::CUgraph, *mut cu::CUgraphExecUpdateResultInfo);
    cuGraphDebugDotPrint: fn(cu::CUgraph, *const c_char, u32);
    cuGraphMemsetNodeSetParams: fn(cu::CUgraphNode, *const cu::CUDA_MEMSET_NODE_PARAMS);
    cuGraphExecMemsetNodeSetParams: fn(cu::CUgraphExec, cu::CUgraphNode, *const cu::CUDA_MEMSET_NODE_PARAMS, CUcontext);
    cuGraphMemcpyNodeSetParams: fn(cu::CUgraphNode, *const cu::CUDA_MEMCPY3D);
    cuGraphMemsetNodeGetParams: fn(cu::CUgraphNode, *mut cu::CUDA_MEMSET_NODE_PARAMS);
    cuGraphMemcpyNodeGetParams: fn(cu::CUgraphNode, *mut cu::CUDA_MEMCPY3D);
    cuGraphExecMemcpyNodeSetParams: fn(cu::CUgraphExec, cu::CUgraphNode, *const cu::CUDA_MEMCPY3D, CUcontext);
    // Host functions (pool-daemon/src/daemon/host_fn.rs).
    cuGraphAddHostNode: fn(*mut cu::CUgraphNode, cu::CUgraph, *const cu::CUgraphNode, usize, *const cu::CUDA_HOST_NODE_PARAMS);
    cuGraphHostNodeSetParams: fn(cu::CUgraphNode, *const cu::CUDA_HOST_NODE_PARAMS);
    cuGraphExecHostNodeSetParams: fn(cu::CUgraphExec, cu::CUgraphNode, *const cu::CUDA_HOST_NODE_PARAMS);
    cuLaunchHostFunc: fn(cu::CUstream, cu::CUhostFn, *mut c_void);
}

/// The simulator's exports that stop and resume a context's grids between thread blocks
/// (sim/src/api/preempt.rs documents them). NVIDIA's driver has no such call: its compute
/// preemption is its own time-slicing between contexts.
#[derive(Clone, Copy)]
pub struct SimPreempt {
    pub stop: unsafe extern "C" fn(CUcontext) -> CUresult,
    pub wait_stopped: unsafe extern "C" fn(CUcontext, u32) -> CUresult,
    pub resume: unsafe extern "C" fn(CUcontext) -> CUresult,
    pub event_wait: unsafe extern "C" fn(cu::CUevent, u32) -> CUresult,
}

impl SimPreempt {
    /// All four, or none (a driver that is not the simulator).
    fn find(lib: &Library) -> Option<SimPreempt> {
        // SAFETY: the simulator exports these names with exactly these signatures
        // (sim/src/api/preempt.rs); another library exporting them is not a driver we load.
        unsafe {
            Some(SimPreempt {
                stop: *lib.get(b"gpupool_sim_ctx_stop\0").ok()?,
                wait_stopped: *lib.get(b"gpupool_sim_ctx_wait_stopped\0").ok()?,
                resume: *lib.get(b"gpupool_sim_ctx_resume\0").ok()?,
                event_wait: *lib.get(b"gpupool_sim_event_wait\0").ok()?,
            })
        }
    }
}

impl Cuda {
    /// The calling thread's current backend context (null when none), as an address.
    pub fn current_context(&self) -> usize {
        let mut ctx: cu::CUcontext = std::ptr::null_mut();
        // SAFETY: cuCtxGetCurrent writes one pointer to the live local.
        unsafe { (self.cuCtxGetCurrent)(&mut ctx) };
        ctx as usize
    }

    /// Turns a status into a `Result`, naming the call and the vendor's error name.
    pub fn check(&self, call: &'static str, res: CUresult) -> Result<(), CudaError> {
        if res == CUresult::CUDA_SUCCESS {
            return Ok(());
        }
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string or NULL.
        unsafe { (self.get_error_name)(res, &mut name) };
        let name = if name.is_null() {
            format!("CUresult {}", res.0)
        } else {
            // SAFETY: non-null static NUL-terminated string owned by the driver.
            unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
        };
        Err(CudaError::Call { call, name, code: res.0 })
    }
}

/// Calls a driver entry point and converts its status: `call!(cuda, cuInit(0))?`.
#[macro_export]
macro_rules! call {
    ($cuda:expr, $name:ident($($arg:expr),* $(,)?)) => {{
        let cuda = &$cuda;
        // SAFETY: the arguments follow the entry point's documented contract; every
        // pointer passed is to a live local or buffer of the right size. (The argument
        // expressions are plain values and references at every call site.)
        // A call that writes kernels' printf output, on a context whose kernels may print,
        // runs inside a window that hands that output to the calling session.
        const FLUSHES: bool = $crate::backend::device_output::flushes(stringify!($name));
        let _window = if FLUSHES {
            $crate::backend::device_output::window(stringify!($name), || cuda.current_context())
        } else {
            None
        };
        #[allow(clippy::macro_metavars_in_unsafe)]
        let res = unsafe { (cuda.$name)($($arg),*) };
        cuda.check(stringify!($name), res)
    }};
}
