//! What this machine allows many client processes, with nothing of the pool behind the
//! transport: `pool` part 5's client processes, but each echoing a 64-byte frame over the
//! pool's own shared-memory transport (same segment, rings and wait policy) to a server in
//! the bench process that only echoes. Two servers: a thread per client (the daemon's design:
//! a session thread each) and one thread polling every client's ring in turn (the design the
//! daemon would need to stop having a thread per client on the cores).
//!
//! The server has no request to decode, no handle to look up and no driver to call, so each
//! figure is a ceiling for a pool of that design on this machine: part 5 prints them beside
//! the pool's, so that a missed target says whether the pool or the machine fell short.

use std::io::Write as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use gpupool_protocol::transport::shm::{ShmConfig, ShmTransport, WaitPolicy};
use gpupool_protocol::transport::{Transport, TransportError};

const FRAME: usize = 64;
/// The pool's rings are 1 MiB; an echo of 64-byte frames needs far less, and 128 segments of
/// the pool's size would fault in memory the figure is not about.
const RING: usize = 1 << 16;
const STAGING: usize = 1 << 16;

/// How the echo server serves its clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// A thread per client, waiting on that client's ring with the transport's wait policy.
    ThreadPerClient,
    /// One thread that looks at every client's ring in turn and yields the core after a
    /// pass that found nothing.
    OnePoller,
}

impl Server {
    pub fn describe(self) -> &'static str {
        match self {
            Server::ThreadPerClient => "a thread per client",
            Server::OnePoller => "one polling thread",
        }
    }
}

/// An echo server on a unix socket: connections get a shared-memory segment each, and every
/// frame sent on it comes back. Stopped (its threads joined, the socket removed) on drop.
pub struct EchoServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl EchoServer {
    pub fn start(path: &Path, server: Server) -> Result<EchoServer, String> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).map_err(|e| format!("binding {}: {e}", path.display()))?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<ShmTransport>();
        let mut threads = Vec::new();
        let stopping = stop.clone();
        threads.push(thread::spawn(move || accept(listener, server, tx, stopping)));
        if server == Server::OnePoller {
            let stopping = stop.clone();
            threads.push(thread::spawn(move || poll(rx, stopping)));
        }
        Ok(EchoServer { path: path.to_path_buf(), stop, threads })
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The daemon's session threads' wait policy, as the server's.
fn config() -> ShmConfig {
    ShmConfig { ring_capacity: RING, staging_size: STAGING, wait: WaitPolicy::session() }
}

/// Accepts until stopped; a thread-per-client server's echo threads end with their clients.
fn accept(listener: UnixListener, server: Server, polled: mpsc::Sender<ShmTransport>, stop: Arc<AtomicBool>) {
    let mut echoes = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(1));
                continue;
            }
            Err(e) => {
                eprintln!("echo server: accept failed: {e}");
                return;
            }
        };
        if stream.set_nonblocking(false).is_err() {
            continue;
        }
        let Ok(t) = ShmTransport::serve(stream, &config()) else { continue };
        match server {
            Server::ThreadPerClient => echoes.push(thread::spawn(move || echo(t))),
            Server::OnePoller => {
                if polled.send(t).is_err() {
                    return;
                }
            }
        }
    }
    for e in echoes {
        let _ = e.join();
    }
}

fn echo(mut t: ShmTransport) {
    let mut buf = Vec::with_capacity(FRAME);
    while t.recv_into(&mut buf, None).is_ok() {
        if t.send(&buf).is_err() {
            return;
        }
    }
}

/// Serves every client's ring in turn until stopped; a client that left is dropped.
fn poll(new: mpsc::Receiver<ShmTransport>, stop: Arc<AtomicBool>) {
    let mut clients: Vec<ShmTransport> = Vec::new();
    let mut buf = Vec::with_capacity(FRAME);
    while !stop.load(Ordering::Relaxed) {
        clients.extend(new.try_iter());
        let mut served = false;
        clients.retain_mut(|t| match t.try_recv_into(&mut buf) {
            Ok(true) => {
                served = true;
                t.send(&buf).is_ok()
            }
            Ok(false) => true,
            Err(TransportError::PeerGone) => false,
            Err(e) => {
                eprintln!("echo poller: dropping a client: {e}");
                false
            }
        });
        if !served {
            thread::yield_now();
        }
    }
}

/// `gpupool-bench __pool-client echo SOCKET`: `pool` part 5's round-trip client with an echo
/// of a 64-byte frame for the call.
pub fn client_echo(socket: &Path) -> Result<(), String> {
    let stream = UnixStream::connect(socket).map_err(|e| format!("connecting to {}: {e}", socket.display()))?;
    let mut t = ShmTransport::connect(stream, WaitPolicy::default()).map_err(|e| e.to_string())?;
    let frame = [0x5au8; FRAME];
    let mut buf = Vec::with_capacity(FRAME);
    let mut echoed = move || -> Result<(), String> {
        t.send(&frame).map_err(|e| e.to_string())?;
        t.recv_into(&mut buf, Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
        if buf[..] != frame[..] {
            return Err("the echo differs from the frame sent".into());
        }
        Ok(())
    };
    crate::pool::round_trips_in_window(&mut echoed)?;
    std::io::stdout().flush().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_servers_echo_every_client_and_forget_those_that_left() {
        for server in [Server::ThreadPerClient, Server::OnePoller] {
            let path =
                std::env::temp_dir().join(format!("gpupool-ceiling-test-{}-{server:?}.sock", std::process::id()));
            let echo = EchoServer::start(&path, server).unwrap();
            let mut clients: Vec<ShmTransport> = (0..3)
                .map(|_| ShmTransport::connect(UnixStream::connect(&path).unwrap(), WaitPolicy::default()).unwrap())
                .collect();
            let mut buf = Vec::new();
            for round in 0..3u8 {
                for (i, c) in clients.iter_mut().enumerate() {
                    let frame = [round, i as u8, 7];
                    c.send(&frame).unwrap();
                    c.recv_into(&mut buf, Some(Duration::from_secs(5))).unwrap();
                    assert_eq!(buf, frame, "{server:?}: client {i}'s own frame back");
                }
                // A client leaving mid-way does not stop the others' echoes.
                if round == 0 {
                    clients.remove(1);
                }
            }
            drop(clients);
            drop(echo);
            assert!(!path.exists(), "the socket is removed when the server stops");
        }
    }
}
