//! The value types operations carry: handle ids, device pointers, copy and memset
//! descriptors, device and function descriptions. No host pointer ever goes on the wire.
#![forbid(unsafe_code)]

use crate::codec::{Decode, DecodeError, Encode, Reader, Writer, byte_blob, wire_id, wire_struct};

wire_id! {
    /// A context, as the daemon numbered it for this session.
    CtxId;
    /// A stream. [`StreamId::NULL`] is the context's default (legacy) stream.
    StreamId;
    /// An event.
    EventId;
    /// A loaded module.
    ModuleId;
    /// A function (kernel) of a loaded module.
    FuncId;
    /// A device address. Only the daemon's backend can dereference it; the daemon checks
    /// that the session owns it before use.
    DevicePtr;
    /// A physical allocation handle (`CUmemGenericAllocationHandle`), as the daemon
    /// numbered it: unique in the daemon, so a handle of another session is never one of
    /// this session's.
    MemHandleId;
}

impl StreamId {
    /// The default stream of the context (CUDA's NULL stream). The interposer maps CUDA's
    /// `CU_STREAM_LEGACY` here too; per-thread default streams are the interposer's to map.
    pub const NULL: StreamId = StreamId(0);
}

/// Cap on [`InlineBytes`]: 32 MiB. Larger copies and module images go through staging.
pub const MAX_INLINE_BYTES: usize = 32 << 20;
/// Cap on [`KernelParams`]: 32 KiB (CUDA allows 32,764 bytes of kernel parameters).
pub const MAX_KERNEL_PARAM_BYTES: usize = 32 * 1024;
/// Cap on the devices one session sees.
pub const MAX_DEVICES: usize = 256;
/// Cap on the attributes of one device.
pub const MAX_DEVICE_ATTRIBUTES: usize = 1024;
/// Cap on the parameters of one kernel (each takes at least one byte of 32 KiB).
pub const MAX_KERNEL_PARAMS: usize = MAX_KERNEL_PARAM_BYTES;
/// Cap on the functions listed for one module.
pub const MAX_MODULE_FUNCTIONS: usize = 65_536;

byte_blob! {
    /// Bytes carried in the frame itself (small copies, small module images).
    InlineBytes, MAX_INLINE_BYTES, "inline bytes"
}
byte_blob! {
    /// A kernel's parameters packed at the offsets of its [`ParamInfo`] layout.
    KernelParams, MAX_KERNEL_PARAM_BYTES, "kernel parameters"
}

wire_struct! {
    /// A region of the session's shared staging area.
    #[derive(Copy, Default)]
    pub struct StagingRegion { pub offset: u64, pub len: u64 }
}

wire_struct! {
    /// `len` bytes at `offset` of a client host-memory region (page-locked memory the
    /// client shared with `HostRegionMap`). The daemon checks it lies inside the region.
    #[derive(Copy, Default)]
    pub struct RegionSlice { pub id: u64, pub offset: u64, pub len: u64 }
}

/// Where host bytes going to the device come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostSrc {
    /// Already written to the staging area.
    Staging(StagingRegion),
    /// In this frame.
    Inline(InlineBytes),
    /// In a client host-memory region (no staging pass; it outlives the call).
    Region(RegionSlice),
}

impl HostSrc {
    pub fn len(&self) -> u64 {
        match self {
            HostSrc::Staging(r) => r.len,
            HostSrc::Inline(b) => b.0.len() as u64,
            HostSrc::Region(r) => r.len,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Encode for HostSrc {
    fn encode(&self, w: &mut Writer<'_>) {
        match self {
            HostSrc::Staging(r) => {
                0u8.encode(w);
                r.encode(w);
            }
            HostSrc::Inline(b) => {
                1u8.encode(w);
                b.encode(w);
            }
            HostSrc::Region(r) => {
                2u8.encode(w);
                r.encode(w);
            }
        }
    }
}
impl Decode for HostSrc {
    const MIN_LEN: usize = 5;
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::decode(r)? {
            0 => Ok(HostSrc::Staging(Decode::decode(r)?)),
            1 => Ok(HostSrc::Inline(Decode::decode(r)?)),
            2 => Ok(HostSrc::Region(Decode::decode(r)?)),
            tag => Err(DecodeError::InvalidTag { what: "host source", tag: tag.into() }),
        }
    }
}

/// One end of a 2D/3D copy: device memory, the staging area, or a client's page-locked
/// host region (shared memory the daemon maps, so the copy needs no staging pass and an
/// async one can be queued on its stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemSpace {
    Device(DevicePtr),
    /// Byte offset of the region's origin in the staging area.
    Staging(u64),
    /// Host region `id`, with the copy's origin `offset` bytes into it.
    Region {
        id: u64,
        offset: u64,
    },
    /// A CUDA array of the session (the handle [`super::array`]'s `ArrayCreate` answered);
    /// the end's x (bytes), y and z place the copy in it, its pitch and height are unused.
    Array(u64),
}

impl Encode for MemSpace {
    fn encode(&self, w: &mut Writer<'_>) {
        match self {
            MemSpace::Device(p) => {
                0u8.encode(w);
                p.encode(w);
            }
            MemSpace::Staging(o) => {
                1u8.encode(w);
                o.encode(w);
            }
            MemSpace::Region { id, offset } => {
                2u8.encode(w);
                id.encode(w);
                offset.encode(w);
            }
            MemSpace::Array(h) => {
                3u8.encode(w);
                h.encode(w);
            }
        }
    }
}
impl Decode for MemSpace {
    const MIN_LEN: usize = 9;
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::decode(r)? {
            0 => Ok(MemSpace::Device(Decode::decode(r)?)),
            1 => Ok(MemSpace::Staging(Decode::decode(r)?)),
            2 => Ok(MemSpace::Region { id: Decode::decode(r)?, offset: Decode::decode(r)? }),
            3 => Ok(MemSpace::Array(Decode::decode(r)?)),
            tag => Err(DecodeError::InvalidTag { what: "memory space", tag: tag.into() }),
        }
    }
}

wire_struct! {
    /// One end of a 2D copy (CUDA_MEMCPY2D's src*/dst* fields).
    #[derive(Copy)]
    pub struct Copy2DEnd { pub space: MemSpace, pub x_bytes: u64, pub y: u64, pub pitch: u64 }
}

wire_struct! {
    /// A 2D strided copy of `height` rows of `width_bytes`.
    #[derive(Copy)]
    pub struct Copy2D { pub src: Copy2DEnd, pub dst: Copy2DEnd, pub width_bytes: u64, pub height: u64 }
}

wire_struct! {
    /// One end of a 3D copy (CUDA_MEMCPY3D's src*/dst* fields; `height` is the rows per slice).
    #[derive(Copy)]
    pub struct Copy3DEnd {
        pub space: MemSpace, pub x_bytes: u64, pub y: u64, pub z: u64, pub pitch: u64, pub height: u64,
    }
}

wire_struct! {
    /// A 3D strided copy of `depth` slices of `height` rows of `width_bytes`.
    #[derive(Copy)]
    pub struct Copy3D {
        pub src: Copy3DEnd, pub dst: Copy3DEnd, pub width_bytes: u64, pub height: u64, pub depth: u64,
    }
}

/// A memset value, which also fixes the element size (1, 2 or 4 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemsetValue {
    U8(u8),
    U16(u16),
    U32(u32),
}

impl MemsetValue {
    /// The element size in bytes.
    pub fn element_size(self) -> u8 {
        match self {
            MemsetValue::U8(_) => 1,
            MemsetValue::U16(_) => 2,
            MemsetValue::U32(_) => 4,
        }
    }
}

impl Encode for MemsetValue {
    /// The element size (1, 2, 4) as a tag byte, then the value in that many bytes.
    fn encode(&self, w: &mut Writer<'_>) {
        self.element_size().encode(w);
        match *self {
            MemsetValue::U8(v) => v.encode(w),
            MemsetValue::U16(v) => v.encode(w),
            MemsetValue::U32(v) => v.encode(w),
        }
    }
}
impl Decode for MemsetValue {
    const MIN_LEN: usize = 2;
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::decode(r)? {
            1 => Ok(MemsetValue::U8(Decode::decode(r)?)),
            2 => Ok(MemsetValue::U16(Decode::decode(r)?)),
            4 => Ok(MemsetValue::U32(Decode::decode(r)?)),
            tag => Err(DecodeError::InvalidTag { what: "memset element size", tag: tag.into() }),
        }
    }
}

wire_struct! {
    /// A memset of `height` rows of `width` elements, rows `pitch` bytes apart (`pitch` is
    /// ignored when `height` is 1).
    #[derive(Copy)]
    pub struct Memset { pub dst: DevicePtr, pub value: MemsetValue, pub width: u64, pub height: u64, pub pitch: u64 }
}

wire_struct! {
    /// One device attribute (a `CUdevice_attribute` number and its value), so the client
    /// answers `cuDeviceGetAttribute` locally.
    #[derive(Copy)]
    pub struct DeviceAttribute { pub attribute: u32, pub value: i64 }
    max_count = MAX_DEVICE_ATTRIBUTES;
}

wire_struct! {
    /// A device as the tenant sees it.
    pub struct DeviceInfo {
        /// The device ordinal in this session.
        pub ordinal: u32,
        pub name: String,
        pub uuid: [u8; 16],
        /// The tenant's memory quota on this device (what `cuDeviceTotalMem` reports).
        pub total_memory: u64,
        pub compute_capability: [u32; 2],
        pub attributes: Vec<DeviceAttribute>,
        /// Whose device it is: [`VENDOR_CUDA`] or [`VENDOR_ASCEND`]. One list holds every
        /// vendor's devices (GPUs first, then NPUs) and one ordinal space; each front-end
        /// presents its own vendor's devices, numbered from 0 in this order.
        pub vendor: u8,
    }
    max_count = MAX_DEVICES;
}

/// [`DeviceInfo::vendor`] of an NVIDIA GPU (the CUDA driver API's devices).
pub const VENDOR_CUDA: u8 = 0;
/// [`DeviceInfo::vendor`] of a Huawei Ascend NPU (AscendCL's devices).
pub const VENDOR_ASCEND: u8 = 1;

wire_struct! {
    /// Where one kernel parameter lives in the packed parameter bytes.
    #[derive(Copy)]
    pub struct ParamInfo { pub offset: u32, pub size: u32 }
    max_count = MAX_KERNEL_PARAMS;
}

wire_struct! {
    /// A kernel of a loaded module, with its parameter layout.
    pub struct FunctionInfo { pub func: FuncId, pub name: String, pub params: Vec<ParamInfo> }
    max_count = MAX_MODULE_FUNCTIONS;
}

/// Cap on the mapped runs one reply lists (a reservation of 128 GiB in 2 MiB mappings).
pub const MAX_MEM_RUNS: usize = 65_536;

wire_struct! {
    /// `cuMemSetAccess`'s descriptor: `flags` (a `CUmemAccess_flags`) for device `device`.
    #[derive(Copy)]
    pub struct MemAccess { pub device: u32, pub flags: u32 }
    max_count = MAX_DEVICES;
}

wire_struct! {
    /// A maximal run of mapped memory the reservation's device may read and write: what
    /// copies, memsets and kernels may address, like an allocation.
    #[derive(Copy)]
    pub struct MemRun { pub base: DevicePtr, pub size: u64 }
    max_count = MAX_MEM_RUNS;
}
