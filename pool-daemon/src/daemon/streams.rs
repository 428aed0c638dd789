//! Helpers of streams and events ([`super::serve`] has the operations).

use super::Raw;
use super::dispatch::{Fail, NOT_READY, Result};
use super::session::Session;
use gpupool_protocol::EventId;
use gpupool_shim::cuda::CUevent;

impl Session {
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
