//! Graph editing through the pool: `cuGraphDestroyNode`, `cuGraphRemoveDependencies` (`_v2` with
//! default edge data, the only edges the pool makes) and `cuGraphNodeFindInClone`, done by the
//! daemon on the session's graphs (pool-daemon's `daemon/graph_edit.rs`). Node handles are
//! `api/graph.rs`'s; a destroyed node's kept memset/memcpy parameters are forgotten here.

use super::graph::{id_of, node_ids};
use crate::client::{self, Kind, make};
use crate::util::{R, log};
use gpupool_protocol::Request;
use gpupool_protocol::ops::{GraphId, answer};
use gpupool_shim::cuda::{CUgraph, CUgraphEdgeData, CUgraphNode, CUresult};

fn node_id(node: CUgraphNode) -> R<(u64, usize)> {
    id_of(node as u64, Kind::GraphNode).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)
}

pub(super) fn destroy_node(node: CUgraphNode) -> R<()> {
    let (id, ep) = node_id(node)?;
    client::call(|c| c.conn_at(ep)?.call_ok(Request::GraphDestroyNode { node: id }))?;
    super::graph_params::forget_node(node);
    super::graph_kernel::forget_node(node);
    Ok(())
}

pub(super) fn remove_dependencies(graph: CUgraph, from: *const CUgraphNode, to: *const CUgraphNode, n: usize) -> R<()> {
    let (id, ep) = id_of(graph as u64, Kind::Graph).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let (from, to) = (node_ids(from, n, ep)?, node_ids(to, n, ep)?);
    client::call(|c| c.conn_at(ep)?.call_ok(Request::GraphRemoveDependencies { graph: GraphId(id), from, to }))
}

/// Every edge through the pool has the default data (type 0, ports 0): other edge data names an
/// edge that does not exist, CUDA_ERROR_INVALID_VALUE as NVIDIA documents.
pub(super) fn remove_dependencies_v2(
    graph: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    edges: *const CUgraphEdgeData,
    n: usize,
) -> R<()> {
    if super::graph::has_non_default_edge(edges, n) {
        log("cuGraphRemoveDependencies_v2: no edge with that edge data exists (the pool makes default edges only)");
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    remove_dependencies(graph, from, to, n)
}

pub(super) fn find_in_clone(original: CUgraphNode, clone: CUgraph) -> R<CUgraphNode> {
    let (id, ep) = node_id(original)?;
    let (cid, cep) = id_of(clone as u64, Kind::Graph).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    if cep != ep {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let answer::GraphNode { node } =
        client::call(|c| c.conn_at(ep)?.ask(Request::GraphNodeFindInClone { node: id, clone: GraphId(cid) }))?;
    Ok(make(Kind::GraphNode, ep, node)? as CUgraphNode)
}
