//! Each session's own default stream. A client's stream 0 (the NULL or legacy stream) is, in
//! CUDA, its own context's: the work of another process never joins its queue. The tenant's
//! sessions share one backend context per device, whose legacy stream would put every session's
//! stream-0 work in one queue (one process's kernels waiting behind another's, a
//! `cudaStreamSynchronize(0)` or `cudaDeviceSynchronize` waiting for a sibling's training step),
//! and whose blocking streams would all wait for each other through it.
//!
//! So every stream of a session is a non-blocking stream of the backend, stream 0 among them
//! (one per device, made on first use), and the legacy stream's ordering is kept here, within
//! the session only:
//! - work on stream 0 waits for what the session's blocking streams (those the client made
//!   without `CU_STREAM_NON_BLOCKING`) queued before it, and work on a blocking stream waits for
//!   what stream 0 queued before it: an event recorded on one and waited for by the other, only
//!   when the other has had work since the last such wait, so a program on one stream pays
//!   nothing;
//! - a synchronous copy or memset (which the backend runs on its context's legacy stream, now
//!   apart from every session's streams) first waits for the work queued on stream 0 and on the
//!   blocking streams ([`Session::settle_legacy`]), again only if there is some since the last
//!   time.
//!
//! Owns: the per-device default streams and the bookkeeping of which stream has work the
//! others have not waited for. Must not: touch an NPU device's streams (AscendCL's default
//! stream has no legacy ordering), or order anything across sessions.

use super::Raw;
use super::dispatch::{Fail, Result};
use super::session::Session;
use crate::call;
use gpupool_protocol::{RequestOp, StreamId};
use gpupool_shim::cuda::{CUevent, CUstream, CUstream_flags};

/// What the backend's streams of a session are made with: none of them takes part in the
/// backend context's legacy ordering, which every session of the tenant shares.
pub const BACKEND_STREAM_FLAGS: u32 = CUstream_flags::CU_STREAM_NON_BLOCKING.0;

/// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT.
const STREAM_CAPTURE_IMPLICIT: u32 = 906;

#[derive(Default)]
pub struct Legacy {
    /// The default stream of each device the session put work on.
    defaults: super::HandleMap<u32, Default0>,
    /// The session's blocking streams: their device, and the count of their device's
    /// default-stream work they last waited for.
    blocking: super::HandleMap<StreamId, (u32, u64)>,
    /// Per device, the blocking streams with work queued since the default stream, or a
    /// synchronous copy, last waited for them.
    unwaited: super::HandleMap<u32, Vec<StreamId>>,
    /// Whether any stream above has work no synchronous copy has waited for yet.
    unsettled: bool,
}

struct Default0 {
    stream: Raw<CUstream>,
    /// Resolutions of stream 0 for work: a blocking stream that saw fewer waits for it.
    work: u64,
    /// `work` when a synchronous copy last waited for this stream.
    settled: u64,
}

impl Legacy {
    /// The default stream of device `d`, if the session made it.
    pub fn stream_of(&self, d: u32) -> Option<Raw<CUstream>> {
        self.defaults.get(&d).map(|s| s.stream)
    }

    /// Forgets stream `id` (destroyed with what it queued done).
    pub fn forget(&mut self, id: StreamId) {
        if self.blocking.remove(&id).is_some() {
            for v in self.unwaited.values_mut() {
                v.retain(|&x| x != id);
            }
        }
    }

    /// Forgets everything; the default streams, for the caller to destroy.
    pub fn clear(&mut self) -> Vec<(u32, Raw<CUstream>)> {
        self.blocking.clear();
        self.unwaited.clear();
        self.unsettled = false;
        self.defaults.drain().map(|(d, s)| (d, s.stream)).collect()
    }
}

/// The requests that the backend serves on its context's legacy stream, in CUDA ordered after
/// the work of the process's legacy and blocking streams.
pub fn synchronous_copy(op: RequestOp) -> bool {
    use RequestOp as R;
    matches!(
        op,
        R::MemcpyHtoD
            | R::MemcpyDtoH
            | R::MemcpyDtoHInline
            | R::MemcpyDtoHRegion
            | R::MemcpyDtoD
            | R::Memcpy2D
            | R::Memcpy3D
            | R::Memset
    )
}

impl Session {
    /// Stream 0 used (work, a synchronization or query, or a synchronous copy, which CUDA runs on
    /// it) while a blocking stream of the session on device `d` (any device: `None`) is in a
    /// capture: CUDA refuses it, since its implicit synchronization would depend on the capture,
    /// and invalidates that capture (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT).
    pub(super) fn refuse_legacy_during_capture(&mut self, d: Option<u32>) -> Result<()> {
        if self.graphs.captures.is_empty() {
            return Ok(());
        }
        let on = |x: u32| d.is_none_or(|d| d == x);
        let blocking = &self.legacy.blocking;
        let Some(id) = self.graphs.captures.keys().copied().find(|b| blocking.get(b).is_some_and(|&(x, _)| on(x)))
        else {
            return Ok(());
        };
        let why = format!(
            "stream 0 (or a synchronous copy, which uses it) while the blocking stream {} is in a capture: its \
             implicit synchronization would depend on the capture, which is invalidated",
            id.0
        );
        match self.streams.get(&id).copied() {
            Some((s, sd)) if self.enter(sd).is_ok() => Err(self.invalidate_capture(s, STREAM_CAPTURE_IMPLICIT, why)),
            _ => Err(Fail::new(STREAM_CAPTURE_IMPLICIT, why)),
        }
    }

    /// A stream the client made (`flags` as it asked; the backend's was made with
    /// [`BACKEND_STREAM_FLAGS`]): a blocking one is ordered against the session's default stream.
    pub(super) fn note_stream(&mut self, id: StreamId, d: u32, flags: u32) {
        if flags & CUstream_flags::CU_STREAM_NON_BLOCKING.0 == 0 {
            let seen = self.legacy.defaults.get(&d).map_or(0, |s| s.work);
            self.legacy.blocking.insert(id, (d, seen));
        }
    }

    /// Before stream `id` (backend `s`, device `d`, entered) is destroyed: the default stream
    /// waits for what it queued, which a later stream-0 operation would otherwise have waited for.
    pub(super) fn forget_stream(&mut self, id: StreamId, s: Raw<CUstream>, d: u32) {
        let unwaited = self.legacy.unwaited.get(&d).is_some_and(|v| v.contains(&id));
        if unwaited && let Some(s0) = self.legacy.stream_of(d) {
            let _ = self.wait_across(d, s, s0);
        }
        self.legacy.forget(id);
    }

    /// The session's default stream on device `d` (entered), made now if it is the first use.
    pub(super) fn default_stream(&mut self, d: u32) -> Result<Raw<CUstream>> {
        if let Some(s) = self.legacy.stream_of(d) {
            return Ok(s);
        }
        let mut s: CUstream = std::ptr::null_mut();
        call!(self.shared.cuda, cuStreamCreateWithPriority(&mut s, BACKEND_STREAM_FLAGS, 0))?;
        // The blocking streams' work so far is not yet waited for by it: their entries in
        // `unwaited` stay, and their counts (0) already match this stream's.
        self.legacy.defaults.insert(d, Default0 { stream: Raw(s), work: 0, settled: 0 });
        tracing::debug!(session = self.id, device = d, "the session's default stream made");
        Ok(Raw(s))
    }

    /// Work is about to go to stream `id` (backend `s`, device `d`, entered): the legacy
    /// stream's ordering with the session's blocking streams.
    pub(super) fn order_for_work(&mut self, id: StreamId, s: Raw<CUstream>, d: u32) -> Result<()> {
        if id == StreamId::NULL {
            self.refuse_legacy_during_capture(Some(d))?;
            let pending = self.legacy.unwaited.get_mut(&d).map(std::mem::take).unwrap_or_default();
            for b in &pending {
                if let Some(&(bs, _)) = self.streams.get(b)
                    && !self.capturing(bs)
                {
                    self.wait_across(d, bs, s)?;
                }
            }
            if let Some(s0) = self.legacy.defaults.get_mut(&d) {
                s0.work += 1;
            }
            self.legacy.unsettled = true;
            return Ok(());
        }
        let Some(&(_, seen)) = self.legacy.blocking.get(&id) else { return Ok(()) };
        // A capturing stream records what is queued on it instead of running it: nothing to order.
        if self.capturing(s) {
            return Ok(());
        }
        if let Some(s0) = self.legacy.defaults.get(&d)
            && s0.work != seen
        {
            let (s0, work) = (s0.stream, s0.work);
            self.wait_across(d, s0, s)?;
            self.legacy.blocking.insert(id, (d, work));
        }
        let v = self.legacy.unwaited.entry(d).or_default();
        if !v.contains(&id) {
            v.push(id);
        }
        self.legacy.unsettled = true;
        Ok(())
    }

    /// Before a synchronous copy or memset: waits for the work queued on the session's default
    /// and blocking streams that no such call has waited for yet (as the backend's legacy
    /// stream would, were the session's streams part of it). The first failure is the answer:
    /// a synchronous call reports the error of the asynchronous work before it.
    pub(crate) fn settle_legacy(&mut self) -> Result<()> {
        self.refuse_legacy_during_capture(None)?;
        if !std::mem::take(&mut self.legacy.unsettled) {
            return Ok(());
        }
        let mut first = Ok(());
        let mut waits = Vec::new();
        for (&d, v) in self.legacy.unwaited.iter_mut() {
            waits.extend(v.drain(..).filter_map(|b| self.streams.get(&b).map(|&(s, _)| (d, s))));
        }
        for (&d, s0) in self.legacy.defaults.iter_mut() {
            if s0.settled != s0.work {
                s0.settled = s0.work;
                waits.push((d, s0.stream));
            }
        }
        for (d, s) in waits {
            if self.capturing(s) {
                continue;
            }
            let r = self.enter(d).and_then(|()| {
                self.wait_quietly(d, || call!(self.shared.cuda, cuStreamQuery(s.0)));
                Ok(call!(self.shared.cuda, cuStreamSynchronize(s.0))?)
            });
            if first.is_ok() {
                first = r;
            }
        }
        // What every blocking stream would still wait for on stream 0 is done.
        for (d, seen) in self.legacy.blocking.values_mut() {
            if let Some(s0) = self.legacy.defaults.get(d) {
                *seen = s0.work;
            }
        }
        first
    }

    /// `later` waits for the work queued on `earlier` so far (an event of the tenant context's
    /// pool, given back at once: a wait takes the event's state when it is enqueued).
    fn wait_across(&mut self, d: u32, earlier: Raw<CUstream>, later: Raw<CUstream>) -> Result<()> {
        let Some(tc) = self.tenant_ctxs.get(&d).cloned() else { return Ok(()) };
        let e: Raw<CUevent> = tc.take_event(&self.shared)?;
        let cuda = &self.shared.cuda;
        let r =
            call!(cuda, cuEventRecord(e.0, earlier.0)).and_then(|()| call!(cuda, cuStreamWaitEvent(later.0, e.0, 0)));
        tc.give_events(&[e]);
        Ok(r?)
    }
}
