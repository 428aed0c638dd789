//! One single-producer single-consumer byte ring of length-prefixed frames, and the
//! spin-yield-futex wait both ends use.
//!
//! A record is a 4-byte little-endian length and the frame's bytes, written at
//! `pos % capacity` and split in two where it wraps. The producer copies the record in,
//! then publishes `tail` (Release); the consumer reads `tail` (Acquire), copies the
//! record out, then publishes `head` (Release). Each end keeps its own position locally
//! and only reads the other's, checking it: a peer that scribbles on the indices gets
//! `Corrupt`, never an out-of-bounds access.
//!
//! Each end also keeps the other's index as it last read it, and reads it again only when
//! that copy has run out (no frame left before it, no room before it): the other end writes
//! its index at every frame, so a read per frame is a cache line moving between cores per
//! frame, where a pipeline of frames (asynchronous launches running ahead of the daemon)
//! needs one per batch. A stale copy is safe: indices only grow, so it understates what
//! was published and what was freed.

use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

use super::layout::{RingControl, RingLayout, WaitWords};
use crate::transport::TransportError;
use crate::transport::sys::{self, Mapping};

const LEN: u64 = 4;
/// A length no frame has (frames are shorter than a ring, at most 1 GiB): the rest of this lap
/// of the ring holds no frame, the next one starts at the ring's first byte.
const REWIND: u32 = u32::MAX;
/// How far into an empty ring the producer writes before going back to its start: 128
/// connections' rings then stay within a few MiB, inside the last-level cache.
const REWIND_AFTER: u64 = 16 << 10;
/// While a rewind could be due but the consumer's head as last read says the ring is not
/// empty, the producer reads it again only after writing this much more (at most a quarter
/// of the distance at which rewinds begin): back-and-forth traffic then rewinds at most this
/// much later than at the first chance, and a pipeline that keeps the ring busy (which never
/// rewinds) reads the head once per ten or so launch frames instead of every one.
const HEAD_REREAD: u64 = 1 << 10;

/// The ring control block at `offset` of `map`; `offset` was validated at attach (inside
/// the mapping, 64-byte aligned).
pub(crate) fn control(map: &Mapping, offset: usize) -> &RingControl {
    assert!(offset.is_multiple_of(64) && offset + size_of::<RingControl>() <= map.len());
    // SAFETY: in bounds and aligned (asserted); RingControl is ShmSafe (atomics only,
    // valid for any bit pattern), so a shared reference is sound even while the peer
    // writes it; the reference borrows `map`, which keeps the range mapped.
    unsafe { &*map.as_ptr().add(offset).cast::<RingControl>() }
}

pub(crate) struct RingEnd {
    map: Arc<Mapping>,
    control_offset: usize,
    data_offset: usize,
    cap: u64,
    /// Our own position: `tail` for the producer, `head` for the consumer.
    pos: u64,
    /// The other end's position as last read: `head` for the producer, `tail` for the
    /// consumer. Never ahead of the real one.
    peer: u64,
    /// Producer: our position when `peer` was last read.
    peer_read_at: u64,
}

impl RingEnd {
    /// An end of the ring at `ring` in `map`. The caller validated `ring` against the
    /// mapping (`SegmentLayout::validate`): inside it, aligned, power-of-two capacity.
    pub(crate) fn new(map: Arc<Mapping>, ring: &RingLayout, producer: bool) -> Self {
        let mut end = Self {
            map,
            control_offset: ring.control_offset as usize,
            data_offset: ring.data_offset as usize,
            cap: ring.capacity,
            pos: 0,
            peer: 0,
            peer_read_at: 0,
        };
        let c = end.ctrl();
        let (tail, head) = (c.tail.0.load(Ordering::Acquire), c.head.0.load(Ordering::Acquire));
        (end.pos, end.peer) = if producer { (tail, head) } else { (head, tail) };
        end.peer_read_at = end.pos;
        end
    }

    pub(crate) fn ctrl(&self) -> &RingControl {
        control(&self.map, self.control_offset)
    }

    pub(crate) fn control_offset(&self) -> usize {
        self.control_offset
    }

    /// Where in the ring's bytes this end reads or writes next.
    #[cfg(test)]
    pub(crate) fn offset(&self) -> u64 {
        self.pos & (self.cap - 1)
    }

    /// Largest frame this ring can ever hold.
    pub(crate) fn max_frame(&self) -> usize {
        (self.cap - LEN) as usize
    }

    fn copy_in(&self, pos: u64, src: &[u8]) {
        let idx = (pos & (self.cap - 1)) as usize;
        let first = src.len().min(self.cap as usize - idx);
        // SAFETY: idx < cap and first <= cap - idx, and src.len() - first <= cap (a
        // record never exceeds the ring), so both copies stay inside the data region,
        // which lies inside the live mapping; src is our own memory, disjoint from it.
        unsafe {
            let data = self.map.as_ptr().add(self.data_offset);
            std::ptr::copy_nonoverlapping(src.as_ptr(), data.add(idx), first);
            std::ptr::copy_nonoverlapping(src.as_ptr().add(first), data, src.len() - first);
        }
    }

    fn copy_out(&self, pos: u64, dst: &mut [u8]) {
        let idx = (pos & (self.cap - 1)) as usize;
        let first = dst.len().min(self.cap as usize - idx);
        // SAFETY: as in copy_in, with dst.len() <= cap checked by the caller.
        unsafe {
            let data = self.map.as_ptr().add(self.data_offset);
            std::ptr::copy_nonoverlapping(data.add(idx), dst.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(data, dst.as_mut_ptr().add(first), dst.len() - first);
        }
    }

    /// Producer: appends `frame` if it fits now. `frame.len() <= max_frame()`.
    pub(crate) fn try_push(&mut self, frame: &[u8]) -> Result<bool, TransportError> {
        let need = LEN + frame.len() as u64;
        let at = self.pos & (self.cap - 1);
        let rewind_from = self.cap.min(2 * REWIND_AFTER) / 2;
        let may_rewind = at >= rewind_from && need <= at && at + LEN <= self.cap;
        let mut used = self.pos.wrapping_sub(self.peer);
        if self.cap.saturating_sub(used) < need
            || (may_rewind && used != 0 && self.pos.wrapping_sub(self.peer_read_at) >= HEAD_REREAD.min(rewind_from / 4))
        {
            let head = self.ctrl().head.0.load(Ordering::Acquire);
            used = self.pos.wrapping_sub(head);
            if used > self.cap {
                return Err(TransportError::Corrupt(format!("ring head {head} is ahead of tail {}", self.pos)));
            }
            (self.peer, self.peer_read_at) = (head, self.pos);
        }
        if used == 0 && may_rewind {
            // Empty (a head as last read that equals our position is the real one: it never
            // passes us), past the first REWIND_AFTER bytes (or half the ring), and the frame
            // fits before the write position: mark the rest of this lap skipped and write at the
            // ring's start. Back-and-forth traffic then keeps to the ring's first bytes instead
            // of walking through all of it, a fresh line per frame, which with many connections
            // is a miss to memory on both sides per frame. The marker and the frame do not
            // overlap (need <= at); until the consumer passes the marker the skipped bytes count
            // as in use ((cap - at) + need <= cap), so what the producer may put in flight then
            // shrinks to `at - need`, at least REWIND_AFTER less one frame.
            self.copy_in(self.pos, &REWIND.to_le_bytes());
            self.pos = self.pos - at + self.cap;
        } else if self.cap - used < need {
            return Ok(false);
        }
        self.copy_in(self.pos, &(frame.len() as u32).to_le_bytes());
        self.copy_in(self.pos + LEN, frame);
        self.pos += need;
        let c = self.ctrl();
        c.tail.0.store(self.pos, Ordering::Release);
        wake_if_waiting(&c.data_wait.0);
        Ok(true)
    }

    /// Consumer: takes the next frame into `buf` if there is one.
    pub(crate) fn try_pop(&mut self, buf: &mut Vec<u8>) -> Result<bool, TransportError> {
        let len = loop {
            let mut avail = self.peer.wrapping_sub(self.pos);
            if avail == 0 {
                // What was read last is used up: has the producer published more since?
                self.peer = self.ctrl().tail.0.load(Ordering::Acquire);
                avail = self.peer.wrapping_sub(self.pos);
                if avail == 0 {
                    return Ok(false);
                }
            }
            if avail > self.cap || avail < LEN {
                return Err(TransportError::Corrupt(format!("ring tail {} vs head {}", self.peer, self.pos)));
            }
            let mut len = [0u8; 4];
            self.copy_out(self.pos, &mut len);
            let len = u32::from_le_bytes(len);
            if len != REWIND {
                break len as u64;
            }
            // The producer went back to the ring's start (see try_push): so do we. Each
            // skip moves towards `tail`; one past it is caught as corrupt above.
            let at = self.pos & (self.cap - 1);
            if at + LEN > self.cap {
                return Err(TransportError::Corrupt(format!("a skip marker across the ring's end at {at}")));
            }
            self.pos = self.pos - at + self.cap;
        };
        let avail = self.peer.wrapping_sub(self.pos);
        if len > avail - LEN {
            return Err(TransportError::Corrupt(format!("frame length {len} > {} published bytes", avail - LEN)));
        }
        buf.clear();
        buf.resize(len as usize, 0);
        self.copy_out(self.pos + LEN, buf);
        self.pos += LEN + len;
        let c = self.ctrl();
        c.head.0.store(self.pos, Ordering::Release);
        wake_if_waiting(&c.space_wait.0);
        Ok(true)
    }

    /// Wakes whoever sleeps on either of this ring's words, unconditionally (close).
    pub(crate) fn wake_all(&self) {
        let c = self.ctrl();
        for w in [&c.data_wait.0, &c.space_wait.0] {
            w.seq.fetch_add(1, Ordering::Release);
            sys::futex_wake(&w.seq);
        }
    }
}

/// After publishing: wake the peer only if it announced that it sleeps. The SeqCst fence
/// pairs with the one in `wait` (store flag; fence; re-check): either the waiter sees our
/// publication, or we see its flag. No syscall on the hot path.
fn wake_if_waiting(w: &WaitWords) {
    fence(Ordering::SeqCst);
    if w.waiting.load(Ordering::Relaxed) != 0 {
        w.seq.fetch_add(1, Ordering::Release);
        sys::futex_wake(&w.seq);
    }
}

/// How an end waits: spin, then yield the CPU for a while, then sleep on the futex in slices
/// of at most `slice`, checking the peer's liveness between slices.
///
/// The yield phase is for more runnable threads than cores (many clients, each with its
/// daemon session thread): there the peer is often ready to run but waiting for a core, often
/// this one, and neither spinning (which keeps the core from it) nor a futex sleep (a wake-up
/// per round trip, ~20-40 us on a VM) lets it answer soon; `sched_yield` hands the core over
/// at once. With a core to spare a yield returns at once and the phase is a spin in all but
/// name, bounded in time rather than in iterations because a yield may last a time slice.
///
/// A waiter that begins yielding notes its CPU in its wait words (`yielding_on`): the other
/// end, when told to ([`WaitPolicy::leave_shared_core`]), compares it with its own to notice
/// that the two ping-pong on one core.
///
/// The spin budget adapts between `spin` and `spin_max` (per direction): a wait that had
/// to sleep but was woken within `adapt_window` doubles it (a longer spin would have
/// caught the peer; this breaks the convoy where each side's spin ends just before the
/// other, itself just woken, answers, so that every round trip pays two wake-ups); a
/// wait that slept longer halves it. `spin_max == spin` turns adaptation off.
#[derive(Clone, Copy, Debug)]
pub struct WaitPolicy {
    pub spin: u32,
    pub spin_max: u32,
    pub adapt_window: Duration,
    /// How long to keep yielding after the spin before sleeping (zero: straight to the futex).
    pub yield_for: Duration,
    pub slice: Duration,
    /// Move this thread to another core after a run of waits that each ended only once a yield
    /// had handed the core to the peer ([`WaitState`]). For the daemon's side: a client and
    /// its session thread woken onto one core otherwise ping-pong there at ~10 us a call (two
    /// spins in turn) for thousands of calls while the other core idles. Never for a client:
    /// moving it means rewriting its thread's CPU affinity, which is the application's.
    pub leave_shared_core: bool,
}

/// A yield that lasted longer than this gave the core to another thread.
const GAVE_CORE: Duration = Duration::from_micros(2);
/// This many waits in a row, each answered right after a yield that gave the core to the peer
/// (the peer began yielding on this thread's core), mean that the two share a core.
const SHARED_CORE_RUN: u32 = 8;
/// A move helped if this many waits in a row were then answered within the spin (the peer on
/// another core, running). With more runnable threads than cores that seldom happens, and
/// moving does not help: a core given up is taken by another thread.
const HELPED_RUN: u32 = 8;
/// After a move that did not help, the next waits at least this long, doubling up to
/// [`MOVE_BACKOFF_MAX`] while moves keep not helping (a move costs ~100 us here: two
/// affinity calls and a migration).
const MOVE_BACKOFF_MIN: Duration = Duration::from_millis(1);
const MOVE_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// One direction's waiting state: the adapted spin budget, and whether the peer seems to share
/// this thread's core ([`WaitPolicy::leave_shared_core`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct WaitState {
    budget: u32,
    /// Waits in a row that ended only once the peer had the core.
    shared_core_waits: u32,
    /// Waits in a row answered within the spin.
    spin_answers: u32,
    last_move: Option<Instant>,
    /// Whether [`HELPED_RUN`] waits in a row were answered in the spin since the last move.
    helped: bool,
    /// The least time between the last move and the next (zero while moves help).
    backoff: Duration,
}

impl WaitState {
    pub(crate) fn new(policy: WaitPolicy) -> WaitState {
        WaitState {
            budget: policy.spin,
            shared_core_waits: 0,
            spin_answers: 0,
            last_move: None,
            helped: false,
            backoff: Duration::ZERO,
        }
    }

    fn answered_in_spin(&mut self) {
        self.shared_core_waits = 0;
        self.spin_answers = self.spin_answers.saturating_add(1);
        if self.spin_answers >= HELPED_RUN {
            self.helped = true;
        }
    }

    /// A wait ended right after a yield that took `took`; `peer`: the words the peer waits on.
    fn answered_after_yield(&mut self, policy: WaitPolicy, took: Duration, peer: Option<&WaitWords>) {
        self.spin_answers = 0;
        if !policy.leave_shared_core {
            return;
        }
        let here = sys::current_cpu() + 1;
        let peer_here = peer.is_some_and(|p| p.yielding_on.load(Ordering::Relaxed) == here);
        if self.should_move(took >= GAVE_CORE && peer_here, Instant::now()) {
            sys::leave_this_core();
        }
    }

    /// Counts a wait that ended only once the peer, on this core, had it (`shared`), or ends
    /// the run; true when this thread should move now (the move is then counted as made).
    fn should_move(&mut self, shared: bool, now: Instant) -> bool {
        if !shared {
            self.shared_core_waits = 0;
            return false;
        }
        self.shared_core_waits += 1;
        if self.shared_core_waits < SHARED_CORE_RUN {
            return false;
        }
        self.shared_core_waits = 0;
        if let Some(last) = self.last_move {
            let backoff =
                if self.helped { Duration::ZERO } else { (self.backoff * 2).clamp(MOVE_BACKOFF_MIN, MOVE_BACKOFF_MAX) };
            if now.saturating_duration_since(last) < backoff {
                return false;
            }
            self.backoff = backoff;
        }
        self.last_move = Some(now);
        self.helped = false;
        true
    }
}

/// Runs `attempt` until it yields a value: spinning up to `*budget` times (adapted as
/// described on [`WaitPolicy`]), yielding for `policy.yield_for`, then sleeping on `w`.
/// `timeout` counts from the end of the spin: a frame that is already there (most of them,
/// under load) then costs no clock read.
/// `gone(deep)` says whether the peer is gone (`deep`: also ask the kernel, a syscall; only
/// after a sleep slice). A gone peer gets one last `attempt` (to deliver what it sent before
/// leaving), then `PeerGone`.
pub(crate) fn wait<T>(
    w: &WaitWords,
    peer: Option<&WaitWords>,
    policy: WaitPolicy,
    state: &mut WaitState,
    timeout: Option<Duration>,
    mut attempt: impl FnMut() -> Result<Option<T>, TransportError>,
    mut gone: impl FnMut(bool) -> bool,
) -> Result<T, TransportError> {
    for i in 0..state.budget {
        if let Some(v) = attempt()? {
            state.answered_in_spin();
            return Ok(v);
        }
        // A long spin still notices a clean close (one atomic load, no syscall).
        if i % 1024 == 1023 && gone(false) {
            return attempt()?.ok_or(TransportError::PeerGone);
        }
        std::hint::spin_loop();
    }
    let deadline = timeout.map(|t| Instant::now() + t);
    if !policy.yield_for.is_zero() {
        let until = Instant::now() + policy.yield_for;
        let until = deadline.map_or(until, |d| d.min(until));
        let mut yielded_at: Option<Instant> = None;
        w.yielding_on.store(sys::current_cpu() + 1, Ordering::Relaxed);
        loop {
            if let Some(v) = attempt()? {
                if let Some(at) = yielded_at {
                    state.answered_after_yield(policy, at.elapsed(), peer);
                }
                return Ok(v);
            }
            let now = Instant::now();
            if now >= until {
                break;
            }
            yielded_at = Some(now);
            std::thread::yield_now();
        }
    }
    let budget = &mut state.budget;
    let slept_at = Instant::now();
    let mut slept = false;
    let got = |budget: &mut u32| {
        let (lo, hi) = (policy.spin, policy.spin_max.max(policy.spin));
        let next =
            if slept_at.elapsed() <= policy.adapt_window { budget.saturating_mul(2).max(1) } else { *budget / 2 };
        *budget = next.min(hi).max(lo); // lo <= hi: never panics, unlike clamp
    };
    loop {
        if let Some(v) = attempt()? {
            got(budget);
            return Ok(v);
        }
        if gone(slept) {
            return attempt()?.ok_or(TransportError::PeerGone);
        }
        let mut slice = policy.slice;
        if let Some(d) = deadline {
            let now = Instant::now();
            if now >= d {
                return Err(TransportError::Timeout);
            }
            slice = slice.min(d - now);
        }
        let seq = w.seq.load(Ordering::Acquire);
        w.waiting.store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if let Some(v) = attempt()? {
            w.waiting.store(0, Ordering::Relaxed);
            got(budget);
            return Ok(v);
        }
        sys::futex_wait(&w.seq, seq, slice);
        w.waiting.store(0, Ordering::Relaxed);
        slept = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_of_shared_waits(s: &mut WaitState, now: Instant) -> bool {
        (0..SHARED_CORE_RUN).map(|_| s.should_move(true, now)).fold(false, |_, moved| moved)
    }

    #[test]
    fn a_run_of_waits_on_a_shared_core_moves_and_moves_that_do_not_help_back_off() {
        let mut s = WaitState::new(WaitPolicy { leave_shared_core: true, ..WaitPolicy::default() });
        let t0 = Instant::now();
        for _ in 0..SHARED_CORE_RUN - 1 {
            assert!(!s.should_move(true, t0), "fewer than a run: no move");
        }
        assert!(!s.should_move(false, t0), "a wait on separate cores ends the run");
        assert!(run_of_shared_waits(&mut s, t0), "a whole run moves");
        // Nothing answered in the spin since: the move did not help, the next waits 1 ms, then 2...
        assert!(!run_of_shared_waits(&mut s, t0 + Duration::from_micros(900)));
        assert!(run_of_shared_waits(&mut s, t0 + Duration::from_millis(1)));
        let t1 = t0 + Duration::from_millis(1);
        assert!(!run_of_shared_waits(&mut s, t1 + Duration::from_micros(1900)));
        assert!(run_of_shared_waits(&mut s, t1 + Duration::from_millis(2)));
        // A move followed by a run of waits answered in the spin helped: the next may come at once.
        let t2 = t1 + Duration::from_millis(2);
        for _ in 0..HELPED_RUN {
            s.answered_in_spin();
        }
        assert!(run_of_shared_waits(&mut s, t2 + Duration::from_micros(10)));
    }

    #[test]
    fn the_backoff_stops_growing_at_its_cap() {
        let mut s = WaitState::new(WaitPolicy { leave_shared_core: true, ..WaitPolicy::default() });
        let mut t = Instant::now();
        assert!(run_of_shared_waits(&mut s, t));
        for _ in 0..20 {
            t += MOVE_BACKOFF_MAX;
            assert!(run_of_shared_waits(&mut s, t), "at most MOVE_BACKOFF_MAX apart, however many failed");
        }
        assert_eq!(s.backoff, MOVE_BACKOFF_MAX);
    }
}
