//! Client-side state: the connection, the cached device list, and the handles this
//! process was issued (contexts, streams, events, modules, functions, allocations), so that
//! most validation and every device query is answered without a round trip.
//!
//! One process-wide lock guards it all (one request in flight). The per-thread context
//! stack lives in a thread-local. After `fork`, the child notices on its next call (the
//! fork generation differs) and starts over with a fresh connection.

pub mod conn;
pub mod endpoint;
mod flusher;
mod handles;
pub mod host_channel;
pub mod resume;
mod visible;

pub use handles::*;

use conn::Conn;
use gpupool_protocol::CtxId;
use gpupool_shim::cuda::CUresult;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

use crate::util::{R, log};

#[derive(Default)]
pub struct Client {
    /// One connection per endpoint, in `GPUPOOL_ENDPOINT`'s order (opened together).
    pub conns: Vec<Conn>,
    /// Every daemon's devices, one list in endpoint order; `ordinal` is the index here.
    pub devices: Vec<gpupool_protocol::ops::DeviceInfo>,
    /// Per device of `devices`: (endpoint, the daemon's own ordinal).
    pub routes: Vec<(usize, u32)>,
    /// NVML's list: every daemon's GPUs, before `CUDA_VISIBLE_DEVICES` (which NVIDIA's NVML
    /// ignores), `ordinal` its index here; and their routes.
    pub nvml_devices: Vec<gpupool_protocol::ops::DeviceInfo>,
    pub nvml_routes: Vec<(usize, u32)>,
    /// The oldest driver version among the daemons.
    pub driver_version: u32,
    /// `cuInit` succeeded in this process.
    pub initialized: bool,
    /// The daemon went away after a successful start.
    pub gone: bool,
    /// Connecting failed (unreachable, refused): every later attempt answers this, as a
    /// failed `cuInit` stays failed, without asking the daemons again.
    pub refused: Option<CUresult>,
    /// The fork generation this state belongs to.
    pub generation: u32,
    pub reg: Registry,
    /// What the AscendCL front-end holds ([`crate::acl`]).
    pub acl: crate::acl::State,
}

/// What this process holds, by the handle values the application sees.
#[derive(Default)]
pub struct Registry {
    pub ctxs: crate::util::HandleMap<u64, CtxInfo>,
    /// Per device ordinal: the primary context's handle and its retain count.
    pub primary: HashMap<u32, (u64, u32, u32)>,
    pub streams: crate::util::HandleMap<u64, StreamInfo>,
    pub events: crate::util::HandleMap<u64, EventInfo>,
    pub modules: crate::util::HandleMap<u64, ModuleInfo>,
    pub funcs: crate::util::HandleMap<u64, FuncInfo>,
    /// Device allocations: (endpoint, base) -> (size, context handle). Daemons on
    /// different hosts may hand out the same addresses; a pointer means the allocation of
    /// the endpoint whose context it is used in.
    pub allocs: BTreeMap<(usize, u64), (u64, u64)>,
    /// Address ranges reserved with `cuMemAddressReserve`: (endpoint, base) -> (size, the
    /// context handle current then). Their accessible mapped runs are in `allocs`, owned by
    /// that context ([`crate::api`]'s `vmm`).
    pub reserved: BTreeMap<(usize, u64), (u64, u64)>,
    /// Page-locked host allocations (local): base -> (size, flags).
    pub host: BTreeMap<usize, (usize, u32)>,
    /// Per-thread default streams, per (thread, context handle).
    pub per_thread: crate::util::HandleMap<(std::thread::ThreadId, u64), gpupool_protocol::StreamId>,
    /// Host ranges registered with cuMemHostRegister: base -> size.
    pub registered: HashMap<usize, usize>,
    /// Page-locked allocations: base -> (the daemon's region id where the memory is
    /// shared with it (a local session), this process's mapping).
    pub regions: BTreeMap<usize, (Option<u64>, gpupool_protocol::transport::Mapping)>,
}

impl Registry {
    /// The device allocation containing `p`, among those of the calling thread's current
    /// context's endpoint: (base, size, context handle).
    pub fn alloc_of(&self, p: u64) -> Option<(u64, u64, u64)> {
        self.alloc_in(current_endpoint(), p)
    }
    /// The allocation of endpoint `ep` containing `p`.
    pub fn alloc_in(&self, ep: usize, p: u64) -> Option<(u64, u64, u64)> {
        let (&(e, base), &(size, ctx)) = self.allocs.range((ep, 0)..=(ep, p)).next_back()?;
        (e == ep && p < base + size.max(1)).then_some((base, size, ctx))
    }
    /// The shared region holding all of `[p, p + n)`: (region id, offset of `p`).
    pub fn region_of(&self, p: usize, n: usize) -> Option<(u64, u64)> {
        let (&base, (id, map)) = self.regions.range(..=p).next_back()?;
        let end = p.checked_add(n)?;
        (end <= base + map.len()).then_some(((*id)?, (p - base) as u64))
    }
    /// Where shared region `id` starts in this process.
    pub fn region_base(&self, id: u64) -> Option<usize> {
        self.regions.iter().find(|(_, (r, _))| *r == Some(id)).map(|(&base, _)| base)
    }
    pub fn host_of(&self, p: usize) -> Option<(usize, usize, u32)> {
        let (&base, &(size, flags)) = self.host.range(..=p).next_back()?;
        (p < base + size.max(1)).then_some((base, size, flags))
    }
    /// Forgets what was created through context `h` (the daemon frees it with the context).
    pub fn forget_ctx(&mut self, h: u64) {
        self.ctxs.remove(&h);
        self.allocs.retain(|_, (_, owner)| *owner != h);
        self.streams.retain(|_, s| s.ctx != h);
        self.per_thread.retain(|(_, ctx), _| *ctx != h);
    }
    pub fn ctx(&self, h: u64) -> R<&CtxInfo> {
        self.ctxs.get(&h).ok_or(CUresult::CUDA_ERROR_INVALID_CONTEXT)
    }
}

static CLIENT: Mutex<Option<Client>> = Mutex::new(None);

thread_local! {
    /// This thread's context stack (handles), top last.
    static STACK: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    /// The client lock held across `fork` by this (the forking) thread.
    static FORK_GUARD: RefCell<Option<MutexGuard<'static, Option<Client>>>> = const { RefCell::new(None) };
}

extern "C" fn before_fork() {
    let g = CLIENT.lock().unwrap_or_else(|e| e.into_inner());
    FORK_GUARD.with(|f| *f.borrow_mut() = Some(g));
}
extern "C" fn after_fork() {
    FORK_GUARD.with(|f| drop(f.borrow_mut().take()));
}
extern "C" fn after_fork_child() {
    FORK_GEN.fetch_add(1, Ordering::Relaxed);
    host_channel::after_fork_child();
    after_fork();
}

/// Bumped in every forked child (by the atfork handler registered with the first
/// connection; before it nothing needs resetting), so the hot path checks an atomic
/// instead of calling getpid.
static FORK_GEN: AtomicU32 = AtomicU32::new(0);

fn register_atfork() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the handlers are plain functions that live as long as the library (never
        // unloaded: it is preloaded); they only take and release our own lock.
        let rc = unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(after_fork_child)) };
        if rc != 0 {
            log("pthread_atfork failed; a forked child must not use CUDA");
        }
    });
}

/// Set by the first attempt to reach a daemon: the exports' tests check with it that a
/// refused argument costs no round trip.
static CONNECT_ATTEMPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[cfg(test)]
pub fn ever_connected() -> bool {
    CONNECT_ATTEMPTED.load(Ordering::Relaxed)
}

/// Runs `f` with the client state locked (created on first use; reset in a forked child).
pub fn with<T>(f: impl FnOnce(&mut Client) -> R<T>) -> R<T> {
    if host_channel::in_host_fn() {
        log("CUDA_ERROR_NOT_PERMITTED: a host function must not call CUDA");
        return Err(CUresult::CUDA_ERROR_NOT_PERMITTED);
    }
    let mut g = CLIENT.lock().unwrap_or_else(|e| e.into_inner());
    let generation = FORK_GEN.load(Ordering::Relaxed);
    let c = g.get_or_insert_with(|| Client { generation, ..Default::default() });
    if c.generation != generation {
        // A forked child: the parent's connection and handles are not ours.
        for conn in std::mem::take(&mut c.conns) {
            conn.abandon();
        }
        let initialized = c.initialized;
        // The child keeps its copies of the parent's page-locked mappings (its pointers
        // stay readable); they are no longer regions of any session.
        std::mem::forget(std::mem::take(&mut c.reg.regions));
        *c = Client { generation, initialized, ..Default::default() };
        STACK.with(|s| s.borrow_mut().clear());
    }
    f(c)
}

impl Client {
    /// Opens a connection to every endpoint (on first use), and builds the one device list.
    /// `cuInit` reports a failure as NOT_INITIALIZED; later calls after a daemon left get
    /// DEVICE_UNAVAILABLE.
    fn connect(&mut self) -> R<()> {
        if self.gone {
            return Err(CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE);
        }
        if !self.conns.is_empty() {
            return Ok(());
        }
        if let Some(code) = self.refused {
            return Err(code);
        }
        register_atfork();
        CONNECT_ATTEMPTED.store(true, Ordering::Relaxed);
        let fail = |c: &mut Client, why: String| {
            crate::util::warn(&why);
            let code = if c.initialized {
                CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE
            } else {
                CUresult::CUDA_ERROR_NOT_INITIALIZED
            };
            c.refused = Some(code);
            code
        };
        let eps = endpoint::configured().map_err(|why| fail(self, why))?;
        let mut settings = endpoint::NetSettings::from_env();
        let mut conns = Vec::with_capacity(eps.len());
        for ep in &eps {
            conns.push(Conn::open(ep, &mut settings).map_err(|why| fail(self, why))?);
        }
        if conns.iter().any(Conn::is_network) {
            flusher::ensure_started();
        }
        self.nvml_devices.clear();
        self.nvml_routes.clear();
        // The NVML front-end's list is every daemon's GPUs (for a placed session, the GPUs the
        // daemon chose); NPUs (VENDOR_ASCEND) are the ACL front-end's ([`crate::acl`]), which
        // finds them in the daemons' lists. CUDA's is that list narrowed by CUDA_VISIBLE_DEVICES.
        for (e, conn) in conns.iter().enumerate() {
            for d in conn.devices.iter().filter(|d| d.vendor == gpupool_protocol::ops::VENDOR_CUDA) {
                self.nvml_routes.push((e, d.ordinal));
                let mut d = d.clone();
                d.ordinal = self.nvml_devices.len() as u32;
                self.nvml_devices.push(d);
            }
        }
        let visible = match std::env::var("CUDA_VISIBLE_DEVICES") {
            Ok(v) => crate::client::visible::parse(&v, &self.nvml_devices),
            Err(_) => (0..self.nvml_devices.len()).collect(),
        };
        self.devices = visible.iter().map(|&i| self.nvml_devices[i].clone()).collect();
        for (n, d) in self.devices.iter_mut().enumerate() {
            d.ordinal = n as u32;
        }
        self.routes = visible.iter().map(|&i| self.nvml_routes[i]).collect();
        self.driver_version = conns.iter().map(|c| c.driver_version).min().unwrap_or(0);
        self.conns = conns;
        Ok(())
    }

    /// The connection to the daemon of the calling thread's current context (the first
    /// endpoint's when there is none).
    pub fn conn(&mut self) -> R<&mut Conn> {
        self.conn_at(current_endpoint())
    }

    /// The connection to endpoint `ep`.
    pub fn conn_at(&mut self, ep: usize) -> R<&mut Conn> {
        self.connect()?;
        self.conns.get_mut(ep).ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)
    }

    /// The connection that issued handle `h`.
    pub fn conn_of(&mut self, h: u64) -> R<&mut Conn> {
        if !self.initialized {
            return Err(CUresult::CUDA_ERROR_NOT_INITIALIZED);
        }
        self.conn_at(endpoint_of(h))
    }

    /// The daemon serving device `ordinal` (of the one list), and its own ordinal for it.
    pub fn route(&mut self, ordinal: i32) -> R<(usize, u32)> {
        self.devices()?;
        usize::try_from(ordinal)
            .ok()
            .and_then(|i| self.routes.get(i).copied())
            .ok_or(CUresult::CUDA_ERROR_INVALID_DEVICE)
    }

    /// Records that a daemon is gone when its transport failed.
    pub fn note(&mut self, r: CUresult) -> CUresult {
        if self.conns.iter().any(|c| c.broken) {
            self.gone = true;
        }
        r
    }

    /// Requires a successful `cuInit` and a live connection (the current context's).
    pub fn live(&mut self) -> R<&mut Conn> {
        if !self.initialized {
            return Err(CUresult::CUDA_ERROR_NOT_INITIALIZED);
        }
        self.conn()
    }

    /// The device list, after connecting (no `cuInit` needed: NVML uses it too).
    pub fn device_list(&mut self) -> R<&[gpupool_protocol::ops::DeviceInfo]> {
        self.connect()?;
        Ok(&self.devices)
    }

    /// NVML's device list (every GPU the daemons gave this process), after connecting.
    pub fn nvml_list(&mut self) -> R<&[gpupool_protocol::ops::DeviceInfo]> {
        self.connect()?;
        Ok(&self.nvml_devices)
    }

    /// Every daemon's devices of `vendor`, in endpoint order, each with its endpoint (the
    /// device's `ordinal` is then that daemon's own).
    pub fn devices_of(&mut self, vendor: u8) -> R<Vec<(usize, gpupool_protocol::ops::DeviceInfo)>> {
        self.connect()?;
        let all = self.conns.iter().enumerate().flat_map(|(e, c)| c.devices.iter().map(move |d| (e, d)));
        Ok(all.filter(|(_, d)| d.vendor == vendor).map(|(e, d)| (e, d.clone())).collect())
    }

    pub fn devices(&mut self) -> R<&[gpupool_protocol::ops::DeviceInfo]> {
        if !self.initialized {
            return Err(CUresult::CUDA_ERROR_NOT_INITIALIZED);
        }
        self.device_list()
    }

    pub fn device(&mut self, ordinal: i32) -> R<&gpupool_protocol::ops::DeviceInfo> {
        let devs = self.devices()?;
        usize::try_from(ordinal).ok().and_then(|i| devs.get(i)).ok_or(CUresult::CUDA_ERROR_INVALID_DEVICE)
    }

    /// The calling thread's current context: (handle, daemon id, device).
    pub fn current(&mut self) -> R<(u64, CtxId, u32)> {
        if !self.initialized {
            return Err(CUresult::CUDA_ERROR_NOT_INITIALIZED);
        }
        let h = stack_top().ok_or(CUresult::CUDA_ERROR_INVALID_CONTEXT)?;
        let c = self.reg.ctx(h)?;
        Ok((h, c.id, c.device))
    }
}

/// The endpoint of the calling thread's current context (0 without one).
pub fn current_endpoint() -> usize {
    stack_top().map_or(0, endpoint_of)
}

/// Runs `f` with the state locked and a live connection, turning a vanished daemon into
/// the sticky DEVICE_UNAVAILABLE.
pub fn call<T>(f: impl FnOnce(&mut Client) -> R<T>) -> R<T> {
    with(|c| f(c).map_err(|e| c.note(e)))
}

/// The fork generation of this process (bumped in every forked child).
pub fn generation() -> u32 {
    FORK_GEN.load(Ordering::Relaxed)
}

/// None also once the thread's locals are gone (calls from exit handlers).
pub fn stack_top() -> Option<u64> {
    STACK.try_with(|s| s.borrow().last().copied()).ok().flatten()
}
pub fn stack_push(h: u64) {
    STACK.with(|s| s.borrow_mut().push(h));
}
pub fn stack_pop() -> Option<u64> {
    STACK.with(|s| s.borrow_mut().pop())
}
/// `cuCtxSetCurrent`: replaces the top (or pushes onto an empty stack); 0 pops.
pub fn stack_set(h: u64) {
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        s.pop();
        if h != 0 {
            s.push(h);
        }
    });
}
