//! Network transport: the same frames as the other transports, each preceded by its
//! length (u32, little-endian), on a TCP connection, in TLS (rustls) unless the endpoint
//! is plain `tcp://`.
//!
//! What a network link needs that a unix socket does not:
//! - **Liveness.** [`set_liveness`] turns on TCP keepalives and `TCP_USER_TIMEOUT` so the
//!   kernel declares a silent peer (cut cable, dead host) gone within a bound, without any
//!   thread of ours waking up. The error it then reports (`ETIMEDOUT`, an unreachable
//!   host) surfaces as [`TransportError::PeerGone`].
//! - **Batching.** [`Transport::send_deferred`] queues a frame that needs no prompt
//!   delivery (an asynchronous call); queued frames go out together with the next
//!   [`Transport::send`], on [`Transport::flush`], or when 64 KiB have gathered: one write
//!   (and one TLS record) for many small frames.
//! - **No shared staging.** A daemon-side end may own a private staging area
//!   ([`NetTransport::with_staging`]) that requests fill and read over the wire.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::net::sockopt;

use super::sys::{self, Mapping};
use super::{Staging, Transport, TransportError};

/// Largest frame by default: an 8 MiB inline payload plus its request.
pub const DEFAULT_MAX_FRAME: usize = 9 << 20;
/// Deferred frames are written once this many bytes have gathered.
pub const FLUSH_AT: usize = 64 << 10;
const READ_CHUNK: usize = 256 << 10;

/// Keepalives and `TCP_USER_TIMEOUT` such that a peer that stops answering at the TCP
/// level is declared gone within about `bound` (at least 3 s), and Nagle off (frames are
/// batched by us). `send_timeout`, when given, also bounds a write that makes no progress
/// (a peer that stopped reading).
pub fn set_liveness(sock: &TcpStream, bound: Duration, send_timeout: Option<Duration>) -> io::Result<()> {
    let secs = bound.as_secs().max(3);
    // Idle 40% of the bound, then 3 probes 20% apart: the last one fails at the bound.
    let idle = Duration::from_secs((secs * 2 / 5).max(1));
    let interval = Duration::from_secs((secs / 5).max(1));
    sockopt::set_tcp_nodelay(sock, true)?;
    sockopt::set_socket_keepalive(sock, true)?;
    sockopt::set_tcp_keepidle(sock, idle)?;
    sockopt::set_tcp_keepintvl(sock, interval)?;
    sockopt::set_tcp_keepcnt(sock, 3)?;
    // Unacknowledged data (a write into a cut link) gives up after the bound too.
    sockopt::set_tcp_user_timeout(sock, u32::try_from(bound.as_millis()).unwrap_or(u32::MAX))?;
    sock.set_write_timeout(send_timeout)?;
    Ok(())
}

/// Connection errors that mean the link or the peer is gone for good.
fn net_err(e: io::Error) -> TransportError {
    use io::ErrorKind as K;
    match e.kind() {
        K::TimedOut | K::HostUnreachable | K::NetworkUnreachable | K::NetworkDown | K::NotConnected | K::WriteZero => {
            TransportError::PeerGone
        }
        // A write that made no progress within the socket's send timeout: the peer stopped
        // reading (set only where a stalled peer should be dropped).
        K::WouldBlock => TransportError::PeerGone,
        _ => e.into(),
    }
}

pub struct NetTransport {
    sock: TcpStream,
    tls: Option<rustls::Connection>,
    peer: SocketAddr,
    max_frame: usize,
    /// Read buffer: `rbuf[start..end]` holds plaintext read but not yet returned.
    rbuf: Vec<u8>,
    start: usize,
    end: usize,
    eof: bool,
    /// Length-prefixed frames queued by `send_deferred`, not yet written.
    wbuf: Vec<u8>,
    /// TLS ciphertext read from the socket, not yet given to rustls.
    cipher: Cipher,
    closed: bool,
    staging: Option<Staging>,
}

impl NetTransport {
    fn new(sock: TcpStream, tls: Option<rustls::Connection>, max_frame: usize) -> io::Result<Self> {
        let peer = sock.peer_addr()?;
        let cipher = Cipher { buf: if tls.is_some() { vec![0; READ_CHUNK] } else { Vec::new() }, start: 0, end: 0 };
        Ok(Self {
            sock,
            tls,
            peer,
            max_frame,
            rbuf: vec![0; READ_CHUNK],
            start: 0,
            end: 0,
            eof: false,
            wbuf: Vec::new(),
            cipher,
            closed: false,
            staging: None,
        })
    }

    /// Plain TCP: only for loopback, or where the operator accepted an unencrypted link.
    pub fn plain(sock: TcpStream, max_frame: usize) -> io::Result<Self> {
        Self::new(sock, None, max_frame)
    }

    /// TLS over `sock`, the handshake completed before this returns (or within `timeout`,
    /// else `Timeout`). A handshake the peer or we reject (unknown CA, wrong name, no
    /// common version) is [`TransportError::Handshake`] naming rustls's reason.
    pub fn tls(
        sock: TcpStream,
        conn: impl Into<rustls::Connection>,
        max_frame: usize,
        timeout: Duration,
    ) -> Result<Self, TransportError> {
        let mut conn: rustls::Connection = conn.into();
        let deadline = Instant::now() + timeout;
        let mut io = &sock;
        while conn.is_handshaking() {
            while conn.wants_write() {
                conn.write_tls(&mut io).map_err(net_err)?;
            }
            if !conn.is_handshaking() {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !sys::wait_readable(&sock, Some(left))? {
                return Err(TransportError::Timeout);
            }
            match conn.read_tls(&mut io) {
                Ok(0) => {
                    return Err(TransportError::Handshake(
                        "the peer closed the connection during the TLS handshake".into(),
                    ));
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted || e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(net_err(e)),
            }
            if let Err(e) = conn.process_new_packets() {
                // Tell the peer why (the alert rustls queued), then give up.
                let _ = conn.write_tls(&mut io);
                return Err(TransportError::Handshake(e.to_string()));
            }
        }
        while conn.wants_write() {
            conn.write_tls(&mut io).map_err(net_err)?;
        }
        Ok(Self::new(sock, Some(conn), max_frame)?)
    }

    /// Gives this end a private staging area of `len` bytes (the daemon's side of a
    /// network session: requests write and read it by offset).
    pub fn with_staging(mut self, len: usize) -> io::Result<Self> {
        self.staging = Some(Staging::new(Arc::new(Mapping::anonymous(len)?), 0, len));
        Ok(self)
    }

    pub fn socket(&self) -> &TcpStream {
        &self.sock
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Writes `data` (whole frames) to the connection.
    fn write_out(&mut self, data: &[u8]) -> Result<(), TransportError> {
        let mut io = &self.sock;
        match &mut self.tls {
            None => sys::send_all(&self.sock, data).map_err(net_err)?,
            Some(tls) => {
                let mut off = 0;
                while off < data.len() {
                    // rustls encrypts into its own buffer up to a limit; drain it to the
                    // socket whenever it has something.
                    off += tls.writer().write(&data[off..]).map_err(net_err)?;
                    while tls.wants_write() {
                        match tls.write_tls(&mut NoSignal(&mut io)) {
                            Ok(_) => {}
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(net_err(e)),
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn flush_queue(&mut self) -> Result<(), TransportError> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        // A peer that closed its end reads nothing more; TCP would accept the bytes and
        // only report the reset on a later call.
        if sys::hung_up(&self.sock) {
            return Err(TransportError::PeerGone);
        }
        let wbuf = std::mem::take(&mut self.wbuf);
        let r = self.write_out(&wbuf);
        self.wbuf = wbuf;
        self.wbuf.clear();
        r
    }

    fn check_send(&self, len: usize) -> Result<(), TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        if len > self.max_frame {
            return Err(TransportError::FrameTooLarge { len, max: self.max_frame });
        }
        Ok(())
    }

    /// A whole frame at the front of `rbuf`, if one has arrived: (start, len).
    fn buffered_frame(&self) -> Result<Option<(usize, usize)>, TransportError> {
        Ok(super::stream_frame_len(&self.rbuf[self.start..self.end], self.max_frame)?.map(|len| (self.start + 4, len)))
    }

    /// Moves the whole frame at the front of `rbuf`, if one has arrived, into `buf`.
    fn take_buffered(&mut self, buf: &mut Vec<u8>) -> Result<bool, TransportError> {
        let Some((at, len)) = self.buffered_frame()? else { return Ok(false) };
        buf.clear();
        buf.extend_from_slice(&self.rbuf[at..at + len]);
        self.start = at + len;
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        Ok(true)
    }

    /// Makes room for at least READ_CHUNK more bytes (or the rest of a large frame).
    fn make_room(&mut self) {
        if self.start > 0 && self.rbuf.len() - self.end < READ_CHUNK {
            self.rbuf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.rbuf.len() - self.end < READ_CHUNK {
            self.rbuf.resize(self.end + READ_CHUNK, 0);
        }
    }

    /// Adds at least one byte of plaintext to `rbuf` (or notes EOF), waiting at most until
    /// `deadline`. Returns false on timeout.
    fn fill(&mut self, deadline: Option<Instant>) -> Result<bool, TransportError> {
        self.make_room();
        match read_some(&self.sock, &mut self.tls, &mut self.cipher, &mut self.rbuf[self.end..], deadline)? {
            None => Ok(false),
            Some(0) => {
                self.eof = true;
                Ok(true)
            }
            Some(n) => {
                self.end += n;
                Ok(true)
            }
        }
    }

    /// Receives the rest of a frame of `len` bytes whose length prefix is at the front of
    /// `rbuf`, straight into `buf` (no pass through `rbuf`: large frames are copies' bytes).
    /// On timeout the bytes read so far go back into `rbuf`, so the stream stays whole.
    fn recv_large(&mut self, buf: &mut Vec<u8>, len: usize, deadline: Option<Instant>) -> Result<bool, TransportError> {
        let body = self.start + 4;
        let mut got = self.end - body;
        // Reused buffers keep their (initialised) bytes: only growth is zeroed.
        if buf.len() < len {
            buf.resize(len, 0);
        } else {
            buf.truncate(len);
        }
        buf[..got].copy_from_slice(&self.rbuf[body..self.end]);
        (self.start, self.end) = (0, 0);
        while got < len {
            match read_some(&self.sock, &mut self.tls, &mut self.cipher, &mut buf[got..], deadline) {
                Ok(Some(0)) => {
                    self.eof = true;
                    return Err(TransportError::PeerGone);
                }
                Ok(Some(n)) => got += n,
                Ok(None) => {
                    // Put the partial frame back, prefix included.
                    self.rbuf.clear();
                    self.rbuf.extend_from_slice(&(len as u32).to_le_bytes());
                    self.rbuf.extend_from_slice(&buf[..got]);
                    self.end = self.rbuf.len();
                    self.rbuf.resize(self.end.max(READ_CHUNK), 0);
                    buf.clear();
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }
}

/// TLS ciphertext read ahead: `buf[start..end]` arrived from the socket and is not yet in
/// rustls. rustls's `read_tls` reads at most 4 KiB per call, so reading the socket through it
/// costs a system call per 4 KiB of a copy; reading up to [`READ_CHUNK`] at once and handing
/// rustls its 4 KiB from here costs one per 256 KiB.
struct Cipher {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

/// Reads plaintext into `dst` (not empty), waiting at most until `deadline`: `Some(n)` bytes
/// (0 at the end of the stream), `None` on timeout.
fn read_some(
    sock: &TcpStream,
    tls: &mut Option<rustls::Connection>,
    cipher: &mut Cipher,
    dst: &mut [u8],
    deadline: Option<Instant>,
) -> Result<Option<usize>, TransportError> {
    loop {
        if let Some(tls) = tls.as_mut() {
            match tls.reader().read(dst) {
                Ok(n) => return Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The peer's TCP stream ended without a TLS close_notify: it died or was
                // cut off. Either way it is gone.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(Some(0)),
                Err(e) => return Err(net_err(e)),
            }
        }
        let mut io = sock;
        let Some(tls) = tls.as_mut() else {
            let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if !sys::wait_readable(sock, timeout)? {
                return Ok(None);
            }
            match io.read(dst) {
                Ok(n) => return Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted || e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(net_err(e)),
            }
        };
        if cipher.start == cipher.end {
            let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if !sys::wait_readable(sock, timeout)? {
                return Ok(None);
            }
            match io.read(&mut cipher.buf) {
                // The end of the ciphertext: rustls learns it from an empty read, then its
                // reader above hands out what plaintext is left and says how the stream ended.
                Ok(0) => {
                    let _ = tls.read_tls(&mut io::empty());
                }
                Ok(n) => (cipher.start, cipher.end) = (0, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted || e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(net_err(e)),
            }
        }
        if cipher.start < cipher.end {
            let mut ahead = &cipher.buf[cipher.start..cipher.end];
            match tls.read_tls(&mut ahead) {
                Ok(n) => cipher.start += n,
                Err(e) => return Err(net_err(e)),
            }
        }
        if let Err(e) = tls.process_new_packets() {
            let _ = tls.write_tls(&mut NoSignal(&mut io));
            return Err(TransportError::Corrupt(format!("TLS: {e}")));
        }
        // Key updates and alerts rustls wants to answer.
        while tls.wants_write() {
            tls.write_tls(&mut NoSignal(&mut io)).map_err(net_err)?;
        }
    }
}

/// Writes to a socket with MSG_NOSIGNAL, so a dead peer is EPIPE, never SIGPIPE (the
/// interposer lives in programs that do not ignore it).
struct NoSignal<'a, 'b>(&'a mut &'b TcpStream);

impl Write for NoSignal<'_, '_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        sys::send_nosignal(self.0.as_fd(), buf)
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        sys::send_vectored_nosignal(self.0.as_fd(), bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Transport for NetTransport {
    fn send(&mut self, frame: &[u8]) -> Result<(), TransportError> {
        self.send_parts(&[frame], false)
    }

    fn send_deferred(&mut self, frame: &[u8]) -> Result<(), TransportError> {
        self.send_parts(&[frame], true)
    }

    /// Small parts join the write queue (with what was queued before: one write); a large
    /// part goes from the caller's memory to the socket (or TLS) once the queue is out.
    fn send_parts(&mut self, parts: &[&[u8]], defer: bool) -> Result<(), TransportError> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        self.check_send(total)?;
        self.wbuf.extend_from_slice(&(total as u32).to_le_bytes());
        for part in parts {
            if part.len() <= FLUSH_AT {
                self.wbuf.extend_from_slice(part);
            } else {
                self.flush_queue()?;
                self.write_out(part)?;
            }
        }
        if !defer || self.wbuf.len() >= FLUSH_AT { self.flush_queue() } else { Ok(()) }
    }

    fn flush(&mut self) -> Result<(), TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        self.flush_queue()
    }

    fn has_deferred(&self) -> bool {
        !self.wbuf.is_empty()
    }

    /// Only what has already been read (no system call): a batch of frames arrives together.
    fn try_recv_into(&mut self, buf: &mut Vec<u8>) -> Result<bool, TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        self.take_buffered(buf)
    }

    fn recv_into(&mut self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<(), TransportError> {
        self.recv_frame(buf, timeout.map(|t| Instant::now() + t), None).map(|_| ())
    }

    fn recv_split(&mut self, buf: &mut Vec<u8>, head_len: usize, body: &mut [u8]) -> Result<bool, TransportError> {
        self.recv_frame(buf, None, Some((head_len, body)))
    }

    fn max_frame_len(&self) -> usize {
        self.max_frame
    }

    fn staging(&self) -> Option<&Staging> {
        self.staging.as_ref()
    }

    fn close(&mut self) {
        if self.closed {
            return;
        }
        let _ = self.flush_queue();
        self.closed = true;
        if let Some(tls) = &mut self.tls {
            tls.send_close_notify();
            let mut io = &self.sock;
            let _ = tls.write_tls(&mut NoSignal(&mut io));
        }
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
    }
}

impl NetTransport {
    /// [`Transport::recv_into`], and with `split` [`Transport::recv_split`] (never with a
    /// deadline: a split frame cannot be put back).
    fn recv_frame(
        &mut self,
        buf: &mut Vec<u8>,
        deadline: Option<Instant>,
        split: Option<(usize, &mut [u8])>,
    ) -> Result<bool, TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        // A reply may depend on what is still queued here.
        self.flush_queue()?;
        loop {
            if self.take_buffered(buf)? {
                return Ok(false);
            }
            if self.eof {
                return Err(TransportError::PeerGone);
            }
            if let Some((_, len)) = self.partial_len()
                && len > READ_CHUNK
            {
                if let Some((head_len, body)) = split
                    && deadline.is_none()
                    && head_len.checked_add(body.len()) == Some(len)
                {
                    self.recv_large_split(buf, head_len, body)?;
                    return Ok(true);
                }
                return if self.recv_large(buf, len, deadline)? { Ok(false) } else { Err(TransportError::Timeout) };
            }
            if !self.fill(deadline)? {
                return Err(TransportError::Timeout);
            }
        }
    }

    /// [`Self::recv_large`] of a frame of `head_len + body.len()` bytes, its head into `head`
    /// and the rest into `body`, waiting as long as it takes.
    fn recv_large_split(&mut self, head: &mut Vec<u8>, head_len: usize, body: &mut [u8]) -> Result<(), TransportError> {
        let at = self.start + 4;
        let have = self.end - at;
        let in_head = have.min(head_len);
        head.clear();
        head.extend_from_slice(&self.rbuf[at..at + in_head]);
        head.resize(head_len, 0);
        // Less than the whole frame is buffered (it is larger than the buffer's chunk).
        let in_body = have - in_head;
        body[..in_body].copy_from_slice(&self.rbuf[at + in_head..self.end]);
        (self.start, self.end) = (0, 0);
        self.read_exactly(&mut head[in_head..])?;
        self.read_exactly(&mut body[in_body..])
    }

    /// Reads exactly `dst.len()` bytes of plaintext into `dst`, waiting as long as it takes.
    fn read_exactly(&mut self, dst: &mut [u8]) -> Result<(), TransportError> {
        let mut got = 0;
        while got < dst.len() {
            match read_some(&self.sock, &mut self.tls, &mut self.cipher, &mut dst[got..], None)? {
                Some(0) => {
                    self.eof = true;
                    return Err(TransportError::PeerGone);
                }
                Some(n) => got += n,
                None => return Err(TransportError::Corrupt("a read without a deadline timed out".into())),
            }
        }
        Ok(())
    }

    /// The announced length of a frame whose header has arrived but whose body has not.
    fn partial_len(&self) -> Option<(usize, usize)> {
        let have = &self.rbuf[self.start..self.end];
        (have.len() >= 4).then(|| (self.start, u32::from_le_bytes(have[..4].try_into().expect("4 bytes")) as usize))
    }
}

impl Drop for NetTransport {
    fn drop(&mut self) {
        self.close();
    }
}

/// TLS configuration from PEM files.
pub mod tls {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use std::path::Path;
    use std::sync::Arc;

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
        let certs: Vec<_> = CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("reading certificates from {}: {e}", path.display()))?
            .collect::<Result<_, _>>()
            .map_err(|e| format!("parsing certificates in {}: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!("{} holds no PEM certificate", path.display()));
        }
        Ok(certs)
    }

    /// The daemon's side: its certificate chain and private key.
    pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
        let chain = certs(cert)?;
        let key =
            PrivateKeyDer::from_pem_file(key).map_err(|e| format!("reading the private key {}: {e}", key.display()))?;
        let cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| format!("certificate {} and its key do not form a usable pair: {e}", cert.display()))?;
        Ok(Arc::new(cfg))
    }

    /// A client's side: the CA certificates it trusts (PEM, one or more).
    pub fn client_config(ca: &Path) -> Result<Arc<rustls::ClientConfig>, String> {
        let mut roots = rustls::RootCertStore::empty();
        for c in certs(ca)? {
            roots.add(c).map_err(|e| format!("CA certificate in {}: {e}", ca.display()))?;
        }
        let cfg = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Arc::new(cfg))
    }
}
