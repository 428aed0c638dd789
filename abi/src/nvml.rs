//! NVML answers both of our NVML libraries (the simulator's and the interposer's) give the
//! same way: a device's PCI identity and the bus-id formats `nvmlDeviceGetHandleByPciBusId_v2`
//! accepts, the process-list protocol of `nvmlDeviceGetComputeRunningProcesses*`, and what
//! a device without NVLink answers to the NVLink, fabric and peer-to-peer queries.
//!
//! Neither library offers NVLink or peer access (`cuDeviceCanAccessPeer` is 0 for every
//! pair), so: NVLink queries are `NVML_ERROR_NOT_SUPPORTED` ("if NVLink is not supported"),
//! every peer-to-peer capability is `NVML_P2P_STATUS_NOT_SUPPORTED`, and the fabric query is
//! what NVIDIA's driver answers on a Hopper part outside an NVSwitch fabric: success, with
//! `state` `NVML_GPU_FABRIC_STATE_NOT_SUPPORTED` (older parts: `NVML_ERROR_NOT_SUPPORTED`,
//! as documented, "For Hopper or newer").

use gpupool_shim::nvml::{
    NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE, NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE, NVML_GPU_FABRIC_STATE_NOT_SUPPORTED,
    nvmlGpuFabricInfo_v2_t, nvmlGpuP2PCapsIndex_t, nvmlGpuP2PStatus_t, nvmlPciInfo_t, nvmlProcessInfo_v1_t,
    nvmlProcessInfo_v2_t, nvmlReturn_t as R,
};
use std::os::raw::{c_char, c_uint};

/// A refused call: NVML's status code and why, for the caller's log line.
#[derive(Debug, PartialEq, Eq)]
pub struct Refused {
    pub code: R,
    pub why: String,
}

fn refuse<T>(code: R, why: impl Into<String>) -> Result<T, Refused> {
    Err(Refused { code, why: why.into() })
}

/// Where a device sits on the PCI bus (function 0: a GPU is one function).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
}

/// NVIDIA's PCI vendor id, the low half of `pciDeviceId`. The high half, the product's
/// device id, is 0: neither a simulated part nor a pool's view of one has a product id of
/// its own to report.
pub const NVIDIA_VENDOR_ID: u32 = 0x10de;

/// Parses a PCI bus id in the formats `nvmlDeviceGetHandleByPciBusId_v2` documents, all
/// hexadecimal: `domain:bus:device.function`, `domain:bus:device`, `bus:device.function`
/// (domain 0). `None` for anything else, or a function other than 0 (no GPU function of
/// ours has another).
pub fn parse_bus_id(text: &str) -> Option<PciAddress> {
    let hex = |s: &str| (!s.is_empty() && s.len() <= 8).then(|| u32::from_str_radix(s, 16).ok()).flatten();
    let (head, function) = match text.rsplit_once('.') {
        Some((h, f)) => (h, Some(hex(f)?)),
        None => (text, None),
    };
    let parts: Vec<&str> = head.split(':').collect();
    let (domain, bus, device) = match (parts.as_slice(), function) {
        ([d, b, dev], _) => (hex(d)?, hex(b)?, hex(dev)?),
        ([b, dev], Some(_)) => (0, hex(b)?, hex(dev)?),
        _ => return None,
    };
    (function.unwrap_or(0) == 0 && bus <= 0xff && device <= 0x1f).then_some(PciAddress { domain, bus, device })
}

/// `nvmlDeviceGetPciInfo_v3`'s answer for a device at `at`: `busId` as
/// `NVML_DEVICE_PCI_BUS_ID_FMT` (`%08X:%02X:%02X.0`), `busIdLegacy` as the legacy format
/// (`%04X:%02X:%02X.0`), NVIDIA's vendor id, no subsystem id.
pub fn pci_info(at: PciAddress) -> nvmlPciInfo_t {
    let mut info = nvmlPciInfo_t {
        domain: at.domain,
        bus: at.bus,
        device: at.device,
        pciDeviceId: NVIDIA_VENDOR_ID,
        pciSubSystemId: 0,
        ..Default::default()
    };
    copy_text(&mut info.busId, &format!("{:08X}:{:02X}:{:02X}.0", at.domain, at.bus, at.device));
    copy_text(&mut info.busIdLegacy, &format!("{:04X}:{:02X}:{:02X}.0", at.domain, at.bus, at.device));
    const _: () = assert!(NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE > 16 && NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE > 12);
    info
}

/// NUL-terminated, truncated to the buffer (never reached: the formats above fit).
fn copy_text(buf: &mut [c_char], text: &str) {
    let n = text.len().min(buf.len() - 1);
    for (d, s) in buf.iter_mut().zip(&text.as_bytes()[..n]) {
        *d = *s as c_char;
    }
    buf[n] = 0;
}

/// A process with a compute context on a device, and the device memory it uses there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    pub used_bytes: u64,
}

/// Outside MIG mode, NVML sets both instance ids to 0xFFFFFFFF.
const NO_MIG_INSTANCE: c_uint = 0xffff_ffff;

impl From<Process> for nvmlProcessInfo_v1_t {
    fn from(p: Process) -> Self {
        nvmlProcessInfo_v1_t { pid: p.pid, usedGpuMemory: p.used_bytes }
    }
}

impl From<Process> for nvmlProcessInfo_v2_t {
    fn from(p: Process) -> Self {
        nvmlProcessInfo_v2_t {
            pid: p.pid,
            usedGpuMemory: p.used_bytes,
            gpuInstanceId: NO_MIG_INSTANCE,
            computeInstanceId: NO_MIG_INSTANCE,
        }
    }
}

/// The array protocol of `nvmlDeviceGetComputeRunningProcesses*`: `*info_count` is the
/// capacity of `infos` on entry and the number of processes on return. With fewer slots
/// than processes (0 included, when `infos` may be NULL) the answer is
/// `NVML_ERROR_INSUFFICIENT_SIZE`, or `NVML_SUCCESS` if there are none; NULL `info_count`,
/// or NULL `infos` with a non-zero capacity, is `NVML_ERROR_INVALID_ARGUMENT`.
///
/// # Safety
/// `info_count`, if not NULL, is valid for reads and writes; `infos`, if not NULL, for
/// writes of `*info_count` elements (NVML's contract with its caller).
pub unsafe fn write_processes<T: From<Process>>(
    info_count: *mut c_uint,
    infos: *mut T,
    processes: &[Process],
) -> Result<(), Refused> {
    if info_count.is_null() {
        return refuse(R::NVML_ERROR_INVALID_ARGUMENT, "infoCount is NULL");
    }
    // SAFETY: non-NULL, valid per the caller's contract.
    let capacity = unsafe { info_count.read_unaligned() } as usize;
    let needed = processes.len();
    // SAFETY: as above.
    unsafe { info_count.write_unaligned(needed as c_uint) };
    if capacity < needed {
        return refuse(
            R::NVML_ERROR_INSUFFICIENT_SIZE,
            format!("{needed} processes, room for {capacity} (infoCount now says how many)"),
        );
    }
    if needed > 0 && infos.is_null() {
        return refuse(R::NVML_ERROR_INVALID_ARGUMENT, "infos is NULL with a non-zero infoCount");
    }
    for (i, p) in processes.iter().enumerate() {
        // SAFETY: i < needed <= capacity elements the caller provides.
        unsafe { infos.add(i).write_unaligned(T::from(*p)) };
    }
    Ok(())
}

/// `nvmlDeviceGetGpuFabricInfoV` for a device of compute capability `cc_major` outside any
/// NVLink fabric; `version` is the caller's `gpuFabricInfo->version` (only
/// `nvmlGpuFabricInfo_v2` is known here: a later one is `NVML_ERROR_ARGUMENT_VERSION_MISMATCH`,
/// as NVIDIA's driver answers a version newer than its own, and callers fall back).
pub fn fabric_info(cc_major: u32, version: c_uint) -> Result<nvmlGpuFabricInfo_v2_t, Refused> {
    let v2 = (std::mem::size_of::<nvmlGpuFabricInfo_v2_t>() as c_uint) | (2 << 24);
    if version != v2 {
        return refuse(
            R::NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
            format!("fabric info version {version:#x}; this library knows nvmlGpuFabricInfo_v2 ({v2:#x})"),
        );
    }
    if cc_major < 9 {
        return refuse(R::NVML_ERROR_NOT_SUPPORTED, format!("GPU fabric needs Hopper or newer (compute {cc_major}.x)"));
    }
    Ok(nvmlGpuFabricInfo_v2_t {
        version,
        // "status: must be checked only if state returns complete"; no fabric, so none.
        status: R::NVML_ERROR_NOT_SUPPORTED,
        state: NVML_GPU_FABRIC_STATE_NOT_SUPPORTED as u8,
        ..Default::default()
    })
}

/// Writes a fabric answer field by field over zeroed memory, so the struct's padding reads
/// as 0 too: nvidia-ml-py declares `state` as a 4-byte integer (nvml.h: one byte and three of
/// padding), so any padding byte left as it was would show in its `state`.
///
/// # Safety
/// `dst` is non-NULL and valid for writes of one `nvmlGpuFabricInfo_v2_t`.
pub unsafe fn put_fabric_info(dst: *mut nvmlGpuFabricInfo_v2_t, v: nvmlGpuFabricInfo_v2_t) {
    // SAFETY: the caller's contract; field writes through raw pointers never touch padding.
    unsafe {
        dst.cast::<u8>().write_bytes(0, std::mem::size_of::<nvmlGpuFabricInfo_v2_t>());
        std::ptr::addr_of_mut!((*dst).version).write_unaligned(v.version);
        std::ptr::addr_of_mut!((*dst).clusterUuid).write_unaligned(v.clusterUuid);
        std::ptr::addr_of_mut!((*dst).status).write_unaligned(v.status);
        std::ptr::addr_of_mut!((*dst).cliqueId).write_unaligned(v.cliqueId);
        std::ptr::addr_of_mut!((*dst).state).write_unaligned(v.state);
        std::ptr::addr_of_mut!((*dst).healthMask).write_unaligned(v.healthMask);
    }
}

/// `nvmlDeviceGetNvLinkRemoteDeviceType` and `nvmlDeviceGetNvLinkRemotePciInfo_v2` on a
/// device without NVLink: `NVML_ERROR_NOT_SUPPORTED` ("if NVLink is not supported") for
/// every link index, since none is a link of this device (and `NVML_NVLINK_MAX_LINKS`, 18 in
/// CUDA 12's nvml.h and 36 in later ones, depends on the header the caller was built with).
pub fn nvlink(link: c_uint) -> Refused {
    Refused { code: R::NVML_ERROR_NOT_SUPPORTED, why: format!("NvLink link {link}: this device has no NVLink") }
}

/// `nvmlDeviceGetP2PStatus` between two valid devices: no peer access of any kind.
pub fn p2p_status(index: nvmlGpuP2PCapsIndex_t) -> Result<nvmlGpuP2PStatus_t, Refused> {
    if index.0 >= nvmlGpuP2PCapsIndex_t::NVML_P2P_CAPS_INDEX_UNKNOWN.0 {
        return refuse(R::NVML_ERROR_INVALID_ARGUMENT, format!("P2P capability index {}", index.0));
    }
    Ok(nvmlGpuP2PStatus_t::NVML_P2P_STATUS_NOT_SUPPORTED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_bus_id_format_parses_and_nothing_else() {
        let at = PciAddress { domain: 0, bus: 0x18, device: 0 };
        for text in ["0000:18:00.0", "00000000:18:00.0", "0:18:0.0", "0000:18:00", "18:00.0", "0000:18:00.0"] {
            assert_eq!(parse_bus_id(text), Some(at), "{text}");
        }
        assert_eq!(parse_bus_id("0001:2A:1f.0"), Some(PciAddress { domain: 1, bus: 0x2a, device: 0x1f }));
        for bad in
            ["", "18", "18:00", "0000:18:00.1", "zz:00.0", "0000:100:00.0", "0:18:20.0", "0:0:18:00.0", "0000:18:.0"]
        {
            assert_eq!(parse_bus_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn pci_info_prints_both_formats_and_finds_itself_back() {
        let at = PciAddress { domain: 0, bus: 0x28, device: 0 };
        let info = pci_info(at);
        let text = |b: &[c_char]| b.iter().take_while(|&&c| c != 0).map(|&c| c as u8 as char).collect::<String>();
        assert_eq!(text(&info.busId), "00000000:28:00.0");
        assert_eq!(text(&info.busIdLegacy), "0000:28:00.0");
        assert_eq!((info.domain, info.bus, info.device, info.pciDeviceId & 0xffff), (0, 0x28, 0, 0x10de));
        assert_eq!(parse_bus_id(&text(&info.busId)), Some(at));
    }

    #[test]
    fn process_lists_follow_the_size_protocol() {
        let procs = [Process { pid: 7, used_bytes: 1 << 20 }, Process { pid: 9, used_bytes: 0 }];
        let mut count: c_uint = 0;
        // SAFETY: valid pointers; infos may be NULL with a zero count.
        let r = unsafe { write_processes::<nvmlProcessInfo_v2_t>(&mut count, std::ptr::null_mut(), &procs) };
        assert_eq!(r.unwrap_err().code, R::NVML_ERROR_INSUFFICIENT_SIZE);
        assert_eq!(count, 2);
        let mut out = [nvmlProcessInfo_v1_t::default(); 3];
        count = 3;
        // SAFETY: room for 3.
        unsafe { write_processes(&mut count, out.as_mut_ptr(), &procs) }.unwrap();
        assert_eq!(count, 2);
        assert_eq!((out[0].pid, out[0].usedGpuMemory, out[1].pid), (7, 1 << 20, 9));
        count = 0;
        // SAFETY: nothing is written for an empty list.
        unsafe { write_processes::<nvmlProcessInfo_v1_t>(&mut count, std::ptr::null_mut(), &[]) }.unwrap();
        assert_eq!(count, 0);
        count = 1;
        // SAFETY: the NULL infos is refused before any write.
        let r = unsafe { write_processes::<nvmlProcessInfo_v1_t>(&mut count, std::ptr::null_mut(), &procs[..1]) };
        assert_eq!(r.unwrap_err().code, R::NVML_ERROR_INVALID_ARGUMENT);
        // SAFETY: NULL count is refused before any access.
        let r = unsafe { write_processes::<nvmlProcessInfo_v1_t>(std::ptr::null_mut(), out.as_mut_ptr(), &procs) };
        assert_eq!(r.unwrap_err().code, R::NVML_ERROR_INVALID_ARGUMENT);
        let v2 = nvmlProcessInfo_v2_t::from(procs[0]);
        assert_eq!((v2.gpuInstanceId, v2.computeInstanceId), (NO_MIG_INSTANCE, NO_MIG_INSTANCE));
    }

    #[test]
    fn fabric_nvlink_and_p2p_answer_as_a_device_without_them() {
        let v2 = (std::mem::size_of::<nvmlGpuFabricInfo_v2_t>() as c_uint) | (2 << 24);
        assert_eq!(v2, 0x0200_0024, "NVIDIA's nvmlGpuFabricInfo_v2");
        let f = fabric_info(9, v2).unwrap();
        assert_eq!((f.version, f.state as u32, f.cliqueId), (v2, NVML_GPU_FABRIC_STATE_NOT_SUPPORTED, 0));
        let mut raw = [0xffu8; std::mem::size_of::<nvmlGpuFabricInfo_v2_t>()];
        // SAFETY: a buffer of the struct's size (unaligned writes).
        unsafe { put_fabric_info(raw.as_mut_ptr().cast(), f) };
        assert_eq!(&raw[28..32], &[NVML_GPU_FABRIC_STATE_NOT_SUPPORTED as u8, 0, 0, 0], "state and its padding");
        assert_eq!(raw[..4], v2.to_le_bytes());
        assert_eq!(fabric_info(8, v2).unwrap_err().code, R::NVML_ERROR_NOT_SUPPORTED);
        assert_eq!(fabric_info(9, 0x0300_0028).unwrap_err().code, R::NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        assert_eq!(nvlink(0).code, R::NVML_ERROR_NOT_SUPPORTED);
        assert_eq!(nvlink(36).code, R::NVML_ERROR_NOT_SUPPORTED);
        let read = nvmlGpuP2PCapsIndex_t::NVML_P2P_CAPS_INDEX_READ;
        assert_eq!(p2p_status(read).unwrap(), nvmlGpuP2PStatus_t::NVML_P2P_STATUS_NOT_SUPPORTED);
        let unknown = nvmlGpuP2PCapsIndex_t::NVML_P2P_CAPS_INDEX_UNKNOWN;
        assert_eq!(p2p_status(unknown).unwrap_err().code, R::NVML_ERROR_INVALID_ARGUMENT);
    }
}
