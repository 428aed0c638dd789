//! Graph memory: allocation and free nodes (`cuGraphAddMemAllocNode`, `cuGraphAddMemFreeNode`)
//! and the device's graph memory (`cuDeviceGraphMemTrim`, `cuDeviceGet/SetGraphMemAttribute`),
//! over the virtual memory of [`crate::memory::vmm`], with the semantics NVIDIA documents:
//!
//! - The address is reserved when the node is added (rounded up to the granularity) and stays
//!   the same for every instantiation and launch of the graph.
//! - Physical memory is allocated (charged to the device) when the instantiated graph is uploaded
//!   or launched and is not already mapped; past the device's memory, that upload or launch fails
//!   with CUDA_ERROR_OUT_OF_MEMORY.
//! - Memory a free node frees, or that the application freed (`cuMemFree`, `cuMemFreeAsync`) for
//!   an allocation its graph does not free, stays with the instantiated graph for its next
//!   launch; once that is destroyed, it is kept in the device's graph memory, reserved, for
//!   reuse. `cuDeviceGraphMemTrim` (after the device's work) frees what no launch left allocated.
//! - One instantiation of a graph with memory nodes at a time; such a graph cannot be cloned or
//!   be a child graph; a free node frees an allocation node's address of its graph, once; a
//!   relaunch while an allocation of the previous launch is unfreed is CUDA_ERROR_INVALID_VALUE
//!   unless instantiated with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.

use crate::context::Context;
use crate::error::{CuResult, fail};
use crate::memory::vmm::{self, GRANULARITY};
use gpupool_shim::cuda::{CUDA_MEM_ALLOC_NODE_PARAMS, CUmemAccessDesc, CUresult};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// An allocation node's parameters as added (the address written, the descriptors owned).
pub struct AllocParams {
    pub params: CUDA_MEM_ALLOC_NODE_PARAMS,
    _access: Box<[CUmemAccessDesc]>,
}

// SAFETY: `params.accessDescs` points into `_access`, owned by the same value and never written.
unsafe impl Send for AllocParams {}
// SAFETY: as above; the value is immutable.
unsafe impl Sync for AllocParams {}

struct Alloc {
    ctx: Arc<Context>,
    graph: u64,
    size: u64,
    freed_in_graph: bool,
    /// Allocated by a launch and not freed since (allocations their graph does not free).
    live: bool,
    /// The physical allocation handle mapped at the address.
    mapped: Option<u64>,
    graph_gone: bool,
}

#[derive(Default)]
struct State {
    allocs: BTreeMap<u64, Alloc>,
    /// Unmapped physical memory kept for reuse: (device ordinal, size, handle).
    cache: Vec<(i32, u64, u64)>,
    /// Per device ordinal: (used, reserved) high-water marks.
    high: HashMap<i32, (u64, u64)>,
    /// Instantiated graphs of graphs with memory nodes: exec -> (graph, auto-free on launch).
    execs: HashMap<u64, (u64, bool)>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn state() -> MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

fn with<T>(f: impl FnOnce(&mut State) -> T) -> T {
    f(state().get_or_insert_with(State::default))
}

impl State {
    fn has_nodes(&self, graph: u64) -> bool {
        self.allocs.values().any(|a| a.graph == graph)
    }

    fn usage(&self, device: i32) -> (u64, u64) {
        let used = self
            .allocs
            .values()
            .filter(|a| a.ctx.device.ordinal == device && a.mapped.is_some())
            .map(|a| a.size)
            .sum::<u64>();
        let cached: u64 = self.cache.iter().filter(|c| c.0 == device).map(|c| c.1).sum();
        (used, used + cached)
    }

    fn note_high(&mut self, device: i32) {
        let (u, r) = self.usage(device);
        let h = self.high.entry(device).or_default();
        h.0 = h.0.max(u);
        h.1 = h.1.max(r);
    }

    fn map(&mut self, base: u64) -> CuResult<()> {
        let a = &self.allocs[&base];
        if a.mapped.is_some() {
            return Ok(());
        }
        let (ctx, size) = (a.ctx.clone(), a.size);
        let dev = ctx.device.ordinal;
        let h = match self.cache.iter().position(|c| c.0 == dev && c.1 == size) {
            Some(i) => self.cache.swap_remove(i).2,
            None => vmm::create(ctx.device.clone(), size, 0)?,
        };
        let mapped = vmm::get(h).and_then(|phys| ctx.memory.map_range(base, size, 0, phys)).and_then(|()| {
            let rw = gpupool_shim::cuda::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE.0;
            ctx.memory.set_access(base, size, &[(dev, rw)]).inspect_err(|_| {
                let _ = ctx.memory.unmap_range(base, size);
            })
        });
        if let Err(e) = mapped {
            self.cache.push((dev, size, h));
            return Err(e);
        }
        if let Some(a) = self.allocs.get_mut(&base) {
            a.mapped = Some(h);
        }
        Ok(())
    }

    /// Unmaps an allocation into the cache, after the work queued in its context.
    fn unmap(&mut self, base: u64) {
        let Some(a) = self.allocs.get_mut(&base) else { return };
        let Some(h) = a.mapped.take() else { return };
        a.ctx.drain();
        let _ = a.ctx.memory.unmap_range(base, a.size);
        self.cache.push((a.ctx.device.ordinal, a.size, h));
    }

    /// Frees the addresses of a destroyed graph's allocations nothing uses any more.
    fn drop_dead(&mut self, graph: u64) {
        if self.execs.values().any(|e| e.0 == graph) {
            return;
        }
        let dead: Vec<u64> =
            self.allocs.iter().filter(|(_, a)| a.graph == graph && a.graph_gone && !a.live).map(|(&b, _)| b).collect();
        for b in dead {
            self.unmap(b);
            if let Some(a) = self.allocs.remove(&b) {
                let _ = a.ctx.memory.free_range(b, a.size);
            }
        }
    }
}

/// `cuGraphAddMemAllocNode`'s memory: checks the parameters and reserves the address.
pub fn add_alloc(ctx: &Arc<Context>, graph: u64, p: &CUDA_MEM_ALLOC_NODE_PARAMS) -> CuResult<Arc<AllocParams>> {
    use gpupool_shim::cuda::{
        CUmemAccess_flags as F, CUmemAllocationHandleType as H, CUmemAllocationType as T, CUmemLocationType as L,
    };
    let props = &p.poolProps;
    if props.allocType != T::CU_MEM_ALLOCATION_TYPE_PINNED || props.location.type_ != L::CU_MEM_LOCATION_TYPE_DEVICE {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "graph memory is pinned memory on a device".into());
    }
    if props.location.id != ctx.device.ordinal {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("the pool is on device {}, the graph's context on {}", props.location.id, ctx.device.ordinal)
        });
    }
    if props.handleTypes != H::CU_MEM_HANDLE_TYPE_NONE {
        return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || "graph memory cannot be exported".into());
    }
    if p.bytesize == 0 || (p.accessDescCount > 0 && p.accessDescs.is_null()) {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "bytesize 0, or access descriptors missing".into());
    }
    let access: Box<[CUmemAccessDesc]> = if p.accessDescCount == 0 {
        Box::new([])
    } else {
        // SAFETY: `accessDescCount` descriptors at `accessDescs`, as the API documents.
        unsafe { std::slice::from_raw_parts(p.accessDescs, p.accessDescCount) }.into()
    };
    for a in access.iter() {
        if a.location.type_ != L::CU_MEM_LOCATION_TYPE_DEVICE || a.location.id != ctx.device.ordinal {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "peer access to graph memory is not simulated".into());
        }
        if a.flags != F::CU_MEM_ACCESS_FLAGS_PROT_READWRITE {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "the allocating device's access is read-write".into());
        }
    }
    let Some(size) = (p.bytesize as u64).checked_next_multiple_of(GRANULARITY) else {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "bytesize overflows".into());
    };
    let base = ctx.memory.reserve_range(size, 0, 0)?;
    let a =
        Alloc { ctx: ctx.clone(), graph, size, freed_in_graph: false, live: false, mapped: None, graph_gone: false };
    with(|s| s.allocs.insert(base, a));
    let mut params = *p;
    params.dptr = base;
    params.accessDescs = if access.is_empty() { std::ptr::null() } else { access.as_ptr() };
    Ok(Arc::new(AllocParams { params, _access: access }))
}

/// `cuMemAllocAsync`/`cuMemAllocFromPoolAsync` on a capturing stream: an allocation node of the
/// capture's graph after its dependencies, which it then replaces (CUDA's stream-ordered
/// allocation during capture); the answer is its address. The node has the device's default pool
/// properties, whichever pool was asked.
pub fn capture_alloc(ctx: &Arc<Context>, cap: &mut crate::stream::ActiveCapture, bytes: usize) -> CuResult<u64> {
    use gpupool_shim::cuda::{CUmemAllocationType as T, CUmemLocation, CUmemLocationType as L, CUmemPoolProps};
    let p = CUDA_MEM_ALLOC_NODE_PARAMS {
        poolProps: CUmemPoolProps {
            allocType: T::CU_MEM_ALLOCATION_TYPE_PINNED,
            location: CUmemLocation { type_: L::CU_MEM_LOCATION_TYPE_DEVICE, id: ctx.device.ordinal },
            ..Default::default()
        },
        accessDescs: std::ptr::null(),
        accessDescCount: 0,
        bytesize: bytes,
        dptr: 0,
    };
    let a = add_alloc(ctx, cap.handle, &p)?;
    let base = a.params.dptr;
    match cap.graph.add(crate::graph::Op::MemAlloc(a), cap.deps.clone()) {
        Ok(i) => {
            cap.deps = vec![i];
            Ok(base)
        }
        Err(e) => {
            undo_alloc(base);
            Err(e)
        }
    }
}

/// `cuMemFreeAsync` on a capturing stream: a free node, which CUDA documents must free a graph
/// allocation (here one of the capture's graph).
pub fn capture_free(cap: &mut crate::stream::ActiveCapture, dptr: u64) -> CuResult<()> {
    add_free(cap.handle, dptr, false)?;
    let i = cap.graph.add(crate::graph::Op::MemFree(dptr), cap.deps.clone())?;
    add_free(cap.handle, dptr, true)?;
    cap.deps = vec![i];
    Ok(())
}

/// Forgets an allocation whose node could not be added.
pub fn undo_alloc(base: u64) {
    with(|s| {
        if let Some(a) = s.allocs.remove(&base) {
            let _ = a.ctx.memory.free_range(base, a.size);
        }
    })
}

/// `cuGraphAddMemFreeNode`: `dptr` must be an allocation node's address of `graph`, not yet
/// freed; with `commit`, it is then freed by the graph.
pub fn add_free(graph: u64, dptr: u64, commit: bool) -> CuResult<()> {
    with(|s| match s.allocs.get_mut(&dptr) {
        Some(a) if a.graph == graph && !a.freed_in_graph => {
            a.freed_in_graph = commit;
            Ok(())
        }
        Some(a) if a.graph == graph => {
            fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{dptr:#x} is freed twice in the graph"))
        }
        Some(_) => fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || {
            format!("{dptr:#x} is another graph's allocation (the simulator frees it only in its own graph)")
        }),
        None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("{dptr:#x} is not a graph allocation (an address an allocation node returned)")
        }),
    })
}

/// Whether `graph` has memory nodes (every free node frees one of its allocations).
pub fn has_nodes(graph: u64) -> bool {
    with(|s| s.has_nodes(graph))
}

/// Whether `[p, p + len)` lies in a graph allocation (mapped or not).
pub fn holds(p: u64, len: u64) -> bool {
    with(|s| {
        s.allocs.range(..=p).next_back().is_some_and(|(&b, a)| p.checked_add(len).is_some_and(|end| end <= b + a.size))
    })
}

pub fn check_instantiate(graph: u64) -> CuResult<()> {
    if with(|s| s.has_nodes(graph) && s.execs.values().any(|e| e.0 == graph)) {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            "a graph with memory nodes has one instantiation at a time".into()
        });
    }
    Ok(())
}

pub fn instantiated(graph: u64, exec: u64, flags: u64) {
    with(|s| {
        if s.has_nodes(graph) {
            s.execs.insert(exec, (graph, flags & 1 != 0));
        }
    })
}

/// Before an upload (`launch` false) or a launch: the memory is allocated where it is not.
pub fn before_run(exec: u64, launch: bool) -> CuResult<()> {
    with(|s| {
        let Some(&(graph, auto_free)) = s.execs.get(&exec) else { return Ok(()) };
        if launch && !auto_free && s.allocs.values().any(|a| a.graph == graph && a.live) {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                "an allocation of the graph's previous launch is not freed".into()
            });
        }
        let todo: Vec<u64> = s.allocs.iter().filter(|(_, a)| a.graph == graph).map(|(&b, _)| b).collect();
        let mut devices = Vec::new();
        for b in todo {
            s.map(b)?;
            devices.push(s.allocs[&b].ctx.device.ordinal);
        }
        for d in devices {
            s.note_high(d);
        }
        if launch {
            for a in s.allocs.values_mut().filter(|a| a.graph == graph && !a.freed_in_graph) {
                a.live = true;
            }
        }
        Ok(())
    })
}

pub fn exec_destroyed(exec: u64) {
    with(|s| {
        let Some((graph, _)) = s.execs.remove(&exec) else { return };
        let idle: Vec<u64> = s.allocs.iter().filter(|(_, a)| a.graph == graph && !a.live).map(|(&b, _)| b).collect();
        for b in idle {
            s.unmap(b);
        }
        s.drop_dead(graph);
    })
}

pub fn graph_destroyed(graph: u64) {
    with(|s| {
        for a in s.allocs.values_mut().filter(|a| a.graph == graph) {
            a.graph_gone = true;
        }
        s.drop_dead(graph);
    })
}

/// `cuMemFree`/`cuMemFreeAsync` of a graph allocation a launch left to the application:
/// `Ok(false)` if `ptr` is no graph allocation.
pub fn app_free(ptr: u64) -> CuResult<bool> {
    with(|s| {
        let graph = match s.allocs.get_mut(&ptr) {
            None => return Ok(false),
            Some(a) if a.live => {
                a.live = false;
                a.graph
            }
            Some(_) => {
                return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                    format!("{ptr:#x} is a graph allocation no launch left allocated")
                });
            }
        };
        if !s.execs.values().any(|e| e.0 == graph) {
            s.unmap(ptr);
            s.drop_dead(graph);
        }
        Ok(true)
    })
}

/// `cuDeviceGraphMemTrim`: after the device's work, what no launch left allocated is unmapped
/// and, with the kept memory, freed.
pub fn trim(device: i32) {
    let gone = with(|s| {
        let idle: Vec<u64> = s
            .allocs
            .iter()
            .filter(|(_, a)| a.ctx.device.ordinal == device && a.mapped.is_some() && !a.live)
            .map(|(&b, _)| b)
            .collect();
        for b in idle {
            s.unmap(b);
        }
        let (gone, keep): (Vec<_>, Vec<_>) = s.cache.drain(..).partition(|c| c.0 == device);
        s.cache = keep;
        gone
    });
    for (_, _, h) in gone {
        let _ = vmm::release(h);
    }
}

/// A `CUgraphMem_attribute` (0..=3) of `device`, or with `reset` a high-water mark reset.
pub fn attribute(device: i32, attr: u32, reset: bool) -> CuResult<u64> {
    with(|s| {
        let (used, reserved) = s.usage(device);
        let h = s.high.entry(device).or_default();
        match (attr, reset) {
            (1, true) => h.0 = used,
            (3, true) => h.1 = reserved,
            (0, false) => return Ok(used),
            (1, false) => return Ok(h.0.max(used)),
            (2, false) => return Ok(reserved),
            (3, false) => return Ok(h.1.max(reserved)),
            _ => {
                return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                    format!("graph memory attribute {attr} cannot be {}", if reset { "set" } else { "read" })
                });
            }
        }
        Ok(0)
    })
}
