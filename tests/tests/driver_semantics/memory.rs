//! Device memory: bad pointers, freed pointers, frees and memsets of another context's
//! pointers, capacity and `cuMemGetInfo_v2` accounting.

use std::ptr::{null, null_mut};

use gpupool_e2e::{Context, DeviceBuffer, call, check, cuda, expect, isolated_test, status, within};
use std::time::Duration;

const MIB: usize = 1 << 20;

#[test]
fn copies_and_memsets_round_trip() {
    let d = cuda();
    let _ctx = Context::new(0);
    let n = 1 << 16;
    let a = DeviceBuffer::new(n);
    let b = DeviceBuffer::new(n);
    let data: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
    a.write(&data);
    check(call!(d.cuMemcpyDtoD_v2(b.ptr, a.ptr, n)));
    assert_eq!(b.read(), data, "HtoD, DtoD, DtoH round trip");

    check(call!(d.cuMemsetD8_v2(a.ptr, 0x5a, n)));
    assert!(a.read().iter().all(|&x| x == 0x5a), "cuMemsetD8_v2");
    check(call!(d.cuMemsetD32_v2(b.ptr + 4, 0xdeadbeef, 2)));
    let got = b.read();
    assert_eq!(&got[..4], &data[..4], "memset before the range must not change");
    assert_eq!(&got[4..12], &[0xef, 0xbe, 0xad, 0xde, 0xef, 0xbe, 0xad, 0xde]);
    assert_eq!(&got[12..], &data[12..], "memset after the range must not change");

    // An interior pointer names the allocation it lies in.
    let (mut base, mut size) = (0, 0);
    check(call!(d.cuMemGetAddressRange_v2(&mut base, &mut size, a.ptr + 100,)));
    assert_eq!((base, size), (a.ptr, n));
    // "Both parameters pbase and psize are optional. If one of them is NULL, it is ignored."
    let (mut base, mut size) = (0, 0);
    check(call!(d.cuMemGetAddressRange_v2(null_mut(), &mut size, a.ptr + 1,)));
    check(call!(d.cuMemGetAddressRange_v2(&mut base, null_mut(), a.ptr + 1,)));
    assert_eq!((base, size), (a.ptr, n));
    let mut out = [0u8; 16];
    check(call!(d.cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), b.ptr + 100, 16,)));
    assert_eq!(&out[..], &data[100..116]);
}

#[test]
fn null_pointers_and_zero_sizes_are_invalid_value() {
    let d = cuda();
    let _ctx = Context::new(0);
    let buf = DeviceBuffer::new(4096);
    let mut host = vec![0u8; 4096];
    expect(call!(d.cuMemAlloc_v2(null_mut(), 16)), status::INVALID_VALUE, "cuMemAlloc_v2(NULL, 16)");
    let mut p = 0;
    expect(call!(d.cuMemAlloc_v2(&mut p, 0)), status::INVALID_VALUE, "cuMemAlloc_v2(&p, 0)");
    let mut total = 0;
    expect(call!(d.cuMemGetInfo_v2(null_mut(), &mut total)), status::INVALID_VALUE, "cuMemGetInfo_v2(NULL, &total)");
    let mut free = 0;
    expect(call!(d.cuMemGetInfo_v2(&mut free, null_mut())), status::INVALID_VALUE, "cuMemGetInfo_v2(&free, NULL)");
    expect(
        call!(d.cuMemcpyHtoD_v2(buf.ptr, null(), 16)),
        status::INVALID_VALUE,
        "cuMemcpyHtoD_v2 from a NULL host pointer",
    );
    expect(
        call!(d.cuMemcpyDtoH_v2(null_mut(), buf.ptr, 16)),
        status::INVALID_VALUE,
        "cuMemcpyDtoH_v2 to a NULL host pointer",
    );
    expect(
        call!(d.cuMemcpyHtoD_v2(0, host.as_ptr().cast(), 16)),
        status::INVALID_VALUE,
        "cuMemcpyHtoD_v2 to device address 0",
    );
    expect(
        call!(d.cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), 0, 16)),
        status::INVALID_VALUE,
        "cuMemcpyDtoH_v2 from device address 0",
    );
    expect(call!(d.cuMemsetD8_v2(0, 1, 16)), status::INVALID_VALUE, "cuMemsetD8_v2 on device address 0");
    let mut base = 0;
    let mut size = 0;
    expect(call!(d.cuMemGetAddressRange_v2(&mut base, &mut size, 0)), status::NOT_FOUND, "cuMemGetAddressRange_v2(0)");
}

#[test]
fn out_of_bounds_and_unallocated_addresses_are_invalid_value() {
    let d = cuda();
    let _ctx = Context::new(0);
    let buf = DeviceBuffer::new(4096);
    let host = vec![0u8; 8192];
    expect(
        call!(d.cuMemcpyHtoD_v2(buf.ptr, host.as_ptr().cast(), 8192)),
        status::INVALID_VALUE,
        "HtoD past the end of the allocation",
    );
    expect(
        call!(d.cuMemcpyHtoD_v2(buf.ptr + 4090, host.as_ptr().cast(), 7)),
        status::INVALID_VALUE,
        "HtoD straddling the end",
    );
    expect(call!(d.cuMemsetD32_v2(buf.ptr, 0, 1025)), status::INVALID_VALUE, "cuMemsetD32_v2 past the end");
    // An address far from anything allocated in this context.
    let wild = buf.ptr.wrapping_add(1 << 40);
    expect(
        call!(d.cuMemcpyHtoD_v2(wild, host.as_ptr().cast(), 16)),
        status::INVALID_VALUE,
        "HtoD to an unallocated address",
    );
    expect(call!(d.cuMemFree_v2(wild)), status::INVALID_VALUE, "cuMemFree_v2 of an unallocated address");
    // Freeing an interior pointer is not freeing the allocation.
    expect(call!(d.cuMemFree_v2(buf.ptr + 16)), status::INVALID_VALUE, "cuMemFree_v2 of an interior pointer");
    buf.write(&[1, 2, 3]);
    assert_eq!(&buf.read()[..3], &[1, 2, 3], "the allocation survives the failed calls");
}

#[test]
fn freed_pointers_and_double_free_are_invalid_value() {
    let d = cuda();
    let _ctx = Context::new(0);
    let mut p = 0;
    let mut host = vec![0u8; 256];
    check(call!(d.cuMemAlloc_v2(&mut p, 256)));
    check(call!(d.cuMemFree_v2(p)));
    expect(call!(d.cuMemFree_v2(p)), status::INVALID_VALUE, "double cuMemFree_v2");
    expect(call!(d.cuMemcpyHtoD_v2(p, host.as_ptr().cast(), 256)), status::INVALID_VALUE, "HtoD to a freed pointer");
    expect(
        call!(d.cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), p, 256)),
        status::INVALID_VALUE,
        "DtoH from a freed pointer",
    );
    expect(call!(d.cuMemsetD8_v2(p, 0, 256)), status::INVALID_VALUE, "memset of a freed pointer");
    let (mut base, mut size) = (0, 0);
    expect(
        call!(d.cuMemGetAddressRange_v2(&mut base, &mut size, p)),
        status::NOT_FOUND,
        "cuMemGetAddressRange_v2 of a freed pointer",
    );
}

/// Frees and memsets take only the current context's memory (copies take any context's:
/// unified_copy.rs).
#[test]
fn free_and_memset_of_another_contexts_pointer_are_invalid_value() {
    let d = cuda();
    let a = Context::new(0);
    let buf_a = DeviceBuffer::new(4096);
    buf_a.write(&[9; 4096]);
    {
        let b = Context::new(0); // current now: b, on the same device
        expect(call!(d.cuMemFree_v2(buf_a.ptr)), status::INVALID_VALUE, "cuMemFree_v2 of a pointer of another context");
        expect(
            call!(d.cuMemsetD8_v2(buf_a.ptr, 0, 4096)),
            status::INVALID_VALUE,
            "memset of another context's pointer",
        );
        expect(
            call!(d.cuMemsetD32Async(buf_a.ptr, 0, 1024, null_mut())),
            status::INVALID_VALUE,
            "async memset of another context's pointer",
        );
        drop(b);
    }
    a.make_current();
    assert!(buf_a.read().iter().all(|&x| x == 9), "the other context's failed calls changed nothing");
}

#[test]
fn memory_calls_without_a_current_context_are_invalid_context() {
    // A fresh thread has an empty context stack.
    let r = within(Duration::from_secs(10), || {
        let d = cuda();
        let mut p = 0;
        let mut host = [0u8; 8];
        let (mut free, mut total) = (0, 0);
        [
            call!(d.cuMemAlloc_v2(&mut p, 64)),
            call!(d.cuMemGetInfo_v2(&mut free, &mut total)),
            call!(d.cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), 0x1000, 8)),
            call!(d.cuCtxSynchronize()),
        ]
    })
    .expect("driver calls hung");
    for (i, res) in r.into_iter().enumerate() {
        expect(res, status::INVALID_CONTEXT, &format!("call {i} with no current context"));
    }
}

isolated_test!(fn out_of_memory_at_capacity_and_exact_accounting() env("GPUPOOL_SIM_MEMORY" => "64MiB") {
    let d = cuda();
    let _ctx = Context::new(0);
    let info = || {
        let (mut free, mut total) = (0usize, 0usize);
        check(call!(d.cuMemGetInfo_v2(&mut free, &mut total)));
        (free, total)
    };
    let mut dev_total = 0;
    check(call!(d.cuDeviceTotalMem_v2(&mut dev_total, 0)));
    assert_eq!(dev_total, 64 * MIB, "cuDeviceTotalMem_v2 reports GPUPOOL_SIM_MEMORY");
    let (free0, total) = info();
    assert_eq!(total, 64 * MIB, "cuMemGetInfo_v2 total");
    assert_eq!(free0, total, "nothing allocated yet");

    // Larger than the device: out of memory, nothing changes.
    let mut p = 0;
    expect(call!(d.cuMemAlloc_v2(&mut p, 64 * MIB + 1)), status::OUT_OF_MEMORY, "allocating more than the device");
    expect(call!(d.cuMemAlloc_v2(&mut p, usize::MAX)), status::OUT_OF_MEMORY, "allocating usize::MAX");
    assert_eq!(info().0, free0);

    // Fill the device exactly, checking the accounting after each allocation.
    let mut ptrs = Vec::new();
    for i in 1..=4 {
        let mut p = 0;
        check(call!(d.cuMemAlloc_v2(&mut p, 16 * MIB)));
        ptrs.push(p);
        assert_eq!(info().0, free0 - i * 16 * MIB, "free after {i} x 16 MiB");
    }
    assert_eq!(info().0, 0);
    expect(call!(d.cuMemAlloc_v2(&mut p, 1)), status::OUT_OF_MEMORY, "1 byte on a full device");
    expect(call!(d.cuMemAlloc_v2(&mut p, 16 * MIB)), status::OUT_OF_MEMORY, "16 MiB on a full device");

    // Freeing makes room again, exactly.
    check(call!(d.cuMemFree_v2(ptrs.pop().unwrap())));
    assert_eq!(info().0, 16 * MIB);
    let mut q = 0;
    check(call!(d.cuMemAlloc_v2(&mut q, 16 * MIB)));
    assert_eq!(info().0, 0);
    check(call!(d.cuMemFree_v2(q)));
    for p in ptrs {
        check(call!(d.cuMemFree_v2(p)));
    }
    assert_eq!(info(), (free0, total), "all memory back after freeing everything");

    // Odd sizes: at least the requested size is charged, and all of it comes back.
    let mut odd = 0;
    check(call!(d.cuMemAlloc_v2(&mut odd, 1000)));
    let charged = free0 - info().0;
    assert!(charged >= 1000, "1000-byte allocation charged {charged} bytes");
    check(call!(d.cuMemFree_v2(odd)));
    assert_eq!(info().0, free0);
});

isolated_test!(fn devices_have_separate_capacity() env("GPUPOOL_SIM_MEMORY" => "32MiB", "GPUPOOL_SIM_DEVICES" => "2") {
    let d = cuda();
    let c0 = Context::new(0);
    let mut p0 = 0;
    check(call!(d.cuMemAlloc_v2(&mut p0, 32 * MIB)));
    let c1 = Context::new(1);
    let mut p1 = 0;
    check(call!(d.cuMemAlloc_v2(&mut p1, 32 * MIB)));
    let (mut free, mut total) = (0, 0);
    check(call!(d.cuMemGetInfo_v2(&mut free, &mut total)));
    assert_eq!((free, total), (0, 32 * MIB), "device 1 full");
    let mut p = 0;
    expect(call!(d.cuMemAlloc_v2(&mut p, 1)), status::OUT_OF_MEMORY, "device 1 over capacity");
    check(call!(d.cuMemFree_v2(p1)));
    drop(c1);
    c0.make_current();
    let mut p = 0;
    expect(call!(d.cuMemAlloc_v2(&mut p, 1)), status::OUT_OF_MEMORY, "device 0 still full");
    check(call!(d.cuMemFree_v2(p0)));
    // Destroying a context releases what it still holds.
    let mut leak = 0;
    check(call!(d.cuMemAlloc_v2(&mut leak, 32 * MIB)));
    drop(c0);
    let _c = Context::new(0);
    let (mut free, mut total) = (0, 0);
    check(call!(d.cuMemGetInfo_v2(&mut free, &mut total)));
    assert_eq!(free, total, "cuCtxDestroy_v2 frees the context's allocations");
});

/// Page-locked memory is addressable by kernels of the context that page-locked it, and by
/// every context only when PORTABLE: "The memory returned by this call will be considered as
/// pinned memory by all CUDA contexts, not just the one that performed the allocation." (The
/// pool registers each tenant's page-locked regions without it, so no other tenant's kernel
/// can reach them inside the daemon.)
#[test]
fn kernels_reach_page_locked_memory_of_their_context_or_portable() {
    use gpupool_e2e::cu::{CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE, CUresult};
    use gpupool_e2e::{launch_fill, load_fill};
    let d = cuda();
    let store_from_fresh_context = |addr: u64| -> CUresult {
        let _ctx = Context::new(0);
        let (_, f) = load_fill();
        check(launch_fill(f, addr, 0x77, 16, null_mut()));
        call!(d.cuCtxSynchronize())
    };
    let owner = Context::new(0);
    let alloc = |flags| {
        let mut p = null_mut();
        check(call!(d.cuMemHostAlloc(&mut p, 4096, flags)));
        p as u64
    };
    let private = alloc(CU_MEMHOSTALLOC_DEVICEMAP);
    let portable = alloc(CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
    expect(store_from_fresh_context(private), CUresult::CUDA_ERROR_ILLEGAL_ADDRESS, "another context's private block");
    check(store_from_fresh_context(portable));
    owner.make_current();
    let (_, f) = load_fill();
    check(launch_fill(f, private, 0x66, 16, null_mut()));
    check(call!(d.cuCtxSynchronize()));
    // SAFETY: both blocks are live 4096-byte page-locked allocations of this process.
    let (a, b) = unsafe { (*(private as *const u32), *(portable as *const u32)) };
    assert_eq!((a, b), (0x66, 0x77), "the owner's kernel wrote its block, the other context the portable one");
    check(call!(d.cuMemFreeHost(private as *mut _)));
    check(call!(d.cuMemFreeHost(portable as *mut _)));
}
