//! The status document over the protocol ([`gpupool_protocol::Request::Status`]), what
//! `gpupool status` and `gpupool top` read from a daemon on another host. Who asks decides
//! what it shows: an admin token (`admin_token_sha256` in the quota config) sees the whole
//! document of [`super::control`]; a tenant's token sees that tenant alone: its own entry
//! (quotas, use, compute), its own sessions, and the devices with only its own use in them,
//! so no other tenant's name or figure leaves the daemon. The local control socket
//! (`<socket>.ctl`, mode 0660) still answers the whole document to whoever may open it.
//!
//! A connection whose first frame is a status request is answered and closed
//! ([`connection`]): it opens no session, so watching a daemon never counts as using it.

use super::Shared;
use super::dispatch::{Fail, NOT_PERMITTED};
use gpupool_protocol::Reply;
use gpupool_protocol::ops::{InlineBytes, answer};
use gpupool_protocol::transport::Transport;
use gpupool_quota::{Config, TenantId};
use serde_json::{Map, Value, json};

/// What one status request may see.
#[derive(Debug, PartialEq, Eq)]
pub enum Viewer {
    /// Every tenant (the admin token).
    Admin,
    /// This tenant alone.
    Tenant(TenantId),
}

impl std::fmt::Display for Viewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Viewer::Admin => write!(f, "every tenant (admin token)"),
            Viewer::Tenant(t) => write!(f, "tenant {}", t.as_str()),
        }
    }
}

/// The viewer a request names: the admin token sees everything, a tenant's token its tenant;
/// without a token, `own` (the session's tenant, or a local client's), if there is one.
pub fn viewer(config: &Config, token: Option<&str>, own: Option<&TenantId>) -> Result<Viewer, Fail> {
    let refuse = |why: &str| {
        Fail::new(
            NOT_PERMITTED,
            format!("status refused: {why} (set GPUPOOL_TOKEN to a tenant's token, or to the admin token)"),
        )
    };
    match token {
        Some(t) if config.is_admin_token(t) => Ok(Viewer::Admin),
        Some(t) => match config.resolve_token(t) {
            Some(tenant) if own.is_none_or(|o| *o == tenant) => Ok(Viewer::Tenant(tenant)),
            Some(_) => Err(refuse("the token names another tenant than this session's")),
            None => Err(refuse("the token matches no tenant and is not the admin token")),
        },
        None => own.cloned().map(Viewer::Tenant).ok_or_else(|| refuse("no token was presented")),
    }
}

/// The document `viewer` may see, as the reply carries it.
pub fn answer(shared: &Shared, viewer: &Viewer) -> Result<answer::StatusDocument, Fail> {
    let full = super::control::status_document(shared);
    let doc = match viewer {
        Viewer::Admin => {
            let mut doc = full;
            doc["view"] = json!({ "scope": "all" });
            doc
        }
        Viewer::Tenant(t) => tenant_view(&full, t.as_str()),
    };
    let json = serde_json::to_vec(&doc).map_err(|e| Fail::invalid_value(format!("encoding the status: {e}")))?;
    Ok(answer::StatusDocument { json: InlineBytes(json) })
}

/// Device fields that say nothing about any tenant; a tenant's view adds its own use.
const DEVICE_FIELDS: [&str; 6] = ["ordinal", "kind", "name", "uuid", "total_memory", "compute_capability"];

/// `full` narrowed to `tenant`: its entry, its sessions, and per device only the fields that
/// name no tenant, with `memory_used` and `utilization` its own (an allow-list, so a figure
/// added to the document later stays out of tenants' views until someone lets it in).
pub fn tenant_view(full: &Value, tenant: &str) -> Value {
    let own = full["tenants"].as_array().into_iter().flatten().find(|t| t["tenant"] == tenant);
    let own_on = |ordinal: &Value| own?["devices"].as_array()?.iter().find(|d| d["device"] == *ordinal);
    let devices: Vec<Value> = full["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            let mut v: Map<String, Value> =
                DEVICE_FIELDS.iter().filter_map(|&k| Some((k.to_string(), d.get(k)?.clone()))).collect();
            let mine = own_on(&d["ordinal"]);
            v.insert("memory_used".into(), mine.map_or(json!(0), |m| m["used"].clone()));
            let share = mine.and_then(|m| m["compute"]["share_1s"].as_f64()).unwrap_or(0.0);
            v.insert("utilization".into(), json!(share));
            Value::Object(v)
        })
        .collect();
    let sessions: Vec<&Value> =
        full["sessions"].as_array().into_iter().flatten().filter(|s| s["tenant"] == tenant).collect();
    json!({
        "view": { "scope": "tenant", "tenant": tenant },
        "compute_scheduler": full["compute_scheduler"],
        "daemon": full["daemon"],
        "devices": devices,
        "tenants": own.into_iter().collect::<Vec<_>>(),
        "sessions": sessions,
    })
}

/// A connection whose first frame was `Status { token }` (request `id`): answers it and
/// logs who saw what, or why not. `own`: a local client's tenant; `None` over the network,
/// where only a token names anyone.
pub fn connection(
    shared: &Shared,
    t: &mut dyn Transport,
    id: u64,
    token: Option<&str>,
    own: Option<&TenantId>,
    who: &str,
) {
    let op = match viewer(&shared.ledger.config(), token, own).and_then(|v| Ok((answer(shared, &v)?, v))) {
        Ok((doc, v)) => {
            tracing::info!(peer = who, view = %v, "status answered");
            Reply::from(doc)
        }
        Err(Fail { code, message }) => {
            tracing::warn!(peer = who, code, "{message}");
            Reply::Error { code, message }
        }
    };
    if let Err(e) = super::session::reply(t, id, op) {
        tracing::debug!(peer = who, "sending the status: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::from_toml_str(&format!(
            "admin_token_sha256 = \"{}\"\n[[tenant]]\nname = \"a\"\ntoken_sha256 = \"{}\"\n[[tenant]]\nname = \"b\"\ntoken_sha256 = \"{}\"\n",
            gpupool_quota::hash_token("root"),
            gpupool_quota::hash_token("ta"),
            gpupool_quota::hash_token("tb"),
        ))
        .unwrap()
    }

    #[test]
    fn tokens_name_the_viewer_and_anything_else_is_refused() {
        let c = config();
        let (a, b) = (TenantId::new("a"), TenantId::new("b"));
        assert_eq!(viewer(&c, Some("root"), None).unwrap(), Viewer::Admin);
        assert_eq!(viewer(&c, Some("root"), Some(&a)).unwrap(), Viewer::Admin);
        assert_eq!(viewer(&c, Some("ta"), None).unwrap(), Viewer::Tenant(a.clone()));
        assert_eq!(viewer(&c, None, Some(&b)).unwrap(), Viewer::Tenant(b.clone()));
        let refused = |token, own| viewer(&c, token, own).unwrap_err();
        let e = refused(None, None);
        assert_eq!(e.code, NOT_PERMITTED);
        assert!(e.message.contains("no token was presented"), "{}", e.message);
        assert!(refused(Some("nope"), None).message.contains("matches no tenant and is not the admin token"));
        assert!(refused(Some("ta"), Some(&b)).message.contains("another tenant"));
    }

    #[test]
    fn a_tenant_sees_itself_and_no_other_tenant() {
        let full = json!({
            "compute_scheduler": true,
            "daemon": { "pid": 7, "endpoints": ["tls://0.0.0.0:7443"], "driver_version": 13000, "config": null },
            "devices": [
                { "ordinal": 0, "name": "sim", "uuid": "GPU-x", "total_memory": 1024, "memory_used": 768,
                  "utilization": 0.9, "compute_capability": "9.0", "tenant_switches": 55 },
                { "ordinal": 1, "name": "sim", "uuid": "GPU-y", "total_memory": 1024, "memory_used": 512,
                  "utilization": 0.5, "compute_capability": "9.0", "tenant_switches": 3 },
                { "ordinal": 2, "kind": "npu", "name": "Ascend910B3", "uuid": "NPU-z", "total_memory": 4096,
                  "memory_used": 2048, "utilization": 0.3, "compute_capability": "0.0", "tenant_switches": 0 },
            ],
            "tenants": [
                { "tenant": "a", "sessions": 1, "devices": [
                    { "device": 0, "used": 256, "quota": 512, "compute": { "share_1s": 0.25 } },
                    { "device": 2, "kind": "npu", "used": 1024, "quota": 1536, "compute": { "share_1s": 0.2 } } ] },
                { "tenant": "secret-b", "sessions": 2, "devices": [
                    { "device": 0, "used": 512, "quota": null, "compute": { "share_1s": 0.65 } },
                    { "device": 1, "used": 512, "quota": null, "compute": null } ] },
            ],
            "sessions": [
                { "id": 1, "pid": 10, "tenant": "a", "client": "python" },
                { "id": 2, "pid": 11, "tenant": "secret-b", "client": "secret-client" },
            ],
        });
        let v = tenant_view(&full, "a");
        let text = v.to_string();
        assert!(!text.contains("secret"), "another tenant's name leaked: {text}");
        assert_eq!(v["view"], json!({ "scope": "tenant", "tenant": "a" }));
        assert_eq!(v["tenants"], json!([full["tenants"][0]]));
        assert_eq!(v["sessions"], json!([full["sessions"][0]]));
        assert_eq!(v["daemon"], full["daemon"]);
        assert_eq!(v["devices"][0]["memory_used"], 256, "its own use, not the device's");
        assert_eq!(v["devices"][0]["utilization"], 0.25);
        assert_eq!(v["devices"][1]["memory_used"], 0);
        assert_eq!(v["devices"][1]["utilization"], 0.0);
        assert_eq!(v["devices"][1]["total_memory"], 1024);
        assert!(v["devices"][0].get("tenant_switches").is_none(), "{text}");
        // An NPU keeps its kind, and shows the tenant's own use of it.
        assert_eq!(v["devices"][2]["kind"], "npu");
        assert_eq!(
            (v["devices"][2]["memory_used"].clone(), v["devices"][2]["utilization"].clone()),
            (json!(1024), json!(0.2))
        );
        // A tenant the daemon has not seen yet: no entry, no sessions, devices still listed.
        let none = tenant_view(&full, "c");
        assert_eq!((none["tenants"].as_array().unwrap().len(), none["devices"].as_array().unwrap().len()), (0, 3));
    }
}
