//! Graph topology queries through the pool: `cuGraphNodeGetType`, `cuGraphGetNodes`,
//! `cuGraphGetRootNodes`, `cuGraphNodeGetDependencies`, `cuGraphNodeGetDependentNodes` (and the
//! `_v2` forms with edge data, CUDA 12.3's: the pool's edges are all default ones). The
//! daemon answers a graph's nodes (as this session's ids), their types and its edges
//! (pool-daemon's `daemon/graph_capture.rs`); each query is answered from that here.

use super::graph::id_of;
use crate::client::{self, Kind, make};
use crate::util::R;
use gpupool_protocol::Request;
use gpupool_protocol::ops::{GraphId, answer};
use gpupool_shim::cuda::{CUgraph, CUgraphEdgeData, CUgraphNode, CUgraphNodeType, CUresult};

/// The topology of `graph`, or of the graph holding `node`, with the endpoint that holds it.
fn topology(graph: Option<CUgraph>, node: Option<CUgraphNode>) -> R<(answer::Topology, usize)> {
    let (g, n, ep) = match (graph, node) {
        (Some(g), _) => {
            let (id, ep) = id_of(g as u64, Kind::Graph).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
            (id, 0, ep)
        }
        (None, Some(n)) => {
            let (id, ep) = id_of(n as u64, Kind::GraphNode).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
            (0, id, ep)
        }
        (None, None) => return Err(CUresult::CUDA_ERROR_INVALID_VALUE),
    };
    let t = client::call(|c| c.conn_at(ep)?.ask(Request::GraphTopology { graph: GraphId(g), node: n }))?;
    Ok((t, ep))
}

/// Writes a node list as the driver does: with `list` NULL only the count; else up to `*count`
/// entries (NULL past the end) and the number written.
fn list_out(list: *mut CUgraphNode, count: *mut usize, ids: Vec<u64>, ep: usize) -> R<()> {
    if count.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    if list.is_null() {
        crate::api::export::put(count, ids.len());
        return Ok(());
    }
    // SAFETY: non-null; the caller's count.
    let room = unsafe { count.read_unaligned() };
    for i in 0..room {
        let h = match ids.get(i) {
            Some(&id) => make(Kind::GraphNode, ep, id)? as CUgraphNode,
            None => std::ptr::null_mut(),
        };
        // SAFETY: the caller passes `*count` writable entries, as the API documents.
        unsafe { list.add(i).write_unaligned(h) };
    }
    crate::api::export::put(count, room.min(ids.len()));
    Ok(())
}

fn node_id(node: CUgraphNode) -> R<u64> {
    id_of(node as u64, Kind::GraphNode).map(|n| n.0).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)
}

pub(super) fn node_type(node: CUgraphNode) -> R<CUgraphNodeType> {
    let id = node_id(node)?;
    let (t, _) = topology(None, Some(node))?;
    let i = t.nodes.iter().position(|&n| n == id).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    Ok(CUgraphNodeType(t.types[i]))
}

/// `cuGraphGetEdges`, written as the driver writes it (see [`list_out`]); `from` and `to` both or
/// neither.
pub(super) fn edges(graph: CUgraph, from: *mut CUgraphNode, to: *mut CUgraphNode, count: *mut usize) -> R<()> {
    if from.is_null() != to.is_null() || count.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let (t, ep) = topology(Some(graph), None)?;
    // SAFETY: non-null; the caller's count (read before list_out rewrites it).
    let room = unsafe { count.read_unaligned() };
    list_out(from, count, t.from, ep)?;
    if !to.is_null() {
        crate::api::export::put(count, room);
        list_out(to, count, t.to, ep)?;
    }
    Ok(())
}

pub(super) fn nodes(graph: CUgraph, list: *mut CUgraphNode, count: *mut usize) -> R<()> {
    let (t, ep) = topology(Some(graph), None)?;
    list_out(list, count, t.nodes, ep)
}

pub(super) fn root_nodes(graph: CUgraph, list: *mut CUgraphNode, count: *mut usize) -> R<()> {
    let (t, ep) = topology(Some(graph), None)?;
    let roots = t.nodes.iter().copied().filter(|n| !t.to.contains(n)).collect();
    list_out(list, count, roots, ep)
}

pub(super) fn dependencies(node: CUgraphNode, list: *mut CUgraphNode, count: *mut usize) -> R<()> {
    let id = node_id(node)?;
    let (t, ep) = topology(None, Some(node))?;
    let deps = t.from.iter().zip(&t.to).filter(|(_, to)| **to == id).map(|(f, _)| *f).collect();
    list_out(list, count, deps, ep)
}

pub(super) fn dependents(node: CUgraphNode, list: *mut CUgraphNode, count: *mut usize) -> R<()> {
    let id = node_id(node)?;
    let (t, ep) = topology(None, Some(node))?;
    let deps = t.from.iter().zip(&t.to).filter(|(f, _)| **f == id).map(|(_, to)| *to).collect();
    list_out(list, count, deps, ep)
}

/// The edge data of the `_v2` queries: every edge the pool holds is a default one (the daemon
/// refuses any other at `cuGraphAddDependencies_v2`), so each of the `room` entries the caller
/// passes is zeroed, as the driver writes a default edge; edge data without the node list to go
/// with it is `CUDA_ERROR_INVALID_VALUE`, as documented.
fn edge_data_out(data: *mut CUgraphEdgeData, list: *mut CUgraphNode, room: usize) -> R<()> {
    if data.is_null() {
        return Ok(());
    }
    if list.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    for i in 0..room {
        // SAFETY: the caller passes `*count` writable entries, as the API documents.
        unsafe { data.add(i).write_unaligned(CUgraphEdgeData::default()) };
    }
    Ok(())
}

/// The caller's room (`*count`), read before the list is written; NULL is INVALID_VALUE.
fn room(count: *mut usize) -> R<usize> {
    if count.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the caller's count.
    Ok(unsafe { count.read_unaligned() })
}

pub(super) fn edges_v2(
    graph: CUgraph,
    from: *mut CUgraphNode,
    to: *mut CUgraphNode,
    data: *mut CUgraphEdgeData,
    count: *mut usize,
) -> R<()> {
    let n = room(count)?;
    if !data.is_null() && from.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    edges(graph, from, to, count)?;
    edge_data_out(data, from, n)
}

pub(super) fn dependencies_v2(
    node: CUgraphNode,
    list: *mut CUgraphNode,
    data: *mut CUgraphEdgeData,
    count: *mut usize,
) -> R<()> {
    let n = room(count)?;
    if !data.is_null() && list.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    dependencies(node, list, count)?;
    edge_data_out(data, list, n)
}

pub(super) fn dependents_v2(
    node: CUgraphNode,
    list: *mut CUgraphNode,
    data: *mut CUgraphEdgeData,
    count: *mut usize,
) -> R<()> {
    let n = room(count)?;
    if !data.is_null() && list.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    dependents(node, list, count)?;
    edge_data_out(data, list, n)
}
