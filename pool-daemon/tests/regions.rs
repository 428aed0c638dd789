//! Client host-memory regions (page-locked memory in shared memory): the fd travels with
//! SCM_RIGHTS before `HostRegionMap`; copies name a region, offset and length, sync and
//! async; a forged id or an out-of-bounds range is refused with code 1; unmap and the
//! session's end let go of the region.

mod common;

use common::*;
use gpupool_protocol::ops::{HostSrc, RegionSlice};
use gpupool_protocol::transport::shm::{create_host_region, send_host_region};
use gpupool_protocol::{Reply, Request, StreamId};
use std::time::{Duration, Instant};

const LEN: usize = 256 * 1024;

fn map(c: &mut Client, len: usize) -> (u64, gpupool_protocol::transport::Mapping) {
    let (fd, m) = create_host_region(len).unwrap();
    send_host_region(c.t.socket(), &fd).unwrap();
    match c.call(Request::HostRegionMap { bytes: m.len() as u64 }) {
        Reply::HostRegion { id } => (id, m),
        r => panic!("{r:?}"),
    }
}

/// A copy of the region's bytes.
fn read(m: &gpupool_protocol::transport::Mapping) -> Vec<u8> {
    // SAFETY: the mapping is live, `len` bytes long, and the daemon only writes it while a
    // request of this (single-threaded) test is in flight or before a sync point.
    unsafe { std::slice::from_raw_parts(m.as_ptr(), m.len()) }.to_vec()
}

/// Writes `data` at the start of the region.
fn write(m: &gpupool_protocol::transport::Mapping, data: &[u8]) {
    assert!(data.len() <= m.len());
    // SAFETY: in bounds of the live mapping (checked above); no Rust reference aliases it.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), m.as_ptr(), data.len()) };
}

fn slice(id: u64, offset: u64, len: usize) -> RegionSlice {
    RegionSlice { id, offset, len: len as u64 }
}

#[test]
fn region_copies_sync_and_async_and_forgeries_are_refused() {
    let d = Daemon::start(None);
    let mut c = Client::connect(&d.socket);
    let ctx = c.ctx(0);
    let dev = c.alloc(ctx, LEN as u64).unwrap();

    // Forged ids: nothing was mapped yet.
    let forged = c.call(Request::MemcpyHtoD { dst: dev, src: HostSrc::Region(slice(77, 0, 4096)) });
    assert_eq!(code(&forged), 1, "{forged:?}");
    let forged = c.call(Request::MemcpyDtoHRegion { src: dev, dst: slice(77, 0, 4096) });
    assert_eq!(code(&forged), 1, "{forged:?}");

    let (id, m) = map(&mut c, LEN);
    let (id2, m2) = map(&mut c, LEN);
    let pattern: Vec<u8> = (0..LEN).map(|i| (i * 31 + 7) as u8).collect();
    write(&m, &pattern);

    // Synchronous both ways.
    let r = c.call(Request::MemcpyHtoD { dst: dev, src: HostSrc::Region(slice(id, 0, LEN)) });
    assert_eq!(r, Reply::Ok {});
    let r = c.call(Request::MemcpyDtoHRegion { src: dev, dst: slice(id2, 0, LEN) });
    assert_eq!(r, Reply::Ok {});
    assert!(read(&m2) == pattern);

    // Asynchronous both ways, at offsets, then a sync point.
    write(&m2, &vec![0; LEN]);
    c.send_async(Request::MemcpyHtoDAsync {
        dst: dev,
        src: HostSrc::Region(slice(id, 4096, 8192)),
        stream: StreamId::NULL,
    });
    c.send_async(Request::MemcpyDtoHRegionAsync { src: dev, dst: slice(id2, 100, 8192), stream: StreamId::NULL });
    assert_eq!(c.call(Request::CtxSynchronize { ctx }), Reply::Ok {});
    assert!(c.async_errors.is_empty(), "{:?}", c.async_errors);
    assert!(read(&m2)[100..100 + 8192] == pattern[4096..4096 + 8192]);

    // Out of the region's bounds (and an overflowing offset).
    for (offset, len) in [(LEN as u64 - 100, 4096), (u64::MAX - 10, 4096)] {
        let r = c.call(Request::MemcpyHtoD { dst: dev, src: HostSrc::Region(slice(id, offset, len)) });
        assert_eq!(code(&r), 1, "{r:?}");
        let r = c.call(Request::MemcpyDtoHRegion { src: dev, dst: slice(id2, offset, len) });
        assert_eq!(code(&r), 1, "{r:?}");
    }
    assert!(d.log().contains("outside"), "refusals are logged");

    // A map request without an fd: refused after a bounded wait, the session carries on.
    let t0 = Instant::now();
    let r = c.call(Request::HostRegionMap { bytes: 4096 });
    assert_eq!(code(&r), 1, "{r:?}");
    assert!(t0.elapsed() < Duration::from_secs(5));

    // Unmap: the id is gone.
    assert_eq!(c.call(Request::HostRegionUnmap { id }), Reply::Ok {});
    let r = c.call(Request::MemcpyHtoD { dst: dev, src: HostSrc::Region(slice(id, 0, 16)) });
    assert_eq!(code(&r), 1, "{r:?}");
    assert_eq!(code(&c.call(Request::HostRegionUnmap { id })), 1);

    // The session's end lets go of the region still mapped.
    drop(c);
    let t0 = Instant::now();
    while !d.log().contains("regions=1") {
        assert!(t0.elapsed() < Duration::from_secs(5), "{}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}
