//! NVML as the daemon calls it.

use gpupool_shim::nvml::{
    nvmlDevice_t, nvmlEnableState_t, nvmlGpuTopologyLevel_t, nvmlMemory_t, nvmlPciInfo_t, nvmlReturn_t,
    nvmlUtilization_t,
};
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
    /// The topology queries placement uses ([`crate::daemon::placement`]); a library without
    /// them leaves the topology unknown.
    topo: Option<TopoFns>,
    _lib: Library,
}

struct TopoFns {
    by_uuid: unsafe extern "C" fn(*const c_char, *mut nvmlDevice_t) -> nvmlReturn_t,
    pci: unsafe extern "C" fn(nvmlDevice_t, *mut nvmlPciInfo_t) -> nvmlReturn_t,
    ancestor: unsafe extern "C" fn(nvmlDevice_t, nvmlDevice_t, *mut nvmlGpuTopologyLevel_t) -> nvmlReturn_t,
    nvlink_state: unsafe extern "C" fn(nvmlDevice_t, c_uint, *mut nvmlEnableState_t) -> nvmlReturn_t,
    nvlink_pci: unsafe extern "C" fn(nvmlDevice_t, c_uint, *mut nvmlPciInfo_t) -> nvmlReturn_t,
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
                topo: (|| {
                    Ok::<_, libloading::Error>(TopoFns {
                        by_uuid: *lib.get(b"nvmlDeviceGetHandleByUUID\0")?,
                        pci: *lib.get(b"nvmlDeviceGetPciInfo_v3\0")?,
                        ancestor: *lib.get(b"nvmlDeviceGetTopologyCommonAncestor\0")?,
                        nvlink_state: *lib.get(b"nvmlDeviceGetNvLinkState\0")?,
                        nvlink_pci: *lib.get(b"nvmlDeviceGetNvLinkRemotePciInfo_v2\0")?,
                    })
                })()
                .ok(),
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

/// A PCI location: (domain, bus, device).
pub type PciAddress = (u32, u32, u32);

impl Nvml {
    fn topo(&self) -> anyhow::Result<&TopoFns> {
        self.topo.as_ref().ok_or_else(|| anyhow::anyhow!("this NVML has no topology queries"))
    }

    pub fn handle_by_uuid(&self, uuid: &str) -> anyhow::Result<nvmlDevice_t> {
        let c = std::ffi::CString::new(uuid)?;
        let mut h: nvmlDevice_t = std::ptr::null_mut();
        // SAFETY: a NUL-terminated string and a live out-pointer.
        check("nvmlDeviceGetHandleByUUID", unsafe { (self.topo()?.by_uuid)(c.as_ptr(), &mut h) })?;
        Ok(h)
    }

    pub fn pci_address(&self, dev: nvmlDevice_t) -> anyhow::Result<PciAddress> {
        let mut p = nvmlPciInfo_t::default();
        // SAFETY: `p` is a live out-pointer of the right type.
        check("nvmlDeviceGetPciInfo_v3", unsafe { (self.topo()?.pci)(dev, &mut p) })?;
        Ok((p.domain, p.bus, p.device))
    }

    /// `nvmlDeviceGetTopologyCommonAncestor`: an `nvmlGpuTopologyLevel_t` value.
    pub fn common_ancestor(&self, a: nvmlDevice_t, b: nvmlDevice_t) -> anyhow::Result<u32> {
        let mut l = nvmlGpuTopologyLevel_t(0);
        // SAFETY: `l` is a live out-pointer of the right type.
        check("nvmlDeviceGetTopologyCommonAncestor", unsafe { (self.topo()?.ancestor)(a, b, &mut l) })?;
        Ok(l.0)
    }

    /// Where NvLink `link` of `dev` leads: None for an inactive link; an error when the device
    /// has no NVLink (or no such link).
    pub fn nvlink_remote(&self, dev: nvmlDevice_t, link: c_uint) -> anyhow::Result<Option<PciAddress>> {
        let t = self.topo()?;
        let mut on = nvmlEnableState_t::NVML_FEATURE_DISABLED;
        // SAFETY: `on` is a live out-pointer of the right type.
        check("nvmlDeviceGetNvLinkState", unsafe { (t.nvlink_state)(dev, link, &mut on) })?;
        if on != nvmlEnableState_t::NVML_FEATURE_ENABLED {
            return Ok(None);
        }
        let mut p = nvmlPciInfo_t::default();
        // SAFETY: `p` is a live out-pointer of the right type.
        check("nvmlDeviceGetNvLinkRemotePciInfo_v2", unsafe { (t.nvlink_pci)(dev, link, &mut p) })?;
        Ok(Some((p.domain, p.bus, p.device)))
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: balanced with the nvmlInitWithFlags in `load`.
        unsafe { (self.shutdown)() };
    }
}
