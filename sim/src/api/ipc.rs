//! Interprocess memory and event handles. The simulator's device memory and events are
//! private to its process (anonymous mappings behind a `PROT_NONE` window, in-process
//! stream workers), so no other process could reach them: `cuIpcGetMemHandle` and
//! `cuIpcGetEventHandle` are `CUDA_ERROR_NOT_SUPPORTED`, which NVIDIA documents for devices
//! without IPC support, and no handle can be opened. Through the pool, IPC between a
//! tenant's processes is served by the daemon, which holds all their memory in one process.

use crate::context::current;
use crate::error::{cuda_entry, fail};
use gpupool_shim::cuda::{CUdeviceptr, CUevent, CUipcEventHandle, CUipcMemHandle, CUresult};
use std::os::raw::c_uint;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcGetMemHandle(handle: *mut CUipcMemHandle, dptr: CUdeviceptr) -> CUresult {
    cuda_entry(|| {
        current()?;
        if handle.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null handle".into());
        }
        fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || {
            format!("cuIpcGetMemHandle({dptr:#x}): the simulator's device memory cannot be shared between processes")
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcOpenMemHandle_v2(
    pdptr: *mut CUdeviceptr,
    _handle: CUipcMemHandle,
    flags: c_uint,
) -> CUresult {
    cuda_entry(|| {
        current()?;
        if pdptr.is_null() || flags > 1 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("null pdptr or flags {flags:#x}"));
        }
        fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || "the simulator exports no IPC memory handles".into())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuIpcCloseMemHandle(dptr: CUdeviceptr) -> CUresult {
    cuda_entry(|| {
        current()?;
        fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{dptr:#x} is not memory opened from an IPC handle"))
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
