//! Events: created, recorded (async), queried, synchronised and timed through the daemon.

use super::DefaultStream;
use super::stream::resolve;
use crate::client::{self, EventInfo, Kind, make};
use crate::util::R;
use gpupool_protocol::ops::answer;
use gpupool_protocol::{EventId, Request};
use gpupool_shim::cuda::{CUevent, CUresult, CUstream};
use std::os::raw::c_uint;

/// CU_EVENT_DEFAULT | BLOCKING_SYNC | DISABLE_TIMING | INTERPROCESS
const EVENT_FLAGS_MASK: u32 = 0x7;

fn event_id(c: &mut client::Client, h: CUevent) -> R<EventId> {
    if !c.initialized {
        return Err(CUresult::CUDA_ERROR_NOT_INITIALIZED);
    }
    c.reg.events.get(&(h as u64)).map(|e| e.id).ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)
}

pub(super) fn create(flags: c_uint) -> R<CUevent> {
    if flags & !EVENT_FLAGS_MASK != 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    client::call(|c| {
        let (_, ctx, _) = c.current()?;
        let answer::Event { event } = c.live()?.ask(Request::EventCreate { ctx, flags })?;
        let h = make(Kind::Event, client::current_endpoint(), event.0)?;
        c.reg.events.insert(h, EventInfo { id: event });
        Ok(h as CUevent)
    })
    .inspect(|&h| super::ipc::note_event_flags(h as u64, flags))
}

pub(super) fn record(event: CUevent, stream: CUstream, d: DefaultStream) -> R<()> {
    client::call(|c| {
        let ev = event_id(c, event)?;
        let stream = resolve(c, stream, d)?;
        if client::endpoint_of(event as u64) != client::current_endpoint() {
            // An event of another daemon's context cannot be recorded here.
            return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
        }
        let req = Request::EventRecord { event: ev, stream };
        if super::graph::event_recorded(event as u64, stream, client::current_endpoint()) {
            // A captured event: its errors are the capture's, answered now.
            return c.live()?.call_ok(req);
        }
        c.live()?.post(req)
    })
}

/// CU_EVENT_RECORD_EXTERNAL (1): an event record node of the stream's capture, invalid outside
/// capture (the daemon's backend says so).
pub(super) fn record_with_flags(event: CUevent, stream: CUstream, flags: c_uint, d: DefaultStream) -> R<()> {
    if flags & !1 != 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    if flags == 0 {
        return record(event, stream, d);
    }
    client::call(|c| {
        let ev = event_id(c, event)?;
        let stream = resolve(c, stream, d)?;
        if client::endpoint_of(event as u64) != client::current_endpoint() {
            return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
        }
        c.live()?.call_ok(Request::EventRecordExternal { event: ev, stream })
    })
}

pub(super) fn query(h: CUevent) -> R<()> {
    client::call(|c| {
        let event = event_id(c, h)?;
        let conn = c.conn_of(h as u64)?;
        let answer::Ready { ready } = conn.ask(Request::EventQuery { event })?;
        conn.take_pending()?;
        if ready { Ok(()) } else { Err(CUresult::CUDA_ERROR_NOT_READY) }
    })
}

pub(super) fn synchronize(h: CUevent) -> R<()> {
    client::call(|c| {
        let event = event_id(c, h)?;
        let conn = c.conn_of(h as u64)?;
        conn.call_ok(Request::EventSynchronize { event })?;
        conn.take_pending()
    })?;
    super::mempool::on_synchronize();
    Ok(())
}

/// Milliseconds between two recorded events.
pub(super) fn elapsed(start: CUevent, end: CUevent) -> R<f32> {
    let nanos = client::call(|c| {
        let ep = client::endpoint_of(start as u64);
        if ep != client::endpoint_of(end as u64) {
            return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
        }
        let (start, end) = (event_id(c, start)?, event_id(c, end)?);
        let answer::Elapsed { nanos } = c.conn_at(ep)?.ask(Request::EventElapsedTime { start, end })?;
        Ok(nanos)
    })?;
    Ok(nanos as f32 / 1e6)
}

pub(super) fn destroy(h: CUevent) -> R<()> {
    client::call(|c| {
        let event = event_id(c, h)?;
        c.conn_of(h as u64)?.call_ok(Request::EventDestroy { event })?;
        c.reg.events.remove(&(h as u64));
        super::graph::forget_captured_event(h as u64);
        Ok(())
    })
}
