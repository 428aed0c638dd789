//! The compute scheduler's machinery around [`gpupool_quota::DeviceScheduler`] (the policy): session
//! threads wait here before a kernel reaches the device, every dispatched kernel is bracketed by two
//! events of its tenant's context, and one monitor thread per device waits for them, charges the
//! measured time and wakes the waiters.
//!
//! Tenants never overlap on a device: when the holder changes, the new holder's stream first waits
//! (`cuStreamWaitEvent`, across contexts) for the end events of the other tenants' kernels still in
//! flight, so each kernel's start event is stamped after the device is really its own. Copies are not
//! scheduled (quota/README.md, "Compute").
//!
//! Except where the driver can stop a context between thread blocks (the simulator,
//! [`super::preempt`]): then the kernels of lower priorities are not waited for but stopped, the
//! new kernel launches once their grids stand still, and they resume when no kernel of a higher
//! priority is in flight. The monitor then polls every kernel in flight rather than waiting for
//! the oldest, since a stopped kernel ends after kernels dispatched behind it.
//!
//! Except for a graph with host functions ([`Compute::dispatch_loose`]): it may wait in its client's
//! host function for as long as the client likes (or until the client dies), which is not the
//! device's time. Such a launch is admitted and charged its measured time like any other, but
//! nobody fences on it, it leaves the in-flight count when dispatched, and the monitor polls for its
//! end instead of waiting in order, so a blocked host function holds back its own stream only.

use super::dispatch::{Fail, Result};
use super::preempt::{self, Preemption};
use super::{Raw, Shared, TenantCtx};
use crate::backend::SimPreempt;
use crate::call;
use gpupool_quota::{Decision, DeviceScheduler, Policy, TenantId, Tuning};
use gpupool_shim::cuda::{CUevent, CUstream};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The longest a waiting session sleeps before it looks again (for shutdown, or its client's death).
const MAX_NAP: Duration = Duration::from_millis(20);

/// A granted, dispatched kernel, until the monitor has charged it.
struct InFlight {
    client: u64,
    /// The kind of each kernel the events bracket (several: a batch, [`Compute::admit_batch`]).
    kinds: Vec<u64>,
    est: u64,
    start: Raw<CUevent>,
    end: Raw<CUevent>,
    stream: usize,
    seq: u64,
    tc: Arc<TenantCtx>,
}

struct State {
    policy: DeviceScheduler,
    queue: VecDeque<InFlight>,
    /// Launches dispatched with [`Compute::dispatch_loose`], until they end and are charged.
    loose: Vec<InFlight>,
    /// The end event of the last kernel dispatched on each stream, while it is in flight: (the
    /// tenant's context, event, sequence number).
    tails: HashMap<usize, (Arc<TenantCtx>, Raw<CUevent>, u64)>,
    /// The epoch up to which each stream has waited for other tenants' work.
    synced: HashMap<usize, u64>,
    seq: u64,
    /// Sessions sleeping in [`Compute::admit`] (notifications are skipped when none is).
    waiters: u32,
    /// Whether the monitor sleeps on `dispatched`.
    monitor_asleep: bool,
    /// Lower priorities' contexts stopped between blocks ([`super::preempt`]).
    preempt: Preemption,
}

impl State {
    /// Resumes the stopped contexts nothing of a higher priority keeps stopped now.
    fn resume_ready(&mut self) -> Vec<Arc<TenantCtx>> {
        self.preempt.resume_ready(&self.policy)
    }
}

/// Releases contexts outside the scheduler's lock (the last reference ends the context).
fn release_all(shared: &Shared, contexts: Vec<Arc<TenantCtx>>) {
    for tc in contexts {
        shared.release_ctx(tc);
    }
}

/// One device's scheduler.
pub struct Device {
    state: Mutex<State>,
    /// Wakes sessions waiting to dispatch.
    changed: Condvar,
    /// Wakes the monitor.
    dispatched: Condvar,
}

/// What a session must do before dispatching its kernel.
pub struct Grant {
    est: u64,
    /// How many of the kernels asked for it covers ([`Compute::admit_batch`]).
    pub kernels: u32,
    /// End events of other tenants' in-flight kernels the stream must wait for, each with its
    /// context: held until the wait is queued, so the monitor cannot end that tenant's
    /// context (destroying the event) between the grant and the wait. A destroyed event
    /// handle is not an error a real driver promises to report.
    fences: Vec<(Arc<TenantCtx>, Raw<CUevent>)>,
    /// Contexts of lower priorities stopped for this kernel: their grids must be seen stopped
    /// before it is launched (instead of fences on their kernels).
    stop: Vec<Arc<TenantCtx>>,
}

/// The compute scheduler of every device, or none (`--no-compute-scheduler`).
pub struct Compute {
    devices: Vec<Device>,
    epoch: Instant,
    pub enabled: bool,
    /// The driver's preemption of a context between blocks (the simulator's only), if used.
    sim: Option<SimPreempt>,
}

impl Compute {
    pub fn new(devices: usize, enabled: bool, sim: Option<SimPreempt>) -> Compute {
        Compute {
            devices: (0..devices)
                .map(|_| Device {
                    state: Mutex::new(State {
                        policy: DeviceScheduler::new(Tuning::default()),
                        queue: VecDeque::new(),
                        loose: Vec::new(),
                        tails: HashMap::new(),
                        synced: HashMap::new(),
                        seq: 0,
                        waiters: 0,
                        monitor_asleep: false,
                        preempt: Preemption::new(sim),
                    }),
                    changed: Condvar::new(),
                    dispatched: Condvar::new(),
                })
                .collect(),
            epoch: Instant::now(),
            enabled,
            sim,
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn lock(&self, device: u32) -> MutexGuard<'_, State> {
        self.devices[device as usize].state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts one monitor thread per device.
    pub fn start_monitors(shared: &Arc<Shared>) -> anyhow::Result<()> {
        if !shared.compute.enabled {
            return Ok(());
        }
        for d in 0..shared.compute.devices.len() {
            // An NPU runs no kernels of ours to bracket with events (its operators are timed
            // where they run), so it needs no monitor.
            if shared.npu(d as u32).is_some() {
                continue;
            }
            let s = shared.clone();
            std::thread::Builder::new().name(format!("gpupool-compute-{d}")).spawn(move || monitor(&s, d as u32))?;
        }
        Ok(())
    }

    /// Sets (or, after a reload, updates) every known tenant's policy from the config.
    pub fn apply_config(&self, config: &gpupool_quota::Config) {
        let now = self.now();
        for dev in &self.devices {
            let mut st = dev.state.lock().unwrap_or_else(|e| e.into_inner());
            let names: Vec<String> = st.policy.usage(now).into_iter().map(|u| u.tenant).collect();
            for name in names {
                let spec = config.tenant(&TenantId::new(&name)).unwrap_or_else(|| config.default_tenant());
                st.policy.set_policy(&name, policy_of(spec), now);
            }
            drop(st);
            dev.changed.notify_all();
        }
    }

    /// Registers a session on `device`: its tenant's policy, and its own bucket if it narrowed compute.
    pub fn join(&self, device: u32, tenant: &TenantId, spec: &gpupool_quota::TenantSpec, session: u64, narrowed: u8) {
        let now = self.now();
        let mut st = self.lock(device);
        if st.policy.policy(tenant.as_str()).is_none() {
            st.policy.set_policy(tenant.as_str(), policy_of(spec), now);
        }
        if narrowed < spec.compute {
            st.policy.set_client_limit(session, narrowed, now);
        }
    }

    /// Forgets a session's own bucket.
    pub fn leave(&self, device: u32, session: u64) {
        self.lock(device).policy.forget_client(session);
    }

    /// Blocks until `tenant` may dispatch a kernel of kind `kind` on `device` through `stream`.
    /// Gives up when the daemon stops or `peer` (the client's socket) hangs up.
    #[allow(clippy::too_many_arguments)]
    pub fn admit(
        &self,
        shared: &Shared,
        device: u32,
        tc: &TenantCtx,
        session: u64,
        kind: u64,
        stream: usize,
        peer: Option<&std::os::fd::OwnedFd>,
    ) -> Result<Grant> {
        self.admit_batch(shared, device, tc, session, &[kind], stream, peer)
    }

    /// [`Self::admit`] for kernels of `kinds` (one each, in order, not empty) the client queued
    /// back to back on one stream: the grant covers the first `Grant::kernels` of them (at least
    /// one), dispatched and charged as one ([`gpupool_quota::DeviceScheduler::try_grant_batch`]).
    #[allow(clippy::too_many_arguments)]
    pub fn admit_batch(
        &self,
        shared: &Shared,
        device: u32,
        tc: &TenantCtx,
        session: u64,
        kinds: &[u64],
        stream: usize,
        peer: Option<&std::os::fd::OwnedFd>,
    ) -> Result<Grant> {
        let dev = &self.devices[device as usize];
        let tenant = tc.tenant.as_str();
        let mut st = dev.state.lock().unwrap_or_else(|e| e.into_inner());
        // One clock read serves the first try (most kernels are granted at once).
        let asked = self.now();
        st.policy.want(tenant, asked);
        let mut first = Some(asked);
        // Since when this client has been waiting for its own credit (for the throttled figure).
        let mut throttled_since: Option<u64> = None;
        loop {
            let now = first.take().unwrap_or_else(|| self.now());
            let decision = st.policy.try_grant_batch(tenant, session, kinds, now);
            let for_credit = matches!(decision, Decision::Wait { for_credit: true, .. });
            if !for_credit && let Some(t) = throttled_since.take() {
                st.policy.note_throttled(tenant, now.saturating_sub(t));
            } else if for_credit && throttled_since.is_none() {
                throttled_since = Some(now);
            }
            match decision {
                Decision::Grant { est, epoch, kernels } => {
                    let rank = st.policy.policy(tenant).map_or(0, |p| preempt::rank(p.priority));
                    let State { preempt, policy, tails, .. } = &mut *st;
                    let stop = preempt.stop_below(policy, rank, tc.ctx.0 as usize, tails.values().map(|t| &t.0));
                    let mut fences = Vec::new();
                    if st.synced.get(&stream) != Some(&epoch) {
                        let waited = |t: &TenantCtx| t.ctx.0 != tc.ctx.0 && !stop.iter().any(|s| s.ctx.0 == t.ctx.0);
                        fences = st.tails.values().filter(|t| waited(&t.0)).map(|t| (t.0.clone(), t.1)).collect();
                        if st.synced.len() >= 4096 {
                            // Streams come and go; forgetting them only costs redundant waits.
                            st.synced.clear();
                        }
                        st.synced.insert(stream, epoch);
                    }
                    return Ok(Grant { est, kernels, fences, stop });
                }
                Decision::Wait { until, .. } => {
                    let gone = || peer.is_some_and(gpupool_protocol::transport::hung_up);
                    if shared.stopping() || gone() {
                        if let Some(t) = throttled_since {
                            st.policy.note_throttled(tenant, now.saturating_sub(t));
                        }
                        st.policy.stop_waiting(tenant, now);
                        drop(st);
                        dev.changed.notify_all();
                        return Err(Fail::new(
                            super::dispatch::DEVICE_UNAVAILABLE,
                            "the kernel was not dispatched: the daemon is stopping or the client is gone",
                        ));
                    }
                    let nap =
                        until.map_or(MAX_NAP, |u| Duration::from_nanos(u.saturating_sub(self.now())).min(MAX_NAP));
                    st.waiters += 1;
                    st = dev.changed.wait_timeout(st, nap).unwrap_or_else(|e| e.into_inner()).0;
                    st.waiters -= 1;
                }
            }
        }
    }

    /// Runs `work` to completion under a grant and charges the tenant the time it took: the
    /// "run this work" of a device whose work the daemon times itself (an NPU operator run and
    /// waited for, [`super::npu`]), so it needs no events and no monitor. Failed work is charged
    /// nothing.
    #[allow(clippy::too_many_arguments)]
    pub fn run_timed(
        &self,
        shared: &Shared,
        device: u32,
        tc: &TenantCtx,
        session: u64,
        kind: u64,
        stream: usize,
        peer: Option<&std::os::fd::OwnedFd>,
        work: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        if !self.enabled {
            return work();
        }
        let grant = self.admit(shared, device, tc, session, kind, stream, peer)?;
        let t0 = Instant::now();
        let r = work();
        let charged = if r.is_ok() { t0.elapsed().as_nanos() as u64 } else { 0 };
        let mut st = self.lock(device);
        st.policy.complete(tc.tenant.as_str(), session, kind, grant.est, charged, self.now());
        drop(st);
        self.devices[device as usize].changed.notify_all();
        r
    }

    /// Runs `launch` under a grant: waits for the fences, brackets the launch with events of `tc`, and
    /// hands the kernel to the monitor. A failed launch is charged nothing.
    #[allow(clippy::too_many_arguments)]
    pub fn dispatch(
        &self,
        shared: &Shared,
        device: u32,
        tc: &Arc<TenantCtx>,
        session: u64,
        kind: u64,
        stream: Raw<CUstream>,
        grant: Grant,
        launch: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        self.dispatch_batch(shared, device, tc, session, stream, grant, || launch().map(|()| vec![kind]))
    }

    /// [`Self::dispatch`] for a batch's grant: `launch` launches the batch's kernels and gives the
    /// kinds of those that reached the stream (the rest failed alone); none is a failed launch.
    #[allow(clippy::too_many_arguments)]
    pub fn dispatch_batch(
        &self,
        shared: &Shared,
        device: u32,
        tc: &Arc<TenantCtx>,
        session: u64,
        stream: Raw<CUstream>,
        grant: Grant,
        launch: impl FnOnce() -> Result<Vec<u64>>,
    ) -> Result<()> {
        let est = grant.est;
        let mut kinds = Vec::new();
        let counted = || {
            kinds = launch()?;
            if kinds.is_empty() { Err(Fail::invalid_value("no kernel of the batch was launched")) } else { Ok(()) }
        };
        let (start, end) = self.bracket(shared, device, tc, session, stream, grant, counted)?;
        let dev = &self.devices[device as usize];
        let skey = Self::stream_key(tc, stream);
        let mut st = dev.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.loose.iter().any(|k| k.stream == skey) {
            // Queued behind a loose launch (its host function may never return): loose too.
            self.settle_loose(shared, st, dev, tc, session, kinds, est, start, end, skey);
            return Ok(());
        }
        st.seq += 1;
        let seq = st.seq;
        st.preempt.dispatched(tc, start, end);
        let replaced = st.tails.insert(skey, (tc.clone(), end, seq));
        st.queue.push_back(InFlight { client: session, kinds, est, start, end, stream: skey, seq, tc: tc.clone() });
        let asleep = st.monitor_asleep;
        drop(st);
        if asleep {
            dev.dispatched.notify_one();
        }
        if let Some((owner, ..)) = replaced {
            shared.release_ctx(owner);
        }
        Ok(())
    }

    /// [`Self::dispatch`] for a launch whose length is not the device's (a graph with host
    /// functions, see the module's comment): settled at once, charged when the monitor sees its end.
    #[allow(clippy::too_many_arguments)]
    pub fn dispatch_loose(
        &self,
        shared: &Shared,
        device: u32,
        tc: &Arc<TenantCtx>,
        session: u64,
        kind: u64,
        stream: Raw<CUstream>,
        grant: Grant,
        launch: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let est = grant.est;
        let (start, end) = self.bracket(shared, device, tc, session, stream, grant, launch)?;
        let dev = &self.devices[device as usize];
        let st = dev.state.lock().unwrap_or_else(|e| e.into_inner());
        self.settle_loose(shared, st, dev, tc, session, vec![kind], est, start, end, Self::stream_key(tc, stream));
        Ok(())
    }

    /// Settles a dispatched launch at once and leaves its charge to [`poll_loose`].
    #[allow(clippy::too_many_arguments)]
    fn settle_loose(
        &self,
        shared: &Shared,
        mut st: MutexGuard<'_, State>,
        dev: &Device,
        tc: &Arc<TenantCtx>,
        session: u64,
        kinds: Vec<u64>,
        est: u64,
        start: Raw<CUevent>,
        end: Raw<CUevent>,
        stream: usize,
    ) {
        st.policy.abandon(tc.tenant.as_str(), session, est, self.now());
        st.loose.push(InFlight { client: session, kinds, est, start, end, stream, seq: 0, tc: tc.clone() });
        let resumed = st.resume_ready();
        let waiters = st.waiters;
        drop(st);
        release_all(shared, resumed);
        if waiters > 0 {
            dev.changed.notify_all();
        }
    }

    /// Waits for the grant's fences and runs `launch` between two events of `tc` on `stream`; a
    /// failure gives the grant back.
    #[allow(clippy::too_many_arguments)]
    fn bracket(
        &self,
        shared: &Shared,
        device: u32,
        tc: &Arc<TenantCtx>,
        session: u64,
        stream: Raw<CUstream>,
        grant: Grant,
        launch: impl FnOnce() -> Result<()>,
    ) -> Result<(Raw<CUevent>, Raw<CUevent>)> {
        let cuda = &shared.cuda;
        let dev = &self.devices[device as usize];
        let tenant = tc.tenant.as_str();
        for (owner, f) in grant.fences {
            // A fence whose kernel has finished imposes no wait.
            if let Err(e) = call!(cuda, cuStreamWaitEvent(stream.0, f.0, 0)) {
                tracing::debug!(tenant, "fence skipped: {e}");
            }
            shared.release_ctx(owner);
        }
        for victim in grant.stop {
            if let Some(sim) = self.sim
                && Preemption::wait_stopped(sim, &victim, || shared.stopping())
            {
                let done = |e: Raw<CUevent>| matches!(super::streams::ready(call!(cuda, cuEventQuery(e.0))), Ok(true));
                self.lock(device).preempt.confirmed(&victim, done);
            }
            shared.release_ctx(victim);
        }
        let abandon = |events: &[Raw<CUevent>]| {
            tc.give_events(events);
            let mut st = self.lock(device);
            st.policy.abandon(tenant, session, grant.est, self.now());
            let resumed = st.resume_ready();
            let waiters = st.waiters;
            drop(st);
            release_all(shared, resumed);
            if waiters > 0 {
                dev.changed.notify_all();
            }
        };
        let (start, end) = match (tc.take_event(shared), tc.take_event(shared)) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => {
                let got: Vec<_> = [a.as_ref().ok(), b.as_ref().ok()].into_iter().flatten().copied().collect();
                abandon(&got);
                return Err(a.and(b).err().unwrap_or_else(|| Fail::invalid_value("no event")));
            }
        };
        let recorded = call!(cuda, cuEventRecord(start.0, stream.0)).map_err(Fail::from);
        let launched = recorded.and_then(|()| launch());
        let closed = launched.and_then(|()| call!(cuda, cuEventRecord(end.0, stream.0)).map_err(Fail::from));
        if let Err(e) = closed {
            abandon(&[start, end]);
            return Err(e);
        }
        Ok((start, end))
    }

    /// The key of a stream for fences (stream handles of different contexts may be equal: NULL).
    pub fn stream_key(tc: &TenantCtx, stream: Raw<CUstream>) -> usize {
        stream.0 as usize ^ (tc.ctx.0 as usize).rotate_left(32)
    }

    /// How often each device changed hands.
    pub fn switches(&self) -> Vec<u64> {
        self.devices.iter().map(|d| d.state.lock().unwrap_or_else(|e| e.into_inner()).policy.epoch()).collect()
    }

    /// Per device: how many times a context was stopped for a higher priority.
    pub fn preemptions(&self) -> Vec<u64> {
        self.devices.iter().map(|d| d.state.lock().unwrap_or_else(|e| e.into_inner()).preempt.count()).collect()
    }

    /// `tenant`'s (times stopped, nanoseconds stopped) on `device`.
    pub fn preempted(&self, device: u32, tenant: &str) -> (u64, u64) {
        self.devices
            .get(device as usize)
            .map_or((0, 0), |d| d.state.lock().unwrap_or_else(|e| e.into_inner()).preempt.figures(tenant))
    }

    /// Every tenant's figures on every device.
    pub fn usage(&self) -> Vec<Vec<gpupool_quota::ComputeUsage>> {
        let now = self.now();
        self.devices.iter().map(|d| d.state.lock().unwrap_or_else(|e| e.into_inner()).policy.usage(now)).collect()
    }
}

pub fn policy_of(spec: &gpupool_quota::TenantSpec) -> Policy {
    Policy { compute: spec.compute, mode: spec.mode, priority: spec.priority }
}

/// Waits for the dispatched kernels in order, charges their measured time and wakes the waiters.
///
/// Short kernels are charged in batches: the monitor takes whatever is queued, and after a batch of
/// kernels shorter than [`COALESCE`] it pauses that long before looking again, so a client launching
/// hundreds of thousands of tiny kernels a second costs thousands of wake-ups, not one per kernel (the
/// charge is that much later; the in-flight bound is in time, so tiny kernels still fit in it).
/// A long kernel's charge is applied as soon as it ends, so the waiters it frees go at once.
fn monitor(shared: &Arc<Shared>, device: u32) {
    let compute = &shared.compute;
    let dev = &compute.devices[device as usize];
    let cuda = &shared.cuda;
    let mut batch: Vec<InFlight> = Vec::new();
    let mut done: Vec<(InFlight, u64)> = Vec::new();
    let flush = |done: &mut Vec<(InFlight, u64)>| {
        let mut ended_tails = Vec::new();
        let waiters = {
            let mut st = dev.state.lock().unwrap_or_else(|e| e.into_inner());
            let now = compute.now();
            for (k, measured) in done.iter() {
                let charged = st.preempt.charge(&k.tc, k.start, *measured);
                st.policy.complete_batch(k.tc.tenant.as_str(), k.client, &k.kinds, k.est, charged, now);
                if st.tails.get(&k.stream).is_some_and(|t| t.2 == k.seq) {
                    ended_tails.extend(st.tails.remove(&k.stream).map(|t| t.0));
                }
            }
            ended_tails.extend(st.resume_ready());
            st.waiters
        };
        // Outside the lock: the last reference ends the context (release_ctx calls the driver).
        release_all(shared, ended_tails);
        if waiters > 0 {
            dev.changed.notify_all();
        }
        for (k, _) in done.drain(..) {
            k.tc.give_events(&[k.start, k.end]);
            shared.release_ctx(k.tc);
        }
    };
    loop {
        poll_loose(shared, device);
        {
            let mut st = dev.state.lock().unwrap_or_else(|e| e.into_inner());
            while st.queue.is_empty() && batch.is_empty() {
                if shared.stopping() {
                    return;
                }
                st.monitor_asleep = true;
                st = dev.dispatched.wait_timeout(st, MAX_NAP).unwrap_or_else(|e| e.into_inner()).0;
                st.monitor_asleep = false;
                if !st.loose.is_empty() {
                    break;
                }
            }
            batch.extend(st.queue.drain(..));
        }
        if let Some(sim) = compute.sim {
            // Kernels may end out of order: a stopped one ends after the kernels of the priority
            // that stopped it, and nothing resumes it until those are charged. So the monitor
            // waits for the oldest kernel whose context is not stopped, for a bounded time (a stop
            // may come meanwhile), and charges whichever kernels have ended.
            let mut all_short = true;
            for k in std::mem::take(&mut batch) {
                if let Ok(false) = super::streams::ready(call!(cuda, cuEventQuery(k.end.0))) {
                    batch.push(k);
                } else {
                    let charged = measured(shared, &k);
                    all_short &= charged < COALESCE.as_nanos() as u64;
                    done.push((k, charged));
                }
            }
            if !done.is_empty() {
                flush(&mut done);
                if all_short {
                    std::thread::sleep(COALESCE);
                }
                continue;
            }
            if shared.stopping() {
                return;
            }
            let next = {
                let st = dev.state.lock().unwrap_or_else(|e| e.into_inner());
                batch.iter().find(|k| !st.preempt.is_stopped(k.tc.ctx.0 as usize)).map(|k| k.end)
            };
            match next {
                Some(end) => {
                    // SAFETY: an event of a context the in-flight entry holds; the export takes a
                    // handle. Its answer is read by the query above, next time round.
                    let _ = unsafe { (sim.event_wait)(end.0, WAIT_SLICE_US) };
                }
                None => std::thread::sleep(Duration::from_micros(WAIT_SLICE_US.into())),
            }
            continue;
        }
        let mut all_short = true;
        for k in batch.drain(..) {
            // A failed kernel (a sticky fault) still completes its events; anything else is charged 0.
            // Waited for by queries, not cuEventSynchronize: that would write the context's
            // device printf output here, on a thread of no session (backend/device_output.rs).
            crate::backend::device_output::wait_by_queries(|| call!(cuda, cuEventQuery(k.end.0)));
            let charged = measured(shared, &k);
            let long = charged >= COALESCE.as_nanos() as u64;
            all_short &= !long;
            done.push((k, charged));
            if long {
                flush(&mut done);
            }
        }
        flush(&mut done);
        if all_short {
            std::thread::sleep(COALESCE);
        }
    }
}

/// A kernel's length from its events (0 if they cannot tell).
fn measured(shared: &Shared, k: &InFlight) -> u64 {
    let mut ms = 0f32;
    match call!(shared.cuda, cuEventElapsedTime(&mut ms, k.start.0, k.end.0)) {
        Ok(()) => (f64::from(ms) * 1e6).max(0.0) as u64,
        Err(e) => {
            tracing::debug!(tenant = k.tc.tenant.as_str(), "kernel time unknown, charged 0: {e}");
            0
        }
    }
}

/// The longest the monitor waits for one kernel where kernels may end out of order, before it
/// looks at the others again.
const WAIT_SLICE_US: u32 = 1000;

/// Charges the loose launches ([`Compute::dispatch_loose`]) that have ended; the others stay.
fn poll_loose(shared: &Arc<Shared>, device: u32) {
    let compute = &shared.compute;
    let dev = &compute.devices[device as usize];
    let cuda = &shared.cuda;
    let items = std::mem::take(&mut dev.state.lock().unwrap_or_else(|e| e.into_inner()).loose);
    if items.is_empty() {
        return;
    }
    let (mut left, mut done) = (Vec::new(), Vec::new());
    for k in items {
        match super::streams::ready(call!(cuda, cuEventQuery(k.end.0))) {
            Ok(false) => left.push(k),
            Ok(true) => {
                let mut ms = 0f32;
                let charged = match call!(cuda, cuEventElapsedTime(&mut ms, k.start.0, k.end.0)) {
                    Ok(()) => (f64::from(ms) * 1e6).max(0.0) as u64,
                    Err(_) => 0,
                };
                done.push((k, charged));
            }
            Err(e) => {
                tracing::debug!(tenant = k.tc.tenant.as_str(), "graph time unknown, charged 0: {}", e.message);
                done.push((k, 0));
            }
        }
    }
    let waiters = {
        let mut st = dev.state.lock().unwrap_or_else(|e| e.into_inner());
        st.loose.extend(left);
        let now = compute.now();
        for (k, charged) in &done {
            st.policy.charge_batch(k.tc.tenant.as_str(), k.client, &k.kinds, *charged, now);
        }
        st.waiters
    };
    if waiters > 0 && !done.is_empty() {
        dev.changed.notify_all();
    }
    for (k, _) in done {
        k.tc.give_events(&[k.start, k.end]);
        shared.release_ctx(k.tc);
    }
}

/// Kernels shorter than this are charged in batches at most this often.
const COALESCE: Duration = Duration::from_micros(100);
