//! The daemon as the DRA plugin reaches it, on the host's sockets: the status document from
//! `<socket>.ctl` (what `gpupool status` reads) and per-claim endpoints over the root-only
//! `<socket>.containers` (one JSON line each way, what `gpupool oci-hook` sends; the wire is
//! pool-daemon/src/daemon/containers.rs's `ContainerRequest` and `ContainerReply`). Blocking:
//! callers run it off the async runtime.

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};
use std::io::{BufRead as _, Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A removal waits for the endpoint's sessions to end (the daemon gives them 20 s).
const REPLY_WAIT: Duration = Duration::from_secs(30);

fn with_suffix(socket: &Path, suffix: &str) -> PathBuf {
    let mut s = socket.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The daemon's whole status document.
pub fn status(socket: &Path) -> Result<Value> {
    let ctl = with_suffix(socket, ".ctl");
    let mut s = UnixStream::connect(&ctl).with_context(|| format!("no gpupool daemon answers on {}", ctl.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut text = String::new();
    s.read_to_string(&mut text).context("reading the daemon's status")?;
    serde_json::from_str(&text).context("the daemon's status is not JSON")
}

fn request(socket: &Path, req: &Value) -> Result<Value> {
    let path = with_suffix(socket, ".containers");
    let mut s = UnixStream::connect(&path).with_context(|| format!("connecting to {}", path.display()))?;
    s.set_read_timeout(Some(REPLY_WAIT))?;
    let mut line = req.to_string();
    line.push('\n');
    s.write_all(line.as_bytes())?;
    let mut reply = String::new();
    std::io::BufReader::new(s).read_line(&mut reply)?;
    let v: Value = serde_json::from_str(&reply).with_context(|| format!("the daemon's reply {reply:?}"))?;
    if v["ok"] != true {
        bail!("{}", v["error"].as_str().unwrap_or("refused, no reason given"));
    }
    Ok(v)
}

/// What an endpoint is bound to.
pub struct EndpointLimits<'a> {
    pub tenant: Option<&'a str>,
    /// Bytes per device, a whole number of MiB.
    pub memory: u64,
    pub compute: u8,
    /// The daemon's ordinals the endpoint may allocate on; the others get no memory.
    pub devices: &'a [u32],
}

/// Makes endpoint `id`; returns its socket on the host.
pub fn create_endpoint(socket: &Path, id: &str, l: &EndpointLimits) -> Result<PathBuf> {
    let reply = request(
        socket,
        &json!({
            "op": "create", "id": id, "tenant": l.tenant, "memory": format!("{}MiB", l.memory >> 20),
            "compute": l.compute, "devices": l.devices,
        }),
    )?;
    reply["socket"].as_str().map(PathBuf::from).context("the daemon's reply names no socket")
}

/// Removes endpoint `id`, ending its sessions (the daemon frees what they held before it
/// answers). Removing one that is not there succeeds.
pub fn remove_endpoint(socket: &Path, id: &str) -> Result<()> {
    request(socket, &json!({"op": "remove", "id": id})).map(drop)
}
