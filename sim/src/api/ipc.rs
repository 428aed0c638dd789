//! Interprocess memory and event handles. Memory handles work between processes of the
//! simulator ([`crate::memory::ipc`]: the allocation's bytes move into a memfd the opener
//! maps through `/proc`; the opener's pointer is its own, charged nothing). Events are the
//! process's own stream workers' state, so `cuIpcGetEventHandle` is
//! `CUDA_ERROR_NOT_SUPPORTED`, which NVIDIA documents for devices without IPC support, and
//! no event handle can be opened. Through the pool, the daemon serves both.

use crate::context::current;
use crate::error::{cuda_entry, fail};
use gpupool_shim::cuda::{CUdeviceptr, CUevent, CUipcEventHandle, CUipcMemHandle, CUresult};
use std::collections::HashMap;
use std::os::raw::{c_char, c_uint};
use std::sync::Mutex;

/// Tags a memory handle of the simulator; then pid (u32), fd (i32), size and the exporter's
/// base (u64 each), little-endian.
const MAGIC: &[u8; 8] = b"gpupoolS";

/// Opened handles: (context, exporter pid, exporter base) -> (our base, times opened).
type Opened = HashMap<(u64, u32, u64), (u64, u32)>;
static OPENED: Mutex<Option<Opened>> = Mutex::new(None);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcGetMemHandle(handle: *mut CUipcMemHandle, dptr: CUdeviceptr) -> CUresult {
    cuda_entry(|| {
        let ctx = current()?;
        if handle.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null handle".into());
        }
        let a = match ctx.memory.find(dptr) {
            Some(a) if a.base == dptr && !a.is_vmm() && a.charged > 0 => a,
            _ => {
                return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                    format!("cuIpcGetMemHandle: {dptr:#x} is not the base of a cuMemAlloc allocation of this context")
                });
            }
        };
        if crate::mempool::pool_of(dptr).is_some() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "memory of a pool has no IPC handle".into());
        }
        // Work queued on the memory finishes before its bytes move.
        ctx.drain();
        let fd = crate::memory::ipc::export(&a)?;
        let mut bytes = [0u8; 64];
        bytes[..8].copy_from_slice(MAGIC);
        bytes[8..12].copy_from_slice(&std::process::id().to_le_bytes());
        bytes[12..16].copy_from_slice(&fd.to_le_bytes());
        bytes[16..24].copy_from_slice(&a.size.to_le_bytes());
        bytes[24..32].copy_from_slice(&a.base.to_le_bytes());
        let mut h = CUipcMemHandle::default();
        for (d, b) in h.reserved.iter_mut().zip(bytes) {
            *d = b as c_char;
        }
        super::out(handle, h)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcOpenMemHandle_v2(
    pdptr: *mut CUdeviceptr,
    handle: CUipcMemHandle,
    flags: c_uint,
) -> CUresult {
    cuda_entry(|| {
        let ctx = current()?;
        if pdptr.is_null() || flags > 1 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("null pdptr or flags {flags:#x}"));
        }
        let b: Vec<u8> = handle.reserved.iter().map(|&c| c as u8).collect();
        if &b[..8] != MAGIC {
            return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || "not an IPC memory handle of the simulator".into());
        }
        let word = |r: std::ops::Range<usize>| b[r].iter().rev().fold(0u64, |v, &x| (v << 8) | x as u64);
        let (pid, fd, size, base) = (word(8..12) as u32, word(12..16) as i32, word(16..24), word(24..32));
        if pid == std::process::id() {
            return fail(CUresult::CUDA_ERROR_INVALID_CONTEXT, || "a process cannot open its own IPC handle".into());
        }
        let key = (ctx.handle(), pid, base);
        let mut g = OPENED.lock().unwrap_or_else(|e| e.into_inner());
        let opened = g.get_or_insert_with(HashMap::new);
        if let Some((ours, n)) = opened.get_mut(&key)
            && ctx.memory.find(*ours).is_some_and(|a| a.base == *ours)
        {
            *n += 1;
            return super::out(pdptr, *ours);
        }
        let a = ctx.memory.import(pid, fd, size)?;
        opened.insert(key, (a.base, 1));
        super::out(pdptr, a.base)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcCloseMemHandle(dptr: CUdeviceptr) -> CUresult {
    cuda_entry(|| {
        let ctx = current()?;
        let me = ctx.handle();
        let mut g = OPENED.lock().unwrap_or_else(|e| e.into_inner());
        let opened = g.get_or_insert_with(HashMap::new);
        let Some((&key, _)) = opened.iter().find(|(k, (ours, _))| k.0 == me && *ours == dptr) else {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("{dptr:#x} is not memory opened from an IPC handle")
            });
        };
        let entry = opened.get_mut(&key).expect("found above");
        entry.1 -= 1;
        if entry.1 == 0 {
            opened.remove(&key);
            drop(g);
            ctx.drain();
            return ctx.memory.free(dptr);
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcGetEventHandle(handle: *mut CUipcEventHandle, event: CUevent) -> CUresult {
    cuda_entry(|| {
        current()?;
        if handle.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null handle".into());
        }
        fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || {
            format!("cuIpcGetEventHandle({event:?}): the simulator's events cannot be shared between processes")
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcOpenEventHandle(event: *mut CUevent, _handle: CUipcEventHandle) -> CUresult {
    cuda_entry(|| {
        current()?;
        if event.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null event".into());
        }
        fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || "the simulator exports no IPC event handles".into())
    })
}
