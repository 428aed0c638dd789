//! Virtual memory management through the pool. Arguments are checked here as the driver
//! checks them, and the granularity is answered here (2 MiB, NVIDIA's and the
//! simulator's). The pool does not serve reserve/create/map yet: those calls are refused
//! with CUDA_ERROR_NOT_SUPPORTED and a log line, so a caller sees a documented driver
//! error (PyTorch's `expandable_segments` reports it) instead of a missing entry point.

use crate::client;
use crate::util::{R, log};
use gpupool_shim::cuda::{
    CUdeviceptr, CUmemAccessDesc, CUmemAllocationGranularity_flags as Gran, CUmemAllocationHandleType as HandleType,
    CUmemAllocationProp, CUmemAllocationType, CUmemGenericAllocationHandle, CUmemLocation, CUmemLocationType, CUresult,
};
use std::os::raw::{c_ulonglong, c_void};

/// Minimum and recommended granularity, as on NVIDIA GPUs and the simulator.
pub const GRANULARITY: usize = 2 << 20;
const POSIX_FD: u32 = HandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0 as u32;

fn invalid<T>(why: &str) -> R<T> {
    log(why);
    Err(CUresult::CUDA_ERROR_INVALID_VALUE)
}

/// The pool's refusal of an operation it does not serve.
fn not_served<T>(what: &str) -> R<T> {
    log(&format!("{what}: virtual memory management is not served through the pool (CUDA_ERROR_NOT_SUPPORTED)"));
    Err(CUresult::CUDA_ERROR_NOT_SUPPORTED)
}

/// A device location naming a device of the session.
fn location_device(loc: &CUmemLocation) -> R<i32> {
    if loc.type_ != CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE {
        return invalid("memory location is not CU_MEM_LOCATION_TYPE_DEVICE");
    }
    client::call(|c| c.device(loc.id).map(|_| loc.id))
}

fn check_prop(p: &CUmemAllocationProp) -> R<()> {
    if p.type_ != CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED {
        return invalid("allocation type is not CU_MEM_ALLOCATION_TYPE_PINNED");
    }
    location_device(&p.location)?;
    if p.requestedHandleTypes.0 as u32 & !POSIX_FD != 0 {
        log("requested handle types other than POSIX file descriptors");
        return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
    }
    Ok(())
}

pub(super) fn granularity(prop: CUmemAllocationProp, option: Gran) -> R<usize> {
    check_prop(&prop)?;
    match option {
        Gran::CU_MEM_ALLOC_GRANULARITY_MINIMUM | Gran::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED => Ok(GRANULARITY),
        _ => invalid("unknown granularity option"),
    }
}

fn aligned(v: usize) -> bool {
    v.is_multiple_of(GRANULARITY)
}

pub(super) fn address_reserve(size: usize, align: usize, _addr: CUdeviceptr, flags: c_ulonglong) -> R<CUdeviceptr> {
    client::call(|c| c.current().map(|_| ()))?;
    if size == 0 || !aligned(size) || (align != 0 && !align.is_power_of_two()) || flags != 0 {
        return invalid("cuMemAddressReserve: size not a multiple of 2 MiB, alignment not a power of 2, or flags");
    }
    not_served("cuMemAddressReserve")
}

pub(super) fn address_free(_ptr: CUdeviceptr, _size: usize) -> R<()> {
    // No range can have been reserved through the pool.
    invalid("cuMemAddressFree: not a reserved range")
}

pub(super) fn create(size: usize, prop: CUmemAllocationProp, flags: c_ulonglong) -> R<CUmemGenericAllocationHandle> {
    client::call(|c| c.current().map(|_| ()))?;
    check_prop(&prop)?;
    if size == 0 || !aligned(size) || flags != 0 {
        return invalid("cuMemCreate: size not a non-zero multiple of 2 MiB, or flags");
    }
    not_served("cuMemCreate")
}

/// No handle can have been created through the pool: every handle is invalid.
fn no_handle<T>(what: &str, h: CUmemGenericAllocationHandle) -> R<T> {
    invalid(&format!("{what}: {h:#x} is not an allocation handle"))
}

pub(super) fn release(h: CUmemGenericAllocationHandle) -> R<()> {
    no_handle("cuMemRelease", h)
}

pub(super) fn map(
    _ptr: CUdeviceptr,
    _size: usize,
    _offset: usize,
    h: CUmemGenericAllocationHandle,
    _f: c_ulonglong,
) -> R<()> {
    no_handle("cuMemMap", h)
}

pub(super) fn unmap(ptr: CUdeviceptr, _size: usize) -> R<()> {
    invalid(&format!("cuMemUnmap: {ptr:#x} is not mapped"))
}

pub(super) fn set_access(ptr: CUdeviceptr, _size: usize, desc: *const CUmemAccessDesc, count: usize) -> R<()> {
    if desc.is_null() || count == 0 {
        return invalid("cuMemSetAccess: null or empty descriptor array");
    }
    invalid(&format!("cuMemSetAccess: {ptr:#x} is not mapped"))
}

pub(super) fn get_access(location: CUmemLocation, ptr: CUdeviceptr) -> R<c_ulonglong> {
    location_device(&location)?;
    invalid(&format!("cuMemGetAccess: {ptr:#x} is not mapped"))
}

pub(super) fn properties(h: CUmemGenericAllocationHandle) -> R<CUmemAllocationProp> {
    no_handle("cuMemGetAllocationPropertiesFromHandle", h)
}

pub(super) fn retain(addr: *mut c_void) -> R<CUmemGenericAllocationHandle> {
    invalid(&format!("cuMemRetainAllocationHandle: {addr:?} is not mapped"))
}

pub(super) fn export(
    shareable: *mut c_void,
    h: CUmemGenericAllocationHandle,
    _kind: HandleType,
    _f: c_ulonglong,
) -> R<()> {
    if shareable.is_null() {
        return invalid("cuMemExportToShareableHandle: null shareableHandle");
    }
    no_handle("cuMemExportToShareableHandle", h)
}

pub(super) fn import(_os: *mut c_void, kind: HandleType) -> R<CUmemGenericAllocationHandle> {
    if kind.0 as u32 != POSIX_FD {
        return invalid("cuMemImportFromShareableHandle: only POSIX file descriptors");
    }
    not_served("cuMemImportFromShareableHandle")
}
