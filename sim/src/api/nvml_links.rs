//! NVML's interconnect queries on the simulated devices, which have no NVLink and no peer
//! access (`cuDeviceCanAccessPeer` is 0): NVLink queries are `NVML_ERROR_NOT_SUPPORTED`,
//! every peer-to-peer capability `NVML_P2P_STATUS_NOT_SUPPORTED`, and the fabric query is a
//! Hopper part's outside an NVSwitch fabric (the answers shared with the interposer:
//! [`gpupool_abi::nvml`]).

use super::nvml::{device, nout, nvml_entry, refused};
use gpupool_abi::nvml as shared;
use gpupool_shim::nvml::{
    nvmlDevice_t, nvmlGpuFabricInfoV_t, nvmlGpuP2PCapsIndex_t, nvmlGpuP2PStatus_t, nvmlIntNvLinkDeviceType_t,
    nvmlPciInfo_t, nvmlReturn_t as R,
};
use std::os::raw::c_uint;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetGpuFabricInfoV(dev: nvmlDevice_t, info: *mut nvmlGpuFabricInfoV_t) -> R {
    nvml_entry(|| {
        let d = device(dev)?;
        if info.is_null() {
            return Err(R::NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null; the caller fills in `version` before the call.
        let version = unsafe { (*info).version };
        let answer = shared::fabric_info(d.cfg.cc_major, version).map_err(refused)?;
        // SAFETY: non-null, and the caller's struct per NVML's contract.
        unsafe { shared::put_fabric_info(info, answer) };
        Ok(())
    })
}

fn nvlink_query<T>(dev: nvmlDevice_t, link: c_uint, out: *mut T) -> R {
    nvml_entry(|| {
        device(dev)?;
        if out.is_null() {
            return Err(R::NVML_ERROR_INVALID_ARGUMENT);
        }
        Err(refused(shared::nvlink(link)))
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemoteDeviceType(
    dev: nvmlDevice_t,
    link: c_uint,
    kind: *mut nvmlIntNvLinkDeviceType_t,
) -> R {
    nvlink_query(dev, link, kind)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemotePciInfo_v2(
    dev: nvmlDevice_t,
    link: c_uint,
    pci: *mut nvmlPciInfo_t,
) -> R {
    nvlink_query(dev, link, pci)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetP2PStatus(
    dev1: nvmlDevice_t,
    dev2: nvmlDevice_t,
    index: nvmlGpuP2PCapsIndex_t,
    status: *mut nvmlGpuP2PStatus_t,
) -> R {
    nvml_entry(|| {
        device(dev1)?;
        device(dev2)?;
        nout(status, shared::p2p_status(index).map_err(refused)?)
    })
}
