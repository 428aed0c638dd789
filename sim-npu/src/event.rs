//! Events: each record is a generation; the stream marks it complete (with its time) when it
//! reaches it. Waits and queries name the generation current when they were issued.

use crate::status::Code;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

#[derive(Default)]
struct State {
    recorded: u64,
    completed: u64,
    time: Option<Instant>,
    /// The recording stream's context fault when the record completed.
    fault: Option<Code>,
}

pub struct Event {
    pub flags: u32,
    state: Mutex<State>,
    cv: Condvar,
}

impl Event {
    pub fn new(flags: u32) -> Event {
        Event { flags, state: Mutex::new(State::default()), cv: Condvar::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new record: returns its generation for the stream job that completes it.
    pub fn begin_record(&self) -> u64 {
        let mut s = self.lock();
        s.recorded += 1;
        s.recorded
    }

    pub fn complete(&self, generation: u64, fault: Option<Code>) {
        let mut s = self.lock();
        if generation > s.completed {
            s.completed = generation;
            s.time = Some(Instant::now());
            s.fault = fault;
        }
        self.cv.notify_all();
    }

    /// `aclrtResetEvent`: back to "not recorded".
    pub fn reset(&self) {
        let mut s = self.lock();
        s.recorded = 0;
        s.completed = 0;
        s.time = None;
        s.fault = None;
        self.cv.notify_all();
    }

    pub fn recorded(&self) -> u64 {
        self.lock().recorded
    }

    /// Whether the latest record has completed (true if never recorded).
    pub fn done(&self) -> bool {
        let s = self.lock();
        s.completed >= s.recorded
    }

    /// Whether the event has been recorded and that record has completed.
    pub fn recorded_and_done(&self) -> bool {
        let s = self.lock();
        s.recorded > 0 && s.completed >= s.recorded
    }

    /// Waits for `generation` (0: nothing to wait for); returns the recording context's fault.
    pub fn wait(&self, generation: u64) -> Option<Code> {
        let mut s = self.lock();
        while s.completed < generation && s.recorded >= generation {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.fault
    }

    /// The completion time of the latest record, if it has completed.
    pub fn time(&self) -> Option<Instant> {
        let s = self.lock();
        (s.recorded > 0 && s.completed >= s.recorded).then_some(s.time).flatten()
    }
}
