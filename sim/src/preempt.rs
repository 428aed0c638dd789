//! Compute preemption at thread-block granularity: a context's grids can be stopped between two of
//! their blocks and resumed later with the blocks that remain, as a GPU switches a context's compute
//! out and back in (`CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED`: Pascal and later save a
//! running grid's state at instruction level; the simulator runs each block to its end first, so
//! its granularity is one block).
//!
//! NVIDIA's driver exposes no call for one context to preempt another (its own time-slicing does
//! it); the simulator's is an export of its own, [`crate::api::preempt`], which the pool's daemon
//! looks up by name and does without on a real driver. Owns only the per-context stop flag and the
//! count of grids running and stopped; it must not decide *when* to stop (that is the daemon's
//! scheduler).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One context's preemption state.
#[derive(Default)]
pub struct Preemption {
    /// Read between every two blocks without the lock: the common case (not stopped) costs a load.
    requested: AtomicBool,
    state: Mutex<Counts>,
    changed: Condvar,
}

#[derive(Default)]
struct Counts {
    /// Grids between their start and their end (stopped ones included).
    running: u32,
    /// Grids waiting at a block boundary for the stop to be lifted.
    stopped: u32,
}

/// A grid's presence in [`Counts::running`], for as long as it runs.
pub struct Grid<'a>(&'a Preemption);

impl Drop for Grid<'_> {
    fn drop(&mut self) {
        self.0.lock().running -= 1;
        // A waiter for "every grid stopped" may be satisfied by a grid that ended instead.
        self.0.changed.notify_all();
    }
}

impl Preemption {
    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a grid as running until the guard is dropped.
    pub fn grid(&self) -> Grid<'_> {
        self.lock().running += 1;
        Grid(self)
    }

    /// Called by a grid before each of its blocks: returns at once unless a stop is requested, else
    /// waits until it is lifted.
    pub fn boundary(&self) {
        if !self.requested.load(Ordering::Acquire) {
            return;
        }
        let mut c = self.lock();
        if !self.requested.load(Ordering::Acquire) {
            return;
        }
        c.stopped += 1;
        self.changed.notify_all();
        while self.requested.load(Ordering::Acquire) {
            c = self.changed.wait(c).unwrap_or_else(|e| e.into_inner());
        }
        c.stopped -= 1;
    }

    /// Asks every grid of the context, running or started later, to stop at its next block boundary.
    pub fn stop(&self) {
        let _c = self.lock();
        self.requested.store(true, Ordering::Release);
    }

    /// Lifts the stop: stopped grids go on with their remaining blocks.
    pub fn resume(&self) {
        let _c = self.lock();
        self.requested.store(false, Ordering::Release);
        self.changed.notify_all();
    }

    /// Waits up to `timeout` until every running grid has stopped (or no stop is requested):
    /// whether they have.
    pub fn wait_stopped(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut c = self.lock();
        loop {
            if !self.requested.load(Ordering::Acquire) || c.stopped >= c.running {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            c = self.changed.wait_timeout(c, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn a_grid_stops_between_blocks_and_resumes_with_the_rest() {
        let p = Arc::new(Preemption::default());
        let done = Arc::new(AtomicU32::new(0));
        let (p2, done2) = (p.clone(), done.clone());
        let worker = std::thread::spawn(move || {
            let _g = p2.grid();
            for _ in 0..200 {
                p2.boundary();
                std::thread::sleep(Duration::from_millis(1));
                done2.fetch_add(1, Ordering::SeqCst);
            }
        });
        std::thread::sleep(Duration::from_millis(20));
        p.stop();
        assert!(p.wait_stopped(Duration::from_secs(5)), "the grid did not stop within 5 s");
        let at_stop = done.load(Ordering::SeqCst);
        assert!(at_stop < 200, "stopped after all blocks: {at_stop}");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(done.load(Ordering::SeqCst), at_stop, "blocks ran while stopped");
        p.resume();
        worker.join().unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 200, "every block ran exactly once");
        // No grid left: a stop is complete at once.
        p.stop();
        assert!(p.wait_stopped(Duration::ZERO));
        p.resume();
    }
}
