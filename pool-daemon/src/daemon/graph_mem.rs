//! Graph memory nodes (`cuGraphAddMemAllocNode`, `cuGraphAddMemFreeNode`), the device's graph
//! memory (`cuDeviceGraphMemTrim`, `cuDeviceGet/SetGraphMemAttribute`), held by the daemon for
//! each session over its virtual memory management ([`super::vmm`]).
//!
//! The backend's own graph memory would be one pool per device shared by every tenant of this
//! process (trimmed, measured and reused across tenants), so it is not used: an allocation node
//! is an empty node in the backend's graph, and its memory is the session's VMM memory:
//!
//! - **Address.** Reserved when the node is added (`cuMemAddressReserve`, rounded up to the
//!   allocation granularity), so the address is fixed for every instantiation and launch of the
//!   graph, as CUDA documents.
//! - **Memory, and where the quota refuses it.** Physical memory (`cuMemCreate`, counted in the
//!   tenant's ledger exactly, rounded size included) is mapped when the graph is
//!   **instantiated**: past the quota, `cuGraphInstantiate` fails with CUDA_ERROR_OUT_OF_MEMORY and
//!   a log line. CUDA allocates at upload or launch, but both travel through the pool without a
//!   reply (their errors come back at the next synchronization), so instantiation is the last
//!   point where the refusal reaches the call that caused it, and once instantiated the graph
//!   runs. Two exceptions: a memset or memcpy node naming the allocation maps it when that node
//!   is added (the backend checks such a node's memory then, and it knows nothing of graph
//!   memory: the refusal is that call's), and a launch after `cuDeviceGraphMemTrim` took the
//!   memory back maps it again (the refusal is the launch's asynchronous error).
//! - **Freeing.** Memory a free node frees, or that the application freed (`cuMemFree`,
//!   `cuMemFreeAsync`: [`Session::graph_mem_free`]) stays mapped while the instantiated graph
//!   exists (its next launch finds it); when the instantiated graph goes, it is unmapped into the
//!   session's graph memory cache, still charged, and reused by the next instantiation of the
//!   same size. `cuDeviceGraphMemTrim` gives the cache, and the memory of instantiated graphs that
//!   is not in use once the device is idle, back to the quota. Memory not freed in its graph
//!   belongs to the application after a launch and stays until it frees it.
//! - **CUDA's rules.** One instantiation of a graph with memory nodes at a time, no clone, no
//!   child-graph use, no update (CUDA_ERROR_INVALID_VALUE, or the update's NOT_SUPPORTED result);
//!   a free node frees an allocation node's address once; a launch while an allocation of the
//!   previous launch is unfreed is CUDA_ERROR_INVALID_VALUE unless the graph was instantiated
//!   with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH. A free node may name only its own
//!   graph's allocations here (CUDA_ERROR_NOT_SUPPORTED for another graph's, with a log line).
//! - **Lifetime.** Everything is the session's VMM memory, so its end unmaps and frees it all
//!   ([`Session::free_vmm`]); this module only forgets its books ([`GraphMem::clear`]).

use super::dispatch::{Fail, INVALID_VALUE, NOT_SUPPORTED, Result};
use super::session::Session;
use crate::call;
use gpupool_protocol::ops::{GraphExecId, GraphId, MemAccess, MemHandleId, answer};
use gpupool_protocol::{DevicePtr, StreamId};
use gpupool_shim::cuda::{
    CUmemAllocationGranularity_flags, CUmemAllocationProp, CUmemAllocationType, CUmemLocation, CUmemLocationType,
    CUstreamCaptureStatus,
};
use std::collections::{BTreeMap, HashMap, HashSet};

/// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`.
const AUTO_FREE_ON_LAUNCH: u64 = 1;
/// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED.
const CAPTURE_INVALIDATED: u32 = 901;
/// CUDA_ERROR_ILLEGAL_STATE.
const ILLEGAL_STATE: u32 = 401;
/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
const READWRITE: u32 = 3;

/// One allocation node's memory.
struct Alloc {
    graph: GraphId,
    /// The allocation node's id.
    node: u64,
    device: u32,
    /// Reserved and mapped: the node's size rounded up to the granularity.
    size: u64,
    freed_in_graph: bool,
    /// Allocated by a launch and not freed by the application since (allocations not freed in
    /// their graph only).
    live: bool,
    /// The physical memory mapped at the address, while it is.
    mapped: Option<MemHandleId>,
    graph_gone: bool,
}

/// What a session holds of graph memory.
#[derive(Default)]
pub struct GraphMem {
    /// Base address -> allocation node.
    allocs: BTreeMap<u64, Alloc>,
    /// Graphs with a free node.
    with_free_nodes: HashSet<GraphId>,
    /// Free nodes' ids.
    free_nodes: HashSet<u64>,
    /// Unmapped physical memory kept for reuse, still charged: (device, size, handle).
    cache: Vec<(u32, u64, MemHandleId)>,
    /// Per device: (used, reserved) high-water marks.
    high: HashMap<u32, (u64, u64)>,
    auto_free: HashSet<GraphExecId>,
}

impl GraphMem {
    /// The `CUgraphNodeType` of memory node `node` (the backend holds an empty node for it).
    pub fn node_type(&self, node: u64) -> Option<u32> {
        if self.free_nodes.contains(&node) {
            return Some(11);
        }
        self.allocs.values().any(|a| a.node == node).then_some(10)
    }

    pub fn has_nodes(&self, g: GraphId) -> bool {
        self.with_free_nodes.contains(&g) || self.allocs.values().any(|a| a.graph == g)
    }

    /// (used, reserved) on `device`: mapped, and mapped plus cached.
    fn usage(&self, device: u32) -> (u64, u64) {
        let used: u64 = self.allocs.values().filter(|a| a.device == device && a.mapped.is_some()).map(|a| a.size).sum();
        let cached: u64 = self.cache.iter().filter(|c| c.0 == device).map(|c| c.1).sum();
        (used, used + cached)
    }

    fn note_high(&mut self, device: u32) {
        let (u, r) = self.usage(device);
        let h = self.high.entry(device).or_default();
        h.0 = h.0.max(u);
        h.1 = h.1.max(r);
    }

    /// The session's end: its VMM memory is freed by [`Session::free_vmm`].
    pub fn clear(&mut self) {
        *self = GraphMem::default();
    }
}

impl Session {
    fn granularity(&mut self, device: u32) -> Result<u64> {
        let prop = CUmemAllocationProp {
            type_: CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            location: CUmemLocation { type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: device as i32 },
            ..Default::default()
        };
        let mut g = 0usize;
        let min = CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM;
        call!(self.shared.cuda, cuMemGetAllocationGranularity(&mut g, &prop, min))?;
        Ok((g as u64).max(1))
    }

    /// `cuGraphAddMemAllocNode`: `device` is the pool's location (the client checked the rest of
    /// its properties and access descriptors); the answer is the node and its fixed address.
    pub(super) fn add_mem_alloc_node(
        &mut self,
        graph: GraphId,
        deps: &[u64],
        device: u32,
        bytes: u64,
    ) -> Result<answer::GraphMemNode> {
        let (_, d) = self.graph(graph)?;
        if self.graphs.embedded.contains_key(&graph) {
            return Err(Fail::invalid_value("cuGraphAddMemAllocNode: a child graph cannot hold memory nodes"));
        }
        if device != d {
            return Err(Fail::invalid_value(format!(
                "cuGraphAddMemAllocNode: the pool is on device {device}, the graph on device {d}"
            )));
        }
        if bytes == 0 {
            return Err(Fail::invalid_value("cuGraphAddMemAllocNode: bytesize 0"));
        }
        self.enter(d)?;
        let g = self.granularity(d)?;
        let size = bytes
            .checked_next_multiple_of(g)
            .ok_or_else(|| Fail::invalid_value(format!("cuGraphAddMemAllocNode: bytesize {bytes} overflows")))?;
        let base = self.vmm_reserve_on(d, size, 0, 0)?;
        let node = match self.add_empty_node(graph, deps) {
            Ok(n) => n.node,
            Err(e) => {
                let _ = self.vmm_address_free(base, size);
                return Err(e);
            }
        };
        let a =
            Alloc { graph, node, device: d, size, freed_in_graph: false, live: false, mapped: None, graph_gone: false };
        self.graphs.mem.allocs.insert(base, a);
        Ok(answer::GraphMemNode { node, ptr: DevicePtr(base) })
    }

    /// `cuGraphAddMemFreeNode` of an allocation node's address.
    pub(super) fn add_mem_free_node(&mut self, graph: GraphId, deps: &[u64], ptr: u64) -> Result<answer::GraphNode> {
        self.graph(graph)?;
        match self.graphs.mem.allocs.get(&ptr) {
            None => {
                return Err(Fail::invalid_value(format!(
                    "cuGraphAddMemFreeNode: {ptr:#x} is not an address an allocation node returned"
                )));
            }
            Some(a) if a.graph != graph => {
                return Err(Fail::new(
                    NOT_SUPPORTED,
                    format!(
                        "cuGraphAddMemFreeNode: {ptr:#x} is another graph's allocation; the pool frees graph memory only in the graph that allocates it"
                    ),
                ));
            }
            Some(a) if a.freed_in_graph => {
                return Err(Fail::invalid_value(format!(
                    "cuGraphAddMemFreeNode: {ptr:#x} is freed twice in the graph"
                )));
            }
            Some(_) => {}
        }
        let n = self.add_empty_node(graph, deps)?;
        if let Some(a) = self.graphs.mem.allocs.get_mut(&ptr) {
            a.freed_in_graph = true;
        }
        self.graphs.mem.with_free_nodes.insert(graph);
        self.graphs.mem.free_nodes.insert(n.node);
        Ok(n)
    }

    /// The capture on `stream` (its graph and current dependencies), for a node captured there.
    fn active_capture(&mut self, stream: StreamId, what: &str) -> Result<answer::CaptureGraph> {
        let cap = self.capture_graph(stream)?;
        match CUstreamCaptureStatus(cap.status) {
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => Ok(cap),
            CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED => Err(Fail::new(
                CAPTURE_INVALIDATED,
                format!("{what}: the stream's capture was invalidated by an earlier call"),
            )),
            _ => Err(Fail::new(ILLEGAL_STATE, format!("{what}: the stream is not capturing"))),
        }
    }

    /// `cuMemAllocAsync` (or a pool's allocation) on a capturing stream: an allocation node of the
    /// capture's graph, as CUDA makes one. Its memory is mapped and charged at once, not at
    /// instantiation: the memsets, copies and kernels captured after it name it, and the backend
    /// checks their memory as it captures them. Past the quota that is CUDA_ERROR_OUT_OF_MEMORY
    /// and no node. From then on it is graph memory like an added node's.
    pub(super) fn capture_mem_alloc(
        &mut self,
        stream: StreamId,
        device: u32,
        bytes: u64,
    ) -> Result<answer::CapturedMemNode> {
        let what = "stream-ordered allocation on a capturing stream";
        let cap = self.active_capture(stream, what)?;
        let answer::GraphMemNode { node, ptr } = self.add_mem_alloc_node(cap.graph, &cap.deps, device, bytes)?;
        let placed = self.map_one(ptr.0).and_then(|()| self.update_capture_dependencies(stream, &[node], true));
        if let Err(e) = placed {
            self.undo_captured_alloc(node, ptr.0);
            return Err(Fail::new(e.code, format!("{what} of {bytes} bytes: {}", e.message)));
        }
        self.graphs.mem.note_high(device);
        Ok(answer::CapturedMemNode { graph: cap.graph, node, ptr })
    }

    /// An allocation node whose capture failed goes, with its memory (to the cache) and address.
    fn undo_captured_alloc(&mut self, node: u64, base: u64) {
        self.unmap_to_cache(base);
        if let Some(a) = self.graphs.mem.allocs.remove(&base)
            && let Err(e) = self.vmm_address_free(base, a.size)
        {
            tracing::warn!(session = self.id, "freeing a captured allocation's addresses at {base:#x}: {}", e.message);
        }
        if let Some((graph, n)) = self.graphs.nodes.remove(&node)
            && let Ok((_, d)) = self.graph(graph)
            && self.enter(d).is_ok()
        {
            let _ = call!(self.shared.cuda, cuGraphDestroyNode(n.0));
        }
    }

    /// `cuMemFreeAsync` on a capturing stream: a free node, which CUDA documents must free a graph
    /// allocation (here: one of the capture's graph).
    pub(super) fn capture_mem_free(&mut self, stream: StreamId, ptr: u64) -> Result<answer::GraphNode> {
        let what = "cuMemFreeAsync on a capturing stream";
        let cap = self.active_capture(stream, what)?;
        if !self.graphs.mem.allocs.contains_key(&ptr) {
            return Err(Fail::invalid_value(format!(
                "{what} makes a free node, which frees a graph allocation: {ptr:#x} is not one"
            )));
        }
        let n = self.add_mem_free_node(cap.graph, &cap.deps, ptr)?;
        // The capture goes on after the node, as after any captured work.
        self.update_capture_dependencies(stream, &[n.node], true)?;
        Ok(n)
    }

    /// Refuses what CUDA refuses a graph with memory nodes: a second instantiation.
    pub(super) fn check_mem_instantiate(&self, graph: GraphId) -> Result<()> {
        if self.graphs.mem.has_nodes(graph) && self.graphs.exec_graph_of(graph) {
            return Err(Fail::invalid_value(
                "a graph with memory nodes may have only one instantiation at a time (destroy the first)",
            ));
        }
        Ok(())
    }

    /// Maps the memory of `graph`'s allocation nodes that is not mapped (instantiation, or a
    /// launch after a trim): from the cache, else new memory charged to the tenant. All or
    /// nothing: a refusal unmaps what this call mapped.
    pub(super) fn map_graph_memory(&mut self, graph: GraphId) -> Result<()> {
        let todo: Vec<u64> = self
            .graphs
            .mem
            .allocs
            .iter()
            .filter(|(_, a)| a.graph == graph && a.mapped.is_none())
            .map(|(&b, _)| b)
            .collect();
        let mut done = Vec::new();
        for base in todo {
            if let Err(e) = self.map_one(base) {
                for b in done {
                    self.unmap_to_cache(b);
                }
                let (d, size) = self.graphs.mem.allocs.get(&base).map_or((0, 0), |a| (a.device, a.size));
                self.graphs.mem.note_high(d);
                return Err(Fail::new(
                    e.code,
                    format!("graph {}: its allocation node of {size} bytes at {base:#x}: {}", graph.0, e.message),
                ));
            }
            done.push(base);
        }
        for d in done.iter().filter_map(|b| self.graphs.mem.allocs.get(b).map(|a| a.device)).collect::<HashSet<_>>() {
            self.graphs.mem.note_high(d);
        }
        Ok(())
    }

    fn map_one(&mut self, base: u64) -> Result<()> {
        let (device, size) = {
            let a = &self.graphs.mem.allocs[&base];
            (a.device, a.size)
        };
        let cached = self.graphs.mem.cache.iter().position(|c| c.0 == device && c.1 == size);
        let h = match cached {
            Some(i) => self.graphs.mem.cache.swap_remove(i).2,
            None => self.vmm_create(device, size, 0)?,
        };
        let mut mapped = self.vmm_map(base, size, 0, h).map(|_| ());
        if mapped.is_ok() {
            mapped = self.vmm_set_access(base, size, &[MemAccess { device, flags: READWRITE }]).map(|_| ());
            if mapped.is_err() {
                let _ = self.vmm_unmap(base, size);
            }
        }
        if let Err(e) = mapped {
            self.graphs.mem.cache.push((device, size, h));
            return Err(e);
        }
        if let Some(a) = self.graphs.mem.allocs.get_mut(&base) {
            a.mapped = Some(h);
        }
        Ok(())
    }

    /// Unmaps an allocation's memory into the cache (still charged).
    fn unmap_to_cache(&mut self, base: u64) {
        let Some(a) = self.graphs.mem.allocs.get_mut(&base) else { return };
        let Some(h) = a.mapped.take() else { return };
        let (device, size) = (a.device, a.size);
        if let Err(e) = self.vmm_unmap(base, size) {
            tracing::warn!(session = self.id, "unmapping graph memory at {base:#x}: {}", e.message);
        }
        self.graphs.mem.cache.push((device, size, h));
    }

    /// Maps the graph allocation holding `ptr` (if it is one, unmapped): a memset or memcpy node
    /// naming it is being added, and the backend checks such a node's memory when it is added.
    pub(super) fn map_for_node(&mut self, ptr: u64) -> Result<()> {
        let hit = self.graphs.mem.allocs.range(..=ptr).next_back();
        let Some((&base, a)) = hit.filter(|(b, a)| ptr < **b + a.size && a.mapped.is_none()) else { return Ok(()) };
        let (device, size) = (a.device, a.size);
        self.map_one(base).map_err(|e| {
            Fail::new(e.code, format!("the graph allocation of {size} bytes at {base:#x} a node names: {}", e.message))
        })?;
        self.graphs.mem.note_high(device);
        Ok(())
    }

    /// After instantiation: the memory is mapped, or the instantiation is undone.
    pub(super) fn after_mem_instantiate(&mut self, graph: GraphId, exec: GraphExecId, flags: u64) -> Result<()> {
        if !self.graphs.mem.has_nodes(graph) {
            return Ok(());
        }
        if flags & AUTO_FREE_ON_LAUNCH != 0 {
            self.graphs.mem.auto_free.insert(exec);
        }
        self.map_graph_memory(graph)
    }

    /// Before a launch of `exec` (made from `graph`): the previous launch's unfreed allocations,
    /// then the memory (mapped again after a trim).
    pub(super) fn before_mem_launch(&mut self, exec: GraphExecId, graph: GraphId) -> Result<()> {
        if !self.graphs.mem.has_nodes(graph) {
            return Ok(());
        }
        let auto = self.graphs.mem.auto_free.contains(&exec);
        let unfreed = self.graphs.mem.allocs.values().any(|a| a.graph == graph && a.live);
        if unfreed && !auto {
            return Err(Fail::invalid_value(format!(
                "graph {}: an allocation of its previous launch is not freed (instantiate with \
                 CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, or free it)",
                graph.0
            )));
        }
        self.map_graph_memory(graph)?;
        for a in self.graphs.mem.allocs.values_mut().filter(|a| a.graph == graph && !a.freed_in_graph) {
            a.live = true;
        }
        Ok(())
    }

    /// The instantiated graph is gone: memory no launch left to the application goes to the cache.
    pub(super) fn after_mem_exec_destroy(&mut self, exec: GraphExecId, graph: Option<GraphId>) {
        self.graphs.mem.auto_free.remove(&exec);
        let Some(graph) = graph else { return };
        let idle: Vec<u64> =
            self.graphs.mem.allocs.iter().filter(|(_, a)| a.graph == graph && !a.live).map(|(&b, _)| b).collect();
        for b in idle {
            self.unmap_to_cache(b);
        }
        self.drop_dead_graph_memory(graph);
    }

    pub(super) fn after_mem_graph_destroy(&mut self, graph: GraphId) {
        self.graphs.mem.with_free_nodes.remove(&graph);
        for a in self.graphs.mem.allocs.values_mut().filter(|a| a.graph == graph) {
            a.graph_gone = true;
        }
        self.drop_dead_graph_memory(graph);
    }

    /// Gives back the addresses of a destroyed graph's allocations once nothing uses them.
    fn drop_dead_graph_memory(&mut self, graph: GraphId) {
        if self.graphs.exec_graph_of(graph) {
            return;
        }
        let dead: Vec<(u64, u64)> = self
            .graphs
            .mem
            .allocs
            .iter()
            .filter(|(_, a)| a.graph == graph && a.graph_gone && !a.live)
            .map(|(&b, a)| (b, a.size))
            .collect();
        for (base, size) in dead {
            self.unmap_to_cache(base);
            self.graphs.mem.allocs.remove(&base);
            if let Err(e) = self.vmm_address_free(base, size) {
                tracing::warn!(session = self.id, "freeing graph memory's addresses at {base:#x}: {}", e.message);
            }
        }
    }

    /// `cuMemFree`/`cuMemFreeAsync` of a graph allocation a launch left to the application.
    pub(super) fn graph_mem_free(&mut self, ptr: u64) -> Result<()> {
        let graph = match self.graphs.mem.allocs.get_mut(&ptr) {
            Some(a) if a.live => {
                a.live = false;
                a.graph
            }
            _ => {
                return Err(Fail::invalid_value(format!("{ptr:#x} is not a graph allocation a launch left allocated")));
            }
        };
        if !self.graphs.exec_graph_of(graph) {
            self.unmap_to_cache(ptr);
            self.drop_dead_graph_memory(graph);
        }
        Ok(())
    }

    /// `cuDeviceGraphMemTrim`: once the device is idle, memory no instantiated graph is using
    /// (freed in its graph, or by the application) and the cache go back to the quota.
    pub(super) fn graph_mem_trim(&mut self, device: u32) -> Result<()> {
        self.check_device(device)?;
        self.enter(device)?;
        call!(self.shared.cuda, cuCtxSynchronize())?;
        let idle: Vec<u64> = self
            .graphs
            .mem
            .allocs
            .iter()
            .filter(|(_, a)| a.device == device && a.mapped.is_some() && !a.live)
            .map(|(&b, _)| b)
            .collect();
        for b in idle {
            self.unmap_to_cache(b);
        }
        let (gone, keep): (Vec<_>, Vec<_>) = self.graphs.mem.cache.drain(..).partition(|c| c.0 == device);
        self.graphs.mem.cache = keep;
        for (_, _, h) in gone {
            if let Err(e) = self.vmm_release(h) {
                tracing::warn!(session = self.id, "releasing trimmed graph memory: {}", e.message);
            }
        }
        Ok(())
    }

    /// `cuDeviceGetGraphMemAttribute` (a `CUgraphMem_attribute`), or with `reset` the
    /// `cuDeviceSetGraphMemAttribute` of a high-water mark to the current value.
    pub(super) fn graph_mem_attribute(&mut self, device: u32, attr: u32, reset: bool) -> Result<answer::Attribute> {
        self.check_device(device)?;
        let (used, reserved) = self.graphs.mem.usage(device);
        let high = self.graphs.mem.high.entry(device).or_default();
        if reset {
            match attr {
                1 => high.0 = used,
                3 => high.1 = reserved,
                _ => {
                    return Err(Fail::new(INVALID_VALUE, format!("graph memory attribute {attr} cannot be set")));
                }
            }
            return Ok(answer::Attribute { value: 0 });
        }
        let value = match attr {
            0 => used,
            1 => high.0.max(used),
            2 => reserved,
            3 => high.1.max(reserved),
            _ => return Err(Fail::invalid_value(format!("unknown graph memory attribute {attr}"))),
        };
        Ok(answer::Attribute { value: value as i64 })
    }
}
