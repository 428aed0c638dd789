//! Devices.

use super::{c_str, out, write_c_string};
use crate::driver::initialized;
use crate::error::{cuda_entry, fail};
use gpupool_shim::cuda::{CUdevice, CUdevice_P2PAttribute, CUdevice_attribute, CUdevprop, CUresult, CUuuid};
use std::os::raw::{c_char, c_int};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    cuda_entry(|| {
        let d = initialized()?.device(ordinal)?;
        out(device, d.ordinal)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    cuda_entry(|| out(count, initialized()?.devices.len() as c_int))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    cuda_entry(|| {
        let d = initialized()?.device(dev)?;
        write_c_string(name, usize::try_from(len).unwrap_or(0), &d.cfg.name)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    cuda_entry(|| {
        let d = initialized()?.device(dev)?;
        out(uuid, CUuuid { bytes: d.uuid.map(|b| b as c_char) })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    // SAFETY: same contract as the v1 entry point.
    unsafe { cuDeviceGetUuid(uuid, dev) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    cuda_entry(|| {
        let d = initialized()?.device(dev)?;
        out(bytes, d.total_memory() as usize)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attrib: CUdevice_attribute,
    dev: CUdevice,
) -> CUresult {
    cuda_entry(|| {
        let d = initialized()?.device(dev)?;
        match d.attribute(attrib) {
            Some(v) => out(value, v),
            None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown device attribute {}", attrib.0)),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetProperties(prop: *mut CUdevprop, dev: CUdevice) -> CUresult {
    cuda_entry(|| {
        let d = initialized()?.device(dev)?;
        let a = |x| d.attribute(x).unwrap_or(0);
        out(prop, gpupool_abi::identity::devprop(a))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceComputeCapability(major: *mut c_int, minor: *mut c_int, dev: CUdevice) -> CUresult {
    cuda_entry(|| {
        let d = initialized()?.device(dev)?;
        if major.is_null() || minor.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null output pointer".into());
        }
        out(major, d.cfg.cc_major as c_int)?;
        out(minor, d.cfg.cc_minor as c_int)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(bus_id: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    cuda_entry(|| {
        let d = initialized()?.device(dev)?;
        write_c_string(bus_id, usize::try_from(len).unwrap_or(0), &d.pci_bus_id())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetByPCIBusId(dev: *mut CUdevice, bus_id: *const c_char) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        let want = c_str(bus_id, "PCI bus id")?.to_ascii_lowercase();
        // Accept the short form "18:00.0" as well as "0000:18:00.0".
        match driver.devices.iter().find(|d| {
            let full = d.pci_bus_id();
            full == want || full.get(5..) == Some(want.as_str())
        }) {
            Some(d) => out(dev, d.ordinal),
            None => fail(CUresult::CUDA_ERROR_INVALID_DEVICE, || format!("no device at PCI bus id {want}")),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(can: *mut c_int, dev: CUdevice, peer: CUdevice) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        driver.device(dev)?;
        driver.device(peer)?;
        // Peer access is not simulated: copies between devices go through cuMemcpyPeer.
        out(can, 0)
    })
}

/// Every attribute 0, consistent with cuDeviceCanAccessPeer ([`gpupool_abi::peer`]), whatever
/// the configured wiring.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetP2PAttribute(
    value: *mut c_int,
    attrib: CUdevice_P2PAttribute,
    src: CUdevice,
    dst: CUdevice,
) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        driver.device(src)?;
        driver.device(dst)?;
        match gpupool_abi::peer::p2p_attribute(attrib, src, dst) {
            Ok(v) => out(value, v),
            Err((code, why)) => fail(code, || why),
        }
    })
}
