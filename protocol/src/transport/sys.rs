//! The raw OS layer: mappings, memfd, futex, poll and fd passing. Everything above this
//! module is safe code over these few wrappers (plus the ring's pointer copies).

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};
use rustix::thread::futex;

/// A read-write mapping, unmapped on drop: a shared mapping of a memfd, or anonymous
/// private memory.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is an address range owned by this value; it holds no thread-bound
// state, and all access to its bytes goes through raw-pointer copies or atomics.
unsafe impl Send for Mapping {}
// SAFETY: as above; shared `&Mapping` only hands out the base pointer.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps all `len` bytes of `fd` shared, read-write.
    pub(crate) fn shared(fd: impl AsFd, len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: a fresh mapping at an address the kernel picks (null hint, no FIXED),
        // so it cannot alias any existing Rust object.
        let p = unsafe {
            rustix::mm::mmap(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, fd, 0)?
        };
        Ok(Self { ptr: NonNull::new(p.cast()).expect("mmap returned null"), len })
    }

    /// Anonymous private read-write memory (zeroed), e.g. the loopback's staging area.
    pub(crate) fn anonymous(len: usize) -> io::Result<Self> {
        let len = len.max(1);
        // SAFETY: a fresh anonymous mapping at a kernel-chosen address; aliases nothing.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )?
        };
        Ok(Self { ptr: NonNull::new(p.cast()).expect("mmap returned null"), len })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned, and this is the only unmap;
        // every user of the range holds an Arc<Mapping>, so none outlives it.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A memfd of `len` bytes, sealed against shrinking, growing and further sealing, so
/// that a peer mapping it can never take a SIGBUS from a truncation.
pub(crate) fn sealed_memfd(name: &str, len: u64) -> io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    rustix::fs::ftruncate(&fd, len)?;
    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
    Ok(fd)
}

/// Size and seals of a segment fd received from a peer.
pub(crate) fn segment_facts(fd: impl AsFd) -> io::Result<(u64, bool)> {
    let st = rustix::fs::fstat(&fd)?;
    let seals = rustix::fs::fcntl_get_seals(&fd)?;
    Ok((st.st_size as u64, seals.contains(SealFlags::SHRINK)))
}

/// Sends one byte `tag` with `fd` attached (SCM_RIGHTS).
pub(crate) fn send_fd(sock: &UnixStream, fd: impl AsFd, tag: u8) -> io::Result<()> {
    let fds = [fd.as_fd()];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
    let byte = [tag];
    let n = rustix::net::sendmsg(sock, &[IoSlice::new(&byte)], &mut control, SendFlags::NOSIGNAL)?;
    if n != 1 {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "fd message not sent"));
    }
    Ok(())
}

/// Receives the byte and fd sent by [`send_fd`]. Blocks (subject to the socket's read
/// timeout). `Ok(None)` fd means a message without one.
pub(crate) fn recv_fd(sock: &UnixStream) -> io::Result<(u8, Option<OwnedFd>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8];
    let msg = rustix::net::recvmsg(sock, &mut [IoSliceMut::new(&mut byte)], &mut control, RecvFlags::CMSG_CLOEXEC)?;
    if msg.bytes == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let mut fd = None;
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(mut fds) = m {
            // Keep the first; any extra fds are dropped (closed) with the iterator.
            if fd.is_none() {
                fd = fds.next();
            }
        }
    }
    Ok((byte[0], fd))
}

fn timespec(d: Duration) -> Timespec {
    Timespec { tv_sec: d.as_secs() as _, tv_nsec: d.subsec_nanos() as _ }
}

/// FUTEX_WAIT (shared, not private: the word may live in memory another process maps)
/// while `*word == expected`, for at most `timeout`. Spurious returns are fine: callers
/// re-check their condition.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = timespec(timeout);
    let _ = futex::wait(word, futex::Flags::empty(), expected, Some(&ts));
}

/// FUTEX_WAKE one waiter on `word`.
pub(crate) fn futex_wake(word: &AtomicU32) {
    let _ = futex::wake(word, futex::Flags::empty(), 1);
}

/// Whether the peer of a connected stream socket (unix or TCP) hung up (closed its end,
/// died, or the link was declared dead). Never blocks. Data still queued on the socket
/// does not count as a hang-up.
pub fn hung_up(sock: impl AsFd) -> bool {
    let mut fds = [PollFd::new(&sock, PollFlags::RDHUP)];
    match rustix::event::poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })) {
        Ok(0) => false,
        Ok(_) => fds[0].revents().intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL),
        Err(_) => false,
    }
}

/// Waits until `sock` is readable or hung up, for at most `timeout` (`None`: forever).
/// Returns whether it became ready.
pub(crate) fn wait_readable(sock: impl AsFd, timeout: Option<Duration>) -> io::Result<bool> {
    let ts = timeout.map(timespec);
    let mut fds = [PollFd::new(&sock, PollFlags::IN | PollFlags::RDHUP)];
    loop {
        match rustix::event::poll(&mut fds, ts.as_ref()) {
            Ok(n) => return Ok(n > 0),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// All of `buf` with [`send_nosignal`]; a peer that accepts nothing more is `WriteZero`.
pub(crate) fn send_all(sock: impl AsFd, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match send_nosignal(&sock, buf)? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => buf = &buf[n..],
        }
    }
    Ok(())
}

/// `sendmsg(2)` of several buffers with MSG_NOSIGNAL: rustls hands its queued TLS records
/// (16 KiB each) as one list, and one call for up to 64 of them, instead of one `send` per
/// record, is most of what a TLS copy lost to rustls on its own (`TcpStream`'s `writev`).
pub(crate) fn send_vectored_nosignal(sock: impl AsFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    loop {
        let mut control = SendAncillaryBuffer::default();
        match rustix::net::sendmsg(&sock, bufs, &mut control, SendFlags::NOSIGNAL) {
            Err(rustix::io::Errno::INTR) => continue,
            r => return r.map_err(Into::into),
        }
    }
}

/// `send(2)` with MSG_NOSIGNAL: a dead peer gives EPIPE, never SIGPIPE (the interposer
/// lives in C programs that do not ignore SIGPIPE).
pub(crate) fn send_nosignal(sock: impl AsFd, buf: &[u8]) -> io::Result<usize> {
    loop {
        match rustix::net::send(&sock, buf, SendFlags::NOSIGNAL) {
            Err(rustix::io::Errno::INTR) => continue,
            r => return r.map_err(Into::into),
        }
    }
}

/// The CPU the calling thread runs on (the vDSO's getcpu: no system call).
pub(crate) fn current_cpu() -> u32 {
    rustix::thread::sched_getcpu() as u32
}

/// Moves the calling thread to another core it may run on, leaving its CPU affinity as it was:
/// narrowing the affinity to exclude the current core migrates the thread at once, and widening
/// it again does not move it back. Nothing happens if the thread may run on one core only or an
/// affinity call fails. (Should someone else change this thread's affinity between the two
/// calls, the second one undoes that; only a session thread of the daemon does this.)
pub(crate) fn leave_this_core() {
    use rustix::thread::{sched_getaffinity, sched_setaffinity};
    let Ok(allowed) = sched_getaffinity(None) else { return };
    let here = current_cpu() as usize;
    if allowed.count() < 2 || !allowed.is_set(here) {
        return;
    }
    let mut elsewhere = allowed;
    elsewhere.unset(here);
    if sched_setaffinity(None, &elsewhere).is_ok() {
        let _ = sched_setaffinity(None, &allowed);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn leaving_this_core_moves_the_thread_and_keeps_its_affinity() {
        use rustix::thread::sched_getaffinity;
        std::thread::spawn(|| {
            let before = sched_getaffinity(None).unwrap();
            let here = super::current_cpu() as usize;
            super::leave_this_core();
            assert_eq!(sched_getaffinity(None).unwrap(), before, "the affinity is as it was");
            if before.count() >= 2 {
                assert_ne!(super::current_cpu() as usize, here, "moved off CPU {here}");
            }
        })
        .join()
        .unwrap();
    }
}
