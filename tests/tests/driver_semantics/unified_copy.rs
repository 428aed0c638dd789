//! Copies with device memory of another context: under unified addressing (always on in a
//! 64-bit process) every copy function takes a pointer of any context of the process and
//! infers where it lives from its value. "The function cuMemcpy() may be used to perform a
//! copy between two pointers" (driver API, Unified Addressing), and copies between two
//! devices' memories are done "using the regular memory copy functions" (Programming Guide,
//! Peer-to-Peer Memory Copy). The copy runs on the caller's stream, in the caller's context.
//! Memsets and frees are not copies: another context's pointer stays INVALID_VALUE there
//! (memory.rs), and a kernel without peer access still faults on it.

use gpupool_e2e::cu::{CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUmemorytype, CUresult, CUstream_flags};
use gpupool_e2e::{
    Context, DeviceBuffer, Gate, Stream, call, check, cuda, expect, isolated_test, launch_fill, load_fill, status,
};
use std::ptr::null_mut;
use std::time::Duration;

const N: usize = 4096;

fn pattern(seed: u8) -> Vec<u8> {
    (0..N).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Every copy form, synchronous and on a stream of the current context, with `theirs` (a
/// buffer of another context, holding `pattern(1)`) as source and destination; `ours` is the
/// current context's. Leaves `theirs` holding `pattern(9)`.
fn copy_every_way(theirs: &DeviceBuffer, ours: &DeviceBuffer) {
    let d = cuda();
    let mut host = vec![0u8; N];
    check(call!(d.cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), theirs.ptr, N)));
    assert_eq!(host, pattern(1), "cuMemcpyDtoH_v2 from another context's pointer");
    check(call!(d.cuMemcpyHtoD_v2(theirs.ptr, pattern(2).as_ptr().cast(), N)));
    check(call!(d.cuMemcpyDtoD_v2(ours.ptr, theirs.ptr, N)));
    assert_eq!(ours.read(), pattern(2), "cuMemcpyHtoD_v2 into, then cuMemcpyDtoD_v2 from, another context's pointer");
    check(call!(d.cuMemcpy(theirs.ptr, pattern(3).as_ptr() as u64, N)));
    host.fill(0);
    check(call!(d.cuMemcpy(host.as_mut_ptr() as u64, theirs.ptr, N)));
    assert_eq!(host, pattern(3), "cuMemcpy (unified) both ways");

    // 2D and 3D: the pointer named as DEVICE or as UNIFIED memory.
    let rows = 16;
    let width = N / rows;
    let copy2d = |src: (CUmemorytype, u64), dst: (CUmemorytype, u64)| CUDA_MEMCPY2D {
        srcMemoryType: src.0,
        srcDevice: src.1,
        srcHost: src.1 as *const _,
        srcPitch: width,
        dstMemoryType: dst.0,
        dstDevice: dst.1,
        dstHost: dst.1 as *mut _,
        dstPitch: width,
        WidthInBytes: width,
        Height: rows,
        ..Default::default()
    };
    let p4 = pattern(4);
    let host_src = (CUmemorytype::CU_MEMORYTYPE_HOST, p4.as_ptr() as u64);
    check(call!(d.cuMemcpy2D_v2(&copy2d(host_src, (CUmemorytype::CU_MEMORYTYPE_UNIFIED, theirs.ptr)))));
    host.fill(0);
    let host_dst = (CUmemorytype::CU_MEMORYTYPE_HOST, host.as_mut_ptr() as u64);
    check(call!(d.cuMemcpy2D_v2(&copy2d((CUmemorytype::CU_MEMORYTYPE_DEVICE, theirs.ptr), host_dst))));
    assert_eq!(host, p4, "cuMemcpy2D_v2 with another context's pointer as UNIFIED, then as DEVICE memory");
    let copy3d = CUDA_MEMCPY3D {
        srcMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcDevice: theirs.ptr,
        srcPitch: width,
        srcHeight: rows / 2,
        dstMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
        dstDevice: ours.ptr,
        dstPitch: width,
        dstHeight: rows / 2,
        WidthInBytes: width,
        Height: rows / 2,
        Depth: 2,
        ..Default::default()
    };
    check(call!(d.cuMemcpy3D_v2(&copy3d)));
    assert_eq!(ours.read(), p4, "cuMemcpy3D_v2 from another context's pointer");

    // The async forms, on a stream of the current context.
    let s = Stream::new(0);
    let (p5, p6, p7) = (pattern(5), pattern(6), pattern(7));
    check(call!(d.cuMemcpyHtoDAsync_v2(theirs.ptr, p5.as_ptr().cast(), N, s.raw)));
    check(call!(d.cuMemcpyDtoDAsync_v2(ours.ptr, theirs.ptr, N, s.raw)));
    check(call!(d.cuStreamSynchronize(s.raw)));
    assert_eq!(ours.read(), p5, "cuMemcpyHtoDAsync_v2 into, then cuMemcpyDtoDAsync_v2 from, another context's pointer");
    check(call!(d.cuMemcpyAsync(theirs.ptr, p6.as_ptr() as u64, N, s.raw)));
    host.fill(0);
    check(call!(d.cuMemcpyDtoHAsync_v2(host.as_mut_ptr().cast(), theirs.ptr, N, s.raw)));
    check(call!(d.cuStreamSynchronize(s.raw)));
    assert_eq!(host, p6, "cuMemcpyAsync into, then cuMemcpyDtoHAsync_v2 from, another context's pointer");
    let copy = copy2d(
        (CUmemorytype::CU_MEMORYTYPE_HOST, p7.as_ptr() as u64),
        (CUmemorytype::CU_MEMORYTYPE_DEVICE, theirs.ptr),
    );
    check(call!(d.cuMemcpy2DAsync_v2(&copy, s.raw)));
    check(call!(d.cuMemcpyDtoD_v2(ours.ptr, theirs.ptr, N)));
    check(call!(d.cuStreamSynchronize(s.raw)));
    assert_eq!(ours.read(), p7, "cuMemcpy2DAsync_v2 into another context's pointer");

    // The allocation's bounds still hold, whoever owns it.
    expect(
        call!(d.cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), theirs.ptr + 1, N)),
        status::INVALID_VALUE,
        "DtoH running past the end of another context's allocation",
    );
    check(call!(d.cuMemcpyHtoD_v2(theirs.ptr, pattern(9).as_ptr().cast(), N)));
}

#[test]
fn every_copy_takes_a_pointer_of_another_context_on_the_same_device() {
    let a = Context::new(0);
    let theirs = DeviceBuffer::new(N);
    theirs.write(&pattern(1));
    {
        let _b = Context::new(0); // current now: b, on the same device
        let ours = DeviceBuffer::new(N);
        copy_every_way(&theirs, &ours);
    }
    a.make_current();
    assert_eq!(theirs.read(), pattern(9), "the owner sees what the other context's copies wrote");
}

isolated_test!(fn every_copy_takes_a_pointer_on_another_device() env("GPUPOOL_SIM_DEVICES" => "2") {
    let on_1 = Context::new(1);
    let theirs = DeviceBuffer::new(N);
    theirs.write(&pattern(1));
    let on_0 = Context::new(0);
    let ours = DeviceBuffer::new(N);
    copy_every_way(&theirs, &ours);
    on_1.make_current();
    assert_eq!(theirs.read(), pattern(9), "device 1 sees what device 0's copies wrote");
    on_0.make_current();
});

/// The copy is queued on the caller's stream (held here by a gate), not on any stream of the
/// context that owns the memory; the owner may free the pointer meanwhile, and the queued copy
/// still reads the bytes it was given.
#[test]
fn a_copy_of_another_contexts_memory_runs_on_the_callers_stream() {
    let d = cuda();
    let a = Context::new(0);
    let theirs = DeviceBuffer::new(N);
    theirs.write(&pattern(1));
    let b = Context::new(0);
    let ours = DeviceBuffer::new(N);
    ours.write(&pattern(0));
    // Non-blocking, so the synchronous reads on the legacy stream below do not wait for it.
    let s = Stream::new(CUstream_flags::CU_STREAM_NON_BLOCKING.0);
    let gate = Gate::new();
    gate.enqueue(s.raw);
    assert!(gate.wait_entered(Duration::from_secs(10)), "the stream never reached the gate");
    check(call!(d.cuMemcpyDtoDAsync_v2(ours.ptr, theirs.ptr, N, s.raw)));
    expect(call!(d.cuStreamQuery(s.raw)), status::NOT_READY, "the caller's stream, held by the gate");
    a.make_current();
    check(call!(d.cuCtxSynchronize()));
    drop(theirs); // cuMemFree_v2 in the owner's context, with the copy still queued
    b.make_current();
    assert_eq!(ours.read(), pattern(0), "the copy ran before its stream reached it");
    gate.open();
    check(call!(d.cuStreamSynchronize(s.raw)));
    assert_eq!(ours.read(), pattern(1), "the queued copy read the freed allocation's bytes");
}

/// Copies take another context's memory; kernels do not: without peer access a kernel's
/// store to it faults.
#[test]
fn a_kernel_still_faults_on_another_contexts_memory() {
    let d = cuda();
    let _a = Context::new(0);
    let theirs = DeviceBuffer::new(N);
    {
        let _b = Context::new(0);
        let (_m, f) = load_fill();
        check(launch_fill(f, theirs.ptr, 0x77, 32, null_mut()));
        assert_eq!(
            call!(d.cuCtxSynchronize()),
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            "a kernel storing to another context's memory"
        );
    }
}
