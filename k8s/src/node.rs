//! The node's devices as the daemon reports them: the `devices` of its status document (what
//! `gpupool status --json` prints, read from `<socket>.ctl`). The `gpupool` binary reads the
//! document and hands it over through [`Inventory`]; this crate only interprets it.

use serde_json::Value;

/// One device of the daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// The daemon's ordinal: the index CDI names (`gpupool.io/gpu=<ordinal>`).
    pub ordinal: u32,
    /// `gpu` or `npu`.
    pub kind: String,
    pub name: String,
    pub uuid: String,
    /// Bytes.
    pub total_memory: u64,
    /// `major.minor`.
    pub compute_capability: String,
    /// Whether the daemon reaches the device now (the document's `healthy`; a daemon that
    /// predates the field reports every device it serves as reachable).
    pub healthy: bool,
}

/// Where a node agent learns the daemon's devices. Blocking: callers run it off the runtime.
pub trait Inventory: Send + Sync + 'static {
    fn devices(&self) -> anyhow::Result<Vec<Device>>;
}

/// The devices of a status document, in ordinal order.
pub fn devices_from_status(doc: &Value) -> anyhow::Result<Vec<Device>> {
    let list = doc["devices"].as_array().ok_or_else(|| anyhow::anyhow!("the status document has no device list"))?;
    let mut devices = list
        .iter()
        .map(|d| {
            let ordinal = d["ordinal"].as_u64().and_then(|o| u32::try_from(o).ok());
            Ok(Device {
                ordinal: ordinal.ok_or_else(|| anyhow::anyhow!("a device without an ordinal: {d}"))?,
                kind: d["kind"].as_str().unwrap_or("gpu").to_string(),
                name: d["name"].as_str().unwrap_or_default().to_string(),
                uuid: d["uuid"].as_str().unwrap_or_default().to_string(),
                total_memory: d["total_memory"].as_u64().unwrap_or(0),
                compute_capability: d["compute_capability"].as_str().unwrap_or_default().to_string(),
                healthy: d["healthy"].as_bool().unwrap_or(true),
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    devices.sort_by_key(|d| d.ordinal);
    Ok(devices)
}
