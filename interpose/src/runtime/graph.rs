//! Stream capture and graphs in the runtime API. A `cudaGraph_t` is a `CUgraph` and a
//! `cudaGraphExec_t` a `CUgraphExec` (as in NVIDIA's runtime), and the capture modes and
//! statuses share their numbers, so these are the driver's calls (held by the daemon,
//! `crate::api::graph`) once the runtime's context is current.

use super::{NullStream, Rt, cu, rt_exports, rt_variants, state};
use crate::api::exports::{
    cuGraphAddEmptyNode, cuGraphAddHostNode, cuGraphCreate, cuGraphDestroy, cuGraphExecDestroy,
    cuGraphExecHostNodeSetParams, cuGraphExecMemsetNodeSetParams, cuGraphGetNodes, cuGraphGetRootNodes,
    cuGraphHostNodeGetParams, cuGraphHostNodeSetParams, cuGraphInstantiateWithFlags, cuGraphLaunch,
    cuGraphMemsetNodeGetParams, cuGraphMemsetNodeSetParams, cuGraphNodeGetType, cuGraphUpload, cuStreamBeginCapture_v2,
    cuStreamEndCapture,
};
use gpupool_shim::cuda::{
    CUDA_HOST_NODE_PARAMS, CUDA_MEMSET_NODE_PARAMS, CUgraph, CUgraphExec, CUgraphNode, CUgraphNodeType, CUstream,
    CUstreamCaptureMode,
};
use gpupool_shim::cudart::cudaError;
use std::os::raw::{c_int, c_uint};

fn begin_capture(s: CUstream, mode: c_int, ns: NullStream) -> Rt<()> {
    state::context()?;
    let mode = u32::try_from(mode).map_err(|_| cudaError::cudaErrorInvalidValue)?;
    // SAFETY: our own export; cudaStreamCaptureMode values are CUstreamCaptureMode's.
    cu(unsafe { cuStreamBeginCapture_v2(ns.resolve(s), CUstreamCaptureMode(mode)) })
}

fn end_capture(s: CUstream, graph: *mut CUgraph, ns: NullStream) -> Rt<()> {
    if graph.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    // SAFETY: our own export with a valid out-pointer.
    cu(unsafe { cuStreamEndCapture(ns.resolve(s), graph) })
}

fn graph_create(graph: *mut CUgraph, flags: c_uint) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the pointer.
    cu(unsafe { cuGraphCreate(graph, flags) })
}

fn instantiate(exec: *mut CUgraphExec, graph: CUgraph, flags: u64) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the pointer and the handle.
    cu(unsafe { cuGraphInstantiateWithFlags(exec, graph, flags) })
}

fn graph_destroy(graph: CUgraph) -> Rt<()> {
    // SAFETY: our own export; it checks the handle.
    cu(unsafe { cuGraphDestroy(graph) })
}

fn exec_destroy(exec: CUgraphExec) -> Rt<()> {
    // SAFETY: our own export; it checks the handle.
    cu(unsafe { cuGraphExecDestroy(exec) })
}

fn launch(exec: CUgraphExec, s: CUstream, ns: NullStream) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the handles.
    cu(unsafe { cuGraphLaunch(exec, ns.resolve(s)) })
}

fn upload(exec: CUgraphExec, s: CUstream, ns: NullStream) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the handles.
    cu(unsafe { cuGraphUpload(exec, ns.resolve(s)) })
}

// Host nodes: `cudaHostNodeParams` is `CUDA_HOST_NODE_PARAMS` (a function and its argument), and
// a `cudaGraphNode_t` a `CUgraphNode`.

fn add_host_node(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *const CUDA_HOST_NODE_PARAMS,
) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the pointers and handles.
    cu(unsafe { cuGraphAddHostNode(node, graph, deps, n, params) })
}

fn host_node_get_params(node: CUgraphNode, params: *mut CUDA_HOST_NODE_PARAMS) -> Rt<()> {
    // SAFETY: our own export; it checks the pointer and the handle.
    cu(unsafe { cuGraphHostNodeGetParams(node, params) })
}

fn host_node_set_params(node: CUgraphNode, params: *const CUDA_HOST_NODE_PARAMS) -> Rt<()> {
    // SAFETY: our own export; it checks the pointer and the handle.
    cu(unsafe { cuGraphHostNodeSetParams(node, params) })
}

fn exec_host_node_set_params(exec: CUgraphExec, node: CUgraphNode, params: *const CUDA_HOST_NODE_PARAMS) -> Rt<()> {
    // SAFETY: our own export; it checks the pointer and the handles.
    cu(unsafe { cuGraphExecHostNodeSetParams(exec, node, params) })
}

// Memset nodes: `cudaMemsetParams` has the layout of `CUDA_MEMSET_NODE_PARAMS` (its `void *dst`
// the `CUdeviceptr`).

fn memset_node_get_params(node: CUgraphNode, params: *mut CUDA_MEMSET_NODE_PARAMS) -> Rt<()> {
    // SAFETY: our own export; it checks the pointer and the handle.
    cu(unsafe { cuGraphMemsetNodeGetParams(node, params) })
}

fn memset_node_set_params(node: CUgraphNode, params: *const CUDA_MEMSET_NODE_PARAMS) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the pointer and the handle.
    cu(unsafe { cuGraphMemsetNodeSetParams(node, params) })
}

fn exec_memset_node_set_params(exec: CUgraphExec, node: CUgraphNode, params: *const CUDA_MEMSET_NODE_PARAMS) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the pointer and the handles; the graph's own context.
    cu(unsafe { cuGraphExecMemsetNodeSetParams(exec, node, params, std::ptr::null_mut()) })
}

fn add_empty_node(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the pointers and handles.
    cu(unsafe { cuGraphAddEmptyNode(node, graph, deps, n) })
}

fn get_nodes(graph: CUgraph, nodes: *mut CUgraphNode, n: *mut usize) -> Rt<()> {
    // SAFETY: our own export; it checks the pointers and the handle.
    cu(unsafe { cuGraphGetNodes(graph, nodes, n) })
}

fn get_root_nodes(graph: CUgraph, nodes: *mut CUgraphNode, n: *mut usize) -> Rt<()> {
    // SAFETY: our own export; it checks the pointers and the handle.
    cu(unsafe { cuGraphGetRootNodes(graph, nodes, n) })
}

/// `cudaGraphNodeType` has `CUgraphNodeType`'s values.
fn node_get_type(node: CUgraphNode, t: *mut CUgraphNodeType) -> Rt<()> {
    // SAFETY: our own export; it checks the pointer and the handle.
    cu(unsafe { cuGraphNodeGetType(node, t) })
}

rt_exports! {
    cudaGraphGetRootNodes => get_root_nodes(graph: CUgraph, nodes: *mut CUgraphNode, n: *mut usize);
    cudaGraphNodeGetType => node_get_type(node: CUgraphNode, t: *mut CUgraphNodeType);
    cudaGraphAddEmptyNode => add_empty_node(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize);
    cudaGraphGetNodes => get_nodes(graph: CUgraph, nodes: *mut CUgraphNode, n: *mut usize);
    cudaGraphMemsetNodeGetParams => memset_node_get_params(node: CUgraphNode, params: *mut CUDA_MEMSET_NODE_PARAMS);
    cudaGraphMemsetNodeSetParams => memset_node_set_params(node: CUgraphNode, params: *const CUDA_MEMSET_NODE_PARAMS);
    cudaGraphExecMemsetNodeSetParams => exec_memset_node_set_params(
        exec: CUgraphExec, node: CUgraphNode, params: *const CUDA_MEMSET_NODE_PARAMS,
    );
    cudaGraphAddHostNode => add_host_node(
        node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize, params: *const CUDA_HOST_NODE_PARAMS,
    );
    cudaGraphHostNodeGetParams => host_node_get_params(node: CUgraphNode, params: *mut CUDA_HOST_NODE_PARAMS);
    cudaGraphHostNodeSetParams => host_node_set_params(node: CUgraphNode, params: *const CUDA_HOST_NODE_PARAMS);
    cudaGraphExecHostNodeSetParams => exec_host_node_set_params(
        exec: CUgraphExec, node: CUgraphNode, params: *const CUDA_HOST_NODE_PARAMS,
    );
    cudaGraphCreate => graph_create(graph: *mut CUgraph, flags: c_uint);
    // CUDA 12 and 13 export the three-argument form under both names.
    cudaGraphInstantiate => instantiate(exec: *mut CUgraphExec, graph: CUgraph, flags: u64);
    cudaGraphInstantiateWithFlags => instantiate(exec: *mut CUgraphExec, graph: CUgraph, flags: u64);
    cudaGraphDestroy => graph_destroy(graph: CUgraph);
    cudaGraphExecDestroy => exec_destroy(exec: CUgraphExec);
}

rt_variants! {
    cudaStreamBeginCapture / cudaStreamBeginCapture_ptsz => begin_capture(s: CUstream, mode: c_int);
    cudaStreamEndCapture / cudaStreamEndCapture_ptsz => end_capture(s: CUstream, graph: *mut CUgraph);
    cudaGraphLaunch / cudaGraphLaunch_ptsz => launch(exec: CUgraphExec, s: CUstream);
    cudaGraphUpload / cudaGraphUpload_ptsz => upload(exec: CUgraphExec, s: CUstream);
}
