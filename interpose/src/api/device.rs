//! Device queries, answered locally from the device list of the hello (names, UUIDs,
//! attributes, and the tenant's quota as the total memory).

use crate::client;
use crate::util::{R, write_c_string};
use gpupool_protocol::ops::DeviceInfo;
use gpupool_shim::cuda::{CUdevice, CUdevice_P2PAttribute, CUdevice_attribute as A, CUdevprop, CUresult, CUuuid};
use std::os::raw::{c_char, c_int};

/// Runs `f` on device `dev` of the cached list (after `cuInit`).
fn with_device<T>(dev: CUdevice, f: impl FnOnce(&DeviceInfo) -> R<T>) -> R<T> {
    client::call(|c| f(c.device(dev)?))
}

pub fn attribute(d: &DeviceInfo, attr: u32) -> Option<i32> {
    // Managed memory is not served through the pool ([`super::mempool::alloc_managed`]):
    // the devices say so, whatever the daemon's backend offers.
    if attr == A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY.0 || attr == A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS.0 {
        return Some(0);
    }
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

pub(super) fn get(ordinal: c_int) -> R<CUdevice> {
    with_device(ordinal, |_| Ok(ordinal))
}

pub(super) fn count() -> R<c_int> {
    client::call(|c| Ok(c.devices()?.len() as c_int))
}

pub(super) fn name(name: *mut c_char, len: c_int, dev: CUdevice) -> R<()> {
    with_device(dev, |d| write_c_string(name, usize::try_from(len).unwrap_or(0), &d.name))
}

pub(super) fn uuid(dev: CUdevice) -> R<CUuuid> {
    with_device(dev, |d| Ok(CUuuid { bytes: d.uuid.map(|b| b as c_char) }))
}

/// The tenant's quota on the device.
pub(super) fn total_mem(dev: CUdevice) -> R<usize> {
    with_device(dev, |d| Ok(d.total_memory as usize))
}

pub(super) fn get_attribute(attrib: A, dev: CUdevice) -> R<c_int> {
    with_device(dev, |d| attribute(d, attrib.0).ok_or(CUresult::CUDA_ERROR_INVALID_VALUE))
}

pub(super) fn properties(dev: CUdevice) -> R<CUdevprop> {
    with_device(dev, |d| Ok(gpupool_abi::identity::devprop(|x: A| attribute(d, x.0).unwrap_or(0))))
}

pub(super) fn compute_capability(dev: CUdevice) -> R<(c_int, c_int)> {
    with_device(dev, |d| Ok((d.compute_capability[0] as c_int, d.compute_capability[1] as c_int)))
}

pub(super) fn get_pci_bus_id(bus_id: *mut c_char, len: c_int, dev: CUdevice) -> R<()> {
    with_device(dev, |d| write_c_string(bus_id, usize::try_from(len).unwrap_or(0), &pci_bus_id(d)))
}

pub(super) fn by_pci_bus_id(bus_id: &str) -> R<CUdevice> {
    let want = bus_id.to_ascii_lowercase();
    let found = client::call(|c| {
        Ok(c.devices()?.iter().position(|d| {
            let full = pci_bus_id(d);
            full == want || full.get(5..) == Some(want.as_str())
        }))
    })?;
    Ok(found.ok_or(CUresult::CUDA_ERROR_INVALID_DEVICE)? as CUdevice)
}

pub(super) fn can_access_peer(dev: CUdevice, peer: CUdevice) -> R<c_int> {
    with_device(dev, |_| Ok(()))?;
    with_device(peer, |_| Ok(()))?;
    Ok(0)
}

/// Every attribute 0, as cuDeviceCanAccessPeer is ([`gpupool_abi::peer`]).
pub(super) fn p2p_attribute(attrib: CUdevice_P2PAttribute, src: CUdevice, dst: CUdevice) -> R<c_int> {
    with_device(src, |_| Ok(()))?;
    with_device(dst, |_| Ok(()))?;
    gpupool_abi::peer::p2p_attribute(attrib, src, dst).map_err(|(code, why)| {
        crate::util::log(&format!("cuDeviceGetP2PAttribute: {why}"));
        code
    })
}
