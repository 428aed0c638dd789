//! The runtime's graph topology queries and `cudaGraphExecUpdate`: `cudaGraphGetEdges`,
//! `cudaGraphNodeGetDependencies`, `cudaGraphNodeGetDependentNodes` (CUDA 12's plain forms
//! without edge data, its `_v2` and CUDA 13's plain names with it, picked by the runtime the
//! program loaded as `super::graph_nodes`'s dependency edits are) are the driver's `_v2` queries
//! (`crate::api::graph_topology`); `cudaGraphExecUpdate` (CUDA 12's and 13's form, a
//! `cudaGraphExecUpdateResultInfo`, laid out as the driver's `CUgraphExecUpdateResultInfo` with
//! the same result values) is `cuGraphExecUpdate_v2`, `cudaGraphDebugDotPrint` the driver's (the
//! daemon's backend writes the DOT text, this library the file).

use super::{Rt, cu, rt_exports, runtime_major};
use crate::api::exports::{
    cuGraphDebugDotPrint, cuGraphExecGetFlags, cuGraphExecUpdate_v2, cuGraphGetEdges_v2, cuGraphNodeGetDependencies_v2,
    cuGraphNodeGetDependentNodes_v2,
};
use gpupool_shim::cuda::{CUgraph, CUgraphEdgeData, CUgraphExec, CUgraphExecUpdateResultInfo, CUgraphNode};

/// CUDA 12's plain query takes (…, list, count); CUDA 13's (…, list, edge data, count): the words
/// after the list read as the loaded runtime passes them.
fn query_args(x: usize, y: usize) -> (*mut CUgraphEdgeData, *mut usize) {
    if runtime_major() == 13 {
        (x as *mut CUgraphEdgeData, y as *mut usize)
    } else {
        (std::ptr::null_mut(), x as *mut usize)
    }
}

fn get_edges_v2(
    graph: CUgraph,
    from: *mut CUgraphNode,
    to: *mut CUgraphNode,
    data: *mut CUgraphEdgeData,
    n: *mut usize,
) -> Rt<()> {
    // SAFETY: our own export; it checks the pointers and the handle.
    cu(unsafe { cuGraphGetEdges_v2(graph, from, to, data, n) })
}

fn get_edges_plain(graph: CUgraph, from: *mut CUgraphNode, to: *mut CUgraphNode, x: usize, y: usize) -> Rt<()> {
    let (data, n) = query_args(x, y);
    get_edges_v2(graph, from, to, data, n)
}

fn dependencies_v2(node: CUgraphNode, list: *mut CUgraphNode, data: *mut CUgraphEdgeData, n: *mut usize) -> Rt<()> {
    // SAFETY: our own export; it checks the pointers and the handle.
    cu(unsafe { cuGraphNodeGetDependencies_v2(node, list, data, n) })
}

fn dependencies_plain(node: CUgraphNode, list: *mut CUgraphNode, x: usize, y: usize) -> Rt<()> {
    let (data, n) = query_args(x, y);
    dependencies_v2(node, list, data, n)
}

fn dependents_v2(node: CUgraphNode, list: *mut CUgraphNode, data: *mut CUgraphEdgeData, n: *mut usize) -> Rt<()> {
    // SAFETY: our own export; it checks the pointers and the handle.
    cu(unsafe { cuGraphNodeGetDependentNodes_v2(node, list, data, n) })
}

fn dependents_plain(node: CUgraphNode, list: *mut CUgraphNode, x: usize, y: usize) -> Rt<()> {
    let (data, n) = query_args(x, y);
    dependents_v2(node, list, data, n)
}

fn exec_update(exec: CUgraphExec, graph: CUgraph, info: *mut CUgraphExecUpdateResultInfo) -> Rt<()> {
    // SAFETY: our own export; it checks the handles and writes the result info as the driver does.
    cu(unsafe { cuGraphExecUpdate_v2(exec, graph, info) })
}

fn exec_get_flags(exec: CUgraphExec, flags: *mut u64) -> Rt<()> {
    // SAFETY: our own export; it checks the handle and the pointer.
    cu(unsafe { cuGraphExecGetFlags(exec, flags) })
}

fn debug_dot_print(graph: CUgraph, path: *const std::os::raw::c_char, flags: std::os::raw::c_uint) -> Rt<()> {
    // SAFETY: our own export; it checks the path and the handle.
    cu(unsafe { cuGraphDebugDotPrint(graph, path, flags) })
}

rt_exports! {
    cudaGraphDebugDotPrint => debug_dot_print(graph: CUgraph, path: *const std::os::raw::c_char,
        flags: std::os::raw::c_uint);
    cudaGraphGetEdges => get_edges_plain(graph: CUgraph, from: *mut CUgraphNode, to: *mut CUgraphNode, x: usize,
        y: usize);
    cudaGraphGetEdges_v2 => get_edges_v2(graph: CUgraph, from: *mut CUgraphNode, to: *mut CUgraphNode,
        data: *mut CUgraphEdgeData, n: *mut usize);
    cudaGraphNodeGetDependencies => dependencies_plain(node: CUgraphNode, list: *mut CUgraphNode, x: usize, y: usize);
    cudaGraphNodeGetDependencies_v2 => dependencies_v2(node: CUgraphNode, list: *mut CUgraphNode,
        data: *mut CUgraphEdgeData, n: *mut usize);
    cudaGraphNodeGetDependentNodes => dependents_plain(node: CUgraphNode, list: *mut CUgraphNode, x: usize, y: usize);
    cudaGraphNodeGetDependentNodes_v2 => dependents_v2(node: CUgraphNode, list: *mut CUgraphNode,
        data: *mut CUgraphEdgeData, n: *mut usize);
    cudaGraphExecGetFlags => exec_get_flags(exec: CUgraphExec, flags: *mut u64);
    cudaGraphExecUpdate => exec_update(exec: CUgraphExec, graph: CUgraph, info: *mut CUgraphExecUpdateResultInfo);
}
