//! Sends batched asynchronous requests that nothing else would send soon: a program that
//! launches work and then computes on the CPU must not leave that work sitting in our
//! write queue. Network connections only (shared memory has no queue). The thread sleeps
//! until the first request is queued after a write, waits [`DELAY`] for more to gather,
//! then flushes.

use std::sync::Mutex;
use std::thread::Thread;
use std::time::Duration;

/// How long a queued request may wait for company.
pub const DELAY: Duration = Duration::from_micros(200);

/// The flusher of this process image: (fork generation, thread). A forked child has no
/// threads but the forking one, so it starts its own.
static FLUSHER: Mutex<Option<(u32, Thread)>> = Mutex::new(None);

/// Starts the flusher for this process if it has none yet.
pub fn ensure_started() {
    let generation = super::generation();
    let mut f = FLUSHER.lock().unwrap_or_else(|e| e.into_inner());
    if f.as_ref().is_some_and(|(g, _)| *g == generation) {
        return;
    }
    match std::thread::Builder::new().name("gpupool-flush".into()).spawn(run) {
        Ok(h) => *f = Some((generation, h.thread().clone())),
        Err(e) => {
            crate::util::warn(&format!("cannot start the flusher thread ({e}); batched calls wait for the next sync"))
        }
    }
}

/// Called when a request was queued into an empty write queue.
pub fn wake() {
    let f = FLUSHER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((g, t)) = f.as_ref()
        && *g == super::generation()
    {
        t.unpark();
    }
}

fn run() {
    loop {
        std::thread::park();
        std::thread::sleep(DELAY);
        let _ = super::with(|c| {
            for conn in c.conns.iter_mut() {
                conn.flush()?;
            }
            Ok(())
        });
    }
}
