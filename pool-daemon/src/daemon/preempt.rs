//! Compute preemption at a thread-block bound (issue 22, item 3): when a tenant is granted a kernel
//! while tenants of lower priority have kernels on the device, their contexts are stopped at the
//! next thread-block boundary instead of being waited for, and resumed once no kernel of a higher
//! priority is granted and unfinished. Each stopped kernel is charged its own time only: the time
//! it stood stopped is taken off its measured length.
//!
//! Only where the driver offers it: the simulator's `gpupool_sim_ctx_*` exports
//! ([`crate::backend::SimPreempt`]). NVIDIA's driver has no call for one context to preempt
//! another, so on it [`Preemption::available`] is false and the compute scheduler fences on the
//! lower priorities' kernels as before (README, "Compute preemption").
//!
//! Owns the bookkeeping of one device (kept in the compute scheduler's state, under its lock): which
//! contexts are stopped, the kernels each context has in flight, how long each was stopped, and the
//! counts `gpupool status` shows. It must not decide who may dispatch ([`gpupool_quota`] does).

use super::{Raw, TenantCtx};
use crate::backend::SimPreempt;
use gpupool_quota::{DeviceScheduler, Priority};
use gpupool_shim::cuda::{CUevent, CUresult};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a dispatch waits for a lower priority's running block to end before it goes on beside
/// it: a block that runs this long (a kernel that never ends) must not hold a session thread.
pub const PATIENCE: Duration = Duration::from_secs(1);

pub fn rank(p: Priority) -> u8 {
    match p {
        Priority::High => 2,
        Priority::Normal => 1,
        Priority::Low => 0,
    }
}

/// A context stopped for a higher priority.
struct Stopped {
    tc: Arc<TenantCtx>,
    priority: Priority,
    /// When its grids were seen stopped (`None` until a dispatch has waited for that).
    since: Option<Instant>,
}

/// A kernel's start and end events.
type Bracket = (Raw<CUevent>, Raw<CUevent>);

/// One device's preemption state.
#[derive(Default)]
pub struct Preemption {
    sim: Option<SimPreempt>,
    stopped: HashMap<usize, Stopped>,
    /// Dispatched, uncharged kernels per context: (start, end) events, oldest first.
    live: HashMap<usize, VecDeque<Bracket>>,
    /// Kernels that were running when their context stopped (start event → context).
    halted: HashMap<usize, usize>,
    /// Time each kernel stood stopped (by start event), taken off its charge.
    paused: HashMap<usize, u64>,
    /// Per tenant: (times stopped, nanoseconds stopped).
    by_tenant: HashMap<String, (u64, u64)>,
}

fn key<T>(r: Raw<*mut T>) -> usize {
    r.0 as usize
}

impl Preemption {
    pub fn new(sim: Option<SimPreempt>) -> Preemption {
        Preemption { sim, ..Default::default() }
    }

    /// For a grant to a tenant of `rank` on context `mine`: stops the contexts of lower priority
    /// among `busy` (contexts with kernels in flight) that are not stopped yet. Returns every
    /// stopped context below `rank`, which the dispatch must see stopped before it launches.
    pub fn stop_below<'a>(
        &mut self,
        policy: &DeviceScheduler,
        rank: u8,
        mine: usize,
        busy: impl Iterator<Item = &'a Arc<TenantCtx>>,
    ) -> Vec<Arc<TenantCtx>> {
        let Some(sim) = self.sim else { return Vec::new() };
        for tc in busy {
            let c = key(tc.ctx);
            let Some(p) = policy.policy(tc.tenant.as_str()).map(|p| p.priority) else { continue };
            if c == mine || self::rank(p) >= rank || self.stopped.contains_key(&c) {
                continue;
            }
            // SAFETY: a live context of the daemon's (held by `tc`); the export takes a handle only.
            let res = unsafe { (sim.stop)(tc.ctx.0) };
            if res != CUresult::CUDA_SUCCESS {
                tracing::warn!(tenant = tc.tenant.as_str(), "stopping the context failed ({}); waited for", res.0);
                continue;
            }
            self.by_tenant.entry(tc.tenant.as_str().to_string()).or_default().0 += 1;
            self.stopped.insert(c, Stopped { tc: tc.clone(), priority: p, since: None });
        }
        self.stopped.values().filter(|s| self::rank(s.priority) < rank).map(|s| s.tc.clone()).collect()
    }

    /// Whether the context is stopped now.
    pub fn is_stopped(&self, ctx: usize) -> bool {
        self.stopped.contains_key(&ctx)
    }

    /// Waits (without the scheduler's lock) until `tc`'s grids have stopped, up to [`PATIENCE`];
    /// whether they did.
    pub fn wait_stopped(sim: SimPreempt, tc: &TenantCtx, stopping: impl Fn() -> bool) -> bool {
        let t0 = Instant::now();
        loop {
            // SAFETY: as in stop_below; `tc` is held by the caller's grant.
            match unsafe { (sim.wait_stopped)(tc.ctx.0, 20_000) } {
                CUresult::CUDA_SUCCESS => return true,
                CUresult::CUDA_ERROR_NOT_READY if t0.elapsed() < PATIENCE && !stopping() => {}
                r => {
                    tracing::warn!(
                        tenant = tc.tenant.as_str(),
                        "a block of the stopped context still runs after {:?} ({}): launching beside it",
                        t0.elapsed(),
                        r.0
                    );
                    return false;
                }
            }
        }
    }

    /// `tc`'s grids were seen stopped: the kernels running then start counting their pause.
    /// `query` tells whether an event has completed.
    pub fn confirmed(&mut self, tc: &TenantCtx, query: impl Fn(Raw<CUevent>) -> bool) {
        let c = key(tc.ctx);
        let Some(s) = self.stopped.get_mut(&c) else { return };
        if s.since.is_some() {
            return;
        }
        s.since = Some(Instant::now());
        for &(start, end) in self.live.get(&c).into_iter().flatten() {
            if query(start) && !query(end) {
                self.halted.insert(key(start), c);
            }
        }
    }

    /// A kernel was dispatched on `tc`.
    pub fn dispatched(&mut self, tc: &TenantCtx, start: Raw<CUevent>, end: Raw<CUevent>) {
        if self.sim.is_some() {
            self.live.entry(key(tc.ctx)).or_default().push_back((start, end));
        }
    }

    /// A kernel ended and is being charged `measured` ns: what it is charged without its pause.
    pub fn charge(&mut self, tc: &TenantCtx, start: Raw<CUevent>, measured: u64) -> u64 {
        if self.sim.is_none() {
            return measured;
        }
        let c = key(tc.ctx);
        if let Some(q) = self.live.get_mut(&c) {
            if let Some(i) = q.iter().position(|k| k.0 == start) {
                q.remove(i);
            }
            if q.is_empty() {
                self.live.remove(&c);
            }
        }
        self.halted.remove(&key(start));
        measured.saturating_sub(self.paused.remove(&key(start)).unwrap_or(0))
    }

    /// Resumes the stopped contexts that no kernel of a higher priority keeps stopped any more;
    /// returns their contexts, to be released outside the lock.
    pub fn resume_ready(&mut self, policy: &DeviceScheduler) -> Vec<Arc<TenantCtx>> {
        let Some(sim) = self.sim else { return Vec::new() };
        let ready: Vec<usize> =
            self.stopped.iter().filter(|(_, s)| !policy.inflight_above(s.priority)).map(|(c, _)| *c).collect();
        let mut out = Vec::new();
        for c in ready {
            let Some(s) = self.stopped.remove(&c) else { continue };
            // SAFETY: as in stop_below.
            let res = unsafe { (sim.resume)(s.tc.ctx.0) };
            if res != CUresult::CUDA_SUCCESS {
                tracing::warn!(tenant = s.tc.tenant.as_str(), "resuming the context failed ({})", res.0);
            }
            if let Some(since) = s.since {
                let ns = since.elapsed().as_nanos() as u64;
                self.by_tenant.entry(s.tc.tenant.as_str().to_string()).or_default().1 += ns;
                let halted: Vec<usize> = self.halted.iter().filter(|(_, hc)| **hc == c).map(|(k, _)| *k).collect();
                for k in halted {
                    self.halted.remove(&k);
                    *self.paused.entry(k).or_default() += ns;
                }
            }
            out.push(s.tc);
        }
        out
    }

    /// (times stopped, nanoseconds stopped) of `tenant` on this device, the current stop included.
    pub fn figures(&self, tenant: &str) -> (u64, u64) {
        let (n, mut ns) = self.by_tenant.get(tenant).copied().unwrap_or_default();
        for s in self.stopped.values().filter(|s| s.tc.tenant.as_str() == tenant) {
            ns += s.since.map_or(0, |t| t.elapsed().as_nanos() as u64);
        }
        (n, ns)
    }

    /// Times any context was stopped on this device.
    pub fn count(&self) -> u64 {
        self.by_tenant.values().map(|v| v.0).sum()
    }
}
