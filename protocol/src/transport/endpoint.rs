//! Where the daemons are, and dialling a network one: the one parser of client endpoints,
//! used by the interposer (`libgpupool.so`) and by `gpupool run`, `status` and `top`.
//!
//! - `GPUPOOL_ENDPOINT`: `unix:///PATH` (or a bare path), `tls://HOST:PORT` or
//!   `tcp://HOST:PORT`; several separated by commas. Default: the local daemon's socket.
//! - `GPUPOOL_TOKEN`: the tenant's token (required over the network).
//! - `GPUPOOL_CA`: PEM file of the CA that signed the daemons' certificates (tls://).
//! - `GPUPOOL_TIMEOUT`: seconds within which a cut link or a vanished daemon host fails
//!   the calls waiting on it (default 5; at least 3).

use super::TransportError;
use super::net::{self, NetTransport};
use std::fmt;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Unix(PathBuf),
    Net { host: String, port: u16, tls: bool },
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Unix(p) => write!(f, "unix://{}", p.display()),
            Endpoint::Net { host, port, tls } => {
                let scheme = if *tls { "tls" } else { "tcp" };
                if host.contains(':') {
                    write!(f, "{scheme}://[{host}]:{port}")
                } else {
                    write!(f, "{scheme}://{host}:{port}")
                }
            }
        }
    }
}

impl Endpoint {
    /// One endpoint: `unix:///PATH`, an absolute path, `tls://HOST:PORT` or `tcp://HOST:PORT`
    /// (an IPv6 address in brackets).
    pub fn parse(text: &str) -> Result<Endpoint, String> {
        let text = text.trim();
        if let Some(p) = text.strip_prefix("unix://") {
            return if p.is_empty() {
                Err(format!("endpoint {text:?}: empty path"))
            } else {
                Ok(Endpoint::Unix(p.into()))
            };
        }
        if text.starts_with('/') {
            return Ok(Endpoint::Unix(text.into()));
        }
        let (tls, rest) = match (text.strip_prefix("tls://"), text.strip_prefix("tcp://")) {
            (Some(r), _) => (true, r),
            (_, Some(r)) => (false, r),
            _ => return Err(format!("endpoint {text:?}: expected unix:///PATH, tls://HOST:PORT or tcp://HOST:PORT")),
        };
        let rest = rest.trim_end_matches('/');
        let (host, port) = rest.rsplit_once(':').ok_or_else(|| format!("endpoint {text:?}: no :PORT"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = port.parse::<u16>().map_err(|_| format!("endpoint {text:?}: bad port {port:?}"))?;
        if host.is_empty() {
            return Err(format!("endpoint {text:?}: no host"));
        }
        Ok(Endpoint::Net { host: host.to_string(), port, tls })
    }

    pub fn is_network(&self) -> bool {
        matches!(self, Endpoint::Net { .. })
    }
}

/// Every endpoint `GPUPOOL_ENDPOINT` lists, in order (its devices come in this order).
pub fn parse_list(text: &str) -> Result<Vec<Endpoint>, String> {
    let eps = text.split(',').filter(|s| !s.trim().is_empty()).map(Endpoint::parse).collect::<Result<Vec<_>, _>>()?;
    if eps.is_empty() {
        return Err(format!("GPUPOOL_ENDPOINT {text:?} names no endpoint"));
    }
    if eps.len() > 16 {
        return Err(format!("GPUPOOL_ENDPOINT lists {} endpoints; at most 16", eps.len()));
    }
    Ok(eps)
}

/// The endpoints to use: `GPUPOOL_ENDPOINT`, else this host's daemon.
pub fn configured() -> Result<Vec<Endpoint>, String> {
    if let Ok(e) = std::env::var("GPUPOOL_ENDPOINT")
        && !e.trim().is_empty()
    {
        return parse_list(&e);
    }
    Ok(vec![Endpoint::Unix(super::unix::default_socket_path())])
}

/// `GPUPOOL_TOKEN`: the tenant's (or the admin's) token, if set.
pub fn token() -> Option<String> {
    std::env::var("GPUPOOL_TOKEN").ok().filter(|t| !t.is_empty())
}

/// What a network connection needs besides its address.
pub struct NetSettings {
    pub timeout: Duration,
    ca: Option<PathBuf>,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl NetSettings {
    pub fn from_env() -> NetSettings {
        let timeout = std::env::var("GPUPOOL_TIMEOUT")
            .ok()
            .and_then(|v| v.trim().trim_end_matches('s').parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
            .map_or(DEFAULT_TIMEOUT, |s| Duration::from_secs_f64(s.max(3.0)));
        let ca = std::env::var_os("GPUPOOL_CA").filter(|v| !v.is_empty()).map(PathBuf::from);
        NetSettings { timeout, ca, tls: None }
    }

    /// Whether every endpoint of `eps` can be reached with these settings and [`token`]: a
    /// network endpoint needs a token, a `tls://` one a CA file that loads. For commands that
    /// start a program, so a missing setting is reported before it runs, not at its first call.
    pub fn check(&mut self, eps: &[Endpoint]) -> Result<(), String> {
        if let Some(ep) = eps.iter().find(|e| e.is_network())
            && token().is_none()
        {
            return Err(format!("{ep}: over the network only a token names a tenant: set GPUPOOL_TOKEN"));
        }
        if let Some(ep) = eps.iter().find(|e| matches!(e, Endpoint::Net { tls: true, .. })) {
            self.tls_config().map_err(|e| format!("{ep}: {e}"))?;
        }
        Ok(())
    }

    fn tls_config(&mut self) -> Result<Arc<rustls::ClientConfig>, String> {
        if let Some(c) = &self.tls {
            return Ok(c.clone());
        }
        let ca = self
            .ca
            .as_ref()
            .ok_or("tls:// needs GPUPOOL_CA: the PEM file of the CA that signed the daemon's certificate")?;
        let cfg = net::tls::client_config(ca).map_err(|e| format!("GPUPOOL_CA: {e}"))?;
        self.tls = Some(cfg.clone());
        Ok(cfg)
    }
}

/// Connects to a network endpoint within the timeout, with keepalives set so a cut link is
/// noticed within it, and completes the TLS handshake.
pub fn dial(ep: &Endpoint, settings: &mut NetSettings) -> Result<NetTransport, String> {
    let Endpoint::Net { host, port, tls } = ep else {
        return Err(format!("{ep} is not a network endpoint"));
    };
    let addrs: Vec<_> =
        (host.as_str(), *port).to_socket_addrs().map_err(|e| format!("{ep}: cannot resolve {host}: {e}"))?.collect();
    let mut last = format!("{ep}: {host} resolves to no address");
    let mut sock = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, settings.timeout) {
            Ok(s) => {
                sock = Some(s);
                break;
            }
            Err(e) => last = format!("connecting to {ep} ({a}): {e}"),
        }
    }
    let sock = sock.ok_or(last)?;
    net::set_liveness(&sock, settings.timeout, None).map_err(|e| format!("{ep}: socket options: {e}"))?;
    if !tls {
        return NetTransport::plain(sock, net::DEFAULT_MAX_FRAME).map_err(|e| format!("{ep}: {e}"));
    }
    let cfg = settings.tls_config()?;
    let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| format!("{ep}: server name: {e}"))?;
    let conn = rustls::ClientConnection::new(cfg, name).map_err(|e| format!("{ep}: {e}"))?;
    NetTransport::tls(sock, conn, net::DEFAULT_MAX_FRAME, settings.timeout).map_err(|e| match e {
        TransportError::Handshake(why) if why.contains("certificate") => format!(
            "{ep}: TLS handshake failed: {why} (GPUPOOL_CA must be the CA that signed the daemon's certificate, \
             for the name {host})"
        ),
        e => format!("{ep}: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_lists_parse_in_order() {
        let eps = parse_list("tls://gpu-a:7070, tcp://10.0.0.2:7071,unix:///run/x.sock,/tmp/y,tls://[::1]:9").unwrap();
        assert_eq!(eps[0], Endpoint::Net { host: "gpu-a".into(), port: 7070, tls: true });
        assert_eq!(eps[1], Endpoint::Net { host: "10.0.0.2".into(), port: 7071, tls: false });
        assert_eq!(eps[2], Endpoint::Unix("/run/x.sock".into()));
        assert_eq!(eps[3], Endpoint::Unix("/tmp/y".into()));
        assert_eq!(eps[4], Endpoint::Net { host: "::1".into(), port: 9, tls: true });
        assert_eq!(eps[4].to_string(), "tls://[::1]:9");
        // What `gpupool run` hands its program: each endpoint written back parses to itself.
        let written: Vec<String> = eps.iter().map(Endpoint::to_string).collect();
        assert_eq!(parse_list(&written.join(",")).unwrap(), eps);
        for bad in ["http://x:1", "tls://x", "tls://:5", "tls://x:70000", "unix://", ","] {
            assert!(parse_list(bad).is_err(), "{bad}");
        }
    }
}
