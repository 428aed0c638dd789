//! Graph editing through the pool: `cuGraphDestroyNode`, `cuGraphRemoveDependencies` and
//! `cuGraphNodeFindInClone` on a session's graphs ([`super::graph`] holds them). Every node named
//! must be this session's (and, for removed edges, of the graph named), so nothing of another
//! session reaches the backend. As NVIDIA documents, a graph with memory nodes cannot have nodes
//! destroyed or edges removed; the daemon holds those nodes itself ([`super::graph_mem`]), so it
//! refuses that here. Owns no state of its own: the node table is `graph.rs`'s.

use super::dispatch::{Fail, Result};
use super::session::Session;
use crate::call;
use gpupool_protocol::ops::{GraphId, answer};
use gpupool_shim::cuda::CUgraphNode;

impl Session {
    fn editable(&self, graph: GraphId) -> Result<()> {
        if self.graphs.mem.has_nodes(graph) {
            return Err(Fail::invalid_value("a graph with memory nodes cannot have nodes or edges removed"));
        }
        Ok(())
    }

    /// The node goes, and with it every edge to or from it (graphs instantiated before keep it).
    pub(super) fn destroy_node(&mut self, node: u64) -> Result<()> {
        let Some(&(graph, n)) = self.graphs.nodes.get(&node) else {
            return Err(Fail::invalid_value(format!("node {node} is not a node this session holds")));
        };
        self.editable(graph)?;
        let (_, d) = self.graph(graph)?;
        self.enter(d)?;
        call!(self.shared.cuda, cuGraphDestroyNode(n.0))?;
        self.graphs.nodes.remove(&node);
        self.forget_host_node(node);
        self.forget_embedded(|_, n| n == node);
        Ok(())
    }

    /// The edges `from[i] -> to[i]`, nodes of `graph`; the backend removes all or none.
    pub(super) fn remove_dependencies(&mut self, graph: GraphId, from: &[u64], to: &[u64]) -> Result<()> {
        if from.len() != to.len() {
            return Err(Fail::invalid_value("as many dependents as dependencies"));
        }
        let (g, d) = self.graph(graph)?;
        self.editable(graph)?;
        let (from, to) = (self.deps(graph, from)?, self.deps(graph, to)?);
        self.enter(d)?;
        call!(self.shared.cuda, cuGraphRemoveDependencies(g.0, from.as_ptr(), to.as_ptr(), from.len()))?;
        Ok(())
    }

    /// The node of `clone` that copies `node`; the backend answers INVALID_VALUE when `clone` is
    /// not a clone of the node's graph or the node has no copy there.
    pub(super) fn find_in_clone(&mut self, node: u64, clone: GraphId) -> Result<answer::GraphNode> {
        let Some(&(_, n)) = self.graphs.nodes.get(&node) else {
            return Err(Fail::invalid_value(format!("node {node} is not a node this session holds")));
        };
        let (c, d) = self.graph(clone)?;
        self.enter(d)?;
        let mut found: CUgraphNode = std::ptr::null_mut();
        call!(self.shared.cuda, cuGraphNodeFindInClone(&mut found, n.0, c.0))?;
        Ok(answer::GraphNode { node: self.node_id(clone, found) })
    }
}
