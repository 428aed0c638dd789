//! A capture's graph and dependencies (`cuStreamBeginCaptureToGraph`, `cuStreamGetCaptureInfo`
//! v2/v3, `cuStreamUpdateCaptureDependencies`), held by the daemon with the rest of a session's
//! graphs ([`super::graph`]).
//!
//! The graph a capture records into and its dependency nodes are named to the client with the
//! session's ids: a capture's own graph gets an id when it is first asked for (it is the graph
//! `cuStreamEndCapture` then answers; an invalidated capture's goes with it), and each backend
//! node the first time it is named. Dependencies the client names must be nodes of the capture's
//! graph (INVALID_VALUE otherwise, with a log line), so nothing of another session's reaches the
//! backend. A graph with memory nodes may be captured into: its memory is mapped (and charged)
//! when the capture begins, so that what is captured may name it. The topology queries (`cuGraphGetNodes`, `cuGraphNodeGetType`, dependencies) get a
//! graph's nodes, types and edges here, named the same way.

use super::Raw;
use super::dispatch::{Fail, Result};
use super::graph::STREAM_CAPTURE_UNSUPPORTED;
use super::session::Session;
use crate::call;
use gpupool_protocol::StreamId;
use gpupool_protocol::ops::{GraphId, answer};
use gpupool_shim::cuda::{CUgraph, CUgraphNode, CUstream, CUstreamCaptureMode, CUstreamCaptureStatus};

/// CUDA_ERROR_ILLEGAL_STATE: a capture call on a stream that is not capturing.
const ILLEGAL_STATE: u32 = 401;

impl Session {
    /// The session's id of backend node `n` of graph `g` (a new id the first time).
    pub(super) fn node_id(&mut self, g: GraphId, n: CUgraphNode) -> u64 {
        if let Some((&id, _)) = self.graphs.nodes.iter().find(|(_, (x, m))| *x == g && m.0 == n) {
            return id;
        }
        let id = self.next_handle();
        self.graphs.nodes.insert(id, (g, Raw(n)));
        id
    }

    /// `cuStreamBeginCaptureToGraph` into `graph`, the first node after `deps` (nodes of it).
    pub(super) fn begin_capture_to_graph(
        &mut self,
        stream: StreamId,
        graph: GraphId,
        deps: &[u64],
        mode: u32,
    ) -> Result<()> {
        if mode > CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED.0 {
            return Err(Fail::invalid_value(format!("unknown capture mode {mode}")));
        }
        if stream == StreamId::NULL {
            return Err(Fail::new(STREAM_CAPTURE_UNSUPPORTED, "the legacy default stream cannot be captured"));
        }
        let (g, gd) = self.graph(graph)?;
        let nodes = self.capture_deps(graph, deps)?;
        let (s, d) = self.stream(stream, None)?;
        if d != gd {
            return Err(Fail::invalid_value("the graph is on another device than the stream"));
        }
        // The graph's memory nodes are mapped now, charged to the tenant (past the quota,
        // CUDA_ERROR_OUT_OF_MEMORY here): the backend checks the memory of each memset or copy
        // captured into it, as it does a memset or memcpy node's when added (graph_mem.rs).
        if self.graphs.mem.has_nodes(graph) {
            self.map_graph_memory(graph)?;
        }
        self.enter(d)?;
        // Relaxed, as every capture of the backend (graph.rs says why).
        let relaxed = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        let edges = std::ptr::null();
        call!(self.shared.cuda, cuStreamBeginCaptureToGraph(s.0, g.0, nodes.as_ptr(), edges, nodes.len(), relaxed))?;
        let id = self.capture_begun(stream, s);
        self.graphs.capture_graphs.insert(id, (graph, false));
        Ok(())
    }

    /// The backend's capture id of the capture on `s` (0 when it is not capturing).
    fn backend_capture_id(&self, s: Raw<CUstream>) -> u64 {
        let mut st = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut id = 0u64;
        let (graph, deps, n) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
        match call!(self.shared.cuda, cuStreamGetCaptureInfo_v2(s.0, &mut st, &mut id, graph, deps, n)) {
            Ok(()) if st != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => id,
            _ => 0,
        }
    }

    /// A capture begun on `stream` (the backend's `s`): its id in this session.
    pub(super) fn capture_begun(&mut self, stream: StreamId, s: Raw<CUstream>) -> u64 {
        let id = super::graph::next_capture_id();
        self.graphs.captures.insert(stream, id);
        self.graphs.capture_origins.insert(id, stream);
        let backend = self.backend_capture_id(s);
        self.graphs.backend_captures.retain(|_, v| *v != id);
        self.graphs.backend_captures.insert(backend, id);
        id
    }

    /// The session's id of the capture `stream` is in (0: none), placing a stream that joined a
    /// capture by waiting for an event recorded in it (`cuStreamWaitEvent`, which the backend
    /// carries out) the first time it is asked.
    pub(super) fn capture_of(&mut self, stream: StreamId, s: Raw<CUstream>) -> u64 {
        if let Some(&id) = self.graphs.captures.get(&stream) {
            return id;
        }
        if self.graphs.backend_captures.is_empty() {
            return 0;
        }
        match self.graphs.backend_captures.get(&self.backend_capture_id(s)) {
            Some(&id) => {
                self.graphs.captures.insert(stream, id);
                id
            }
            None => 0,
        }
    }

    /// After `cuStreamWaitEvent` on `stream`: the capture it joined, if it did.
    pub(super) fn after_capture_wait(&mut self, stream: StreamId, s: Raw<CUstream>) {
        self.capture_of(stream, s);
    }

    /// `cuStreamEndCapture` on `stream` was answered: if `stream` began its capture, every stream
    /// of the capture has left it, and its id is returned for the rest to be let go.
    pub(super) fn capture_ended_by(&mut self, stream: StreamId) -> Option<u64> {
        let id = *self.graphs.captures.get(&stream)?;
        if self.graphs.capture_origins.get(&id) != Some(&stream) {
            return None;
        }
        self.graphs.capture_origins.remove(&id);
        self.graphs.captures.retain(|_, v| *v != id);
        self.graphs.backend_captures.retain(|_, v| *v != id);
        Some(id)
    }

    /// The backend nodes of `deps`, which must be nodes of `graph`.
    fn capture_deps(&self, graph: GraphId, deps: &[u64]) -> Result<Vec<CUgraphNode>> {
        deps.iter()
            .map(|d| match self.graphs.nodes.get(d) {
                Some((g, n)) if *g == graph => Ok(n.0),
                _ => Err(Fail::invalid_value(format!("node {d} is not a node of the capture's graph {}", graph.0))),
            })
            .collect()
    }

    /// `cuStreamGetCaptureInfo_v2`: the status, and while capturing the capture's id, its graph
    /// and its current dependencies, as the session's ids.
    pub(super) fn capture_graph(&mut self, stream: StreamId) -> Result<answer::CaptureGraph> {
        let (s, d) = self.stream_ref(stream, None)?;
        self.enter(d)?;
        let mut st = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let (mut id, mut deps, mut n) = (0u64, std::ptr::null(), 0usize);
        let mut g: CUgraph = std::ptr::null_mut();
        call!(self.shared.cuda, cuStreamGetCaptureInfo_v2(s.0, &mut st, &mut id, &mut g, &mut deps, &mut n))?;
        let none = answer::CaptureGraph { status: st.0, id: 0, graph: GraphId(0), deps: Vec::new() };
        if st != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE {
            return Ok(none);
        }
        let capture = self.capture_of(stream, s);
        let graph = match self.graphs.capture_graphs.get(&capture) {
            Some(&(graph, _)) => graph,
            None => {
                let graph = self.keep_graph(g, d);
                self.graphs.capture_graphs.insert(capture, (graph, true));
                graph
            }
        };
        let backend: Vec<CUgraphNode> = if n == 0 || deps.is_null() {
            Vec::new()
        } else {
            // SAFETY: the backend answered `n` node handles at `deps`, valid until its next call.
            unsafe { std::slice::from_raw_parts(deps, n) }.to_vec()
        };
        let deps = backend.into_iter().map(|x| self.node_id(graph, x)).collect();
        Ok(answer::CaptureGraph { status: st.0, id: capture, graph, deps })
    }

    /// `cuStreamUpdateCaptureDependencies`: `deps` (nodes of the capture's graph) added to the
    /// capture's dependencies, or with `set` replacing them.
    pub(super) fn update_capture_dependencies(&mut self, stream: StreamId, deps: &[u64], set: bool) -> Result<()> {
        let (s, d) = self.stream_ref(stream, None)?;
        let capture = self.capture_of(stream, s);
        if capture == 0 {
            return Err(Fail::new(ILLEGAL_STATE, "cuStreamUpdateCaptureDependencies: the stream is not capturing"));
        }
        let Some(&(graph, _)) = self.graphs.capture_graphs.get(&capture) else {
            return Err(Fail::invalid_value(
                "cuStreamUpdateCaptureDependencies: no node of this capture's graph was named yet",
            ));
        };
        let mut nodes = self.capture_deps(graph, deps)?;
        self.enter(d)?;
        call!(
            self.shared.cuda,
            cuStreamUpdateCaptureDependencies(s.0, nodes.as_mut_ptr(), nodes.len(), u32::from(set))
        )?;
        Ok(())
    }
}

impl Session {
    /// A graph's nodes (as the session's ids), their types and its edges, for the topology
    /// queries (`cuGraphGetNodes`, `cuGraphNodeGetType`, dependencies), answered in the client.
    pub(super) fn graph_topology(&mut self, graph: GraphId, node: u64) -> Result<answer::Topology> {
        let graph = if graph.0 == 0 {
            match self.graphs.nodes.get(&node) {
                Some((g, _)) => *g,
                None => return Err(Fail::invalid_value(format!("node {node} is not one this session holds"))),
            }
        } else {
            graph
        };
        let (g, d) = self.graph(graph)?;
        self.enter(d)?;
        let mut n = 0usize;
        call!(self.shared.cuda, cuGraphGetNodes(g.0, std::ptr::null_mut(), &mut n))?;
        let mut backend = vec![std::ptr::null_mut(); n];
        call!(self.shared.cuda, cuGraphGetNodes(g.0, backend.as_mut_ptr(), &mut n))?;
        backend.truncate(n);
        let ids: Vec<u64> = backend.iter().map(|&x| self.node_id(graph, x)).collect();
        let (mut types, mut from, mut to) = (Vec::new(), Vec::new(), Vec::new());
        for (&x, &id) in backend.iter().zip(&ids) {
            let mut t = gpupool_shim::cuda::CUgraphNodeType(0);
            call!(self.shared.cuda, cuGraphNodeGetType(x, &mut t))?;
            types.push(self.graphs.mem.node_type(id).unwrap_or(t.0));
            let mut k = 0usize;
            call!(self.shared.cuda, cuGraphNodeGetDependencies(x, std::ptr::null_mut(), &mut k))?;
            let mut deps = vec![std::ptr::null_mut(); k];
            call!(self.shared.cuda, cuGraphNodeGetDependencies(x, deps.as_mut_ptr(), &mut k))?;
            for dep in deps.into_iter().take(k) {
                from.push(self.node_id(graph, dep));
                to.push(id);
            }
        }
        Ok(answer::Topology { nodes: ids, types, from, to })
    }
}
