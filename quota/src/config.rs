//! The quota config file (TOML): `[[tenant]]` entries and a `[default]` tenant. See README.md for the format.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::sizes::{SizeError, parse_size, require_whole_mib};

/// A tenant's name, cheap to clone. Stable across config reloads: the ledger keys accounts by it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(Arc<str>);

impl Serialize for TenantId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl TenantId {
    /// The tenant of clients that no `[[tenant]]` matches: the `[default]` section.
    pub const DEFAULT_NAME: &'static str = "default";

    /// A tenant id from a name.
    pub fn new(name: &str) -> Self {
        TenantId(Arc::from(name))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How the compute quota is enforced (the scheduler's business; carried here so one file holds the policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Hard cap: at most `compute` percent of the device's time, even when the device is otherwise idle.
    #[default]
    Limit,
    /// Work-conserving: under contention tenants split the device in proportion to `compute`;
    /// capacity others leave idle goes to whoever has work.
    Share,
}

/// Dispatch priority at kernel boundaries (the scheduler's business).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Dispatched ahead of other tenants' queued work.
    High,
    /// The default.
    #[default]
    Normal,
    /// Dispatched after `high` and `normal` work.
    Low,
}

/// How the daemon chooses GPUs for a session that asks for a number of them (the config's
/// top-level `placement`; the daemon's `--placement` wins over it). README.md, "Placement".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Fill the devices already committed first, keeping others free for large jobs.
    #[default]
    Binpack,
    /// The least used devices first, alternating NVLink islands.
    Spread,
}

impl std::str::FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "binpack" => Ok(Placement::Binpack),
            "spread" => Ok(Placement::Spread),
            other => Err(format!("placement `{other}`: `binpack` or `spread`")),
        }
    }
}

/// Memory preemption's tuning (the config's `[preemption]` table; README.md, "Memory
/// preemption"): what keeps two tenants from trading a device too often and what a move may
/// cost. Every key is optional; the defaults are [`Preemption::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Preemption {
    /// A tenant brought back is not evicted again for at least this long (`min_resident_ms`).
    pub min_resident: Duration,
    /// ... nor for less than this many times its last move took (`resident_factor`).
    pub resident_factor: u32,
    /// A victim whose move out and back is estimated longer than this is left alone (`max_move_ms`).
    pub max_move: Duration,
    /// How long an eviction waits for the victim's requests already being served (`drain_timeout_ms`).
    pub drain_timeout: Duration,
}

impl Default for Preemption {
    fn default() -> Self {
        Preemption {
            min_resident: Duration::from_millis(500),
            resident_factor: 10,
            max_move: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPreemption {
    min_resident_ms: Option<i64>,
    resident_factor: Option<i64>,
    max_move_ms: Option<i64>,
    drain_timeout_ms: Option<i64>,
}

impl RawPreemption {
    fn validate(&self) -> Result<Preemption, ConfigError> {
        let d = Preemption::default();
        let ms = |field: &str, v: Option<i64>, default: Duration, min: i64| match v {
            None => Ok(default),
            Some(v) if (min..=86_400_000).contains(&v) => Ok(Duration::from_millis(v as u64)),
            Some(v) => Err(field_err(
                "(preemption)",
                &format!("preemption.{field}"),
                format!("{v} is not in {min}..=86400000 (milliseconds)"),
            )),
        };
        let resident_factor = match self.resident_factor {
            None => d.resident_factor,
            Some(v) if (0..=1000).contains(&v) => v as u32,
            Some(v) => {
                return Err(field_err("(preemption)", "preemption.resident_factor", format!("{v} is not in 0..=1000")));
            }
        };
        Ok(Preemption {
            min_resident: ms("min_resident_ms", self.min_resident_ms, d.min_resident, 0)?,
            resident_factor,
            max_move: ms("max_move_ms", self.max_move_ms, d.max_move, 1)?,
            drain_timeout: ms("drain_timeout_ms", self.drain_timeout_ms, d.drain_timeout, 1)?,
        })
    }
}

/// A device-memory quota per device, in bytes (always a whole number of MiB when it comes from a config).
///
/// `devices` holds explicit per-device values; any other device gets `default`. `default: None` means
/// unlimited (the device's own size bounds the tenant).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct MemoryQuota {
    /// Quota for devices not listed in `devices`; `None` = unlimited.
    pub default: Option<u64>,
    /// Explicit quota per device index.
    pub devices: BTreeMap<u32, u64>,
}

impl MemoryQuota {
    /// No limit on any device.
    pub fn unlimited() -> Self {
        Self::default()
    }

    /// The same quota on every device.
    pub fn all(bytes: u64) -> Self {
        MemoryQuota { default: Some(bytes), devices: BTreeMap::new() }
    }

    /// Nothing on any device (a tenant removed from the config by a reload).
    pub fn zero() -> Self {
        Self::all(0)
    }

    /// The quota on `device`; `None` = unlimited.
    pub fn for_device(&self, device: u32) -> Option<u64> {
        self.devices.get(&device).copied().or(self.default)
    }
}

/// Where a per-vendor key (`memory = { npu0 = "8GiB" }`) waits in [`MemoryQuota::devices`]: the
/// config alone cannot know how many GPUs precede the NPUs in the daemon's one device list, so
/// NPU `n` is held at `NPU_KEY_BASE + n`, which names no device, until the daemon, knowing that
/// number, calls [`Config::place_npus`].
pub const NPU_KEY_BASE: u32 = 0x8000_0000;

impl MemoryQuota {
    /// Moves `npu<n>` entries to device `first_npu + n`; an entry for an NPU also given by its
    /// device index keeps the `npu<n>` value.
    fn place_npus(&mut self, first_npu: u32) {
        let npus: Vec<(u32, u64)> = self.devices.range(NPU_KEY_BASE..).map(|(&k, &v)| (k, v)).collect();
        for (k, v) in npus {
            self.devices.remove(&k);
            if let Some(d) = first_npu.checked_add(k - NPU_KEY_BASE) {
                self.devices.insert(d, v);
            }
        }
    }
}

/// The page-locked host memory quota of a tenant whose config does not set `pinned`: 4 GiB.
/// Page-locked memory cannot be swapped or reclaimed, so an unbounded default would let any
/// client take the daemon's host down; a fixed figure (not a share of this host's RAM) keeps a
/// config meaning the same on every host. README.md, "Page-locked host memory", says why 4 GiB.
pub const DEFAULT_PINNED: u64 = 4 << 30;

/// One tenant after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantSpec {
    /// Its name (`default` for the `[default]` section).
    pub id: TenantId,
    /// Unix user ids that map to it.
    pub uids: Vec<u32>,
    /// Unix group ids (the client's primary gid) that map to it.
    pub gids: Vec<u32>,
    /// SHA-256 digests of the tokens that map to it.
    pub token_sha256: Vec<[u8; 32]>,
    /// Device-memory quota.
    pub memory: MemoryQuota,
    /// Page-locked host memory quota in bytes, for all its sessions together (a whole number of
    /// MiB; [`DEFAULT_PINNED`] when the config does not say).
    pub pinned: u64,
    /// Compute quota, percent of a device, 1..=100.
    pub compute: u8,
    /// `limit` or `share`.
    pub mode: Mode,
    /// `high`, `normal` or `low`.
    pub priority: Priority,
    /// GPUs the daemon places each of its sessions on (`devices = N`); None: every GPU, as
    /// the client names them. A client may ask for fewer, not more.
    pub devices: Option<u32>,
    /// Whether a tenant of higher priority may evict its `cuMemAlloc` memory to host memory
    /// when a device is full (`preemptible = false` forbids it; README.md, "Memory preemption").
    pub preemptible: bool,
    /// Periodic checkpoints of each of its sessions (`checkpoint = "60s"` with `checkpoint_dir`;
    /// README.md, "Checkpoints").
    pub checkpoint: Option<PeriodicCheckpoint>,
}

/// `checkpoint = "60s"`, `checkpoint_dir = "/abs/dir"`: every session of the tenant is
/// checkpointed to `dir/session-ID` at this period (incrementally after the first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeriodicCheckpoint {
    /// The period.
    pub every: std::time::Duration,
    /// The directory the tenant's sessions are written under (absolute).
    pub dir: std::path::PathBuf,
}

/// A period as `500ms`, `30s`, `5m` or `1h`: at least one second.
fn checkpoint_period(tenant: &str, text: &str) -> Result<std::time::Duration, ConfigError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 =
        n.parse().map_err(|_| field_err(tenant, "checkpoint", format!("`{text}` is not a period like 60s")))?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => None,
    };
    match ms {
        Some(ms) if ms >= 1000 => Ok(std::time::Duration::from_millis(ms)),
        Some(_) => Err(field_err(tenant, "checkpoint", format!("`{text}`: the period is at least 1s"))),
        None => Err(field_err(tenant, "checkpoint", format!("`{text}` is not a period (ms, s, m or h)"))),
    }
}

fn periodic(tenant: &str, limits: &RawLimits) -> Result<Option<PeriodicCheckpoint>, ConfigError> {
    match (&limits.checkpoint, &limits.checkpoint_dir) {
        (None, None) => Ok(None),
        (Some(every), Some(dir)) => {
            let dir = std::path::PathBuf::from(dir);
            if !dir.is_absolute() {
                return Err(field_err(tenant, "checkpoint_dir", "must be an absolute path (the daemon writes it)"));
            }
            Ok(Some(PeriodicCheckpoint { every: checkpoint_period(tenant, every)?, dir }))
        }
        (Some(_), None) => Err(field_err(tenant, "checkpoint_dir", "`checkpoint` needs `checkpoint_dir`")),
        (None, Some(_)) => Err(field_err(tenant, "checkpoint", "`checkpoint_dir` needs `checkpoint` (a period)")),
    }
}

/// A validated quota config. Build it with [`Config::from_toml_str`]; resolve clients with
/// [`Config::resolve`] (resolve.rs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub(crate) tenants: Vec<TenantSpec>,
    pub(crate) default: TenantSpec,
    pub(crate) by_token: HashMap<[u8; 32], usize>,
    pub(crate) by_uid: HashMap<u32, usize>,
    pub(crate) by_gid: HashMap<u32, usize>,
    /// Digests of the admin tokens (`admin_token_sha256`): they name no tenant.
    pub(crate) admin_tokens: Vec<[u8; 32]>,
    /// `placement = "binpack" | "spread"`, if the file says.
    pub placement: Option<Placement>,
    /// `restore_wait_s`: how long a session that `gpupool daemon --restore` brought back waits
    /// for its client before it is freed (milliseconds; None: the daemon's default).
    pub restore_wait_ms: Option<u64>,
    /// `[preemption]`, its defaults where the file says nothing.
    pub preemption: Preemption,
}

/// Why a config was refused. Field errors name the tenant and the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Not TOML, an unknown field, or a value of the wrong type (the message carries line and column).
    #[error("quota config: {0}")]
    Toml(#[from] toml::de::Error),
    /// A value that parsed but is not acceptable.
    #[error("quota config: tenant `{tenant}`: field `{field}`: {message}")]
    Field {
        /// The tenant's name (`default` for `[default]`, `#N` for a `[[tenant]]` without a usable name).
        tenant: String,
        /// The field, e.g. `memory`, `memory.1`, `compute`, `uids`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// The SHA-256 of a token, as the lowercase hex that `token_sha256` expects.
pub fn hash_token(token: &str) -> String {
    token_digest(token).iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

// ---- raw, as written in the file ----

/// The file: `[[tenant]]` entries and an optional `[default]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    tenant: Vec<RawTenant>,
    #[serde(default)]
    default: Option<RawLimits>,
    /// SHA-256 of the token(s) that may read every tenant's status over the network.
    #[serde(default)]
    admin_token_sha256: OneOrMany,
    #[serde(default)]
    placement: Option<Placement>,
    #[serde(default)]
    restore_wait_s: Option<f64>,
    #[serde(default)]
    preemption: Option<RawPreemption>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    name: String,
    #[serde(default)]
    uids: Vec<u32>,
    #[serde(default)]
    gids: Vec<u32>,
    #[serde(default)]
    token_sha256: OneOrMany,
    memory: Option<RawMemory>,
    pinned: Option<RawSize>,
    compute: Option<i64>,
    mode: Option<Mode>,
    priority: Option<Priority>,
    devices: Option<i64>,
    preemptible: Option<bool>,
    checkpoint: Option<String>,
    checkpoint_dir: Option<String>,
}

impl RawTenant {
    fn limits(&self) -> RawLimits {
        RawLimits {
            memory: self.memory.clone(),
            pinned: self.pinned.clone(),
            compute: self.compute,
            mode: self.mode,
            priority: self.priority,
            devices: self.devices,
            preemptible: self.preemptible,
            checkpoint: self.checkpoint.clone(),
            checkpoint_dir: self.checkpoint_dir.clone(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    memory: Option<RawMemory>,
    pinned: Option<RawSize>,
    compute: Option<i64>,
    mode: Option<Mode>,
    priority: Option<Priority>,
    devices: Option<i64>,
    preemptible: Option<bool>,
    checkpoint: Option<String>,
    checkpoint_dir: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum RawSize {
    Int(i64),
    Text(String),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum RawMemory {
    All(RawSize),
    PerDevice(BTreeMap<String, RawSize>),
}

// ---- validation ----

fn field_err(tenant: &str, field: &str, message: impl fmt::Display) -> ConfigError {
    ConfigError::Field { tenant: tenant.to_string(), field: field.to_string(), message: message.to_string() }
}

fn quota_size(tenant: &str, field: &str, raw: &RawSize) -> Result<u64, ConfigError> {
    let bytes = match raw {
        RawSize::Int(n) => u64::try_from(*n).map_err(|_| field_err(tenant, field, "a size cannot be negative"))?,
        RawSize::Text(s) => parse_size(s).map_err(|e| field_err(tenant, field, e))?,
    };
    require_whole_mib(bytes).map_err(|e: SizeError| field_err(tenant, field, e))
}

fn memory_quota(tenant: &str, raw: &Option<RawMemory>) -> Result<MemoryQuota, ConfigError> {
    match raw {
        None => Ok(MemoryQuota::unlimited()),
        Some(RawMemory::All(s)) => Ok(MemoryQuota::all(quota_size(tenant, "memory", s)?)),
        Some(RawMemory::PerDevice(map)) => {
            // Devices not listed get nothing, unless a "*" entry says otherwise.
            let mut q = MemoryQuota { default: Some(0), devices: BTreeMap::new() };
            for (key, size) in map {
                let field = format!("memory.{key}");
                let bytes = quota_size(tenant, &field, size)?;
                if key == "*" {
                    q.default = Some(bytes);
                    continue;
                }
                let npu = key.strip_prefix("npu").and_then(|n| n.parse::<u32>().ok()).filter(|&n| n < NPU_KEY_BASE);
                let dev: u32 = match npu {
                    Some(n) => NPU_KEY_BASE + n,
                    None => key.parse().ok().filter(|&d| d < NPU_KEY_BASE).ok_or_else(|| {
                        field_err(
                            tenant,
                            &field,
                            format!("`{key}` is not a device index (0, 1, ...), an NPU (npu0, npu1, ...) or `*`"),
                        )
                    })?,
                };
                q.devices.insert(dev, bytes);
            }
            Ok(q)
        }
    }
}

fn spec(name: &str, limits: &RawLimits) -> Result<TenantSpec, ConfigError> {
    let compute = match limits.compute {
        None => 100,
        Some(c @ 1..=100) => c as u8,
        Some(c) => {
            return Err(field_err(name, "compute", format!("{c} is not a percent in 1..=100")));
        }
    };
    Ok(TenantSpec {
        id: TenantId::new(name),
        uids: Vec::new(),
        gids: Vec::new(),
        token_sha256: Vec::new(),
        memory: memory_quota(name, &limits.memory)?,
        pinned: match &limits.pinned {
            None => DEFAULT_PINNED,
            Some(size) => quota_size(name, "pinned", size)?,
        },
        compute,
        mode: limits.mode.unwrap_or_default(),
        priority: limits.priority.unwrap_or_default(),
        devices: match limits.devices {
            None => None,
            Some(n @ 1..=1024) => Some(n as u32),
            Some(n) => return Err(field_err(name, "devices", format!("{n} is not a number of GPUs (1 or more)"))),
        },
        preemptible: limits.preemptible.unwrap_or(true),
        checkpoint: periodic(name, limits)?,
    })
}

fn parse_digest(tenant: &str, hex: &str) -> Result<[u8; 32], ConfigError> {
    let bad = || field_err(tenant, "token_sha256", format!("`{hex}` is not 64 hex digits (a SHA-256)"));
    let h = hex.trim().as_bytes();
    if h.len() != 64 {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (i, pair) in h.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).map_err(|_| bad())?;
        out[i] = u8::from_str_radix(s, 16).map_err(|_| bad())?;
    }
    Ok(out)
}

fn insert_unique<K: std::hash::Hash + Eq + Copy>(
    map: &mut HashMap<K, usize>,
    key: K,
    idx: usize,
    tenants: &[TenantSpec],
    field: &str,
    show: impl fmt::Display,
) -> Result<(), ConfigError> {
    if let Some(&other) = map.get(&key) {
        let (a, b) = (tenants[other].id.as_str(), tenants[idx].id.as_str());
        let msg = if a == b {
            format!("{show} is listed twice")
        } else {
            format!("{show} is already matched by tenant `{a}`")
        };
        return Err(field_err(b, field, msg));
    }
    map.insert(key, idx);
    Ok(())
}

impl Config {
    /// Parse and validate a config file's text. Unknown fields are errors.
    pub fn from_toml_str(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text)?;
        Self::from_raw(raw)
    }

    /// Validate an already-parsed TOML table (for a daemon that keeps other sections in the same file:
    /// it removes its own keys and hands the rest over). Unknown fields are errors.
    pub fn from_toml_table(table: toml::Table) -> Result<Config, ConfigError> {
        let raw: RawConfig = table.try_into()?;
        Self::from_raw(raw)
    }

    /// A config with no tenants and an unlimited default tenant.
    pub fn unrestricted() -> Config {
        Self::from_raw(RawConfig {
            tenant: Vec::new(),
            default: None,
            admin_token_sha256: OneOrMany::None,
            placement: None,
            restore_wait_s: None,
            preemption: None,
        })
        .expect("empty config is valid")
    }

    fn from_raw(raw: RawConfig) -> Result<Config, ConfigError> {
        let default = spec(TenantId::DEFAULT_NAME, &raw.default.unwrap_or_default())?;
        let mut tenants: Vec<TenantSpec> = Vec::with_capacity(raw.tenant.len());
        let mut names: HashMap<String, ()> = HashMap::new();
        for (i, t) in raw.tenant.iter().enumerate() {
            let name = t.name.trim();
            if name.is_empty() {
                return Err(field_err(&format!("#{}", i + 1), "name", "must not be empty"));
            }
            if name == TenantId::DEFAULT_NAME {
                return Err(field_err(name, "name", "`default` is reserved for the [default] section"));
            }
            if names.insert(name.to_string(), ()).is_some() {
                return Err(field_err(name, "name", "two [[tenant]] entries have this name"));
            }
            let mut s = spec(name, &t.limits())?;
            s.uids = t.uids.clone();
            s.gids = t.gids.clone();
            let hexes: Vec<&String> = match &t.token_sha256 {
                OneOrMany::None => Vec::new(),
                OneOrMany::One(h) => vec![h],
                OneOrMany::Many(v) => v.iter().collect(),
            };
            for h in hexes {
                s.token_sha256.push(parse_digest(name, h)?);
            }
            tenants.push(s);
        }
        let (mut by_token, mut by_uid, mut by_gid) = (HashMap::new(), HashMap::new(), HashMap::new());
        for (i, t) in tenants.iter().enumerate() {
            for &d in &t.token_sha256 {
                insert_unique(&mut by_token, d, i, &tenants, "token_sha256", "this token")?;
            }
            for &u in &t.uids {
                insert_unique(&mut by_uid, u, i, &tenants, "uids", format_args!("uid {u}"))?;
            }
            for &g in &t.gids {
                insert_unique(&mut by_gid, g, i, &tenants, "gids", format_args!("gid {g}"))?;
            }
        }
        let admin = |h: &String| {
            parse_digest("(admin)", h).map_err(|_| {
                field_err("(admin)", "admin_token_sha256", format!("`{h}` is not 64 hex digits (a SHA-256)"))
            })
        };
        let admin_tokens = match &raw.admin_token_sha256 {
            OneOrMany::None => Vec::new(),
            OneOrMany::One(h) => vec![admin(h)?],
            OneOrMany::Many(v) => v.iter().map(admin).collect::<Result<_, _>>()?,
        };
        if let Some(&i) = admin_tokens.iter().find_map(|d| by_token.get(d)) {
            let msg = "this token is also admin_token_sha256: an admin token must name no tenant";
            return Err(field_err(tenants[i].id.as_str(), "token_sha256", msg));
        }
        let restore_wait_ms = match raw.restore_wait_s {
            Some(s) if !(s.is_finite() && (0.0..=86_400.0).contains(&s)) => {
                return Err(field_err("(daemon)", "restore_wait_s", format!("{s}: seconds from 0 to 86400")));
            }
            s => s.map(|s| (s * 1000.0).round() as u64),
        };
        let preemption = raw.preemption.unwrap_or_default().validate()?;
        Ok(Config {
            tenants,
            default,
            by_token,
            by_uid,
            by_gid,
            admin_tokens,
            placement: raw.placement,
            restore_wait_ms,
            preemption,
        })
    }

    /// The `[[tenant]]` entries, in file order (the default tenant is not among them).
    pub fn tenants(&self) -> &[TenantSpec] {
        &self.tenants
    }

    /// Places every tenant's `npu<n>` memory keys at device `first_npu + n` of the daemon's
    /// device list (the NPUs follow its `first_npu` GPUs).
    pub fn place_npus(&mut self, first_npu: u32) {
        for t in self.tenants.iter_mut().chain(std::iter::once(&mut self.default)) {
            t.memory.place_npus(first_npu);
        }
    }

    /// The `[default]` tenant.
    pub fn default_tenant(&self) -> &TenantSpec {
        &self.default
    }

    /// A tenant by id, the default tenant included.
    pub fn tenant(&self, id: &TenantId) -> Option<&TenantSpec> {
        if id.as_str() == TenantId::DEFAULT_NAME {
            return Some(&self.default);
        }
        self.tenants.iter().find(|t| &t.id == id)
    }

    /// Every tenant, the default last.
    pub fn all_tenants(&self) -> impl Iterator<Item = &TenantSpec> {
        self.tenants.iter().chain(std::iter::once(&self.default))
    }
}
