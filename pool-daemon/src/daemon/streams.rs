//! Streams, events and management queries (NVML-like, as the tenant sees them).

use super::Raw;
use super::cleanup::Handle;
use super::dispatch::{Fail, NOT_READY, NOT_SUPPORTED, Result};
use super::session::Session;
use crate::call;
use gpupool_protocol::{EventId, Reply, Request, StreamId};
use gpupool_shim::cuda::{CUevent, CUstream};

impl Session {
    pub(super) fn exec_streams(&mut self, op: Request) -> Result<Reply> {
        use Request as R;
        Ok(match op {
            R::StreamCreate { ctx, flags, priority } => {
                let d = self.ctx_device(ctx)?;
                self.enter(d)?;
                let mut s: CUstream = std::ptr::null_mut();
                call!(self.shared.cuda, cuStreamCreateWithPriority(&mut s, flags, priority))?;
                let id = StreamId(self.next_handle());
                self.streams.insert(id, (Raw(s), d));
                self.owner.insert(Handle::Stream(id), ctx);
                Reply::Stream { stream: id }
            }
            R::StreamDestroy { stream } => {
                let &(s, d) = self.streams.get(&stream).ok_or_else(|| Fail::invalid_handle("stream", stream.0))?;
                self.enter(d)?;
                call!(self.shared.cuda, cuStreamDestroy_v2(s.0))?;
                self.streams.remove(&stream);
                self.owner.remove(&Handle::Stream(stream));
                Reply::Ok {}
            }
            R::StreamSynchronize { stream } => {
                if stream == StreamId::NULL {
                    for d in self.tenant_ctxs.keys().copied().collect::<Vec<_>>() {
                        self.enter(d)?;
                        call!(self.shared.cuda, cuStreamSynchronize(std::ptr::null_mut()))?;
                    }
                } else {
                    let (s, d) = self.stream(stream, None)?;
                    self.enter(d)?;
                    call!(self.shared.cuda, cuStreamSynchronize(s.0))?;
                }
                Reply::Ok {}
            }
            R::StreamQuery { stream } => {
                let (s, d) = self.stream(stream, None)?;
                self.enter(d)?;
                Reply::Ready { ready: ready(call!(self.shared.cuda, cuStreamQuery(s.0)))? }
            }
            R::StreamWaitEvent { stream, event, flags } => {
                let (e, d) = self.event(event)?;
                let (s, _) = self.stream(stream, Some(d))?;
                self.enter(d)?;
                call!(self.shared.cuda, cuStreamWaitEvent(s.0, e.0, flags))?;
                Reply::Ok {}
            }
            R::EventCreate { ctx, flags } => {
                let d = self.ctx_device(ctx)?;
                self.enter(d)?;
                let mut e: CUevent = std::ptr::null_mut();
                call!(self.shared.cuda, cuEventCreate(&mut e, flags))?;
                let id = EventId(self.next_handle());
                self.events.insert(id, (Raw(e), d));
                self.owner.insert(Handle::Event(id), ctx);
                Reply::Event { event: id }
            }
            R::EventRecord { event, stream } => {
                let (e, d) = self.event(event)?;
                let (s, _) = self.stream(stream, Some(d))?;
                self.enter(d)?;
                call!(self.shared.cuda, cuEventRecord(e.0, s.0))?;
                Reply::Ok {}
            }
            R::EventSynchronize { event } => {
                let (e, d) = self.event(event)?;
                self.enter(d)?;
                call!(self.shared.cuda, cuEventSynchronize(e.0))?;
                Reply::Ok {}
            }
            R::EventQuery { event } => {
                let (e, d) = self.event(event)?;
                self.enter(d)?;
                Reply::Ready { ready: ready(call!(self.shared.cuda, cuEventQuery(e.0)))? }
            }
            R::EventElapsedTime { start, end } => {
                let (a, d) = self.event(start)?;
                let (b, _) = self.event(end)?;
                self.enter(d)?;
                let mut ms = 0f32;
                call!(self.shared.cuda, cuEventElapsedTime(&mut ms, a.0, b.0))?;
                Reply::Elapsed { nanos: (ms as f64 * 1e6).round() as i64 }
            }
            R::EventDestroy { event } => {
                let (e, d) = self.event(event)?;
                self.enter(d)?;
                call!(self.shared.cuda, cuEventDestroy_v2(e.0))?;
                self.events.remove(&event);
                self.owner.remove(&Handle::Event(event));
                Reply::Ok {}
            }
            R::MgmtMemoryInfo { device } => {
                self.check_device(device)?;
                let dev = &self.shared.devices[device as usize];
                let (total, free) = match &self.shared.nvml {
                    Some(n) => n
                        .device(device)
                        .and_then(|h| n.memory(h))
                        .map(|m| (m.total, m.free))
                        .map_err(|e| Fail::new(NOT_SUPPORTED, format!("{e:#}")))?,
                    None => (dev.total_memory, dev.total_memory),
                };
                let m = self.shared.ledger.mem_info(&self.quota, device, total, free);
                Reply::MemInfo { free: m.free, total: m.total }
            }
            R::MgmtUtilization { device } => {
                self.check_device(device)?;
                let n = self.shared.nvml.as_ref().ok_or_else(|| Fail::new(NOT_SUPPORTED, "no NVML"))?;
                let u = n
                    .device(device)
                    .and_then(|h| n.utilization(h))
                    .map_err(|e| Fail::new(NOT_SUPPORTED, format!("{e:#}")))?;
                Reply::Utilization { gpu_percent: u.gpu, memory_percent: u.memory }
            }
            other => {
                return Err(Fail::new(NOT_SUPPORTED, format!("{} is not served", other.name())));
            }
        })
    }

    pub(super) fn event(&self, id: EventId) -> Result<(Raw<CUevent>, u32)> {
        self.events.get(&id).copied().ok_or_else(|| Fail::invalid_handle("event", id.0))
    }
}

/// A query's status: success is ready, CUDA_ERROR_NOT_READY is not, anything else fails.
fn ready(r: std::result::Result<(), crate::backend::CudaError>) -> Result<bool> {
    match r {
        Ok(()) => Ok(true),
        Err(e) => {
            let f = Fail::from(e);
            if f.code == NOT_READY { Ok(false) } else { Err(f) }
        }
    }
}
