//! The generic graph node calls (`cuGraphAddNode`, `_v2` with default edges,
//! `cuGraphNodeSetParams`, `cuGraphExecNodeSetParams`), taken apart by
//! [`gpupool_abi::graph_node`] into the simulator's per-type calls ([`super::graph`]).

use super::graph as g;
use crate::error::{CuResult, cuda_entry, fail};
use gpupool_abi::graph_node::{AddFns, ExecSetFns, Refusal, SetFns};
use gpupool_shim::cuda::{CUgraph, CUgraphEdgeData, CUgraphExec, CUgraphNode, CUgraphNodeParams, CUresult};

const ADD: AddFns = AddFns {
    kernel: g::cuGraphAddKernelNode_v2,
    memcpy: g::cuGraphAddMemcpyNode,
    memset: g::cuGraphAddMemsetNode,
    host: g::cuGraphAddHostNode,
    child: g::cuGraphAddChildGraphNode,
    empty: g::cuGraphAddEmptyNode,
    event_record: g::cuGraphAddEventRecordNode,
    event_wait: g::cuGraphAddEventWaitNode,
    mem_alloc: g::cuGraphAddMemAllocNode,
    mem_free: g::cuGraphAddMemFreeNode,
    conditional: g::add_conditional_node,
};

const SET: SetFns = SetFns {
    node_type: g::cuGraphNodeGetType,
    kernel: g::cuGraphKernelNodeSetParams_v2,
    memcpy: g::cuGraphMemcpyNodeSetParams,
    memset: g::cuGraphMemsetNodeSetParams,
    host: g::cuGraphHostNodeSetParams,
    event_record: g::cuGraphEventRecordNodeSetEvent,
    event_wait: g::cuGraphEventWaitNodeSetEvent,
};

const EXEC_SET: ExecSetFns = ExecSetFns {
    node_type: g::cuGraphNodeGetType,
    kernel: g::cuGraphExecKernelNodeSetParams_v2,
    memcpy: g::cuGraphExecMemcpyNodeSetParams,
    memset: g::cuGraphExecMemsetNodeSetParams,
    host: g::cuGraphExecHostNodeSetParams,
    event_record: g::cuGraphExecEventRecordNodeSetEvent,
    event_wait: g::cuGraphExecEventWaitNodeSetEvent,
};

/// A refusal with its reason logged (the per-type call logged its own, if it refused).
fn done(r: Result<(), Refusal>) -> CuResult<()> {
    r.or_else(|(code, why)| if why.is_empty() { Err(code) } else { fail(code, || why) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *mut CUgraphNodeParams,
) -> CUresult {
    // SAFETY: the caller's arguments as cuGraphAddNode documents them; ADD holds our own exports.
    cuda_entry(|| done(unsafe { gpupool_abi::graph_node::add_node(&ADD, node, graph, deps, n, params) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddNode_v2(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    edges: *const CUgraphEdgeData,
    n: usize,
    params: *mut CUgraphNodeParams,
) -> CUresult {
    cuda_entry(|| {
        g::default_edges(edges, n)?;
        // SAFETY: as in cuGraphAddNode.
        done(unsafe { gpupool_abi::graph_node::add_node(&ADD, node, graph, deps, n, params) })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphNodeSetParams(node: CUgraphNode, params: *mut CUgraphNodeParams) -> CUresult {
    // SAFETY: as in cuGraphAddNode.
    cuda_entry(|| done(unsafe { gpupool_abi::graph_node::set_params(&SET, node, params) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecNodeSetParams(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *mut CUgraphNodeParams,
) -> CUresult {
    // SAFETY: as in cuGraphAddNode.
    cuda_entry(|| done(unsafe { gpupool_abi::graph_node::exec_set_params(&EXEC_SET, exec, node, params) }))
}
