//! Events: markers recorded into a stream, completed when the stream reaches them,
//! time-stamped by the stream's worker at that moment.

use crate::capture::CaptureGroup;
use crate::error::{CuResult, fail};
use crate::stream::{Stream, Work};
use gpupool_shim::cuda::{CUevent_flags, CUresult};
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Default)]
struct EventState {
    /// The latest record: stream, the marker's sequence number, record generation.
    record: Option<(Arc<Stream>, u64, u64)>,
    generation: u64,
    /// When the marker of a given generation ran.
    stamp: Option<(u64, Instant)>,
    /// The latest record was on a capturing stream: the capture and the nodes the event stands
    /// for ([`crate::capture`]).
    captured: Option<(Arc<CaptureGroup>, Vec<usize>)>,
}

pub struct Event {
    pub ctx_handle: u64,
    pub flags: u32,
    /// Its handle, set when registered (an event node answers it: `cuGraphEventRecordNodeGetEvent`).
    pub handle: std::sync::OnceLock<u64>,
    state: Mutex<EventState>,
}

impl Event {
    pub fn new(ctx_handle: u64, flags: u32) -> Arc<Event> {
        Arc::new(Event {
            ctx_handle,
            flags,
            handle: std::sync::OnceLock::new(),
            state: Mutex::new(EventState::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, EventState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn timing_disabled(&self) -> bool {
        self.flags & CUevent_flags::CU_EVENT_DISABLE_TIMING.0 != 0
    }

    /// Captures the stream's current position; the event completes when the stream
    /// gets there.
    pub fn record(self: &Arc<Self>, ctx: &crate::context::Context, stream: &Arc<Stream>) {
        let generation = {
            let mut st = self.lock();
            st.generation += 1;
            st.generation
        };
        let me = self.clone();
        let capturing = stream.is_capturing();
        let seq = stream.enqueue_or_run(
            ctx,
            Work::Control,
            std::sync::Arc::new(move || {
                let mut st = me.lock();
                if st.generation == generation {
                    st.stamp = Some((generation, Instant::now()));
                }
                Ok(())
            }),
        );
        let mut st = self.lock();
        // A record captured into a graph happens when the graph runs, not now.
        if st.generation == generation && !capturing {
            st.record = Some((stream.clone(), seq, generation));
            st.captured = None;
        }
    }

    /// A record on a capturing stream: the event now stands for the capture's nodes `deps`.
    pub fn record_captured(&self, group: Arc<CaptureGroup>, deps: Vec<usize>) {
        let mut st = self.lock();
        st.generation += 1;
        st.record = None;
        st.captured = Some((group, deps));
    }

    /// The capture and nodes of the latest record, if it was on a capturing stream.
    pub fn captured(&self) -> Option<(Arc<CaptureGroup>, Vec<usize>)> {
        self.lock().captured.clone()
    }

    fn refuse_if_captured(&self, what: &str) -> CuResult<()> {
        match self.captured() {
            Some((group, _)) => crate::capture::refuse_captured_event(&group, what),
            None => Ok(()),
        }
    }

    /// The stream position to wait for, if the event was ever recorded.
    pub fn position(&self) -> Option<(Arc<Stream>, u64)> {
        self.lock().record.as_ref().map(|(s, seq, _)| (s.clone(), *seq))
    }

    /// `cuEventQuery`: an event never recorded counts as complete.
    pub fn query(&self) -> CuResult<()> {
        self.refuse_if_captured("cuEventQuery")?;
        match self.position() {
            Some((s, seq)) if s.completed() < seq => Err(CUresult::CUDA_ERROR_NOT_READY),
            _ => Ok(()),
        }
    }

    pub fn synchronize(&self) -> CuResult<()> {
        self.refuse_if_captured("cuEventSynchronize")?;
        // The position is work queued before any capture began (a record captured into a graph
        // sets none), so waiting for it is allowed while the stream captures, as CUDA allows
        // synchronizing an event recorded outside the capture.
        if let Some((s, seq)) = self.position() {
            s.wait_for(seq);
        }
        Ok(())
    }

    /// As [`Self::synchronize`] for at most `timeout`: whether the event completed.
    pub fn wait_timeout(&self, timeout: std::time::Duration) -> bool {
        match self.position() {
            Some((s, seq)) => s.wait_for_timeout(seq, timeout),
            None => true,
        }
    }

    fn stamp(&self) -> CuResult<Instant> {
        self.refuse_if_captured("cuEventElapsedTime")?;
        if self.timing_disabled() {
            return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || {
                "event was created with CU_EVENT_DISABLE_TIMING".into()
            });
        }
        let st = self.lock();
        let Some((stream, seq, generation)) = st.record.as_ref() else {
            return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || "event has not been recorded".into());
        };
        if stream.completed() < *seq {
            return Err(CUresult::CUDA_ERROR_NOT_READY);
        }
        match st.stamp {
            Some((g, t)) if g == *generation => Ok(t),
            _ => Err(CUresult::CUDA_ERROR_NOT_READY),
        }
    }

    /// Milliseconds from `start` to `end` (negative if `end` ran first).
    pub fn elapsed_ms(start: &Event, end: &Event) -> CuResult<f32> {
        let (a, b) = (start.stamp()?, end.stamp()?);
        let ms = if b >= a { (b - a).as_secs_f64() * 1e3 } else { -((a - b).as_secs_f64() * 1e3) };
        Ok(ms as f32)
    }
}
