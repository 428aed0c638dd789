//! Network listeners: `tls://ADDR:PORT` (rustls, the configured certificate and key) and
//! `tcp://ADDR:PORT` (plain; loopback only unless the operator says `--insecure`).
//!
//! Admission is cheap and bounded ([`super::admission`], shared with the unix socket): at
//! most [`super::admission::MAX_PENDING`] connections may be between accept and hello at once (a new one
//! pushes out the oldest), each gets [`HELLO_TIMEOUT`] for TLS and its hello, and a hello
//! without a token that names a tenant is refused before the session exists. Accepted sockets carry kernel keepalives and `TCP_USER_TIMEOUT` set to
//! the lease, so a client whose host or link vanished is dropped, and everything it held
//! freed, within the lease, without any traffic from us.

use super::admission::{Admission, HELLO_TIMEOUT};
use super::{Shared, session};
use anyhow::{Context as _, Result, bail};
use gpupool_protocol::transport::net::{self, NetTransport};
use gpupool_protocol::transport::shm::ShmConfig;
use rustix::event::{PollFd, PollFlags, Timespec};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The default lease: a silent client is declared gone (and its session freed) after this.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// A network endpoint from `--listen`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetEndpoint {
    pub addr: SocketAddr,
    pub tls: bool,
}

/// How the daemon serves network clients.
#[derive(Clone, Debug)]
pub struct NetOptions {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// Allow plain `tcp://` on addresses other than loopback.
    pub insecure: bool,
    pub lease: Duration,
}

impl Default for NetOptions {
    fn default() -> Self {
        Self { cert: None, key: None, insecure: false, lease: DEFAULT_LEASE }
    }
}

/// `tls://HOST:PORT` or `tcp://HOST:PORT` (HOST an IP address, or a name that resolves).
pub fn parse(text: &str) -> Result<Option<NetEndpoint>> {
    let (tls, rest) = match (text.strip_prefix("tls://"), text.strip_prefix("tcp://")) {
        (Some(r), _) => (true, r),
        (_, Some(r)) => (false, r),
        _ => return Ok(None),
    };
    let rest = rest.trim_end_matches('/');
    let addr = std::net::ToSocketAddrs::to_socket_addrs(rest)
        .with_context(|| format!("endpoint {text:?}: expected HOST:PORT"))?
        .next()
        .with_context(|| format!("endpoint {text:?}: {rest} resolves to no address"))?;
    Ok(Some(NetEndpoint { addr, tls }))
}

pub struct Bound {
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    lease: Duration,
}

impl Bound {
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// `tls://ADDR:PORT` or `tcp://ADDR:PORT`, with the port actually bound.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "tls" } else { "tcp" };
        self.local_addr().map_or_else(|| format!("{scheme}://?"), |a| format!("{scheme}://{a}"))
    }
}

/// Checks the options against the endpoints and binds each.
pub fn bind(endpoints: &[NetEndpoint], opts: &NetOptions) -> Result<Vec<Bound>> {
    let mut tls = None;
    let mut out = Vec::new();
    for ep in endpoints {
        let config = if ep.tls {
            if tls.is_none() {
                let (Some(cert), Some(key)) = (&opts.cert, &opts.key) else {
                    bail!("--listen tls://{} needs --tls-cert and --tls-key (gpupool cert makes a pair)", ep.addr);
                };
                tls = Some(net::tls::server_config(cert, key).map_err(anyhow::Error::msg)?);
            }
            tls.clone()
        } else {
            if !ep.addr.ip().is_loopback() {
                if !opts.insecure {
                    bail!(
                        "tcp://{} is unencrypted and unauthenticated on the network: use tls://, a loopback \
                         address, or --insecure",
                        ep.addr
                    );
                }
                tracing::warn!(addr = %ep.addr, "--insecure: serving plain TCP off loopback; tokens and data travel in clear");
            }
            None
        };
        let listener = TcpListener::bind(ep.addr).with_context(|| format!("binding {}", ep.addr))?;
        out.push(Bound { listener, tls: config, lease: opts.lease });
    }
    Ok(out)
}

/// Accepts until the daemon stops. Runs on its own thread.
pub fn accept_loop(shared: Arc<Shared>, bound: Bound) {
    let admission = Arc::new(Admission::default());
    let scheme = if bound.tls.is_some() { "tls" } else { "tcp" };
    let local = bound.local_addr();
    tracing::info!(addr = ?local, scheme, lease_s = bound.lease.as_secs_f64(), "listening for remote clients");
    while !shared.stopping() {
        // Poll so that shutdown is noticed without a connection to wake us.
        let mut fds = [PollFd::new(&bound.listener, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 200_000_000 })) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => {}
            Err(e) => {
                tracing::error!("polling {local:?}: {e}");
                return;
            }
        }
        let (sock, addr) = match bound.listener.accept() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("accept on {local:?}: {e}");
                continue;
            }
        };
        let ticket = match admission.enter(&sock, &addr) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(remote = %addr, "refused: {e}");
                continue; // dropping `sock` closes it
            }
        };
        let (s, tls, lease) = (shared.clone(), bound.tls.clone(), bound.lease);
        let spawned = std::thread::Builder::new().name(format!("gpupool-remote-{addr}")).spawn(move || {
            let t0 = Instant::now();
            match admit(sock, addr, tls, lease) {
                Ok(t) => session::run_remote(s, t, t0, ticket),
                Err(why) => tracing::info!(remote = %addr, "connection refused: {why}"),
            }
        });
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

/// Liveness settings and the TLS handshake, within [`HELLO_TIMEOUT`].
fn admit(
    sock: TcpStream,
    addr: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    lease: Duration,
) -> Result<NetTransport, String> {
    // A client that stops reading is as gone as one that stops answering.
    net::set_liveness(&sock, lease, Some(lease)).map_err(|e| format!("socket options: {e}"))?;
    let staging = ShmConfig::default().staging_size;
    let t = match tls {
        Some(cfg) => {
            let conn = rustls::ServerConnection::new(cfg).map_err(|e| e.to_string())?;
            NetTransport::tls(sock, conn, net::DEFAULT_MAX_FRAME, HELLO_TIMEOUT).map_err(|e| e.to_string())?
        }
        None => NetTransport::plain(sock, net::DEFAULT_MAX_FRAME).map_err(|e| e.to_string())?,
    };
    tracing::debug!(remote = %addr, tls = t.is_tls(), "transport ready");
    t.with_staging(staging).map_err(|e| format!("staging area: {e}"))
}
