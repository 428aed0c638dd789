//! Bounded resources: connections that never send a hello cost the daemon at most
//! `MAX_PENDING` session threads (the oldest is dropped to make room), a real client gets
//! its session while 500 of them are held, and the daemon's threads and file descriptors
//! return to their baseline once they are gone; the TCP listener shares the bound.

mod common;

use common::*;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The daemon's bound on connections waiting for their hello (`daemon::admission`).
const MAX_PENDING: usize = 64;
/// How long the daemon gives a connection for its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
const IDLE: usize = 500;

fn count(dir: String) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

fn threads(d: &Daemon) -> usize {
    count(format!("/proc/{}/task", d.child.id()))
}

fn fds(d: &Daemon) -> usize {
    count(format!("/proc/{}/fd", d.child.id()))
}

/// Polls `f` until it holds or `deadline` passes; says whether it held.
fn eventually(deadline: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        if f() {
            return true;
        }
        if t0.elapsed() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A cuda-python client under `gpupool run`: imports, says `ready`, waits for a line on
/// stdin, then times `cuInit` (connect, shared memory, hello) and a device query, and
/// prints the microseconds.
const CLIENT: &str = r#"
import sys, time
from cuda.bindings import driver as d
print("ready", flush=True)
sys.stdin.readline()
t0 = time.monotonic()
(err,) = d.cuInit(0)
assert err == d.CUresult.CUDA_SUCCESS, err
err, n = d.cuDeviceGetCount()
assert err == d.CUresult.CUDA_SUCCESS and n == 2, (err, n)
print("session_us", int((time.monotonic() - t0) * 1e6), flush=True)
"#;

struct PyClient {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl PyClient {
    /// Started and imported, not yet connected.
    fn start(d: &Daemon) -> PyClient {
        ensure_interposer();
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpupool"))
            .args(["run", "--endpoint", &d.endpoint(), "--"])
            .arg(gpupool_e2e::venv_python())
            .args(["-c", CLIENT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting a client under gpupool run");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "client did not start");
        PyClient { child, out }
    }

    /// Lets it connect; returns how long its session took to start.
    fn connect(mut self) -> Duration {
        writeln!(self.child.stdin.as_mut().unwrap(), "go").unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        let st = self.child.wait().unwrap();
        assert!(st.success(), "client failed ({st}): {line}");
        let us: u64 = line.trim().strip_prefix("session_us ").and_then(|v| v.parse().ok()).expect(&line);
        Duration::from_micros(us)
    }
}

#[test]
fn idle_connections_are_bounded_and_do_not_lock_a_client_out() {
    let d = Daemon::start(None);
    // Warm up: the first session creates the tenant's contexts (and the simulator's threads).
    PyClient::start(&d).connect();
    let (mut base_threads, mut base_fds) = (0, 0);
    assert!(
        eventually(Duration::from_secs(10), || {
            let now = (threads(&d), fds(&d));
            let settled = now == (base_threads, base_fds);
            (base_threads, base_fds) = now;
            settled && d.status()["sessions"].as_array().unwrap().is_empty()
        }),
        "the daemon did not settle after the warm-up client"
    );

    let client = PyClient::start(&d);
    let opened = Instant::now();
    let idle: Vec<UnixStream> = (0..IDLE).map(|_| UnixStream::connect(&d.socket).expect("connect")).collect();
    let took = client.connect();
    // The client got in while the newest idle connections were still waiting for their hello
    // (not once the daemon gave up on them): they are still open, the oldest were dropped.
    let open = idle.iter().filter(|s| !gpupool_protocol::transport::hung_up(s)).count();
    let since = opened.elapsed();
    println!("session while {IDLE} idle connections were held: {took:?} ({open} of them still open)");
    assert!(since < HELLO_TIMEOUT, "the client took {since:?}: as long as the daemon waits for a hello");
    assert!(open >= MAX_PENDING / 2, "only {open} idle connections are still pending: {}", d.log());
    assert!(open <= MAX_PENDING, "{open} idle connections are pending, more than {MAX_PENDING}");

    // While they are held, the daemon keeps at most MAX_PENDING threads for them.
    let bound = base_threads + MAX_PENDING + 4;
    assert!(
        eventually(HELLO_TIMEOUT - Duration::from_secs(1), || threads(&d) <= bound),
        "{} daemon threads with {IDLE} idle connections held (baseline {base_threads})",
        threads(&d)
    );

    drop(idle);
    let ok = eventually(Duration::from_secs(10), || threads(&d) <= base_threads + 1 && fds(&d) <= base_fds + 2);
    assert!(
        ok,
        "threads {} (baseline {base_threads}), fds {} (baseline {base_fds}) after the idle connections closed",
        threads(&d),
        fds(&d)
    );
}

/// The network listener shares the bound: idle TCP connections push out each other, not a
/// client that sends its hello (the listener used to refuse every connection past 64).
#[test]
fn idle_tcp_connections_do_not_lock_a_client_out() {
    use gpupool_protocol::transport::Transport as _;
    use gpupool_protocol::transport::net::{DEFAULT_MAX_FRAME, NetTransport};
    use gpupool_protocol::{Message, Reply};
    use std::net::TcpStream;

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let config = format!("[[tenant]]\nname = \"net\"\ntoken_sha256 = \"{}\"\n", gpupool_quota::hash_token("tk"));
    let d = Daemon::start_with(Some(&config), &["--listen", &format!("tcp://{addr}")]);
    let idle: Vec<TcpStream> = (0..2 * MAX_PENDING).map(|_| TcpStream::connect(&addr).expect("connect")).collect();

    let mut t = NetTransport::plain(TcpStream::connect(&addr).unwrap(), DEFAULT_MAX_FRAME).unwrap();
    let hello = Message::Request { id: 1, no_reply: false, op: hello_token("bounds", None, Some("tk")) };
    t.send(&hello.encode().unwrap()).expect("sending the hello");
    let reply = t.recv(Some(HELLO_TIMEOUT)).unwrap_or_else(|e| panic!("no hello reply ({e}): {}", d.log()));
    match Message::decode(&reply).unwrap().0 {
        Message::Reply { op: Reply::HelloReply { tenant, .. }, .. } => assert_eq!(tenant, "net"),
        other => panic!("{other:?}"),
    }
    let open = |idle: &[TcpStream]| idle.iter().filter(|s| !gpupool_protocol::transport::hung_up(s)).count();
    // The oldest were dropped (the daemon closes them within a wait slice), the newest wait.
    assert!(eventually(Duration::from_secs(2), || open(&idle) <= MAX_PENDING), "{} idle still open", open(&idle));
    assert!(open(&idle) >= MAX_PENDING / 2, "only {} idle connections still pending", open(&idle));
}
