//! Calls that end an object while queued work still names it: `cuMemFree`, `cuMemFreeAsync`,
//! `cuMemFreeHost`, `cuModuleUnload`, `cuStreamDestroy`, `cuEventDestroy`, `cuCtxDestroy`.
//!
//! Each test holds a non-blocking stream behind a [`Gate`], queues work that uses the object,
//! ends the object, and lets the stream run. The driver documents the result of each ending
//! call, and whatever the queued work then does, it must never touch freed bytes: this
//! process would die with SIGSEGV (the daemon, in the pool, with every tenant's work in it).
//! `cuMemFree` and `cuModuleUnload` wait for the work queued before them, as NVIDIA's driver
//! does ("CUDA will not let the memory be released while outstanding device work still
//! needs it"), so those tests open the gate from another thread while the call waits.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::time::Duration;

use gpupool_e2e::cu::{CU_MEMHOSTALLOC_DEVICEMAP, CUevent, CUstream_flags};
use gpupool_e2e::{Context, DeviceBuffer, Gate, Stream, call, check, cuda, expect, launch_fill, load_fill, status};

const MIB: usize = 1 << 20;
const NON_BLOCKING: u32 = CUstream_flags::CU_STREAM_NON_BLOCKING.0;

/// A stream held shut until [`Held::run`]: work queued on it meanwhile cannot start.
struct Held {
    stream: Stream,
    gate: Gate,
}

impl Held {
    fn new() -> Held {
        let stream = Stream::new(NON_BLOCKING);
        let gate = Gate::new();
        gate.enqueue(stream.raw);
        assert!(gate.wait_entered(Duration::from_secs(10)), "the stream never reached its gate");
        Held { stream, gate }
    }

    /// Opens the gate and waits for everything queued; returns the stream's result.
    fn run(&self) -> gpupool_e2e::cu::CUresult {
        self.gate.open();
        call!(cuda().cuStreamSynchronize(self.stream.raw))
    }

    /// Runs `end` (a call that ends an object) while another thread opens the gate after
    /// 50 ms; returns its result, and whether the stream had finished when it returned.
    fn end_while_opening(&self, end: impl FnOnce() -> gpupool_e2e::cu::CUresult) -> (gpupool_e2e::cu::CUresult, bool) {
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                self.gate.open();
            });
            let r = end();
            (r, call!(cuda().cuStreamQuery(self.stream.raw)) == status::SUCCESS)
        })
    }
}

fn alloc(len: usize) -> u64 {
    let mut p = 0;
    check(call!(cuda().cuMemAlloc_v2(&mut p, len)));
    p
}

/// The reproducer: 64 MiB memset queued, then the memory freed without a sync.
#[test]
fn free_after_a_queued_memset() {
    let _ctx = Context::new(0);
    let held = Held::new();
    let p = alloc(64 * MIB);
    check(call!(cuda().cuMemsetD8Async(p, 1, 64 * MIB, held.stream.raw)));
    let (r, finished) = held.end_while_opening(|| call!(cuda().cuMemFree_v2(p)));
    check(r);
    assert!(finished, "cuMemFree returned before the memset queued ahead of it had run");
    expect(call!(cuda().cuMemFree_v2(p)), status::INVALID_VALUE, "a second cuMemFree of the same pointer");
    check(held.run());
}

#[test]
fn free_after_queued_2d_and_32_bit_memsets() {
    let _ctx = Context::new(0);
    let held = Held::new();
    let p = alloc(4 * MIB);
    check(call!(cuda().cuMemsetD2D32Async(p, 4096, 0xabcd_ef01, 1024, 1024, held.stream.raw)));
    check(call!(cuda().cuMemsetD16Async(p, 0x1234, 2 * MIB, held.stream.raw)));
    let (r, finished) = held.end_while_opening(|| call!(cuda().cuMemFree_v2(p)));
    check(r);
    assert!(finished, "cuMemFree returned before the memsets queued ahead of it had run");
    check(held.run());
}

#[test]
fn free_of_both_ends_after_queued_copies() {
    let _ctx = Context::new(0);
    let held = Held::new();
    let (a, b) = (alloc(8 * MIB), alloc(8 * MIB));
    let mut pinned: *mut c_void = null_mut();
    check(call!(cuda().cuMemHostAlloc(&mut pinned, 8 * MIB, CU_MEMHOSTALLOC_DEVICEMAP)));
    check(call!(cuda().cuMemcpyHtoDAsync_v2(a, pinned, 8 * MIB, held.stream.raw)));
    check(call!(cuda().cuMemcpyDtoDAsync_v2(b, a, 8 * MIB, held.stream.raw)));
    check(call!(cuda().cuMemcpyDtoHAsync_v2(pinned, b, 8 * MIB, held.stream.raw)));
    // The page-locked end first: its queued copies keep its bytes alive.
    check(call!(cuda().cuMemFreeHost(pinned)));
    let (r, finished) = held.end_while_opening(|| call!(cuda().cuMemFree_v2(a)));
    check(r);
    assert!(finished, "cuMemFree returned before the copies queued ahead of it had run");
    check(call!(cuda().cuMemFree_v2(b)));
    check(held.run());
}

#[test]
fn free_after_a_queued_kernel_that_writes_it() {
    let _ctx = Context::new(0);
    let (m, f) = load_fill();
    let held = Held::new();
    let p = alloc(4096);
    check(launch_fill(f, p, 7, 1024, held.stream.raw));
    let (r, finished) = held.end_while_opening(|| call!(cuda().cuMemFree_v2(p)));
    check(r);
    assert!(finished, "cuMemFree returned before the kernel queued ahead of it had run");
    // The kernel ran on the memory it was given, not on an unmapped address.
    check(held.run());
    check(call!(cuda().cuModuleUnload(m)));
}

#[test]
fn stream_ordered_free_before_queued_work_on_another_stream() {
    let _ctx = Context::new(0);
    let held = Held::new();
    let other = Stream::new(NON_BLOCKING);
    let p = alloc(16 * MIB);
    check(call!(cuda().cuMemsetD8Async(p, 3, 16 * MIB, held.stream.raw)));
    // Unordered with the memset: the application's bug, not a reason for the driver to crash.
    check(call!(cuda().cuMemFreeAsync(p, other.raw)));
    check(call!(cuda().cuStreamSynchronize(other.raw)));
    check(held.run());
}

#[test]
fn module_unload_with_a_queued_launch() {
    let _ctx = Context::new(0);
    let buf = DeviceBuffer::new(4096);
    let (m, f) = load_fill();
    let held = Held::new();
    check(launch_fill(f, buf.ptr, 0x5eed, 256, held.stream.raw));
    let (r, finished) = held.end_while_opening(|| call!(cuda().cuModuleUnload(m)));
    check(r);
    assert!(finished, "cuModuleUnload returned before the launch queued ahead of it had run");
    check(held.run());
    let words: Vec<u32> = buf.read().chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    assert!(words[..256].iter().all(|&w| w == 0x5eed), "the launch queued before the unload ran");
}

#[test]
fn stream_destroy_with_queued_work_lets_it_finish() {
    let _ctx = Context::new(0);
    let buf = DeviceBuffer::new(MIB);
    let stream = Stream::new(NON_BLOCKING);
    let gate = Gate::new();
    gate.enqueue(stream.raw);
    check(call!(cuda().cuMemsetD8Async(buf.ptr, 0x42, MIB, stream.raw)));
    // "cuStreamDestroy: in case the device is still doing work in the stream when
    // cuStreamDestroy() is called, the function will return immediately and the resources
    // associated with the stream will be released automatically once the device has
    // completed all work in the stream."
    let raw = stream.raw;
    std::mem::forget(stream);
    check(call!(cuda().cuStreamDestroy_v2(raw)));
    gate.open();
    check(call!(cuda().cuCtxSynchronize()));
    assert!(buf.read().iter().all(|&b| b == 0x42), "work queued before cuStreamDestroy completed");
}

#[test]
fn event_destroy_while_its_record_is_queued() {
    let _ctx = Context::new(0);
    let held = Held::new();
    let mut e: CUevent = null_mut();
    check(call!(cuda().cuEventCreate(&mut e, 0)));
    check(call!(cuda().cuEventRecord(e, held.stream.raw)));
    // "If the event is waiting in a stream, cuEventDestroy returns immediately and the
    // resources are released once the event completes."
    check(call!(cuda().cuEventDestroy_v2(e)));
    check(held.run());
}

#[test]
fn context_destroy_with_queued_work() {
    let ctx = Context::new(0);
    let (_, f) = load_fill();
    let held = Held::new();
    let p = alloc(8 * MIB);
    check(call!(cuda().cuMemsetD32Async(p, 9, 2 * MIB, held.stream.raw)));
    check(launch_fill(f, p, 1, 512, held.stream.raw));
    let gate = held.gate;
    let raw = held.stream.raw;
    std::mem::forget(held.stream);
    // Destroying the context releases its memory, streams and modules; the queued work
    // must finish (or fail) without touching what was released.
    let raw_ctx = ctx.raw;
    std::mem::forget(ctx);
    let done = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        gate.open();
    });
    check(call!(cuda().cuCtxDestroy_v2(raw_ctx)));
    done.join().unwrap();
    expect(call!(cuda().cuStreamSynchronize(raw)), status::INVALID_HANDLE, "a stream of a destroyed context");
}
