//! Unix-socket transport: frames on a `SOCK_STREAM` socket, each preceded by its length
//! (u32, little-endian). The simple baseline next to shared memory, and the fallback for
//! peers that cannot share memory.

use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::sys;
use super::{Transport, TransportError};

/// Largest frame by default (the shm ring's default capacity is 1 MiB; bulk data goes
/// through staging or chunked copies, not giant frames).
pub const DEFAULT_MAX_FRAME: usize = 16 << 20;
const READ_CHUNK: usize = 64 << 10;

/// Where this host's daemon listens unless told otherwise, for a process of effective uid
/// `euid` whose `XDG_RUNTIME_DIR` is `runtime_dir`: `/run/gpupool/gpupool.sock` for root,
/// else `$XDG_RUNTIME_DIR/gpupool.sock`, else `/tmp/gpupool-<uid>/gpupool.sock`. The
/// daemon listens there and the interposer connects there, so neither names the other.
pub fn default_socket_path_for(euid: u32, runtime_dir: Option<&OsStr>) -> PathBuf {
    if euid == 0 {
        return PathBuf::from("/run/gpupool/gpupool.sock");
    }
    match runtime_dir {
        Some(d) if !d.is_empty() => PathBuf::from(d).join("gpupool.sock"),
        _ => PathBuf::from(format!("/tmp/gpupool-{euid}/gpupool.sock")),
    }
}

/// [`default_socket_path_for`] this process.
pub fn default_socket_path() -> PathBuf {
    default_socket_path_for(rustix::process::geteuid().as_raw(), std::env::var_os("XDG_RUNTIME_DIR").as_deref())
}

pub struct UnixTransport {
    socket: UnixStream,
    max_frame: usize,
    /// Read buffer: `rbuf[start..end]` holds bytes read but not yet returned.
    rbuf: Vec<u8>,
    start: usize,
    end: usize,
    wbuf: Vec<u8>,
    closed: bool,
    eof: bool,
}

impl UnixTransport {
    /// Wraps a connected stream socket. Frames longer than `max_frame` are refused when
    /// sent, and a peer announcing one is `Corrupt`.
    pub fn new(socket: UnixStream, max_frame: usize) -> Self {
        Self {
            socket,
            max_frame,
            rbuf: vec![0; READ_CHUNK],
            start: 0,
            end: 0,
            wbuf: Vec::new(),
            closed: false,
            eof: false,
        }
    }

    /// A connected pair in this process.
    pub fn pair(max_frame: usize) -> io::Result<(Self, Self)> {
        let (a, b) = UnixStream::pair()?;
        Ok((Self::new(a, max_frame), Self::new(b, max_frame)))
    }

    pub fn socket(&self) -> &UnixStream {
        &self.socket
    }

    fn write_all(&self, buf: &[u8]) -> Result<(), TransportError> {
        sys::send_all(&self.socket, buf).map_err(|e| match e.kind() {
            io::ErrorKind::WriteZero => TransportError::PeerGone,
            _ => e.into(),
        })
    }

    /// A whole frame at the front of `rbuf`, if one has arrived: (start, len).
    fn buffered_frame(&self) -> Result<Option<(usize, usize)>, TransportError> {
        Ok(super::stream_frame_len(&self.rbuf[self.start..self.end], self.max_frame)?.map(|len| (self.start + 4, len)))
    }

    /// Reads what the socket has (at least one byte, or EOF), blocking at most until
    /// `deadline`. Returns false on timeout.
    fn fill(&mut self, deadline: Option<Instant>) -> Result<bool, TransportError> {
        let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if !sys::wait_readable(&self.socket, timeout)? {
            return Ok(false);
        }
        if self.rbuf.len() - self.end < READ_CHUNK && self.start > 0 {
            self.rbuf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.rbuf.len() - self.end < READ_CHUNK {
            self.rbuf.resize(self.end + READ_CHUNK, 0);
        }
        match (&self.socket).read(&mut self.rbuf[self.end..]) {
            Ok(0) => self.eof = true,
            Ok(n) => self.end += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted || e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
        Ok(true)
    }
}

impl Transport for UnixTransport {
    fn send(&mut self, frame: &[u8]) -> Result<(), TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        if frame.len() > self.max_frame {
            return Err(TransportError::FrameTooLarge { len: frame.len(), max: self.max_frame });
        }
        let len = (frame.len() as u32).to_le_bytes();
        if frame.len() <= 4096 {
            // One syscall for small frames.
            let mut wbuf = std::mem::take(&mut self.wbuf);
            wbuf.clear();
            wbuf.extend_from_slice(&len);
            wbuf.extend_from_slice(frame);
            let r = self.write_all(&wbuf);
            self.wbuf = wbuf;
            r
        } else {
            self.write_all(&len)?;
            self.write_all(frame)
        }
    }

    fn recv_into(&mut self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<(), TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some((at, len)) = self.buffered_frame()? {
                buf.clear();
                buf.extend_from_slice(&self.rbuf[at..at + len]);
                self.start = at + len;
                if self.start == self.end {
                    (self.start, self.end) = (0, 0);
                }
                return Ok(());
            }
            if self.eof {
                return Err(TransportError::PeerGone);
            }
            if !self.fill(deadline)? {
                return Err(TransportError::Timeout);
            }
        }
    }

    fn max_frame_len(&self) -> usize {
        self.max_frame
    }

    fn close(&mut self) {
        if !self.closed {
            self.closed = true;
            let _ = self.socket.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for UnixTransport {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::default_socket_path_for as path;
    use std::ffi::OsStr;
    use std::path::Path;

    #[test]
    fn default_socket_path_by_user_and_runtime_dir() {
        let xdg = Some(OsStr::new("/run/user/1000"));
        assert_eq!(path(0, xdg), Path::new("/run/gpupool/gpupool.sock"));
        assert_eq!(path(1000, xdg), Path::new("/run/user/1000/gpupool.sock"));
        assert_eq!(path(1000, None), Path::new("/tmp/gpupool-1000/gpupool.sock"));
        assert_eq!(path(1000, Some(OsStr::new(""))), Path::new("/tmp/gpupool-1000/gpupool.sock"));
    }
}
