//! Which devices the simulator presents: from `GPUPOOL_SIM_CONFIG` (a TOML file),
//! overridden field by field by `GPUPOOL_SIM_DEVICES`, `GPUPOOL_SIM_MEMORY` and
//! `GPUPOOL_SIM_DRIVER_VERSION`. The default is two H100-like devices and a CUDA 13.0
//! driver. `GPUPOOL_SIM_KERNELS=discard` (or `kernels = "discard"`) makes a backend that
//! does nothing: launches are checked as always and then dropped, so a benchmark can
//! measure what the pool itself costs per launch (benches/README.md, `pool` part 2).
//!
//! ```toml
//! driver_version = "13.0"        # reported by cuDriverGetVersion (13000)
//! kernels = "run"                # or "discard": check each launch, then drop it
//! [[device]]
//! name = "gpupool sim H100 80GB HBM3"
//! memory = "80GiB"               # bytes, or a number with KiB/MiB/GiB/TiB (also KB/MB/GB)
//! sms = 132
//! compute_capability = "9.0"
//! clock_mhz = 1980
//!
//! [topology]                     # optional; NVML's topology and NVLink queries answer it
//! nvlink_islands = [[0, 1, 2, 3], [4, 5, 6, 7]]   # all-to-all NVLink, one link per peer
//! pcie_switches = [[0, 1], [2, 3], [4, 5], [6, 7]] # devices behind one PCIe switch
//! numa_nodes = [[0, 1, 2, 3], [4, 5, 6, 7]]       # node n's devices (every device once)
//! ```

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq)]
pub struct DeviceConfig {
    pub name: String,
    pub memory_bytes: u64,
    pub sms: u32,
    pub cc_major: u32,
    pub cc_minor: u32,
    pub clock_mhz: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// 1000 * major + 10 * minor, as `cuDriverGetVersion` reports it.
    pub driver_version: i32,
    pub devices: Vec<DeviceConfig>,
    pub topology: Topology,
    /// Whether a checked launch is dropped instead of queued (`kernels = "discard"`).
    pub discard_kernels: bool,
}

/// How the devices are wired, by device ordinal. The default: no NVLink, no PCIe switch,
/// every device on NUMA node 0.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Devices joined all-to-all by NVLink: in an island of k, each has k - 1 active links,
    /// link i to the i-th other member in the island's order.
    #[serde(default)]
    pub nvlink_islands: Vec<Vec<usize>>,
    /// Devices behind one PCIe switch. Each switch, and each device behind none, hangs off a
    /// host bridge of its own.
    #[serde(default)]
    pub pcie_switches: Vec<Vec<usize>>,
    /// `numa_nodes[n]`: the devices attached to NUMA node n; empty: all on node 0.
    #[serde(default)]
    pub numa_nodes: Vec<Vec<usize>>,
}

/// NVML's `nvmlGpuTopologyLevel_t` values (nvml.h).
pub mod level {
    pub const INTERNAL: u32 = 0;
    pub const SINGLE: u32 = 10;
    pub const NODE: u32 = 40;
    pub const SYSTEM: u32 = 50;
}

impl Topology {
    fn group_of(groups: &[Vec<usize>], d: usize) -> Option<usize> {
        groups.iter().position(|g| g.contains(&d))
    }

    /// The NUMA node device `d` is attached to.
    pub fn numa_node(&self, d: usize) -> usize {
        Self::group_of(&self.numa_nodes, d).unwrap_or(0)
    }

    /// The devices device `d` has NVLinks to, in link order (empty: no NVLink).
    pub fn nvlink_peers(&self, d: usize) -> Vec<usize> {
        match Self::group_of(&self.nvlink_islands, d) {
            Some(i) => self.nvlink_islands[i].iter().copied().filter(|&p| p != d).collect(),
            None => Vec::new(),
        }
    }

    /// `nvmlDeviceGetTopologyCommonAncestor`'s level between devices `a` and `b` (PCIe and
    /// NUMA only, as NVML's: NVLink does not shorten the PCIe path). One device with itself is
    /// INTERNAL.
    pub fn common_ancestor(&self, a: usize, b: usize) -> u32 {
        let same = |groups: &[Vec<usize>]| {
            Self::group_of(groups, a).is_some() && Self::group_of(groups, a) == Self::group_of(groups, b)
        };
        if a == b {
            level::INTERNAL
        } else if same(&self.pcie_switches) {
            level::SINGLE
        } else if self.numa_node(a) == self.numa_node(b) {
            level::NODE
        } else {
            level::SYSTEM
        }
    }

    /// Every ordinal below `count`, in at most one group of each kind; every device on a NUMA
    /// node when nodes are given; at most NVML_NVLINK_MAX_LINKS links per device.
    fn check(&self, count: usize) -> Result<(), String> {
        for (what, groups) in [
            ("nvlink_islands", &self.nvlink_islands),
            ("pcie_switches", &self.pcie_switches),
            ("numa_nodes", &self.numa_nodes),
        ] {
            let mut seen = vec![false; count];
            for &d in groups.iter().flatten() {
                match seen.get_mut(d) {
                    None => return Err(format!("topology.{what}: device {d} does not exist ({count} devices)")),
                    Some(true) => return Err(format!("topology.{what}: device {d} is listed twice")),
                    Some(s) => *s = true,
                }
            }
            if what == "numa_nodes" && !groups.is_empty() && seen.contains(&false) {
                return Err("topology.numa_nodes: every device must be on a node".into());
            }
        }
        match self.nvlink_islands.iter().find(|i| i.len() > MAX_NVLINKS + 1) {
            Some(i) => {
                Err(format!("topology.nvlink_islands: {} devices need more than {MAX_NVLINKS} links each", i.len()))
            }
            None => Ok(()),
        }
    }
}

/// NVML_NVLINK_MAX_LINKS (nvml.h).
pub const MAX_NVLINKS: usize = 18;

pub const DEFAULT_DEVICE_COUNT: usize = 2;

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            name: "gpupool sim H100 80GB HBM3".into(),
            memory_bytes: 80 << 30,
            sms: 132,
            cc_major: 9,
            cc_minor: 0,
            clock_mhz: 1980,
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            driver_version: 13000,
            devices: vec![DeviceConfig::default(); DEFAULT_DEVICE_COUNT],
            topology: Topology::default(),
            discard_kernels: false,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    driver_version: Option<String>,
    kernels: Option<String>,
    #[serde(default, rename = "device")]
    devices: Vec<FileDevice>,
    topology: Option<Topology>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileDevice {
    name: Option<String>,
    memory: Option<toml::Value>,
    sms: Option<u32>,
    compute_capability: Option<String>,
    clock_mhz: Option<u32>,
}

/// Parses "80GiB", "1536MiB", "4 GB", "1048576".
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
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
        "tb" => 1_000_000_000_000,
        other => return Err(format!("unknown size unit {other:?} in {text:?}")),
    };
    if num.contains('.') {
        let v: f64 = num.parse().map_err(|_| format!("bad size {text:?}"))?;
        Ok((v * mult as f64) as u64)
    } else {
        let v: u64 = num.parse().map_err(|_| format!("bad size {text:?}"))?;
        v.checked_mul(mult).ok_or_else(|| format!("size {text:?} overflows"))
    }
}

/// Parses "13.0", "12.9" or "13000".
pub fn parse_driver_version(text: &str) -> Result<i32, String> {
    let t = text.trim();
    if let Some((maj, min)) = t.split_once('.') {
        let maj: i32 = maj.parse().map_err(|_| format!("bad driver version {text:?}"))?;
        let min: i32 = min.parse().map_err(|_| format!("bad driver version {text:?}"))?;
        Ok(maj * 1000 + min * 10)
    } else {
        t.parse().map_err(|_| format!("bad driver version {text:?}"))
    }
}

/// "run" (the default) or "discard": whether launches are dropped after their checks.
fn parse_kernels(text: &str) -> Result<bool, String> {
    match text.trim() {
        "run" => Ok(false),
        "discard" => Ok(true),
        other => Err(format!("{other:?} is neither \"run\" nor \"discard\"")),
    }
}

fn parse_cc(text: &str) -> Result<(u32, u32), String> {
    let (a, b) = text.trim().split_once('.').ok_or_else(|| format!("bad compute capability {text:?}"))?;
    Ok((
        a.parse().map_err(|_| format!("bad compute capability {text:?}"))?,
        b.parse().map_err(|_| format!("bad compute capability {text:?}"))?,
    ))
}

impl SimConfig {
    /// Builds the configuration from a TOML text and the environment variables.
    pub fn from_sources(toml_text: Option<&str>, env: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let mut cfg = SimConfig::default();
        if let Some(text) = toml_text {
            let file: FileConfig = toml::from_str(text).map_err(|e| format!("config: {e}"))?;
            if let Some(v) = file.driver_version {
                cfg.driver_version = parse_driver_version(&v)?;
            }
            cfg.topology = file.topology.unwrap_or_default();
            if let Some(k) = file.kernels {
                cfg.discard_kernels = parse_kernels(&k).map_err(|e| format!("config: kernels: {e}"))?;
            }
            if !file.devices.is_empty() {
                cfg.devices = file
                    .devices
                    .into_iter()
                    .map(|d| {
                        let mut dev = DeviceConfig::default();
                        if let Some(n) = d.name {
                            dev.name = n;
                        }
                        match d.memory {
                            Some(toml::Value::Integer(i)) if i > 0 => dev.memory_bytes = i as u64,
                            Some(toml::Value::String(s)) => dev.memory_bytes = parse_size(&s)?,
                            Some(other) => return Err(format!("config: bad device memory {other}")),
                            None => {}
                        }
                        if let Some(s) = d.sms {
                            dev.sms = s;
                        }
                        if let Some(cc) = d.compute_capability {
                            (dev.cc_major, dev.cc_minor) = parse_cc(&cc)?;
                        }
                        if let Some(c) = d.clock_mhz {
                            dev.clock_mhz = c;
                        }
                        Ok(dev)
                    })
                    .collect::<Result<_, String>>()?;
            }
        }
        if let Some(n) = env("GPUPOOL_SIM_DEVICES") {
            let n: usize = n.trim().parse().map_err(|_| format!("GPUPOOL_SIM_DEVICES: bad count {n:?}"))?;
            let template = cfg.devices.first().cloned().unwrap_or_default();
            cfg.devices.resize(n, template);
        }
        if let Some(m) = env("GPUPOOL_SIM_MEMORY") {
            let bytes = parse_size(&m).map_err(|e| format!("GPUPOOL_SIM_MEMORY: {e}"))?;
            cfg.devices.iter_mut().for_each(|d| d.memory_bytes = bytes);
        }
        if let Some(k) = env("GPUPOOL_SIM_KERNELS") {
            cfg.discard_kernels = parse_kernels(&k).map_err(|e| format!("GPUPOOL_SIM_KERNELS: {e}"))?;
        }
        if let Some(v) = env("GPUPOOL_SIM_DRIVER_VERSION") {
            cfg.driver_version = parse_driver_version(&v).map_err(|e| format!("GPUPOOL_SIM_DRIVER_VERSION: {e}"))?;
        }
        cfg.topology.check(cfg.devices.len())?;
        for d in &cfg.devices {
            if d.memory_bytes == 0 || d.sms == 0 {
                return Err(format!("device {:?}: memory and sms must be positive", d.name));
            }
        }
        Ok(cfg)
    }

    /// Reads `GPUPOOL_SIM_CONFIG` and the other variables of this process.
    pub fn from_env() -> Result<Self, String> {
        let text = match std::env::var("GPUPOOL_SIM_CONFIG") {
            Ok(path) if !path.is_empty() => {
                Some(std::fs::read_to_string(&path).map_err(|e| format!("GPUPOOL_SIM_CONFIG {path}: {e}"))?)
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
    fn defaults_are_two_h100s_on_a_cuda_13_driver() {
        let c = SimConfig::from_sources(None, |_| None).unwrap();
        assert_eq!(c.driver_version, 13000);
        assert_eq!(c.devices.len(), 2);
        assert_eq!(c.devices[0].memory_bytes, 80 << 30);
        assert_eq!((c.devices[0].sms, c.devices[0].cc_major, c.devices[0].cc_minor), (132, 9, 0));
    }

    #[test]
    fn toml_then_environment() {
        let text =
            "driver_version = \"12.9\"\n[[device]]\nmemory = \"1536MiB\"\nsms = 8\ncompute_capability = \"8.6\"\n";
        let c = SimConfig::from_sources(Some(text), |_| None).unwrap();
        assert_eq!(c.driver_version, 12090);
        assert_eq!(c.devices.len(), 1);
        assert_eq!(c.devices[0].memory_bytes, 1536 << 20);
        assert_eq!((c.devices[0].cc_major, c.devices[0].cc_minor), (8, 6));
        let env = |k: &str| match k {
            "GPUPOOL_SIM_DEVICES" => Some("3".to_string()),
            "GPUPOOL_SIM_MEMORY" => Some("1GiB".to_string()),
            _ => None,
        };
        let c = SimConfig::from_sources(Some(text), env).unwrap();
        assert_eq!(c.devices.len(), 3);
        assert!(c.devices.iter().all(|d| d.memory_bytes == 1 << 30 && d.sms == 8));
    }

    #[test]
    fn topology_levels_follow_switches_then_numa_nodes() {
        let text = "[[device]]\n[topology]\nnvlink_islands = [[0, 1, 2, 3], [4, 5, 6, 7]]\n\
                    pcie_switches = [[0, 1], [2, 3], [4, 5], [6, 7]]\nnuma_nodes = [[0, 1, 2, 3], [4, 5, 6, 7]]\n";
        let c = SimConfig::from_sources(Some(text), |k| (k == "GPUPOOL_SIM_DEVICES").then(|| "8".into())).unwrap();
        let t = &c.topology;
        assert_eq!((t.common_ancestor(0, 0), t.common_ancestor(0, 1)), (level::INTERNAL, level::SINGLE));
        assert_eq!((t.common_ancestor(0, 2), t.common_ancestor(3, 4)), (level::NODE, level::SYSTEM));
        assert_eq!((t.nvlink_peers(5), t.numa_node(5)), (vec![4, 6, 7], 1));
        // A device outside the configuration, listed twice, or left off the NUMA nodes is refused.
        let bad = |topo: &str| {
            SimConfig::from_sources(Some(&format!("[[device]]\n[[device]]\n[topology]\n{topo}")), |_| None)
        };
        assert!(bad("nvlink_islands = [[0, 2]]").unwrap_err().contains("device 2 does not exist"));
        assert!(bad("pcie_switches = [[0, 1], [1]]").unwrap_err().contains("listed twice"));
        assert!(bad("numa_nodes = [[0]]").unwrap_err().contains("every device"));
        assert!(bad("numa_nodes = [[0], [1]]").is_ok());
        let default = SimConfig::from_sources(None, |_| None).unwrap().topology;
        assert_eq!((default.common_ancestor(0, 1), default.nvlink_peers(0)), (level::NODE, vec![]));
    }

    #[test]
    fn bad_input_is_an_error_not_a_default() {
        assert!(parse_size("12 parsecs").is_err());
        assert!(SimConfig::from_sources(Some("bogus = 1"), |_| None).is_err());
        assert!(SimConfig::from_sources(None, |k| (k == "GPUPOOL_SIM_DEVICES").then(|| "two".into())).is_err());
        assert_eq!(parse_size("4GB").unwrap(), 4_000_000_000);
        assert_eq!(parse_driver_version("13000").unwrap(), 13000);
    }

    #[test]
    fn kernels_run_unless_told_to_discard() {
        assert!(!SimConfig::from_sources(None, |_| None).unwrap().discard_kernels);
        let toml = SimConfig::from_sources(Some("kernels = \"discard\""), |_| None).unwrap();
        assert!(toml.discard_kernels);
        let env = |v: &'static str| move |k: &str| (k == "GPUPOOL_SIM_KERNELS").then(|| v.to_string());
        assert!(SimConfig::from_sources(None, env("discard")).unwrap().discard_kernels);
        assert!(!SimConfig::from_sources(Some("kernels = \"discard\""), env("run")).unwrap().discard_kernels);
        let bad = SimConfig::from_sources(None, env("skip")).unwrap_err();
        assert!(bad.contains("GPUPOOL_SIM_KERNELS") && bad.contains("skip"), "{bad}");
    }
}
