//! DCMI (`libdcmi.so`, what npu-smi uses) answered by `libgpupool.so` for the NPUs of the pool,
//! as NVML is for the GPUs: each NPU is a card with one chip (card `n` is the program's NPU
//! `n`), and its memory is the tenant's view, the quota as the size (the daemon's management
//! query, `MgmtMemoryInfo`), in MB as DCMI reports it. Chip info comes from the device list (the
//! SoC name split as DCMI splits it, the AI Core count the daemon read from its own DCMI); AI Core
//! utilization is the daemon's `MgmtUtilization`: operator time charged on that NPU over the last
//! second, every tenant's, as a device's utilization is.

use super::*;
use gpupool_shim::dcmi::{self as dc, dcmi_chip_info, dcmi_get_memory_info_stru, dcmi_hbm_info};
use std::os::raw::{c_int, c_uint};

const INVALID: c_int = dc::DCMI_ERR_CODE_INVALID_PARAMETER;

fn dcmi(f: impl FnOnce(&mut Client) -> Result<(), c_int>) -> c_int {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        client::with(|c| Ok(f(c))).unwrap_or(Err(dc::DCMI_ERR_CODE_INNER_ERR)).err().unwrap_or(0)
    }))
    .unwrap_or(dc::DCMI_ERR_CODE_INNER_ERR)
}

/// Card `card`'s chip `device` (the only one, 0).
fn chip(c: &mut Client, card: c_int, device: c_int) -> Result<Npu, c_int> {
    if c.acl.npus.is_empty() {
        load_npus(c).map_err(|_| dc::DCMI_ERR_CODE_INNER_ERR)?;
    }
    usize::try_from(card)
        .ok()
        .and_then(|i| c.acl.npus.get(i).copied())
        .filter(|_| device == 0)
        .ok_or(dc::DCMI_ERR_CODE_INVALID_DEVICE_ID)
}

/// (free, total) bytes of card `card`'s chip as the tenant sees them.
fn memory(c: &mut Client, card: c_int, device: c_int) -> Result<(u64, u64), c_int> {
    let n = chip(c, card, device)?;
    let r = c.conn_at(n.ep).and_then(|conn| conn.ask(Request::MgmtMemoryInfo { device: n.ordinal }));
    let answer::MemInfo { free, total } = r.map_err(|e| {
        c.note(e);
        dc::DCMI_ERR_CODE_INNER_ERR
    })?;
    Ok((free, total))
}

fn write<T>(p: *mut T, v: T) -> Result<(), c_int> {
    if p.is_null() {
        return Err(INVALID);
    }
    // SAFETY: non-null, the caller's out-pointer for this value by DCMI's contract.
    unsafe { p.write(v) };
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dcmi_init() -> c_int {
    dcmi(|c| load_npus(c).map_err(|_| dc::DCMI_ERR_CODE_INNER_ERR))
}
const _: unsafe extern "C" fn() -> c_int = dc::dcmi_init;

/// `dcmi_get_card_list`: the same list as [`dcmi_get_card_num_list`] (DCMI has both names).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dcmi_get_card_list(card_num: *mut c_int, card_list: *mut c_int, list_len: c_int) -> c_int {
    // SAFETY: the same contract, passed through.
    unsafe { dcmi_get_card_num_list(card_num, card_list, list_len) }
}
const _: unsafe extern "C" fn(*mut c_int, *mut c_int, c_int) -> c_int = dc::dcmi_get_card_list;

fn name_bytes(s: &str) -> [u8; 32] {
    let mut a = [0u8; 32];
    let n = s.len().min(31);
    a[..n].copy_from_slice(&s.as_bytes()[..n]);
    a
}

/// The chip's type and name as DCMI splits a SoC name ("Ascend910B3": "Ascend", "910B3").
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dcmi_get_device_chip_info(
    card_id: c_int,
    device_id: c_int,
    info: *mut dcmi_chip_info,
) -> c_int {
    dcmi(|c| {
        let n = chip(c, card_id, device_id)?;
        let soc = c.acl.names.get(n.name_index).cloned().unwrap_or_default();
        let (kind, name) = soc.split_at(soc.find(|ch: char| ch.is_ascii_digit()).unwrap_or(soc.len()));
        write(
            info,
            dcmi_chip_info {
                chip_type: name_bytes(kind),
                chip_name: name_bytes(name),
                chip_ver: name_bytes("V1"),
                aicore_cnt: n.aicores,
            },
        )
    })
}
const _: unsafe extern "C" fn(c_int, c_int, *mut dcmi_chip_info) -> c_int = dc::dcmi_get_device_chip_info;

/// AI Core (and vector, cube, NPU) utilization from the daemon's scheduler; HBM utilization as the
/// tenant's memory view; anything else is not measured (DCMI_ERR_CODE_NOT_SUPPORT).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dcmi_get_device_utilization_rate(
    card_id: c_int,
    device_id: c_int,
    input_type: c_int,
    rate: *mut c_uint,
) -> c_int {
    dcmi(|c| {
        let n = chip(c, card_id, device_id)?;
        if rate.is_null() {
            return Err(INVALID);
        }
        let v = match input_type as u32 {
            dc::DCMI_UTILIZATION_RATE_AICORE
            | dc::DCMI_UTILIZATION_RATE_VECTORCORE
            | dc::DCMI_UTILIZATION_RATE_NPU
            | dc::DCMI_UTILIZATION_RATE_AICUBE => {
                let r = c.conn_at(n.ep).and_then(|conn| conn.ask(Request::MgmtUtilization { device: n.ordinal }));
                let answer::Utilization { gpu_percent, .. } = r.map_err(|e| {
                    c.note(e);
                    dc::DCMI_ERR_CODE_INNER_ERR
                })?;
                gpu_percent
            }
            dc::DCMI_UTILIZATION_RATE_HBM => {
                let (free, total) = memory(c, card_id, device_id)?;
                (total.saturating_sub(free) * 100).checked_div(total).unwrap_or(0) as c_uint
            }
            _ => return Err(dc::DCMI_ERR_CODE_NOT_SUPPORT),
        };
        write(rate, v)
    })
}
const _: unsafe extern "C" fn(c_int, c_int, c_int, *mut c_uint) -> c_int = dc::dcmi_get_device_utilization_rate;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dcmi_get_card_num_list(card_num: *mut c_int, card_list: *mut c_int, list_len: c_int) -> c_int {
    dcmi(|c| {
        if c.acl.npus.is_empty() {
            load_npus(c).map_err(|_| dc::DCMI_ERR_CODE_INNER_ERR)?;
        }
        let n = c.acl.npus.len();
        if card_list.is_null() || list_len < 0 || (list_len as usize) < n {
            return Err(INVALID);
        }
        for i in 0..n {
            // SAFETY: `list_len` (at least n) writable ints at card_list, by the contract.
            unsafe { card_list.add(i).write(i as c_int) };
        }
        write(card_num, n as c_int)
    })
}
const _: unsafe extern "C" fn(*mut c_int, *mut c_int, c_int) -> c_int = dc::dcmi_get_card_num_list;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dcmi_get_device_num_in_card(card_id: c_int, device_num: *mut c_int) -> c_int {
    dcmi(|c| {
        if c.acl.npus.is_empty() {
            load_npus(c).map_err(|_| dc::DCMI_ERR_CODE_INNER_ERR)?;
        }
        if usize::try_from(card_id).ok().is_none_or(|i| i >= c.acl.npus.len()) {
            return Err(dc::DCMI_ERR_CODE_INVALID_DEVICE_ID);
        }
        write(device_num, 1)
    })
}
const _: unsafe extern "C" fn(c_int, *mut c_int) -> c_int = dc::dcmi_get_device_num_in_card;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dcmi_get_device_memory_info_v3(
    card_id: c_int,
    device_id: c_int,
    memory_info: *mut dcmi_get_memory_info_stru,
) -> c_int {
    dcmi(|c| {
        let (free, total) = memory(c, card_id, device_id)?;
        let used = total.saturating_sub(free);
        write(
            memory_info,
            dcmi_get_memory_info_stru {
                memory_size: total >> 20,
                memory_available: free >> 20,
                freq: 0,
                hugepagesize: 0,
                hugepages_total: 0,
                hugepages_free: 0,
                utiliza: (used * 100).checked_div(total).unwrap_or(0) as c_uint,
                reserve: [0; 60],
            },
        )
    })
}
const _: unsafe extern "C" fn(c_int, c_int, *mut dcmi_get_memory_info_stru) -> c_int =
    dc::dcmi_get_device_memory_info_v3;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dcmi_get_device_hbm_info(
    card_id: c_int,
    device_id: c_int,
    hbm_info: *mut dcmi_hbm_info,
) -> c_int {
    dcmi(|c| {
        let (free, total) = memory(c, card_id, device_id)?;
        write(
            hbm_info,
            dcmi_hbm_info {
                memory_size: total >> 20,
                freq: 0,
                memory_usage: total.saturating_sub(free) >> 20,
                temp: 0,
                bandwith_util_rate: 0,
            },
        )
    })
}
const _: unsafe extern "C" fn(c_int, c_int, *mut dcmi_hbm_info) -> c_int = dc::dcmi_get_device_hbm_info;
