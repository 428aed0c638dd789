//! NVML's interconnect and topology queries through the pool, for the process's own GPUs.
//!
//! The wiring is the daemon's (learnt from its NVML at start-up, `GpuTopology`), as the
//! session sees it: the common-ancestor level between two of its GPUs, the GPUs within a level
//! of one, each NVLink's state and far end. A link to a GPU that is not the session's is shown
//! inactive (`NVML_FEATURE_DISABLED`): the others do not exist for it, as in placement.
//! Two GPUs of different daemons (endpoints) are `NVML_TOPOLOGY_SYSTEM` apart, without links.
//! Peer access is not offered through the pool (`cuDeviceCanAccessPeer` is 0 here), so every
//! peer-to-peer capability stays `NVML_P2P_STATUS_NOT_SUPPORTED`, whatever the wiring, as the
//! simulator answers ([`gpupool_abi::nvml`]); the fabric query is a Hopper part's outside an
//! NVSwitch fabric (by the device's compute capability). `nvmlSystemGetTopologyGpuSet` is not
//! answered (it needs the host's CPU-to-GPU affinity, which neither the daemon nor the
//! simulator reports yet).

use super::{NResult, device, devices, handle_of, pci_address, refused, with};
use gpupool_abi::nvml as shared;
use gpupool_protocol::Request;
use gpupool_protocol::ops::answer;
use gpupool_shim::cuda::CUresult;
use gpupool_shim::nvml::{
    nvmlDevice_t, nvmlEnableState_t, nvmlGpuFabricInfoV_t, nvmlGpuP2PCapsIndex_t, nvmlGpuP2PStatus_t,
    nvmlGpuTopologyLevel_t, nvmlIntNvLinkDeviceType_t, nvmlPciInfo_t, nvmlReturn_t as R,
};
use std::os::raw::c_uint;

/// `NVML_TOPOLOGY_SYSTEM`: across daemons, or what nobody could tell.
const SYSTEM: u32 = 50;

/// One NVML device's place in the wiring of the daemon that serves it.
struct Wired {
    /// Its endpoint.
    ep: usize,
    /// Its position in `wiring.gpus`.
    pos: usize,
    wiring: answer::GpuWiring,
    /// Per position in `wiring.gpus`, that GPU's NVML index in this process.
    nvml_index: Vec<Option<usize>>,
    /// Per NVML index, its endpoint and that daemon's ordinal.
    routes: Vec<(usize, u32)>,
}

impl Wired {
    /// The level between this device and NVML device `other`.
    fn level_to(&self, other: usize) -> Option<u32> {
        let (ep, ordinal) = *self.routes.get(other)?;
        if ep != self.ep {
            return Some(SYSTEM);
        }
        let q = self.wiring.gpus.iter().position(|&g| g == ordinal)?;
        self.wiring.level.get(self.pos)?.get(q).copied()
    }
}

fn wired(dev: nvmlDevice_t) -> NResult<Wired> {
    let d = device(dev)?;
    with(|c| {
        let routes = c.nvml_routes.clone();
        let (ep, local) = routes.get(d.ordinal as usize).copied().ok_or(CUresult::CUDA_ERROR_INVALID_DEVICE)?;
        let wiring: answer::GpuWiring = c.conn_at(ep)?.ask(Request::GpuTopology {})?;
        let pos = wiring.gpus.iter().position(|&g| g == local).ok_or(CUresult::CUDA_ERROR_NOT_SUPPORTED)?;
        let nvml_index = wiring.gpus.iter().map(|&g| routes.iter().position(|&r| r == (ep, g))).collect();
        Ok(Wired { ep, pos, wiring, nvml_index, routes })
    })
}

/// The NVML index at the far end of `link` of `dev`: None for an inactive link (or one leading
/// to no GPU of this process); NOT_SUPPORTED without NVLink, INVALID_ARGUMENT past its links.
fn nvlink_peer(dev: nvmlDevice_t, link: c_uint) -> NResult<Option<usize>> {
    let w = wired(dev)?;
    let Some(links) = w.wiring.links.get(w.pos).and_then(Option::as_ref) else {
        return Err(refused(shared::nvlink(link)));
    };
    let far = links.get(link as usize).ok_or_else(|| {
        refused(shared::Refused {
            code: R::NVML_ERROR_INVALID_ARGUMENT,
            why: format!("NvLink link {link}: this device has links 0..{}", links.len()),
        })
    })?;
    Ok(far.and_then(|p| w.nvml_index.get(p as usize).copied().flatten()))
}

fn active_peer(dev: nvmlDevice_t, link: c_uint) -> NResult<usize> {
    nvlink_peer(dev, link)?.ok_or_else(|| {
        refused(shared::Refused { code: R::NVML_ERROR_NOT_SUPPORTED, why: format!("NvLink link {link} is not active") })
    })
}

pub(in crate::api) fn nvlink_state(dev: nvmlDevice_t, link: c_uint) -> NResult<nvmlEnableState_t> {
    Ok(match nvlink_peer(dev, link)? {
        Some(_) => nvmlEnableState_t::NVML_FEATURE_ENABLED,
        None => nvmlEnableState_t::NVML_FEATURE_DISABLED,
    })
}

/// A `nvmlGpuTopologyLevel_t` NVML defines, or INVALID_ARGUMENT.
fn level_value(level: nvmlGpuTopologyLevel_t) -> NResult<u32> {
    match level.0 {
        0 | 10 | 20 | 30 | 40 | 50 => Ok(level.0),
        other => Err(refused(shared::Refused {
            code: R::NVML_ERROR_INVALID_ARGUMENT,
            why: format!("{other} is not an nvmlGpuTopologyLevel_t"),
        })),
    }
}

pub(in crate::api) fn common_ancestor(dev1: nvmlDevice_t, dev2: nvmlDevice_t) -> NResult<nvmlGpuTopologyLevel_t> {
    let other = device(dev2)?.ordinal as usize;
    let level = wired(dev1)?.level_to(other).ok_or(R::NVML_ERROR_NOT_SUPPORTED)?;
    Ok(nvmlGpuTopologyLevel_t(level))
}

/// The process's other GPUs within `level` of `dev`, in NVML index order. `*count` 0 asks for
/// the number; otherwise up to `*count` handles are written and `*count` becomes the number
/// written (as the simulator and NVIDIA's NVML).
pub(in crate::api) fn nearest_gpus(
    dev: nvmlDevice_t,
    level: nvmlGpuTopologyLevel_t,
    count: *mut c_uint,
    out: *mut nvmlDevice_t,
) -> NResult<()> {
    let level = level_value(level)?;
    let w = wired(dev)?;
    let me = device(dev)?.ordinal as usize;
    let near: Vec<usize> =
        (0..w.routes.len()).filter(|&i| i != me && w.level_to(i).is_some_and(|l| l <= level)).collect();
    let room = crate::api::export::read::<_, R>(count.cast_const())? as usize;
    if room == 0 {
        crate::api::export::put(count, near.len() as c_uint);
        return Ok(());
    }
    if out.is_null() {
        return Err(R::NVML_ERROR_INVALID_ARGUMENT);
    }
    let n = room.min(near.len());
    for (k, &i) in near.iter().take(n).enumerate() {
        // SAFETY: the caller's array holds `*count` = room >= n handles, per NVML's contract.
        unsafe { out.add(k).write_unaligned(handle_of(i)) };
    }
    crate::api::export::put(count, n as c_uint);
    Ok(())
}

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
    active_peer(dev, link)?;
    Ok(nvmlIntNvLinkDeviceType_t::NVML_NVLINK_DEVICE_TYPE_GPU)
}

pub(in crate::api) fn remote_pci_info(dev: nvmlDevice_t, link: c_uint) -> NResult<nvmlPciInfo_t> {
    let far = active_peer(dev, link)?;
    let list = devices()?;
    let d = list.get(far).ok_or(R::NVML_ERROR_UNKNOWN)?;
    Ok(shared::pci_info(pci_address(d)))
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
