//! The status document the control socket (`<socket>.ctl`) answers with, and
//! `gpupool status` prints: the daemon, its devices, the tenants with their memory use
//! and quota per device and their page-locked host memory against its quota (the ledger
//! snapshot), and the live sessions. A GPU's `healthy` is whether NVML reaches it now (absent
//! without NVML, and for NPUs): `gpupool device-plugin` reports it to the kubelet.

use super::Shared;
use serde_json::{Value, json};

/// A device's kind as the status document, `gpupool status`, `top` and the metrics' `kind` label name it.
fn kind(d: &super::Device) -> &'static str {
    if d.vendor == gpupool_protocol::ops::VENDOR_ASCEND { "npu" } else { "gpu" }
}

/// A device's UUID as text: NVIDIA's form for a GPU; an NPU's (the pool's own, AscendCL having none)
/// in the same form under an `NPU-` prefix, so no NPU passes for a GPU in the status or the metrics.
fn uuid(d: &super::Device) -> String {
    let text = gpupool_abi::identity::uuid_string(&d.uuid);
    match (kind(d), text.strip_prefix("GPU-")) {
        ("npu", Some(rest)) => format!("NPU-{rest}"),
        _ => text,
    }
}

pub fn status_document(shared: &Shared) -> Value {
    let switches = shared.compute.switches();
    let preemptions = shared.compute.preemptions();
    let snapshot = shared.ledger.snapshot(shared.devices.len() as u32);
    let config = shared.ledger.config();
    let compute = shared.compute.usage();
    let devices: Vec<Value> = shared
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let memory_used: u64 = snapshot
                .tenants
                .iter()
                .filter_map(|t| t.devices.iter().find(|x| x.device == i as u32))
                .map(|x| x.used)
                .sum();
            // Device time charged to all tenants over the last second.
            let utilization = compute.get(i).map_or(0.0, |u| u.iter().fold(0.0, |a, t| a + t.share_1s)).min(1.0);
            let npu = kind(d) == "npu";
            let health = shared.nvml.as_ref().filter(|_| !npu).map(|n| n.device(i as u32).and_then(|h| n.memory(h)));
            let mut v = json!({
                "ordinal": i,
                "kind": kind(d),
                "name": d.name,
                "uuid": uuid(d),
                "total_memory": d.total_memory,
                "memory_used": memory_used,
                "utilization": utilization,
                "compute_capability": format!("{}.{}", d.compute_capability[0], d.compute_capability[1]),
                "tenant_switches": switches.get(i).copied().unwrap_or(0),
                "preemptions": preemptions.get(i).copied().unwrap_or(0),
            });
            if let Some(h) = health {
                v["healthy"] = json!(h.is_ok());
                if let Err(e) = h {
                    v["health_error"] = json!(format!("{e:#}"));
                }
            }
            v
        })
        .collect();
    let compute_of = |tenant: &str, device: u32| {
        compute.get(device as usize).and_then(|d| d.iter().find(|u| u.tenant == tenant)).map(|u| {
            let (preemptions, preempted_ns) = shared.compute.preempted(device, tenant);
            json!({
                "quota_percent": u.quota_percent, "mode": u.mode, "priority": u.priority,
                "share_1s": u.share_1s, "share_10s": u.share_10s,
                "kernels": u.kernels, "charged_ns": u.charged_ns, "inflight": u.inflight,
                "throttled_ns": u.throttled_ns,
                "preemptions": preemptions, "preempted_ns": preempted_ns,
            })
        })
    };
    let tenants: Vec<Value> = snapshot
        .tenants
        .iter()
        .map(|t| {
            let spec = config.tenant(&t.tenant);
            json!({
                "tenant": t.tenant.as_str(),
                "retired": t.retired,
                "sessions": t.sessions,
                "compute": spec.map(|s| s.compute),
                "mode": spec.map(|s| s.mode),
                "priority": spec.map(|s| s.priority),
                "pinned": t.pinned,
                "pinned_quota": t.pinned_quota,
                "devices": t.devices.iter().map(|d| json!({
                    "device": d.device,
                    "kind": shared.devices.get(d.device as usize).map(kind),
                    "used": d.used, "pending": d.pending, "quota": d.quota,
                    "compute": compute_of(t.tenant.as_str(), d.device),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let sessions: Vec<Value> = shared
        .sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .map(|s| serde_json::to_value(s).unwrap_or(Value::Null))
        .collect();
    json!({
        "compute_scheduler": shared.compute.enabled,
        "daemon": {
            "pid": std::process::id(),
            "endpoints": shared.endpoints.iter().map(|p| format!("unix://{}", p.display()))
                .chain(shared.remote_endpoints.iter().cloned()).collect::<Vec<_>>(),
            "driver_version": shared.driver_version,
            "config": shared.config_path.as_ref().map(|p| p.display().to_string()),
        },
        "devices": devices,
        "tenants": tenants,
        "sessions": sessions,
        "evictions": shared.evict.status(),
        "checkpoints": shared.checkpoints.status(),
        "restore": shared.restored.status(),
    })
}
