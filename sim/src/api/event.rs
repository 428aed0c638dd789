//! Events.

use super::{DefaultStream, out, resolve_stream, stream_variants};
use crate::context::current_healthy;
use crate::driver::initialized;
use crate::error::{CuResult, cuda_entry, fail};
use crate::event::Event;
use gpupool_shim::cuda::{CUevent, CUresult, CUstream};
use std::os::raw::c_uint;
use std::sync::Arc;

/// CU_EVENT_DEFAULT | BLOCKING_SYNC | DISABLE_TIMING | INTERPROCESS.
const EVENT_FLAGS_MASK: u32 = 0x7;

fn lookup(h: CUevent) -> CuResult<Arc<Event>> {
    match initialized()?.events.get(h as u64) {
        Some(e) => Ok(e),
        None => fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{h:?} is not a live event")),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventCreate(ph: *mut CUevent, flags: c_uint) -> CUresult {
    cuda_entry(|| {
        let ctx = current_healthy()?;
        if ph.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null event output pointer".into());
        }
        if flags & !EVENT_FLAGS_MASK != 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown event flags {flags:#x}"));
        }
        let e = Event::new(ctx.handle(), flags);
        let h = initialized()?.events.insert(e.clone());
        let _ = e.handle.set(h);
        out(ph, h as CUevent)
    })
}

fn record(event: CUevent, stream: CUstream, d: DefaultStream) -> CuResult<()> {
    record_with_flags(event, stream, 0, d)
}

/// On a capturing stream the event becomes a captured one (it stands for the stream's current
/// nodes, [`crate::capture`]), or with CU_EVENT_RECORD_EXTERNAL an event record node.
fn record_with_flags(event: CUevent, stream: CUstream, flags: c_uint, d: DefaultStream) -> CuResult<()> {
    // CU_EVENT_RECORD_DEFAULT (0) and CU_EVENT_RECORD_EXTERNAL (1).
    if flags > 1 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown record flags {flags:#x}"));
    }
    let external = flags == 1;
    let e = lookup(event)?;
    let (ctx, s) = resolve_stream(initialized()?, stream, d)?;
    if ctx.handle() != e.ctx_handle {
        return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || "event and stream belong to different contexts".into());
    }
    ctx.check_sticky()?;
    let recorded = e.clone();
    let captured = s.with_capture(|a| {
        if external {
            let i = a.graph.add(crate::graph::Op::EventRecord(recorded), a.deps.clone())?;
            a.deps = vec![i];
        } else {
            recorded.record_captured(a.group.clone(), a.deps.clone());
        }
        Ok(())
    });
    if let Some(r) = captured {
        return r;
    }
    if external {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "CU_EVENT_RECORD_EXTERNAL outside stream capture".into());
    }
    e.record(&ctx, &s);
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventQuery(h: CUevent) -> CUresult {
    cuda_entry(|| lookup(h)?.query())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventSynchronize(h: CUevent) -> CUresult {
    cuda_entry(|| {
        let e = lookup(h)?;
        let r = e.synchronize();
        if let Some(ctx) = initialized()?.contexts.get(e.ctx_handle) {
            ctx.printf.flush();
        }
        crate::mempool::on_synchronize();
        r
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut f32, start: CUevent, end: CUevent) -> CUresult {
    cuda_entry(|| {
        let (a, b) = (lookup(start)?, lookup(end)?);
        if ms.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null output pointer".into());
        }
        out(ms, Event::elapsed_ms(&a, &b)?)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventElapsedTime_v2(ms: *mut f32, start: CUevent, end: CUevent) -> CUresult {
    // SAFETY: same contract as the v1 entry point.
    unsafe { cuEventElapsedTime(ms, start, end) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuEventDestroy_v2(h: CUevent) -> CUresult {
    cuda_entry(|| match initialized()?.events.remove(h as u64) {
        Some(_) => Ok(()),
        None => fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{h:?} is not a live event")),
    })
}

stream_variants! {
    cuEventRecord / cuEventRecord_ptsz => record(event: CUevent, stream: CUstream);
    cuEventRecordWithFlags / cuEventRecordWithFlags_ptsz => record_with_flags(event: CUevent, stream: CUstream, flags: c_uint);
}
