//! Freeing what a session owns: everything when the session ends, however it ended (Bye,
//! the client closing or dying, a malformed frame, shutdown), or what one client context
//! owned when the client destroys or resets it. Memory is released from the ledger as it
//! is freed; then the daemon's heap is trimmed ([`super::malloc::trim`]), so what the session
//! used leaves with it. The end of a session is logged with what was freed and how long the
//! freeing (`cleanup_us`) and the trim (`trim_us`) took.

use super::session::Session;
use crate::call;
use gpupool_protocol::{CtxId, EventId, ModuleId, StreamId};
use std::time::Instant;

/// A backend object of a session, for recording which client context created it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Handle {
    Alloc(u64),
    Stream(StreamId),
    Event(EventId),
    Module(ModuleId),
}

/// What one [`Session::free_owned`] freed.
#[derive(Debug, Default)]
pub struct Freed {
    pub allocations: usize,
    pub bytes: u64,
    pub streams: usize,
    pub events: usize,
    pub modules: usize,
    /// cuBLAS / cuBLASLt handles.
    pub blas_handles: usize,
    /// VMM mappings, allocation handle references and reserved ranges (at session end).
    pub vmm_mappings: usize,
    pub vmm_handles: usize,
    pub vmm_ranges: usize,
    /// CUDA arrays and mipmapped arrays.
    pub arrays: usize,
    /// Graphs and instantiated graphs (at session end).
    pub graphs: usize,
    /// Backend calls that failed (a poisoned context, say); the ledger is released anyway.
    pub errors: usize,
}

impl Session {
    /// Frees the objects created through client context `only` (all of them: `None`).
    /// Streams are synchronised first, so no queued work touches freed memory.
    pub fn free_owned(&mut self, only: Option<CtxId>) -> Freed {
        // BLAS handles first: before the memory they may use as workspace goes.
        let mut f = Freed { blas_handles: self.free_blas(only), ..Default::default() };
        // Texture objects before the memory and arrays they read; surfaces and arrays
        // before the memory (a queued copy from an array to memory finishes first).
        self.free_textures(only);
        f.arrays = self.free_arrays(only);
        // NPU executors before the memory their operands name.
        self.free_npu_execs(only);
        let owner = std::mem::take(&mut self.owner);
        let mine = |h: Handle| only.is_none_or(|c| owner.get(&h) == Some(&c));
        let shared = self.shared.clone();
        let cuda = &shared.cuda;
        let id = self.id;
        let note = |r: Result<(), crate::backend::CudaError>, errors: &mut usize| {
            if let Err(e) = r {
                *errors += 1;
                tracing::debug!(session = id, "freeing: {e}");
            }
        };
        let streams: Vec<_> = self.streams.keys().copied().filter(|&k| mine(Handle::Stream(k))).collect();
        for k in streams {
            let (st, d) = self.streams.remove(&k).expect("listed");
            self.legacy.forget(k);
            f.streams += 1;
            if self.is_npu(d) {
                f.errors += usize::from(!self.npu_release_stream(st, d));
            } else if self.enter(d).is_ok() {
                let _ = call!(cuda, cuStreamSynchronize(st.0));
                note(call!(cuda, cuStreamDestroy_v2(st.0)), &mut f.errors);
            }
        }
        // The session's default streams are its own, not a client context's: they go with it.
        let defaults = if only.is_none() { self.legacy.clear() } else { Vec::new() };
        for (d, st) in defaults {
            if self.enter(d).is_ok() {
                let _ = call!(cuda, cuStreamSynchronize(st.0));
                note(call!(cuda, cuStreamDestroy_v2(st.0)), &mut f.errors);
            }
        }
        let events: Vec<_> = self.events.keys().copied().filter(|&k| mine(Handle::Event(k))).collect();
        for k in events {
            let (e, d) = self.events.remove(&k).expect("listed");
            f.events += 1;
            if self.is_npu(d) {
                f.errors += usize::from(self.npu_event(d, e, super::npu::EventOp::Destroy).is_err());
            } else if super::ipc::release_event(e.0 as usize) && self.enter(d).is_ok() {
                note(call!(cuda, cuEventDestroy_v2(e.0)), &mut f.errors);
            }
        }
        let allocs: Vec<_> = self.allocs.keys().copied().filter(|&k| mine(Handle::Alloc(k))).collect();
        let mut synced = std::collections::BTreeSet::new();
        for ptr in allocs {
            let a = self.allocs.remove(&ptr).expect("listed");
            f.allocations += 1;
            f.bytes += a.size;
            if self.is_npu(a.device) {
                f.errors += usize::from(!self.npu_release_alloc(ptr, a.device));
            } else if self.enter(a.device).is_ok() {
                // Work still queued on the default stream may use this memory.
                if synced.insert(a.device) {
                    let _ = call!(cuda, cuCtxSynchronize());
                }
                if shared.evict.owns(ptr) {
                    f.errors += usize::from(super::evict::free(&shared, ptr).is_err());
                } else if shared.restored.owns(ptr) {
                    f.errors += usize::from(super::restore::free(&shared, ptr).is_err());
                } else {
                    note(call!(cuda, cuMemFree_v2(ptr)), &mut f.errors);
                }
            }
            if let Err(e) = shared.ledger.release(&self.quota, a.device, a.size) {
                tracing::error!(session = self.id, "ledger out of step: {e}");
            }
        }
        let modules: Vec<_> = self.modules.keys().copied().filter(|&k| mine(Handle::Module(k))).collect();
        for k in modules {
            let (m, d) = self.modules.remove(&k).expect("listed");
            f.modules += 1;
            self.funcs.retain(|_, func| func.module != k);
            self.globals.retain(|_, g| g.1 != k);
            if self.enter(d).is_ok() {
                note(call!(cuda, cuModuleUnload(m.0)), &mut f.errors);
            }
        }
        self.owner = owner;
        self.owner.retain(|&h, _| match h {
            Handle::Alloc(p) => self.allocs.contains_key(&p),
            Handle::Stream(s) => self.streams.contains_key(&s),
            Handle::Event(e) => self.events.contains_key(&e),
            Handle::Module(m) => self.modules.contains_key(&m),
        });
        f
    }
}

pub fn end(s: Session, reason: &str) {
    let t0 = Instant::now();
    let shared = s.shared.clone();
    let (id, cred, remote, tenant) = (s.id, s.cred, s.remote, s.tenant_name.clone());
    let (freed, regions) = release(s);
    shared.sessions.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    shared.evict.session_ended(id);
    let took = t0.elapsed();
    let trim = super::malloc::trim();
    tracing::info!(
        session = id, pid = cred.pid, uid = cred.uid, remote = ?remote, tenant = %tenant, reason,
        allocations = freed.allocations, bytes = freed.bytes, streams = freed.streams, events = freed.events,
        modules = freed.modules, blas_handles = freed.blas_handles, vmm_mappings = freed.vmm_mappings,
        vmm_handles = freed.vmm_handles, vmm_ranges = freed.vmm_ranges, graphs = freed.graphs, arrays = freed.arrays, regions, errors = freed.errors, cleanup_us = took.as_micros() as u64,
        trim_us = trim.as_micros() as u64,
        "session end"
    );
}

/// Frees everything `s` owned and gives its quota back; the session's own tables go with
/// it when this returns, before [`end`] trims the heap.
fn release(mut s: Session) -> (Freed, usize) {
    let shared = s.shared.clone();
    // Host functions first: a stream blocked in one of the client's host functions drains once
    // its channel is closed, so the synchronisations below cannot wait on a dead client.
    super::host_fn::end_session(s.id);
    // Before its memory goes: no other session may open or use it any more.
    super::ipc::revoke_session(s.id);
    // Graphs first: they may name the memory, modules and host regions freed below.
    let graphs = s.free_graphs();
    let mut freed = s.free_owned(None);
    freed.graphs = graphs;
    // After the streams were synchronised and destroyed: nothing queued uses the mappings.
    (freed.vmm_mappings, freed.vmm_handles, freed.vmm_ranges) = s.free_vmm();
    let regions = s.free_regions();
    // Leave no context of ours current on this (ending) thread, then let go of them.
    let _ = call!(shared.cuda, cuCtxSetCurrent(std::ptr::null_mut()));
    for (d, e) in std::mem::take(&mut s.stream_tails) {
        if let Some(tc) = s.tenant_ctxs.get(&d) {
            tc.give_events(&[e]);
        }
    }
    for (d, tc) in std::mem::take(&mut s.tenant_ctxs) {
        shared.compute.leave(d, s.id);
        shared.release_ctx(tc);
    }
    let left = shared.ledger.release_session(s.quota);
    if !left.is_empty() {
        tracing::error!(session = s.id, "ledger held more than the session's allocations: {left:?}");
    }
    (freed, regions)
}
