//! IPC memory and event handles between processes of one tenant (`cuIpcGetMemHandle`,
//! `cuIpcOpenMemHandle_v2`, `cuIpcCloseMemHandle`, `cuIpcGetEventHandle`,
//! `cuIpcOpenEventHandle`), served by the daemon, which holds the
//! memory of all the tenant's processes (pool-daemon/src/daemon/ipc.rs). A handle carries
//! the daemon's 128-bit secret for the allocation after a magic tag; the opened memory is
//! the same device pointer, known to this process as one of its allocations (copies and
//! memsets accept it) until it is closed or its allocator frees it. It stays counted in
//! the allocator's quota, once. An opened event is the exporter's event, recorded by it and
//! waited for or queried here.

use crate::client;
use crate::client::{EventInfo, Kind, make};
use crate::util::{R, log};
use gpupool_protocol::ops::answer;
use gpupool_protocol::{DevicePtr, Request};
use gpupool_shim::cuda::{CUdeviceptr, CUevent, CUipcEventHandle, CUipcMemHandle, CUresult};
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

const INTERPROCESS: u32 = gpupool_shim::cuda::CUevent_flags::CU_EVENT_INTERPROCESS.0;
const DISABLE_TIMING: u32 = gpupool_shim::cuda::CUevent_flags::CU_EVENT_DISABLE_TIMING.0;

/// The flags each event of this process was created with (IPC needs INTERPROCESS and
/// DISABLE_TIMING).
static EVENT_FLAGS: Mutex<Option<HashMap<u64, u32>>> = Mutex::new(None);

pub(super) fn note_event_flags(h: u64, flags: u32) {
    EVENT_FLAGS.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new).insert(h, flags);
}

fn event_flags(h: u64) -> Option<u32> {
    EVENT_FLAGS.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new).get(&h).copied()
}

pub(super) fn get_event_handle(event: CUevent) -> R<CUipcEventHandle> {
    let need = INTERPROCESS | DISABLE_TIMING;
    let answer::MemExported { secret } = client::call(|c| {
        let id = c.reg.events.get(&(event as u64)).ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?.id;
        if event_flags(event as u64).is_none_or(|f| f & need != need) {
            log("cuIpcGetEventHandle: the event was not created with CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING");
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        c.conn_of(event as u64)?.ask(Request::IpcGetEventHandle { event: id })
    })?;
    let mut h = CUipcEventHandle::default();
    for (i, b) in MAGIC.iter().chain(secret.iter()).enumerate() {
        h.reserved[i] = *b as c_char;
    }
    Ok(h)
}

pub(super) fn open_event_handle(handle: CUipcEventHandle) -> R<CUevent> {
    let bytes: Vec<u8> = handle.reserved.iter().map(|&b| b as u8).collect();
    if &bytes[..8] != MAGIC {
        log("cuIpcOpenEventHandle: not a handle made through the pool");
        return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
    }
    let mut secret = [0u8; 16];
    secret.copy_from_slice(&bytes[8..24]);
    let h = client::call(|c| {
        let (_, ctx, _) = c.current()?;
        let answer::Event { event } = c.live()?.ask(Request::IpcOpenEventHandle { ctx, secret })?;
        let h = make(Kind::Event, client::current_endpoint(), event.0)?;
        c.reg.events.insert(h, EventInfo { id: event });
        Ok(h)
    })?;
    note_event_flags(h, INTERPROCESS | DISABLE_TIMING);
    Ok(h as CUevent)
}
