//! The AscendCL runtime exports (`libascendcl.so`): initialization, devices, contexts,
//! streams, events, memory and copies, over [`crate::runtime`], [`crate::stream`],
//! [`crate::event`] and [`crate::memory`].
//!
//! Codes: a NULL or out-of-range argument is ACL_ERROR_INVALID_PARAM (100000); a call before
//! aclInit ACL_ERROR_UNINITIALIZE; no current context ACL_ERROR_RT_CONTEXT_NULL (107002); an
//! unknown stream, event or context handle ACL_ERROR_RT_INVALID_HANDLE (107017), a stream of
//! another context ACL_ERROR_RT_STREAM_CONTEXT (107003); a bad device id
//! ACL_ERROR_RT_INVALID_DEVICEID (107001); a copy or memset whose device end is not inside one
//! allocation of the context's device, or whose host end is device memory, is
//! ACL_ERROR_RT_PARAM_INVALID (107000); out of device memory is ACL_ERROR_RT_MEMORY_ALLOCATION
//! (207001). A context that faulted answers ACL_ERROR_RT_AICORE_EXCEPTION (507015) from then on.

use crate::export::exports;
use crate::memory::{self, Region};
use crate::runtime::{self, Context};
use crate::status::{Code, Res, code, fail, out};
use crate::stream::Stream;
use gpupool_shim::acl::{
    aclDataType, aclFloat16, aclrtContext, aclrtEvent, aclrtEventRecordedStatus, aclrtEventStatus, aclrtLastErrLevel,
    aclrtMemAttr, aclrtMemMallocPolicy, aclrtMemcpyKind, aclrtRunMode, aclrtStream, aclrtStreamStatus,
};
use std::ffi::{CString, c_char, c_void};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

const P: Code = code::INVALID_PARAM;

fn h(p: *mut c_void) -> u64 {
    p as u64
}

/// Waits for a stream's work, then answers its context's fault if it has one.
fn sync_stream(st: &Stream, timeout: Option<Duration>) -> Res<()> {
    if !st.wait(timeout) {
        return fail(code::RT_STREAM_SYNC_TIMEOUT, || format!("stream {:#x} did not finish in {timeout:?}", st.id));
    }
    match st.fault.get() {
        Some(c) => fail(c, || format!("stream {:#x}: its context faulted ({c}) earlier", st.id)),
        None => Ok(()),
    }
}

/// A resolved copy: where the bytes come from and go to.
enum Plan {
    HostToDevice { src: u64, dst: (Arc<Region>, u64) },
    DeviceToHost { src: (Arc<Region>, u64), dst: u64 },
    DeviceToDevice { src: (Arc<Region>, u64), dst: (Arc<Region>, u64) },
    HostToHost { src: u64, dst: u64 },
}

fn plan_copy(ctx: &Context, dst: u64, dest_max: usize, src: u64, count: usize, kind: aclrtMemcpyKind) -> Res<Plan> {
    if dst == 0 || src == 0 {
        return fail(P, || "aclrtMemcpy: dst or src is NULL".into());
    }
    if count > dest_max {
        return fail(P, || format!("aclrtMemcpy: count {count} exceeds destMax {dest_max}"));
    }
    let n = count as u64;
    let d = ctx.device;
    let (src_dev, dst_dev) = match kind {
        aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_HOST => (false, false),
        aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE | aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE => (false, true),
        aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST => (true, false),
        aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_DEVICE
        | aclrtMemcpyKind::ACL_MEMCPY_INNER_DEVICE_TO_DEVICE
        | aclrtMemcpyKind::ACL_MEMCPY_INTER_DEVICE_TO_DEVICE => (true, true),
        aclrtMemcpyKind::ACL_MEMCPY_DEFAULT => (memory::is_device(src), memory::is_device(dst)),
        other => return fail(P, || format!("aclrtMemcpy: unknown kind {}", other.0)),
    };
    let any_device = kind == aclrtMemcpyKind::ACL_MEMCPY_INTER_DEVICE_TO_DEVICE;
    let rt = code::RT_PARAM_INVALID;
    let dev_end = |addr: u64, what: &str| -> Res<(Arc<Region>, u64)> {
        if any_device {
            memory::find(addr, n)
                .ok_or(())
                .or_else(|_| fail(rt, || format!("{what} {addr:#x}+{n} is not device memory")))
        } else {
            memory::device_range(addr, n, d, what, rt)
        }
    };
    let host_end = |addr: u64, what: &str| -> Res<u64> {
        match memory::is_device(addr) {
            true => {
                fail(rt, || format!("{what} {addr:#x} is device memory, but the copy's kind says host ({})", kind.0))
            }
            false => Ok(addr),
        }
    };
    Ok(match (src_dev, dst_dev) {
        (false, true) => Plan::HostToDevice { src: host_end(src, "source")?, dst: dev_end(dst, "destination")? },
        (true, false) => Plan::DeviceToHost { src: dev_end(src, "source")?, dst: host_end(dst, "destination")? },
        (true, true) => Plan::DeviceToDevice { src: dev_end(src, "source")?, dst: dev_end(dst, "destination")? },
        (false, false) => Plan::HostToHost { src: host_end(src, "source")?, dst: host_end(dst, "destination")? },
    })
}

/// Moves the bytes, in one copy (no bounce buffer). Host ends are the program's memory, valid
/// by the API's contract; device ends are spans of regions the plan holds.
fn run_copy(plan: &Plan, count: usize) {
    let (dst, src): (*mut u8, *const u8) = match plan {
        Plan::HostToDevice { src, dst } => (dst.0.span(dst.1, count), *src as *const u8),
        Plan::DeviceToHost { src, dst } => (*dst as *mut u8, src.0.span(src.1, count)),
        Plan::DeviceToDevice { src, dst } => (dst.0.span(dst.1, count), src.0.span(src.1, count)),
        Plan::HostToHost { src, dst } => (*dst as *mut u8, *src as *const u8),
    };
    // SAFETY: each device end lies inside a live mapping (`span` checks the range; the plan's Arcs
    // keep the regions mapped), each host end is `count` bytes the program passed for this copy;
    // `copy` allows the two to overlap.
    unsafe { std::ptr::copy(src, dst, count) };
}

fn memset_range(ctx: &Context, ptr: u64, max: usize, count: usize) -> Res<(Arc<Region>, u64)> {
    if ptr == 0 {
        return fail(P, || "aclrtMemset: devPtr is NULL".into());
    }
    if count > max {
        return fail(P, || format!("aclrtMemset: count {count} exceeds maxCount {max}"));
    }
    memory::device_range(ptr, count as u64, ctx.device, "aclrtMemset destination", code::RT_PARAM_INVALID)
}

fn malloc(dev_ptr: *mut *mut c_void, size: usize, policy: aclrtMemMallocPolicy, pad: bool) -> Res<()> {
    if dev_ptr.is_null() || size == 0 {
        return fail(P, || format!("aclrtMalloc: devPtr NULL or size {size}"));
    }
    let known_flags = 0x0100 | 0x1000 | 0x100000;
    if policy.0 & 0xff > 7 || policy.0 & !(0xff | known_flags) != 0 {
        return fail(P, || format!("aclrtMalloc: unknown policy {:#x}", policy.0));
    }
    let ctx = runtime::current_healthy()?;
    let total = runtime::config().devices[ctx.device as usize].memory_bytes;
    let p = memory::alloc(ctx.device, total, size as u64, pad)?;
    out(dev_ptr, p as *mut c_void, P, "devPtr")
}

fn elapsed(ms: *mut f32, start: u64, end: u64) -> Res<()> {
    if ms.is_null() {
        return fail(P, || "aclrtEventElapsedTime: ms is NULL".into());
    }
    let (a, b) = (runtime::event(start)?, runtime::event(end)?);
    for e in [&a, &b] {
        if e.flags & gpupool_shim::acl::ACL_EVENT_TIME_LINE == 0 {
            return fail(gpupool_shim::acl::ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID as Code, || {
                format!("aclrtEventElapsedTime: an event made without ACL_EVENT_TIME_LINE (flags {:#x})", e.flags)
            });
        }
        if e.recorded() == 0 {
            return fail(P, || "aclrtEventElapsedTime: an event was never recorded".into());
        }
    }
    let (Some(ta), Some(tb)) = (a.time(), b.time()) else {
        return fail(code::RT_EVENT_NOT_COMPLETE, || "aclrtEventElapsedTime: an event has not completed".into());
    };
    if tb < ta {
        return fail(gpupool_shim::acl::ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL as Code, || {
            "aclrtEventElapsedTime: the end event completed before the start event".into()
        });
    }
    out(ms, (tb - ta).as_secs_f64() as f32 * 1000.0, P, "ms")
}

exports! { acl -> gpupool_shim::acl::aclError, on panic code::RT_INTERNAL_ERROR;

fn aclInit(configPath: *const c_char) {
    if !configPath.is_null() {
        // SAFETY: a non-NULL configPath is a NUL-terminated path by the API's contract.
        let path = unsafe { std::ffi::CStr::from_ptr(configPath) }.to_string_lossy().into_owned();
        if !path.is_empty() && std::fs::metadata(&path).is_err() {
            return fail(gpupool_shim::acl::ACL_ERROR_INVALID_FILE, || format!("aclInit: no config file {path:?}"));
        }
    }
    runtime::init()
}

fn aclFinalize() {
    runtime::finalize()
}

fn aclrtGetVersion(majorVersion: *mut i32, minorVersion: *mut i32, patchVersion: *mut i32) {
    if majorVersion.is_null() || minorVersion.is_null() || patchVersion.is_null() {
        return fail(P, || "aclrtGetVersion: a NULL out-pointer".into());
    }
    out(majorVersion, gpupool_shim::acl::ACL_MAJOR_VERSION as i32, P, "majorVersion")?;
    out(minorVersion, gpupool_shim::acl::ACL_MINOR_VERSION as i32, P, "minorVersion")?;
    out(patchVersion, gpupool_shim::acl::ACL_PATCH_VERSION as i32, P, "patchVersion")
}

fn aclrtSetDevice(deviceId: i32) {
    runtime::set_device(deviceId)
}

fn aclrtResetDevice(deviceId: i32) {
    runtime::reset_device(deviceId, false)
}

fn aclrtResetDeviceForce(deviceId: i32) {
    runtime::reset_device(deviceId, true)
}

fn aclrtGetDevice(deviceId: *mut i32) {
    let ctx = runtime::current()?;
    out(deviceId, ctx.device as i32, P, "deviceId")
}

fn aclrtGetRunMode(runMode: *mut aclrtRunMode) {
    // The program runs on the host, the operators on the (simulated) device.
    out(runMode, aclrtRunMode::ACL_HOST, P, "runMode")
}

fn aclrtSynchronizeDevice() {
    // The whole device's work, but only the caller's own context's fault: another context's is
    // that context's to report (as each tenant of a pool sees only its own).
    let (ctx, streams) = runtime::streams_of_device()?;
    for st in &streams {
        st.wait(None);
    }
    match ctx.fault.get() {
        Some(c) => fail(c, || format!("context {:#x} has faulted ({c})", ctx.id)),
        None => Ok(()),
    }
}

fn aclrtGetDeviceCount(count: *mut u32) {
    if count.is_null() {
        return fail(P, || "aclrtGetDeviceCount: count is NULL".into());
    }
    out(count, runtime::device_count()?, P, "count")
}

fn aclrtCreateContext(context: *mut aclrtContext, deviceId: i32) {
    if context.is_null() {
        return fail(P, || "aclrtCreateContext: context is NULL".into());
    }
    let id = runtime::create_context(deviceId)?;
    out(context, id as aclrtContext, P, "context")
}

fn aclrtDestroyContext(context: aclrtContext) {
    if context.is_null() {
        return fail(P, || "aclrtDestroyContext: context is NULL".into());
    }
    runtime::destroy_context(h(context))
}

fn aclrtSetCurrentContext(context: aclrtContext) {
    if context.is_null() {
        return fail(P, || "aclrtSetCurrentContext: context is NULL".into());
    }
    runtime::set_current(h(context))
}

fn aclrtGetCurrentContext(context: *mut aclrtContext) {
    if context.is_null() {
        return fail(P, || "aclrtGetCurrentContext: context is NULL".into());
    }
    let ctx = runtime::current()?;
    out(context, ctx.id as aclrtContext, P, "context")
}

fn aclrtCreateEvent(event: *mut aclrtEvent) {
    if event.is_null() {
        return fail(P, || "aclrtCreateEvent: event is NULL".into());
    }
    let id = runtime::add_event(gpupool_shim::acl::ACL_EVENT_TIME_LINE | gpupool_shim::acl::ACL_EVENT_SYNC)?;
    out(event, id as aclrtEvent, P, "event")
}

fn aclrtCreateEventWithFlag(event: *mut aclrtEvent, flag: u32) {
    if event.is_null() {
        return fail(P, || "aclrtCreateEventWithFlag: event is NULL".into());
    }
    if flag & !0x7b != 0 {
        return fail(P, || format!("aclrtCreateEventWithFlag: unknown flag bits {flag:#x}"));
    }
    let id = runtime::add_event(flag)?;
    out(event, id as aclrtEvent, P, "event")
}

fn aclrtDestroyEvent(event: aclrtEvent) {
    if event.is_null() {
        return fail(P, || "aclrtDestroyEvent: event is NULL".into());
    }
    runtime::remove_event(h(event))
}

fn aclrtRecordEvent(event: aclrtEvent, stream: aclrtStream) {
    let ev = runtime::event(h(event))?;
    let (_, st) = runtime::stream(h(stream))?;
    let generation = ev.begin_record();
    st.enqueue_record(ev, generation);
    Ok(())
}

fn aclrtResetEvent(event: aclrtEvent, stream: aclrtStream) {
    let ev = runtime::event(h(event))?;
    let (_, st) = runtime::stream(h(stream))?;
    st.enqueue(Box::new(move |_| {
        ev.reset();
        Ok(())
    }));
    Ok(())
}

fn aclrtQueryEvent(event: aclrtEvent, status: *mut aclrtEventStatus) {
    let ev = runtime::event(h(event))?;
    let s = if ev.done() { aclrtEventStatus::ACL_EVENT_STATUS_COMPLETE } else { aclrtEventStatus::ACL_EVENT_STATUS_NOT_READY };
    out(status, s, P, "status")
}

fn aclrtQueryEventStatus(event: aclrtEvent, status: *mut aclrtEventRecordedStatus) {
    let ev = runtime::event(h(event))?;
    let s = if ev.recorded_and_done() {
        aclrtEventRecordedStatus::ACL_EVENT_RECORDED_STATUS_COMPLETE
    } else {
        aclrtEventRecordedStatus::ACL_EVENT_RECORDED_STATUS_NOT_READY
    };
    out(status, s, P, "status")
}

fn aclrtSynchronizeEvent(event: aclrtEvent) {
    let ev = runtime::event(h(event))?;
    match ev.wait(ev.recorded()) {
        Some(c) => fail(c, || format!("aclrtSynchronizeEvent: the recording context faulted ({c})")),
        None => Ok(()),
    }
}

fn aclrtEventElapsedTime(ms: *mut f32, startEvent: aclrtEvent, endEvent: aclrtEvent) {
    elapsed(ms, h(startEvent), h(endEvent))
}

fn aclrtMalloc(devPtr: *mut *mut c_void, size: usize, policy: aclrtMemMallocPolicy) {
    malloc(devPtr, size, policy, true)
}

fn aclrtMallocAlign32(devPtr: *mut *mut c_void, size: usize, policy: aclrtMemMallocPolicy) {
    malloc(devPtr, size, policy, false)
}

fn aclrtFree(devPtr: *mut c_void) {
    if devPtr.is_null() {
        return fail(P, || "aclrtFree: devPtr is NULL".into());
    }
    runtime::device_count()?;
    memory::free(devPtr as u64)
}

fn aclrtMallocHost(hostPtr: *mut *mut c_void, size: usize) {
    if hostPtr.is_null() {
        return fail(P, || "aclrtMallocHost: hostPtr is NULL".into());
    }
    runtime::current()?;
    let p = memory::alloc_host(size as u64)?;
    out(hostPtr, p as *mut c_void, P, "hostPtr")
}

fn aclrtFreeHost(hostPtr: *mut c_void) {
    if hostPtr.is_null() {
        return fail(P, || "aclrtFreeHost: hostPtr is NULL".into());
    }
    memory::free_host(hostPtr as u64)
}

fn aclrtMemcpy(dst: *mut c_void, destMax: usize, src: *const c_void, count: usize, kind: aclrtMemcpyKind) {
    let ctx = runtime::current_healthy()?;
    let plan = plan_copy(&ctx, dst as u64, destMax, src as u64, count, kind)?;
    run_copy(&plan, count);
    Ok(())
}

fn aclrtMemset(devPtr: *mut c_void, maxCount: usize, value: i32, count: usize) {
    let ctx = runtime::current_healthy()?;
    let (r, off) = memset_range(&ctx, devPtr as u64, maxCount, count)?;
    r.fill(off, count as u64, value as u8);
    Ok(())
}

fn aclrtMemcpyAsync(dst: *mut c_void, destMax: usize, src: *const c_void, count: usize, kind: aclrtMemcpyKind,
                    stream: aclrtStream) {
    let (ctx, st) = runtime::stream(h(stream))?;
    if let Some(c) = ctx.fault.get() {
        return fail(c, || "aclrtMemcpyAsync: the context has faulted".into());
    }
    let plan = plan_copy(&ctx, dst as u64, destMax, src as u64, count, kind)?;
    st.enqueue(Box::new(move |env| {
        if env.fault.is_none() {
            run_copy(&plan, count);
        }
        Ok(())
    }));
    Ok(())
}

fn aclrtMemsetAsync(devPtr: *mut c_void, maxCount: usize, value: i32, count: usize, stream: aclrtStream) {
    let (ctx, st) = runtime::stream(h(stream))?;
    if let Some(c) = ctx.fault.get() {
        return fail(c, || "aclrtMemsetAsync: the context has faulted".into());
    }
    let (r, off) = memset_range(&ctx, devPtr as u64, maxCount, count)?;
    st.enqueue(Box::new(move |env| {
        if env.fault.is_none() {
            r.fill(off, count as u64, value as u8);
        }
        Ok(())
    }));
    Ok(())
}

fn aclrtGetMemInfo(attr: aclrtMemAttr, free: *mut usize, total: *mut usize) {
    if free.is_null() || total.is_null() {
        return fail(P, || "aclrtGetMemInfo: free or total is NULL".into());
    }
    let ctx = runtime::current()?;
    let dev_total = runtime::config().devices[ctx.device as usize].memory_bytes;
    let (f, t) = match attr.0 {
        // The simulated NPU's memory is its HBM; it has no device DDR.
        0 | 2 | 3 | 6 | 7 => (0, 0),
        1 | 4 | 5 | 8..=17 => (dev_total - memory::used(ctx.device), dev_total),
        other => return fail(P, || format!("aclrtGetMemInfo: unknown attribute {other}")),
    };
    out(free, f as usize, P, "free")?;
    out(total, t as usize, P, "total")
}

fn aclrtCreateStream(stream: *mut aclrtStream) {
    if stream.is_null() {
        return fail(P, || "aclrtCreateStream: stream is NULL".into());
    }
    let id = runtime::create_stream()?;
    out(stream, id as aclrtStream, P, "stream")
}

fn aclrtCreateStreamWithConfig(stream: *mut aclrtStream, priority: u32, flag: u32) {
    if stream.is_null() || flag & !0x3f != 0 {
        return fail(P, || format!("aclrtCreateStreamWithConfig: stream NULL or unknown flag bits {flag:#x}"));
    }
    let _ = priority;
    let id = runtime::create_stream()?;
    out(stream, id as aclrtStream, P, "stream")
}

fn aclrtDestroyStream(stream: aclrtStream) {
    if stream.is_null() {
        return fail(P, || "aclrtDestroyStream: stream is NULL (the default stream is not destroyed)".into());
    }
    runtime::stream(h(stream))?;
    runtime::remove_stream(h(stream))?.shutdown();
    Ok(())
}

fn aclrtDestroyStreamForce(stream: aclrtStream) {
    if stream.is_null() {
        return fail(P, || "aclrtDestroyStreamForce: stream is NULL".into());
    }
    runtime::stream(h(stream))?;
    runtime::remove_stream(h(stream))?.shutdown();
    Ok(())
}

fn aclrtSynchronizeStream(stream: aclrtStream) {
    let (_, st) = runtime::stream(h(stream))?;
    sync_stream(&st, None)
}

fn aclrtSynchronizeStreamWithTimeout(stream: aclrtStream, timeout: i32) {
    let (_, st) = runtime::stream(h(stream))?;
    let t = match timeout {
        -1 => None,
        t if t > 0 => Some(Duration::from_millis(t as u64)),
        t => return fail(P, || format!("aclrtSynchronizeStreamWithTimeout: timeout {t} (-1 or > 0)")),
    };
    sync_stream(&st, t)
}

fn aclrtStreamQuery(stream: aclrtStream, status: *mut aclrtStreamStatus) {
    let (_, st) = runtime::stream(h(stream))?;
    let s = if st.idle() { aclrtStreamStatus::ACL_STREAM_STATUS_COMPLETE } else { aclrtStreamStatus::ACL_STREAM_STATUS_NOT_READY };
    out(status, s, P, "status")
}

fn aclrtStreamWaitEvent(stream: aclrtStream, event: aclrtEvent) {
    let ev = runtime::event(h(event))?;
    let (_, st) = runtime::stream(h(stream))?;
    let generation = ev.recorded();
    st.enqueue(Box::new(move |_| {
        ev.wait(generation);
        Ok(())
    }));
    Ok(())
}
}

/// The last error of the calling thread: the two functions return it rather than a status.
fn last_error(level: aclrtLastErrLevel, reset: bool) -> Code {
    if level != aclrtLastErrLevel::ACL_RT_THREAD_LEVEL {
        return P;
    }
    crate::status::last_error(reset)
}

#[unsafe(no_mangle)]
pub extern "C" fn aclrtPeekAtLastError(level: aclrtLastErrLevel) -> gpupool_shim::acl::aclError {
    last_error(level, false)
}
const _: unsafe extern "C" fn(aclrtLastErrLevel) -> gpupool_shim::acl::aclError =
    gpupool_shim::acl::aclrtPeekAtLastError;

#[unsafe(no_mangle)]
pub extern "C" fn aclrtGetLastError(level: aclrtLastErrLevel) -> gpupool_shim::acl::aclError {
    last_error(level, true)
}
const _: unsafe extern "C" fn(aclrtLastErrLevel) -> gpupool_shim::acl::aclError = gpupool_shim::acl::aclrtGetLastError;

#[unsafe(no_mangle)]
pub extern "C" fn aclGetRecentErrMsg() -> *const c_char {
    crate::status::take_recent_message()
}
const _: unsafe extern "C" fn() -> *const c_char = gpupool_shim::acl::aclGetRecentErrMsg;

/// The current device's SoC name (the first device's before any is set), or NULL before aclInit.
#[unsafe(no_mangle)]
pub extern "C" fn aclrtGetSocName() -> *const c_char {
    static NAMES: OnceLock<Vec<CString>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        runtime::config().devices.iter().map(|d| CString::new(d.soc.clone()).unwrap_or_default()).collect()
    });
    if !runtime::initialized() {
        return std::ptr::null();
    }
    names.get(runtime::current_device().unwrap_or(0) as usize).map_or(std::ptr::null(), |n| n.as_ptr())
}
const _: unsafe extern "C" fn() -> *const c_char = gpupool_shim::acl::aclrtGetSocName;

#[unsafe(no_mangle)]
pub extern "C" fn aclFloat16ToFloat(value: aclFloat16) -> f32 {
    half::f16::from_bits(value).to_f32()
}
const _: unsafe extern "C" fn(aclFloat16) -> f32 = gpupool_shim::acl::aclFloat16ToFloat;

#[unsafe(no_mangle)]
pub extern "C" fn aclFloatToFloat16(value: f32) -> aclFloat16 {
    half::f16::from_f32(value).to_bits()
}
const _: unsafe extern "C" fn(f32) -> aclFloat16 = gpupool_shim::acl::aclFloatToFloat16;

/// Bytes per element (0 for an unknown type, as CANN answers).
#[unsafe(no_mangle)]
pub extern "C" fn aclDataTypeSize(dataType: aclDataType) -> usize {
    crate::tensor::dtype_size(dataType).unwrap_or(0)
}
const _: unsafe extern "C" fn(aclDataType) -> usize = gpupool_shim::acl::aclDataTypeSize;
