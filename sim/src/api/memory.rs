//! Device memory, page-locked host memory and pointer attributes.

use super::{DefaultStream, out, resolve_stream, stream_variants};
use crate::context::{Context, current, current_healthy};
use crate::driver::{Driver, initialized};
use crate::error::{CuResult, cuda_entry, fail};
use crate::memory::{PITCH_ALIGN, window_owner};
use gpupool_shim::cuda::{
    CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_WRITECOMBINED, CU_MEMHOSTREGISTER_DEVICEMAP,
    CU_MEMHOSTREGISTER_IOMEMORY, CU_MEMHOSTREGISTER_PORTABLE, CU_MEMHOSTREGISTER_READ_ONLY, CUcontext, CUdeviceptr,
    CUmemorytype, CUpointer_attribute as P, CUresult, CUstream,
};
use std::os::raw::{c_int, c_uint, c_void};
use std::sync::Arc;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    cuda_entry(|| {
        let ctx = current()?;
        let d = &ctx.device;
        if free.is_null() || total.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null output pointer".into());
        }
        out(free, (d.total_memory() - d.used_memory()) as usize)?;
        out(total, d.total_memory() as usize)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult {
    cuda_entry(|| {
        let ctx = current_healthy()?;
        super::graph::unsafe_call("cuMemAlloc")?;
        if dptr.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null dptr".into());
        }
        let a = ctx.memory.alloc(bytesize as u64)?;
        out(dptr, a.base)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width_bytes: usize,
    height: usize,
    element_size: c_uint,
) -> CUresult {
    cuda_entry(|| {
        let ctx = current_healthy()?;
        super::graph::unsafe_call("cuMemAllocPitch")?;
        if dptr.is_null() || pitch.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null output pointer".into());
        }
        if !matches!(element_size, 4 | 8 | 16) {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("ElementSizeBytes {element_size} is not 4, 8 or 16")
            });
        }
        if width_bytes == 0 || height == 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "zero width or height".into());
        }
        let p = (width_bytes as u64).next_multiple_of(PITCH_ALIGN);
        let Some(size) = p.checked_mul(height as u64) else {
            return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || "pitched size overflows".into());
        };
        let a = ctx.memory.alloc(size)?;
        out(pitch, p as usize)?;
        out(dptr, a.base)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    cuda_entry(|| {
        let ctx = current()?;
        // NULL is a no-op that succeeds, as on NVIDIA's driver (its runtime's `cudaFree(0)`
        // passes it on).
        if dptr == 0 {
            return Ok(());
        }
        super::graph::unsafe_call("cuMemFree")?;
        if crate::graph_mem::app_free(dptr)? {
            return Ok(());
        }
        // Queued kernels address memory by value, so nothing short of waiting keeps a
        // kernel queued before the free from faulting on (or writing into) memory that
        // is gone or reallocated; NVIDIA's cuMemFree waits for the device as well.
        if ctx.memory.find(dptr).is_some_and(|a| a.base == dptr) {
            ctx.drain();
            // A pool's block goes back to its pool, as its stream-ordered free would.
            if let Some(pool) = crate::mempool::take(dptr) {
                crate::mempool::free(&pool, dptr, 0);
                return Ok(());
            }
        }
        ctx.memory.free(dptr)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(
    base: *mut CUdeviceptr,
    size: *mut usize,
    dptr: CUdeviceptr,
) -> CUresult {
    cuda_entry(|| {
        let ctx = current()?;
        let Some(a) = ctx.memory.find(dptr) else {
            return fail(CUresult::CUDA_ERROR_NOT_FOUND, || format!("{dptr:#x} is in no allocation of this context"));
        };
        // Either output may be NULL: the caller wants only the other.
        if !base.is_null() {
            out(base, a.base)?;
        }
        if !size.is_null() {
            out(size, a.size as usize)?;
        }
        Ok(())
    })
}

const HOST_ALLOC_FLAGS: u32 = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;

fn host_alloc(pp: *mut *mut c_void, bytesize: usize, flags: u32) -> CuResult<()> {
    let ctx = current_healthy()?;
    if pp.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null output pointer".into());
    }
    if flags & !HOST_ALLOC_FLAGS != 0 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown cuMemHostAlloc flags {flags:#x}"));
    }
    let driver = initialized()?;
    let addr = driver.pinned.alloc(bytesize as u64, flags, ctx.handle())?;
    out(pp, addr as *mut c_void)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, bytesize: usize) -> CUresult {
    // With unified addressing, cuMemAllocHost memory is portable and mapped.
    cuda_entry(|| host_alloc(pp, bytesize, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostAlloc(pp: *mut *mut c_void, bytesize: usize, flags: c_uint) -> CUresult {
    cuda_entry(|| {
        super::graph::unsafe_call("cuMemHostAlloc")?;
        host_alloc(pp, bytesize, flags)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    cuda_entry(|| initialized()?.pinned.free(p as u64))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    pdptr: *mut CUdeviceptr,
    p: *mut c_void,
    flags: c_uint,
) -> CUresult {
    cuda_entry(|| {
        current()?;
        if flags != 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "flags must be 0".into());
        }
        match initialized()?.pinned.find(p as u64) {
            // Unified addressing: the device sees page-locked memory at its host address.
            Some(_) => out(pdptr, p as CUdeviceptr),
            None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{p:?} is not page-locked host memory")),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostGetFlags(flags: *mut c_uint, p: *mut c_void) -> CUresult {
    cuda_entry(|| {
        current()?;
        match initialized()?.pinned.find(p as u64) {
            Some(b) => out(flags, b.flags),
            None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{p:?} is not page-locked host memory")),
        }
    })
}

const HOST_REGISTER_FLAGS: u32 = CU_MEMHOSTREGISTER_PORTABLE
    | CU_MEMHOSTREGISTER_DEVICEMAP
    | CU_MEMHOSTREGISTER_IOMEMORY
    | CU_MEMHOSTREGISTER_READ_ONLY;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostRegister_v2(p: *mut c_void, bytesize: usize, flags: c_uint) -> CUresult {
    cuda_entry(|| {
        let ctx = current_healthy()?;
        if flags & !HOST_REGISTER_FLAGS != 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown cuMemHostRegister flags {flags:#x}"));
        }
        if flags & CU_MEMHOSTREGISTER_IOMEMORY != 0 {
            return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || "I/O memory registration is not simulated".into());
        }
        initialized()?.pinned.register(p as u64, bytesize as u64, flags, ctx.handle())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CUresult {
    cuda_entry(|| {
        current()?;
        initialized()?.pinned.unregister(p as u64)
    })
}

/// Stream-ordered allocation from the current pool of the stream's device
/// ([`crate::mempool`]): usable by work queued on the stream after this call.
fn alloc_async(dptr: *mut CUdeviceptr, bytesize: usize, h: CUstream, d: DefaultStream) -> CuResult<()> {
    super::mempool::alloc_from(dptr, bytesize, None, h, d)
}

/// Stream-ordered free: when the stream reaches it, a pool's block returns to its pool,
/// other memory to the device.
fn free_async(ptr: CUdeviceptr, h: CUstream, d: DefaultStream) -> CuResult<()> {
    let (ctx, s) = resolve_stream(initialized()?, h, d)?;
    ctx.check_sticky()?;
    // During capture: a free node of a graph allocation (crate::graph_mem).
    if let Some(r) = s.with_capture(|cap| crate::graph_mem::capture_free(cap, ptr)) {
        return r;
    }
    if crate::graph_mem::app_free(ptr)? {
        return Ok(());
    }
    match ctx.memory.find(ptr) {
        Some(a) if a.base == ptr => {}
        _ => {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("cuMemFreeAsync: {ptr:#x} is not an allocation of this context")
            });
        }
    }
    let job: crate::stream::Job = match crate::mempool::take(ptr) {
        Some(pool) => {
            let sh = s.handle();
            Arc::new(move || {
                crate::mempool::free(&pool, ptr, sh);
                Ok(())
            })
        }
        None => {
            let owner = Arc::clone(&ctx);
            Arc::new(move || owner.memory.free(ptr))
        }
    };
    s.enqueue(&ctx, crate::stream::Work::Control, Vec::new(), job);
    Ok(())
}

stream_variants! {
    cuMemAllocAsync / cuMemAllocAsync_ptsz => alloc_async(dptr: *mut CUdeviceptr, bytesize: usize, h: CUstream);
    cuMemFreeAsync / cuMemFreeAsync_ptsz => free_async(ptr: CUdeviceptr, h: CUstream);
}

/// What a pointer is, for the attribute queries.
enum Pointee {
    Device { ctx: Arc<Context>, base: u64, size: u64 },
    Pinned { ctx_handle: u64, base: u64, size: u64 },
}

fn pointee(driver: &Driver, ptr: u64) -> Option<Pointee> {
    if let Some(owner) = window_owner(ptr) {
        let ctx = driver.contexts.get(owner)?;
        let a = ctx.memory.find(ptr)?;
        return Some(Pointee::Device { base: a.base, size: a.size, ctx });
    }
    let b = driver.pinned.find(ptr)?;
    Some(Pointee::Pinned { ctx_handle: b.ctx_id, base: b.addr(), size: b.len })
}

/// Writes one attribute of `p` into `data`, whose type the attribute determines.
fn write_attribute(driver: &Driver, data: *mut c_void, attr: P, p: &Pointee, ptr: u64) -> CuResult<()> {
    let (ctx_handle, base, size, device, is_device) = match p {
        Pointee::Device { ctx, base, size } => (ctx.handle(), *base, *size, ctx.device.ordinal, true),
        Pointee::Pinned { ctx_handle, base, size } => {
            let dev = driver.contexts.get(*ctx_handle).map(|c| c.device.ordinal).unwrap_or(0);
            (*ctx_handle, *base, *size, dev, false)
        }
    };
    match attr {
        P::CU_POINTER_ATTRIBUTE_CONTEXT => out(data.cast::<CUcontext>(), ctx_handle as CUcontext),
        P::CU_POINTER_ATTRIBUTE_MEMORY_TYPE => {
            let t = if is_device { CUmemorytype::CU_MEMORYTYPE_DEVICE } else { CUmemorytype::CU_MEMORYTYPE_HOST };
            out(data.cast::<c_uint>(), t.0)
        }
        P::CU_POINTER_ATTRIBUTE_DEVICE_POINTER => out(data.cast::<CUdeviceptr>(), ptr),
        P::CU_POINTER_ATTRIBUTE_HOST_POINTER => {
            if is_device {
                fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "device memory has no host pointer".into())
            } else {
                out(data.cast::<*mut c_void>(), ptr as *mut c_void)
            }
        }
        P::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS
        | P::CU_POINTER_ATTRIBUTE_IS_MANAGED
        | P::CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE
        | P::CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE => out(data.cast::<c_uint>(), 0),
        P::CU_POINTER_ATTRIBUTE_MAPPED | P::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE => {
            out(data.cast::<c_int>(), 1)
        }
        P::CU_POINTER_ATTRIBUTE_BUFFER_ID | P::CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID => {
            out(data.cast::<u64>(), base ^ (ctx_handle << 1))
        }
        P::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL => out(data.cast::<c_int>(), device),
        P::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR | P::CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR => {
            out(data.cast::<CUdeviceptr>(), base)
        }
        P::CU_POINTER_ATTRIBUTE_RANGE_SIZE | P::CU_POINTER_ATTRIBUTE_MAPPING_SIZE => {
            out(data.cast::<usize>(), size as usize)
        }
        P::CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES => out(data.cast::<u64>(), 0),
        // CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE
        P::CU_POINTER_ATTRIBUTE_ACCESS_FLAGS => out(data.cast::<c_uint>(), 3),
        P::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE => {
            let pool = crate::mempool::pool_of(base).unwrap_or(0);
            out(data.cast::<*mut c_void>(), pool as *mut c_void)
        }
        other => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("pointer attribute {} is not supported", other.0)),
    }
}

/// The "not a CUDA pointer" value `cuPointerGetAttributes` reports per attribute.
fn write_default(data: *mut c_void, attr: P) -> CuResult<()> {
    match attr {
        P::CU_POINTER_ATTRIBUTE_CONTEXT
        | P::CU_POINTER_ATTRIBUTE_HOST_POINTER
        | P::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE => out(data.cast::<*mut c_void>(), std::ptr::null_mut()),
        P::CU_POINTER_ATTRIBUTE_DEVICE_POINTER
        | P::CU_POINTER_ATTRIBUTE_BUFFER_ID
        | P::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
        | P::CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR
        | P::CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES
        | P::CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID => out(data.cast::<u64>(), 0),
        P::CU_POINTER_ATTRIBUTE_RANGE_SIZE | P::CU_POINTER_ATTRIBUTE_MAPPING_SIZE => out(data.cast::<usize>(), 0),
        P::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL => out(data.cast::<c_int>(), -2),
        _ => out(data.cast::<c_uint>(), 0),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuPointerGetAttribute(data: *mut c_void, attribute: P, ptr: CUdeviceptr) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        if data.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null data".into());
        }
        match pointee(driver, ptr) {
            Some(p) => write_attribute(driver, data, attribute, &p, ptr),
            None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{ptr:#x} is not memory this driver knows")),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuPointerGetAttributes(
    num: c_uint,
    attributes: *mut P,
    data: *mut *mut c_void,
    ptr: CUdeviceptr,
) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        if num == 0 || attributes.is_null() || data.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "no attributes requested".into());
        }
        let p = pointee(driver, ptr);
        for i in 0..num as usize {
            // SAFETY: the caller provides `num` entries in both arrays.
            let (attr, slot) = unsafe { (*attributes.add(i), *data.add(i)) };
            if slot.is_null() {
                continue;
            }
            match &p {
                Some(p) => write_attribute(driver, slot, attr, p, ptr).or_else(|_| write_default(slot, attr))?,
                None => write_default(slot, attr)?,
            }
        }
        Ok(())
    })
}
