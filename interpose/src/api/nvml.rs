//! NVML: the pool's devices as the tenant sees them (total memory = the quota), from the
//! hello's device list, with memory and utilization asked of the daemon. A daemon that
//! cannot be reached is NVML_ERROR_DRIVER_NOT_LOADED at init; one that went away later is
//! NVML_ERROR_GPU_IS_LOST.

use crate::client::{self, Client};
use gpupool_protocol::Request;
use gpupool_protocol::ops::{Answer, DeviceInfo, answer};
use gpupool_shim::cuda::CUresult;
use gpupool_shim::nvml::{nvmlDevice_t, nvmlMemory_t, nvmlMemory_v2_t, nvmlReturn_t as R, nvmlUtilization_t};
use std::os::raw::{c_char, c_int, c_uint};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

type NResult<T> = Result<T, R>;

static INIT_COUNT: Mutex<u32> = Mutex::new(0);

fn nvml_entry(body: impl FnOnce() -> NResult<()>) -> R {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => R::NVML_SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => R::NVML_ERROR_UNKNOWN,
    }
}

fn map(e: CUresult) -> R {
    match e {
        CUresult::CUDA_ERROR_NOT_INITIALIZED => R::NVML_ERROR_DRIVER_NOT_LOADED,
        CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE => R::NVML_ERROR_GPU_IS_LOST,
        CUresult::CUDA_ERROR_INVALID_VALUE | CUresult::CUDA_ERROR_INVALID_DEVICE => R::NVML_ERROR_INVALID_ARGUMENT,
        CUresult::CUDA_ERROR_NOT_SUPPORTED => R::NVML_ERROR_NOT_SUPPORTED,
        _ => R::NVML_ERROR_UNKNOWN,
    }
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
    let (ep, local) = c.routes.get(ordinal as usize).copied().ok_or(CUresult::CUDA_ERROR_INVALID_DEVICE)?;
    c.conn_at(ep)?.ask(op(local))
}

fn devices() -> NResult<Vec<DeviceInfo>> {
    with(|c| Ok(c.device_list()?.to_vec()))
}

fn nout<T>(ptr: *mut T, v: T) -> NResult<()> {
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

/// Handles are addresses in a range no CUDA handle of ours uses, 16 apart per ordinal.
const NVML_HANDLE_BASE: u64 = 0x7e70_0000_0000;

fn handle_of(ordinal: usize) -> nvmlDevice_t {
    (NVML_HANDLE_BASE + 16 * ordinal as u64) as nvmlDevice_t
}

fn device(h: nvmlDevice_t) -> NResult<DeviceInfo> {
    let off = (h as u64).checked_sub(NVML_HANDLE_BASE).ok_or(R::NVML_ERROR_INVALID_ARGUMENT)?;
    if off % 16 != 0 {
        return Err(R::NVML_ERROR_INVALID_ARGUMENT);
    }
    devices()?.into_iter().nth((off / 16) as usize).ok_or(R::NVML_ERROR_INVALID_ARGUMENT)
}

fn init(flags: c_uint) -> NResult<()> {
    let n = client::call(|c| Ok(c.device_list()?.len())).map_err(map)?;
    if n == 0 && flags & gpupool_shim::nvml::NVML_INIT_FLAG_NO_GPUS == 0 {
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

fn cuda_version() -> NResult<i32> {
    with(|c| {
        c.device_list()?;
        Ok(c.driver_version as i32)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> R {
    nvml_entry(|| write_str(version, length, gpupool_abi::identity::driver_branch(cuda_version()?)))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> R {
    nvml_entry(|| {
        let v = cuda_version()?;
        write_str(version, length, &format!("{}.{}", v / 1000, gpupool_abi::identity::driver_branch(v)))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) -> R {
    nvml_entry(|| nout(version, cuda_version()?))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> R {
    nvml_entry(|| nout(version, cuda_version()?))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> R {
    nvml_entry(|| nout(count, devices()?.len() as c_uint))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, dev: *mut nvmlDevice_t) -> R {
    nvml_entry(|| {
        if index as usize >= devices()?.len() {
            return Err(R::NVML_ERROR_INVALID_ARGUMENT);
        }
        nout(dev, handle_of(index as usize))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, dev: *mut nvmlDevice_t) -> R {
    nvml_entry(|| {
        if uuid.is_null() {
            return Err(R::NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null, NUL-terminated per NVML's contract.
        let want = unsafe { std::ffi::CStr::from_ptr(uuid) }.to_string_lossy().to_ascii_lowercase();
        let i = devices()?
            .iter()
            .position(|d| gpupool_abi::identity::uuid_string(&d.uuid).to_ascii_lowercase() == want)
            .ok_or(R::NVML_ERROR_NOT_FOUND)?;
        nout(dev, handle_of(i))
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
    nvml_entry(|| write_str(name, length, &device(dev)?.name))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(dev: nvmlDevice_t, uuid: *mut c_char, length: c_uint) -> R {
    nvml_entry(|| write_str(uuid, length, &gpupool_abi::identity::uuid_string(&device(dev)?.uuid)))
}

/// (total, free) as the tenant sees them.
fn mem_info(dev: nvmlDevice_t) -> NResult<(u64, u64)> {
    let d = device(dev)?;
    with(|c| {
        let answer::MemInfo { free, total } = mgmt_call(c, d.ordinal, |device| Request::MgmtMemoryInfo { device })?;
        Ok((total, free.min(total)))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(dev: nvmlDevice_t, memory: *mut nvmlMemory_t) -> R {
    nvml_entry(|| {
        if memory.is_null() {
            return Err(R::NVML_ERROR_INVALID_ARGUMENT);
        }
        let (total, free) = mem_info(dev)?;
        nout(memory, nvmlMemory_t { total, free, used: total - free })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(dev: nvmlDevice_t, memory: *mut nvmlMemory_v2_t) -> R {
    nvml_entry(|| {
        if memory.is_null() {
            return Err(R::NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null; the caller fills in `version` before the call.
        let version = unsafe { (*memory).version };
        let expected = (std::mem::size_of::<nvmlMemory_v2_t>() as u32) | (2 << 24);
        if version != expected {
            return Err(R::NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let (total, free) = mem_info(dev)?;
        nout(memory, nvmlMemory_v2_t { version, total, reserved: 0, free, used: total - free })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(dev: nvmlDevice_t, util: *mut nvmlUtilization_t) -> R {
    nvml_entry(|| {
        if util.is_null() {
            return Err(R::NVML_ERROR_INVALID_ARGUMENT);
        }
        let d = device(dev)?;
        let (gpu, memory) = with(|c| {
            let answer::Utilization { gpu_percent, memory_percent } =
                mgmt_call(c, d.ordinal, |device| Request::MgmtUtilization { device })?;
            Ok((gpu_percent, memory_percent))
        })?;
        nout(util, nvmlUtilization_t { gpu, memory })
    })
}
