//! Streams and events. A `cudaStream_t` is a `CUstream` and a `cudaEvent_t` a
//! `CUevent` (NVIDIA's runtime makes them the same objects too), so these are the
//! driver's calls once the runtime's context is current; the flag values are shared.

use super::{NullStream, Rt, cu, rt_exports, rt_variants, state};
use crate::api::exports::{
    cuEventCreate, cuEventDestroy_v2, cuEventElapsedTime, cuEventQuery, cuEventRecord, cuEventRecordWithFlags,
    cuEventSynchronize,
};
use crate::api::exports::{
    cuLaunchHostFunc, cuStreamAddCallback, cuStreamCreate, cuStreamCreateWithPriority, cuStreamDestroy_v2,
    cuStreamGetFlags, cuStreamGetPriority, cuStreamIsCapturing, cuStreamQuery, cuStreamSynchronize, cuStreamWaitEvent,
    cuThreadExchangeStreamCaptureMode,
};
use gpupool_shim::cuda::{CUevent, CUhostFn, CUstream, CUstreamCallback, CUstreamCaptureMode, CUstreamCaptureStatus};
use gpupool_shim::cudart::{cudaError, cudaHostFn_t, cudaStreamCallback_t, cudaStreamCaptureStatus};
use std::os::raw::{c_int, c_uint, c_void};

fn create(p: *mut CUstream, flags: c_uint, priority: c_int) -> Rt<()> {
    if p.is_null() || flags & !1 != 0 {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    // SAFETY: our own exports with a valid out-pointer.
    cu(unsafe { if priority == 0 { cuStreamCreate(p, flags) } else { cuStreamCreateWithPriority(p, flags, priority) } })
}

fn stream_create(p: *mut CUstream) -> Rt<()> {
    create(p, 0, 0)
}

fn stream_create_with_flags(p: *mut CUstream, flags: c_uint) -> Rt<()> {
    create(p, flags, 0)
}

fn stream_destroy(s: CUstream) -> Rt<()> {
    // The default streams are not the application's to destroy.
    if (s as usize) <= 2 {
        return Err(cudaError::cudaErrorInvalidResourceHandle);
    }
    state::context()?;
    // SAFETY: our own export; it checks the handle.
    cu(unsafe { cuStreamDestroy_v2(s) })
}

fn stream_synchronize(s: CUstream, ns: NullStream) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the handle.
    cu(unsafe { cuStreamSynchronize(ns.resolve(s)) })
}

fn stream_query(s: CUstream, ns: NullStream) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export.
    cu(unsafe { cuStreamQuery(ns.resolve(s)) })
}

fn stream_wait_event(s: CUstream, e: CUevent, flags: c_uint, ns: NullStream) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; cudaEventWait* flags are CU_EVENT_WAIT_*.
    cu(unsafe { cuStreamWaitEvent(ns.resolve(s), e, flags) })
}

fn stream_is_capturing(s: CUstream, status: *mut cudaStreamCaptureStatus, ns: NullStream) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; the capture-status enums share numbers and size.
    cu(unsafe { cuStreamIsCapturing(ns.resolve(s), status.cast::<CUstreamCaptureStatus>()) })
}

/// No context needed: the mode is the calling thread's.
fn exchange_capture_mode(mode: *mut CUstreamCaptureMode) -> Rt<()> {
    // SAFETY: our own export; the runtime's and the driver's capture modes share numbers and size.
    cu(unsafe { cuThreadExchangeStreamCaptureMode(mode) })
}

fn stream_get_flags(s: CUstream, flags: *mut c_uint, ns: NullStream) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export.
    cu(unsafe { cuStreamGetFlags(ns.resolve(s), flags) })
}

fn stream_get_priority(s: CUstream, priority: *mut c_int, ns: NullStream) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export.
    cu(unsafe { cuStreamGetPriority(ns.resolve(s), priority) })
}

fn stream_add_callback(
    s: CUstream,
    cb: cudaStreamCallback_t,
    user: *mut c_void,
    flags: c_uint,
    ns: NullStream,
) -> Rt<()> {
    state::context()?;
    // SAFETY: the runtime's callback type is the driver's: (stream, status as a 32-bit
    // code, user data), C calling convention.
    let cb: CUstreamCallback = unsafe { std::mem::transmute::<cudaStreamCallback_t, CUstreamCallback>(cb) };
    // SAFETY: our own export.
    cu(unsafe { cuStreamAddCallback(ns.resolve(s), cb, user, flags) })
}

fn launch_host_func(s: CUstream, f: cudaHostFn_t, user: *mut c_void, ns: NullStream) -> Rt<()> {
    state::context()?;
    let f: CUhostFn = f;
    // SAFETY: our own export.
    cu(unsafe { cuLaunchHostFunc(ns.resolve(s), f, user) })
}

fn event_create(p: *mut CUevent) -> Rt<()> {
    event_create_with_flags(p, 0)
}

fn event_create_with_flags(p: *mut CUevent, flags: c_uint) -> Rt<()> {
    if p.is_null() || flags & !0x7 != 0 {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    // SAFETY: our own export; cudaEvent* flags are CU_EVENT_*.
    cu(unsafe { cuEventCreate(p, flags) })
}

fn event_record(e: CUevent, s: CUstream, ns: NullStream) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export.
    cu(unsafe { cuEventRecord(e, ns.resolve(s)) })
}

fn event_record_with_flags(e: CUevent, s: CUstream, flags: c_uint, ns: NullStream) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export.
    cu(unsafe { cuEventRecordWithFlags(e, ns.resolve(s), flags) })
}

fn event_synchronize(e: CUevent) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export.
    cu(unsafe { cuEventSynchronize(e) })
}

fn event_query(e: CUevent) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export.
    cu(unsafe { cuEventQuery(e) })
}

fn event_elapsed(ms: *mut f32, start: CUevent, end: CUevent) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export.
    cu(unsafe { cuEventElapsedTime(ms, start, end) })
}

fn event_destroy(e: CUevent) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export.
    cu(unsafe { cuEventDestroy_v2(e) })
}

rt_exports! {
    cudaStreamCreate => stream_create(p: *mut CUstream);
    cudaStreamCreateWithFlags => stream_create_with_flags(p: *mut CUstream, flags: c_uint);
    cudaStreamCreateWithPriority => create(p: *mut CUstream, flags: c_uint, priority: c_int);
    cudaStreamDestroy => stream_destroy(s: CUstream);
    cudaEventCreate => event_create(p: *mut CUevent);
    cudaEventCreateWithFlags => event_create_with_flags(p: *mut CUevent, flags: c_uint);
    cudaEventSynchronize => event_synchronize(e: CUevent);
    cudaEventQuery => event_query(e: CUevent);
    cudaEventElapsedTime => event_elapsed(ms: *mut f32, start: CUevent, end: CUevent);
    cudaEventElapsedTime_v2 => event_elapsed(ms: *mut f32, start: CUevent, end: CUevent);
    cudaEventDestroy => event_destroy(e: CUevent);
    cudaThreadExchangeStreamCaptureMode => exchange_capture_mode(mode: *mut CUstreamCaptureMode);
}

rt_variants! {
    cudaStreamSynchronize / cudaStreamSynchronize_ptsz => stream_synchronize(s: CUstream);
    cudaStreamQuery / cudaStreamQuery_ptsz => stream_query(s: CUstream);
    cudaStreamWaitEvent / cudaStreamWaitEvent_ptsz => stream_wait_event(s: CUstream, e: CUevent, flags: c_uint);
    cudaStreamIsCapturing / cudaStreamIsCapturing_ptsz => stream_is_capturing(s: CUstream, status: *mut cudaStreamCaptureStatus);
    cudaStreamGetFlags / cudaStreamGetFlags_ptsz => stream_get_flags(s: CUstream, flags: *mut c_uint);
    cudaStreamGetPriority / cudaStreamGetPriority_ptsz => stream_get_priority(s: CUstream, priority: *mut c_int);
    cudaStreamAddCallback / cudaStreamAddCallback_ptsz => stream_add_callback(
        s: CUstream, cb: cudaStreamCallback_t, user: *mut c_void, flags: c_uint);
    cudaLaunchHostFunc / cudaLaunchHostFunc_ptsz => launch_host_func(s: CUstream, f: cudaHostFn_t, user: *mut c_void);
    cudaEventRecord / cudaEventRecord_ptsz => event_record(e: CUevent, s: CUstream);
    cudaEventRecordWithFlags / cudaEventRecordWithFlags_ptsz => event_record_with_flags(e: CUevent, s: CUstream, flags: c_uint);
}
