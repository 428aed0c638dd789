//! Contexts: primary and regular, each with its own address space, default streams
//! and sticky error; and the per-thread stack of current contexts.

use crate::device::Device;
use crate::driver::{Driver, initialized};
use crate::error::{CuResult, fail};
use crate::memory::AddressSpace;
use crate::stream::{Stream, StreamKind};
use gpupool_shim::cuda::{CUlimit, CUresult};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::ThreadId;

pub struct Context {
    handle: OnceLock<u64>,
    pub device: Arc<Device>,
    pub flags: AtomicU32,
    pub primary: bool,
    pub memory: AddressSpace,
    /// First sticky error (e.g. an illegal address in a kernel); 0 when healthy.
    sticky: AtomicU32,
    destroyed: AtomicBool,
    /// Serialises enqueues that must see a consistent set of streams (the legacy
    /// default stream synchronises with every blocking stream of its context).
    pub order: Mutex<()>,
    legacy: OnceLock<Arc<Stream>>,
    per_thread: Mutex<HashMap<ThreadId, Arc<Stream>>>,
    /// Every stream of this context, for synchronisation and teardown.
    pub streams: Mutex<Vec<Weak<Stream>>>,
    pub limits: Mutex<HashMap<u32, usize>>,
    pub cache_config: AtomicU32,
    /// Stops its grids between blocks while another context has the device ([`crate::preempt`]).
    pub preemption: crate::preempt::Preemption,
    /// What its kernels printed, until a documented point flushes it ([`crate::printf`]).
    pub printf: crate::printf::Fifo,
    /// A kernel that uses printf was launched: CU_LIMIT_PRINTF_FIFO_SIZE is fixed from then on.
    pub printf_launched: AtomicBool,
}

/// The primary context of a device and its reference count.
#[derive(Default)]
pub struct PrimaryState {
    pub ctx: Option<Arc<Context>>,
    pub refcount: u32,
    pub flags: u32,
}

thread_local! {
    static STACK: RefCell<Vec<Arc<Context>>> = const { RefCell::new(Vec::new()) };
}

impl Context {
    pub fn create(driver: &Driver, device: Arc<Device>, flags: u32, primary: bool) -> CuResult<Arc<Context>> {
        let memory = AddressSpace::new(device.clone())?;
        let ctx = Arc::new(Context {
            handle: OnceLock::new(),
            device,
            flags: AtomicU32::new(flags),
            primary,
            memory,
            sticky: AtomicU32::new(0),
            destroyed: AtomicBool::new(false),
            order: Mutex::new(()),
            legacy: OnceLock::new(),
            per_thread: Mutex::new(HashMap::new()),
            streams: Mutex::new(Vec::new()),
            limits: Mutex::new(default_limits()),
            cache_config: AtomicU32::new(0),
            preemption: Default::default(),
            printf: Default::default(),
            printf_launched: AtomicBool::new(false),
        });
        let handle = driver.contexts.insert(ctx.clone());
        let _ = ctx.handle.set(handle);
        ctx.memory.bind(handle);
        Ok(ctx)
    }

    pub fn handle(&self) -> u64 {
        *self.handle.get().unwrap_or(&0)
    }

    pub fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    /// The sticky error, if the context has suffered one.
    pub fn check_sticky(&self) -> CuResult<()> {
        match self.sticky.load(Ordering::Acquire) {
            0 => Ok(()),
            code => Err(CUresult(code)),
        }
    }

    pub fn set_sticky(&self, code: CUresult) {
        let _ = self.sticky.compare_exchange(0, code.0, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The legacy default stream (NULL or `CU_STREAM_LEGACY`).
    pub fn legacy_stream(self: &Arc<Self>) -> Arc<Stream> {
        self.legacy.get_or_init(|| Stream::new(self, StreamKind::Legacy, 0, 0)).clone()
    }

    pub fn legacy_if_created(&self) -> Option<Arc<Stream>> {
        self.legacy.get().cloned()
    }

    /// This thread's per-thread default stream (`CU_STREAM_PER_THREAD`, `_ptds`).
    pub fn per_thread_stream(self: &Arc<Self>) -> Arc<Stream> {
        let id = std::thread::current().id();
        let mut map = self.per_thread.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(id).or_insert_with(|| Stream::new(self, StreamKind::PerThread, 0, 0)).clone()
    }

    /// Use of the legacy stream while a blocking stream of this context is in a capture:
    /// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, and that capture is invalidated.
    pub fn refuse_legacy_during_capture(&self) -> crate::error::CuResult<()> {
        if !crate::capture::any_under_way() {
            return Ok(());
        }
        let Some(s) = self.live_streams().into_iter().find(|s| s.is_blocking() && s.is_capturing()) else {
            return Ok(());
        };
        s.invalidate_capture();
        crate::error::fail(gpupool_shim::cuda::CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, || {
            "the legacy stream (or a synchronous call, which uses it) while a blocking stream of its context \
             captures: its implicit synchronization would depend on the capture, which is invalidated"
                .into()
        })
    }

    pub fn live_streams(&self) -> Vec<Arc<Stream>> {
        let mut list = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|w| w.strong_count() > 0);
        list.iter().filter_map(Weak::upgrade).collect()
    }

    /// Waits until every stream of the context has finished what was queued on it so
    /// far, leaving asynchronous errors for the next synchronisation to report and
    /// captures untouched. Calls that end memory (`cuMemFree`, `cuModuleUnload`) wait
    /// like this, as NVIDIA's driver does: work already queued runs on the memory it
    /// named, never on freed (or reused) memory.
    pub fn drain(&self) {
        for s in self.live_streams() {
            s.wait_for_queued();
        }
    }

    /// Waits for all work of the context; returns the sticky error or the first
    /// asynchronous error any stream reported.
    pub fn synchronize(&self) -> CuResult<()> {
        let mut first = Ok(());
        for s in self.live_streams() {
            if let Err(e) = s.synchronize()
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        self.check_sticky()?;
        first
    }

    /// Tears the context down: drains its streams, stops their workers, frees all
    /// its memory and forgets its handles.
    pub fn destroy(self: &Arc<Self>, driver: &Driver) {
        if self.destroyed.swap(true, Ordering::AcqRel) {
            return;
        }
        // A stopped grid would never finish, and the drain below waits for it.
        self.preemption.resume();
        let _ = self.synchronize();
        self.printf.flush();
        for s in self.live_streams() {
            s.shut_down();
        }
        let me = self.handle();
        driver.streams.remove_where(|s| s.ctx_handle == me);
        driver.events.remove_where(|e| e.ctx_handle == me);
        driver.functions.remove_where(|f| f.ctx_handle == me);
        driver.modules.remove_where(|m| m.ctx_handle == me);
        driver.graphs.remove_where(|g| g.ctx_handle == me);
        driver.graph_execs.remove_where(|g| g.ctx_handle == me);
        driver.textures.remove_where(|t| t.ctx_handle == me);
        driver.surfaces.remove_where(|s| s.ctx_handle == me);
        driver.mipmapped_arrays.remove_where(|m| m.ctx_handle == me);
        driver.arrays.remove_where(|a| a.ctx_handle == me);
        driver.contexts.remove(me);
        self.per_thread.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.memory.release_all();
    }

    pub fn limit(&self, limit: CUlimit) -> Option<usize> {
        self.limits.lock().unwrap_or_else(|e| e.into_inner()).get(&limit.0).copied()
    }
}

fn default_limits() -> HashMap<u32, usize> {
    HashMap::from([
        (CUlimit::CU_LIMIT_STACK_SIZE.0, 1024),
        (CUlimit::CU_LIMIT_PRINTF_FIFO_SIZE.0, 1 << 20),
        (CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE.0, 8 << 20),
        (CUlimit::CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH.0, 2),
        (CUlimit::CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT.0, 2048),
        (CUlimit::CU_LIMIT_MAX_L2_FETCH_GRANULARITY.0, 64),
        (CUlimit::CU_LIMIT_PERSISTING_L2_CACHE_SIZE.0, 0),
    ])
}

/// The calling thread's current context, or the error CUDA documents for its absence.
pub fn current() -> CuResult<Arc<Context>> {
    initialized()?;
    let top = STACK.with(|s| s.borrow().last().cloned());
    match top {
        Some(ctx) if !ctx.is_destroyed() => Ok(ctx),
        Some(_) => fail(CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED, || "the current context was destroyed".into()),
        None => fail(CUresult::CUDA_ERROR_INVALID_CONTEXT, || "no context is current to this thread".into()),
    }
}

/// Current context, also refusing one with a sticky error.
pub fn current_healthy() -> CuResult<Arc<Context>> {
    let ctx = current()?;
    ctx.check_sticky()?;
    Ok(ctx)
}

pub fn current_or_none() -> Option<Arc<Context>> {
    STACK.with(|s| s.borrow().last().cloned())
}

pub fn push(ctx: Arc<Context>) {
    STACK.with(|s| s.borrow_mut().push(ctx));
}

pub fn pop() -> Option<Arc<Context>> {
    STACK.with(|s| s.borrow_mut().pop())
}

/// `cuCtxSetCurrent`: replaces the top of the stack (or pushes onto an empty one);
/// `None` pops.
pub fn set_current(ctx: Option<Arc<Context>>) {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        s.pop();
        if let Some(c) = ctx {
            s.push(c);
        }
    });
}

/// Drops a destroyed context from this thread's stack wherever it appears.
pub fn forget_on_this_thread(handle: u64) {
    STACK.with(|s| s.borrow_mut().retain(|c| c.handle() != handle));
}

/// Resolves a `CUcontext` handle.
pub fn lookup(driver: &Driver, handle: u64) -> CuResult<Arc<Context>> {
    match driver.contexts.get(handle) {
        Some(c) if !c.is_destroyed() => Ok(c),
        _ => fail(CUresult::CUDA_ERROR_INVALID_CONTEXT, || format!("{handle:#x} is not a live context")),
    }
}
