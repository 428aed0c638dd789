//! Shared-memory transport: one memfd segment per client, holding a request ring, a
//! response ring and a staging area (layout in [`layout`]).
//!
//! The **daemon creates** the segment ([`ShmTransport::serve`]): it decides the sizes
//! (its memory, its policy), seals the memfd against shrinking and growing, and passes
//! the fd to the client over the already connected unix socket with SCM_RIGHTS. The
//! client ([`ShmTransport::connect`]) checks the seals, the size and every header field
//! before it touches anything else. The socket stays open next to the segment: its
//! hang-up is how either side learns that the other died.
//!
//! Waiting ([`WaitPolicy`]): spin on the ring index (no syscall), yield the CPU for a while
//! (a peer waiting for this core gets it), then
//! announce "I sleep" in the ring's waiter flag and FUTEX_WAIT on its sequence word in
//! slices of `slice`; the other side issues FUTEX_WAKE only when that flag is set. Between
//! slices the sleeper polls the socket for POLLHUP/POLLRDHUP, so a SIGKILLed peer is
//! noticed within one slice (20 ms by default); a peer that closes cleanly sets its
//! `closed` flag and wakes us at once.

pub mod layout;
mod region;
mod ring;
pub use region::{HOST_REGION_FD_TAG, create_host_region, map_host_region, recv_host_region, send_host_region};

use std::mem::{offset_of, size_of};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use layout::{CLIENT, REQUEST, RESPONSE, SERVER, SegmentHeader, SegmentLayout};
use ring::RingEnd;
pub use ring::WaitPolicy;

use super::sys::{self, Mapping};
use super::{Staging, Transport, TransportError};

/// The byte that travels with the segment fd.
const HANDSHAKE_TAG: u8 = b'G';
/// How long `connect` waits for the daemon's segment.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Sizes of a new segment (daemon side) and how this end waits.
#[derive(Clone, Copy, Debug)]
pub struct ShmConfig {
    /// Bytes of each ring; a power of two, 64 B ..= 1 GiB. The largest frame is 4 less.
    pub ring_capacity: usize,
    /// Bytes of the staging area (memfd pages are only allocated when touched).
    pub staging_size: usize,
    pub wait: WaitPolicy,
}

impl Default for ShmConfig {
    fn default() -> Self {
        Self { ring_capacity: 1 << 20, staging_size: 8 << 20, wait: WaitPolicy::default() }
    }
}

impl Default for WaitPolicy {
    /// Spin 100 times (about 4 us on this machine class, where a `pause` costs ~37 ns;
    /// `gpupool-bench transport` prints the measured budget), yield for 50 us, then 20 ms
    /// futex slices. No adapting: the spin that grew up to 2000 (~75 us) whenever the peer
    /// answered soon after a sleep kept waiting threads on the cores their peers needed when
    /// clients outnumber cores, and two clients on two cores sometimes fell into ~110 us round
    /// trips (benches/README.md, "Issue 24", the wait policy).
    fn default() -> Self {
        Self {
            spin: 100,
            spin_max: 100,
            adapt_window: Duration::from_micros(100),
            yield_for: Duration::from_micros(50),
            slice: Duration::from_millis(20),
            leave_shared_core: false,
        }
    }
}

impl WaitPolicy {
    /// The daemon's session threads' policy: the default, and a session thread woken onto its
    /// client's core leaves it ([`WaitPolicy::leave_shared_core`]).
    pub fn session() -> Self {
        Self { leave_shared_core: true, ..Self::default() }
    }
}

/// Creates a sealed memfd segment with an initialised header. Exposed for tests and for
/// daemons that hand segments out themselves; [`ShmTransport::serve`] is the usual way.
pub fn create_segment(config: &ShmConfig) -> Result<OwnedFd, TransportError> {
    let layout = SegmentLayout::new(config.ring_capacity as u64, config.staging_size as u64);
    layout.validate(layout.segment_size).map_err(TransportError::BadSegment)?;
    let fd = sys::sealed_memfd("gpupool-shm", layout.segment_size)?;
    let map = Mapping::shared(&fd, layout.segment_size as usize)?;
    // SAFETY: the mapping is at least segment_size >= 128 bytes and page aligned, so
    // offset 0 is valid and aligned for SegmentLayout (ShmSafe-style plain data). The
    // memfd is fresh (zeroed) and nobody else has it yet.
    unsafe { std::ptr::write_volatile(map.as_ptr().cast::<SegmentLayout>(), layout) };
    Ok(fd)
}

/// One end of a shared-memory connection.
pub struct ShmTransport {
    map: Arc<Mapping>,
    socket: UnixStream,
    layout: SegmentLayout,
    tx: RingEnd,
    rx: RingEnd,
    staging: Staging,
    /// CLIENT or SERVER: which `closed` flag is ours.
    me: usize,
    policy: WaitPolicy,
    /// How sending (ring full) and receiving (ring empty) have been waiting.
    send_wait: ring::WaitState,
    recv_wait: ring::WaitState,
    closed: bool,
}

impl ShmTransport {
    /// Daemon side: creates the client's segment, sends it over `socket` (a connected
    /// unix stream), and serves it.
    pub fn serve(socket: UnixStream, config: &ShmConfig) -> Result<Self, TransportError> {
        let fd = create_segment(config)?;
        sys::send_fd(&socket, &fd, HANDSHAKE_TAG)?;
        Self::attach(fd, socket, SERVER, config.wait)
    }

    /// Client side: receives the segment the daemon sends on `socket` and attaches.
    pub fn connect(socket: UnixStream, wait: WaitPolicy) -> Result<Self, TransportError> {
        socket.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
        let (tag, fd) = sys::recv_fd(&socket)?;
        socket.set_read_timeout(None)?;
        let fd = fd.ok_or_else(|| TransportError::BadSegment("handshake carried no fd".into()))?;
        if tag != HANDSHAKE_TAG {
            return Err(TransportError::BadSegment(format!("handshake tag {tag:#04x}")));
        }
        Self::attach_client(fd, socket, wait)
    }

    /// Client side, when the segment fd arrived some other way.
    pub fn attach_client(fd: OwnedFd, socket: UnixStream, wait: WaitPolicy) -> Result<Self, TransportError> {
        Self::attach(fd, socket, CLIENT, wait)
    }

    /// A connected (client, daemon) pair in this process, over a socketpair.
    pub fn pair(config: &ShmConfig) -> Result<(Self, Self), TransportError> {
        let (c, s) = UnixStream::pair()?;
        let server = Self::serve(s, config)?;
        let client = Self::connect(c, config.wait)?;
        Ok((client, server))
    }

    fn attach(fd: OwnedFd, socket: UnixStream, me: usize, policy: WaitPolicy) -> Result<Self, TransportError> {
        let bad = |s: String| TransportError::BadSegment(s);
        let (size, sealed) = sys::segment_facts(&fd).map_err(|e| bad(format!("not a sealable memfd: {e}")))?;
        if !sealed {
            return Err(bad("segment is not sealed against shrinking".into()));
        }
        if size < size_of::<SegmentHeader>() as u64 || size > isize::MAX as u64 {
            return Err(bad(format!("segment of {size} bytes")));
        }
        let map = Arc::new(Mapping::shared(&fd, size as usize)?);
        // SAFETY: the mapping holds at least a SegmentHeader (checked above) and is page
        // aligned; SegmentLayout is plain integers, valid for any bits. A volatile copy:
        // we validate the copy and never re-read the shared one.
        let layout = unsafe { std::ptr::read_volatile(map.as_ptr().cast::<SegmentLayout>()) };
        layout.validate(size).map_err(bad)?;
        let (tx, rx) = if me == CLIENT { (REQUEST, RESPONSE) } else { (RESPONSE, REQUEST) };
        Ok(Self {
            tx: RingEnd::new(Arc::clone(&map), &layout.rings[tx], true),
            rx: RingEnd::new(Arc::clone(&map), &layout.rings[rx], false),
            staging: Staging::new(Arc::clone(&map), layout.staging_offset as usize, layout.staging_size as usize),
            map,
            socket,
            layout,
            me,
            policy,
            send_wait: ring::WaitState::new(policy),
            recv_wait: ring::WaitState::new(policy),
            closed: false,
        })
    }

    /// The validated layout of this segment.
    pub fn layout(&self) -> SegmentLayout {
        self.layout
    }

    pub fn wait_policy(&self) -> WaitPolicy {
        self.policy
    }

    pub fn set_wait_policy(&mut self, policy: WaitPolicy) {
        self.policy = policy;
        (self.send_wait, self.recv_wait) = (ring::WaitState::new(policy), ring::WaitState::new(policy));
    }

    /// The unix socket that came with the segment (e.g. for SO_PEERCRED).
    pub fn socket(&self) -> &UnixStream {
        &self.socket
    }
}

fn closed_flags(map: &Mapping) -> &[AtomicU32; 2] {
    // SAFETY: the header (checked at attach to fit in the mapping) holds the flags at a
    // 4-byte aligned offset; they are atomics, valid for any bits; we never form a
    // reference to the header's non-atomic fields, which the peer might write.
    unsafe { &*map.as_ptr().add(offset_of!(SegmentHeader, closed)).cast::<[AtomicU32; 2]>() }
}

/// Whether the peer closed (flag) or, when `deep`, hung up its socket (died).
fn peer_gone(map: &Mapping, socket: &UnixStream, me: usize, deep: bool) -> bool {
    closed_flags(map)[1 - me].load(Ordering::Acquire) != 0 || (deep && sys::hung_up(socket))
}

impl Transport for ShmTransport {
    fn send(&mut self, frame: &[u8]) -> Result<(), TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        let max = self.tx.max_frame();
        if frame.len() > max {
            return Err(TransportError::FrameTooLarge { len: frame.len(), max });
        }
        if peer_gone(&self.map, &self.socket, self.me, false) {
            return Err(TransportError::PeerGone);
        }
        let (map, socket, me, tx) = (&self.map, &self.socket, self.me, &mut self.tx);
        let words = &ring::control(map, tx.control_offset()).space_wait.0;
        ring::wait(
            words,
            None,
            self.policy,
            &mut self.send_wait,
            None,
            || tx.try_push(frame).map(|done| done.then_some(())),
            |deep| peer_gone(map, socket, me, deep),
        )
    }

    fn recv_into(&mut self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<(), TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        let (map, socket, me, rx) = (&self.map, &self.socket, self.me, &mut self.rx);
        let words = &ring::control(map, rx.control_offset()).data_wait.0;
        // The peer waits for our frames on the other ring's words.
        let peer = &ring::control(map, self.tx.control_offset()).data_wait.0;
        ring::wait(
            words,
            Some(peer),
            self.policy,
            &mut self.recv_wait,
            timeout,
            || rx.try_pop(buf).map(|got| got.then_some(())),
            |deep| peer_gone(map, socket, me, deep),
        )
    }

    /// One look at the ring, no waiting: the next frame into `buf` (true), nothing yet
    /// (false), or `PeerGone` once the peer closed and everything it sent was taken. For a
    /// thread that serves many connections in turn, where waiting on one would stall the rest.
    fn try_recv_into(&mut self, buf: &mut Vec<u8>) -> Result<bool, TransportError> {
        if self.closed {
            return Err(TransportError::Closed);
        }
        if self.rx.try_pop(buf)? {
            return Ok(true);
        }
        if peer_gone(&self.map, &self.socket, self.me, false) {
            // The peer's last frames are published before its closed flag.
            return if self.rx.try_pop(buf)? { Ok(true) } else { Err(TransportError::PeerGone) };
        }
        Ok(false)
    }

    fn max_frame_len(&self) -> usize {
        self.tx.max_frame()
    }

    fn staging(&self) -> Option<&Staging> {
        Some(&self.staging)
    }

    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        closed_flags(&self.map)[self.me].store(1, Ordering::Release);
        self.tx.wake_all();
        self.rx.wake_all();
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
    }
}

impl Drop for ShmTransport {
    fn drop(&mut self) {
        self.close();
    }
}

impl std::fmt::Debug for ShmTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmTransport")
            .field("role", &if self.me == CLIENT { "client" } else { "server" })
            .field("layout", &self.layout)
            .field("policy", &self.policy)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_pair() -> (ShmTransport, ShmTransport) {
        ShmTransport::pair(&ShmConfig { ring_capacity: 4096, staging_size: 4096, ..ShmConfig::default() }).unwrap()
    }

    #[test]
    fn back_and_forth_traffic_keeps_to_the_rings_first_half() {
        let (mut c, mut s) = small_pair();
        let mut buf = Vec::new();
        let mut rewound = false;
        for i in 0..5000u32 {
            let frame = [i as u8; 100];
            c.send(&frame).unwrap();
            s.recv_into(&mut buf, Some(Duration::from_secs(1))).unwrap();
            assert_eq!(buf, frame);
            s.send(&buf).unwrap();
            c.recv_into(&mut buf, Some(Duration::from_secs(1))).unwrap();
            assert_eq!(buf, frame);
            for end in [&c.tx, &c.rx, &s.tx, &s.rx] {
                // Half the ring, then at most a quarter of that before the producer reads the
                // consumer's head again (ring::HEAD_REREAD), and the frame written at the start.
                assert!(end.offset() <= 2048 + 512 + 104, "frame {i}: at offset {} of the ring", end.offset());
            }
            rewound |= i > 0 && c.tx.offset() == 104;
        }
        assert!(rewound, "the producer went back to the ring's start");
    }

    #[test]
    fn frames_of_every_size_arrive_intact_across_rewinds_and_wraps() {
        let (mut c, mut s) = small_pair();
        let frame = |i: u32| -> Vec<u8> { (0..(i * 37 % 3000) as usize + 1).map(|b| (b as u32 ^ i) as u8).collect() };
        const BURSTS: u32 = 500;
        let consumer = std::thread::spawn(move || {
            let mut buf = Vec::new();
            let mut i = 0;
            for burst in 0..BURSTS {
                for _ in 0..burst % 4 + 1 {
                    s.recv_into(&mut buf, Some(Duration::from_secs(5))).unwrap();
                    assert_eq!(buf, frame(i), "frame {i}");
                    i += 1;
                }
                // The ring is empty now: the next burst's first frame may go back to its start.
                s.send(b"ack").unwrap();
            }
        });
        let mut ack = Vec::new();
        let mut i = 0;
        for burst in 0..BURSTS {
            for _ in 0..burst % 4 + 1 {
                c.send(&frame(i)).unwrap();
                i += 1;
            }
            c.recv_into(&mut ack, Some(Duration::from_secs(5))).unwrap();
        }
        consumer.join().unwrap();
    }
}
