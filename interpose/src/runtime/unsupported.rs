//! Every other function `libcudart.so.12` or `libcudart.so.13` exports. Each fails with
//! `cudaErrorNotSupported` (recorded as the thread's last error) and says so on stderr,
//! once per function and process, naming it: a program never crashes on a missing
//! symbol and never has a call silently skipped. The list is the set difference between
//! NVIDIA's two export tables and what [`super`] implements; the
//! `every_cudart_export_is_provided` test checks it against the real libraries.
//!
//! Families left out on purpose (see README "Runtime API"): explicit graph building and
//! node parameters (capture, instantiate, upload, launch and destroy are in [`super::graph`]),
//! 1D array-to-array copies (the rest of the array API is in [`super::array`]), surfaces,
//! managed memory, sharing memory pools (the pools themselves are in
//! [`super::mempool`]), external memory and semaphores, graphics interop (GL, EGL,
//! VDPAU), peer access control, and the runtime's own export table.

use gpupool_shim::cudart::cudaError;
use std::collections::HashSet;
use std::sync::Mutex;

/// One stderr line per unsupported function per process (always on: a program that hits
/// one needs to know which).
pub fn report(what: &str) {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut g = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if g.get_or_insert_with(HashSet::new).insert(what.to_string()) {
        eprintln!("libgpupool: {what} is not supported through the pool; returning cudaErrorNotSupported");
    }
}

fn not_supported(name: &str) -> cudaError {
    report(name);
    super::set_last_error(cudaError::cudaErrorNotSupported);
    cudaError::cudaErrorNotSupported
}

/// Arguments are ignored (the C calling convention lets a callee take fewer than it is
/// passed), and nothing is written through the caller's pointers.
macro_rules! unsupported {
    ($($name:ident),* $(,)?) => {$(
        #[unsafe(no_mangle)]
        pub extern "C" fn $name() -> cudaError {
            std::panic::catch_unwind(|| not_supported(stringify!($name))).unwrap_or(cudaError::cudaErrorNotSupported)
        }
    )*};
}

unsupported! {
    __cudaGetProcAddress, __cudaRegisterHostVar, __cudaRegisterUnifiedTable, cudaArrayGetMemoryRequirements,
    cudaArrayGetPlane, cudaArrayGetSparseProperties, cudaCtxResetPersistingL2Cache,
    cudaDestroyExternalMemory, cudaDestroyExternalSemaphore,
    cudaDeviceDisablePeerAccess, cudaDeviceEnablePeerAccess, cudaDeviceFlushGPUDirectRDMAWrites,
    cudaDeviceGetHostAtomicCapabilities, cudaDeviceGetNvSciSyncAttributes,
    cudaDeviceGetP2PAtomicCapabilities, cudaDeviceGetP2PAttribute, cudaDeviceGetSharedMemConfig,
    cudaDeviceGetTexture1DLinearMaxWidth, cudaDeviceRegisterAsyncNotification,
    cudaDeviceSetSharedMemConfig, cudaDeviceUnregisterAsyncNotification,
    cudaEGLStreamConsumerAcquireFrame, cudaEGLStreamConsumerConnect, cudaEGLStreamConsumerConnectWithFlags,
    cudaEGLStreamConsumerDisconnect, cudaEGLStreamConsumerReleaseFrame, cudaEGLStreamProducerConnect,
    cudaEGLStreamProducerDisconnect, cudaEGLStreamProducerPresentFrame, cudaEGLStreamProducerReturnFrame,
    cudaEventCreateFromEGLSync, cudaExternalMemoryGetMappedBuffer, cudaExternalMemoryGetMappedMipmappedArray,
    cudaFuncGetName, cudaFuncGetParamInfo, cudaFuncSetSharedMemConfig, cudaGLGetDevices, cudaGLMapBufferObject,
    cudaGLMapBufferObjectAsync, cudaGLRegisterBufferObject, cudaGLSetBufferObjectMapFlags, cudaGLSetGLDevice,
    cudaGLUnmapBufferObject, cudaGLUnmapBufferObjectAsync, cudaGLUnregisterBufferObject, cudaGetExportTable,
    cudaGetTextureObjectResourceViewDesc, cudaGraphAddExternalSemaphoresSignalNode, cudaGraphAddExternalSemaphoresWaitNode,
    cudaGraphExecChildGraphNodeSetParams,
    cudaGraphExecExternalSemaphoresSignalNodeSetParams, cudaGraphExecExternalSemaphoresWaitNodeSetParams,
    cudaGraphExternalSemaphoresSignalNodeGetParams, cudaGraphExternalSemaphoresSignalNodeSetParams,
    cudaGraphExternalSemaphoresWaitNodeGetParams, cudaGraphExternalSemaphoresWaitNodeSetParams,
    cudaGraphInstantiateWithParams,
    cudaGraphInstantiateWithParams_ptsz, cudaGraphKernelNodeCopyAttributes, cudaGraphKernelNodeGetAttribute,
    cudaGraphKernelNodeSetAttribute,
    cudaGraphNodeGetEnabled,
    cudaGraphNodeSetEnabled, cudaGraphReleaseUserObject,
    cudaGraphRetainUserObject,
    cudaGraphicsEGLRegisterImage, cudaGraphicsGLRegisterBuffer, cudaGraphicsGLRegisterImage,
    cudaGraphicsMapResources, cudaGraphicsResourceGetMappedEglFrame,
    cudaGraphicsResourceGetMappedMipmappedArray, cudaGraphicsResourceGetMappedPointer,
    cudaGraphicsResourceSetMapFlags, cudaGraphicsSubResourceGetMappedArray, cudaGraphicsUnmapResources,
    cudaGraphicsUnregisterResource, cudaGraphicsVDPAURegisterOutputSurface,
    cudaGraphicsVDPAURegisterVideoSurface, cudaImportExternalMemory, cudaImportExternalSemaphore,
    cudaKernelSetAttributeForDevice, cudaLaunchCooperativeKernelMultiDevice, cudaLibraryEnumerateKernels,
    cudaLibraryGetGlobal, cudaLibraryGetKernel, cudaLibraryGetKernelCount, cudaLibraryGetManaged,
    cudaLibraryGetUnifiedFunction, cudaLibraryLoadData, cudaLibraryLoadFromFile, cudaLibraryUnload,
    cudaLogsCurrent, cudaLogsDumpToFile, cudaLogsDumpToMemory, cudaLogsRegisterCallback,
    cudaLogsUnregisterCallback, cudaMalloc3D, cudaMallocManaged, cudaMemAdvise, cudaMemAdvise_v2,
    cudaMemDiscardAndPrefetchBatchAsync, cudaMemDiscardAndPrefetchBatchAsync_ptsz, cudaMemDiscardBatchAsync,
    cudaMemDiscardBatchAsync_ptsz, cudaMemGetDefaultMemPool, cudaMemGetMemPool,
    cudaMemPrefetchAsync, cudaMemPrefetchAsync_ptsz,
    cudaMemPrefetchAsync_v2, cudaMemPrefetchAsync_v2_ptsz, cudaMemPrefetchBatchAsync,
    cudaMemPrefetchBatchAsync_ptsz, cudaMemRangeGetAttribute, cudaMemRangeGetAttributes, cudaMemSetMemPool,
    cudaMemcpy3DBatchAsync, cudaMemcpy3DBatchAsync_ptsz, cudaMemcpy3DPeer, cudaMemcpy3DPeerAsync,
    cudaMemcpy3DPeerAsync_ptsz, cudaMemcpy3DPeer_ptds,
    cudaMemcpyBatchAsync, cudaMemcpyBatchAsync_ptsz, cudaMemcpyFromArrayAsync, cudaMemcpyFromArrayAsync_ptsz,
    cudaMemcpyToArrayAsync, cudaMemcpyToArrayAsync_ptsz, cudaMipmappedArrayGetMemoryRequirements,
    cudaMipmappedArrayGetSparseProperties, cudaOccupancyMaxActiveClusters, cudaOccupancyMaxPotentialClusterSize,
    cudaSetDoubleForDevice, cudaSetDoubleForHost, cudaSetValidDevices, cudaSignalExternalSemaphoresAsync,
    cudaSignalExternalSemaphoresAsync_ptsz, cudaSignalExternalSemaphoresAsync_v2,
    cudaSignalExternalSemaphoresAsync_v2_ptsz, cudaStreamAttachMemAsync, cudaStreamAttachMemAsync_ptsz,
    cudaStreamCopyAttributes,
    cudaStreamCopyAttributes_ptsz, cudaStreamGetAttribute, cudaStreamGetAttribute_ptsz, cudaStreamGetDevice,
    cudaStreamGetDevice_ptsz, cudaStreamGetId, cudaStreamGetId_ptsz, cudaStreamSetAttribute,
    cudaStreamSetAttribute_ptsz,

    cudaUserObjectCreate, cudaUserObjectRelease, cudaUserObjectRetain,
    cudaVDPAUGetDevice, cudaVDPAUSetVDPAUDevice, cudaWaitExternalSemaphoresAsync,
    cudaWaitExternalSemaphoresAsync_ptsz, cudaWaitExternalSemaphoresAsync_v2,
    cudaWaitExternalSemaphoresAsync_v2_ptsz
}
