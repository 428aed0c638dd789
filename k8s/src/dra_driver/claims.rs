//! What a ResourceClaim asks of this node: its devices allocated from this node's pool and the
//! slice of each it gets. The amounts are the capacity the scheduler consumed on the device
//! (`consumedCapacity`, DRA consumable capacity), narrowed by the claim's opaque parameters
//! (`SliceParameters`: `memoryMiB`, `computePercent`, `tenant`, `priority`), class parameters
//! first and the claim's after, so the claim's win. A parameter above what the scheduler
//! consumed is refused: the device's capacity is the scheduler's to share out. Without
//! `consumedCapacity` (a scheduler without consumable capacity allocates the device whole) the
//! parameters alone decide, the whole device when there are none.
//!
//! Must not: reach the API server (the caller reads the claim) or the daemon.

use super::slices::{CAP_COMPUTE, CAP_MEMORY};
use k8s_openapi::api::resource::v1::ResourceClaim;
use serde::Deserialize;

pub const PARAMS_API_VERSION: &str = "gpupool.io/v1alpha1";
pub const PARAMS_KIND: &str = "SliceParameters";

/// The opaque parameters of driver gpupool.io.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SliceParameters {
    pub api_version: String,
    pub kind: String,
    #[serde(default)]
    pub memory_mi_b: Option<u64>,
    #[serde(default)]
    pub compute_percent: Option<u8>,
    #[serde(default)]
    pub tenant: Option<String>,
    #[serde(default)]
    pub priority: Option<String>,
}

/// One allocated device of a claim and what the claim gets of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Allocated {
    pub request: String,
    pub pool: String,
    pub device: String,
    pub share_id: Option<String>,
    /// Bytes.
    pub memory: u64,
    /// Percent.
    pub compute: u8,
    pub tenant: Option<String>,
    pub priority: Option<String>,
}

/// A Kubernetes quantity as an integer: `512Mi`, `1Gi`, `20`, `2k`, `1500m` (rounded up).
pub fn parse_quantity(q: &str) -> Result<u64, String> {
    let q = q.trim();
    let split = q.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let mult: f64 = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => (1u64 << 20) as f64,
        "Gi" => (1u64 << 30) as f64,
        "Ti" => (1u64 << 40) as f64,
        _ => return Err(format!("quantity {q:?}: unknown suffix {suffix:?}")),
    };
    // Integers stay exact; only fractions go through floating point.
    if let (Ok(n), true) = (num.parse::<u64>(), mult >= 1.0) {
        return n.checked_mul(mult as u64).ok_or_else(|| format!("quantity {q:?} is too large"));
    }
    let v: f64 = num.parse().map_err(|_| format!("quantity {q:?}: not a number"))?;
    Ok((v * mult).ceil() as u64)
}

/// This node's devices of `claim` (driver gpupool.io, pool `pool`), each with its slice.
/// `total_memory` gives a device's memory by name (`None`: not a device of this node).
pub fn allocated(
    claim: &ResourceClaim,
    driver: &str,
    pool: &str,
    total_memory: impl Fn(&str) -> Option<u64>,
) -> Result<Vec<Allocated>, String> {
    let alloc = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .ok_or("the claim is not allocated")?;
    let configs = alloc.config.as_deref().unwrap_or_default();
    let mut out = Vec::new();
    for r in alloc.results.as_deref().unwrap_or_default().iter().filter(|r| r.driver == driver) {
        if r.pool != pool {
            return Err(format!("device {}/{} is in pool {}, not this node's ({pool})", r.driver, r.device, r.pool));
        }
        let total =
            total_memory(&r.device).ok_or_else(|| format!("device {} is not a device of this node", r.device))?;
        // Class parameters first, the claim's after: the later one wins, field by field.
        let mut p = SliceParameters::default();
        let mut ordered: Vec<_> = configs.iter().filter(|c| c.source == "FromClass").collect();
        ordered.extend(configs.iter().filter(|c| c.source != "FromClass"));
        for c in ordered {
            let Some(o) = c.opaque.as_ref().filter(|o| o.driver == driver) else { continue };
            // A request "main/sub" is configured by "main" or by "main/sub".
            let main = r.request.split('/').next().unwrap_or_default();
            if let Some(reqs) = &c.requests
                && !reqs.iter().any(|q| q == &r.request || q == main)
            {
                continue;
            }
            let q: SliceParameters = serde_json::from_value(o.parameters.0.clone())
                .map_err(|e| format!("opaque parameters for {driver}: {e}"))?;
            if q.api_version != PARAMS_API_VERSION || q.kind != PARAMS_KIND {
                return Err(format!(
                    "opaque parameters are {}/{}; {driver} reads {PARAMS_API_VERSION}/{PARAMS_KIND}",
                    q.api_version, q.kind
                ));
            }
            p.memory_mi_b = q.memory_mi_b.or(p.memory_mi_b);
            p.compute_percent = q.compute_percent.or(p.compute_percent);
            p.tenant = q.tenant.or(p.tenant);
            p.priority = q.priority.or(p.priority);
        }
        let consumed = |name: &str| -> Result<Option<u64>, String> {
            r.consumed_capacity.as_ref().and_then(|c| c.get(name)).map(|q| parse_quantity(&q.0)).transpose()
        };
        let (mem_cap, compute_cap) = (consumed(CAP_MEMORY)?.unwrap_or(total), consumed(CAP_COMPUTE)?.unwrap_or(100));
        let memory = match p.memory_mi_b {
            Some(0) => return Err("memoryMiB 0: a slice needs memory".into()),
            Some(m) if m.saturating_mul(1 << 20) > mem_cap => {
                return Err(format!(
                    "memoryMiB {m} is more than the {} MiB allocated on device {}",
                    mem_cap >> 20,
                    r.device
                ));
            }
            Some(m) => m << 20,
            None => mem_cap,
        };
        let compute = match p.compute_percent {
            Some(c) if !(1..=100).contains(&c) => return Err(format!("computePercent {c}: 1 to 100")),
            Some(c) if u64::from(c) > compute_cap => {
                return Err(format!(
                    "computePercent {c} is more than the {compute_cap}% allocated on device {}",
                    r.device
                ));
            }
            Some(c) => c,
            None => compute_cap.clamp(1, 100) as u8,
        };
        out.push(Allocated {
            request: r.request.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
            share_id: r.share_id.clone(),
            memory,
            compute,
            tenant: p.tenant.clone(),
            priority: p.priority.clone(),
        });
    }
    if out.is_empty() {
        return Err(format!("no device of driver {driver} is allocated to the claim"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(consumed: serde_json::Value, claim_params: serde_json::Value) -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": "u-1"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpupool.io"}}]}},
            "status": {"allocation": {"devices": {
                "results": [
                    {"request": "gpu", "driver": "gpupool.io", "pool": "n1", "device": "gpu-a", "consumedCapacity": consumed},
                    {"request": "nic", "driver": "other.io", "pool": "n1", "device": "eth0"},
                ],
                "config": [
                    {"source": "FromClass", "opaque": {"driver": "gpupool.io", "parameters":
                        {"apiVersion": "gpupool.io/v1alpha1", "kind": "SliceParameters", "tenant": "from-class", "priority": "low"}}},
                    {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": "gpupool.io", "parameters": claim_params}},
                    {"source": "FromClaim", "requests": ["other"], "opaque": {"driver": "gpupool.io", "parameters":
                        {"apiVersion": "gpupool.io/v1alpha1", "kind": "SliceParameters", "memoryMiB": 1}}},
                ],
            }}},
        }))
        .unwrap()
    }

    fn params(v: serde_json::Value) -> serde_json::Value {
        let mut p = json!({"apiVersion": "gpupool.io/v1alpha1", "kind": "SliceParameters"});
        p.as_object_mut().unwrap().extend(v.as_object().unwrap().clone());
        p
    }

    const GIB: u64 = 1 << 30;
    fn total(d: &str) -> Option<u64> {
        (d == "gpu-a").then_some(GIB)
    }

    #[test]
    fn parameters_narrow_the_consumed_capacity_and_the_claim_overrides_the_class() {
        let c = claim(json!({"memory": "512Mi", "compute": "20"}), params(json!({"tenant": "alpha"})));
        let a = allocated(&c, "gpupool.io", "n1", total).unwrap();
        assert_eq!(a.len(), 1, "other drivers' devices are not ours");
        assert_eq!((a[0].memory, a[0].compute), (512 << 20, 20));
        assert_eq!((a[0].tenant.as_deref(), a[0].priority.as_deref()), (Some("alpha"), Some("low")));
        let c =
            claim(json!({"memory": "512Mi", "compute": "20"}), params(json!({"memoryMiB": 256, "computePercent": 10})));
        let a = allocated(&c, "gpupool.io", "n1", total).unwrap();
        assert_eq!((a[0].memory, a[0].compute, a[0].tenant.as_deref()), (256 << 20, 10, Some("from-class")));
        // No consumed capacity: the parameters alone, else the whole device.
        let c = claim(json!(null), params(json!({"memoryMiB": 512, "computePercent": 20})));
        let a = allocated(&c, "gpupool.io", "n1", total).unwrap();
        assert_eq!((a[0].memory, a[0].compute), (512 << 20, 20));
        let c = claim(json!(null), params(json!({})));
        assert_eq!(allocated(&c, "gpupool.io", "n1", total).unwrap()[0].memory, GIB);
    }

    #[test]
    fn asking_beyond_the_allocation_or_malformed_parameters_are_refused() {
        let c = claim(json!({"memory": "512Mi", "compute": "20"}), params(json!({"memoryMiB": 513})));
        assert!(allocated(&c, "gpupool.io", "n1", total).unwrap_err().contains("more than the 512 MiB"));
        let c = claim(json!({"memory": "512Mi", "compute": "20"}), params(json!({"computePercent": 30})));
        assert!(allocated(&c, "gpupool.io", "n1", total).unwrap_err().contains("more than the 20%"));
        let c = claim(json!(null), params(json!({"memoryMB": 5})));
        assert!(allocated(&c, "gpupool.io", "n1", total).unwrap_err().contains("unknown field `memoryMB`"));
        let c = claim(json!(null), json!({"apiVersion": "x/v1", "kind": "SliceParameters"}));
        assert!(allocated(&c, "gpupool.io", "n1", total).unwrap_err().contains("x/v1"));
        let c = claim(json!(null), params(json!({})));
        assert!(allocated(&c, "gpupool.io", "n2", total).unwrap_err().contains("not this node's"));
        assert!(allocated(&c, "gpupool.io", "n1", |_| None).unwrap_err().contains("not a device of this node"));
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("512Mi"), Ok(512 << 20));
        assert_eq!(parse_quantity("20"), Ok(20));
        assert_eq!(parse_quantity("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_quantity("2k"), Ok(2000));
        assert_eq!(parse_quantity("1500m"), Ok(2));
        assert!(parse_quantity("5Qi").is_err());
        assert!(parse_quantity("x").is_err());
    }
}
