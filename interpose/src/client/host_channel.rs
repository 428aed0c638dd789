//! The client's side of the host-function channel: the daemon's graphs reach host nodes on the
//! backend's threads and ask this process to run the application's function there (pool-daemon's
//! `daemon/host_fn.rs` says why that is a second connection, long-polled).
//!
//! Nothing happens until this process first makes a host node on an endpoint: then
//! `HostChannelOpen` on the session mints a secret, a thread of ours connects to the same
//! endpoint, attaches with it, and from then on runs each function the daemon hands it, one at a
//! time, never on an application thread. The call that made the node returns once the channel is
//! attached, so the daemon never reaches a node whose client cannot be asked. A forked child has
//! a session of its own and starts its own channel; the parent's channel socket is closed in the
//! child at once, so the daemon still sees the parent's death.
//!
//! A host function must not call CUDA (NVIDIA: "may result in CUDA_ERROR_NOT_PERMITTED"); here it
//! would wait for the client lock the application's thread holds while it waits for this very
//! function, so such a call fails with CUDA_ERROR_NOT_PERMITTED instead of deadlocking.

use super::Client;
use super::conn::Conn;
use super::endpoint::{self, NetSettings};
use crate::util::{R, log, warn};
use gpupool_protocol::Request;
use gpupool_protocol::ops::answer;
use gpupool_shim::cuda::CUresult;
use std::cell::Cell;
use std::collections::HashSet;
use std::os::raw::c_void;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// How long making the first host node waits for the channel to attach.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(30);

thread_local! {
    /// Set on the channel thread while it runs an application's host function.
    static IN_HOST_FN: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is running a host function (where CUDA calls are not permitted).
pub fn in_host_fn() -> bool {
    IN_HOST_FN.try_with(Cell::get).unwrap_or(false)
}

/// The functions this process named in host nodes: the daemon's answers name one of them or
/// nothing runs.
static KNOWN: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

fn known() -> std::sync::MutexGuard<'static, Option<HashSet<u64>>> {
    KNOWN.lock().unwrap_or_else(|e| e.into_inner())
}

/// The channel sockets of this process, closed in a forked child (whose copies would keep the
/// parent's channel open after the parent died). One slot per endpoint.
static FDS: [AtomicI32; 8] = [const { AtomicI32::new(-1) }; 8];

/// In a forked child (the atfork handler): closes the inherited channel sockets.
pub fn after_fork_child() {
    for slot in &FDS {
        let fd = slot.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: the child's copy of a socket only the parent's (now absent) channel thread
            // used; close is async-signal-safe.
            unsafe { libc::close(fd) };
        }
    }
}

/// Makes sure endpoint `ep`'s session has its channel attached, and that `func` may be run.
pub fn ensure(c: &mut Client, ep: usize, func: u64) -> R<()> {
    known().get_or_insert_with(HashSet::new).insert(func);
    let conn = c.conn_at(ep)?;
    if conn.host_channel.load(Ordering::Acquire) {
        return Ok(());
    }
    let attached = conn.host_channel.clone();
    let answer::HostChannelKey { session, secret } = conn.ask(Request::HostChannelOpen {})?;
    let eps = endpoint::configured().map_err(|why| {
        warn(&why);
        CUresult::CUDA_ERROR_OPERATING_SYSTEM
    })?;
    let endpoint = eps.get(ep).cloned().ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new().name("gpupool-hostfn".into()).spawn(move || {
        let mut settings = NetSettings::from_env();
        match Conn::open_host_channel(&endpoint, &mut settings, session, secret) {
            Ok(conn) => {
                let slot = FDS.get(ep);
                if let Some(s) = slot {
                    s.store(conn.raw_fd(), Ordering::Release);
                }
                attached.store(true, Ordering::Release);
                let _ = tx.send(Ok(()));
                serve(conn, slot);
                // A later host node opens a new channel (if the daemon is still there).
                attached.store(false, Ordering::Release);
            }
            Err(why) => {
                let _ = tx.send(Err(why));
            }
        }
    });
    if let Err(e) = spawned {
        warn(&format!("cannot start the host-function thread: {e}"));
        return Err(CUresult::CUDA_ERROR_OPERATING_SYSTEM);
    }
    match rx.recv_timeout(ATTACH_TIMEOUT) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(why)) => {
            warn(&format!("host functions cannot run: {why}"));
            Err(CUresult::CUDA_ERROR_OPERATING_SYSTEM)
        }
        Err(_) => {
            warn("host functions cannot run: the host-function channel did not attach");
            Err(CUresult::CUDA_ERROR_OPERATING_SYSTEM)
        }
    }
}

/// Runs what the daemon asks for until the channel ends (the daemon left or the session ended).
fn serve(mut conn: Conn, slot: Option<&AtomicI32>) {
    let mut done = 0;
    loop {
        let (call, func, user) = match conn.next_host_call(done) {
            Ok(next) => next,
            Err(e) => {
                log(&format!("host-function channel ended ({})", e.0));
                break;
            }
        };
        if known().as_ref().is_some_and(|k| k.contains(&func)) {
            IN_HOST_FN.with(|f| f.set(true));
            // SAFETY: `func` is a CUhostFn this process named in a host node (checked above),
            // restored to its type; called with its own argument, as CUDA calls it.
            unsafe {
                let f: unsafe extern "C" fn(*mut c_void) = std::mem::transmute(func as usize);
                f(user as usize as *mut c_void);
            }
            IN_HOST_FN.with(|f| f.set(false));
        } else {
            warn(&format!("the daemon asked to run {func:#x}, which no host node of this process names"));
        }
        done = call;
    }
    if let Some(s) = slot {
        s.store(-1, Ordering::Release);
    }
}
