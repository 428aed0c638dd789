//! Streams.

use super::context::clamp_priority;
use super::{DefaultStream, out, resolve_stream, resolve_stream_quiet, stream_variants};
use crate::context::current_healthy;
use crate::driver::initialized;
use crate::error::{CuResult, cuda_entry, fail};
use crate::stream::{Stream, StreamKind, Work};
use gpupool_shim::cuda::{
    CUcontext, CUevent, CUgreenCtx, CUhostFn, CUresult, CUstream, CUstream_flags, CUstreamCallback,
    CUstreamCaptureStatus,
};
use std::os::raw::{c_int, c_uint, c_void};

const STREAM_FLAGS_MASK: u32 = CUstream_flags::CU_STREAM_NON_BLOCKING.0;

fn create(ph: *mut CUstream, flags: u32, priority: c_int) -> CuResult<()> {
    let ctx = current_healthy()?;
    if ph.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null stream output pointer".into());
    }
    if flags & !STREAM_FLAGS_MASK != 0 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown stream flags {flags:#x}"));
    }
    let s = Stream::new(&ctx, StreamKind::User, flags, clamp_priority(priority));
    let h = initialized()?.streams.insert(s.clone());
    let _ = s.handle.set(h);
    out(ph, h as CUstream)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreate(ph: *mut CUstream, flags: c_uint) -> CUresult {
    cuda_entry(|| create(ph, flags, 0))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamCreateWithPriority(ph: *mut CUstream, flags: c_uint, priority: c_int) -> CUresult {
    cuda_entry(|| create(ph, flags, priority))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamDestroy_v2(h: CUstream) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        // Work already queued still completes; the handle dies now.
        match driver.streams.remove(h as u64) {
            Some(s) => {
                s.shut_down();
                Ok(())
            }
            None => {
                fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{h:?} is not a stream that can be destroyed"))
            }
        }
    })
}

fn get_flags(h: CUstream, flags: *mut c_uint, d: DefaultStream) -> CuResult<()> {
    let (_, s) = resolve_stream_quiet(initialized()?, h, d)?;
    out(flags, s.flags)
}

fn get_priority(h: CUstream, priority: *mut c_int, d: DefaultStream) -> CuResult<()> {
    let (_, s) = resolve_stream_quiet(initialized()?, h, d)?;
    out(priority, s.priority)
}

fn get_ctx(h: CUstream, pctx: *mut CUcontext, d: DefaultStream) -> CuResult<()> {
    let (ctx, _) = resolve_stream_quiet(initialized()?, h, d)?;
    out(pctx, ctx.handle() as CUcontext)
}

fn get_ctx_v2(h: CUstream, pctx: *mut CUcontext, green: *mut CUgreenCtx, d: DefaultStream) -> CuResult<()> {
    let (ctx, _) = resolve_stream_quiet(initialized()?, h, d)?;
    if pctx.is_null() || green.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null output pointer".into());
    }
    out(green, std::ptr::null_mut())?;
    out(pctx, ctx.handle() as CUcontext)
}

fn query(h: CUstream, d: DefaultStream) -> CuResult<()> {
    let (_, s) = resolve_stream(initialized()?, h, d)?;
    s.query()
}

fn synchronize(h: CUstream, d: DefaultStream) -> CuResult<()> {
    let (ctx, s) = resolve_stream(initialized()?, h, d)?;
    let r = s.synchronize();
    ctx.printf.flush();
    crate::mempool::on_synchronize();
    r
}

fn wait_event(h: CUstream, event: CUevent, flags: c_uint, d: DefaultStream) -> CuResult<()> {
    let driver = initialized()?;
    let (ctx, s) = resolve_stream(driver, h, d)?;
    let Some(e) = driver.events.get(event as u64) else {
        return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{event:?} is not a live event"));
    };
    // CU_EVENT_WAIT_DEFAULT (0) and CU_EVENT_WAIT_EXTERNAL (1).
    if flags > 1 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown wait flags {flags:#x}"));
    }
    let external = flags == 1;
    // An event recorded in a capture: a fork or a join of that capture ([`crate::capture`]).
    if let Some((group, deps)) = e.captured() {
        return crate::capture::wait_captured(&s, &group, &deps);
    }
    let waited = e.clone();
    if let Some(r) = s.with_capture(|a| {
        if !external {
            a.invalidate();
            return fail(CUresult::CUDA_ERROR_STREAM_CAPTURE_ISOLATION, || {
                "a capturing stream waits for an event recorded outside the capture (CU_EVENT_WAIT_EXTERNAL makes it an event wait node); the capture is invalidated"
                    .into()
            });
        }
        let i = a.graph.add(crate::graph::Op::EventWait(waited), a.deps.clone())?;
        a.deps = vec![i];
        Ok(())
    }) {
        return r;
    }
    if external {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "CU_EVENT_WAIT_EXTERNAL outside stream capture".into());
    }
    // An event never recorded imposes no wait.
    if let Some(pos) = e.position() {
        s.enqueue(&ctx, Work::Control, vec![pos], std::sync::Arc::new(|| Ok(())));
    }
    Ok(())
}

/// A host function pointer and its argument, carried to the stream's worker.
struct HostCall(usize, usize);

fn launch_host_func(h: CUstream, f: CUhostFn, user: *mut c_void, d: DefaultStream) -> CuResult<()> {
    let (ctx, s) = resolve_stream(initialized()?, h, d)?;
    ctx.check_sticky()?;
    let Some(f) = f else {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null host function".into());
    };
    let call = HostCall(f as usize, user as usize);
    // A host function queued on a stream (not a graph's host node) first writes what the
    // context's kernels printed ([`crate::printf`]).
    let flush = (!s.is_capturing()).then(|| std::sync::Arc::downgrade(&ctx));
    s.enqueue(
        &ctx,
        Work::Control,
        Vec::new(),
        std::sync::Arc::new(move || {
            if let Some(ctx) = flush.as_ref().and_then(std::sync::Weak::upgrade) {
                ctx.printf.flush();
            }
            // SAFETY: `call.0` is the CUhostFn the application passed, restored to its type.
            let f: unsafe extern "C" fn(*mut c_void) = unsafe { std::mem::transmute(call.0) };
            // SAFETY: calling the application's callback with its own argument, as documented.
            unsafe { f(call.1 as *mut c_void) };
            Ok(())
        }),
    );
    Ok(())
}

fn add_callback(h: CUstream, cb: CUstreamCallback, user: *mut c_void, flags: c_uint, d: DefaultStream) -> CuResult<()> {
    let (ctx, s) = resolve_stream(initialized()?, h, d)?;
    if flags != 0 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "cuStreamAddCallback flags must be 0".into());
    }
    let Some(cb) = cb else {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null callback".into());
    };
    // NVIDIA: "not supported with cuStreamBeginCapture and cuStreamEndCapture, unlike
    // cuLaunchHostFunc"; refused as other calls a capture cannot hold are.
    s.refuse_if_capturing("cuStreamAddCallback")?;
    let call = HostCall(cb as usize, user as usize);
    let stream_handle = h as usize;
    let ctx2 = ctx.clone();
    s.enqueue(
        &ctx,
        Work::Control,
        Vec::new(),
        std::sync::Arc::new(move || {
            ctx2.printf.flush();
            let status = ctx2.check_sticky().err().unwrap_or(CUresult::CUDA_SUCCESS);
            // SAFETY: `call.0` is the CUstreamCallback the application passed.
            let f: unsafe extern "C" fn(CUstream, CUresult, *mut c_void) = unsafe { std::mem::transmute(call.0) };
            // SAFETY: calling the application's callback with its own arguments, as documented.
            unsafe { f(stream_handle as CUstream, status, call.1 as *mut c_void) };
            Ok(())
        }),
    );
    Ok(())
}

fn is_capturing(h: CUstream, status: *mut CUstreamCaptureStatus, d: DefaultStream) -> CuResult<()> {
    let (_, s) = resolve_stream_quiet(initialized()?, h, d)?;
    out(status, s.capture_status())
}

stream_variants! {
    cuStreamGetFlags / cuStreamGetFlags_ptsz => get_flags(h: CUstream, flags: *mut c_uint);
    cuStreamGetPriority / cuStreamGetPriority_ptsz => get_priority(h: CUstream, priority: *mut c_int);
    cuStreamGetCtx / cuStreamGetCtx_ptsz => get_ctx(h: CUstream, pctx: *mut CUcontext);
    cuStreamGetCtx_v2 / cuStreamGetCtx_v2_ptsz => get_ctx_v2(h: CUstream, pctx: *mut CUcontext, green: *mut CUgreenCtx);
    cuStreamQuery / cuStreamQuery_ptsz => query(h: CUstream);
    cuStreamSynchronize / cuStreamSynchronize_ptsz => synchronize(h: CUstream);
    cuStreamWaitEvent / cuStreamWaitEvent_ptsz => wait_event(h: CUstream, event: CUevent, flags: c_uint);
    cuLaunchHostFunc / cuLaunchHostFunc_ptsz => launch_host_func(h: CUstream, f: CUhostFn, user: *mut c_void);
    cuStreamAddCallback / cuStreamAddCallback_ptsz => add_callback(h: CUstream, cb: CUstreamCallback, user: *mut c_void, flags: c_uint);
    cuStreamIsCapturing / cuStreamIsCapturing_ptsz => is_capturing(h: CUstream, status: *mut CUstreamCaptureStatus);
}
