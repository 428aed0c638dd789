//! Green contexts, multicast objects (answered as by a device without them, see
//! [`gpupool_abi::absent`]), the log-callback registry, and `cuStreamWriteValue32`.

use super::copy::{cuMemsetD32Async, cuMemsetD32Async_ptsz};
use crate::driver::initialized;
use crate::error::{CuResult, cuda_entry, fail};
use gpupool_abi::absent::{self, LogCallbacks, Refusal};
use gpupool_shim::cuda::{
    CUcontext, CUdevResource, CUdevResourceDesc, CUdevResourceType, CUdevice, CUdeviceptr, CUgreenCtx, CUlogsCallback,
    CUlogsCallbackHandle, CUmemGenericAllocationHandle, CUmulticastGranularity_flags, CUmulticastObjectProp, CUresult,
    CUstream, CUstreamWriteValue_flags as W, cuuint32_t,
};
use std::os::raw::{c_int, c_uint, c_ulonglong, c_void};

fn refuse(r: Refusal) -> CuResult<()> {
    initialized()?;
    fail(r.0, || r.1.into())
}

fn on_device(dev: CUdevice, r: Refusal) -> CuResult<()> {
    initialized()?.device(dev)?;
    refuse(r)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGreenCtxCreate(
    _ph: *mut CUgreenCtx,
    _desc: CUdevResourceDesc,
    dev: CUdevice,
    _flags: c_uint,
) -> CUresult {
    cuda_entry(|| on_device(dev, absent::GREEN_CONTEXTS))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGreenCtxDestroy(_h: CUgreenCtx) -> CUresult {
    cuda_entry(|| refuse(absent::NO_GREEN_CONTEXT))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxFromGreenCtx(_pctx: *mut CUcontext, _h: CUgreenCtx) -> CUresult {
    cuda_entry(|| refuse(absent::NO_GREEN_CONTEXT))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGreenCtxStreamCreate(
    _ph: *mut CUstream,
    _h: CUgreenCtx,
    _flags: c_uint,
    _priority: c_int,
) -> CUresult {
    cuda_entry(|| refuse(absent::NO_GREEN_CONTEXT))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetDevResource(
    dev: CUdevice,
    _resource: *mut CUdevResource,
    _kind: CUdevResourceType,
) -> CUresult {
    cuda_entry(|| on_device(dev, absent::GREEN_CONTEXTS))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevSmResourceSplitByCount(
    _result: *mut CUdevResource,
    _groups: *mut c_uint,
    _input: *const CUdevResource,
    _remaining: *mut CUdevResource,
    _flags: c_uint,
    _min_count: c_uint,
) -> CUresult {
    cuda_entry(|| refuse(absent::GREEN_CONTEXTS))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevResourceGenerateDesc(
    _desc: *mut CUdevResourceDesc,
    _resources: *mut CUdevResource,
    _n: c_uint,
) -> CUresult {
    cuda_entry(|| refuse(absent::GREEN_CONTEXTS))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMulticastCreate(
    _h: *mut CUmemGenericAllocationHandle,
    _prop: *const CUmulticastObjectProp,
) -> CUresult {
    cuda_entry(|| refuse(absent::MULTICAST))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMulticastAddDevice(_h: CUmemGenericAllocationHandle, dev: CUdevice) -> CUresult {
    cuda_entry(|| on_device(dev, absent::MULTICAST))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMulticastBindMem(
    _h: CUmemGenericAllocationHandle,
    _mc_offset: usize,
    _mem: CUmemGenericAllocationHandle,
    _mem_offset: usize,
    _size: usize,
    _flags: c_ulonglong,
) -> CUresult {
    cuda_entry(|| refuse(absent::MULTICAST))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMulticastUnbind(
    _h: CUmemGenericAllocationHandle,
    dev: CUdevice,
    _offset: usize,
    _size: usize,
) -> CUresult {
    cuda_entry(|| on_device(dev, absent::MULTICAST))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMulticastGetGranularity(
    _g: *mut usize,
    _prop: *const CUmulticastObjectProp,
    _option: CUmulticastGranularity_flags,
) -> CUresult {
    cuda_entry(|| refuse(absent::MULTICAST))
}

static LOG_CALLBACKS: LogCallbacks = LogCallbacks::new();

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLogsRegisterCallback(
    callback: CUlogsCallback,
    user: *mut c_void,
    out: *mut CUlogsCallbackHandle,
) -> CUresult {
    cuda_entry(|| {
        if out.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null callback_out".into());
        }
        let h = LOG_CALLBACKS.register(callback, user).or_else(|r| fail(r.0, || r.1.into()))?;
        super::out(out, h as usize as CUlogsCallbackHandle)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLogsUnregisterCallback(h: CUlogsCallbackHandle) -> CUresult {
    cuda_entry(|| LOG_CALLBACKS.unregister(h as usize as u64).or_else(|r| fail(r.0, || r.1.into())))
}

/// `cuStreamWriteValue32`: a stream-ordered 32-bit store, which is a one-element
/// `cuMemsetD32Async` once the flags and alignment are checked.
fn write_value_flags(addr: CUdeviceptr, flags: c_uint) -> CuResult<()> {
    if flags & !(W::CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER.0 as c_uint) != 0 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("cuStreamWriteValue32 flags {flags:#x}"));
    }
    if !addr.is_multiple_of(4) {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("cuStreamWriteValue32: {addr:#x} not 4-byte aligned")
        });
    }
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamWriteValue32_v2(
    s: CUstream,
    addr: CUdeviceptr,
    value: cuuint32_t,
    flags: c_uint,
) -> CUresult {
    match cuda_entry(|| write_value_flags(addr, flags)) {
        // SAFETY: forwarding the caller's arguments to our own export.
        CUresult::CUDA_SUCCESS => unsafe { cuMemsetD32Async(addr, value, 1, s) },
        e => e,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuStreamWriteValue32_v2_ptsz(
    s: CUstream,
    addr: CUdeviceptr,
    value: cuuint32_t,
    flags: c_uint,
) -> CUresult {
    match cuda_entry(|| write_value_flags(addr, flags)) {
        // SAFETY: forwarding the caller's arguments to our own export.
        CUresult::CUDA_SUCCESS => unsafe { cuMemsetD32Async_ptsz(addr, value, 1, s) },
        e => e,
    }
}
