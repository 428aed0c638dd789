//! Virtual memory management through the pool: arguments are checked here as the driver
//! checks them, the granularity is answered here (2 MiB, NVIDIA's and the simulator's), and
//! every other call is forwarded to the daemon (pool-daemon/src/daemon/vmm.rs), which counts
//! physical memory in the tenant's quota at `cuMemCreate` and checks that every handle and
//! address is the session's.
//!
//! - Handles are the daemon's ids with their endpoint ([`client::Kind::Mem`]); address calls go
//!   to the daemon of the calling thread's current context.
//! - The daemon answers every map, unmap and access change with the reservation's accessible
//!   runs; they are recorded as allocations of the context that reserved the range, so copies,
//!   memsets, `cuMemGetAddressRange` and `cuPointerGetAttribute` treat them as the simulator
//!   does (a run of adjacent accessible mappings is one allocation).
//! - A shareable handle is a sealed memfd holding [`EXPORT_MAGIC`] and the daemon's 128-bit
//!   secret for the allocation: pass it to another process of the same tenant (SCM_RIGHTS,
//!   `pidfd_getfd`), which imports it. Another tenant's import is refused by the daemon. The
//!   export stays valid while the allocation lives (some process holds a handle or a mapping),
//!   not while the descriptor is open, as it would with a real driver's descriptor.

use crate::client::{self, Client, Kind};
use crate::util::{R, log, out};
use gpupool_protocol::ops::{MemAccess, MemHandleId, answer};
use gpupool_protocol::{DevicePtr, Request};
use gpupool_shim::cuda::{
    CUdeviceptr, CUmemAccessDesc, CUmemAllocationGranularity_flags as Gran, CUmemAllocationHandleType as HandleType,
    CUmemAllocationProp, CUmemAllocationType, CUmemGenericAllocationHandle, CUmemLocation, CUmemLocationType, CUresult,
};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::raw::{c_int, c_ulonglong, c_void};

/// Minimum and recommended granularity, as on NVIDIA GPUs and the simulator.
pub const GRANULARITY: usize = 2 << 20;
const POSIX_FD: u32 = HandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0;
/// The first bytes of an exported descriptor; the daemon's secret follows.
pub const EXPORT_MAGIC: &[u8; 8] = b"GPVMMEX1";

fn invalid<T>(why: &str) -> R<T> {
    log(why);
    Err(CUresult::CUDA_ERROR_INVALID_VALUE)
}

/// A device location's ordinal (of the one device list), checked.
fn location_device(c: &mut Client, loc: &CUmemLocation) -> R<i32> {
    if loc.type_ != CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE {
        return invalid("memory location is not CU_MEM_LOCATION_TYPE_DEVICE");
    }
    c.device(loc.id).map(|_| loc.id)
}

fn check_prop(c: &mut Client, p: &CUmemAllocationProp) -> R<i32> {
    if p.type_ != CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED {
        return invalid("allocation type is not CU_MEM_ALLOCATION_TYPE_PINNED");
    }
    let ordinal = location_device(c, &p.location)?;
    if p.requestedHandleTypes.0 & !POSIX_FD != 0 {
        log("requested handle types other than POSIX file descriptors");
        return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
    }
    Ok(ordinal)
}

pub(super) fn granularity(prop: CUmemAllocationProp, option: Gran) -> R<usize> {
    client::call(|c| check_prop(c, &prop))?;
    match option {
        Gran::CU_MEM_ALLOC_GRANULARITY_MINIMUM | Gran::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED => Ok(GRANULARITY),
        _ => invalid("unknown granularity option"),
    }
}

fn aligned(v: usize) -> bool {
    v.is_multiple_of(GRANULARITY)
}

/// The endpoint and the daemon's id of an allocation handle.
fn parse(h: CUmemGenericAllocationHandle) -> R<(usize, MemHandleId)> {
    if h & 0xff != Kind::Mem as u64 {
        return invalid(&format!("{h:#x} is not an allocation handle"));
    }
    Ok((client::endpoint_of(h), MemHandleId((h >> 8) & ((1 << 48) - 1))))
}

/// Records the reservation's accessible runs as allocations of the context that reserved it.
fn publish(c: &mut Client, ep: usize, runs: answer::MemRuns) {
    let (base, size) = (runs.base.0, runs.size);
    let owner = c.reg.reserved.get(&(ep, base)).map(|&(_, ctx)| ctx).or_else(client::stack_top).unwrap_or(0);
    c.reg.allocs.retain(|&(e, p), _| e != ep || p < base || p >= base + size);
    for r in runs.runs {
        c.reg.allocs.insert((ep, r.base.0), (r.size, owner));
    }
}

pub(super) fn address_reserve(size: usize, align: usize, addr: CUdeviceptr, flags: c_ulonglong) -> R<CUdeviceptr> {
    client::call(|c| {
        let (h, ctx, _) = c.current()?;
        if size == 0 || !aligned(size) || (align != 0 && !align.is_power_of_two()) || flags != 0 {
            return invalid("cuMemAddressReserve: size not a multiple of 2 MiB, alignment not a power of 2, or flags");
        }
        let req = Request::MemAddressReserve { ctx, size: size as u64, align: align as u64, addr: DevicePtr(addr) };
        let answer::MemPtr { ptr } = c.live()?.ask(req)?;
        c.reg.reserved.insert((client::endpoint_of(h), ptr.0), (size as u64, h));
        Ok(ptr.0)
    })
}

pub(super) fn address_free(ptr: CUdeviceptr, size: usize) -> R<()> {
    client::call(|c| {
        c.live()?.call_ok(Request::MemAddressFree { ptr: DevicePtr(ptr), size: size as u64 })?;
        c.reg.reserved.remove(&(client::current_endpoint(), ptr));
        Ok(())
    })
}

pub(super) fn create(size: usize, prop: CUmemAllocationProp, flags: c_ulonglong) -> R<CUmemGenericAllocationHandle> {
    client::call(|c| {
        c.current()?;
        let ordinal = check_prop(c, &prop)?;
        if size == 0 || !aligned(size) || flags != 0 {
            return invalid("cuMemCreate: size not a non-zero multiple of 2 MiB, or flags");
        }
        let (ep, device) = c.route(ordinal)?;
        let req = Request::MemCreate { device, size: size as u64, handle_types: prop.requestedHandleTypes.0 };
        let answer::MemHandle { handle } = c.conn_at(ep)?.ask(req)?;
        client::make(Kind::Mem, ep, handle.0)
    })
}

pub(super) fn release(h: CUmemGenericAllocationHandle) -> R<()> {
    let (_, handle) = parse(h)?;
    client::call(|c| c.conn_of(h)?.call_ok(Request::MemRelease { handle }))
}

pub(super) fn map(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    h: CUmemGenericAllocationHandle,
    flags: c_ulonglong,
) -> R<()> {
    let (ep, handle) = parse(h)?;
    if flags != 0 {
        return invalid("cuMemMap: flags must be 0");
    }
    client::call(|c| {
        let req = Request::MemMap { ptr: DevicePtr(ptr), size: size as u64, offset: offset as u64, handle };
        let runs = c.conn_of(h)?.ask(req)?;
        publish(c, ep, runs);
        Ok(())
    })
}

pub(super) fn unmap(ptr: CUdeviceptr, size: usize) -> R<()> {
    client::call(|c| {
        let runs = c.live()?.ask(Request::MemUnmap { ptr: DevicePtr(ptr), size: size as u64 })?;
        publish(c, client::current_endpoint(), runs);
        Ok(())
    })
}

pub(super) fn set_access(ptr: CUdeviceptr, size: usize, desc: *const CUmemAccessDesc, count: usize) -> R<()> {
    if desc.is_null() || count == 0 {
        return invalid("cuMemSetAccess: null or empty descriptor array");
    }
    // SAFETY: the caller passes `count` descriptors at `desc` (non-null, checked above).
    let descs = unsafe { std::slice::from_raw_parts(desc, count) };
    client::call(|c| {
        let ep = client::current_endpoint();
        let mut access = Vec::with_capacity(count);
        for d in descs {
            let ordinal = location_device(c, &d.location)?;
            let (dep, device) = c.route(ordinal)?;
            if dep != ep {
                return invalid("cuMemSetAccess: a device of another daemon than the memory's");
            }
            access.push(MemAccess { device, flags: d.flags.0 });
        }
        let runs = c.live()?.ask(Request::MemSetAccess { ptr: DevicePtr(ptr), size: size as u64, access })?;
        publish(c, ep, runs);
        Ok(())
    })
}

pub(super) fn get_access(location: CUmemLocation, ptr: CUdeviceptr) -> R<c_ulonglong> {
    client::call(|c| {
        let ordinal = location_device(c, &location)?;
        let (_, device) = c.route(ordinal)?;
        let answer::MemAccessFlags { flags } = c.live()?.ask(Request::MemGetAccess { device, ptr: DevicePtr(ptr) })?;
        Ok(flags.into())
    })
}

pub(super) fn properties(h: CUmemGenericAllocationHandle) -> R<CUmemAllocationProp> {
    let (ep, handle) = parse(h)?;
    client::call(|c| {
        let answer::MemProperties { device, handle_types, .. } =
            c.conn_of(h)?.ask(Request::MemGetAllocationProperties { handle })?;
        let ordinal = c.routes.iter().position(|&r| r == (ep, device)).ok_or(CUresult::CUDA_ERROR_INVALID_DEVICE)?;
        Ok(CUmemAllocationProp {
            type_: CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            requestedHandleTypes: HandleType(handle_types as _),
            location: CUmemLocation { type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: ordinal as i32 },
            ..Default::default()
        })
    })
}

pub(super) fn retain(addr: *mut c_void) -> R<CUmemGenericAllocationHandle> {
    client::call(|c| {
        let req = Request::MemRetainAllocationHandle { ptr: DevicePtr(addr as u64) };
        let answer::MemHandle { handle } = c.live()?.ask(req)?;
        client::make(Kind::Mem, client::current_endpoint(), handle.0)
    })
}

/// A sealed memfd holding `magic` and `secret`: the descriptor the program owns (`what`
/// names the caller in log lines).
pub(super) fn sealed_descriptor(magic: &[u8; 8], secret: &[u8; 16], what: &str) -> R<c_int> {
    // SAFETY: a NUL-terminated name; the kernel returns a new descriptor or -1.
    let raw = unsafe { libc::memfd_create(c"gpupool-export".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if raw < 0 {
        log(&format!("{what}: memfd_create: {}", std::io::Error::last_os_error()));
        return Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    }
    // SAFETY: `raw` is the descriptor just created, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut bytes = magic.to_vec();
    bytes.extend_from_slice(secret);
    let mut file = std::fs::File::from(fd);
    std::io::Write::write_all(&mut file, &bytes).map_err(|e| {
        log(&format!("{what}: writing the descriptor: {e}"));
        CUresult::CUDA_ERROR_OUT_OF_MEMORY
    })?;
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on our own open descriptor with an integer argument.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        log(&format!("{what}: sealing: {}", std::io::Error::last_os_error()));
        return Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
    }
    Ok(file.into_raw_fd())
}

pub(super) fn export(
    shareable: *mut c_void,
    h: CUmemGenericAllocationHandle,
    kind: HandleType,
    flags: c_ulonglong,
) -> R<()> {
    if shareable.is_null() {
        return invalid("cuMemExportToShareableHandle: null shareableHandle");
    }
    if kind.0 != POSIX_FD || flags != 0 {
        return invalid("cuMemExportToShareableHandle: only POSIX file descriptors, flags 0");
    }
    let (_, handle) = parse(h)?;
    let secret = client::call(|c| {
        let answer::MemExported { secret } = c.conn_of(h)?.ask(Request::MemExport { handle, handle_type: POSIX_FD })?;
        Ok(secret)
    })?;
    let fd = sealed_descriptor(EXPORT_MAGIC, &secret, "cuMemExportToShareableHandle")?;
    out(shareable.cast::<c_int>(), fd)
}

/// The secret a descriptor made by [`sealed_descriptor`] with `magic` holds; anything else is
/// not ours to import (`what` names the caller in the log line).
pub(super) fn read_secret(fd: c_int, magic: &[u8; 8], what: &str) -> R<[u8; 16]> {
    let mut buf = [0u8; 32];
    // SAFETY: pread into our own buffer of its length; a bad descriptor fails with -1.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    let want = magic.len() + 16;
    if n != want as isize || &buf[..magic.len()] != magic {
        return invalid(&format!("{what}: descriptor {fd} is not an export of the pool"));
    }
    let mut secret = [0u8; 16];
    secret.copy_from_slice(&buf[magic.len()..want]);
    Ok(secret)
}

pub(super) fn import(os: *mut c_void, kind: HandleType) -> R<CUmemGenericAllocationHandle> {
    if kind.0 != POSIX_FD {
        return invalid("cuMemImportFromShareableHandle: only POSIX file descriptors");
    }
    // For POSIX file descriptors the descriptor travels in the pointer's value.
    let secret = read_secret(os as usize as c_int, EXPORT_MAGIC, "cuMemImportFromShareableHandle")?;
    client::call(|c| {
        c.current()?;
        let answer::MemHandle { handle } = c.live()?.ask(Request::MemImport { secret })?;
        client::make(Kind::Mem, client::current_endpoint(), handle.0)
    })
}
