//! IPC memory and event handles between the sessions of one tenant (`cuIpcGetMemHandle`,
//! `cuIpcOpenMemHandle`, `cuIpcCloseMemHandle`, `cuIpcGetEventHandle`, `cuIpcOpenEventHandle`).
//!
//! Every session's memory lives in this process, in the tenant's context of each device,
//! so another session of the tenant can use an allocation as it is: opening a handle adds
//! the allocation to the opener's view ([`Imports`], consulted by `Session::owned`), and
//! nothing is allocated or charged. The memory stays counted once, in the ledger of the
//! session that allocated it. The allocator's free (or its session's end) revokes the
//! export: every opener's view of it ends at once, since their next use finds it dead.
//!
//! An event opened from a handle is the exporter's event in the tenant's context, under a
//! new id of the opener's session; the backend event is destroyed when the last session
//! holding it (the exporter or an opener) destroys it or ends ([`release_event`]).
//!
//! A handle is a 128-bit secret from the kernel's random source; a secret of another
//! tenant is answered as an unknown one (CUDA_ERROR_INVALID_HANDLE, as NVIDIA documents
//! for a handle that cannot be opened), with a log line naming both tenants.
//!
//! Exported stream-ordered pools (`cuMemPoolExportToShareableHandle`, `cuMemPoolExportPointer`
//! and their imports) ride on the same exports. The pool itself is kept by the client
//! (interpose/src/api/mempool.rs), each of its blocks one allocation of the session, so the
//! daemon knows a pool only as a secret of the exporting session ([`PoolExport`]): a session
//! of the same tenant that presents it may import pointers exported from that pool, each an
//! [`Export`] tagged with the pool, opened as an IPC handle is. Since an exporter's pool keeps
//! a freed block allocated for reuse, its free revokes the pointer's export explicitly
//! (`MemPoolRevokePointer`). Refusals are INVALID_VALUE, the only failure NVIDIA documents for
//! these calls besides out-of-memory, with a log line naming both tenants.

use super::dispatch::{Fail, INVALID_HANDLE, OUT_OF_MEMORY, Result};
use super::session::Session;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// CUDA_ERROR_INVALID_CONTEXT.
const INVALID_CONTEXT: u32 = 201;
/// CUDA_ERROR_CAPTURED_EVENT.
const CAPTURED_EVENT: u32 = 907;

/// Exported pools one session may hold (each is a live `cuMemPoolCreate` pool of the client).
pub const MAX_POOL_EXPORTS: usize = 1024;

/// 128 bits from the kernel's random source.
pub(super) fn random_secret() -> Result<[u8; 16]> {
    use std::io::Read as _;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| Fail::new(OUT_OF_MEMORY, format!("no random bits for an IPC handle: {e}")))?;
    Ok(b)
}

/// One exported allocation.
pub struct Export {
    tenant: String,
    session: u64,
    ptr: u64,
    size: u64,
    device: u32,
    secret: [u8; 16],
    live: AtomicBool,
    /// The exported pool it came from (`cuMemPoolExportPointer`); `None`: an IPC handle.
    pool: Option<[u8; 16]>,
}

/// An exported memory pool: whose it is.
pub struct PoolExport {
    tenant: String,
    session: u64,
}

/// The daemon's live exports, by secret and by (session, pointer), and exported pools.
#[derive(Default)]
struct Table {
    by_secret: HashMap<[u8; 16], Arc<Export>>,
    by_alloc: HashMap<(u64, u64), Arc<Export>>,
    pools: HashMap<[u8; 16], PoolExport>,
}

fn table() -> std::sync::MutexGuard<'static, Table> {
    static T: OnceLock<Mutex<Table>> = OnceLock::new();
    T.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// What a session opened: base -> (export, times opened); the pools it imported.
#[derive(Default)]
pub struct Imports {
    open: BTreeMap<u64, (Arc<Export>, u32)>,
    pools: HashSet<[u8; 16]>,
}

impl Imports {
    /// The device of `[p, p + len)` when it lies in a live opened allocation.
    pub fn mapped(&self, p: u64, len: u64) -> Option<u32> {
        let (_, (e, _)) = self.open.range(..=p).next_back()?;
        let inside = p.checked_add(len).is_some_and(|end| end <= e.ptr + e.size) && (len > 0 || p < e.ptr + e.size);
        (inside && e.live.load(Ordering::Acquire)).then_some(e.device)
    }
}

fn revoke_export(e: &Export, t: &mut Table) {
    e.live.store(false, Ordering::Release);
    t.by_secret.remove(&e.secret);
    t.by_alloc.remove(&(e.session, e.ptr));
}

/// The allocation at `ptr` of session `session` was freed: its export, if any, ends.
pub fn revoke(session: u64, ptr: u64) {
    let mut t = table();
    if let Some(e) = t.by_alloc.get(&(session, ptr)).cloned() {
        revoke_export(&e, &mut t);
    }
}

/// A session ended: every export of its memory ends.
pub fn revoke_session(session: u64) {
    let mut t = table();
    let mine: Vec<Arc<Export>> = t.by_alloc.values().filter(|e| e.session == session).cloned().collect();
    for e in mine {
        revoke_export(&e, &mut t);
    }
    t.pools.retain(|_, p| p.session != session);
}

/// An exported event: the backend event, its device and owner tenant, and how many
/// sessions hold it.
struct SharedEvent {
    tenant: String,
    raw: usize,
    device: u32,
    holders: usize,
}

#[derive(Default)]
struct Events {
    /// secret -> event; by raw handle for the destroy path.
    shared: HashMap<[u8; 16], SharedEvent>,
    by_raw: HashMap<usize, [u8; 16]>,
}

fn events() -> std::sync::MutexGuard<'static, Events> {
    static E: OnceLock<Mutex<Events>> = OnceLock::new();
    E.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether backend event `raw` is shared between sessions (exported, so other sessions of the
/// tenant may hold it).
pub fn is_shared_event(raw: usize) -> bool {
    events().by_raw.contains_key(&raw)
}

/// A session lets go of backend event `raw` (its destroy or its end): whether the backend
/// event must be destroyed now, i.e. no other session holds it.
pub fn release_event(raw: usize) -> bool {
    let mut ev = events();
    let Some(secret) = ev.by_raw.get(&raw).copied() else { return true };
    let Some(e) = ev.shared.get_mut(&secret) else { return true };
    e.holders -= 1;
    if e.holders > 0 {
        return false;
    }
    ev.shared.remove(&secret);
    ev.by_raw.remove(&raw);
    true
}

impl Session {
    pub(super) fn ipc_export_event(&mut self, event: gpupool_protocol::EventId) -> Result<[u8; 16]> {
        let (raw, device) = self.event(event)?;
        if self.graphs.captured_events.contains(&event) {
            // It stands for a capture's nodes in this session, which no other session may join.
            return Err(Fail::new(
                CAPTURED_EVENT,
                "cuIpcGetEventHandle of an event last recorded in a capturing stream",
            ));
        }
        let raw = raw.0 as usize;
        let mut ev = events();
        if let Some(secret) = ev.by_raw.get(&raw) {
            return Ok(*secret);
        }
        let secret = random_secret()?;
        ev.by_raw.insert(raw, secret);
        ev.shared.insert(secret, SharedEvent { tenant: self.tenant().to_string(), raw, device, holders: 1 });
        Ok(secret)
    }

    pub(super) fn ipc_open_event(
        &mut self,
        ctx: gpupool_protocol::CtxId,
        secret: [u8; 16],
    ) -> Result<gpupool_protocol::EventId> {
        let d = self.ctx_device(ctx)?;
        let (raw, device) = {
            let mut ev = events();
            match ev.shared.get_mut(&secret) {
                Some(e) if e.tenant == self.tenant() => {
                    e.holders += 1;
                    (e.raw, e.device)
                }
                Some(e) => {
                    tracing::warn!(
                        session = self.id, tenant = %self.tenant(), owner = %e.tenant,
                        "cuIpcOpenEventHandle refused: the handle names an event of another tenant"
                    );
                    return Err(Fail::new(INVALID_HANDLE, "no IPC event handle of this tenant matches"));
                }
                None => return Err(Fail::new(INVALID_HANDLE, "no live IPC event handle matches")),
            }
        };
        if device != d {
            release_event(raw);
            return Err(Fail::invalid_value(format!("the event is on device {device}, the context on device {d}")));
        }
        let id = gpupool_protocol::EventId(self.next_handle());
        self.events.insert(id, (super::Raw(raw as gpupool_shim::cuda::CUevent), device));
        self.owner.insert(super::cleanup::Handle::Event(id), ctx);
        Ok(id)
    }

    pub(super) fn ipc_export(&mut self, ptr: u64) -> Result<[u8; 16]> {
        let Some(a) = self.allocs.get(&ptr) else {
            return Err(Fail::invalid_value(format!(
                "cuIpcGetMemHandle: {ptr:#x} is not the base of a cuMemAlloc allocation of this session"
            )));
        };
        let (size, device) = (a.size, a.device);
        self.export_alloc(ptr, size, device, None)
    }

    /// The export of this session's allocation at `ptr` (made once, until it ends), as an IPC
    /// handle (`pool` `None`) or from an exported pool; one allocation is exported one way.
    fn export_alloc(&self, ptr: u64, size: u64, device: u32, pool: Option<[u8; 16]>) -> Result<[u8; 16]> {
        if let Some(e) = table().by_alloc.get(&(self.id, ptr)) {
            if e.pool != pool {
                return Err(Fail::invalid_value(format!("{ptr:#x} is exported already, by another kind of handle")));
            }
            return Ok(e.secret);
        }
        let secret = random_secret()?;
        let e = Arc::new(Export {
            tenant: self.tenant().to_string(),
            session: self.id,
            ptr,
            size,
            device,
            secret,
            live: AtomicBool::new(true),
            pool,
        });
        let mut t = table();
        t.by_secret.insert(secret, e.clone());
        t.by_alloc.insert((self.id, ptr), e);
        Ok(secret)
    }

    /// (base, size) of the allocation `secret` names, now in this session's view.
    pub(super) fn ipc_open(&mut self, secret: [u8; 16]) -> Result<(u64, u64)> {
        let found = table().by_secret.get(&secret).cloned();
        let e = match found {
            Some(e) if e.tenant == self.tenant() => e,
            Some(e) => {
                tracing::warn!(
                    session = self.id, tenant = %self.tenant(), owner = %e.tenant,
                    "cuIpcOpenMemHandle refused: the handle names memory of another tenant"
                );
                return Err(Fail::new(INVALID_HANDLE, "no IPC memory handle of this tenant matches"));
            }
            None => return Err(Fail::new(INVALID_HANDLE, "no live IPC memory handle matches (freed, or never made)")),
        };
        if e.pool.is_some() {
            return Err(Fail::new(INVALID_HANDLE, "the secret names a pointer of an exported pool, not an IPC handle"));
        }
        self.open_export(e)
    }

    /// Adds the allocation of export `e` to this session's view (once more).
    fn open_export(&mut self, e: Arc<Export>) -> Result<(u64, u64)> {
        if e.session == self.id {
            return Err(Fail::new(INVALID_CONTEXT, "cuIpcOpenMemHandle: a process cannot open its own IPC handle"));
        }
        // Copies and memsets of the opener run in the tenant's context of the device.
        self.enter(e.device)?;
        let entry = self.ipc.open.entry(e.ptr).or_insert_with(|| (e.clone(), 0));
        if !Arc::ptr_eq(&entry.0, &e) {
            // A dead export of memory since freed and reallocated at the same address.
            *entry = (e.clone(), 0);
        }
        entry.1 += 1;
        Ok((e.ptr, e.size))
    }

    pub(super) fn ipc_close(&mut self, ptr: u64) -> Result<()> {
        let Some(entry) = self.ipc.open.get_mut(&ptr) else {
            return Err(Fail::invalid_value(format!(
                "cuIpcCloseMemHandle: {ptr:#x} was not opened from an IPC handle"
            )));
        };
        entry.1 -= 1;
        if entry.1 == 0 {
            self.ipc.open.remove(&ptr);
        }
        Ok(())
    }

    /// A client exports each pool once; the bound keeps a client that asks in a loop from
    /// growing the table without end while its session lives.
    pub(super) fn pool_export(&mut self) -> Result<[u8; 16]> {
        let secret = random_secret()?;
        let mut t = table();
        if t.pools.values().filter(|p| p.session == self.id).count() >= MAX_POOL_EXPORTS {
            return Err(Fail::new(
                OUT_OF_MEMORY,
                format!("cuMemPoolExportToShareableHandle: this process has {MAX_POOL_EXPORTS} exported pools"),
            ));
        }
        t.pools.insert(secret, PoolExport { tenant: self.tenant().to_string(), session: self.id });
        Ok(secret)
    }

    pub(super) fn pool_export_pointer(&mut self, pool: [u8; 16], ptr: u64) -> Result<[u8; 16]> {
        if table().pools.get(&pool).is_none_or(|p| p.session != self.id) {
            return Err(Fail::invalid_value("cuMemPoolExportPointer: not a pool this session exported"));
        }
        let Some(a) = self.allocs.get(&ptr) else {
            return Err(Fail::invalid_value(format!(
                "cuMemPoolExportPointer: {ptr:#x} is not the base of an allocation of this session"
            )));
        };
        let (size, device) = (a.size, a.device);
        self.export_alloc(ptr, size, device, Some(pool))
    }

    pub(super) fn pool_import(&mut self, pool: [u8; 16]) -> Result<()> {
        let t = table();
        match t.pools.get(&pool) {
            Some(p) if p.tenant != self.tenant() => {
                tracing::warn!(
                    session = self.id, tenant = %self.tenant(), owner = %p.tenant,
                    "cuMemPoolImportFromShareableHandle refused: the handle names a pool of another tenant"
                );
                Err(Fail::invalid_value("no exported memory pool of this tenant matches"))
            }
            Some(p) if p.session == self.id => {
                Err(Fail::invalid_value("a process imports pools of other processes, not its own"))
            }
            Some(_) => {
                drop(t);
                self.ipc.pools.insert(pool);
                Ok(())
            }
            None => Err(Fail::invalid_value("no live exported memory pool matches (destroyed, or never made)")),
        }
    }

    pub(super) fn pool_import_pointer(&mut self, pool: [u8; 16], secret: [u8; 16]) -> Result<(u64, u64)> {
        if !self.ipc.pools.contains(&pool) {
            return Err(Fail::invalid_value("cuMemPoolImportPointer: not a pool this session imported"));
        }
        let found = table().by_secret.get(&secret).cloned();
        let e = match found {
            Some(e) if e.tenant != self.tenant() => {
                tracing::warn!(
                    session = self.id, tenant = %self.tenant(), owner = %e.tenant,
                    "cuMemPoolImportPointer refused: the export data names memory of another tenant"
                );
                return Err(Fail::invalid_value("no exported pointer of this tenant matches"));
            }
            Some(e) if e.pool != Some(pool) => {
                return Err(Fail::invalid_value("cuMemPoolImportPointer: the pointer was not exported from this pool"));
            }
            Some(e) => e,
            None => return Err(Fail::invalid_value("no live exported pointer matches (freed, or never made)")),
        };
        self.open_export(e)
    }

    pub(super) fn pool_revoke_pointer(&mut self, ptr: u64) -> Result<()> {
        let mut t = table();
        match t.by_alloc.get(&(self.id, ptr)).cloned() {
            Some(e) if e.pool.is_some() => {
                revoke_export(&e, &mut t);
                Ok(())
            }
            _ => Err(Fail::invalid_value(format!("{ptr:#x} is no pointer this session exported from a pool"))),
        }
    }

    pub(super) fn pool_unexport(&mut self, pool: [u8; 16]) -> Result<()> {
        let mut t = table();
        if t.pools.get(&pool).is_none_or(|p| p.session != self.id) {
            return Err(Fail::invalid_value("not a pool this session exported"));
        }
        t.pools.remove(&pool);
        Ok(())
    }
}
