//! The runtime's capture calls that name a capture's graph and dependencies:
//! `cudaStreamGetCaptureInfo` (CUDA 12's three-argument form, `_v2`, `_v3` and CUDA 13's
//! seven-argument plain form), `cudaStreamBeginCaptureToGraph` and
//! `cudaStreamUpdateCaptureDependencies` (`_v2`, and CUDA 13's plain form with edge data). The
//! runtime's types are the driver's (a `cudaGraphNode_t` is a `CUgraphNode`, `cudaGraphEdgeData`
//! is `CUgraphEdgeData`, the capture statuses, modes and flags share their numbers), so these are
//! the driver's calls (`crate::api::graph`) once the runtime's context is current.

use super::{NullStream, Rt, cu, rt_variants, runtime_major, state};
use crate::api::exports::{
    cuStreamBeginCaptureToGraph, cuStreamGetCaptureInfo_v3, cuStreamUpdateCaptureDependencies_v2,
};
use gpupool_shim::cuda::{CUgraph, CUgraphEdgeData, CUgraphNode, CUstream, CUstreamCaptureMode, CUstreamCaptureStatus};
use gpupool_shim::cudart::{cudaError, cudaStreamCaptureStatus};
use std::os::raw::{c_int, c_uint};

#[allow(clippy::too_many_arguments)]
fn info_v3(
    s: CUstream,
    status: *mut cudaStreamCaptureStatus,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const CUgraphEdgeData,
    n: *mut usize,
    ns: NullStream,
) -> Rt<()> {
    if status.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    let st = status.cast::<CUstreamCaptureStatus>();
    // SAFETY: our own export; the status enums share numbers and size; NULL outputs are skipped.
    cu(unsafe { cuStreamGetCaptureInfo_v3(ns.resolve(s), st, id, graph, deps, edges, n) })
}

fn info_v2(
    s: CUstream,
    status: *mut cudaStreamCaptureStatus,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    n: *mut usize,
    ns: NullStream,
) -> Rt<()> {
    info_v3(s, status, id, graph, deps, std::ptr::null_mut(), n, ns)
}

/// CUDA 12's plain export takes (stream, status, id); CUDA 13's is `_v3`'s seven arguments. The
/// arguments past the id are read only for the runtime the program loaded with them.
#[allow(clippy::too_many_arguments)]
fn info_plain(
    s: CUstream,
    status: *mut cudaStreamCaptureStatus,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const CUgraphEdgeData,
    n: *mut usize,
    ns: NullStream,
) -> Rt<()> {
    if runtime_major() == 13 {
        info_v3(s, status, id, graph, deps, edges, n, ns)
    } else {
        let null = std::ptr::null_mut();
        info_v3(s, status, id, null, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), ns)
    }
}

fn begin_to_graph(
    s: CUstream,
    graph: CUgraph,
    deps: *const CUgraphNode,
    edges: *const CUgraphEdgeData,
    n: usize,
    mode: c_int,
    ns: NullStream,
) -> Rt<()> {
    state::context()?;
    let mode = CUstreamCaptureMode(u32::try_from(mode).map_err(|_| cudaError::cudaErrorInvalidValue)?);
    // SAFETY: our own export; it checks the graph, the nodes and the edge data.
    cu(unsafe { cuStreamBeginCaptureToGraph(ns.resolve(s), graph, deps, edges, n, mode) })
}

fn update_v2(
    s: CUstream,
    deps: *mut CUgraphNode,
    edges: *const CUgraphEdgeData,
    n: usize,
    flags: c_uint,
    ns: NullStream,
) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the nodes and the edge data.
    cu(unsafe { cuStreamUpdateCaptureDependencies_v2(ns.resolve(s), deps, edges, n, flags) })
}

/// CUDA 12's plain export takes (stream, nodes, count, flags); CUDA 13's is `_v2`'s (stream,
/// nodes, edge data, count, flags): the three words after the nodes are read as the runtime the
/// program loaded passes them.
fn update_plain(s: CUstream, deps: *mut CUgraphNode, x: usize, y: usize, z: c_uint, ns: NullStream) -> Rt<()> {
    if runtime_major() == 13 {
        update_v2(s, deps, x as *const CUgraphEdgeData, y, z, ns)
    } else {
        update_v2(s, deps, std::ptr::null(), x, y as c_uint, ns)
    }
}

rt_variants! {
    cudaStreamGetCaptureInfo / cudaStreamGetCaptureInfo_ptsz => info_plain(s: CUstream,
        status: *mut cudaStreamCaptureStatus, id: *mut u64, graph: *mut CUgraph, deps: *mut *const CUgraphNode,
        edges: *mut *const CUgraphEdgeData, n: *mut usize);
    cudaStreamGetCaptureInfo_v2 / cudaStreamGetCaptureInfo_v2_ptsz => info_v2(s: CUstream,
        status: *mut cudaStreamCaptureStatus, id: *mut u64, graph: *mut CUgraph, deps: *mut *const CUgraphNode,
        n: *mut usize);
    cudaStreamGetCaptureInfo_v3 / cudaStreamGetCaptureInfo_v3_ptsz => info_v3(s: CUstream,
        status: *mut cudaStreamCaptureStatus, id: *mut u64, graph: *mut CUgraph, deps: *mut *const CUgraphNode,
        edges: *mut *const CUgraphEdgeData, n: *mut usize);
    cudaStreamBeginCaptureToGraph / cudaStreamBeginCaptureToGraph_ptsz => begin_to_graph(s: CUstream, graph: CUgraph,
        deps: *const CUgraphNode, edges: *const CUgraphEdgeData, n: usize, mode: c_int);
    cudaStreamUpdateCaptureDependencies / cudaStreamUpdateCaptureDependencies_ptsz => update_plain(s: CUstream,
        deps: *mut CUgraphNode, x: usize, y: usize, z: c_uint);
    cudaStreamUpdateCaptureDependencies_v2 / cudaStreamUpdateCaptureDependencies_v2_ptsz => update_v2(s: CUstream,
        deps: *mut CUgraphNode, edges: *const CUgraphEdgeData, n: usize, flags: c_uint);
}
