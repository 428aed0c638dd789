//! Conditional nodes (`cuGraphConditionalHandleCreate`, `cuGraphAddNode` of a conditional: the
//! daemon's backend makes the handle and the body graphs), a child graph node's own graph
//! (`cuGraphChildGraphNodeGetGraph`), and event nodes' events through the pool (`cuGraphEvent{Record,Wait}NodeGetEvent`/`SetEvent`, and
//! `cuGraphExecEvent{Record,Wait}NodeSetEvent` for one instantiated graph): the daemon answers and
//! changes them on its graph (pool-daemon's `daemon/graph_params.rs`), events named as this
//! process's handles. And the generic node calls (`cuGraphAddNode`, `cuGraphNodeSetParams`,
//! `cuGraphExecNodeSetParams`), taken apart by [`gpupool_abi::graph_node`] into this library's
//! per-type calls.

use super::exports;
use super::graph::id_of;
use crate::client::{self, Kind, make};
use crate::util::{R, log};
use gpupool_abi::graph_node::{AddFns, ExecSetFns, SetFns};
use gpupool_protocol::Request;
use gpupool_protocol::ops::{GraphExecId, GraphId, answer};
use gpupool_shim::cuda::{
    CUDA_CONDITIONAL_NODE_PARAMS, CUevent, CUgraph, CUgraphEdgeData, CUgraphExec, CUgraphNode, CUgraphNodeParams,
    CUresult,
};
use std::collections::BTreeMap;
use std::os::raw::c_uint;
use std::sync::Mutex;

fn node_id(node: CUgraphNode) -> R<(u64, usize)> {
    id_of(node as u64, Kind::GraphNode).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)
}

fn event_id(c: &mut client::Client, e: CUevent) -> R<gpupool_protocol::EventId> {
    c.reg.events.get(&(e as u64)).map(|i| i.id).ok_or_else(|| {
        log(&format!("{e:?} is not an event of this process"));
        CUresult::CUDA_ERROR_INVALID_VALUE
    })
}

fn get_event(node: CUgraphNode, record: bool) -> R<CUevent> {
    let (id, ep) = node_id(node)?;
    let answer::Event { event } =
        client::call(|c| c.conn_at(ep)?.ask(Request::GraphEventNodeGetEvent { node: id, record }))?;
    Ok(make(Kind::Event, ep, event.0)? as CUevent)
}

fn set_event(exec: Option<CUgraphExec>, node: CUgraphNode, e: CUevent, record: bool) -> R<()> {
    let (id, ep) = node_id(node)?;
    let exec = match exec {
        Some(x) => match id_of(x as u64, Kind::GraphExec) {
            Some((x, xep)) if xep == ep => Some(GraphExecId(x)),
            _ => return Err(CUresult::CUDA_ERROR_INVALID_VALUE),
        },
        None => None,
    };
    client::call(|c| {
        let event = event_id(c, e)?;
        let req = match exec {
            Some(exec) => Request::GraphExecEventNodeSetEvent { exec, node: id, event, record },
            None => Request::GraphEventNodeSetEvent { node: id, event, record },
        };
        c.conn_at(ep)?.call_ok(req)
    })
}

pub(super) fn record_node_get_event(node: CUgraphNode) -> R<CUevent> {
    get_event(node, true)
}

pub(super) fn wait_node_get_event(node: CUgraphNode) -> R<CUevent> {
    get_event(node, false)
}

pub(super) fn record_node_set_event(node: CUgraphNode, e: CUevent) -> R<()> {
    set_event(None, node, e, true)
}

pub(super) fn wait_node_set_event(node: CUgraphNode, e: CUevent) -> R<()> {
    set_event(None, node, e, false)
}

pub(super) fn exec_record_node_set_event(exec: CUgraphExec, node: CUgraphNode, e: CUevent) -> R<()> {
    set_event(Some(exec), node, e, true)
}

pub(super) fn exec_wait_node_set_event(exec: CUgraphExec, node: CUgraphNode, e: CUevent) -> R<()> {
    set_event(Some(exec), node, e, false)
}

/// `cuGraphChildGraphNodeGetGraph`: the node's own graph (pool-daemon's `child_node_graph`).
pub(super) fn child_graph(node: CUgraphNode) -> R<CUgraph> {
    let (id, ep) = node_id(node)?;
    let answer::Graph { graph } = client::call(|c| c.conn_at(ep)?.ask(Request::GraphChildNodeGraph { node: id }))?;
    Ok(make(Kind::Graph, ep, graph.0)? as CUgraph)
}

/// `cuGraphConditionalHandleCreate`: the daemon makes it in the tenant's context (`ctx` is the
/// current one's, which the daemon's is).
pub(super) fn cond_handle_create(
    out: *mut u64,
    graph: CUgraph,
    _ctx: gpupool_shim::cuda::CUcontext,
    default: c_uint,
    flags: c_uint,
) -> R<()> {
    if out.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let (gid, ep) = id_of(graph as u64, Kind::Graph).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let req = Request::GraphConditionalHandleCreate { graph: GraphId(gid), default, flags };
    let answer::CondHandle { handle } = client::call(|c| c.conn_at(ep)?.ask(req))?;
    crate::api::export::put(out, handle);
    Ok(())
}

/// The body graphs' handle arrays of conditional nodes (`phGraph_out`: valid while the node
/// lives), by the graph holding the node.
fn bodies() -> std::sync::MutexGuard<'static, BTreeMap<u64, Vec<Box<[u64]>>>> {
    static B: Mutex<BTreeMap<u64, Vec<Box<[u64]>>>> = Mutex::new(BTreeMap::new());
    B.lock().unwrap_or_else(|e| e.into_inner())
}

/// A destroyed graph's conditional nodes' arrays go with it.
pub fn forget_graph(graph: u64) {
    bodies().remove(&graph);
}

/// A conditional node (pool-daemon's `add_conditional_node`): its body graphs' handles go to
/// `phGraph_out`, an array kept here while the graph lives.
unsafe extern "C" fn add_conditional_node(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *mut CUDA_CONDITIONAL_NODE_PARAMS,
) -> CUresult {
    let r = (|| {
        if out.is_null() || params.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-null; the API's contract makes it a CUDA_CONDITIONAL_NODE_PARAMS.
        let p = unsafe { params.read_unaligned() };
        let (gid, ep) = id_of(graph as u64, Kind::Graph).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        let deps = super::graph::node_ids(deps, n, ep)?;
        let req = Request::GraphAddConditionalNode {
            graph: GraphId(gid),
            deps,
            handle: p.handle,
            kind: p.type_.0,
            size: p.size,
        };
        let answer::CondNode { node, bodies: ids } = client::call(|c| c.conn_at(ep)?.ask(req))?;
        let handles: Box<[u64]> = ids.iter().map(|g| make(Kind::Graph, ep, g.0)).collect::<R<_>>()?;
        let array = handles.as_ptr() as *mut CUgraph;
        bodies().entry(graph as u64).or_default().push(handles);
        // SAFETY: non-null and writable, as the API documents (the driver writes phGraph_out).
        unsafe { std::ptr::addr_of_mut!((*params).phGraph_out).write_unaligned(array) };
        crate::api::export::put(out, make(Kind::GraphNode, ep, node)? as CUgraphNode);
        Ok(())
    })();
    r.err().unwrap_or(CUresult::CUDA_SUCCESS)
}

fn done(r: Result<(), gpupool_abi::graph_node::Refusal>) -> R<()> {
    r.map_err(|(code, why)| {
        if !why.is_empty() {
            log(&why);
        }
        code
    })
}

const ADD: AddFns = AddFns {
    kernel: exports::cuGraphAddKernelNode_v2,
    memcpy: exports::cuGraphAddMemcpyNode,
    memset: exports::cuGraphAddMemsetNode,
    host: exports::cuGraphAddHostNode,
    child: exports::cuGraphAddChildGraphNode,
    empty: exports::cuGraphAddEmptyNode,
    event_record: exports::cuGraphAddEventRecordNode,
    event_wait: exports::cuGraphAddEventWaitNode,
    mem_alloc: exports::cuGraphAddMemAllocNode,
    mem_free: exports::cuGraphAddMemFreeNode,
    conditional: add_conditional_node,
};

const SET: SetFns = SetFns {
    node_type: exports::cuGraphNodeGetType,
    kernel: exports::cuGraphKernelNodeSetParams_v2,
    memcpy: exports::cuGraphMemcpyNodeSetParams,
    memset: exports::cuGraphMemsetNodeSetParams,
    host: exports::cuGraphHostNodeSetParams,
    event_record: exports::cuGraphEventRecordNodeSetEvent,
    event_wait: exports::cuGraphEventWaitNodeSetEvent,
};

const EXEC_SET: ExecSetFns = ExecSetFns {
    node_type: exports::cuGraphNodeGetType,
    kernel: exports::cuGraphExecKernelNodeSetParams_v2,
    memcpy: exports::cuGraphExecMemcpyNodeSetParams,
    memset: exports::cuGraphExecMemsetNodeSetParams,
    host: exports::cuGraphExecHostNodeSetParams,
    event_record: exports::cuGraphExecEventRecordNodeSetEvent,
    event_wait: exports::cuGraphExecEventWaitNodeSetEvent,
};

pub(super) fn add_node(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *mut CUgraphNodeParams,
) -> R<()> {
    // SAFETY: the caller's arguments, as cuGraphAddNode documents them; ADD holds this
    // library's own exports.
    done(unsafe { gpupool_abi::graph_node::add_node(&ADD, out, graph, deps, n, params) })
}

/// Edge data other than the default (type 0, ports 0) is not forwarded.
pub(super) fn add_node_v2(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    edges: *const CUgraphEdgeData,
    n: usize,
    params: *mut CUgraphNodeParams,
) -> R<()> {
    if super::graph::has_non_default_edge(edges, n) {
        log("cuGraphAddNode_v2: programmatic graph edges are not forwarded through the pool");
        return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
    }
    add_node(out, graph, deps, n, params)
}

pub(super) fn node_set_params(node: CUgraphNode, params: *mut CUgraphNodeParams) -> R<()> {
    // SAFETY: as in add_node.
    done(unsafe { gpupool_abi::graph_node::set_params(&SET, node, params) })
}

pub(super) fn exec_node_set_params(exec: CUgraphExec, node: CUgraphNode, params: *mut CUgraphNodeParams) -> R<()> {
    // SAFETY: as in add_node.
    done(unsafe { gpupool_abi::graph_node::exec_set_params(&EXEC_SET, exec, node, params) })
}
