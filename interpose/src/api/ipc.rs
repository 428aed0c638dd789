//! IPC memory handles between processes of one tenant (`cuIpcGetMemHandle`,
//! `cuIpcOpenMemHandle_v2`, `cuIpcCloseMemHandle`), served by the daemon, which holds the
//! memory of all the tenant's processes (pool-daemon/src/daemon/ipc.rs). A handle carries
//! the daemon's 128-bit secret for the allocation after a magic tag; the opened memory is
//! the same device pointer, known to this process as one of its allocations (copies and
//! memsets accept it) until it is closed or its allocator frees it. It stays counted in
//! the allocator's quota, once.

use crate::client;
use crate::util::{R, log};
use gpupool_protocol::ops::answer;
use gpupool_protocol::{DevicePtr, Request};
use gpupool_shim::cuda::{CUdeviceptr, CUipcMemHandle, CUresult};
use std::collections::HashMap;
use std::os::raw::{c_char, c_uint};
use std::sync::Mutex;

/// Tags a handle made by this library (the rest is the secret, then zeros).
const MAGIC: &[u8; 8] = b"gpupool\x01";

/// Opened handles: (endpoint, base) -> times opened, closed at zero.
static OPENED: Mutex<Option<HashMap<(usize, u64), u32>>> = Mutex::new(None);

pub(super) fn get_mem_handle(dptr: CUdeviceptr) -> R<CUipcMemHandle> {
    if super::mempool::pool_of(dptr).is_some() {
        log("cuIpcGetMemHandle: memory of a stream-ordered pool is not exported by IPC handles");
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let answer::MemExported { secret } = client::call(|c| {
        let (cur, ..) = c.current()?;
        let key = (client::endpoint_of(cur), dptr);
        if c.reg.allocs.get(&key).is_none_or(|&(_, ctx)| ctx != cur) {
            log(&format!("cuIpcGetMemHandle: {dptr:#x} is not the base of an allocation of the current context"));
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        c.live()?.ask(Request::IpcGetMemHandle { ptr: DevicePtr(dptr) })
    })?;
    let mut h = CUipcMemHandle::default();
    for (i, b) in MAGIC.iter().chain(secret.iter()).enumerate() {
        h.reserved[i] = *b as c_char;
    }
    Ok(h)
}

pub(super) fn open_mem_handle(handle: CUipcMemHandle, flags: c_uint) -> R<CUdeviceptr> {
    if flags & !1 != 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let bytes: Vec<u8> = handle.reserved.iter().map(|&b| b as u8).collect();
    if &bytes[..8] != MAGIC {
        log("cuIpcOpenMemHandle: not a handle made through the pool");
        return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
    }
    let mut secret = [0u8; 16];
    secret.copy_from_slice(&bytes[8..24]);
    client::call(|c| {
        let (cur, ..) = c.current()?;
        let answer::AddressRange { base, size } = c.live()?.ask(Request::IpcOpenMemHandle { secret })?;
        let key = (client::endpoint_of(cur), base.0);
        c.reg.allocs.insert(key, (size, cur));
        *OPENED.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new).entry(key).or_insert(0) += 1;
        Ok(base.0)
    })
}

pub(super) fn close_mem_handle(dptr: CUdeviceptr) -> R<()> {
    client::call(|c| {
        let (cur, ..) = c.current()?;
        let key = (client::endpoint_of(cur), dptr);
        let mut g = OPENED.lock().unwrap_or_else(|e| e.into_inner());
        let opened = g.get_or_insert_with(HashMap::new);
        let Some(n) = opened.get_mut(&key) else {
            log(&format!("cuIpcCloseMemHandle: {dptr:#x} was not opened from an IPC handle"));
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        };
        c.live()?.call_ok(Request::IpcCloseMemHandle { ptr: DevicePtr(dptr) })?;
        *n -= 1;
        if *n == 0 {
            opened.remove(&key);
            c.reg.allocs.remove(&key);
        }
        Ok(())
    })
}
