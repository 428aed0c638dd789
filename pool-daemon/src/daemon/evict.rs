//! Memory preemption (issue 22, item 2; README.md, "Memory preemption"): when an allocation
//! fits a tenant's quota but not the physical device, the daemon moves the `cuMemAlloc` memory
//! of preemptible tenants of strictly lower priority to host memory, keeps their device
//! addresses reserved, pauses their sessions, and brings the bytes back at the same addresses
//! once the device has room.
//!
//! - **Evictable memory.** A preemptible tenant that some tenant of the config outranks gets
//!   its `cuMemAlloc` memory as physical memory mapped under a reserved range
//!   (`cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`, `cuMemSetAccess`): the physical part
//!   can be released and made again under the same addresses, which memory from `cuMemAlloc`
//!   cannot. Every other tenant keeps plain `cuMemAlloc`.
//! - **Gate.** Every request of a session passes [`gate`]: while its tenant is being evicted
//!   or has memory evicted, the request waits there (the session is paused), and the waiting
//!   session brings the memory back when the device's free memory covers it. An eviction
//!   closes the victim's gate, waits (at most [`DRAIN_TIMEOUT`]) for the requests already
//!   inside to finish, synchronizes the victim's context, then copies and releases. A session
//!   whose client hangs up while paused ends at once (its memory is freed where it lies).
//! - **Cost.** An eviction moves the victim's bytes twice (out, and back later) at the
//!   bandwidth the last move measured; a victim whose estimate exceeds `max_move` is not
//!   evicted, and a tenant brought back less than `max(min_resident, resident_factor x its
//!   last move)` ago is not evicted again (the allocation is then CUDA_ERROR_OUT_OF_MEMORY, as
//!   before). The bounds are the config's `[preemption]` ([`gpupool_quota::Preemption`]), read at
//!   each eviction.
//!
//! Owns the evictable allocations' backend handles, the gates and the statistics. It does not
//! touch the ledger: an evicted tenant is still charged its memory, which its quota allows.

use super::Shared;
use super::dispatch::{Fail, Result};
use super::session::Session;
use crate::call;
use gpupool_quota::{Priority, TenantId};
use gpupool_shim::cuda::{
    CUcontext, CUmemAccess_flags, CUmemAccessDesc, CUmemAllocationGranularity_flags, CUmemAllocationProp,
    CUmemAllocationType, CUmemGenericAllocationHandle, CUmemLocation, CUmemLocationType,
};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Bytes per second assumed until a move has been measured.
const ASSUMED_BANDWIDTH: f64 = 2e9;
/// How often a paused session looks for room to come back.
const POLL: Duration = Duration::from_millis(20);

/// One evictable allocation: a reserved range and, while resident, the physical memory
/// mapped under it; while evicted, its bytes.
struct Piece {
    tenant: TenantId,
    device: u32,
    size: u64,
    handle: Option<CUmemGenericAllocationHandle>,
    saved: Vec<u8>,
    /// An eviction or restore is copying it (a free waits).
    moving: bool,
}

/// Per tenant: what its sessions see of preemption.
#[derive(Default, Clone, Copy, serde::Serialize)]
pub struct Stats {
    pub evictions: u64,
    pub evicted_bytes: u64,
    pub restores: u64,
    pub restored_bytes: u64,
    /// Time its sessions' requests waited at the gate, summed over sessions.
    pub paused_ns: u64,
    pub last_evict_ns: u64,
    pub last_restore_ns: u64,
}

#[derive(Default)]
struct Gate {
    in_call: u32,
    closed: bool,
    evicting: bool,
    restoring: bool,
    evicted: BTreeSet<u32>,
    last_restore: Option<Instant>,
    last_move: Duration,
    stats: Stats,
}

#[derive(Default)]
struct State {
    gates: HashMap<TenantId, Gate>,
    pieces: BTreeMap<u64, Piece>,
    /// Per session: its tenant and the time its requests waited at the gate.
    sessions: BTreeMap<u64, (TenantId, u64)>,
    /// Bytes per second of the last move (out or back).
    bandwidth: f64,
}

/// The daemon-wide side ([`Shared::evict`]).
#[derive(Default)]
pub struct Evictor {
    st: Mutex<State>,
    cv: Condvar,
    /// One eviction at a time.
    one: Mutex<()>,
    /// Some evictable allocation was ever made (until then the gate costs nothing).
    active: AtomicBool,
}

impl Evictor {
    fn st(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&'a self, g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.cv.wait_timeout(g, POLL).unwrap_or_else(|e| e.into_inner()).0
    }

    /// Whether `ptr` is the base of an evictable allocation.
    pub fn owns(&self, ptr: u64) -> bool {
        self.active.load(Ordering::Relaxed) && self.st().pieces.contains_key(&ptr)
    }

    /// The status document's `evictions`: per tenant and per session.
    pub fn status(&self) -> Value {
        let st = self.st();
        let tenants: Vec<Value> = st
            .gates
            .iter()
            .map(|(t, g)| {
                let now: u64 =
                    st.pieces.values().filter(|p| &p.tenant == t && p.handle.is_none()).map(|p| p.size).sum();
                json!({
                    "tenant": t.as_str(), "paused": g.closed, "evicted_now_bytes": now,
                    "evicted_devices": g.evicted.iter().collect::<Vec<_>>(),
                    "evictions": g.stats.evictions, "evicted_bytes": g.stats.evicted_bytes,
                    "restores": g.stats.restores, "restored_bytes": g.stats.restored_bytes,
                    "paused_ns": g.stats.paused_ns, "last_evict_ns": g.stats.last_evict_ns,
                    "last_restore_ns": g.stats.last_restore_ns,
                })
            })
            .collect();
        let sessions: Vec<Value> = st
            .sessions
            .iter()
            .map(|(id, (t, ns))| json!({"session": id, "tenant": t.as_str(), "paused_ns": ns}))
            .collect();
        json!({ "tenants": tenants, "sessions": sessions, "bandwidth": st.bandwidth })
    }

    /// A session ended: its own pause time leaves the per-session list (the tenant keeps it).
    pub fn session_ended(&self, session: u64) {
        if self.active.load(Ordering::Relaxed) {
            self.st().sessions.remove(&session);
            self.cv.notify_all();
        }
    }
}

fn rank(p: Priority) -> u8 {
    match p {
        Priority::High => 2,
        Priority::Normal => 1,
        Priority::Low => 0,
    }
}

/// Whether `tenant`'s `cuMemAlloc` memory is made evictable: it is preemptible and some
/// tenant of the config has a higher priority.
pub fn evictable(shared: &Shared, tenant: &TenantId) -> bool {
    let config = shared.ledger.config();
    let spec = config.tenant(tenant).unwrap_or_else(|| config.default_tenant());
    spec.preemptible && config.all_tenants().any(|t| rank(t.priority) > rank(spec.priority))
}

pub(super) fn prop(shared: &Shared, device: u32) -> CUmemAllocationProp {
    let cu = shared.devices.get(device as usize).map_or(device as i32, |d| d.cu);
    CUmemAllocationProp {
        type_: CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        location: CUmemLocation { type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: cu },
        ..Default::default()
    }
}

/// Physical memory of `size` bytes mapped read-write at `base` (all or nothing).
pub(super) fn create_map(shared: &Shared, device: u32, base: u64, size: u64) -> Result<CUmemGenericAllocationHandle> {
    let prop = prop(shared, device);
    let mut h: CUmemGenericAllocationHandle = 0;
    call!(shared.cuda, cuMemCreate(&mut h, size as usize, &prop, 0))?;
    if let Err(e) = call!(shared.cuda, cuMemMap(base, size as usize, 0, h, 0)) {
        let _ = call!(shared.cuda, cuMemRelease(h));
        return Err(e.into());
    }
    let desc =
        CUmemAccessDesc { location: prop.location, flags: CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    if let Err(e) = call!(shared.cuda, cuMemSetAccess(base, size as usize, &desc, 1)) {
        let _ = call!(shared.cuda, cuMemUnmap(base, size as usize));
        let _ = call!(shared.cuda, cuMemRelease(h));
        return Err(e.into());
    }
    Ok(h)
}

/// An evictable `cuMemAlloc` of `bytes` on `device` (the tenant's context current): its base.
pub fn alloc(shared: &Shared, tenant: &TenantId, device: u32, bytes: u64) -> Result<u64> {
    let prop = prop(shared, device);
    let mut g = 0usize;
    let min = CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM;
    call!(shared.cuda, cuMemGetAllocationGranularity(&mut g, &prop, min))?;
    let g = (g as u64).max(1);
    let size = bytes.div_ceil(g).checked_mul(g).ok_or_else(|| Fail::invalid_value("size overflows"))?;
    let mut base = 0;
    call!(shared.cuda, cuMemAddressReserve(&mut base, size as usize, g as usize, 0, 0))?;
    let handle = match create_map(shared, device, base, size) {
        Ok(h) => h,
        Err(e) => {
            let _ = call!(shared.cuda, cuMemAddressFree(base, size as usize));
            return Err(e);
        }
    };
    let ev = &shared.evict;
    ev.active.store(true, Ordering::Relaxed);
    let piece = Piece { tenant: tenant.clone(), device, size, handle: Some(handle), saved: Vec::new(), moving: false };
    ev.st().pieces.insert(base, piece);
    Ok(base)
}

/// Frees an evictable allocation (resident or not), waiting out a move in progress.
pub fn free(shared: &Shared, ptr: u64) -> Result<()> {
    let ev = &shared.evict;
    let mut st = ev.st();
    while st.pieces.get(&ptr).is_some_and(|p| p.moving) {
        st = ev.wait(st);
    }
    let Some(p) = st.pieces.remove(&ptr) else {
        return Err(Fail::invalid_value(format!("{ptr:#x} is not an evictable allocation")));
    };
    drop(st);
    if let Some(h) = p.handle {
        call!(shared.cuda, cuMemUnmap(ptr, p.size as usize))?;
        call!(shared.cuda, cuMemRelease(h))?;
    }
    call!(shared.cuda, cuMemAddressFree(ptr, p.size as usize))?;
    // The last evicted piece of its tenant on its device gone: nothing is left to bring back
    // there, and with nothing left anywhere the tenant's sessions run on (none needs to restore).
    let mut st = ev.st();
    let left = st.pieces.values().any(|q| q.tenant == p.tenant && q.device == p.device && q.handle.is_none());
    if !left && let Some(g) = st.gates.get_mut(&p.tenant) {
        g.evicted.remove(&p.device);
        if g.evicted.is_empty() && !g.evicting {
            g.closed = false;
        }
    }
    drop(st);
    ev.cv.notify_all();
    Ok(())
}

/// A request inside the gate; dropping it lets an eviction of its tenant proceed.
pub struct Inside {
    shared: Arc<Shared>,
    tenant: TenantId,
}

impl Drop for Inside {
    fn drop(&mut self) {
        let ev = &self.shared.evict;
        if let Some(g) = ev.st().gates.get_mut(&self.tenant) {
            g.in_call = g.in_call.saturating_sub(1);
        }
        ev.cv.notify_all();
    }
}

/// The client hung up while its session was paused: end the session now.
pub struct Gone;

/// Lets a request of `s` in, waiting while its tenant is evicted (and bringing its memory back
/// when there is room); a client that hangs up meanwhile is not waited for. `Ok(None)`:
/// preemption has never been used, nothing to count.
pub fn gate(s: &mut Session) -> std::result::Result<Option<Inside>, Gone> {
    // Before every request: one load, no reference count touched (a shared cache line).
    if !s.shared.evict.active.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let shared = s.shared.clone();
    let ev = &shared.evict;
    let tenant = s.quota.tenant().clone();
    let mut st = ev.st();
    let mut paused_at = None;
    loop {
        let g = st.gates.entry(tenant.clone()).or_default();
        if !g.closed || shared.stopping() {
            g.in_call += 1;
            break;
        }
        paused_at.get_or_insert_with(Instant::now);
        if s.peer.as_ref().is_some_and(gpupool_protocol::transport::hung_up) {
            let ms = paused_at.map_or(0, |t| t.elapsed().as_millis() as u64);
            tracing::info!(session = s.id, tenant = %tenant.as_str(), paused_ms = ms, "client hung up while paused");
            return Err(Gone);
        }
        if !g.evicting && !g.restoring && !g.evicted.is_empty() {
            g.restoring = true;
            let devices: Vec<u32> = g.evicted.iter().copied().collect();
            drop(st);
            let back = restore(&shared, &tenant, &devices);
            // The restore made the tenant's contexts current on this thread.
            s.current = super::Raw(std::ptr::null_mut());
            st = ev.st();
            let g = st.gates.entry(tenant.clone()).or_default();
            g.restoring = false;
            for d in back {
                g.evicted.remove(&d);
            }
            if g.evicted.is_empty() {
                g.closed = false;
                g.last_restore = Some(Instant::now());
                ev.cv.notify_all();
                continue;
            }
        }
        st = ev.wait(st);
    }
    if let Some(t0) = paused_at {
        let ns = t0.elapsed().as_nanos() as u64;
        if let Some(g) = st.gates.get_mut(&tenant) {
            g.stats.paused_ns += ns;
        }
        st.sessions.entry(s.id).or_insert_with(|| (tenant.clone(), 0)).1 += ns;
        tracing::info!(session = s.id, tenant = %tenant.as_str(), paused_ms = ns / 1_000_000, "session resumed");
    }
    Ok(Some(Inside { shared: shared.clone(), tenant }))
}

/// Brings `tenant`'s memory on `devices` back where the device has room: the devices done.
fn restore(shared: &Shared, tenant: &TenantId, devices: &[u32]) -> Vec<u32> {
    let ev = &shared.evict;
    let mut done = Vec::new();
    for &d in devices {
        let Ok(tc) = shared.tenant_ctx(tenant, d) else { continue };
        if call!(shared.cuda, cuCtxSetCurrent(tc.ctx.0)).is_err() {
            continue;
        }
        let mut st = ev.st();
        let bases: Vec<u64> = st
            .pieces
            .iter()
            .filter(|(_, p)| &p.tenant == tenant && p.device == d && p.handle.is_none() && !p.moving)
            .map(|(&b, _)| b)
            .collect();
        let bytes: u64 = bases.iter().map(|b| st.pieces[b].size).sum();
        let (mut free, mut total) = (0usize, 0usize);
        if call!(shared.cuda, cuMemGetInfo_v2(&mut free, &mut total)).is_err() || (free as u64) < bytes {
            continue;
        }
        let mut moving: Vec<(u64, u64, Vec<u8>)> = Vec::new();
        for b in &bases {
            let p = st.pieces.get_mut(b).expect("listed");
            p.moving = true;
            moving.push((*b, p.size, std::mem::take(&mut p.saved)));
        }
        drop(st);
        let t0 = Instant::now();
        let mut back = Vec::new();
        let mut failed = false;
        for (base, size, saved) in moving {
            let h = if failed {
                None
            } else {
                match create_map(shared, d, base, size) {
                    Ok(h) => match call!(shared.cuda, cuMemcpyHtoD_v2(base, saved.as_ptr().cast(), size as usize)) {
                        Ok(()) => Some(h),
                        Err(e) => {
                            tracing::warn!(tenant = %tenant.as_str(), "restore copy failed: {e}");
                            let _ = call!(shared.cuda, cuMemUnmap(base, size as usize));
                            let _ = call!(shared.cuda, cuMemRelease(h));
                            None
                        }
                    },
                    Err(e) => {
                        tracing::info!(tenant = %tenant.as_str(), device = d, "no room to restore yet: {}", e.message);
                        None
                    }
                }
            };
            failed |= h.is_none();
            back.push((base, size, h, saved));
        }
        let took = t0.elapsed();
        let mut st = ev.st();
        let mut moved = 0;
        for (base, size, h, saved) in back {
            if let Some(p) = st.pieces.get_mut(&base) {
                p.moving = false;
                p.handle = h;
                if h.is_none() {
                    p.saved = saved;
                } else {
                    moved += size;
                }
            }
        }
        if moved > 0 {
            st.bandwidth = moved as f64 / took.as_secs_f64().max(1e-9);
        }
        let g = st.gates.entry(tenant.clone()).or_default();
        if !failed {
            g.stats.restores += 1;
            g.stats.restored_bytes += moved;
            g.stats.last_restore_ns = took.as_nanos() as u64;
            g.last_move = g.last_move.max(took);
            done.push(d);
            tracing::info!(tenant = %tenant.as_str(), device = d, bytes = moved, ms = took.as_millis() as u64, "memory restored");
        }
        ev.cv.notify_all();
    }
    done
}

/// After a backend OUT_OF_MEMORY on `device` for a session of `tenant`: evicts the memory of
/// one lower-priority preemptible tenant there. Whether something was evicted (try again).
/// `current` is made current again on this thread before returning.
pub fn make_room(shared: &Shared, tenant: &TenantId, device: u32, current: CUcontext) -> bool {
    let ev = &shared.evict;
    if !ev.active.load(Ordering::Relaxed) {
        return false;
    }
    let _one = ev.one.lock().unwrap_or_else(|e| e.into_inner());
    let config = shared.ledger.config();
    let spec_of = |t: &TenantId| config.tenant(t).unwrap_or_else(|| config.default_tenant()).clone();
    let mine = rank(spec_of(tenant).priority);
    let tuning = config.preemption;
    let st = ev.st();
    let mut on_device: BTreeMap<TenantId, u64> = BTreeMap::new();
    for p in st.pieces.values().filter(|p| p.device == device && p.handle.is_some() && !p.moving) {
        *on_device.entry(p.tenant.clone()).or_default() += p.size;
    }
    let bandwidth = if st.bandwidth > 0.0 { st.bandwidth } else { ASSUMED_BANDWIDTH };
    let mut candidates: Vec<(u8, u64, TenantId)> = Vec::new();
    for (t, bytes) in on_device {
        let spec = spec_of(&t);
        if &t == tenant || rank(spec.priority) >= mine || !spec.preemptible {
            continue;
        }
        let g = st.gates.get(&t);
        let hold = g.map_or(tuning.min_resident, |g| tuning.min_resident.max(g.last_move * tuning.resident_factor));
        if let Some(at) = g.and_then(|g| g.last_restore).filter(|at| at.elapsed() < hold) {
            tracing::info!(victim = %t.as_str(), since_ms = at.elapsed().as_millis() as u64, hold_ms = hold.as_millis() as u64,
                "not evicting: brought back too recently");
            continue;
        }
        let estimate = Duration::from_secs_f64(2.0 * bytes as f64 / bandwidth);
        if estimate > tuning.max_move {
            tracing::info!(victim = %t.as_str(), bytes, estimate_ms = estimate.as_millis() as u64, "not evicting: too costly");
            continue;
        }
        candidates.push((rank(spec.priority), bytes, t));
    }
    drop(st);
    // The lowest priority first; among equals the most bytes (the fewest tenants paused).
    candidates.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut evicted = false;
    for (_, _, victim) in candidates {
        if evict(shared, &victim, device, tenant, tuning.drain_timeout) {
            evicted = true;
            break;
        }
    }
    let _ = call!(shared.cuda, cuCtxSetCurrent(current));
    evicted
}

/// Moves `victim`'s evictable memory on `device` to host memory, its sessions paused.
fn evict(shared: &Shared, victim: &TenantId, device: u32, by: &TenantId, drain: Duration) -> bool {
    let ev = &shared.evict;
    let mut st = ev.st();
    {
        let g = st.gates.entry(victim.clone()).or_default();
        if g.restoring {
            return false;
        }
        g.closed = true;
        g.evicting = true;
    }
    let deadline = Instant::now() + drain;
    while st.gates.get(victim).is_some_and(|g| g.in_call > 0) {
        if Instant::now() >= deadline {
            let g = st.gates.get_mut(victim).expect("present");
            g.evicting = false;
            g.closed = !g.evicted.is_empty();
            ev.cv.notify_all();
            tracing::info!(victim = %victim.as_str(), "not evicting: its requests did not finish within {drain:?}");
            return false;
        }
        st = ev.wait(st);
    }
    let mut moving = Vec::new();
    for (&b, p) in st.pieces.iter_mut() {
        if let Some(h) = p.handle.filter(|_| &p.tenant == victim && p.device == device && !p.moving) {
            p.moving = true;
            moving.push((b, p.size, h));
        }
    }
    drop(st);
    let t0 = Instant::now();
    let synced = shared
        .tenant_ctx(victim, device)
        .map_err(|f| f.message)
        .and_then(|tc| call!(shared.cuda, cuCtxSetCurrent(tc.ctx.0)).map_err(|e| e.to_string()))
        .and_then(|()| call!(shared.cuda, cuCtxSynchronize()).map_err(|e| e.to_string()));
    let mut out = Vec::new();
    for (base, size, h) in moving {
        let res = synced.clone().and_then(|()| {
            let mut buf = Vec::new();
            buf.try_reserve_exact(size as usize).map_err(|e| format!("host memory for {size} bytes: {e}"))?;
            buf.resize(size as usize, 0u8);
            call!(shared.cuda, cuMemcpyDtoH_v2(buf.as_mut_ptr().cast(), base, size as usize))
                .map_err(|e| e.to_string())?;
            call!(shared.cuda, cuMemUnmap(base, size as usize)).map_err(|e| e.to_string())?;
            if let Err(e) = call!(shared.cuda, cuMemRelease(h)) {
                tracing::warn!(victim = %victim.as_str(), "cuMemRelease after eviction: {e}");
            }
            Ok(buf)
        });
        if let Err(e) = &res {
            tracing::warn!(victim = %victim.as_str(), base, "eviction of an allocation failed: {e}");
        }
        out.push((base, size, res.ok()));
    }
    let took = t0.elapsed();
    let mut st = ev.st();
    let mut moved = 0;
    for (base, size, saved) in out {
        if let Some(p) = st.pieces.get_mut(&base) {
            p.moving = false;
            if let Some(buf) = saved {
                p.handle = None;
                p.saved = buf;
                moved += size;
            }
        }
    }
    if moved > 0 {
        st.bandwidth = moved as f64 / took.as_secs_f64().max(1e-9);
    }
    let g = st.gates.get_mut(victim).expect("present");
    g.evicting = false;
    if moved > 0 {
        g.evicted.insert(device);
        g.stats.evictions += 1;
        g.stats.evicted_bytes += moved;
        g.stats.last_evict_ns = took.as_nanos() as u64;
        g.last_move = took;
    }
    g.closed = !g.evicted.is_empty();
    ev.cv.notify_all();
    tracing::info!(victim = %victim.as_str(), by = %by.as_str(), device, bytes = moved, ms = took.as_millis() as u64,
        "memory evicted to host");
    moved > 0
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct TenantLabel {
    tenant: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct SessionLabels {
    session: String,
    tenant: String,
}

/// `gpupool_tenant_evictions`, `_evicted_bytes`, `_restores`, `_paused_seconds` (counters),
/// `gpupool_tenant_evicted_now_bytes` and `gpupool_session_paused_seconds`, from the status
/// document's `evictions`.
pub fn register_metrics(reg: &mut prometheus_client::registry::Registry, doc: &Value) {
    use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};
    use prometheus_client::registry::Unit;
    use std::sync::atomic::AtomicU64;
    type F64Counter = Counter<f64, AtomicU64>;
    let evictions = Family::<TenantLabel, Counter>::default();
    let restores = Family::<TenantLabel, Counter>::default();
    let bytes = Family::<TenantLabel, Counter>::default();
    let now = Family::<TenantLabel, Gauge>::default();
    let paused = Family::<TenantLabel, F64Counter>::default();
    let doc = &doc["evictions"];
    for t in doc["tenants"].as_array().into_iter().flatten() {
        let l = TenantLabel { tenant: t["tenant"].as_str().unwrap_or("?").to_string() };
        evictions.get_or_create(&l).inc_by(t["evictions"].as_u64().unwrap_or(0));
        restores.get_or_create(&l).inc_by(t["restores"].as_u64().unwrap_or(0));
        bytes.get_or_create(&l).inc_by(t["evicted_bytes"].as_u64().unwrap_or(0));
        now.get_or_create(&l).set(t["evicted_now_bytes"].as_i64().unwrap_or(0));
        paused.get_or_create(&l).inc_by(t["paused_ns"].as_f64().unwrap_or(0.0) / 1e9);
    }
    let session_paused = Family::<SessionLabels, F64Counter>::default();
    for s in doc["sessions"].as_array().into_iter().flatten() {
        let l = SessionLabels {
            session: s["session"].to_string(),
            tenant: s["tenant"].as_str().unwrap_or("?").to_string(),
        };
        session_paused.get_or_create(&l).inc_by(s["paused_ns"].as_f64().unwrap_or(0.0) / 1e9);
    }
    reg.register("tenant_evictions", "Times a tenant's device memory was evicted to host memory", evictions);
    reg.register("tenant_restores", "Times a tenant's evicted memory was brought back", restores);
    reg.register_with_unit("tenant_evicted", "Bytes of a tenant's device memory evicted, in all", Unit::Bytes, bytes);
    reg.register_with_unit("tenant_evicted_now", "Bytes of a tenant's device memory on the host now", Unit::Bytes, now);
    reg.register_with_unit(
        "tenant_paused",
        "Time a tenant's requests waited for its evicted memory, summed over sessions",
        Unit::Seconds,
        paused,
    );
    reg.register_with_unit(
        "session_paused",
        "Time a live session's requests waited for its tenant's evicted memory",
        Unit::Seconds,
        session_paused,
    );
}
