//! Events: completion state, elapsed time and its error cases, cross-stream ordering with
//! `cuStreamWaitEvent`, invalid event handles.

use std::ptr::null_mut;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use gpupool_e2e::cu::{CUevent, CUevent_flags_enum as F};
use gpupool_e2e::{
    Context, DeviceBuffer, Gate, Shared, Stream, call, check, check_in_drop, cuda, expect, host_fn, spawn_in, status,
    sync_stream_in,
};

const SHORT: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(10);

struct Event(CUevent);
impl Event {
    fn new(flags: F) -> Event {
        let mut e = null_mut();
        check(call!(cuda().cuEventCreate(&mut e, flags.0)));
        assert!(!e.is_null());
        Event(e)
    }
}
impl Drop for Event {
    fn drop(&mut self) {
        check_in_drop(call!(cuda().cuEventDestroy_v2(self.0)));
    }
}

#[test]
fn query_is_not_ready_until_the_stream_reaches_the_record() {
    let d = cuda();
    let ctx = Context::new(0);
    let s = Stream::new(0);
    let ev = Event::new(F::CU_EVENT_DEFAULT);
    expect(call!(d.cuEventQuery(ev.0)), status::SUCCESS, "cuEventQuery of a never-recorded event");
    let gate = Gate::new();
    gate.enqueue(s.raw);
    check(call!(d.cuEventRecord(ev.0, s.raw)));
    expect(call!(d.cuEventQuery(ev.0)), status::NOT_READY, "cuEventQuery before the stream reached the record");
    let evp = Shared(ev.0);
    let rx = spawn_in(ctx.raw, move || {
        let evp = evp;
        call!(cuda().cuEventSynchronize(evp.0))
    });
    assert!(rx.recv_timeout(SHORT).is_err(), "cuEventSynchronize returned before the event completed");
    gate.open();
    assert_eq!(rx.recv_timeout(LONG), Ok(status::SUCCESS));
    expect(call!(d.cuEventQuery(ev.0)), status::SUCCESS, "cuEventQuery after completion");
}

#[test]
fn elapsed_time_measures_the_work_between_records() {
    let d = cuda();
    let _ctx = Context::new(0);
    let s = Stream::new(0);
    let start = Event::new(F::CU_EVENT_DEFAULT);
    let end = Event::new(F::CU_EVENT_DEFAULT);
    let mut ms = -1.0f32;
    expect(
        call!(d.cuEventElapsedTime(&mut ms, start.0, end.0)),
        status::INVALID_HANDLE,
        "elapsed time of never-recorded events",
    );
    check(call!(d.cuEventRecord(start.0, s.raw)));
    check(host_fn(s.raw, || std::thread::sleep(Duration::from_millis(60))));
    check(call!(d.cuEventRecord(end.0, s.raw)));
    check(call!(d.cuEventSynchronize(end.0)));
    check(call!(d.cuEventElapsedTime(&mut ms, start.0, end.0)));
    assert!((50.0..5000.0).contains(&ms), "60 ms of stream work measured as {ms} ms");
    expect(
        call!(d.cuEventElapsedTime(null_mut(), start.0, end.0)),
        status::INVALID_VALUE,
        "cuEventElapsedTime(NULL, ..)",
    );

    // One event recorded but not completed: not ready.
    let gate = Gate::new();
    gate.enqueue(s.raw);
    check(call!(d.cuEventRecord(end.0, s.raw)));
    expect(
        call!(d.cuEventElapsedTime(&mut ms, start.0, end.0)),
        status::NOT_READY,
        "elapsed time with the end event pending",
    );
    gate.open();
    check(call!(d.cuStreamSynchronize(s.raw)));
}

#[test]
fn elapsed_time_of_disable_timing_events_is_invalid_handle() {
    let d = cuda();
    let _ctx = Context::new(0);
    let s = Stream::new(0);
    let timed = Event::new(F::CU_EVENT_DEFAULT);
    let untimed = Event::new(F::CU_EVENT_DISABLE_TIMING);
    let mut ms = 0.0f32;
    check(call!(d.cuEventRecord(timed.0, s.raw)));
    check(call!(d.cuEventRecord(untimed.0, s.raw)));
    check(call!(d.cuStreamSynchronize(s.raw)));
    expect(call!(d.cuEventQuery(untimed.0)), status::SUCCESS, "a DISABLE_TIMING event still completes");
    expect(
        call!(d.cuEventElapsedTime(&mut ms, timed.0, untimed.0)),
        status::INVALID_HANDLE,
        "elapsed time to a DISABLE_TIMING event",
    );
    expect(
        call!(d.cuEventElapsedTime(&mut ms, untimed.0, timed.0)),
        status::INVALID_HANDLE,
        "elapsed time from a DISABLE_TIMING event",
    );
}

#[test]
fn stream_wait_event_orders_work_across_streams() {
    let d = cuda();
    let ctx = Context::new(0);
    let a = Stream::new(0);
    let b = Stream::new(0);
    let src = DeviceBuffer::new(4096);
    let dst = DeviceBuffer::new(4096);
    let ev = Event::new(F::CU_EVENT_DISABLE_TIMING);
    let ran = Arc::new(AtomicBool::new(false));
    let gate = Gate::new();
    gate.enqueue(a.raw);
    check(call!(d.cuMemsetD32Async(src.ptr, 7, 1024, a.raw)));
    check(call!(d.cuEventRecord(ev.0, a.raw)));
    check(call!(d.cuStreamWaitEvent(b.raw, ev.0, 0)));
    check(call!(d.cuMemcpyDtoDAsync_v2(dst.ptr, src.ptr, 4096, b.raw)));
    let flag = ran.clone();
    check(host_fn(b.raw, move || flag.store(true, Ordering::SeqCst)));
    std::thread::sleep(SHORT);
    assert!(!ran.load(Ordering::SeqCst), "stream B ran past cuStreamWaitEvent before the event completed");
    expect(call!(d.cuStreamQuery(b.raw)), status::NOT_READY, "stream B waiting on stream A's event");
    gate.open();
    check(call!(d.cuStreamSynchronize(b.raw)));
    assert!(ran.load(Ordering::SeqCst));
    let words: Vec<u32> = dst.read().chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    assert!(words.iter().all(|&w| w == 7), "stream B copied before stream A's memset");

    // Waiting on a never-recorded event is a no-op.
    let fresh = Event::new(F::CU_EVENT_DEFAULT);
    let gate = Gate::new();
    gate.enqueue(a.raw);
    check(call!(d.cuStreamWaitEvent(b.raw, fresh.0, 0)));
    assert_eq!(
        sync_stream_in(ctx.raw, b.raw).recv_timeout(LONG),
        Ok(status::SUCCESS),
        "waiting on a never-recorded event blocked"
    );
    gate.open();
}

#[test]
fn bad_event_handles_are_invalid_handle() {
    let d = cuda();
    let _ctx = Context::new(0);
    let s = Stream::new(0);
    let good = Event::new(F::CU_EVENT_DEFAULT);
    let destroyed = Event::new(F::CU_EVENT_DEFAULT).0; // dropped (destroyed) here
    let mut local = [0u64; 8];
    let mut ms = 0.0f32;
    for (what, bad) in [("destroyed", destroyed), ("bogus", local.as_mut_ptr() as CUevent), ("NULL", null_mut())] {
        expect(call!(d.cuEventQuery(bad)), status::INVALID_HANDLE, &format!("cuEventQuery({what})"));
        expect(call!(d.cuEventSynchronize(bad)), status::INVALID_HANDLE, &format!("cuEventSynchronize({what})"));
        expect(call!(d.cuEventRecord(bad, s.raw)), status::INVALID_HANDLE, &format!("cuEventRecord({what})"));
        expect(
            call!(d.cuStreamWaitEvent(s.raw, bad, 0)),
            status::INVALID_HANDLE,
            &format!("cuStreamWaitEvent on {what}"),
        );
        expect(
            call!(d.cuEventElapsedTime(&mut ms, good.0, bad)),
            status::INVALID_HANDLE,
            &format!("cuEventElapsedTime to {what}"),
        );
        if !bad.is_null() {
            expect(call!(d.cuEventDestroy_v2(bad)), status::INVALID_HANDLE, &format!("cuEventDestroy_v2({what})"));
        }
    }
    expect(call!(d.cuEventCreate(null_mut(), 0)), status::INVALID_VALUE, "cuEventCreate(NULL)");
    let mut e = null_mut();
    expect(call!(d.cuEventCreate(&mut e, 0x100)), status::INVALID_VALUE, "cuEventCreate with unknown flags");
}

#[test]
fn stream_wait_event_waits_for_the_record_current_at_the_call() {
    // "the stream will wait on the most recent record of the event at the time of the
    // call": recording the event again afterwards does not release the waiter.
    let d = cuda();
    let ctx = Context::new(0);
    let a = Stream::new(0);
    let b = Stream::new(0);
    let c = Stream::new(0);
    let ev = Event::new(F::CU_EVENT_DISABLE_TIMING);
    let gate = Gate::new();
    gate.enqueue(a.raw);
    check(call!(d.cuEventRecord(ev.0, a.raw)));
    check(call!(d.cuStreamWaitEvent(b.raw, ev.0, 0)));
    check(call!(d.cuEventRecord(ev.0, c.raw)));
    check(call!(d.cuStreamSynchronize(c.raw)));
    expect(call!(d.cuEventQuery(ev.0)), status::SUCCESS, "the event's newest record completed");
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    check(host_fn(b.raw, move || flag.store(true, Ordering::SeqCst)));
    let b_sync = sync_stream_in(ctx.raw, b.raw);
    assert!(b_sync.recv_timeout(SHORT).is_err(), "stream B was released by a later record of the event");
    assert!(!ran.load(Ordering::SeqCst));
    gate.open();
    assert_eq!(b_sync.recv_timeout(LONG), Ok(status::SUCCESS));
    assert!(ran.load(Ordering::SeqCst));
}

#[test]
fn record_on_a_stream_of_another_context_is_invalid_handle() {
    // "hEvent and hStream must be from the same context otherwise CUDA_ERROR_INVALID_HANDLE".
    let d = cuda();
    let _a = Context::new(0);
    let ev = Event::new(F::CU_EVENT_DEFAULT);
    let b = Context::new(0);
    let s = Stream::new(0);
    expect(
        call!(d.cuEventRecord(ev.0, s.raw)),
        status::INVALID_HANDLE,
        "cuEventRecord with a stream of another context",
    );
    drop(s);
    drop(b);
}
