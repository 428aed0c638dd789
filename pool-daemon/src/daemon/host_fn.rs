//! Host functions through the pool: graph host nodes and `cuLaunchHostFunc` on a capturing
//! stream run the CLIENT's function, in the client process, when the backend's graph gets there.
//! This module owns the channel that asks the client to run one and the trampoline the backend
//! calls; the nodes themselves are [`super::graph`]'s.
//!
//! # Where the function runs
//!
//! The backend holds the graph, so a backend thread reaches the host node (the simulator's stream
//! worker; on hardware the driver's callback thread). The node's function there is [`trampoline`],
//! its user data a number naming the client's (function, argument) pair and its session in
//! [`REGISTRY`]. The trampoline hands the pair to that session's channel and waits for the client's
//! answer: the backend's stream stays blocked while the client's function runs, successors start
//! after it returned, and the function runs on the client's channel thread, never the thread that
//! launched the graph (CUDA runs host functions on a driver thread).
//!
//! # The channel: a second connection, long-polled
//!
//! The session's own connection cannot carry the question: the client has one request in flight
//! under its lock, and while the host node waits the application's thread may well sit in a
//! synchronising call on that very connection, or not call at all. So the client opens a second
//! connection the first time it makes a host node, from a thread it starts then (the preloaded
//! library starts no thread and opens no socket before; a forked child has a session of its own
//! and starts its own channel): `HostChannelOpen` on the session mints a 128-bit secret, the thread
//! connects to the same endpoint and sends `HostChannelAttach { session, secret }` instead of a
//! hello, then long-polls with `HostCallNext { done }` ("call `done` returned"), answered by
//! `HostCall { call, func, user }` when a trampoline waits. Requests and replies keep their
//! direction, so this needs no new frame kind and works over every transport (shared memory, TCP,
//! TLS) and container sockets. One channel thread runs a process's host functions one at a time,
//! which CUDA allows ("host functions without a mandated order ... may be serialized").
//!
//! # Nothing waits on a client that cannot answer
//!
//! A channel closes (every waiting trampoline returns, later ones do not wait) when its connection
//! hangs up, fails or breaks the protocol, when its session ends (first thing in the session's
//! cleanup, before streams are synchronised), and when the daemon stops; a waiting trampoline also
//! looks at the session's own socket every [`POLL`]. A trampoline whose session is gone or has no
//! attached channel returns at once without running anything. The number in the backend's node is
//! only a key: a graph outliving its session (work queued on a tenant's shared stream) finds no
//! entry, never a dangling pointer. What a blocked host function holds is its own stream: the
//! simulator runs every stream on a thread of its own, tenants never share a context, and the
//! compute scheduler dispatches a graph with host functions, and what its stream queues behind it,
//! "loose" (charged its measured time, but nobody fences on it and the scheduler's monitor does not
//! wait for it; [`super::compute`]). On hardware the driver may run host functions of different
//! streams on one thread of its own, so there a hung client's host function can delay another host
//! function of the same daemon (never kernels or copies) until the client dies or its session ends.

use super::Shared;
use super::dispatch::{Fail, NOT_PERMITTED, NOT_SUPPORTED, OUT_OF_MEMORY, Result};
use super::session::{Session, reply};
use gpupool_protocol::ops::answer;
use gpupool_protocol::transport::{Transport, TransportError, hung_up};
use gpupool_protocol::{Message, Reply, Request};
use gpupool_shim::cuda::CUDA_HOST_NODE_PARAMS;
use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::os::raw::c_void;
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard};
use std::time::Duration;

/// How often a waiting trampoline or channel looks at the client's sockets and the shutdown flag.
pub const POLL: Duration = Duration::from_millis(100);

/// Distinct (function, argument) pairs one session may name: each is a registry entry until the
/// session ends.
const MAX_HOST_FNS: usize = 1 << 16;

struct Call {
    id: u64,
    func: u64,
    user: u64,
}

#[derive(Default)]
struct State {
    /// Calls waiting for the client, oldest first.
    due: VecDeque<Call>,
    /// The call the client is running.
    running: Option<u64>,
    /// Calls that returned, until their trampoline sees it.
    done: Vec<u64>,
    attached: bool,
    closed: bool,
}

/// One session's host-function channel.
pub struct Channel {
    secret: [u8; 16],
    shared: Arc<Shared>,
    /// The session's own socket (a duplicate): its hang-up closes the channel.
    session_peer: Option<OwnedFd>,
    state: Mutex<State>,
    changed: Condvar,
}

impl Channel {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    fn usable(&self) -> bool {
        let st = self.lock();
        st.attached && !st.closed
    }

    fn session_gone(&self) -> bool {
        self.shared.stopping() || self.session_peer.as_ref().is_some_and(hung_up)
    }

    /// Runs `func(user)` in the client; returns whether it ran (false: the channel closed first).
    fn run(&self, func: u64, user: u64) -> bool {
        let mut st = self.lock();
        if !st.attached || st.closed {
            return false;
        }
        let id = NEXT_CALL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        st.due.push_back(Call { id, func, user });
        self.changed.notify_all();
        loop {
            if let Some(i) = st.done.iter().position(|&d| d == id) {
                st.done.swap_remove(i);
                return true;
            }
            if st.closed {
                return false;
            }
            st = self.changed.wait_timeout(st, POLL).unwrap_or_else(|e| e.into_inner()).0;
            if self.session_gone() {
                st.closed = true;
                self.changed.notify_all();
            }
        }
    }

    /// Serves the attached connection until it ends; returns why.
    fn serve(&self, t: &mut dyn Transport, peer: Option<&OwnedFd>) -> String {
        let mut buf = Vec::new();
        loop {
            match t.recv_into(&mut buf, Some(POLL)) {
                Ok(()) => {}
                Err(TransportError::Timeout) => {
                    if self.lock().closed || self.session_gone() {
                        return "the session ended".into();
                    }
                    continue;
                }
                Err(TransportError::PeerGone) => return "client gone (closed or died)".into(),
                Err(e) => return format!("transport failed: {e}"),
            }
            let (id, done) = match Message::decode(&buf) {
                Ok((Message::Request { id, no_reply: false, op: Request::HostCallNext { done } }, _)) => (id, done),
                Ok((Message::Bye, _)) => return "bye".into(),
                Ok((other, _)) => return format!("malformed: {:?} frame on a host-function channel", other.kind()),
                Err(e) => return format!("malformed frame: {e}"),
            };
            let call = {
                let mut st = self.lock();
                if done != 0 {
                    if st.running != Some(done) {
                        return format!("malformed: call {done} is not the one the client runs");
                    }
                    st.running = None;
                    st.done.push(done);
                    self.changed.notify_all();
                } else if st.running.is_some() {
                    return "malformed: the client asked for a call while running one".into();
                }
                loop {
                    if st.closed {
                        return "the session ended".into();
                    }
                    if let Some(c) = st.due.pop_front() {
                        st.running = Some(c.id);
                        break c;
                    }
                    st = self.changed.wait_timeout(st, POLL).unwrap_or_else(|e| e.into_inner()).0;
                    if self.session_gone() || peer.is_some_and(hung_up) {
                        return "client gone (closed or died)".into();
                    }
                }
            };
            if let Err(e) = reply(t, id, Reply::HostCall { call: call.id, func: call.func, user: call.user }) {
                return format!("sending a host call: {e}");
            }
        }
    }
}

static NEXT_CALL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

#[derive(Default)]
struct Registry {
    /// Trampoline key -> (session, function, argument).
    fns: HashMap<u64, (u64, u64, u64)>,
    /// Session -> its channel.
    channels: HashMap<u64, Arc<Channel>>,
    next: u64,
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Default::default);

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the backend calls for every host node of a client, on its own thread.
extern "C" fn trampoline(key: *mut c_void) {
    let key = key.addr() as u64;
    let r = std::panic::catch_unwind(|| {
        let found = {
            let reg = registry();
            reg.fns.get(&key).map(|&(session, func, user)| (session, func, user, reg.channels.get(&session).cloned()))
        };
        match found {
            // The session ended: nothing of it runs any more.
            None => {}
            Some((session, _, _, None)) => {
                tracing::warn!(session, "a host node ran with no host-function channel open; skipped");
            }
            Some((session, func, user, Some(ch))) if !ch.run(func, user) => {
                tracing::info!(session, func, "a host function was skipped: its client's channel is closed");
            }
            Some(_) => {}
        }
    });
    if r.is_err() {
        tracing::error!("a host-function trampoline panicked");
    }
}

/// What a session's graphs name of host functions.
#[derive(Default)]
pub struct HostFns {
    /// (function, argument) -> trampoline key.
    keys: HashMap<(u64, u64), u64>,
}

impl Session {
    /// `HostChannelOpen`: the secret a second connection attaches with (the same one until a
    /// connection attached; a closed channel is replaced by a new one).
    pub(super) fn open_host_channel(&mut self) -> Result<answer::HostChannelKey> {
        let mut reg = registry();
        if let Some(ch) = reg.channels.get(&self.id) {
            let st = ch.lock();
            if !st.closed {
                if st.attached {
                    return Err(Fail::invalid_value("this session's host-function channel is already attached"));
                }
                return Ok(answer::HostChannelKey { session: self.id, secret: ch.secret });
            }
        }
        let secret = super::ipc::random_secret()?;
        let ch = Channel {
            secret,
            shared: self.shared.clone(),
            session_peer: self.peer.as_ref().and_then(|p| p.try_clone().ok()),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        };
        reg.channels.insert(self.id, Arc::new(ch));
        Ok(answer::HostChannelKey { session: self.id, secret })
    }

    /// The backend's parameters for a host node running `func(user)` in the client: the
    /// trampoline and the pair's key. The client must have attached its channel first.
    pub(super) fn host_params(&mut self, func: u64, user: u64) -> Result<CUDA_HOST_NODE_PARAMS> {
        if func == 0 {
            return Err(Fail::invalid_value("null host function"));
        }
        let mut reg = registry();
        if !reg.channels.get(&self.id).is_some_and(|c| c.usable()) {
            return Err(Fail::new(
                NOT_SUPPORTED,
                "host functions need the session's host-function channel attached first (HostChannelOpen, then \
                 HostChannelAttach on a second connection)",
            ));
        }
        let key = match self.graphs.host.keys.get(&(func, user)) {
            Some(&k) => k,
            None => {
                if self.graphs.host.keys.len() >= MAX_HOST_FNS {
                    return Err(Fail::new(
                        OUT_OF_MEMORY,
                        format!("a session names at most {MAX_HOST_FNS} host function and argument pairs"),
                    ));
                }
                reg.next += 1;
                let k = reg.next;
                reg.fns.insert(k, (self.id, func, user));
                self.graphs.host.keys.insert((func, user), k);
                k
            }
        };
        Ok(CUDA_HOST_NODE_PARAMS { fn_: Some(trampoline), userData: std::ptr::without_provenance_mut(key as usize) })
    }
}

/// `HostChannelAttach`, the first frame of a connection: attaches it to the session whose secret
/// it names (answered); the caller then serves it with [`serve`] once its hello slot is given back.
pub fn attach(
    t: &mut dyn Transport,
    id: u64,
    session: u64,
    secret: [u8; 16],
) -> std::result::Result<Arc<Channel>, String> {
    let ch = registry().channels.get(&session).cloned();
    // Compared in full whatever differs, so the time taken says nothing about the secret.
    let matches = |c: &Channel| c.secret.iter().zip(&secret).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
    let refused = match &ch {
        Some(c) if matches(c) => {
            let mut st = c.lock();
            if st.attached || st.closed {
                Some("the session's host-function channel is attached or closed")
            } else {
                st.attached = true;
                None
            }
        }
        _ => Some("no session has this host-function channel secret"),
    };
    match (refused, ch) {
        (None, Some(c)) => {
            reply(t, id, Reply::Ok {}).map_err(|e| {
                c.close();
                format!("answering a host-function channel: {e}")
            })?;
            tracing::debug!(session, "host-function channel attached");
            Ok(c)
        }
        (why, _) => {
            let why = why.unwrap_or("no channel").to_string();
            let _ = reply(t, id, Reply::Error { code: NOT_PERMITTED, message: why.clone() });
            Err(why)
        }
    }
}

/// Serves an attached channel's connection until it, or its session, ends; then closes it.
pub fn serve(ch: &Channel, t: &mut dyn Transport, peer: Option<&OwnedFd>) -> String {
    let why = ch.serve(t, peer);
    ch.close();
    why
}

/// The session's end, before anything is freed: its channel closes (trampolines waiting on it
/// return, so the streams it blocked drain) and its keys go.
pub fn end_session(session: u64) {
    let ch = {
        let mut reg = registry();
        reg.fns.retain(|_, f| f.0 != session);
        reg.channels.remove(&session)
    };
    if let Some(ch) = ch {
        ch.close();
    }
}
