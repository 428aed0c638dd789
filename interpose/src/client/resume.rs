//! Clients that outlive the daemon (issue 23, item 3; README.md, "Checkpoints"): when the
//! daemon goes away, a connection waits up to `GPUPOOL_RECONNECT` seconds (default
//! [`DEFAULT_BOUND`]; 0: fail at once with CUDA_ERROR_DEVICE_UNAVAILABLE, as before) for a
//! daemon that restored its session (`gpupool daemon --restore`), resumes it with the session's
//! id and secret (asked at connect, `SessionKey`), replays what it sent after the checkpoint,
//! and retries the call that found the daemon gone.
//!
//! The restored session is the checkpoint's state, and the daemon says the id of the last
//! request that checkpoint had seen. What the client sent after it is replayed from a
//! journal of the encoded frames, when every one of them is **replayable**: a request whose
//! effect depends only on device state and on bytes in its own frame, so sending it again gives
//! what it gave the first time ([`replayable`]: kernel launches, memsets, device-to-device
//! copies, host-to-device copies whose bytes travel in the frame, device-to-host copies (their
//! bytes were delivered already; the copy is re-run for its ordering only), synchronizations,
//! event records and queries). Anything else (allocations and frees, module loads, stream and
//! event creation, copies through the shared staging area, whose bytes are gone with the old
//! connection, and every other call) cannot be replayed; the call in flight when the daemon
//! went is sent again whatever it is, but if one that cannot be replayed was sent between the
//! checkpoint and it, the session is not resumed, the call fails with CUDA_ERROR_DEVICE_UNAVAILABLE and
//! so does every later one. The journal holds at most [`JOURNAL_BYTES`].
//!
//! Owns the journal and the session's identity. It does not decide when a daemon is gone
//! ([`super::conn`] does) and never resumes a session that is not its own.

use gpupool_protocol::ops::HostSrc;
use gpupool_protocol::{Request, RequestOp};
use std::collections::VecDeque;
use std::time::Duration;

use super::endpoint::Endpoint;

/// `GPUPOOL_RECONNECT` when unset.
pub const DEFAULT_BOUND: Duration = Duration::from_secs(30);
/// The journal's cap: beyond it the oldest frames are dropped, and a checkpoint older than
/// what remains cannot be caught up with.
pub const JOURNAL_BYTES: usize = 64 << 20;
/// Buffers of frames at least this large are kept for reuse when the journal lets them go:
/// glibc serves larger allocations with fresh pages (mmap), faulted in and zeroed each time.
const SPARE_MIN: usize = 128 << 10;
/// A device-to-host copy's reply longer than this comes back as bulk bytes, which a replay
/// does not read: such copies are not replayed.
const INLINE_REPLY_MAX: u32 = 64 << 10;

/// How long to wait for a daemon that has the session (`GPUPOOL_RECONNECT`, seconds).
pub fn bound_from_env() -> Duration {
    match std::env::var("GPUPOOL_RECONNECT") {
        Ok(v) => {
            let v = v.trim().trim_end_matches('s');
            match v.parse::<f64>() {
                Ok(s) if s.is_finite() && s >= 0.0 => Duration::from_secs_f64(s.min(86_400.0)),
                _ => {
                    crate::util::warn(&format!("GPUPOOL_RECONNECT={v:?} is not a number of seconds; using 30"));
                    DEFAULT_BOUND
                }
            }
        }
        Err(_) => DEFAULT_BOUND,
    }
}

/// `GPUPOOL_FAILOVER`: endpoints not used at connect that a reconnect tries, in order, after
/// the connection's own (issue 23, item 5: another host's daemon that restored the checkpoint).
/// Unset or empty: none. One that does not parse is left out with a warning, so a typo costs
/// the failover, not the program.
pub fn failover_from_env() -> Vec<Endpoint> {
    let Ok(v) = std::env::var("GPUPOOL_FAILOVER") else { return Vec::new() };
    let mut eps = Vec::new();
    for text in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match Endpoint::parse(text) {
            Ok(ep) if !eps.contains(&ep) => eps.push(ep),
            Ok(_) => {}
            Err(e) => crate::util::warn(&format!("GPUPOOL_FAILOVER: {text:?} left out: {e}")),
        }
    }
    eps
}

/// Where a reconnect looks for the session, in order: `own` first, then `failover` (without
/// `own` again).
pub fn candidates(own: &Endpoint, failover: &[Endpoint]) -> Vec<Endpoint> {
    std::iter::once(own.clone()).chain(failover.iter().filter(|e| *e != own).cloned()).collect()
}

/// Whether sending `op` again after a restore gives what sending it the first time gave.
pub fn replayable(op: &Request) -> bool {
    use RequestOp as O;
    match op {
        Request::MemcpyHtoD { src, .. } | Request::MemcpyHtoDAsync { src, .. } => matches!(src, HostSrc::Inline(_)),
        Request::MemcpyDtoHInline { len, .. } => *len <= INLINE_REPLY_MAX,
        _ => matches!(
            op.op(),
            O::LaunchKernel
                | O::Memset
                | O::MemsetAsync
                | O::MemcpyDtoD
                | O::MemcpyDtoDAsync
                | O::MemcpyDtoH
                | O::MemcpyDtoHAsync
                | O::CtxSynchronize
                | O::StreamSynchronize
                | O::StreamQuery
                | O::EventRecord
                | O::EventSynchronize
                | O::EventQuery
        ),
    }
}

struct Entry {
    id: u64,
    /// None: a request that cannot be replayed.
    frame: Option<Vec<u8>>,
    /// Bytes of the frame's tail still in the caller's memory ([`Resume::record_head`]).
    missing: usize,
    reply: bool,
}

/// A connection's identity for resuming, and what it sent that a restore may need again.
pub struct Resume {
    pub ep: Endpoint,
    pub session: u64,
    pub secret: [u8; 16],
    pub bound: Duration,
    /// Requests from the last one that cannot be replayed before the newest such (kept: the
    /// newest may be the call that found the daemon gone, which is sent again, not replayed).
    journal: VecDeque<Entry>,
    bytes: usize,
    /// Buffers of frames the journal let go, reused for the next ones: a fresh allocation
    /// per host-to-device chunk (megabytes) cost page faults and zeroing on every copy.
    spare: Vec<Vec<u8>>,
    /// Requests up to this id are not in the journal (sent before it began, dropped for room,
    /// or let go because no checkpoint can need them).
    floor: u64,
    /// The last request the newest checkpoint the daemon told of had seen (or the one this
    /// session was last resumed from): a restore replays from there, so what came after it is
    /// kept; None: no checkpoint yet, so nothing answered can be needed.
    checkpoint: Option<u64>,
}

impl Resume {
    /// `sent`: the id of the last request already sent (none of them journaled).
    pub fn new(ep: Endpoint, session: u64, secret: [u8; 16], bound: Duration, sent: u64) -> Resume {
        Resume {
            ep,
            session,
            secret,
            bound,
            journal: VecDeque::new(),
            bytes: 0,
            spare: Vec::new(),
            floor: sent,
            checkpoint: None,
        }
    }

    /// Request `id` was sent as `parts` (its frame, and a bulk request's bytes).
    pub fn record(&mut self, id: u64, parts: &[&[u8]], replayable: bool, reply: bool) {
        self.record_head(id, parts, 0, replayable, reply);
    }

    /// [`Self::record`] of a request whose last `later` bytes are not copied now: its caller
    /// waits for the reply with the bytes still in its memory, and gives them
    /// ([`Self::keep_tail`]) only if the journal still needs them then. A copy answered before
    /// any checkpoint never is, so the copy into the journal is saved (benches/README.md,
    /// "Issue 24").
    pub fn record_head(&mut self, id: u64, parts: &[&[u8]], later: usize, replayable: bool, reply: bool) {
        if !replayable {
            // What came before the previous unreplayable request can never be needed again.
            if let Some(i) = self.journal.iter().rposition(|e| e.frame.is_none()) {
                for _ in 0..i {
                    self.drop_oldest();
                }
            }
            self.journal.push_back(Entry { id, frame: None, missing: 0, reply });
            return;
        }
        let len: usize = parts.iter().map(|p| p.len()).sum::<usize>() + later;
        if len > JOURNAL_BYTES {
            // It would push everything out, itself included: the same end without the copy.
            while !self.journal.is_empty() {
                self.drop_oldest();
            }
            self.floor = self.floor.max(id);
            return;
        }
        while self.bytes + len > JOURNAL_BYTES && !self.journal.is_empty() {
            self.drop_oldest();
        }
        // A spare at most twice the frame's size, so that a small frame never holds a chunk's buffer.
        let fits = |b: &Vec<u8>| b.capacity() >= len && b.capacity() / 2 <= len;
        let mut frame = match self.spare.iter().position(fits) {
            Some(i) => self.spare.swap_remove(i),
            None => Vec::with_capacity(len),
        };
        frame.clear();
        for p in parts {
            frame.extend_from_slice(p);
        }
        self.bytes += len;
        self.journal.push_back(Entry { id, frame: Some(frame), missing: later, reply });
    }

    /// The bytes [`Self::record_head`] left out of request `id`'s frame, now answered: copied
    /// if the journal still holds it (a checkpoint from before it was told of).
    pub fn keep_tail(&mut self, id: u64, tail: &[u8]) {
        let Ok(i) = self.journal.binary_search_by_key(&id, |e| e.id) else { return };
        let e = &mut self.journal[i];
        if let Some(f) = &mut e.frame
            && e.missing == tail.len()
            && e.missing > 0
        {
            f.extend_from_slice(tail);
            e.missing = 0;
        }
    }

    /// The reply (or asynchronous failure) of request `id` came: the daemon served every request
    /// up to it, so a checkpoint it has not told of yet had seen at least that far.
    pub fn served(&mut self, id: u64) {
        self.let_go_through(self.checkpoint.map_or(id, |c| c.min(id)));
    }

    /// The daemon wrote a checkpoint that had seen the requests up to `seen`: a restore
    /// replays what came after it; what came before is let go (a checkpoint older than the
    /// newest told of cannot be caught up with).
    pub fn checkpointed(&mut self, seen: u64) {
        self.checkpoint = Some(seen);
        self.let_go_through(seen);
    }

    /// Resumed from a checkpoint that had seen the requests up to `seen`: until the daemon tells
    /// of a newer one, a second restore would be of the same checkpoint.
    pub fn resumed_from(&mut self, seen: u64) {
        self.checkpoint = Some(seen);
    }

    fn let_go_through(&mut self, id: u64) {
        while self.journal.front().is_some_and(|e| e.id <= id) {
            let e = self.journal.pop_front().expect("just seen");
            self.release(e);
        }
        self.floor = self.floor.max(id);
    }

    /// Lets the oldest request go: a checkpoint from before it can no longer be caught up with.
    fn drop_oldest(&mut self) {
        if let Some(e) = self.journal.pop_front() {
            self.floor = self.floor.max(e.id);
            self.release(e);
        }
    }

    /// Keeps a dropped frame's buffer for reuse if it is a large one (smaller ones come from the
    /// allocator's arena, already cheap), the spares together within the journal's cap.
    fn release(&mut self, e: Entry) {
        if let Some(f) = e.frame {
            self.bytes -= f.len() + e.missing;
            let spare: usize = self.spare.iter().map(|b| b.capacity()).sum();
            if f.capacity() >= SPARE_MIN && spare + f.capacity() <= JOURNAL_BYTES {
                self.spare.push(f);
            }
        }
    }

    /// Forgets requests from `id` on (the call that found the daemon gone is sent again).
    pub fn forget_from(&mut self, id: u64) {
        while self.journal.back().is_some_and(|e| e.id >= id) {
            let e = self.journal.pop_back().expect("just seen");
            self.release(e);
        }
    }

    /// The frames to send again after a restore whose checkpoint had seen request
    /// `last_request`, up to `upto` (what was sent): (frame, whether it is answered).
    pub fn lost(&self, last_request: u64, upto: u64) -> Result<Vec<(&[u8], bool)>, String> {
        if last_request < self.floor {
            return Err(format!(
                "the checkpoint saw requests up to {last_request}; those up to {} cannot be replayed (no longer \
                 journaled)",
                self.floor
            ));
        }
        let mut out = Vec::new();
        for e in self.journal.iter().filter(|e| e.id > last_request && e.id <= upto) {
            match &e.frame {
                Some(_) if e.missing > 0 => {
                    return Err(format!("request {} after the checkpoint was not kept whole", e.id));
                }
                Some(f) => out.push((f.as_slice(), e.reply)),
                None => {
                    return Err(format!(
                        "the checkpoint saw requests up to {last_request}, but request {} after it cannot be replayed",
                        e.id
                    ));
                }
            }
        }
        let want = upto.saturating_sub(last_request) as usize;
        if out.len() != want {
            return Err(format!(
                "{want} requests were sent after the checkpoint (ids {}..={upto}), {} of them are journaled",
                last_request + 1,
                out.len()
            ));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reconnect_tries_its_own_endpoint_then_the_failover_list_in_order() {
        let ep = |t: &str| Endpoint::parse(t).unwrap();
        let own = ep("tls://10.0.0.1:7443");
        let failover = [ep("tls://10.0.0.2:7443"), own.clone(), ep("tcp://127.0.0.1:9")];
        assert_eq!(candidates(&own, &failover), vec![own.clone(), failover[0].clone(), failover[2].clone()]);
        assert_eq!(candidates(&own, &[]), vec![own]);
    }

    fn resume() -> Resume {
        Resume::new(Endpoint::Unix("/x".into()), 3, [1; 16], DEFAULT_BOUND, 2)
    }

    #[test]
    fn what_came_after_the_checkpoint_is_replayed_when_all_of_it_can_be() {
        let mut r = resume();
        for id in 3..=6 {
            r.record(id, &[&[id as u8]], true, id % 2 == 0);
        }
        let lost = r.lost(4, 6).unwrap();
        assert_eq!(lost, vec![(&[5u8][..], false), (&[6u8][..], true)]);
        assert!(r.lost(6, 6).unwrap().is_empty());
        // A checkpoint from before the journal began: request 2 and earlier are not in it.
        assert!(r.lost(1, 6).unwrap_err().contains("no longer journaled"));
        // An allocation after the checkpoint: stale.
        r.record(7, &[&[7]], false, true);
        r.record(8, &[&[8]], true, true);
        assert!(r.lost(6, 8).unwrap_err().contains("request 7 after it cannot be replayed"));
        assert_eq!(r.lost(7, 8).unwrap().len(), 1);
        r.forget_from(8);
        assert!(r.lost(7, 7).unwrap().is_empty());
        // An allocation in flight when the daemon went: it is sent again, what came before it
        // since the checkpoint is replayed.
        r.record(8, &[&[8]], true, false);
        r.record(9, &[&[9]], false, true);
        r.forget_from(9);
        assert_eq!(
            r.lost(6, 8).unwrap_err(),
            "the checkpoint saw requests up to 6, but request 7 after it cannot be replayed"
        );
        assert_eq!(r.lost(7, 8).unwrap(), vec![(&[8u8][..], false)]);
        // A later unreplayable request drops what came before the previous one only.
        r.record(9, &[&[9]], false, true);
        r.record(10, &[&[10]], true, false);
        r.record(11, &[&[11]], false, true);
        r.forget_from(11);
        assert!(r.lost(6, 10).unwrap_err().contains("no longer journaled"));
        assert_eq!(r.lost(9, 10).unwrap(), vec![(&[10u8][..], false)]);
    }

    #[test]
    fn a_frame_larger_than_the_journal_is_not_copied_and_ends_what_can_be_replayed() {
        let mut r = resume();
        let chunk = vec![7u8; JOURNAL_BYTES / 4];
        for id in 3..=6 {
            r.record(id, &[&[id as u8], &chunk], true, true);
        }
        // Four quarters and their heads exceed the cap by the heads: the oldest went.
        assert!(r.lost(2, 6).is_err_and(|e| e.contains("no longer journaled")));
        assert_eq!(r.lost(3, 6).map(|l| l.len()), Ok(3));
        let huge = vec![9u8; JOURNAL_BYTES + 1];
        r.record(7, &[&[7], &huge], true, true);
        assert!(r.journal.is_empty() && r.bytes == 0, "nothing of the journal is kept");
        assert!(r.lost(6, 7).is_err_and(|e| e.contains("no longer journaled")));
        assert_eq!(r.lost(7, 7).map(|l| l.len()), Ok(0));
        // The frames it pushed out left their buffers for the next ones, within the cap.
        let spare: usize = r.spare.iter().map(|b| b.capacity()).sum();
        assert!(spare > 0 && spare <= JOURNAL_BYTES, "{spare}");
        r.record(8, &[&[8], &chunk], true, false);
        let lost = r.lost(7, 8).expect("request 8 is journaled");
        assert!(lost.len() == 1 && lost[0].0.len() == 1 + chunk.len() && lost[0].0[0] == 8 && !lost[0].1);
    }

    #[test]
    fn what_no_checkpoint_can_need_is_let_go_when_answered() {
        let mut r = resume();
        for id in 3..=6 {
            r.record(id, &[&[id as u8]], true, id == 5);
        }
        // No checkpoint told of: any later one has seen at least the request answered.
        r.served(5);
        assert_eq!(r.journal.iter().map(|e| e.id).collect::<Vec<_>>(), [6]);
        assert_eq!(r.bytes, 1);
        assert!(r.lost(4, 6).is_err_and(|e| e.contains("no longer journaled")));
        assert_eq!(r.lost(5, 6).unwrap(), vec![(&[6u8][..], false)]);
        // A checkpoint that had seen request 6: what comes after it is kept, answered or not.
        r.checkpointed(6);
        assert!(r.journal.is_empty() && r.bytes == 0);
        for id in 7..=9 {
            r.record(id, &[&[id as u8]], true, true);
        }
        r.served(9);
        assert_eq!(r.lost(6, 9).unwrap().len(), 3);
        // A newer checkpoint lets go of what it had seen; an older one can no longer be caught up with.
        r.checkpointed(8);
        assert_eq!(r.lost(8, 9).unwrap(), vec![(&[9u8][..], true)]);
        assert!(r.lost(6, 9).is_err_and(|e| e.contains("no longer journaled")));
        // Resumed from checkpoint 8: what was replayed stays until a newer checkpoint.
        r.resumed_from(8);
        r.served(9);
        assert_eq!(r.lost(8, 9).unwrap().len(), 1);
    }

    #[test]
    fn a_copys_bytes_are_copied_into_the_journal_only_when_a_checkpoint_needs_them() {
        let chunk = vec![5u8; 1 << 20];
        let mut r = resume();
        // Before any checkpoint: answered, let go, never copied.
        r.record_head(3, &[&[3]], chunk.len(), true, true);
        assert_eq!(r.bytes, 1 + chunk.len(), "the cap counts the bytes still to come");
        r.served(3);
        r.keep_tail(3, &chunk);
        assert!(r.journal.is_empty() && r.bytes == 0);
        // After a checkpoint: kept whole once answered.
        r.checkpointed(3);
        r.record_head(4, &[&[4]], chunk.len(), true, true);
        r.record_head(5, &[&[5]], chunk.len(), true, true);
        assert!(r.lost(3, 5).is_err_and(|e| e.contains("request 4 after the checkpoint was not kept whole")));
        r.served(4);
        r.keep_tail(4, &chunk);
        r.keep_tail(5, &chunk[1..]);
        assert!(r.lost(3, 5).is_err_and(|e| e.contains("request 5")), "a tail of another length is refused");
        r.keep_tail(5, &chunk);
        let lost = r.lost(3, 5).unwrap();
        assert_eq!(lost.len(), 2);
        assert!(lost.iter().zip([4u8, 5]).all(|((f, _), id)| f.len() == 1 + chunk.len() && f[0] == id));
        assert_eq!(r.bytes, 2 * (1 + chunk.len()));
    }

    #[test]
    fn replayable_calls_are_the_documented_ones() {
        use gpupool_protocol::ops::{InlineBytes, StagingRegion};
        use gpupool_protocol::{CtxId, DevicePtr};
        let inline = HostSrc::Inline(InlineBytes(vec![1, 2]));
        let staged = HostSrc::Staging(StagingRegion { offset: 0, len: 2 });
        assert!(replayable(&Request::MemcpyHtoD { dst: DevicePtr(1), src: inline }));
        assert!(!replayable(&Request::MemcpyHtoD { dst: DevicePtr(1), src: staged }));
        assert!(replayable(&Request::CtxSynchronize { ctx: CtxId(1) }));
        assert!(!replayable(&Request::MemAlloc { ctx: CtxId(1), bytes: 4 }));
        assert!(!replayable(&Request::MemFree { ptr: DevicePtr(1) }));
        assert!(replayable(&Request::MemcpyDtoHInline { src: DevicePtr(1), len: 64 }));
        assert!(!replayable(&Request::MemcpyDtoHInline { src: DevicePtr(1), len: 1 << 20 }));
    }
}
