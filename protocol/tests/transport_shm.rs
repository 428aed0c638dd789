//! Shared-memory transport cases the generic suite cannot express: a peer PROCESS killed
//! with SIGKILL, segments that fail validation, a peer scribbling on the ring indices,
//! and back-pressure on the ring's free space.
//!
//! The peer process is this test binary re-executed with `child_peer --exact` and
//! `GPUPOOL_SHM_TEST_CHILD=mode:socket-path` in its environment.

use std::fs::File;
use std::mem::offset_of;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use gpupool_protocol::transport::shm::layout::{REQUEST, RESPONSE, RingControl, RingLayout, SegmentLayout};
use gpupool_protocol::transport::shm::{ShmConfig, ShmTransport, WaitPolicy, create_segment};
use gpupool_protocol::transport::{Transport, TransportError};

const CHILD_ENV: &str = "GPUPOOL_SHM_TEST_CHILD";
const BOUND: Duration = Duration::from_millis(200);

/// The peer process's body; a no-op in a normal test run.
#[test]
fn child_peer() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (mode, path) = spec.split_once(':').expect("mode:path");
    let mut t = ShmTransport::connect(UnixStream::connect(path).unwrap(), WaitPolicy::default()).unwrap();
    t.send(b"ready").unwrap();
    match mode {
        // Send numbered frames until the parent goes away (or kills us).
        "stream" => {
            for i in 0u32.. {
                let mut f = vec![0u8; 100];
                f[..4].copy_from_slice(&i.to_le_bytes());
                if t.send(&f).is_err() {
                    return;
                }
            }
        }
        // Never read; wait for the parent to go away (or kill us).
        _ => thread::sleep(Duration::from_secs(10)),
    }
}

/// Spawns the peer process in `mode` and serves it; returns the child and our end after
/// its "ready" frame.
fn spawn_child(mode: &str) -> (Child, ShmTransport) {
    static N: AtomicU32 = AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "gpupool-shm-test-{}-{}.sock",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["child_peer", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{mode}:{}", path.display()))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let sock = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(2))
            }
            Err(e) => panic!("child did not connect: {e}"),
        }
    };
    let _ = std::fs::remove_file(&path);
    sock.set_nonblocking(false).unwrap();
    let config = ShmConfig { ring_capacity: 64 << 10, ..ShmConfig::default() };
    let mut server = ShmTransport::serve(sock, &config).unwrap();
    assert_eq!(server.recv(Some(Duration::from_secs(5))).unwrap(), b"ready");
    (child, server)
}

/// Kills `child` with SIGKILL after `after` on another thread; returns when it was killed.
fn kill_later(mut child: Child, after: Duration) -> thread::JoinHandle<Instant> {
    thread::spawn(move || {
        thread::sleep(after);
        child.kill().unwrap(); // SIGKILL
        let at = Instant::now();
        child.wait().unwrap();
        at
    })
}

#[test]
fn sigkilled_peer_wakes_sleeping_receiver() {
    let (child, mut server) = spawn_child("idle");
    let killer = kill_later(child, Duration::from_millis(60));
    let r = server.recv(Some(Duration::from_secs(2)));
    let gone_at = Instant::now();
    let killed_at = killer.join().unwrap();
    assert!(matches!(r, Err(TransportError::PeerGone)), "{r:?}");
    let lag = gone_at.saturating_duration_since(killed_at);
    eprintln!("PeerGone {lag:?} after SIGKILL");
    assert!(lag < BOUND, "PeerGone {lag:?} after SIGKILL");
}

#[test]
fn sigkilled_peer_mid_stream() {
    let (child, mut server) = spawn_child("stream");
    let mut buf = Vec::new();
    let mut next = 0u32;
    let mut check = |buf: &[u8]| {
        assert_eq!(buf.len(), 100);
        assert_eq!(u32::from_le_bytes(buf[..4].try_into().unwrap()), next, "frames in order, none torn");
        next += 1;
    };
    for _ in 0..2000 {
        server.recv_into(&mut buf, Some(Duration::from_secs(2))).unwrap();
        check(&buf);
    }
    let killer = kill_later(child, Duration::ZERO);
    let err = loop {
        match server.recv_into(&mut buf, Some(Duration::from_secs(2))) {
            Ok(()) => check(&buf),
            Err(e) => break e,
        }
    };
    let gone_at = Instant::now();
    let killed_at = killer.join().unwrap();
    assert!(matches!(err, TransportError::PeerGone), "{err:?}");
    let lag = gone_at.saturating_duration_since(killed_at);
    eprintln!("PeerGone {lag:?} after SIGKILL");
    assert!(lag < BOUND, "PeerGone {lag:?} after SIGKILL");
}

#[test]
fn sigkilled_peer_wakes_blocked_sender() {
    let (child, mut server) = spawn_child("idle");
    let killer = kill_later(child, Duration::from_millis(60));
    let frame = [3u8; 1000];
    let err = loop {
        if let Err(e) = server.send(&frame) {
            break e;
        }
    };
    let gone_at = Instant::now();
    let killed_at = killer.join().unwrap();
    assert!(matches!(err, TransportError::PeerGone), "{err:?}");
    let lag = gone_at.saturating_duration_since(killed_at);
    eprintln!("PeerGone {lag:?} after SIGKILL");
    assert!(lag < BOUND, "PeerGone {lag:?} after SIGKILL");
}

/// Creates a good segment, overwrites `bytes` at `offset`, and attaches as a client.
fn attach_corrupted(offset: usize, bytes: &[u8]) -> String {
    let fd = create_segment(&ShmConfig::default()).unwrap();
    let file = File::from(fd);
    file.write_all_at(bytes, offset as u64).unwrap();
    let (sock, _peer) = UnixStream::pair().unwrap();
    match ShmTransport::attach_client(OwnedFd::from(file), sock, WaitPolicy::default()) {
        Err(TransportError::BadSegment(why)) => why,
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a corrupted segment was accepted"),
    }
}

fn ring_field(ring: usize, field: usize) -> usize {
    offset_of!(SegmentLayout, rings) + ring * size_of::<RingLayout>() + field
}

#[test]
fn corrupted_header_is_refused_on_attach() {
    let good = SegmentLayout::new(1 << 20, 8 << 20);
    let cases: Vec<(usize, Vec<u8>, &str)> = vec![
        (offset_of!(SegmentLayout, magic), b"NOTGPUPL".to_vec(), "magic"),
        (offset_of!(SegmentLayout, version), 1u32.to_le_bytes().to_vec(), "version"),
        (offset_of!(SegmentLayout, version), 3u32.to_le_bytes().to_vec(), "version"),
        (offset_of!(SegmentLayout, header_size), 64u32.to_le_bytes().to_vec(), "header size"),
        (offset_of!(SegmentLayout, segment_size), (1u64 << 40).to_le_bytes().to_vec(), "segment has"),
        (ring_field(REQUEST, offset_of!(RingLayout, capacity)), 1000u64.to_le_bytes().to_vec(), "power of two"),
        (ring_field(RESPONSE, offset_of!(RingLayout, control_offset)), 100u64.to_le_bytes().to_vec(), "misaligned"),
        (
            ring_field(RESPONSE, offset_of!(RingLayout, data_offset)),
            good.rings[REQUEST].data_offset.to_le_bytes().to_vec(),
            "overlap",
        ),
        (offset_of!(SegmentLayout, staging_offset), (u64::MAX - 4095).to_le_bytes().to_vec(), "outside"),
        (offset_of!(SegmentLayout, staging_size), (1u64 << 62).to_le_bytes().to_vec(), "outside"),
    ];
    for (offset, bytes, want) in cases {
        let why = attach_corrupted(offset, &bytes);
        assert!(why.contains(want), "corrupting offset {offset}: {why:?} should mention {want:?}");
    }
}

#[test]
fn unsealed_or_tiny_file_is_refused() {
    let path = std::env::temp_dir().join(format!("gpupool-shm-test-{}.seg", std::process::id()));
    let file = File::create(&path).unwrap();
    file.set_len(1 << 16).unwrap();
    let _ = std::fs::remove_file(&path);
    let (sock, _peer) = UnixStream::pair().unwrap();
    let r = ShmTransport::attach_client(OwnedFd::from(file), sock, WaitPolicy::default());
    assert!(matches!(r, Err(TransportError::BadSegment(_))), "{r:?}");
}

#[test]
fn handshake_without_fd_is_refused() {
    let (c, s) = UnixStream::pair().unwrap();
    std::io::Write::write_all(&mut &s, b"G").unwrap();
    let r = ShmTransport::connect(c, WaitPolicy::default());
    assert!(matches!(r, Err(TransportError::BadSegment(_))), "{r:?}");
    let (c, s) = UnixStream::pair().unwrap();
    drop(s);
    let r = ShmTransport::connect(c, WaitPolicy::default());
    assert!(matches!(r, Err(TransportError::PeerGone)), "{r:?}");
}

/// A peer that writes nonsense into the ring indices gets `Corrupt`, never UB.
#[test]
fn scribbled_ring_indices_are_corrupt_not_ub() {
    let layout = SegmentLayout::new(4096, 4096);
    let scribble = |ring: usize, field: usize, value: u64, extra: Option<(u64, u32)>| {
        let fd = create_segment(&ShmConfig { ring_capacity: 4096, staging_size: 4096, ..Default::default() }).unwrap();
        let file = File::from(fd);
        let ctl = layout.rings[ring].control_offset;
        file.write_all_at(&value.to_le_bytes(), ctl + field as u64).unwrap();
        if let Some((at, len)) = extra {
            file.write_all_at(&len.to_le_bytes(), layout.rings[ring].data_offset + at).unwrap();
        }
        let (sock, peer) = UnixStream::pair().unwrap();
        let t = ShmTransport::attach_client(OwnedFd::from(file), sock, WaitPolicy::default()).unwrap();
        (t, peer)
    };
    let tail = offset_of!(RingControl, tail);
    let head = offset_of!(RingControl, head);
    // The response ring (the client consumes it) claims more bytes than it holds.
    let (mut t, _p) = scribble(RESPONSE, tail, 1 << 40, None);
    assert!(matches!(t.recv(Some(Duration::ZERO)), Err(TransportError::Corrupt(_))));
    // It holds 8 bytes but the frame says 1000.
    let (mut t, _p) = scribble(RESPONSE, tail, 8, Some((0, 1000)));
    assert!(matches!(t.recv(Some(Duration::ZERO)), Err(TransportError::Corrupt(_))));
    // The request ring's consumer (the daemon) claims to have consumed what was never sent.
    let (mut t, _p) = scribble(REQUEST, head, 12345, None);
    assert!(matches!(t.send(b"x"), Err(TransportError::Corrupt(_))));
}

#[test]
fn frame_larger_than_free_space_waits_for_room() {
    let config = ShmConfig { ring_capacity: 4096, staging_size: 4096, ..Default::default() };
    let (mut c, mut s) = ShmTransport::pair(&config).unwrap();
    c.send(&[1u8; 3000]).unwrap();
    let (tx, rx) = mpsc::channel();
    let sender = thread::spawn(move || {
        c.send(&[2u8; 2000]).unwrap();
        tx.send(()).unwrap();
        c
    });
    assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "2000 bytes do not fit yet");
    assert_eq!(s.recv(Some(Duration::from_secs(1))).unwrap(), vec![1u8; 3000]);
    rx.recv_timeout(Duration::from_secs(1)).expect("room made, the send completes");
    assert_eq!(s.recv(Some(Duration::from_secs(1))).unwrap(), vec![2u8; 2000]);
    drop(sender.join().unwrap());
}

#[test]
fn largest_frame_of_a_default_segment() {
    let (mut c, mut s) = ShmTransport::pair(&ShmConfig::default()).unwrap();
    let l = c.layout();
    assert_eq!(l.rings[REQUEST].capacity, 1 << 20);
    assert_eq!(l.staging_size, 8 << 20);
    let max = c.max_frame_len();
    assert_eq!(max, (1 << 20) - 4);
    let big: Vec<u8> = (0..max).map(|i| (i % 251) as u8).collect();
    c.send(&big).unwrap();
    assert!(s.recv(Some(Duration::from_secs(1))).unwrap() == big);
    assert!(matches!(c.send(&vec![0; max + 1]), Err(TransportError::FrameTooLarge { .. })));
}

#[test]
fn try_recv_looks_once_and_delivers_what_came_before_a_close() {
    let (mut c, mut s) = ShmTransport::pair(&ShmConfig::default()).unwrap();
    let mut buf = Vec::new();
    let t = Instant::now();
    assert!(!s.try_recv_into(&mut buf).unwrap(), "nothing sent yet");
    assert!(t.elapsed() < Duration::from_millis(50), "one look, no wait: {:?}", t.elapsed());
    c.send(b"first").unwrap();
    c.send(b"last").unwrap();
    assert!(s.try_recv_into(&mut buf).unwrap());
    assert_eq!(buf, b"first");
    c.close();
    assert!(s.try_recv_into(&mut buf).unwrap(), "a frame sent before the close still arrives");
    assert_eq!(buf, b"last");
    assert!(matches!(s.try_recv_into(&mut buf), Err(TransportError::PeerGone)));
}
