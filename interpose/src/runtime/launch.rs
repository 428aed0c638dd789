//! Launches (`cudaLaunchKernel`, `<<<>>>` through nvcc's stubs, CUDA 13's
//! `__cudaLaunchKernel`, cooperative launches) onto the driver's `cuLaunchKernel`, so
//! each one goes through the daemon's compute scheduler like any driver launch; function
//! attributes; and the occupancy calculator (the driver path's, [`crate::api::occupancy`]).

use super::registry::kernel_handle;
use super::{NullStream, Rt, cu, out, registry, rt_exports, rt_variants};
use crate::api::exports::{cuFuncGetAttribute, cuFuncSetAttribute, cuFuncSetCacheConfig};
use crate::api::exports::{cuLaunchCooperativeKernel, cuLaunchKernel, cuLaunchKernelEx};
use crate::api::occupancy::Occupancy;
use gpupool_shim::cuda::{
    CUfunc_cache, CUfunction, CUfunction_attribute as F, CUlaunchAttribute, CUlaunchConfig, CUstream,
};
use gpupool_shim::cudart::{
    cudaError, cudaFuncAttribute, cudaFuncAttributes, cudaFuncCache, cudaFunction_t, cudaLaunchConfig_t, dim3,
};
use std::os::raw::{c_int, c_uint, c_void};

/// Threads per block every device since compute capability 2.0 allows.
const MAX_BLOCK_THREADS: u64 = 1024;

/// No dimension may be 0, and a block holds at most [`MAX_BLOCK_THREADS`] threads.
fn check_config(grid: dim3, block: dim3) -> Rt<()> {
    let threads = block.x as u64 * block.y as u64 * block.z as u64;
    if [grid.x, grid.y, grid.z, block.x, block.y, block.z].contains(&0) || threads > MAX_BLOCK_THREADS {
        return Err(cudaError::cudaErrorInvalidConfiguration);
    }
    Ok(())
}

fn launch(
    func: *const c_void,
    grid: dim3,
    block: dim3,
    args: *mut *mut c_void,
    shmem: usize,
    stream: CUstream,
    cooperative: bool,
    ns: NullStream,
) -> Rt<()> {
    check_config(grid, block)?;
    let shared = c_uint::try_from(shmem).map_err(|_| cudaError::cudaErrorInvalidValue)?;
    let f = registry::function(func)?;
    let s = ns.resolve(stream);
    // SAFETY: our own exports; `args` is the caller's kernelParams array, passed on.
    cu(unsafe {
        if cooperative {
            cuLaunchCooperativeKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared, s, args)
        } else {
            cuLaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared, s, args, std::ptr::null_mut())
        }
    })
}

fn launch_kernel(
    func: *const c_void,
    grid: dim3,
    block: dim3,
    args: *mut *mut c_void,
    shmem: usize,
    stream: CUstream,
    ns: NullStream,
) -> Rt<()> {
    launch(func, grid, block, args, shmem, stream, false, ns)
}

fn launch_cooperative(
    func: *const c_void,
    grid: dim3,
    block: dim3,
    args: *mut *mut c_void,
    shmem: usize,
    stream: CUstream,
    ns: NullStream,
) -> Rt<()> {
    launch(func, grid, block, args, shmem, stream, true, ns)
}

/// `cudaLaunchKernelEx` (the C++ template in cuda_runtime.h calls this): the runtime's
/// launch configuration becomes the driver's, and its attributes pass as they are (a
/// `cudaLaunchAttribute` is laid out as a `CUlaunchAttribute`, with the same ids).
fn launch_ex(config: *const cudaLaunchConfig_t, func: *const c_void, args: *mut *mut c_void, ns: NullStream) -> Rt<()> {
    if config.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    // SAFETY: non-null; the caller passes a cudaLaunchConfig_t.
    let c = unsafe { config.read_unaligned() };
    let (grid, block) = (c.gridDim, c.blockDim);
    check_config(grid, block)?;
    if c.numAttrs > 0 && c.attrs.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    let f = registry::function(func)?;
    let cfg = CUlaunchConfig {
        gridDimX: grid.x,
        gridDimY: grid.y,
        gridDimZ: grid.z,
        blockDimX: block.x,
        blockDimY: block.y,
        blockDimZ: block.z,
        sharedMemBytes: c_uint::try_from(c.dynamicSmemBytes).map_err(|_| cudaError::cudaErrorInvalidValue)?,
        hStream: ns.resolve(c.stream.cast()),
        attrs: c.attrs.cast::<CUlaunchAttribute>(),
        numAttrs: c.numAttrs,
    };
    // SAFETY: our own export; `args` is the caller's kernelParams array, passed on.
    cu(unsafe { cuLaunchKernelEx(&cfg, f, args, std::ptr::null_mut()) })
}

rt_variants! {
    cudaLaunchKernelExC / cudaLaunchKernelExC_ptsz => launch_ex(
        config: *const cudaLaunchConfig_t, func: *const c_void, args: *mut *mut c_void);
    cudaLaunchKernel / cudaLaunchKernel_ptsz => launch_kernel(
        func: *const c_void, grid: dim3, block: dim3, args: *mut *mut c_void, shmem: usize, stream: CUstream);
    __cudaLaunchKernel / __cudaLaunchKernel_ptsz => launch_kernel(
        func: *const c_void, grid: dim3, block: dim3, args: *mut *mut c_void, shmem: usize, stream: CUstream);
    cudaLaunchCooperativeKernel / cudaLaunchCooperativeKernel_ptsz => launch_cooperative(
        func: *const c_void, grid: dim3, block: dim3, args: *mut *mut c_void, shmem: usize, stream: CUstream);
}

fn func_attr(f: CUfunction, a: F) -> Rt<c_int> {
    let mut v = 0;
    // SAFETY: our own export with a valid out-pointer.
    cu(unsafe { cuFuncGetAttribute(&mut v, a, f) })?;
    Ok(v)
}

fn get_attributes(attr: *mut cudaFuncAttributes, func: *const c_void) -> Rt<()> {
    if attr.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    let f = registry::function(func)?;
    let get = |a| func_attr(f, a);
    // Cluster attributes are optional in the driver: absent means "not set".
    let opt = |a| func_attr(f, a).unwrap_or(0);
    let a = cudaFuncAttributes {
        sharedSizeBytes: get(F::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)? as usize,
        constSizeBytes: get(F::CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES)? as usize,
        localSizeBytes: get(F::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)? as usize,
        maxThreadsPerBlock: get(F::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        numRegs: get(F::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
        ptxVersion: get(F::CU_FUNC_ATTRIBUTE_PTX_VERSION)?,
        binaryVersion: get(F::CU_FUNC_ATTRIBUTE_BINARY_VERSION)?,
        cacheModeCA: opt(F::CU_FUNC_ATTRIBUTE_CACHE_MODE_CA),
        maxDynamicSharedSizeBytes: get(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)?,
        preferredShmemCarveout: opt(F::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT),
        clusterDimMustBeSet: opt(F::CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET),
        requiredClusterWidth: opt(F::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH),
        requiredClusterHeight: opt(F::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT),
        requiredClusterDepth: opt(F::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH),
        clusterSchedulingPolicyPreference: opt(F::CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE),
        nonPortableClusterSizeAllowed: opt(F::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED),
        reserved: [0; 16],
    };
    out(attr, a)
}

fn set_attribute(func: *const c_void, attr: cudaFuncAttribute, value: c_int) -> Rt<()> {
    let f = registry::function(func)?;
    // The runtime's attribute numbers are the driver's (8: max dynamic shared memory, 9:
    // carveout, 10..15: cluster).
    // SAFETY: our own export.
    cu(unsafe { cuFuncSetAttribute(f, F(attr.0 as _), value) })
}

fn set_cache_config(func: *const c_void, config: cudaFuncCache) -> Rt<()> {
    let f = registry::function(func)?;
    // SAFETY: our own export; the cache preferences share their numbers.
    cu(unsafe { cuFuncSetCacheConfig(f, CUfunc_cache(config.0 as _)) })
}

fn get_func_by_symbol(pf: *mut cudaFunction_t, symbol: *const c_void) -> Rt<()> {
    let f = registry::function(symbol)?;
    out(pf, f as cudaFunction_t)
}

/// The occupancy calculator of the driver path, for a registered kernel.
fn occupancy(func: *const c_void) -> Rt<Occupancy> {
    let f = registry::function(func)?;
    Occupancy::of(f).map_err(super::from_driver)
}

fn max_active_blocks(n: *mut c_int, func: *const c_void, block_size: c_int, dynamic: usize, flags: c_uint) -> Rt<()> {
    if n.is_null() || block_size <= 0 || flags > 1 {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    let o = occupancy(func)?;
    out(n, o.blocks(block_size as u64, dynamic as u64).min(c_int::MAX as u64) as c_int)
}

fn max_active_blocks_default(n: *mut c_int, func: *const c_void, block_size: c_int, dynamic: usize) -> Rt<()> {
    max_active_blocks(n, func, block_size, dynamic, 0)
}

fn available_dynamic_smem(size: *mut usize, func: *const c_void, blocks: c_int, block_size: c_int) -> Rt<()> {
    if size.is_null() || blocks <= 0 || block_size <= 0 {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    let o = occupancy(func)?;
    let avail = o.dynamic_smem_for(blocks as u64);
    let fits = o.blocks(block_size as u64, 0) >= blocks as u64;
    out(size, if fits { avail as usize } else { 0 })
}

rt_exports! {
    cudaFuncGetAttributes => get_attributes(attr: *mut cudaFuncAttributes, func: *const c_void);
    cudaFuncSetAttribute => set_attribute(func: *const c_void, attr: cudaFuncAttribute, value: c_int);
    cudaFuncSetCacheConfig => set_cache_config(func: *const c_void, config: cudaFuncCache);
    cudaGetFuncBySymbol => get_func_by_symbol(pf: *mut cudaFunction_t, symbol: *const c_void);
    cudaGetKernel => kernel_handle(pk: *mut *mut c_void, symbol: *const c_void);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor => max_active_blocks_default(
        n: *mut c_int, func: *const c_void, block_size: c_int, dynamic: usize);
    cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags => max_active_blocks(
        n: *mut c_int, func: *const c_void, block_size: c_int, dynamic: usize, flags: c_uint);
    cudaOccupancyAvailableDynamicSMemPerBlock => available_dynamic_smem(
        size: *mut usize, func: *const c_void, blocks: c_int, block_size: c_int);
}
