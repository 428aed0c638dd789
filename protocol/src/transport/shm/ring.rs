//! One single-producer single-consumer byte ring of length-prefixed frames, and the
//! spin-yield-futex wait both ends use.
//!
//! A record is a 4-byte little-endian length and the frame's bytes, written at
//! `pos % capacity` and split in two where it wraps. The producer copies the record in,
//! then publishes `tail` (Release); the consumer reads `tail` (Acquire), copies the
//! record out, then publishes `head` (Release). Each end keeps its own position locally
//! and only reads the other's, checking it: a peer that scribbles on the indices gets
//! `Corrupt`, never an out-of-bounds access.

use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

use super::layout::{RingControl, RingLayout, WaitWords};
use crate::transport::TransportError;
use crate::transport::sys::{self, Mapping};

const LEN: u64 = 4;

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
        };
        let c = end.ctrl();
        end.pos = if producer { c.tail.0.load(Ordering::Acquire) } else { c.head.0.load(Ordering::Acquire) };
        end
    }

    pub(crate) fn ctrl(&self) -> &RingControl {
        control(&self.map, self.control_offset)
    }

    pub(crate) fn control_offset(&self) -> usize {
        self.control_offset
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
        let c = self.ctrl();
        let head = c.head.0.load(Ordering::Acquire);
        let used = self.pos.wrapping_sub(head);
        if used > self.cap {
            return Err(TransportError::Corrupt(format!("ring head {head} is ahead of tail {}", self.pos)));
        }
        let need = LEN + frame.len() as u64;
        if self.cap - used < need {
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
        let c = self.ctrl();
        let tail = c.tail.0.load(Ordering::Acquire);
        let avail = tail.wrapping_sub(self.pos);
        if avail == 0 {
            return Ok(false);
        }
        if avail > self.cap || avail < LEN {
            return Err(TransportError::Corrupt(format!("ring tail {tail} vs head {}", self.pos)));
        }
        let mut len = [0u8; 4];
        self.copy_out(self.pos, &mut len);
        let len = u32::from_le_bytes(len) as u64;
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
    policy: WaitPolicy,
    budget: &mut u32,
    timeout: Option<Duration>,
    mut attempt: impl FnMut() -> Result<Option<T>, TransportError>,
    mut gone: impl FnMut(bool) -> bool,
) -> Result<T, TransportError> {
    for i in 0..*budget {
        if let Some(v) = attempt()? {
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
        loop {
            if let Some(v) = attempt()? {
                return Ok(v);
            }
            if Instant::now() >= until {
                break;
            }
            std::thread::yield_now();
        }
    }
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
