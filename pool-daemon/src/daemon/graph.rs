//! CUDA graphs and stream capture, held by the daemon for each session.
//!
//! Capture runs in the backend: `StreamBeginCapture` starts it on the daemon's stream, and the
//! launches, copies, memsets and event records the client then sends for that stream are recorded
//! by the backend instead of run. The backend always captures in **relaxed** mode: every tenant's
//! work goes through this one process, and a global-mode capture would make the driver refuse
//! "potentially unsafe" calls (allocations, ...) on every other thread, other tenants' sessions
//! included. The client library enforces the mode the application asked for (interpose's
//! `api/graph.rs`).
//!
//! Graphs, their nodes (graphs built node by node: kernel, memset, empty, child-graph and event
//! nodes, dependencies, parameter changes, updates, clones) and instantiated graphs are ids of this
//! session; another session's ids are refused with the driver's codes, and everything left is
//! destroyed when the session ends.
//!
//! What a captured graph may name must outlive it: device memory is the backend's business (as on
//! CUDA, freeing memory a graph uses and replaying it is the application's error, confined to its
//! own context), but host memory is the daemon's. So a copy through the staging area or a frame's
//! bytes (pageable memory: gone when the call returns) is refused on a capturing stream with
//! CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (the error CUDA gives calls it cannot capture), and a client
//! host region unmapped while a graph of the session exists (or a capture is under way) stays
//! mapped, and counted, until the last graph is destroyed.
//!
//! # Charging a graph launch
//!
//! A graph launch is admitted and charged by the compute scheduler **as a whole**: one grant before
//! `cuGraphLaunch`, two events around it, the measured time between them charged to the tenant,
//! exactly as for one kernel ([`super::compute`]); the scheduler learns each graph's length as it
//! learns a kernel's (its kind is the graph's id). Per kernel node would not admit any finer: once
//! launched, a graph runs on the device without the daemon, so the only point where a tenant can be
//! held back is before the launch. What matters for the quota is that the measured time is charged:
//! a tenant at 10% that replays a 50 ms graph runs one every 500 ms, and over seconds its share is
//! exact to the length of one graph over the window (50 ms in 8 s: 0.6 points). Bracketing the
//! launch also charges the gaps between the graph's nodes, which are the tenant's device time too.

use super::Raw;
use super::dispatch::{Fail, INVALID_HANDLE, INVALID_VALUE, Result};
use super::session::Session;
use crate::call;
use gpupool_protocol::EventId;
use gpupool_protocol::ops::{Copy3D, KernelNode, Memset};
use gpupool_protocol::ops::{GraphExecId, GraphId, answer};
use gpupool_protocol::{CtxId, StreamId};
use gpupool_shim::cuda::{
    CUDA_CONDITIONAL_NODE_PARAMS, CUDA_KERNEL_NODE_PARAMS, CUcontext, CUgraph, CUgraphConditionalNodeType, CUgraphExec,
    CUgraphExecUpdateResult, CUgraphExecUpdateResultInfo, CUgraphNode, CUgraphNodeParams, CUgraphNodeType, CUstream,
    CUstreamCaptureMode, CUstreamCaptureStatus,
};
use std::collections::HashMap;
use std::os::raw::c_void;

/// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
pub const STREAM_CAPTURE_UNSUPPORTED: u32 = 900;

fn not_held(what: &str, id: u64, code: u32) -> Fail {
    Fail::new(code, format!("{what} {id} is not one this session holds"))
}

/// What a session holds of graphs.
#[derive(Default)]
pub struct Graphs {
    pub(super) graphs: HashMap<GraphId, (Raw<CUgraph>, u32)>,
    execs: HashMap<GraphExecId, (Raw<CUgraphExec>, u32)>,
    /// The graph each instantiated graph was made from (its nodes name that graph's).
    pub(super) exec_graph: HashMap<GraphExecId, GraphId>,
    /// Nodes of graphs built node by node: id -> (graph, backend node).
    pub(super) nodes: HashMap<u64, (GraphId, Raw<CUgraphNode>)>,
    /// Streams capturing, with their capture's id: the stream that began it and those that
    /// joined it by waiting for an event recorded in it ([`super::graph_capture`]).
    pub(super) captures: HashMap<StreamId, u64>,
    /// Each capture's origin stream (the one that ends it).
    pub(super) capture_origins: HashMap<u64, StreamId>,
    /// The backend's capture ids -> the session's (how a stream that joined is placed).
    pub(super) backend_captures: HashMap<u64, u64>,
    /// The graph a capture records into, once named (`cuStreamBeginCaptureToGraph`'s, or
    /// the capture's own named by `cuStreamGetCaptureInfo`; `true`: the capture's own), by
    /// capture id.
    pub(super) capture_graphs: HashMap<u64, (GraphId, bool)>,
    /// Host regions the client unmapped while a graph could name them.
    held_regions: Vec<super::regions::Region>,
    /// Graph memory nodes' memory ([`super::graph_mem`]).
    pub mem: super::graph_mem::GraphMem,
    /// Host nodes of graphs (not instantiated ones): id -> the client's (function, argument).
    host_nodes: HashMap<u64, (u64, u64)>,
    /// Graphs, instantiated graphs and captures with host functions: their launches are
    /// dispatched loose ([`super::compute::Compute::dispatch_loose`]).
    host_graphs: std::collections::HashSet<GraphId>,
    host_execs: std::collections::HashSet<GraphExecId>,
    /// By capture id.
    host_captures: std::collections::HashSet<u64>,
    /// Events whose latest record was on a capturing stream (they stand for its nodes): not
    /// exported, so no other session's stream can join the capture through one.
    pub(super) captured_events: std::collections::HashSet<EventId>,
    /// The session's host-function keys ([`super::host_fn`]).
    pub host: super::host_fn::HostFns,
    /// Child graph nodes' own graphs given out (`cuGraphChildGraphNodeGetGraph`): id -> (the
    /// parent graph, the child node). They go with the node and cannot be destroyed on their own.
    pub(super) embedded: HashMap<GraphId, (GraphId, u64)>,
    /// Conditional handles this session made (the backend's values) -> the graph they are for.
    cond_handles: HashMap<u64, GraphId>,
}

impl Graphs {
    /// Whether a region unmapped now must stay mapped: a graph may name it.
    pub fn hold_regions(&self) -> bool {
        !self.graphs.is_empty() || !self.execs.is_empty() || !self.captures.is_empty()
    }

    pub fn hold(&mut self, r: super::regions::Region) {
        self.held_regions.push(r);
    }

    /// Whether an instantiation of `g` exists.
    pub fn exec_graph_of(&self, g: GraphId) -> bool {
        self.exec_graph.values().any(|&x| x == g)
    }
}

/// Capture ids: unique in the daemon, as CUDA's are in a process.
static NEXT_CAPTURE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

pub(super) fn next_capture_id() -> u64 {
    NEXT_CAPTURE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Session {
    /// Whether work sent to `s` is being captured (no capture in this session: no backend call).
    pub(super) fn capturing(&self, s: Raw<CUstream>) -> bool {
        if self.graphs.captures.is_empty() || s.0.is_null() {
            return false;
        }
        let mut st = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        call!(self.shared.cuda, cuStreamIsCapturing(s.0, &mut st)).is_ok()
            && st != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
    }

    /// Refuses a copy through pageable memory (staging, a frame's bytes) on a capturing stream: the
    /// graph would read or write daemon memory that is gone by the time it runs. As CUDA does, the
    /// refusal invalidates the capture (the backend's cuStreamQuery is refused on a capturing
    /// stream and invalidates it).
    pub(super) fn no_pageable_capture(&self, s: Raw<CUstream>) -> Result<()> {
        if !self.capturing(s) {
            return Ok(());
        }
        Err(self.invalidate_capture(
            s,
            STREAM_CAPTURE_UNSUPPORTED,
            "a copy from or to pageable host memory cannot be captured (use page-locked memory); \
             the capture is invalidated",
        ))
    }

    /// Invalidates the capture backend stream `s` (entered) is in, as CUDA does on a call the
    /// capture cannot hold: the backend refuses a query of a capturing stream and invalidates its
    /// capture. The refusal to answer the client is `code` with `why`.
    pub(super) fn invalidate_capture(&self, s: Raw<CUstream>, code: u32, why: impl Into<String>) -> Fail {
        let _ = call!(self.shared.cuda, cuStreamQuery(s.0));
        Fail::new(code, why)
    }

    pub(super) fn begin_capture(&mut self, stream: StreamId, mode: u32) -> Result<()> {
        if mode > CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED.0 {
            return Err(Fail::invalid_value(format!("unknown capture mode {mode}")));
        }
        if stream == StreamId::NULL {
            return Err(Fail::new(STREAM_CAPTURE_UNSUPPORTED, "the legacy default stream cannot be captured"));
        }
        let (s, d) = self.stream(stream, None)?;
        self.enter(d)?;
        let relaxed = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        call!(self.shared.cuda, cuStreamBeginCapture_v2(s.0, relaxed))?;
        self.capture_begun(stream, s);
        Ok(())
    }

    pub(super) fn end_capture(&mut self, stream: StreamId) -> Result<answer::Graph> {
        let (s, d) = self.stream_ref(stream, None)?;
        self.enter(d)?;
        let mut g: CUgraph = std::ptr::null_mut();
        let r = call!(self.shared.cuda, cuStreamEndCapture(s.0, &mut g));
        // Ended, whatever the answer (an invalidated or unjoined capture ends with its error),
        // when asked of the stream that began it; a stream that joined it ends nothing.
        let id = self.capture_ended_by(stream);
        if id.is_none()
            && let Err(e) = r
        {
            return Err(e.into());
        }
        let host = id.is_some_and(|id| self.graphs.host_captures.remove(&id));
        let named = id.and_then(|id| self.graphs.capture_graphs.remove(&id));
        if let Err(e) = r {
            // An invalidated capture's own graph is gone with it.
            if let Some((id, true)) = named {
                self.graphs.graphs.remove(&id);
                self.graphs.nodes.retain(|_, n| n.0 != id);
                // Its captured allocations' memory goes to the cache (trim returns it).
                self.after_mem_graph_destroy(id);
            }
            self.release_held_regions();
            return Err(e.into());
        }
        // The graph captured into may have an id already (see `capture_graphs`).
        let known = self.graphs.graphs.iter().find(|(_, (x, _))| x.0 == g).map(|(id, _)| *id);
        let graph = known.unwrap_or_else(|| self.keep_graph(g, d));
        if host {
            self.graphs.host_graphs.insert(graph);
        }
        Ok(answer::Graph { graph })
    }

    /// Child graph nodes' graphs given out whose (parent, node) `gone` says are gone, with
    /// theirs in turn: their ids name nothing any more.
    pub(super) fn forget_embedded(&mut self, gone: impl Fn(GraphId, u64) -> bool) {
        let mut dead: Vec<GraphId> =
            self.graphs.embedded.iter().filter(|&(_, &(p, n))| gone(p, n)).map(|(&id, _)| id).collect();
        while let Some(id) = dead.pop() {
            self.graphs.embedded.remove(&id);
            self.graphs.graphs.remove(&id);
            self.graphs.nodes.retain(|_, n| n.0 != id);
            self.graphs.host_graphs.remove(&id);
            dead.extend(self.graphs.embedded.iter().filter(|&(_, &(p, _))| p == id).map(|(&k, _)| k));
        }
    }

    /// `cuGraphChildGraphNodeGetGraph`: the node's own graph (changes to it are the node's), as an
    /// id of this session that lives as long as the node.
    pub(super) fn child_node_graph(&mut self, node: u64) -> Result<answer::Graph> {
        let (n, d) = self.param_node(node, None)?;
        let parent = self.graphs.nodes.get(&node).map(|x| x.0).unwrap_or(GraphId(0));
        self.enter(d)?;
        let mut g: CUgraph = std::ptr::null_mut();
        call!(self.shared.cuda, cuGraphChildGraphNodeGetGraph(n, &mut g))?;
        let known = self.graphs.graphs.iter().find(|(_, (x, _))| x.0 == g).map(|(id, _)| *id);
        let graph = known.unwrap_or_else(|| self.keep_graph(g, d));
        self.graphs.embedded.insert(graph, (parent, node));
        Ok(answer::Graph { graph })
    }

    /// The tenant's backend context on device `d`, made current.
    fn enter_tenant_ctx(&mut self, d: u32) -> Result<CUcontext> {
        self.enter(d)?;
        Ok(self.tenant_ctxs.get(&d).map_or(std::ptr::null_mut(), |tc| tc.ctx.0))
    }

    /// `cuGraphConditionalHandleCreate` for `graph`, in the tenant's context on its device.
    pub(super) fn cond_handle_create(
        &mut self,
        graph: GraphId,
        default: u32,
        flags: u32,
    ) -> Result<answer::CondHandle> {
        let (g, d) = self.graph(graph)?;
        if flags > 1 {
            return Err(Fail::invalid_value(format!(
                "cuGraphConditionalHandleCreate: flags {flags:#x} (0 or CU_GRAPH_COND_ASSIGN_DEFAULT)"
            )));
        }
        let ctx = self.enter_tenant_ctx(d)?;
        let mut h = 0u64;
        call!(self.shared.cuda, cuGraphConditionalHandleCreate(&mut h, g.0, ctx, default, flags))?;
        self.graphs.cond_handles.insert(h, graph);
        Ok(answer::CondHandle { handle: h })
    }

    /// A conditional node of `graph` with a handle this session made for it; its body graphs
    /// (the backend's) are answered as ids that go with the node.
    pub(super) fn add_conditional_node(
        &mut self,
        graph: GraphId,
        deps: &[u64],
        handle: u64,
        kind: u32,
        size: u32,
    ) -> Result<answer::CondNode> {
        if self.graphs.cond_handles.get(&handle) != Some(&graph) {
            return Err(Fail::invalid_value(format!(
                "conditional node: {handle:#x} is not a handle this session made for graph {}",
                graph.0
            )));
        }
        let d = self.graph(graph)?.1;
        let ctx = self.enter_tenant_ctx(d)?;
        let mut p = CUgraphNodeParams { type_: CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL, ..Default::default() };
        p.__bindgen_anon_1.conditional = CUDA_CONDITIONAL_NODE_PARAMS {
            handle,
            type_: CUgraphConditionalNodeType(kind),
            size,
            phGraph_out: std::ptr::null_mut(),
            ctx,
        };
        let added = self.add_node(graph, deps, |me, g, deps, node| {
            Ok(call!(me.shared.cuda, cuGraphAddNode(node, g, deps.as_ptr(), deps.len(), &mut p))?)
        })?;
        // SAFETY: the union member the node type names, written by the backend.
        let out = unsafe { p.__bindgen_anon_1.conditional.phGraph_out };
        let bodies: Vec<CUgraph> = if out.is_null() {
            Vec::new()
        } else {
            // SAFETY: the backend's array of `size` body graphs, valid while the node lives.
            unsafe { std::slice::from_raw_parts(out, size as usize) }.to_vec()
        };
        let bodies = bodies
            .into_iter()
            .map(|b| {
                let id = self.keep_graph(b, d);
                self.graphs.embedded.insert(id, (graph, added.node));
                id
            })
            .collect();
        Ok(answer::CondNode { node: added.node, bodies })
    }

    pub(super) fn keep_graph(&mut self, g: CUgraph, d: u32) -> GraphId {
        let id = GraphId(self.next_handle());
        self.graphs.graphs.insert(id, (Raw(g), d));
        id
    }

    pub(super) fn capture_info(&mut self, stream: StreamId) -> Result<answer::CaptureInfo> {
        let (s, d) = self.stream_ref(stream, None)?;
        self.enter(d)?;
        let mut st = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        call!(self.shared.cuda, cuStreamIsCapturing(s.0, &mut st))?;
        let id = match st {
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => 0,
            _ => self.capture_of(stream, s),
        };
        Ok(answer::CaptureInfo { status: st.0, id })
    }

    pub(super) fn create_graph(&mut self, ctx: CtxId, flags: u32) -> Result<answer::Graph> {
        let d = self.ctx_device(ctx)?;
        if flags != 0 {
            return Err(Fail::invalid_value("cuGraphCreate flags must be 0"));
        }
        self.enter(d)?;
        let mut g: CUgraph = std::ptr::null_mut();
        call!(self.shared.cuda, cuGraphCreate(&mut g, 0))?;
        Ok(answer::Graph { graph: self.keep_graph(g, d) })
    }

    /// The driver documents CUDA_ERROR_INVALID_VALUE for a graph that is not one (destroy,
    /// instantiate) and CUDA_ERROR_INVALID_HANDLE for an executable graph launched or uploaded.
    pub(super) fn graph(&self, id: GraphId) -> Result<(Raw<CUgraph>, u32)> {
        self.graphs.graphs.get(&id).map(|&(g, d)| (g, d)).ok_or_else(|| not_held("graph", id.0, INVALID_VALUE))
    }

    pub(super) fn exec(&self, id: GraphExecId, code: u32) -> Result<(Raw<CUgraphExec>, u32)> {
        self.graphs.execs.get(&id).map(|&(e, d)| (e, d)).ok_or_else(|| not_held("graph exec", id.0, code))
    }

    pub(super) fn destroy_graph(&mut self, id: GraphId) -> Result<()> {
        let (g, d) = self.graph(id)?;
        if self.graphs.embedded.contains_key(&id) {
            return Err(Fail::invalid_value(format!(
                "graph {} is a child graph node's (cuGraphChildGraphNodeGetGraph): it goes with the node",
                id.0
            )));
        }
        self.enter(d)?;
        call!(self.shared.cuda, cuGraphDestroy(g.0))?;
        self.graphs.graphs.remove(&id);
        self.graphs.nodes.retain(|_, n| n.0 != id);
        self.graphs.cond_handles.retain(|_, g| *g != id);
        self.forget_embedded(|parent, _| parent == id);
        self.after_mem_graph_destroy(id);
        self.graphs.host_graphs.remove(&id);
        let nodes = &self.graphs.nodes;
        self.graphs.host_nodes.retain(|n, _| nodes.contains_key(n));
        self.release_held_regions();
        Ok(())
    }

    pub(super) fn instantiate_graph(&mut self, id: GraphId, flags: u64) -> Result<answer::GraphExec> {
        let (g, d) = self.graph(id)?;
        self.check_mem_instantiate(id)?;
        self.enter(d)?;
        let mut e: CUgraphExec = std::ptr::null_mut();
        call!(self.shared.cuda, cuGraphInstantiateWithFlags(&mut e, g.0, flags))?;
        let exec = GraphExecId(self.next_handle());
        self.graphs.execs.insert(exec, (Raw(e), d));
        self.graphs.exec_graph.insert(exec, id);
        if self.graphs.host_graphs.contains(&id) {
            self.graphs.host_execs.insert(exec);
        }
        if let Err(err) = self.after_mem_instantiate(id, exec, flags) {
            // Its memory refused (past the quota): no instantiation.
            let _ = self.destroy_exec(exec);
            return Err(err);
        }
        Ok(answer::GraphExec { exec })
    }

    pub(super) fn destroy_exec(&mut self, id: GraphExecId) -> Result<()> {
        let (e, d) = self.exec(id, INVALID_VALUE)?;
        self.enter(d)?;
        call!(self.shared.cuda, cuGraphExecDestroy(e.0))?;
        self.graphs.execs.remove(&id);
        self.graphs.host_execs.remove(&id);
        let graph = self.graphs.exec_graph.remove(&id);
        self.after_mem_exec_destroy(id, graph);
        self.release_held_regions();
        Ok(())
    }

    pub(super) fn upload_exec(&mut self, id: GraphExecId, stream: StreamId) -> Result<()> {
        let (e, d) = self.exec(id, INVALID_HANDLE)?;
        let (s, _) = self.stream(stream, Some(d))?;
        self.enter(d)?;
        call!(self.shared.cuda, cuGraphUpload(e.0, s.0))?;
        Ok(())
    }

    /// `cuGraphLaunch` under the compute scheduler (see the module's comment); launched into a
    /// capturing stream it becomes a node of that capture, and nothing runs, so nothing is charged.
    pub(super) fn launch_exec(&mut self, id: GraphExecId, stream: StreamId) -> Result<()> {
        let (e, d) = self.exec(id, INVALID_HANDLE)?;
        let (s, _) = self.stream(stream, Some(d))?;
        if let Some(&graph) = self.graphs.exec_graph.get(&id) {
            self.before_mem_launch(id, graph)?;
        }
        self.enter(d)?;
        let shared = self.shared.clone();
        let go = || call!(shared.cuda, cuGraphLaunch(e.0, s.0)).map_err(Fail::from);
        let host = self.graphs.host_execs.contains(&id);
        if self.capturing(s) {
            if host {
                let id = self.capture_of(stream, s);
                self.graphs.host_captures.insert(id);
            }
            return go();
        }
        if !shared.compute.enabled {
            return go();
        }
        let tc = self.tenant_ctxs[&d].clone();
        let key = super::compute::Compute::stream_key(&tc, s);
        // The graph's own kind: the scheduler estimates each graph's length from its past launches.
        let kind = id.0 | 1 << 63;
        let grant = shared.compute.admit(&shared, d, &tc, self.id, kind, key, self.peer.as_ref())?;
        if host {
            // Its host functions' time is its client's, not the device's: see compute.rs.
            return shared.compute.dispatch_loose(&shared, d, &tc, self.id, kind, s, grant, go);
        }
        shared.compute.dispatch(&shared, d, &tc, self.id, kind, s, grant, go)
    }

    /// The backend nodes of `deps`, which must be nodes of `graph`.
    pub(super) fn deps(&self, graph: GraphId, deps: &[u64]) -> Result<Vec<CUgraphNode>> {
        deps.iter()
            .map(|d| match self.graphs.nodes.get(d) {
                Some((g, n)) if *g == graph => Ok(n.0),
                _ => Err(Fail::invalid_value(format!("node {d} is not a node of graph {}", graph.0))),
            })
            .collect()
    }

    /// Adds a node with `add(graph, deps)` and names it.
    fn add_node(
        &mut self,
        graph: GraphId,
        deps: &[u64],
        add: impl FnOnce(&Self, CUgraph, &[CUgraphNode], &mut CUgraphNode) -> Result<()>,
    ) -> Result<answer::GraphNode> {
        let (g, d) = self.graph(graph)?;
        let deps = self.deps(graph, deps)?;
        self.enter(d)?;
        let mut node: CUgraphNode = std::ptr::null_mut();
        add(self, g.0, &deps, &mut node)?;
        let id = self.next_handle();
        self.graphs.nodes.insert(id, (graph, Raw(node)));
        Ok(answer::GraphNode { node: id })
    }

    /// A kernel node's parameters: the function must be this session's, on the graph's device;
    /// the packed parameters go as CU_LAUNCH_PARAM_BUFFER_POINTER (the driver copies them).
    pub(super) fn with_kernel<T>(
        &self,
        device: u32,
        k: KernelNode,
        then: impl FnOnce(&CUDA_KERNEL_NODE_PARAMS) -> Result<T>,
    ) -> Result<T> {
        let (f, fd) = self.func(k.func)?;
        if fd != device {
            return Err(Fail::invalid_value("the function is on another device than the graph"));
        }
        let mut buf = k.params.0;
        let mut size = buf.len();
        let mut extra: [*mut c_void; 5] = [
            std::ptr::without_provenance_mut(1),
            buf.as_mut_ptr().cast(),
            std::ptr::without_provenance_mut(2),
            (&mut size as *mut usize).cast(),
            std::ptr::null_mut(),
        ];
        let [gx, gy, gz] = k.grid;
        let [bx, by, bz] = k.block;
        let p = CUDA_KERNEL_NODE_PARAMS {
            func: f.0,
            gridDimX: gx,
            gridDimY: gy,
            gridDimZ: gz,
            blockDimX: bx,
            blockDimY: by,
            blockDimZ: bz,
            sharedMemBytes: k.shared_mem_bytes,
            kernelParams: std::ptr::null_mut(),
            extra: extra.as_mut_ptr(),
            kern: std::ptr::null_mut(),
            ctx: std::ptr::null_mut(),
        };
        then(&p)
    }

    pub(super) fn add_kernel_node(&mut self, graph: GraphId, deps: &[u64], k: KernelNode) -> Result<answer::GraphNode> {
        let (_, d) = self.graph(graph)?;
        self.add_node(graph, deps, |me, g, deps, node| {
            me.with_kernel(d, k, |p| {
                Ok(call!(me.shared.cuda, cuGraphAddKernelNode_v2(node, g, deps.as_ptr(), deps.len(), p))?)
            })
        })
    }

    pub(super) fn add_memset_node(&mut self, graph: GraphId, deps: &[u64], set: Memset) -> Result<answer::GraphNode> {
        let (_, d) = self.graph(graph)?;
        let p = self.memset_node_params(set, d)?;
        let ctx = self.tenant_ctxs[&d].ctx.0;
        self.add_node(graph, deps, |me, g, deps, node| {
            Ok(call!(me.shared.cuda, cuGraphAddMemsetNode(node, g, deps.as_ptr(), deps.len(), &p, ctx))?)
        })
    }

    /// The copy is checked and its host ends resolved by [`Session::memcpy_node_params`].
    pub(super) fn add_memcpy_node(&mut self, graph: GraphId, deps: &[u64], copy: Copy3D) -> Result<answer::GraphNode> {
        let (_, d) = self.graph(graph)?;
        for end in [&copy.src, &copy.dst] {
            if let gpupool_protocol::ops::MemSpace::Device(p) = end.space {
                self.map_for_node(p.0)?;
            }
        }
        let p = self.memcpy_node_params(copy, d)?;
        let ctx = self.tenant_ctxs[&d].ctx.0;
        self.add_node(graph, deps, |me, g, deps, node| {
            Ok(call!(me.shared.cuda, cuGraphAddMemcpyNode(node, g, deps.as_ptr(), deps.len(), &p, ctx))?)
        })
    }

    pub(super) fn add_empty_node(&mut self, graph: GraphId, deps: &[u64]) -> Result<answer::GraphNode> {
        self.add_node(graph, deps, |me, g, deps, node| {
            Ok(call!(me.shared.cuda, cuGraphAddEmptyNode(node, g, deps.as_ptr(), deps.len()))?)
        })
    }

    pub(super) fn add_child_node(&mut self, graph: GraphId, deps: &[u64], child: GraphId) -> Result<answer::GraphNode> {
        let (c, cd) = self.graph(child)?;
        if cd != self.graph(graph)?.1 || child == graph {
            return Err(Fail::invalid_value("a child graph must be another graph of the same device"));
        }
        if self.graphs.mem.has_nodes(child) || self.graphs.mem.has_nodes(graph) {
            return Err(Fail::invalid_value("a graph with memory nodes cannot be, or have, a child graph"));
        }
        let added = self.add_node(graph, deps, |me, g, deps, node| {
            Ok(call!(me.shared.cuda, cuGraphAddChildGraphNode(node, g, deps.as_ptr(), deps.len(), c.0))?)
        })?;
        if self.graphs.host_graphs.contains(&child) {
            self.graphs.host_graphs.insert(graph);
        }
        Ok(added)
    }

    pub(super) fn add_event_node(
        &mut self,
        graph: GraphId,
        deps: &[u64],
        event: EventId,
        wait: bool,
    ) -> Result<answer::GraphNode> {
        let (e, ed) = self.event(event)?;
        if ed != self.graph(graph)?.1 {
            return Err(Fail::invalid_value("the event is on another device than the graph"));
        }
        self.add_node(graph, deps, |me, g, deps, node| {
            let cu = &me.shared.cuda;
            Ok(if wait {
                call!(cu, cuGraphAddEventWaitNode(node, g, deps.as_ptr(), deps.len(), e.0))
            } else {
                call!(cu, cuGraphAddEventRecordNode(node, g, deps.as_ptr(), deps.len(), e.0))
            }?)
        })
    }

    /// A host node running the client's `func(user)` ([`super::host_fn`]).
    pub(super) fn add_host_node(
        &mut self,
        graph: GraphId,
        deps: &[u64],
        func: u64,
        user: u64,
    ) -> Result<answer::GraphNode> {
        self.graph(graph)?;
        let p = self.host_params(func, user)?;
        let added = self.add_node(graph, deps, |me, g, deps, node| {
            Ok(call!(me.shared.cuda, cuGraphAddHostNode(node, g, deps.as_ptr(), deps.len(), &p))?)
        })?;
        self.graphs.host_nodes.insert(added.node, (func, user));
        // The graphs holding it as a child node's graph have host functions too.
        let mut g = Some(graph);
        while let Some(x) = g {
            self.graphs.host_graphs.insert(x);
            g = self.graphs.embedded.get(&x).map(|e| e.0);
        }
        Ok(added)
    }

    /// A destroyed node's host function is no longer named by it.
    pub(super) fn forget_host_node(&mut self, node: u64) {
        self.graphs.host_nodes.remove(&node);
    }

    /// A host node of this session's graphs: (graph, backend node).
    fn host_node(&self, node: u64) -> Result<(GraphId, Raw<CUgraphNode>)> {
        match (self.graphs.host_nodes.contains_key(&node), self.graphs.nodes.get(&node)) {
            (true, Some(&n)) => Ok(n),
            _ => Err(Fail::invalid_value(format!("node {node} is not a host node this session holds"))),
        }
    }

    pub(super) fn host_node_params(&self, node: u64) -> Result<answer::HostFn> {
        self.host_node(node)?;
        let (func, user) = self.graphs.host_nodes[&node];
        Ok(answer::HostFn { func, user })
    }

    /// Changes the graph's node; graphs instantiated from it keep what they had, as in CUDA.
    pub(super) fn host_node_set_params(&mut self, node: u64, func: u64, user: u64) -> Result<()> {
        let (graph, n) = self.host_node(node)?;
        let (_, d) = self.graph(graph)?;
        let p = self.host_params(func, user)?;
        self.enter(d)?;
        call!(self.shared.cuda, cuGraphHostNodeSetParams(n.0, &p))?;
        self.graphs.host_nodes.insert(node, (func, user));
        Ok(())
    }

    pub(super) fn exec_host_node_set_params(
        &mut self,
        exec: GraphExecId,
        node: u64,
        func: u64,
        user: u64,
    ) -> Result<()> {
        let (e, d) = self.exec(exec, INVALID_VALUE)?;
        let (graph, n) = self.host_node(node)?;
        if self.graphs.exec_graph.get(&exec) != Some(&graph) {
            return Err(Fail::invalid_value(format!("node {node} is not a node of the instantiated graph")));
        }
        let p = self.host_params(func, user)?;
        self.enter(d)?;
        call!(self.shared.cuda, cuGraphExecHostNodeSetParams(e.0, n.0, &p))?;
        Ok(())
    }

    /// `cuLaunchHostFunc` through the backend: on a capturing stream, a host node of the capture.
    pub(super) fn launch_host_func(&mut self, stream: StreamId, func: u64, user: u64) -> Result<()> {
        let (s, d) = self.stream(stream, None)?;
        let p = self.host_params(func, user)?;
        self.enter(d)?;
        call!(self.shared.cuda, cuLaunchHostFunc(s.0, p.fn_, p.userData))?;
        if self.capturing(s) {
            let id = self.capture_of(stream, s);
            self.graphs.host_captures.insert(id);
        }
        Ok(())
    }

    pub(super) fn add_dependencies(&mut self, graph: GraphId, from: &[u64], to: &[u64]) -> Result<()> {
        if from.len() != to.len() {
            return Err(Fail::invalid_value("as many dependents as dependencies"));
        }
        let (g, d) = self.graph(graph)?;
        let (from, to) = (self.deps(graph, from)?, self.deps(graph, to)?);
        self.enter(d)?;
        call!(self.shared.cuda, cuGraphAddDependencies(g.0, from.as_ptr(), to.as_ptr(), from.len()))?;
        Ok(())
    }

    pub(super) fn exec_kernel_node_set_params(&mut self, exec: GraphExecId, node: u64, k: KernelNode) -> Result<()> {
        let (e, d) = self.exec(exec, INVALID_VALUE)?;
        let from = self.graphs.exec_graph.get(&exec).copied();
        let n = match self.graphs.nodes.get(&node) {
            Some((g, n)) if Some(*g) == from => *n,
            _ => return Err(Fail::invalid_value(format!("node {node} is not a node of the instantiated graph"))),
        };
        self.enter(d)?;
        self.with_kernel(d, k, |p| Ok(call!(self.shared.cuda, cuGraphExecKernelNodeSetParams_v2(e.0, n.0, p))?))
    }

    pub(super) fn clone_graph(&mut self, graph: GraphId) -> Result<answer::Graph> {
        let (g, d) = self.graph(graph)?;
        if self.graphs.mem.has_nodes(graph) {
            return Err(Fail::invalid_value("a graph with memory nodes cannot be cloned"));
        }
        self.enter(d)?;
        let mut c: CUgraph = std::ptr::null_mut();
        call!(self.shared.cuda, cuGraphClone(&mut c, g.0))?;
        let clone = self.keep_graph(c, d);
        if self.graphs.host_graphs.contains(&graph) {
            self.graphs.host_graphs.insert(clone);
        }
        Ok(answer::Graph { graph: clone })
    }

    /// The result is the answer, not an error: the client returns
    /// CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE with it, as the driver does.
    pub(super) fn exec_update(&mut self, exec: GraphExecId, graph: GraphId) -> Result<answer::ExecUpdate> {
        let (e, d) = self.exec(exec, INVALID_VALUE)?;
        let (g, gd) = self.graph(graph)?;
        if gd != d {
            return Ok(answer::ExecUpdate { result: 1, node: 0, from: 0 });
        }
        let from = self.graphs.exec_graph.get(&exec).copied();
        if self.graphs.mem.has_nodes(graph) || from.is_some_and(|f| self.graphs.mem.has_nodes(f)) {
            tracing::info!(session = self.id, "cuGraphExecUpdate: graphs with memory nodes cannot be updated");
            // CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED
            return Ok(answer::ExecUpdate { result: 6, node: 0, from: 0 });
        }
        self.enter(d)?;
        let mut info = CUgraphExecUpdateResultInfo {
            result: CUgraphExecUpdateResult(0),
            errorNode: std::ptr::null_mut(),
            errorFromNode: std::ptr::null_mut(),
        };
        let r = call!(self.shared.cuda, cuGraphExecUpdate_v2(e.0, g.0, &mut info));
        // The offending nodes of `graph`, named by ids of this session (a captured graph's node
        // gets its id here, as the topology query would give it one).
        let (node, from) = (self.update_node_id(graph, info.errorNode), self.update_node_id(graph, info.errorFromNode));
        match r {
            Ok(()) => Ok(answer::ExecUpdate { result: 0, node: 0, from: 0 }),
            Err(_) if info.result.0 != 0 => Ok(answer::ExecUpdate { result: info.result.0, node, from }),
            Err(err) => Err(err.into()),
        }
    }

    /// The session's id of backend node `n` of `graph` (0 for none).
    fn update_node_id(&mut self, graph: GraphId, n: CUgraphNode) -> u64 {
        if n.is_null() { 0 } else { self.node_id(graph, n) }
    }

    /// `cuGraphDebugDotPrint` into a file of the daemon's own, read back and removed.
    pub(super) fn dot_text(&mut self, graph: GraphId, flags: u32) -> Result<Vec<u8>> {
        let (g, d) = self.graph(graph)?;
        self.enter(d)?;
        let path =
            std::env::temp_dir().join(format!("gpupool-graph-{}-{}-{}.dot", std::process::id(), self.id, graph.0));
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| Fail::invalid_value("temporary path"))?;
        let r = call!(self.shared.cuda, cuGraphDebugDotPrint(g.0, c.as_ptr(), flags));
        let text = std::fs::read(&path);
        let _ = std::fs::remove_file(&path);
        r?;
        text.map_err(|e| Fail::new(304, format!("reading the graph's DOT text: {e}")))
    }

    /// Unmaps the held regions once no graph or capture may name them.
    fn release_held_regions(&mut self) {
        if self.graphs.hold_regions() {
            return;
        }
        for r in std::mem::take(&mut self.graphs.held_regions) {
            self.release_region(r);
        }
    }

    /// Session end (after its streams were synchronised and destroyed, which ends their captures):
    /// every instantiated graph, then every graph, then the held regions. Returns how many
    /// graphs and instantiated graphs there were.
    pub fn free_graphs(&mut self) -> usize {
        let shared = self.shared.clone();
        let cuda = &shared.cuda;
        let mut n = 0;
        for (_, (e, d)) in std::mem::take(&mut self.graphs.execs) {
            n += 1;
            if self.enter(d).is_ok()
                && let Err(err) = call!(cuda, cuGraphExecDestroy(e.0))
            {
                tracing::debug!(session = self.id, "freeing a graph exec: {err}");
            }
        }
        // A child graph node's graph goes with its parent, never on its own.
        let embedded = std::mem::take(&mut self.graphs.embedded);
        for (id, (g, d)) in std::mem::take(&mut self.graphs.graphs) {
            n += 1;
            if !embedded.contains_key(&id)
                && self.enter(d).is_ok()
                && let Err(err) = call!(cuda, cuGraphDestroy(g.0))
            {
                tracing::debug!(session = self.id, "freeing a graph: {err}");
            }
        }
        self.graphs.captures.clear();
        self.graphs.capture_origins.clear();
        self.graphs.backend_captures.clear();
        self.graphs.capture_graphs.clear();
        self.graphs.nodes.clear();
        self.graphs.mem.clear();
        self.graphs.host_nodes.clear();
        self.graphs.host_graphs.clear();
        self.graphs.host_execs.clear();
        self.graphs.host_captures.clear();
        self.graphs.captured_events.clear();
        self.graphs.exec_graph.clear();
        self.graphs.cond_handles.clear();
        self.release_held_regions();
        n
    }
}
