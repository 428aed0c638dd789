//! Streams: FIFO order within a stream, concurrency between streams, the legacy default
//! stream's implicit synchronisation with blocking streams (not with non-blocking ones),
//! destruction with work pending, and invalid stream handles.

use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpupool_e2e::cu::CUstream;
use gpupool_e2e::{
    Context, DeviceBuffer, Gate, Shared, Stream, call, check, cuda, expect, host_fn, spawn_in, status, sync_stream_in,
};

const BLOCKING: u32 = 0;
const NON_BLOCKING: u32 = 1;
const LEGACY: CUstream = null_mut();
const SHORT: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(10);

/// A host function that appends `tag` to `log` when the stream reaches it.
fn log_on(stream: CUstream, log: &Arc<Mutex<Vec<&'static str>>>, tag: &'static str) {
    let log = log.clone();
    check(host_fn(stream, move || log.lock().unwrap().push(tag)));
}

/// Pinned host memory, freed on drop.
struct Pinned {
    ptr: *mut u8,
    len: usize,
}
impl Pinned {
    fn new(len: usize) -> Pinned {
        let mut p = null_mut();
        check(call!(cuda().cuMemAllocHost_v2(&mut p, len)));
        // SAFETY: the allocation succeeded: `p` points to `len` writable bytes, ours until
        // `cuMemFreeHost` in `drop`, and no copy into them has been enqueued yet.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, len) };
        Pinned { ptr: p.cast(), len }
    }
    /// The buffer as little-endian words. Call only while no copy into it is in flight
    /// (after a synchronize, or while its stream is held at a gate before the copy).
    fn words(&self) -> Vec<u32> {
        // SAFETY: `ptr` points to `len` initialised bytes (zeroed in `new`) that live until
        // `drop`; every caller reads while no asynchronous copy is writing them.
        let s = unsafe { std::slice::from_raw_parts(self.ptr, self.len) };
        s.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()
    }
}
impl Drop for Pinned {
    fn drop(&mut self) {
        check(call!(cuda().cuMemFreeHost(self.ptr.cast())));
    }
}

#[test]
fn one_stream_runs_in_fifo_order() {
    let d = cuda();
    let _ctx = Context::new(0);
    let s = Stream::new(BLOCKING);
    let n = 1 << 20;
    let a = DeviceBuffer::new(n);
    let b = DeviceBuffer::new(n);
    let host = Pinned::new(n);
    let gate = Gate::new();
    gate.enqueue(s.raw);
    for i in 1..=20u32 {
        check(call!(d.cuMemsetD32Async(a.ptr, i, n / 4, s.raw)));
        check(call!(d.cuMemcpyDtoDAsync_v2(b.ptr, a.ptr, n, s.raw)));
    }
    check(call!(d.cuMemcpyDtoHAsync_v2(host.ptr.cast(), b.ptr, n, s.raw)));
    expect(call!(d.cuStreamQuery(s.raw)), status::NOT_READY, "cuStreamQuery with work held at a gate");
    assert!(host.words().iter().all(|&w| w == 0), "async work ran before the stream reached it");
    gate.open();
    check(call!(d.cuStreamSynchronize(s.raw)));
    expect(call!(d.cuStreamQuery(s.raw)), status::SUCCESS, "cuStreamQuery after synchronize");
    let words = host.words();
    assert!(words.iter().all(|&w| w == 20), "the copy saw the last memset (first word {})", words[0]);
}

#[test]
fn two_streams_run_concurrently() {
    let d = cuda();
    let ctx = Context::new(0);
    let a = Stream::new(BLOCKING);
    let b = Stream::new(BLOCKING);
    let buf = DeviceBuffer::new(4096);
    let host = Pinned::new(4096);
    let gate = Gate::new();
    gate.enqueue(a.raw);
    assert!(gate.wait_entered(LONG), "stream A never reached its host function");
    let ran_b = Arc::new(AtomicBool::new(false));
    check(call!(d.cuMemsetD32Async(buf.ptr, 0x0b0b0b0b, 1024, b.raw)));
    check(call!(d.cuMemcpyDtoHAsync_v2(host.ptr.cast(), buf.ptr, 4096, b.raw,)));
    let flag = ran_b.clone();
    check(host_fn(b.raw, move || flag.store(true, Ordering::SeqCst)));
    let r = sync_stream_in(ctx.raw, b.raw).recv_timeout(LONG);
    assert_eq!(r, Ok(status::SUCCESS), "stream B must complete while stream A is blocked");
    assert!(ran_b.load(Ordering::SeqCst));
    assert!(host.words().iter().all(|&w| w == 0x0b0b0b0b));
    expect(call!(d.cuStreamQuery(a.raw)), status::NOT_READY, "stream A still held");
    gate.open();
    check(call!(d.cuStreamSynchronize(a.raw)));
}

#[test]
fn legacy_default_stream_waits_for_blocking_streams() {
    let d = cuda();
    let _ctx = Context::new(0);
    let s = Stream::new(BLOCKING);
    let log = Arc::new(Mutex::new(Vec::new()));
    let gate = Gate::new();
    gate.enqueue(s.raw);
    log_on(s.raw, &log, "blocking stream");
    log_on(LEGACY, &log, "legacy stream");
    std::thread::sleep(SHORT);
    assert!(log.lock().unwrap().is_empty(), "legacy-stream work ran before earlier work on a blocking stream");
    expect(call!(d.cuStreamQuery(LEGACY)), status::NOT_READY, "legacy stream waits on the blocking stream");
    gate.open();
    check(call!(d.cuStreamSynchronize(LEGACY)));
    assert_eq!(*log.lock().unwrap(), ["blocking stream", "legacy stream"]);
}

#[test]
fn blocking_streams_wait_for_the_legacy_default_stream() {
    let d = cuda();
    let _ctx = Context::new(0);
    let s = Stream::new(BLOCKING);
    let log = Arc::new(Mutex::new(Vec::new()));
    let gate = Gate::new();
    gate.enqueue(LEGACY);
    log_on(LEGACY, &log, "legacy stream");
    log_on(s.raw, &log, "blocking stream");
    std::thread::sleep(SHORT);
    assert!(log.lock().unwrap().is_empty(), "blocking-stream work ran before earlier legacy-stream work");
    expect(call!(d.cuStreamQuery(s.raw)), status::NOT_READY, "blocking stream waits on the legacy stream");
    gate.open();
    check(call!(d.cuStreamSynchronize(s.raw)));
    assert_eq!(*log.lock().unwrap(), ["legacy stream", "blocking stream"]);
}

#[test]
fn non_blocking_streams_do_not_synchronise_with_the_legacy_stream() {
    let d = cuda();
    let ctx = Context::new(0);
    let n = Stream::new(NON_BLOCKING);
    let mut flags = 99;
    check(call!(d.cuStreamGetFlags(n.raw, &mut flags)));
    assert_eq!(flags, NON_BLOCKING);

    // Non-blocking stream held: the legacy stream still completes.
    let gate = Gate::new();
    gate.enqueue(n.raw);
    assert!(gate.wait_entered(LONG));
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    check(host_fn(LEGACY, move || flag.store(true, Ordering::SeqCst)));
    assert_eq!(
        sync_stream_in(ctx.raw, LEGACY).recv_timeout(LONG),
        Ok(status::SUCCESS),
        "legacy stream blocked by a non-blocking stream"
    );
    assert!(ran.load(Ordering::SeqCst));

    // But cuCtxSynchronize waits for every stream of the context.
    let ctx_sync = spawn_in(ctx.raw, || call!(cuda().cuCtxSynchronize()));
    assert_eq!(
        ctx_sync.recv_timeout(SHORT),
        Err(RecvTimeoutError::Timeout),
        "cuCtxSynchronize returned with a stream still busy"
    );
    gate.open();
    assert_eq!(ctx_sync.recv_timeout(LONG), Ok(status::SUCCESS));

    // Legacy stream held: the non-blocking stream still completes.
    let gate = Gate::new();
    gate.enqueue(LEGACY);
    assert!(gate.wait_entered(LONG));
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    check(host_fn(n.raw, move || flag.store(true, Ordering::SeqCst)));
    assert_eq!(
        sync_stream_in(ctx.raw, n.raw).recv_timeout(LONG),
        Ok(status::SUCCESS),
        "non-blocking stream blocked by the legacy stream"
    );
    assert!(ran.load(Ordering::SeqCst));
    gate.open();
    check(call!(d.cuCtxSynchronize()));
}

#[test]
fn destroying_a_busy_stream_returns_at_once_and_finishes_its_work() {
    let ctx = Context::new(0);
    let s = Stream::new(BLOCKING);
    let gate = Gate::new();
    gate.enqueue(s.raw);
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    check(host_fn(s.raw, move || flag.store(true, Ordering::SeqCst)));
    let raw = Shared(s.raw);
    std::mem::forget(s);
    let r = spawn_in(ctx.raw, move || {
        let raw = raw;
        call!(cuda().cuStreamDestroy_v2(raw.0))
    })
    .recv_timeout(LONG);
    assert_eq!(r, Ok(status::SUCCESS), "cuStreamDestroy_v2 of a busy stream must return at once");
    assert!(!ran.load(Ordering::SeqCst));
    gate.open();
    let deadline = std::time::Instant::now() + LONG;
    while !ran.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(ran.load(Ordering::SeqCst), "work queued before cuStreamDestroy_v2 must still run");
}

#[test]
fn bad_stream_handles_are_invalid_handle() {
    let d = cuda();
    let _ctx = Context::new(0);
    let buf = DeviceBuffer::new(64);
    let destroyed = {
        let s = Stream::new(BLOCKING);
        s.raw
    };
    let mut local = [0u64; 8];
    for (what, bogus) in
        [("destroyed", destroyed), ("bogus", local.as_mut_ptr() as CUstream), ("wild", 0xdead_beef_usize as CUstream)]
    {
        expect(call!(d.cuStreamQuery(bogus)), status::INVALID_HANDLE, &format!("cuStreamQuery({what})"));
        expect(call!(d.cuStreamSynchronize(bogus)), status::INVALID_HANDLE, &format!("cuStreamSynchronize({what})"));
        expect(
            call!(d.cuMemsetD8Async(buf.ptr, 0, 64, bogus)),
            status::INVALID_HANDLE,
            &format!("cuMemsetD8Async on {what}"),
        );
        let mut flags = 0;
        expect(
            call!(d.cuStreamGetFlags(bogus, &mut flags)),
            status::INVALID_HANDLE,
            &format!("cuStreamGetFlags({what})"),
        );
        expect(call!(d.cuStreamDestroy_v2(bogus)), status::INVALID_HANDLE, &format!("cuStreamDestroy_v2({what})"));
        expect(host_fn(bogus, || ()), status::INVALID_HANDLE, &format!("cuLaunchHostFunc on {what}"));
    }
    expect(call!(d.cuStreamCreate(null_mut(), 0)), status::INVALID_VALUE, "cuStreamCreate(NULL)");
    let mut s = null_mut();
    expect(call!(d.cuStreamCreate(&mut s, 0x10)), status::INVALID_VALUE, "cuStreamCreate with unknown flags");
    expect(call!(d.cuLaunchHostFunc(LEGACY, None, null_mut())), status::INVALID_VALUE, "cuLaunchHostFunc(NULL fn)");
}

/// Threads waiting for different points of one stream each return when their own point is
/// reached, not before and not never: the simulator wakes its sleepers only once the lowest
/// point any of them waits for completes (then each registers again), so a thread waiting for
/// the stream's end is woken by, and must sleep again after, the completion another thread
/// waited for. Two gates, an event after the first: the event's waiter returns when the first
/// gate opens while the stream's waiter stays asleep; both return when the second opens.
#[test]
fn waiters_for_different_points_of_a_stream_each_wake_at_their_own() {
    let d = cuda();
    let ctx = Context::new(0);
    let s = Stream::new(BLOCKING);
    let (first, second) = (Gate::new(), Gate::new());
    let mut e = null_mut();
    check(call!(d.cuEventCreate(&mut e, 0)));
    first.enqueue(s.raw);
    check(call!(d.cuEventRecord(e, s.raw)));
    second.enqueue(s.raw);
    let event = Shared(e);
    let at_event = spawn_in(ctx.raw, move || {
        let event = event;
        call!(cuda().cuEventSynchronize(event.0))
    });
    let at_end = sync_stream_in(ctx.raw, s.raw);
    assert_eq!(at_event.recv_timeout(SHORT), Err(RecvTimeoutError::Timeout), "the event's waiter returned early");
    first.open();
    assert_eq!(at_event.recv_timeout(LONG), Ok(status::SUCCESS), "the event's waiter was not woken");
    assert_eq!(at_end.recv_timeout(SHORT), Err(RecvTimeoutError::Timeout), "the stream's waiter returned early");
    second.open();
    assert_eq!(at_end.recv_timeout(LONG), Ok(status::SUCCESS), "the stream's waiter was not woken");
    check(call!(d.cuEventDestroy_v2(e)));
}
