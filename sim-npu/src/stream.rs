//! Streams: one worker thread each, running its jobs in order, asynchronously to the host.
//! A job of a context that has faulted is skipped (as a device stops a faulted context's
//! work); bookkeeping jobs (event records) still run, so nothing waiting on them hangs.

use crate::event::Event;
use crate::runtime::Fault;
use crate::status::Code;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What a job is told when it runs: the context's fault, if it has one.
pub struct JobEnv {
    pub fault: Option<Code>,
    pub device: u32,
}

/// A job returns `Err(code)` to fault its context.
pub type Job = Box<dyn FnOnce(&JobEnv) -> Result<(), Code> + Send>;

enum Task {
    Work(Job),
    /// An event record: completed as the stream counts it done, so whoever the event wakes
    /// finds the stream idle if nothing follows it, and whoever the stream wakes finds the
    /// event complete.
    Record(Arc<Event>, u64),
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Task>,
    enqueued: u64,
    done: u64,
    stop: bool,
}

pub struct Stream {
    pub id: u64,
    pub ctx: u64,
    pub device: u32,
    pub fault: Arc<Fault>,
    queue: Mutex<Queue>,
    cv: Condvar,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Stream {
    pub fn new(id: u64, ctx: u64, device: u32, fault: Arc<Fault>) -> Arc<Stream> {
        let st = Arc::new(Stream {
            id,
            ctx,
            device,
            fault,
            queue: Mutex::new(Queue::default()),
            cv: Condvar::new(),
            worker: Mutex::new(None),
        });
        let w = st.clone();
        let handle = std::thread::Builder::new()
            .name(format!("npu-stream-{id:x}"))
            .spawn(move || w.run())
            .expect("spawning a stream worker");
        *st.worker.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        st
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn run(&self) {
        loop {
            let job = {
                let mut q = self.lock();
                loop {
                    if let Some(j) = q.jobs.pop_front() {
                        break j;
                    }
                    if q.stop {
                        return;
                    }
                    q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner());
                }
            };
            let env = JobEnv { fault: self.fault.get(), device: self.device };
            let record = match job {
                Task::Work(job) => {
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&env))) {
                        Ok(Ok(())) => {}
                        Ok(Err(c)) => self.fault.set(c),
                        Err(_) => self.fault.set(crate::status::code::RT_INTERNAL_ERROR),
                    }
                    None
                }
                Task::Record(ev, generation) => Some((ev, generation)),
            };
            // Counted done and the event completed under the queue's lock (the event's lock
            // inside it, the only order the two are taken in): whoever sees one sees the other.
            let mut q = self.lock();
            q.done += 1;
            if let Some((ev, generation)) = record {
                ev.complete(generation, env.fault);
            }
            drop(q);
            self.cv.notify_all();
        }
    }

    pub fn enqueue(&self, job: Job) {
        self.push(Task::Work(job));
    }

    /// Queues the completion of `event`'s record `generation`.
    pub fn enqueue_record(&self, event: Arc<Event>, generation: u64) {
        self.push(Task::Record(event, generation));
    }

    fn push(&self, task: Task) {
        let mut q = self.lock();
        q.jobs.push_back(task);
        q.enqueued += 1;
        self.cv.notify_all();
    }

    /// Waits until everything queued so far has run; `None` waits forever. False on timeout.
    pub fn wait(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut q = self.lock();
        let target = q.enqueued;
        while q.done < target {
            match deadline {
                None => q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return false;
                    }
                    q = self.cv.wait_timeout(q, d - now).unwrap_or_else(|e| e.into_inner()).0;
                }
            }
        }
        true
    }

    pub fn idle(&self) -> bool {
        let q = self.lock();
        q.done == q.enqueued
    }

    /// Lets the queued work finish, then stops the worker.
    pub fn shutdown(&self) {
        self.wait(None);
        self.lock().stop = true;
        self.cv.notify_all();
        let handle = self.worker.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle
            && h.thread().id() != std::thread::current().id()
        {
            let _ = h.join();
        }
    }
}
