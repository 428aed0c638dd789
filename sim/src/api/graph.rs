//! Stream capture, graphs built node by node, instantiation and launch ([`crate::graph`]).

use super::{DefaultStream, out, resolve_stream, resolve_stream_quiet, stream_variants};
use crate::context::current_healthy;
use crate::driver::initialized;
use crate::error::{CuResult, cuda_entry, fail};
use crate::graph::{Graph, GraphExec, HostFn, KernelLaunch, MemcpyParams, MemsetParams, Node, Op, Step};
use crate::stream::{Capture, StreamKind, Work};
use gpupool_shim::cuda::{
    CUDA_HOST_NODE_PARAMS, CUDA_KERNEL_NODE_PARAMS, CUDA_MEM_ALLOC_NODE_PARAMS, CUDA_MEMCPY3D, CUDA_MEMSET_NODE_PARAMS,
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUgraph, CUgraphEdgeData, CUgraphExec, CUgraphExecUpdateResult,
    CUgraphExecUpdateResultInfo, CUgraphMem_attribute, CUgraphNode, CUgraphNodeType, CUresult, CUstream,
    CUstreamCaptureMode, CUstreamCaptureStatus,
};
use std::os::raw::{c_char, c_uint, c_void};
use std::sync::Arc;

/// Capture ids: unique in the process, as CUDA's are.
static NEXT_CAPTURE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Begins a capture into `into` (`cuStreamBeginCaptureToGraph`: an existing graph and the nodes
/// the first captured node depends on) or into a new graph.
fn begin(
    h: CUstream,
    mode: CUstreamCaptureMode,
    d: DefaultStream,
    into: Option<(CUgraph, Vec<usize>)>,
) -> CuResult<()> {
    let driver = initialized()?;
    let (ctx, s) = resolve_stream_quiet(driver, h, d)?;
    ctx.check_sticky()?;
    if mode.0 > CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED.0 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown capture mode {}", mode.0));
    }
    if s.kind == StreamKind::Legacy {
        return fail(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, || {
            "the legacy default stream cannot be captured".into()
        });
    }
    let mut cap = s.capture.lock().unwrap_or_else(|e| e.into_inner());
    if !matches!(*cap, Capture::None) {
        return fail(CUresult::CUDA_ERROR_ILLEGAL_STATE, || "the stream is already capturing".into());
    }
    let (graph, handle, owned, deps) = match into {
        Some((g, deps)) => {
            let graph = graph_of(g)?;
            if graph.ctx_handle != ctx.handle() {
                return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "the graph belongs to another context".into());
            }
            (graph, g as u64, false, deps)
        }
        None => {
            let graph = Arc::new(Graph::new(ctx.handle(), Vec::new()));
            let handle = driver.graphs.insert(graph.clone());
            (graph, handle, true, Vec::new())
        }
    };
    let id = NEXT_CAPTURE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let group = crate::capture::CaptureGroup::new(graph, handle, owned, id, &s);
    *cap = Capture::Active(crate::stream::ActiveCapture { group, deps, dep_handles: Vec::new() });
    let thread = std::thread::current().id();
    live_captures().push(LiveCapture { thread, mode, stream: Arc::downgrade(&s) });
    Ok(())
}

thread_local! {
    /// The thread's capture interaction mode (`cuThreadExchangeStreamCaptureMode`).
    static INTERACTION: std::cell::Cell<CUstreamCaptureMode> =
        const { std::cell::Cell::new(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL) };
}

/// A capture under way: the thread that began it, its mode and its stream.
struct LiveCapture {
    thread: std::thread::ThreadId,
    mode: CUstreamCaptureMode,
    stream: std::sync::Weak<crate::stream::Stream>,
}

static LIVE_CAPTURES: std::sync::Mutex<Vec<LiveCapture>> = std::sync::Mutex::new(Vec::new());

fn live_captures() -> std::sync::MutexGuard<'static, Vec<LiveCapture>> {
    LIVE_CAPTURES.lock().unwrap_or_else(|e| e.into_inner())
}

/// A potentially unsafe call (allocating or freeing memory) by the calling thread, which CUDA
/// forbids while a capture is under way that is not relaxed and began on this thread, or (in the
/// thread's default global interaction mode) a global-mode capture of another thread. The call
/// fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture that forbade it.
pub(super) fn unsafe_call(what: &str) -> CuResult<()> {
    let interaction = INTERACTION.with(std::cell::Cell::get);
    if interaction == CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED {
        return Ok(());
    }
    let me = std::thread::current().id();
    let others = interaction == CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL;
    // The streams first, then their capture locks: a capture begins with its stream's lock held
    // and this list's taken after it.
    let candidates: Vec<Arc<crate::stream::Stream>> = {
        let mut live = live_captures();
        live.retain(|c| c.stream.strong_count() > 0);
        live.iter()
            .filter(|c| {
                let mine = c.thread == me && c.mode != CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
                mine || (others && c.thread != me && c.mode == CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
            })
            .filter_map(|c| c.stream.upgrade())
            .collect()
    };
    let forbidding =
        candidates.into_iter().find(|s| s.capture_status() == CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE);
    match forbidding {
        Some(s) => s.refuse_if_capturing(&format!("{what} during a stream capture (its mode forbids it)")),
        None => Ok(()),
    }
}

/// `cuThreadExchangeStreamCaptureMode`: the calling thread's interaction mode becomes `*mode`,
/// and `*mode` the previous one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuThreadExchangeStreamCaptureMode(mode: *mut CUstreamCaptureMode) -> CUresult {
    cuda_entry(|| {
        initialized()?;
        if mode.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null mode".into());
        }
        // SAFETY: non-null; the API's contract makes it point to a CUstreamCaptureMode.
        let new = unsafe { mode.read_unaligned() };
        if new.0 > CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED.0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown capture mode {}", new.0));
        }
        let old = INTERACTION.with(|m| m.replace(new));
        // SAFETY: as above, and writable: the previous mode is written back there.
        unsafe { mode.write_unaligned(old) };
        Ok(())
    })
}

fn begin_capture(h: CUstream, mode: CUstreamCaptureMode, d: DefaultStream) -> CuResult<()> {
    begin(h, mode, d, None)
}

/// Edge data other than the default (type 0, ports 0) is not simulated.
pub(super) fn default_edges(edges: *const CUgraphEdgeData, n: usize) -> CuResult<()> {
    if !edges.is_null() && n > 0 {
        // SAFETY: `n` edge records at `edges`, as the API documents.
        let list = unsafe { std::slice::from_raw_parts(edges, n) };
        if list.iter().any(|e| e.type_ != 0 || e.from_port != 0 || e.to_port != 0) {
            return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || "programmatic edges are not simulated".into());
        }
    }
    Ok(())
}

fn begin_capture_to_graph(
    h: CUstream,
    graph: CUgraph,
    deps: *const CUgraphNode,
    edges: *const CUgraphEdgeData,
    n: usize,
    mode: CUstreamCaptureMode,
    d: DefaultStream,
) -> CuResult<()> {
    default_edges(edges, n)?;
    graph_of(graph)?;
    let deps = deps_of(graph as u64, deps, n)?;
    begin(h, mode, d, Some((graph, deps)))
}

fn end_capture(h: CUstream, pgraph: *mut CUgraph, d: DefaultStream) -> CuResult<()> {
    let driver = initialized()?;
    let (_, s) = resolve_stream_quiet(driver, h, d)?;
    if pgraph.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null graph output pointer".into());
    }
    // A capture that is not relaxed ends on the thread that began it; the capture goes on.
    let me = std::thread::current().id();
    let wrong_thread = live_captures().iter().any(|c| {
        std::ptr::eq(c.stream.as_ptr(), Arc::as_ptr(&s))
            && c.thread != me
            && c.mode != CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED
    });
    if wrong_thread {
        return fail(CUresult::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, || {
            "cuStreamEndCapture on another thread than the one that began a capture that is not relaxed".into()
        });
    }
    match crate::capture::end(&s) {
        Ok(handle) => {
            live_captures().retain(|c| !std::ptr::eq(c.stream.as_ptr(), Arc::as_ptr(&s)));
            out(pgraph, handle as CUgraph)
        }
        Err(e) => {
            if !s.is_capturing() {
                live_captures().retain(|c| !std::ptr::eq(c.stream.as_ptr(), Arc::as_ptr(&s)));
            }
            out(pgraph, std::ptr::null_mut())?;
            Err(e)
        }
    }
}

/// `cuStreamGetCaptureInfo_v2/_v3`: the status, and while capturing the capture's id, its graph
/// and its current dependencies (an array valid until the next call on the stream).
#[allow(clippy::too_many_arguments)]
fn capture_info(
    h: CUstream,
    status: *mut CUstreamCaptureStatus,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const CUgraphEdgeData,
    n: *mut usize,
    d: DefaultStream,
) -> CuResult<()> {
    let (_, s) = resolve_stream_quiet(initialized()?, h, d)?;
    if status.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null status pointer".into());
    }
    let mut cap = s.capture.lock().unwrap_or_else(|e| e.into_inner());
    let put = |p: *mut u64, v: u64| if p.is_null() { Ok(()) } else { out(p, v) };
    match &mut *cap {
        Capture::Active(a) if !a.is_invalidated() => {
            a.dep_handles = a.deps.iter().map(|&i| node_handle(a.handle, i)).collect();
            out(status, CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE)?;
            put(id, a.id)?;
            if !graph.is_null() {
                out(graph, a.handle as CUgraph)?;
            }
            if !deps.is_null() {
                out(deps, a.dep_handles.as_ptr())?;
            }
            if !edges.is_null() {
                out(edges, std::ptr::null())?;
            }
            put(n.cast(), a.dep_handles.len() as u64)
        }
        Capture::Active(_) => out(status, CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED),
        Capture::None => out(status, CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE),
    }
}

fn capture_info_v2(
    h: CUstream,
    status: *mut CUstreamCaptureStatus,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    n: *mut usize,
    d: DefaultStream,
) -> CuResult<()> {
    capture_info(h, status, id, graph, deps, std::ptr::null_mut(), n, d)
}

#[allow(clippy::too_many_arguments)]
fn capture_info_v3(
    h: CUstream,
    status: *mut CUstreamCaptureStatus,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const CUgraphEdgeData,
    n: *mut usize,
    d: DefaultStream,
) -> CuResult<()> {
    capture_info(h, status, id, graph, deps, edges, n, d)
}

/// `cuStreamUpdateCaptureDependencies`: `flags` 0 adds `deps` to the capture's dependencies,
/// 1 replaces them; the nodes must be of the capture's graph.
fn update_deps(h: CUstream, deps: *mut CUgraphNode, n: usize, flags: c_uint, d: DefaultStream) -> CuResult<()> {
    let (_, s) = resolve_stream_quiet(initialized()?, h, d)?;
    if flags > 1 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown flags {flags}"));
    }
    let mut cap = s.capture.lock().unwrap_or_else(|e| e.into_inner());
    let Capture::Active(a) = &mut *cap else {
        return fail(CUresult::CUDA_ERROR_ILLEGAL_STATE, || "the stream is not capturing".into());
    };
    if a.is_invalidated() {
        return crate::capture::invalidated();
    }
    let list = deps_of(a.handle, deps.cast_const(), n)?;
    if list.iter().any(|&i| !Graph::live(&a.graph.nodes(), i)) {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "a dependency is not a node of the capture's graph".into());
    }
    if flags == 1 {
        a.deps.clear();
    }
    for i in list {
        if !a.deps.contains(&i) {
            a.deps.push(i);
        }
    }
    Ok(())
}

fn update_deps_v2(
    h: CUstream,
    deps: *mut CUgraphNode,
    edges: *const CUgraphEdgeData,
    n: usize,
    flags: c_uint,
    d: DefaultStream,
) -> CuResult<()> {
    default_edges(edges, n)?;
    update_deps(h, deps, n, flags, d)
}

fn graph_launch(exec: CUgraphExec, h: CUstream, d: DefaultStream) -> CuResult<()> {
    let driver = initialized()?;
    let Some(g) = driver.graph_execs.get(exec as u64) else {
        return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{exec:?} is not an instantiated graph"));
    };
    let (ctx, s) = resolve_stream(driver, h, d)?;
    ctx.check_sticky()?;
    if g.ctx_handle != ctx.handle() {
        return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || "the graph belongs to another context".into());
    }
    crate::graph_mem::before_run(exec as u64, true)?;
    if !g.cond_handles.is_empty() {
        // The defaults are applied where the launch starts, in stream order.
        let handles = g.cond_handles.clone();
        s.enqueue(
            &ctx,
            Work::Control,
            Vec::new(),
            Arc::new(move || {
                crate::graph_cond::assign_defaults(&handles);
                Ok(())
            }),
        );
    }
    for step in g.steps() {
        match step {
            Step::Run(work, job) => {
                s.enqueue(&ctx, work, Vec::new(), job);
            }
            Step::Cond(c) => {
                s.enqueue(&ctx, Work::Kernel, Vec::new(), Arc::new(move || c.run()));
            }
            // Recorded where the stream gets to it, as a record queued there would be.
            Step::Record(e) => e.record(&ctx, &s),
            Step::Wait(e) => {
                if let Some(pos) = e.position() {
                    s.enqueue(&ctx, Work::Control, vec![pos], Arc::new(|| Ok(())));
                }
            }
        }
    }
    Ok(())
}

/// Uploading prepares nothing here (work is not staged on a CPU device); the driver's checks stay.
fn graph_upload(exec: CUgraphExec, h: CUstream, d: DefaultStream) -> CuResult<()> {
    let driver = initialized()?;
    let Some(g) = driver.graph_execs.get(exec as u64) else {
        return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{exec:?} is not an instantiated graph"));
    };
    let (ctx, _) = resolve_stream(driver, h, d)?;
    ctx.check_sticky()?;
    if g.ctx_handle != ctx.handle() {
        return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || "the graph belongs to another context".into());
    }
    crate::graph_mem::before_run(exec as u64, false)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphCreate(pgraph: *mut CUgraph, flags: c_uint) -> CUresult {
    cuda_entry(|| {
        let ctx = current_healthy()?;
        if flags != 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "cuGraphCreate flags must be 0".into());
        }
        let h = initialized()?.graphs.insert(Arc::new(Graph::new(ctx.handle(), Vec::new())));
        out(pgraph, h as CUgraph)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphDestroy(graph: CUgraph) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        let g = graph_of(graph)?;
        if g.embedded.get() == Some(&(graph as u64)) {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!(
                    "{graph:?} is a child graph node's graph (cuGraphChildGraphNodeGetGraph): it goes with the node"
                )
            });
        }
        driver.graphs.remove(graph as u64);
        forget_embedded(&g.nodes());
        crate::graph_mem::graph_destroyed(graph as u64);
        crate::graph_cond::graph_destroyed(graph as u64);
        Ok(())
    })
}

/// The handles given out for the child graphs in `nodes` go with them.
fn forget_embedded(nodes: &[Node]) {
    let mut gone = Vec::new();
    Graph::embedded_handles(nodes, &mut gone);
    if let Ok(d) = initialized() {
        for h in gone {
            d.graphs.remove(h);
        }
    }
}

/// `cuGraphConditionalHandleCreate`: a handle for conditional nodes of `graph` (its context, or
/// `ctx` if given, which must be the graph's).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphConditionalHandleCreate(
    out_handle: *mut u64,
    graph: CUgraph,
    ctx: gpupool_shim::cuda::CUcontext,
    default_value: c_uint,
    flags: c_uint,
) -> CUresult {
    cuda_entry(|| {
        let g = graph_of(graph)?;
        if !ctx.is_null() && ctx as u64 != g.ctx_handle {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "the context is not the graph's".into());
        }
        if flags > 1 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("flags {flags:#x}: 0 or CU_GRAPH_COND_ASSIGN_DEFAULT")
            });
        }
        if out_handle.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null handle output pointer".into());
        }
        out(out_handle, crate::graph_cond::create(graph as u64, g.ctx_handle, default_value, flags == 1))
    })
}

/// A conditional node (`cuGraphAddNode` of `CU_GRAPH_NODE_TYPE_CONDITIONAL`): its body graphs are
/// made here, their handles written to `phGraph_out` (an array the node owns).
pub(super) unsafe extern "C" fn add_conditional_node(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *mut gpupool_shim::cuda::CUDA_CONDITIONAL_NODE_PARAMS,
) -> CUresult {
    cuda_entry(|| {
        let p = super::read(params.cast_const(), "conditional node parameters")?;
        let g = graph_of(graph)?;
        let handle = crate::graph_cond::lookup(p.handle)?;
        if handle.graph != graph as u64 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "the handle was made for another graph".into());
        }
        if !p.ctx.is_null() && p.ctx as u64 != g.ctx_handle {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "the context is not the graph's".into());
        }
        let size_ok = match p.type_.0 {
            crate::graph_cond::IF => p.size == 1 || p.size == 2,
            crate::graph_cond::WHILE => p.size == 1,
            crate::graph_cond::SWITCH => (1..=1024).contains(&p.size),
            _ => false,
        };
        if !size_ok {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!(
                    "conditional type {} with {} bodies (IF: 1 or 2, WHILE: 1, SWITCH: 1 to 1024)",
                    p.type_.0, p.size
                )
            });
        }
        let driver = initialized()?;
        let bodies: Vec<Arc<Graph>> = (0..p.size).map(|_| Arc::new(Graph::new(g.ctx_handle, Vec::new()))).collect();
        let handles_out: Box<[u64]> = bodies
            .iter()
            .map(|b| {
                let h = driver.graphs.insert(b.clone());
                let _ = b.embedded.set(h);
                h
            })
            .collect();
        let out_ptr = handles_out.as_ptr() as *mut CUgraph;
        let c = crate::graph::CondNode { handle: p.handle, kind: p.type_.0, bodies, handles_out };
        let gone: Vec<u64> = c.handles_out.to_vec();
        if let Err(e) = add_node(node, graph, deps, n, Op::Conditional(Arc::new(c))) {
            for h in gone {
                driver.graphs.remove(h);
            }
            return Err(e);
        }
        // SAFETY: non-null (read above); the driver writes `phGraph_out` there.
        unsafe { std::ptr::addr_of_mut!((*params).phGraph_out).write_unaligned(out_ptr) };
        Ok(())
    })
}

/// `cuGraphChildGraphNodeGetGraph`: the node's own graph (not a copy): what is added to it is
/// the node's. Its handle lives as long as the node.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphChildGraphNodeGetGraph(node: CUgraphNode, graph_out: *mut CUgraph) -> CUresult {
    cuda_entry(|| {
        let (g, i) = node_in_graph(node)?;
        let child = match &g.nodes()[i].op {
            Op::Child(c) => c.clone(),
            _ => return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{node:?} is not a child graph node")),
        };
        let driver = initialized()?;
        let h = *child.embedded.get_or_init(|| driver.graphs.insert(child.clone()));
        out(graph_out, h as CUgraph)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(pexec: *mut CUgraphExec, graph: CUgraph, flags: u64) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        if pexec.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null output pointer".into());
        }
        let Some(g) = driver.graphs.get(graph as u64) else {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{graph:?} is not a graph"));
        };
        crate::graph_mem::check_instantiate(graph as u64)?;
        // Other flags (upload, device launch, priority) change nothing here.
        let h = driver.graph_execs.insert(Arc::new(GraphExec::new(&g, graph as u64, flags)?));
        crate::graph_mem::instantiated(graph as u64, h, flags);
        out(pexec, h as CUgraphExec)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecGetFlags(exec: CUgraphExec, flags: *mut u64) -> CUresult {
    cuda_entry(|| match initialized()?.graph_execs.get(exec as u64) {
        Some(e) => out(flags, e.flags),
        None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{exec:?} is not an instantiated graph")),
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: CUgraphExec) -> CUresult {
    cuda_entry(|| match initialized()?.graph_execs.remove(exec as u64) {
        Some(_) => {
            crate::graph_mem::exec_destroyed(exec as u64);
            Ok(())
        }
        None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{exec:?} is not an instantiated graph")),
    })
}

stream_variants! {
    cuStreamBeginCapture_v2 / cuStreamBeginCapture_v2_ptsz => begin_capture(h: CUstream, mode: CUstreamCaptureMode);
    cuStreamBeginCaptureToGraph / cuStreamBeginCaptureToGraph_ptsz => begin_capture_to_graph(h: CUstream,
        graph: CUgraph, deps: *const CUgraphNode, edges: *const CUgraphEdgeData, n: usize, mode: CUstreamCaptureMode);
    cuStreamGetCaptureInfo_v2 / cuStreamGetCaptureInfo_v2_ptsz => capture_info_v2(h: CUstream,
        status: *mut CUstreamCaptureStatus, id: *mut u64, graph: *mut CUgraph, deps: *mut *const CUgraphNode,
        n: *mut usize);
    cuStreamGetCaptureInfo_v3 / cuStreamGetCaptureInfo_v3_ptsz => capture_info_v3(h: CUstream,
        status: *mut CUstreamCaptureStatus, id: *mut u64, graph: *mut CUgraph, deps: *mut *const CUgraphNode,
        edges: *mut *const CUgraphEdgeData, n: *mut usize);
    cuStreamUpdateCaptureDependencies / cuStreamUpdateCaptureDependencies_ptsz => update_deps(h: CUstream,
        deps: *mut CUgraphNode, n: usize, flags: c_uint);
    cuStreamUpdateCaptureDependencies_v2 / cuStreamUpdateCaptureDependencies_v2_ptsz => update_deps_v2(h: CUstream,
        deps: *mut CUgraphNode, edges: *const CUgraphEdgeData, n: usize, flags: c_uint);
    cuStreamEndCapture / cuStreamEndCapture_ptsz => end_capture(h: CUstream, pgraph: *mut CUgraph);
    cuGraphLaunch / cuGraphLaunch_ptsz => graph_launch(exec: CUgraphExec, h: CUstream);
    cuGraphUpload / cuGraphUpload_ptsz => graph_upload(exec: CUgraphExec, h: CUstream);
}

// ---- graphs built node by node ----

/// A node's handle: its graph's handle with the node's index (plus one) in the top 15 bits (graph
/// handles stay below 2^48).
fn node_handle(graph: u64, index: usize) -> CUgraphNode {
    (graph | ((index as u64 + 1) << 48)) as CUgraphNode
}

/// The graph and index a node handle names, if it is a node of `graph`.
fn node_of(graph: u64, node: CUgraphNode) -> CuResult<usize> {
    let h = node as u64;
    match (h & ((1 << 48) - 1) == graph, (h >> 48) as usize) {
        (true, i) if i > 0 => Ok(i - 1),
        _ => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{node:?} is not a node of this graph")),
    }
}

fn graph_of(graph: CUgraph) -> CuResult<Arc<Graph>> {
    match initialized()?.graphs.get(graph as u64) {
        Some(g) => Ok(g),
        None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{graph:?} is not a graph")),
    }
}

/// The node indices of `deps[..n]`.
fn deps_of(graph: u64, deps: *const CUgraphNode, n: usize) -> CuResult<Vec<usize>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if deps.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null dependency list".into());
    }
    // SAFETY: the caller passes `n` node handles at `deps`, as the API documents.
    let list = unsafe { std::slice::from_raw_parts(deps, n) };
    list.iter().map(|&d| node_of(graph, d)).collect()
}

/// Adds `op` to `graph` after `deps` and writes the new node's handle.
fn add_node(out_node: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize, op: Op) -> CuResult<()> {
    if out_node.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null node output pointer".into());
    }
    let g = graph_of(graph)?;
    let deps = deps_of(graph as u64, deps, n)?;
    let index = g.add(op, deps)?;
    out(out_node, node_handle(graph as u64, index))
}

/// The context of a graph (its nodes run there).
fn graph_ctx(g: &Graph) -> CuResult<Arc<crate::context::Context>> {
    let ctx = current_healthy()?;
    if ctx.handle() != g.ctx_handle {
        return fail(CUresult::CUDA_ERROR_INVALID_CONTEXT, || "the graph belongs to another context".into());
    }
    Ok(ctx)
}

/// A kernel node's launch from its parameters, checked as a launch is.
fn kernel_launch(g: &Graph, p: &CUDA_KERNEL_NODE_PARAMS) -> CuResult<(KernelLaunch, crate::stream::Job)> {
    let ctx = graph_ctx(g)?;
    if !p.kern.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "kernel nodes take a CUfunction, not a CUkernel".into());
    }
    let f = super::module::function(p.func)?;
    if f.ctx_handle != g.ctx_handle || (!p.ctx.is_null() && p.ctx as u64 != g.ctx_handle) {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "the function belongs to another context".into());
    }
    let params = super::launch::pack_params(&f, p.kernelParams, p.extra)?;
    let cfg = crate::launch::LaunchConfig {
        grid: [p.gridDimX, p.gridDimY, p.gridDimZ],
        block: [p.blockDimX, p.blockDimY, p.blockDimZ],
        dynamic_shared: p.sharedMemBytes,
        cooperative: false,
    };
    let job = crate::launch::kernel_job(&ctx, f.clone(), cfg, params.clone())?;
    let args = crate::graph::KernelArgs::new(&f, params);
    Ok((KernelLaunch { handle: p.func as u64, f, cfg, args }, job))
}

/// `cuGraphKernelNodeGetParams`: the function, configuration and a `kernelParams` array owned by
/// the node (valid until it is destroyed or its parameters are set), as NVIDIA documents.
fn kernel_node_get(node: CUgraphNode) -> CuResult<CUDA_KERNEL_NODE_PARAMS> {
    let Op::Kernel(k, _) = node_op(node)? else {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{node:?} is not a kernel node"));
    };
    let (g, _) = node_in_graph(node)?;
    // `k` is a copy of the node's launch sharing its `args`, so the array is the node's own.
    Ok(CUDA_KERNEL_NODE_PARAMS {
        func: k.handle as gpupool_shim::cuda::CUfunction,
        gridDimX: k.cfg.grid[0],
        gridDimY: k.cfg.grid[1],
        gridDimZ: k.cfg.grid[2],
        blockDimX: k.cfg.block[0],
        blockDimY: k.cfg.block[1],
        blockDimZ: k.cfg.block[2],
        sharedMemBytes: k.cfg.dynamic_shared,
        kernelParams: k.args.array(),
        extra: std::ptr::null_mut(),
        kern: std::ptr::null_mut(),
        ctx: g.ctx_handle as CUcontext,
    })
}

/// `cuGraphKernelNodeSetParams`: the graph's node gets the new launch (checked as a new node's);
/// graphs instantiated from it before keep what they had.
fn kernel_node_set(node: CUgraphNode, p: &CUDA_KERNEL_NODE_PARAMS) -> CuResult<()> {
    let (g, i) = node_in_graph(node)?;
    if !matches!(g.nodes()[i].op, Op::Kernel(..)) {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{node:?} is not a kernel node"));
    }
    let (launch, job) = kernel_launch(&g, p)?;
    g.nodes()[i].op = Op::Kernel(launch, job);
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphKernelNodeGetParams_v2(
    node: CUgraphNode,
    params: *mut CUDA_KERNEL_NODE_PARAMS,
) -> CUresult {
    cuda_entry(|| out(params, kernel_node_get(node)?))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphKernelNodeSetParams_v2(
    node: CUgraphNode,
    params: *const CUDA_KERNEL_NODE_PARAMS,
) -> CUresult {
    cuda_entry(|| kernel_node_set(node, &super::read(params, "kernel node parameters")?))
}

/// The CUDA 10-11 entry point: the same, with the shorter `CUDA_KERNEL_NODE_PARAMS_v1`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphKernelNodeGetParams(
    node: CUgraphNode,
    params: *mut gpupool_shim::cuda::CUDA_KERNEL_NODE_PARAMS_v1,
) -> CUresult {
    cuda_entry(|| {
        let p = kernel_node_get(node)?;
        out(params, gpupool_abi::launch::kernel_node_params_to_v1(&p, p.func))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphKernelNodeSetParams(
    node: CUgraphNode,
    params: *const gpupool_shim::cuda::CUDA_KERNEL_NODE_PARAMS_v1,
) -> CUresult {
    cuda_entry(|| {
        let p = super::read(params, "kernel node parameters")?;
        kernel_node_set(node, &gpupool_abi::launch::kernel_node_params_from_v1(&p))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddKernelNode_v2(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *const CUDA_KERNEL_NODE_PARAMS,
) -> CUresult {
    cuda_entry(|| {
        let p = super::read(params, "kernel node parameters")?;
        let g = graph_of(graph)?;
        let (launch, job) = kernel_launch(&g, &p)?;
        add_node(node, graph, deps, n, Op::Kernel(launch, job))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddMemsetNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *const CUDA_MEMSET_NODE_PARAMS,
    ctx: CUcontext,
) -> CUresult {
    cuda_entry(|| {
        let p = super::read(params, "memset node parameters")?;
        let g = graph_of(graph)?;
        let c = graph_ctx(&g)?;
        if !ctx.is_null() && ctx as u64 != g.ctx_handle {
            return fail(CUresult::CUDA_ERROR_INVALID_CONTEXT, || "the memset's context is not the graph's".into());
        }
        let job = memset_node_job(&c, &p)?;
        add_node(node, graph, deps, n, Op::Memset(p, job))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddMemcpyNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *const CUDA_MEMCPY3D,
    ctx: CUcontext,
) -> CUresult {
    cuda_entry(|| {
        let p = super::read(params, "memcpy node parameters")?;
        let g = graph_of(graph)?;
        let c = graph_ctx(&g)?;
        if !ctx.is_null() && ctx as u64 != g.ctx_handle {
            return fail(CUresult::CUDA_ERROR_INVALID_CONTEXT, || "the copy's context is not the graph's".into());
        }
        let job = memcpy_node_job(&c, &p)?;
        add_node(node, graph, deps, n, Op::Memcpy(Arc::new(MemcpyParams(p)), job))
    })
}

/// A memset node's work in context `c`, its parameters checked (memory of graph allocations is
/// checked when the graph runs, since it is allocated then).
pub(super) fn memset_node_job(c: &Arc<crate::context::Context>, p: &MemsetParams) -> CuResult<crate::stream::Job> {
    if ![1, 2, 4].contains(&p.elementSize) || p.width == 0 || p.height == 0 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            "memset nodes take an element size of 1, 2 or 4 and a non-empty extent".into()
        });
    }
    let rows = (p.height as u64).saturating_sub(1).saturating_mul(p.pitch as u64);
    let span = rows.saturating_add(p.width as u64 * u64::from(p.elementSize));
    let p = *p;
    Ok(if crate::graph_mem::holds(p.dst, span) {
        let c = c.clone();
        Arc::new(move || {
            match super::copy::memset_job(&c, p.dst, p.pitch, p.value, p.elementSize.into(), p.width, p.height)? {
                Some(j) => j(),
                None => Ok(()),
            }
        })
    } else {
        super::copy::memset_job(c, p.dst, p.pitch, p.value, p.elementSize.into(), p.width, p.height)?
            .unwrap_or_else(|| Arc::new(|| Ok(())))
    })
}

/// A memcpy node's work in context `c`, checked as [`memset_node_job`] checks a memset.
pub(super) fn memcpy_node_job(c: &Arc<crate::context::Context>, p: &CUDA_MEMCPY3D) -> CuResult<crate::stream::Job> {
    let device_end = |t: gpupool_shim::cuda::CUmemorytype, d: u64| {
        matches!(t, gpupool_shim::cuda::CUmemorytype::CU_MEMORYTYPE_DEVICE) && crate::graph_mem::holds(d, 1)
    };
    Ok(if device_end(p.srcMemoryType, p.srcDevice) || device_end(p.dstMemoryType, p.dstDevice) {
        let (c, p) = (c.clone(), MemcpyParams(*p));
        Arc::new(move || match super::copy::memcpy_node_job(&c, p.get())? {
            Some(j) => j(),
            None => Ok(()),
        })
    } else {
        super::copy::memcpy_node_job(c, p)?.unwrap_or_else(|| Arc::new(|| Ok(())))
    })
}

/// The graph and index of a memset (`memset`) or memcpy node.
fn param_node(node: CUgraphNode, memset: bool) -> CuResult<(Arc<Graph>, usize)> {
    let (g, i) = node_in_graph(node)?;
    let ok = matches!((&g.nodes()[i].op, memset), (Op::Memset(..), true) | (Op::Memcpy(..), false));
    if !ok {
        let kind = if memset { "memset" } else { "memcpy" };
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{node:?} is not a {kind} node"));
    }
    Ok((g, i))
}

/// The instantiated graph `exec`, current in its context, and the index of `node`, a node of
/// `kind` (a type name) in the graph it was made from.
fn exec_node(exec: CUgraphExec, node: CUgraphNode, kind: &str) -> CuResult<(Arc<GraphExec>, usize)> {
    let Some(e) = initialized()?.graph_execs.get(exec as u64) else {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{exec:?} is not an instantiated graph"));
    };
    let index = node_of(e.graph, node)?;
    if e.node_type(index) != Some(kind) {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{node:?} is not a {kind} node of the graph"));
    }
    Ok((e, index))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphMemsetNodeGetParams(
    node: CUgraphNode,
    params: *mut CUDA_MEMSET_NODE_PARAMS,
) -> CUresult {
    cuda_entry(|| {
        let (g, i) = param_node(node, true)?;
        let p = match &g.nodes()[i].op {
            Op::Memset(p, _) => *p,
            _ => return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{node:?} is not a memset node")),
        };
        out(params, p)
    })
}

/// Changes the graph's node; graphs instantiated from it before keep what they had.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphMemsetNodeSetParams(
    node: CUgraphNode,
    params: *const CUDA_MEMSET_NODE_PARAMS,
) -> CUresult {
    cuda_entry(|| {
        let p = super::read(params, "memset node parameters")?;
        let (g, i) = param_node(node, true)?;
        let job = memset_node_job(&graph_ctx(&g)?, &p)?;
        g.nodes()[i].op = Op::Memset(p, job);
        Ok(())
    })
}

/// NVIDIA: both the instantiated and the new memset must be one-dimensional; the value and the
/// address may change.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecMemsetNodeSetParams(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *const CUDA_MEMSET_NODE_PARAMS,
    ctx: CUcontext,
) -> CUresult {
    cuda_entry(|| {
        let (e, index) = exec_node(exec, node, "MEMSET")?;
        let p = super::read(params, "memset node parameters")?;
        if !ctx.is_null() && ctx as u64 != e.ctx_handle {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "the memset's context is not the graph's".into());
        }
        if p.height != 1 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                "an instantiated graph's memset can only be changed to a one-dimensional memset".into()
            });
        }
        let job = memset_node_job(&graph_ctx(&Graph::new(e.ctx_handle, Vec::new()))?, &p)?;
        e.set_job(index, Work::Memory, job)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphMemcpyNodeGetParams(node: CUgraphNode, params: *mut CUDA_MEMCPY3D) -> CUresult {
    cuda_entry(|| {
        let (g, i) = param_node(node, false)?;
        let p = match &g.nodes()[i].op {
            Op::Memcpy(p, _) => p.0,
            _ => return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{node:?} is not a memcpy node")),
        };
        out(params, p)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphMemcpyNodeSetParams(node: CUgraphNode, params: *const CUDA_MEMCPY3D) -> CUresult {
    cuda_entry(|| {
        let p = super::read(params, "memcpy node parameters")?;
        let (g, i) = param_node(node, false)?;
        let job = memcpy_node_job(&graph_ctx(&g)?, &p)?;
        g.nodes()[i].op = Op::Memcpy(Arc::new(MemcpyParams(p)), job);
        Ok(())
    })
}

/// NVIDIA: INVALID_VALUE when the new operands are multidimensional (more than one row or an
/// array end).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecMemcpyNodeSetParams(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *const CUDA_MEMCPY3D,
    ctx: CUcontext,
) -> CUresult {
    cuda_entry(|| {
        const CU_MEMORYTYPE_ARRAY: gpupool_shim::cuda::CUmemorytype =
            gpupool_shim::cuda::CUmemorytype::CU_MEMORYTYPE_ARRAY;
        let (e, index) = exec_node(exec, node, "MEMCPY")?;
        let p = super::read(params, "memcpy node parameters")?;
        if !ctx.is_null() && ctx as u64 != e.ctx_handle {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "the copy's context is not the graph's".into());
        }
        if p.Height > 1
            || p.Depth > 1
            || p.srcMemoryType == CU_MEMORYTYPE_ARRAY
            || p.dstMemoryType == CU_MEMORYTYPE_ARRAY
        {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                "an instantiated graph's copy can only be changed to a one-dimensional copy".into()
            });
        }
        let job = memcpy_node_job(&graph_ctx(&Graph::new(e.ctx_handle, Vec::new()))?, &p)?;
        e.set_job(index, Work::Memory, job)
    })
}

/// A host node's parameters, checked: the function must not be NULL.
fn host_fn(params: *const CUDA_HOST_NODE_PARAMS) -> CuResult<HostFn> {
    let p = super::read(params, "host node parameters")?;
    match p.fn_ {
        Some(f) => Ok(HostFn { f: f as usize, user: p.userData as usize }),
        None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null host function".into()),
    }
}

/// The graph a node handle names and the node's index there (see [`node_handle`]).
fn node_in_graph(node: CUgraphNode) -> CuResult<(Arc<Graph>, usize)> {
    let graph = node as u64 & ((1 << 48) - 1);
    let g = graph_of(graph as CUgraph)?;
    let i = node_of(graph, node)?;
    if !Graph::live(&g.nodes(), i) {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{node:?} is not a node"));
    }
    Ok((g, i))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddHostNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *const CUDA_HOST_NODE_PARAMS,
) -> CUresult {
    cuda_entry(|| {
        let h = host_fn(params)?;
        add_node(node, graph, deps, n, Op::Host(h, h.job()))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphHostNodeGetParams(node: CUgraphNode, params: *mut CUDA_HOST_NODE_PARAMS) -> CUresult {
    cuda_entry(|| {
        let (g, i) = node_in_graph(node)?;
        let Op::Host(h, _) = g.nodes()[i].op else {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{node:?} is not a host node"));
        };
        // SAFETY: `h.f` came from a non-null CUhostFn.
        let f: unsafe extern "C" fn(*mut c_void) = unsafe { std::mem::transmute(h.f) };
        out(params, CUDA_HOST_NODE_PARAMS { fn_: Some(f), userData: h.user as *mut c_void })
    })
}

/// Changes the graph's node; graphs instantiated from it before keep what they had.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphHostNodeSetParams(node: CUgraphNode, params: *const CUDA_HOST_NODE_PARAMS) -> CUresult {
    cuda_entry(|| {
        let h = host_fn(params)?;
        let (g, i) = node_in_graph(node)?;
        let mut nodes = g.nodes();
        if !matches!(nodes[i].op, Op::Host(..)) {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{node:?} is not a host node"));
        }
        nodes[i].op = Op::Host(h, h.job());
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecHostNodeSetParams(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *const CUDA_HOST_NODE_PARAMS,
) -> CUresult {
    cuda_entry(|| {
        let Some(e) = initialized()?.graph_execs.get(exec as u64) else {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{exec:?} is not an instantiated graph"));
        };
        let index = node_of(e.graph, node)?;
        let h = host_fn(params)?;
        e.set_job(index, Work::Control, h.job())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddEmptyNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
) -> CUresult {
    cuda_entry(|| add_node(node, graph, deps, n, Op::Empty))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddChildGraphNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    child: CUgraph,
) -> CUresult {
    cuda_entry(|| {
        if child == graph {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "a graph cannot be its own child".into());
        }
        let c = graph_of(child)?;
        if crate::graph_mem::has_nodes(child as u64) {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "a graph with memory nodes cannot be a child".into());
        }
        if c.ctx_handle != graph_of(graph)?.ctx_handle {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "the child graph belongs to another context".into());
        }
        if Graph::has_conditionals(&c.nodes()) {
            return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || {
                "a graph with conditional nodes is not added as a child graph".into()
            });
        }
        let nodes = Graph::copy_nodes(&c.nodes());
        add_node(node, graph, deps, n, Op::Child(Arc::new(Graph::new(c.ctx_handle, nodes))))
    })
}

fn event_of(event: CUevent) -> CuResult<Arc<crate::event::Event>> {
    match initialized()?.events.get(event as u64) {
        Some(e) => Ok(e),
        None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{event:?} is not a live event")),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddEventRecordNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    event: CUevent,
) -> CUresult {
    cuda_entry(|| add_node(node, graph, deps, n, Op::EventRecord(event_of(event)?)))
}

/// The event of event node `node` (`record`: an event record node, else a wait node).
fn node_event(node: CUgraphNode, record: bool) -> CuResult<u64> {
    let (g, i) = node_in_graph(node)?;
    match (&g.nodes()[i].op, record) {
        (Op::EventRecord(e), true) | (Op::EventWait(e), false) => Ok(e.handle.get().copied().unwrap_or(0)),
        _ => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("{node:?} is not an event {} node", if record { "record" } else { "wait" })
        }),
    }
}

/// Gives the graph's event node `node` the event `event` (of the graph's context); graphs
/// instantiated before keep theirs.
fn set_node_event(node: CUgraphNode, event: CUevent, record: bool) -> CuResult<()> {
    node_event(node, record)?;
    let e = event_of(event)?;
    let (g, i) = node_in_graph(node)?;
    if e.ctx_handle != g.ctx_handle {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            "the event belongs to another context than the graph".into()
        });
    }
    g.nodes()[i].op = if record { Op::EventRecord(e) } else { Op::EventWait(e) };
    Ok(())
}

fn exec_set_node_event(exec: CUgraphExec, node: CUgraphNode, event: CUevent, record: bool) -> CuResult<()> {
    let Some(x) = initialized()?.graph_execs.get(exec as u64) else {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{exec:?} is not an instantiated graph"));
    };
    let index = node_of(x.graph, node)?;
    let e = event_of(event)?;
    if e.ctx_handle != x.ctx_handle {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            "the event belongs to another context than the graph".into()
        });
    }
    x.set_event(index, record, e)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphEventRecordNodeGetEvent(node: CUgraphNode, event_out: *mut CUevent) -> CUresult {
    cuda_entry(|| out(event_out, node_event(node, true)? as CUevent))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphEventWaitNodeGetEvent(node: CUgraphNode, event_out: *mut CUevent) -> CUresult {
    cuda_entry(|| out(event_out, node_event(node, false)? as CUevent))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphEventRecordNodeSetEvent(node: CUgraphNode, event: CUevent) -> CUresult {
    cuda_entry(|| set_node_event(node, event, true))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphEventWaitNodeSetEvent(node: CUgraphNode, event: CUevent) -> CUresult {
    cuda_entry(|| set_node_event(node, event, false))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecEventRecordNodeSetEvent(
    exec: CUgraphExec,
    node: CUgraphNode,
    event: CUevent,
) -> CUresult {
    cuda_entry(|| exec_set_node_event(exec, node, event, true))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecEventWaitNodeSetEvent(
    exec: CUgraphExec,
    node: CUgraphNode,
    event: CUevent,
) -> CUresult {
    cuda_entry(|| exec_set_node_event(exec, node, event, false))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddEventWaitNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    event: CUevent,
) -> CUresult {
    cuda_entry(|| add_node(node, graph, deps, n, Op::EventWait(event_of(event)?)))
}

fn add_dependencies(graph: CUgraph, from: *const CUgraphNode, to: *const CUgraphNode, n: usize) -> CuResult<()> {
    let g = graph_of(graph)?;
    let from = deps_of(graph as u64, from, n)?;
    let to = deps_of(graph as u64, to, n)?;
    let mut nodes = g.nodes();
    // All or nothing: every edge is checked before any is added.
    for (k, (&a, &b)) in from.iter().zip(&to).enumerate() {
        let twice = from[..k].iter().zip(&to[..k]).any(|(&x, &y)| (x, y) == (a, b));
        if !Graph::live(&nodes, a) || !Graph::live(&nodes, b) {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "a node is not in the graph".into());
        }
        if a == b || nodes[b].deps.contains(&a) || twice {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                "the dependency exists or joins a node to itself".into()
            });
        }
    }
    for (a, b) in from.into_iter().zip(to) {
        nodes[b].deps.push(a);
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddDependencies(
    graph: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    n: usize,
) -> CUresult {
    cuda_entry(|| add_dependencies(graph, from, to, n))
}

/// Edge data other than the default (type 0, ports 0) is not simulated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddDependencies_v2(
    graph: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    edges: *const CUgraphEdgeData,
    n: usize,
) -> CUresult {
    cuda_entry(|| {
        if !edges.is_null() && n > 0 {
            // SAFETY: `n` edge records at `edges`, as the API documents.
            let list = unsafe { std::slice::from_raw_parts(edges, n) };
            if list.iter().any(|e| e.type_ != 0 || e.from_port != 0 || e.to_port != 0) {
                return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || "programmatic edges are not simulated".into());
            }
        }
        add_dependencies(graph, from, to, n)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecKernelNodeSetParams_v2(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *const CUDA_KERNEL_NODE_PARAMS,
) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        let Some(e) = driver.graph_execs.get(exec as u64) else {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{exec:?} is not an instantiated graph"));
        };
        let index = node_of(e.graph, node)?;
        let p = super::read(params, "kernel node parameters")?;
        // The launch is checked in the graph's context, which the exec shares.
        let g = Graph::new(e.ctx_handle, Vec::new());
        let (_, job) = kernel_launch(&g, &p)?;
        e.set_job(index, Work::Kernel, job)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphClone(pclone: *mut CUgraph, graph: CUgraph) -> CUresult {
    cuda_entry(|| {
        if pclone.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null output pointer".into());
        }
        let g = graph_of(graph)?;
        if crate::graph_mem::has_nodes(graph as u64) {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "a graph with memory nodes cannot be cloned".into());
        }
        if Graph::has_conditionals(&g.nodes()) {
            return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || "a graph with conditional nodes is not cloned".into());
        }
        let copy = Graph::clone_of(&g, graph as u64);
        out(pclone, initialized()?.graphs.insert(Arc::new(copy)) as CUgraph)
    })
}

/// Writes the graph in Graphviz's DOT language: a node per graph node (its type, and for kernels
/// the function's name), an edge per dependency, child graphs as clusters.
fn dot(nodes: &[Node], prefix: &str, out: &mut String) {
    use std::fmt::Write;
    for (i, x) in nodes.iter().enumerate() {
        let id = format!("{prefix}node_{i}");
        match &x.op {
            Op::Removed => continue,
            Op::Child(c) => {
                let _ = writeln!(out, "subgraph cluster_{id} {{\nlabel=\"{id} CHILD_GRAPH\";");
                dot(&c.nodes(), &format!("{id}_"), out);
                let _ = writeln!(out, "}}");
                let _ = writeln!(out, "\"{id}\" [shape=point];");
            }
            op => {
                let detail = match op {
                    Op::Kernel(k, _) => format!("\\n{}", k.f.name.to_string_lossy()),
                    _ => String::new(),
                };
                let _ = writeln!(out, "\"{id}\" [label=\"{}{detail}\"];", op.type_name());
            }
        }
        for &d in &x.deps {
            let _ = writeln!(out, "\"{prefix}node_{d}\" -> \"{id}\";");
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphDebugDotPrint(graph: CUgraph, path: *const c_char, flags: c_uint) -> CUresult {
    cuda_entry(|| {
        let g = graph_of(graph)?;
        if path.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null path".into());
        }
        // SAFETY: a NUL-terminated path, as the API documents.
        let path = unsafe { std::ffi::CStr::from_ptr(path) }.to_string_lossy().into_owned();
        let _ = flags; // verbosity: the simulator's one level of detail
        let mut text = String::from("digraph dot {\n");
        dot(&g.nodes(), "", &mut text);
        text.push_str("}\n");
        std::fs::write(&path, text).or_else(|e| {
            fail(CUresult::CUDA_ERROR_OPERATING_SYSTEM, || format!("cuGraphDebugDotPrint cannot write {path}: {e}"))
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphExecUpdate_v2(
    exec: CUgraphExec,
    graph: CUgraph,
    info: *mut CUgraphExecUpdateResultInfo,
) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        let Some(e) = driver.graph_execs.get(exec as u64) else {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{exec:?} is not an instantiated graph"));
        };
        let g = graph_of(graph)?;
        let mem = crate::graph_mem::has_nodes(graph as u64) || crate::graph_mem::has_nodes(e.graph);
        let not_supported = crate::graph::UpdateError { result: 6, node: None, from: None };
        let (result, node, from) = match if mem { Err(not_supported) } else { e.update(&g) } {
            Ok(()) => (0, None, None),
            Err(why) => (why.result, why.node, why.from),
        };
        if !info.is_null() {
            let handle = |n: Option<usize>| n.map_or(std::ptr::null_mut(), |i| node_handle(graph as u64, i));
            let r = CUgraphExecUpdateResultInfo {
                result: CUgraphExecUpdateResult(result),
                errorNode: handle(node),
                errorFromNode: handle(from),
            };
            out(info, r)?;
        }
        if result != 0 {
            return fail(CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, || {
                format!("the graph cannot update this instantiated graph (CUgraphExecUpdateResult {result})")
            });
        }
        Ok(())
    })
}

// ---- graph memory nodes ([`crate::graph_mem`]) ----

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddMemAllocNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *mut CUDA_MEM_ALLOC_NODE_PARAMS,
) -> CUresult {
    cuda_entry(|| {
        let p = super::read(params.cast_const(), "allocation node parameters")?;
        let g = graph_of(graph)?;
        if g.embedded.get().is_some() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "a child graph cannot hold memory nodes".into());
        }
        let ctx = graph_ctx(&g)?;
        if node.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null node output pointer".into());
        }
        let a = crate::graph_mem::add_alloc(&ctx, graph as u64, &p)?;
        let base = a.params.dptr;
        if let Err(e) = add_node(node, graph, deps, n, Op::MemAlloc(a)) {
            crate::graph_mem::undo_alloc(base);
            return Err(e);
        }
        // SAFETY: non-null (read above) and writable, as the API documents: the address goes there.
        unsafe { std::ptr::addr_of_mut!((*params).dptr).write_unaligned(base) };
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphAddMemFreeNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    dptr: CUdeviceptr,
) -> CUresult {
    cuda_entry(|| {
        graph_of(graph)?;
        crate::graph_mem::add_free(graph as u64, dptr, false)?;
        add_node(node, graph, deps, n, Op::MemFree(dptr))?;
        crate::graph_mem::add_free(graph as u64, dptr, true)
    })
}

/// The operation of the node `node` names.
fn node_op(node: CUgraphNode) -> CuResult<Op> {
    let (g, i) = node_in_graph(node)?;
    Ok(g.nodes()[i].op.clone())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphMemAllocNodeGetParams(
    node: CUgraphNode,
    out_p: *mut CUDA_MEM_ALLOC_NODE_PARAMS,
) -> CUresult {
    cuda_entry(|| match node_op(node)? {
        Op::MemAlloc(a) => out(out_p, a.params),
        _ => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "not an allocation node".into()),
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphMemFreeNodeGetParams(node: CUgraphNode, dptr: *mut CUdeviceptr) -> CUresult {
    cuda_entry(|| match node_op(node)? {
        Op::MemFree(p) => out(dptr, p),
        _ => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "not a free node".into()),
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGraphMemTrim(device: CUdevice) -> CUresult {
    cuda_entry(|| {
        let d = initialized()?.device(device)?.ordinal;
        crate::graph_mem::trim(d);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetGraphMemAttribute(
    device: CUdevice,
    attr: CUgraphMem_attribute,
    value: *mut c_void,
) -> CUresult {
    cuda_entry(|| {
        let d = initialized()?.device(device)?.ordinal;
        let v = crate::graph_mem::attribute(d, attr.0, false)?;
        out(value.cast::<u64>(), v)
    })
}

/// Only a high-water mark can be set, and only to 0 (reset to the current amount).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceSetGraphMemAttribute(
    device: CUdevice,
    attr: CUgraphMem_attribute,
    value: *mut c_void,
) -> CUresult {
    cuda_entry(|| {
        let d = initialized()?.device(device)?.ordinal;
        let v = super::read(value.cast_const().cast::<u64>(), "attribute value")?;
        if v != 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "a high-water mark can only be reset with 0".into());
        }
        crate::graph_mem::attribute(d, attr.0, true).map(|_| ())
    })
}

// ---- topology queries ----

/// The `CUgraphNodeType` of an operation. A captured memset or copy is a memset or memcpy node with
/// its parameters; only a captured copy to or from an array is a bare `Work::Memory` step,
/// answered as MEMCPY.
fn node_type(op: &Op) -> CUgraphNodeType {
    use CUgraphNodeType as T;
    match op {
        Op::Captured(Work::Kernel, _) | Op::Kernel(..) => T::CU_GRAPH_NODE_TYPE_KERNEL,
        Op::Captured(Work::Memory, _) | Op::Memcpy(..) => T::CU_GRAPH_NODE_TYPE_MEMCPY,
        Op::Memset(..) => T::CU_GRAPH_NODE_TYPE_MEMSET,
        Op::Captured(Work::Control, _) | Op::Host(..) => T::CU_GRAPH_NODE_TYPE_HOST,
        Op::EventRecord(_) => T::CU_GRAPH_NODE_TYPE_EVENT_RECORD,
        Op::EventWait(_) => T::CU_GRAPH_NODE_TYPE_WAIT_EVENT,
        Op::Child(_) => T::CU_GRAPH_NODE_TYPE_GRAPH,
        Op::Conditional(_) => T::CU_GRAPH_NODE_TYPE_CONDITIONAL,
        Op::Empty => T::CU_GRAPH_NODE_TYPE_EMPTY,
        Op::MemAlloc(_) => T::CU_GRAPH_NODE_TYPE_MEM_ALLOC,
        Op::MemFree(_) => T::CU_GRAPH_NODE_TYPE_MEM_FREE,
        // Never asked: node_in_graph refuses a destroyed node.
        Op::Removed => T::CU_GRAPH_NODE_TYPE_EMPTY,
    }
}

/// Writes a node list as the topology queries do: with `out_list` NULL only the count; else up to
/// `*count` entries (NULL past the end of the list) and the number written.
fn list_out(out_list: *mut CUgraphNode, count: *mut usize, items: Vec<CUgraphNode>) -> CuResult<()> {
    if count.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null count".into());
    }
    if out_list.is_null() {
        return out(count, items.len());
    }
    // SAFETY: non-null; the caller's count.
    let room = unsafe { count.read_unaligned() };
    for i in 0..room {
        // SAFETY: the caller passes `*count` writable entries, as the API documents.
        unsafe { out_list.add(i).write_unaligned(items.get(i).copied().unwrap_or(std::ptr::null_mut())) };
    }
    out(count, room.min(items.len()))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphNodeGetType(node: CUgraphNode, t: *mut CUgraphNodeType) -> CUresult {
    cuda_entry(|| out(t, node_type(&node_op(node)?)))
}

/// `cuGraphGetEdges`: with `from` and `to` NULL only the count; else up to `*n` edges (NULL past the
/// end, as NVIDIA documents) and the number written. One of the two NULL is INVALID_VALUE.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphGetEdges(
    graph: CUgraph,
    from: *mut CUgraphNode,
    to: *mut CUgraphNode,
    n: *mut usize,
) -> CUresult {
    cuda_entry(|| {
        let g = graph_of(graph)?;
        let h = |i| node_handle(graph as u64, i);
        let edges: Vec<_> =
            g.nodes().iter().enumerate().flat_map(|(j, x)| x.deps.iter().map(move |&d| (d, j))).collect();
        if from.is_null() != to.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "from and to must both be given, or neither".into());
        }
        if n.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null count".into());
        }
        // SAFETY: non-null; the caller's count (read before list_out rewrites it).
        let room = if from.is_null() { 0 } else { unsafe { n.read_unaligned() } };
        list_out(from, n, edges.iter().map(|e| h(e.0)).collect())?;
        if !to.is_null() {
            out(n, room)?;
            list_out(to, n, edges.iter().map(|e| h(e.1)).collect())?;
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphGetNodes(graph: CUgraph, nodes: *mut CUgraphNode, n: *mut usize) -> CUresult {
    cuda_entry(|| {
        let g = graph_of(graph)?;
        let live: Vec<_> = {
            let all = g.nodes();
            (0..all.len()).filter(|&i| Graph::live(&all, i)).map(|i| node_handle(graph as u64, i)).collect()
        };
        list_out(nodes, n, live)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphGetRootNodes(graph: CUgraph, nodes: *mut CUgraphNode, n: *mut usize) -> CUresult {
    cuda_entry(|| {
        let g = graph_of(graph)?;
        let roots = g
            .nodes()
            .iter()
            .enumerate()
            .filter(|(_, x)| x.deps.is_empty() && !matches!(x.op, Op::Removed))
            .map(|(i, _)| node_handle(graph as u64, i))
            .collect();
        list_out(nodes, n, roots)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphNodeGetDependencies(
    node: CUgraphNode,
    deps: *mut CUgraphNode,
    n: *mut usize,
) -> CUresult {
    cuda_entry(|| {
        let (g, i) = node_in_graph(node)?;
        let graph = node as u64 & ((1 << 48) - 1);
        let list = g.nodes()[i].deps.iter().map(|&d| node_handle(graph, d)).collect();
        list_out(deps, n, list)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphNodeGetDependentNodes(
    node: CUgraphNode,
    dependents: *mut CUgraphNode,
    n: *mut usize,
) -> CUresult {
    cuda_entry(|| {
        let (g, i) = node_in_graph(node)?;
        let graph = node as u64 & ((1 << 48) - 1);
        let list = g
            .nodes()
            .iter()
            .enumerate()
            .filter(|(_, x)| x.deps.contains(&i))
            .map(|(j, _)| node_handle(graph, j))
            .collect();
        list_out(dependents, n, list)
    })
}

// ---- editing: destroying nodes and edges, finding a node in a clone ----

/// NVIDIA: "Nodes which belong to a graph which contains allocation or free nodes cannot be
/// destroyed", nor their dependencies removed.
fn no_mem_nodes(graph: u64) -> CuResult<()> {
    if crate::graph_mem::has_nodes(graph) {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "a graph with memory nodes cannot be edited".into());
    }
    Ok(())
}

/// `cuGraphDestroyNode`: the node leaves its graph with every edge to or from it; graphs
/// instantiated before keep it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphDestroyNode(node: CUgraphNode) -> CUresult {
    cuda_entry(|| {
        let (g, i) = node_in_graph(node)?;
        no_mem_nodes(node as u64 & ((1 << 48) - 1))?;
        let child = g.nodes()[i].clone();
        g.destroy_node(i)?;
        forget_embedded(std::slice::from_ref(&child));
        Ok(())
    })
}

fn remove_dependencies(graph: CUgraph, from: *const CUgraphNode, to: *const CUgraphNode, n: usize) -> CuResult<()> {
    let g = graph_of(graph)?;
    no_mem_nodes(graph as u64)?;
    let from = deps_of(graph as u64, from, n)?;
    let to = deps_of(graph as u64, to, n)?;
    g.remove_deps(&from, &to)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphRemoveDependencies(
    graph: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    n: usize,
) -> CUresult {
    cuda_entry(|| remove_dependencies(graph, from, to, n))
}

/// Every edge here has the default data (type 0, ports 0), so other edge data names an edge that
/// does not exist: CUDA_ERROR_INVALID_VALUE, as NVIDIA documents for one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphRemoveDependencies_v2(
    graph: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    edges: *const CUgraphEdgeData,
    n: usize,
) -> CUresult {
    cuda_entry(|| {
        if default_edges(edges, n).is_err() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "no edge with that edge data exists".into());
        }
        remove_dependencies(graph, from, to, n)
    })
}

/// `cuGraphNodeFindInClone`: the node of `clone` (made by `cuGraphClone`) that copies `original`,
/// a node its original graph had when cloned; CUDA_ERROR_INVALID_VALUE if there is none (another
/// graph's node, a node added later, or the clone's copy destroyed).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGraphNodeFindInClone(
    pnode: *mut CUgraphNode,
    original: CUgraphNode,
    clone: CUgraph,
) -> CUresult {
    cuda_entry(|| {
        if pnode.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null output pointer".into());
        }
        let c = graph_of(clone)?;
        let Some((from, len)) = c.origin else {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "the graph is not a clone".into());
        };
        let i = node_of(from, original)?;
        if i >= len || !Graph::live(&c.nodes(), i) {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "the node has no copy in the clone".into());
        }
        out(pnode, node_handle(clone as u64, i))
    })
}
