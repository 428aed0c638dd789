//! The status document the control socket (`<socket>.ctl`) answers with, and
//! `gpupool status` prints: the daemon, its devices, the tenants with their memory use
//! and quota per device (the ledger snapshot), and the live sessions.

use super::Shared;
use serde_json::{Value, json};

pub fn status_document(shared: &Shared) -> Value {
    let devices: Vec<Value> = shared
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| {
            json!({
                "ordinal": i,
                "name": d.name,
                "total_memory": d.total_memory,
                "compute_capability": format!("{}.{}", d.compute_capability[0], d.compute_capability[1]),
            })
        })
        .collect();
    let snapshot = shared.ledger.snapshot(shared.devices.len() as u32);
    let config = shared.ledger.config();
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
                "devices": t.devices.iter().map(|d| json!({
                    "device": d.device, "used": d.used, "pending": d.pending, "quota": d.quota,
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
        "daemon": {
            "pid": std::process::id(),
            "endpoints": shared.endpoints.iter().map(|p| format!("unix://{}", p.display())).collect::<Vec<_>>(),
            "driver_version": shared.driver_version,
            "config": shared.config_path.as_ref().map(|p| p.display().to_string()),
        },
        "devices": devices,
        "tenants": tenants,
        "sessions": sessions,
    })
}
