//! `CUDA_VISIBLE_DEVICES` as NVIDIA's driver reads it, over the GPUs the daemons gave this
//! process (for a placed session, its devices 0..N-1): a comma-separated list of indices into
//! that list or `GPU-` UUID prefixes naming exactly one device; the devices listed, in that
//! order, are CUDA's devices 0..; the first entry that names no device (out of range, unknown,
//! ambiguous, a MIG instance, or one already listed) ends the list, and an empty value leaves
//! none. NVML is not narrowed, as NVIDIA's is not. This module owns the parsing only.

use gpupool_protocol::ops::DeviceInfo;

/// The indices into `list` that `value` makes visible, in CUDA's order.
pub fn parse(value: &str, list: &[DeviceInfo]) -> Vec<usize> {
    let mut out = Vec::new();
    for entry in value.split(',').map(str::trim) {
        let found = if let Ok(i) = entry.parse::<usize>() {
            (i < list.len()).then_some(i)
        } else if entry.len() > 4 && entry[..4].eq_ignore_ascii_case("GPU-") {
            let want = entry.to_ascii_lowercase();
            let mut hits = (0..list.len())
                .filter(|&i| gpupool_abi::identity::uuid_string(&list[i].uuid).to_ascii_lowercase().starts_with(&want));
            match (hits.next(), hits.next()) {
                (Some(i), None) => Some(i),
                _ => None,
            }
        } else {
            None
        };
        match found {
            Some(i) if !out.contains(&i) => out.push(i),
            _ => {
                if !entry.is_empty() {
                    crate::util::log(&format!(
                        "CUDA_VISIBLE_DEVICES: `{entry}` names no device; the list ends before it"
                    ));
                }
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(first: u8) -> DeviceInfo {
        let mut uuid = [0x11; 16];
        uuid[0] = first;
        DeviceInfo {
            ordinal: 0,
            name: "g".into(),
            uuid,
            total_memory: 1,
            compute_capability: [9, 0],
            attributes: Vec::new(),
            vendor: gpupool_protocol::ops::VENDOR_CUDA,
        }
    }

    #[test]
    fn indices_and_uuid_prefixes_in_order_until_the_first_bad_entry() {
        let list = [gpu(0xab), gpu(0xac), gpu(0x5c)];
        assert_eq!(parse("2,0", &list), [2, 0]);
        assert_eq!(parse("1, 7, 0", &list), [1], "an index past the list ends it");
        assert_eq!(parse("GPU-5c,GPU-ab", &list), [2, 0]);
        assert_eq!(parse("GPU-a,1", &list), Vec::<usize>::new(), "an ambiguous prefix names none");
        assert_eq!(parse("0,0,1", &list), [0], "a device listed twice ends the list");
        assert_eq!(parse("MIG-1,0", &list), Vec::<usize>::new());
        assert_eq!(parse("", &list), Vec::<usize>::new());
        assert_eq!(parse("-1", &list), Vec::<usize>::new());
    }
}
