//! Which tenant a client belongs to, and the limits it gets once its own request has narrowed them.

use std::fmt;

use serde::Serialize;

use crate::config::{Config, MemoryQuota, Mode, Priority, TenantId, token_digest};
use crate::sizes::{Bytes, MIB, SizeError, parse_size, require_whole_mib};

/// What a client asks for (from `gpupool run --memory/--compute` or HAMi's variables). It can only
/// narrow its tenant's quota.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientRequest {
    /// Requested memory per device; `for_device(d) == None` means no request for device `d`.
    pub memory: MemoryQuota,
    /// Requested compute percent, 1..=100; `None` means no request.
    pub compute: Option<u8>,
}

impl ClientRequest {
    /// A request for `SIZE` on every device (`gpupool run --memory SIZE`). Must be a whole number of MiB.
    pub fn with_memory(mut self, size: &str) -> Result<Self, SizeError> {
        self.memory.default = Some(require_whole_mib(parse_size(size)?)?);
        Ok(self)
    }

    /// A request for `pct` percent of each device (`gpupool run --compute PCT`), 1..=100.
    pub fn with_compute(mut self, pct: u8) -> Result<Self, LimitsError> {
        if !(1..=100).contains(&pct) {
            return Err(LimitsError::Compute(pct));
        }
        self.compute = Some(pct);
        Ok(self)
    }
}

/// Which part of a request was clamped to the tenant's quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Clamped {
    /// Memory on one device (`device: Some`) or the request for all devices on a device whose quota is lower.
    Memory {
        /// The device the clamp applies to; `None` for the request's all-devices value where the tenant's
        /// all-devices quota is lower.
        device: Option<u32>,
    },
    /// The compute percent.
    Compute,
}

/// A request wider than the tenant's quota, and what was granted instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Clamp {
    /// What was clamped.
    pub what: Clamped,
    /// What the client asked for (bytes, or percent).
    pub requested: u64,
    /// What it got (the tenant's quota).
    pub granted: u64,
}

impl fmt::Display for Clamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.what {
            Clamped::Compute => {
                write!(f, "compute {}% requested, tenant quota is {}%", self.requested, self.granted)
            }
            Clamped::Memory { device } => {
                let on = device.map_or_else(|| "all devices".to_string(), |d| format!("device {d}"));
                write!(f, "memory {} requested on {on}, tenant quota is {}", Bytes(self.requested), Bytes(self.granted))
            }
        }
    }
}

/// The limits a client session runs under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// The tenant.
    pub tenant: TenantId,
    /// Memory per device: the tenant's quota narrowed by the request.
    pub memory: MemoryQuota,
    /// Compute percent, 1..=100.
    pub compute: u8,
    /// The tenant's mode.
    pub mode: Mode,
    /// The tenant's priority.
    pub priority: Priority,
    /// Parts of the request that asked for more than the quota and were clamped (empty if none).
    pub clamped: Vec<Clamp>,
}

/// Why limits could not be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    /// The tenant is not in this config (for instance, removed by a reload).
    #[error("unknown tenant `{0}`")]
    UnknownTenant(TenantId),
    /// A compute request outside 1..=100.
    #[error("compute request {0}% is not a percent in 1..=100")]
    Compute(u8),
    /// A memory request that is not a whole number of MiB.
    #[error("memory request of {bytes} bytes on {on} is not a whole number of MiB")]
    Memory {
        /// `device N` or `all devices`.
        on: String,
        /// The request.
        bytes: u64,
    },
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// `quota` narrowed by `request`, and the clamps (request entries above the quota).
fn narrow_memory(quota: &MemoryQuota, request: &MemoryQuota) -> (MemoryQuota, Vec<Clamp>) {
    let mut out = MemoryQuota { default: min_opt(quota.default, request.default), devices: Default::default() };
    let mut clamped = Vec::new();
    let keys = quota.devices.keys().chain(request.devices.keys());
    for &d in keys {
        if let Some(v) = min_opt(quota.for_device(d), request.for_device(d)) {
            out.devices.insert(d, v);
        }
    }
    // An all-devices request against the quota of unlisted devices; a quota of 0 there means the tenant
    // has no such devices, which is not worth reporting.
    if let (Some(r), Some(q)) = (request.default, quota.default)
        && r > q
        && q > 0
    {
        clamped.push(Clamp { what: Clamped::Memory { device: None }, requested: r, granted: q });
    }
    for (&d, &q) in &quota.devices {
        if let Some(r) = request.for_device(d)
            && r > q
        {
            clamped.push(Clamp { what: Clamped::Memory { device: Some(d) }, requested: r, granted: q });
        }
    }
    for (&d, &r) in &request.devices {
        if quota.devices.contains_key(&d) {
            continue; // reported above
        }
        if let Some(q) = quota.for_device(d)
            && r > q
        {
            clamped.push(Clamp { what: Clamped::Memory { device: Some(d) }, requested: r, granted: q });
        }
    }
    (out, clamped)
}

impl Config {
    /// The tenant of a client: a token match first, then its uid, then its (primary) gid, then `[default]`.
    ///
    /// A token that matches no tenant falls through to uid/gid; whether an unknown token is an
    /// authentication failure (over TCP) is the daemon's decision, not this function's.
    pub fn resolve(&self, uid: u32, gid: u32, token: Option<&str>) -> TenantId {
        let idx = token
            .and_then(|t| self.by_token.get(&token_digest(t)))
            .or_else(|| self.by_uid.get(&uid))
            .or_else(|| self.by_gid.get(&gid));
        match idx {
            Some(&i) => self.tenants[i].id.clone(),
            None => self.default.id.clone(),
        }
    }

    /// The tenant a token authenticates, if any (the only way a remote client names one).
    pub fn resolve_token(&self, token: &str) -> Option<TenantId> {
        self.by_token.get(&token_digest(token)).map(|&i| self.tenants[i].id.clone())
    }

    /// Whether `token` is an admin token (`admin_token_sha256`): it may read every tenant's
    /// status, and names no tenant.
    pub fn is_admin_token(&self, token: &str) -> bool {
        self.admin_tokens.contains(&token_digest(token))
    }

    /// The limits for a session of `tenant` that asked for `request`. The request only narrows: each value
    /// is the smaller of quota and request; a wider request is clamped and listed in `clamped`.
    pub fn effective_limits(&self, tenant: &TenantId, request: &ClientRequest) -> Result<Limits, LimitsError> {
        let spec = self.tenant(tenant).ok_or_else(|| LimitsError::UnknownTenant(tenant.clone()))?;
        if let Some(b) = request.memory.default
            && !b.is_multiple_of(MIB)
        {
            return Err(LimitsError::Memory { on: "all devices".into(), bytes: b });
        }
        if let Some((d, b)) = request.memory.devices.iter().find(|&(_, b)| !b.is_multiple_of(MIB)) {
            return Err(LimitsError::Memory { on: format!("device {d}"), bytes: *b });
        }
        let (memory, mut clamped) = narrow_memory(&spec.memory, &request.memory);
        let compute = match request.compute {
            None => spec.compute,
            Some(c) if !(1..=100).contains(&c) => return Err(LimitsError::Compute(c)),
            Some(c) if c > spec.compute => {
                clamped.push(Clamp { what: Clamped::Compute, requested: c.into(), granted: spec.compute.into() });
                spec.compute
            }
            Some(c) => c,
        };
        Ok(Limits { tenant: spec.id.clone(), memory, compute, mode: spec.mode, priority: spec.priority, clamped })
    }
}
