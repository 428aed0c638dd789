//! 2D and 3D strided copies between device memory this session owns, the staging area and
//! the client's page-locked host regions. Each end is checked over its whole extent (first
//! to last byte it touches), then normalised to its first byte with zero x/y/z offsets
//! before it reaches the backend.

use super::dispatch::{Fail, Result};
use super::session::Session;
use crate::call;
use gpupool_protocol::ops::{Copy2D, Copy3D, MemSpace, RegionSlice};
use gpupool_protocol::transport::Staging;
use gpupool_protocol::{DevicePtr, StreamId};
use gpupool_shim::cuda::{CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUmemorytype};

/// One end, checked: the memory type and its first byte (host or device address). A
/// region end's address is found once the copy's device is entered (the region is
/// page-locked through it on first use).
struct End {
    kind: CUmemorytype,
    host: *mut u8,
    device: u64,
    device_ordinal: Option<u32>,
    region: Option<RegionSlice>,
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
                })
            }
            MemSpace::Staging(o) => {
                let first = o.checked_add(skip).ok_or_else(over)?;
                let host = Self::staging_ptr(staging, first, span)?;
                Ok(End { kind: CUmemorytype::CU_MEMORYTYPE_HOST, host, device: 0, device_ordinal: None, region: None })
            }
            MemSpace::Region { id, offset } => {
                let offset = offset.checked_add(skip).ok_or_else(over)?;
                Ok(End {
                    kind: CUmemorytype::CU_MEMORYTYPE_HOST,
                    host: std::ptr::null_mut(),
                    device: 0,
                    device_ordinal: None,
                    region: Some(RegionSlice { id, offset, len: span }),
                })
            }
        }
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
        let (ss, sn) = end(c.src.x_bytes, c.src.y, c.src.z, c.src.pitch, c.src.height)?;
        let (ds, dn) = end(c.dst.x_bytes, c.dst.y, c.dst.z, c.dst.pitch, c.dst.height)?;
        Ok((self.copy_end(c.src.space, ss, sn, staging)?, self.copy_end(c.dst.space, ds, dn, staging)?))
    }

    fn params_3d(c: &Copy3D, src: &End, dst: &End) -> CUDA_MEMCPY3D {
        CUDA_MEMCPY3D {
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
        }
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
