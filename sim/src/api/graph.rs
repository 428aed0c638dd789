//! Stream capture and graph launch.

use super::{DefaultStream, out, resolve_stream, stream_variants};
use crate::context::current_healthy;
use crate::driver::initialized;
use crate::error::{CuResult, cuda_entry, fail};
use crate::graph::{Graph, GraphExec};
use crate::stream::{Capture, StreamKind};
use gpupool_shim::cuda::{CUgraph, CUgraphExec, CUresult, CUstream, CUstreamCaptureMode};
use std::os::raw::c_uint;
use std::sync::Arc;

fn begin_capture(h: CUstream, mode: CUstreamCaptureMode, d: DefaultStream) -> CuResult<()> {
    let (ctx, s) = resolve_stream(initialized()?, h, d)?;
    ctx.check_sticky()?;
    if mode.0 > CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED.0 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown capture mode {}", mode.0));
    }
    if s.kind == StreamKind::Legacy {
        return fail(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, || {
            "the legacy default stream cannot be captured".into()
        });
    }
    let mut cap = s.capture.lock().unwrap_or_else(|e| e.into_inner());
    if !matches!(*cap, Capture::None) {
        return fail(CUresult::CUDA_ERROR_ILLEGAL_STATE, || "the stream is already capturing".into());
    }
    *cap = Capture::Active(Vec::new());
    Ok(())
}

fn end_capture(h: CUstream, pgraph: *mut CUgraph, d: DefaultStream) -> CuResult<()> {
    let driver = initialized()?;
    let (ctx, s) = resolve_stream(driver, h, d)?;
    if pgraph.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null graph output pointer".into());
    }
    let taken = std::mem::take(&mut *s.capture.lock().unwrap_or_else(|e| e.into_inner()));
    match taken {
        Capture::None => fail(CUresult::CUDA_ERROR_ILLEGAL_STATE, || "the stream is not capturing".into()),
        Capture::Invalidated => {
            out(pgraph, std::ptr::null_mut())?;
            fail(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, || "the capture was invalidated".into())
        }
        Capture::Active(nodes) => {
            let h = driver.graphs.insert(Arc::new(Graph { ctx_handle: ctx.handle(), nodes }));
            out(pgraph, h as CUgraph)
        }
    }
}

fn graph_launch(exec: CUgraphExec, h: CUstream, d: DefaultStream) -> CuResult<()> {
    let driver = initialized()?;
    let Some(g) = driver.graph_execs.get(exec as u64) else {
        return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{exec:?} is not an instantiated graph"));
    };
    let (ctx, s) = resolve_stream(driver, h, d)?;
    ctx.check_sticky()?;
    if g.ctx_handle != ctx.handle() {
        return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || "the graph belongs to another context".into());
    }
    for (work, job) in &g.nodes {
        s.enqueue(&ctx, *work, Vec::new(), job.clone());
    }
    Ok(())
}

/// Uploading prepares nothing here (work is not staged on a CPU device); the driver's checks stay.
fn graph_upload(exec: CUgraphExec, h: CUstream, d: DefaultStream) -> CuResult<()> {
    let driver = initialized()?;
    let Some(g) = driver.graph_execs.get(exec as u64) else {
        return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{exec:?} is not an instantiated graph"));
    };
    let (ctx, _) = resolve_stream(driver, h, d)?;
    ctx.check_sticky()?;
    if g.ctx_handle != ctx.handle() {
        return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || "the graph belongs to another context".into());
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphCreate(pgraph: *mut CUgraph, flags: c_uint) -> CUresult {
    cuda_entry(|| {
        let ctx = current_healthy()?;
        if flags != 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "cuGraphCreate flags must be 0".into());
        }
        let h = initialized()?.graphs.insert(Arc::new(Graph { ctx_handle: ctx.handle(), nodes: Vec::new() }));
        out(pgraph, h as CUgraph)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphDestroy(graph: CUgraph) -> CUresult {
    cuda_entry(|| match initialized()?.graphs.remove(graph as u64) {
        Some(_) => Ok(()),
        None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{graph:?} is not a graph")),
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(pexec: *mut CUgraphExec, graph: CUgraph, flags: u64) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        if pexec.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null output pointer".into());
        }
        let Some(g) = driver.graphs.get(graph as u64) else {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{graph:?} is not a graph"));
        };
        // Flags (auto-free on launch, upload, device launch, priority) change nothing here.
        let _ = flags;
        let h = driver.graph_execs.insert(Arc::new(GraphExec { ctx_handle: g.ctx_handle, nodes: g.nodes.clone() }));
        out(pexec, h as CUgraphExec)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: CUgraphExec) -> CUresult {
    cuda_entry(|| match initialized()?.graph_execs.remove(exec as u64) {
        Some(_) => Ok(()),
        None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{exec:?} is not an instantiated graph")),
    })
}

stream_variants! {
    cuStreamBeginCapture_v2 / cuStreamBeginCapture_v2_ptsz => begin_capture(h: CUstream, mode: CUstreamCaptureMode);
    cuStreamEndCapture / cuStreamEndCapture_ptsz => end_capture(h: CUstream, pgraph: *mut CUgraph);
    cuGraphLaunch / cuGraphLaunch_ptsz => graph_launch(exec: CUgraphExec, h: CUstream);
    cuGraphUpload / cuGraphUpload_ptsz => graph_upload(exec: CUgraphExec, h: CUstream);
}
