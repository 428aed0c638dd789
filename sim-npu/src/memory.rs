//! Device memory: every allocation is an anonymous mapping of its own (reserved lazily by the
//! host kernel, so a 64 GiB device costs only what is touched), whose host address is the
//! device pointer. Each device's ledger charges what CANN documents for `aclrtMalloc`: the
//! size rounded up to 32 bytes plus 32 bytes of padding (`aclrtMallocAlign32`: no padding),
//! so `aclrtGetMemInfo`'s free memory is the device's total less exactly those charges.
//!
//! A region is shared (`Arc`) by whoever is using it, so `aclrtFree` while queued work still
//! holds it unmaps only when that work is done: a program's use-after-free is its bug, never a
//! crash of the process. Accesses go through [`Region::read`]/[`Region::write`], bounds-checked.

use crate::status::{Code, Res, code, fail};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

pub struct Region {
    pub base: u64,
    /// What the program asked for: accesses beyond it are out of range.
    pub size: u64,
    pub charged: u64,
    pub device: u32,
    map_len: usize,
}

// SAFETY: the mapping is plain memory owned by the region until Drop; concurrent accesses are
// the program's to order, as on the device (reads and writes are raw copies, never references).
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    fn map(len: usize) -> Option<u64> {
        // SAFETY: an anonymous private mapping touches no existing memory; MAP_NORESERVE lets a
        // large device exist without committing host memory until it is written.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        (p != libc::MAP_FAILED).then_some(p as u64)
    }

    /// The host address of `[offset, offset + len)`, which must lie within the region (for a
    /// copy straight from or to the program's memory).
    pub fn span(&self, offset: u64, len: usize) -> *mut u8 {
        assert!(offset.checked_add(len as u64).is_some_and(|e| e <= self.size), "span outside the region");
        (self.base + offset) as *mut u8
    }

    /// Copies `out.len()` bytes from `offset`; `offset + len` must lie within the region.
    pub fn read(&self, offset: u64, out: &mut [u8]) {
        assert!(offset.checked_add(out.len() as u64).is_some_and(|e| e <= self.size), "read outside the region");
        // SAFETY: the range lies inside the live mapping (checked above; Drop has not run while
        // `self` is borrowed), and `out` is a distinct host buffer.
        unsafe { std::ptr::copy((self.base + offset) as *const u8, out.as_mut_ptr(), out.len()) };
    }

    /// Copies `data` to `offset`; `offset + len` must lie within the region.
    pub fn write(&self, offset: u64, data: &[u8]) {
        assert!(offset.checked_add(data.len() as u64).is_some_and(|e| e <= self.size), "write outside the region");
        // SAFETY: as in `read`; `copy` tolerates overlap with the source.
        unsafe { std::ptr::copy(data.as_ptr(), (self.base + offset) as *mut u8, data.len()) };
    }

    /// Fills `len` bytes at `offset` with `byte`.
    pub fn fill(&self, offset: u64, len: u64, byte: u8) {
        assert!(offset.checked_add(len).is_some_and(|e| e <= self.size), "fill outside the region");
        // SAFETY: as in `read`.
        unsafe { std::ptr::write_bytes((self.base + offset) as *mut u8, byte, len as usize) };
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `map` with this length and nothing else refers to it
        // (the last Arc is going away).
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.map_len) };
    }
}

#[derive(Default)]
struct Table {
    regions: BTreeMap<u64, Arc<Region>>,
    used: BTreeMap<u32, u64>,
    host: BTreeMap<u64, usize>,
}

static TABLE: Mutex<Table> =
    Mutex::new(Table { regions: BTreeMap::new(), used: BTreeMap::new(), host: BTreeMap::new() });

fn table() -> std::sync::MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// What an allocation of `size` costs on the device.
pub fn charge_of(size: u64, pad: bool) -> u64 {
    size.div_ceil(32) * 32 + if pad { 32 } else { 0 }
}

/// Allocates `size` bytes on `device` (of `total` bytes), or ACL_ERROR_RT_MEMORY_ALLOCATION.
pub fn alloc(device: u32, total: u64, size: u64, pad: bool) -> Res<u64> {
    if size == 0 {
        return fail(code::INVALID_PARAM, || "aclrtMalloc of 0 bytes".into());
    }
    let charged = charge_of(size, pad);
    let mut t = table();
    let used = t.used.get(&device).copied().unwrap_or(0);
    if used.checked_add(charged).is_none_or(|u| u > total) {
        return fail(code::RT_MEMORY_ALLOCATION, || {
            format!("device {device}: {size} bytes (charged {charged}) do not fit in {} free", total - used)
        });
    }
    let map_len = usize::try_from(charged).map_err(|_| code::RT_MEMORY_ALLOCATION)?;
    let Some(base) = Region::map(map_len) else {
        return fail(code::RT_MEMORY_ALLOCATION, || format!("the host could not map {map_len} bytes"));
    };
    t.regions.insert(base, Arc::new(Region { base, size, charged, device, map_len }));
    *t.used.entry(device).or_insert(0) += charged;
    Ok(base)
}

/// Frees the allocation starting at `ptr`; anything else is ACL_ERROR_INVALID_PARAM.
pub fn free(ptr: u64) -> Res<()> {
    let mut t = table();
    let Some(region) = t.regions.remove(&ptr) else {
        return fail(code::INVALID_PARAM, || format!("aclrtFree({ptr:#x}): not the start of a device allocation"));
    };
    if let Some(u) = t.used.get_mut(&region.device) {
        *u -= region.charged;
    }
    Ok(())
}

/// Bytes charged on `device`.
pub fn used(device: u32) -> u64 {
    table().used.get(&device).copied().unwrap_or(0)
}

/// The allocation holding `[addr, addr + len)` and the offset of `addr` in it, if one does.
pub fn find(addr: u64, len: u64) -> Option<(Arc<Region>, u64)> {
    let t = table();
    let (_, r) = t.regions.range(..=addr).next_back()?;
    let off = addr - r.base;
    (off < r.size.max(1) && off.checked_add(len).is_some_and(|e| e <= r.size)).then(|| (r.clone(), off))
}

/// Whether `addr` is inside any device allocation (a device pointer, whatever its extent).
pub fn is_device(addr: u64) -> bool {
    let t = table();
    t.regions.range(..=addr).next_back().is_some_and(|(_, r)| addr - r.base < r.size)
}

/// A device range for a copy or memset: within one allocation of `device`, else `code`.
pub fn device_range(addr: u64, len: u64, device: u32, what: &str, code: Code) -> Res<(Arc<Region>, u64)> {
    match find(addr, len) {
        Some((r, off)) if r.device == device => Ok((r, off)),
        Some((r, _)) => fail(code, || format!("{what} {addr:#x} is memory of device {}, not {device}", r.device)),
        None => fail(code, || format!("{what} [{addr:#x}, +{len}) is not inside a device allocation")),
    }
}

/// Page-locked host memory (`aclrtMallocHost`): host memory the simulator tracks for FreeHost.
pub fn alloc_host(size: u64) -> Res<u64> {
    if size == 0 {
        return fail(code::INVALID_PARAM, || "aclrtMallocHost of 0 bytes".into());
    }
    let len = usize::try_from(size).map_err(|_| code::RT_MEMORY_ALLOCATION)?;
    let Some(p) = Region::map(len) else {
        return fail(code::RT_MEMORY_ALLOCATION, || format!("the host could not map {len} bytes"));
    };
    table().host.insert(p, len);
    Ok(p)
}

pub fn free_host(ptr: u64) -> Res<()> {
    let Some(len) = table().host.remove(&ptr) else {
        return fail(code::INVALID_PARAM, || format!("aclrtFreeHost({ptr:#x}): not from aclrtMallocHost"));
    };
    // SAFETY: the mapping was made by `alloc_host` with this length and is no longer tracked.
    unsafe { libc::munmap(ptr as *mut libc::c_void, len) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_follow_cann_and_ranges_stay_inside_one_allocation() {
        assert_eq!((charge_of(1, true), charge_of(32, true), charge_of(33, true)), (64, 64, 96));
        assert_eq!((charge_of(1, false), charge_of(64, false)), (32, 64));
        let dev = 900; // a device no other test uses: the ledger is the process's
        let p = alloc(dev, 1 << 20, 100, true).unwrap();
        assert_eq!(used(dev), 160);
        assert!(find(p, 100).is_some() && find(p + 99, 1).is_some());
        assert!(find(p + 50, 51).is_none(), "past the requested size, inside the padding");
        assert!(is_device(p + 99) && !is_device(p + 100));
        assert_eq!(device_range(p, 8, dev + 1, "x", 7).err(), Some(7), "memory of another device");
        assert_eq!(alloc(dev, 1 << 20, 1 << 20, true).err(), Some(code::RT_MEMORY_ALLOCATION));
        let (r, off) = find(p + 10, 4).unwrap();
        free(p).unwrap();
        assert_eq!(used(dev), 0);
        assert_eq!(free(p).err(), Some(code::INVALID_PARAM), "freed twice");
        r.write(off, &[1, 2, 3, 4]);
        let mut back = [0u8; 4];
        r.read(off, &mut back);
        assert_eq!(back, [1, 2, 3, 4], "a region held by queued work outlives its aclrtFree");
    }
}
