//! Streams: FIFO queues of device work, each drained by its own worker thread, so
//! work on different streams runs concurrently and device time is real wall time. A
//! synchronous copy on a stream with nothing outstanding runs on the caller's thread instead
//! ([`Stream::run_sync`]), as a driver's calling thread does the CPU's part of one.
//!
//! Ordering across streams is expressed as dependencies `(stream, sequence number)`
//! attached to a queued operation: the worker waits until each named stream has
//! completed that much before running it. This carries `cuStreamWaitEvent` and the
//! legacy default stream's implicit synchronisation with blocking streams.

use crate::context::Context;
use crate::device::Device;
use crate::error::CuResult;
use crate::utilization::Channel;
use gpupool_shim::cuda::{CUresult, CUstream_flags, CUstreamCaptureStatus};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, Weak};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    /// The NULL stream / `CU_STREAM_LEGACY`: synchronises with all blocking streams.
    Legacy,
    /// `CU_STREAM_PER_THREAD`: an ordinary blocking stream, one per thread.
    PerThread,
    /// Created with `cuStreamCreate*`.
    User,
}

/// What an operation occupies on the device, for NVML utilization.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    Kernel,
    Memory,
    /// Markers, host functions, waits: no device time.
    Control,
}

/// A unit of device work. Shared and callable more than once, because a captured
/// graph replays the same work at every launch.
pub type Job = Arc<dyn Fn() -> CuResult<()> + Send + Sync>;

/// Stream capture (`cuStreamBeginCapture`, `cuStreamBeginCaptureToGraph`, and streams joined to
/// one through events): work is recorded into a graph instead of running, each node after the
/// stream's current dependencies in the capture, which it then replaces
/// (`cuStreamUpdateCaptureDependencies` changes them). See [`crate::capture`].
pub use crate::capture::{ActiveCapture, Capture};

struct Pending {
    seq: u64,
    work: Work,
    job: Job,
    deps: Vec<(Arc<Stream>, u64)>,
}

#[derive(Default)]
struct Queue {
    pending: VecDeque<Pending>,
    /// Sequence number of the last operation enqueued.
    enqueued: u64,
    /// Every operation with a sequence number <= this has finished.
    completed: u64,
    /// First asynchronous error, reported (and cleared) by the next synchronisation.
    error: Option<CUresult>,
    worker_running: bool,
    /// The worker sleeps on `work_ready` (an enqueue then wakes it; otherwise it will find the work
    /// itself, and the enqueue spares a futex call).
    worker_idle: bool,
    /// The lowest operation a thread sleeping on `progress` waits for (`u64::MAX`: none). A
    /// completion wakes the sleepers only once it reaches that: a thread waiting for a kernel's
    /// end is not woken by every event record and launch before it (the daemon's compute monitor
    /// waits on the stream that its session keeps enqueueing on; a futex wake per operation
    /// cost the stream worker a third of its time).
    progress_wanted: u64,
    /// A caller's thread is running operation `enqueued` itself ([`Stream::run_sync`]): the
    /// worker leaves what was queued after it until it completes.
    running_inline: bool,
    shutdown: bool,
}

pub struct Stream {
    pub handle: std::sync::OnceLock<u64>,
    pub ctx_handle: u64,
    ctx: Weak<Context>,
    device: Arc<Device>,
    pub kind: StreamKind,
    pub flags: u32,
    pub priority: i32,
    queue: Mutex<Queue>,
    work_ready: Condvar,
    progress: Condvar,
    pub capture: Mutex<Capture>,
}

impl Stream {
    pub fn new(ctx: &Arc<Context>, kind: StreamKind, flags: u32, priority: i32) -> Arc<Stream> {
        let s = Arc::new(Stream {
            handle: std::sync::OnceLock::new(),
            ctx_handle: ctx.handle(),
            ctx: Arc::downgrade(ctx),
            device: ctx.device.clone(),
            kind,
            flags,
            priority,
            queue: Mutex::new(Queue { progress_wanted: u64::MAX, ..Queue::default() }),
            work_ready: Condvar::new(),
            progress: Condvar::new(),
            capture: Mutex::new(Capture::None),
        });
        ctx.streams.lock().unwrap_or_else(|e| e.into_inner()).push(Arc::downgrade(&s));
        s
    }

    /// Blocking streams wait for, and are waited on by, the legacy default stream.
    pub fn is_blocking(&self) -> bool {
        self.kind != StreamKind::Legacy && self.flags & CUstream_flags::CU_STREAM_NON_BLOCKING.0 == 0
    }

    pub fn handle(&self) -> u64 {
        *self.handle.get().unwrap_or(&0)
    }

    pub fn context(&self) -> Option<Arc<Context>> {
        self.ctx.upgrade()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn last_enqueued(&self) -> u64 {
        self.lock().enqueued
    }

    /// Queues `job`; returns its sequence number. Dependencies implied by the
    /// legacy default stream are added here.
    /// During capture the work is recorded instead, and 0 is returned (nothing to wait for).
    pub fn enqueue(self: &Arc<Self>, ctx: &Context, work: Work, deps: Vec<(Arc<Stream>, u64)>, job: Job) -> u64 {
        self.enqueue_node(ctx, work, deps, job, |j| crate::graph::Op::Captured(work, j))
    }

    /// As [`Stream::enqueue`], with the node a capture records made by `node` from the job (a
    /// memset or copy keeps its parameters, as the driver's captured nodes do).
    pub fn enqueue_node(
        self: &Arc<Self>,
        ctx: &Context,
        work: Work,
        mut deps: Vec<(Arc<Stream>, u64)>,
        job: Job,
        node: impl FnOnce(Job) -> crate::graph::Op,
    ) -> u64 {
        {
            let mut cap = self.capture.lock().unwrap_or_else(|e| e.into_inner());
            if let Capture::Active(a) = &mut *cap {
                if !a.is_invalidated() {
                    match a.graph.add(node(job), a.deps.clone()) {
                        Ok(i) => a.deps = vec![i],
                        Err(_) => a.invalidate(),
                    }
                }
                return 0;
            }
        }
        let _order = ctx.order.lock().unwrap_or_else(|e| e.into_inner());
        self.add_implied_deps(ctx, &mut deps);
        let mut q = self.lock();
        q.enqueued += 1;
        let seq = q.enqueued;
        q.pending.push_back(Pending { seq, work, job, deps });
        if !q.worker_running {
            q.worker_running = true;
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("gpupool-sim-stream-{:x}", self.handle()))
                .spawn(move || me.work_loop());
            if spawned.is_err() {
                // No thread: run the queue on the caller's thread instead of losing it.
                q.worker_running = false;
                drop(q);
                self.drain_inline();
                return seq;
            }
        }
        let wake = q.worker_idle;
        drop(q);
        if wake {
            self.work_ready.notify_one();
        }
        seq
    }

    /// Runs synchronous work (`job`, which must be done when the call returns) on the calling
    /// thread when the stream has nothing queued or running and nothing it must wait for, as a
    /// driver's own thread does the CPU's part of a synchronous copy; otherwise queues it
    /// behind the rest and waits. Handing the work to the stream's worker and sleeping until
    /// it is done costs two thread wake-ups per call (most of what a pipelined copy's 512 KiB
    /// chunks cost through the pool). Not for capturing streams (the caller refused those).
    pub fn run_sync(self: &Arc<Self>, ctx: &Context, work: Work, job: Job, node: impl FnOnce(Job) -> crate::graph::Op) {
        if self.run_if_idle(ctx, work, &job).is_none() {
            let seq = self.enqueue_node(ctx, work, Vec::new(), job, node);
            self.wait_for(seq);
        }
    }

    /// An operation the device does at once when its stream is idle (an event record, whose
    /// timestamp a GPU writes as soon as the work before it is done): run on the caller's thread
    /// when the stream has nothing queued or running and nothing it must wait for, otherwise
    /// queued. Returns its sequence number (0 while capturing, as [`Stream::enqueue`]). A record
    /// on an idle stream then wakes no worker: the compute scheduler brackets every kernel with
    /// two, and those wake-ups were most of what a scheduled launch cost the daemon.
    pub fn enqueue_or_run(self: &Arc<Self>, ctx: &Context, work: Work, job: Job) -> u64 {
        if self.is_capturing() {
            return self.enqueue(ctx, work, Vec::new(), job);
        }
        match self.run_if_idle(ctx, work, &job) {
            Some(seq) => seq,
            None => self.enqueue(ctx, work, Vec::new(), job),
        }
    }

    /// Runs `job` on this thread if the stream is idle (see [`Stream::run_sync`]): its sequence
    /// number, or None with nothing done.
    fn run_if_idle(self: &Arc<Self>, ctx: &Context, work: Work, job: &Job) -> Option<u64> {
        let seq = {
            let _order = ctx.order.lock().unwrap_or_else(|e| e.into_inner());
            let mut deps = Vec::new();
            self.add_implied_deps(ctx, &mut deps);
            let mut q = self.lock();
            if !(deps.is_empty() && q.pending.is_empty() && q.completed == q.enqueued && !q.running_inline) {
                return None;
            }
            q.enqueued += 1;
            q.running_inline = true;
            q.enqueued
        };
        let _running = RunningOn::enter(self);
        let (result, sticky) = self.execute(work, job);
        self.finish(seq, result, sticky);
        Some(seq)
    }

    /// The ordering the legacy default stream implies: `deps` gains the operations on other
    /// streams this stream's next one must wait for, and keeps only those not yet done.
    fn add_implied_deps(self: &Arc<Self>, ctx: &Context, deps: &mut Vec<(Arc<Stream>, u64)>) {
        match self.kind {
            StreamKind::Legacy => {
                for s in ctx.live_streams() {
                    if s.is_blocking() && !Arc::ptr_eq(&s, self) {
                        let last = s.last_enqueued();
                        if last > 0 {
                            deps.push((s, last));
                        }
                    }
                }
            }
            _ if self.is_blocking() => {
                if let Some(l) = ctx.legacy_if_created() {
                    let last = l.last_enqueued();
                    if last > 0 {
                        deps.push((l, last));
                    }
                }
            }
            _ => {}
        }
        deps.retain(|(s, seq)| !Arc::ptr_eq(s, self) && s.completed() < *seq);
    }

    fn drain_inline(self: &Arc<Self>) {
        while let Some(p) = self.lock().pending.pop_front() {
            // After an operation a caller may still be running itself (run_sync).
            self.wait_for(p.seq - 1);
            self.run(p);
        }
    }

    fn work_loop(self: Arc<Self>) {
        loop {
            let next = {
                let mut q = self.lock();
                loop {
                    if q.running_inline {
                        q.progress_wanted = q.progress_wanted.min(q.completed + 1);
                        q = self.progress.wait(q).unwrap_or_else(|e| e.into_inner());
                        continue;
                    }
                    if let Some(p) = q.pending.pop_front() {
                        break Some(p);
                    }
                    if q.shutdown {
                        q.worker_running = false;
                        break None;
                    }
                    q.worker_idle = true;
                    q = self.work_ready.wait(q).unwrap_or_else(|e| e.into_inner());
                    q.worker_idle = false;
                }
            };
            match next {
                Some(p) => self.run(p),
                None => return,
            }
        }
    }

    fn run(&self, p: Pending) {
        let _running = RunningOn::enter(self);
        for (s, seq) in &p.deps {
            s.wait_for(*seq);
        }
        let (result, sticky) = self.execute(p.work, &p.job);
        self.finish(p.seq, result, sticky);
    }

    /// Runs one operation's job (unless the context has a sticky error) and counts its device
    /// time: its result, and the sticky error it met if any.
    fn execute(&self, work: Work, job: &Job) -> (CuResult<()>, Option<CUresult>) {
        let channel = match work {
            Work::Kernel => Some(Channel::Kernel),
            Work::Memory => Some(Channel::Memory),
            Work::Control => None,
        };
        if let Some(ch) = channel {
            self.device.busy.begin(ch);
        }
        let sticky = self.ctx.upgrade().and_then(|c| c.check_sticky().err());
        // A context with a sticky error executes nothing more, as on a GPU.
        let result = match sticky {
            Some(code) => Err(code),
            None => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job()))
                .unwrap_or(Err(CUresult::CUDA_ERROR_UNKNOWN)),
        };
        if let Some(ch) = channel {
            self.device.busy.end(ch);
        }
        (result, sticky)
    }

    /// Records operation `seq` as done (its error kept for the next synchronisation) and wakes
    /// whoever waits for it. Whoever ran it, nothing runs now: an operation runs inline only when
    /// nothing else is queued or running, and the worker runs nothing while one does.
    fn finish(&self, seq: u64, result: CuResult<()>, sticky: Option<CUresult>) {
        let mut q = self.lock();
        q.running_inline = false;
        if let Err(code) = result
            && sticky.is_none()
        {
            if is_sticky(code)
                && let Some(c) = self.ctx.upgrade()
            {
                c.set_sticky(code);
            }
            q.error.get_or_insert(code);
        }
        q.completed = seq;
        let wake = q.completed >= q.progress_wanted;
        if wake {
            // The woken threads that still wait register again.
            q.progress_wanted = u64::MAX;
        }
        drop(q);
        if wake {
            self.progress.notify_all();
        }
    }

    pub fn is_capturing(&self) -> bool {
        !matches!(*self.capture.lock().unwrap_or_else(|e| e.into_inner()), Capture::None)
    }

    /// Runs `f` on the capture under way, which records a node there (`None`: not capturing;
    /// an invalidated capture is CUDA_ERROR_STREAM_CAPTURE_INVALIDATED).
    pub fn with_capture<T>(&self, f: impl FnOnce(&mut ActiveCapture) -> CuResult<T>) -> Option<CuResult<T>> {
        match &mut *self.capture.lock().unwrap_or_else(|e| e.into_inner()) {
            Capture::None => None,
            Capture::Active(a) if a.is_invalidated() => Some(crate::capture::invalidated()),
            Capture::Active(a) => Some(f(a)),
        }
    }

    /// Invalidates the capture this stream is in, if any.
    pub fn invalidate_capture(&self) {
        if let Capture::Active(a) = &*self.capture.lock().unwrap_or_else(|e| e.into_inner()) {
            a.invalidate();
        }
    }

    /// `cuStreamIsCapturing`'s answer.
    pub fn capture_status(&self) -> CUstreamCaptureStatus {
        match &*self.capture.lock().unwrap_or_else(|e| e.into_inner()) {
            Capture::None => CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE,
            Capture::Active(a) if a.is_invalidated() => CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED,
            Capture::Active(_) => CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE,
        }
    }

    /// Refuses a synchronising call on a capturing stream, invalidating the capture,
    /// as CUDA does (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`).
    pub fn refuse_if_capturing(&self, what: &str) -> CuResult<()> {
        if let Capture::Active(a) = &*self.capture.lock().unwrap_or_else(|e| e.into_inner()) {
            a.invalidate();
        } else {
            return Ok(());
        }
        crate::error::fail(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, || {
            format!("{what} is not allowed on a capturing stream; the capture is invalidated")
        })
    }

    pub fn completed(&self) -> u64 {
        self.lock().completed
    }

    /// Blocks until everything queued so far has finished. On the stream's own worker
    /// (a host function that calls the driver, which CUDA forbids but a client may do)
    /// it returns at once instead of waiting for itself forever.
    pub fn wait_for_queued(&self) {
        if RUNNING_ON.with(|r| r.get()) == self as *const Stream as usize {
            return;
        }
        self.wait_for(self.last_enqueued());
    }

    /// Blocks until operation `seq` has finished.
    pub fn wait_for(&self, seq: u64) {
        let mut q = self.lock();
        while q.completed < seq {
            q.progress_wanted = q.progress_wanted.min(seq);
            q = self.progress.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// As [`Self::wait_for`] for at most `timeout`: whether `seq` completed.
    pub fn wait_for_timeout(&self, seq: u64, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut q = self.lock();
        while q.completed < seq {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            q.progress_wanted = q.progress_wanted.min(seq);
            q = self.progress.wait_timeout(q, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        true
    }

    /// Waits for everything queued so far; returns (and clears) the first
    /// asynchronous error, or the context's sticky error.
    pub fn synchronize(&self) -> CuResult<()> {
        self.refuse_if_capturing("synchronising")?;
        let target = self.last_enqueued();
        self.wait_for(target);
        self.take_error()
    }

    fn take_error(&self) -> CuResult<()> {
        if let Some(c) = self.ctx.upgrade() {
            c.check_sticky()?;
        }
        match self.lock().error.take() {
            Some(code) => Err(code),
            None => Ok(()),
        }
    }

    /// `cuStreamQuery`: `CUDA_ERROR_NOT_READY` while work is outstanding.
    pub fn query(&self) -> CuResult<()> {
        self.refuse_if_capturing("cuStreamQuery")?;
        let done = {
            let q = self.lock();
            q.completed >= q.enqueued
        };
        if done { self.take_error() } else { Err(CUresult::CUDA_ERROR_NOT_READY) }
    }

    /// Lets the worker finish what is queued, then exit.
    pub fn shut_down(&self) {
        self.lock().shutdown = true;
        self.work_ready.notify_all();
    }
}

thread_local! {
    /// The stream whose work this thread is running (its address), 0 on other threads.
    static RUNNING_ON: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Marks the current thread as running `stream`'s work until dropped (also when the
/// work is drained inline on a caller's thread).
struct RunningOn(usize);

impl RunningOn {
    fn enter(stream: &Stream) -> RunningOn {
        RunningOn(RUNNING_ON.with(|r| r.replace(stream as *const Stream as usize)))
    }
}

impl Drop for RunningOn {
    fn drop(&mut self) {
        RUNNING_ON.with(|r| r.set(self.0));
    }
}

/// Errors that poison the whole context, as the CUDA documentation lists them.
pub fn is_sticky(code: CUresult) -> bool {
    matches!(
        code,
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
            | CUresult::CUDA_ERROR_LAUNCH_FAILED
            | CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
            | CUresult::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUresult::CUDA_ERROR_INVALID_PC
            | CUresult::CUDA_ERROR_ASSERT
            | CUresult::CUDA_ERROR_LAUNCH_TIMEOUT
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn user_stream() -> (Arc<Context>, Arc<Stream>) {
        let d = crate::driver::state();
        d.init(0).expect("cuInit");
        let dev = d.device(0).expect("device 0").clone();
        let ctx = Context::create(d, dev, 0, false).expect("a context");
        let s = Stream::new(&ctx, StreamKind::User, 0, 0);
        (ctx, s)
    }

    fn captured(j: Job) -> crate::graph::Op {
        crate::graph::Op::Captured(Work::Memory, j)
    }

    /// A job that reports the thread it runs on, waits to be released, then notes `name`.
    fn held_job(
        name: &'static str,
        order: &Arc<Mutex<Vec<&'static str>>>,
    ) -> (Job, mpsc::Receiver<std::thread::ThreadId>, mpsc::Sender<()>) {
        let (ran_on, ran_on_rx) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let (ran_on, release_rx) = (Mutex::new(ran_on), Mutex::new(release_rx));
        let order = order.clone();
        let job: Job = Arc::new(move || {
            let _ = ran_on.lock().unwrap().send(std::thread::current().id());
            let _ = release_rx.lock().unwrap().recv_timeout(Duration::from_secs(10));
            order.lock().unwrap().push(name);
            Ok(())
        });
        (job, ran_on_rx, release)
    }

    #[test]
    fn sync_work_on_an_idle_stream_runs_on_the_caller_and_what_is_queued_behind_it_waits() {
        let (ctx, s) = user_stream();
        let order = Arc::new(Mutex::new(Vec::new()));
        let (job, ran_on, release) = held_job("sync", &order);
        let caller = {
            let (ctx, s) = (ctx.clone(), s.clone());
            std::thread::spawn(move || s.run_sync(&ctx, Work::Memory, job, captured))
        };
        let ran_on = ran_on.recv_timeout(Duration::from_secs(10)).expect("the synchronous job ran");
        assert_eq!(ran_on, caller.thread().id(), "an idle stream's synchronous work runs on the caller's thread");
        let behind = {
            let order = order.clone();
            s.enqueue(
                &ctx,
                Work::Control,
                Vec::new(),
                Arc::new(move || {
                    order.lock().unwrap().push("queued");
                    Ok(())
                }),
            )
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(order.lock().unwrap().is_empty(), "work queued behind the running synchronous job ran before it");
        assert!(s.completed() < behind);
        release.send(()).unwrap();
        caller.join().unwrap();
        s.wait_for(behind);
        assert_eq!(*order.lock().unwrap(), ["sync", "queued"]);
    }

    #[test]
    fn sync_work_behind_queued_work_goes_through_the_worker_in_order() {
        let (ctx, s) = user_stream();
        let order = Arc::new(Mutex::new(Vec::new()));
        let (first, first_ran_on, release_first) = held_job("queued", &order);
        s.enqueue(&ctx, Work::Control, Vec::new(), first);
        let worker = first_ran_on.recv_timeout(Duration::from_secs(10)).expect("the queued job ran");
        let (job, ran_on, release) = held_job("sync", &order);
        let caller = {
            let (ctx, s) = (ctx.clone(), s.clone());
            std::thread::spawn(move || s.run_sync(&ctx, Work::Memory, job, captured))
        };
        assert!(ran_on.recv_timeout(Duration::from_millis(50)).is_err(), "the synchronous job overtook queued work");
        release_first.send(()).unwrap();
        let sync_ran_on = ran_on.recv_timeout(Duration::from_secs(10)).expect("the synchronous job ran");
        assert_eq!(sync_ran_on, worker, "behind queued work, synchronous work runs on the stream's worker");
        assert!(!caller.is_finished(), "the synchronous call returned before its work was done");
        release.send(()).unwrap();
        caller.join().unwrap();
        assert_eq!(*order.lock().unwrap(), ["queued", "sync"]);
    }

    #[test]
    fn an_event_record_on_an_idle_stream_completes_at_once_and_behind_work_waits_for_it() {
        let (ctx, s) = user_stream();
        let event = crate::event::Event::new(ctx.handle(), 0);
        event.record(&ctx, &s);
        assert!(event.query().is_ok(), "a record on an idle stream is complete when it returns");
        assert!(!s.lock().worker_running, "a record on an idle stream woke the stream's worker");
        let order = Arc::new(Mutex::new(Vec::new()));
        let (first, first_ran_on, release_first) = held_job("queued", &order);
        s.enqueue(&ctx, Work::Control, Vec::new(), first);
        first_ran_on.recv_timeout(Duration::from_secs(10)).expect("the queued job ran");
        event.record(&ctx, &s);
        assert_eq!(event.query(), Err(CUresult::CUDA_ERROR_NOT_READY), "a record overtook the work before it");
        release_first.send(()).unwrap();
        assert!(event.wait_timeout(Duration::from_secs(10)), "the record behind the work never completed");
        assert_eq!(*order.lock().unwrap(), ["queued"]);
    }
}
