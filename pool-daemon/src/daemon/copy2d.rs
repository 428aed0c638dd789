//! 2D and 3D strided copies between device memory this session owns, its CUDA arrays
//! ([`super::array`]), the staging area and the client's page-locked host regions. Each
//! linear end is checked over its whole extent (first to last byte it touches), then
//! normalised to its first byte with zero x/y/z offsets before it reaches the backend; an
//! array end is checked as a box inside the array and keeps its offsets. A 2D copy with an
//! array end is run as a 3D copy of one slice.

use super::dispatch::{Fail, Result};
use super::session::Session;
use crate::call;
use gpupool_protocol::ops::{Copy2D, Copy2DEnd, Copy3D, Copy3DEnd, MemSpace, RegionSlice};
use gpupool_protocol::transport::Staging;
use gpupool_protocol::{DevicePtr, StreamId};
use gpupool_shim::cuda::{CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUarray, CUmemorytype};

/// One end, checked: the memory type and its first byte (host or device address). A
/// region end's address is found once the copy's device is entered (the region is
/// page-locked through it on first use).
struct End {
    kind: CUmemorytype,
    host: *mut u8,
    device: u64,
    device_ordinal: Option<u32>,
    region: Option<RegionSlice>,
    /// An array end: the backend array and the box's origin (x in bytes, y, z).
    array: Option<(u64, [u64; 3])>,
}

fn over() -> Fail {
    Fail::invalid_value("copy extent overflows")
}

impl Session {
    /// `skip`: bytes from the origin to the first byte; `span`: bytes from there to the end.
    fn copy_end(&self, space: MemSpace, skip: u64, span: u64, staging: Option<&Staging>) -> Result<End> {
        match space {
            MemSpace::Device(p) => {
                let first = p.0.checked_add(skip).ok_or_else(over)?;
                let d = self.owned(DevicePtr(first), span)?;
                Ok(End {
                    kind: CUmemorytype::CU_MEMORYTYPE_DEVICE,
                    host: std::ptr::null_mut(),
                    device: first,
                    device_ordinal: Some(d),
                    region: None,
                    array: None,
                })
            }
            MemSpace::Staging(o) => {
                let first = o.checked_add(skip).ok_or_else(over)?;
                let host = Self::staging_ptr(staging, first, span)?;
                Ok(End {
                    kind: CUmemorytype::CU_MEMORYTYPE_HOST,
                    host,
                    device: 0,
                    device_ordinal: None,
                    region: None,
                    array: None,
                })
            }
            MemSpace::Region { id, offset } => {
                let offset = offset.checked_add(skip).ok_or_else(over)?;
                Ok(End {
                    kind: CUmemorytype::CU_MEMORYTYPE_HOST,
                    host: std::ptr::null_mut(),
                    device: 0,
                    device_ordinal: None,
                    region: Some(RegionSlice { id, offset, len: span }),
                    array: None,
                })
            }
            MemSpace::Array(_) => Err(Fail::invalid_value("an array end where only memory is taken")),
        }
    }

    /// An array end: a box of `w` bytes x `h` rows x `d` slices at `at` inside array `a`.
    fn array_end(&self, a: u64, at: [u64; 3], [w, h, d]: [u64; 3]) -> Result<End> {
        let rec = self.array(a)?;
        let inside = |o: u64, n: u64, lim: u64| o.checked_add(n).is_some_and(|end| end <= lim);
        let [x, y, z] = at;
        if !(inside(x, w, rec.row_bytes()) && inside(y, h, rec.rows()) && inside(z, d, rec.slices())) {
            return Err(Fail::invalid_value(format!(
                "{w} bytes x {h} rows x {d} slices at ({x}, {y}, {z}) run outside the array ({} bytes x {} rows x {} \
                 slices)",
                rec.row_bytes(),
                rec.rows(),
                rec.slices()
            )));
        }
        Ok(End {
            kind: CUmemorytype::CU_MEMORYTYPE_ARRAY,
            host: std::ptr::null_mut(),
            device: 0,
            device_ordinal: Some(rec.device),
            region: None,
            array: Some((a, at)),
        })
    }

    /// Enters the device that issues the copy (its stream's, else its memory's) and finds
    /// its region ends there.
    fn enter_copy(&mut self, d: u32, ends: [&mut End; 2]) -> Result<()> {
        self.enter(d)?;
        for e in ends {
            if let Some(s) = e.region.take() {
                e.host = self.region_ptr(&s, d)?;
            }
        }
        Ok(())
    }

    fn device_of(&self, a: &End, b: &End) -> Result<u32> {
        a.device_ordinal.or(b.device_ordinal).ok_or_else(|| Fail::invalid_value("a copy with no device end"))
    }

    pub(super) fn copy_2d(&mut self, c: Copy2D, stream: Option<StreamId>, staging: Option<&Staging>) -> Result<()> {
        let end = |x: u64, y: u64, pitch: u64| -> Result<(u64, u64)> {
            if c.height > 1 && pitch < c.width_bytes {
                return Err(Fail::invalid_value("pitch smaller than the width"));
            }
            let skip = y.checked_mul(pitch).and_then(|v| v.checked_add(x)).ok_or_else(over)?;
            let span =
                (c.height.max(1) - 1).checked_mul(pitch).and_then(|v| v.checked_add(c.width_bytes)).ok_or_else(over)?;
            Ok((skip, span))
        };
        if c.width_bytes == 0 || c.height == 0 {
            return Ok(());
        }
        if matches!(c.src.space, MemSpace::Array(_)) || matches!(c.dst.space, MemSpace::Array(_)) {
            let end3 = |e: Copy2DEnd| Copy3DEnd {
                space: e.space,
                x_bytes: e.x_bytes,
                y: e.y,
                z: 0,
                pitch: e.pitch,
                height: 0,
            };
            let c3 =
                Copy3D { src: end3(c.src), dst: end3(c.dst), width_bytes: c.width_bytes, height: c.height, depth: 1 };
            return self.copy_3d(c3, stream, staging);
        }
        let (ss, sn) = end(c.src.x_bytes, c.src.y, c.src.pitch)?;
        let (ds, dn) = end(c.dst.x_bytes, c.dst.y, c.dst.pitch)?;
        let mut src = self.copy_end(c.src.space, ss, sn, staging)?;
        let mut dst = self.copy_end(c.dst.space, ds, dn, staging)?;
        let d = self.device_of(&src, &dst)?;
        let s = stream.map(|id| self.copy_stream(id, d)).transpose()?;
        self.enter_copy(s.map_or(d, |(_, sd)| sd), [&mut src, &mut dst])?;
        let p = CUDA_MEMCPY2D {
            srcMemoryType: src.kind,
            srcHost: src.host.cast_const().cast(),
            srcDevice: src.device,
            srcPitch: c.src.pitch as usize,
            dstMemoryType: dst.kind,
            dstHost: dst.host.cast(),
            dstDevice: dst.device,
            dstPitch: c.dst.pitch as usize,
            WidthInBytes: c.width_bytes as usize,
            Height: c.height as usize,
            ..Default::default()
        };
        match s {
            None => call!(self.shared.cuda, cuMemcpy2D_v2(&p))?,
            Some((s, _)) => call!(self.shared.cuda, cuMemcpy2DAsync_v2(&p, s.0))?,
        }
        Ok(())
    }

    /// Both ends of a 3D copy of non-zero extent, each checked over its whole extent.
    fn ends_3d(&self, c: &Copy3D, staging: Option<&Staging>) -> Result<(End, End)> {
        let end = |x: u64, y: u64, z: u64, pitch: u64, rows: u64| -> Result<(u64, u64)> {
            if (c.height > 1 || c.depth > 1) && pitch < c.width_bytes || c.depth > 1 && rows < c.height {
                return Err(Fail::invalid_value("pitch or slice height smaller than the copy"));
            }
            let row = |r: u64| r.checked_mul(pitch);
            let skip = z
                .checked_mul(rows)
                .and_then(|v| v.checked_add(y))
                .and_then(row)
                .and_then(|v| v.checked_add(x))
                .ok_or_else(over)?;
            let last_row =
                (c.depth - 1).checked_mul(rows).and_then(|v| v.checked_add(c.height - 1)).ok_or_else(over)?;
            let span = row(last_row).and_then(|v| v.checked_add(c.width_bytes)).ok_or_else(over)?;
            Ok((skip, span))
        };
        let one = |e: &Copy3DEnd| match e.space {
            MemSpace::Array(a) => self.array_end(a, [e.x_bytes, e.y, e.z], [c.width_bytes, c.height, c.depth]),
            space => {
                let (skip, span) = end(e.x_bytes, e.y, e.z, e.pitch, e.height)?;
                self.copy_end(space, skip, span, staging)
            }
        };
        Ok((one(&c.src)?, one(&c.dst)?))
    }

    fn params_3d(c: &Copy3D, src: &End, dst: &End) -> CUDA_MEMCPY3D {
        let mut p = CUDA_MEMCPY3D {
            srcMemoryType: src.kind,
            srcHost: src.host.cast_const().cast(),
            srcDevice: src.device,
            srcPitch: c.src.pitch as usize,
            srcHeight: c.src.height as usize,
            dstMemoryType: dst.kind,
            dstHost: dst.host.cast(),
            dstDevice: dst.device,
            dstPitch: c.dst.pitch as usize,
            dstHeight: c.dst.height as usize,
            WidthInBytes: c.width_bytes as usize,
            Height: c.height as usize,
            Depth: c.depth as usize,
            ..Default::default()
        };
        if let Some((a, [x, y, z])) = src.array {
            (p.srcArray, p.srcXInBytes, p.srcY, p.srcZ) = (a as CUarray, x as usize, y as usize, z as usize);
            (p.srcPitch, p.srcHeight) = (0, 0);
        }
        if let Some((a, [x, y, z])) = dst.array {
            (p.dstArray, p.dstXInBytes, p.dstY, p.dstZ) = (a as CUarray, x as usize, y as usize, z as usize);
            (p.dstPitch, p.dstHeight) = (0, 0);
        }
        p
    }

    pub(super) fn copy_3d(&mut self, c: Copy3D, stream: Option<StreamId>, staging: Option<&Staging>) -> Result<()> {
        if c.width_bytes == 0 || c.height == 0 || c.depth == 0 {
            return Ok(());
        }
        let (mut src, mut dst) = self.ends_3d(&c, staging)?;
        let d = self.device_of(&src, &dst)?;
        let s = stream.map(|id| self.copy_stream(id, d)).transpose()?;
        self.enter_copy(s.map_or(d, |(_, sd)| sd), [&mut src, &mut dst])?;
        let p = Self::params_3d(&c, &src, &dst);
        match s {
            None => call!(self.shared.cuda, cuMemcpy3D_v2(&p))?,
            Some((s, _)) => call!(self.shared.cuda, cuMemcpy3DAsync_v2(&p, s.0))?,
        }
        Ok(())
    }

    /// A graph memcpy node's copy on device `d`, checked as `copy_3d` checks one: device ends
    /// must be this session's memory on `d`, host ends page-locked regions (they stay mapped
    /// while a graph exists, see [`super::graph`]); the staging area is refused, since it is
    /// reused long before the graph runs. Leaves `d` entered.
    pub(super) fn memcpy_node_params(&mut self, c: Copy3D, d: u32) -> Result<CUDA_MEMCPY3D> {
        if c.width_bytes == 0 || c.height == 0 || c.depth == 0 {
            return Err(Fail::invalid_value("a memcpy node of zero extent"));
        }
        if matches!(c.src.space, MemSpace::Staging(_)) || matches!(c.dst.space, MemSpace::Staging(_)) {
            return Err(Fail::invalid_value("a memcpy node cannot copy through the staging area (pageable memory)"));
        }
        let (mut src, mut dst) = self.ends_3d(&c, None)?;
        if [&src, &dst].iter().any(|e| e.device_ordinal.is_some_and(|o| o != d)) {
            return Err(Fail::invalid_value("a memcpy node's device memory must be on the graph's device"));
        }
        self.device_of(&src, &dst)?;
        self.enter_copy(d, [&mut src, &mut dst])?;
        Ok(Self::params_3d(&c, &src, &dst))
    }
}
