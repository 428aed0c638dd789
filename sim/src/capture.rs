//! Capture sequences: one `cuStreamBeginCapture` and every stream that joined it by waiting for an
//! event recorded in it (CUDA's cross-stream capture, the fork/join graphs that multi-stream
//! programs capture).
//!
//! What CUDA documents, and what is simulated here:
//! - an event recorded on a capturing stream is a *captured event*: it stands for the stream's
//!   current dependency nodes, records nothing when the graph runs (unless recorded with
//!   `CU_EVENT_RECORD_EXTERNAL`, an event record node), and may not be queried, synchronized or
//!   timed (`CUDA_ERROR_CAPTURED_EVENT`);
//! - a stream that waits for a captured event joins its capture if it is not capturing (its next
//!   node depends on the event's nodes), and adds them to its dependencies if it captures the same
//!   sequence; waiting for another sequence's event is `CUDA_ERROR_STREAM_CAPTURE_MERGE`, and a
//!   capturing stream waiting for an event recorded outside capture is
//!   `CUDA_ERROR_STREAM_CAPTURE_ISOLATION` (`CU_EVENT_WAIT_EXTERNAL` makes it an event wait node);
//! - `cuStreamEndCapture` belongs to the stream that began the capture
//!   (`CUDA_ERROR_STREAM_CAPTURE_UNMATCHED` elsewhere), takes every stream of the sequence out of
//!   capture, and fails with `CUDA_ERROR_STREAM_CAPTURE_UNJOINED` when a stream's work was not
//!   joined back into the origin's (not an ancestor of its dependencies);
//! - an invalid operation on any stream of the sequence invalidates all of it.

use crate::error::{CuResult, fail};
use crate::graph::Graph;
use crate::stream::Stream;
use gpupool_shim::cuda::{CUgraphNode, CUresult};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// A stream's part in a capture.
#[derive(Default)]
pub enum Capture {
    #[default]
    None,
    Active(ActiveCapture),
}

/// One stream's view of the sequence it captures: the sequence, and the nodes its next captured
/// node depends on (each stream of a sequence has its own).
pub struct ActiveCapture {
    pub group: Arc<CaptureGroup>,
    /// Indices of the nodes the next captured node depends on.
    pub deps: Vec<usize>,
    /// The dependencies as node handles, for `cuStreamGetCaptureInfo` (valid until the next call).
    pub dep_handles: Vec<CUgraphNode>,
}

// SAFETY: `dep_handles` are handle values, never dereferenced.
unsafe impl Send for ActiveCapture {}

impl std::ops::Deref for ActiveCapture {
    type Target = CaptureGroup;
    fn deref(&self) -> &CaptureGroup {
        &self.group
    }
}

/// What the streams of one capture sequence share.
pub struct CaptureGroup {
    pub graph: Arc<Graph>,
    /// The graph's handle (registered when the capture began).
    pub handle: u64,
    /// Whether the capture made the graph (not `cuStreamBeginCaptureToGraph`'s).
    pub owned: bool,
    pub id: u64,
    /// The stream that began it, the only one that ends the capture (held weakly, so that its
    /// address is not reused while the capture is known).
    origin: Weak<Stream>,
    /// The streams that joined it through events.
    joined: Mutex<Vec<Weak<Stream>>>,
    invalidated: AtomicBool,
    ended: AtomicBool,
}

/// Captures begun and not yet ended in the process: while 0, no call needs to look for one.
static UNDER_WAY: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether a capture may be under way (one begun, neither ended nor gone with its streams).
pub fn any_under_way() -> bool {
    UNDER_WAY.load(Ordering::Acquire) != 0
}

impl CaptureGroup {
    pub fn new(graph: Arc<Graph>, handle: u64, owned: bool, id: u64, origin: &Arc<Stream>) -> Arc<CaptureGroup> {
        UNDER_WAY.fetch_add(1, Ordering::AcqRel);
        Arc::new(CaptureGroup {
            graph,
            handle,
            owned,
            id,
            origin: Arc::downgrade(origin),
            joined: Mutex::new(Vec::new()),
            invalidated: AtomicBool::new(false),
            ended: AtomicBool::new(false),
        })
    }

    pub fn is_invalidated(&self) -> bool {
        self.invalidated.load(Ordering::Acquire)
    }

    pub fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    fn is_origin(&self, s: &Stream) -> bool {
        std::ptr::eq(self.origin.as_ptr(), s)
    }

    /// Invalidates the whole sequence: every stream of it fails what it captures from now on,
    /// and a graph the capture made goes now (with its allocation nodes' addresses).
    pub fn invalidate(&self) {
        if !self.invalidated.swap(true, Ordering::AcqRel)
            && self.owned
            && let Ok(d) = crate::driver::initialized()
        {
            d.graphs.remove(self.handle);
            crate::graph_mem::graph_destroyed(self.handle);
        }
    }

    /// Adds `s` to the sequence unless it has ended (the caller holds `s`'s capture lock, so an
    /// end either sees it joined or it sees the end).
    fn join(&self, s: &Arc<Stream>) -> bool {
        let mut joined = self.joined.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_ended() {
            return false;
        }
        joined.push(Arc::downgrade(s));
        true
    }
}

impl Drop for CaptureGroup {
    /// A capture that never ended (its streams destroyed while capturing) is no longer under way.
    fn drop(&mut self) {
        if !*self.ended.get_mut() {
            UNDER_WAY.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Whether every node in `leaves` is one of `roots` or an ancestor of one of them.
fn covered(graph: &Graph, roots: &[usize], leaves: &[usize]) -> bool {
    if leaves.iter().all(|l| roots.contains(l)) {
        return true;
    }
    let nodes = graph.nodes();
    let mut seen = vec![false; nodes.len()];
    let mut todo: Vec<usize> = roots.to_vec();
    while let Some(i) = todo.pop() {
        if i >= seen.len() || std::mem::replace(&mut seen[i], true) {
            continue;
        }
        todo.extend(nodes[i].deps.iter().copied());
    }
    leaves.iter().all(|&l| seen.get(l).copied().unwrap_or(false))
}

/// `cuStreamEndCapture` on `s`: the capture's graph handle. Only the origin ends a capture; it
/// takes every joined stream out of it, whatever the outcome.
pub fn end(s: &Arc<Stream>) -> CuResult<u64> {
    let mut cap = s.capture.lock().unwrap_or_else(|e| e.into_inner());
    let group = match &*cap {
        Capture::None => return fail(CUresult::CUDA_ERROR_ILLEGAL_STATE, || "the stream is not capturing".into()),
        Capture::Active(a) if !a.is_origin(s) => {
            a.invalidate();
            return fail(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, || {
                "cuStreamEndCapture on a stream that joined the capture, not the one that began it; the capture is \
                 invalidated"
                    .into()
            });
        }
        Capture::Active(a) => a.group.clone(),
    };
    let origin_deps = match std::mem::take(&mut *cap) {
        Capture::Active(a) => a.deps,
        Capture::None => Vec::new(),
    };
    drop(cap);
    let joined: Vec<Arc<Stream>> = {
        let mut list = group.joined.lock().unwrap_or_else(|e| e.into_inner());
        if !group.ended.swap(true, Ordering::AcqRel) {
            UNDER_WAY.fetch_sub(1, Ordering::AcqRel);
        }
        std::mem::take(&mut *list).iter().filter_map(Weak::upgrade).collect()
    };
    let mut unjoined = false;
    for m in joined {
        let mut c = m.capture.lock().unwrap_or_else(|e| e.into_inner());
        if let Capture::Active(a) = &*c
            && Arc::ptr_eq(&a.group, &group)
        {
            unjoined |= !covered(&group.graph, &origin_deps, &a.deps);
            *c = Capture::None;
        }
    }
    if group.is_invalidated() {
        return fail(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, || "the capture was invalidated".into());
    }
    if unjoined {
        group.invalidate();
        return fail(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNJOINED, || {
            "a stream that joined the capture has work that was not joined back into the origin stream (record an \
             event there and wait for it on the origin before ending the capture)"
                .into()
        });
    }
    Ok(group.handle)
}

/// `cuStreamWaitEvent(s, e)` for an event last recorded in capture `group` with dependencies
/// `deps`: `s` joins the capture or, capturing it already, depends on those nodes too.
pub fn wait_captured(s: &Arc<Stream>, group: &Arc<CaptureGroup>, deps: &[usize]) -> CuResult<()> {
    let ended = || {
        fail(CUresult::CUDA_ERROR_CAPTURED_EVENT, || {
            "the event was last recorded in a capture that has ended; record it again outside capture".into()
        })
    };
    if group.is_ended() {
        return ended();
    }
    let mut cap = s.capture.lock().unwrap_or_else(|e| e.into_inner());
    match &mut *cap {
        Capture::Active(a) if Arc::ptr_eq(&a.group, group) => {
            if group.is_invalidated() {
                return invalidated();
            }
            for &d in deps {
                if !a.deps.contains(&d) {
                    a.deps.push(d);
                }
            }
            Ok(())
        }
        Capture::Active(a) => {
            a.invalidate();
            group.invalidate();
            fail(CUresult::CUDA_ERROR_STREAM_CAPTURE_MERGE, || {
                "the stream captures another sequence than the one the event was recorded in; both are invalidated"
                    .into()
            })
        }
        Capture::None if s.kind == crate::stream::StreamKind::Legacy => {
            group.invalidate();
            fail(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, || {
                "the legacy default stream cannot join a capture; the capture is invalidated".into()
            })
        }
        Capture::None => {
            if group.is_invalidated() {
                return invalidated();
            }
            if !group.join(s) {
                return ended();
            }
            *cap =
                Capture::Active(ActiveCapture { group: group.clone(), deps: deps.to_vec(), dep_handles: Vec::new() });
            Ok(())
        }
    }
}

pub fn invalidated<T>() -> CuResult<T> {
    fail(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, || {
        "the stream's capture was invalidated by an earlier call".into()
    })
}

/// A captured event queried, synchronized or timed: not allowed, and an invalid operation
/// invalidates a capture still under way.
pub fn refuse_captured_event<T>(group: &CaptureGroup, what: &str) -> CuResult<T> {
    if !group.is_ended() {
        group.invalidate();
    }
    fail(CUresult::CUDA_ERROR_CAPTURED_EVENT, || {
        format!("{what} of an event last recorded in a capturing stream (it stands for graph nodes, not work)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Streams destroyed in the middle of a capture leave no capture counted as under way (the
    /// count spares every legacy-stream call a look for capturing streams).
    #[test]
    fn a_capture_whose_streams_are_gone_is_no_longer_under_way() {
        let d = crate::driver::state();
        d.init(0).expect("cuInit");
        let dev = d.device(0).expect("device 0").clone();
        let ctx = crate::context::Context::create(d, dev, 0, false).expect("a context");
        let before = UNDER_WAY.load(Ordering::Acquire);
        {
            let s = Stream::new(&ctx, crate::stream::StreamKind::User, 0, 0);
            let graph = Arc::new(Graph::new(ctx.handle(), Vec::new()));
            let group = CaptureGroup::new(graph, 0, false, 1, &s);
            *s.capture.lock().unwrap() =
                Capture::Active(ActiveCapture { group, deps: Vec::new(), dep_handles: Vec::new() });
            assert_eq!(UNDER_WAY.load(Ordering::Acquire), before + 1);
            assert!(any_under_way());
        }
        assert_eq!(UNDER_WAY.load(Ordering::Acquire), before, "a capture gone with its stream still counts");
    }
}
