//! Which NPUs the simulator presents: from `GPUPOOL_SIM_NPU_CONFIG` (a TOML file), overridden
//! field by field by `GPUPOOL_SIM_NPU_DEVICES` and `GPUPOOL_SIM_NPU_MEMORY` (the GPU
//! simulator's scheme, under its own names so one process can configure both). The default is
//! two Ascend 910B3-like devices of 64 GiB.
//!
//! ```toml
//! [[device]]
//! soc = "Ascend910B3"     # aclrtGetSocName, and DCMI's chip name
//! memory = "64GiB"        # bytes, or a number with KiB/MiB/GiB/TiB
//! aicores = 20            # DCMI's aicore_cnt
//! ```

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq)]
pub struct DeviceConfig {
    pub soc: String,
    pub memory_bytes: u64,
    pub aicores: u32,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig { soc: "Ascend910B3".into(), memory_bytes: 64 << 30, aicores: 20 }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NpuConfig {
    pub devices: Vec<DeviceConfig>,
}

impl Default for NpuConfig {
    fn default() -> Self {
        NpuConfig { devices: vec![DeviceConfig::default(); 2] }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default, rename = "device")]
    devices: Vec<FileDevice>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileDevice {
    soc: Option<String>,
    memory: Option<toml::Value>,
    aicores: Option<u32>,
}

/// Parses "64GiB", "1536MiB", "4 GB", "1048576".
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => return Err(format!("unknown size unit {other:?} in {text:?}")),
    };
    let v: u64 = num.parse().map_err(|_| format!("bad size {text:?}"))?;
    v.checked_mul(mult).ok_or_else(|| format!("size {text:?} overflows"))
}

impl NpuConfig {
    /// Builds the configuration from a TOML text and the environment variables.
    pub fn from_sources(toml_text: Option<&str>, env: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let mut cfg = NpuConfig::default();
        if let Some(text) = toml_text {
            let file: FileConfig = toml::from_str(text).map_err(|e| format!("config: {e}"))?;
            if !file.devices.is_empty() {
                cfg.devices = file
                    .devices
                    .into_iter()
                    .map(|d| {
                        let mut dev = DeviceConfig::default();
                        if let Some(s) = d.soc {
                            dev.soc = s;
                        }
                        match d.memory {
                            Some(toml::Value::Integer(i)) if i > 0 => dev.memory_bytes = i as u64,
                            Some(toml::Value::String(s)) => dev.memory_bytes = parse_size(&s)?,
                            Some(other) => return Err(format!("config: bad device memory {other}")),
                            None => {}
                        }
                        if let Some(a) = d.aicores {
                            dev.aicores = a;
                        }
                        Ok(dev)
                    })
                    .collect::<Result<_, String>>()?;
            }
        }
        if let Some(n) = env("GPUPOOL_SIM_NPU_DEVICES") {
            let n: usize = n.trim().parse().map_err(|_| format!("GPUPOOL_SIM_NPU_DEVICES: bad count {n:?}"))?;
            let template = cfg.devices.first().cloned().unwrap_or_default();
            cfg.devices.resize(n, template);
        }
        if let Some(m) = env("GPUPOOL_SIM_NPU_MEMORY") {
            let bytes = parse_size(&m).map_err(|e| format!("GPUPOOL_SIM_NPU_MEMORY: {e}"))?;
            cfg.devices.iter_mut().for_each(|d| d.memory_bytes = bytes);
        }
        for d in &cfg.devices {
            if d.memory_bytes == 0 || d.aicores == 0 {
                return Err(format!("device {:?}: memory and aicores must be positive", d.soc));
            }
        }
        Ok(cfg)
    }

    /// Reads `GPUPOOL_SIM_NPU_CONFIG` and the other variables of this process.
    pub fn from_env() -> Result<Self, String> {
        let text = match std::env::var("GPUPOOL_SIM_NPU_CONFIG") {
            Ok(path) if !path.is_empty() => {
                Some(std::fs::read_to_string(&path).map_err(|e| format!("GPUPOOL_SIM_NPU_CONFIG {path}: {e}"))?)
            }
            _ => None,
        };
        Self::from_sources(text.as_deref(), |k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_two_910b3s_of_64_gib() {
        let c = NpuConfig::from_sources(None, |_| None).unwrap();
        assert_eq!(c.devices.len(), 2);
        assert_eq!(c.devices[0], DeviceConfig { soc: "Ascend910B3".into(), memory_bytes: 64 << 30, aicores: 20 });
    }

    #[test]
    fn toml_then_environment() {
        let text = "[[device]]\nsoc = \"Ascend310P3\"\nmemory = \"1536MiB\"\naicores = 8\n";
        let c = NpuConfig::from_sources(Some(text), |_| None).unwrap();
        assert_eq!(c.devices, vec![DeviceConfig { soc: "Ascend310P3".into(), memory_bytes: 1536 << 20, aicores: 8 }]);
        let env = |k: &str| match k {
            "GPUPOOL_SIM_NPU_DEVICES" => Some("3".to_string()),
            "GPUPOOL_SIM_NPU_MEMORY" => Some("1GiB".to_string()),
            _ => None,
        };
        let c = NpuConfig::from_sources(Some(text), env).unwrap();
        assert_eq!(c.devices.len(), 3);
        assert!(c.devices.iter().all(|d| d.memory_bytes == 1 << 30 && d.aicores == 8));
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(NpuConfig::from_sources(Some("[[device]]\nmemory = \"12 parsecs\"\n"), |_| None).is_err());
        assert!(NpuConfig::from_sources(Some("[[device]]\ncolour = \"red\"\n"), |_| None).is_err());
        assert!(NpuConfig::from_sources(None, |k| (k == "GPUPOOL_SIM_NPU_MEMORY").then(|| "0".into())).is_err());
    }
}
