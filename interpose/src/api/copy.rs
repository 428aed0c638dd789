//! Copies (memsets are in [`super::memset`]). Host bytes in page-locked memory (a shared
//! region the daemon maps) are named by region, offset and length: no staging pass, and
//! async copies from or into it are queued on their stream and return at once. Other host
//! bytes travel inline when short and through the shared staging
//! area otherwise (in chunks of its size). Async host-to-device copies are posted without
//! a reply; a chunk that used staging is followed by a cheap synchronous request, after
//! which the daemon is done with the area. Async device-to-host copies wait for their
//! stream, then copy (they complete before returning, as CUDA's do into pageable memory),
//! unless they go into page-locked memory.

use super::DefaultStream;
use super::stream::resolve;
use crate::client::conn::Conn;
use crate::client::{self, Client};
use crate::util::{R, host_bytes, host_bytes_mut};
use gpupool_protocol::ops::{Copy2D, Copy2DEnd, HostSrc, MemSpace, RegionSlice, answer};
use gpupool_protocol::{DevicePtr, Request, StreamId};
use gpupool_shim::cuda::{CUDA_MEMCPY2D, CUcontext, CUdeviceptr, CUmemorytype as MT, CUresult, CUstream};
use std::os::raw::c_void;

/// The device range `[p, p + n)` of a copy lies in one allocation of this client, made in
/// any of its contexts: under unified addressing a copy infers where each pointer lives from
/// its value ("cuMemcpy() may be used to perform a copy between two pointers"), and NVIDIA's
/// runtime relies on it (`cudaMemcpyDefault` from another device's memory calls `cuMemcpy` in
/// the current context). Anything else is INVALID_VALUE, as the driver answers, without a
/// round trip; the daemon checks again that the memory is this session's.
pub(super) fn check_dev(c: &Client, p: u64, n: usize) -> R<()> {
    match c.reg.alloc_of(p) {
        Some((base, size, _)) if p.checked_add(n as u64).is_some_and(|end| end <= base + size) => Ok(()),
        Some((base, size, _)) => {
            refuse(format!("{n} bytes at {p:#x} run past the end of the allocation [{base:#x}, {:#x})", base + size))
        }
        None => refuse(format!("{p:#x} is not device memory of this process")),
    }
}

/// As [`check_dev`], and the allocation was made in the calling thread's current context:
/// memsets (unified addressing is documented for copies only).
pub(super) fn check_dev_current(c: &Client, p: u64, n: usize) -> R<()> {
    check_dev(c, p, n)?;
    match c.reg.alloc_of(p) {
        Some((_, _, ctx)) if Some(ctx) == client::stack_top() => Ok(()),
        _ => refuse(format!("{p:#x} belongs to another context")),
    }
}

fn refuse(why: String) -> R<()> {
    crate::util::log(&format!("CUDA_ERROR_INVALID_VALUE: {why}"));
    Err(CUresult::CUDA_ERROR_INVALID_VALUE)
}

pub(super) fn require_ctx(c: &mut Client) -> R<()> {
    c.current().map(|_| ())
}

pub fn htod(c: &mut Client, dst: u64, src: &[u8], stream: Option<StreamId>) -> R<()> {
    check_dev(c, dst, src.len())?;
    if let Some(r) = region(c, src.as_ptr() as usize, src.len()) {
        let (dst, src) = (DevicePtr(dst), HostSrc::Region(r));
        let conn = c.live()?;
        return match stream {
            None => conn.call_ok(Request::MemcpyHtoD { dst, src }).and_then(|()| conn.take_pending()),
            // The region outlives the call: nothing to wait for.
            Some(stream) => conn.post(Request::MemcpyHtoDAsync { dst, src, stream }),
        };
    }
    if let Some(stream) = stream {
        super::graph::refuse_pageable(c, stream)?;
    }
    let conn = c.live()?;
    let Some(stream) = stream else {
        return write_device(conn, dst, src);
    };
    let chunk = conn.staging_len();
    for (i, part) in src.chunks(chunk).enumerate() {
        let d = DevicePtr(dst + (i * chunk) as u64);
        let hs = conn.host_src(part)?;
        let staged = matches!(hs, HostSrc::Staging(_));
        conn.post(Request::MemcpyHtoDAsync { dst: d, src: hs, stream })?;
        if staged {
            // The daemon is done with staging once it handles the next frame.
            conn.call(Request::DeviceGetCount {})?;
        }
    }
    Ok(())
}

/// Host to device, synchronous, from memory the daemon cannot see: inline when short,
/// through the two halves of the staging area locally, streamed in chunks over the network.
pub(crate) fn write_device(conn: &mut Conn, dst: u64, src: &[u8]) -> R<()> {
    if conn.is_network() {
        conn.write_device_streamed(dst, src)
    } else if src.len() > client::conn::INLINE_MAX {
        conn.write_device_staged(dst, src)
    } else {
        let src = conn.host_src(src)?;
        conn.call_ok(Request::MemcpyHtoD { dst: DevicePtr(dst), src })?;
        conn.take_pending()
    }
}

/// Device to host, synchronous, into memory the daemon cannot see: inline when short,
/// through the two halves of the staging area locally, pipelined in chunks over the network.
pub(crate) fn read_device(conn: &mut Conn, dst: &mut [u8], src: u64) -> R<()> {
    if conn.is_network() {
        conn.read_device_pipelined(dst, src)
    } else if dst.len() > client::conn::INLINE_MAX {
        conn.read_device_staged(dst, src)
    } else {
        let answer::Bytes { data } =
            conn.ask(Request::MemcpyDtoHInline { src: DevicePtr(src), len: dst.len() as u32 })?;
        if data.0.len() != dst.len() {
            return Err(CUresult::CUDA_ERROR_UNKNOWN);
        }
        dst.copy_from_slice(&data.0);
        conn.take_pending()
    }
}

/// The page-locked region holding all of `[p, p + n)`, as a slice the daemon can name.
fn region(c: &Client, p: usize, n: usize) -> Option<RegionSlice> {
    let (id, offset) = c.reg.region_of(p, n)?;
    Some(RegionSlice { id, offset, len: n as u64 })
}

/// Device to host on `stream`: into page-locked memory it is queued on the stream and
/// returns at once (the bytes are there after a sync point); elsewhere it waits for the
/// stream and copies through staging.
fn dtoh_async(c: &mut Client, dst: &mut [u8], src: u64, stream: StreamId) -> R<()> {
    check_dev(c, src, dst.len())?;
    if let Some(r) = region(c, dst.as_ptr() as usize, dst.len()) {
        return c.live()?.post(Request::MemcpyDtoHRegionAsync { src: DevicePtr(src), dst: r, stream });
    }
    sync_stream(c, stream)?;
    dtoh(c, dst, src)
}

pub fn dtoh(c: &mut Client, dst: &mut [u8], src: u64) -> R<()> {
    check_dev(c, src, dst.len())?;
    if let Some(r) = region(c, dst.as_ptr() as usize, dst.len()) {
        let conn = c.live()?;
        conn.call_ok(Request::MemcpyDtoHRegion { src: DevicePtr(src), dst: r })?;
        return conn.take_pending();
    }
    read_device(c.live()?, dst, src)
}

fn dtod(c: &mut Client, dst: u64, src: u64, n: usize, stream: Option<StreamId>) -> R<()> {
    check_dev(c, dst, n)?;
    check_dev(c, src, n)?;
    let (dst, src, len) = (DevicePtr(dst), DevicePtr(src), n as u64);
    let conn = c.live()?;
    match stream {
        None => conn.call_ok(Request::MemcpyDtoD { dst, src, len }),
        Some(stream) => conn.post(Request::MemcpyDtoDAsync { dst, src, len, stream }),
    }
}

pub(super) fn sync_stream(c: &mut Client, stream: StreamId) -> R<()> {
    c.live()?.call_ok(Request::StreamSynchronize { stream })
}

pub(super) fn memcpy_htod(dst: CUdeviceptr, src: *const c_void, n: usize, _ds: DefaultStream) -> R<()> {
    let bytes = host_bytes(src, n)?;
    client::call(|c| {
        require_ctx(c)?;
        htod(c, dst, bytes, None)
    })
}

pub(super) fn memcpy_htod_async(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    s: CUstream,
    ds: DefaultStream,
) -> R<()> {
    let bytes = host_bytes(src, n)?;
    client::call(|c| {
        let stream = resolve(c, s, ds)?;
        htod(c, dst, bytes, Some(stream))
    })
}

pub(super) fn memcpy_dtoh(dst: *mut c_void, src: CUdeviceptr, n: usize, _ds: DefaultStream) -> R<()> {
    let bytes = host_bytes_mut(dst, n)?;
    client::call(|c| {
        require_ctx(c)?;
        dtoh(c, bytes, src)
    })
}

pub(super) fn memcpy_dtoh_async(dst: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream, ds: DefaultStream) -> R<()> {
    let bytes = host_bytes_mut(dst, n)?;
    client::call(|c| {
        let stream = resolve(c, s, ds)?;
        dtoh_async(c, bytes, src, stream)
    })
}

pub(super) fn memcpy_dtod(dst: CUdeviceptr, src: CUdeviceptr, n: usize, _ds: DefaultStream) -> R<()> {
    client::call(|c| {
        require_ctx(c)?;
        dtod(c, dst, src, n, None)
    })
}

pub(super) fn memcpy_dtod_async(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream, ds: DefaultStream) -> R<()> {
    client::call(|c| {
        let stream = resolve(c, s, ds)?;
        dtod(c, dst, src, n, Some(stream))
    })
}

/// Unified addressing: a pointer is device memory if this client allocated it.
fn memcpy_any(c: &mut Client, dst: u64, src: u64, n: usize, stream: Option<StreamId>) -> R<()> {
    if n == 0 {
        return Ok(());
    }
    let (d_dev, s_dev) = (c.reg.alloc_of(dst).is_some(), c.reg.alloc_of(src).is_some());
    match (d_dev, s_dev) {
        (true, true) => dtod(c, dst, src, n, stream),
        (true, false) => htod(c, dst, host_bytes(src as *const c_void, n)?, stream),
        (false, true) => {
            let bytes = host_bytes_mut(dst as *mut c_void, n)?;
            match stream {
                Some(s) => dtoh_async(c, bytes, src, s),
                None => dtoh(c, bytes, src),
            }
        }
        (false, false) => {
            if dst == 0 || src == 0 {
                return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
            }
            // SAFETY: both are host memory of `n` bytes per the CUDA contract; `copy`
            // tolerates overlap.
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n) };
            Ok(())
        }
    }
}

pub(super) fn memcpy(dst: CUdeviceptr, src: CUdeviceptr, n: usize, _ds: DefaultStream) -> R<()> {
    client::call(|c| {
        require_ctx(c)?;
        memcpy_any(c, dst, src, n, None)
    })
}

pub(super) fn memcpy_async(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream, ds: DefaultStream) -> R<()> {
    client::call(|c| {
        let stream = resolve(c, s, ds)?;
        memcpy_any(c, dst, src, n, Some(stream))
    })
}

/// The device range lies in one allocation of this client made in context `ctx`.
fn check_dev_in(c: &Client, p: u64, n: usize, ctx: CUcontext) -> R<()> {
    c.reg.ctx(ctx as u64)?;
    match c.reg.alloc_in(client::endpoint_of(ctx as u64), p) {
        Some((base, size, owner)) if p + n as u64 <= base + size && owner == ctx as u64 => Ok(()),
        _ => Err(CUresult::CUDA_ERROR_INVALID_VALUE),
    }
}

/// A copy between two contexts (devices): each pointer is checked against the context
/// named for it rather than the current one; the daemon checks both are this client's.
fn peer(
    c: &mut Client,
    dst: CUdeviceptr,
    dc: CUcontext,
    src: CUdeviceptr,
    sc: CUcontext,
    n: usize,
    stream: Option<StreamId>,
) -> R<()> {
    check_dev_in(c, dst, n, dc)?;
    check_dev_in(c, src, n, sc)?;
    let (dst_ep, src_ep) = (client::endpoint_of(dc as u64), client::endpoint_of(sc as u64));
    if dst_ep != src_ep {
        return staged_peer(c, (dst, dst_ep), (src, src_ep), n, stream);
    }
    let (dst, src, len) = (DevicePtr(dst), DevicePtr(src), n as u64);
    let conn = c.conn_at(dst_ep)?;
    match stream {
        None => conn.call_ok(Request::MemcpyDtoD { dst, src, len }),
        Some(stream) => conn.post(Request::MemcpyDtoDAsync { dst, src, len, stream }),
    }
}

/// A copy between devices of two daemons: through this process, a staging area's worth at
/// a time. It completes before returning, also when asked on a stream (the stream's
/// earlier work is waited for first), as CUDA's copies through pageable memory do.
fn staged_peer(
    c: &mut Client,
    (dst, dst_ep): (u64, usize),
    (src, src_ep): (u64, usize),
    n: usize,
    stream: Option<StreamId>,
) -> R<()> {
    if let Some(stream) = stream {
        // The stream belongs to the current context's daemon.
        let conn = c.conn()?;
        conn.call_ok(Request::StreamSynchronize { stream })?;
        conn.take_pending()?;
    }
    let chunk = c.conn_at(src_ep)?.staging_len().min(c.conn_at(dst_ep)?.staging_len()).max(1);
    let mut buf = vec![0u8; chunk.min(n)];
    let mut done = 0;
    while done < n {
        let part = chunk.min(n - done);
        read_device(c.conn_at(src_ep)?, &mut buf[..part], src + done as u64)?;
        write_device(c.conn_at(dst_ep)?, dst + done as u64, &buf[..part])?;
        done += part;
    }
    Ok(())
}

pub(super) fn memcpy_peer(
    dst: CUdeviceptr,
    dc: CUcontext,
    src: CUdeviceptr,
    sc: CUcontext,
    n: usize,
    _ds: DefaultStream,
) -> R<()> {
    client::call(|c| {
        require_ctx(c)?;
        peer(c, dst, dc, src, sc, n, None)
    })
}

pub(super) fn memcpy_peer_async(
    dst: CUdeviceptr,
    dc: CUcontext,
    src: CUdeviceptr,
    sc: CUcontext,
    n: usize,
    s: CUstream,
    ds: DefaultStream,
) -> R<()> {
    client::call(|c| {
        let stream = resolve(c, s, ds)?;
        peer(c, dst, dc, src, sc, n, Some(stream))
    })
}

// ---- 2D copies (3D ones are in [`super::copy3d`]) ----

/// One end: (is device memory, base address). Unified ends name their pointer in the
/// device field and are device memory if this client allocated it.
pub(super) fn end_of(c: &Client, t: MT, host: u64, dev: u64) -> R<(bool, u64)> {
    match t {
        MT::CU_MEMORYTYPE_DEVICE => Ok((true, dev)),
        MT::CU_MEMORYTYPE_HOST => Ok((false, host)),
        MT::CU_MEMORYTYPE_UNIFIED => Ok((c.reg.alloc_of(dev).is_some(), dev)),
        _ => Err(CUresult::CUDA_ERROR_NOT_SUPPORTED),
    }
}

/// `stream`: the async variants' stream, already resolved.
fn copy2d(c: &mut Client, p: &CUDA_MEMCPY2D, stream: Option<StreamId>) -> R<()> {
    let (w, h) = (p.WidthInBytes, p.Height);
    if w == 0 || h == 0 {
        return Ok(());
    }
    if h > 1 && (p.srcPitch < w || p.dstPitch < w) {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let (s_dev, s_base) = end_of(c, p.srcMemoryType, p.srcHost as u64, p.srcDevice)?;
    let (d_dev, d_base) = end_of(c, p.dstMemoryType, p.dstHost as u64, p.dstDevice)?;
    if s_base == 0 || d_base == 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // Origins of each end.
    let s_org = s_base + (p.srcY * p.srcPitch + p.srcXInBytes) as u64;
    let d_org = d_base + (p.dstY * p.dstPitch + p.dstXInBytes) as u64;
    let span = |pitch: usize| (h - 1) * pitch + w;
    if s_dev {
        check_dev(c, s_org, span(p.srcPitch))?;
    }
    if d_dev {
        check_dev(c, d_org, span(p.dstPitch))?;
    }
    let dev_end = |org: u64, pitch: usize| Copy2DEnd {
        space: MemSpace::Device(DevicePtr(org)),
        x_bytes: 0,
        y: 0,
        pitch: pitch as u64,
    };
    // A host end inside one page-locked region the daemon maps is named in place.
    let region_end = |c: &Client, org: u64, pitch: usize| {
        let (id, offset) = c.reg.region_of(org as usize, span(pitch))?;
        Some(Copy2DEnd { space: MemSpace::Region { id, offset }, x_bytes: 0, y: 0, pitch: pitch as u64 })
    };
    let direct = match (s_dev, d_dev) {
        (true, true) => Some((dev_end(s_org, p.srcPitch), dev_end(d_org, p.dstPitch))),
        (false, true) => region_end(c, s_org, p.srcPitch).map(|s| (s, dev_end(d_org, p.dstPitch))),
        (true, false) => region_end(c, d_org, p.dstPitch).map(|d| (dev_end(s_org, p.srcPitch), d)),
        (false, false) => None,
    };
    if let Some((src, dst)) = direct {
        let copy = Copy2D { src, dst, width_bytes: w as u64, height: h as u64 };
        let conn = c.live()?;
        return match stream {
            None => conn.call_ok(Request::Memcpy2D { copy }),
            Some(stream) => conn.post(Request::Memcpy2DAsync { copy, stream }),
        };
    }
    if let Some(stream) = stream {
        sync_stream(c, stream)?;
    }
    let staged = Copy2DEnd { space: MemSpace::Staging(0), x_bytes: 0, y: 0, pitch: w as u64 };
    // Left: host to host, or one host end outside page-locked memory.
    match (s_dev, d_dev) {
        (false, false) => {
            for row in 0..h {
                let (s, d) = (s_org as usize + row * p.srcPitch, d_org as usize + row * p.dstPitch);
                // SAFETY: both ends are host buffers covering these rows per the CUDA contract.
                unsafe { std::ptr::copy(s as *const u8, d as *mut u8, w) };
            }
            Ok(())
        }
        _ => {
            let conn = c.live()?;
            let rows = conn.staging_len() / w;
            if rows == 0 {
                return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
            }
            let mut row = 0;
            while row < h {
                let n = rows.min(h - row);
                if d_dev {
                    for r in 0..n {
                        let s = host_bytes((s_org as usize + (row + r) * p.srcPitch) as *const c_void, w)?;
                        conn.stage_write(r * w, s)?;
                    }
                    let dst = dev_end(d_org + (row * p.dstPitch) as u64, p.dstPitch);
                    conn.call_ok(Request::Memcpy2D {
                        copy: Copy2D { src: staged, dst, width_bytes: w as u64, height: n as u64 },
                    })?;
                } else {
                    let src = dev_end(s_org + (row * p.srcPitch) as u64, p.srcPitch);
                    conn.call_ok(Request::Memcpy2D {
                        copy: Copy2D { src, dst: staged, width_bytes: w as u64, height: n as u64 },
                    })?;
                    for r in 0..n {
                        let d = host_bytes_mut((d_org as usize + (row + r) * p.dstPitch) as *mut c_void, w)?;
                        conn.stage_read(r * w, d)?;
                    }
                }
                row += n;
            }
            conn.take_pending()
        }
    }
}

pub(super) fn memcpy2d(p: CUDA_MEMCPY2D, ds: DefaultStream) -> R<()> {
    if super::copy3d::has_array(&p) {
        return super::copy3d::memcpy3d(super::copy3d::from_2d(&p), ds);
    }
    client::call(|c| {
        require_ctx(c)?;
        copy2d(c, &p, None)
    })
}

pub(super) fn memcpy2d_async(p: CUDA_MEMCPY2D, s: CUstream, ds: DefaultStream) -> R<()> {
    if super::copy3d::has_array(&p) {
        return super::copy3d::memcpy3d_async(super::copy3d::from_2d(&p), s, ds);
    }
    client::call(|c| {
        let stream = resolve(c, s, ds)?;
        copy2d(c, &p, Some(stream))
    })
}
