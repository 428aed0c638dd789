//! Concurrent use from many threads: data stays correct, accounting stays exact, and
//! racing allocations never overshoot the device.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use gpupool_e2e::cu::CUcontext;
use gpupool_e2e::{EMPTY_PTX, Shared, call, check, cuda, expect, isolated_test, status};

const MIB: usize = 1 << 20;
const THREADS: usize = 16;

fn mem_info() -> (usize, usize) {
    let (mut free, mut total) = (0, 0);
    check(call!(cuda().cuMemGetInfo_v2(&mut free, &mut total)));
    (free, total)
}

/// One worker: alloc / copy / memset / launch / verify / free, `iters` times, in `ctx`.
fn worker(t: usize, ctx: Shared<CUcontext>, iters: usize) {
    let d = cuda();
    check(call!(d.cuCtxSetCurrent(ctx.0)));
    let mut stream = null_mut();
    check(call!(d.cuStreamCreate(&mut stream, 1)));
    let mut module = null_mut();
    check(call!(d.cuModuleLoadData(&mut module, EMPTY_PTX.as_ptr().cast())));
    let mut f = null_mut();
    check(call!(d.cuModuleGetFunction(&mut f, module, c"empty".as_ptr())));
    for i in 0..iters {
        let len = 4096 * (1 + (t * 31 + i * 17) % 64);
        let (mut a, mut b) = (0, 0);
        check(call!(d.cuMemAlloc_v2(&mut a, len)));
        check(call!(d.cuMemAlloc_v2(&mut b, len)));
        let data: Vec<u8> = (0..len).map(|k| (k ^ t ^ (i << 3)) as u8).collect();
        check(call!(d.cuMemcpyHtoD_v2(a, data.as_ptr().cast(), len)));
        check(call!(d.cuMemcpyDtoDAsync_v2(b, a, len, stream)));
        let mut p0 = b;
        let mut p1 = len as u32;
        let mut params: [*mut c_void; 2] = [(&raw mut p0).cast(), (&raw mut p1).cast()];
        check(call!(d.cuLaunchKernel(f, 2, 1, 1, 64, 1, 1, 0, stream, params.as_mut_ptr(), null_mut(),)));
        let mut back = vec![0u8; len];
        check(call!(d.cuMemcpyDtoHAsync_v2(back.as_mut_ptr().cast(), b, len, stream,)));
        check(call!(d.cuStreamSynchronize(stream)));
        assert!(back == data, "thread {t} iteration {i}: data corrupted");
        check(call!(d.cuMemsetD8Async(a, t as u8, len, stream)));
        check(call!(d.cuStreamSynchronize(stream)));
        check(call!(d.cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), a, len)));
        assert!(back.iter().all(|&x| x == t as u8), "thread {t} iteration {i}: memset lost");
        check(call!(d.cuMemFree_v2(a)));
        check(call!(d.cuMemFree_v2(b)));
    }
    check(call!(d.cuModuleUnload(module)));
    check(call!(d.cuStreamDestroy_v2(stream)));
}

isolated_test!(fn sixteen_threads_alloc_copy_verify_free() env("GPUPOOL_SIM_MEMORY" => "256MiB", "GPUPOOL_SIM_DEVICES" => "2") {
    let d = cuda();
    // Half the threads share device 0's primary context, the others share one created
    // context on device 1, so contexts are used from several threads at once.
    let mut primary = null_mut();
    let mut created = null_mut();
    check(call!(d.cuDevicePrimaryCtxRetain(&mut primary, 0)));
    check(call!(d.cuCtxCreate_v2(&mut created, 0, 1)));
    let ctxs = [Shared(primary), Shared(created)];
    let before: Vec<_> = ctxs
        .iter()
        .map(|c| {
            check(call!(d.cuCtxSetCurrent(c.0)));
            mem_info()
        })
        .collect();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let ctx = ctxs[t % 2];
            std::thread::spawn(move || worker(t, ctx, 40))
        })
        .collect();
    for (t, h) in handles.into_iter().enumerate() {
        h.join().unwrap_or_else(|_| panic!("worker {t} failed"));
    }
    for (c, want) in ctxs.iter().zip(before) {
        check(call!(d.cuCtxSetCurrent(c.0)));
        assert_eq!(mem_info(), want, "all memory returned after the workers freed everything");
    }
    check(call!(d.cuCtxDestroy_v2(created)));
    check(call!(d.cuDevicePrimaryCtxRelease_v2(0)));
});

isolated_test!(fn racing_allocations_never_overshoot() env("GPUPOOL_SIM_MEMORY" => "64MiB") {
    let d = cuda();
    let mut ctx = null_mut();
    check(call!(d.cuCtxCreate_v2(&mut ctx, 0, 0)));
    let (free0, total) = mem_info();
    assert_eq!(free0, 64 * MIB);
    let ctx = Shared(ctx);
    let granted = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (granted, barrier) = (granted.clone(), barrier.clone());
            std::thread::spawn(move || {
                let ctx = ctx;
                let d = cuda();
                check(call!(d.cuCtxSetCurrent(ctx.0)));
                barrier.wait();
                let mut mine = Vec::new();
                loop {
                    let mut p = 0;
                    let r = call!(d.cuMemAlloc_v2(&mut p, MIB));
                    if r == status::OUT_OF_MEMORY {
                        break;
                    }
                    check(r);
                    granted.fetch_add(1, Ordering::SeqCst);
                    mine.push(p);
                }
                mine
            })
        })
        .collect();
    let all: Vec<_> = handles.into_iter().flat_map(|h| h.join().expect("allocating thread failed")).collect();
    assert_eq!(granted.load(Ordering::SeqCst), 64, "exactly 64 x 1 MiB fit in 64 MiB");
    assert_eq!(mem_info(), (0, total));
    let mut p = 0;
    expect(call!(d.cuMemAlloc_v2(&mut p, 1)), status::OUT_OF_MEMORY, "full after the race");
    let mut sorted = all.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 64, "every allocation got a distinct address");
    for w in sorted.windows(2) {
        assert!(w[1] - w[0] >= MIB as u64, "allocations overlap");
    }
    for p in all {
        check(call!(d.cuMemFree_v2(p)));
    }
    assert_eq!(mem_info(), (free0, total));
    check(call!(d.cuCtxDestroy_v2(ctx.0)));
});
