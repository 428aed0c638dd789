//! HAMi-core's environment variables, accepted as a client's *request* so HAMi users can migrate.
//!
//! - `CUDA_DEVICE_MEMORY_LIMIT=4g` asks for 4 GiB on every device; `CUDA_DEVICE_MEMORY_LIMIT_<n>=4096m`
//!   asks for device `n` and wins over the all-devices value for that device (HAMi's precedence).
//!   Suffixes as HAMi reads them: `k`/`K` KiB, `m`/`M` MiB, `g`/`G` GiB, none = bytes; gpupool's own forms
//!   (`"1536MiB"`, `"4GB"`) are accepted too. A value must be a whole number of MiB. `0` means "no limit"
//!   in HAMi, so it is no request here.
//! - `CUDA_DEVICE_SM_LIMIT=30` asks for 30% of each device's compute. `0` is no request (HAMi: unlimited);
//!   above 100 is an error.
//!
//! Other HAMi variables (`CUDA_DEVICE_MEMORY_SHARED_CACHE`, `CUDA_OVERSUBSCRIBE`, ...) are ignored. The
//! parser takes the variables as pairs (pass `std::env::vars()`); it reads no environment itself.

use crate::resolve::ClientRequest;
use crate::sizes::{SizeError, parse_size, require_whole_mib};

/// The all-devices memory variable.
pub const MEMORY_VAR: &str = "CUDA_DEVICE_MEMORY_LIMIT";
/// The compute variable.
pub const SM_VAR: &str = "CUDA_DEVICE_SM_LIMIT";

/// A HAMi variable with a value we cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value}: {message}")]
pub struct HamiError {
    /// The variable.
    pub var: String,
    /// Its value.
    pub value: String,
    /// What is wrong.
    pub message: String,
}

fn hami_size(value: &str) -> Result<u64, SizeError> {
    let v = value.trim();
    let (num, mult) = match v.as_bytes().last() {
        Some(b'k' | b'K') => (&v[..v.len() - 1], 1u64 << 10),
        Some(b'm' | b'M') => (&v[..v.len() - 1], 1 << 20),
        Some(b'g' | b'G') => (&v[..v.len() - 1], 1 << 30),
        _ => return parse_size(v),
    };
    match num.parse::<u64>() {
        Ok(n) => n.checked_mul(mult).ok_or_else(|| SizeError::Overflow(value.to_string())),
        Err(_) => parse_size(v),
    }
}

/// Turn HAMi's variables (among any others) into a [`ClientRequest`].
pub fn request_from_hami_env<I, K, V>(vars: I) -> Result<ClientRequest, HamiError>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<str>,
{
    let mut req = ClientRequest::default();
    for (k, v) in vars {
        let (var, value) = (k.as_ref(), v.as_ref());
        let err = |message: String| HamiError { var: var.into(), value: value.into(), message };
        if var == SM_VAR {
            let pct: u32 = value.trim().parse().map_err(|_| err("not a whole percent".into()))?;
            req.compute = match pct {
                0 => None,
                1..=100 => Some(pct as u8),
                _ => return Err(err("a percent above 100".into())),
            };
            continue;
        }
        let Some(rest) = var.strip_prefix(MEMORY_VAR) else {
            continue;
        };
        let device = match rest {
            "" => None,
            _ => match rest.strip_prefix('_').and_then(|n| n.parse::<u32>().ok()) {
                Some(d) => Some(d),
                None => {
                    return Err(err(format!("expected {MEMORY_VAR} or {MEMORY_VAR}_<device index>")));
                }
            },
        };
        let bytes = hami_size(value).and_then(require_whole_mib).map_err(|e| err(e.to_string()))?;
        let bytes = (bytes != 0).then_some(bytes);
        match (device, bytes) {
            (None, b) => req.memory.default = b,
            (Some(d), Some(b)) => {
                req.memory.devices.insert(d, b);
            }
            (Some(d), None) => {
                req.memory.devices.remove(&d);
            }
        }
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(vars: &[(&str, &str)]) -> Result<ClientRequest, HamiError> {
        request_from_hami_env(vars.iter().copied())
    }

    #[test]
    fn all_devices_and_per_device() {
        let r = req(&[
            ("PATH", "/bin"),
            ("CUDA_DEVICE_MEMORY_LIMIT", "4g"),
            ("CUDA_DEVICE_MEMORY_LIMIT_1", "1536m"),
            ("CUDA_DEVICE_SM_LIMIT", "30"),
        ])
        .unwrap();
        assert_eq!(r.memory.for_device(0), Some(4 << 30));
        assert_eq!(r.memory.for_device(1), Some(1536 << 20));
        assert_eq!(r.memory.for_device(7), Some(4 << 30));
        assert_eq!(r.compute, Some(30));
    }

    #[test]
    fn suffixes() {
        for (v, bytes) in
            [("4096m", 4u64 << 30), ("4G", 4 << 30), ("1048576k", 1 << 30), ("2097152", 2 << 20), ("3GiB", 3 << 30)]
        {
            let r = req(&[("CUDA_DEVICE_MEMORY_LIMIT_0", v)]).unwrap();
            assert_eq!(r.memory.for_device(0), Some(bytes), "{v}");
            assert_eq!(r.memory.default, None);
        }
    }

    #[test]
    fn zero_is_no_request() {
        let r = req(&[("CUDA_DEVICE_MEMORY_LIMIT", "0"), ("CUDA_DEVICE_SM_LIMIT", "0")]).unwrap();
        assert_eq!(r, ClientRequest::default());
    }

    #[test]
    fn errors_name_the_variable() {
        let e = req(&[("CUDA_DEVICE_MEMORY_LIMIT", "4x")]).unwrap_err();
        assert_eq!(e.var, "CUDA_DEVICE_MEMORY_LIMIT");
        let e = req(&[("CUDA_DEVICE_MEMORY_LIMIT_0", "1000")]).unwrap_err();
        assert!(e.to_string().contains("CUDA_DEVICE_MEMORY_LIMIT_0=1000"), "{e}");
        assert!(e.message.contains("MiB"), "{e}");
        let e = req(&[("CUDA_DEVICE_MEMORY_LIMIT_X", "1g")]).unwrap_err();
        assert_eq!(e.var, "CUDA_DEVICE_MEMORY_LIMIT_X");
        let e = req(&[("CUDA_DEVICE_SM_LIMIT", "101")]).unwrap_err();
        assert_eq!(e.var, "CUDA_DEVICE_SM_LIMIT");
        assert!(req(&[("CUDA_DEVICE_SM_LIMIT", "half")]).is_err());
    }
}
