//! Launches (`cudaLaunchKernel`, `<<<>>>` through nvcc's stubs, CUDA 13's
//! `__cudaLaunchKernel`, cooperative launches) onto the driver's `cuLaunchKernel`, so
//! each one goes through the daemon's compute scheduler like any driver launch; function
//! attributes; and the occupancy calculator, computed here from the function's and the
//! device's attributes (the formula of NVIDIA's documented occupancy model).

use super::{NullStream, Rt, cu, out, registry, rt_exports, rt_variants};
use crate::api::device::cuDeviceGetAttribute;
use crate::api::launch::{cuLaunchCooperativeKernel, cuLaunchKernel};
use crate::api::module::{cuFuncGetAttribute, cuFuncSetAttribute, cuFuncSetCacheConfig};
use gpupool_shim::cuda::{CUdevice_attribute as D, CUfunc_cache, CUfunction, CUfunction_attribute as F, CUstream};
use gpupool_shim::cudart::{cudaError, cudaFuncAttribute, cudaFuncAttributes, cudaFuncCache, cudaFunction_t, dim3};
use std::os::raw::{c_int, c_uint, c_void};

/// Threads per block every device since compute capability 2.0 allows.
const MAX_BLOCK_THREADS: u64 = 1024;

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
    let threads = block.x as u64 * block.y as u64 * block.z as u64;
    if [grid.x, grid.y, grid.z, block.x, block.y, block.z].contains(&0) || threads > MAX_BLOCK_THREADS {
        return Err(cudaError::cudaErrorInvalidConfiguration);
    }
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

rt_variants! {
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

fn dev_attr(a: D) -> Rt<c_int> {
    let dev = super::state::current_device()?;
    let mut v = 0;
    // SAFETY: our own export with a valid out-pointer.
    cu(unsafe { cuDeviceGetAttribute(&mut v, a, dev) })?;
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

fn get_kernel(pk: *mut *mut c_void, symbol: *const c_void) -> Rt<()> {
    if !registry::is_kernel(symbol) {
        return Err(cudaError::cudaErrorInvalidDeviceFunction);
    }
    out(pk, symbol.cast_mut())
}

/// What bounds how many blocks of `func` fit on one multiprocessor.
struct Occupancy {
    warp: u64,
    threads_per_sm: u64,
    blocks_per_sm: u64,
    regs_per_sm: u64,
    smem_per_sm: u64,
    smem_reserved: u64,
    func_max_threads: u64,
    func_regs: u64,
    func_smem: u64,
    func_max_dynamic: u64,
}

impl Occupancy {
    fn of(func: *const c_void) -> Rt<Occupancy> {
        let f = registry::function(func)?;
        let d = |a| dev_attr(a).map(|v| v.max(0) as u64);
        let fa = |a| func_attr(f, a).map(|v| v.max(0) as u64);
        Ok(Occupancy {
            warp: d(D::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?.max(1),
            threads_per_sm: d(D::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?,
            blocks_per_sm: d(D::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR)?,
            regs_per_sm: d(D::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)?,
            smem_per_sm: d(D::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
            smem_reserved: d(D::CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK).unwrap_or(0),
            func_max_threads: fa(F::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            func_regs: fa(F::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            func_smem: fa(F::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
            func_max_dynamic: fa(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)?,
        })
    }

    fn blocks(&self, block_size: u64, dynamic_smem: u64) -> u64 {
        if block_size == 0 || block_size > self.func_max_threads || dynamic_smem > self.func_max_dynamic {
            return 0;
        }
        let warps = block_size.div_ceil(self.warp);
        let mut n = self.blocks_per_sm.min(self.threads_per_sm / (warps * self.warp));
        if self.func_regs > 0 {
            // Registers are allocated per warp in units of 256.
            let per_warp = (self.func_regs * self.warp).div_ceil(256) * 256;
            n = n.min(self.regs_per_sm / (per_warp * warps));
        }
        let smem = self.func_smem + dynamic_smem + self.smem_reserved;
        if let Some(fit) = self.smem_per_sm.checked_div(smem) {
            n = n.min(fit);
        }
        n
    }
}

fn max_active_blocks(n: *mut c_int, func: *const c_void, block_size: c_int, dynamic: usize, flags: c_uint) -> Rt<()> {
    if n.is_null() || block_size <= 0 || flags > 1 {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    let o = Occupancy::of(func)?;
    out(n, o.blocks(block_size as u64, dynamic as u64).min(c_int::MAX as u64) as c_int)
}

fn max_active_blocks_default(n: *mut c_int, func: *const c_void, block_size: c_int, dynamic: usize) -> Rt<()> {
    max_active_blocks(n, func, block_size, dynamic, 0)
}

fn available_dynamic_smem(size: *mut usize, func: *const c_void, blocks: c_int, block_size: c_int) -> Rt<()> {
    if size.is_null() || blocks <= 0 || block_size <= 0 {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    let o = Occupancy::of(func)?;
    let per_block = o.smem_per_sm / blocks as u64;
    let avail = per_block.saturating_sub(o.func_smem + o.smem_reserved).min(o.func_max_dynamic);
    let fits = o.blocks(block_size as u64, 0) >= blocks as u64;
    out(size, if fits { avail as usize } else { 0 })
}

rt_exports! {
    cudaFuncGetAttributes => get_attributes(attr: *mut cudaFuncAttributes, func: *const c_void);
    cudaFuncSetAttribute => set_attribute(func: *const c_void, attr: cudaFuncAttribute, value: c_int);
    cudaFuncSetCacheConfig => set_cache_config(func: *const c_void, config: cudaFuncCache);
    cudaGetFuncBySymbol => get_func_by_symbol(pf: *mut cudaFunction_t, symbol: *const c_void);
    cudaGetKernel => get_kernel(pk: *mut *mut c_void, symbol: *const c_void);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor => max_active_blocks_default(
        n: *mut c_int, func: *const c_void, block_size: c_int, dynamic: usize);
    cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags => max_active_blocks(
        n: *mut c_int, func: *const c_void, block_size: c_int, dynamic: usize, flags: c_uint);
    cudaOccupancyAvailableDynamicSMemPerBlock => available_dynamic_smem(
        size: *mut usize, func: *const c_void, blocks: c_int, block_size: c_int);
}
