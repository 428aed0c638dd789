//! Device management: counts, the thread's device, properties (in CUDA 13's layout for
//! `cudaGetDeviceProperties` and CUDA 12's for `cudaGetDeviceProperties_v2`, which CUDA
//! 12's headers call instead), attributes (the runtime's numbers are the driver's),
//! synchronisation, reset, versions, limits.

use super::{Rt, cu, out, rt_exports, state};
use crate::api::exports::cuDriverGetVersion;
use crate::api::exports::{
    cuCtxGetCacheConfig, cuCtxGetLimit, cuCtxGetStreamPriorityRange, cuCtxSetCacheConfig, cuCtxSetLimit,
    cuCtxSynchronize, cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxSetFlags_v2,
};
use crate::api::exports::{
    cuDeviceCanAccessPeer, cuDeviceGetAttribute, cuDeviceGetByPCIBusId, cuDeviceGetName, cuDeviceGetPCIBusId,
    cuDeviceGetUuid_v2, cuDeviceTotalMem_v2,
};
use gpupool_shim::cuda::{CUdevice_attribute, CUfunc_cache, CUlimit, CUuuid};
use gpupool_shim::cudart::{cudaDeviceAttr as A, cudaDeviceProp, cudaError, cudaFuncCache, cudaLimit};
use gpupool_shim::cudart12::cudaDeviceProp as cudaDeviceProp12;
use std::os::raw::{c_char, c_int, c_uint};

fn attribute(value: *mut c_int, attr: A, dev: c_int) -> Rt<()> {
    if value.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::check_device(dev)?;
    // SAFETY: our own export; cudaDeviceAttr's numbers are CUdevice_attribute's.
    cu(unsafe { cuDeviceGetAttribute(value, CUdevice_attribute(attr.0 as _), dev) })
}

/// One attribute for the properties struct; one the driver does not know reads 0, as
/// NVIDIA's runtime fills what a device does not have.
fn attr(dev: c_int, a: A) -> c_int {
    let mut v = 0;
    // SAFETY: our own export with a valid out-pointer.
    if unsafe { cuDeviceGetAttribute(&mut v, CUdevice_attribute(a.0 as _), dev) }
        != gpupool_shim::cuda::CUresult::CUDA_SUCCESS
    {
        return 0;
    }
    v
}

/// Fills the fields both layouts share; `$p` is either struct.
macro_rules! fill_common {
    ($p:ident, $dev:ident) => {{
        let a = |x: A| attr($dev, x);
        // SAFETY: our own exports with valid out-pointers into `$p`.
        cu(unsafe { cuDeviceGetName($p.name.as_mut_ptr(), $p.name.len() as c_int, $dev) })?;
        let mut uuid = CUuuid::default();
        // SAFETY: as above.
        cu(unsafe { cuDeviceGetUuid_v2(&mut uuid, $dev) })?;
        $p.uuid.bytes = uuid.bytes;
        let mut total = 0usize;
        // SAFETY: as above. The pool answers with the tenant's quota.
        cu(unsafe { cuDeviceTotalMem_v2(&mut total, $dev) })?;
        $p.totalGlobalMem = total;
        $p.sharedMemPerBlock = a(A::cudaDevAttrMaxSharedMemoryPerBlock) as usize;
        $p.regsPerBlock = a(A::cudaDevAttrMaxRegistersPerBlock);
        $p.warpSize = a(A::cudaDevAttrWarpSize);
        $p.memPitch = a(A::cudaDevAttrMaxPitch) as usize;
        $p.maxThreadsPerBlock = a(A::cudaDevAttrMaxThreadsPerBlock);
        $p.maxThreadsDim =
            [a(A::cudaDevAttrMaxBlockDimX), a(A::cudaDevAttrMaxBlockDimY), a(A::cudaDevAttrMaxBlockDimZ)];
        $p.maxGridSize = [a(A::cudaDevAttrMaxGridDimX), a(A::cudaDevAttrMaxGridDimY), a(A::cudaDevAttrMaxGridDimZ)];
        $p.totalConstMem = a(A::cudaDevAttrTotalConstantMemory) as usize;
        $p.major = a(A::cudaDevAttrComputeCapabilityMajor);
        $p.minor = a(A::cudaDevAttrComputeCapabilityMinor);
        $p.textureAlignment = a(A::cudaDevAttrTextureAlignment) as usize;
        $p.texturePitchAlignment = a(A::cudaDevAttrTexturePitchAlignment) as usize;
        $p.multiProcessorCount = a(A::cudaDevAttrMultiProcessorCount);
        $p.integrated = a(A::cudaDevAttrIntegrated);
        $p.canMapHostMemory = a(A::cudaDevAttrCanMapHostMemory);
        $p.maxTexture1D = a(A::cudaDevAttrMaxTexture1DWidth);
        $p.maxTexture1DMipmap = a(A::cudaDevAttrMaxTexture1DMipmappedWidth);
        $p.maxTexture2D = [a(A::cudaDevAttrMaxTexture2DWidth), a(A::cudaDevAttrMaxTexture2DHeight)];
        $p.maxTexture2DMipmap =
            [a(A::cudaDevAttrMaxTexture2DMipmappedWidth), a(A::cudaDevAttrMaxTexture2DMipmappedHeight)];
        $p.maxTexture2DLinear = [
            a(A::cudaDevAttrMaxTexture2DLinearWidth),
            a(A::cudaDevAttrMaxTexture2DLinearHeight),
            a(A::cudaDevAttrMaxTexture2DLinearPitch),
        ];
        $p.maxTexture2DGather = [a(A::cudaDevAttrMaxTexture2DGatherWidth), a(A::cudaDevAttrMaxTexture2DGatherHeight)];
        $p.maxTexture3D = [
            a(A::cudaDevAttrMaxTexture3DWidth),
            a(A::cudaDevAttrMaxTexture3DHeight),
            a(A::cudaDevAttrMaxTexture3DDepth),
        ];
        $p.maxTexture3DAlt = [
            a(A::cudaDevAttrMaxTexture3DWidthAlt),
            a(A::cudaDevAttrMaxTexture3DHeightAlt),
            a(A::cudaDevAttrMaxTexture3DDepthAlt),
        ];
        $p.maxTextureCubemap = a(A::cudaDevAttrMaxTextureCubemapWidth);
        $p.maxTexture1DLayered =
            [a(A::cudaDevAttrMaxTexture1DLayeredWidth), a(A::cudaDevAttrMaxTexture1DLayeredLayers)];
        $p.maxTexture2DLayered = [
            a(A::cudaDevAttrMaxTexture2DLayeredWidth),
            a(A::cudaDevAttrMaxTexture2DLayeredHeight),
            a(A::cudaDevAttrMaxTexture2DLayeredLayers),
        ];
        $p.maxTextureCubemapLayered =
            [a(A::cudaDevAttrMaxTextureCubemapLayeredWidth), a(A::cudaDevAttrMaxTextureCubemapLayeredLayers)];
        $p.maxSurface1D = a(A::cudaDevAttrMaxSurface1DWidth);
        $p.maxSurface2D = [a(A::cudaDevAttrMaxSurface2DWidth), a(A::cudaDevAttrMaxSurface2DHeight)];
        $p.maxSurface3D = [
            a(A::cudaDevAttrMaxSurface3DWidth),
            a(A::cudaDevAttrMaxSurface3DHeight),
            a(A::cudaDevAttrMaxSurface3DDepth),
        ];
        $p.maxSurface1DLayered =
            [a(A::cudaDevAttrMaxSurface1DLayeredWidth), a(A::cudaDevAttrMaxSurface1DLayeredLayers)];
        $p.maxSurface2DLayered = [
            a(A::cudaDevAttrMaxSurface2DLayeredWidth),
            a(A::cudaDevAttrMaxSurface2DLayeredHeight),
            a(A::cudaDevAttrMaxSurface2DLayeredLayers),
        ];
        $p.maxSurfaceCubemap = a(A::cudaDevAttrMaxSurfaceCubemapWidth);
        $p.maxSurfaceCubemapLayered =
            [a(A::cudaDevAttrMaxSurfaceCubemapLayeredWidth), a(A::cudaDevAttrMaxSurfaceCubemapLayeredLayers)];
        $p.surfaceAlignment = a(A::cudaDevAttrSurfaceAlignment) as usize;
        $p.concurrentKernels = a(A::cudaDevAttrConcurrentKernels);
        $p.ECCEnabled = a(A::cudaDevAttrEccEnabled);
        $p.pciBusID = a(A::cudaDevAttrPciBusId);
        $p.pciDeviceID = a(A::cudaDevAttrPciDeviceId);
        $p.pciDomainID = a(A::cudaDevAttrPciDomainId);
        $p.tccDriver = a(A::cudaDevAttrTccDriver);
        $p.asyncEngineCount = a(A::cudaDevAttrAsyncEngineCount);
        $p.unifiedAddressing = a(A::cudaDevAttrUnifiedAddressing);
        $p.memoryBusWidth = a(A::cudaDevAttrGlobalMemoryBusWidth);
        $p.l2CacheSize = a(A::cudaDevAttrL2CacheSize);
        $p.persistingL2CacheMaxSize = a(A::cudaDevAttrMaxPersistingL2CacheSize);
        $p.maxThreadsPerMultiProcessor = a(A::cudaDevAttrMaxThreadsPerMultiProcessor);
        $p.streamPrioritiesSupported = a(A::cudaDevAttrStreamPrioritiesSupported);
        $p.globalL1CacheSupported = a(A::cudaDevAttrGlobalL1CacheSupported);
        $p.localL1CacheSupported = a(A::cudaDevAttrLocalL1CacheSupported);
        $p.sharedMemPerMultiprocessor = a(A::cudaDevAttrMaxSharedMemoryPerMultiprocessor) as usize;
        $p.regsPerMultiprocessor = a(A::cudaDevAttrMaxRegistersPerMultiprocessor);
        $p.managedMemory = a(A::cudaDevAttrManagedMemory);
        $p.isMultiGpuBoard = a(A::cudaDevAttrIsMultiGpuBoard);
        $p.multiGpuBoardGroupID = a(A::cudaDevAttrMultiGpuBoardGroupID);
        $p.hostNativeAtomicSupported = a(A::cudaDevAttrHostNativeAtomicSupported);
        $p.pageableMemoryAccess = a(A::cudaDevAttrPageableMemoryAccess);
        $p.concurrentManagedAccess = a(A::cudaDevAttrConcurrentManagedAccess);
        $p.computePreemptionSupported = a(A::cudaDevAttrComputePreemptionSupported);
        $p.canUseHostPointerForRegisteredMem = a(A::cudaDevAttrCanUseHostPointerForRegisteredMem);
        $p.cooperativeLaunch = a(A::cudaDevAttrCooperativeLaunch);
        $p.sharedMemPerBlockOptin = a(A::cudaDevAttrMaxSharedMemoryPerBlockOptin) as usize;
        $p.pageableMemoryAccessUsesHostPageTables = a(A::cudaDevAttrPageableMemoryAccessUsesHostPageTables);
        $p.directManagedMemAccessFromHost = a(A::cudaDevAttrDirectManagedMemAccessFromHost);
        $p.maxBlocksPerMultiProcessor = a(A::cudaDevAttrMaxBlocksPerMultiprocessor);
        $p.accessPolicyMaxWindowSize = a(A::cudaDevAttrMaxAccessPolicyWindowSize);
        $p.reservedSharedMemPerBlock = a(A::cudaDevAttrReservedSharedMemoryPerBlock) as usize;
        $p.hostRegisterSupported = a(A::cudaDevAttrHostRegisterSupported);
        $p.sparseCudaArraySupported = a(A::cudaDevAttrSparseCudaArraySupported);
        $p.hostRegisterReadOnlySupported = a(A::cudaDevAttrHostRegisterReadOnlySupported);
        $p.timelineSemaphoreInteropSupported = a(A::cudaDevAttrTimelineSemaphoreInteropSupported);
        $p.memoryPoolsSupported = a(A::cudaDevAttrMemoryPoolsSupported);
        $p.gpuDirectRDMASupported = a(A::cudaDevAttrGPUDirectRDMASupported);
        $p.gpuDirectRDMAFlushWritesOptions = a(A::cudaDevAttrGPUDirectRDMAFlushWritesOptions) as c_uint;
        $p.gpuDirectRDMAWritesOrdering = a(A::cudaDevAttrGPUDirectRDMAWritesOrdering);
        $p.memoryPoolSupportedHandleTypes = a(A::cudaDevAttrMemoryPoolSupportedHandleTypes) as c_uint;
        $p.deferredMappingCudaArraySupported = a(A::cudaDevAttrDeferredMappingCudaArraySupported);
        $p.ipcEventSupported = a(A::cudaDevAttrIpcEventSupport);
        $p.clusterLaunch = a(A::cudaDevAttrClusterLaunch);
        $p.unifiedFunctionPointers = 0;
        Ok::<(), cudaError>(())
    }};
}

fn properties(prop: *mut cudaDeviceProp, dev: c_int) -> Rt<()> {
    if prop.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::check_device(dev)?;
    let mut p = cudaDeviceProp::default();
    fill_common!(p, dev)?;
    let a = |x: A| attr(dev, x);
    p.deviceNumaConfig = a(A::cudaDevAttrNumaConfig);
    p.deviceNumaId = a(A::cudaDevAttrNumaId);
    p.mpsEnabled = a(A::cudaDevAttrMpsEnabled);
    p.hostNumaId = a(A::cudaDevAttrHostNumaId);
    p.gpuPciDeviceID = a(A::cudaDevAttrGpuPciDeviceId) as c_uint;
    p.gpuPciSubsystemID = a(A::cudaDevAttrGpuPciSubsystemId) as c_uint;
    p.hostNumaMultinodeIpcSupported = a(A::cudaDevAttrHostNumaMultinodeIpcSupported);
    out(prop, p)
}

fn properties_v2(prop: *mut cudaDeviceProp12, dev: c_int) -> Rt<()> {
    if prop.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::check_device(dev)?;
    let mut p = cudaDeviceProp12::default();
    fill_common!(p, dev)?;
    let a = |x: A| attr(dev, x);
    p.clockRate = a(A::cudaDevAttrClockRate);
    p.deviceOverlap = a(A::cudaDevAttrGpuOverlap);
    p.kernelExecTimeoutEnabled = a(A::cudaDevAttrKernelExecTimeout);
    p.computeMode = a(A::cudaDevAttrComputeMode);
    p.maxTexture1DLinear = a(A::cudaDevAttrMaxTexture1DLinearWidth);
    p.memoryClockRate = a(A::cudaDevAttrMemoryClockRate);
    p.singleToDoublePrecisionPerfRatio = a(A::cudaDevAttrSingleToDoublePrecisionPerfRatio);
    // CUDA 12's cudaDevAttrCooperativeMultiDeviceLaunch (96), a reserved number in CUDA 13.
    p.cooperativeMultiDeviceLaunch = attr(dev, A(96));
    out(prop, p)
}

fn device_count(count: *mut c_int) -> Rt<()> {
    if count.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    out(count, state::device_count()?)
}

fn get_device(dev: *mut c_int) -> Rt<()> {
    if dev.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    out(dev, state::current_device()?)
}

fn synchronize() -> Rt<()> {
    state::context()?;
    // SAFETY: our own export.
    cu(unsafe { cuCtxSynchronize() })
}

/// Waits for the device's work, then destroys its primary context (and with it every
/// allocation, stream, event and module of this process on it); the next call that needs
/// the device starts a fresh one.
fn reset() -> Rt<()> {
    let dev = state::current_device()?;
    if let Some(ctx) = state::forget_primary(dev) {
        // SAFETY: our own export.
        let _ = unsafe { cuCtxSynchronize() };
        super::registry::forget_context(ctx);
        // SAFETY: our own export on a device we retained.
        cu(unsafe { cuDevicePrimaryCtxReset_v2(dev) })?;
        // The reset context is gone: the next call makes a new primary context current
        // instead of naming the old one.
        if crate::client::stack_top() == Some(ctx as u64) {
            // SAFETY: our own export; NULL unsets the thread's current context.
            cu(unsafe { crate::api::exports::cuCtxSetCurrent(std::ptr::null_mut()) })?;
        }
    }
    Ok(())
}

fn driver_version(v: *mut c_int) -> Rt<()> {
    // SAFETY: our own export (it checks the pointer).
    cu(unsafe { cuDriverGetVersion(v) })
}

fn runtime_version(v: *mut c_int) -> Rt<()> {
    out(v, super::runtime_version())
}

/// `cudaSetDeviceFlags`: the scheduling and map-host flags of the primary context.
fn set_device_flags(flags: c_uint) -> Rt<()> {
    let dev = state::current_device()?;
    // cudaDeviceMapHost is always on in CUDA >= 11 and is not a context flag any more.
    let ctx_flags = flags & !0x08;
    if flags & !0xFF != 0 {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    // SAFETY: our own export.
    cu(unsafe { cuDevicePrimaryCtxSetFlags_v2(dev, ctx_flags) })
}

fn get_device_flags(flags: *mut c_uint) -> Rt<()> {
    if flags.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    let dev = state::current_device()?;
    let (mut f, mut active) = (0, 0);
    // SAFETY: our own export with valid out-pointers.
    cu(unsafe { cuDevicePrimaryCtxGetState(dev, &mut f, &mut active) })?;
    out(flags, f | 0x08)
}

fn init_device(dev: c_int, device_flags: c_uint, flags: c_uint) -> Rt<()> {
    if flags & !1 != 0 {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::check_device(dev)?;
    if device_flags != 0 {
        // SAFETY: our own export.
        cu(unsafe { cuDevicePrimaryCtxSetFlags_v2(dev, device_flags & !0x08) })?;
    }
    state::primary(dev)?;
    // cudaInitDeviceFlagsAreValid (1) would also make it current.
    if flags & 1 != 0 { state::set_device(dev) } else { Ok(()) }
}

fn get_limit(v: *mut usize, limit: cudaLimit) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; cudaLimit's numbers are CUlimit's.
    cu(unsafe { cuCtxGetLimit(v, CUlimit(limit.0 as _)) })
}

fn set_limit(limit: cudaLimit, value: usize) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export.
    cu(unsafe { cuCtxSetLimit(CUlimit(limit.0 as _), value) })
}

fn priority_range(least: *mut c_int, greatest: *mut c_int) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; NULL pointers are allowed by both APIs.
    cu(unsafe { cuCtxGetStreamPriorityRange(least, greatest) })
}

fn can_access_peer(can: *mut c_int, dev: c_int, peer: c_int) -> Rt<()> {
    state::check_device(dev)?;
    state::check_device(peer)?;
    // SAFETY: our own export.
    cu(unsafe { cuDeviceCanAccessPeer(can, dev, peer) })
}

fn pci_bus_id(buf: *mut c_char, len: c_int, dev: c_int) -> Rt<()> {
    state::check_device(dev)?;
    // SAFETY: our own export; it checks the buffer.
    cu(unsafe { cuDeviceGetPCIBusId(buf, len, dev) })
}

fn by_pci_bus_id(dev: *mut c_int, id: *const c_char) -> Rt<()> {
    state::init()?;
    // SAFETY: our own export; it checks the pointers.
    cu(unsafe { cuDeviceGetByPCIBusId(dev, id) })
}

/// Every pooled device of one kind looks alike to a tenant: the best match is the
/// first device whose compute capability is at least the one asked for, else device 0.
fn choose_device(dev: *mut c_int, prop: *const cudaDeviceProp) -> Rt<()> {
    if dev.is_null() || prop.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    // SAFETY: non-null; the caller passes a cudaDeviceProp.
    let want = unsafe { prop.read_unaligned() };
    let n = state::device_count()?;
    let best = (0..n)
        .find(|&d| {
            let (ma, mi) =
                (attr(d, A::cudaDevAttrComputeCapabilityMajor), attr(d, A::cudaDevAttrComputeCapabilityMinor));
            (ma, mi) >= (want.major, want.minor)
        })
        .unwrap_or(0);
    out(dev, best)
}

fn get_cache_config(c: *mut cudaFuncCache) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; the enums share their numbers and size.
    cu(unsafe { cuCtxGetCacheConfig(c.cast::<CUfunc_cache>()) })
}

fn set_cache_config(c: cudaFuncCache) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export.
    cu(unsafe { cuCtxSetCacheConfig(CUfunc_cache(c.0 as _)) })
}

rt_exports! {
    cudaGetDeviceCount => device_count(count: *mut c_int);
    cudaSetDevice => set(dev: c_int);
    cudaGetDevice => get_device(dev: *mut c_int);
    cudaGetDeviceProperties => properties(prop: *mut cudaDeviceProp, dev: c_int);
    cudaGetDeviceProperties_v2 => properties_v2(prop: *mut cudaDeviceProp12, dev: c_int);
    cudaDeviceGetAttribute => attribute(value: *mut c_int, attr: A, dev: c_int);
    cudaDeviceSynchronize => synchronize();
    cudaThreadSynchronize => synchronize();
    cudaDeviceReset => reset();
    cudaThreadExit => reset();
    cudaDriverGetVersion => driver_version(v: *mut c_int);
    cudaRuntimeGetVersion => runtime_version(v: *mut c_int);
    cudaSetDeviceFlags => set_device_flags(flags: c_uint);
    cudaGetDeviceFlags => get_device_flags(flags: *mut c_uint);
    cudaInitDevice => init_device(dev: c_int, device_flags: c_uint, flags: c_uint);
    cudaDeviceGetLimit => get_limit(v: *mut usize, limit: cudaLimit);
    cudaThreadGetLimit => get_limit(v: *mut usize, limit: cudaLimit);
    cudaDeviceSetLimit => set_limit(limit: cudaLimit, value: usize);
    cudaThreadSetLimit => set_limit(limit: cudaLimit, value: usize);
    cudaDeviceGetStreamPriorityRange => priority_range(least: *mut c_int, greatest: *mut c_int);
    cudaDeviceCanAccessPeer => can_access_peer(can: *mut c_int, dev: c_int, peer: c_int);
    cudaDeviceGetPCIBusId => pci_bus_id(buf: *mut c_char, len: c_int, dev: c_int);
    cudaDeviceGetByPCIBusId => by_pci_bus_id(dev: *mut c_int, id: *const c_char);
    cudaChooseDevice => choose_device(dev: *mut c_int, prop: *const cudaDeviceProp);
    cudaDeviceGetCacheConfig => get_cache_config(c: *mut cudaFuncCache);
    cudaThreadGetCacheConfig => get_cache_config(c: *mut cudaFuncCache);
    cudaDeviceSetCacheConfig => set_cache_config(c: cudaFuncCache);
    cudaThreadSetCacheConfig => set_cache_config(c: cudaFuncCache);
}

fn set(dev: c_int) -> Rt<()> {
    state::set_device(dev)
}
