//! Device memory: device-only address spaces, allocations and their backing store,
//! and page-locked host memory.
//!
//! Each context reserves its own window of virtual addresses with `PROT_NONE`, so a
//! device pointer is an address the host cannot dereference (touching one faults,
//! as on a GPU, instead of silently reading the backing store), and so any pointer
//! identifies the one context it belongs to. Allocations are carved from the window;
//! their bytes live in a separate anonymous mapping that only the simulator touches.

use crate::device::Device;
use crate::error::{CuResult, fail};
use gpupool_shim::cuda::CUresult;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

pub mod ipc;
pub mod vmm;

/// Allocation bases are aligned like `cuMemAlloc`'s (at least 256 bytes; we use 512).
pub const ALLOC_ALIGN: u64 = 512;
/// Unmapped guard between allocations, so a small overrun is caught, not absorbed by
/// the neighbour.
const GUARD: u64 = 4096;
/// `cuMemAllocPitch` pitch granularity.
pub const PITCH_ALIGN: u64 = 512;

/// An anonymous private mapping, unmapped on drop.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; concurrent access to its
// bytes is the caller's responsibility, exactly as device memory on a GPU.
unsafe impl Send for Mapping {}
// SAFETY: as above; the struct itself is immutable after creation.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// `accessible`: read-write backing store; otherwise a `PROT_NONE` reservation.
    pub(crate) fn new(len: usize, accessible: bool) -> Option<Mapping> {
        let len = len.max(1).next_multiple_of(page_size());
        let prot = if accessible { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_NONE };
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing;
        // MAP_NORESERVE so an 80 GiB device costs nothing until touched.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        (ptr != libc::MAP_FAILED).then_some(Mapping { ptr: ptr.cast(), len })
    }

    /// A `PROT_NONE` reservation of exactly `[addr, addr + len)`, or None if any of it is in
    /// use in this process (MAP_FIXED_NOREPLACE never replaces a mapping).
    pub(crate) fn fixed(addr: u64, len: usize) -> Option<Mapping> {
        if len == 0 || !len.is_multiple_of(page_size()) || !(addr as usize).is_multiple_of(page_size()) {
            return None;
        }
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE;
        // SAFETY: MAP_FIXED_NOREPLACE fails rather than touch an existing mapping, so no memory
        // of this process is affected; an old kernel that ignores the flag may place it
        // elsewhere, which the address check below refuses.
        let ptr = unsafe { libc::mmap(addr as *mut libc::c_void, len, libc::PROT_NONE, flags, -1, 0) };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        let m = Mapping { ptr: ptr.cast(), len };
        (m.addr() == addr).then_some(m)
    }

    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the region this value mapped.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

/// One device allocation. Holding an `Arc` keeps the bytes alive, so work queued on
/// a stream can finish even if the pointer is freed meanwhile.
pub struct Allocation {
    pub base: u64,
    pub size: u64,
    pub ctx_id: u64,
    /// What the device's accounting was charged for this allocation.
    pub charged: u64,
    backing: Backing,
}

/// Where an allocation's bytes are.
enum Backing {
    /// Its own mapping (`cuMemAlloc` and friends).
    Owned(Mapping),
    /// A run of mapped physical memory inside a reservation's host view (see [`vmm`]).
    View { view: Arc<Mapping>, offset: u64 },
}

impl Allocation {
    pub fn end(&self) -> u64 {
        self.base + self.size
    }

    /// Host pointer to the backing bytes of `[offset, offset + len)`.
    pub fn host_ptr(&self, offset: u64, len: u64) -> Option<*mut u8> {
        let (start, skip) = match &self.backing {
            Backing::Owned(m) => (m.as_ptr(), 0),
            Backing::View { view, offset } => (view.as_ptr(), *offset),
        };
        (offset.checked_add(len)? <= self.size).then(|| {
            // SAFETY: offset is within the allocation (checked just above), and the
            // allocation lies within its mapping (`skip + size <= mapping length`).
            unsafe { start.add((skip + offset) as usize) }
        })
    }

    /// Whether this is mapped VMM memory (`cuMemMap`), which `cuMemFree` must refuse.
    pub fn is_vmm(&self) -> bool {
        matches!(self.backing, Backing::View { .. })
    }
}

/// Which context's window an address falls in; `ctx_id` 0 means "not device memory".
static WINDOWS: RwLock<BTreeMap<u64, (u64, u64)>> = RwLock::new(BTreeMap::new());

/// The context whose device window contains `addr`, if any.
pub fn window_owner(addr: u64) -> Option<u64> {
    let w = WINDOWS.read().unwrap_or_else(|e| e.into_inner());
    let (&base, &(len, ctx)) = w.range(..=addr).next_back()?;
    (addr < base + len).then_some(ctx)
}

struct SpaceState {
    /// Free ranges of the window: start -> length.
    free: BTreeMap<u64, u64>,
    /// Live allocations: base -> allocation (mapped, accessible VMM runs included).
    live: BTreeMap<u64, Arc<Allocation>>,
    /// Address ranges reserved with `cuMemAddressReserve`: base -> reservation.
    reserved: BTreeMap<u64, vmm::Reservation>,
    /// Ranges outside the window that a reservation asked for by address (a restore puts
    /// memory back where a previous process had it): held until the space goes.
    extra: Vec<Mapping>,
}

/// A context's device address space.
pub struct AddressSpace {
    window: Mapping,
    owner: std::sync::OnceLock<u64>,
    device: Arc<Device>,
    state: Mutex<SpaceState>,
}

impl AddressSpace {
    pub fn new(device: Arc<Device>) -> CuResult<AddressSpace> {
        // Twice the capacity, so fragmentation and guards never make an allocation
        // fail that the accounting would allow.
        let len = device.total_memory().saturating_mul(2).max(1 << 30);
        let Some(window) = Mapping::new(len as usize, false) else {
            return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || format!("cannot reserve {len} bytes of address space"));
        };
        let base = window.addr().next_multiple_of(ALLOC_ALIGN);
        let usable = window.len as u64 - (base - window.addr());
        Ok(AddressSpace {
            window,
            owner: std::sync::OnceLock::new(),
            device,
            state: Mutex::new(SpaceState {
                free: BTreeMap::from([(base, usable)]),
                live: BTreeMap::new(),
                reserved: BTreeMap::new(),
                extra: Vec::new(),
            }),
        })
    }

    /// Names the context that owns this space, and publishes its window so that any
    /// pointer into it can be attributed to that context.
    pub fn bind(&self, ctx_handle: u64) {
        if self.owner.set(ctx_handle).is_ok() {
            WINDOWS
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(self.window.addr(), (self.window.len as u64, ctx_handle));
        }
    }

    /// Whether `[addr, addr + size)` overlaps this space's window.
    fn in_window(&self, addr: u64, size: u64) -> bool {
        let base = self.window.addr();
        addr < base + self.window.len as u64 && addr.saturating_add(size) > base
    }

    fn ctx_id(&self) -> u64 {
        *self.owner.get().unwrap_or(&0)
    }

    /// Allocates `size` bytes, charging the device exactly `size`.
    pub fn alloc(&self, size: u64) -> CuResult<Arc<Allocation>> {
        if size == 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "allocation of 0 bytes".into());
        }
        self.device.reserve(size)?;
        match self.place(size) {
            Ok(a) => Ok(a),
            Err(e) => {
                self.device.release(size);
                Err(e)
            }
        }
    }

    fn place(&self, size: u64) -> CuResult<Arc<Allocation>> {
        let Some(backing) = Mapping::new(size as usize, true) else {
            return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || format!("host cannot back {size} bytes"));
        };
        self.place_backed(size, backing, size)
    }

    /// Places `size` bytes backed by `backing` in the window, charged `charged` (already
    /// reserved from the device by the caller).
    fn place_backed(&self, size: u64, backing: Mapping, charged: u64) -> CuResult<Arc<Allocation>> {
        let span = size.next_multiple_of(ALLOC_ALIGN) + GUARD;
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some((&start, &len)) = st.free.iter().find(|(_, len)| **len >= span) else {
            return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || "device address space exhausted".into());
        };
        st.free.remove(&start);
        if len > span {
            st.free.insert(start + span, len - span);
        }
        let a = Arc::new(Allocation {
            base: start,
            size,
            ctx_id: self.ctx_id(),
            charged,
            backing: Backing::Owned(backing),
        });
        st.live.insert(start, a.clone());
        Ok(a)
    }

    /// Frees the allocation that starts exactly at `ptr`.
    pub fn free(&self, ptr: u64) -> CuResult<()> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.live.get(&ptr).is_some_and(|a| a.is_vmm()) {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("free: {ptr:#x} is mapped VMM memory (cuMemUnmap and cuMemRelease it)")
            });
        }
        let Some(a) = st.live.remove(&ptr) else {
            drop(st);
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || describe_bad_pointer(ptr, self.ctx_id(), "free"));
        };
        let span = a.size.next_multiple_of(ALLOC_ALIGN) + GUARD;
        give_back(&mut st, a.base, span);
        drop(st);
        self.device.release(a.charged);
        Ok(())
    }

    /// The live allocation containing `ptr`, if any.
    pub fn find(&self, ptr: u64) -> Option<Arc<Allocation>> {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (_, a) = st.live.range(..=ptr).next_back()?;
        (ptr < a.end()).then(|| a.clone())
    }

    /// The allocation holding all of `[ptr, ptr + len)`, and the offset of `ptr` in it.
    pub fn resolve(&self, ptr: u64, len: u64, what: &str) -> CuResult<(Arc<Allocation>, u64)> {
        match self.find(ptr) {
            Some(a) if ptr.checked_add(len).is_some_and(|e| e <= a.end()) => {
                let off = ptr - a.base;
                Ok((a, off))
            }
            Some(a) => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!(
                    "{what}: {len} bytes at {ptr:#x} run past the end of the allocation [{:#x}, {:#x})",
                    a.base,
                    a.end()
                )
            }),
            None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || describe_bad_pointer(ptr, self.ctx_id(), what)),
        }
    }

    pub fn live_allocations(&self) -> Vec<Arc<Allocation>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).live.values().cloned().collect()
    }

    /// Frees everything (context destruction); returns how many bytes were released.
    pub fn release_all(&self) -> u64 {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let charged: u64 = st.live.values().map(|a| a.charged).sum();
        st.live.clear();
        // Mappings hold their physical memory, which gives its charge back when the
        // last reference (handle or mapping) goes.
        let reserved = std::mem::take(&mut st.reserved);
        drop(st);
        drop(reserved);
        self.device.release(charged);
        charged
    }
}

impl Drop for AddressSpace {
    fn drop(&mut self) {
        self.release_all();
        let mut w = WINDOWS.write().unwrap_or_else(|e| e.into_inner());
        w.remove(&self.window.addr());
        for m in &self.state.get_mut().unwrap_or_else(|e| e.into_inner()).extra {
            w.remove(&m.addr());
        }
    }
}

/// Returns `[start, start + len)` to the free ranges, merged with its neighbours.
fn give_back(st: &mut SpaceState, start: u64, len: u64) {
    let (mut start, mut len) = (start, len);
    if let Some((&next, &nlen)) = st.free.range(start + len..).next()
        && next == start + len
    {
        st.free.remove(&next);
        len += nlen;
    }
    if let Some((&prev, &plen)) = st.free.range(..start).next_back()
        && prev + plen == start
    {
        st.free.remove(&prev);
        start = prev;
        len += plen;
    }
    st.free.insert(start, len);
}

fn describe_bad_pointer(ptr: u64, ctx_id: u64, what: &str) -> String {
    match window_owner(ptr) {
        Some(owner) if owner != ctx_id => format!("{what}: {ptr:#x} belongs to another context"),
        Some(_) => format!("{what}: {ptr:#x} is not a live allocation of this context (freed, or never allocated)"),
        None => format!("{what}: {ptr:#x} is not a device pointer"),
    }
}

/// `CU_MEMHOSTALLOC_PORTABLE` and `CU_MEMHOSTREGISTER_PORTABLE` (the same bit).
const PORTABLE: u32 = gpupool_shim::cuda::CU_MEMHOSTALLOC_PORTABLE;
const _: () = assert!(PORTABLE == gpupool_shim::cuda::CU_MEMHOSTREGISTER_PORTABLE);

/// Where a page-locked block's bytes come from.
enum PinnedStorage {
    /// Allocated by the driver (`cuMemAllocHost`, `cuMemHostAlloc`).
    Owned(Mapping),
    /// The application's own memory, registered with `cuMemHostRegister`.
    Registered(u64),
}

/// A block of page-locked host memory.
pub struct PinnedBlock {
    pub len: u64,
    pub flags: u32,
    /// Device that was current at allocation (for pointer attributes).
    pub ctx_id: u64,
    storage: PinnedStorage,
}

impl PinnedBlock {
    pub fn addr(&self) -> u64 {
        match &self.storage {
            PinnedStorage::Owned(m) => m.addr(),
            PinnedStorage::Registered(a) => *a,
        }
    }

    pub fn is_registered(&self) -> bool {
        matches!(self.storage, PinnedStorage::Registered(_))
    }
}

#[derive(Default)]
pub struct PinnedHost {
    blocks: RwLock<BTreeMap<u64, Arc<PinnedBlock>>>,
}

impl PinnedHost {
    pub fn alloc(&self, len: u64, flags: u32, ctx_id: u64) -> CuResult<u64> {
        if len == 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "host allocation of 0 bytes".into());
        }
        let Some(mapping) = Mapping::new(len as usize, true) else {
            return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || format!("cannot allocate {len} bytes of host memory"));
        };
        let addr = mapping.addr();
        let block = Arc::new(PinnedBlock { len, flags, ctx_id, storage: PinnedStorage::Owned(mapping) });
        self.blocks.write().unwrap_or_else(|e| e.into_inner()).insert(addr, block);
        Ok(addr)
    }

    pub fn free(&self, addr: u64) -> CuResult<()> {
        let mut blocks = self.blocks.write().unwrap_or_else(|e| e.into_inner());
        match blocks.get(&addr) {
            Some(b) if !b.is_registered() => {
                blocks.remove(&addr);
                Ok(())
            }
            _ => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("cuMemFreeHost: {addr:#x} is not the start of a page-locked allocation")
            }),
        }
    }

    /// Page-locks the application's `[addr, addr + len)` (`cuMemHostRegister`).
    pub fn register(&self, addr: u64, len: u64, flags: u32, ctx_id: u64) -> CuResult<()> {
        if addr == 0 || len == 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "cuMemHostRegister of an empty or NULL range".into());
        }
        if window_owner(addr).is_some() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{addr:#x} is device memory"));
        }
        let mut blocks = self.blocks.write().unwrap_or_else(|e| e.into_inner());
        let end = addr.saturating_add(len);
        let overlaps = blocks.range(..end).next_back().is_some_and(|(_, b)| b.addr() + b.len > addr);
        if overlaps {
            return fail(CUresult::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, || {
                format!("[{addr:#x}, {end:#x}) overlaps page-locked memory")
            });
        }
        blocks.insert(addr, Arc::new(PinnedBlock { len, flags, ctx_id, storage: PinnedStorage::Registered(addr) }));
        Ok(())
    }

    /// Undoes `register` for the block starting at `addr` (`cuMemHostUnregister`).
    pub fn unregister(&self, addr: u64) -> CuResult<()> {
        let mut blocks = self.blocks.write().unwrap_or_else(|e| e.into_inner());
        match blocks.get(&addr) {
            Some(b) if b.is_registered() => {
                blocks.remove(&addr);
                Ok(())
            }
            _ => fail(CUresult::CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, || {
                format!("{addr:#x} is not the start of a registered range")
            }),
        }
    }

    /// The blocks a kernel of context `ctx_id` may address: portable ones, and those
    /// page-locked through that context ("considered as pinned memory by all CUDA contexts,
    /// not just the one that performed the allocation" is what PORTABLE adds; without it the
    /// block is mapped for its own context only).
    pub fn visible_to(&self, ctx_id: u64) -> Vec<Arc<PinnedBlock>> {
        let blocks = self.blocks.read().unwrap_or_else(|e| e.into_inner());
        blocks.values().filter(|b| b.flags & PORTABLE != 0 || b.ctx_id == ctx_id).cloned().collect()
    }

    /// The page-locked block containing `addr`.
    pub fn find(&self, addr: u64) -> Option<Arc<PinnedBlock>> {
        let b = self.blocks.read().unwrap_or_else(|e| e.into_inner());
        let (_, blk) = b.range(..=addr).next_back()?;
        (addr < blk.addr() + blk.len).then(|| blk.clone())
    }
}
