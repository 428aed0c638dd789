//! Contexts: the per-thread context stack, and invalid context handles.

use std::ptr::null_mut;
use std::sync::{Arc, Barrier};

use gpupool_e2e::cu::CUcontext;
use gpupool_e2e::{Shared, call, check, cuda, device_count, expect, status};

fn current() -> CUcontext {
    let mut c = 0x1 as CUcontext;
    check(call!(cuda().cuCtxGetCurrent(&mut c)));
    c
}

fn current_device() -> i32 {
    let mut dev = -1;
    check(call!(cuda().cuCtxGetDevice(&mut dev)));
    dev
}

/// Creates a context on `dev` and pops it, leaving the caller's stack as it was.
fn floating_context(dev: i32) -> CUcontext {
    let d = cuda();
    let mut c = null_mut();
    let mut popped = null_mut();
    check(call!(d.cuCtxCreate_v2(&mut c, 0, dev)));
    assert_eq!(current(), c, "cuCtxCreate_v2 makes the new context current");
    check(call!(d.cuCtxPopCurrent_v2(&mut popped)));
    assert_eq!(popped, c);
    c
}

#[test]
fn context_stack_is_per_thread() {
    let d = cuda();
    let dev_b = if device_count() > 1 { 1 } else { 0 };
    let a = Shared(floating_context(0));
    let b = Shared(floating_context(dev_b));
    const THREADS: usize = 8;
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let (first, second, second_dev) = if i % 2 == 0 { (a, b, dev_b) } else { (b, a, 0) };
                assert!(current().is_null(), "a new thread has no current context");
                check(call!(d.cuCtxPushCurrent_v2(first.0)));
                assert_eq!(current(), first.0);
                check(call!(d.cuCtxPushCurrent_v2(second.0)));
                assert_eq!(current(), second.0);
                assert_eq!(current_device(), second_dev, "cuCtxGetDevice follows the current context");
                // Every thread has pushed; none may see another's stack.
                barrier.wait();
                let mut popped = null_mut();
                check(call!(d.cuCtxPopCurrent_v2(&mut popped)));
                assert_eq!(popped, second.0);
                assert_eq!(current(), first.0, "pop uncovers the context below");
                barrier.wait();
                // Set replaces the top of the stack.
                check(call!(d.cuCtxSetCurrent(second.0)));
                assert_eq!(current(), second.0);
                check(call!(d.cuCtxPopCurrent_v2(&mut popped)));
                assert_eq!(popped, second.0);
                assert!(current().is_null(), "set replaced, not pushed");
                expect(call!(d.cuCtxPopCurrent_v2(&mut popped)), status::INVALID_CONTEXT, "pop of an empty stack");
                // Set on an empty stack pushes; set NULL pops.
                check(call!(d.cuCtxSetCurrent(first.0)));
                assert_eq!(current(), first.0);
                check(call!(d.cuCtxSetCurrent(null_mut())));
                assert!(current().is_null());
                check(call!(d.cuCtxSetCurrent(null_mut())));
                let mut dev = -1;
                expect(call!(d.cuCtxGetDevice(&mut dev)), status::INVALID_CONTEXT, "cuCtxGetDevice with no context");
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a context-stack thread failed");
    }
    check(call!(d.cuCtxDestroy_v2(a.0)));
    check(call!(d.cuCtxDestroy_v2(b.0)));
}

#[test]
fn destroying_the_current_context_pops_it() {
    let d = cuda();
    std::thread::spawn(move || {
        let under = floating_context(0);
        check(call!(d.cuCtxPushCurrent_v2(under)));
        let mut top = null_mut();
        check(call!(d.cuCtxCreate_v2(&mut top, 0, 0)));
        assert_eq!(current(), top);
        check(call!(d.cuCtxDestroy_v2(top)));
        assert_eq!(current(), under, "the destroyed context left the stack");
        // The destroyed handle is no longer a context.
        expect(call!(d.cuCtxPushCurrent_v2(top)), status::INVALID_CONTEXT, "push of a destroyed context");
        expect(call!(d.cuCtxSetCurrent(top)), status::INVALID_CONTEXT, "set of a destroyed context");
        expect(call!(d.cuCtxDestroy_v2(top)), status::INVALID_CONTEXT, "destroying a context twice");
        assert_eq!(current(), under, "failed calls leave the stack alone");
        check(call!(d.cuCtxDestroy_v2(under)));
        assert!(current().is_null());
    })
    .join()
    .expect("thread failed");
}

#[test]
fn bogus_context_handles_are_invalid_context() {
    let d = cuda();
    std::thread::spawn(move || {
        let mut local = [0u64; 8];
        for bogus in [0xdead_0000usize as CUcontext, local.as_mut_ptr() as CUcontext] {
            expect(call!(d.cuCtxPushCurrent_v2(bogus)), status::INVALID_CONTEXT, "push of a bogus context");
            expect(call!(d.cuCtxSetCurrent(bogus)), status::INVALID_CONTEXT, "set of a bogus context");
            expect(call!(d.cuCtxDestroy_v2(bogus)), status::INVALID_CONTEXT, "destroy of a bogus context");
            assert!(current().is_null());
        }
        expect(call!(d.cuCtxGetCurrent(null_mut())), status::INVALID_VALUE, "cuCtxGetCurrent(NULL)");
        expect(call!(d.cuCtxCreate_v2(null_mut(), 0, 0)), status::INVALID_VALUE, "cuCtxCreate_v2(NULL, 0, 0)");
    })
    .join()
    .expect("thread failed");
}
