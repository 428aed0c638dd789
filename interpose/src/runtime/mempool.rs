//! The runtime's stream-ordered memory pools: `cudaMemPool*`, `cudaMallocFromPoolAsync` and the
//! device's default and current pool, over the driver's (`crate::api::mempool`). The runtime
//! types are the driver's under other names (`cudaMemPool_t` is `CUmemoryPool`, and
//! `cudaMemPoolProps` / `cudaMemPoolAttr` have the layout and values of `CUmemPoolProps` /
//! `CUmemPool_attribute`), so the calls are passed on as they are. So are the pool sharing
//! calls: `cudaMemAllocationHandleType` has the values of `CUmemAllocationHandleType` and
//! `cudaMemPoolPtrExportData` is `CUmemPoolPtrExportData` (64 opaque bytes); only `flags` is
//! narrower (unsigned int).

use super::{NullStream, Rt, cu, out, rt_exports, rt_variants, state};
use crate::api::exports::{
    cuDeviceGetDefaultMemPool, cuDeviceGetMemPool, cuDeviceSetMemPool, cuMemAllocFromPoolAsync, cuMemPoolCreate,
    cuMemPoolDestroy, cuMemPoolExportPointer, cuMemPoolExportToShareableHandle, cuMemPoolGetAttribute,
    cuMemPoolImportFromShareableHandle, cuMemPoolImportPointer, cuMemPoolSetAttribute, cuMemPoolTrimTo,
};
use gpupool_shim::cuda::{
    CUdeviceptr, CUmemAllocationHandleType, CUmemPool_attribute, CUmemPoolProps, CUmemPoolPtrExportData, CUmemoryPool,
    CUstream,
};
use gpupool_shim::cudart::cudaError;
use std::os::raw::{c_int, c_uint, c_void};

fn pool_create(pool: *mut CUmemoryPool, props: *const CUmemPoolProps) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks both pointers.
    cu(unsafe { cuMemPoolCreate(pool, props) })
}

fn pool_destroy(pool: CUmemoryPool) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it looks the handle up.
    cu(unsafe { cuMemPoolDestroy(pool) })
}

fn pool_trim_to(pool: CUmemoryPool, keep: usize) -> Rt<()> {
    state::context()?;
    // SAFETY: as above.
    cu(unsafe { cuMemPoolTrimTo(pool, keep) })
}

fn pool_set_attribute(pool: CUmemoryPool, attr: CUmemPool_attribute, value: *mut c_void) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks `value` and reads the attribute's type from it.
    cu(unsafe { cuMemPoolSetAttribute(pool, attr, value) })
}

fn pool_get_attribute(pool: CUmemoryPool, attr: CUmemPool_attribute, value: *mut c_void) -> Rt<()> {
    state::context()?;
    // SAFETY: as above, writing instead.
    cu(unsafe { cuMemPoolGetAttribute(pool, attr, value) })
}

fn default_pool(pool: *mut CUmemoryPool, device: c_int) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the out-pointer and the device.
    cu(unsafe { cuDeviceGetDefaultMemPool(pool, device) })
}

fn get_pool(pool: *mut CUmemoryPool, device: c_int) -> Rt<()> {
    state::context()?;
    // SAFETY: as above.
    cu(unsafe { cuDeviceGetMemPool(pool, device) })
}

fn set_pool(device: c_int, pool: CUmemoryPool) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it looks the handle up.
    cu(unsafe { cuDeviceSetMemPool(device, pool) })
}

fn malloc_from_pool(p: *mut *mut c_void, size: usize, pool: CUmemoryPool, stream: CUstream, ns: NullStream) -> Rt<()> {
    if p.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    let mut d: CUdeviceptr = 0;
    // SAFETY: our own export with a valid out-pointer.
    cu(unsafe { cuMemAllocFromPoolAsync(&mut d, size, pool, ns.resolve(stream)) })?;
    out(p, d as *mut c_void)
}

fn export_to_shareable(handle: *mut c_void, pool: CUmemoryPool, kind: c_uint, flags: c_uint) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the out-pointer, the pool, the type and the flags.
    cu(unsafe { cuMemPoolExportToShareableHandle(handle, pool, CUmemAllocationHandleType(kind), flags.into()) })
}

fn import_from_shareable(pool: *mut CUmemoryPool, handle: *mut c_void, kind: c_uint, flags: c_uint) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the out-pointer and reads the descriptor `handle` carries.
    cu(unsafe { cuMemPoolImportFromShareableHandle(pool, handle, CUmemAllocationHandleType(kind), flags.into()) })
}

fn export_pointer(data: *mut CUmemPoolPtrExportData, p: *mut c_void) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the out-pointer and looks the allocation up.
    cu(unsafe { cuMemPoolExportPointer(data, p as CUdeviceptr) })
}

fn import_pointer(p: *mut *mut c_void, pool: CUmemoryPool, data: *mut CUmemPoolPtrExportData) -> Rt<()> {
    if p.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    let mut d: CUdeviceptr = 0;
    // SAFETY: our own export with a valid out-pointer; it checks `data`.
    cu(unsafe { cuMemPoolImportPointer(&mut d, pool, data) })?;
    out(p, d as *mut c_void)
}

rt_exports! {
    cudaMemPoolExportToShareableHandle => export_to_shareable(
        handle: *mut c_void, pool: CUmemoryPool, kind: c_uint, flags: c_uint);
    cudaMemPoolImportFromShareableHandle => import_from_shareable(
        pool: *mut CUmemoryPool, handle: *mut c_void, kind: c_uint, flags: c_uint);
    cudaMemPoolExportPointer => export_pointer(data: *mut CUmemPoolPtrExportData, p: *mut c_void);
    cudaMemPoolImportPointer => import_pointer(p: *mut *mut c_void, pool: CUmemoryPool, data: *mut CUmemPoolPtrExportData);
    cudaMemPoolCreate => pool_create(pool: *mut CUmemoryPool, props: *const CUmemPoolProps);
    cudaMemPoolDestroy => pool_destroy(pool: CUmemoryPool);
    cudaMemPoolTrimTo => pool_trim_to(pool: CUmemoryPool, keep: usize);
    cudaMemPoolSetAttribute => pool_set_attribute(pool: CUmemoryPool, attr: CUmemPool_attribute, value: *mut c_void);
    cudaMemPoolGetAttribute => pool_get_attribute(pool: CUmemoryPool, attr: CUmemPool_attribute, value: *mut c_void);
    cudaDeviceGetDefaultMemPool => default_pool(pool: *mut CUmemoryPool, device: c_int);
    cudaDeviceGetMemPool => get_pool(pool: *mut CUmemoryPool, device: c_int);
    cudaDeviceSetMemPool => set_pool(device: c_int, pool: CUmemoryPool);
}

rt_variants! {
    cudaMallocFromPoolAsync / cudaMallocFromPoolAsync_ptsz => malloc_from_pool(
        p: *mut *mut c_void, size: usize, pool: CUmemoryPool, stream: CUstream);
}

fn pool_set_access(pool: CUmemoryPool, map: *const gpupool_shim::cuda::CUmemAccessDesc, count: usize) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; `cudaMemAccessDesc` is `CUmemAccessDesc` (location and flags).
    cu(unsafe { crate::api::exports::cuMemPoolSetAccess(pool, map, count) })
}

fn pool_get_access(
    flags: *mut gpupool_shim::cuda::CUmemAccess_flags,
    pool: CUmemoryPool,
    location: *mut gpupool_shim::cuda::CUmemLocation,
) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; `cudaMemAccessFlags` and `cudaMemLocation` are the driver's.
    cu(unsafe { crate::api::exports::cuMemPoolGetAccess(flags, pool, location) })
}

rt_exports! {
    cudaMemPoolSetAccess => pool_set_access(pool: CUmemoryPool, map: *const gpupool_shim::cuda::CUmemAccessDesc,
        count: usize);
    cudaMemPoolGetAccess => pool_get_access(flags: *mut gpupool_shim::cuda::CUmemAccess_flags, pool: CUmemoryPool,
        location: *mut gpupool_shim::cuda::CUmemLocation);
}
