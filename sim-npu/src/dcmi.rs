//! The DCMI exports (`libdcmi.so`): each simulated NPU is card N with one chip, device 0.
//! Memory and utilization are this process's view of the same devices the runtime serves:
//! memory sizes in MB (2^20 bytes, rounded down), used memory as the runtime's ledger charges
//! it, so `aclrtGetMemInfo` and DCMI agree. A bad card or chip id is
//! DCMI_ERR_CODE_INVALID_DEVICE_ID, a NULL out-pointer DCMI_ERR_CODE_INVALID_PARAMETER, a
//! utilization type the simulator does not measure DCMI_ERR_CODE_NOT_SUPPORT.

use crate::export::exports;
use crate::memory;
use crate::runtime::config;
use crate::status::{Res, code, fail, out};
use gpupool_shim::dcmi::{dcmi_chip_info, dcmi_get_memory_info_stru, dcmi_hbm_info, dcmi_unit_type};
use std::ffi::{c_char, c_int, c_uint};

const P: i32 = code::DCMI_INVALID_PARAMETER;

fn chip(card_id: c_int, device_id: c_int) -> Res<u32> {
    let n = config().devices.len() as c_int;
    if !(0..n).contains(&card_id) || device_id != 0 {
        return fail(code::DCMI_INVALID_DEVICE_ID, || {
            format!("card {card_id} chip {device_id} (cards 0..{n}, chip 0)")
        });
    }
    Ok(card_id as u32)
}

/// (total, used) bytes of a chip.
fn memory_of(d: u32) -> (u64, u64) {
    (config().devices[d as usize].memory_bytes, memory::used(d))
}

fn write_str(dst: *mut c_char, len: c_uint, s: &str) -> Res<()> {
    if dst.is_null() || (len as usize) <= s.len() {
        return fail(P, || format!("buffer NULL or {len} bytes for {:?}", s));
    }
    // SAFETY: `dst` holds `len` > s.len() bytes by the caller's word.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), dst as *mut u8, s.len());
        *dst.add(s.len()) = 0;
    }
    Ok(())
}

fn name_bytes(s: &str) -> [u8; 32] {
    let mut a = [0u8; 32];
    let n = s.len().min(31);
    a[..n].copy_from_slice(&s.as_bytes()[..n]);
    a
}

fn card_list(card_num: *mut c_int, card_list: *mut c_int, list_len: c_int) -> Res<()> {
    let n = config().devices.len() as c_int;
    if card_num.is_null() || card_list.is_null() || list_len < n {
        return fail(P, || format!("card_num/card_list NULL or list_len {list_len} < {n}"));
    }
    for i in 0..n {
        // SAFETY: `card_list` holds `list_len` >= n ints by the caller's word.
        unsafe { *card_list.add(i as usize) = i };
    }
    out(card_num, n, P, "card_num")
}

exports! { dcmi -> c_int, on panic code::DCMI_INNER_ERR;

fn dcmi_init() {
    Ok(())
}

fn dcmi_get_dcmi_version(dcmi_ver: *mut c_char, len: c_uint) {
    write_str(dcmi_ver, len, "24.1.rc1")
}

fn dcmi_get_driver_version(driver_ver: *mut c_char, len: c_uint) {
    write_str(driver_ver, len, "24.1.rc1")
}

fn dcmi_get_card_list(card_num: *mut c_int, card_list_: *mut c_int, list_len: c_int) {
    card_list(card_num, card_list_, list_len)
}

fn dcmi_get_card_num_list(card_num: *mut c_int, card_list_: *mut c_int, list_len: c_int) {
    card_list(card_num, card_list_, list_len)
}

fn dcmi_get_device_num_in_card(card_id: c_int, device_num: *mut c_int) {
    chip(card_id, 0)?;
    out(device_num, 1, P, "device_num")
}

fn dcmi_get_device_id_in_card(card_id: c_int, device_id_max: *mut c_int, mcu_id: *mut c_int, cpu_id: *mut c_int) {
    chip(card_id, 0)?;
    out(device_id_max, 1, P, "device_id_max")?;
    out(mcu_id, -1, P, "mcu_id")?;
    out(cpu_id, -1, P, "cpu_id")
}

fn dcmi_get_device_type(card_id: c_int, device_id: c_int, device_type: *mut dcmi_unit_type) {
    chip(card_id, device_id)?;
    out(device_type, dcmi_unit_type::NPU_TYPE, P, "device_type")
}

fn dcmi_get_device_chip_info(card_id: c_int, device_id: c_int, chip_info: *mut dcmi_chip_info) {
    let d = chip(card_id, device_id)?;
    let dev = &config().devices[d as usize];
    let soc = &dev.soc;
    let (kind, name) = soc.split_at(soc.find(|c: char| c.is_ascii_digit()).unwrap_or(soc.len()));
    let info = dcmi_chip_info {
        chip_type: name_bytes(kind),
        chip_name: name_bytes(name),
        chip_ver: name_bytes("V1"),
        aicore_cnt: dev.aicores,
    };
    out(chip_info, info, P, "chip_info")
}

fn dcmi_get_device_logic_id(device_logic_id: *mut c_int, card_id: c_int, device_id: c_int) {
    let d = chip(card_id, device_id)?;
    out(device_logic_id, d as c_int, P, "device_logic_id")
}

fn dcmi_get_device_hbm_info(card_id: c_int, device_id: c_int, hbm_info: *mut dcmi_hbm_info) {
    let d = chip(card_id, device_id)?;
    let (total, used) = memory_of(d);
    let info = dcmi_hbm_info { memory_size: total >> 20, freq: 1600, memory_usage: used >> 20, temp: 40, bandwith_util_rate: 0 };
    out(hbm_info, info, P, "hbm_info")
}

fn dcmi_get_device_memory_info_v3(card_id: c_int, device_id: c_int, memory_info: *mut dcmi_get_memory_info_stru) {
    let d = chip(card_id, device_id)?;
    let (total, used) = memory_of(d);
    let info = dcmi_get_memory_info_stru {
        memory_size: total >> 20,
        memory_available: (total - used) >> 20,
        freq: 1600,
        hugepagesize: 2048,
        hugepages_total: 0,
        hugepages_free: 0,
        utiliza: (used * 100).checked_div(total).unwrap_or(0) as c_uint,
        reserve: [0; 60],
    };
    out(memory_info, info, P, "memory_info")
}

fn dcmi_get_device_utilization_rate(card_id: c_int, device_id: c_int, input_type: c_int, utilization_rate: *mut c_uint) {
    let d = chip(card_id, device_id)?;
    let rate = match input_type as u32 {
        gpupool_shim::dcmi::DCMI_UTILIZATION_RATE_AICORE
        | gpupool_shim::dcmi::DCMI_UTILIZATION_RATE_VECTORCORE
        | gpupool_shim::dcmi::DCMI_UTILIZATION_RATE_NPU
        | gpupool_shim::dcmi::DCMI_UTILIZATION_RATE_AICUBE => crate::util::percent(d),
        gpupool_shim::dcmi::DCMI_UTILIZATION_RATE_HBM => {
            let (total, used) = memory_of(d);
            (used * 100).checked_div(total).unwrap_or(0) as u32
        }
        other => return fail(code::DCMI_NOT_SUPPORT, || format!("utilization type {other} is not measured")),
    };
    out(utilization_rate, rate, P, "utilization_rate")
}

fn dcmi_get_device_health(card_id: c_int, device_id: c_int, health: *mut c_uint) {
    chip(card_id, device_id)?;
    out(health, 0, P, "health")
}
}
