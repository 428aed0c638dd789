//! Stream-ordered allocation (served in order: the allocation is made at once, a free
//! waits for its stream) and host-memory registration (client-local). Graphs and stream
//! capture are in [`super::graph`].

use super::DefaultStream;
use super::stream::synchronize;
use crate::client;
use crate::util::R;
use gpupool_shim::cuda::{CUdeviceptr, CUresult, CUstream};
use std::os::raw::{c_uint, c_void};

/// From the current pool of the current context's device ([`super::mempool`]).
pub(super) fn alloc_async(bytesize: usize, h: CUstream, d: DefaultStream) -> R<CUdeviceptr> {
    super::mempool::alloc_from(bytesize, None, h, d)
}

/// A pool's block goes back to its pool, other memory to the daemon.
pub(super) fn free_async(ptr: CUdeviceptr, h: CUstream, d: DefaultStream) -> R<()> {
    // On a capturing stream: a free node (super::graph_mem).
    let captured = client::call(|c| {
        let stream = super::stream::resolve(c, h, d)?;
        if !super::graph::capturing(stream, client::current_endpoint()) {
            return Ok(false);
        }
        super::graph_mem::captured_free(c, stream, ptr).map(|()| true)
    })?;
    if captured {
        return Ok(());
    }
    synchronize(h, d)?;
    if super::mempool::free(ptr, h)? {
        return Ok(());
    }
    super::memory::free(ptr)
}

/// Registered host memory is tracked like page-locked memory (copies use it in place).
pub(super) fn host_register(p: *mut c_void, bytesize: usize, flags: c_uint) -> R<()> {
    if p.is_null() || bytesize == 0 || flags & !0xf != 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    client::with(|c| {
        c.current()?;
        if c.reg.host_of(p as usize).is_some() || c.reg.registered.contains_key(&(p as usize)) {
            return Err(CUresult::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
        }
        c.reg.registered.insert(p as usize, bytesize);
        Ok(())
    })
}

pub(super) fn host_unregister(p: *mut c_void) -> R<()> {
    client::with(|c| {
        c.current()?;
        c.reg.registered.remove(&(p as usize)).map(|_| ()).ok_or(CUresult::CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
    })
}
