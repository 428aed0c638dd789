//! Device `printf`'s output buffer, one per context, as NVIDIA's CUDA C++ Programming Guide
//! ("Formatted Output") describes it: what kernels print is kept in a circular buffer of
//! `CU_LIMIT_PRINTF_FIFO_SIZE` bytes, fixed when a kernel is launched (older output is
//! overwritten when more is printed than fits), and written to the process's standard output
//! only when the program does one of the documented things:
//! - launches a kernel (`cuLaunchKernel` and its kin, at the start of the launch);
//! - synchronizes (`cuCtxSynchronize`, `cuStreamSynchronize`, `cuEventSynchronize`);
//! - copies memory with a blocking `cuMemcpy*`;
//! - loads or unloads a module (`cuModuleLoad*`, `cuModuleUnload`);
//! - destroys the context (`cuCtxDestroy`, the primary context's last release or a reset);
//! - reaches a host function or stream callback it queued on a stream.
//!
//! It is not written at exit: a program that never synchronizes loses what its kernels printed,
//! as on a GPU. The text goes through the C library's `stdout`, as the program's own `printf`
//! does, so the two keep their order in its buffer. A pool daemon that runs tenants' kernels
//! here attributes what a flush writes to the client whose call flushed it, so nothing else
//! writes output at those points.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// The bytes one `printf` record costs in the buffer besides its text (NVIDIA keeps the format
/// and arguments; the simulator keeps the formatted text, plus this header, so a record of no text
/// still takes room).
const RECORD_HEADER: usize = 8;

#[derive(Default)]
pub struct Fifo {
    state: Mutex<State>,
    /// Set by a push: a flush with nothing to write (every launch flushes) takes no lock.
    holds: AtomicBool,
}

#[derive(Default)]
struct State {
    records: VecDeque<String>,
    bytes: usize,
}

impl Fifo {
    /// A kernel printed `text` into a buffer of `capacity` bytes: the oldest records make room.
    /// A record larger than the whole buffer is cut to fit.
    pub fn push(&self, mut text: String, capacity: usize) {
        let room = capacity.saturating_sub(RECORD_HEADER);
        if text.len() > room {
            let mut cut = room;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        let cost = text.len() + RECORD_HEADER;
        if cost > capacity {
            return;
        }
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while s.bytes + cost > capacity {
            let Some(old) = s.records.pop_front() else { break };
            s.bytes -= old.len() + RECORD_HEADER;
        }
        s.bytes += cost;
        s.records.push_back(text);
        self.holds.store(true, Ordering::Release);
    }

    /// Writes what the buffer holds to standard output and empties it.
    pub fn flush(&self) {
        if !self.holds.load(Ordering::Acquire) {
            return;
        }
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        self.holds.store(false, Ordering::Release);
        if s.records.is_empty() {
            return;
        }
        s.bytes = 0;
        let records = std::mem::take(&mut s.records);
        // Written while the buffer is held, so two flushes of one context keep its order.
        gpupool_abi::device_output::write_to_stdout(records.iter().map(String::as_bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(f: &Fifo) -> Vec<String> {
        f.state.lock().unwrap().records.iter().cloned().collect()
    }

    #[test]
    fn older_records_are_overwritten_when_the_buffer_is_full() {
        let f = Fifo::default();
        for i in 0..10 {
            f.push(format!("line {i}\n"), 3 * (7 + RECORD_HEADER));
        }
        assert_eq!(held(&f), ["line 7\n", "line 8\n", "line 9\n"]);
    }

    #[test]
    fn a_record_larger_than_the_buffer_is_cut_to_fit() {
        let f = Fifo::default();
        f.push("é".repeat(20), RECORD_HEADER + 5);
        assert_eq!(held(&f), ["éé"]);
        f.push("x".into(), 4);
        assert_eq!(held(&f), ["éé"], "no room even for the header: nothing kept, nothing dropped");
    }
}
