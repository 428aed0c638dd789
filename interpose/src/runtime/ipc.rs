//! The runtime's IPC handles (`cudaIpcGetMemHandle`, `cudaIpcOpenMemHandle`,
//! `cudaIpcCloseMemHandle`, `cudaIpcGetEventHandle`, `cudaIpcOpenEventHandle`) over the
//! driver's (`crate::api::ipc`): `cudaIpcMemHandle_t` / `cudaIpcEventHandle_t` are
//! `CUipcMemHandle` / `CUipcEventHandle` under other names (64 opaque bytes), and the
//! runtime's events are the driver's.

use super::{Rt, cu, out, rt_exports, state};
use crate::api::exports::{
    cuIpcCloseMemHandle, cuIpcGetEventHandle, cuIpcGetMemHandle, cuIpcOpenEventHandle, cuIpcOpenMemHandle_v2,
};
use gpupool_shim::cuda::{CUdeviceptr, CUevent, CUipcEventHandle, CUipcMemHandle};
use gpupool_shim::cudart::cudaError;
use std::os::raw::{c_uint, c_void};

fn get_mem_handle(handle: *mut CUipcMemHandle, p: *mut c_void) -> Rt<()> {
    if handle.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    // SAFETY: our own export with a non-null out-pointer.
    cu(unsafe { cuIpcGetMemHandle(handle, p as CUdeviceptr) })
}

fn open_mem_handle(p: *mut *mut c_void, handle: CUipcMemHandle, flags: c_uint) -> Rt<()> {
    if p.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    let mut d: CUdeviceptr = 0;
    // SAFETY: our own export with a valid out-pointer.
    cu(unsafe { cuIpcOpenMemHandle_v2(&mut d, handle, flags) })?;
    out(p, d as *mut c_void)
}

fn close_mem_handle(p: *mut c_void) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the pointer.
    cu(unsafe { cuIpcCloseMemHandle(p as CUdeviceptr) })
}

fn get_event_handle(handle: *mut CUipcEventHandle, event: CUevent) -> Rt<()> {
    if handle.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    // SAFETY: our own export with a non-null out-pointer; it looks the event up.
    cu(unsafe { cuIpcGetEventHandle(handle, event) })
}

fn open_event_handle(event: *mut CUevent, handle: CUipcEventHandle) -> Rt<()> {
    if event.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    // SAFETY: our own export with a non-null out-pointer.
    cu(unsafe { cuIpcOpenEventHandle(event, handle) })
}

rt_exports! {
    cudaIpcGetEventHandle => get_event_handle(handle: *mut CUipcEventHandle, event: CUevent);
    cudaIpcOpenEventHandle => open_event_handle(event: *mut CUevent, handle: CUipcEventHandle);
    cudaIpcGetMemHandle => get_mem_handle(handle: *mut CUipcMemHandle, p: *mut c_void);
    cudaIpcOpenMemHandle => open_mem_handle(p: *mut *mut c_void, handle: CUipcMemHandle, flags: c_uint);
    cudaIpcCloseMemHandle => close_mem_handle(p: *mut c_void);
}
