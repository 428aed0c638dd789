//! One conformance suite, run against every transport (iceoryx2 style): each case is a
//! generic function over a connected pair; `conformance!` instantiates all of them per
//! implementation. Every case runs under a watchdog, so a hang fails instead of stalling.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use gpupool_protocol::transport::net::{NetTransport, tls};
use gpupool_protocol::transport::shm::{ShmConfig, ShmTransport, WaitPolicy};
use gpupool_protocol::transport::unix::UnixTransport;
use gpupool_protocol::transport::{Transport, TransportError, loopback};

type End = Box<dyn Transport>;

/// Runs `f` on a thread and fails the test if it takes longer than `limit`.
fn within<R: Send + 'static>(limit: Duration, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    let h = thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(r) => r,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("hung: still running after {limit:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(h.join().expect_err("thread ended without a result"))
        }
    }
}

const LIMIT: Duration = Duration::from_secs(2);

/// A frame whose bytes depend on its sequence number and length.
fn frame(seq: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seq as usize).wrapping_mul(31).wrapping_add(i * 7) as u8).collect()
}

/// Batches of frames both ways from one thread (each batch fits in every queue).
fn ordered_delivery((mut a, mut b): (End, End)) {
    for batch in 0..30u32 {
        let seqs = batch * 20..(batch + 1) * 20;
        for i in seqs.clone() {
            a.send(&frame(i, (i % 97) as usize)).unwrap();
            b.send(&frame(i + 1000, (i % 13) as usize)).unwrap();
        }
        for i in seqs {
            assert_eq!(b.recv(Some(LIMIT)).unwrap(), frame(i, (i % 97) as usize), "frame {i} a->b");
            assert_eq!(a.recv(Some(LIMIT)).unwrap(), frame(i + 1000, (i % 13) as usize), "frame {i} b->a");
        }
    }
}

fn frame_sizes((mut a, mut b): (End, End)) {
    let max = a.max_frame_len();
    let sizes: Vec<usize> =
        [0, 1, 2, 3, 5, 7, 13, 63, 64, 65, 255, 1001, max - 1, max].into_iter().filter(|&s| s <= max).collect();
    let expect = sizes.clone();
    let sender = thread::spawn(move || {
        for (i, &s) in sizes.iter().enumerate() {
            a.send(&frame(i as u32, s)).unwrap();
        }
        a
    });
    for (i, &s) in expect.iter().enumerate() {
        let got = b.recv(Some(LIMIT)).unwrap();
        assert_eq!(got.len(), s);
        assert!(got == frame(i as u32, s), "content of the {s}-byte frame");
    }
    drop(sender.join().unwrap());
}

fn too_large_is_refused((mut a, mut b): (End, End)) {
    let max = a.max_frame_len();
    match a.send(&vec![0u8; max + 1]) {
        Err(TransportError::FrameTooLarge { len, max: m }) => assert_eq!((len, m), (max + 1, max)),
        other => panic!("oversized frame: {other:?}"),
    }
    a.send(b"still works").unwrap();
    assert_eq!(b.recv(Some(LIMIT)).unwrap(), b"still works");
}

/// Thousands of frames through the queue from a sender thread to a receiver thread (the
/// shm instance uses a 4 KiB ring, so it wraps ~1,500 times).
fn many_in_flight_concurrent((mut a, mut b): (End, End)) {
    const N: u32 = 40_000;
    let len = |i: u32| ((i * 7) % 301) as usize;
    let sender = thread::spawn(move || {
        for i in 0..N {
            a.send(&frame(i, len(i))).unwrap();
        }
        a
    });
    let receiver = thread::spawn(move || {
        let mut buf = Vec::new();
        for i in 0..N {
            b.recv_into(&mut buf, Some(LIMIT)).unwrap();
            assert!(buf == frame(i, len(i)), "frame {i}");
        }
        b
    });
    let _a = sender.join().unwrap();
    let _b = receiver.join().unwrap();
}

fn ping_pong((mut a, mut b): (End, End)) {
    let echo = thread::spawn(move || {
        let mut buf = Vec::new();
        loop {
            match b.recv_into(&mut buf, Some(LIMIT)) {
                Ok(()) => b.send(&buf).unwrap(),
                Err(TransportError::PeerGone) => return,
                Err(e) => panic!("echo: {e}"),
            }
        }
    });
    for i in 0..3000u32 {
        let f = frame(i, (i % 200) as usize);
        a.send(&f).unwrap();
        assert_eq!(a.recv(Some(LIMIT)).unwrap(), f);
    }
    drop(a);
    echo.join().unwrap();
}

fn recv_timeout((mut a, mut b): (End, End)) {
    assert!(matches!(b.recv(Some(Duration::ZERO)), Err(TransportError::Timeout)));
    let t = Instant::now();
    assert!(matches!(b.recv(Some(Duration::from_millis(30))), Err(TransportError::Timeout)));
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(30) && took < Duration::from_millis(300), "{took:?}");
    // A timeout leaves the transport usable.
    a.send(b"after").unwrap();
    assert_eq!(b.recv(Some(LIMIT)).unwrap(), b"after");
}

fn drop_wakes_blocked_receiver((mut a, b): (End, End)) {
    let dropper = thread::spawn(move || {
        thread::sleep(Duration::from_millis(50));
        drop(b);
        Instant::now()
    });
    let r = a.recv(None);
    let gone_at = Instant::now();
    let dropped_at = dropper.join().unwrap();
    assert!(matches!(r, Err(TransportError::PeerGone)), "{r:?}");
    let lag = gone_at.saturating_duration_since(dropped_at);
    assert!(lag < Duration::from_millis(100), "PeerGone {lag:?} after the drop");
}

fn frames_before_close_are_delivered((mut a, mut b): (End, End)) {
    for i in 0..3 {
        b.send(&frame(i, 10)).unwrap();
    }
    drop(b);
    for i in 0..3 {
        assert_eq!(a.recv(Some(LIMIT)).unwrap(), frame(i, 10));
    }
    assert!(matches!(a.recv(Some(LIMIT)), Err(TransportError::PeerGone)));
    assert!(matches!(a.send(b"x"), Err(TransportError::PeerGone)));
}

fn local_close((mut a, mut b): (End, End)) {
    a.close();
    a.close();
    assert!(matches!(a.send(b"x"), Err(TransportError::Closed)));
    assert!(matches!(a.recv(Some(Duration::ZERO)), Err(TransportError::Closed)));
    assert!(matches!(b.recv(Some(LIMIT)), Err(TransportError::PeerGone)));
    assert!(matches!(b.send(b"x"), Err(TransportError::PeerGone)));
}

/// A sender blocked on a full queue (the peer never receives) learns that the peer left.
fn drop_wakes_blocked_sender((mut a, b): (End, End)) {
    let dropper = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        drop(b);
        Instant::now()
    });
    let chunk = vec![7u8; a.max_frame_len().min(1000)];
    let err = loop {
        if let Err(e) = a.send(&chunk) {
            break e;
        }
    };
    let gone_at = Instant::now();
    let dropped_at = dropper.join().unwrap();
    assert!(matches!(err, TransportError::PeerGone), "{err:?}");
    assert!(gone_at.saturating_duration_since(dropped_at) < Duration::from_millis(100));
}

fn staging_is_shared((a, b): (End, End)) {
    let (Some(sa), Some(sb)) = (a.staging(), b.staging()) else {
        return; // this transport has no staging area
    };
    assert_eq!(sa.len(), sb.len());
    let data = frame(9, 4096.min(sa.len()));
    sa.write(sa.len() - data.len(), &data).unwrap();
    let mut back = vec![0u8; data.len()];
    sb.read(sb.len() - data.len(), &mut back).unwrap();
    assert_eq!(back, data);
    assert!(sa.write(sa.len() - 1, &[1, 2]).is_err());
    assert!(sb.read(usize::MAX, &mut [0u8; 1]).is_err());
}

/// A frame sent in parts (a head and a large body, as bulk copies are) arrives as one
/// frame, in order with whole frames, deferred or not.
fn parts_are_one_frame((mut a, mut b): (End, End)) {
    let max = a.max_frame_len();
    let sizes = [(0, 0), (24, 0), (24, 100), (30, max / 3), (28, max - 28)];
    let expect = sizes;
    let sender = thread::spawn(move || {
        for (i, &(head, body)) in sizes.iter().enumerate() {
            let whole = frame(i as u32, head + body);
            a.send_parts(&[&whole[..head], &whole[head..]], i % 2 == 1).unwrap();
            a.send(&frame(100 + i as u32, 5)).unwrap();
        }
        a
    });
    let mut buf = Vec::new();
    for (i, &(head, body)) in expect.iter().enumerate() {
        b.recv_into(&mut buf, Some(LIMIT)).unwrap();
        assert!(buf == frame(i as u32, head + body), "frame {i} of {} + {} bytes", head, body);
        b.recv_into(&mut buf, Some(LIMIT)).unwrap();
        assert_eq!(buf, frame(100 + i as u32, 5));
    }
    assert!(matches!(b.send_parts(&[&[0u8; 8], &vec![0u8; max]], false), Err(TransportError::FrameTooLarge { .. })));
    drop(sender.join().unwrap());
}

macro_rules! conformance {
    ($name:ident, $make:expr) => {
        mod $name {
            use super::*;
            fn make() -> (End, End) {
                $make
            }
            conformance!(@cases ordered_delivery, frame_sizes, too_large_is_refused,
                many_in_flight_concurrent, ping_pong, recv_timeout, drop_wakes_blocked_receiver,
                frames_before_close_are_delivered, local_close, drop_wakes_blocked_sender,
                staging_is_shared, parts_are_one_frame);
        }
    };
    (@cases $($case:ident),*) => {
        $(
            #[test]
            fn $case() {
                within(LIMIT, || super::$case(make()));
            }
        )*
    };
}

fn shm(wait: WaitPolicy) -> (End, End) {
    let config = ShmConfig { ring_capacity: 4096, staging_size: 1 << 20, wait };
    let (c, s) = ShmTransport::pair(&config).unwrap();
    (Box::new(c), Box::new(s))
}

conformance!(shm_spinning, shm(WaitPolicy::default()));
conformance!(
    shm_yield_then_futex,
    shm(WaitPolicy { spin: 0, spin_max: 0, yield_for: std::time::Duration::from_micros(200), ..WaitPolicy::default() })
);
conformance!(
    shm_futex_only,
    shm(WaitPolicy { spin: 0, spin_max: 0, yield_for: std::time::Duration::ZERO, ..WaitPolicy::default() })
);
conformance!(unix_socket, {
    let (a, b) = UnixTransport::pair(1 << 20).unwrap();
    (Box::new(a), Box::new(b))
});
conformance!(in_process_loopback, {
    let (a, b) = loopback::pair(1 << 20, 1 << 20).unwrap();
    (Box::new(a), Box::new(b))
});

fn tcp_pair() -> (std::net::TcpStream, std::net::TcpStream) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

conformance!(tcp_plain, {
    let (c, s) = tcp_pair();
    (Box::new(NetTransport::plain(c, 1 << 20).unwrap()), Box::new(NetTransport::plain(s, 1 << 20).unwrap()))
});
conformance!(tcp_tls, {
    let (a, b) = tls_pair();
    (Box::new(a), Box::new(b))
});

/// A TLS pair over loopback TCP with a fresh self-signed certificate for "localhost".
fn tls_pair() -> (NetTransport, NetTransport) {
    let dir = std::env::temp_dir().join(format!("gpupool-tls-{}-{:?}", std::process::id(), thread::current().id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
    let server = tls::server_config(&cert, &key).unwrap();
    let client = tls::client_config(&cert).unwrap();
    let (c, s) = tcp_pair();
    let srv = thread::spawn(move || {
        NetTransport::tls(s, rustls::ServerConnection::new(server).unwrap(), 1 << 20, LIMIT).unwrap()
    });
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let cli = NetTransport::tls(c, rustls::ClientConnection::new(client, name).unwrap(), 1 << 20, LIMIT).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (cli, srv.join().unwrap())
}

/// Deferred frames arrive in order with the frames sent after them, and a flush alone
/// delivers them.
#[test]
fn net_deferred_frames_keep_order() {
    within(LIMIT, || {
        let (mut a, mut b) = tls_pair();
        for i in 0..1000u32 {
            a.send_deferred(&frame(i, 40)).unwrap();
        }
        a.send(&frame(1000, 10)).unwrap();
        for i in 0..=1000u32 {
            assert_eq!(b.recv(None).unwrap(), frame(i, if i == 1000 { 10 } else { 40 }));
        }
        a.send_deferred(b"tail").unwrap();
        assert!(a.has_deferred());
        assert!(matches!(b.recv(Some(Duration::from_millis(50))), Err(TransportError::Timeout)));
        a.flush().unwrap();
        assert!(!a.has_deferred());
        assert_eq!(b.recv(None).unwrap(), b"tail");
    });
}

/// A client that trusts another CA refuses the daemon's certificate during the
/// handshake, with rustls's reason.
#[test]
fn net_tls_unknown_ca_is_a_handshake_error() {
    within(LIMIT, || {
        let dir = std::env::temp_dir().join(format!("gpupool-tls-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str| {
            let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
            let (c, k) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.key")));
            std::fs::write(&c, ck.cert.pem()).unwrap();
            std::fs::write(&k, ck.signing_key.serialize_pem()).unwrap();
            (c, k)
        };
        let ((cert, key), (other, _)) = (write("daemon"), write("other"));
        let server = tls::server_config(&cert, &key).unwrap();
        let client = tls::client_config(&other).unwrap();
        let (c, s) = tcp_pair();
        let srv =
            thread::spawn(move || NetTransport::tls(s, rustls::ServerConnection::new(server).unwrap(), 1024, LIMIT));
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let err =
            NetTransport::tls(c, rustls::ClientConnection::new(client, name).unwrap(), 1024, LIMIT).err().unwrap();
        assert!(matches!(&err, TransportError::Handshake(why) if why.contains("invalid peer certificate")), "{err}");
        assert!(matches!(srv.join().unwrap(), Err(TransportError::Handshake(_))));
        let _ = std::fs::remove_dir_all(&dir);
    });
}

/// A large frame whose second half is late: the receive times out, the bytes already read
/// are kept, and the next receive delivers the whole frame, then the one after it. A
/// reused receive buffer holds exactly each frame.
#[test]
fn net_large_frame_survives_a_timeout_midway() {
    within(LIMIT, || {
        use std::io::Write;
        let (mut raw, s) = tcp_pair();
        let mut t = NetTransport::plain(s, 1 << 20).unwrap();
        let big = frame(7, 900 << 10);
        let mut wire = (big.len() as u32).to_le_bytes().to_vec();
        wire.extend_from_slice(&big);
        wire.extend_from_slice(&3u32.to_le_bytes());
        wire.extend_from_slice(b"end");
        let half = 4 + (400 << 10);
        raw.write_all(&wire[..half]).unwrap();
        let mut buf = vec![0xffu8; 2 << 20];
        thread::sleep(Duration::from_millis(20));
        assert!(matches!(t.recv_into(&mut buf, Some(Duration::from_millis(50))), Err(TransportError::Timeout)));
        raw.write_all(&wire[half..]).unwrap();
        t.recv_into(&mut buf, Some(LIMIT)).unwrap();
        assert!(buf == big, "the late frame, whole ({} bytes)", buf.len());
        t.recv_into(&mut buf, Some(LIMIT)).unwrap();
        assert_eq!(buf, b"end");
    });
}

/// A large frame of the length the caller expects is read with its head in the buffer and
/// the rest in the caller's memory, over TLS and plain TCP, also when its head arrives in two
/// pieces; frames of other lengths, large or small, come whole; the stream stays in step.
#[test]
fn net_large_frame_is_read_split_into_the_callers_memory() {
    within(LIMIT * 2, || {
        let (mut a, mut b) = tls_pair();
        let big = frame(3, 900 << 10);
        let (head_len, mut body) = (30, vec![0u8; big.len() - 30]);
        let mut buf = Vec::new();
        a.send_parts(&[&big[..head_len], &big[head_len..]], false).unwrap();
        assert!(b.recv_split(&mut buf, head_len, &mut body).unwrap());
        assert!(buf == big[..head_len] && body == big[head_len..]);
        let other = frame(4, 700 << 10);
        a.send(&other).unwrap();
        a.send(b"small").unwrap();
        assert!(!b.recv_split(&mut buf, head_len, &mut body).unwrap());
        assert!(buf == other, "a large frame of another length, whole");
        assert!(!b.recv_split(&mut buf, 2, &mut body[..3]).unwrap());
        assert_eq!(buf, b"small");

        use std::io::Write;
        let (mut raw, s) = tcp_pair();
        let mut t = NetTransport::plain(s, 1 << 20).unwrap();
        let mut wire = (big.len() as u32).to_le_bytes().to_vec();
        wire.extend_from_slice(&big);
        wire.extend_from_slice(&3u32.to_le_bytes());
        wire.extend_from_slice(b"end");
        let writer = thread::spawn(move || {
            raw.write_all(&wire[..14]).unwrap();
            thread::sleep(Duration::from_millis(20));
            raw.write_all(&wire[14..]).unwrap();
            raw
        });
        body.fill(0);
        assert!(t.recv_split(&mut buf, head_len, &mut body).unwrap());
        assert!(buf == big[..head_len] && body == big[head_len..], "the head in two pieces");
        t.recv_into(&mut buf, Some(LIMIT)).unwrap();
        assert_eq!(buf, b"end");
        drop(writer.join().unwrap());
    });
}
