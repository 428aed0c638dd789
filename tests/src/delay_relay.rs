//! A TCP relay that adds a fixed one-way delay: every byte is delivered `delay` after it
//! arrived, in both directions, without throttling throughput (bytes are queued, not
//! paced). It stands in for `tc netem delay` on kernels built without `sch_netem`.
//!
//! Used by the remote end-to-end tests (inside a test's network namespace) and by
//! `gpupool-bench remote` (on loopback). It is not a general proxy: one upstream, and
//! its threads live until the process exits.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub struct DelayRelay {
    /// The relay's port on 127.0.0.1 (in its namespace).
    pub port: u16,
}

impl DelayRelay {
    /// Listens on 127.0.0.1 (inside the network namespace `netns`, a name under
    /// `/var/run/netns`, when given) and relays each accepted connection to `upstream`.
    pub fn start(netns: Option<&str>, upstream: &str, delay: Duration) -> Result<DelayRelay, String> {
        let (tx, rx) = mpsc::channel();
        let (netns, upstream) = (netns.map(str::to_string), upstream.to_string());
        std::thread::spawn(move || {
            let listener = netns.as_deref().map_or(Ok(()), enter_netns).and_then(|()| {
                TcpListener::bind("127.0.0.1:0").map_err(|e| format!("relay: binding 127.0.0.1:0: {e}"))
            });
            let listener = match listener.and_then(|l| {
                let port = l.local_addr().map_err(|e| e.to_string())?.port();
                Ok((l, port))
            }) {
                Ok((l, port)) => {
                    let _ = tx.send(Ok(port));
                    l
                }
                Err(why) => {
                    let _ = tx.send(Err(why));
                    return;
                }
            };
            for down in listener.incoming() {
                let Ok(down) = down else { continue };
                let Ok(up) = TcpStream::connect(&upstream) else {
                    // The client sees its connection closed, as it would with no daemon.
                    continue;
                };
                for s in [&down, &up] {
                    let _ = s.set_nodelay(true);
                }
                let (Ok(down2), Ok(up2)) = (down.try_clone(), up.try_clone()) else { continue };
                pipe(down, up2, delay);
                pipe(up, down2, delay);
            }
        });
        let port = rx.recv().map_err(|_| "relay thread ended before listening".to_string())??;
        Ok(DelayRelay { port })
    }
}

/// One direction: a reader thread stamps each chunk with its due time, a writer thread
/// sleeps until then and forwards it. End of stream is passed on as a write shutdown.
fn pipe(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (qtx, qrx) = mpsc::channel::<(Instant, Vec<u8>)>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 256 << 10];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if qtx.send((Instant::now() + delay, buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
    std::thread::spawn(move || {
        for (due, bytes) in qrx {
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            if to.write_all(&bytes).is_err() {
                return;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}

/// Moves the calling thread into the named network namespace.
fn enter_netns(name: &str) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let path = format!("/var/run/netns/{name}");
    let ns = std::fs::File::open(&path).map_err(|e| format!("relay: opening {path}: {e}"))?;
    // SAFETY: setns on a namespace fd we hold open; it affects only this thread.
    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!("relay: setns({path}): {}", std::io::Error::last_os_error()));
    }
    Ok(())
}
