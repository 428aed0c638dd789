//! Virtual memory management exports (`cuMemAddressReserve`, `cuMemCreate`, `cuMemMap`,
//! `cuMemSetAccess`, shareable handles...), over [`crate::memory::vmm`]. Addresses are
//! found in the context whose window holds them, whichever context is current, since
//! a reserved range belongs to the process on a GPU.

use super::{out, read};
use crate::context::{Context, current, lookup};
use crate::driver::{Driver, initialized};
use crate::error::{CuResult, cuda_entry, fail};
use crate::memory::vmm::{self, GRANULARITY};
use crate::memory::window_owner;
use gpupool_shim::cuda::{
    CUdeviceptr, CUmemAccess_flags as Access, CUmemAccessDesc, CUmemAllocationGranularity_flags as Gran,
    CUmemAllocationHandleType as HandleType, CUmemAllocationProp, CUmemAllocationType, CUmemGenericAllocationHandle,
    CUmemLocation, CUmemLocationType, CUresult,
};
use std::os::raw::{c_int, c_ulonglong, c_void};
use std::sync::Arc;

const POSIX_FD: u32 = HandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0;

/// The device a `CUmemLocation` names; only device locations hold device memory.
fn location_device(driver: &Driver, loc: &CUmemLocation) -> CuResult<i32> {
    if loc.type_ != CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("location type {} is not CU_MEM_LOCATION_TYPE_DEVICE", loc.type_.0)
        });
    }
    driver.device(loc.id).map(|d| d.ordinal)
}

/// Checks an allocation's properties; returns its device and exportable handle types.
fn check_prop(driver: &Driver, prop: *const CUmemAllocationProp) -> CuResult<(i32, u32)> {
    let p = read(prop, "CUmemAllocationProp")?;
    if p.type_ != CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("allocation type {} is not PINNED", p.type_.0));
    }
    let dev = location_device(driver, &p.location)?;
    let types = p.requestedHandleTypes.0 as u32;
    if types & !POSIX_FD != 0 {
        return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || {
            format!("handle types {types:#x}: only POSIX file descriptors exist on Linux")
        });
    }
    Ok((dev, types))
}

/// The context whose window holds `ptr`.
fn owner(driver: &Driver, ptr: u64, what: &str) -> CuResult<Arc<Context>> {
    match window_owner(ptr) {
        Some(h) => lookup(driver, h),
        None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{what}: {ptr:#x} is not a reserved address")),
    }
}

fn address_reserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    align: usize,
    addr: CUdeviceptr,
    flags: c_ulonglong,
) -> CuResult<()> {
    let ctx = current()?;
    if ptr.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null ptr".into());
    }
    if flags != 0 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("cuMemAddressReserve flags {flags:#x} must be 0"));
    }
    let base = ctx.memory.reserve_range(size as u64, align as u64, addr)?;
    out(ptr, base)
}

fn address_free(ptr: CUdeviceptr, size: usize) -> CuResult<()> {
    let driver = initialized()?;
    owner(driver, ptr, "cuMemAddressFree")?.memory.free_range(ptr, size as u64)
}

fn create(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: c_ulonglong,
) -> CuResult<()> {
    let driver = initialized()?;
    current()?;
    if handle.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null handle".into());
    }
    if flags != 0 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("cuMemCreate flags {flags:#x} must be 0"));
    }
    let (dev, types) = check_prop(driver, prop)?;
    let h = vmm::create(driver.device(dev)?.clone(), size as u64, types)?;
    out(handle, h)
}

fn release(handle: CUmemGenericAllocationHandle) -> CuResult<()> {
    initialized()?;
    vmm::release(handle)
}

fn map(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: c_ulonglong,
) -> CuResult<()> {
    let driver = initialized()?;
    if flags != 0 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("cuMemMap flags {flags:#x} must be 0"));
    }
    let phys = vmm::get(handle)?;
    owner(driver, ptr, "cuMemMap")?.memory.map_range(ptr, size as u64, offset as u64, phys)
}

fn unmap(ptr: CUdeviceptr, size: usize) -> CuResult<()> {
    let driver = initialized()?;
    let ctx = owner(driver, ptr, "cuMemUnmap")?;
    // Queued work addresses the range by value: let it finish before the pages go,
    // as cuMemFree does.
    ctx.drain();
    ctx.memory.unmap_range(ptr, size as u64)
}

fn set_access(ptr: CUdeviceptr, size: usize, desc: *const CUmemAccessDesc, count: usize) -> CuResult<()> {
    let driver = initialized()?;
    if desc.is_null() || count == 0 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null or empty access descriptor array".into());
    }
    // SAFETY: the caller passes `count` descriptors at `desc` (non-null, checked above).
    let descs = unsafe { std::slice::from_raw_parts(desc, count) };
    let mut access = Vec::with_capacity(count);
    for d in descs {
        let dev = location_device(driver, &d.location)?;
        match d.flags {
            Access::CU_MEM_ACCESS_FLAGS_PROT_NONE | Access::CU_MEM_ACCESS_FLAGS_PROT_READWRITE => {}
            Access::CU_MEM_ACCESS_FLAGS_PROT_READ => {
                return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || {
                    "read-only device mappings are not simulated (use PROT_READWRITE)".into()
                });
            }
            other => {
                return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("access flags {} unknown", other.0));
            }
        }
        access.push((dev, d.flags.0));
    }
    owner(driver, ptr, "cuMemSetAccess")?.memory.set_access(ptr, size as u64, &access)
}

fn get_access(flags: *mut c_ulonglong, location: *const CUmemLocation, ptr: CUdeviceptr) -> CuResult<()> {
    let driver = initialized()?;
    if flags.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null flags".into());
    }
    let dev = location_device(driver, &read(location, "CUmemLocation")?)?;
    let f = owner(driver, ptr, "cuMemGetAccess")?.memory.get_access(ptr, dev)?;
    out(flags, f as c_ulonglong)
}

fn granularity(g: *mut usize, prop: *const CUmemAllocationProp, option: Gran) -> CuResult<()> {
    let driver = initialized()?;
    if g.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null granularity".into());
    }
    check_prop(driver, prop)?;
    match option {
        Gran::CU_MEM_ALLOC_GRANULARITY_MINIMUM | Gran::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED => {
            out(g, GRANULARITY as usize)
        }
        other => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("granularity option {} unknown", other.0)),
    }
}

fn properties(prop: *mut CUmemAllocationProp, handle: CUmemGenericAllocationHandle) -> CuResult<()> {
    initialized()?;
    if prop.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null prop".into());
    }
    let p = vmm::get(handle)?;
    let v = CUmemAllocationProp {
        type_: CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: HandleType(p.handle_types as _),
        location: CUmemLocation { type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: p.device.ordinal },
        ..Default::default()
    };
    out(prop, v)
}

fn retain(handle: *mut CUmemGenericAllocationHandle, addr: *mut c_void) -> CuResult<()> {
    let driver = initialized()?;
    if handle.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null handle".into());
    }
    let phys = owner(driver, addr as u64, "cuMemRetainAllocationHandle")?.memory.mapped_at(addr as u64)?;
    out(handle, vmm::retain(&phys))
}

fn export(
    shareable: *mut c_void,
    handle: CUmemGenericAllocationHandle,
    kind: HandleType,
    flags: c_ulonglong,
) -> CuResult<()> {
    initialized()?;
    if shareable.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null shareableHandle".into());
    }
    if flags != 0 || kind.0 != POSIX_FD {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("export as type {} flags {flags:#x}: only POSIX file descriptors, flags 0", kind.0)
        });
    }
    let fd = vmm::export_fd(handle)?;
    out(shareable.cast::<c_int>(), fd)
}

fn import(handle: *mut CUmemGenericAllocationHandle, os_handle: *mut c_void, kind: HandleType) -> CuResult<()> {
    let driver = initialized()?;
    if handle.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null handle".into());
    }
    if kind.0 != POSIX_FD {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("import of handle type {}", kind.0));
    }
    // For POSIX file descriptors the descriptor travels in the pointer's value.
    let fd = os_handle as usize as c_int;
    let h = vmm::import_fd(fd, &driver.devices)?;
    out(handle, h)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    addr: CUdeviceptr,
    flags: c_ulonglong,
) -> CUresult {
    cuda_entry(|| address_reserve(ptr, size, alignment, addr, flags))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult {
    cuda_entry(|| address_free(ptr, size))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: c_ulonglong,
) -> CUresult {
    cuda_entry(|| create(handle, size, prop, flags))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CUresult {
    cuda_entry(|| release(handle))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: c_ulonglong,
) -> CUresult {
    cuda_entry(|| map(ptr, size, offset, handle, flags))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    cuda_entry(|| unmap(ptr, size))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemSetAccess(
    ptr: CUdeviceptr,
    size: usize,
    desc: *const CUmemAccessDesc,
    count: usize,
) -> CUresult {
    cuda_entry(|| set_access(ptr, size, desc, count))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetAccess(
    flags: *mut c_ulonglong,
    location: *const CUmemLocation,
    ptr: CUdeviceptr,
) -> CUresult {
    cuda_entry(|| get_access(flags, location, ptr))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetAllocationGranularity(
    granularity_out: *mut usize,
    prop: *const CUmemAllocationProp,
    option: Gran,
) -> CUresult {
    cuda_entry(|| granularity(granularity_out, prop, option))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetAllocationPropertiesFromHandle(
    prop: *mut CUmemAllocationProp,
    handle: CUmemGenericAllocationHandle,
) -> CUresult {
    cuda_entry(|| properties(prop, handle))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemRetainAllocationHandle(
    handle: *mut CUmemGenericAllocationHandle,
    addr: *mut c_void,
) -> CUresult {
    cuda_entry(|| retain(handle, addr))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemExportToShareableHandle(
    shareable: *mut c_void,
    handle: CUmemGenericAllocationHandle,
    kind: HandleType,
    flags: c_ulonglong,
) -> CUresult {
    cuda_entry(|| export(shareable, handle, kind, flags))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemImportFromShareableHandle(
    handle: *mut CUmemGenericAllocationHandle,
    os_handle: *mut c_void,
    kind: HandleType,
) -> CUresult {
    cuda_entry(|| import(handle, os_handle, kind))
}
