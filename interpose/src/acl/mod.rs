//! The AscendCL runtime (`libascendcl.so`) answered by `libgpupool.so`: each call forwarded to
//! the daemon as the protocol's vendor-neutral operation (contexts, memory, copies, memset,
//! streams, memory info), the NPUs being the devices of the one device list whose vendor is
//! `VENDOR_ASCEND`, numbered from 0 for the program. Exports are CANN's names and signatures,
//! checked at compile time against bindgen's declarations of our CANN header.
//!
//! Owns: this process's ACL handles ([`State`], in the client state so a forked child starts
//! over): contexts (`aclrtSetDevice`'s default one per device, counted, and explicit ones),
//! streams, allocations, the calling thread's current context, and the thread's last error
//! message (`aclGetRecentErrMsg`). Host memory (`aclrtMallocHost`) is the process's own.
//!
//! Errors: the daemon answers an NPU backend's failure with AscendCL's code (passed through);
//! its generic refusals (an unowned pointer or handle, a quota) come in CUDA's numbering, the
//! wire's, and are mapped here ([`acl_code`]): past the quota ACL_ERROR_RT_MEMORY_ALLOCATION
//! 207001. Operators: [`aclnn`]; DCMI's device and memory queries: [`dcmi`].
//!
//! Must not: touch the CUDA front-end's context stack or registry.

use crate::api::copy::{read_device, write_device};
use crate::client::{self, Client};
use gpupool_protocol::ops::{Memset, MemsetValue, NPU_ATTR_AICORES, VENDOR_ASCEND, answer};
use gpupool_protocol::{CtxId, DevicePtr, Request, StreamId};
use gpupool_shim::acl::{
    self as acl, aclError, aclrtContext, aclrtMemAttr, aclrtMemcpyKind, aclrtRunMode, aclrtStream,
};
use gpupool_shim::cuda::CUresult;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::os::raw::{c_char, c_void};

/// An NPU of the one list: its endpoint and that daemon's ordinal.
#[derive(Clone, Copy)]
pub struct Npu {
    pub ep: usize,
    pub ordinal: u32,
    pub name_index: usize,
    /// AI Cores, as the daemon's DCMI counted them (0: not known).
    pub aicores: u32,
}

#[derive(Clone, Copy)]
struct Ctx {
    ep: usize,
    id: CtxId,
    device: i32,
}

/// What this process holds through AscendCL.
#[derive(Default)]
pub struct State {
    /// The NPUs, in the one list's order (the program's device ids).
    pub npus: Vec<Npu>,
    pub names: Vec<String>,
    initialized: bool,
    ctxs: HashMap<u64, Ctx>,
    /// Per device id: the default context's handle and `aclrtSetDevice`'s count.
    defaults: HashMap<i32, (u64, u32)>,
    streams: HashMap<u64, (usize, StreamId, u64)>,
    /// (endpoint, base) -> (size, context handle).
    allocs: BTreeMap<(usize, u64), (u64, u64)>,
    next: u64,
    /// Tensors, scalars and executors of the operator API ([`aclnn`]).
    ops: aclnn::Ops,
    /// Event handle -> (endpoint, the daemon's id, context handle).
    events: HashMap<u64, (usize, gpupool_protocol::EventId, u64)>,
    /// Contexts whose operator faulted (an operand past its allocation, which the daemon does not
    /// run): each later call in them answers ACL_ERROR_RT_AICORE_EXCEPTION, as CANN's sticky
    /// AI Core exception does, until the context is destroyed or its device reset.
    faulted: std::collections::HashSet<u64>,
}

thread_local! {
    static CURRENT: RefCell<Option<u64>> = const { RefCell::new(None) };
    static LAST_ERROR: RefCell<std::ffi::CString> = RefCell::new(std::ffi::CString::default());
    /// The thread's last failure code (`aclrtGetLastError`/`aclrtPeekAtLastError`).
    static LAST_CODE: std::cell::Cell<aclError> = const { std::cell::Cell::new(0) };
}

type A<T> = Result<T, aclError>;

const SUCCESS: aclError = acl::ACL_SUCCESS;
const INVALID_PARAM: aclError = acl::ACL_ERROR_INVALID_PARAM;

/// A CUDA-numbered refusal from the daemon or the client as AscendCL's code.
fn acl_code(r: CUresult) -> aclError {
    let c = r.0;
    if c >= 100_000 {
        return c as aclError;
    }
    (match r {
        CUresult::CUDA_ERROR_INVALID_VALUE => acl::ACL_ERROR_RT_PARAM_INVALID,
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => acl::ACL_ERROR_RT_MEMORY_ALLOCATION,
        CUresult::CUDA_ERROR_INVALID_DEVICE => acl::ACL_ERROR_RT_INVALID_DEVICEID,
        CUresult::CUDA_ERROR_INVALID_HANDLE | CUresult::CUDA_ERROR_INVALID_CONTEXT => acl::ACL_ERROR_RT_INVALID_HANDLE,
        CUresult::CUDA_ERROR_NOT_INITIALIZED => acl::ACL_ERROR_UNINITIALIZE as u32,
        CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE => acl::ACL_ERROR_RT_LOST_HEARTBEAT,
        _ => acl::ACL_ERROR_RT_DRV_INTERNAL_ERROR,
    }) as aclError
}

fn note_error(code: aclError, why: &str) -> aclError {
    let msg = format!("EE{code}: {why}");
    crate::util::log(&msg);
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = std::ffi::CString::new(msg).unwrap_or_default());
    let _ = LAST_CODE.try_with(|l| l.set(code));
    code
}

/// The thread's last failure; `reset` clears it.
fn last_code(reset: bool) -> aclError {
    LAST_CODE.try_with(|l| if reset { l.replace(0) } else { l.get() }).unwrap_or(0)
}

const AICORE_EXCEPTION: aclError = acl::ACL_ERROR_RT_AICORE_EXCEPTION as aclError;

/// Runs `f` with the client state, connected, the way every ACL export does: its failure
/// recorded for `aclGetRecentErrMsg`.
fn with<T>(what: &str, f: impl FnOnce(&mut Client) -> A<T>) -> A<T> {
    client::with(|c| Ok(f(c))).unwrap_or_else(|e| Err(acl_code(e))).map_err(|code| note_error(code, what))
}

/// A daemon call's CUDA-numbered failure as ACL's.
fn ask<R: gpupool_protocol::ops::Answer>(c: &mut Client, ep: usize, op: Request) -> A<R> {
    let r = c.conn_at(ep).and_then(|conn| conn.ask(op));
    r.map_err(|e| acl_code(c.note(e)))
}

fn call_ok(c: &mut Client, ep: usize, op: Request) -> A<()> {
    let r = c.conn_at(ep).and_then(|conn| conn.call_ok(op).and_then(|()| conn.take_pending()));
    r.map_err(|e| acl_code(c.note(e)))
}

fn initialized(c: &Client) -> A<()> {
    if c.acl.initialized { Ok(()) } else { Err(acl::ACL_ERROR_UNINITIALIZE) }
}

fn current(c: &Client) -> A<(u64, Ctx)> {
    initialized(c)?;
    let h = CURRENT.with(|x| *x.borrow()).ok_or(acl::ACL_ERROR_RT_CONTEXT_NULL as aclError)?;
    c.acl.ctxs.get(&h).map(|x| (h, *x)).ok_or(acl::ACL_ERROR_RT_CONTEXT_NULL as aclError)
}

/// The current context, which must not have faulted.
fn current_healthy(c: &Client) -> A<(u64, Ctx)> {
    let (h, x) = current(c)?;
    if c.acl.faulted.contains(&h) { Err(AICORE_EXCEPTION) } else { Ok((h, x)) }
}

fn npu(c: &Client, device: i32) -> A<Npu> {
    initialized(c)?;
    usize::try_from(device)
        .ok()
        .and_then(|i| c.acl.npus.get(i).copied())
        .ok_or(acl::ACL_ERROR_RT_INVALID_DEVICEID as aclError)
}

fn new_handle(c: &mut Client) -> u64 {
    c.acl.next += 1;
    0x6163_6c00_0000 + c.acl.next * 16
}

fn out<T>(p: *mut T, v: T) -> A<()> {
    if p.is_null() {
        return Err(INVALID_PARAM);
    }
    // SAFETY: non-null, and the caller's out-pointer for this value by the API's contract.
    unsafe { p.write(v) };
    Ok(())
}

fn status(r: A<()>) -> aclError {
    r.err().unwrap_or(SUCCESS)
}

/// The device allocation of this process holding `[p, p + n)` on endpoint `ep`.
fn owned(c: &Client, ep: usize, p: u64, n: usize) -> bool {
    c.acl.allocs.range((ep, 0)..=(ep, p)).next_back().is_some_and(|(&(e, base), &(size, _))| {
        e == ep && p.checked_add(n as u64).is_some_and(|end| end <= base + size)
    })
}

fn init(c: &mut Client) -> A<()> {
    if c.acl.initialized {
        return Err(acl::ACL_ERROR_REPEAT_INITIALIZE);
    }
    c.device_list().map_err(acl_code)?;
    // The pool's connection is the process's, shared with the CUDA front-end (whose own
    // `cuInit` state this leaves alone).
    c.acl.initialized = true;
    Ok(())
}

fn set_device(c: &mut Client, device: i32) -> A<()> {
    let n = npu(c, device)?;
    let h = match c.acl.defaults.get_mut(&device) {
        Some((h, count)) => {
            *count += 1;
            *h
        }
        None => {
            let answer::Context { ctx } = ask(c, n.ep, Request::PrimaryCtxRetain { device: n.ordinal })?;
            let h = new_handle(c);
            c.acl.ctxs.insert(h, Ctx { ep: n.ep, id: ctx, device });
            c.acl.defaults.insert(device, (h, 1));
            h
        }
    };
    CURRENT.with(|x| *x.borrow_mut() = Some(h));
    Ok(())
}

fn forget_ctx(c: &mut Client, h: u64) {
    c.acl.ctxs.remove(&h);
    c.acl.streams.retain(|_, s| s.2 != h);
    c.acl.events.retain(|_, e| e.2 != h);
    c.acl.allocs.retain(|_, a| a.1 != h);
    c.acl.faulted.remove(&h);
    let _ = CURRENT.try_with(|x| {
        let mut x = x.borrow_mut();
        if *x == Some(h) {
            *x = None;
        }
    });
}

/// The last `aclrtResetDevice` frees what the default context holds (the daemon's reset).
fn reset_device(c: &mut Client, device: i32) -> A<()> {
    let n = npu(c, device)?;
    let Some((h, count)) = c.acl.defaults.get(&device).copied() else {
        return Ok(());
    };
    if count > 1 {
        c.acl.defaults.insert(device, (h, count - 1));
        return Ok(());
    }
    call_ok(c, n.ep, Request::PrimaryCtxReset { device: n.ordinal })?;
    c.acl.defaults.remove(&device);
    forget_ctx(c, h);
    Ok(())
}

fn create_context(c: &mut Client, device: i32) -> A<aclrtContext> {
    let n = npu(c, device)?;
    let answer::Context { ctx } = ask(c, n.ep, Request::CtxCreate { device: n.ordinal, flags: 0 })?;
    let h = new_handle(c);
    c.acl.ctxs.insert(h, Ctx { ep: n.ep, id: ctx, device });
    CURRENT.with(|x| *x.borrow_mut() = Some(h));
    Ok(h as aclrtContext)
}

fn destroy_context(c: &mut Client, h: u64) -> A<()> {
    initialized(c)?;
    let Some(x) = c.acl.ctxs.get(&h).copied() else { return Err(INVALID_PARAM) };
    if c.acl.defaults.values().any(|&(d, _)| d == h) {
        return Err(INVALID_PARAM);
    }
    call_ok(c, x.ep, Request::CtxDestroy { ctx: x.id })?;
    // Its memory stays (CANN's memory is the device's), passing to the device's default context.
    let heir = c.acl.defaults.get(&x.device).map_or(0, |&(d, _)| d);
    for a in c.acl.allocs.values_mut().filter(|a| a.1 == h) {
        a.1 = heir;
    }
    forget_ctx(c, h);
    Ok(())
}

/// `aclrtMalloc` (`pad`) or `aclrtMallocAlign32`: the daemon allocates what CANN charges for it
/// (the size rounded up to 32 bytes, plus 32 for `aclrtMalloc`), so the quota and
/// `aclrtGetMemInfo` count as on CANN; the program's copies are checked against `size`.
fn malloc(c: &mut Client, size: usize, policy: acl::aclrtMemMallocPolicy, pad: bool) -> A<*mut c_void> {
    let (h, x) = current_healthy(c)?;
    // The policies CANN documents (0..=7) and its flags (P2P, huge 1G, read-only).
    if size == 0 || policy.0 & 0xff > 7 || policy.0 & !(0xff | 0x0100 | 0x1000 | 0x100000) != 0 {
        return Err(INVALID_PARAM);
    }
    allocate(c, h, x, size as u64, pad)
}

/// Device memory of `size` bytes in context `h`, charged what CANN charges for it (see [`malloc`];
/// `rtMalloc` is the unpadded charge, AscendCL's 32 bytes more being its own).
fn allocate(c: &mut Client, h: u64, x: Ctx, size: u64, pad: bool) -> A<*mut c_void> {
    let charge = size.div_ceil(32) * 32 + if pad { 32 } else { 0 };
    let answer::MemPtr { ptr } = ask(c, x.ep, Request::MemAlloc { ctx: x.id, bytes: charge })?;
    c.acl.allocs.insert((x.ep, ptr.0), (size, h));
    Ok(ptr.0 as *mut c_void)
}

fn free(c: &mut Client, p: u64) -> A<()> {
    let (_, x) = current(c)?;
    if !c.acl.allocs.contains_key(&(x.ep, p)) {
        return Err(INVALID_PARAM);
    }
    call_ok(c, x.ep, Request::MemFree { ptr: DevicePtr(p) })?;
    c.acl.allocs.remove(&(x.ep, p));
    Ok(())
}

fn stream_of(c: &Client, s: aclrtStream, ep: usize) -> A<StreamId> {
    if s.is_null() {
        return Ok(StreamId::NULL);
    }
    match c.acl.streams.get(&(s as u64)) {
        Some(&(e, id, _)) if e == ep => Ok(id),
        _ => Err(acl::ACL_ERROR_RT_INVALID_HANDLE as aclError),
    }
}

/// A copy of `count` bytes; `stream`: queued after the stream's earlier work (a host end is
/// copied once the stream has drained, so the program may reuse its buffer at once).
fn memcpy(
    c: &mut Client,
    dst: *mut c_void,
    max: usize,
    src: *const c_void,
    count: usize,
    kind: aclrtMemcpyKind,
    stream: Option<aclrtStream>,
) -> A<()> {
    let (_, x) = current_healthy(c)?;
    if count > max || (count > 0 && (dst.is_null() || src.is_null())) {
        return Err(INVALID_PARAM);
    }
    let stream = stream.map(|s| stream_of(c, s, x.ep)).transpose()?;
    let (d, s) = (dst as u64, src as u64);
    let kind = if kind == aclrtMemcpyKind::ACL_MEMCPY_DEFAULT {
        match (owned(c, x.ep, d, count), owned(c, x.ep, s, count)) {
            (true, true) => aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_DEVICE,
            (true, false) => aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE,
            (false, true) => aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST,
            (false, false) => aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_HOST,
        }
    } else {
        kind
    };
    if count == 0 {
        return Ok(());
    }
    // Each device end inside one allocation of this process, as CANN checks (107000).
    let (dst_dev, src_dev) = match kind {
        aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE => (true, false),
        aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST => (false, true),
        aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_DEVICE => (true, true),
        _ => (false, false),
    };
    if (dst_dev && !owned(c, x.ep, d, count)) || (src_dev && !owned(c, x.ep, s, count)) {
        return Err(acl::ACL_ERROR_RT_PARAM_INVALID as aclError);
    }
    let drain = |c: &mut Client| match stream {
        Some(stream) => call_ok(c, x.ep, Request::StreamSynchronize { stream }),
        None => Ok(()),
    };
    match kind {
        aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_HOST => {
            drain(c)?;
            // SAFETY: the program passes `count` readable bytes at src and writable at dst.
            unsafe { std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), count) };
            Ok(())
        }
        aclrtMemcpyKind::ACL_MEMCPY_HOST_TO_DEVICE => {
            drain(c)?;
            // SAFETY: as above, `count` readable bytes at src.
            let bytes = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), count) };
            let r = c.conn_at(x.ep).and_then(|conn| write_device(conn, d, bytes));
            r.map_err(|e| acl_code(c.note(e)))
        }
        aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_HOST => {
            drain(c)?;
            // SAFETY: as above, `count` writable bytes at dst.
            let bytes = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), count) };
            let r = c.conn_at(x.ep).and_then(|conn| read_device(conn, bytes, s));
            r.map_err(|e| acl_code(c.note(e)))
        }
        aclrtMemcpyKind::ACL_MEMCPY_DEVICE_TO_DEVICE => {
            let (dst, src, len) = (DevicePtr(d), DevicePtr(s), count as u64);
            match stream {
                None => call_ok(c, x.ep, Request::MemcpyDtoD { dst, src, len }),
                Some(stream) => {
                    let r =
                        c.conn_at(x.ep).and_then(|conn| conn.post(Request::MemcpyDtoDAsync { dst, src, len, stream }));
                    r.map_err(|e| acl_code(c.note(e)))
                }
            }
        }
        _ => Err(INVALID_PARAM),
    }
}

fn memset(c: &mut Client, p: *mut c_void, max: usize, value: i32, count: usize, stream: Option<aclrtStream>) -> A<()> {
    let (_, x) = current_healthy(c)?;
    if count > max || p.is_null() {
        return Err(INVALID_PARAM);
    }
    if !owned(c, x.ep, p as u64, count) {
        return Err(acl::ACL_ERROR_RT_PARAM_INVALID as aclError);
    }
    let set = Memset {
        dst: DevicePtr(p as u64),
        value: MemsetValue::U8(value as u8),
        width: count as u64,
        height: 1,
        pitch: 0,
    };
    match stream {
        None => call_ok(c, x.ep, Request::Memset { set }),
        Some(s) => {
            let stream = stream_of(c, s, x.ep)?;
            let r = c.conn_at(x.ep).and_then(|conn| conn.post(Request::MemsetAsync { set, stream }));
            r.map_err(|e| acl_code(c.note(e)))
        }
    }
}

/// Free and total of one kind of the current NPU's memory, by AscendCL's `aclrtMemAttr` or the
/// runtime's `rtMemInfoType_t` (the same numbers: AscendCL passes its attribute through). The
/// pool's NPU memory is its HBM (and what CANN counts with it); device DDR none.
fn mem_info_of(c: &mut Client, kind: u32) -> A<(usize, usize)> {
    match kind {
        0 | 2 | 3 | 6 | 7 => {
            initialized(c)?;
            Ok((0, 0))
        }
        1 | 4 | 5 | 8..=17 => mem_info(c),
        _ => Err(INVALID_PARAM),
    }
}

fn mem_info(c: &mut Client) -> A<(usize, usize)> {
    let (_, x) = current(c)?;
    let answer::MemInfo { free, total } = ask(c, x.ep, Request::MemGetInfo { ctx: x.id })?;
    Ok((free as usize, total as usize))
}

fn create_stream(c: &mut Client) -> A<aclrtStream> {
    let (h, x) = current_healthy(c)?;
    let answer::Stream { stream } = ask(c, x.ep, Request::StreamCreate { ctx: x.id, flags: 0, priority: 0 })?;
    let sh = new_handle(c);
    c.acl.streams.insert(sh, (x.ep, stream, h));
    Ok(sh as aclrtStream)
}

fn destroy_stream(c: &mut Client, s: aclrtStream) -> A<()> {
    initialized(c)?;
    if s.is_null() {
        // The default stream is the context's, not the program's to destroy.
        return Err(INVALID_PARAM);
    }
    let &(ep, id, _) = c.acl.streams.get(&(s as u64)).ok_or(acl::ACL_ERROR_RT_INVALID_HANDLE as aclError)?;
    call_ok(c, ep, Request::StreamDestroy { stream: id })?;
    c.acl.streams.remove(&(s as u64));
    Ok(())
}

fn synchronize_stream(c: &mut Client, s: aclrtStream) -> A<()> {
    let (_, x) = current_healthy(c)?;
    let stream = stream_of(c, s, x.ep)?;
    if c.acl.streams.get(&(s as u64)).is_some_and(|st| c.acl.faulted.contains(&st.2)) {
        return Err(AICORE_EXCEPTION);
    }
    call_ok(c, x.ep, Request::StreamSynchronize { stream })
}

fn synchronize_device(c: &mut Client) -> A<()> {
    let (_, x) = current_healthy(c)?;
    call_ok(c, x.ep, Request::CtxSynchronize { ctx: x.id })
}

fn event_of(c: &Client, e: acl::aclrtEvent) -> A<(usize, gpupool_protocol::EventId)> {
    initialized(c)?;
    c.acl.events.get(&(e as u64)).map(|&(ep, id, _)| (ep, id)).ok_or(acl::ACL_ERROR_RT_INVALID_HANDLE as aclError)
}

fn create_event(c: &mut Client, flags: u32) -> A<acl::aclrtEvent> {
    let (h, x) = current_healthy(c)?;
    let answer::Event { event } = ask(c, x.ep, Request::EventCreate { ctx: x.id, flags })?;
    let eh = new_handle(c);
    c.acl.events.insert(eh, (x.ep, event, h));
    Ok(eh as acl::aclrtEvent)
}

fn destroy_event(c: &mut Client, e: acl::aclrtEvent) -> A<()> {
    let (ep, event) = event_of(c, e)?;
    call_ok(c, ep, Request::EventDestroy { event })?;
    c.acl.events.remove(&(e as u64));
    Ok(())
}

/// Record (or, with `wait`, make `stream` wait for) an event: stream-ordered, no reply.
fn event_on_stream(c: &mut Client, e: acl::aclrtEvent, s: aclrtStream, wait: bool) -> A<()> {
    let (ep, event) = event_of(c, e)?;
    let stream = stream_of(c, s, ep)?;
    let op = if wait {
        Request::StreamWaitEvent { stream, event, flags: 0 }
    } else {
        Request::EventRecord { event, stream }
    };
    let r = c.conn_at(ep).and_then(|conn| conn.post(op));
    r.map_err(|e| acl_code(c.note(e)))
}

fn synchronize_event(c: &mut Client, e: acl::aclrtEvent) -> A<()> {
    let (ep, event) = event_of(c, e)?;
    call_ok(c, ep, Request::EventSynchronize { event })
}

/// Whether `s` (NULL: the current context's default stream) has finished its work.
fn query_stream(c: &mut Client, s: aclrtStream) -> A<bool> {
    let (_, x) = current(c)?;
    let stream = stream_of(c, s, x.ep)?;
    if stream == StreamId::NULL {
        // The daemon's default stream is not one of the session's streams it can name: waiting
        // for it answers the query truthfully (complete) at the cost of blocking.
        call_ok(c, x.ep, Request::StreamSynchronize { stream })?;
        return Ok(true);
    }
    let answer::Ready { ready } = ask(c, x.ep, Request::StreamQuery { stream })?;
    Ok(ready)
}

fn query_event(c: &mut Client, e: acl::aclrtEvent) -> A<bool> {
    let (ep, event) = event_of(c, e)?;
    let answer::Ready { ready } = ask(c, ep, Request::EventQuery { event })?;
    Ok(ready)
}

fn elapsed(c: &mut Client, a: acl::aclrtEvent, b: acl::aclrtEvent) -> A<f32> {
    let (ep, start) = event_of(c, a)?;
    let (eb, end) = event_of(c, b)?;
    if ep != eb {
        return Err(INVALID_PARAM);
    }
    let answer::Elapsed { nanos } = ask(c, ep, Request::EventElapsedTime { start, end })?;
    Ok((nanos as f64 / 1e6) as f32)
}

/// The pool's NPUs, in the one list's order (the program's device and card numbers).
fn load_npus(c: &mut Client) -> A<()> {
    let npus = c.devices_of(VENDOR_ASCEND).map_err(acl_code)?;
    c.acl.npus.clear();
    c.acl.names.clear();
    for (ep, d) in npus {
        let aicores = d.attributes.iter().find(|a| a.attribute == NPU_ATTR_AICORES).map_or(0, |a| a.value as u32);
        c.acl.npus.push(Npu { ep, ordinal: d.ordinal, name_index: c.acl.names.len(), aicores });
        c.acl.names.push(d.name);
    }
    Ok(())
}

mod aclnn;
mod dcmi;
mod export;
mod rt;
