//! NVML as the daemon calls it.

use gpupool_shim::nvml::{nvmlDevice_t, nvmlMemory_t, nvmlReturn_t, nvmlUtilization_t};
use libloading::Library;
use std::os::raw::{c_char, c_uint};
use std::path::Path;

pub struct Nvml {
    init: unsafe extern "C" fn(c_uint) -> nvmlReturn_t,
    shutdown: unsafe extern "C" fn() -> nvmlReturn_t,
    handle_by_index: unsafe extern "C" fn(c_uint, *mut nvmlDevice_t) -> nvmlReturn_t,
    memory: unsafe extern "C" fn(nvmlDevice_t, *mut nvmlMemory_t) -> nvmlReturn_t,
    utilization: unsafe extern "C" fn(nvmlDevice_t, *mut nvmlUtilization_t) -> nvmlReturn_t,
    uuid: unsafe extern "C" fn(nvmlDevice_t, *mut c_char, c_uint) -> nvmlReturn_t,
    _lib: Library,
}

fn check(call: &str, r: nvmlReturn_t) -> anyhow::Result<()> {
    anyhow::ensure!(r == nvmlReturn_t::NVML_SUCCESS, "{call} failed: NVML error {}", r.0);
    Ok(())
}

impl Nvml {
    pub fn load(path: &Path) -> anyhow::Result<Nvml> {
        // SAFETY: loading the vendor management library is its documented use.
        let lib = unsafe { Library::new(path) }.map_err(|e| anyhow::anyhow!("cannot load {}: {e}", path.display()))?;
        // SAFETY: each symbol is typed as our checked nvml header declares it.
        let nvml = unsafe {
            Nvml {
                init: *lib.get(b"nvmlInitWithFlags\0")?,
                shutdown: *lib.get(b"nvmlShutdown\0")?,
                handle_by_index: *lib.get(b"nvmlDeviceGetHandleByIndex_v2\0")?,
                memory: *lib.get(b"nvmlDeviceGetMemoryInfo\0")?,
                utilization: *lib.get(b"nvmlDeviceGetUtilizationRates\0")?,
                uuid: *lib.get(b"nvmlDeviceGetUUID\0")?,
                _lib: lib,
            }
        };
        // SAFETY: plain call with a flags word.
        check("nvmlInitWithFlags", unsafe { (nvml.init)(0) })?;
        Ok(nvml)
    }

    pub fn device(&self, index: u32) -> anyhow::Result<nvmlDevice_t> {
        let mut h: nvmlDevice_t = std::ptr::null_mut();
        // SAFETY: `h` is a live out-pointer.
        check("nvmlDeviceGetHandleByIndex_v2", unsafe { (self.handle_by_index)(index, &mut h) })?;
        Ok(h)
    }

    pub fn memory(&self, dev: nvmlDevice_t) -> anyhow::Result<nvmlMemory_t> {
        let mut m = nvmlMemory_t::default();
        // SAFETY: `m` is a live out-pointer of the right type.
        check("nvmlDeviceGetMemoryInfo", unsafe { (self.memory)(dev, &mut m) })?;
        Ok(m)
    }

    pub fn utilization(&self, dev: nvmlDevice_t) -> anyhow::Result<nvmlUtilization_t> {
        let mut u = nvmlUtilization_t::default();
        // SAFETY: `u` is a live out-pointer of the right type.
        check("nvmlDeviceGetUtilizationRates", unsafe { (self.utilization)(dev, &mut u) })?;
        Ok(u)
    }

    pub fn uuid(&self, dev: nvmlDevice_t) -> anyhow::Result<String> {
        let mut buf = [0 as c_char; 96];
        // SAFETY: the buffer holds 96 bytes, as passed.
        check("nvmlDeviceGetUUID", unsafe { (self.uuid)(dev, buf.as_mut_ptr(), buf.len() as c_uint) })?;
        // SAFETY: NVML NUL-terminates within the buffer on success.
        Ok(unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: balanced with the nvmlInitWithFlags in `load`.
        unsafe { (self.shutdown)() };
    }
}
