//! The end of a session, however it ended (Bye, the client closing or dying, a malformed
//! frame, shutdown): everything it owned is freed — memory (and its ledger account),
//! streams, events, modules, its hold on the tenant's contexts — and the time that took
//! is measured and logged.

use super::session::Session;
use crate::call;
use std::time::Instant;

pub fn end(mut s: Session, reason: &str) {
    let t0 = Instant::now();
    let shared = s.shared.clone();
    let cuda = &shared.cuda;
    let mut errors = 0usize;
    let id = s.id;
    let mut note = |r: Result<(), crate::backend::CudaError>| {
        if let Err(e) = r {
            errors += 1;
            tracing::debug!(session = id, "cleanup: {e}");
        }
    };
    let enter = |s: &mut Session, d: u32| s.enter(d).is_ok();
    // Wait for the session's outstanding work before freeing what it uses.
    let n_streams = s.streams.len();
    for (_, (st, d)) in std::mem::take(&mut s.streams) {
        if enter(&mut s, d) {
            let _ = call!(cuda, cuStreamSynchronize(st.0));
            note(call!(cuda, cuStreamDestroy_v2(st.0)));
        }
    }
    let n_events = s.events.len();
    for (_, (e, d)) in std::mem::take(&mut s.events) {
        if enter(&mut s, d) {
            note(call!(cuda, cuEventDestroy_v2(e.0)));
        }
    }
    let n_allocs = s.allocs.len();
    let mut bytes = 0u64;
    for (ptr, a) in std::mem::take(&mut s.allocs) {
        bytes += a.size;
        if enter(&mut s, a.device) {
            note(call!(cuda, cuMemFree_v2(ptr)));
        }
    }
    let n_modules = s.modules.len();
    s.funcs.clear();
    s.globals.clear();
    for (_, (m, d)) in std::mem::take(&mut s.modules) {
        if enter(&mut s, d) {
            note(call!(cuda, cuModuleUnload(m.0)));
        }
    }
    // Leave no context of ours current on this (ending) thread, then let go of them.
    let _ = call!(cuda, cuCtxSetCurrent(std::ptr::null_mut()));
    for (_, tc) in std::mem::take(&mut s.tenant_ctxs) {
        shared.release_ctx(tc);
    }
    let freed = shared.ledger.release_session(s.quota);
    shared
        .sessions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&s.id);
    let took = t0.elapsed();
    tracing::info!(
        session = s.id, pid = s.cred.pid, uid = s.cred.uid, reason,
        allocations = n_allocs, bytes, ledger_freed = ?freed, streams = n_streams, events = n_events, modules = n_modules,
        errors, cleanup_us = took.as_micros() as u64,
        "session end"
    );
}
