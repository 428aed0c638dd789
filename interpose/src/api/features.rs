//! Green contexts and multicast objects, answered as by a device without them (the same
//! answers as the simulator's, from [`gpupool_abi::absent`]; the devices' multicast
//! attribute is 0 through the pool too), the log-callback registry, and
//! `cuStreamWriteValue32`.

use super::DefaultStream;
use crate::util::{R, log};
use gpupool_abi::absent::{self, LogCallbacks, Refusal};
use gpupool_shim::cuda::{
    CUcontext, CUdevResource, CUdevResourceDesc, CUdevResourceType, CUdeviceptr, CUgreenCtx, CUlogsCallback,
    CUlogsCallbackHandle, CUmemGenericAllocationHandle, CUmulticastGranularity_flags, CUmulticastObjectProp, CUresult,
    CUstream, CUstreamWriteValue_flags as W,
};
use std::os::raw::{c_int, c_uint, c_ulonglong, c_void};

fn refuse<T>(r: Refusal) -> R<T> {
    log(r.1);
    Err(r.0)
}

/// Refusals that name a device check it first (CUDA_ERROR_INVALID_DEVICE if absent).
fn on_device<T>(dev: c_int, r: Refusal) -> R<T> {
    crate::client::call(|c| c.device(dev).map(|_| ()))?;
    refuse(r)
}

pub(super) fn green_ctx_create_on(_ph: *mut CUgreenCtx, _desc: CUdevResourceDesc, dev: c_int, _flags: c_uint) -> R<()> {
    on_device(dev, absent::GREEN_CONTEXTS)
}

pub(super) fn green_ctx_destroy(_h: CUgreenCtx) -> R<()> {
    refuse(absent::NO_GREEN_CONTEXT)
}

pub(super) fn ctx_from_green(_h: CUgreenCtx) -> R<CUcontext> {
    refuse(absent::NO_GREEN_CONTEXT)
}

pub(super) fn green_stream_create(_ph: *mut CUstream, _h: CUgreenCtx, _flags: c_uint, _priority: c_int) -> R<()> {
    refuse(absent::NO_GREEN_CONTEXT)
}

pub(super) fn dev_resource(dev: c_int, _resource: *mut CUdevResource, _kind: CUdevResourceType) -> R<()> {
    on_device(dev, absent::GREEN_CONTEXTS)
}

pub(super) fn split_by_count(
    _result: *mut CUdevResource,
    _groups: *mut c_uint,
    _input: *const CUdevResource,
    _remaining: *mut CUdevResource,
    _flags: c_uint,
    _min_count: c_uint,
) -> R<()> {
    refuse(absent::GREEN_CONTEXTS)
}

pub(super) fn generate_desc(_desc: *mut CUdevResourceDesc, _resources: *mut CUdevResource, _n: c_uint) -> R<()> {
    refuse(absent::GREEN_CONTEXTS)
}

pub(super) fn multicast_create(_h: *mut CUmemGenericAllocationHandle, _prop: *const CUmulticastObjectProp) -> R<()> {
    refuse(absent::MULTICAST)
}

pub(super) fn multicast_add_device(_h: CUmemGenericAllocationHandle, dev: c_int) -> R<()> {
    on_device(dev, absent::MULTICAST)
}

pub(super) fn multicast_bind_mem(
    _h: CUmemGenericAllocationHandle,
    _mc_offset: usize,
    _mem: CUmemGenericAllocationHandle,
    _mem_offset: usize,
    _size: usize,
    _flags: c_ulonglong,
) -> R<()> {
    refuse(absent::MULTICAST)
}

pub(super) fn multicast_unbind(_h: CUmemGenericAllocationHandle, dev: c_int, _offset: usize, _size: usize) -> R<()> {
    on_device(dev, absent::MULTICAST)
}

pub(super) fn multicast_granularity(
    _g: *mut usize,
    _prop: *const CUmulticastObjectProp,
    _option: CUmulticastGranularity_flags,
) -> R<()> {
    refuse(absent::MULTICAST)
}

static LOG_CALLBACKS: LogCallbacks = LogCallbacks::new();

pub(super) fn logs_register(f: CUlogsCallback, user: *mut c_void) -> R<CUlogsCallbackHandle> {
    match LOG_CALLBACKS.register(f, user) {
        Ok(h) => Ok(h as usize as CUlogsCallbackHandle),
        Err(r) => refuse(r),
    }
}

pub(super) fn logs_unregister(h: CUlogsCallbackHandle) -> R<()> {
    LOG_CALLBACKS.unregister(h as usize as u64).or_else(refuse)
}

/// A stream-ordered 32-bit store: a one-element 32-bit memset on the stream, once the
/// flags and alignment are checked.
pub(super) fn write_value32(s: CUstream, addr: CUdeviceptr, value: u32, flags: c_uint, d: DefaultStream) -> R<()> {
    if flags & !(W::CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER.0 as c_uint) != 0 || !addr.is_multiple_of(4) {
        log("cuStreamWriteValue32: unknown flags or an address not 4-byte aligned");
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    super::memset::fill_async(addr, value, 1, s, d)
}
