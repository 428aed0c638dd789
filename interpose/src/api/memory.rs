//! Device allocations (forwarded; the daemon counts them against the quota), memory info
//! (the tenant's view), page-locked host memory (shared-memory regions the daemon maps), and
//! pointer attributes for what this client knows.

use crate::client::{self, Client};
use crate::util::{R, out};
use gpupool_protocol::ops::answer;
use gpupool_protocol::transport::shm::create_host_region;
use gpupool_protocol::{DevicePtr, Request};
use gpupool_shim::cuda::{
    CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_WRITECOMBINED, CUcontext, CUdeviceptr,
    CUmemorytype, CUpointer_attribute as P, CUresult,
};
use std::os::raw::{c_int, c_uint, c_void};

/// (free, total) as the tenant sees them: its quota is the total.
pub(super) fn get_info() -> R<(usize, usize)> {
    client::call(|c| {
        let (_, ctx, _) = c.current()?;
        let answer::MemInfo { free, total } = c.live()?.ask(Request::MemGetInfo { ctx })?;
        Ok((free as usize, total as usize))
    })
}

pub(super) fn record(c: &mut Client, ctx: u64, ptr: DevicePtr, size: u64) {
    c.reg.allocs.insert((client::endpoint_of(ctx), ptr.0), (size, ctx));
}

pub(super) fn alloc(bytesize: usize) -> R<CUdeviceptr> {
    if bytesize == 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    client::call(|c| {
        let (h, ctx, _) = c.current()?;
        super::graph::unsafe_call(c, "cuMemAlloc")?;
        let answer::MemPtr { ptr } = c.live()?.ask(Request::MemAlloc { ctx, bytes: bytesize as u64 })?;
        record(c, h, ptr, bytesize as u64);
        Ok(ptr.0)
    })
}

/// (pointer, pitch)
pub(super) fn alloc_pitch(width_bytes: usize, height: usize, element_size: c_uint) -> R<(CUdeviceptr, usize)> {
    if width_bytes == 0 || height == 0 || !matches!(element_size, 4 | 8 | 16) {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    client::call(|c| {
        let (h, ctx, _) = c.current()?;
        super::graph::unsafe_call(c, "cuMemAllocPitch")?;
        let req = Request::MemAllocPitch { ctx, width_bytes: width_bytes as u64, height: height as u64, element_size };
        let answer::MemPitch { ptr, pitch } = c.live()?.ask(req)?;
        record(c, h, ptr, pitch * height as u64);
        Ok((ptr.0, pitch as usize))
    })
}

pub(super) fn free(dptr: CUdeviceptr) -> R<()> {
    if dptr != 0 && super::mempool::free_imported(dptr)? {
        return Ok(());
    }
    client::call(|c| {
        let (cur, ..) = c.current()?;
        // NULL is a no-op that succeeds, as on NVIDIA's driver (its runtime's `cudaFree(0)`,
        // the idiom for creating the context, passes it on).
        if dptr == 0 {
            return Ok(());
        }
        super::graph::unsafe_call(c, "cuMemFree")?;
        if super::graph_mem::free(c, dptr)? {
            return Ok(());
        }
        // Only the base of an allocation this client made in the current context.
        let key = (client::endpoint_of(cur), dptr);
        if c.reg.allocs.get(&key).is_none_or(|&(_, ctx)| ctx != cur) {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        c.live()?.call_ok(Request::MemFree { ptr: DevicePtr(dptr) })?;
        c.reg.allocs.remove(&key);
        Ok(())
    })
}

/// (base, size) of the allocation holding `dptr`; either may be asked for alone.
pub(super) fn address_range(dptr: CUdeviceptr) -> R<(CUdeviceptr, usize)> {
    let (base, size, _) = client::with(|c| {
        c.current()?;
        c.reg.alloc_of(dptr).ok_or(CUresult::CUDA_ERROR_NOT_FOUND)
    })?;
    Ok((base, size as usize))
}

// ---- page-locked host memory: shared-memory regions the daemon maps ----

const HOST_ALLOC_FLAGS: u32 = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;

pub(super) fn host_alloc(bytesize: usize, flags: c_uint) -> R<*mut c_void> {
    if flags & !HOST_ALLOC_FLAGS != 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    client::call(|c| {
        c.current()?;
        super::graph::unsafe_call(c, "cuMemHostAlloc")?;
        let (fd, map) = create_host_region(bytesize).map_err(|_| CUresult::CUDA_ERROR_OUT_OF_MEMORY)?;
        // Over the network the daemon cannot map it; copies send its bytes instead.
        let conn = c.live()?;
        let id = if conn.shares_memory() { Some(conn.map_region(&fd, map.len() as u64)?) } else { None };
        let p = map.as_ptr();
        c.reg.host.insert(p as usize, (bytesize.max(1), flags));
        c.reg.regions.insert(p as usize, (id, map));
        Ok(p.cast::<c_void>())
    })
}

pub(super) fn alloc_host(bytesize: usize) -> R<*mut c_void> {
    host_alloc(bytesize, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP)
}

pub(super) fn free_host(p: *mut c_void) -> R<()> {
    client::call(|c| {
        let (id, map) = c.reg.regions.remove(&(p as usize)).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        c.reg.host.remove(&(p as usize));
        // The daemon waits for queued copies that use it, then lets go of it.
        let r = match id {
            Some(id) => c.live().and_then(|conn| conn.call_ok(Request::HostRegionUnmap { id })),
            None => Ok(()),
        };
        drop(map);
        r
    })
}

/// Unified addressing: page-locked memory has its host address. Through the pool it is
/// usable in copies; kernels cannot reach client memory.
pub(super) fn host_device_pointer(p: *mut c_void, flags: c_uint) -> R<CUdeviceptr> {
    if flags != 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    client::with(|c| {
        c.current()?;
        c.reg.host_of(p as usize).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        Ok(p as CUdeviceptr)
    })
}

pub(super) fn host_flags(p: *mut c_void) -> R<c_uint> {
    client::with(|c| {
        c.current()?;
        let (_, _, f) = c.reg.host_of(p as usize).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        Ok(f)
    })
}

// ---- pointer attributes ----

/// (context handle, base, size, device ordinal, is device memory)
type Pointee = (u64, u64, u64, i32, bool);

fn pointee(c: &Client, ptr: u64) -> Option<Pointee> {
    if let Some((base, size, ctx)) = c.reg.alloc_of(ptr) {
        let dev = c.reg.ctxs.get(&ctx).map(|i| i.device as i32).unwrap_or(0);
        return Some((ctx, base, size, dev, true));
    }
    let (base, size, _) = c.reg.host_of(ptr as usize)?;
    Some((0, base as u64, size as u64, 0, false))
}

fn write_attribute(data: *mut c_void, attr: P, p: Pointee, ptr: u64) -> R<()> {
    let (ctx, base, size, device, is_device) = p;
    match attr {
        P::CU_POINTER_ATTRIBUTE_CONTEXT => out(data.cast::<CUcontext>(), ctx as CUcontext),
        P::CU_POINTER_ATTRIBUTE_MEMORY_TYPE => {
            let t = if is_device { CUmemorytype::CU_MEMORYTYPE_DEVICE } else { CUmemorytype::CU_MEMORYTYPE_HOST };
            out(data.cast::<c_uint>(), t.0)
        }
        P::CU_POINTER_ATTRIBUTE_DEVICE_POINTER => out(data.cast::<CUdeviceptr>(), ptr),
        P::CU_POINTER_ATTRIBUTE_HOST_POINTER => {
            if is_device {
                return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
            }
            out(data.cast::<*mut c_void>(), ptr as *mut c_void)
        }
        P::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS
        | P::CU_POINTER_ATTRIBUTE_IS_MANAGED
        | P::CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE => out(data.cast::<c_uint>(), 0),
        P::CU_POINTER_ATTRIBUTE_MAPPED => out(data.cast::<c_uint>(), 1),
        P::CU_POINTER_ATTRIBUTE_BUFFER_ID | P::CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID => out(data.cast::<u64>(), base),
        P::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL => out(data.cast::<c_int>(), device),
        P::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR | P::CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR => {
            out(data.cast::<u64>(), base)
        }
        P::CU_POINTER_ATTRIBUTE_RANGE_SIZE | P::CU_POINTER_ATTRIBUTE_MAPPING_SIZE => {
            out(data.cast::<usize>(), size as usize)
        }
        P::CU_POINTER_ATTRIBUTE_ACCESS_FLAGS => out(data.cast::<c_uint>(), 3),
        P::CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE if is_device => {
            out(data.cast::<*mut c_void>(), super::mempool::pool_of(base).unwrap_or(0) as *mut c_void)
        }
        _ => Err(CUresult::CUDA_ERROR_INVALID_VALUE),
    }
}

/// `data`'s type depends on the attribute, so its NULL check is [`write_attribute`]'s.
pub(super) fn pointer_attribute(data: *mut c_void, attribute: P, ptr: CUdeviceptr) -> R<()> {
    if data.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let p = client::with(|c| {
        if !c.initialized {
            return Err(CUresult::CUDA_ERROR_NOT_INITIALIZED);
        }
        pointee(c, ptr).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)
    })?;
    write_attribute(data, attribute, p, ptr)
}

pub(super) fn pointer_attributes(num: c_uint, attributes: *mut P, data: *mut *mut c_void, ptr: CUdeviceptr) -> R<()> {
    if num == 0 || attributes.is_null() || data.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let p = client::with(|c| {
        if !c.initialized {
            return Err(CUresult::CUDA_ERROR_NOT_INITIALIZED);
        }
        Ok(pointee(c, ptr))
    })?;
    for i in 0..num as usize {
        // SAFETY: the caller provides `num` entries in both arrays.
        let (attr, slot) = unsafe { (*attributes.add(i), *data.add(i)) };
        if slot.is_null() {
            continue;
        }
        let unknown: Pointee = (0, 0, 0, -2, false);
        match p {
            Some(p) => write_attribute(slot, attr, p, ptr).or_else(|_| write_attribute(slot, attr, unknown, 0))?,
            None if attr == P::CU_POINTER_ATTRIBUTE_MEMORY_TYPE => out(slot.cast::<c_uint>(), 0)?,
            None => write_attribute(slot, attr, unknown, 0).or_else(|_| out(slot.cast::<u64>(), 0))?,
        }
    }
    Ok(())
}
