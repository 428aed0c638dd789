//! CUDA arrays (`cuArrayCreate`, `cuArray3DCreate`) and mipmapped arrays: opaque
//! device memory laid out for texture and surface access, charged to the device like
//! any allocation and released when the last user (handle, texture object, queued
//! copy) lets go.
//!
//! An array's bytes are stored packed, row after row and slice after slice; the
//! layout is private (CUDA's is too), so only copies, textures and surfaces reach it.

use crate::device::Device;
use crate::error::{CuResult, fail};
use crate::memory::Mapping;
use gpupool_shim::cuda::{
    CUDA_ARRAY3D_CUBEMAP, CUDA_ARRAY3D_DESCRIPTOR, CUDA_ARRAY3D_LAYERED, CUDA_ARRAY3D_SURFACE_LDST,
    CUDA_ARRAY3D_TEXTURE_GATHER, CUarray_format, CUresult,
};
use std::sync::Arc;

/// The type of one channel of an element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    U8,
    U16,
    U32,
    S8,
    S16,
    S32,
    F16,
    F32,
}

impl Channel {
    pub fn from_cu(f: CUarray_format) -> Option<Channel> {
        Some(match f {
            CUarray_format::CU_AD_FORMAT_UNSIGNED_INT8 => Channel::U8,
            CUarray_format::CU_AD_FORMAT_UNSIGNED_INT16 => Channel::U16,
            CUarray_format::CU_AD_FORMAT_UNSIGNED_INT32 => Channel::U32,
            CUarray_format::CU_AD_FORMAT_SIGNED_INT8 => Channel::S8,
            CUarray_format::CU_AD_FORMAT_SIGNED_INT16 => Channel::S16,
            CUarray_format::CU_AD_FORMAT_SIGNED_INT32 => Channel::S32,
            CUarray_format::CU_AD_FORMAT_HALF => Channel::F16,
            CUarray_format::CU_AD_FORMAT_FLOAT => Channel::F32,
            _ => return None,
        })
    }

    pub fn to_cu(self) -> CUarray_format {
        match self {
            Channel::U8 => CUarray_format::CU_AD_FORMAT_UNSIGNED_INT8,
            Channel::U16 => CUarray_format::CU_AD_FORMAT_UNSIGNED_INT16,
            Channel::U32 => CUarray_format::CU_AD_FORMAT_UNSIGNED_INT32,
            Channel::S8 => CUarray_format::CU_AD_FORMAT_SIGNED_INT8,
            Channel::S16 => CUarray_format::CU_AD_FORMAT_SIGNED_INT16,
            Channel::S32 => CUarray_format::CU_AD_FORMAT_SIGNED_INT32,
            Channel::F16 => CUarray_format::CU_AD_FORMAT_HALF,
            Channel::F32 => CUarray_format::CU_AD_FORMAT_FLOAT,
        }
    }

    pub fn bytes(self) -> u64 {
        match self {
            Channel::U8 | Channel::S8 => 1,
            Channel::U16 | Channel::S16 | Channel::F16 => 2,
            Channel::U32 | Channel::S32 | Channel::F32 => 4,
        }
    }
}

/// Element format and extent, as `CUDA_ARRAY3D_DESCRIPTOR` states them (a 1D array
/// has height and depth 0, a 2D one depth 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub width: u64,
    pub height: u64,
    pub depth: u64,
    pub channel: Channel,
    pub channels: u32,
    pub flags: u32,
}

/// Largest dimensions accepted, from the device's texture limits (H100: 1D 131072,
/// 2D 131072 x 65536, 3D 16384 cubed).
const MAX_1D: u64 = 131072;
const MAX_2D: [u64; 2] = [131072, 65536];
const MAX_3D: u64 = 16384;

impl Extent {
    /// Checks a descriptor the way `cuArray3DCreate` documents.
    pub fn from_desc(d: &CUDA_ARRAY3D_DESCRIPTOR) -> CuResult<Extent> {
        let Some(channel) = Channel::from_cu(d.Format) else {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("array format {:#x} is unknown", d.Format.0));
        };
        if !matches!(d.NumChannels, 1 | 2 | 4) {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("NumChannels {} (must be 1, 2 or 4)", d.NumChannels)
            });
        }
        let known = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_TEXTURE_GATHER;
        if d.Flags & CUDA_ARRAY3D_CUBEMAP != 0 || d.Flags & !known != 0 {
            return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || {
                format!(
                    "array flags {:#x}: cubemaps and flags beyond layered, surface and gather are not simulated",
                    d.Flags
                )
            });
        }
        let (w, h, z) = (d.Width as u64, d.Height as u64, d.Depth as u64);
        let layered = d.Flags & CUDA_ARRAY3D_LAYERED != 0;
        let ok = match (h, z) {
            _ if w == 0 => false,
            (0, 0) => w <= MAX_1D,
            (0, _) => layered && w <= MAX_1D && z <= 2048,
            (_, 0) => w <= MAX_2D[0] && h <= MAX_2D[1],
            _ if layered => w <= 32768 && h <= 32768 && z <= 2048,
            _ => w <= MAX_3D && h <= MAX_3D && z <= MAX_3D,
        };
        if !ok {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("array extent {w} x {h} x {z} (layered: {layered}) is outside the device's limits")
            });
        }
        Ok(Extent { width: w, height: h, depth: z, channel, channels: d.NumChannels, flags: d.Flags })
    }

    pub fn to_desc(&self) -> CUDA_ARRAY3D_DESCRIPTOR {
        CUDA_ARRAY3D_DESCRIPTOR {
            Width: self.width as usize,
            Height: self.height as usize,
            Depth: self.depth as usize,
            Format: self.channel.to_cu(),
            NumChannels: self.channels,
            Flags: self.flags,
        }
    }

    pub fn elem_bytes(&self) -> u64 {
        self.channel.bytes() * self.channels as u64
    }

    pub fn row_bytes(&self) -> u64 {
        self.width * self.elem_bytes()
    }

    /// Rows per slice and slices, counting a missing dimension as 1.
    pub fn rows(&self) -> u64 {
        self.height.max(1)
    }

    pub fn slices(&self) -> u64 {
        self.depth.max(1)
    }

    pub fn bytes(&self) -> u64 {
        self.row_bytes() * self.rows() * self.slices()
    }

    /// The extent of mipmap level `level`: each dimension halved, at least 1.
    pub fn level(&self, level: u32) -> Extent {
        let half = |v: u64| if v == 0 { 0 } else { (v >> level).max(1) };
        let layered = self.flags & CUDA_ARRAY3D_LAYERED != 0;
        Extent {
            width: half(self.width),
            height: half(self.height),
            depth: if layered { self.depth } else { half(self.depth) },
            ..*self
        }
    }
}

/// One CUDA array.
pub struct Array {
    pub ctx_handle: u64,
    pub extent: Extent,
    /// Set for a level of a mipmapped array: `cuArrayDestroy` must refuse it.
    pub mip_level: bool,
    bytes: Mapping,
    device: Arc<Device>,
    charged: u64,
}

impl Array {
    /// Allocates an array in context `ctx_handle`, charging the device its bytes.
    pub fn create(device: Arc<Device>, ctx_handle: u64, extent: Extent, mip_level: bool) -> CuResult<Array> {
        let size = extent.bytes();
        device.reserve(size)?;
        let Some(bytes) = Mapping::new(size as usize, true) else {
            device.release(size);
            return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || format!("host cannot back an array of {size} bytes"));
        };
        Ok(Array { ctx_handle, extent, mip_level, bytes, device, charged: size })
    }

    /// Host address of the byte at `x_bytes` of row `y` of slice `z`.
    pub fn host_addr(&self, x_bytes: u64, y: u64, z: u64) -> u64 {
        self.bytes.addr() + z * self.slice_bytes() + y * self.extent.row_bytes() + x_bytes
    }

    pub fn slice_bytes(&self) -> u64 {
        self.extent.row_bytes() * self.extent.rows()
    }

    /// Checks that a box of `width_bytes` x `height` x `depth` at (`x_bytes`, `y`, `z`)
    /// lies inside the array.
    #[allow(clippy::too_many_arguments)]
    pub fn check_box(&self, x: u64, y: u64, z: u64, w: u64, h: u64, d: u64, role: &str) -> CuResult<()> {
        let e = &self.extent;
        let inside = |o: u64, n: u64, lim: u64| o.checked_add(n).is_some_and(|end| end <= lim);
        if inside(x, w, e.row_bytes()) && inside(y, h, e.rows()) && inside(z, d, e.slices()) {
            Ok(())
        } else {
            fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!(
                    "{role}: {w} bytes x {h} rows x {d} slices at ({x}, {y}, {z}) run outside the array \
                     ({} bytes x {} rows x {} slices)",
                    e.row_bytes(),
                    e.rows(),
                    e.slices()
                )
            })
        }
    }
}

impl Drop for Array {
    fn drop(&mut self) {
        self.device.release(self.charged);
    }
}

/// A mipmapped array: its levels, each an array of its own.
pub struct MipmappedArray {
    pub ctx_handle: u64,
    pub extent: Extent,
    pub levels: Vec<Arc<Array>>,
    /// The handles under which the levels are registered (`cuMipmappedArrayGetLevel`).
    pub level_handles: Vec<u64>,
}

/// How many levels a full mipmap chain of `extent` has.
pub fn max_levels(extent: &Extent) -> u32 {
    let biggest = extent.width.max(extent.height).max(extent.depth).max(1);
    64 - biggest.leading_zeros()
}
