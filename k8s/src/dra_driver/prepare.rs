//! Preparing and unpreparing claims on this node. A prepared claim is one endpoint of the daemon
//! (`dra-<claim uid>`: the claim's tenant, its memory per device, its compute percent, only its
//! devices) and one CDI spec (`<cdi dir>/gpupool.io-claim_<uid>.json`, kind `gpupool.io/claim`)
//! whose edits mount the pool's libraries and `/etc/ld.so.preload` and name `gpupool oci-hook
//! create-runtime --cdi --claim dra-<uid>`, which mounts that endpoint at
//! `/run/gpupool/gpupool.sock` and makes the container's linker cache. Every container of the
//! claim shares the endpoint, so they share its limits; the endpoint lives until unprepare.
//!
//! Several claims share a device up to its capacity: the sum of the prepared claims' memory
//! on a device may not pass the device's memory, nor their compute 100%; beyond, prepare
//! fails with the figures. Prepare is idempotent (the kubelet retries): a claim already
//! prepared gets the same answer, its endpoint remade if the daemon lost it. The prepared
//! claims are kept in a checkpoint file, so a restarted plugin still knows what it holds.
//!
//! Must not: read the API server (the caller passes the claim) or touch containers.

use super::claims::{self, Allocated};
use super::daemon::{self, EndpointLimits};
use super::slices::Seen;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The CDI kind of a claim's devices.
pub const CDI_KIND: &str = "gpupool.io/claim";

/// What the claim specs mount and run, from the `gpupool` binary that runs the plugin.
#[derive(Clone, Debug)]
pub struct CdiBase {
    /// The library directory (`gpupool cdi generate`'s), mounted at /opt/gpupool/lib.
    pub lib_dir: PathBuf,
    /// libgpupool.so, mounted over the directory's placeholder.
    pub interposer: PathBuf,
    /// The `gpupool` executable the runtime runs as the hook (a path on the host).
    pub gpupool: PathBuf,
    pub cdi_version: String,
}

/// One device of a prepared claim.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PreparedDevice {
    pub request: String,
    pub pool: String,
    pub device: String,
    pub share_id: Option<String>,
    pub uuid: String,
    pub memory: u64,
    pub compute: u8,
    pub cdi_id: String,
}

/// A prepared claim.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prepared {
    pub namespace: String,
    pub name: String,
    pub endpoint: String,
    pub tenant: Option<String>,
    pub devices: Vec<PreparedDevice>,
}

#[derive(Default, Serialize, Deserialize)]
struct Checkpoint {
    claims: BTreeMap<String, Prepared>,
}

pub struct Driver {
    pub node: String,
    /// The daemon's main socket.
    pub socket: PathBuf,
    pub cdi_dir: PathBuf,
    pub checkpoint: PathBuf,
    pub base: CdiBase,
    /// The devices published (the names claims are allocated by).
    pub seen: Mutex<Seen>,
    claims: Mutex<BTreeMap<String, Prepared>>,
}

/// The daemon's endpoint id of claim `uid`.
pub fn endpoint_id(uid: &str) -> String {
    format!("dra-{uid}")
}

fn spec_path(cdi_dir: &Path, uid: &str) -> PathBuf {
    cdi_dir.join(format!("gpupool.io-claim_{uid}.json"))
}

/// A claim uid as it goes into file names and CDI device names.
fn valid_uid(uid: &str) -> bool {
    (1..=100).contains(&uid.len()) && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

impl Driver {
    /// A driver holding the claims of the checkpoint at `checkpoint` (none if there is none).
    pub fn new(node: String, socket: PathBuf, cdi_dir: PathBuf, checkpoint: PathBuf, base: CdiBase) -> Driver {
        let claims = match std::fs::read(&checkpoint) {
            Ok(bytes) => match serde_json::from_slice::<Checkpoint>(&bytes) {
                Ok(c) => c.claims,
                Err(e) => {
                    tracing::error!(path = %checkpoint.display(), "checkpoint unreadable ({e}); starting with no claims");
                    BTreeMap::new()
                }
            },
            Err(_) => BTreeMap::new(),
        };
        if !claims.is_empty() {
            tracing::info!(claims = claims.len(), "prepared claims from the checkpoint");
        }
        Driver {
            node,
            socket,
            cdi_dir,
            checkpoint,
            base,
            seen: Mutex::new(Seen::default()),
            claims: Mutex::new(claims),
        }
    }

    /// The prepared claims (for tests and logs).
    pub fn prepared(&self) -> BTreeMap<String, Prepared> {
        self.claims.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn save(&self, claims: &BTreeMap<String, Prepared>) -> Result<(), String> {
        let text = serde_json::to_vec_pretty(&Checkpoint { claims: claims.clone() }).map_err(|e| e.to_string())?;
        write_atomic(&self.checkpoint, &text).map_err(|e| format!("writing {}: {e}", self.checkpoint.display()))
    }

    /// Prepares claim `uid` (`claim` is its object from the API server). Blocking.
    pub fn prepare(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        claim: &k8s_openapi::api::resource::v1::ResourceClaim,
    ) -> Result<Vec<PreparedDevice>, String> {
        if !valid_uid(uid) {
            return Err(format!("claim uid {uid:?} is not a Kubernetes uid"));
        }
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        let status = daemon::status(&self.socket).map_err(|e| format!("{e:#}"))?;
        let now = crate::node::devices_from_status(&status).map_err(|e| format!("{e:#}"))?;
        // Looked up in what the daemon says now, not in the published slice: the publisher
        // notices changes itself.
        let find = |name: &str| now.iter().find(|d| super::slices::slice_name_of(d) == name);
        if let Some(p) = claims.get(uid) {
            // The kubelet retries: the same answer. A daemon restarted since has lost the
            // endpoint; it is made again with the same limits.
            let socket =
                self.socket.parent().unwrap_or(Path::new("/")).join("containers").join(format!("{}.sock", p.endpoint));
            if !socket.exists() {
                tracing::warn!(claim = %uid, "the claim's endpoint is gone (daemon restarted?); making it again");
                self.create_endpoint(p, &now)?;
            }
            return Ok(p.devices.clone());
        }
        let allocated =
            claims::allocated(claim, super::DRIVER, &self.node, |dev| find(dev).map(|d| d.total_memory >> 20 << 20))?;
        for a in &allocated {
            if !find(&a.device).is_some_and(|d| d.healthy) {
                return Err(format!("device {} is lost: the daemon does not report it healthy", a.device));
            }
        }
        check_capacity(&claims, &allocated, |dev| find(dev).map_or(0, |d| d.total_memory))?;
        if let Some(a) = allocated.iter().find(|a| a.priority.is_some()) {
            check_priority(&status, a.tenant.as_deref(), a.priority.as_deref().unwrap_or_default())?;
        }
        let tenant = allocated[0].tenant.clone();
        let devices: Vec<PreparedDevice> = allocated
            .iter()
            .enumerate()
            .map(|(i, a)| PreparedDevice {
                request: a.request.clone(),
                pool: a.pool.clone(),
                device: a.device.clone(),
                share_id: a.share_id.clone(),
                uuid: find(&a.device).map(|d| d.uuid.clone()).unwrap_or_default(),
                memory: a.memory,
                compute: a.compute,
                cdi_id: format!("{CDI_KIND}={uid}-{i}"),
            })
            .collect();
        let p =
            Prepared { namespace: namespace.into(), name: name.into(), endpoint: endpoint_id(uid), tenant, devices };
        // A plugin that died between making the endpoint and the checkpoint left it behind.
        let _ = daemon::remove_endpoint(&self.socket, &p.endpoint);
        self.create_endpoint(&p, &now)?;
        let undo = |why: String| {
            let _ = daemon::remove_endpoint(&self.socket, &p.endpoint);
            let _ = std::fs::remove_file(spec_path(&self.cdi_dir, uid));
            why
        };
        let spec = self.cdi_spec(uid, &p, &now);
        write_atomic(&spec_path(&self.cdi_dir, uid), &serde_json::to_vec_pretty(&spec).unwrap_or_default())
            .map_err(|e| undo(format!("writing the claim's CDI spec in {}: {e}", self.cdi_dir.display())))?;
        claims.insert(uid.to_string(), p.clone());
        if let Err(e) = self.save(&claims) {
            claims.remove(uid);
            return Err(undo(e));
        }
        tracing::info!(
            claim = %format!("{namespace}/{name}"), uid, tenant = ?p.tenant,
            devices = ?p.devices.iter().map(|d| (&d.device, d.memory >> 20, d.compute)).collect::<Vec<_>>(),
            "claim prepared"
        );
        Ok(p.devices)
    }

    fn create_endpoint(&self, p: &Prepared, now: &[crate::node::Device]) -> Result<(), String> {
        let first = &p.devices[0];
        if let Some(d) = p.devices.iter().find(|d| (d.memory, d.compute) != (first.memory, first.compute)) {
            return Err(format!(
                "the claim's devices differ in size ({} MiB {}% on {}, {} MiB {}% on {}): one endpoint holds one size per device",
                first.memory >> 20,
                first.compute,
                first.device,
                d.memory >> 20,
                d.compute,
                d.device
            ));
        }
        let mut ordinals = Vec::new();
        for d in &p.devices {
            let o = now.iter().find(|x| x.uuid == d.uuid).ok_or_else(|| format!("device {} is lost", d.device))?;
            ordinals.push(o.ordinal);
        }
        let limits = EndpointLimits {
            tenant: p.tenant.as_deref(),
            memory: first.memory,
            compute: first.compute,
            devices: &ordinals,
        };
        daemon::create_endpoint(&self.socket, &p.endpoint, &limits)
            .map(drop)
            .map_err(|e| format!("the daemon refused the claim's endpoint: {e:#}"))
    }

    fn cdi_spec(&self, uid: &str, p: &Prepared, now: &[crate::node::Device]) -> Value {
        let b = &self.base;
        let ro = |host: &Path, ctr: &str| json!({"hostPath": host, "containerPath": ctr, "options": ["ro", "nosuid", "nodev", "bind"]});
        let devices: Vec<Value> = p
            .devices
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let ordinal = now.iter().find(|x| x.uuid == d.uuid).map_or(0, |x| x.ordinal);
                json!({"name": format!("{uid}-{i}"), "containerEdits": {"env": [format!("GPUPOOL_DRA_DEVICE_{ordinal}={}", d.uuid)]}})
            })
            .collect();
        json!({
            "cdiVersion": b.cdi_version,
            "kind": CDI_KIND,
            "devices": devices,
            "containerEdits": {
                "env": ["GPUPOOL_ENDPOINT=unix:///run/gpupool/gpupool.sock"],
                "mounts": [
                    ro(&b.lib_dir, "/opt/gpupool/lib"),
                    ro(&b.interposer, "/opt/gpupool/lib/libgpupool.so"),
                    ro(&b.lib_dir.join("ld.so.preload"), "/etc/ld.so.preload"),
                ],
                "hooks": [{
                    "hookName": "createRuntime",
                    "path": b.gpupool,
                    "args": ["gpupool", "oci-hook", "create-runtime", "--cdi", "--claim", p.endpoint,
                             "--endpoint", format!("unix://{}", self.socket.display())],
                }],
            },
        })
    }

    /// Unprepares claim `uid`: its endpoint goes (its sessions end and everything they held is
    /// freed), then its spec. A claim not prepared succeeds (the kubelet retries). Blocking.
    pub fn unprepare(&self, uid: &str) -> Result<(), String> {
        if !valid_uid(uid) {
            return Err(format!("claim uid {uid:?} is not a Kubernetes uid"));
        }
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        daemon::remove_endpoint(&self.socket, &endpoint_id(uid))
            .map_err(|e| format!("removing the claim's endpoint: {e:#}"))?;
        match std::fs::remove_file(spec_path(&self.cdi_dir, uid)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("removing the claim's CDI spec: {e}")),
        }
        if let Some(p) = claims.remove(uid) {
            self.save(&claims)?;
            tracing::info!(claim = %format!("{}/{}", p.namespace, p.name), uid, "claim unprepared");
        }
        Ok(())
    }
}

/// Refuses `new` if, with the prepared claims, a device's memory or compute would be overcommitted.
fn check_capacity(
    prepared: &BTreeMap<String, Prepared>,
    new: &[Allocated],
    total_memory: impl Fn(&str) -> u64,
) -> Result<(), String> {
    for a in new {
        let (mut memory, mut compute) = (a.memory, u64::from(a.compute));
        for d in prepared.values().flat_map(|p| &p.devices).filter(|d| d.device == a.device) {
            memory += d.memory;
            compute += u64::from(d.compute);
        }
        let total = total_memory(&a.device);
        if memory > total {
            return Err(format!(
                "device {} is full: {} MiB asked, {} MiB of its {} MiB already prepared for other claims",
                a.device,
                a.memory >> 20,
                (memory - a.memory) >> 20,
                total >> 20
            ));
        }
        if compute > 100 {
            return Err(format!(
                "device {} is full: {}% compute asked, {}% already prepared for other claims",
                a.device,
                a.compute,
                compute - u64::from(a.compute)
            ));
        }
    }
    Ok(())
}

/// A claim's priority is its tenant's, set in the daemon's quota config: one that names another
/// is refused rather than silently run at the tenant's.
fn check_priority(status: &Value, tenant: Option<&str>, priority: &str) -> Result<(), String> {
    let tenant = tenant.ok_or("priority given without a tenant: priority is a tenant's, in the quota config")?;
    let t = status["tenants"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["tenant"] == tenant)
        .ok_or_else(|| format!("unknown tenant `{tenant}`"))?;
    let has = t["priority"].as_str().unwrap_or("normal");
    if !has.eq_ignore_ascii_case(priority) {
        return Err(format!(
            "priority {priority}: tenant {tenant} runs at {has} (priority is the tenant's, in the quota config)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(device: &str, mib: u64, compute: u8) -> Allocated {
        Allocated {
            request: "gpu".into(),
            pool: "n".into(),
            device: device.into(),
            share_id: None,
            memory: mib << 20,
            compute,
            tenant: None,
            priority: None,
        }
    }

    fn prepared(device: &str, mib: u64, compute: u8) -> Prepared {
        Prepared {
            namespace: "ns".into(),
            name: "c".into(),
            endpoint: "dra-x".into(),
            tenant: None,
            devices: vec![PreparedDevice {
                request: "gpu".into(),
                pool: "n".into(),
                device: device.into(),
                share_id: None,
                uuid: "GPU-1".into(),
                memory: mib << 20,
                compute,
                cdi_id: "gpupool.io/claim=x-0".into(),
            }],
        }
    }

    #[test]
    fn claims_share_a_device_up_to_its_capacity() {
        let total = |_: &str| 1024u64 << 20;
        let mut claims = BTreeMap::new();
        assert!(check_capacity(&claims, &[alloc("a", 512, 20)], total).is_ok());
        claims.insert("1".into(), prepared("a", 512, 20));
        claims.insert("2".into(), prepared("a", 256, 60));
        assert!(check_capacity(&claims, &[alloc("a", 256, 20)], total).is_ok());
        let e = check_capacity(&claims, &[alloc("a", 257, 20)], total).unwrap_err();
        assert!(e.contains("device a is full: 257 MiB asked, 768 MiB of its 1024 MiB"), "{e}");
        let e = check_capacity(&claims, &[alloc("a", 1, 21)], total).unwrap_err();
        assert!(e.contains("21% compute asked, 80% already"), "{e}");
        assert!(check_capacity(&claims, &[alloc("b", 1024, 100)], total).is_ok(), "another device is free");
    }

    #[test]
    fn priority_is_the_tenants() {
        let st = json!({"tenants": [{"tenant": "alpha", "priority": "high"}]});
        assert!(check_priority(&st, Some("alpha"), "high").is_ok());
        assert!(check_priority(&st, Some("alpha"), "low").unwrap_err().contains("runs at high"));
        assert!(check_priority(&st, Some("beta"), "low").unwrap_err().contains("unknown tenant"));
        assert!(check_priority(&st, None, "low").is_err());
    }

    #[test]
    fn uids_are_checked_before_they_become_file_names() {
        assert!(valid_uid("0b1c2d3e-aaaa-bbbb-cccc-0123456789ab"));
        for bad in ["", "../x", "a/b", "a b", &"x".repeat(101)] {
            assert!(!valid_uid(bad), "{bad:?}");
        }
    }
}
