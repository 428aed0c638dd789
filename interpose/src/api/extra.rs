//! Stream-ordered allocation (served in order: the allocation is made at once, a free
//! waits for its stream), host-memory registration (client-local), and the graph and
//! capture entry points, which the pool refuses cleanly with CUDA_ERROR_NOT_SUPPORTED.

use super::DefaultStream;
use super::stream::{resolve, synchronize};
use crate::client;
use crate::util::{R, entry};
use gpupool_shim::cuda::{CUdeviceptr, CUgraph, CUgraphExec, CUresult, CUstream, CUstreamCaptureMode};
use std::os::raw::{c_uint, c_void};

fn alloc_async(dptr: *mut CUdeviceptr, bytesize: usize, h: CUstream, d: DefaultStream) -> R<()> {
    client::call(|c| resolve(c, h, d).map(|_| ()))?;
    // SAFETY: the caller's arguments, as cuMemAlloc takes them.
    match unsafe { super::memory::cuMemAlloc_v2(dptr, bytesize) } {
        CUresult::CUDA_SUCCESS => Ok(()),
        e => Err(e),
    }
}

fn free_async(ptr: CUdeviceptr, h: CUstream, d: DefaultStream) -> R<()> {
    synchronize(h, d)?;
    // SAFETY: the caller's pointer, as cuMemFree takes it.
    match unsafe { super::memory::cuMemFree_v2(ptr) } {
        CUresult::CUDA_SUCCESS => Ok(()),
        e => Err(e),
    }
}

super::stream_variants! {
    cuMemAllocAsync / cuMemAllocAsync_ptsz => alloc_async(dptr: *mut CUdeviceptr, bytesize: usize, h: CUstream);
    cuMemFreeAsync / cuMemFreeAsync_ptsz => free_async(ptr: CUdeviceptr, h: CUstream);
}

/// Registered host memory is tracked like page-locked memory (copies use it in place).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostRegister_v2(p: *mut c_void, bytesize: usize, flags: c_uint) -> CUresult {
    entry(|| {
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
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CUresult {
    entry(|| {
        client::with(|c| {
            c.current()?;
            c.reg.registered.remove(&(p as usize)).map(|_| ()).ok_or(CUresult::CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
        })
    })
}

fn refuse() -> R<()> {
    crate::util::log("graphs and stream capture are not supported through the pool");
    Err(CUresult::CUDA_ERROR_NOT_SUPPORTED)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphCreate(_pgraph: *mut CUgraph, _flags: c_uint) -> CUresult {
    entry(refuse)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphDestroy(_graph: CUgraph) -> CUresult {
    entry(refuse)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    _pexec: *mut CUgraphExec,
    _graph: CUgraph,
    _flags: u64,
) -> CUresult {
    entry(refuse)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecDestroy(_exec: CUgraphExec) -> CUresult {
    entry(refuse)
}

fn begin_capture(_h: CUstream, _mode: CUstreamCaptureMode, _d: DefaultStream) -> R<()> {
    refuse()
}
fn end_capture(_h: CUstream, _pgraph: *mut CUgraph, _d: DefaultStream) -> R<()> {
    refuse()
}
fn graph_launch(_exec: CUgraphExec, _h: CUstream, _d: DefaultStream) -> R<()> {
    refuse()
}

super::stream_variants! {
    cuStreamBeginCapture_v2 / cuStreamBeginCapture_v2_ptsz => begin_capture(h: CUstream, mode: CUstreamCaptureMode);
    cuStreamEndCapture / cuStreamEndCapture_ptsz => end_capture(h: CUstream, pgraph: *mut CUgraph);
    cuGraphLaunch / cuGraphLaunch_ptsz => graph_launch(exec: CUgraphExec, h: CUstream);
}
