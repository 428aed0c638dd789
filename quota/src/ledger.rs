//! The device-memory ledger: bytes per tenant per device, reserved before the backend allocates; and
//! beside it each tenant's page-locked host bytes (one figure, not per device), counted before the
//! daemon maps a client's page-locked region ([`Ledger::pin`]).
//!
//! Each tenant has one account (a mutex-guarded book) shared by all its sessions, so a reservation is
//! checked and recorded in one critical section: concurrent reservations cannot overshoot. A session's
//! reservations borrow the session, so a session cannot be closed while one of its reservations is in
//! flight (the compiler enforces it); closing it releases exactly what it committed.
//!
//! Lock order: the ledger's map (read or write), then one book. `reserve`, `commit`, `release` and closing
//! a session take only their book.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use serde::Serialize;

use crate::config::{Config, MemoryQuota, TenantId};
use crate::resolve::{ClientRequest, LimitsError};

/// Committed and in-flight bytes on one device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Usage {
    committed: u64,
    pending: u64,
}

impl Usage {
    fn total(self) -> u64 {
        self.committed + self.pending
    }
}

#[derive(Debug)]
struct SessionBook {
    /// The client's own request; the tenant's quota is checked separately, live.
    cap: MemoryQuota,
    held: BTreeMap<u32, Usage>,
    /// Page-locked host bytes it holds.
    pinned: u64,
}

#[derive(Debug)]
struct BookState {
    quota: MemoryQuota,
    retired: bool,
    used: BTreeMap<u32, Usage>,
    sessions: HashMap<u64, SessionBook>,
    /// Page-locked host bytes held by all its sessions, and their quota.
    pinned: u64,
    pinned_quota: u64,
}

#[derive(Debug)]
struct Book {
    tenant: TenantId,
    state: Mutex<BookState>,
}

impl Book {
    fn lock(&self) -> MutexGuard<'_, BookState> {
        // Every update checks before it mutates, so a poisoned book is still consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn bump(map: &mut BTreeMap<u32, Usage>, device: u32, f: impl FnOnce(&mut Usage)) {
    let u = map.entry(device).or_default();
    f(u);
    if *u == Usage::default() {
        map.remove(&device);
    }
}

#[derive(Debug)]
struct Inner {
    config: Arc<Config>,
    books: HashMap<TenantId, Arc<Book>>,
}

/// Memory accounting for every tenant on every device. `Sync`: share it between the daemon's threads.
#[derive(Debug)]
pub struct Ledger {
    inner: RwLock<Inner>,
    next_session: AtomicU64,
}

/// A session's id, unique within one ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct SessionId(pub u64);

/// One client session's handle on its tenant's account. Dropping it releases what it holds, as
/// [`Ledger::release_session`] does (which also says how much that was).
#[derive(Debug)]
pub struct Session {
    id: SessionId,
    book: Arc<Book>,
    closed: bool,
}

impl Session {
    /// Its id.
    pub fn id(&self) -> SessionId {
        self.id
    }

    /// Its tenant.
    pub fn tenant(&self) -> &TenantId {
        &self.book.tenant
    }

    /// Bytes this session has committed per device (devices with nothing are left out).
    pub fn held(&self) -> BTreeMap<u32, u64> {
        let st = self.book.lock();
        st.sessions
            .get(&self.id.0)
            .map(|s| s.held.iter().filter(|(_, u)| u.committed > 0).map(|(&d, u)| (d, u.committed)).collect())
            .unwrap_or_default()
    }

    /// Page-locked host bytes this session holds.
    pub fn pinned(&self) -> u64 {
        self.book.lock().sessions.get(&self.id.0).map_or(0, |s| s.pinned)
    }

    fn close(&mut self) -> BTreeMap<u32, u64> {
        if std::mem::replace(&mut self.closed, true) {
            return BTreeMap::new();
        }
        let mut st = self.book.lock();
        let Some(s) = st.sessions.remove(&self.id.0) else {
            return BTreeMap::new();
        };
        st.pinned -= s.pinned;
        let mut freed = BTreeMap::new();
        for (d, u) in s.held {
            // No reservation can be in flight: they borrow the session.
            debug_assert_eq!(u.pending, 0);
            if u.committed > 0 {
                bump(&mut st.used, d, |t| t.committed -= u.committed);
                freed.insert(d, u.committed);
            }
        }
        freed
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.close();
    }
}

/// Whose limit refused a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// The tenant's quota (the sum over all its sessions).
    Tenant,
    /// The session's own, narrower request (`gpupool run --memory`).
    Session,
}

/// A reservation refused: the daemon answers CUDA_ERROR_OUT_OF_MEMORY and changes nothing else.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "tenant `{tenant}`: {requested} bytes on device {device} would exceed the {scope:?} limit ({in_use} of {limit} bytes in use)"
)]
pub struct OverQuota {
    /// The tenant.
    pub tenant: TenantId,
    /// The device.
    pub device: u32,
    /// The bytes asked for.
    pub requested: u64,
    /// Bytes in use (committed + in flight) under the limit that refused, at the moment of refusal.
    pub in_use: u64,
    /// That limit, in bytes (`u64::MAX` for an unlimited one overflowed).
    pub limit: u64,
    /// Which limit.
    pub scope: Scope,
}

/// A release that does not match what the session holds (a daemon bug; nothing is changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("session {session:?} releases {bytes} bytes on device {device} but holds {held}")]
pub struct NotHeld {
    /// The session.
    pub session: SessionId,
    /// The device.
    pub device: u32,
    /// The bytes it tried to release.
    pub bytes: u64,
    /// The bytes it holds there.
    pub held: u64,
}

/// A transfer refused (a daemon bug; nothing is changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransferError {
    /// The giving session does not hold the bytes.
    #[error(transparent)]
    NotHeld(#[from] NotHeld),
    /// The receiving session is not an open session of the same tenant.
    #[error("session {0:?} is not an open session of the tenant")]
    NotOpen(SessionId),
}

/// Page-locked host memory refused: the daemon answers CUDA_ERROR_OUT_OF_MEMORY and changes nothing else.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "tenant `{tenant}`: {requested} bytes of page-locked host memory would exceed its pinned quota ({in_use} of {limit} bytes in use)"
)]
pub struct PinnedOverQuota {
    /// The tenant.
    pub tenant: TenantId,
    /// The bytes asked for.
    pub requested: u64,
    /// Page-locked bytes the tenant holds, at the moment of refusal.
    pub in_use: u64,
    /// Its pinned quota in bytes.
    pub limit: u64,
}

/// An unpin that does not match what the session holds (a daemon bug; nothing is changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("session {session:?} unpins {bytes} bytes but holds {held} page-locked bytes")]
pub struct NotPinned {
    /// The session.
    pub session: SessionId,
    /// The bytes it tried to give back.
    pub bytes: u64,
    /// The page-locked bytes it holds.
    pub held: u64,
}

/// Bytes counted against the quota before the backend allocates. [`commit`](Reservation::commit) it when
/// the allocation succeeded; drop it (or [`cancel`](Reservation::cancel)) when it failed.
#[must_use = "a reservation is released when dropped; commit it once the backend allocated"]
#[derive(Debug)]
pub struct Reservation<'s> {
    session: &'s Session,
    device: u32,
    bytes: u64,
    done: bool,
}

impl Reservation<'_> {
    /// The device.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// The bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The backend allocated: the bytes are now held by the session until [`Ledger::release`] or the
    /// session closes.
    pub fn commit(mut self) {
        self.finish(true);
    }

    /// The backend failed: give the bytes back.
    pub fn cancel(mut self) {
        self.finish(false);
    }

    fn finish(&mut self, keep: bool) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let (d, b) = (self.device, self.bytes);
        let mut st = self.session.book.lock();
        let apply = |u: &mut Usage| {
            u.pending -= b;
            if keep {
                u.committed += b;
            }
        };
        bump(&mut st.used, d, apply);
        let s = st.sessions.get_mut(&self.session.id.0).expect("session open while its reservation lives");
        bump(&mut s.held, d, apply);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.finish(false);
    }
}

fn check(in_use: u64, bytes: u64, limit: Option<u64>) -> Result<(), (u64, u64)> {
    let limit_v = limit.unwrap_or(u64::MAX);
    match in_use.checked_add(bytes) {
        Some(total) if total <= limit_v => Ok(()),
        _ => Err((in_use, limit_v)),
    }
}

/// What `cuMemGetInfo` / `nvmlDeviceGetMemoryInfo` should report to a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MemInfo {
    /// Device size as the session sees it: the smallest of the device, the tenant quota, its own request.
    pub total: u64,
    /// What it could still allocate: the smallest of the three headrooms.
    pub free: u64,
}

/// One tenant on one device, for `gpupool status --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceUsage {
    /// Device index.
    pub device: u32,
    /// Bytes committed plus in flight.
    pub used: u64,
    /// Of `used`, bytes reserved but not yet committed.
    pub pending: u64,
    /// The quota in bytes; `null` = unlimited.
    pub quota: Option<u64>,
}

/// One tenant, for `gpupool status --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TenantUsage {
    /// The tenant.
    pub tenant: TenantId,
    /// Removed from the config by a reload while it still had sessions (quota 0 until they end).
    pub retired: bool,
    /// Open sessions.
    pub sessions: usize,
    /// Per device.
    pub devices: Vec<DeviceUsage>,
    /// Page-locked host bytes its sessions hold.
    pub pinned: u64,
    /// Its page-locked host memory quota in bytes.
    pub pinned_quota: u64,
}

/// The whole ledger, for `gpupool status --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerSnapshot {
    /// Per tenant, sorted by name.
    pub tenants: Vec<TenantUsage>,
}

impl Ledger {
    /// A ledger with an account for every tenant of `config`.
    pub fn new(config: Config) -> Ledger {
        let ledger = Ledger {
            inner: RwLock::new(Inner { config: Arc::new(Config::unrestricted()), books: HashMap::new() }),
            next_session: AtomicU64::new(1),
        };
        ledger.apply(config);
        ledger
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The config in force (resolve clients and compute limits with it).
    pub fn config(&self) -> Arc<Config> {
        self.read().config.clone()
    }

    /// Hot reload: new quotas apply to live tenants at once. A quota lowered below current use makes new
    /// reservations fail until use drops; nothing is freed. A tenant no longer in the config keeps what
    /// its sessions hold, gets a quota of 0 (`retired`) and disappears once its sessions are gone. A
    /// tenant that comes back gets its new quota.
    pub fn apply(&self, config: Config) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let mut seen = BTreeSet::new();
        for spec in config.all_tenants() {
            seen.insert(spec.id.clone());
            let book = inner.books.entry(spec.id.clone()).or_insert_with(|| {
                Arc::new(Book {
                    tenant: spec.id.clone(),
                    state: Mutex::new(BookState {
                        quota: MemoryQuota::zero(),
                        retired: false,
                        used: BTreeMap::new(),
                        sessions: HashMap::new(),
                        pinned: 0,
                        pinned_quota: 0,
                    }),
                })
            });
            let mut st = book.lock();
            st.quota = spec.memory.clone();
            st.pinned_quota = spec.pinned;
            st.retired = false;
        }
        inner.books.retain(|id, book| {
            if seen.contains(id) {
                return true;
            }
            let mut st = book.lock();
            st.quota = MemoryQuota::zero();
            st.pinned_quota = 0;
            st.retired = true;
            !st.sessions.is_empty()
        });
        inner.config = Arc::new(config);
    }

    /// Open a session for a client of `tenant` (from [`Config::resolve`]). `request.memory` is the
    /// client's own narrower limit (checked besides the tenant's live quota); `request.compute` is not
    /// the ledger's business.
    pub fn open_session(&self, tenant: &TenantId, request: &ClientRequest) -> Result<Session, LimitsError> {
        let inner = self.read();
        let book = match inner.books.get(tenant) {
            Some(b) if !b.lock().retired => b.clone(),
            _ => return Err(LimitsError::UnknownTenant(tenant.clone())),
        };
        // Validate the request the same way effective_limits does.
        inner.config.effective_limits(tenant, request)?;
        let id = SessionId(self.next_session.fetch_add(1, Ordering::Relaxed));
        book.lock()
            .sessions
            .insert(id.0, SessionBook { cap: request.memory.clone(), held: BTreeMap::new(), pinned: 0 });
        Ok(Session { id, book, closed: false })
    }

    /// Count `bytes` on `device` against the session's tenant (and the session's own request) before the
    /// backend allocates. Fits iff in-use + `bytes` <= limit, for both limits.
    pub fn reserve<'s>(&self, session: &'s Session, device: u32, bytes: u64) -> Result<Reservation<'s>, OverQuota> {
        let mut st = session.book.lock();
        let refuse = |(in_use, limit), scope| OverQuota {
            tenant: session.book.tenant.clone(),
            device,
            requested: bytes,
            in_use,
            limit,
            scope,
        };
        let tenant_use = st.used.get(&device).copied().unwrap_or_default().total();
        check(tenant_use, bytes, st.quota.for_device(device)).map_err(|e| refuse(e, Scope::Tenant))?;
        let s = st.sessions.get_mut(&session.id.0).expect("an open session has a book entry");
        let own = s.held.get(&device).copied().unwrap_or_default().total();
        check(own, bytes, s.cap.for_device(device)).map_err(|e| refuse(e, Scope::Session))?;
        bump(&mut s.held, device, |u| u.pending += bytes);
        bump(&mut st.used, device, |u| u.pending += bytes);
        Ok(Reservation { session, device, bytes, done: false })
    }

    /// The backend freed `bytes` on `device` that the session had committed.
    pub fn release(&self, session: &Session, device: u32, bytes: u64) -> Result<(), NotHeld> {
        let mut st = session.book.lock();
        let s = st.sessions.get_mut(&session.id.0).expect("an open session has a book entry");
        let held = s.held.get(&device).map_or(0, |u| u.committed);
        if bytes > held {
            return Err(NotHeld { session: session.id, device, bytes, held });
        }
        bump(&mut s.held, device, |u| u.committed -= bytes);
        bump(&mut st.used, device, |u| u.committed -= bytes);
        Ok(())
    }

    /// Moves `bytes` on `device` that `from` committed to `to`, another open session of the same tenant:
    /// memory two sessions share (a physical allocation one exported and the other imported) stays
    /// counted when the session that paid for it lets go first. The tenant's use does not change, so
    /// nothing is checked against its quota; nor against `to`'s own narrower request, since the bytes
    /// are already on the device.
    pub fn transfer(&self, from: &Session, to: SessionId, device: u32, bytes: u64) -> Result<(), TransferError> {
        let mut st = from.book.lock();
        if !st.sessions.contains_key(&to.0) {
            return Err(TransferError::NotOpen(to));
        }
        let s = st.sessions.get_mut(&from.id.0).expect("an open session has a book entry");
        let held = s.held.get(&device).map_or(0, |u| u.committed);
        if bytes > held {
            return Err(NotHeld { session: from.id, device, bytes, held }.into());
        }
        bump(&mut s.held, device, |u| u.committed -= bytes);
        let t = st.sessions.get_mut(&to.0).expect("checked above");
        bump(&mut t.held, device, |u| u.committed += bytes);
        Ok(())
    }

    /// Count `bytes` of page-locked host memory against the session's tenant, before the daemon maps
    /// (and may page-lock) them: fits iff the tenant's page-locked bytes + `bytes` <= its `pinned`
    /// quota. Checked and counted in one critical section, like [`reserve`](Self::reserve).
    pub fn pin(&self, session: &Session, bytes: u64) -> Result<(), PinnedOverQuota> {
        let mut st = session.book.lock();
        let (in_use, limit) = (st.pinned, st.pinned_quota);
        check(in_use, bytes, Some(limit)).map_err(|_| PinnedOverQuota {
            tenant: session.book.tenant.clone(),
            requested: bytes,
            in_use,
            limit,
        })?;
        st.pinned += bytes;
        st.sessions.get_mut(&session.id.0).expect("an open session has a book entry").pinned += bytes;
        Ok(())
    }

    /// The daemon let go of `bytes` of page-locked host memory the session had pinned.
    pub fn unpin(&self, session: &Session, bytes: u64) -> Result<(), NotPinned> {
        let mut st = session.book.lock();
        let s = st.sessions.get_mut(&session.id.0).expect("an open session has a book entry");
        if bytes > s.pinned {
            return Err(NotPinned { session: session.id, bytes, held: s.pinned });
        }
        s.pinned -= bytes;
        st.pinned -= bytes;
        Ok(())
    }

    /// Close a session: everything it committed is released. Returns the bytes freed per device (devices
    /// where it held nothing are left out).
    pub fn release_session(&self, mut session: Session) -> BTreeMap<u32, u64> {
        session.close()
    }

    /// What the session should see as its device's memory, given the device's real total and free bytes.
    pub fn mem_info(&self, session: &Session, device: u32, device_total: u64, device_free: u64) -> MemInfo {
        let st = session.book.lock();
        let s = &st.sessions[&session.id.0];
        let (tq, sq) = (st.quota.for_device(device), s.cap.for_device(device));
        let t_use = st.used.get(&device).map_or(0, |u| u.total());
        let s_use = s.held.get(&device).map_or(0, |u| u.total());
        let total = device_total.min(tq.unwrap_or(u64::MAX)).min(sq.unwrap_or(u64::MAX));
        let head = |q: Option<u64>, used: u64| q.map_or(u64::MAX, |q| q.saturating_sub(used));
        let free = device_free.min(head(tq, t_use)).min(head(sq, s_use)).min(total);
        MemInfo { total, free }
    }

    /// Bytes in use (committed + in flight) by `tenant` on `device`.
    pub fn used(&self, tenant: &TenantId, device: u32) -> u64 {
        let inner = self.read();
        inner.books.get(tenant).map_or(0, |b| b.lock().used.get(&device).map_or(0, |u| u.total()))
    }

    /// The tenant's quota on `device` (`None` = unlimited or unknown tenant).
    pub fn quota(&self, tenant: &TenantId, device: u32) -> Option<u64> {
        let inner = self.read();
        inner.books.get(tenant).and_then(|b| b.lock().quota.for_device(device))
    }

    /// Per tenant per device: used and quota. Lists devices `0..device_count`, plus any other device
    /// where the tenant has a quota or use.
    pub fn snapshot(&self, device_count: u32) -> LedgerSnapshot {
        let inner = self.read();
        let mut tenants: Vec<TenantUsage> = inner
            .books
            .values()
            .filter_map(|book| {
                let st = book.lock();
                if st.retired && st.sessions.is_empty() {
                    return None; // gone; pruned at the next apply
                }
                let mut devs: BTreeSet<u32> = (0..device_count).collect();
                devs.extend(st.quota.devices.keys());
                devs.extend(st.used.keys());
                let devices = devs
                    .into_iter()
                    .map(|d| {
                        let u = st.used.get(&d).copied().unwrap_or_default();
                        DeviceUsage { device: d, used: u.total(), pending: u.pending, quota: st.quota.for_device(d) }
                    })
                    .collect();
                Some(TenantUsage {
                    tenant: book.tenant.clone(),
                    retired: st.retired,
                    sessions: st.sessions.len(),
                    devices,
                    pinned: st.pinned,
                    pinned_quota: st.pinned_quota,
                })
            })
            .collect();
        tenants.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        LedgerSnapshot { tenants }
    }
}
