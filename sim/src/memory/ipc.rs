//! Device memory shared between processes of the simulator (`cuIpcGetMemHandle` /
//! `cuIpcOpenMemHandle`). An allocation's bytes are an anonymous private mapping; the first
//! export moves them into a memfd mapped shared at the same host address (so every pointer
//! to them stays valid), and the handle names the exporting process and that fd. The opener
//! maps the fd through `/proc/<pid>/fd/<fd>` (the same user's process, as a GPU's IPC needs
//! the same driver and device) and places it in its own context's window: a device pointer
//! of the opener, charged nothing (the memory is counted where it was allocated).

use super::{AddressSpace, Allocation, Backing, Mapping};
use crate::error::{CuResult, fail};
use gpupool_shim::cuda::CUresult;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, Weak};

/// Exported allocations: base -> (the allocation, its memfd).
type Exported = HashMap<u64, (Weak<Allocation>, OwnedFd)>;
static EXPORTED: Mutex<Option<Exported>> = Mutex::new(None);

/// The fd (of this process) that holds `a`'s bytes, moving them into shared memory on the
/// first call. The caller has drained the context: no queued work writes them meanwhile.
pub fn export(a: &Arc<Allocation>) -> CuResult<i32> {
    let mut g = EXPORTED.lock().unwrap_or_else(|e| e.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    if let Some((w, fd)) = map.get(&a.base)
        && w.upgrade().is_some_and(|x| Arc::ptr_eq(&x, a))
    {
        return Ok(fd.as_raw_fd());
    }
    let Backing::Owned(m) = &a.backing else {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "VMM-mapped memory has no IPC handle".into());
    };
    // SAFETY: memfd_create takes a NUL-terminated name and flags.
    let raw = unsafe { libc::memfd_create(c"gpupool-sim-ipc".as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        return fail(CUresult::CUDA_ERROR_MAP_FAILED, || "memfd_create failed".into());
    }
    // SAFETY: a fresh fd we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: the fd is ours; the mapping's `len` bytes at `ptr` are readable (it is the
    // allocation's read-write backing); MAP_FIXED replaces exactly that mapping with the
    // fd's pages, which now hold the same bytes.
    let ok = unsafe {
        libc::ftruncate(raw, m.len as libc::off_t) == 0
            && libc::pwrite(raw, m.ptr.cast(), m.len, 0) == m.len as isize
            && libc::mmap(
                m.ptr.cast(),
                m.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                raw,
                0,
            ) != libc::MAP_FAILED
    };
    if !ok {
        return fail(CUresult::CUDA_ERROR_MAP_FAILED, || "cannot move the allocation into shared memory".into());
    }
    map.retain(|_, (w, _)| w.strong_count() > 0);
    map.insert(a.base, (Arc::downgrade(a), fd));
    Ok(raw)
}

impl AddressSpace {
    /// Maps `size` bytes of process `pid`'s fd `fd` into this window, uncharged.
    pub fn import(&self, pid: u32, fd: i32, size: u64) -> CuResult<Arc<Allocation>> {
        let path = format!("/proc/{pid}/fd/{fd}");
        let file = match std::fs::OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) => {
                return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || {
                    format!("cannot open the IPC handle's {path}: {e}")
                });
            }
        };
        let len = (size as usize).max(1).next_multiple_of(super::page_size());
        match file.metadata() {
            Ok(md) if md.len() >= len as u64 => {}
            _ => return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{path} is not the handle's memory")),
        }
        // SAFETY: a fresh shared mapping of `len` bytes of a file at least that long, at an
        // address of the kernel's choosing.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return fail(CUresult::CUDA_ERROR_MAP_FAILED, || format!("cannot map {path}"));
        }
        self.place_backed(size, Mapping { ptr: ptr.cast(), len }, 0)
    }
}
