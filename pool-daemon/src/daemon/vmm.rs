//! Virtual memory management through the pool: address ranges reserved in the tenant's
//! context (`cuMemAddressReserve`), physical allocations (`cuMemCreate`), mappings of the one
//! into the other (`cuMemMap`, `cuMemSetAccess`, `cuMemUnmap`), and POSIX-descriptor sharing
//! between sessions of one tenant. The backend driver does the work and checks its own rules
//! (granularity, overlaps, whole mappings); the daemon checks ownership and keeps the books.
//!
//! - **Ownership.** Every reservation, handle reference and mapping belongs to one session
//!   ([`Owned`]). A handle id is unique in the daemon ([`Registry`]), so a handle or an address
//!   of another session is simply not in this session's tables: CUDA_ERROR_INVALID_VALUE, the
//!   code the driver gives an unknown handle or an unmapped address, and a log line.
//! - **Memory.** Physical memory is counted in the tenant's ledger at `cuMemCreate`, exactly,
//!   before the backend allocates (past the quota: CUDA_ERROR_OUT_OF_MEMORY, as `cuMemAlloc`).
//!   The daemon keeps its own reference count of each allocation ([`Physical`]): one per handle
//!   reference and one per mapping, over all sessions. The backend holds one handle reference of
//!   its own until that count reaches zero, then releases it; the backend frees the memory then
//!   (no mapping is left), and so does the ledger. The session that paid is charged until it
//!   lets go; if another session still holds the memory, the charge moves to it
//!   ([`gpupool_quota::Ledger::transfer`]), so the tenant's use stays exact and each session's
//!   end returns its own books to zero.
//! - **Address space.** Reserved ranges are not memory, but they take the daemon's address
//!   window (on hardware one process-wide virtual address space for every tenant; on the
//!   simulator the tenant context's window, twice the device's memory). A session may hold at
//!   most [`RESERVE_FACTOR`] times the memory it sees on a device (its quota, or the device),
//!   in at most [`MAX_RESERVATIONS`] ranges; past that, CUDA_ERROR_OUT_OF_MEMORY.
//! - **Accessible runs.** Each maximal run of adjacent mappings the reservation's device may
//!   read and write counts as the session's memory for every pointer check
//!   ([`Session::owned`]): copies, memsets, BLAS operands. Mapped memory without access is not.
//! - **Sharing.** An export answers 128 random bits bound to the allocation and its tenant;
//!   the interposer hands the program a sealed memfd holding them. An import of those bits by a
//!   session of the same tenant gets a new reference; any other tenant gets
//!   CUDA_ERROR_INVALID_VALUE (NVIDIA documents CUDA_ERROR_NOT_PERMITTED only for fabric
//!   handles; a descriptor that names nothing importable is INVALID_VALUE) and a log line. An
//!   export stays valid while the allocation lives (some session holds a reference or a
//!   mapping), not while the descriptor is open: unlike a real driver's descriptor, ours holds
//!   no reference.
//! - **Lifetime.** VMM objects belong to the session, not to a client context (reservations
//!   and handles outlive `cuCtxDestroy` through the pool); everything is unmapped, released and
//!   freed when the session ends, however it ends ([`Session::free_vmm`]).

use super::dispatch::{Fail, OUT_OF_MEMORY, Result};
use super::session::Session;
use crate::call;
use gpupool_protocol::DevicePtr;
use gpupool_protocol::ops::{MemAccess, MemHandleId, MemRun, answer};
use gpupool_quota::{SessionId, TenantId};
use gpupool_shim::cuda::{
    CUmemAccess_flags, CUmemAccessDesc, CUmemAllocationHandleType, CUmemAllocationProp, CUmemAllocationType,
    CUmemGenericAllocationHandle, CUmemLocation, CUmemLocationType,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// How much address space a session may reserve per device, as a multiple of the memory it
/// sees there. PyTorch's expandable segments reserve 1.125 times the device's memory per
/// stream and pool (large and small), so 8 leaves room for three allocating streams; on
/// hardware a 49-bit GPU address space (512 TiB) then holds 800 sessions of 80 GiB each.
pub const RESERVE_FACTOR: u64 = 8;
/// Ranges a session may hold reserved at once (each is a mapping in the daemon's process on
/// the simulator, and the kernel bounds those).
pub const MAX_RESERVATIONS: usize = 1024;

const POSIX_FD: u32 = CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0;
const READWRITE: u32 = CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE.0;

/// The daemon-wide side: handle ids and the live exports.
#[derive(Default)]
pub struct Registry {
    next_id: AtomicU64,
    exports: Mutex<HashMap<[u8; 16], Weak<Physical>>>,
}

impl Registry {
    fn exports(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 16], Weak<Physical>>> {
        self.exports.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Who holds a physical allocation: references plus mappings, per session, and the session
/// its bytes are charged to (`None` once the charge was given back early, see
/// [`Session::let_go`]).
struct Holds {
    by_session: HashMap<SessionId, u64>,
    payer: Option<SessionId>,
}

/// One physical allocation of the backend, shared by the sessions that hold it.
pub struct Physical {
    pub id: MemHandleId,
    backend: CUmemGenericAllocationHandle,
    pub size: u64,
    pub device: u32,
    /// The `CUmemAllocationHandleType` bits the program asked to export it as.
    pub handle_types: u32,
    pub tenant: TenantId,
    secret: OnceLock<[u8; 16]>,
    holds: Mutex<Holds>,
}

impl Physical {
    fn holds(&self) -> std::sync::MutexGuard<'_, Holds> {
        self.holds.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A reserved address range.
struct Reserved {
    size: u64,
    device: u32,
}

/// A mapped piece of a reservation (a `cuMemMap`, split where `cuMemSetAccess` covered part).
struct Segment {
    size: u64,
    phys: Arc<Physical>,
    /// The `cuMemMap` it came from (unmapping lets go of the allocation once per mapping).
    map_id: u64,
    /// Access flags per device ordinal.
    access: BTreeMap<u32, u32>,
}

/// What one session holds.
#[derive(Default)]
pub struct Owned {
    reserved: BTreeMap<u64, Reserved>,
    /// Handle id -> the allocation and this session's references to it.
    handles: HashMap<MemHandleId, (Arc<Physical>, u64)>,
    segments: BTreeMap<u64, Segment>,
    /// The accessible runs: base -> (size, device).
    runs: BTreeMap<u64, (u64, u32)>,
    next_map: u64,
}

impl Owned {
    /// The reservation holding all of `[ptr, ptr + size)`: (base, size, device).
    fn reservation(&self, ptr: u64, size: u64) -> Result<(u64, u64, u32)> {
        let hit = self
            .reserved
            .range(..=ptr)
            .next_back()
            .filter(|(b, r)| ptr.checked_add(size.max(1)).is_some_and(|end| end <= **b + r.size));
        match hit {
            Some((&b, r)) => Ok((b, r.size, r.device)),
            None => Err(Fail::invalid_value(format!(
                "[{ptr:#x}, +{size}) is not inside an address range this session reserved"
            ))),
        }
    }

    fn handle(&self, h: MemHandleId) -> Result<Arc<Physical>> {
        match self.handles.get(&h) {
            Some((p, _)) => Ok(p.clone()),
            None => Err(Fail::invalid_value(format!("allocation handle {:#x} is not one this session holds", h.0))),
        }
    }

    /// The accessible run holding all of `[p, p + len)`: its device.
    pub fn run_of(&self, p: u64, len: u64) -> Option<u32> {
        let (&base, &(size, device)) = self.runs.range(..=p).next_back()?;
        let inside = p.checked_add(len).is_some_and(|end| end <= base + size) && p < base + size;
        inside.then_some(device)
    }

    /// The accessible run holding `p`: (base, size).
    pub fn run_at(&self, p: u64) -> Option<(u64, u64)> {
        let (&base, &(size, _)) = self.runs.range(..=p).next_back()?;
        (p < base + size).then_some((base, size))
    }

    /// Recomputes the accessible runs of the reservation at `base`, and lists them.
    fn republish(&mut self, base: u64) -> answer::MemRuns {
        let Some(r) = self.reserved.get(&base) else {
            return answer::MemRuns { base: DevicePtr(base), size: 0, runs: Vec::new() };
        };
        let (end, device) = (base + r.size, r.device);
        let stale: Vec<u64> = self.runs.range(base..end).map(|(a, _)| *a).collect();
        for a in stale {
            self.runs.remove(&a);
        }
        let mut runs: Vec<MemRun> = Vec::new();
        for (&a, s) in self.segments.range(base..end) {
            if s.access.get(&device) != Some(&READWRITE) {
                continue;
            }
            match runs.last_mut() {
                Some(last) if last.base.0 + last.size == a => last.size += s.size,
                _ => runs.push(MemRun { base: DevicePtr(a), size: s.size }),
            }
        }
        for run in &runs {
            self.runs.insert(run.base.0, (run.size, device));
        }
        answer::MemRuns { base: DevicePtr(base), size: r.size, runs }
    }

    /// Splits the segment straddling `cut`, so that flags can apply to whole segments.
    fn split_at(&mut self, cut: u64) {
        let Some((&a, s)) = self.segments.range(..cut).next_back() else { return };
        if a + s.size <= cut {
            return;
        }
        let s = self.segments.get_mut(&a).expect("found above");
        let tail = Segment { size: a + s.size - cut, phys: s.phys.clone(), map_id: s.map_id, access: s.access.clone() };
        s.size = cut - a;
        self.segments.insert(cut, tail);
    }
}

/// 128 bits from the kernel's random source.
fn secret() -> Result<[u8; 16]> {
    use std::io::Read as _;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| Fail::new(OUT_OF_MEMORY, format!("no random bits for an export: {e}")))?;
    Ok(b)
}

impl Session {
    fn vmm_location(device: u32) -> CUmemLocation {
        CUmemLocation { type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: device as i32 }
    }

    /// One more hold on `phys` by this session (a reference or a mapping).
    fn hold(&self, phys: &Physical) {
        *phys.holds().by_session.entry(self.quota.id()).or_insert(0) += 1;
    }

    /// Drops `n` holds of this session on `phys`. Its last hold moves the charge to another
    /// holder; the last hold of all gives the backend's reference back (the backend frees the
    /// memory, nothing being mapped) and the bytes back to the ledger.
    fn let_go(&self, phys: &Arc<Physical>, n: u64) {
        let me = self.quota.id();
        let mut h = phys.holds();
        let Some(mine) = h.by_session.get_mut(&me) else {
            tracing::error!(session = self.id, handle = phys.id.0, "letting go of an allocation it does not hold");
            return;
        };
        *mine = mine.saturating_sub(n);
        if *mine > 0 {
            return;
        }
        h.by_session.remove(&me);
        let ledger = &self.shared.ledger;
        if h.payer == Some(me) {
            let others: Vec<SessionId> = h.by_session.keys().copied().collect();
            h.payer = others.into_iter().find(|&to| ledger.transfer(&self.quota, to, phys.device, phys.size).is_ok());
            if h.payer.is_none() {
                if let Err(e) = ledger.release(&self.quota, phys.device, phys.size) {
                    tracing::error!(session = self.id, "ledger out of step on an allocation's release: {e}");
                }
                if !h.by_session.is_empty() {
                    tracing::error!(session = self.id, handle = phys.id.0, "no holder could take the charge");
                }
            }
        }
        if h.by_session.is_empty() {
            if let Some(s) = phys.secret.get() {
                self.shared.vmm.exports().remove(s);
            }
            if let Err(e) = call!(self.shared.cuda, cuMemRelease(phys.backend)) {
                tracing::warn!(session = self.id, handle = phys.id.0, "releasing the backend's handle: {e}");
            }
        }
    }

    /// A new reference of this session to `phys`: its existing id, or a new entry.
    fn take_reference(&mut self, phys: Arc<Physical>) -> MemHandleId {
        self.hold(&phys);
        let id = phys.id;
        self.vmm.handles.entry(id).or_insert((phys, 0)).1 += 1;
        id
    }

    pub(super) fn vmm_reserve(
        &mut self,
        ctx: gpupool_protocol::CtxId,
        size: u64,
        align: u64,
        addr: u64,
    ) -> Result<u64> {
        let d = self.ctx_device(ctx)?;
        self.vmm_reserve_on(d, size, align, addr)
    }

    /// `cuMemAddressReserve` on device `d` (also graph memory's addresses, [`super::graph_mem`]).
    pub(super) fn vmm_reserve_on(&mut self, d: u32, size: u64, align: u64, addr: u64) -> Result<u64> {
        let dev_total = self.shared.devices[d as usize].total_memory;
        let seen = self.shared.ledger.mem_info(&self.quota, d, dev_total, dev_total).total;
        let held: u64 = self.vmm.reserved.values().filter(|r| r.device == d).map(|r| r.size).sum();
        let bound = seen.saturating_mul(RESERVE_FACTOR);
        if self.vmm.reserved.len() >= MAX_RESERVATIONS || held.saturating_add(size) > bound {
            return Err(Fail::new(
                OUT_OF_MEMORY,
                format!(
                    "cuMemAddressReserve of {size} bytes: the session holds {} ranges, {held} bytes reserved on device \
                     {d}; at most {MAX_RESERVATIONS} ranges and {RESERVE_FACTOR}x the {seen} bytes it sees",
                    self.vmm.reserved.len()
                ),
            ));
        }
        self.enter(d)?;
        let mut base = 0u64;
        call!(self.shared.cuda, cuMemAddressReserve(&mut base, size as usize, align as usize, addr, 0))?;
        self.vmm.reserved.insert(base, Reserved { size, device: d });
        Ok(base)
    }

    pub(super) fn vmm_address_free(&mut self, ptr: u64, size: u64) -> Result<()> {
        let Some(r) = self.vmm.reserved.get(&ptr) else {
            return Err(Fail::invalid_value(format!(
                "cuMemAddressFree: {ptr:#x} is not a range this session reserved"
            )));
        };
        let d = r.device;
        self.enter(d)?;
        call!(self.shared.cuda, cuMemAddressFree(ptr, size as usize))?;
        self.vmm.reserved.remove(&ptr);
        Ok(())
    }

    pub(super) fn vmm_create(&mut self, device: u32, size: u64, handle_types: u32) -> Result<MemHandleId> {
        self.check_device(device)?;
        if handle_types & !POSIX_FD != 0 {
            return Err(Fail::new(
                super::dispatch::NOT_SUPPORTED,
                format!("cuMemCreate: handle types {handle_types:#x}; only POSIX file descriptors are shared"),
            ));
        }
        self.enter(device)?;
        let ledger = &self.shared.ledger;
        let r = ledger.reserve(&self.quota, device, size).map_err(|e| Fail::new(OUT_OF_MEMORY, e.to_string()))?;
        // The daemon shares allocations itself: the backend is asked for no exportable type.
        let prop = CUmemAllocationProp {
            type_: CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            location: Self::vmm_location(device),
            ..Default::default()
        };
        let mut backend: CUmemGenericAllocationHandle = 0;
        let tenant = self.quota.tenant().clone();
        loop {
            let e = match call!(self.shared.cuda, cuMemCreate(&mut backend, size as usize, &prop, 0)) {
                Ok(()) => break,
                Err(e) => Fail::from(e),
            };
            // The device is full: lower priorities' memory may make room (issue 22).
            if e.code != OUT_OF_MEMORY || !super::evict::make_room(&self.shared, &tenant, device, self.current.0) {
                r.cancel();
                return Err(e);
            }
        }
        r.commit();
        let me = self.quota.id();
        let phys = Arc::new(Physical {
            id: MemHandleId(self.shared.vmm.next_id.fetch_add(1, Ordering::Relaxed) + 1),
            backend,
            size,
            device,
            handle_types,
            tenant: self.quota.tenant().clone(),
            secret: OnceLock::new(),
            holds: Mutex::new(Holds { by_session: HashMap::new(), payer: Some(me) }),
        });
        Ok(self.take_reference(phys))
    }

    pub(super) fn vmm_release(&mut self, handle: MemHandleId) -> Result<()> {
        let phys = self.vmm.handle(handle)?;
        let entry = self.vmm.handles.get_mut(&handle).expect("found above");
        entry.1 -= 1;
        if entry.1 == 0 {
            self.vmm.handles.remove(&handle);
        }
        self.let_go(&phys, 1);
        Ok(())
    }

    pub(super) fn vmm_map(&mut self, ptr: u64, size: u64, offset: u64, handle: MemHandleId) -> Result<answer::MemRuns> {
        let phys = self.vmm.handle(handle)?;
        let (base, _, d) = self.vmm.reservation(ptr, size)?;
        self.enter(d)?;
        call!(self.shared.cuda, cuMemMap(ptr, size as usize, offset as usize, phys.backend, 0))?;
        self.hold(&phys);
        self.vmm.next_map += 1;
        let map_id = self.vmm.next_map;
        self.vmm.segments.insert(ptr, Segment { size, phys, map_id, access: BTreeMap::new() });
        Ok(self.vmm.republish(base))
    }

    pub(super) fn vmm_unmap(&mut self, ptr: u64, size: u64) -> Result<answer::MemRuns> {
        let (base, _, d) = self.vmm.reservation(ptr, size)?;
        self.enter(d)?;
        // Queued work addresses the range by value: let it finish before the pages go.
        call!(self.shared.cuda, cuCtxSynchronize())?;
        call!(self.shared.cuda, cuMemUnmap(ptr, size as usize))?;
        // The backend unmapped whole mappings covering exactly the range.
        let gone: Vec<u64> = self.vmm.segments.range(ptr..ptr + size).map(|(a, _)| *a).collect();
        let mut mappings: HashMap<u64, Arc<Physical>> = HashMap::new();
        for a in gone {
            let s = self.vmm.segments.remove(&a).expect("listed");
            mappings.insert(s.map_id, s.phys);
        }
        for phys in mappings.values() {
            self.let_go(phys, 1);
        }
        Ok(self.vmm.republish(base))
    }

    pub(super) fn vmm_set_access(&mut self, ptr: u64, size: u64, access: &[MemAccess]) -> Result<answer::MemRuns> {
        let (base, _, d) = self.vmm.reservation(ptr, size)?;
        if access.is_empty() {
            return Err(Fail::invalid_value("cuMemSetAccess: no access descriptor"));
        }
        for a in access {
            self.check_device(a.device)?;
        }
        let descs: Vec<CUmemAccessDesc> = access
            .iter()
            .map(|a| CUmemAccessDesc { location: Self::vmm_location(a.device), flags: CUmemAccess_flags(a.flags) })
            .collect();
        self.enter(d)?;
        call!(self.shared.cuda, cuMemSetAccess(ptr, size as usize, descs.as_ptr(), descs.len()))?;
        let end = ptr + size;
        self.vmm.split_at(ptr);
        self.vmm.split_at(end);
        for s in self.vmm.segments.range_mut(ptr..end).map(|(_, s)| s) {
            for a in access {
                s.access.insert(a.device, a.flags);
            }
        }
        Ok(self.vmm.republish(base))
    }

    pub(super) fn vmm_get_access(&mut self, device: u32, ptr: u64) -> Result<u32> {
        self.check_device(device)?;
        let (_, _, d) = self.vmm.reservation(ptr, 1)?;
        self.enter(d)?;
        let mut flags = 0u64;
        call!(self.shared.cuda, cuMemGetAccess(&mut flags, &Self::vmm_location(device), ptr))?;
        Ok(flags as u32)
    }

    pub(super) fn vmm_properties(&self, handle: MemHandleId) -> Result<answer::MemProperties> {
        let p = self.vmm.handle(handle)?;
        Ok(answer::MemProperties { device: p.device, size: p.size, handle_types: p.handle_types })
    }

    pub(super) fn vmm_retain(&mut self, ptr: u64) -> Result<MemHandleId> {
        let found = self.vmm.segments.range(..=ptr).next_back().filter(|(a, s)| ptr < **a + s.size);
        let Some((_, s)) = found else {
            return Err(Fail::invalid_value(format!("cuMemRetainAllocationHandle: {ptr:#x} is not mapped here")));
        };
        let phys = s.phys.clone();
        Ok(self.take_reference(phys))
    }

    pub(super) fn vmm_export(&mut self, handle: MemHandleId, handle_type: u32) -> Result<[u8; 16]> {
        let phys = self.vmm.handle(handle)?;
        if handle_type != POSIX_FD || phys.handle_types & POSIX_FD == 0 {
            return Err(Fail::invalid_value(format!(
                "cuMemExportToShareableHandle: type {handle_type} of an allocation created for types {:#x} (POSIX file \
                 descriptors only, if requested at cuMemCreate)",
                phys.handle_types
            )));
        }
        if let Some(s) = phys.secret.get() {
            return Ok(*s);
        }
        let fresh = secret()?;
        let s = *phys.secret.get_or_init(|| fresh);
        self.shared.vmm.exports().insert(s, Arc::downgrade(&phys));
        Ok(s)
    }

    pub(super) fn vmm_import(&mut self, secret: [u8; 16]) -> Result<MemHandleId> {
        let found = self.shared.vmm.exports().get(&secret).and_then(Weak::upgrade);
        let Some(phys) = found else {
            return Err(Fail::invalid_value("cuMemImportFromShareableHandle: the descriptor names no live export"));
        };
        if &phys.tenant != self.quota.tenant() {
            return Err(Fail::invalid_value(format!(
                "cuMemImportFromShareableHandle: allocation {:#x} was exported by another tenant",
                phys.id.0
            )));
        }
        {
            // Alive while some session holds it; the hold is taken under the same lock.
            let mut h = phys.holds();
            if h.by_session.is_empty() {
                return Err(Fail::invalid_value("cuMemImportFromShareableHandle: the exported allocation was freed"));
            }
            *h.by_session.entry(self.quota.id()).or_insert(0) += 1;
        }
        let id = phys.id;
        self.vmm.handles.entry(id).or_insert((phys, 0)).1 += 1;
        Ok(id)
    }

    /// Unmaps, releases and frees everything VMM the session holds (its end). Returns
    /// (mappings, handle references, reservations) freed.
    pub fn free_vmm(&mut self) -> (usize, usize, usize) {
        let devices: BTreeSet<u32> = self.vmm.reserved.values().map(|r| r.device).collect();
        for d in devices {
            if self.enter(d).is_ok() {
                let _ = call!(self.shared.cuda, cuCtxSynchronize());
            }
        }
        // Whole mappings: (start, size, device, allocation) per map id.
        let mut mappings: BTreeMap<u64, (u64, u64, Arc<Physical>)> = BTreeMap::new();
        for (&a, s) in &self.vmm.segments {
            let m = mappings.entry(s.map_id).or_insert((a, 0, s.phys.clone()));
            m.0 = m.0.min(a);
            m.1 += s.size;
        }
        let n_maps = mappings.len();
        for (start, size, phys) in mappings.into_values() {
            let d = self.vmm.reservation(start, size).map(|r| r.2).unwrap_or(phys.device);
            if self.enter(d).is_ok()
                && let Err(e) = call!(self.shared.cuda, cuMemUnmap(start, size as usize))
            {
                tracing::warn!(session = self.id, "unmapping at session end: {e}");
            }
            self.let_go(&phys, 1);
        }
        self.vmm.segments.clear();
        self.vmm.runs.clear();
        let handles: Vec<(Arc<Physical>, u64)> = self.vmm.handles.drain().map(|(_, v)| v).collect();
        let n_refs = handles.iter().map(|(_, n)| *n as usize).sum();
        for (phys, n) in handles {
            self.let_go(&phys, n);
        }
        let reserved = std::mem::take(&mut self.vmm.reserved);
        let n_ranges = reserved.len();
        for (base, r) in reserved {
            if self.enter(r.device).is_ok()
                && let Err(e) = call!(self.shared.cuda, cuMemAddressFree(base, r.size as usize))
            {
                tracing::warn!(session = self.id, "freeing a reserved range at session end: {e}");
            }
        }
        (n_maps, n_refs, n_ranges)
    }
}
