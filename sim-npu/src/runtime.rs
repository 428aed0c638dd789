//! The runtime's state machine: initialization, devices, contexts (a default one per device
//! made by `aclrtSetDevice`, counted, and explicit ones), the calling thread's current
//! context, and the handle tables for contexts, streams and events.
//!
//! Handles are numbers from one counter, never addresses of our objects, so a stale or forged
//! handle is looked up and refused (ACL_ERROR_RT_INVALID_HANDLE), never dereferenced.

use crate::config::NpuConfig;
use crate::event::Event;
use crate::status::{Code, Res, code, fail};
use crate::stream::Stream;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// A context's sticky fault: once set (an out-of-range operand), every stream of the context
/// skips its work and every call in it answers the code, until the context is destroyed (an
/// explicit one) or its device reset (the default one).
#[derive(Default)]
pub struct Fault(AtomicI32);

impl Fault {
    pub fn get(&self) -> Option<Code> {
        Some(self.0.load(Ordering::Acquire)).filter(|&c| c != 0)
    }
    pub fn set(&self, c: Code) {
        let _ = self.0.compare_exchange(0, c, Ordering::AcqRel, Ordering::Acquire);
    }
}

pub struct Context {
    pub id: u64,
    pub device: u32,
    pub fault: Arc<Fault>,
    pub default_stream: Arc<Stream>,
}

#[derive(Default)]
struct DeviceState {
    set_count: u32,
    default_ctx: Option<u64>,
}

#[derive(Default)]
struct State {
    initialized: bool,
    devices: Vec<DeviceState>,
    contexts: HashMap<u64, Arc<Context>>,
    streams: HashMap<u64, Arc<Stream>>,
    events: HashMap<u64, Arc<Event>>,
    next_handle: u64,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

thread_local! {
    static CURRENT: Cell<u64> = const { Cell::new(0) };
}

/// The configuration read once per process; a bad one presents no devices and makes aclInit
/// fail (with the reason on stderr).
fn loaded() -> &'static Result<NpuConfig, String> {
    static CFG: OnceLock<Result<NpuConfig, String>> = OnceLock::new();
    CFG.get_or_init(NpuConfig::from_env)
}

pub fn config() -> &'static NpuConfig {
    static NONE: NpuConfig = NpuConfig { devices: Vec::new() };
    loaded().as_ref().unwrap_or(&NONE)
}

fn lock() -> MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on the initialized state, or refuses with ACL_ERROR_UNINITIALIZE.
fn with<T>(f: impl FnOnce(&mut State) -> Res<T>) -> Res<T> {
    let mut g = lock();
    match g.as_mut() {
        Some(s) if s.initialized => f(s),
        _ => fail(code::UNINITIALIZE, || "aclInit has not been called".into()),
    }
}

impl State {
    fn handle(&mut self) -> u64 {
        self.next_handle += 0x10;
        0x5a00_0000 + self.next_handle
    }

    fn new_context(&mut self, device: u32) -> Arc<Context> {
        let id = self.handle();
        let fault = Arc::new(Fault::default());
        let sid = self.handle();
        let stream = Stream::new(sid, id, device, fault.clone());
        let ctx = Arc::new(Context { id, device, fault, default_stream: stream });
        self.contexts.insert(id, ctx.clone());
        ctx
    }

    /// Drops a context and its streams (each finishes its queued work first).
    fn remove_context(&mut self, id: u64) -> Vec<Arc<Stream>> {
        self.contexts.remove(&id);
        let ids: Vec<u64> = self.streams.iter().filter(|(_, s)| s.ctx == id).map(|(k, _)| *k).collect();
        ids.iter().filter_map(|k| self.streams.remove(k)).collect()
    }
}

pub fn init() -> Res<()> {
    let mut g = lock();
    let s = g.get_or_insert_with(State::default);
    if s.initialized {
        return fail(code::REPEAT_INITIALIZE, || "aclInit called twice".into());
    }
    if let Err(e) = loaded() {
        eprintln!("gpupool-sim-npu: {e}");
        return fail(gpupool_shim::acl::ACL_ERROR_INVALID_FILE, || format!("the simulator's configuration: {e}"));
    }
    s.initialized = true;
    s.devices = config().devices.iter().map(|_| DeviceState::default()).collect();
    Ok(())
}

pub fn finalize() -> Res<()> {
    let streams = {
        let mut g = lock();
        let Some(s) = g.as_mut().filter(|s| s.initialized) else {
            return fail(code::REPEAT_FINALIZE, || "aclFinalize without a matching aclInit".into());
        };
        let streams: Vec<Arc<Stream>> = s.streams.drain().map(|(_, v)| v).collect();
        let defaults: Vec<Arc<Stream>> = s.contexts.drain().map(|(_, c)| c.default_stream.clone()).collect();
        *s = State::default();
        streams.into_iter().chain(defaults).collect::<Vec<_>>()
    };
    CURRENT.with(|c| c.set(0));
    for st in streams {
        st.shutdown();
    }
    Ok(())
}

pub fn device_count() -> Res<u32> {
    with(|s| Ok(s.devices.len() as u32))
}

fn check_device(s: &State, device: i32) -> Res<u32> {
    match u32::try_from(device) {
        Ok(d) if (d as usize) < s.devices.len() => Ok(d),
        _ => fail(code::RT_INVALID_DEVICEID, || format!("device {device} of {}", s.devices.len())),
    }
}

/// `aclrtSetDevice`: counts a use of the device and makes its default context current.
pub fn set_device(device: i32) -> Res<()> {
    let id = with(|s| {
        let d = check_device(s, device)?;
        let ctx = match s.devices[d as usize].default_ctx {
            Some(id) => id,
            None => {
                let id = s.new_context(d).id;
                s.devices[d as usize].default_ctx = Some(id);
                id
            }
        };
        s.devices[d as usize].set_count += 1;
        Ok(ctx)
    })?;
    CURRENT.with(|c| c.set(id));
    Ok(())
}

/// `aclrtResetDevice` (`force`: `aclrtResetDeviceForce`): the last reset destroys the default
/// context, its streams (after their work) and its fault.
pub fn reset_device(device: i32, force: bool) -> Res<()> {
    let (dead, streams) = with(|s| {
        let d = check_device(s, device)? as usize;
        let dev = &mut s.devices[d];
        if dev.set_count == 0 {
            return fail(code::RT_INVALID_DEVICEID, || format!("device {device} was not set by this process"));
        }
        dev.set_count = if force { 0 } else { dev.set_count - 1 };
        if dev.set_count > 0 {
            return Ok((None, Vec::new()));
        }
        let Some(ctx) = dev.default_ctx.take() else { return Ok((None, Vec::new())) };
        let default = s.contexts.get(&ctx).map(|c| c.default_stream.clone());
        let mut streams = s.remove_context(ctx);
        streams.extend(default);
        Ok((Some(ctx), streams))
    })?;
    if let Some(ctx) = dead
        && CURRENT.with(|c| c.get()) == ctx
    {
        CURRENT.with(|c| c.set(0));
    }
    for st in streams {
        st.shutdown();
    }
    Ok(())
}

/// The calling thread's current context, or ACL_ERROR_RT_CONTEXT_NULL.
pub fn current() -> Res<Arc<Context>> {
    let id = CURRENT.with(|c| c.get());
    with(|s| match s.contexts.get(&id) {
        Some(c) => Ok(c.clone()),
        None => {
            fail(code::RT_CONTEXT_NULL, || "no current context (aclrtSetDevice or aclrtSetCurrentContext first)".into())
        }
    })
}

/// The current context, refusing with its sticky fault if it has one.
pub fn current_healthy() -> Res<Arc<Context>> {
    let ctx = current()?;
    match ctx.fault.get() {
        Some(c) => fail(c, || format!("context {:#x} has faulted ({c}); reset the device", ctx.id)),
        None => Ok(ctx),
    }
}

pub fn create_context(device: i32) -> Res<u64> {
    let id = with(|s| {
        let d = check_device(s, device)?;
        Ok(s.new_context(d).id)
    })?;
    CURRENT.with(|c| c.set(id));
    Ok(id)
}

pub fn destroy_context(id: u64) -> Res<()> {
    let streams = with(|s| {
        let Some(ctx) = s.contexts.get(&id).cloned() else {
            return fail(code::RT_INVALID_HANDLE, || format!("context {id:#x} is not a live context"));
        };
        if s.devices.iter().any(|d| d.default_ctx == Some(id)) {
            return fail(code::INVALID_PARAM, || "a default context is released by aclrtResetDevice".into());
        }
        let mut streams = s.remove_context(id);
        streams.push(ctx.default_stream.clone());
        Ok(streams)
    })?;
    if CURRENT.with(|c| c.get()) == id {
        CURRENT.with(|c| c.set(0));
    }
    for st in streams {
        st.shutdown();
    }
    Ok(())
}

pub fn set_current(id: u64) -> Res<()> {
    with(|s| match s.contexts.contains_key(&id) {
        true => Ok(()),
        false => fail(code::RT_INVALID_HANDLE, || format!("context {id:#x} is not a live context")),
    })?;
    CURRENT.with(|c| c.set(id));
    Ok(())
}

/// A stream handle in the current context: NULL is the context's default stream.
pub fn stream(handle: u64) -> Res<(Arc<Context>, Arc<Stream>)> {
    let ctx = current()?;
    if handle == 0 {
        return Ok((ctx.clone(), ctx.default_stream.clone()));
    }
    let st = with(|s| match s.streams.get(&handle) {
        Some(st) => Ok(st.clone()),
        None => fail(code::RT_INVALID_HANDLE, || format!("stream {handle:#x} is not a live stream")),
    })?;
    if st.ctx != ctx.id {
        return fail(code::RT_STREAM_CONTEXT, || format!("stream {handle:#x} belongs to another context"));
    }
    Ok((ctx, st))
}

pub fn create_stream() -> Res<u64> {
    let ctx = current()?;
    with(|s| {
        let id = s.handle();
        s.streams.insert(id, Stream::new(id, ctx.id, ctx.device, ctx.fault.clone()));
        Ok(id)
    })
}

/// Removes a stream from the tables (the caller shuts it down after its work).
pub fn remove_stream(handle: u64) -> Res<Arc<Stream>> {
    with(|s| match s.streams.remove(&handle) {
        Some(st) => Ok(st),
        None => fail(code::RT_INVALID_HANDLE, || {
            format!("stream {handle:#x} is not a live stream (the default stream is not destroyed)")
        }),
    })
}

/// Every stream of the current context, its default one first.
/// Every stream on the current context's device, in every context of the process (what
/// `aclrtSynchronizeDevice` waits for).
pub fn streams_of_device() -> Res<(Arc<Context>, Vec<Arc<Stream>>)> {
    let ctx = current()?;
    let v = with(|s| {
        let defaults = s.contexts.values().filter(|c| c.device == ctx.device).map(|c| c.default_stream.clone());
        Ok(defaults.chain(s.streams.values().filter(|st| st.device == ctx.device).cloned()).collect())
    })?;
    Ok((ctx, v))
}

pub fn add_event(flags: u32) -> Res<u64> {
    current()?;
    with(|s| {
        let id = s.handle();
        s.events.insert(id, Arc::new(Event::new(flags)));
        Ok(id)
    })
}

pub fn event(handle: u64) -> Res<Arc<Event>> {
    with(|s| match s.events.get(&handle) {
        Some(e) => Ok(e.clone()),
        None => fail(code::RT_INVALID_HANDLE, || format!("event {handle:#x} is not a live event")),
    })
}

pub fn remove_event(handle: u64) -> Res<()> {
    with(|s| match s.events.remove(&handle) {
        Some(_) => Ok(()),
        None => fail(code::RT_INVALID_HANDLE, || format!("event {handle:#x} is not a live event")),
    })
}

/// Whether aclInit has run (DCMI and the operators' descriptor calls do not need it).
pub fn initialized() -> bool {
    lock().as_ref().is_some_and(|s| s.initialized)
}

/// The calling thread's current device, without refusing (for answers that have a default).
pub fn current_device() -> Option<u32> {
    let id = CURRENT.with(|c| c.get());
    lock().as_ref().and_then(|s| s.contexts.get(&id).map(|c| c.device))
}
