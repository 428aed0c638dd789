//! The runtime's CUDA arrays and texture objects (`cudaMallocArray`, `cudaMalloc3DArray`,
//! `cudaFreeArray`, `cudaArrayGetInfo`, `cudaGetChannelDesc`, mipmapped arrays,
//! `cudaMemcpy2DToArray` / `FromArray` / `ArrayToArray` and the 1D `cudaMemcpyToArray` /
//! `FromArray` / `ArrayToArray`, `cudaCreateTextureObject` and its getters,
//! `cudaCreateSurfaceObject`, `cudaDestroySurfaceObject`, `cudaGetSurfaceObjectResourceDesc`) over the
//! driver's ([`crate::api::array`]): the runtime describes a texel by a channel
//! descriptor (bits per channel and a kind) where the driver has a format and a channel
//! count, and its resource and texture descriptors are the driver's with other fields,
//! so each call converts and forwards; quotas and checks are the driver path's.
//!
//! `cudaResourceDesc` grew in CUDA 13 (a 128-byte union and `flags`): it is read and
//! written in the layout of the runtime the program loaded ([`super::runtime_major`]).

use super::{NullStream, Rt, cu, memory::direction, out, rt_exports, rt_variants, state};
use crate::api::array::{
    cuArray3DCreate_v2, cuArray3DGetDescriptor_v2, cuArrayDestroy, cuMemcpyAtoA_v2, cuMemcpyAtoA_v2_ptds,
    cuMipmappedArrayCreate, cuMipmappedArrayDestroy, cuMipmappedArrayGetLevel, cuSurfObjectCreate, cuSurfObjectDestroy,
    cuSurfObjectGetResourceDesc, cuTexObjectCreate, cuTexObjectDestroy, cuTexObjectGetResourceDesc,
    cuTexObjectGetTextureDesc,
};
use crate::api::exports::{cuMemcpy2D_v2, cuMemcpy2DAsync_v2};
use gpupool_shim::cuda::{
    CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION, CU_TRSF_NORMALIZED_COORDINATES, CU_TRSF_READ_AS_INTEGER,
    CU_TRSF_SEAMLESS_CUBEMAP, CU_TRSF_SRGB, CUDA_ARRAY3D_DESCRIPTOR, CUDA_MEMCPY2D, CUDA_RESOURCE_DESC,
    CUDA_TEXTURE_DESC, CUaddress_mode, CUarray, CUarray_format as F, CUdeviceptr, CUfilter_mode, CUmemorytype as MT,
    CUresourcetype, CUstream, CUsurfObject, CUtexObject,
};
use gpupool_shim::cudart::{
    cudaArray_t, cudaChannelFormatDesc, cudaChannelFormatKind as Kind, cudaError, cudaExtent, cudaMemcpyKind as K,
    cudaMipmappedArray_t, cudaResourceDesc, cudaResourceType, cudaTextureAddressMode, cudaTextureDesc,
    cudaTextureFilterMode, cudaTextureObject_t, cudaTextureReadMode,
};
use gpupool_shim::cudart12::cudaResourceDesc as cudaResourceDesc12;
use std::os::raw::{c_int, c_uint, c_void};

/// The driver's format and channel count for a channel descriptor: 1, 2 or 4 channels of
/// one size, as `cudaMallocArray` documents (else `cudaErrorInvalidChannelDescriptor`).
fn format_of(d: &cudaChannelFormatDesc) -> Rt<(F, c_uint)> {
    let bits = [d.x, d.y, d.z, d.w];
    let channels = bits.iter().take_while(|&&b| b != 0).count();
    let invalid = || {
        crate::util::log(&format!(
            "cudaErrorInvalidChannelDescriptor: channel bits {bits:?} of kind {} are not 1, 2 or 4 channels of one \
             integer or float size",
            d.f.0
        ));
        Err(cudaError::cudaErrorInvalidChannelDescriptor)
    };
    if !matches!(channels, 1 | 2 | 4)
        || bits[channels..].iter().any(|&b| b != 0)
        || bits[..channels].iter().any(|&b| b != d.x)
    {
        return invalid();
    }
    let format = match (d.f, d.x) {
        (Kind::cudaChannelFormatKindUnsigned, 8) => F::CU_AD_FORMAT_UNSIGNED_INT8,
        (Kind::cudaChannelFormatKindUnsigned, 16) => F::CU_AD_FORMAT_UNSIGNED_INT16,
        (Kind::cudaChannelFormatKindUnsigned, 32) => F::CU_AD_FORMAT_UNSIGNED_INT32,
        (Kind::cudaChannelFormatKindSigned, 8) => F::CU_AD_FORMAT_SIGNED_INT8,
        (Kind::cudaChannelFormatKindSigned, 16) => F::CU_AD_FORMAT_SIGNED_INT16,
        (Kind::cudaChannelFormatKindSigned, 32) => F::CU_AD_FORMAT_SIGNED_INT32,
        (Kind::cudaChannelFormatKindFloat, 16) => F::CU_AD_FORMAT_HALF,
        (Kind::cudaChannelFormatKindFloat, 32) => F::CU_AD_FORMAT_FLOAT,
        (k, _) if k.0 >= Kind::cudaChannelFormatKindNV12.0 => {
            // NV12, normalized and block-compressed kinds have driver formats of their
            // own that the pool's arrays do not hold.
            super::unsupported::report("a CUDA array or texture of a normalized, NV12 or block-compressed kind");
            return Err(cudaError::cudaErrorNotSupported);
        }
        _ => return invalid(),
    };
    Ok((format, channels as c_uint))
}

/// The channel descriptor of a driver format and channel count (what `cudaArrayGetInfo`
/// and the getters answer).
fn channel_desc(f: F, channels: c_uint) -> cudaChannelFormatDesc {
    let (kind, bits) = match f {
        F::CU_AD_FORMAT_UNSIGNED_INT8 => (Kind::cudaChannelFormatKindUnsigned, 8),
        F::CU_AD_FORMAT_UNSIGNED_INT16 => (Kind::cudaChannelFormatKindUnsigned, 16),
        F::CU_AD_FORMAT_UNSIGNED_INT32 => (Kind::cudaChannelFormatKindUnsigned, 32),
        F::CU_AD_FORMAT_SIGNED_INT8 => (Kind::cudaChannelFormatKindSigned, 8),
        F::CU_AD_FORMAT_SIGNED_INT16 => (Kind::cudaChannelFormatKindSigned, 16),
        F::CU_AD_FORMAT_SIGNED_INT32 => (Kind::cudaChannelFormatKindSigned, 32),
        F::CU_AD_FORMAT_HALF => (Kind::cudaChannelFormatKindFloat, 16),
        F::CU_AD_FORMAT_FLOAT => (Kind::cudaChannelFormatKindFloat, 32),
        _ => (Kind::cudaChannelFormatKindNone, 0),
    };
    let bit = |i: c_uint| if i < channels { bits } else { 0 };
    cudaChannelFormatDesc { x: bit(0), y: bit(1), z: bit(2), w: bit(3), f: kind }
}

/// Bytes per element of an array (what `cudaMemcpy3D` counts positions and widths in).
pub(super) fn element_bytes(a: cudaArray_t) -> Rt<usize> {
    let mut d = CUDA_ARRAY3D_DESCRIPTOR::default();
    // SAFETY: our own export with a valid out-pointer; it looks the handle up.
    cu(unsafe { cuArray3DGetDescriptor_v2(&mut d, a.cast()) })?;
    let cd = channel_desc(d.Format, d.NumChannels);
    Ok([cd.x, cd.y, cd.z, cd.w].iter().map(|&b| b as usize).sum::<usize>() / 8)
}

fn read<T: Copy>(p: *const T) -> Rt<T> {
    if p.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    // SAFETY: non-null; the application passes a pointer to the documented struct.
    Ok(unsafe { p.read_unaligned() })
}

/// The driver's descriptor for a runtime array (also each level of a mipmapped one), once the
/// channel format is valid and the calling thread has a context.
fn descriptor(desc: *const cudaChannelFormatDesc, e: cudaExtent, flags: c_uint) -> Rt<CUDA_ARRAY3D_DESCRIPTOR> {
    let (format, channels) = format_of(&read(desc)?)?;
    state::context()?;
    Ok(CUDA_ARRAY3D_DESCRIPTOR {
        Width: e.width,
        Height: e.height,
        Depth: e.depth,
        Format: format,
        NumChannels: channels,
        Flags: flags,
    })
}

/// `cudaMallocArray`'s and `cudaMalloc3DArray`'s flags are the driver's `CUDA_ARRAY3D_*`
/// bits under other names (cudaArrayLayered = CUDA_ARRAY3D_LAYERED, ...).
fn create(array: *mut cudaArray_t, desc: *const cudaChannelFormatDesc, e: cudaExtent, flags: c_uint) -> Rt<()> {
    if array.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    let d = descriptor(desc, e, flags)?;
    let mut h: CUarray = std::ptr::null_mut();
    // SAFETY: our own export with a valid out-pointer and descriptor.
    cu(unsafe { cuArray3DCreate_v2(&mut h, &d) })?;
    out(array, h.cast())
}

fn malloc_array(
    array: *mut cudaArray_t,
    desc: *const cudaChannelFormatDesc,
    width: usize,
    height: usize,
    flags: c_uint,
) -> Rt<()> {
    create(array, desc, cudaExtent { width, height, depth: 0 }, flags)
}

fn malloc_3d_array(
    array: *mut cudaArray_t,
    desc: *const cudaChannelFormatDesc,
    e: cudaExtent,
    flags: c_uint,
) -> Rt<()> {
    create(array, desc, e, flags)
}

fn free_array(array: cudaArray_t) -> Rt<()> {
    // As NVIDIA's runtime: freeing NULL does nothing.
    if array.is_null() {
        return Ok(());
    }
    state::context()?;
    // SAFETY: our own export; it looks the handle up.
    cu(unsafe { cuArrayDestroy(array.cast()) })
}

fn array_get_info(
    desc: *mut cudaChannelFormatDesc,
    extent: *mut cudaExtent,
    flags: *mut c_uint,
    a: cudaArray_t,
) -> Rt<()> {
    state::context()?;
    let mut d = CUDA_ARRAY3D_DESCRIPTOR::default();
    // SAFETY: our own export with a valid out-pointer; it looks the handle up.
    cu(unsafe { cuArray3DGetDescriptor_v2(&mut d, a.cast()) })?;
    if !desc.is_null() {
        out(desc, channel_desc(d.Format, d.NumChannels))?;
    }
    if !extent.is_null() {
        out(extent, cudaExtent { width: d.Width, height: d.Height, depth: d.Depth })?;
    }
    if !flags.is_null() {
        out(flags, d.Flags)?;
    }
    Ok(())
}

/// A 2D copy between an array and linear memory (`host` true: the linear end is host
/// memory); `stream` None is the synchronous form.
fn copy_array_2d(
    array: cudaArray_t,
    (x, y): (usize, usize),
    linear: *mut c_void,
    pitch: usize,
    (width, height): (usize, usize),
    device: bool,
    to_array: bool,
    stream: Option<CUstream>,
) -> Rt<()> {
    state::context()?;
    if width > pitch {
        return Err(cudaError::cudaErrorInvalidPitchValue);
    }
    if width == 0 || height == 0 {
        return Ok(());
    }
    let kind = if device { MT::CU_MEMORYTYPE_DEVICE } else { MT::CU_MEMORYTYPE_HOST };
    let mut p = CUDA_MEMCPY2D { WidthInBytes: width, Height: height, ..Default::default() };
    if to_array {
        (p.dstMemoryType, p.dstArray, p.dstXInBytes, p.dstY) = (MT::CU_MEMORYTYPE_ARRAY, array.cast(), x, y);
        (p.srcMemoryType, p.srcHost, p.srcDevice, p.srcPitch) = (kind, linear, linear as CUdeviceptr, pitch);
    } else {
        (p.srcMemoryType, p.srcArray, p.srcXInBytes, p.srcY) = (MT::CU_MEMORYTYPE_ARRAY, array.cast(), x, y);
        (p.dstMemoryType, p.dstHost, p.dstDevice, p.dstPitch) = (kind, linear, linear as CUdeviceptr, pitch);
    }
    // SAFETY: our own exports with a fully initialised descriptor.
    cu(unsafe {
        match stream {
            None => cuMemcpy2D_v2(&p),
            Some(s) => cuMemcpy2DAsync_v2(&p, s),
        }
    })
}

fn to_array_2d(
    dst: cudaArray_t,
    w: usize,
    h: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: K,
    stream: Option<CUstream>,
) -> Rt<()> {
    let (_, s_dev) = direction(std::ptr::null(), src, kind)?;
    copy_array_2d(dst, (w, h), src.cast_mut(), spitch, (width, height), s_dev, true, stream)
}

fn from_array_2d(
    dst: *mut c_void,
    dpitch: usize,
    src: cudaArray_t,
    w: usize,
    h: usize,
    width: usize,
    height: usize,
    kind: K,
    stream: Option<CUstream>,
) -> Rt<()> {
    let (d_dev, _) = direction(dst, std::ptr::null(), kind)?;
    copy_array_2d(src, (w, h), dst, dpitch, (width, height), d_dev, false, stream)
}

fn memcpy_2d_to_array(
    dst: cudaArray_t,
    w: usize,
    h: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: K,
    _ns: NullStream,
) -> Rt<()> {
    to_array_2d(dst, w, h, src, spitch, width, height, kind, None)
}

fn memcpy_2d_to_array_async(
    dst: cudaArray_t,
    w: usize,
    h: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: K,
    s: CUstream,
    ns: NullStream,
) -> Rt<()> {
    to_array_2d(dst, w, h, src, spitch, width, height, kind, Some(ns.resolve(s)))
}

fn memcpy_2d_from_array(
    dst: *mut c_void,
    dpitch: usize,
    src: cudaArray_t,
    w: usize,
    h: usize,
    width: usize,
    height: usize,
    kind: K,
    _ns: NullStream,
) -> Rt<()> {
    from_array_2d(dst, dpitch, src, w, h, width, height, kind, None)
}

fn memcpy_2d_from_array_async(
    dst: *mut c_void,
    dpitch: usize,
    src: cudaArray_t,
    w: usize,
    h: usize,
    width: usize,
    height: usize,
    kind: K,
    s: CUstream,
    ns: NullStream,
) -> Rt<()> {
    from_array_2d(dst, dpitch, src, w, h, width, height, kind, Some(ns.resolve(s)))
}

fn get_channel_desc(desc: *mut cudaChannelFormatDesc, a: cudaArray_t) -> Rt<()> {
    if desc.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    array_get_info(desc, std::ptr::null_mut(), std::ptr::null_mut(), a)
}

fn memcpy_2d_array_to_array(
    dst: cudaArray_t,
    wd: usize,
    hd: usize,
    src: cudaArray_t,
    ws: usize,
    hs: usize,
    width: usize,
    height: usize,
    kind: K,
    _ns: NullStream,
) -> Rt<()> {
    if !matches!(kind, K::cudaMemcpyDeviceToDevice | K::cudaMemcpyDefault) {
        return Err(cudaError::cudaErrorInvalidMemcpyDirection);
    }
    state::context()?;
    if width == 0 || height == 0 {
        return Ok(());
    }
    let p = CUDA_MEMCPY2D {
        srcMemoryType: MT::CU_MEMORYTYPE_ARRAY,
        srcArray: src.cast(),
        srcXInBytes: ws,
        srcY: hs,
        dstMemoryType: MT::CU_MEMORYTYPE_ARRAY,
        dstArray: dst.cast(),
        dstXInBytes: wd,
        dstY: hd,
        WidthInBytes: width,
        Height: height,
        ..Default::default()
    };
    // SAFETY: our own export with a fully initialised descriptor.
    cu(unsafe { cuMemcpy2D_v2(&p) })
}

/// A mipmapped array is the driver's: each level an array of its own (levels halve
/// every dimension, as `cudaMallocMipmappedArray` documents).
fn malloc_mipmapped_array(
    m: *mut cudaMipmappedArray_t,
    desc: *const cudaChannelFormatDesc,
    e: cudaExtent,
    levels: c_uint,
    flags: c_uint,
) -> Rt<()> {
    if m.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    let d = descriptor(desc, e, flags)?;
    let mut h = std::ptr::null_mut();
    // SAFETY: our own export with a valid out-pointer and descriptor.
    cu(unsafe { cuMipmappedArrayCreate(&mut h, &d, levels) })?;
    out(m, h.cast())
}

fn get_mipmapped_array_level(level_array: *mut cudaArray_t, m: cudaMipmappedArray_t, level: c_uint) -> Rt<()> {
    if level_array.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    let mut a: CUarray = std::ptr::null_mut();
    // SAFETY: our own export with a valid out-pointer; it looks the handle up.
    cu(unsafe { cuMipmappedArrayGetLevel(&mut a, m.cast(), level) })?;
    out(level_array, a.cast())
}

fn free_mipmapped_array(m: cudaMipmappedArray_t) -> Rt<()> {
    if m.is_null() {
        return Ok(());
    }
    state::context()?;
    // SAFETY: our own export; it looks the handle up.
    cu(unsafe { cuMipmappedArrayDestroy(m.cast()) })
}

/// The deprecated 1D forms copy `n` bytes starting at (`w` bytes, row `h`): a copy of
/// whole rows when it runs past the row, which NVIDIA's runtime allows and the pool's
/// 2D lowering does not express; one row at a time keeps it exact.
fn rows_1d(
    a: cudaArray_t,
    w: usize,
    h: usize,
    n: usize,
    mut each: impl FnMut(usize, usize, usize, usize) -> Rt<()>,
) -> Rt<()> {
    state::context()?;
    let mut d = CUDA_ARRAY3D_DESCRIPTOR::default();
    // SAFETY: our own export with a valid out-pointer; it looks the handle up.
    cu(unsafe { cuArray3DGetDescriptor_v2(&mut d, a.cast()) })?;
    let row = d.Width * element_bytes(a)?;
    let (mut x, mut y, mut done) = (w, h, 0);
    while done < n {
        if row == 0 || x >= row {
            return Err(cudaError::cudaErrorInvalidValue);
        }
        let take = (row - x).min(n - done);
        each(x, y, done, take)?;
        (x, y, done) = (0, y + 1, done + take);
    }
    Ok(())
}

fn memcpy_to_array(
    dst: cudaArray_t,
    w: usize,
    h: usize,
    src: *const c_void,
    n: usize,
    kind: K,
    _ns: NullStream,
) -> Rt<()> {
    rows_1d(dst, w, h, n, |x, y, off, take| {
        // SAFETY: `off` < `n`, inside the caller's source of `n` bytes.
        let s = unsafe { src.cast::<u8>().add(off) }.cast();
        to_array_2d(dst, x, y, s, take, take, 1, kind, None)
    })
}

fn memcpy_from_array(
    dst: *mut c_void,
    src: cudaArray_t,
    w: usize,
    h: usize,
    n: usize,
    kind: K,
    _ns: NullStream,
) -> Rt<()> {
    rows_1d(src, w, h, n, |x, y, off, take| {
        // SAFETY: `off` < `n`, inside the caller's destination of `n` bytes.
        let d = unsafe { dst.cast::<u8>().add(off) }.cast();
        from_array_2d(d, take, src, x, y, take, 1, kind, None)
    })
}

/// The common prefix of CUDA 12's and 13's `cudaResourceDesc`, as the driver's.
fn resource_to_driver(r: &cudaResourceDesc12) -> Rt<(CUDA_RESOURCE_DESC, bool)> {
    let mut d = CUDA_RESOURCE_DESC::default();
    // Whether the texels are integers (then cudaReadModeElementType reads them as such).
    let integer = |f: F| !matches!(f, F::CU_AD_FORMAT_HALF | F::CU_AD_FORMAT_FLOAT);
    // SAFETY (the union reads below): `resType` says which member the application filled.
    let is_int = match cudaResourceType(r.resType.0) {
        cudaResourceType::cudaResourceTypeArray => {
            let a = unsafe { r.res.array.array };
            d.resType = CUresourcetype::CU_RESOURCE_TYPE_ARRAY;
            d.res.array.hArray = a.cast();
            let mut ad = CUDA_ARRAY3D_DESCRIPTOR::default();
            // SAFETY: our own export with a valid out-pointer; it looks the handle up.
            cu(unsafe { cuArray3DGetDescriptor_v2(&mut ad, a.cast()) })?;
            integer(ad.Format)
        }
        cudaResourceType::cudaResourceTypeMipmappedArray => {
            d.resType = CUresourcetype::CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
            d.res.mipmap.hMipmappedArray = unsafe { r.res.mipmap.mipmap }.cast();
            false
        }
        cudaResourceType::cudaResourceTypeLinear => {
            let l = unsafe { r.res.linear };
            let (format, channels) = format_of(&channel_desc_12(l.desc))?;
            d.resType = CUresourcetype::CU_RESOURCE_TYPE_LINEAR;
            d.res.linear.devPtr = l.devPtr as CUdeviceptr;
            d.res.linear.format = format;
            d.res.linear.numChannels = channels;
            d.res.linear.sizeInBytes = l.sizeInBytes;
            integer(format)
        }
        cudaResourceType::cudaResourceTypePitch2D => {
            let p = unsafe { r.res.pitch2D };
            let (format, channels) = format_of(&channel_desc_12(p.desc))?;
            d.resType = CUresourcetype::CU_RESOURCE_TYPE_PITCH2D;
            d.res.pitch2D.devPtr = p.devPtr as CUdeviceptr;
            d.res.pitch2D.format = format;
            d.res.pitch2D.numChannels = channels;
            d.res.pitch2D.width = p.width;
            d.res.pitch2D.height = p.height;
            d.res.pitch2D.pitchInBytes = p.pitchInBytes;
            integer(format)
        }
        other => {
            crate::util::log(&format!("cudaErrorInvalidValue: unknown cudaResourceType {}", other.0));
            return Err(cudaError::cudaErrorInvalidValue);
        }
    };
    Ok((d, is_int))
}

/// CUDA 12's channel descriptor (its own bindgen type, same layout) as CUDA 13's.
fn channel_desc_12(d: gpupool_shim::cudart12::cudaChannelFormatDesc) -> cudaChannelFormatDesc {
    cudaChannelFormatDesc { x: d.x, y: d.y, z: d.z, w: d.w, f: Kind(d.f.0) }
}

fn channel_desc_to_12(d: cudaChannelFormatDesc) -> gpupool_shim::cudart12::cudaChannelFormatDesc {
    gpupool_shim::cudart12::cudaChannelFormatDesc {
        x: d.x,
        y: d.y,
        z: d.z,
        w: d.w,
        f: gpupool_shim::cudart12::cudaChannelFormatKind(d.f.0),
    }
}

/// The application's `cudaResourceDesc`, in the layout of the runtime it loaded: CUDA 13's
/// `flags` must be 0.
fn read_resource(res: *const cudaResourceDesc12) -> Rt<cudaResourceDesc12> {
    let r = read(res)?;
    if super::runtime_major() >= 13 {
        // SAFETY: non-null (read above); a CUDA 13 program passes CUDA 13's struct.
        let flags = unsafe { res.cast::<cudaResourceDesc>().read_unaligned() }.flags;
        if flags != 0 {
            crate::util::log(&format!("cudaErrorInvalidValue: cudaResourceDesc.flags is {flags}, must be 0"));
            return Err(cudaError::cudaErrorInvalidValue);
        }
    }
    Ok(r)
}

fn create_texture_object(
    tex: *mut cudaTextureObject_t,
    res: *const cudaResourceDesc12,
    desc: *const cudaTextureDesc,
    view: *const c_void,
) -> Rt<()> {
    if tex.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    let r = read(res)?;
    if super::runtime_major() >= 13 {
        // SAFETY: a CUDA 13 program passes CUDA 13's longer struct (checked non-null above).
        let flags = unsafe { res.cast::<cudaResourceDesc>().read_unaligned() }.flags;
        if flags != 0 {
            crate::util::log(&format!("cudaErrorInvalidValue: cudaResourceDesc.flags is {flags}, must be 0"));
            return Err(cudaError::cudaErrorInvalidValue);
        }
    }
    let t = read(desc)?;
    if !view.is_null() {
        super::unsupported::report("cudaCreateTextureObject with a resource view");
        return Err(cudaError::cudaErrorNotSupported);
    }
    state::context()?;
    let (rd, is_int) = resource_to_driver(&r)?;
    let mut flags = 0;
    if t.readMode == cudaTextureReadMode::cudaReadModeElementType && is_int {
        flags |= CU_TRSF_READ_AS_INTEGER;
    }
    for (on, bit) in [
        (t.normalizedCoords, CU_TRSF_NORMALIZED_COORDINATES),
        (t.sRGB, CU_TRSF_SRGB),
        (t.disableTrilinearOptimization, CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION),
        (t.seamlessCubemap, CU_TRSF_SEAMLESS_CUBEMAP),
    ] {
        if on != 0 {
            flags |= bit;
        }
    }
    let td = CUDA_TEXTURE_DESC {
        addressMode: t.addressMode.map(|m| CUaddress_mode(m.0 as _)),
        filterMode: CUfilter_mode(t.filterMode.0 as _),
        flags,
        maxAnisotropy: t.maxAnisotropy,
        mipmapFilterMode: CUfilter_mode(t.mipmapFilterMode.0 as _),
        mipmapLevelBias: t.mipmapLevelBias,
        minMipmapLevelClamp: t.minMipmapLevelClamp,
        maxMipmapLevelClamp: t.maxMipmapLevelClamp,
        borderColor: t.borderColor,
        ..Default::default()
    };
    let mut h: CUtexObject = 0;
    // SAFETY: our own export with a valid out-pointer and descriptors.
    cu(unsafe { cuTexObjectCreate(&mut h, &rd, &td, std::ptr::null()) })?;
    out(tex, h)
}

fn destroy_texture_object(t: cudaTextureObject_t) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it looks the handle up.
    cu(unsafe { cuTexObjectDestroy(t) })
}

/// The resource a texture or surface object was made over, from the driver's getter `get`, written
/// as the runtime's descriptor.
fn object_resource(
    res: *mut cudaResourceDesc12,
    handle: u64,
    get: unsafe extern "C" fn(*mut CUDA_RESOURCE_DESC, u64) -> gpupool_shim::cuda::CUresult,
) -> Rt<()> {
    if res.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    let mut d = CUDA_RESOURCE_DESC::default();
    // SAFETY: one of our own exports with a valid out-pointer; it looks the handle up.
    cu(unsafe { get(&mut d, handle) })?;
    write_resource(res, d)
}

fn get_resource_desc(res: *mut cudaResourceDesc12, t: cudaTextureObject_t) -> Rt<()> {
    object_resource(res, t, cuTexObjectGetResourceDesc)
}

/// Writes the driver's resource descriptor as the runtime's, in the layout of the runtime
/// the program loaded.
fn write_resource(res: *mut cudaResourceDesc12, d: CUDA_RESOURCE_DESC) -> Rt<()> {
    let mut r = cudaResourceDesc12::default();
    // SAFETY (the union reads): `resType` says which member the driver filled.
    match d.resType {
        CUresourcetype::CU_RESOURCE_TYPE_ARRAY => {
            r.resType = gpupool_shim::cudart12::cudaResourceType(cudaResourceType::cudaResourceTypeArray.0);
            r.res.array.array = unsafe { d.res.array.hArray }.cast();
        }
        CUresourcetype::CU_RESOURCE_TYPE_MIPMAPPED_ARRAY => {
            r.resType = gpupool_shim::cudart12::cudaResourceType(cudaResourceType::cudaResourceTypeMipmappedArray.0);
            r.res.mipmap.mipmap = unsafe { d.res.mipmap.hMipmappedArray }.cast();
        }
        CUresourcetype::CU_RESOURCE_TYPE_LINEAR => {
            let l = unsafe { d.res.linear };
            r.resType = gpupool_shim::cudart12::cudaResourceType(cudaResourceType::cudaResourceTypeLinear.0);
            r.res.linear.devPtr = l.devPtr as *mut c_void;
            r.res.linear.desc = channel_desc_to_12(channel_desc(l.format, l.numChannels));
            r.res.linear.sizeInBytes = l.sizeInBytes;
        }
        _ => {
            let p = unsafe { d.res.pitch2D };
            r.resType = gpupool_shim::cudart12::cudaResourceType(cudaResourceType::cudaResourceTypePitch2D.0);
            r.res.pitch2D.devPtr = p.devPtr as *mut c_void;
            r.res.pitch2D.desc = channel_desc_to_12(channel_desc(p.format, p.numChannels));
            r.res.pitch2D.width = p.width;
            r.res.pitch2D.height = p.height;
            r.res.pitch2D.pitchInBytes = p.pitchInBytes;
        }
    }
    if super::runtime_major() >= 13 {
        let mut r13 = cudaResourceDesc::default();
        // SAFETY: CUDA 12's struct is the prefix of CUDA 13's (resType and the union's
        // first 56 bytes); the rest, reserved and flags, stays zero.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&r as *const cudaResourceDesc12).cast::<u8>(),
                (&mut r13 as *mut cudaResourceDesc).cast::<u8>(),
                size_of::<cudaResourceDesc12>(),
            )
        };
        // SAFETY: non-null; a CUDA 13 program passes CUDA 13's struct.
        unsafe { res.cast::<cudaResourceDesc>().write_unaligned(r13) };
        Ok(())
    } else {
        out(res, r)
    }
}

/// `cudaCreateSurfaceObject`: over an array made with `cudaArraySurfaceLoadStore`, as the
/// driver's `cuSurfObjectCreate` (a backend surface through the pool).
fn create_surface_object(surf: *mut u64, res: *const cudaResourceDesc12) -> Rt<()> {
    if surf.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    let r = read_resource(res)?;
    if cudaResourceType(r.resType.0) != cudaResourceType::cudaResourceTypeArray {
        crate::util::log(&format!("cudaErrorInvalidValue: a surface object over resource type {}", r.resType.0));
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    let (rd, _) = resource_to_driver(&r)?;
    let mut h: CUsurfObject = 0;
    // SAFETY: our own export with a valid out-pointer and a filled descriptor.
    cu(unsafe { cuSurfObjectCreate(&mut h, &rd) })?;
    out(surf, h)
}

fn destroy_surface_object(s: u64) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it looks the handle up.
    cu(unsafe { cuSurfObjectDestroy(s) })
}

fn get_surface_resource_desc(res: *mut cudaResourceDesc12, s: u64) -> Rt<()> {
    object_resource(res, s, cuSurfObjectGetResourceDesc)
}

/// The deprecated 1D `cudaMemcpyArrayToArray`: `n` bytes from (`ws` bytes, row `hs`) of
/// `src`, its rows taken one after another, to (`wd`, `hd`) of `dst`: the driver's
/// `cuMemcpyAtoA` at those byte offsets.
#[allow(clippy::too_many_arguments)]
fn memcpy_array_to_array(
    dst: cudaArray_t,
    wd: usize,
    hd: usize,
    src: cudaArray_t,
    ws: usize,
    hs: usize,
    n: usize,
    kind: K,
    ns: NullStream,
) -> Rt<()> {
    if !matches!(kind, K::cudaMemcpyDeviceToDevice | K::cudaMemcpyDefault) {
        return Err(cudaError::cudaErrorInvalidMemcpyDirection);
    }
    state::context()?;
    let offset = |a: cudaArray_t, w: usize, h: usize| -> Rt<usize> {
        let mut d = CUDA_ARRAY3D_DESCRIPTOR::default();
        // SAFETY: our own export with a valid out-pointer; it looks the handle up.
        cu(unsafe { cuArray3DGetDescriptor_v2(&mut d, a.cast()) })?;
        let row = d.Width * element_bytes(a)?;
        if w >= row.max(1) && n > 0 {
            return Err(cudaError::cudaErrorInvalidValue);
        }
        h.checked_mul(row).and_then(|o| o.checked_add(w)).ok_or(cudaError::cudaErrorInvalidValue)
    };
    let (doff, soff) = (offset(dst, wd, hd)?, offset(src, ws, hs)?);
    // SAFETY: our own exports; they look the handles up.
    cu(unsafe {
        if ns == NullStream::PerThread {
            cuMemcpyAtoA_v2_ptds(dst.cast(), doff, src.cast(), soff, n)
        } else {
            cuMemcpyAtoA_v2(dst.cast(), doff, src.cast(), soff, n)
        }
    })
}

fn get_texture_desc(desc: *mut cudaTextureDesc, t: cudaTextureObject_t) -> Rt<()> {
    if desc.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    let mut d = CUDA_TEXTURE_DESC::default();
    // SAFETY: our own export with a valid out-pointer; it looks the handle up.
    cu(unsafe { cuTexObjectGetTextureDesc(&mut d, t) })?;
    let bit = |b: u32| c_int::from(d.flags & b != 0);
    let read_mode = if d.flags & CU_TRSF_READ_AS_INTEGER != 0 {
        cudaTextureReadMode::cudaReadModeElementType
    } else {
        cudaTextureReadMode::cudaReadModeNormalizedFloat
    };
    out(
        desc,
        cudaTextureDesc {
            addressMode: d.addressMode.map(|m| cudaTextureAddressMode(m.0 as _)),
            filterMode: cudaTextureFilterMode(d.filterMode.0 as _),
            readMode: read_mode,
            sRGB: bit(CU_TRSF_SRGB),
            borderColor: d.borderColor,
            normalizedCoords: bit(CU_TRSF_NORMALIZED_COORDINATES),
            maxAnisotropy: d.maxAnisotropy,
            mipmapFilterMode: cudaTextureFilterMode(d.mipmapFilterMode.0 as _),
            mipmapLevelBias: d.mipmapLevelBias,
            minMipmapLevelClamp: d.minMipmapLevelClamp,
            maxMipmapLevelClamp: d.maxMipmapLevelClamp,
            disableTrilinearOptimization: bit(CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION),
            seamlessCubemap: bit(CU_TRSF_SEAMLESS_CUBEMAP),
        },
    )
}

rt_exports! {
    cudaMallocArray => malloc_array(
        array: *mut cudaArray_t, desc: *const cudaChannelFormatDesc, width: usize, height: usize, flags: c_uint);
    cudaMalloc3DArray => malloc_3d_array(
        array: *mut cudaArray_t, desc: *const cudaChannelFormatDesc, e: cudaExtent, flags: c_uint);
    cudaFreeArray => free_array(array: cudaArray_t);
    cudaArrayGetInfo => array_get_info(
        desc: *mut cudaChannelFormatDesc, extent: *mut cudaExtent, flags: *mut c_uint, a: cudaArray_t);
    cudaCreateTextureObject => create_texture_object(
        tex: *mut cudaTextureObject_t, res: *const cudaResourceDesc12, desc: *const cudaTextureDesc,
        view: *const c_void);
    cudaDestroyTextureObject => destroy_texture_object(t: cudaTextureObject_t);
    cudaGetChannelDesc => get_channel_desc(desc: *mut cudaChannelFormatDesc, a: cudaArray_t);
    cudaMallocMipmappedArray => malloc_mipmapped_array(
        m: *mut cudaMipmappedArray_t, desc: *const cudaChannelFormatDesc, e: cudaExtent, levels: c_uint, flags: c_uint);
    cudaGetMipmappedArrayLevel => get_mipmapped_array_level(
        level_array: *mut cudaArray_t, m: cudaMipmappedArray_t, level: c_uint);
    cudaFreeMipmappedArray => free_mipmapped_array(m: cudaMipmappedArray_t);
    cudaGetTextureObjectResourceDesc => get_resource_desc(res: *mut cudaResourceDesc12, t: cudaTextureObject_t);
    cudaGetTextureObjectTextureDesc => get_texture_desc(desc: *mut cudaTextureDesc, t: cudaTextureObject_t);
    cudaCreateSurfaceObject => create_surface_object(surf: *mut u64, res: *const cudaResourceDesc12);
    cudaDestroySurfaceObject => destroy_surface_object(s: u64);
    cudaGetSurfaceObjectResourceDesc => get_surface_resource_desc(res: *mut cudaResourceDesc12, s: u64);
}

rt_variants! {
    cudaMemcpy2DToArray / cudaMemcpy2DToArray_ptds => memcpy_2d_to_array(
        dst: cudaArray_t, w: usize, h: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: K);
    cudaMemcpy2DToArrayAsync / cudaMemcpy2DToArrayAsync_ptsz => memcpy_2d_to_array_async(
        dst: cudaArray_t, w: usize, h: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: K,
        s: CUstream);
    cudaMemcpy2DFromArray / cudaMemcpy2DFromArray_ptds => memcpy_2d_from_array(
        dst: *mut c_void, dpitch: usize, src: cudaArray_t, w: usize, h: usize, width: usize, height: usize, kind: K);
    cudaMemcpy2DFromArrayAsync / cudaMemcpy2DFromArrayAsync_ptsz => memcpy_2d_from_array_async(
        dst: *mut c_void, dpitch: usize, src: cudaArray_t, w: usize, h: usize, width: usize, height: usize, kind: K,
        s: CUstream);
    cudaMemcpy2DArrayToArray / cudaMemcpy2DArrayToArray_ptds => memcpy_2d_array_to_array(
        dst: cudaArray_t, wd: usize, hd: usize, src: cudaArray_t, ws: usize, hs: usize, width: usize, height: usize,
        kind: K);
    cudaMemcpyToArray / cudaMemcpyToArray_ptds => memcpy_to_array(
        dst: cudaArray_t, w: usize, h: usize, src: *const c_void, n: usize, kind: K);
    cudaMemcpyArrayToArray / cudaMemcpyArrayToArray_ptds => memcpy_array_to_array(
        dst: cudaArray_t, wd: usize, hd: usize, src: cudaArray_t, ws: usize, hs: usize, n: usize, kind: K);
    cudaMemcpyFromArray / cudaMemcpyFromArray_ptds => memcpy_from_array(
        dst: *mut c_void, src: cudaArray_t, w: usize, h: usize, n: usize, kind: K);
}
