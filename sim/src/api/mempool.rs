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

// Pool sharing between processes. A pool's shareable handle is a sealed memfd holding
// [`POOL_MAGIC`], the exporting process and its pool handle; a pointer's export data holds
// [`PTR_MAGIC`], the block's IPC export (process, fd, size, base: crate::memory::ipc moves its
// bytes into shared memory), and the exporter's pool handle. The importer maps the block
// through its imported pool of the same exporter and pool, uncharged (the memory is counted
// where it was allocated), and frees the mapping with cuMemFree/cuMemFreeAsync. As NVIDIA
// documents, the importer frees before the exporter does; the simulator does not enforce it.

const POOL_MAGIC: &[u8; 8] = b"gpupoolM";
const PTR_MAGIC: &[u8; 8] = b"gpupoolQ";
const POSIX_FD: CUmemAllocationHandleType = CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

fn le(b: &[u8]) -> u64 {
    b.iter().rev().fold(0u64, |v, &x| (v << 8) | x as u64)
}

/// A sealed memfd holding `bytes`.
fn sealed_fd(bytes: &[u8]) -> CuResult<c_int> {
    // SAFETY: a NUL-terminated name; the kernel returns a new descriptor or -1.
    let raw = unsafe { libc::memfd_create(c"gpupool-sim-pool".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if raw < 0 {
        return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || "memfd_create failed".into());
    }
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
    // SAFETY: our own fresh descriptor; `bytes` is readable for its length.
    let ok = unsafe {
        libc::pwrite(raw, bytes.as_ptr().cast(), bytes.len(), 0) == bytes.len() as isize
            && libc::fcntl(raw, libc::F_ADD_SEALS, seals) == 0
    };
    if !ok {
        // SAFETY: closing our own descriptor once.
        unsafe { libc::close(raw) };
        return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || "cannot write the pool's descriptor".into());
    }
    Ok(raw)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolExportToShareableHandle(
    handle_out: *mut c_void,
    pool: CUmemoryPool,
    handle_type: CUmemAllocationHandleType,
    flags: c_ulonglong,
) -> CUresult {
    cuda_entry(|| {
        initialized()?;
        let p = mempool::lookup(pool as u64)?;
        if handle_out.is_null() || handle_type != POSIX_FD || flags != 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                "a non-null handle_out, handle type POSIX_FILE_DESCRIPTOR and flags 0".into()
            });
        }
        if !p.exportable || p.imported.is_some() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("pool {:#x} is not IPC capable (created without handleTypes, or imported)", pool as u64)
            });
        }
        let mut bytes = POOL_MAGIC.to_vec();
        bytes.extend_from_slice(&std::process::id().to_le_bytes());
        bytes.extend_from_slice(&(pool as u64).to_le_bytes());
        out(handle_out.cast::<c_int>(), sealed_fd(&bytes)?)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolImportFromShareableHandle(
    pool_out: *mut CUmemoryPool,
    handle: *mut c_void,
    handle_type: CUmemAllocationHandleType,
    flags: c_ulonglong,
) -> CUresult {
    cuda_entry(|| {
        initialized()?;
        let ctx = crate::context::current()?;
        if pool_out.is_null() || handle_type != POSIX_FD || flags != 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                "a non-null pool_out, handle type POSIX_FILE_DESCRIPTOR and flags 0".into()
            });
        }
        // For POSIX file descriptors the descriptor travels in the pointer's value.
        let fd = handle as usize as c_int;
        let mut b = [0u8; 24];
        // SAFETY: pread into our own buffer of its length; a bad descriptor fails with -1.
        let n = unsafe { libc::pread(fd, b.as_mut_ptr().cast(), b.len(), 0) };
        if n != 20 || &b[..8] != POOL_MAGIC {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("descriptor {fd} is no pool of the simulator"));
        }
        let (pid, h) = (le(&b[8..12]) as u32, le(&b[12..20]));
        if pid == std::process::id() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "a process imports pools of other processes".into());
        }
        out(pool_out, mempool::import(ctx.device.ordinal, pid, h) as CUmemoryPool)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolExportPointer(data: *mut CUmemPoolPtrExportData, ptr: CUdeviceptr) -> CUresult {
    cuda_entry(|| {
        initialized()?;
        let ctx = crate::context::current()?;
        let Some(handle) = mempool::pool_of(ptr) else {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{ptr:#x} is not a pool allocation"));
        };
        if !mempool::lookup(handle)?.exportable {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("{ptr:#x} is from pool {handle:#x}, which is not IPC capable")
            });
        }
        let Some(a) = ctx.memory.find(ptr).filter(|a| a.base == ptr) else {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("{ptr:#x} is not the base of an allocation of the current context")
            });
        };
        // Work queued on the block finishes before its bytes move.
        ctx.drain();
        let fd = crate::memory::ipc::export(&a)?;
        let mut d = CUmemPoolPtrExportData::default();
        d.reserved[..8].copy_from_slice(PTR_MAGIC);
        d.reserved[8..12].copy_from_slice(&std::process::id().to_le_bytes());
        d.reserved[12..16].copy_from_slice(&fd.to_le_bytes());
        d.reserved[16..24].copy_from_slice(&a.size.to_le_bytes());
        d.reserved[24..32].copy_from_slice(&a.base.to_le_bytes());
        d.reserved[32..40].copy_from_slice(&handle.to_le_bytes());
        out(data, d)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolImportPointer(
    ptr_out: *mut CUdeviceptr,
    pool: CUmemoryPool,
    data: *mut CUmemPoolPtrExportData,
) -> CUresult {
    cuda_entry(|| {
        initialized()?;
        let ctx = crate::context::current()?;
        let p = mempool::lookup(pool as u64)?;
        let d = read(data.cast_const(), "export data")?;
        if ptr_out.is_null() || &d.reserved[..8] != PTR_MAGIC {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                "null ptr_out, or not export data of the simulator".into()
            });
        }
        let (pid, fd, size, h) = (
            le(&d.reserved[8..12]) as u32,
            le(&d.reserved[12..16]) as i32,
            le(&d.reserved[16..24]),
            le(&d.reserved[32..40]),
        );
        if p.imported != Some((pid, h)) {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!(
                    "the pointer is of pool {h:#x} of process {pid}, not of the pool imported as {:#x}",
                    pool as u64
                )
            });
        }
        let a = ctx.memory.import(pid, fd, size).map_err(|_| CUresult::CUDA_ERROR_INVALID_VALUE)?;
        out(ptr_out, a.base)
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
    // During capture: an allocation node, graph memory (crate::graph_mem).
    if let Some(r) = s.with_capture(|cap| crate::graph_mem::capture_alloc(&ctx, cap, bytesize)) {
        return out(dptr, r?);
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

/// Pools of one device: `gpupool_abi::pool_access` says what is accepted.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolSetAccess(
    pool: CUmemoryPool,
    map: *const gpupool_shim::cuda::CUmemAccessDesc,
    count: usize,
) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        let p = mempool::lookup(pool as u64)?;
        if map.is_null() && count > 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null access descriptors".into());
        }
        let descs = if count == 0 {
            &[][..]
        } else {
            // SAFETY: `count` descriptors at `map`, as the API documents.
            unsafe { std::slice::from_raw_parts(map, count) }
        };
        gpupool_abi::pool_access::set(p.device, driver.devices.len() as i32, descs)
            .or_else(|(code, why)| fail(code, || why.into()))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemPoolGetAccess(
    flags: *mut gpupool_shim::cuda::CUmemAccess_flags,
    pool: CUmemoryPool,
    location: *mut gpupool_shim::cuda::CUmemLocation,
) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        let p = mempool::lookup(pool as u64)?;
        let loc = read(location.cast_const(), "location")?;
        match gpupool_abi::pool_access::get(p.device, driver.devices.len() as i32, &loc) {
            Ok(f) => out(flags, f),
            Err((code, why)) => fail(code, || why.into()),
        }
    })
}
