//! Admission: the bound on connections between accept and a completed hello, one mechanism
//! for the unix socket and the network listeners alike.
//!
//! Each listener has one [`Admission`]. A connection takes a [`Ticket`] as it is accepted
//! and gives it back when its hello was answered (or refused, or it timed out after
//! [`HELLO_TIMEOUT`]); at most [`MAX_PENDING`] tickets are out at once. When a new
//! connection arrives and all are out, **the oldest pending connection is dropped** (its
//! socket shut down, which wakes the thread waiting for its hello within one wait slice,
//! 20 ms) and the new one takes its place.
//!
//! Why evict the oldest rather than refuse the newest: refusing the newest lets anyone who
//! holds [`MAX_PENDING`] idle connections lock every real client out for as long as they
//! keep re-opening them. Evicting the oldest means idle connections only ever push out
//! other idle connections: a real client sends its hello within a millisecond of connecting
//! (its shared-memory segment arrives at once and the hello follows), so it is evicted only
//! if [`MAX_PENDING`] newer connections arrive inside that millisecond. An attacker holding
//! 500 idle connections therefore costs the daemon at most [`MAX_PENDING`] threads and
//! their sockets, each for at most [`HELLO_TIMEOUT`], and a real client still gets in at
//! once.
//!
//! Why not poll pending connections on one thread instead: a local client's hello arrives in
//! its shared-memory ring (woken by a futex), not on the socket, so there is nothing for
//! `poll` to wait on; the session thread would be needed for the wait anyway.
//!
//! Each listener has its own bound, so clients of the network listeners cannot push out
//! local ones, nor the other way round.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Connections allowed between accept and a completed hello at once, per listener.
pub const MAX_PENDING: usize = 64;
/// How long a new connection has for its handshake (TLS, shared memory) and its hello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// One listener's pending connections, oldest first.
#[derive(Default)]
pub struct Admission {
    pending: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    next: u64,
    /// Ticket number and a duplicate of the connection's socket (to shut it down).
    queue: VecDeque<(u64, OwnedFd)>,
}

/// A connection's place among the pending ones; dropping it gives the place back.
pub struct Ticket {
    admission: Arc<Admission>,
    id: u64,
}

impl Admission {
    /// Admits the connection on `socket`, dropping the oldest pending one first if all
    /// [`MAX_PENDING`] places are taken. Fails only if the socket cannot be duplicated
    /// (out of file descriptors): then the caller closes the new connection.
    pub fn enter(self: &Arc<Self>, socket: impl AsFd, peer: &dyn std::fmt::Display) -> std::io::Result<Ticket> {
        let dup = socket.as_fd().try_clone_to_owned()?;
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        while p.queue.len() >= MAX_PENDING {
            let Some((_, oldest)) = p.queue.pop_front() else { break };
            // Its session thread sees the hang-up and lets go of the rest; the socket's last
            // fd closes with that thread.
            let _ = rustix::net::shutdown(&oldest, rustix::net::Shutdown::Both);
            tracing::info!(new = %peer, "{MAX_PENDING} connections waiting for their hello: dropped the oldest");
        }
        p.next += 1;
        let id = p.next;
        p.queue.push_back((id, dup));
        Ok(Ticket { admission: self.clone(), id })
    }

    /// Connections now between accept and hello.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).queue.len()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut p = self.admission.pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = p.queue.iter().position(|(id, _)| *id == self.id) {
            p.queue.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn the_oldest_pending_connection_makes_room_and_tickets_give_places_back() {
        let a = Arc::new(Admission::default());
        let mut pairs = Vec::new();
        let mut tickets = Vec::new();
        for _ in 0..MAX_PENDING {
            let (ours, theirs) = UnixStream::pair().unwrap();
            tickets.push(a.enter(&ours, &"test").unwrap());
            pairs.push((ours, theirs));
        }
        assert_eq!(a.pending(), MAX_PENDING);
        assert!(!gpupool_protocol::transport::hung_up(&pairs[0].1));
        let (ours, theirs) = UnixStream::pair().unwrap();
        let newest = a.enter(&ours, &"test").unwrap();
        assert_eq!(a.pending(), MAX_PENDING);
        // The oldest was shut down (its peer sees the hang-up); the second oldest was not.
        assert!(gpupool_protocol::transport::hung_up(&pairs[0].1));
        assert!(!gpupool_protocol::transport::hung_up(&pairs[1].1));
        assert!(!gpupool_protocol::transport::hung_up(&theirs));
        drop(newest);
        drop(tickets.pop());
        assert_eq!(a.pending(), MAX_PENDING - 2);
        // The evicted ticket's drop finds nothing to remove.
        drop(tickets.remove(0));
        assert_eq!(a.pending(), MAX_PENDING - 2);
        drop(ours);
    }
}
