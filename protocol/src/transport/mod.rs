//! Transports: move opaque frames (`&[u8]` in, `Vec<u8>` out) between one client and the
//! daemon, in order, with back-pressure, and report a vanished peer as
//! [`TransportError::PeerGone`] instead of hanging.
//!
//! Layers (iceoryx2 style): [`sys`] wraps the raw OS calls (mmap, memfd, futex, poll,
//! SCM_RIGHTS); [`shm`] builds rings and a segment header on them; the [`Transport`]
//! trait is the concept, with three implementations:
//!
//! - [`shm::ShmTransport`]: per-client memfd segment with a request ring, a response
//!   ring and a staging area; waits spin, then sleep on a futex (DESIGN.md §5).
//! - [`unix::UnixTransport`]: length-prefixed frames on a `SOCK_STREAM` unix socket, the
//!   simple baseline.
//! - [`net::NetTransport`]: length-prefixed frames on TCP, in TLS unless plain `tcp://`
//!   was chosen; kernel keepalives bound how long a dead link goes unnoticed.
//! - [`loopback::LoopbackTransport`]: in-process channels, for tests of higher layers.
//!
//! [`endpoint`] says where a daemon is (`GPUPOOL_ENDPOINT`) and dials a network one.
//!
//! One conformance suite (`protocol/tests/transport_conformance.rs`) runs against all three.
//!
//! This is the one module of the crate allowed `unsafe` (mappings, futexes, ring copies);
//! every use carries a `// SAFETY:` comment.
#![allow(unsafe_code)]

pub mod endpoint;
pub mod loopback;
pub mod net;
pub mod shm;
mod sys;
pub mod unix;

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

pub use sys::Mapping;
pub use sys::hung_up;

/// Why a transport operation failed.
#[derive(Debug)]
pub enum TransportError {
    /// The peer closed its end, or its process died (hung-up socket). Frames it sent
    /// before that were delivered first.
    PeerGone,
    /// `recv` saw no frame within its timeout. The transport stays usable.
    Timeout,
    /// `send` of a frame longer than [`Transport::max_frame_len`]. Nothing was sent.
    FrameTooLarge { len: usize, max: usize },
    /// This end was closed with [`Transport::close`].
    Closed,
    /// A shared-memory segment failed validation on attach (bad magic, version, sizes,
    /// offsets, seals). Nothing was read beyond the header.
    BadSegment(String),
    /// The peer broke the protocol at run time (ring indices or a frame length that
    /// cannot be right). The transport must be dropped.
    Corrupt(String),
    /// The TLS handshake failed: the peer's certificate is not trusted or not for the
    /// name dialled, no protocol version in common, or the peer refused ours.
    Handshake(String),
    /// An operating-system error.
    Io(io::Error),
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PeerGone => write!(f, "peer gone (closed or died)"),
            Self::Timeout => write!(f, "timed out waiting for a frame"),
            Self::FrameTooLarge { len, max } => {
                write!(f, "frame of {len} bytes exceeds the transport maximum of {max}")
            }
            Self::Closed => write!(f, "transport closed locally"),
            Self::BadSegment(why) => write!(f, "bad shared-memory segment: {why}"),
            Self::Corrupt(why) => write!(f, "peer broke the transport protocol: {why}"),
            Self::Handshake(why) => write!(f, "TLS handshake failed: {why}"),
            Self::Io(e) => write!(f, "transport I/O error: {e}"),
        }
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for TransportError {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::UnexpectedEof => Self::PeerGone,
            _ => Self::Io(e),
        }
    }
}

impl From<rustix::io::Errno> for TransportError {
    fn from(e: rustix::io::Errno) -> Self {
        io::Error::from(e).into()
    }
}

/// The frame at the front of `buf` in the stream transports' framing (a u32 LE length,
/// then that many bytes): `Ok(Some(len))` when all of it has arrived, `Ok(None)` when more
/// is needed, `Corrupt` when the announced length exceeds `max`.
pub(crate) fn stream_frame_len(buf: &[u8], max: usize) -> Result<Option<usize>, TransportError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
    if len > max {
        return Err(TransportError::Corrupt(format!("peer sent a {len}-byte frame (max {max})")));
    }
    Ok((buf.len() >= 4 + len).then_some(len))
}

/// One end of a client<->daemon connection.
///
/// Frames are delivered whole and in order. `send` blocks while the peer's queue is full
/// (back-pressure) and fails with `PeerGone` once the peer is gone; `recv` delivers
/// frames the peer sent before going away, then `PeerGone`.
pub trait Transport: Send {
    /// Sends one frame (0..=[`Self::max_frame_len`] bytes).
    fn send(&mut self, frame: &[u8]) -> Result<(), TransportError>;

    /// Receives the next frame into `buf` (cleared first). `timeout`: `None` waits until a
    /// frame arrives or the peer is gone; `Some(Duration::ZERO)` only polls.
    fn recv_into(&mut self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<(), TransportError>;

    /// The next frame into `buf` if one is already there (true), without waiting; nothing yet
    /// (false). For a server that looks ahead for work the client queued back to back, or one
    /// thread serving many connections in turn.
    fn try_recv_into(&mut self, buf: &mut Vec<u8>) -> Result<bool, TransportError> {
        match self.recv_into(buf, Some(Duration::ZERO)) {
            Ok(()) => Ok(true),
            Err(TransportError::Timeout) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Receives the next frame as [`Self::recv_into`] with no timeout, except that a frame of
    /// exactly `head_len + body.len()` bytes may come split (true): its first `head_len` bytes
    /// in `buf`, the rest straight in `body`, never passing through a buffer of ours (a large
    /// copy's bytes over a stream, read where the caller wants them). False: the whole frame
    /// is in `buf` (the default never splits).
    fn recv_split(&mut self, buf: &mut Vec<u8>, head_len: usize, body: &mut [u8]) -> Result<bool, TransportError> {
        let _ = (head_len, body);
        self.recv_into(buf, None).map(|()| false)
    }

    /// [`Self::recv_into`] into a new vector.
    fn recv(&mut self, timeout: Option<Duration>) -> Result<Vec<u8>, TransportError> {
        let mut buf = Vec::new();
        self.recv_into(&mut buf, timeout)?;
        Ok(buf)
    }

    /// Queues a frame that needs no prompt delivery (an asynchronous request). It goes
    /// out, in order, no later than the next `send`, `recv` or `flush`. Transports
    /// without a write queue send it at once.
    fn send_deferred(&mut self, frame: &[u8]) -> Result<(), TransportError> {
        self.send(frame)
    }

    /// Sends one frame made of `parts` in order (typically a small head and a large body
    /// the caller owns, [`crate::bulk`]): the same bytes as sending their concatenation,
    /// deferred when `defer` (as [`Self::send_deferred`]). Stream transports write a large
    /// part straight from the caller's memory; the default joins the parts first.
    fn send_parts(&mut self, parts: &[&[u8]], defer: bool) -> Result<(), TransportError> {
        let frame = parts.concat();
        if defer { self.send_deferred(&frame) } else { self.send(&frame) }
    }

    /// Writes out every queued frame.
    fn flush(&mut self) -> Result<(), TransportError> {
        Ok(())
    }

    /// Whether frames are queued and not yet written.
    fn has_deferred(&self) -> bool {
        false
    }

    /// The largest frame `send` accepts.
    fn max_frame_len(&self) -> usize;

    /// The bulk area both ends see, where the transport has one.
    fn staging(&self) -> Option<&Staging> {
        None
    }

    /// Closes this end: the peer's pending and later operations end with `PeerGone`,
    /// ours with `Closed`. Idempotent; dropping an end closes it.
    fn close(&mut self);
}

impl<T: Transport + ?Sized> Transport for Box<T> {
    fn send(&mut self, frame: &[u8]) -> Result<(), TransportError> {
        (**self).send(frame)
    }
    fn recv_into(&mut self, buf: &mut Vec<u8>, t: Option<Duration>) -> Result<(), TransportError> {
        (**self).recv_into(buf, t)
    }
    fn try_recv_into(&mut self, buf: &mut Vec<u8>) -> Result<bool, TransportError> {
        (**self).try_recv_into(buf)
    }
    fn send_deferred(&mut self, frame: &[u8]) -> Result<(), TransportError> {
        (**self).send_deferred(frame)
    }
    fn send_parts(&mut self, parts: &[&[u8]], defer: bool) -> Result<(), TransportError> {
        (**self).send_parts(parts, defer)
    }
    fn flush(&mut self) -> Result<(), TransportError> {
        (**self).flush()
    }
    fn has_deferred(&self) -> bool {
        (**self).has_deferred()
    }
    fn max_frame_len(&self) -> usize {
        (**self).max_frame_len()
    }
    fn staging(&self) -> Option<&Staging> {
        (**self).staging()
    }
    fn close(&mut self) {
        (**self).close()
    }
}

/// A bulk area shared by both ends (the shm segment's staging area, or plain memory for
/// the loopback). Access goes through copies on raw pointers, never through Rust
/// references into memory the peer may write concurrently: a misbehaving peer can make
/// us read garbage bytes, never undefined behaviour. Which end owns which range when is
/// the caller's protocol (e.g. "the request names offset and length; the area is the
/// daemon's until it replies").
pub struct Staging {
    map: Arc<Mapping>,
    offset: usize,
    len: usize,
}

impl Staging {
    /// `len` bytes at `offset` of `map`; the caller checked that they lie inside it.
    pub(crate) fn new(map: Arc<Mapping>, offset: usize, len: usize) -> Self {
        assert!(offset.checked_add(len).is_some_and(|end| end <= map.len()));
        Self { map, offset, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: usize, n: usize) -> Result<(), TransportError> {
        match offset.checked_add(n) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(TransportError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("staging range {offset}+{n} outside {} bytes", self.len),
            ))),
        }
    }

    /// Copies `src` into the area at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), TransportError> {
        self.check(offset, src.len())?;
        // SAFETY: the range was bounds-checked against the area, which lies inside the
        // mapping (checked in `new`) that `self.map` keeps mapped; `src` is a live slice
        // of our own memory and cannot overlap the shared mapping we created.
        unsafe {
            let dst = self.map.as_ptr().add(self.offset + offset);
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len());
        }
        Ok(())
    }

    /// Copies `dst.len()` bytes from the area at `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), TransportError> {
        self.check(offset, dst.len())?;
        // SAFETY: as in `write`: an in-bounds range of a live mapping, copied into a
        // distinct `&mut` slice of our own memory.
        unsafe {
            let src = self.map.as_ptr().add(self.offset + offset);
            std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len());
        }
        Ok(())
    }

    /// The area's first byte, for zero-copy use (e.g. a host-to-device copy straight
    /// from staging). Valid while `self` lives; the peer may write it concurrently.
    pub fn as_ptr(&self) -> *mut u8 {
        // SAFETY: `offset` is inside the mapping (checked in `new`).
        unsafe { self.map.as_ptr().add(self.offset) }
    }
}

impl fmt::Debug for Staging {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Staging").field("len", &self.len).finish()
    }
}
