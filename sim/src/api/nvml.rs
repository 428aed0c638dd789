//! NVML: the same simulated devices, seen through the management library.
//! Memory figures are the devices' live accounting; utilization is measured from
//! what the stream workers really executed over the last second. PCI identity is the
//! address `cuDeviceGetPCIBusId` prints. Running compute processes: the simulated
//! devices belong to the process that loaded the simulator (another process has its
//! own), so the list is this process, with the device memory it holds there, once it
//! has a context or memory on the device, and empty before. NVLink, fabric and
//! peer-to-peer queries are in [`super::nvml_links`].

use crate::device::Device;
use crate::driver::state;
use crate::utilization::Channel;
use gpupool_abi::nvml::{Process, Refused};
use gpupool_shim::nvml::{
    nvmlDevice_t, nvmlMemory_t, nvmlMemory_v2_t, nvmlPciInfo_t, nvmlProcessInfo_t, nvmlProcessInfo_v1_t,
    nvmlProcessInfo_v2_t, nvmlReturn_t as R, nvmlUtilization_t,
};
use std::os::raw::{c_char, c_int, c_uint};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::Mutex;

pub(super) type NResult<T> = Result<T, R>;

static INIT_COUNT: Mutex<u32> = Mutex::new(0);

pub(super) fn nvml_entry(body: impl FnOnce() -> NResult<()>) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => R::NVML_SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => R::NVML_ERROR_UNKNOWN,
    }
}

/// A refused call's status code, after the log line saying why (with `GPUPOOL_SIM_LOG`).
pub(super) fn refused(r: Refused) -> R {
    if crate::error::log_enabled() {
        eprintln!(
            "gpupool-sim: NVML {} ({}): {}",
            gpupool_abi::errors::nvml_description(r.code).to_string_lossy(),
            r.code.0,
            r.why
        );
    }
    r.code
}

pub(super) fn require_init() -> NResult<()> {
    if *INIT_COUNT.lock().unwrap_or_else(|e| e.into_inner()) == 0 { Err(R::NVML_ERROR_UNINITIALIZED) } else { Ok(()) }
}

pub(super) fn nout<T>(ptr: *mut T, v: T) -> NResult<()> {
    if ptr.is_null() {
        return Err(R::NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-null; NVML's contract makes the caller responsible for its validity.
    unsafe { ptr.write_unaligned(v) };
    Ok(())
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

/// NVML device handles are the device ordinal in the handle range of
/// [`crate::handles`], so a CUDA handle is never mistaken for one.
const NVML_HANDLE_BASE: u64 = 0x7e60_0000_0000;

pub(super) fn handle_of(d: &Device) -> nvmlDevice_t {
    (NVML_HANDLE_BASE + 16 * d.ordinal as u64) as nvmlDevice_t
}

pub(super) fn device(h: nvmlDevice_t) -> NResult<&'static Arc<Device>> {
    require_init()?;
    let off = (h as u64).checked_sub(NVML_HANDLE_BASE).ok_or(R::NVML_ERROR_INVALID_ARGUMENT)?;
    if off % 16 != 0 {
        return Err(R::NVML_ERROR_INVALID_ARGUMENT);
    }
    let d = state().devices.get((off / 16) as usize).ok_or(R::NVML_ERROR_INVALID_ARGUMENT)?;
    not_lost(d)
}

/// Fault injection: `GPUPOOL_SIM_LOST` names a file listing (comma- or line-separated) the
/// ordinals of devices that have fallen off the bus now. It is read at every NVML device query,
/// so a device can be lost and found again under a running process, as a GPU that drops off
/// the PCIe bus and is brought back. A lost device answers `NVML_ERROR_GPU_IS_LOST`, as NVML
/// documents for `nvmlDeviceGetHandleByIndex_v2` and the device queries; only NVML sees it
/// (CUDA calls on it still compute).
fn not_lost(d: &'static Arc<Device>) -> NResult<&'static Arc<Device>> {
    static FILE: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let Some(path) = FILE.get_or_init(|| std::env::var_os("GPUPOOL_SIM_LOST").map(Into::into)) else { return Ok(d) };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    if text.split([',', '\n']).any(|s| s.trim().parse::<i32>() == Ok(d.ordinal)) {
        return Err(refused(Refused {
            code: R::NVML_ERROR_GPU_IS_LOST,
            why: format!("device {} is listed in {} (GPUPOOL_SIM_LOST)", d.ordinal, path.display()),
        }));
    }
    Ok(d)
}

fn init(flags: c_uint) -> NResult<()> {
    let d = state();
    if let Some(e) = &d.config_error {
        eprintln!("gpupool-sim: configuration rejected: {e}");
        return Err(R::NVML_ERROR_UNKNOWN);
    }
    let no_gpus_ok = flags & gpupool_shim::nvml::NVML_INIT_FLAG_NO_GPUS != 0;
    if d.devices.is_empty() && !no_gpus_ok {
        return Err(R::NVML_ERROR_NOT_FOUND);
    }
    *INIT_COUNT.lock().unwrap_or_else(|e| e.into_inner()) += 1;
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlInit_v2() -> R {
    nvml_entry(|| init(0))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlInitWithFlags(flags: c_uint) -> R {
    nvml_entry(|| init(flags))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlShutdown() -> R {
    nvml_entry(|| {
        let mut n = INIT_COUNT.lock().unwrap_or_else(|e| e.into_inner());
        if *n == 0 {
            return Err(R::NVML_ERROR_UNINITIALIZED);
        }
        *n -= 1;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlErrorString(result: R) -> *const c_char {
    gpupool_abi::errors::nvml_description(result).as_ptr()
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> R {
    nvml_entry(|| {
        require_init()?;
        write_str(version, length, gpupool_abi::identity::driver_branch(state().config.driver_version))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> R {
    nvml_entry(|| {
        require_init()?;
        let v = state().config.driver_version;
        write_str(version, length, &format!("{}.{}", v / 1000, gpupool_abi::identity::driver_branch(v)))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) -> R {
    nvml_entry(|| {
        require_init()?;
        nout(version, state().config.driver_version)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> R {
    // SAFETY: same contract as the v1 entry point.
    unsafe { nvmlSystemGetCudaDriverVersion(version) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> R {
    nvml_entry(|| {
        require_init()?;
        nout(count, state().devices.len() as c_uint)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, dev: *mut nvmlDevice_t) -> R {
    nvml_entry(|| {
        require_init()?;
        let d = state().devices.get(index as usize).ok_or(R::NVML_ERROR_INVALID_ARGUMENT)?;
        nout(dev, handle_of(not_lost(d)?))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, dev: *mut nvmlDevice_t) -> R {
    nvml_entry(|| {
        require_init()?;
        if uuid.is_null() {
            return Err(R::NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null, NUL-terminated per NVML's contract.
        let want = unsafe { std::ffi::CStr::from_ptr(uuid) }.to_string_lossy().to_ascii_lowercase();
        let d = state()
            .devices
            .iter()
            .find(|d| d.uuid_string().to_ascii_lowercase() == want)
            .ok_or(R::NVML_ERROR_NOT_FOUND)?;
        nout(dev, handle_of(not_lost(d)?))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetIndex(dev: nvmlDevice_t, index: *mut c_uint) -> R {
    nvml_entry(|| nout(index, device(dev)?.ordinal as c_uint))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(dev: nvmlDevice_t, minor: *mut c_uint) -> R {
    nvml_entry(|| nout(minor, device(dev)?.ordinal as c_uint))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(dev: nvmlDevice_t, name: *mut c_char, length: c_uint) -> R {
    nvml_entry(|| write_str(name, length, &device(dev)?.cfg.name))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(dev: nvmlDevice_t, uuid: *mut c_char, length: c_uint) -> R {
    nvml_entry(|| write_str(uuid, length, &device(dev)?.uuid_string()))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(dev: nvmlDevice_t, memory: *mut nvmlMemory_t) -> R {
    nvml_entry(|| {
        let d = device(dev)?;
        let (total, used) = (d.total_memory(), d.used_memory());
        nout(memory, nvmlMemory_t { total, free: total - used, used })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(dev: nvmlDevice_t, memory: *mut nvmlMemory_v2_t) -> R {
    nvml_entry(|| {
        let d = device(dev)?;
        if memory.is_null() {
            return Err(R::NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null; the caller fills in `version` before the call.
        let version = unsafe { (*memory).version };
        let expected = (std::mem::size_of::<nvmlMemory_v2_t>() as u32) | (2 << 24);
        if version != expected {
            return Err(R::NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let (total, used) = (d.total_memory(), d.used_memory());
        nout(memory, nvmlMemory_v2_t { version, total, reserved: 0, free: total - used, used })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(dev: nvmlDevice_t, util: *mut nvmlUtilization_t) -> R {
    nvml_entry(|| {
        let d = device(dev)?;
        nout(util, nvmlUtilization_t { gpu: d.busy.percent(Channel::Kernel), memory: d.busy.percent(Channel::Memory) })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(bus_id: *const c_char, dev: *mut nvmlDevice_t) -> R {
    nvml_entry(|| {
        require_init()?;
        let invalid = |why: String| refused(Refused { code: R::NVML_ERROR_INVALID_ARGUMENT, why });
        if bus_id.is_null() || dev.is_null() {
            return Err(invalid("NULL PCI bus id or device pointer".into()));
        }
        // SAFETY: non-null, NUL-terminated per NVML's contract.
        let text = unsafe { std::ffi::CStr::from_ptr(bus_id) }.to_string_lossy();
        let at = gpupool_abi::nvml::parse_bus_id(&text).ok_or_else(|| invalid(format!("PCI bus id {text:?}")))?;
        let d = state().devices.iter().find(|d| d.pci_address() == at).ok_or_else(|| {
            refused(Refused { code: R::NVML_ERROR_NOT_FOUND, why: format!("no device at PCI bus id {text:?}") })
        })?;
        nout(dev, handle_of(d))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(dev: nvmlDevice_t, pci: *mut nvmlPciInfo_t) -> R {
    nvml_entry(|| nout(pci, gpupool_abi::nvml::pci_info(device(dev)?.pci_address())))
}

/// This process on `d`, if it has a context or memory there (see the module's doc).
fn processes_on(d: &Device) -> Vec<Process> {
    let has_context = state().contexts.any(|c| c.device.ordinal == d.ordinal && !c.is_destroyed());
    let used_bytes = d.used_memory();
    if has_context || used_bytes > 0 { vec![Process { pid: std::process::id(), used_bytes }] } else { Vec::new() }
}

fn running_processes<T: From<Process>>(dev: nvmlDevice_t, count: *mut c_uint, infos: *mut T) -> R {
    nvml_entry(|| {
        let procs = processes_on(device(dev)?);
        // SAFETY: NVML's contract: `count` and `*count` elements of `infos` are the caller's.
        unsafe { gpupool_abi::nvml::write_processes(count, infos, &procs) }.map_err(refused)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses(
    dev: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_v1_t,
) -> R {
    running_processes(dev, count, infos)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    dev: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_v2_t,
) -> R {
    running_processes(dev, count, infos)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    dev: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> R {
    running_processes(dev, count, infos)
}
