//! 3D copies (`cuMemcpy3D_v2`, `cuMemcpy3DAsync_v2` and their per-thread twins) between
//! host, device and unified memory, and CUDA arrays (the daemon's, see [`super::array`]:
//! an array end travels as the array's handle and its box's origin, checked inside it). The
//! arguments are checked as the driver does (LOD and reserved fields 0, pitches at least
//! the width, slice heights at least `Height` when `Depth > 1`, a pitch or slice height of
//! 0 meaning the width or `Height`), and each device end over its whole extent, locally.
//!
//! Device to device is one `Memcpy3D` request (async: posted on its stream without a
//! reply), and so is a copy whose host end lies in one page-locked allocation the daemon
//! maps (named in place, as 2D and linear copies do). Another host end travels packed
//! through the staging area, whole slices at a time,
//! or rows of one slice at a time when a slice does not fit; a row wider than the area is
//! NOT_SUPPORTED. Async host-to-device chunks are posted on their stream, each followed by
//! a cheap synchronous request after which the daemon is done with the area; async
//! device-to-host copies wait for their stream, then copy (they complete before
//! returning, as CUDA's do into pageable memory).

use super::DefaultStream;
use super::copy::{check_dev, end_of, require_ctx, sync_stream};
use super::stream::resolve;
use crate::client::{self, Client};
use crate::util::{R, host_bytes, host_bytes_mut};
use gpupool_protocol::ops::{Copy3D, Copy3DEnd, MemSpace};
use gpupool_protocol::{DevicePtr, Request, StreamId};
use gpupool_shim::cuda::{CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUarray, CUmemorytype, CUresult, CUstream};
use std::os::raw::c_void;

const INVALID: CUresult = CUresult::CUDA_ERROR_INVALID_VALUE;

/// One end, resolved: device memory or not, the address of its origin (x/y/z applied),
/// its row pitch and its slice height in rows.
#[derive(Clone, Copy)]
struct End {
    dev: bool,
    org: u64,
    pitch: u64,
    rows: u64,
    /// An array end: its handle and the box's origin (x in bytes, y, z). It goes where
    /// device memory goes (the daemon holds both).
    array: Option<(u64, [u64; 3])>,
}

impl End {
    /// The address of row `y` of slice `z`, counted from the origin.
    fn at(&self, z: u64, y: u64) -> u64 {
        self.org + (z * self.rows + y) * self.pitch
    }

    fn wire(&self, z: u64, y: u64, height: u64) -> Copy3DEnd {
        if let Some((h, [x0, y0, z0])) = self.array {
            return Copy3DEnd { space: MemSpace::Array(h), x_bytes: x0, y: y0 + y, z: z0 + z, pitch: 0, height: 0 };
        }
        self.wire_in(MemSpace::Device(DevicePtr(self.at(z, y))), height)
    }

    /// The whole end as a page-locked region the daemon maps, if it lies in one.
    fn in_region(&self, c: &Client, s: Shape) -> Option<Copy3DEnd> {
        let span = ((s.d - 1) * self.rows + s.h - 1).checked_mul(self.pitch)?.checked_add(s.w)?;
        let (id, offset) = c.reg.region_of(self.org as usize, usize::try_from(span).ok()?)?;
        Some(self.wire_in(MemSpace::Region { id, offset }, s.h))
    }

    fn wire_in(&self, space: MemSpace, height: u64) -> Copy3DEnd {
        Copy3DEnd {
            space,
            x_bytes: 0,
            y: 0,
            z: 0,
            pitch: self.pitch,
            // With one slice the slice height only has to cover the rows copied.
            height: self.rows.max(height),
        }
    }
}

/// The checked shape of a copy: width in bytes, rows per slice, slices.
#[derive(Clone, Copy)]
struct Shape {
    w: u64,
    h: u64,
    d: u64,
}

#[allow(clippy::too_many_arguments)]
fn end(
    c: &Client,
    s: Shape,
    e: (gpupool_shim::cuda::CUmemorytype, u64, u64),
    array: CUarray,
    at: (usize, usize, usize),
    pitch: usize,
    rows: usize,
    role: &str,
) -> R<End> {
    if e.0 == gpupool_shim::cuda::CUmemorytype::CU_MEMORYTYPE_ARRAY {
        let at = [at.0 as u64, at.1 as u64, at.2 as u64];
        super::array::check_end(array, at, [s.w, s.h, s.d], role)?;
        return Ok(End { dev: true, org: 0, pitch: 0, rows: 0, array: Some((array as u64, at)) });
    }
    let (dev, base) = end_of(c, e.0, e.1, e.2)?;
    if base == 0 {
        return Err(INVALID);
    }
    let pitch = if pitch == 0 { s.w } else { pitch as u64 };
    let rows = if rows == 0 { s.h } else { rows as u64 };
    if (s.h > 1 || s.d > 1) && pitch < s.w {
        return Err(INVALID);
    }
    let (x, y, z) = (at.0 as u64, at.1 as u64, at.2 as u64);
    let org = z
        .checked_mul(rows)
        .and_then(|v| v.checked_add(y))
        .and_then(|v| v.checked_mul(pitch))
        .and_then(|v| v.checked_add(x))
        .and_then(|v| v.checked_add(base))
        .ok_or(INVALID)?;
    let e = End { dev, org, pitch, rows, array: None };
    if dev && s.w > 0 && s.h > 0 && s.d > 0 {
        let span = ((s.d - 1) * rows + s.h - 1).checked_mul(pitch).and_then(|v| v.checked_add(s.w)).ok_or(INVALID)?;
        check_dev(c, org, usize::try_from(span).map_err(|_| INVALID)?)?;
    }
    Ok(e)
}

fn ends(c: &Client, p: &CUDA_MEMCPY3D) -> R<(Shape, End, End)> {
    if p.srcLOD != 0 || p.dstLOD != 0 || !p.reserved0.is_null() || !p.reserved1.is_null() {
        return Err(INVALID);
    }
    let s = Shape { w: p.WidthInBytes as u64, h: p.Height as u64, d: p.Depth as u64 };
    let rows = |r: usize| if r == 0 { s.h } else { r as u64 };
    if s.d > 1 && (rows(p.srcHeight) < s.h || rows(p.dstHeight) < s.h) {
        return Err(INVALID);
    }
    let src = end(
        c,
        s,
        (p.srcMemoryType, p.srcHost as u64, p.srcDevice),
        p.srcArray,
        (p.srcXInBytes, p.srcY, p.srcZ),
        p.srcPitch,
        p.srcHeight,
        "source",
    )?;
    let dst = end(
        c,
        s,
        (p.dstMemoryType, p.dstHost as u64, p.dstDevice),
        p.dstArray,
        (p.dstXInBytes, p.dstY, p.dstZ),
        p.dstPitch,
        p.dstHeight,
        "destination",
    )?;
    Ok((s, src, dst))
}

/// A graph memcpy node's copy, checked as a 3D copy is: device ends, and host ends that lie in
/// one page-locked allocation the daemon maps. Pageable host memory is NOT_SUPPORTED with a
/// log line: the daemon cannot read it when the graph runs, long after this call.
pub(super) fn graph_node_copy(c: &Client, p: &CUDA_MEMCPY3D) -> R<Copy3D> {
    let (s, src, dst) = ends(c, p)?;
    if s.w == 0 || s.h == 0 || s.d == 0 {
        return Err(INVALID);
    }
    let host = |e: &End| -> R<Copy3DEnd> {
        e.in_region(c, s).ok_or_else(|| {
            crate::util::log(
                "a graph memcpy node's host memory must be page-locked (cuMemHostAlloc/cuMemHostRegister)",
            );
            CUresult::CUDA_ERROR_NOT_SUPPORTED
        })
    };
    let (src, dst) = match (src.dev, dst.dev) {
        (true, true) => (src.wire(0, 0, s.h), dst.wire(0, 0, s.h)),
        (false, true) => (host(&src)?, dst.wire(0, 0, s.h)),
        (true, false) => (src.wire(0, 0, s.h), host(&dst)?),
        (false, false) => {
            crate::util::log("a graph memcpy node from host to host memory is not forwarded through the pool");
            return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
        }
    };
    Ok(Copy3D { src, dst, width_bytes: s.w, height: s.h, depth: s.d })
}

/// `stream`: the async variants' stream, already resolved.
fn copy3d(c: &mut Client, p: &CUDA_MEMCPY3D, stream: Option<StreamId>) -> R<()> {
    let (s, src, dst) = ends(c, p)?;
    if s.w == 0 || s.h == 0 || s.d == 0 {
        return Ok(());
    }
    let direct = match (src.dev, dst.dev) {
        (true, true) => Some((src.wire(0, 0, s.h), dst.wire(0, 0, s.h))),
        (false, true) => src.in_region(c, s).map(|r| (r, dst.wire(0, 0, s.h))),
        (true, false) => dst.in_region(c, s).map(|r| (src.wire(0, 0, s.h), r)),
        (false, false) => None,
    };
    if let Some((src, dst)) = direct {
        let copy = Copy3D { src, dst, width_bytes: s.w, height: s.h, depth: s.d };
        let conn = c.live()?;
        return match stream {
            None => conn.call_ok(Request::Memcpy3D { copy }),
            Some(stream) => conn.post(Request::Memcpy3DAsync { copy, stream }),
        };
    }
    match (src.dev, dst.dev) {
        (false, false) => {
            if let Some(stream) = stream {
                sync_stream(c, stream)?;
            }
            for z in 0..s.d {
                for y in 0..s.h {
                    // SAFETY: both ends are host buffers covering these rows per the
                    // CUDA contract; `copy` tolerates overlap.
                    unsafe { std::ptr::copy(src.at(z, y) as *const u8, dst.at(z, y) as *mut u8, s.w as usize) };
                }
            }
            Ok(())
        }
        (false, true) => staged(c, s, src, dst, stream, true),
        _ => {
            if let Some(stream) = stream {
                sync_stream(c, stream)?;
            }
            staged(c, s, src, dst, None, false)
        }
    }
}

/// A copy with one host end, packed through staging: chunks of whole slices, or of rows
/// of one slice when a slice does not fit.
fn staged(c: &mut Client, s: Shape, src: End, dst: End, stream: Option<StreamId>, to_dev: bool) -> R<()> {
    let conn = c.live()?;
    let room = conn.staging_len() as u64;
    if s.w > room {
        return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
    }
    let w = s.w as usize;
    let slices = room / s.w.saturating_mul(s.h);
    let (host, dev) = if to_dev { (src, dst) } else { (dst, src) };
    // Chunks as (first slice, slices, first row, rows).
    let mut chunks = Vec::new();
    if slices >= 1 {
        let mut z = 0;
        while z < s.d {
            let n = slices.min(s.d - z);
            chunks.push((z, n, 0, s.h));
            z += n;
        }
    } else {
        let per = room / s.w;
        for z in 0..s.d {
            let mut y = 0;
            while y < s.h {
                let n = per.min(s.h - y);
                chunks.push((z, 1, y, n));
                y += n;
            }
        }
    }
    for (z0, nz, y0, ny) in chunks {
        let slot = |zi: u64, yi: u64| ((zi * ny + yi) * s.w) as usize;
        let staging = Copy3DEnd { space: MemSpace::Staging(0), x_bytes: 0, y: 0, z: 0, pitch: s.w, height: ny };
        let copy = |dev_is_dst: bool| {
            let d = dev.wire(z0, y0, ny);
            let (a, b) = if dev_is_dst { (staging, d) } else { (d, staging) };
            Copy3D { src: a, dst: b, width_bytes: s.w, height: ny, depth: nz }
        };
        if to_dev {
            for zi in 0..nz {
                for yi in 0..ny {
                    let row = host_bytes(host.at(z0 + zi, y0 + yi) as *const c_void, w)?;
                    conn.stage_write(slot(zi, yi), row)?;
                }
            }
            let copy = copy(true);
            match stream {
                None => conn.call_ok(Request::Memcpy3D { copy })?,
                Some(stream) => {
                    conn.post(Request::Memcpy3DAsync { copy, stream })?;
                    // The daemon is done with staging once it handles the next frame.
                    conn.call(Request::DeviceGetCount {})?;
                }
            }
        } else {
            conn.call_ok(Request::Memcpy3D { copy: copy(false) })?;
            for zi in 0..nz {
                for yi in 0..ny {
                    let row = host_bytes_mut(host.at(z0 + zi, y0 + yi) as *mut c_void, w)?;
                    conn.stage_read(slot(zi, yi), row)?;
                }
            }
        }
    }
    if stream.is_none() {
        conn.take_pending()?;
    }
    Ok(())
}

pub(super) fn memcpy3d(p: CUDA_MEMCPY3D, _ds: DefaultStream) -> R<()> {
    client::call(|c| {
        require_ctx(c)?;
        copy3d(c, &p, None)
    })
}

pub(super) fn memcpy3d_async(p: CUDA_MEMCPY3D, s: CUstream, ds: DefaultStream) -> R<()> {
    client::call(|c| {
        let stream = resolve(c, s, ds)?;
        copy3d(c, &p, Some(stream))
    })
}

/// A 2D copy as a 3D copy of one slice (how a 2D copy with an array end is run).
pub(super) fn from_2d(p: &CUDA_MEMCPY2D) -> CUDA_MEMCPY3D {
    CUDA_MEMCPY3D {
        srcXInBytes: p.srcXInBytes,
        srcY: p.srcY,
        srcMemoryType: p.srcMemoryType,
        srcHost: p.srcHost,
        srcDevice: p.srcDevice,
        srcArray: p.srcArray,
        srcPitch: p.srcPitch,
        dstXInBytes: p.dstXInBytes,
        dstY: p.dstY,
        dstMemoryType: p.dstMemoryType,
        dstHost: p.dstHost,
        dstDevice: p.dstDevice,
        dstArray: p.dstArray,
        dstPitch: p.dstPitch,
        WidthInBytes: p.WidthInBytes,
        Height: p.Height,
        Depth: 1,
        ..Default::default()
    }
}

/// Whether either end of a 2D copy is an array.
pub(super) fn has_array(p: &CUDA_MEMCPY2D) -> bool {
    p.srcMemoryType == CUmemorytype::CU_MEMORYTYPE_ARRAY || p.dstMemoryType == CUmemorytype::CU_MEMORYTYPE_ARRAY
}
