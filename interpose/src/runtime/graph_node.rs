//! The runtime's generic node calls (`cudaGraphAddNode`: CUDA 12's four arguments and `_v2`, CUDA
//! 13's with edge data, by the runtime the program loaded; `cudaGraphNodeSetParams`,
//! `cudaGraphExecNodeSetParams`) and event nodes' events (`cudaGraphEvent{Record,Wait}NodeGet`/
//! `SetEvent`, `cudaGraphExecEvent{Record,Wait}NodeSetEvent`), a child graph node's graph
//! (`cudaGraphChildGraphNodeGetGraph`), conditional handles (`cudaGraphConditionalHandleCreate`;
//! a conditional node's body graphs are written back to its `phGraph_out`). A `cudaGraphNodeParams` has the
//! driver's `CUgraphNodeParams` size and layout; three members differ and are translated (a
//! kernel's host stub resolved to its function, a copy's `cudaMemcpy3DParms` made a
//! `CUDA_MEMCPY3D`, a memset's pointer and no context), the rest (host, child graph, event and
//! memory nodes) are the driver's as they are. Then these are the driver's calls
//! ([`crate::api::graph_node`]) once the runtime's context is current.

use super::{Rt, cu, graph_nodes::kernel_params, rt_exports, runtime_major, state};
use crate::api::exports::{
    cuGraphAddNode_v2, cuGraphChildGraphNodeGetGraph, cuGraphConditionalHandleCreate, cuGraphEventRecordNodeGetEvent,
    cuGraphEventRecordNodeSetEvent, cuGraphEventWaitNodeGetEvent, cuGraphEventWaitNodeSetEvent,
    cuGraphExecEventRecordNodeSetEvent, cuGraphExecEventWaitNodeSetEvent, cuGraphExecNodeSetParams,
    cuGraphNodeSetParams,
};
use gpupool_shim::cuda::{
    CUDA_MEMCPY_NODE_PARAMS, CUDA_MEMSET_NODE_PARAMS_v2, CUevent, CUgraph, CUgraphEdgeData, CUgraphExec, CUgraphNode,
    CUgraphNodeParams, CUgraphNodeType,
};
use gpupool_shim::cudart::{cudaError, cudaGraphNodeParams, cudaGraphNodeType as RT, cudaKernelNodeParams};
use std::os::raw::c_uint;

const _: () = assert!(std::mem::size_of::<cudaGraphNodeParams>() == std::mem::size_of::<CUgraphNodeParams>());

/// The driver's parameters for the runtime's `p`.
fn driver_params(p: *const cudaGraphNodeParams) -> Rt<CUgraphNodeParams> {
    if p.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    // SAFETY: non-null; a cudaGraphNodeParams, which has CUgraphNodeParams's size and layout
    // (checked above, and each against NVIDIA's headers by `cargo xtask abi-check`).
    let mut d = unsafe { p.cast::<CUgraphNodeParams>().read_unaligned() };
    // SAFETY: as above.
    let r = unsafe { p.read_unaligned() };
    match r.type_ {
        RT::cudaGraphNodeTypeKernel => {
            // SAFETY: the member the node type names.
            let k = unsafe { r.__bindgen_anon_1.kernel };
            let stub = cudaKernelNodeParams {
                func: k.func,
                gridDim: k.gridDim,
                blockDim: k.blockDim,
                sharedMemBytes: k.sharedMemBytes,
                kernelParams: k.kernelParams,
                extra: k.extra,
            };
            // The runtime's function is its own (the driver's kern and ctx: none).
            d.__bindgen_anon_1.kernel = gpupool_abi::graph_node::kernel_v3(&kernel_params(&stub)?);
        }
        RT::cudaGraphNodeTypeMemcpy => {
            // SAFETY: the member the node type names.
            let c = unsafe { r.__bindgen_anon_1.memcpy };
            let copyParams = super::memory::params_3d(&c.copyParams)?;
            d.__bindgen_anon_1.memcpy =
                CUDA_MEMCPY_NODE_PARAMS { flags: 0, reserved: 0, copyCtx: std::ptr::null_mut(), copyParams };
        }
        RT::cudaGraphNodeTypeMemset => {
            // SAFETY: the member the node type names.
            let m = unsafe { r.__bindgen_anon_1.memset };
            d.__bindgen_anon_1.memset = CUDA_MEMSET_NODE_PARAMS_v2 {
                dst: m.dst as u64,
                pitch: m.pitch,
                value: m.value,
                elementSize: m.elementSize,
                width: m.width,
                height: m.height,
                ctx: std::ptr::null_mut(),
            };
        }
        // cudaConditionalNodeParams has no context after phGraph_out: the current one.
        RT::cudaGraphNodeTypeConditional => {
            d.__bindgen_anon_1.conditional.ctx = std::ptr::null_mut();
        }
        _ => {}
    }
    Ok(d)
}

fn add(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    edges: *const CUgraphEdgeData,
    n: usize,
    p: *mut cudaGraphNodeParams,
) -> Rt<()> {
    let mut d = driver_params(p)?;
    // SAFETY: our own export; it checks the pointers and handles.
    cu(unsafe { cuGraphAddNode_v2(node, graph, deps, edges, n, &mut d) })?;
    // SAFETY (both): non-null (driver_params checked); what the driver wrote goes back where the
    // runtime's layout has it, the driver's: an allocation node's address, a conditional node's
    // body graphs.
    let out = p.cast::<CUgraphNodeParams>();
    if d.type_ == CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC {
        unsafe {
            std::ptr::addr_of_mut!((*out).__bindgen_anon_1.alloc.dptr).write_unaligned(d.__bindgen_anon_1.alloc.dptr);
        }
    }
    if d.type_ == CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL {
        unsafe {
            std::ptr::addr_of_mut!((*out).__bindgen_anon_1.conditional.phGraph_out)
                .write_unaligned(d.__bindgen_anon_1.conditional.phGraph_out);
        }
    }
    Ok(())
}

/// CUDA 12: `(node, graph, deps, n, params)`; CUDA 13: `(node, graph, deps, edges, n, params)`.
fn add_node(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, x: usize, y: usize, z: usize) -> Rt<()> {
    if runtime_major() == 13 {
        add(node, graph, deps, x as *const CUgraphEdgeData, y, z as *mut cudaGraphNodeParams)
    } else {
        add(node, graph, deps, std::ptr::null(), x, y as *mut cudaGraphNodeParams)
    }
}

fn node_set_params(node: CUgraphNode, p: *mut cudaGraphNodeParams) -> Rt<()> {
    let mut d = driver_params(p)?;
    // SAFETY: our own export; it checks the node.
    cu(unsafe { cuGraphNodeSetParams(node, &mut d) })
}

fn exec_node_set_params(exec: CUgraphExec, node: CUgraphNode, p: *mut cudaGraphNodeParams) -> Rt<()> {
    let mut d = driver_params(p)?;
    // SAFETY: our own export; it checks the handles.
    cu(unsafe { cuGraphExecNodeSetParams(exec, node, &mut d) })
}

/// The runtime's form has no context: the current one.
fn cond_handle_create(out: *mut u64, graph: CUgraph, default: c_uint, flags: c_uint) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the graph and the out-pointer.
    cu(unsafe { cuGraphConditionalHandleCreate(out, graph, std::ptr::null_mut(), default, flags) })
}

fn child_graph(node: CUgraphNode, out: *mut CUgraph) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the node and the out-pointer.
    cu(unsafe { cuGraphChildGraphNodeGetGraph(node, out) })
}

fn record_node_get_event(node: CUgraphNode, out: *mut CUevent) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the node and the out-pointer.
    cu(unsafe { cuGraphEventRecordNodeGetEvent(node, out) })
}

fn wait_node_get_event(node: CUgraphNode, out: *mut CUevent) -> Rt<()> {
    state::context()?;
    // SAFETY: as above.
    cu(unsafe { cuGraphEventWaitNodeGetEvent(node, out) })
}

fn record_node_set_event(node: CUgraphNode, e: CUevent) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the handles.
    cu(unsafe { cuGraphEventRecordNodeSetEvent(node, e) })
}

fn wait_node_set_event(node: CUgraphNode, e: CUevent) -> Rt<()> {
    state::context()?;
    // SAFETY: as above.
    cu(unsafe { cuGraphEventWaitNodeSetEvent(node, e) })
}

fn exec_record_node_set_event(exec: CUgraphExec, node: CUgraphNode, e: CUevent) -> Rt<()> {
    state::context()?;
    // SAFETY: as above.
    cu(unsafe { cuGraphExecEventRecordNodeSetEvent(exec, node, e) })
}

fn exec_wait_node_set_event(exec: CUgraphExec, node: CUgraphNode, e: CUevent) -> Rt<()> {
    state::context()?;
    // SAFETY: as above.
    cu(unsafe { cuGraphExecEventWaitNodeSetEvent(exec, node, e) })
}

rt_exports! {
    cudaGraphAddNode => add_node(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, x: usize, y: usize,
        z: usize);
    cudaGraphAddNode_v2 => add(node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode,
        edges: *const CUgraphEdgeData, n: usize, p: *mut cudaGraphNodeParams);
    cudaGraphNodeSetParams => node_set_params(node: CUgraphNode, p: *mut cudaGraphNodeParams);
    cudaGraphExecNodeSetParams => exec_node_set_params(exec: CUgraphExec, node: CUgraphNode, p: *mut cudaGraphNodeParams);
    cudaGraphChildGraphNodeGetGraph => child_graph(node: CUgraphNode, out: *mut CUgraph);
    cudaGraphConditionalHandleCreate => cond_handle_create(out: *mut u64, graph: CUgraph, default: c_uint, flags: c_uint);
    cudaGraphEventRecordNodeGetEvent => record_node_get_event(node: CUgraphNode, out: *mut CUevent);
    cudaGraphEventWaitNodeGetEvent => wait_node_get_event(node: CUgraphNode, out: *mut CUevent);
    cudaGraphEventRecordNodeSetEvent => record_node_set_event(node: CUgraphNode, e: CUevent);
    cudaGraphEventWaitNodeSetEvent => wait_node_set_event(node: CUgraphNode, e: CUevent);
    cudaGraphExecEventRecordNodeSetEvent => exec_record_node_set_event(exec: CUgraphExec, node: CUgraphNode, e: CUevent);
    cudaGraphExecEventWaitNodeSetEvent => exec_wait_node_set_event(exec: CUgraphExec, node: CUgraphNode, e: CUevent);
}
