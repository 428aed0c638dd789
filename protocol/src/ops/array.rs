//! The texture family (`0x0exx`). CUDA arrays travel as linear device memory: the client
//! library lays each array out in an allocation of its own (counted in the ledger like any
//! `MemAlloc`) and copies to and from arrays are pitched copies; what the daemon makes is
//! the texture object over that memory, whose 64-bit handle kernels receive as-is.
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
