//! Stream capture and graphs through the pool: the daemon holds the captures, graphs and
//! instantiated graphs (pool-daemon's `daemon/graph.rs`); handles here are its ids, made with
//! [`make`] (kinds [`Kind::Graph`] and [`Kind::GraphExec`]), so another session's or a forged
//! handle is refused by the daemon, never trusted here.
//!
//! The daemon's backend captures in relaxed mode (a global-mode capture there would reach other
//! tenants' threads), so the capture mode the application asked for is enforced here, with CUDA's
//! rule: a thread may not make a potentially unsafe call (allocating or freeing memory) while it
//! has a capture under way that is not relaxed, or while any other thread of the process has a
//! global-mode one. Such a call fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates
//! the capture that forbade it, as the driver does. So does a copy through pageable memory on a
//! capturing stream: the pool cannot read the process's pageable memory when the graph runs.
//!
//! Graph memory: `cuMemAllocAsync` and `cuMemFreeAsync` on a capturing stream are allocation and
//! free nodes of the capture's graph ([`super::graph_mem::captured_alloc`]), as in CUDA.

use super::DefaultStream;
use super::stream::resolve;
use crate::client::{self, Client, Kind, endpoint_of, make};
use crate::util::{R, log};
use gpupool_protocol::ops::{GraphExecId, GraphId, KernelNode, KernelParams, answer};
use gpupool_protocol::{Request, StreamId};
use gpupool_shim::cuda::{
    CUDA_HOST_NODE_PARAMS, CUDA_KERNEL_NODE_PARAMS, CUDA_MEMCPY3D, CUDA_MEMSET_NODE_PARAMS, CUcontext, CUevent,
    CUfunction, CUgraph, CUgraphEdgeData, CUgraphExec, CUgraphExecUpdateResult, CUgraphExecUpdateResultInfo,
    CUgraphNode, CUresult, CUstream, CUstreamCaptureMode, CUstreamCaptureStatus,
};
use std::os::raw::{c_char, c_uint};
use std::sync::Mutex;
use std::thread::ThreadId;

/// A capture begun by this process.
struct Capture {
    stream: StreamId,
    endpoint: usize,
    thread: ThreadId,
    mode: CUstreamCaptureMode,
    /// `cuStreamBeginCaptureToGraph`'s: the graph outlives an invalidated capture.
    into_graph: bool,
    /// Unique in the process: what a captured event names.
    serial: u64,
    /// Streams that joined it by waiting for an event recorded in it (CUDA's cross-stream capture;
    /// `cuStreamEndCapture` on the origin takes them out of it).
    joined: Vec<StreamId>,
}

impl Capture {
    fn has(&self, stream: StreamId, endpoint: usize) -> bool {
        self.endpoint == endpoint && (self.stream == stream || self.joined.contains(&stream))
    }
}

static CAPTURES: Mutex<Vec<Capture>> = Mutex::new(Vec::new());

fn captures() -> std::sync::MutexGuard<'static, Vec<Capture>> {
    CAPTURES.lock().unwrap_or_else(|e| e.into_inner())
}

static NEXT_SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Captures begun and not ended, and captured events noted: while both are 0 (a process that
/// does not capture), an event record or a stream wait takes neither lock below.
static LIVE_CAPTURES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static CAPTURED_EVENT_COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn none_in_capture() -> bool {
    use std::sync::atomic::Ordering::Acquire;
    LIVE_CAPTURES.load(Acquire) == 0 && CAPTURED_EVENT_COUNT.load(Acquire) == 0
}

fn count(counter: &std::sync::atomic::AtomicUsize, up: bool) {
    use std::sync::atomic::Ordering::AcqRel;
    if up {
        counter.fetch_add(1, AcqRel);
    } else {
        counter.fetch_sub(1, AcqRel);
    }
}

/// Events whose latest record was on a capturing stream (handle -> the capture's serial): a wait
/// for one is a fork or a join of that capture.
static CAPTURED_EVENTS: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

fn captured_events() -> std::sync::MutexGuard<'static, Vec<(u64, u64)>> {
    CAPTURED_EVENTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether asynchronous request `op` is answered at once: it names stream 0 while a capture is
/// under way in this process (the daemon refuses stream-0 work while a blocking stream captures).
pub fn answer_now(op: &Request) -> bool {
    // Only while a capture is under way: an event left captured by an ended one changes nothing.
    if LIVE_CAPTURES.load(std::sync::atomic::Ordering::Acquire) == 0 {
        return false;
    }
    let stream = match op {
        Request::MemcpyHtoDAsync { stream, .. }
        | Request::MemcpyDtoHAsync { stream, .. }
        | Request::MemcpyDtoHRegionAsync { stream, .. }
        | Request::MemcpyDtoDAsync { stream, .. }
        | Request::Memcpy2DAsync { stream, .. }
        | Request::Memcpy3DAsync { stream, .. }
        | Request::MemsetAsync { stream, .. }
        | Request::LaunchKernel { stream, .. }
        | Request::StreamWaitEvent { stream, .. }
        | Request::EventRecord { stream, .. }
        | Request::GraphUpload { stream, .. }
        | Request::GraphLaunch { stream, .. }
        | Request::LaunchHostFunc { stream, .. } => *stream,
        _ => return false,
    };
    stream == StreamId::NULL
}

/// Whether `stream` is in a capture this process began (on it, or joined to it).
pub fn capturing(stream: StreamId, endpoint: usize) -> bool {
    capture_origin(stream, endpoint).is_some()
}

/// The stream that began the capture `stream` is in.
pub fn capture_origin(stream: StreamId, endpoint: usize) -> Option<StreamId> {
    if stream == StreamId::NULL {
        return None;
    }
    captures().iter().find(|c| c.has(stream, endpoint)).map(|c| c.stream)
}

/// `cuEventRecord(event, stream)`: notes whether the event is now a captured one; true when it is
/// (the caller then waits for the daemon's answer, whose errors belong to the capture).
pub fn event_recorded(event: u64, stream: StreamId, endpoint: usize) -> bool {
    if none_in_capture() {
        return false;
    }
    let serial = captures().iter().find(|c| stream != StreamId::NULL && c.has(stream, endpoint)).map(|c| c.serial);
    forget_captured_event(event);
    match serial {
        Some(serial) => {
            captured_events().push((event, serial));
            count(&CAPTURED_EVENT_COUNT, true);
            true
        }
        None => false,
    }
}

/// `cuEventDestroy`, or a record outside capture: the event is no longer a captured one.
pub fn forget_captured_event(event: u64) {
    if none_in_capture() {
        return;
    }
    let mut events = captured_events();
    if let Some(i) = events.iter().position(|&(e, _)| e == event) {
        events.swap_remove(i);
        count(&CAPTURED_EVENT_COUNT, false);
    }
}

/// `cuStreamWaitEvent(stream, event)`: `Some(serial)` when the event is a captured one (the wait
/// forks or joins that capture), `Some(0)` when the stream captures and the event is not, `None`
/// when neither (an ordinary wait).
pub fn capture_wait(stream: StreamId, endpoint: usize, event: u64) -> Option<u64> {
    if none_in_capture() {
        return None;
    }
    let events = captured_events();
    let serial = events.iter().find(|&&(e, _)| e == event).map(|&(_, s)| s);
    drop(events);
    serial.or_else(|| capturing(stream, endpoint).then_some(0))
}

/// The daemon let `stream` wait for an event of capture `serial`: the stream is in that capture.
pub fn joined(stream: StreamId, endpoint: usize, serial: u64) {
    let mut caps = captures();
    if caps.iter().any(|c| c.has(stream, endpoint)) {
        return;
    }
    if let Some(c) = caps.iter_mut().find(|c| c.serial == serial && c.endpoint == endpoint) {
        c.joined.push(stream);
    }
}

/// Fails a call made while the capture on `(stream, endpoint)` is under way, invalidating it as
/// the driver would: the daemon's backend refuses cuStreamQuery on a capturing stream and
/// invalidates the capture.
fn invalidate(c: &mut Client, stream: StreamId, endpoint: usize, why: &str) -> CUresult {
    log(&format!("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: {why}; the capture is invalidated"));
    if let Ok(conn) = c.conn_at(endpoint) {
        let _ = conn.call(Request::StreamQuery { stream });
    }
    CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
}

/// A copy through pageable memory on `stream` (a copy staged through the daemon).
pub fn refuse_pageable(c: &mut Client, stream: StreamId) -> R<()> {
    let ep = client::current_endpoint();
    if !capturing(stream, ep) {
        return Ok(());
    }
    Err(invalidate(c, stream, ep, "a copy from or to pageable host memory cannot be captured through the pool"))
}

thread_local! {
    /// The calling thread's capture interaction mode (`cuThreadExchangeStreamCaptureMode`): which
    /// captures forbid its potentially unsafe calls (global by default, as in CUDA).
    static INTERACTION: std::cell::Cell<CUstreamCaptureMode> =
        const { std::cell::Cell::new(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL) };
}

/// `cuThreadExchangeStreamCaptureMode`: the thread's interaction mode becomes `*mode`, and `*mode`
/// the previous one (PyTorch's allocator turns relaxed around its `cudaMalloc` during capture).
pub(super) fn exchange_capture_mode(mode: *mut CUstreamCaptureMode) -> R<()> {
    if mode.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the API's contract makes it point to a CUstreamCaptureMode.
    let new = unsafe { mode.read_unaligned() };
    if new.0 > CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED.0 {
        log(&format!("cuThreadExchangeStreamCaptureMode: unknown mode {}", new.0));
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let old = INTERACTION.with(|m| m.replace(new));
    // SAFETY: as above, and writable: the driver writes the previous mode there.
    unsafe { mode.write_unaligned(old) };
    Ok(())
}

/// A potentially unsafe call (allocating or freeing memory) by the calling thread, checked against
/// the captures under way (see the module's comment) with the thread's interaction mode: global,
/// any global-mode capture of another thread forbids it too; thread-local, only its own; relaxed,
/// none.
pub fn unsafe_call(c: &mut Client, what: &str) -> R<()> {
    let me = std::thread::current().id();
    let interaction = INTERACTION.with(std::cell::Cell::get);
    if interaction == CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED {
        return Ok(());
    }
    let others = interaction == CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL;
    let forbidding = captures()
        .iter()
        .find(|k| {
            let mine = k.thread == me && k.mode != CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
            mine || (others && k.thread != me && k.mode == CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)
        })
        .map(|k| (k.stream, k.endpoint));
    match forbidding {
        None => Ok(()),
        Some((stream, ep)) => Err(invalidate(c, stream, ep, &format!("{what} during stream capture"))),
    }
}

/// The daemon's id in a handle of `kind`, with the endpoint that issued it.
pub(super) fn id_of(h: u64, kind: Kind) -> Option<(u64, usize)> {
    (h & 0xff == kind as u64 && h != 0).then(|| ((h >> 8) & ((1 << 48) - 1), endpoint_of(h)))
}

pub(super) fn begin_capture(h: CUstream, mode: CUstreamCaptureMode, d: DefaultStream) -> R<()> {
    begin(h, mode, d, false, |stream| Ok(Request::StreamBeginCapture { stream, mode: mode.0 }))
}

/// `cuStreamBeginCaptureToGraph`: into `graph`, after `deps` (its nodes; default edges only).
pub(super) fn begin_capture_to_graph(
    h: CUstream,
    graph: CUgraph,
    deps: *const CUgraphNode,
    edges: *const CUgraphEdgeData,
    n: usize,
    mode: CUstreamCaptureMode,
    d: DefaultStream,
) -> R<()> {
    default_edges(edges, n)?;
    let (gid, ep) = id_of(graph as u64, Kind::Graph).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    if ep != client::current_endpoint() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let deps = node_ids(deps, n, ep)?;
    begin(h, mode, d, true, move |stream| {
        Ok(Request::StreamBeginCaptureToGraph { stream, graph: GraphId(gid), deps, mode: mode.0 })
    })
}

/// Edge data other than the default (type 0, ports 0) is not forwarded.
fn default_edges(edges: *const CUgraphEdgeData, n: usize) -> R<()> {
    if has_non_default_edge(edges, n) {
        log("programmatic graph edges are not forwarded through the pool");
        return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
    }
    Ok(())
}

/// `cuStreamUpdateCaptureDependencies` (`_v2` with default edges): `flags` 0 adds the nodes to
/// the capture's dependencies, 1 replaces them.
pub(super) fn update_capture_dependencies(
    h: CUstream,
    deps: *mut CUgraphNode,
    edges: *const CUgraphEdgeData,
    n: usize,
    flags: c_uint,
    d: DefaultStream,
) -> R<()> {
    default_edges(edges, n)?;
    if flags > 1 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    client::call(|c| {
        let stream = resolve(c, h, d)?;
        let deps = node_ids(deps, n, client::current_endpoint())?;
        c.live()?.call_ok(Request::StreamUpdateCaptureDependencies { stream, deps, set: flags == 1 })
    })
}

pub(super) fn update_capture_dependencies_v1(
    h: CUstream,
    deps: *mut CUgraphNode,
    n: usize,
    flags: c_uint,
    d: DefaultStream,
) -> R<()> {
    update_capture_dependencies(h, deps, std::ptr::null(), n, flags, d)
}

fn begin(
    h: CUstream,
    mode: CUstreamCaptureMode,
    d: DefaultStream,
    into_graph: bool,
    req: impl FnOnce(StreamId) -> R<Request>,
) -> R<()> {
    if mode.0 > CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED.0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    client::call(|c| {
        let stream = resolve(c, h, d)?;
        if stream == StreamId::NULL {
            log("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: the legacy default stream cannot be captured");
            return Err(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        let endpoint = client::current_endpoint();
        c.live()?.call_ok(req(stream)?)?;
        let thread = std::thread::current().id();
        let serial = NEXT_SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        captures().push(Capture { stream, endpoint, thread, mode, into_graph, serial, joined: Vec::new() });
        count(&LIVE_CAPTURES, true);
        Ok(())
    })
}

/// `*pgraph` is NULL when the capture was invalidated, as the driver writes it.
pub(super) fn end_capture(h: CUstream, pgraph: *mut CUgraph, d: DefaultStream) -> R<()> {
    if pgraph.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    client::call(|c| {
        let stream = resolve(c, h, d)?;
        let endpoint = client::current_endpoint();
        let mut into_graph = false;
        {
            let mut caps = captures();
            if let Some(i) = caps.iter().position(|k| k.stream == stream && k.endpoint == endpoint) {
                let k = &caps[i];
                if k.thread != std::thread::current().id()
                    && k.mode != CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED
                {
                    log("CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: a capture that is not relaxed ends on its own thread");
                    return Err(CUresult::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
                }
                into_graph = caps.remove(i).into_graph;
                count(&LIVE_CAPTURES, false);
            }
        }
        let conn = c.live()?;
        let graph = match conn.ask::<answer::Graph>(Request::StreamEndCapture { stream }) {
            Ok(answer::Graph { graph }) => graph,
            Err(e) => {
                crate::api::export::put(pgraph, std::ptr::null_mut());
                // An invalidated capture's own graph is gone, with its allocation nodes.
                if let Some(g) = super::graph_mem::capture_ended(stream, endpoint)
                    && !into_graph
                {
                    super::graph_mem::forget_graph(g);
                }
                return Err(e);
            }
        };
        let handle = make(Kind::Graph, endpoint, graph.0)?;
        super::graph_mem::capture_ended(stream, endpoint);
        crate::api::export::put(pgraph, handle as CUgraph);
        Ok(())
    })
}

fn capture_info(h: CUstream, d: DefaultStream) -> R<(CUstreamCaptureStatus, u64)> {
    client::call(|c| {
        let stream = resolve(c, h, d)?;
        let answer::CaptureInfo { status, id } = c.live()?.ask(Request::StreamCaptureInfo { stream })?;
        Ok((CUstreamCaptureStatus(status), id))
    })
}

pub(super) fn is_capturing(h: CUstream, d: DefaultStream) -> R<CUstreamCaptureStatus> {
    Ok(capture_info(h, d)?.0)
}

thread_local! {
    /// The last dependency list `cuStreamGetCaptureInfo` answered on this thread (the driver's
    /// stays valid until the next call on the stream).
    static CAPTURE_DEPS: std::cell::RefCell<Vec<CUgraphNode>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// (status, id); while capturing, the capture's graph and its current dependency nodes as
/// handles of this process (the daemon names them, pool-daemon's `daemon/graph_capture.rs`).
pub(super) fn capture_info_v2(
    h: CUstream,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    num_deps: *mut usize,
    d: DefaultStream,
) -> R<(CUstreamCaptureStatus, u64)> {
    let (info, g, nodes) = client::call(|c| {
        let stream = resolve(c, h, d)?;
        let ep = client::current_endpoint();
        let answer::CaptureGraph { status, id, graph, deps } = c.live()?.ask(Request::StreamCaptureGraph { stream })?;
        let g = if graph.0 == 0 { 0 } else { make(Kind::Graph, ep, graph.0)? };
        let nodes =
            deps.into_iter().map(|n| make(Kind::GraphNode, ep, n).map(|h| h as CUgraphNode)).collect::<R<Vec<_>>>()?;
        Ok(((CUstreamCaptureStatus(status), id), g, nodes))
    })?;
    let n = nodes.len();
    let p = CAPTURE_DEPS.with(|cell| {
        let mut v = cell.borrow_mut();
        *v = nodes;
        if v.is_empty() { std::ptr::null() } else { v.as_ptr() }
    });
    crate::api::export::put(graph, g as CUgraph);
    crate::api::export::put(deps, p);
    crate::api::export::put(num_deps, n);
    Ok(info)
}

pub(super) fn capture_info_v3(
    h: CUstream,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const CUgraphEdgeData,
    num_deps: *mut usize,
    d: DefaultStream,
) -> R<(CUstreamCaptureStatus, u64)> {
    crate::api::export::put(edges, std::ptr::null());
    capture_info_v2(h, graph, deps, num_deps, d)
}

pub(super) fn graph_create(pgraph: *mut CUgraph, flags: c_uint) -> R<()> {
    if pgraph.is_null() || flags != 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let h = client::call(|c| {
        let (_, ctx, _) = c.current()?;
        let answer::Graph { graph } = c.live()?.ask(Request::GraphCreate { ctx, flags })?;
        make(Kind::Graph, client::current_endpoint(), graph.0)
    })?;
    crate::api::export::put(pgraph, h as CUgraph);
    Ok(())
}

pub(super) fn graph_destroy(graph: CUgraph) -> R<()> {
    let (id, ep) = id_of(graph as u64, Kind::Graph).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    client::call(|c| c.conn_at(ep)?.call_ok(Request::GraphDestroy { graph: GraphId(id) }))?;
    super::graph_kernel::forget_graph(graph);
    super::graph_mem::forget_graph(graph as u64);
    super::graph_node::forget_graph(graph as u64);
    super::graph_params::forget_graph(graph);
    Ok(())
}

pub(super) fn graph_instantiate(pexec: *mut CUgraphExec, graph: CUgraph, flags: u64) -> R<()> {
    if pexec.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let (id, ep) = id_of(graph as u64, Kind::Graph).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let h = client::call(|c| {
        let answer::GraphExec { exec } = c.conn_at(ep)?.ask(Request::GraphInstantiate { graph: GraphId(id), flags })?;
        make(Kind::GraphExec, ep, exec.0)
    })?;
    exec_flags().insert(h, flags);
    crate::api::export::put(pexec, h as CUgraphExec);
    Ok(())
}

/// Instantiated graph handle -> the flags it was made with (kept here: the daemon never needs them
/// back).
fn exec_flags() -> std::sync::MutexGuard<'static, std::collections::BTreeMap<u64, u64>> {
    static F: Mutex<std::collections::BTreeMap<u64, u64>> = Mutex::new(std::collections::BTreeMap::new());
    F.lock().unwrap_or_else(|e| e.into_inner())
}

/// `cuGraphExecGetFlags`: an instantiated graph this process made (another's handle names none).
pub(super) fn exec_get_flags(exec: CUgraphExec) -> R<u64> {
    exec_flags().get(&(exec as u64)).copied().ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)
}

pub(super) fn graph_exec_destroy(exec: CUgraphExec) -> R<()> {
    let (id, ep) = id_of(exec as u64, Kind::GraphExec).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    client::call(|c| c.conn_at(ep)?.call_ok(Request::GraphExecDestroy { exec: GraphExecId(id) }))?;
    exec_flags().remove(&(exec as u64));
    Ok(())
}

/// Upload and launch go on the stream in order with the rest of its work (no reply; a failure
/// comes back at the next sync point, as the driver's asynchronous errors do).
fn on_stream(exec: CUgraphExec, h: CUstream, d: DefaultStream, op: fn(GraphExecId, StreamId) -> Request) -> R<()> {
    let (id, ep) = id_of(exec as u64, Kind::GraphExec).ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
    client::call(|c| {
        let stream = resolve(c, h, d)?;
        if ep != client::current_endpoint() {
            return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
        }
        c.live()?.post(op(GraphExecId(id), stream))
    })
}

pub(super) fn graph_upload(exec: CUgraphExec, h: CUstream, d: DefaultStream) -> R<()> {
    on_stream(exec, h, d, |exec, stream| Request::GraphUpload { exec, stream })
}

pub(super) fn graph_launch(exec: CUgraphExec, h: CUstream, d: DefaultStream) -> R<()> {
    on_stream(exec, h, d, |exec, stream| Request::GraphLaunch { exec, stream })
}

// ---- graphs built node by node (the daemon holds the nodes; handles are kind GraphNode) ----

/// The daemon's node ids of `deps[..n]`, all issued by endpoint `ep`.
pub(super) fn node_ids(deps: *const CUgraphNode, n: usize, ep: usize) -> R<Vec<u64>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if deps.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: the caller passes `n` node handles at `deps`, as the API documents.
    let list = unsafe { std::slice::from_raw_parts(deps, n) };
    list.iter()
        .map(|&d| match id_of(d as u64, Kind::GraphNode) {
            Some((id, e)) if e == ep => Ok(id),
            _ => Err(CUresult::CUDA_ERROR_INVALID_VALUE),
        })
        .collect()
}

/// Adds a node the daemon builds from `op(graph, deps)` and writes its handle.
fn add_node(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    op: impl FnOnce(&mut Client, GraphId, Vec<u64>) -> R<Request>,
) -> R<()> {
    if out.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let (id, ep) = id_of(graph as u64, Kind::Graph).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let deps = node_ids(deps, n, ep)?;
    let h = client::call(|c| {
        let req = op(c, GraphId(id), deps)?;
        let answer::GraphNode { node } = c.conn_at(ep)?.ask(req)?;
        make(Kind::GraphNode, ep, node)
    })?;
    crate::api::export::put(out, h as CUgraphNode);
    Ok(())
}

/// A kernel node's launch, its parameters packed here with the function's layout.
pub(super) fn kernel_node(c: &mut Client, p: *const CUDA_KERNEL_NODE_PARAMS) -> R<KernelNode> {
    if p.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the API's contract makes it point to the parameter struct.
    let p = unsafe { p.read_unaligned() };
    // NVIDIA: `kern` (a CUkernel) is used only when `func` is NULL (NVIDIA's own runtime passes
    // its kernels so); `ctx` is the graph's here, as every context of the session maps to it.
    let f = if p.func.is_null() { p.kern as CUfunction } else { p.func };
    if f.is_null() || (!p.kernelParams.is_null() && !p.extra.is_null()) {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let f = super::library::resolve_function(f)?;
    let func = super::module::func_id(c, f)?;
    let bytes = super::launch::pack(&c.reg.funcs[&(f as u64)].params, p.kernelParams, p.extra)?;
    if bytes.len() > gpupool_protocol::ops::MAX_KERNEL_PARAM_BYTES {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    Ok(KernelNode {
        func,
        grid: [p.gridDimX, p.gridDimY, p.gridDimZ],
        block: [p.blockDimX, p.blockDimY, p.blockDimZ],
        shared_mem_bytes: p.sharedMemBytes,
        params: KernelParams(bytes),
    })
}

pub(super) fn add_kernel_node(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *const CUDA_KERNEL_NODE_PARAMS,
) -> R<()> {
    add_node(out, graph, deps, n, |c, graph, deps| {
        Ok(Request::GraphAddKernelNode { graph, deps, kernel: kernel_node(c, params)? })
    })
}

pub(super) fn add_memset_node(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *const CUDA_MEMSET_NODE_PARAMS,
    _ctx: CUcontext,
) -> R<()> {
    let (p, set) = super::graph_params::memset_in(params)?;
    add_node(out, graph, deps, n, |_, graph, deps| Ok(Request::GraphAddMemsetNode { graph, deps, set }))?;
    super::graph_params::added_memset(graph, out, p);
    Ok(())
}

/// `_ctx` is the graph's own context here: libgpupool.so's contexts all map to the session's.
pub(super) fn add_memcpy_node(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *const CUDA_MEMCPY3D,
    _ctx: CUcontext,
) -> R<()> {
    if params.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the API's contract makes it point to the parameter struct.
    let p = unsafe { params.read_unaligned() };
    add_node(out, graph, deps, n, |c, graph, deps| {
        Ok(Request::GraphAddMemcpyNode { graph, deps, copy: super::copy3d::graph_node_copy(c, &p)? })
    })?;
    super::graph_params::added_memcpy(graph, out, p);
    Ok(())
}

pub(super) fn add_empty_node(out: *mut CUgraphNode, graph: CUgraph, deps: *const CUgraphNode, n: usize) -> R<()> {
    add_node(out, graph, deps, n, |_, graph, deps| Ok(Request::GraphAddEmptyNode { graph, deps }))
}

pub(super) fn add_child_graph_node(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    child: CUgraph,
) -> R<()> {
    let (cid, cep) = id_of(child as u64, Kind::Graph).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    if Some(cep) != id_of(graph as u64, Kind::Graph).map(|g| g.1) {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    add_node(out, graph, deps, n, |_, graph, deps| Ok(Request::GraphAddChildNode { graph, deps, child: GraphId(cid) }))
}

fn event_node(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    e: CUevent,
    wait: bool,
) -> R<()> {
    add_node(out, graph, deps, n, |c, graph, deps| {
        let event = c.reg.events.get(&(e as u64)).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?.id;
        Ok(Request::GraphAddEventNode { graph, deps, event, wait })
    })
}

pub(super) fn add_event_record_node(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    e: CUevent,
) -> R<()> {
    event_node(out, graph, deps, n, e, false)
}

pub(super) fn add_event_wait_node(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    e: CUevent,
) -> R<()> {
    event_node(out, graph, deps, n, e, true)
}

pub(super) fn add_dependencies(graph: CUgraph, from: *const CUgraphNode, to: *const CUgraphNode, n: usize) -> R<()> {
    let (id, ep) = id_of(graph as u64, Kind::Graph).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let (from, to) = (node_ids(from, n, ep)?, node_ids(to, n, ep)?);
    client::call(|c| c.conn_at(ep)?.call_ok(Request::GraphAddDependencies { graph: GraphId(id), from, to }))
}

/// Edge data other than the default (type 0, ports 0) is not forwarded.
pub(super) fn add_dependencies_v2(
    graph: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    edges: *const CUgraphEdgeData,
    n: usize,
) -> R<()> {
    default_edges(edges, n)?;
    add_dependencies(graph, from, to, n)
}

/// Whether any of the `n` edge records at `edges` (NULL: all default) is not the default edge
/// (type 0, ports 0), the only kind the pool makes.
pub(super) fn has_non_default_edge(edges: *const CUgraphEdgeData, n: usize) -> bool {
    if edges.is_null() || n == 0 {
        return false;
    }
    // SAFETY: `n` edge records at `edges`, as the API documents.
    let list = unsafe { std::slice::from_raw_parts(edges, n) };
    list.iter().any(|e| e.type_ != 0 || e.from_port != 0 || e.to_port != 0)
}

pub(super) fn exec_kernel_node_set_params(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *const CUDA_KERNEL_NODE_PARAMS,
) -> R<()> {
    let (id, ep) = id_of(exec as u64, Kind::GraphExec).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let (node, nep) = id_of(node as u64, Kind::GraphNode).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    if nep != ep {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    client::call(|c| {
        let kernel = kernel_node(c, params)?;
        c.conn_at(ep)?.call_ok(Request::GraphExecKernelNodeSetParams { exec: GraphExecId(id), node, kernel })
    })
}

pub(super) fn clone(pclone: *mut CUgraph, graph: CUgraph) -> R<()> {
    if pclone.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let (id, ep) = id_of(graph as u64, Kind::Graph).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let h = client::call(|c| {
        let answer::Graph { graph } = c.conn_at(ep)?.ask(Request::GraphClone { graph: GraphId(id) })?;
        make(Kind::Graph, ep, graph.0)
    })?;
    crate::api::export::put(pclone, h as CUgraph);
    Ok(())
}

/// The result goes to `info` whether or not the update succeeds, as the driver writes it.
pub(super) fn exec_update(exec: CUgraphExec, graph: CUgraph, info: *mut CUgraphExecUpdateResultInfo) -> R<()> {
    let (eid, ep) = id_of(exec as u64, Kind::GraphExec).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let (gid, gep) = id_of(graph as u64, Kind::Graph).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    if gep != ep {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let answer::ExecUpdate { result, node, from } =
        client::call(|c| c.conn_at(ep)?.ask(Request::GraphExecUpdate { exec: GraphExecId(eid), graph: GraphId(gid) }))?;
    let handle =
        |n: u64| if n == 0 { Ok(std::ptr::null_mut()) } else { make(Kind::GraphNode, ep, n).map(|h| h as CUgraphNode) };
    crate::api::export::put(
        info,
        CUgraphExecUpdateResultInfo {
            result: CUgraphExecUpdateResult(result),
            errorNode: handle(node)?,
            errorFromNode: handle(from)?,
        },
    );
    if result != 0 {
        log(&format!("cuGraphExecUpdate: CUgraphExecUpdateResult {result}"));
        return Err(CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    }
    Ok(())
}

/// The daemon's backend writes the DOT text; it is written to `path` here, in the client.
pub(super) fn debug_dot_print(graph: CUgraph, path: *const c_char, flags: c_uint) -> R<()> {
    if path.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let (id, ep) = id_of(graph as u64, Kind::Graph).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let answer::Bytes { data } = client::call(|c| c.conn_at(ep)?.ask(Request::GraphDot { graph: GraphId(id), flags }))?;
    // SAFETY: a NUL-terminated path, as the API documents.
    let path = unsafe { std::ffi::CStr::from_ptr(path) }.to_string_lossy().into_owned();
    std::fs::write(&path, &data.0).map_err(|e| {
        log(&format!("cuGraphDebugDotPrint cannot write {path}: {e}"));
        CUresult::CUDA_ERROR_OPERATING_SYSTEM
    })
}

// ---- host functions: run in this process by the host-function channel ----

/// The application's function and argument from a host node's parameters, as the daemon carries
/// them (addresses it hands back, never uses).
fn host_fn(p: *const CUDA_HOST_NODE_PARAMS) -> R<(u64, u64)> {
    if p.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the API's contract makes it point to the parameter struct.
    let p = unsafe { p.read_unaligned() };
    let f = p.fn_.ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    Ok((f as usize as u64, p.userData as usize as u64))
}

/// A host node: the daemon's graph runs `fn(userData)` here, on the channel's thread.
pub(super) fn add_host_node(
    out: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *const CUDA_HOST_NODE_PARAMS,
) -> R<()> {
    let (func, user) = host_fn(params)?;
    let ep = id_of(graph as u64, Kind::Graph).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?.1;
    add_node(out, graph, deps, n, |c, graph, deps| {
        client::host_channel::ensure(c, ep, func)?;
        Ok(Request::GraphAddHostNode { graph, deps, func, user })
    })
}

pub(super) fn host_node_get_params(node: CUgraphNode, params: *mut CUDA_HOST_NODE_PARAMS) -> R<()> {
    if params.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let (id, ep) = id_of(node as u64, Kind::GraphNode).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let answer::HostFn { func, user } =
        client::call(|c| c.conn_at(ep)?.ask(Request::GraphHostNodeGetParams { node: id }))?;
    if func == 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: the daemon hands back the CUhostFn this process gave it for the node (never NULL).
    let f: unsafe extern "C" fn(*mut std::os::raw::c_void) = unsafe { std::mem::transmute(func as usize) };
    crate::api::export::put(params, CUDA_HOST_NODE_PARAMS { fn_: Some(f), userData: user as usize as *mut _ });
    Ok(())
}

pub(super) fn host_node_set_params(node: CUgraphNode, params: *const CUDA_HOST_NODE_PARAMS) -> R<()> {
    let (func, user) = host_fn(params)?;
    let (id, ep) = id_of(node as u64, Kind::GraphNode).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    client::call(|c| {
        client::host_channel::ensure(c, ep, func)?;
        c.conn_at(ep)?.call_ok(Request::GraphHostNodeSetParams { node: id, func, user })
    })
}

pub(super) fn exec_host_node_set_params(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *const CUDA_HOST_NODE_PARAMS,
) -> R<()> {
    let (func, user) = host_fn(params)?;
    let (eid, ep) = id_of(exec as u64, Kind::GraphExec).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let (id, nep) = id_of(node as u64, Kind::GraphNode).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    if nep != ep {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    client::call(|c| {
        client::host_channel::ensure(c, ep, func)?;
        let req = Request::GraphExecHostNodeSetParams { exec: GraphExecId(eid), node: id, func, user };
        c.conn_at(ep)?.call_ok(req)
    })
}

/// `cuLaunchHostFunc` on `stream` of endpoint `ep`: on a capturing stream a host node of the
/// capture (true); on any other, `false` (the caller runs it).
pub fn capture_host_func(c: &mut Client, stream: StreamId, ep: usize, func: u64, user: u64) -> R<bool> {
    if !capturing(stream, ep) {
        return Ok(false);
    }
    client::host_channel::ensure(c, ep, func)?;
    c.conn_at(ep)?.post(Request::LaunchHostFunc { stream, func, user })?;
    Ok(true)
}

/// `cuStreamAddCallback` on a capturing stream: NVIDIA documents it as not supported with stream
/// capture (unlike `cuLaunchHostFunc`), so it fails and invalidates the capture.
pub fn refuse_captured_callback(c: &mut Client, stream: StreamId, ep: usize) -> R<()> {
    if !capturing(stream, ep) {
        return Ok(());
    }
    Err(invalidate(c, stream, ep, "cuStreamAddCallback cannot be captured (cuLaunchHostFunc can)"))
}
