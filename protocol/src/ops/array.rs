//! The array, texture and surface family (`0x0exx`). CUDA arrays and mipmapped arrays are
//! the backend's, made by the daemon in the tenant's context and counted in its ledger; the
//! client names them by the handle the daemon answered (a copy end is
//! [`super::MemSpace::Array`]). Texture objects over linear or pitched memory, over arrays
//! and mipmapped arrays, and surface objects over arrays are the backend's too: their
//! 64-bit handles go into kernel parameters as-is.
#![forbid(unsafe_code)]

use crate::codec::wire_struct;
use crate::ops::DevicePtr;

wire_struct! {
    /// The memory a texture object reads: `height` 0 is linear memory of `width` elements
    /// (`CU_RESOURCE_TYPE_LINEAR`), otherwise `height` rows of `width` elements `pitch` bytes
    /// apart (`CU_RESOURCE_TYPE_PITCH2D`). `format` is a `CUarray_format`.
    #[derive(Copy)]
    pub struct TexResource { pub ptr: DevicePtr, pub format: u32, pub channels: u32, pub width: u64, pub height: u64, pub pitch: u64 }
}

wire_struct! {
    /// A `CUDA_TEXTURE_DESC`'s sampling fields: `CUaddress_mode`s, a `CUfilter_mode`, the
    /// `CU_TRSF_*` flags and the border color (f32 bits).
    #[derive(Copy)]
    pub struct TexSampler { pub address: [u32; 3], pub filter: u32, pub flags: u32, pub border: [u32; 4] }
}

wire_struct! {
    /// A `CUDA_ARRAY3D_DESCRIPTOR`: extent in elements (0 for a missing dimension), a
    /// `CUarray_format`, the channel count and the `CUDA_ARRAY3D_*` flags.
    #[derive(Copy)]
    pub struct ArrayDesc { pub width: u64, pub height: u64, pub depth: u64, pub format: u32, pub channels: u32, pub flags: u32 }
}

wire_struct! {
    /// A `CUDA_TEXTURE_DESC`'s mipmap fields: a `CUfilter_mode` between levels, the LOD bias
    /// and clamps (f32 bits) and the maximum anisotropy.
    #[derive(Copy)]
    pub struct TexMipmap { pub filter: u32, pub bias: u32, pub min_clamp: u32, pub max_clamp: u32, pub max_anisotropy: u32 }
}

wire_struct! {
    /// A `CUDA_RESOURCE_VIEW_DESC`: a `CUresourceViewFormat`, extent, and the mipmap levels
    /// and layers seen.
    #[derive(Copy)]
    pub struct ResourceView {
        pub format: u32, pub width: u64, pub height: u64, pub depth: u64,
        pub first_level: u32, pub last_level: u32, pub first_layer: u32, pub last_layer: u32,
    }
}
