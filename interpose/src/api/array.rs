//! CUDA arrays, mipmapped arrays and texture objects through the pool.
//!
//! An array is kept here, in linear device memory of its own: one `MemAlloc` (so the
//! tenant's ledger counts it, the quota refuses it with OUT_OF_MEMORY, and the session's end
//! frees it) holding its rows `pitch` bytes apart (`pitch`: the row rounded up to the
//! texture pitch alignment) from a base aligned for textures. Copies to and from an array
//! are pitched copies of that memory ([`lower2d`], [`lower3d`]), and a texture object over a
//! 2D array is the daemon's texture object over that pitched memory: its 64-bit handle is
//! the backend's, which kernels receive unchanged. A mipmapped array is its levels, each
//! such an array.
//!
//! Not served, each with a log line: texture objects over 1D, 3D, layered and mipmapped
//! arrays (their sampling has no pitched-memory equivalent), resource views, and surface
//! objects (CUDA defines them over arrays only): CUDA_ERROR_NOT_SUPPORTED.

use super::DefaultStream;
use crate::client;
use crate::util::{R, log};
use gpupool_protocol::Request;
use gpupool_protocol::ops::{TexResource, TexSampler, answer};
use gpupool_shim::cuda::{
    CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_CUBEMAP, CUDA_ARRAY3D_DESCRIPTOR, CUDA_ARRAY3D_LAYERED,
    CUDA_ARRAY3D_SURFACE_LDST, CUDA_ARRAY3D_TEXTURE_GATHER, CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUDA_RESOURCE_DESC,
    CUDA_RESOURCE_VIEW_DESC, CUDA_TEXTURE_DESC, CUarray, CUmemorytype, CUmipmappedArray, CUresourcetype, CUresult,
    CUsurfObject, CUtexObject,
};
use std::collections::HashMap;
use std::os::raw::{c_uint, c_void};
use std::sync::Mutex;

const INVALID: CUresult = CUresult::CUDA_ERROR_INVALID_VALUE;
const NOT_SUPPORTED: CUresult = CUresult::CUDA_ERROR_NOT_SUPPORTED;

/// Array and mipmapped-array handles: opaque values in ranges of their own.
const ARRAY_BASE: u64 = 0x7c00_0000_0000;
const MIPMAP_BASE: u64 = 0x7c80_0000_0000;
/// `CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT` and `_TEXTURE_PITCH_ALIGNMENT` of every GPU the
/// pool serves (512 and 32 since Kepler).
const TEXTURE_ALIGNMENT: u64 = 512;
const PITCH_ALIGNMENT: u64 = 32;

#[derive(Clone, Copy)]
struct Array {
    /// The client context it was created in.
    ctx: u64,
    desc: CUDA_ARRAY3D_DESCRIPTOR,
    /// The allocation, and the aligned base of the texels inside it.
    alloc: u64,
    base: u64,
    pitch: u64,
    rows: u64,
    slices: u64,
    mip_level: bool,
}

impl Array {
    fn row_bytes(&self) -> u64 {
        self.desc.Width as u64 * elem_bytes(&self.desc)
    }

    /// Whether a box of `w` bytes x `h` rows x `d` slices at (`x` bytes, `y`, `z`) lies
    /// inside; logs why not.
    fn check_box(&self, [x, y, z]: [u64; 3], [w, h, d]: [u64; 3], role: &str) -> R<()> {
        let inside = |o: u64, n: u64, lim: u64| o.checked_add(n).is_some_and(|end| end <= lim);
        if inside(x, w, self.row_bytes()) && inside(y, h, self.rows) && inside(z, d, self.slices) {
            return Ok(());
        }
        log(&format!(
            "CUDA_ERROR_INVALID_VALUE: {role}: {w} bytes x {h} rows x {d} slices at ({x}, {y}, {z}) run outside the \
             array ({} bytes x {} rows x {} slices)",
            self.row_bytes(),
            self.rows,
            self.slices
        ));
        Err(INVALID)
    }
}

/// A texture object's descriptors, as the application gave them.
#[derive(Clone, Copy)]
struct Texture {
    res: CUDA_RESOURCE_DESC,
    tex: CUDA_TEXTURE_DESC,
}

#[derive(Default)]
struct State {
    arrays: HashMap<u64, Array>,
    mipmaps: HashMap<u64, (CUDA_ARRAY3D_DESCRIPTOR, Vec<u64>)>,
    textures: HashMap<u64, Texture>,
    next: u64,
}

// SAFETY: the descriptors' pointer-typed fields (`CUarray`, `CUmipmappedArray` in the
// resource union) are handle values, compared and handed back, never dereferenced.
unsafe impl Send for State {}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn state<T>(f: impl FnOnce(&mut State) -> R<T>) -> R<T> {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(State::default))
}

fn refuse<T>(code: CUresult, why: &str) -> R<T> {
    log(&format!("{}: {why}", gpupool_abi::errors::name(code)));
    Err(code)
}

fn channel_bytes(f: gpupool_shim::cuda::CUarray_format) -> Option<u64> {
    Some(match f.0 {
        0x01 | 0x08 => 1,
        0x02 | 0x09 | 0x10 => 2,
        0x03 | 0x0a | 0x20 => 4,
        _ => return None,
    })
}

fn elem_bytes(d: &CUDA_ARRAY3D_DESCRIPTOR) -> u64 {
    channel_bytes(d.Format).unwrap_or(0) * d.NumChannels as u64
}

/// Checks a descriptor as `cuArray3DCreate` documents (limits of the GPUs served: 1D
/// 131072, 2D 131072 x 65536, 3D 16384 cubed, layered 32768 squared x 2048 layers).
fn check_desc(d: &CUDA_ARRAY3D_DESCRIPTOR) -> R<()> {
    if channel_bytes(d.Format).is_none() {
        return refuse(INVALID, &format!("array format {:#x} is unknown", d.Format.0));
    }
    if !matches!(d.NumChannels, 1 | 2 | 4) {
        return refuse(INVALID, &format!("NumChannels {} (must be 1, 2 or 4)", d.NumChannels));
    }
    let known = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_TEXTURE_GATHER;
    if d.Flags & CUDA_ARRAY3D_CUBEMAP != 0 || d.Flags & !known != 0 {
        return refuse(NOT_SUPPORTED, &format!("array flags {:#x}: cubemaps and unknown flags", d.Flags));
    }
    let (w, h, z) = (d.Width, d.Height, d.Depth);
    let layered = d.Flags & CUDA_ARRAY3D_LAYERED != 0;
    let ok = match (h, z) {
        _ if w == 0 => false,
        (0, 0) => w <= 131072,
        (0, _) => layered && w <= 131072 && z <= 2048,
        (_, 0) => w <= 131072 && h <= 65536,
        _ if layered => w <= 32768 && h <= 32768 && z <= 2048,
        _ => w <= 16384 && h <= 16384 && z <= 16384,
    };
    if !ok {
        return refuse(INVALID, &format!("array extent {w} x {h} x {z} (layered: {layered}) is outside the limits"));
    }
    Ok(())
}

/// Allocates an array's memory in the current context and registers it.
fn make(desc: CUDA_ARRAY3D_DESCRIPTOR, mip_level: bool) -> R<u64> {
    check_desc(&desc)?;
    let row = desc.Width as u64 * elem_bytes(&desc);
    let pitch = row.next_multiple_of(PITCH_ALIGNMENT);
    let (rows, slices) = ((desc.Height as u64).max(1), (desc.Depth as u64).max(1));
    let bytes = pitch * rows * slices + TEXTURE_ALIGNMENT - 1;
    let ctx = client::stack_top().ok_or(CUresult::CUDA_ERROR_INVALID_CONTEXT)?;
    // The daemon's quota answers this one: OUT_OF_MEMORY past it.
    let alloc = super::memory::alloc(bytes as usize)?;
    let base = alloc.next_multiple_of(TEXTURE_ALIGNMENT);
    let a = Array { ctx, desc, alloc, base, pitch, rows, slices, mip_level };
    state(|s| {
        s.next += 1;
        let h = ARRAY_BASE + s.next * 16;
        s.arrays.insert(h, a);
        Ok(h)
    })
}

fn array(h: CUarray) -> R<Array> {
    match state(|s| Ok(s.arrays.get(&(h as u64)).copied()))? {
        Some(a) => Ok(a),
        None => refuse(CUresult::CUDA_ERROR_INVALID_HANDLE, &format!("{:#x} is not a live CUDA array", h as u64)),
    }
}

/// Frees the memory of arrays already taken out of the registry.
fn release(arrays: &[Array]) -> R<()> {
    let mut r = Ok(());
    for a in arrays {
        if let Err(e) = super::memory::free(a.alloc) {
            r = Err(e);
        }
    }
    r
}

/// Refuses to destroy an array from another context than its own, whose memory the current
/// context could not free.
fn require_own_context(ctx: u64) -> R<()> {
    if client::stack_top() == Some(ctx) {
        Ok(())
    } else {
        refuse(CUresult::CUDA_ERROR_INVALID_CONTEXT, "an array is destroyed in the context that created it")
    }
}

pub(super) fn create(d: CUDA_ARRAY_DESCRIPTOR) -> R<CUarray> {
    let d3 = CUDA_ARRAY3D_DESCRIPTOR {
        Width: d.Width,
        Height: d.Height,
        Depth: 0,
        Format: d.Format,
        NumChannels: d.NumChannels,
        Flags: 0,
    };
    make(d3, false).map(|h| h as CUarray)
}

pub(super) fn create_3d(d: CUDA_ARRAY3D_DESCRIPTOR) -> R<CUarray> {
    make(d, false).map(|h| h as CUarray)
}

pub(super) fn descriptor(h: CUarray) -> R<CUDA_ARRAY_DESCRIPTOR> {
    let d = array(h)?.desc;
    Ok(CUDA_ARRAY_DESCRIPTOR { Width: d.Width, Height: d.Height, Format: d.Format, NumChannels: d.NumChannels })
}

pub(super) fn descriptor_3d(h: CUarray) -> R<CUDA_ARRAY3D_DESCRIPTOR> {
    Ok(array(h)?.desc)
}

pub(super) fn destroy(h: CUarray) -> R<()> {
    let a = array(h)?;
    if a.mip_level {
        return refuse(INVALID, "a level of a mipmapped array goes with cuMipmappedArrayDestroy");
    }
    require_own_context(a.ctx)?;
    state(|s| Ok(s.arrays.remove(&(h as u64))))?;
    release(&[a])
}

/// How many levels a full mipmap chain of the descriptor has.
fn max_levels(d: &CUDA_ARRAY3D_DESCRIPTOR) -> u32 {
    let depth = if d.Flags & CUDA_ARRAY3D_LAYERED != 0 { 0 } else { d.Depth };
    let biggest = d.Width.max(d.Height).max(depth).max(1) as u64;
    64 - biggest.leading_zeros()
}

pub(super) fn mipmap_create(d: CUDA_ARRAY3D_DESCRIPTOR, levels: c_uint) -> R<CUmipmappedArray> {
    check_desc(&d)?;
    let most = max_levels(&d);
    if levels == 0 || levels > most {
        return refuse(INVALID, &format!("{levels} mipmap levels (this extent has 1..={most})"));
    }
    let layered = d.Flags & CUDA_ARRAY3D_LAYERED != 0;
    let half = |v: usize, l: u32| if v == 0 { 0 } else { (v >> l).max(1) };
    let mut made = Vec::new();
    for l in 0..levels {
        let lv = CUDA_ARRAY3D_DESCRIPTOR {
            Width: half(d.Width, l),
            Height: half(d.Height, l),
            Depth: if layered { d.Depth } else { half(d.Depth, l) },
            ..d
        };
        match make(lv, true) {
            Ok(h) => made.push(h),
            Err(e) => {
                let gone: Vec<Array> = state(|s| Ok(made.iter().filter_map(|h| s.arrays.remove(h)).collect()))?;
                let _ = release(&gone);
                return Err(e);
            }
        }
    }
    state(|s| {
        s.next += 1;
        let h = MIPMAP_BASE + s.next * 16;
        s.mipmaps.insert(h, (d, made));
        Ok(h as CUmipmappedArray)
    })
}

pub(super) fn mipmap_level(h: CUmipmappedArray, level: c_uint) -> R<CUarray> {
    let levels = state(|s| Ok(s.mipmaps.get(&(h as u64)).map(|m| m.1.clone())))?;
    let Some(levels) = levels else {
        return refuse(CUresult::CUDA_ERROR_INVALID_HANDLE, &format!("{:#x} is not a mipmapped array", h as u64));
    };
    match levels.get(level as usize) {
        Some(&l) => Ok(l as CUarray),
        None => refuse(INVALID, &format!("level {level} of a mipmapped array of {} levels", levels.len())),
    }
}

pub(super) fn mipmap_destroy(h: CUmipmappedArray) -> R<()> {
    let levels = state(|s| Ok(s.mipmaps.get(&(h as u64)).map(|m| m.1.clone())))?;
    let Some(levels) = levels else {
        return refuse(CUresult::CUDA_ERROR_INVALID_HANDLE, &format!("{:#x} is not a mipmapped array", h as u64));
    };
    if let Some(first) = levels.first() {
        require_own_context(array(*first as CUarray)?.ctx)?;
    }
    let gone: Vec<Array> = state(|s| {
        s.mipmaps.remove(&(h as u64));
        Ok(levels.iter().filter_map(|l| s.arrays.remove(l)).collect())
    })?;
    release(&gone)
}

/// A 2D copy with array ends turned into the pitched device memory that holds them.
pub(super) fn lower2d(mut p: CUDA_MEMCPY2D) -> R<CUDA_MEMCPY2D> {
    let (w, h) = (p.WidthInBytes as u64, p.Height as u64);
    if p.srcMemoryType == CUmemorytype::CU_MEMORYTYPE_ARRAY {
        let a = array(p.srcArray)?;
        a.check_box([p.srcXInBytes as u64, p.srcY as u64, 0], [w, h, 1], "source")?;
        (p.srcMemoryType, p.srcDevice, p.srcPitch) = (CUmemorytype::CU_MEMORYTYPE_DEVICE, a.base, a.pitch as usize);
    }
    if p.dstMemoryType == CUmemorytype::CU_MEMORYTYPE_ARRAY {
        let a = array(p.dstArray)?;
        a.check_box([p.dstXInBytes as u64, p.dstY as u64, 0], [w, h, 1], "destination")?;
        (p.dstMemoryType, p.dstDevice, p.dstPitch) = (CUmemorytype::CU_MEMORYTYPE_DEVICE, a.base, a.pitch as usize);
    }
    Ok(p)
}

/// As [`lower2d`], for 3D copies (an array's slice height is its row count).
pub(super) fn lower3d(mut p: CUDA_MEMCPY3D) -> R<CUDA_MEMCPY3D> {
    let dims = [p.WidthInBytes as u64, p.Height as u64, p.Depth as u64];
    if p.srcMemoryType == CUmemorytype::CU_MEMORYTYPE_ARRAY {
        let a = array(p.srcArray)?;
        a.check_box([p.srcXInBytes as u64, p.srcY as u64, p.srcZ as u64], dims, "source")?;
        (p.srcMemoryType, p.srcDevice) = (CUmemorytype::CU_MEMORYTYPE_DEVICE, a.base);
        (p.srcPitch, p.srcHeight) = (a.pitch as usize, a.rows as usize);
    }
    if p.dstMemoryType == CUmemorytype::CU_MEMORYTYPE_ARRAY {
        let a = array(p.dstArray)?;
        a.check_box([p.dstXInBytes as u64, p.dstY as u64, p.dstZ as u64], dims, "destination")?;
        (p.dstMemoryType, p.dstDevice) = (CUmemorytype::CU_MEMORYTYPE_DEVICE, a.base);
        (p.dstPitch, p.dstHeight) = (a.pitch as usize, a.rows as usize);
    }
    Ok(p)
}

/// `cuMemcpyHtoA` / `cuMemcpyAtoH`: `n` bytes at byte `offset` of the array's rows taken
/// one after another: a partial first row, whole rows, a partial last row.
fn linear(host: u64, h: CUarray, offset: usize, n: usize, to_array: bool, ds: DefaultStream) -> R<()> {
    let a = array(h)?;
    let (row, total) = (a.row_bytes(), a.row_bytes() * a.rows * a.slices);
    let (mut off, mut left, mut host) = (offset as u64, n as u64, host);
    if off.checked_add(left).is_none_or(|end| end > total) {
        return refuse(INVALID, &format!("{n} bytes at offset {offset} run past the array's {total} bytes"));
    }
    while left > 0 {
        let (r, x) = (off / row, off % row);
        let (width, height) = if x == 0 && left >= row { (row, left / row) } else { ((row - x).min(left), 1) };
        let dev = a.base + r * a.pitch + x;
        let mut p = CUDA_MEMCPY2D { WidthInBytes: width as usize, Height: height as usize, ..Default::default() };
        if to_array {
            (p.srcMemoryType, p.srcHost, p.srcPitch) =
                (CUmemorytype::CU_MEMORYTYPE_HOST, host as *const c_void, row as usize);
            (p.dstMemoryType, p.dstDevice, p.dstPitch) = (CUmemorytype::CU_MEMORYTYPE_DEVICE, dev, a.pitch as usize);
        } else {
            (p.srcMemoryType, p.srcDevice, p.srcPitch) = (CUmemorytype::CU_MEMORYTYPE_DEVICE, dev, a.pitch as usize);
            (p.dstMemoryType, p.dstHost, p.dstPitch) =
                (CUmemorytype::CU_MEMORYTYPE_HOST, host as *mut c_void, row as usize);
        }
        super::copy::memcpy2d(p, ds)?;
        let moved = width * height;
        (off, left, host) = (off + moved, left - moved, host + moved);
    }
    Ok(())
}

pub(super) fn htoa(dst: CUarray, offset: usize, src: *const c_void, n: usize, ds: DefaultStream) -> R<()> {
    if src.is_null() {
        return refuse(INVALID, "NULL source");
    }
    linear(src as u64, dst, offset, n, true, ds)
}

pub(super) fn atoh(dst: *mut c_void, src: CUarray, offset: usize, n: usize, ds: DefaultStream) -> R<()> {
    if dst.is_null() {
        return refuse(INVALID, "NULL destination");
    }
    linear(dst as u64, src, offset, n, false, ds)
}

/// The memory a resource descriptor names, as the daemon takes it.
fn resource(r: &CUDA_RESOURCE_DESC) -> R<TexResource> {
    if r.flags != 0 {
        return refuse(INVALID, &format!("resource flags {:#x} (must be 0)", r.flags));
    }
    let elem = |f, ch: u32| match channel_bytes(f) {
        Some(b) if matches!(ch, 1 | 2 | 4) => Ok(b * ch as u64),
        _ => refuse(INVALID, &format!("resource format {:#x} with {ch} channels", f.0)),
    };
    // SAFETY (the union reads below): `resType` says which member the application filled;
    // every member is plain data, so any bytes are a valid value of it.
    match r.resType {
        CUresourcetype::CU_RESOURCE_TYPE_ARRAY => {
            let a = array(unsafe { r.res.array }.hArray)?;
            let d = a.desc;
            if d.Height == 0 || d.Depth != 0 || d.Flags & CUDA_ARRAY3D_LAYERED != 0 {
                return refuse(
                    NOT_SUPPORTED,
                    "texture objects over 1D, 3D and layered arrays are not served by the pool",
                );
            }
            let (format, channels) = (d.Format.0, d.NumChannels);
            Ok(TexResource {
                ptr: gpupool_protocol::DevicePtr(a.base),
                format,
                channels,
                width: d.Width as u64,
                height: d.Height as u64,
                pitch: a.pitch,
            })
        }
        CUresourcetype::CU_RESOURCE_TYPE_MIPMAPPED_ARRAY => {
            refuse(NOT_SUPPORTED, "texture objects over mipmapped arrays are not served by the pool")
        }
        CUresourcetype::CU_RESOURCE_TYPE_LINEAR => {
            let l = unsafe { r.res.linear };
            let e = elem(l.format, l.numChannels)?;
            if l.sizeInBytes == 0 || !(l.sizeInBytes as u64).is_multiple_of(e) {
                return refuse(INVALID, &format!("linear resource of {} bytes", l.sizeInBytes));
            }
            let width = l.sizeInBytes as u64 / e;
            let ptr = gpupool_protocol::DevicePtr(l.devPtr);
            Ok(TexResource { ptr, format: l.format.0, channels: l.numChannels, width, height: 0, pitch: 0 })
        }
        CUresourcetype::CU_RESOURCE_TYPE_PITCH2D => {
            let p = unsafe { r.res.pitch2D };
            elem(p.format, p.numChannels)?;
            if p.height == 0 {
                return refuse(INVALID, "pitch2D resource of height 0");
            }
            let ptr = gpupool_protocol::DevicePtr(p.devPtr);
            let (width, height, pitch) = (p.width as u64, p.height as u64, p.pitchInBytes as u64);
            Ok(TexResource { ptr, format: p.format.0, channels: p.numChannels, width, height, pitch })
        }
        other => refuse(INVALID, &format!("resource type {}", other.0)),
    }
}

pub(super) fn tex_create(
    res: CUDA_RESOURCE_DESC,
    tex: CUDA_TEXTURE_DESC,
    view: *const CUDA_RESOURCE_VIEW_DESC,
) -> R<CUtexObject> {
    if !view.is_null() {
        return refuse(NOT_SUPPORTED, "resource views are not served by the pool");
    }
    let resource = resource(&res)?;
    let sampler = TexSampler {
        address: tex.addressMode.map(|m| m.0),
        filter: tex.filterMode.0,
        flags: tex.flags,
        border: tex.borderColor.map(f32::to_bits),
    };
    let handle = client::call(|c| {
        let (_, ctx, _) = c.current()?;
        let answer::TexObject { handle } = c.live()?.ask(Request::TexObjectCreate { ctx, resource, sampler })?;
        Ok(handle)
    })?;
    state(|s| {
        s.textures.insert(handle, Texture { res, tex });
        Ok(handle)
    })
}

fn texture(h: CUtexObject) -> R<Texture> {
    match state(|s| Ok(s.textures.get(&h).copied()))? {
        Some(t) => Ok(t),
        None => refuse(INVALID, &format!("{h:#x} is not a live texture object")),
    }
}

pub(super) fn tex_destroy(h: CUtexObject) -> R<()> {
    texture(h)?;
    client::call(|c| c.live()?.call_ok(Request::TexObjectDestroy { handle: h }))?;
    state(|s| Ok(s.textures.remove(&h))).map(|_| ())
}

pub(super) fn tex_resource(h: CUtexObject) -> R<CUDA_RESOURCE_DESC> {
    texture(h).map(|t| t.res)
}

pub(super) fn tex_descriptor(h: CUtexObject) -> R<CUDA_TEXTURE_DESC> {
    texture(h).map(|t| t.tex)
}

fn no_surfaces<T>() -> R<T> {
    refuse(NOT_SUPPORTED, "surface objects need CUDA arrays in the backend; the pool keeps arrays in linear memory")
}

pub(super) fn surf_create(_res: CUDA_RESOURCE_DESC) -> R<CUsurfObject> {
    no_surfaces()
}

pub(super) fn surf_destroy(_h: CUsurfObject) -> R<()> {
    no_surfaces()
}

pub(super) fn surf_resource(_h: CUsurfObject) -> R<CUDA_RESOURCE_DESC> {
    no_surfaces()
}

super::export::exports! { CUresult;
    cuArrayCreate_v2(p: out CUarray, d: read CUDA_ARRAY_DESCRIPTOR) = create;
    cuArray3DCreate_v2(p: out CUarray, d: read CUDA_ARRAY3D_DESCRIPTOR) = create_3d;
    cuArrayGetDescriptor_v2(d: out CUDA_ARRAY_DESCRIPTOR, h: val CUarray) = descriptor;
    cuArray3DGetDescriptor_v2(d: out CUDA_ARRAY3D_DESCRIPTOR, h: val CUarray) = descriptor_3d;
    cuArrayDestroy(h: val CUarray) = destroy;
    cuMipmappedArrayCreate(p: out CUmipmappedArray, d: read CUDA_ARRAY3D_DESCRIPTOR, levels: val c_uint)
        = mipmap_create;
    cuMipmappedArrayGetLevel(p: out CUarray, h: val CUmipmappedArray, level: val c_uint) = mipmap_level;
    cuMipmappedArrayDestroy(h: val CUmipmappedArray) = mipmap_destroy;
    cuMemcpyHtoA_v2 | cuMemcpyHtoA_v2_ptds (dst: val CUarray, offset: val usize, src: val *const c_void,
        n: val usize) = htoa;
    cuMemcpyAtoH_v2 | cuMemcpyAtoH_v2_ptds (dst: val *mut c_void, src: val CUarray, offset: val usize,
        n: val usize) = atoh;
    cuTexObjectCreate(p: out CUtexObject, res: read CUDA_RESOURCE_DESC, tex: read CUDA_TEXTURE_DESC,
        view: val *const CUDA_RESOURCE_VIEW_DESC) = tex_create;
    cuTexObjectDestroy(h: val CUtexObject) = tex_destroy;
    cuTexObjectGetResourceDesc(d: out CUDA_RESOURCE_DESC, h: val CUtexObject) = tex_resource;
    cuTexObjectGetTextureDesc(d: out CUDA_TEXTURE_DESC, h: val CUtexObject) = tex_descriptor;
    cuSurfObjectCreate(p: out CUsurfObject, res: read CUDA_RESOURCE_DESC) = surf_create;
    cuSurfObjectDestroy(h: val CUsurfObject) = surf_destroy;
    cuSurfObjectGetResourceDesc(d: out CUDA_RESOURCE_DESC, h: val CUsurfObject) = surf_resource;
}
