//! NVML's interconnect queries through the pool. A tenant gets no NVLink and no peer access
//! (`cuDeviceCanAccessPeer` is 0 here), so it is told what a device without them answers,
//! as the simulator does ([`gpupool_abi::nvml`]): NVLink queries `NVML_ERROR_NOT_SUPPORTED`,
//! every peer-to-peer capability `NVML_P2P_STATUS_NOT_SUPPORTED`, and the fabric query a
//! Hopper part's outside an NVSwitch fabric (by the device's compute capability).

use super::{NResult, device, refused};
use gpupool_abi::nvml as shared;
use gpupool_shim::nvml::{
    nvmlDevice_t, nvmlGpuFabricInfoV_t, nvmlGpuP2PCapsIndex_t, nvmlGpuP2PStatus_t, nvmlIntNvLinkDeviceType_t,
    nvmlPciInfo_t,
};
use std::os::raw::c_uint;

/// The caller fills in `version` first, so the struct is read, then written.
pub(in crate::api) fn fabric_info(dev: nvmlDevice_t, info: *mut nvmlGpuFabricInfoV_t) -> NResult<()> {
    let d = device(dev)?;
    let version = crate::api::export::read::<_, gpupool_shim::nvml::nvmlReturn_t>(info.cast_const())?.version;
    let answer = shared::fabric_info(d.compute_capability[0], version).map_err(refused)?;
    // SAFETY: non-null (read above), and the caller's struct per NVML's contract.
    unsafe { shared::put_fabric_info(info, answer) };
    Ok(())
}

pub(in crate::api) fn remote_device_type(dev: nvmlDevice_t, link: c_uint) -> NResult<nvmlIntNvLinkDeviceType_t> {
    device(dev)?;
    Err(refused(shared::nvlink(link)))
}

pub(in crate::api) fn remote_pci_info(dev: nvmlDevice_t, link: c_uint) -> NResult<nvmlPciInfo_t> {
    device(dev)?;
    Err(refused(shared::nvlink(link)))
}

pub(in crate::api) fn p2p_status(
    dev1: nvmlDevice_t,
    dev2: nvmlDevice_t,
    index: nvmlGpuP2PCapsIndex_t,
) -> NResult<nvmlGpuP2PStatus_t> {
    device(dev1)?;
    device(dev2)?;
    shared::p2p_status(index).map_err(refused)
}
