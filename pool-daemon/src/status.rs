//! `gpupool status [--json] [--endpoint ADDR]`: reads a daemon's status document and prints
//! it as JSON or as tables. A daemon on this host is read through its control socket
//! (`<socket>.ctl`, which answers the whole document to whoever may open it, and closes); one
//! over the network (`tls://`, `tcp://`) through a status request carrying `GPUPOOL_TOKEN`,
//! which the daemon answers with that tenant's view, or everything for the admin token
//! (`pool-daemon/src/daemon/status_view.rs`). [`Source`] is shared with `gpupool top`.

use crate::daemon::listener::control_path;
use anyhow::{Context as _, Result, anyhow, bail};
use gpupool_protocol::transport::Transport as _;
use gpupool_protocol::transport::endpoint::{self, Endpoint, NetSettings};
use gpupool_protocol::{Message, Reply, Request};
use serde_json::Value;
use std::io::Read as _;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// The endpoints a command was pointed at: `--endpoint`, else `GPUPOOL_ENDPOINT`, else the
/// default socket; parsed as the interposer parses them.
pub fn endpoints(arg: Option<String>) -> Result<Vec<Endpoint>> {
    match arg.filter(|s| !s.trim().is_empty()) {
        Some(text) => endpoint::parse_list(&text).map_err(|e| anyhow!("--endpoint: {e}")),
        None => endpoint::configured().map_err(|e| anyhow!("GPUPOOL_ENDPOINT: {e}")),
    }
}

/// Where `gpupool status` and `gpupool top` read the status document.
pub enum Source {
    /// A daemon on this host: its control socket, the whole document.
    Local(PathBuf),
    /// A daemon over the network: a status request with `GPUPOOL_TOKEN` (and `GPUPOOL_CA`).
    Remote(Endpoint),
}

impl Source {
    /// The one daemon `arg` or the environment names.
    pub fn new(arg: Option<String>) -> Result<Source> {
        let mut eps = endpoints(arg)?;
        if eps.len() != 1 {
            let list: Vec<String> = eps.iter().map(Endpoint::to_string).collect();
            bail!(
                "{} endpoints ({}): status and top watch one daemon; name it with --endpoint",
                eps.len(),
                list.join(",")
            );
        }
        Ok(match eps.remove(0) {
            Endpoint::Unix(socket) => Source::Local(socket),
            net => Source::Remote(net),
        })
    }

    pub fn fetch(&self) -> Result<Value> {
        match self {
            Source::Local(socket) => fetch(socket),
            Source::Remote(ep) => fetch_remote(ep),
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Local(socket) => write!(f, "unix://{}", socket.display()),
            Source::Remote(ep) => write!(f, "{ep}"),
        }
    }
}

/// One status request as a connection's first frame; the daemon answers and closes.
fn fetch_remote(ep: &Endpoint) -> Result<Value> {
    let mut settings = NetSettings::from_env();
    let mut t = endpoint::dial(ep, &mut settings).map_err(anyhow::Error::msg)?;
    let request = Message::Request { id: 1, no_reply: false, op: Request::Status { token: endpoint::token() } };
    t.send(&request.encode()?).with_context(|| format!("sending the status request to {ep}"))?;
    let frame = t.recv(Some(settings.timeout)).with_context(|| format!("{ep}: no status answer"))?;
    let (reply, _) = Message::decode(&frame).with_context(|| format!("{ep}: a malformed answer"))?;
    match reply {
        Message::Reply { op: Reply::StatusDocument { json }, .. } => {
            serde_json::from_slice(&json.0).with_context(|| format!("{ep}: the status is not JSON"))
        }
        Message::Reply { op: Reply::Error { code, message }, .. } => bail!("{ep} refused ({code}): {message}"),
        other => bail!("{ep}: unexpected {:?} frame instead of the status", other.kind()),
    }
}

/// The whole document from the control socket of the daemon serving `socket`.
pub fn fetch(socket: &std::path::Path) -> Result<Value> {
    let ctl = control_path(socket);
    let mut s = UnixStream::connect(&ctl).with_context(|| format!("no gpupool daemon answers on {}", ctl.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut text = String::new();
    s.read_to_string(&mut text).context("reading the daemon's status")?;
    serde_json::from_str(&text).context("the daemon's status is not JSON")
}

/// A JSON value as plain text (strings without quotes), for padding in tables.
fn txt(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// A tenant's device entry as `0 (gpu)` or `2 (npu)` (the pool's ordinal and its kind; a document
/// without kinds is a GPU-only daemon's).
fn device(doc: &Value, entry: &Value) -> String {
    let ordinal = &entry["device"];
    let kind = entry["kind"]
        .as_str()
        .or_else(|| doc["devices"].as_array()?.iter().find(|d| d["ordinal"] == *ordinal)?["kind"].as_str());
    format!("{} ({})", txt(ordinal), kind.unwrap_or("gpu"))
}

/// Bytes in use as MiB: whole when they are, else to a tenth (an NPU operand of a few KiB, a
/// pitched GPU row), so the table keeps its columns.
fn used_mib(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{:.1} MiB", bytes as f64 / 1048576.0)
    }
}

fn mib(v: &Value) -> String {
    v.as_u64().map_or_else(|| "unlimited".to_string(), |b| format!("{} MiB", b >> 20))
}

pub fn run(json: bool, endpoint_arg: Option<String>) -> Result<()> {
    let doc = Source::new(endpoint_arg)?.fetch()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    if let Some(tenant) = doc["view"]["tenant"].as_str() {
        println!("tenant {tenant}'s view: its own sessions and use only (the admin token shows every tenant)\n");
    }
    let d = &doc["daemon"];
    let v = d["driver_version"].as_u64().unwrap_or(0);
    println!(
        "daemon pid {} on {} (driver {}.{}, config {})",
        d["pid"],
        d["endpoints"],
        v / 1000,
        v % 1000 / 10,
        d["config"].as_str().unwrap_or("built-in default")
    );
    println!("\nDEVICE  KIND  NAME                                 MEMORY");
    for dev in doc["devices"].as_array().into_iter().flatten() {
        println!(
            "{:<7} {:<5} {:<36} {}",
            txt(&dev["ordinal"]),
            dev["kind"].as_str().unwrap_or("gpu"),
            dev["name"].as_str().unwrap_or("?"),
            mib(&dev["total_memory"])
        );
    }
    println!("\nTENANT               SESSIONS  DEVICE  USED           QUOTA          COMPUTE          SHARE 1s/10s");
    for t in doc["tenants"].as_array().into_iter().flatten() {
        for dev in t["devices"].as_array().into_iter().flatten() {
            println!(
                "{:<20} {:<9} {:<7} {:<14} {:<14} {:<16} {}",
                t["tenant"].as_str().unwrap_or("?"),
                txt(&t["sessions"]),
                device(&doc, dev),
                used_mib(dev["used"].as_u64().unwrap_or(0)),
                mib(&dev["quota"]),
                format!(
                    "{}% {} {}",
                    txt(&t["compute"]),
                    t["mode"].as_str().unwrap_or("?"),
                    t["priority"].as_str().unwrap_or("?")
                ),
                match &dev["compute"] {
                    Value::Null => "-".to_string(),
                    c => format!(
                        "{:.1}% / {:.1}%",
                        c["share_1s"].as_f64().unwrap_or(0.0) * 100.0,
                        c["share_10s"].as_f64().unwrap_or(0.0) * 100.0
                    ),
                }
            );
        }
    }
    println!("\nTENANT               PAGE-LOCKED HOST MEMORY / QUOTA");
    for t in doc["tenants"].as_array().into_iter().flatten() {
        println!("{:<20} {} / {}", t["tenant"].as_str().unwrap_or("?"), mib(&t["pinned"]), mib(&t["pinned_quota"]));
    }
    let preempted: Vec<(&Value, &Value)> = doc["tenants"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["devices"].as_array().into_iter().flatten().map(move |d| (t, d)))
        .filter(|(_, d)| d["compute"]["preemptions"].as_u64().unwrap_or(0) > 0)
        .collect();
    if !preempted.is_empty() {
        println!("\nTENANT               DEVICE  PREEMPTED  STOPPED");
        for (t, d) in preempted {
            println!(
                "{:<20} {:<7} {:<10} {:.1} ms",
                t["tenant"].as_str().unwrap_or("?"),
                device(&doc, d),
                txt(&d["compute"]["preemptions"]),
                d["compute"]["preempted_ns"].as_u64().unwrap_or(0) as f64 / 1e6
            );
        }
    }
    let evicted = doc["evictions"]["tenants"].as_array().filter(|t| !t.is_empty());
    if let Some(tenants) = evicted {
        println!("\nTENANT               EVICTIONS  EVICTED        ON HOST NOW    PAUSED  WAITED     LAST OUT / BACK");
        for t in tenants {
            let ms = |k: &str| t[k].as_u64().unwrap_or(0) as f64 / 1e6;
            println!(
                "{:<20} {:<10} {:<14} {:<14} {:<7} {:<10} {:.1} ms / {:.1} ms",
                t["tenant"].as_str().unwrap_or("?"),
                txt(&t["evictions"]),
                used_mib(t["evicted_bytes"].as_u64().unwrap_or(0)),
                used_mib(t["evicted_now_bytes"].as_u64().unwrap_or(0)),
                if t["paused"].as_bool().unwrap_or(false) { "yes" } else { "no" },
                format!("{:.1} s", ms("paused_ns") / 1e3),
                ms("last_evict_ns"),
                ms("last_restore_ns"),
            );
        }
    }
    println!("\nSESSION  PID      UID    TENANT               PLACEMENT    CLIENT");
    for s in doc["sessions"].as_array().into_iter().flatten() {
        println!(
            "{:<8} {:<8} {:<6} {:<20} {:<12} {}",
            txt(&s["id"]),
            txt(&s["pid"]),
            txt(&s["uid"]),
            s["tenant"].as_str().unwrap_or("?"),
            placement(&s["placement"]),
            s["client"].as_str().unwrap_or("")
        );
    }
    Ok(())
}

/// A session's placed GPUs as the daemon numbers them (its devices 0..N-1 in this order), or
/// `all` for a session that was not placed.
pub fn placement(v: &Value) -> String {
    match v.as_array() {
        Some(p) => p.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(","),
        None => "all".into(),
    }
}
