//! `gpupool daemon` end to end: the real binary on the simulator, real clients over the
//! shared-memory transport.

mod common;

use common::*;
use gpupool_protocol::ops::{
    Copy2D, Copy2DEnd, HostSrc, InlineBytes, KernelParams, MemSpace, Memset, MemsetValue, StagingRegion,
};
use gpupool_protocol::transport::Transport;
use gpupool_protocol::{Reply, Request, StreamId};
use std::time::{Duration, Instant};

#[test]
fn the_quota_is_the_device_size_and_is_exact_to_the_mib() {
    let d = Daemon::start(Some(&tenant_config("64MiB")));
    let mut c = Client::connect(&d.socket);
    let Reply::HelloReply { tenant, devices, .. } = &c.hello else { unreachable!() };
    assert_eq!(tenant, "team");
    assert_eq!(devices.len(), 2);
    assert!(devices.iter().all(|d| d.total_memory == 64 * MIB), "{devices:?}");
    let ctx = c.ctx(0);
    assert_eq!(c.call(Request::MemGetInfo { ctx }), Reply::MemInfo { free: 64 * MIB, total: 64 * MIB });
    let big = c.alloc(ctx, 48 * MIB).unwrap();
    let mut small = Vec::new();
    for _ in 0..16 {
        small.push(c.alloc(ctx, MIB).unwrap());
    }
    assert_eq!(c.call(Request::MemGetInfo { ctx }), Reply::MemInfo { free: 0, total: 64 * MIB });
    assert_eq!(c.call(Request::MgmtMemoryInfo { device: 0 }), Reply::MemInfo { free: 0, total: 64 * MIB });
    let (code, msg) = c.alloc(ctx, MIB).unwrap_err();
    assert_eq!(code, 2, "{msg}");
    assert_eq!(d.used("team", 0), 64 * MIB);
    // Device 1 has its own 64 MiB.
    let ctx1 = c.ctx(1);
    c.alloc(ctx1, 64 * MIB).unwrap();
    // A free gives the MiB back.
    assert_eq!(code_of(c.call(Request::MemFree { ptr: small.pop().unwrap() })), 0);
    c.alloc(ctx, MIB).unwrap();

    // Data paths: inline and staged host-to-device, memset, device-to-host both ways.
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    assert_eq!(code_of(c.call(Request::MemcpyHtoD { dst: big, src: HostSrc::Inline(InlineBytes(data.clone())) })), 0);
    let r = c.call(Request::MemcpyDtoHInline { src: big, len: 4096 });
    assert_eq!(r, Reply::Bytes { data: InlineBytes(data.clone()) });
    let st = c.t.staging().unwrap();
    st.write(0, &data).unwrap();
    let dst = gpupool_protocol::DevicePtr(big.0 + 8192);
    let region = StagingRegion { offset: 0, len: 4096 };
    assert_eq!(code_of(c.call(Request::MemcpyHtoD { dst, src: HostSrc::Staging(region) })), 0);
    let set = Memset { dst: big, value: MemsetValue::U32(0xdeadbeef), width: 256, height: 1, pitch: 0 };
    c.send_async(Request::MemsetAsync { set, stream: StreamId::NULL });
    assert_eq!(code_of(c.call(Request::StreamSynchronize { stream: StreamId::NULL })), 0);
    let back = StagingRegion { offset: 1 << 20, len: 8192 + 4096 };
    assert_eq!(code_of(c.call(Request::MemcpyDtoH { src: big, dst: back })), 0);
    let mut got = vec![0u8; back.len as usize];
    c.t.staging().unwrap().read(back.offset as usize, &mut got).unwrap();
    assert!(got[..1024].chunks(4).all(|w| w == 0xdeadbeefu32.to_le_bytes()));
    assert_eq!(&got[1024..4096], &data[1024..]);
    assert_eq!(&got[8192..], &data[..]);
    assert!(c.async_errors.is_empty(), "{:?}", c.async_errors);
}

fn code_of(r: Reply) -> u32 {
    code(&r)
}

#[test]
fn modules_streams_events_and_launches_are_served() {
    let d = Daemon::start(None);
    let mut c = Client::connect(&d.socket);
    let ctx = c.ctx(0);
    let buf = c.alloc(ctx, 4096).unwrap();
    let (func, packed) = c.fill_kernel(ctx, buf, 7);
    let Reply::Stream { stream } = c.call(Request::StreamCreate { ctx, flags: 0, priority: 0 }) else { panic!() };
    let Reply::Event { event: e0 } = c.call(Request::EventCreate { ctx, flags: 0 }) else { panic!() };
    let Reply::Event { event: e1 } = c.call(Request::EventCreate { ctx, flags: 0 }) else { panic!() };
    c.send_async(Request::EventRecord { event: e0, stream });
    c.send_async(Request::LaunchKernel {
        func,
        grid: [1, 1, 1],
        block: [64, 1, 1],
        shared_mem_bytes: 0,
        stream,
        params: KernelParams(packed),
        cooperative: false,
    });
    c.send_async(Request::EventRecord { event: e1, stream });
    assert_eq!(code_of(c.call(Request::StreamSynchronize { stream })), 0);
    assert!(matches!(c.call(Request::EventElapsedTime { start: e0, end: e1 }), Reply::Elapsed { nanos } if nanos >= 0));
    let Reply::Bytes { data } = c.call(Request::MemcpyDtoHInline { src: buf, len: 256 }) else { panic!() };
    assert!(data.0.chunks(4).all(|w| w == 7u32.to_le_bytes()), "{:?}", &data.0[..16]);
    // An async failure comes back as an AsyncError before the next reply.
    c.send_async(Request::EventRecord { event: gpupool_protocol::EventId(999), stream });
    assert_eq!(code_of(c.call(Request::StreamSynchronize { stream })), 0);
    assert_eq!(c.async_errors.len(), 1);
    assert_eq!(c.async_errors[0].1, 400);
}

/// `GPUPOOL_SIM_KERNELS=discard`, the backend that does nothing (`gpupool-bench pool` part 2
/// measures the pool's own cost per launch on it): a launch still gets every check, through
/// the whole pool, and then changes nothing.
#[test]
fn a_simulator_that_discards_kernels_checks_each_launch_and_runs_none() {
    let d = Daemon::start_env(None, &[], &[("GPUPOOL_SIM_KERNELS", "discard")]);
    let mut c = Client::connect(&d.socket);
    let ctx = c.ctx(0);
    let buf = c.alloc(ctx, 1024).unwrap();
    let (func, packed) = c.fill_kernel(ctx, buf, 7);
    let launch = |params: Vec<u8>| one_block_launch(func, params);
    assert_eq!(code_of(c.call(launch(packed.clone()))), 0);
    assert_eq!(code_of(c.call(Request::CtxSynchronize { ctx })), 0);
    assert!(c.read_back(buf, 1024).iter().all(|&b| b == 0), "a discarded kernel wrote memory");
    // CUDA_ERROR_INVALID_VALUE for a parameter buffer of the wrong size, as with kernels that run.
    assert_eq!(code_of(c.call(launch(packed[..4].to_vec()))), 1);
    assert!(d.log().contains("parameter") || d.log().contains("refused"), "{}", d.log());
    assert!(c.async_errors.is_empty(), "{:?}", c.async_errors);
}

#[test]
fn a_forged_pointer_is_refused_and_never_reaches_the_backend() {
    let d = Daemon::start(Some(&tenant_config("256MiB")));
    let mut a = Client::connect(&d.socket);
    let mut b = Client::connect(&d.socket);
    let (ca, cb) = (a.ctx(0), b.ctx(0));
    let pa = a.alloc(ca, MIB).unwrap();
    let pb = b.alloc(cb, MIB).unwrap();
    a.call(Request::MemcpyHtoD { dst: pa, src: HostSrc::Inline(InlineBytes(vec![42; 64])) });
    let inside = gpupool_protocol::DevicePtr(pa.0 + 4096);
    for op in [
        Request::MemcpyDtoHInline { src: inside, len: 64 },
        Request::MemFree { ptr: pa },
        Request::MemcpyDtoD { dst: pb, src: pa, len: 64 },
        Request::MemcpyHtoD { dst: inside, src: HostSrc::Inline(InlineBytes(vec![0; 64])) },
        Request::Memset { set: Memset { dst: pa, value: MemsetValue::U8(0), width: 64, height: 1, pitch: 0 } },
    ] {
        assert_eq!(code_of(b.call(op.clone())), 1, "{op:?}");
    }
    // Running off the end of one's own allocation is refused too.
    assert_eq!(code_of(b.call(Request::MemcpyDtoHInline { src: pb, len: (MIB + 1) as u32 })), 1);
    // A's memory is intact.
    let Reply::Bytes { data } = a.call(Request::MemcpyDtoHInline { src: pa, len: 64 }) else { panic!() };
    assert_eq!(data.0, vec![42; 64]);
    assert!(d.log().contains("is not owned by this session"), "{}", d.log());
}

/// Unified addressing: an async copy runs on its stream, here device 0's, whichever of the
/// session's devices its memory is on (NVIDIA's runtime queues `cudaMemcpyAsync` on the current
/// device's stream with another device's pointer); another session's memory stays refused.
#[test]
fn an_async_copy_on_one_devices_stream_takes_the_sessions_memory_on_another() {
    let d = Daemon::start(None);
    let mut a = Client::connect(&d.socket);
    let (c0, c1) = (a.ctx(0), a.ctx(1));
    let on_0 = a.alloc(c0, 4096).unwrap();
    let (x, y) = (a.alloc(c1, 4096).unwrap(), a.alloc(c1, 4096).unwrap());
    let Reply::Stream { stream } = a.call(Request::StreamCreate { ctx: c0, flags: 0, priority: 0 }) else { panic!() };
    let bytes: Vec<u8> = (0..=255).collect();
    let copies = [
        Request::MemcpyHtoDAsync { dst: x, src: HostSrc::Inline(InlineBytes(bytes.clone())), stream },
        Request::MemcpyDtoDAsync { dst: y, src: x, len: 256, stream },
        Request::Memcpy2DAsync {
            copy: Copy2D {
                src: Copy2DEnd { space: MemSpace::Device(y), x_bytes: 0, y: 0, pitch: 64 },
                dst: Copy2DEnd { space: MemSpace::Device(on_0), x_bytes: 0, y: 0, pitch: 64 },
                width_bytes: 64,
                height: 4,
            },
            stream,
        },
    ];
    for op in copies {
        assert_eq!(code(&a.call(op.clone())), 0, "{op:?}\n{}", d.log());
    }
    assert_eq!(code(&a.call(Request::StreamSynchronize { stream })), 0);
    let Reply::Bytes { data } = a.call(Request::MemcpyDtoHInline { src: on_0, len: 256 }) else { panic!() };
    assert_eq!(data.0, bytes, "device 0's stream moved the bytes through device 1's memory");

    let mut b = Client::connect(&d.socket);
    let cb = b.ctx(1);
    let theirs = b.alloc(cb, 4096).unwrap();
    let op = Request::MemcpyDtoDAsync { dst: on_0, src: theirs, len: 64, stream };
    assert_eq!(code(&a.call(op)), 1, "another session's memory on a copy of this session's stream");
}

#[test]
fn sixteen_concurrent_sessions_of_one_tenant_never_exceed_the_quota() {
    const QUOTA: u64 = 96 * MIB;
    let d = Daemon::start(Some(&tenant_config("96MiB")));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (stop, socket) = (stop.clone(), d.socket.clone());
        std::thread::spawn(move || {
            let mut max = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                max = max.max(used_at(&socket, "team", 0));
            }
            max
        })
    };
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let socket = d.socket.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(&socket);
                let ctx = c.ctx(0);
                let mut got = 0;
                let size = if i % 2 == 0 { MIB } else { 3 * MIB };
                loop {
                    match c.alloc(ctx, size) {
                        Ok(_) => got += size,
                        Err((2, _)) => break,
                        Err(e) => panic!("{e:?}"),
                    }
                }
                (got, c)
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let max_seen = watcher.join().unwrap();
    let total: u64 = results.iter().map(|r| r.0).sum();
    assert!(total <= QUOTA && total > QUOTA - 3 * MIB, "total {total}");
    assert!(max_seen <= QUOTA, "status showed {max_seen}");
    assert_eq!(d.used("team", 0), total);
    let doc = d.status();
    assert_eq!(doc["sessions"].as_array().unwrap().len(), 16);
    drop(results);
    let t0 = Instant::now();
    while d.used("team", 0) != 0 {
        assert!(t0.elapsed() < Duration::from_secs(2), "memory not returned");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn pitched_memory_and_2d_copies_are_checked_over_their_whole_extent() {
    use gpupool_protocol::ops::{Copy2D, Copy2DEnd, MemSpace};
    let d = Daemon::start(Some(&tenant_config("64MiB")));
    let mut c = Client::connect(&d.socket);
    let ctx = c.ctx(0);
    let Reply::MemPitch { ptr, pitch } =
        c.call(Request::MemAllocPitch { ctx, width_bytes: 100, height: 10, element_size: 4 })
    else {
        panic!("{}", d.log())
    };
    assert!(pitch >= 100);
    assert_eq!(d.used("team", 0), pitch * 10);
    let rows: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    c.t.staging().unwrap().write(0, &rows).unwrap();
    let copy = |src, spitch, dst, dpitch, height| Copy2D {
        src: Copy2DEnd { space: src, x_bytes: 0, y: 0, pitch: spitch },
        dst: Copy2DEnd { space: dst, x_bytes: 0, y: 0, pitch: dpitch },
        width_bytes: 100,
        height,
    };
    let up = copy(MemSpace::Staging(0), 100, MemSpace::Device(ptr), pitch, 10);
    assert_eq!(code_of(c.call(Request::Memcpy2D { copy: up })), 0, "{}", d.log());
    let down = copy(MemSpace::Device(ptr), pitch, MemSpace::Staging(4096), 100, 10);
    assert_eq!(code_of(c.call(Request::Memcpy2D { copy: down })), 0);
    let mut got = vec![0u8; 1000];
    c.t.staging().unwrap().read(4096, &mut got).unwrap();
    assert_eq!(got, rows);
    // One row too many runs past the allocation: refused.
    let past = copy(MemSpace::Staging(0), 100, MemSpace::Device(ptr), pitch, 11);
    assert_eq!(code_of(c.call(Request::Memcpy2D { copy: past })), 1);
    assert_eq!(code_of(c.call(Request::MemFree { ptr })), 0);
    assert_eq!(d.used("team", 0), 0);
}

#[test]
fn tenants_are_isolated_from_each_other() {
    // sha256("secret")
    let config = format!(
        "{}\n[[tenant]]\nname = \"other\"\ntoken_sha256 = \"2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b\"\nmemory = \"32MiB\"\n",
        tenant_config("64MiB")
    );
    let d = Daemon::start(Some(&config));
    let mut a = Client::connect(&d.socket);
    let mut b = Client::connect_as(&d.socket, None, Some("secret")).unwrap();
    let Reply::HelloReply { tenant, devices, .. } = &b.hello else { unreachable!() };
    assert_eq!((tenant.as_str(), devices[0].total_memory), ("other", 32 * MIB));
    let (ca, cb) = (a.ctx(0), b.ctx(0));
    let pa = a.alloc(ca, 64 * MIB).unwrap();
    b.alloc(cb, 32 * MIB).unwrap();
    assert_eq!(b.alloc(cb, MIB).unwrap_err().0, 2);
    assert_eq!(code_of(b.call(Request::MemcpyDtoHInline { src: pa, len: 16 })), 1);
    assert_eq!((d.used("team", 0), d.used("other", 0)), (64 * MIB, 32 * MIB));
}

#[test]
fn sighup_reloads_the_quota_without_dropping_clients() {
    let d = Daemon::start(Some(&tenant_config("16MiB")));
    let mut c = Client::connect(&d.socket);
    let ctx = c.ctx(0);
    c.alloc(ctx, 16 * MIB).unwrap();
    assert_eq!(c.alloc(ctx, MIB).unwrap_err().0, 2);
    std::fs::write(d.dir.join("quota.toml"), tenant_config("32MiB")).unwrap();
    d.signal(rustix::process::Signal::HUP);
    let t0 = Instant::now();
    while c.alloc(ctx, MIB).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(2), "not reloaded: {}", d.log());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(c.call(Request::MemGetInfo { ctx }), Reply::MemInfo { free: 15 * MIB, total: 32 * MIB });
    assert!(d.log().contains("reloaded"));
}

#[test]
fn destroying_or_resetting_a_context_frees_what_was_made_in_it() {
    let d = Daemon::start(Some(&tenant_config("64MiB")));
    let mut c = Client::connect(&d.socket);
    let primary = c.ctx(0);
    let keep = c.alloc(primary, 8 * MIB).unwrap();
    let Reply::Context { ctx } = c.call(Request::CtxCreate { device: 0, flags: 0 }) else { panic!() };
    for _ in 0..3 {
        c.alloc(ctx, 16 * MIB).unwrap();
    }
    let Reply::Stream { stream } = c.call(Request::StreamCreate { ctx, flags: 0, priority: 0 }) else { panic!() };
    assert_eq!(d.used("team", 0), 56 * MIB);
    assert_eq!(code_of(c.call(Request::CtxDestroy { ctx })), 0);
    assert_eq!(d.used("team", 0), 8 * MIB);
    assert_eq!(code_of(c.call(Request::StreamSynchronize { stream })), 400);
    assert_eq!(code_of(c.call(Request::MemAlloc { ctx, bytes: MIB })), 400);
    // The primary context's memory is untouched until it is reset.
    assert_eq!(code_of(c.call(Request::MemcpyDtoHInline { src: keep, len: 8 })), 0);
    assert_eq!(code_of(c.call(Request::PrimaryCtxReset { device: 0 })), 0);
    assert_eq!(d.used("team", 0), 0);
    assert_eq!(code_of(c.call(Request::MemcpyDtoHInline { src: keep, len: 8 })), 1);
}
