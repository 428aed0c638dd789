//! Per-container endpoints: a unix socket bound to one tenant and to limits that may only
//! narrow that tenant's quota, created and removed on request over the root-only socket
//! `<socket>.containers` (what `gpupool oci-hook` calls). Whoever connects through a
//! container's socket is that tenant whatever its uid: every container runs as uid 0, so
//! the socket, not the uid, is the identity (DESIGN.md §8). A hello through it cannot name
//! another tenant: a token that resolves to another tenant is refused with a log line.
//!
//! Wire: one JSON [`ContainerRequest`] line per connection, answered with one JSON
//! [`ContainerReply`] line. The peer must be uid 0 (SO_PEERCRED); the socket is mode 0600.
//! `<socket>.ctl` stays the status document it always was (readers send nothing).
//!
//! Sockets live in `<dir of the daemon's socket>/containers/<id>.sock` (the directory mode
//! 0700, so only root on the host reaches them by path; the socket 0666, so a container's
//! root mapped to another uid by a user namespace can still connect through the bind mount).
//! Removing an endpoint stops its accept loop, removes the socket, ends its sessions (their
//! cleanup frees everything they held) and answers once they are gone.

use super::admission::Admission;
use super::listener::{PeerCred, peer_cred};
use super::{Shared, session};
use gpupool_quota::{ClientRequest, MemoryQuota, TenantId};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a removal waits for the endpoint's sessions to finish their cleanup.
const REMOVE_WAIT: Duration = Duration::from_secs(20);
/// How long a request line may take to arrive.
const REQUEST_WAIT: Duration = Duration::from_secs(5);
/// Requests are short; a longer line is refused.
const MAX_REQUEST: u64 = 64 << 10;

/// `<socket>.containers`.
pub fn socket_path(main: &Path) -> PathBuf {
    let mut s = main.as_os_str().to_owned();
    s.push(".containers");
    PathBuf::from(s)
}

/// Where endpoint `id` of the daemon serving `main` has its socket; `None`: not a valid id.
pub fn endpoint_socket(main: &Path, id: &str) -> Option<PathBuf> {
    valid_id(id).then(|| main.parent().unwrap_or(Path::new("/")).join("containers").join(format!("{id}.sock")))
}

/// A request on `<socket>.containers`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ContainerRequest {
    /// Make the endpoint of container `id`.
    Create {
        id: String,
        /// The tenant; `None`: the config's `[default]` tenant.
        tenant: Option<String>,
        /// Memory per device (e.g. `256MiB`); narrows the tenant's quota.
        memory: Option<String>,
        /// Compute percent; narrows the tenant's.
        compute: Option<u8>,
        /// The devices the container may allocate on; `None`: all. Others get a quota of 0.
        devices: Option<Vec<u32>>,
    },
    /// Remove the endpoint of container `id` and end its sessions.
    Remove { id: String },
}

/// The answer to a [`ContainerRequest`].
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ContainerReply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Create: the endpoint's socket on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
    /// Create: the tenant the socket is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Remove: sessions that were still open and were ended.
    #[serde(default)]
    pub sessions_ended: usize,
    /// Remove: whether an endpoint of that id existed.
    #[serde(default)]
    pub existed: bool,
}

impl ContainerReply {
    fn error(e: impl Into<String>) -> Self {
        ContainerReply { ok: false, error: Some(e.into()), ..Default::default() }
    }
}

/// One container's endpoint.
pub struct Endpoint {
    pub id: String,
    pub tenant: TenantId,
    /// What every session through it asks for at most (each hello may narrow it further).
    pub limits: ClientRequest,
    pub socket: PathBuf,
    removed: AtomicBool,
}

impl Endpoint {
    pub fn removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// A hello's request narrowed by this endpoint's limits: the smaller of each.
    pub fn narrow(&self, hello: ClientRequest) -> ClientRequest {
        let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        let mut memory =
            MemoryQuota { default: min(self.limits.memory.default, hello.memory.default), devices: Default::default() };
        for &d in self.limits.memory.devices.keys().chain(hello.memory.devices.keys()) {
            if let Some(v) = min(self.limits.memory.for_device(d), hello.memory.for_device(d)) {
                memory.devices.insert(d, v);
            }
        }
        let compute = match (self.limits.compute, hello.compute) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        ClientRequest { memory, compute }
    }
}

/// The live endpoints by container id.
#[derive(Default)]
pub struct Registry {
    by_id: Mutex<HashMap<String, Arc<Endpoint>>>,
}

impl Registry {
    /// Removes every endpoint's socket (daemon shutdown; the sessions end with the daemon).
    pub fn remove_all(&self) {
        for (_, ep) in self.by_id.lock().unwrap_or_else(|e| e.into_inner()).drain() {
            ep.removed.store(true, Ordering::Release);
            let _ = std::fs::remove_file(&ep.socket);
        }
    }
}

/// A container id as runtimes make them (`[A-Za-z0-9_.-]`, not starting with a dot): it
/// becomes a file name.
fn valid_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && !id.starts_with('.')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Serves `<socket>.containers`: one request per connection, each on its own thread (a
/// removal waits for sessions to end).
pub fn control_loop(shared: Arc<Shared>, listener: UnixListener, main_socket: PathBuf) {
    for stream in listener.incoming() {
        if shared.stopping() {
            break;
        }
        let Ok(stream) = stream else { continue };
        let s = shared.clone();
        let main = main_socket.clone();
        let _ = std::thread::Builder::new().name("gpupool-containers".into()).spawn(move || answer(&s, stream, &main));
    }
}

fn answer(shared: &Arc<Shared>, mut stream: UnixStream, main_socket: &Path) {
    let cred = match peer_cred(&stream) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("container request: SO_PEERCRED failed ({e}); refused");
            return;
        }
    };
    let reply = if cred.uid != 0 {
        tracing::warn!(
            pid = cred.pid,
            uid = cred.uid,
            "container request refused: only root manages container endpoints"
        );
        ContainerReply::error("only root (uid 0) may manage container endpoints")
    } else {
        let _ = stream.set_read_timeout(Some(REQUEST_WAIT));
        let mut line = String::new();
        let read = stream.try_clone().map(|s| BufReader::new(std::io::Read::take(s, MAX_REQUEST)).read_line(&mut line));
        match (read, serde_json::from_str::<ContainerRequest>(&line)) {
            (Ok(Ok(_)), Ok(req)) => handle(shared, req, main_socket, cred),
            (Ok(Ok(_)), Err(e)) => {
                tracing::warn!(pid = cred.pid, "container request refused: malformed ({e})");
                ContainerReply::error(format!("malformed request: {e}"))
            }
            (Ok(Err(e)), _) | (Err(e), _) => {
                tracing::warn!(pid = cred.pid, "container request: reading it failed ({e})");
                return;
            }
        }
    };
    let mut text = serde_json::to_string(&reply).unwrap_or_else(|_| "{\"ok\":false}".into());
    text.push('\n');
    let _ = stream.write_all(text.as_bytes());
}

fn handle(shared: &Arc<Shared>, req: ContainerRequest, main_socket: &Path, cred: PeerCred) -> ContainerReply {
    match req {
        ContainerRequest::Create { id, tenant, memory, compute, devices } => {
            match create(shared, &id, tenant, memory, compute, devices, main_socket) {
                Ok(ep) => {
                    tracing::info!(
                        container = %id, tenant = %ep.tenant.as_str(), socket = %ep.socket.display(),
                        memory = ?ep.limits.memory, compute = ?ep.limits.compute, by_pid = cred.pid,
                        "container endpoint created"
                    );
                    ContainerReply {
                        ok: true,
                        socket: Some(ep.socket.clone()),
                        tenant: Some(ep.tenant.as_str().to_string()),
                        ..Default::default()
                    }
                }
                Err(e) => {
                    tracing::warn!(container = %id, by_pid = cred.pid, "container endpoint refused: {e}");
                    ContainerReply::error(e)
                }
            }
        }
        ContainerRequest::Remove { id } => remove(shared, &id),
    }
}

fn create(
    shared: &Arc<Shared>,
    id: &str,
    tenant: Option<String>,
    memory: Option<String>,
    compute: Option<u8>,
    devices: Option<Vec<u32>>,
    main_socket: &Path,
) -> Result<Arc<Endpoint>, String> {
    if !valid_id(id) {
        return Err(format!("container id {id:?}: 1-128 of [A-Za-z0-9_.-], not starting with '.'"));
    }
    let config = shared.ledger.config();
    let tenant = match tenant {
        None => config.default_tenant().id.clone(),
        Some(name) => config
            .all_tenants()
            .map(|t| t.id.clone())
            .find(|t| t.as_str() == name)
            .ok_or_else(|| format!("unknown tenant `{name}`"))?,
    };
    let mut limits = ClientRequest::default();
    if let Some(m) = &memory {
        limits = limits.with_memory(m).map_err(|e| format!("memory {m}: {e}"))?;
    }
    if let Some(c) = compute {
        limits = limits.with_compute(c).map_err(|e| e.to_string())?;
    }
    if let Some(devs) = &devices {
        let n = shared.devices.len() as u32;
        if let Some(bad) = devs.iter().find(|&&d| d >= n) {
            return Err(format!("device {bad}: the daemon has {n} devices"));
        }
        // A device not given to the container gets no memory on it.
        for d in (0..n).filter(|d| !devs.contains(d)) {
            limits.memory.devices.insert(d, 0);
        }
    }
    // Only narrows: the tenant must exist and the limits are checked as a hello's would be.
    let granted = config.effective_limits(&tenant, &limits).map_err(|e| e.to_string())?;
    for c in &granted.clamped {
        tracing::info!(container = %id, "container limit clamped to the tenant's quota: {c}");
    }
    let socket = endpoint_socket(main_socket, id).ok_or("invalid id")?;
    let dir = socket.parent().unwrap_or(Path::new("/")).to_path_buf();
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("creating {}: {e}", dir.display())),
    }
    let mut map = shared.containers.by_id.lock().unwrap_or_else(|e| e.into_inner());
    if map.contains_key(id) {
        return Err(format!("container {id} already has an endpoint"));
    }
    // A socket left by a daemon that died: nobody answers on it.
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).map_err(|e| format!("binding {}: {e}", socket.display()))?;
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| format!("chmod {}: {e}", socket.display()))?;
    let ep = Arc::new(Endpoint {
        id: id.to_string(),
        tenant,
        limits,
        socket: socket.clone(),
        removed: AtomicBool::new(false),
    });
    let (s, e) = (shared.clone(), ep.clone());
    std::thread::Builder::new()
        .name(format!("gpupool-accept-{id}"))
        .spawn(move || accept_loop(s, listener, e))
        .map_err(|e| format!("starting the endpoint's thread: {e}"))?;
    map.insert(id.to_string(), ep.clone());
    Ok(ep)
}

fn accept_loop(shared: Arc<Shared>, listener: UnixListener, ep: Arc<Endpoint>) {
    let admission = Arc::new(Admission::default());
    for stream in listener.incoming() {
        if shared.stopping() || ep.removed() {
            break;
        }
        let Ok(stream) = stream else { continue };
        let cred = match peer_cred(&stream) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(container = %ep.id, "SO_PEERCRED failed ({e}); connection refused");
                continue;
            }
        };
        let ticket = match admission.enter(&stream, &format_args!("pid {} in container {}", cred.pid, ep.id)) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(container = %ep.id, pid = cred.pid, "connection refused: {e}");
                continue;
            }
        };
        let (s, e) = (shared.clone(), ep.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("gpupool-session-{}", cred.pid))
            .spawn(move || session::run_in_container(s, stream, cred, ticket, e));
        match spawned {
            Ok(h) => {
                let mut threads = shared.session_threads.lock().unwrap_or_else(|e| e.into_inner());
                threads.retain(|t| !t.is_finished());
                threads.push(h);
            }
            Err(e) => tracing::error!("cannot start a session thread: {e}"),
        }
    }
}

fn live_sessions(shared: &Shared, id: &str) -> usize {
    let sessions = shared.sessions.lock().unwrap_or_else(|e| e.into_inner());
    sessions.values().filter(|s| s.container.as_deref() == Some(id)).count()
}

fn remove(shared: &Arc<Shared>, id: &str) -> ContainerReply {
    let Some(ep) = shared.containers.by_id.lock().unwrap_or_else(|e| e.into_inner()).remove(id) else {
        tracing::info!(container = %id, "container endpoint removal: none by that id (already removed)");
        return ContainerReply { ok: true, ..Default::default() };
    };
    ep.removed.store(true, Ordering::Release);
    // Wake the accept loop so it sees the flag, then take the path away.
    let _ = UnixStream::connect(&ep.socket);
    let _ = std::fs::remove_file(&ep.socket);
    let open = live_sessions(shared, id);
    let t0 = Instant::now();
    // Sessions notice the flag at their next idle poll and run their cleanup.
    while live_sessions(shared, id) > 0 {
        if t0.elapsed() > REMOVE_WAIT {
            let left = live_sessions(shared, id);
            tracing::error!(container = %id, sessions = left, "container endpoint removed; sessions still ending");
            return ContainerReply {
                existed: true,
                sessions_ended: open - left.min(open),
                ..ContainerReply::error(format!("{left} sessions had not ended after {REMOVE_WAIT:?}"))
            };
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    tracing::info!(container = %id, sessions_ended = open, wait_us = t0.elapsed().as_micros() as u64, "container endpoint removed");
    ContainerReply { ok: true, existed: true, sessions_ended: open, ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(limits: ClientRequest) -> Endpoint {
        Endpoint {
            id: "c".into(),
            tenant: TenantId::new("t"),
            limits,
            socket: PathBuf::new(),
            removed: AtomicBool::new(false),
        }
    }

    #[test]
    fn a_hello_can_only_narrow_the_endpoints_limits() {
        let mut limits = ClientRequest::default().with_memory("256MiB").unwrap().with_compute(50).unwrap();
        limits.memory.devices.insert(1, 0);
        let ep = endpoint(limits);
        // Asking for more gets the endpoint's; device 1 stays at 0 whatever the hello says.
        let wide = ClientRequest::default().with_memory("1GiB").unwrap().with_compute(90).unwrap();
        let n = ep.narrow(wide);
        assert_eq!((n.memory.for_device(0), n.memory.for_device(1), n.compute), (Some(256 << 20), Some(0), Some(50)));
        // Asking for less gets less.
        let narrow = ClientRequest::default().with_memory("64MiB").unwrap().with_compute(10).unwrap();
        let n = ep.narrow(narrow);
        assert_eq!((n.memory.for_device(0), n.memory.for_device(1), n.compute), (Some(64 << 20), Some(0), Some(10)));
        // Asking nothing gets the endpoint's limits; an endpoint without limits leaves the hello's.
        assert_eq!(ep.narrow(ClientRequest::default()).memory.for_device(0), Some(256 << 20));
        let open = endpoint(ClientRequest::default());
        let n = open.narrow(ClientRequest::default().with_memory("64MiB").unwrap());
        assert_eq!((n.memory.for_device(3), n.compute), (Some(64 << 20), None));
    }

    #[test]
    fn container_ids_are_file_names() {
        for ok in ["c1", "97a4dc6b3315ace1", "my_ctr-2.x"] {
            assert!(valid_id(ok), "{ok}");
        }
        for bad in ["", ".", "..", ".hidden", "a/b", "../x", "a b", "a\0b", &"x".repeat(129)] {
            assert!(!valid_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn requests_and_replies_are_one_json_line_each() {
        let r: ContainerRequest = serde_json::from_str(
            r#"{"op":"create","id":"c1","tenant":"alpha","memory":"256MiB","compute":null,"devices":[0]}"#,
        )
        .unwrap();
        assert!(matches!(r, ContainerRequest::Create { ref id, devices: Some(ref d), .. } if id == "c1" && d == &[0]));
        let r: ContainerRequest = serde_json::from_str(r#"{"op":"remove","id":"c1"}"#).unwrap();
        assert!(matches!(r, ContainerRequest::Remove { ref id } if id == "c1"));
        assert!(serde_json::from_str::<ContainerRequest>(r#"{"op":"widen","id":"c1"}"#).is_err());
        let text = serde_json::to_string(&ContainerReply::error("no")).unwrap();
        assert!(!text.contains('\n') && text.contains("\"ok\":false"), "{text}");
    }
}
