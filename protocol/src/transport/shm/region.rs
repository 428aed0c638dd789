//! Client host-memory regions: page-locked host memory a client allocates in a sealed
//! memfd and shares with the daemon, so copies from and into it need no staging pass.
//!
//! The client creates the region ([`create_host_region`]), sends its fd on the
//! transport's unix socket ([`send_host_region`]) just before the `HostRegionMap` frame,
//! and the daemon, handling that frame, receives it with a bounded wait
//! ([`recv_host_region`]) and maps it ([`map_host_region`]).

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::super::sys::{self, Mapping};

/// The one byte that travels with a region's fd.
pub const HOST_REGION_FD_TAG: u8 = b'R';

/// A sealed memfd of `len` bytes (rounded up to whole pages) and this process's shared
/// mapping of it (zeroed).
pub fn create_host_region(len: usize) -> io::Result<(OwnedFd, Mapping)> {
    let len = len.max(1).div_ceil(4096) * 4096;
    let fd = sys::sealed_memfd("gpupool-pinned", len as u64)?;
    let map = Mapping::shared(&fd, len)?;
    Ok((fd, map))
}

/// Sends a region's fd (SCM_RIGHTS) on the transport's socket.
pub fn send_host_region(sock: &UnixStream, fd: &OwnedFd) -> io::Result<()> {
    sys::send_fd(sock, fd, HOST_REGION_FD_TAG)
}

/// Receives a region's fd, waiting at most `timeout` for it.
pub fn recv_host_region(sock: &UnixStream, timeout: Duration) -> Result<OwnedFd, String> {
    if !sys::wait_readable(sock, Some(timeout)).map_err(|e| e.to_string())? {
        return Err("no region fd arrived in time".into());
    }
    sock.set_nonblocking(true).map_err(|e| e.to_string())?;
    let got = sys::recv_fd(sock);
    sock.set_nonblocking(false).map_err(|e| e.to_string())?;
    match got.map_err(|e| format!("receiving a region fd: {e}"))? {
        (HOST_REGION_FD_TAG, Some(fd)) => Ok(fd),
        (tag, Some(_)) => Err(format!("region fd with tag {tag:#04x}")),
        (_, None) => Err("region message without an fd".into()),
    }
}

/// Maps a received region fd shared, read-write, after checking it is a sealed memfd of
/// at least `len` bytes (so it can never shrink under the mapping and raise SIGBUS).
pub fn map_host_region(fd: &OwnedFd, len: u64) -> Result<Mapping, String> {
    let (size, sealed) = sys::segment_facts(fd).map_err(|e| format!("region fd: {e}"))?;
    if !sealed {
        return Err("region fd is not sealed against shrinking".into());
    }
    if len == 0 || size < len {
        return Err(format!("region fd has {size} bytes, {len} announced"));
    }
    Mapping::shared(fd, len as usize).map_err(|e| format!("mapping a region: {e}"))
}
