//! Stream-ordered memory pools ([`crate::mempool`]) and managed memory, which the
//! simulated devices do not offer (`CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY` is 0).

use super::{DefaultStream, out, read, resolve_stream, stream_variants};
use crate::driver::initialized;
use crate::error::{CuResult, cuda_entry, fail};
use crate::mempool;
use gpupool_shim::cuda::{
    CUdevice, CUdeviceptr, CUmemAllocationHandleType, CUmemPool_attribute, CUmemPoolProps, CUmemPoolPtrExportData,
    CUmemoryPool, CUresult, CUstream,
};
use std::os::raw::{c_int, c_uint, c_ulonglong, c_void};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolCreate(pool: *mut CUmemoryPool, props: *const CUmemPoolProps) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        let p = read(props, "pool properties")?;
        if pool.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null pool".into());
        }
        let h = mempool::create(driver, &p)?;
        out(pool, h as CUmemoryPool)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolDestroy(pool: CUmemoryPool) -> CUresult {
    cuda_entry(|| {
        initialized()?;
        mempool::destroy(pool as u64)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolTrimTo(pool: CUmemoryPool, min_bytes_to_keep: usize) -> CUresult {
    cuda_entry(|| {
        initialized()?;
        mempool::lookup(pool as u64)?.trim_to(min_bytes_to_keep as u64);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolSetAttribute(
    pool: CUmemoryPool,
    attr: CUmemPool_attribute,
    value: *mut c_void,
) -> CUresult {
    cuda_entry(|| {
        initialized()?;
        let p = mempool::lookup(pool as u64)?;
        let v = if mempool::is_u64_attribute(attr) {
            read(value.cast::<u64>(), "attribute value")?
        } else {
            read(value.cast::<c_int>(), "attribute value")? as u64
        };
        p.set_attribute(attr, v)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolGetAttribute(
    pool: CUmemoryPool,
    attr: CUmemPool_attribute,
    value: *mut c_void,
) -> CUresult {
    cuda_entry(|| {
        initialized()?;
        let v = mempool::lookup(pool as u64)?.get_attribute(attr)?;
        if mempool::is_u64_attribute(attr) {
            out(value.cast::<u64>(), v)
        } else {
            out(value.cast::<c_int>(), v as c_int)
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(pool: *mut CUmemoryPool, dev: CUdevice) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        let h = mempool::default_pool(driver, dev)?;
        out(pool, h as CUmemoryPool)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetMemPool(pool: *mut CUmemoryPool, dev: CUdevice) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        let h = mempool::current_pool(driver, dev)?;
        out(pool, h as CUmemoryPool)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceSetMemPool(dev: CUdevice, pool: CUmemoryPool) -> CUresult {
    cuda_entry(|| mempool::set_current_pool(initialized()?, dev, pool as u64))
}

// Pool sharing between processes. The simulator creates no exportable pool (`cuMemPoolCreate`
// refuses `handleTypes` with CUDA_ERROR_NOT_SUPPORTED), so every pool and pool allocation
// it holds is not IPC capable and no descriptor names one of its pools: these answer what
// NVIDIA documents for such arguments, CUDA_ERROR_INVALID_VALUE, saying why. Through the
// pool, exported pools are served by libgpupool.so and the daemon over plain allocations,
// never by the backend (interpose/src/api/mempool.rs).

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolExportToShareableHandle(
    _handle_out: *mut c_void,
    pool: CUmemoryPool,
    _handle_type: CUmemAllocationHandleType,
    _flags: c_ulonglong,
) -> CUresult {
    cuda_entry(|| {
        initialized()?;
        mempool::lookup(pool as u64)?;
        fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("pool {:#x} is not IPC capable (created without handleTypes)", pool as u64)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolImportFromShareableHandle(
    _pool_out: *mut CUmemoryPool,
    handle: *mut c_void,
    _handle_type: CUmemAllocationHandleType,
    _flags: c_ulonglong,
) -> CUresult {
    cuda_entry(|| {
        initialized()?;
        fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("handle {:#x} names no exported pool (the simulator exports none)", handle as usize)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolExportPointer(_data: *mut CUmemPoolPtrExportData, ptr: CUdeviceptr) -> CUresult {
    cuda_entry(|| {
        initialized()?;
        match mempool::pool_of(ptr) {
            Some(pool) => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("{ptr:#x} is from pool {pool:#x}, which is not IPC capable")
            }),
            None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{ptr:#x} is not a pool allocation")),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolImportPointer(
    _ptr_out: *mut CUdeviceptr,
    pool: CUmemoryPool,
    _data: *mut CUmemPoolPtrExportData,
) -> CUresult {
    cuda_entry(|| {
        initialized()?;
        mempool::lookup(pool as u64)?;
        fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("pool {:#x} was not imported from another process", pool as u64)
        })
    })
}

/// Stream-ordered allocation from `pool` (`None`: the current pool of the stream's device).
pub(super) fn alloc_from(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    pool: Option<u64>,
    h: CUstream,
    d: DefaultStream,
) -> CuResult<()> {
    let driver = initialized()?;
    let (ctx, s) = resolve_stream(driver, h, d)?;
    ctx.check_sticky()?;
    s.refuse_if_capturing("stream-ordered allocation (allocation nodes)")?;
    if dptr.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null dptr".into());
    }
    let device = ctx.device.ordinal;
    let handle = match pool {
        Some(p) => p,
        None => mempool::current_pool(driver, device)?,
    };
    let p = mempool::lookup(handle)?;
    if p.device != device {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("pool {handle:#x} is on device {}, the stream on device {device}", p.device)
        });
    }
    let base = p.alloc(&ctx, &s, bytesize as u64)?;
    out(dptr, base)
}

fn alloc_from_pool(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    pool: CUmemoryPool,
    h: CUstream,
    d: DefaultStream,
) -> CuResult<()> {
    alloc_from(dptr, bytesize, Some(pool as u64), h, d)
}

stream_variants! {
    cuMemAllocFromPoolAsync / cuMemAllocFromPoolAsync_ptsz =>
        alloc_from_pool(dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, h: CUstream);
}

/// The simulated devices report `CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY` 0: their memory is
/// a window the host cannot touch, so there is no memory both sides could migrate.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocManaged(dptr: *mut CUdeviceptr, bytesize: usize, flags: c_uint) -> CUresult {
    cuda_entry(|| {
        crate::context::current()?;
        if dptr.is_null() || bytesize == 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null dptr or 0 bytes".into());
        }
        if flags != 1 && flags != 2 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("flags {flags:#x}: GLOBAL or HOST"));
        }
        fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || {
            "cuMemAllocManaged: the simulated device does not support managed memory \
             (CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY is 0)"
                .into()
        })
    })
}
