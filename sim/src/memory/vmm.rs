//! Virtual memory management: physical allocations (`cuMemCreate`), address ranges
//! reserved in a context's window (`cuMemAddressReserve`), and mappings of the one into
//! the other (`cuMemMap`, `cuMemSetAccess`, `cuMemUnmap`).
//!
//! Physical memory is a memfd, so it can be exported as a POSIX file descriptor and
//! imported by another process, sharing the bytes. A reservation owns a host view of
//! its own size (`PROT_NONE`); mapping a handle maps its memfd into the view at the same
//! offset, so adjacent mappings are adjacent bytes, as on a GPU. Each maximal run of
//! mapped segments that the owning device may read and write is published as an
//! [`Allocation`] of the address space, so copies, memsets and kernels reach VMM memory
//! exactly as `cuMemAlloc`'d memory; memory mapped but not (yet) made accessible is in
//! no run, so touching it fails or faults as on the hardware.

use super::{AddressSpace, Allocation, Backing, Mapping, SpaceState, WINDOWS, give_back, window_owner};
use crate::device::Device;
use crate::error::{CuResult, fail};
use gpupool_shim::cuda::{CUmemAccess_flags, CUresult};
use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Minimum and recommended granularity of sizes, offsets and addresses (2 MiB, as on
/// NVIDIA GPUs).
pub const GRANULARITY: u64 = 2 << 20;

/// Allocation handles live in a range of their own, apart from every other kind of
/// handle, and are never reused.
const HANDLE_BASE: u64 = 0x7d00_0000_0000;

/// memfd names start with this, then the device ordinal: an imported descriptor that
/// does not carry it was not exported by a simulator.
const MEMFD_PREFIX: &str = "gpupool-sim-vmm-dev";

/// Physical memory on a device.
pub struct Physical {
    pub handle: u64,
    pub size: u64,
    pub device: Arc<Device>,
    /// `CUmemAllocationHandleType` bits the handle may be exported as.
    pub handle_types: u32,
    fd: OwnedFd,
    /// What the device's accounting was charged (0 for an import: the exporter pays).
    charged: u64,
}

impl Drop for Physical {
    fn drop(&mut self) {
        self.device.release(self.charged);
    }
}

/// Live handles and how many references (`cuMemCreate`, `cuMemRetainAllocationHandle`,
/// `cuMemImportFromShareableHandle`) each still has. A mapping holds its `Physical`
/// without being counted here: the memory outlives the last `cuMemRelease` while mapped.
static HANDLES: Mutex<BTreeMap<u64, (Arc<Physical>, u64)>> = Mutex::new(BTreeMap::new());
static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);

fn handles() -> std::sync::MutexGuard<'static, BTreeMap<u64, (Arc<Physical>, u64)>> {
    HANDLES.lock().unwrap_or_else(|e| e.into_inner())
}

fn register(make: impl FnOnce(u64) -> Physical) -> u64 {
    let handle = HANDLE_BASE + NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
    handles().insert(handle, (Arc::new(make(handle)), 1));
    handle
}

/// `cuMemCreate`: `size` bytes on `device`, charged to it exactly.
pub fn create(device: Arc<Device>, size: u64, handle_types: u32) -> CuResult<u64> {
    if size == 0 || !size.is_multiple_of(GRANULARITY) {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("cuMemCreate: size {size} is not a non-zero multiple of the granularity {GRANULARITY}")
        });
    }
    let name = std::ffi::CString::new(format!("{MEMFD_PREFIX}{}", device.ordinal)).unwrap_or_default();
    // SAFETY: a NUL-terminated name; the kernel returns a new descriptor or -1.
    let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || {
            format!("cuMemCreate: memfd_create: {}", std::io::Error::last_os_error())
        });
    }
    // SAFETY: `raw` is a descriptor we just created and own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: sizing our own memfd; sparse, so nothing is allocated until touched.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } != 0 {
        return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || format!("cuMemCreate: cannot size a memfd to {size}"));
    }
    device.reserve(size)?;
    Ok(register(|handle| Physical { handle, size, device, handle_types, fd, charged: size }))
}

/// The physical memory behind a live handle.
pub fn get(handle: u64) -> CuResult<Arc<Physical>> {
    match handles().get(&handle) {
        Some((p, _)) => Ok(p.clone()),
        None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{handle:#x} is not a live allocation handle")),
    }
}

/// `cuMemRelease`: drops one reference; the memory goes with the last reference and
/// the last mapping.
pub fn release(handle: u64) -> CuResult<()> {
    let mut h = handles();
    let Some((_, refs)) = h.get_mut(&handle) else {
        drop(h);
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("cuMemRelease: {handle:#x} is not a live handle"));
    };
    *refs -= 1;
    if *refs == 0 {
        let gone = h.remove(&handle);
        drop(h);
        drop(gone);
    }
    Ok(())
}

/// `cuMemRetainAllocationHandle`: one more reference to mapped memory's handle, which
/// is live again if every earlier reference was released.
pub fn retain(phys: &Arc<Physical>) -> u64 {
    let mut h = handles();
    h.entry(phys.handle).and_modify(|(_, refs)| *refs += 1).or_insert_with(|| (phys.clone(), 1));
    phys.handle
}

/// `cuMemExportToShareableHandle` as a POSIX file descriptor the caller owns.
pub fn export_fd(handle: u64) -> CuResult<RawFd> {
    let phys = get(handle)?;
    let posix = gpupool_shim::cuda::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0;
    if phys.handle_types & posix == 0 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("{handle:#x} was not created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR")
        });
    }
    match phys.fd.as_fd().try_clone_to_owned() {
        Ok(fd) => Ok(std::os::fd::IntoRawFd::into_raw_fd(fd)),
        Err(e) => fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || format!("cannot duplicate the memfd: {e}")),
    }
}

/// `cuMemImportFromShareableHandle` of a descriptor exported by a simulator (this
/// process's or another's): a new handle sharing the bytes. The exporter's device
/// was charged; the import is not charged again.
pub fn import_fd(fd: RawFd, devices: &[Arc<Device>]) -> CuResult<u64> {
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).map(|p| p.to_string_lossy().into_owned());
    let ordinal = link
        .as_deref()
        .ok()
        .and_then(|l| l.strip_prefix("/memfd:")?.strip_prefix(MEMFD_PREFIX)?.split(' ').next()?.parse::<usize>().ok());
    let Some(device) = ordinal.and_then(|o| devices.get(o)) else {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("descriptor {fd} ({link:?}) is not an exported allocation of this simulator")
        });
    };
    // SAFETY: `fd` is the caller's open descriptor (read_link above found it); we only
    // borrow it to duplicate it.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let owned = match borrowed.try_clone_to_owned() {
        Ok(o) => o,
        Err(e) => return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || format!("cannot duplicate descriptor {fd}: {e}")),
    };
    let size = match std::fs::File::from(owned.try_clone().map_err(|_| CUresult::CUDA_ERROR_OUT_OF_MEMORY)?).metadata()
    {
        Ok(m) if m.len() > 0 && m.len().is_multiple_of(GRANULARITY) => m.len(),
        _ => return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("descriptor {fd} has no valid size")),
    };
    let posix = gpupool_shim::cuda::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0;
    let device = device.clone();
    Ok(register(|handle| Physical { handle, size, device, handle_types: posix, fd: owned, charged: 0 }))
}

/// A mapped piece of a reservation.
struct Segment {
    size: u64,
    phys: Arc<Physical>,
    /// Offset of the segment's first byte in `phys`.
    offset: u64,
    /// The `cuMemMap` call it came from: `cuMemUnmap` takes whole mappings only, even
    /// after `cuMemSetAccess` of a sub-range split one.
    map_id: u64,
    /// Access flags per device ordinal (absent: none).
    access: HashMap<i32, u32>,
}

/// An address range reserved with `cuMemAddressReserve`.
pub(super) struct Reservation {
    size: u64,
    /// Host view of the range: `PROT_NONE` where nothing is mapped.
    view: Arc<Mapping>,
    /// Mapped segments: address -> segment.
    segments: BTreeMap<u64, Segment>,
}

static NEXT_MAP: AtomicU64 = AtomicU64::new(1);

fn invalid<T>(why: impl FnOnce() -> String) -> CuResult<T> {
    fail(CUresult::CUDA_ERROR_INVALID_VALUE, why)
}

fn aligned(v: u64) -> bool {
    v.is_multiple_of(GRANULARITY)
}

/// The reservation holding all of `[ptr, ptr + size)`.
fn reservation_of(st: &mut SpaceState, ptr: u64, size: u64) -> Option<(u64, &mut Reservation)> {
    let (&base, r) = st.reserved.range_mut(..=ptr).next_back()?;
    (ptr.checked_add(size)? <= base + r.size).then_some((base, r))
}

impl AddressSpace {
    /// `cuMemAddressReserve`: `size` bytes aligned to `align`, at `hint` if it is free.
    pub fn reserve_range(&self, size: u64, align: u64, hint: u64) -> CuResult<u64> {
        if size == 0 || !aligned(size) {
            return invalid(|| format!("reserve: size {size} is not a non-zero multiple of {GRANULARITY}"));
        }
        if align != 0 && !align.is_power_of_two() {
            return invalid(|| format!("reserve: alignment {align} is not a power of two"));
        }
        let align = align.max(GRANULARITY);
        let Some(view) = Mapping::new(size as usize, false) else {
            return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || format!("cannot reserve a {size}-byte host view"));
        };
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let fits =
            |start: u64, len: u64, at: u64| at >= start && at.checked_add(size).is_some_and(|e| e <= start + len);
        // A hint outside the window (as NVIDIA's unified address space allows any free range):
        // the range joins this space if nothing else of the process holds it.
        if hint != 0
            && hint.is_multiple_of(align)
            && !self.in_window(hint, size)
            && window_owner(hint).is_none()
            && let Some(m) = Mapping::fixed(hint, size as usize)
        {
            WINDOWS.write().unwrap_or_else(|e| e.into_inner()).insert(hint, (size, self.ctx_id()));
            st.extra.push(m);
            give_back(&mut st, hint, size);
        }
        let at_hint = (hint != 0 && hint.is_multiple_of(align))
            .then(|| st.free.range(..=hint).next_back().filter(|(s, l)| fits(**s, **l, hint)).map(|_| hint))
            .flatten();
        let chosen = at_hint.or_else(|| {
            st.free
                .iter()
                .map(|(&s, &l)| (s, l, s.next_multiple_of(align)))
                .find(|&(s, l, a)| fits(s, l, a))
                .map(|t| t.2)
        });
        let Some(addr) = chosen else {
            return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || format!("no {size} bytes of address space left"));
        };
        let (&start, &len) = st.free.range(..=addr).next_back().expect("the chosen range is free");
        st.free.remove(&start);
        if addr > start {
            st.free.insert(start, addr - start);
        }
        if start + len > addr + size {
            st.free.insert(addr + size, start + len - addr - size);
        }
        st.reserved.insert(addr, Reservation { size, view: Arc::new(view), segments: BTreeMap::new() });
        Ok(addr)
    }

    /// `cuMemAddressFree`: the whole reservation, with nothing mapped in it.
    pub fn free_range(&self, ptr: u64, size: u64) -> CuResult<()> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match st.reserved.get(&ptr) {
            Some(r) if r.size != size => {
                let have = r.size;
                invalid(|| format!("cuMemAddressFree: {ptr:#x} was reserved with {have} bytes, not {size}"))
            }
            Some(r) if !r.segments.is_empty() => {
                invalid(|| format!("cuMemAddressFree: [{ptr:#x}, +{size}) still has mappings (cuMemUnmap them)"))
            }
            Some(_) => {
                st.reserved.remove(&ptr);
                give_back(&mut st, ptr, size);
                Ok(())
            }
            None => invalid(|| format!("cuMemAddressFree: {ptr:#x} is not the start of a reserved range")),
        }
    }

    /// `cuMemMap`: `size` bytes of `phys` from `offset` at `ptr`, with no access yet.
    pub fn map_range(&self, ptr: u64, size: u64, offset: u64, phys: Arc<Physical>) -> CuResult<()> {
        if size == 0 || !aligned(ptr) || !aligned(size) || !aligned(offset) {
            return invalid(|| {
                format!("cuMemMap: ptr {ptr:#x}, size {size}, offset {offset} not multiples of {GRANULARITY}")
            });
        }
        if offset.checked_add(size).is_none_or(|e| e > phys.size) {
            return invalid(|| format!("cuMemMap: [{offset}, +{size}) runs past the {}-byte allocation", phys.size));
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some((base, r)) = reservation_of(&mut st, ptr, size) else {
            return invalid(|| format!("cuMemMap: [{ptr:#x}, +{size}) is not inside one reserved range"));
        };
        let overlaps = r.segments.range(..ptr + size).next_back().is_some_and(|(a, s)| a + s.size > ptr);
        if overlaps {
            return invalid(|| format!("cuMemMap: [{ptr:#x}, +{size}) overlaps an existing mapping"));
        }
        let at = r.view.addr() + (ptr - base);
        // SAFETY: replaces pages of our own PROT_NONE view (inside it: the range is within
        // the reservation) with the memfd's pages; nothing else refers to those pages.
        let p = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                phys.fd.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || {
                format!("cuMemMap: mmap: {}", std::io::Error::last_os_error())
            });
        }
        let map_id = NEXT_MAP.fetch_add(1, Ordering::Relaxed);
        r.segments.insert(ptr, Segment { size, phys, offset, map_id, access: HashMap::new() });
        Ok(())
    }

    /// `cuMemUnmap`: whole mappings covering exactly `[ptr, ptr + size)`.
    pub fn unmap_range(&self, ptr: u64, size: u64) -> CuResult<()> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some((base, r)) = reservation_of(&mut st, ptr, size) else {
            return invalid(|| format!("cuMemUnmap: [{ptr:#x}, +{size}) is not inside one reserved range"));
        };
        let end = ptr.saturating_add(size);
        let inside: Vec<u64> = r.segments.range(ptr..end).map(|(a, _)| *a).collect();
        let mut at = ptr;
        for a in &inside {
            let s = &r.segments[a];
            if *a != at || a + s.size > end {
                return invalid(|| format!("cuMemUnmap: [{ptr:#x}, +{size}) is not exactly a run of mappings"));
            }
            at += s.size;
        }
        let ids: std::collections::HashSet<u64> = inside.iter().map(|a| r.segments[a].map_id).collect();
        let split = r.segments.iter().any(|(a, s)| ids.contains(&s.map_id) && (*a < ptr || *a >= end));
        if inside.is_empty() || at != end || split {
            return invalid(|| format!("cuMemUnmap: [{ptr:#x}, +{size}) is not whole mappings"));
        }
        let at = r.view.addr() + (ptr - base);
        // SAFETY: puts our own view's pages in the range back to an inaccessible
        // reservation; the segments removed below were the only users.
        let p = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                size as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || {
                format!("cuMemUnmap: {}", std::io::Error::last_os_error())
            });
        }
        let gone: Vec<Segment> = inside.iter().filter_map(|a| r.segments.remove(a)).collect();
        self.republish(&mut st, base);
        drop(st);
        drop(gone);
        Ok(())
    }

    /// `cuMemSetAccess`: `access` (device ordinal, flags) over mapped `[ptr, ptr + size)`.
    pub fn set_access(&self, ptr: u64, size: u64, access: &[(i32, u32)]) -> CuResult<()> {
        if size == 0 || !aligned(ptr) || !aligned(size) {
            return invalid(|| format!("cuMemSetAccess: ptr {ptr:#x}, size {size} not multiples of {GRANULARITY}"));
        }
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some((base, r)) = reservation_of(&mut st, ptr, size) else {
            return invalid(|| format!("cuMemSetAccess: [{ptr:#x}, +{size}) is not inside one reserved range"));
        };
        let end = ptr + size;
        // Split the segments straddling either end, so flags apply to whole segments.
        for cut in [ptr, end] {
            let Some((&a, s)) = r.segments.range(..cut).next_back() else { continue };
            if a + s.size > cut {
                let mut s = r.segments.remove(&a).expect("found above");
                let tail = Segment {
                    size: a + s.size - cut,
                    phys: s.phys.clone(),
                    offset: s.offset + (cut - a),
                    map_id: s.map_id,
                    access: s.access.clone(),
                };
                s.size = cut - a;
                r.segments.insert(a, s);
                r.segments.insert(cut, tail);
            }
        }
        let mut at = ptr;
        for (a, s) in r.segments.range(ptr..end) {
            if *a != at {
                break;
            }
            at += s.size;
        }
        if at != end {
            return invalid(|| format!("cuMemSetAccess: [{ptr:#x}, +{size}) is not entirely mapped"));
        }
        for (_, s) in r.segments.range_mut(ptr..end) {
            for &(dev, flags) in access {
                s.access.insert(dev, flags);
            }
        }
        self.republish(&mut st, base);
        Ok(())
    }

    /// `cuMemGetAccess`: the flags device `dev` has at mapped `ptr`.
    pub fn get_access(&self, ptr: u64, dev: i32) -> CuResult<u32> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some((_, r)) = reservation_of(&mut st, ptr, 1) else {
            return invalid(|| format!("cuMemGetAccess: {ptr:#x} is not in a reserved range"));
        };
        match r.segments.range(..=ptr).next_back() {
            Some((a, s)) if ptr < a + s.size => Ok(s.access.get(&dev).copied().unwrap_or(0)),
            _ => invalid(|| format!("cuMemGetAccess: {ptr:#x} is not mapped")),
        }
    }

    /// The physical memory mapped at `ptr` (`cuMemRetainAllocationHandle`).
    pub fn mapped_at(&self, ptr: u64) -> CuResult<Arc<Physical>> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let found = reservation_of(&mut st, ptr, 1).and_then(|(_, r)| {
            let (a, s) = r.segments.range(..=ptr).next_back()?;
            (ptr < a + s.size).then(|| s.phys.clone())
        });
        match found {
            Some(p) => Ok(p),
            None => invalid(|| format!("{ptr:#x} is not mapped VMM memory")),
        }
    }

    /// Replaces the published runs of the reservation at `base` with its current
    /// maximal runs of segments the owning device may read and write.
    fn republish(&self, st: &mut SpaceState, base: u64) {
        let Some(r) = st.reserved.get(&base) else { return };
        let end = base + r.size;
        let rw = CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE.0;
        let dev = self.device.ordinal;
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for (&a, s) in &r.segments {
            if s.access.get(&dev) != Some(&rw) {
                continue;
            }
            match runs.last_mut() {
                Some((start, len)) if *start + *len == a => *len += s.size,
                _ => runs.push((a, s.size)),
            }
        }
        let view = r.view.clone();
        let old: Vec<u64> = st.live.range(base..end).map(|(a, _)| *a).collect();
        for a in old {
            st.live.remove(&a);
        }
        let ctx_id = self.ctx_id();
        for (a, len) in runs {
            let backing = Backing::View { view: view.clone(), offset: a - base };
            st.live.insert(a, Arc::new(Allocation { base: a, size: len, ctx_id, charged: 0, backing }));
        }
    }
}
