//! Interprocess memory handles. The simulator's device memory is private to its process
//! (anonymous mappings behind a `PROT_NONE` window), so no other process could map it:
//! `cuIpcGetMemHandle` is `CUDA_ERROR_NOT_SUPPORTED`, which NVIDIA documents for devices
//! without IPC support, and no handle can be opened. Through the pool, IPC between a
//! tenant's processes is served by the daemon, which holds all their memory in one process.

use crate::context::current;
use crate::error::{cuda_entry, fail};
use gpupool_shim::cuda::{CUdeviceptr, CUipcMemHandle, CUresult};
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
