//! CUDA arrays, mipmapped arrays, texture and surface objects through the pool.
//!
//! Every array is the daemon's backend array (`ArrayCreate`, `MipmappedArrayCreate`, see
//! pool-daemon/src/daemon/array.rs): the daemon counts it in the tenant's ledger before the
//! backend allocates it (past the quota: CUDA_ERROR_OUT_OF_MEMORY), destroys it with its
//! context and at the session's end, and answers a handle that names it. This library keeps
//! each handle's descriptor (the descriptor getters, the runtime's element sizes, and the box
//! checks that give a log line before a copy is sent). Copies with array ends travel as 3D
//! copies whose array end the daemon runs ([`super::copy3d`]); the 1D ones (`cuMemcpyHtoA`,
//! `AtoH`, `AtoD`, `DtoA`, `AtoA` and the async forms) are cut into runs of whole rows and
//! partial rows of such copies ([`linear`]). Texture objects over arrays and mipmapped arrays
//! (with a resource view if given) and surface objects are the backend's, made by the daemon:
//! their 64-bit handles go into kernel parameters unchanged. A handle that is not a live
//! array of this process is CUDA_ERROR_INVALID_HANDLE here, and one of another session is the
//! same at the daemon.

use super::DefaultStream;
use crate::client;
use crate::util::{R, log};
use gpupool_protocol::Request;
use gpupool_protocol::ops::{ArrayDesc, ResourceView, TexMipmap, TexResource, TexSampler, answer};
use gpupool_shim::cuda::{
    CUDA_ARRAY_DESCRIPTOR, CUDA_ARRAY3D_CUBEMAP, CUDA_ARRAY3D_DESCRIPTOR, CUDA_ARRAY3D_LAYERED,
    CUDA_ARRAY3D_SURFACE_LDST, CUDA_ARRAY3D_TEXTURE_GATHER, CUDA_MEMCPY3D, CUDA_RESOURCE_DESC, CUDA_RESOURCE_VIEW_DESC,
    CUDA_TEXTURE_DESC, CUarray, CUdeviceptr, CUmemorytype, CUmipmappedArray, CUresourcetype, CUresult, CUstream,
    CUsurfObject, CUtexObject,
};
use std::collections::HashMap;
use std::os::raw::{c_uint, c_void};
use std::sync::Mutex;

const INVALID: CUresult = CUresult::CUDA_ERROR_INVALID_VALUE;
const INVALID_HANDLE: CUresult = CUresult::CUDA_ERROR_INVALID_HANDLE;

#[derive(Clone, Copy)]
struct Array {
    /// The client context it was made through (the daemon destroys it with that context).
    ctx: u64,
    desc: CUDA_ARRAY3D_DESCRIPTOR,
    /// The mipmapped array it is a level of.
    level_of: Option<u64>,
}

impl Array {
    fn row_bytes(&self) -> u64 {
        self.desc.Width as u64 * elem_bytes(&self.desc)
    }
    fn rows(&self) -> u64 {
        (self.desc.Height as u64).max(1)
    }
    fn slices(&self) -> u64 {
        (self.desc.Depth as u64).max(1)
    }

    /// Whether a box of `w` bytes x `h` rows x `d` slices at (`x` bytes, `y`, `z`) lies
    /// inside; logs why not.
    fn check_box(&self, [x, y, z]: [u64; 3], [w, h, d]: [u64; 3], role: &str) -> R<()> {
        let inside = |o: u64, n: u64, lim: u64| o.checked_add(n).is_some_and(|end| end <= lim);
        if inside(x, w, self.row_bytes()) && inside(y, h, self.rows()) && inside(z, d, self.slices()) {
            return Ok(());
        }
        log(&format!(
            "CUDA_ERROR_INVALID_VALUE: {role}: {w} bytes x {h} rows x {d} slices at ({x}, {y}, {z}) run outside the \
             array ({} bytes x {} rows x {} slices)",
            self.row_bytes(),
            self.rows(),
            self.slices()
        ));
        Err(INVALID)
    }
}

/// A texture object's descriptors, as the application gave them.
#[derive(Clone, Copy)]
struct Texture {
    ctx: u64,
    res: CUDA_RESOURCE_DESC,
    tex: CUDA_TEXTURE_DESC,
    view: Option<CUDA_RESOURCE_VIEW_DESC>,
}

#[derive(Default)]
struct State {
    arrays: HashMap<u64, Array>,
    /// Mipmapped array → its context, descriptor and the level handles handed out.
    mipmaps: HashMap<u64, (u64, CUDA_ARRAY3D_DESCRIPTOR, Vec<u64>)>,
    textures: HashMap<u64, Texture>,
    surfaces: HashMap<u64, (u64, CUDA_RESOURCE_DESC)>,
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
    // Cubemaps go to the backend, which decides; sparse and deferred-mapping arrays (no
    // memory until mapped) and the graphics flags are not forwarded.
    let known = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_TEXTURE_GATHER | CUDA_ARRAY3D_CUBEMAP;
    if d.Flags & !known != 0 {
        return refuse(
            CUresult::CUDA_ERROR_NOT_SUPPORTED,
            &format!("array flags {:#x}: only layered, cubemap, surface and gather arrays are forwarded", d.Flags),
        );
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

fn wire_desc(d: &CUDA_ARRAY3D_DESCRIPTOR) -> ArrayDesc {
    ArrayDesc {
        width: d.Width as u64,
        height: d.Height as u64,
        depth: d.Depth as u64,
        format: d.Format.0,
        channels: d.NumChannels,
        flags: d.Flags,
    }
}

/// Makes a backend array in the current context: the daemon's quota answers (OUT_OF_MEMORY).
fn make(desc: CUDA_ARRAY3D_DESCRIPTOR) -> R<u64> {
    check_desc(&desc)?;
    let (handle, ctx) = client::call(|c| {
        let (h, ctx, _) = c.current()?;
        let answer::Array { handle, .. } = c.live()?.ask(Request::ArrayCreate { ctx, desc: wire_desc(&desc) })?;
        Ok((handle, h))
    })?;
    state(|s| {
        s.arrays.insert(handle, Array { ctx, desc, level_of: None });
        Ok(handle)
    })
}

fn array(h: CUarray) -> R<Array> {
    match state(|s| Ok(s.arrays.get(&(h as u64)).copied()))? {
        Some(a) => Ok(a),
        None => refuse(INVALID_HANDLE, &format!("{:#x} is not a live CUDA array", h as u64)),
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
    make(d3).map(|h| h as CUarray)
}

pub(super) fn create_3d(d: CUDA_ARRAY3D_DESCRIPTOR) -> R<CUarray> {
    make(d).map(|h| h as CUarray)
}

pub(super) fn descriptor(h: CUarray) -> R<CUDA_ARRAY_DESCRIPTOR> {
    let d = array(h)?.desc;
    Ok(CUDA_ARRAY_DESCRIPTOR { Width: d.Width, Height: d.Height, Format: d.Format, NumChannels: d.NumChannels })
}

pub(super) fn descriptor_3d(h: CUarray) -> R<CUDA_ARRAY3D_DESCRIPTOR> {
    Ok(array(h)?.desc)
}

pub(super) fn destroy(h: CUarray) -> R<()> {
    if array(h)?.level_of.is_some() {
        return refuse(INVALID, "a level of a mipmapped array goes with cuMipmappedArrayDestroy");
    }
    client::call(|c| c.live()?.call_ok(Request::ArrayDestroy { array: h as u64 }))?;
    state(|s| Ok(s.arrays.remove(&(h as u64)))).map(|_| ())
}

/// How many levels a full mipmap chain of the descriptor has.
fn max_levels(d: &CUDA_ARRAY3D_DESCRIPTOR) -> u32 {
    let depth = if d.Flags & CUDA_ARRAY3D_LAYERED != 0 { 0 } else { d.Depth };
    let biggest = d.Width.max(d.Height).max(depth).max(1) as u64;
    64 - biggest.leading_zeros()
}

fn level_desc(d: &CUDA_ARRAY3D_DESCRIPTOR, l: u32) -> CUDA_ARRAY3D_DESCRIPTOR {
    let half = |v: usize| if v == 0 { 0 } else { (v >> l).max(1) };
    let layered = d.Flags & CUDA_ARRAY3D_LAYERED != 0;
    CUDA_ARRAY3D_DESCRIPTOR {
        Width: half(d.Width),
        Height: half(d.Height),
        Depth: if layered { d.Depth } else { half(d.Depth) },
        ..*d
    }
}

pub(super) fn mipmap_create(d: CUDA_ARRAY3D_DESCRIPTOR, levels: c_uint) -> R<CUmipmappedArray> {
    check_desc(&d)?;
    let most = max_levels(&d);
    if levels == 0 || levels > most {
        return refuse(INVALID, &format!("{levels} mipmap levels (this extent has 1..={most})"));
    }
    let (handle, ctx) = client::call(|c| {
        let (h, ctx, _) = c.current()?;
        let answer::Array { handle, .. } =
            c.live()?.ask(Request::MipmappedArrayCreate { ctx, desc: wire_desc(&d), levels })?;
        Ok((handle, h))
    })?;
    state(|s| {
        s.mipmaps.insert(handle, (ctx, d, Vec::new()));
        Ok(handle as CUmipmappedArray)
    })
}

fn mipmap(h: CUmipmappedArray) -> R<(u64, CUDA_ARRAY3D_DESCRIPTOR)> {
    match state(|s| Ok(s.mipmaps.get(&(h as u64)).map(|m| (m.0, m.1))))? {
        Some(d) => Ok(d),
        None => refuse(INVALID_HANDLE, &format!("{:#x} is not a live mipmapped array", h as u64)),
    }
}

pub(super) fn mipmap_level(h: CUmipmappedArray, level: c_uint) -> R<CUarray> {
    let (ctx, d) = mipmap(h)?;
    let handle = client::call(|c| {
        let answer::Array { handle, .. } = c.live()?.ask(Request::MipmappedArrayLevel { mipmap: h as u64, level })?;
        Ok(handle)
    })?;
    state(|s| {
        s.arrays.insert(handle, Array { ctx, desc: level_desc(&d, level), level_of: Some(h as u64) });
        if let Some(m) = s.mipmaps.get_mut(&(h as u64))
            && !m.2.contains(&handle)
        {
            m.2.push(handle);
        }
        Ok(handle as CUarray)
    })
}

pub(super) fn mipmap_destroy(h: CUmipmappedArray) -> R<()> {
    mipmap(h)?;
    client::call(|c| c.live()?.call_ok(Request::MipmappedArrayDestroy { mipmap: h as u64 }))?;
    state(|s| {
        if let Some((_, _, levels)) = s.mipmaps.remove(&(h as u64)) {
            for l in levels {
                s.arrays.remove(&l);
            }
        }
        Ok(())
    })
}

/// Client context `h` was destroyed or reset: the daemon destroyed the arrays, mipmapped
/// arrays, texture and surface objects made through it, so their handles name nothing now.
pub(crate) fn forget_context(h: u64) {
    let _ = state(|s| {
        s.arrays.retain(|_, a| a.ctx != h);
        s.mipmaps.retain(|_, m| m.0 != h);
        s.textures.retain(|_, t| t.ctx != h);
        s.surfaces.retain(|_, e| e.0 != h);
        Ok(())
    });
}

/// Checks an array end of a copy: a box of `dims` (bytes, rows, slices) at `at` inside
/// array `h` (the daemon checks it again against its own record).
pub(super) fn check_end(h: CUarray, at: [u64; 3], dims: [u64; 3], role: &str) -> R<()> {
    array(h)?.check_box(at, dims, role)
}

/// One end of a 1D copy: an array and a byte offset into its rows taken one after another
/// (a partial first row, whole rows, a partial last row), or host or device memory.
#[derive(Clone, Copy)]
enum Lin {
    Array(CUarray, u64),
    Host(u64),
    Device(u64),
}

/// A 1D copy of `n` bytes with an array at one end or both, as 3D copies of runs of rows.
fn linear(dst: Lin, src: Lin, n: usize, stream: Option<CUstream>, ds: DefaultStream) -> R<()> {
    let n = n as u64;
    let mut ends = Vec::new();
    for (e, role) in [(dst, "destination"), (src, "source")] {
        match e {
            Lin::Array(h, off) => {
                let a = array(h)?;
                let total = a.row_bytes() * a.rows() * a.slices();
                if off.checked_add(n).is_none_or(|end| end > total) {
                    return refuse(
                        INVALID,
                        &format!("{role}: {n} bytes at offset {off} run past the array's {total} bytes"),
                    );
                }
                ends.push(Some(a));
            }
            Lin::Host(0) | Lin::Device(0) => return refuse(INVALID, &format!("NULL {role}")),
            _ => ends.push(None),
        }
    }
    let mut moved = 0u64;
    while moved < n {
        let left = n - moved;
        // (x bytes, row, slice) of each array end at this point.
        let at = |e: Lin, a: Option<Array>| match (e, a) {
            (Lin::Array(_, off), Some(a)) => {
                let (o, row) = (off + moved, a.row_bytes());
                let r = o / row;
                Some(([o % row, r % a.rows(), r / a.rows()], a))
            }
            _ => None,
        };
        let places = [at(dst, ends[0]), at(src, ends[1])];
        let arrays: Vec<_> = places.iter().flatten().collect();
        let row = arrays[0].1.row_bytes();
        let whole = arrays.iter().all(|(p, a)| p[0] == 0 && a.row_bytes() == row) && left >= row;
        let (w, h) = if whole {
            let h = arrays.iter().map(|(p, a)| a.rows() - p[1]).min().unwrap_or(1).min(left / row);
            (row, h)
        } else {
            (arrays.iter().map(|(p, a)| a.row_bytes() - p[0]).min().unwrap_or(left).min(left), 1)
        };
        let mut p = CUDA_MEMCPY3D { WidthInBytes: w as usize, Height: h as usize, Depth: 1, ..Default::default() };
        for (i, e) in [dst, src].into_iter().enumerate() {
            let (t, host, dev, arr, [x, y, z]) = match (e, places[i]) {
                (Lin::Array(a, _), Some((xyz, _))) => (CUmemorytype::CU_MEMORYTYPE_ARRAY, 0, 0, a, xyz),
                (Lin::Host(b), _) => (CUmemorytype::CU_MEMORYTYPE_HOST, b + moved, 0, std::ptr::null_mut(), [0; 3]),
                (Lin::Device(b), _) => (CUmemorytype::CU_MEMORYTYPE_DEVICE, 0, b + moved, std::ptr::null_mut(), [0; 3]),
                _ => unreachable!("an array end has its place"),
            };
            let (x, y, z) = (x as usize, y as usize, z as usize);
            if i == 0 {
                (p.dstMemoryType, p.dstHost, p.dstDevice, p.dstArray) = (t, host as *mut c_void, dev, arr);
                (p.dstXInBytes, p.dstY, p.dstZ, p.dstPitch) = (x, y, z, if arr.is_null() { w as usize } else { 0 });
            } else {
                (p.srcMemoryType, p.srcHost, p.srcDevice, p.srcArray) = (t, host as *const c_void, dev, arr);
                (p.srcXInBytes, p.srcY, p.srcZ, p.srcPitch) = (x, y, z, if arr.is_null() { w as usize } else { 0 });
            }
        }
        match stream {
            None => super::copy3d::memcpy3d(p, ds)?,
            Some(s) => super::copy3d::memcpy3d_async(p, s, ds)?,
        }
        moved += w * h;
    }
    Ok(())
}

pub(super) fn htoa(dst: CUarray, offset: usize, src: *const c_void, n: usize, ds: DefaultStream) -> R<()> {
    linear(Lin::Array(dst, offset as u64), Lin::Host(src as u64), n, None, ds)
}

pub(super) fn atoh(dst: *mut c_void, src: CUarray, offset: usize, n: usize, ds: DefaultStream) -> R<()> {
    linear(Lin::Host(dst as u64), Lin::Array(src, offset as u64), n, None, ds)
}

pub(super) fn htoa_async(
    dst: CUarray,
    offset: usize,
    src: *const c_void,
    n: usize,
    s: CUstream,
    ds: DefaultStream,
) -> R<()> {
    linear(Lin::Array(dst, offset as u64), Lin::Host(src as u64), n, Some(s), ds)
}

pub(super) fn atoh_async(
    dst: *mut c_void,
    src: CUarray,
    offset: usize,
    n: usize,
    s: CUstream,
    ds: DefaultStream,
) -> R<()> {
    linear(Lin::Host(dst as u64), Lin::Array(src, offset as u64), n, Some(s), ds)
}

pub(super) fn atod(dst: CUdeviceptr, src: CUarray, offset: usize, n: usize, ds: DefaultStream) -> R<()> {
    linear(Lin::Device(dst), Lin::Array(src, offset as u64), n, None, ds)
}

pub(super) fn dtoa(dst: CUarray, offset: usize, src: CUdeviceptr, n: usize, ds: DefaultStream) -> R<()> {
    linear(Lin::Array(dst, offset as u64), Lin::Device(src), n, None, ds)
}

pub(super) fn atoa(dst: CUarray, doff: usize, src: CUarray, soff: usize, n: usize, ds: DefaultStream) -> R<()> {
    linear(Lin::Array(dst, doff as u64), Lin::Array(src, soff as u64), n, None, ds)
}

/// What a texture object reads: memory as the daemon takes it, or an array or mipmapped
/// array of this process (the bool: mipmapped).
enum Source {
    Memory(TexResource),
    Array(u64, bool),
}

/// The memory or array a resource descriptor names.
fn resource(r: &CUDA_RESOURCE_DESC) -> R<Source> {
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
            let h = unsafe { r.res.array }.hArray;
            array(h)?;
            Ok(Source::Array(h as u64, false))
        }
        CUresourcetype::CU_RESOURCE_TYPE_MIPMAPPED_ARRAY => {
            let h = unsafe { r.res.mipmap }.hMipmappedArray;
            mipmap(h)?;
            Ok(Source::Array(h as u64, true))
        }
        CUresourcetype::CU_RESOURCE_TYPE_LINEAR => {
            let l = unsafe { r.res.linear };
            let e = elem(l.format, l.numChannels)?;
            if l.sizeInBytes == 0 || !(l.sizeInBytes as u64).is_multiple_of(e) {
                return refuse(INVALID, &format!("linear resource of {} bytes", l.sizeInBytes));
            }
            let width = l.sizeInBytes as u64 / e;
            let ptr = gpupool_protocol::DevicePtr(l.devPtr);
            Ok(Source::Memory(TexResource {
                ptr,
                format: l.format.0,
                channels: l.numChannels,
                width,
                height: 0,
                pitch: 0,
            }))
        }
        CUresourcetype::CU_RESOURCE_TYPE_PITCH2D => {
            let p = unsafe { r.res.pitch2D };
            elem(p.format, p.numChannels)?;
            if p.height == 0 {
                return refuse(INVALID, "pitch2D resource of height 0");
            }
            let ptr = gpupool_protocol::DevicePtr(p.devPtr);
            let (width, height, pitch) = (p.width as u64, p.height as u64, p.pitchInBytes as u64);
            Ok(Source::Memory(TexResource { ptr, format: p.format.0, channels: p.numChannels, width, height, pitch }))
        }
        other => refuse(INVALID, &format!("resource type {}", other.0)),
    }
}

pub(super) fn tex_create(
    res: CUDA_RESOURCE_DESC,
    tex: CUDA_TEXTURE_DESC,
    view: *const CUDA_RESOURCE_VIEW_DESC,
) -> R<CUtexObject> {
    let source = resource(&res)?;
    // SAFETY: a non-NULL view points to the application's CUDA_RESOURCE_VIEW_DESC; it is
    // read once, unaligned, as plain data.
    let view_desc = (!view.is_null()).then(|| unsafe { view.read_unaligned() });
    let view = view_desc.map(|v| ResourceView {
        format: v.format.0,
        width: v.width as u64,
        height: v.height as u64,
        depth: v.depth as u64,
        first_level: v.firstMipmapLevel,
        last_level: v.lastMipmapLevel,
        first_layer: v.firstLayer,
        last_layer: v.lastLayer,
    });
    let sampler = TexSampler {
        address: tex.addressMode.map(|m| m.0),
        filter: tex.filterMode.0,
        flags: tex.flags,
        border: tex.borderColor.map(f32::to_bits),
    };
    let (handle, ctx) = client::call(|c| {
        let (h, ctx, _) = c.current()?;
        let request = match source {
            Source::Memory(resource) => {
                if view.is_some() {
                    return refuse(INVALID, "a resource view needs an array or mipmapped array resource");
                }
                Request::TexObjectCreate { ctx, resource, sampler }
            }
            Source::Array(array, mipmapped) => {
                let mipmap = TexMipmap {
                    filter: tex.mipmapFilterMode.0,
                    bias: tex.mipmapLevelBias.to_bits(),
                    min_clamp: tex.minMipmapLevelClamp.to_bits(),
                    max_clamp: tex.maxMipmapLevelClamp.to_bits(),
                    max_anisotropy: tex.maxAnisotropy,
                };
                Request::TexObjectCreateArray { ctx, array, mipmapped, sampler, mipmap, view }
            }
        };
        let answer::TexObject { handle } = c.live()?.ask(request)?;
        Ok((handle, h))
    })?;
    state(|s| {
        s.textures.insert(handle, Texture { ctx, res, tex, view: view_desc });
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

/// The view the texture object was made with; one made without is INVALID_VALUE (NVIDIA's
/// documented answer).
pub(super) fn tex_view(h: CUtexObject) -> R<CUDA_RESOURCE_VIEW_DESC> {
    match texture(h)?.view {
        Some(v) => Ok(v),
        None => refuse(INVALID, &format!("texture object {h:#x} was made without a resource view")),
    }
}

/// `cuSurfObjectCreate`: over an array only (CUDA defines surfaces over arrays), made by the
/// backend, which also requires `CUDA_ARRAY3D_SURFACE_LDST`.
pub(super) fn surf_create(res: CUDA_RESOURCE_DESC) -> R<CUsurfObject> {
    if res.resType != CUresourcetype::CU_RESOURCE_TYPE_ARRAY {
        return refuse(INVALID, &format!("a surface object over resource type {} (must be an array)", res.resType.0));
    }
    if res.flags != 0 {
        return refuse(INVALID, &format!("resource flags {:#x} (must be 0)", res.flags));
    }
    // SAFETY: resType is ARRAY, so `res.array` is the member the application filled.
    let h = unsafe { res.res.array }.hArray;
    if array(h)?.desc.Flags & CUDA_ARRAY3D_SURFACE_LDST == 0 {
        return refuse(INVALID, "a surface object's array must be made with CUDA_ARRAY3D_SURFACE_LDST");
    }
    let (handle, ctx) = client::call(|c| {
        let (cur, ctx, _) = c.current()?;
        let answer::TexObject { handle } = c.live()?.ask(Request::SurfObjectCreate { ctx, array: h as u64 })?;
        Ok((handle, cur))
    })?;
    state(|s| {
        s.surfaces.insert(handle, (ctx, res));
        Ok(handle)
    })
}

fn surface(h: CUsurfObject) -> R<CUDA_RESOURCE_DESC> {
    match state(|s| Ok(s.surfaces.get(&h).map(|e| e.1)))? {
        Some(r) => Ok(r),
        None => refuse(INVALID, &format!("{h:#x} is not a live surface object")),
    }
}

pub(super) fn surf_destroy(h: CUsurfObject) -> R<()> {
    surface(h)?;
    client::call(|c| c.live()?.call_ok(Request::SurfObjectDestroy { handle: h }))?;
    state(|s| Ok(s.surfaces.remove(&h))).map(|_| ())
}

pub(super) fn surf_resource(h: CUsurfObject) -> R<CUDA_RESOURCE_DESC> {
    surface(h)
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
    cuMemcpyHtoAAsync_v2 | cuMemcpyHtoAAsync_v2_ptsz (dst: val CUarray, offset: val usize, src: val *const c_void,
        n: val usize, s: val CUstream) = htoa_async;
    cuMemcpyAtoHAsync_v2 | cuMemcpyAtoHAsync_v2_ptsz (dst: val *mut c_void, src: val CUarray, offset: val usize,
        n: val usize, s: val CUstream) = atoh_async;
    cuMemcpyAtoD_v2 | cuMemcpyAtoD_v2_ptds (dst: val CUdeviceptr, src: val CUarray, offset: val usize,
        n: val usize) = atod;
    cuMemcpyDtoA_v2 | cuMemcpyDtoA_v2_ptds (dst: val CUarray, offset: val usize, src: val CUdeviceptr,
        n: val usize) = dtoa;
    cuMemcpyAtoA_v2 | cuMemcpyAtoA_v2_ptds (dst: val CUarray, doff: val usize, src: val CUarray, soff: val usize,
        n: val usize) = atoa;
    cuTexObjectCreate(p: out CUtexObject, res: read CUDA_RESOURCE_DESC, tex: read CUDA_TEXTURE_DESC,
        view: val *const CUDA_RESOURCE_VIEW_DESC) = tex_create;
    cuTexObjectDestroy(h: val CUtexObject) = tex_destroy;
    cuTexObjectGetResourceDesc(d: out CUDA_RESOURCE_DESC, h: val CUtexObject) = tex_resource;
    cuTexObjectGetTextureDesc(d: out CUDA_TEXTURE_DESC, h: val CUtexObject) = tex_descriptor;
    cuTexObjectGetResourceViewDesc(d: out CUDA_RESOURCE_VIEW_DESC, h: val CUtexObject) = tex_view;
    cuSurfObjectCreate(p: out CUsurfObject, res: read CUDA_RESOURCE_DESC) = surf_create;
    cuSurfObjectDestroy(h: val CUsurfObject) = surf_destroy;
    cuSurfObjectGetResourceDesc(d: out CUDA_RESOURCE_DESC, h: val CUsurfObject) = surf_resource;
}
