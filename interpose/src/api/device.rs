//! Device queries, answered locally from the device list of the hello (names, UUIDs,
//! attributes, and the tenant's quota as the total memory).

use crate::client;
use crate::util::{R, c_str, entry, out, write_c_string};
use gpupool_protocol::ops::DeviceInfo;
use gpupool_shim::cuda::{CUdevice, CUdevice_attribute as A, CUdevprop, CUresult, CUuuid};
use std::os::raw::{c_char, c_int};

/// Runs `f` on device `dev` of the cached list (after `cuInit`).
fn with_device<T>(dev: CUdevice, f: impl FnOnce(&DeviceInfo) -> R<T>) -> R<T> {
    client::call(|c| f(c.device(dev)?))
}

pub fn attribute(d: &DeviceInfo, attr: u32) -> Option<i32> {
    d.attributes.iter().find(|a| a.attribute == attr).map(|a| a.value as i32)
}

pub fn pci_bus_id(d: &DeviceInfo) -> String {
    let a = |x: A| attribute(d, x.0).unwrap_or(0);
    format!(
        "{:04x}:{:02x}:{:02x}.0",
        a(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
        a(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
        a(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    entry(|| {
        if device.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        with_device(ordinal, |_| out(device, ordinal))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    entry(|| {
        if count.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let n = client::call(|c| Ok(c.devices()?.len()))?;
        out(count, n as c_int)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    entry(|| with_device(dev, |d| write_c_string(name, usize::try_from(len).unwrap_or(0), &d.name)))
}

fn uuid(p: *mut CUuuid, dev: CUdevice) -> R<()> {
    if p.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    with_device(dev, |d| out(p, CUuuid { bytes: d.uuid.map(|b| b as c_char) }))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid(p: *mut CUuuid, dev: CUdevice) -> CUresult {
    entry(|| uuid(p, dev))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(p: *mut CUuuid, dev: CUdevice) -> CUresult {
    entry(|| uuid(p, dev))
}

/// The tenant's quota on the device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    entry(|| {
        if bytes.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        with_device(dev, |d| out(bytes, d.total_memory as usize))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetAttribute(value: *mut c_int, attrib: A, dev: CUdevice) -> CUresult {
    entry(|| {
        if value.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        with_device(dev, |d| out(value, attribute(d, attrib.0).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetProperties(prop: *mut CUdevprop, dev: CUdevice) -> CUresult {
    entry(|| {
        if prop.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        with_device(dev, |d| {
            let a = |x: A| attribute(d, x.0).unwrap_or(0);
            out(prop, gpupool_abi::identity::devprop(a))
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceComputeCapability(major: *mut c_int, minor: *mut c_int, dev: CUdevice) -> CUresult {
    entry(|| {
        if major.is_null() || minor.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        with_device(dev, |d| {
            out(major, d.compute_capability[0] as c_int)?;
            out(minor, d.compute_capability[1] as c_int)
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(bus_id: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    entry(|| with_device(dev, |d| write_c_string(bus_id, usize::try_from(len).unwrap_or(0), &pci_bus_id(d))))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceGetByPCIBusId(dev: *mut CUdevice, bus_id: *const c_char) -> CUresult {
    entry(|| {
        if dev.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let want = c_str(bus_id)?.to_ascii_lowercase();
        let found = client::call(|c| {
            Ok(c.devices()?.iter().position(|d| {
                let full = pci_bus_id(d);
                full == want || full.get(5..) == Some(want.as_str())
            }))
        })?;
        out(dev, found.ok_or(CUresult::CUDA_ERROR_INVALID_DEVICE)? as CUdevice)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(can: *mut c_int, dev: CUdevice, peer: CUdevice) -> CUresult {
    entry(|| {
        if can.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        with_device(dev, |_| Ok(()))?;
        with_device(peer, |_| Ok(()))?;
        out(can, 0)
    })
}
