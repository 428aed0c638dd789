//! NVML's interconnect and topology queries on the simulated devices, answered from the
//! configuration's `[topology]` ([`crate::config::Topology`]): NVLink state and the remote
//! end of each active link (a device of the same island), and the PCIe/NUMA common ancestor
//! of two devices and the devices within a level of one. A device in no NVLink island answers
//! NVLink queries `NVML_ERROR_NOT_SUPPORTED`, as one without NVLink does. Peer access is not
//! simulated (`cuDeviceCanAccessPeer` is 0), so every peer-to-peer capability is
//! `NVML_P2P_STATUS_NOT_SUPPORTED`, whatever the wiring; the fabric query is a Hopper part's
//! outside an NVSwitch fabric (the answers shared with the interposer: [`gpupool_abi::nvml`]).

use super::nvml::{device, handle_of, nout, nvml_entry, refused};
use crate::driver::state;
use gpupool_abi::nvml as shared;
use gpupool_shim::nvml::{
    nvmlDevice_t, nvmlEnableState_t, nvmlGpuFabricInfoV_t, nvmlGpuP2PCapsIndex_t, nvmlGpuP2PStatus_t,
    nvmlGpuTopologyLevel_t, nvmlIntNvLinkDeviceType_t, nvmlPciInfo_t, nvmlReturn_t as R,
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

/// The device at the far end of `link` of device `dev`: Ok(None) for an inactive link of an
/// NVLink device.
fn nvlink_peer(dev: nvmlDevice_t, link: c_uint) -> Result<Option<usize>, R> {
    let d = device(dev)?;
    let peers = state().config.topology.nvlink_peers(d.ordinal as usize);
    if peers.is_empty() {
        return Err(refused(shared::nvlink(link)));
    }
    if link as usize >= crate::config::MAX_NVLINKS {
        return Err(refused(shared::Refused {
            code: R::NVML_ERROR_INVALID_ARGUMENT,
            why: format!("NvLink link {link}: links are 0..{}", crate::config::MAX_NVLINKS),
        }));
    }
    Ok(peers.get(link as usize).copied())
}

/// The far end of an active link, for the remote queries.
fn active_peer<T>(dev: nvmlDevice_t, link: c_uint, out: *mut T) -> Result<usize, R> {
    if out.is_null() {
        return Err(R::NVML_ERROR_INVALID_ARGUMENT);
    }
    nvlink_peer(dev, link)?.ok_or_else(|| {
        refused(shared::Refused { code: R::NVML_ERROR_NOT_SUPPORTED, why: format!("NvLink link {link} is not active") })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkState(
    dev: nvmlDevice_t,
    link: c_uint,
    active: *mut nvmlEnableState_t,
) -> R {
    nvml_entry(|| {
        if active.is_null() {
            return Err(R::NVML_ERROR_INVALID_ARGUMENT);
        }
        let on = nvlink_peer(dev, link)?.is_some();
        nout(
            active,
            if on { nvmlEnableState_t::NVML_FEATURE_ENABLED } else { nvmlEnableState_t::NVML_FEATURE_DISABLED },
        )
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemoteDeviceType(
    dev: nvmlDevice_t,
    link: c_uint,
    kind: *mut nvmlIntNvLinkDeviceType_t,
) -> R {
    nvml_entry(|| {
        active_peer(dev, link, kind)?;
        nout(kind, nvmlIntNvLinkDeviceType_t::NVML_NVLINK_DEVICE_TYPE_GPU)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetNvLinkRemotePciInfo_v2(
    dev: nvmlDevice_t,
    link: c_uint,
    pci: *mut nvmlPciInfo_t,
) -> R {
    nvml_entry(|| {
        let peer = active_peer(dev, link, pci)?;
        nout(pci, shared::pci_info(state().devices[peer].pci_address()))
    })
}

/// A `nvmlGpuTopologyLevel_t` NVML defines, or INVALID_ARGUMENT.
fn level_value(level: nvmlGpuTopologyLevel_t) -> Result<u32, R> {
    match level.0 {
        0 | 10 | 20 | 30 | 40 | 50 => Ok(level.0),
        other => Err(refused(shared::Refused {
            code: R::NVML_ERROR_INVALID_ARGUMENT,
            why: format!("{other} is not an nvmlGpuTopologyLevel_t"),
        })),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTopologyCommonAncestor(
    dev1: nvmlDevice_t,
    dev2: nvmlDevice_t,
    path: *mut nvmlGpuTopologyLevel_t,
) -> R {
    nvml_entry(|| {
        let (a, b) = (device(dev1)?.ordinal as usize, device(dev2)?.ordinal as usize);
        nout(path, nvmlGpuTopologyLevel_t(state().config.topology.common_ancestor(a, b)))
    })
}

/// The other devices within `level` of `dev` (common ancestor at that level or nearer), in
/// ordinal order. `*count` 0 asks for the number; otherwise up to `*count` handles are
/// written and `*count` becomes the number written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTopologyNearestGpus(
    dev: nvmlDevice_t,
    level: nvmlGpuTopologyLevel_t,
    count: *mut c_uint,
    out: *mut nvmlDevice_t,
) -> R {
    nvml_entry(|| {
        let d = device(dev)?.ordinal as usize;
        let level = level_value(level)?;
        if count.is_null() {
            return Err(R::NVML_ERROR_INVALID_ARGUMENT);
        }
        let topo = &state().config.topology;
        let near: Vec<_> = state()
            .devices
            .iter()
            .filter(|o| o.ordinal as usize != d && topo.common_ancestor(d, o.ordinal as usize) <= level)
            .collect();
        // SAFETY: non-null; the caller's count, per NVML's contract.
        let room = unsafe { count.read_unaligned() } as usize;
        if room == 0 {
            return nout(count, near.len() as c_uint);
        }
        if out.is_null() {
            return Err(R::NVML_ERROR_INVALID_ARGUMENT);
        }
        let n = room.min(near.len());
        for (i, o) in near.iter().take(n).enumerate() {
            // SAFETY: the caller's array holds `room` >= n handles.
            unsafe { out.add(i).write_unaligned(handle_of(o)) };
        }
        nout(count, n as c_uint)
    })
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
