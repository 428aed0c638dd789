//! Streams. Handles are the daemon's ids (see `client::handles`); CUDA's legacy handle
//! (0x1, or NULL in the plain exports) is the context's default stream (`StreamId::NULL`),
//! the per-thread handle (0x2, or NULL in the `_ptds`/`_ptsz` exports) a blocking stream
//! this client creates per thread and context on first use.

use super::DefaultStream;
use crate::client::{self, Client, Kind, StreamInfo, make};
use crate::util::R;
use gpupool_protocol::ops::answer;
use gpupool_protocol::{Request, StreamId};
use gpupool_shim::cuda::{
    CUcontext, CUevent, CUgreenCtx, CUhostFn, CUresult, CUstream, CUstream_flags, CUstreamCallback,
};
use std::os::raw::{c_int, c_uint, c_void};

const STREAM_FLAGS_MASK: u32 = CUstream_flags::CU_STREAM_NON_BLOCKING.0;

/// The daemon's stream for a handle; special handles need a current context. The
/// legacy default stream is the daemon's `StreamId::NULL`; a thread's per-thread default
/// stream is a blocking stream created for it (per context) on first use, which orders
/// against the legacy stream exactly as CUDA's per-thread stream does.
pub fn resolve(c: &mut Client, h: CUstream, d: DefaultStream) -> R<StreamId> {
    let (stream, ep) = resolve_any(c, h, d)?;
    if ep != client::current_endpoint() {
        // Work goes to the current context's daemon; another daemon's stream is not one
        // of its streams.
        return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
    }
    Ok(stream)
}

/// A stream handle and the endpoint whose daemon owns it (for calls that name the stream
/// alone: synchronize, query, destroy).
pub fn resolve_any(c: &mut Client, h: CUstream, d: DefaultStream) -> R<(StreamId, usize)> {
    match h as u64 {
        0 | 2 if h as u64 == 2 || d == DefaultStream::PerThread => Ok((per_thread(c)?, client::current_endpoint())),
        0..=2 => {
            c.current()?;
            Ok((StreamId::NULL, client::current_endpoint()))
        }
        h => {
            if !c.initialized {
                return Err(CUresult::CUDA_ERROR_NOT_INITIALIZED);
            }
            let s = c.reg.streams.get(&h).ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
            c.reg.ctx(s.ctx).map_err(|_| CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED)?;
            Ok((s.id, client::endpoint_of(h)))
        }
    }
}

fn per_thread(c: &mut Client) -> R<StreamId> {
    let (ctx_h, ctx, _) = c.current()?;
    let key = (std::thread::current().id(), ctx_h);
    if let Some(&s) = c.reg.per_thread.get(&key) {
        return Ok(s);
    }
    let req = Request::StreamCreate { ctx, flags: 0, priority: 0 };
    let answer::Stream { stream } = c.live()?.ask(req)?;
    c.reg.per_thread.insert(key, stream);
    Ok(stream)
}

/// (flags, priority, context handle) of a stream handle.
fn info(c: &mut Client, h: CUstream) -> R<(u32, i32, u64)> {
    match h as u64 {
        0..=2 => {
            let (ctx, ..) = c.current()?;
            Ok((0, 0, ctx))
        }
        h => {
            resolve_any(c, h as CUstream, DefaultStream::Legacy)?;
            let s = &c.reg.streams[&h];
            Ok((s.flags, s.priority, s.ctx))
        }
    }
}

pub(super) fn create(flags: c_uint) -> R<CUstream> {
    create_with_priority(flags, 0)
}

pub(super) fn create_with_priority(flags: c_uint, priority: c_int) -> R<CUstream> {
    if flags & !STREAM_FLAGS_MASK != 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let priority = priority.clamp(-5, 0);
    let h = client::call(|c| {
        let (ctx_h, ctx, _) = c.current()?;
        let answer::Stream { stream } = c.live()?.ask(Request::StreamCreate { ctx, flags, priority })?;
        let h = make(Kind::Stream, client::current_endpoint(), stream.0)?;
        c.reg.streams.insert(h, StreamInfo { id: stream, ctx: ctx_h, flags, priority });
        Ok(h)
    })?;
    Ok(h as CUstream)
}

pub(super) fn destroy(h: CUstream) -> R<()> {
    client::call(|c| {
        if (h as u64) <= 2 {
            return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
        }
        let (stream, ep) = resolve_any(c, h, DefaultStream::Legacy)?;
        c.conn_at(ep)?.call_ok(Request::StreamDestroy { stream })?;
        c.reg.streams.remove(&(h as u64));
        Ok(())
    })
}

pub(super) fn get_flags(h: CUstream, _d: DefaultStream) -> R<c_uint> {
    let (f, ..) = client::with(|c| info(c, h))?;
    Ok(f)
}

pub(super) fn get_priority(h: CUstream, _d: DefaultStream) -> R<c_int> {
    let (_, p, _) = client::with(|c| info(c, h))?;
    Ok(p)
}

pub(super) fn get_ctx(h: CUstream, _d: DefaultStream) -> R<CUcontext> {
    let (.., ctx) = client::with(|c| info(c, h))?;
    Ok(ctx as CUcontext)
}

/// (context, green context): the pool has no green contexts.
pub(super) fn get_ctx_v2(h: CUstream, d: DefaultStream) -> R<(CUcontext, CUgreenCtx)> {
    Ok((get_ctx(h, d)?, std::ptr::null_mut()))
}

pub(super) fn query(h: CUstream, d: DefaultStream) -> R<()> {
    client::call(|c| {
        let (stream, ep) = resolve_any(c, h, d)?;
        let conn = c.conn_at(ep)?;
        let answer::Ready { ready } = conn.ask(Request::StreamQuery { stream })?;
        conn.take_pending()?;
        if ready { Ok(()) } else { Err(CUresult::CUDA_ERROR_NOT_READY) }
    })
}

pub fn synchronize(h: CUstream, d: DefaultStream) -> R<()> {
    client::call(|c| {
        let (stream, ep) = resolve_any(c, h, d)?;
        let conn = c.conn_at(ep)?;
        conn.call_ok(Request::StreamSynchronize { stream })?;
        conn.take_pending()
    })?;
    super::mempool::on_synchronize();
    Ok(())
}

pub(super) fn wait_event(h: CUstream, event: CUevent, flags: c_uint, d: DefaultStream) -> R<()> {
    client::call(|c| {
        let (stream, ep) = resolve_any(c, h, d)?;
        let ev = c.reg.events.get(&(event as u64)).ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?.id;
        let ev_ep = client::endpoint_of(event as u64);
        if ev_ep != ep {
            // An event of another daemon: nothing there can wait for it, so the caller
            // waits for it here; later work on the stream is then ordered after it.
            let conn = c.conn_at(ev_ep)?;
            conn.call_ok(Request::EventSynchronize { event: ev })?;
            return conn.take_pending();
        }
        let req = Request::StreamWaitEvent { stream, event: ev, flags };
        if let Some(serial) = super::graph::capture_wait(stream, ep, event as u64) {
            // A fork or join of a capture, or a capturing stream's wait: answered now (CUDA's
            // capture errors: MERGE, ISOLATION, CAPTURED_EVENT), and a stream that joined a
            // capture is noted as capturing.
            c.conn_at(ep)?.call_ok(req)?;
            if serial != 0 {
                super::graph::joined(stream, ep, serial);
            }
            return Ok(());
        }
        c.conn_at(ep)?.post(req)
    })
}

/// On a capturing stream, a host node of the capture (run in this process by the daemon's graph,
/// `super::graph::capture_host_func`); on any other, the function runs on the calling thread once
/// the stream's earlier work is done.
pub(super) fn launch_host_func(h: CUstream, f: CUhostFn, user: *mut c_void, d: DefaultStream) -> R<()> {
    let f = f.ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    let captured = client::call(|c| {
        let (stream, ep) = resolve_any(c, h, d)?;
        super::graph::capture_host_func(c, stream, ep, f as usize as u64, user as usize as u64)
    })?;
    if captured {
        return Ok(());
    }
    synchronize(h, d)?;
    // SAFETY: the application's callback with its own user data, as CUDA would call it.
    unsafe { f(user) };
    Ok(())
}

pub(super) fn add_callback(
    h: CUstream,
    cb: CUstreamCallback,
    user: *mut c_void,
    flags: c_uint,
    d: DefaultStream,
) -> R<()> {
    let cb = cb.ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
    if flags != 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    client::call(|c| {
        let (stream, ep) = resolve_any(c, h, d)?;
        super::graph::refuse_captured_callback(c, stream, ep)
    })?;
    let status = synchronize(h, d).err().unwrap_or(CUresult::CUDA_SUCCESS);
    // SAFETY: the application's callback with its own arguments, as CUDA would call it.
    unsafe { cb(h, status, user) };
    Ok(())
}
