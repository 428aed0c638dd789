//! Helpers of streams and events ([`super::serve`] has the operations).

use super::Raw;
use super::dispatch::{Fail, NOT_READY, Result};
use super::session::Session;
use crate::backend::{CudaError, device_output};
use crate::call;
use gpupool_protocol::EventId;
use gpupool_shim::cuda::{CUevent, CUstream};

impl Session {
    /// Before stream `s` of device `d` (entered) is destroyed: marks its last operation with an
    /// event if work is still queued on it ([`Session::stream_tails`]), and gives back the
    /// marks of destroyed streams whose work has ended.
    pub(super) fn mark_stream_tail(&mut self, d: u32, s: Raw<CUstream>) {
        let Some(tc) = self.tenant_ctxs.get(&d).cloned() else { return };
        let cuda = &self.shared.cuda;
        let done = |e: Raw<CUevent>| !matches!(ready(call!(cuda, cuEventQuery(e.0))), Ok(false));
        self.stream_tails.retain(|&(td, e)| {
            let ended = td == d && done(e);
            if ended {
                tc.give_events(&[e]);
            }
            !ended
        });
        // A capturing stream runs nothing of what it records (and a query would end the capture).
        if !self.capturing(s)
            && matches!(ready(call!(cuda, cuStreamQuery(s.0))), Ok(false))
            && let Ok(e) = tc.take_event(&self.shared)
        {
            match call!(cuda, cuEventRecord(e.0, s.0)) {
                Ok(()) => self.stream_tails.push((d, e)),
                Err(_) => tc.give_events(&[e]),
            }
        }
    }

    /// Before a synchronizing backend call on device `d` (entered) whose work `query` asks about:
    /// when kernels of the tenant's context there may print, waits for that work by queries
    /// first, which flush nothing. The call's window ([`device_output`]), which other printing
    /// contexts' flushing calls wait for, then lasts as long as the flush, not the work.
    pub(super) fn wait_quietly(&self, d: u32, query: impl Fn() -> std::result::Result<(), CudaError>) {
        let Some(tc) = self.tenant_ctxs.get(&d) else { return };
        if device_output::may_print_in(tc.ctx.0 as usize) {
            device_output::wait_by_queries(query);
        }
    }

    pub(super) fn event(&self, id: EventId) -> Result<(Raw<CUevent>, u32)> {
        self.events.get(&id).copied().ok_or_else(|| Fail::invalid_handle("event", id.0))
    }
}

/// A query's status: success is ready, CUDA_ERROR_NOT_READY is not, anything else fails.
pub(super) fn ready(r: std::result::Result<(), crate::backend::CudaError>) -> Result<bool> {
    match r {
        Ok(()) => Ok(true),
        Err(e) => {
            let f = Fail::from(e);
            if f.code == NOT_READY { Ok(false) } else { Err(f) }
        }
    }
}
