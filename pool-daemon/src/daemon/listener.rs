//! The daemon's sockets: `<path>` for clients (mode 0660, each client identified with
//! SO_PEERCRED) and `<path>.ctl`, which answers every connection with one JSON status
//! document and closes it (what `gpupool status` reads), and `<path>.containers` (mode 0600,
//! root only: [`super::containers`]). Connections waiting for their
//! hello are bounded as on the network listeners ([`super::admission`]).

use super::admission::Admission;
use super::{Shared, control, session};
use anyhow::{Context as _, Result, bail};
use gpupool_protocol::transport::endpoint::Endpoint;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The client's identity, from the kernel (SO_PEERCRED), not from anything it sends.
#[derive(Clone, Copy, Debug)]
pub struct PeerCred {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
}

pub fn peer_cred(stream: &UnixStream) -> std::io::Result<PeerCred> {
    let c = rustix::net::sockopt::socket_peercred(stream)?;
    Ok(PeerCred { pid: c.pid.as_raw_nonzero().get() as u32, uid: c.uid.as_raw(), gid: c.gid.as_raw() })
}

pub use gpupool_protocol::transport::unix::default_socket_path;

/// `unix:///PATH` or an absolute path, as clients name it ([`Endpoint::parse`]).
pub fn parse_endpoint(text: &str) -> Result<PathBuf> {
    match Endpoint::parse(text).map_err(anyhow::Error::msg)? {
        Endpoint::Unix(path) => Ok(path),
        net => bail!("{net} is a network endpoint, not a unix socket"),
    }
}

pub fn control_path(socket: &Path) -> PathBuf {
    let mut s = socket.as_os_str().to_owned();
    s.push(".ctl");
    PathBuf::from(s)
}

/// Binds one socket: creates its directory, removes a stale socket (one nobody answers
/// on), refuses to steal a live one, sets mode 0660.
fn bind_one(path: &Path) -> Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            bail!("{} is in use by a running daemon", path.display());
        }
        std::fs::remove_file(path).with_context(|| format!("removing the stale socket {}", path.display()))?;
        tracing::info!(path = %path.display(), "removed a stale socket");
    }
    let l = UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
    Ok(l)
}

pub struct Bound {
    path: PathBuf,
    clients: UnixListener,
    control: UnixListener,
    containers: UnixListener,
    checkpoints: UnixListener,
}

pub fn bind(path: &Path) -> Result<Bound> {
    let (clients, control) = (bind_one(path)?, bind_one(&control_path(path))?);
    let containers_path = super::containers::socket_path(path);
    let containers = bind_one(&containers_path)?;
    std::fs::set_permissions(&containers_path, std::fs::Permissions::from_mode(0o600))?;
    let ckpt_path = super::checkpoint::socket_path(path);
    let checkpoints = bind_one(&ckpt_path)?;
    std::fs::set_permissions(&ckpt_path, std::fs::Permissions::from_mode(0o600))?;
    Ok(Bound { path: path.to_path_buf(), clients, control, containers, checkpoints })
}

/// Accepts until SIGTERM/SIGINT, then closes every session and removes the sockets.
pub fn serve(shared: Arc<Shared>, bound: Vec<Bound>, remote: Vec<super::remote::Bound>) -> Result<()> {
    let paths: Vec<PathBuf> = bound.iter().map(|b| b.path.clone()).collect();
    signals(shared.clone(), paths.clone())?;
    let mut loops = Vec::new();
    for r in remote {
        let s = shared.clone();
        loops.push(
            std::thread::Builder::new()
                .name("gpupool-accept-net".into())
                .spawn(move || super::remote::accept_loop(s, r))?,
        );
    }
    let s = shared.clone();
    loops.push(
        std::thread::Builder::new()
            .name("gpupool-ckpt-timer".into())
            .spawn(move || super::checkpoint::periodic_loop(s))?,
    );
    for b in bound {
        let s = shared.clone();
        let c = b.control;
        loops.push(std::thread::Builder::new().name("gpupool-ctl".into()).spawn(move || control_loop(s, c))?);
        let (s, c, p) = (shared.clone(), b.containers, b.path.clone());
        loops.push(
            std::thread::Builder::new()
                .name("gpupool-containers".into())
                .spawn(move || super::containers::control_loop(s, c, p))?,
        );
        let (s, c) = (shared.clone(), b.checkpoints);
        loops.push(
            std::thread::Builder::new()
                .name("gpupool-ckpt".into())
                .spawn(move || super::checkpoint::control_loop(s, c))?,
        );
        let s = shared.clone();
        let l = b.clients;
        loops.push(std::thread::Builder::new().name("gpupool-accept".into()).spawn(move || accept_loop(s, l))?);
    }
    for l in loops {
        let _ = l.join();
    }
    let threads = std::mem::take(&mut *shared.session_threads.lock().unwrap_or_else(|e| e.into_inner()));
    let n = threads.len();
    for t in threads {
        let _ = t.join();
    }
    shared.containers.remove_all();
    for p in &paths {
        let _ = std::fs::remove_file(p);
        let _ = std::fs::remove_file(control_path(p));
        let _ = std::fs::remove_file(super::containers::socket_path(p));
        let _ = std::fs::remove_file(super::checkpoint::socket_path(p));
    }
    tracing::info!(sessions_closed = n, "gpupool daemon stopped; sockets removed");
    Ok(())
}

fn accept_loop(shared: Arc<Shared>, listener: UnixListener) {
    let admission = Arc::new(Admission::default());
    for stream in listener.incoming() {
        if shared.stopping() {
            break;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("accept: {e}");
                continue;
            }
        };
        let cred = match peer_cred(&stream) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("SO_PEERCRED failed ({e}); connection refused");
                continue;
            }
        };
        let ticket = match admission.enter(&stream, &format_args!("pid {}", cred.pid)) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(pid = cred.pid, uid = cred.uid, "connection refused: {e}");
                continue;
            }
        };
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("gpupool-session-{}", cred.pid))
            .spawn(move || session::run(s, stream, cred, ticket));
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

fn control_loop(shared: Arc<Shared>, listener: UnixListener) {
    for stream in listener.incoming() {
        if shared.stopping() {
            break;
        }
        let Ok(mut stream) = stream else { continue };
        let doc = control::status_document(&shared);
        let _ = stream.write_all(doc.to_string().as_bytes());
    }
}

/// SIGTERM/SIGINT: stop (wake the accept loops by connecting to them); SIGHUP: reload.
fn signals(shared: Arc<Shared>, paths: Vec<PathBuf>) -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    std::thread::Builder::new().name("gpupool-signals".into()).spawn(move || {
        for sig in signals.forever() {
            if sig == SIGHUP {
                reload(&shared);
                continue;
            }
            tracing::info!(signal = sig, "shutting down: no new clients, closing sessions");
            shared.shutdown.store(true, Ordering::Release);
            for p in &paths {
                let _ = UnixStream::connect(p);
                let _ = UnixStream::connect(control_path(p));
                let _ = UnixStream::connect(super::containers::socket_path(p));
                let _ = UnixStream::connect(super::checkpoint::socket_path(p));
            }
            break;
        }
    })?;
    Ok(())
}

fn reload(shared: &Shared) {
    let Some(path) = &shared.config_path else {
        tracing::info!("SIGHUP: no config file to reload (built-in default config)");
        return;
    };
    match super::load_config(Some(path), shared.first_npu()) {
        Ok(cfg) => {
            shared.compute.apply_config(&cfg);
            shared.ledger.apply(cfg);
            tracing::info!(path = %path.display(), "SIGHUP: quota config reloaded; live sessions kept");
        }
        Err(e) => tracing::error!("SIGHUP: keeping the current config: {e:#}"),
    }
}
