//! NVML: the pool's devices as the tenant sees them (total memory = the quota), from the
//! hello's device list, with memory and utilization asked of the daemon. A daemon that
//! cannot be reached is NVML_ERROR_DRIVER_NOT_LOADED at init; one that went away later is
//! NVML_ERROR_GPU_IS_LOST. PCI identity is the address `cuDeviceGetPCIBusId` prints.
//!
//! Running compute processes are the caller's own process alone: listed on a device once
//! it holds a context there, with the bytes of its allocations on that device (as this
//! process recorded them: `cuMemAlloc*`, pools, accessible VMM mappings). Other processes
//! are never listed, not even the same tenant's: the daemon's pids are in its own pid
//! namespace, not necessarily the caller's, and another tenant's must not leak at all.
//! NVLink, fabric and peer-to-peer queries: [`links`].

pub(super) mod links;

use crate::client::{self, Client};
use gpupool_abi::nvml::{PciAddress, Process, Refused};
use gpupool_protocol::Request;
use gpupool_protocol::ops::{Answer, DeviceInfo, answer};
use gpupool_shim::cuda::CUdevice_attribute as A;
use gpupool_shim::cuda::CUresult;
use gpupool_shim::nvml::{
    nvmlDevice_t, nvmlMemory_t, nvmlMemory_v2_t, nvmlPciInfo_t, nvmlProcessInfo_t, nvmlProcessInfo_v1_t,
    nvmlProcessInfo_v2_t, nvmlReturn_t as R, nvmlUtilization_t,
};
use std::os::raw::{c_char, c_int, c_uint};
use std::sync::Mutex;

type NResult<T> = Result<T, R>;

static INIT_COUNT: Mutex<u32> = Mutex::new(0);

fn map(e: CUresult) -> R {
    match e {
        CUresult::CUDA_ERROR_NOT_INITIALIZED => R::NVML_ERROR_DRIVER_NOT_LOADED,
        CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE => R::NVML_ERROR_GPU_IS_LOST,
        CUresult::CUDA_ERROR_INVALID_VALUE | CUresult::CUDA_ERROR_INVALID_DEVICE => R::NVML_ERROR_INVALID_ARGUMENT,
        CUresult::CUDA_ERROR_NOT_SUPPORTED => R::NVML_ERROR_NOT_SUPPORTED,
        _ => R::NVML_ERROR_UNKNOWN,
    }
}

/// A refused call's status code, after the log line saying why (with `GPUPOOL_LOG`).
fn refused(r: Refused) -> R {
    let text = gpupool_abi::errors::nvml_description(r.code).to_string_lossy();
    crate::util::log(&format!("NVML {text} ({}): {}", r.code.0, r.why));
    r.code
}

fn require_init() -> NResult<()> {
    if *INIT_COUNT.lock().unwrap_or_else(|e| e.into_inner()) == 0 { Err(R::NVML_ERROR_UNINITIALIZED) } else { Ok(()) }
}

/// Runs `f` with the client and its connection (after nvmlInit).
fn with<T>(f: impl FnOnce(&mut Client) -> Result<T, CUresult>) -> NResult<T> {
    require_init()?;
    client::call(f).map_err(map)
}

/// A management request about device `ordinal` (of the one list), to the daemon that
/// serves it, in that daemon's numbering.
fn mgmt_call<A: Answer>(c: &mut Client, ordinal: u32, op: impl FnOnce(u32) -> Request) -> Result<A, CUresult> {
    let (ep, local) = c.nvml_routes.get(ordinal as usize).copied().ok_or(CUresult::CUDA_ERROR_INVALID_DEVICE)?;
    c.conn_at(ep)?.ask(op(local))
}

fn devices() -> NResult<Vec<DeviceInfo>> {
    with(|c| Ok(c.nvml_list()?.to_vec()))
}

fn write_str(buf: *mut c_char, len: c_uint, text: &str) -> NResult<()> {
    if buf.is_null() {
        return Err(R::NVML_ERROR_INVALID_ARGUMENT);
    }
    if (len as usize) < text.len() + 1 {
        return Err(R::NVML_ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: the caller provides `len` >= text.len() + 1 writable bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
        *buf.add(text.len()) = 0;
    }
    Ok(())
}

/// Handles are addresses in a range no CUDA handle of ours uses, 16 apart per ordinal.
const NVML_HANDLE_BASE: u64 = 0x7e70_0000_0000;

fn handle_of(ordinal: usize) -> nvmlDevice_t {
    (NVML_HANDLE_BASE + 16 * ordinal as u64) as nvmlDevice_t
}

pub(super) fn device(h: nvmlDevice_t) -> NResult<DeviceInfo> {
    let off = (h as u64).checked_sub(NVML_HANDLE_BASE).ok_or(R::NVML_ERROR_INVALID_ARGUMENT)?;
    if off % 16 != 0 {
        return Err(R::NVML_ERROR_INVALID_ARGUMENT);
    }
    devices()?.into_iter().nth((off / 16) as usize).ok_or(R::NVML_ERROR_INVALID_ARGUMENT)
}

pub(super) fn init() -> NResult<()> {
    init_with_flags(0)
}

pub(super) fn init_with_flags(flags: c_uint) -> NResult<()> {
    let n = client::call(|c| Ok(c.nvml_list()?.len())).map_err(map)?;
    if n == 0 && flags & gpupool_shim::nvml::NVML_INIT_FLAG_NO_GPUS == 0 {
        return Err(R::NVML_ERROR_NOT_FOUND);
    }
    *INIT_COUNT.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    Ok(())
}

pub(super) fn shutdown() -> NResult<()> {
    let mut n = INIT_COUNT.lock().unwrap_or_else(|e| e.into_inner());
    if *n == 0 {
        return Err(R::NVML_ERROR_UNINITIALIZED);
    }
    *n -= 1;
    Ok(())
}

/// Returns a string, not a status, so it is written here rather than as a table line.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlErrorString(result: R) -> *const c_char {
    gpupool_abi::errors::nvml_description(result).as_ptr()
}

fn cuda_version() -> NResult<i32> {
    with(|c| {
        c.device_list()?;
        Ok(c.driver_version as i32)
    })
}

pub(super) fn driver_version(version: *mut c_char, length: c_uint) -> NResult<()> {
    write_str(version, length, gpupool_abi::identity::driver_branch(cuda_version()?))
}

pub(super) fn nvml_version(version: *mut c_char, length: c_uint) -> NResult<()> {
    let v = cuda_version()?;
    write_str(version, length, &format!("{}.{}", v / 1000, gpupool_abi::identity::driver_branch(v)))
}

pub(super) fn cuda_driver_version() -> NResult<c_int> {
    cuda_version()
}

pub(super) fn count() -> NResult<c_uint> {
    Ok(devices()?.len() as c_uint)
}

pub(super) fn handle_by_index(index: c_uint) -> NResult<nvmlDevice_t> {
    if index as usize >= devices()?.len() {
        return Err(R::NVML_ERROR_INVALID_ARGUMENT);
    }
    Ok(handle_of(index as usize))
}

pub(super) fn handle_by_uuid(uuid: &str) -> NResult<nvmlDevice_t> {
    let want = uuid.to_ascii_lowercase();
    let i = devices()?
        .iter()
        .position(|d| gpupool_abi::identity::uuid_string(&d.uuid).to_ascii_lowercase() == want)
        .ok_or(R::NVML_ERROR_NOT_FOUND)?;
    Ok(handle_of(i))
}

/// The index doubles as the minor number.
pub(super) fn index(dev: nvmlDevice_t) -> NResult<c_uint> {
    Ok(device(dev)?.ordinal as c_uint)
}

pub(super) fn name(dev: nvmlDevice_t, name: *mut c_char, length: c_uint) -> NResult<()> {
    write_str(name, length, &device(dev)?.name)
}

pub(super) fn uuid(dev: nvmlDevice_t, uuid: *mut c_char, length: c_uint) -> NResult<()> {
    write_str(uuid, length, &gpupool_abi::identity::uuid_string(&device(dev)?.uuid))
}

/// (total, free) as the tenant sees them.
fn mem_info(dev: nvmlDevice_t) -> NResult<(u64, u64)> {
    let d = device(dev)?;
    with(|c| {
        let answer::MemInfo { free, total } = mgmt_call(c, d.ordinal, |device| Request::MgmtMemoryInfo { device })?;
        Ok((total, free.min(total)))
    })
}

pub(super) fn memory_info(dev: nvmlDevice_t) -> NResult<nvmlMemory_t> {
    let (total, free) = mem_info(dev)?;
    Ok(nvmlMemory_t { total, free, used: total - free })
}

/// The caller fills in `version` first, so the struct is read, then written.
pub(super) fn memory_info_v2(dev: nvmlDevice_t, memory: *mut nvmlMemory_v2_t) -> NResult<()> {
    let version = crate::api::export::read::<_, R>(memory.cast_const())?.version;
    let expected = (std::mem::size_of::<nvmlMemory_v2_t>() as u32) | (2 << 24);
    if version != expected {
        return Err(R::NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    }
    let (total, free) = mem_info(dev)?;
    crate::api::export::put(memory, nvmlMemory_v2_t { version, total, reserved: 0, free, used: total - free });
    Ok(())
}

pub(super) fn utilization(dev: nvmlDevice_t) -> NResult<nvmlUtilization_t> {
    let d = device(dev)?;
    with(|c| {
        let answer::Utilization { gpu_percent, memory_percent } =
            mgmt_call(c, d.ordinal, |device| Request::MgmtUtilization { device })?;
        Ok(nvmlUtilization_t { gpu: gpu_percent, memory: memory_percent })
    })
}

/// Where `d` sits on the PCI bus, from its attributes.
fn pci_address(d: &DeviceInfo) -> PciAddress {
    let a = |x: A| crate::api::device::attribute(d, x.0).unwrap_or(0) as u32;
    PciAddress {
        domain: a(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
        bus: a(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
        device: a(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
    }
}

pub(super) fn handle_by_pci_bus_id(bus_id: &str) -> NResult<nvmlDevice_t> {
    let list = devices()?;
    let at = gpupool_abi::nvml::parse_bus_id(bus_id).ok_or_else(|| {
        refused(Refused { code: R::NVML_ERROR_INVALID_ARGUMENT, why: format!("PCI bus id {bus_id:?}") })
    })?;
    let i = list.iter().position(|d| pci_address(d) == at).ok_or_else(|| {
        refused(Refused { code: R::NVML_ERROR_NOT_FOUND, why: format!("no device at PCI bus id {bus_id:?}") })
    })?;
    Ok(handle_of(i))
}

pub(super) fn pci_info(dev: nvmlDevice_t) -> NResult<nvmlPciInfo_t> {
    Ok(gpupool_abi::nvml::pci_info(pci_address(&device(dev)?)))
}

/// This process on NVML's device `ordinal` (see the module's doc).
fn own_process_on(ordinal: u32) -> NResult<Vec<Process>> {
    with(|c| {
        // Contexts name CUDA's numbering, which CUDA_VISIBLE_DEVICES may have narrowed.
        let route = c.nvml_routes.get(ordinal as usize).copied();
        let Some(ordinal) = c.routes.iter().position(|&r| Some(r) == route).map(|i| i as u32) else {
            return Ok(Vec::new());
        };
        let on_device = |ctx: &u64| c.reg.ctxs.get(ctx).is_some_and(|x| x.device == ordinal);
        let has_context = c.reg.ctxs.values().any(|x| x.device == ordinal);
        let used_bytes: u64 = c.reg.allocs.values().filter(|(_, ctx)| on_device(ctx)).map(|(size, _)| size).sum();
        Ok(if has_context || used_bytes > 0 {
            vec![Process { pid: std::process::id(), used_bytes }]
        } else {
            Vec::new()
        })
    })
}

fn running_processes<T: From<Process>>(dev: nvmlDevice_t, count: *mut c_uint, infos: *mut T) -> NResult<()> {
    let procs = own_process_on(device(dev)?.ordinal)?;
    // SAFETY: NVML's contract: `count` and `*count` elements of `infos` are the caller's.
    unsafe { gpupool_abi::nvml::write_processes(count, infos, &procs) }.map_err(refused)
}

pub(super) fn processes_v1(dev: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_v1_t) -> NResult<()> {
    running_processes(dev, count, infos)
}

pub(super) fn processes_v2(dev: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_v2_t) -> NResult<()> {
    running_processes(dev, count, infos)
}

pub(super) fn processes_v3(dev: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_t) -> NResult<()> {
    running_processes(dev, count, infos)
}
