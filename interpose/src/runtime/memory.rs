//! Memory: allocation (device, pitched, stream-ordered, page-locked host), the copy and
//! memset families, `__device__` / `__constant__` symbols, pointer attributes. Every
//! allocation is a driver allocation, so the daemon counts it against the tenant's
//! quota before it exists; over the quota is `cudaErrorMemoryAllocation`.
//!
//! `cudaMemcpyDefault` works out each side from where the pointer lives (unified
//! addressing: device allocations of this process are known locally, everything else is
//! host memory). Host-to-host copies are done here, after the stream's earlier work for
//! the async form.

use super::{NullStream, Rt, cu, out, registry, rt_exports, rt_variants, state};
use crate::api::exports::cuStreamSynchronize;
use crate::api::exports::{cuCtxPopCurrent_v2, cuCtxPushCurrent_v2};
use crate::api::exports::{
    cuMemAlloc_v2, cuMemAllocHost_v2, cuMemAllocPitch_v2, cuMemFree_v2, cuMemFreeHost, cuMemGetInfo_v2, cuMemHostAlloc,
    cuMemHostGetDevicePointer_v2, cuMemHostGetFlags, cuPointerGetAttribute,
};
use crate::api::exports::{cuMemAllocAsync, cuMemFreeAsync, cuMemHostRegister_v2, cuMemHostUnregister};
use crate::api::exports::{
    cuMemcpy2D_v2, cuMemcpy2DAsync_v2, cuMemcpyDtoD_v2, cuMemcpyDtoDAsync_v2, cuMemcpyDtoH_v2, cuMemcpyDtoHAsync_v2,
    cuMemcpyHtoD_v2, cuMemcpyHtoDAsync_v2, cuMemcpyPeer, cuMemcpyPeerAsync,
};
use crate::api::exports::{cuMemcpy3D_v2, cuMemcpy3DAsync_v2};
use crate::api::exports::{cuMemsetD2D8_v2, cuMemsetD2D8Async, cuMemsetD8_v2, cuMemsetD8Async};
use gpupool_shim::cuda::{
    CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUcontext, CUdeviceptr, CUmemorytype as MT, CUpointer_attribute as P, CUresult,
    CUstream,
};
use gpupool_shim::cudart::{
    cudaArray_t, cudaError, cudaExtent, cudaMemcpy3DParms, cudaMemcpyKind as K, cudaMemoryType, cudaPitchedPtr,
    cudaPointerAttributes,
};
use std::os::raw::{c_int, c_uint, c_void};

fn malloc(p: *mut *mut c_void, size: usize) -> Rt<()> {
    if p.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    if size == 0 {
        return out(p, std::ptr::null_mut());
    }
    let mut d: CUdeviceptr = 0;
    // SAFETY: our own export with a valid out-pointer.
    cu(unsafe { cuMemAlloc_v2(&mut d, size) })?;
    out(p, d as *mut c_void)
}

/// `cudaFree(NULL)` is the classic way to create the context: it does, and succeeds.
fn free(p: *mut c_void) -> Rt<()> {
    state::context()?;
    if p.is_null() {
        return Ok(());
    }
    // SAFETY: our own export; it checks the pointer is this process's.
    cu(unsafe { cuMemFree_v2(p as CUdeviceptr) }).map_err(|e| match e {
        cudaError::cudaErrorInvalidValue => cudaError::cudaErrorInvalidDevicePointer,
        other => other,
    })
}

fn malloc_host(p: *mut *mut c_void, size: usize) -> Rt<()> {
    if p.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    // SAFETY: our own export with a valid out-pointer.
    cu(unsafe { cuMemAllocHost_v2(p, size) })
}

/// cudaHostAllocPortable / Mapped / WriteCombined are the driver's CU_MEMHOSTALLOC_* bits.
fn host_alloc(p: *mut *mut c_void, size: usize, flags: c_uint) -> Rt<()> {
    if p.is_null() || flags & !0x7 != 0 {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    // SAFETY: our own export with a valid out-pointer.
    cu(unsafe { cuMemHostAlloc(p, size, flags) })
}

fn free_host(p: *mut c_void) -> Rt<()> {
    state::context()?;
    if p.is_null() {
        return Ok(());
    }
    // SAFETY: our own export; it checks the pointer is a page-locked allocation of ours.
    cu(unsafe { cuMemFreeHost(p) })
}

fn malloc_pitch(p: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize) -> Rt<()> {
    if p.is_null() || pitch.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    if width == 0 || height == 0 {
        out(pitch, 0)?;
        return out(p, std::ptr::null_mut());
    }
    let mut d: CUdeviceptr = 0;
    // SAFETY: our own export with valid out-pointers; 16-byte elements give the
    // widest alignment the driver offers.
    cu(unsafe { cuMemAllocPitch_v2(&mut d, pitch, width, height, 16) })?;
    out(p, d as *mut c_void)
}

fn malloc_async(p: *mut *mut c_void, size: usize, stream: CUstream, ns: NullStream) -> Rt<()> {
    if p.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    if size == 0 {
        return out(p, std::ptr::null_mut());
    }
    let mut d: CUdeviceptr = 0;
    // SAFETY: our own export with a valid out-pointer.
    cu(unsafe { cuMemAllocAsync(&mut d, size, ns.resolve(stream)) })?;
    out(p, d as *mut c_void)
}

fn free_async(p: *mut c_void, stream: CUstream, ns: NullStream) -> Rt<()> {
    state::context()?;
    if p.is_null() {
        return Ok(());
    }
    // SAFETY: our own export; it checks the pointer.
    cu(unsafe { cuMemFreeAsync(p as CUdeviceptr, ns.resolve(stream)) })
}

fn mem_get_info(free: *mut usize, total: *mut usize) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; the pool reports the tenant's quota as the total.
    cu(unsafe { cuMemGetInfo_v2(free, total) })
}

fn host_get_device_pointer(d: *mut *mut c_void, host: *mut c_void, flags: c_uint) -> Rt<()> {
    if flags != 0 {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    // SAFETY: our own export; the out-pointer is checked there.
    cu(unsafe { cuMemHostGetDevicePointer_v2(d.cast::<CUdeviceptr>(), host, 0) })
}

fn host_get_flags(flags: *mut c_uint, host: *mut c_void) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export.
    cu(unsafe { cuMemHostGetFlags(flags, host) })
}

fn host_register(p: *mut c_void, size: usize, flags: c_uint) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; cudaHostRegister* flags are CU_MEMHOSTREGISTER_*.
    cu(unsafe { cuMemHostRegister_v2(p, size, flags) })
}

fn host_unregister(p: *mut c_void) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export.
    cu(unsafe { cuMemHostUnregister(p) }).map_err(|e| match e {
        cudaError::cudaErrorInvalidValue => cudaError::cudaErrorHostMemoryNotRegistered,
        other => other,
    })
}

/// Where a pointer lives: a device allocation of this process, page-locked host memory
/// from us, or ordinary (unregistered) host memory.
fn memory_type(p: *const c_void) -> (cudaMemoryType, c_int) {
    let mut t: c_uint = 0;
    // SAFETY: our own export with a valid out-pointer of the attribute's type.
    let r =
        unsafe { cuPointerGetAttribute((&mut t as *mut c_uint).cast(), P::CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p as u64) };
    if r != CUresult::CUDA_SUCCESS {
        return (cudaMemoryType::cudaMemoryTypeUnregistered, -1);
    }
    let mut dev: c_int = 0;
    // SAFETY: as above.
    let _ = unsafe {
        cuPointerGetAttribute((&mut dev as *mut c_int).cast(), P::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p as u64)
    };
    if t == MT::CU_MEMORYTYPE_DEVICE.0 {
        (cudaMemoryType::cudaMemoryTypeDevice, dev)
    } else {
        (cudaMemoryType::cudaMemoryTypeHost, dev)
    }
}

fn is_device(p: *const c_void) -> bool {
    memory_type(p).0 == cudaMemoryType::cudaMemoryTypeDevice
}

/// Unregistered host memory is `cudaMemoryTypeUnregistered` with success (CUDA 11+).
fn pointer_attributes(attr: *mut cudaPointerAttributes, p: *const c_void) -> Rt<()> {
    if attr.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    state::context()?;
    let (t, dev) = memory_type(p);
    let a = match t {
        cudaMemoryType::cudaMemoryTypeDevice => cudaPointerAttributes {
            type_: t,
            device: dev,
            devicePointer: p.cast_mut(),
            hostPointer: std::ptr::null_mut(),
            reserved: [0; 8],
        },
        cudaMemoryType::cudaMemoryTypeHost => cudaPointerAttributes {
            type_: t,
            device: state::current_device()?,
            devicePointer: p.cast_mut(),
            hostPointer: p.cast_mut(),
            reserved: [0; 8],
        },
        _ => cudaPointerAttributes {
            type_: t,
            device: -2,
            devicePointer: std::ptr::null_mut(),
            hostPointer: p.cast_mut(),
            reserved: [0; 8],
        },
    };
    out(attr, a)
}

/// The direction of a copy: explicit, or worked out from the pointers for Default.
pub(super) fn direction(dst: *const c_void, src: *const c_void, kind: K) -> Rt<(bool, bool)> {
    Ok(match kind {
        K::cudaMemcpyHostToHost => (false, false),
        K::cudaMemcpyHostToDevice => (true, false),
        K::cudaMemcpyDeviceToHost => (false, true),
        K::cudaMemcpyDeviceToDevice => (true, true),
        K::cudaMemcpyDefault => (is_device(dst), is_device(src)),
        _ => return Err(cudaError::cudaErrorInvalidMemcpyDirection),
    })
}

/// The context a device pointer of this process was allocated in.
fn owner(p: *const c_void) -> Option<CUcontext> {
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: our own export with a valid out-pointer of the attribute's type.
    let r = unsafe {
        cuPointerGetAttribute((&mut ctx as *mut CUcontext).cast(), P::CU_POINTER_ATTRIBUTE_CONTEXT, p as u64)
    };
    (r == CUresult::CUDA_SUCCESS && !ctx.is_null()).then_some(ctx)
}

/// Every 1D copy: `stream` None is the synchronous form. With unified addressing a
/// device pointer may belong to another device than the current one: the driver path
/// checks pointers against the current context, so such a copy is retried as a peer
/// copy (both ends on devices) or with the pointer's context current for the call.
fn copy(dst: *mut c_void, src: *const c_void, n: usize, kind: K, stream: Option<CUstream>) -> Rt<()> {
    let (d_dev, s_dev) = direction(dst, src, kind)?;
    let current = state::context()?;
    if n == 0 {
        return Ok(());
    }
    match copy_here(dst, src, n, d_dev, s_dev, stream) {
        Err(cudaError::cudaErrorInvalidValue) if d_dev || s_dev => {}
        other => return other,
    }
    let (d_ctx, s_ctx) = (d_dev.then(|| owner(dst)).flatten(), s_dev.then(|| owner(src)).flatten());
    // SAFETY (all): our own exports; pointers as in copy_here.
    match (d_ctx, s_ctx) {
        (Some(dc), Some(sc)) => cu(unsafe {
            match stream {
                None => cuMemcpyPeer(dst as CUdeviceptr, dc, src as CUdeviceptr, sc, n),
                Some(st) => cuMemcpyPeerAsync(dst as CUdeviceptr, dc, src as CUdeviceptr, sc, n, st),
            }
        }),
        (Some(ctx), None) | (None, Some(ctx)) if ctx != current && (d_dev != s_dev) => {
            cu(unsafe { cuCtxPushCurrent_v2(ctx) })?;
            let r = copy_here(dst, src, n, d_dev, s_dev, stream);
            let mut popped: CUcontext = std::ptr::null_mut();
            let _ = unsafe { cuCtxPopCurrent_v2(&mut popped) };
            r
        }
        _ => Err(cudaError::cudaErrorInvalidValue),
    }
}

fn copy_here(
    dst: *mut c_void,
    src: *const c_void,
    n: usize,
    d_dev: bool,
    s_dev: bool,
    stream: Option<CUstream>,
) -> Rt<()> {
    let (d, s) = (dst as CUdeviceptr, src as CUdeviceptr);
    // SAFETY (all arms): our own exports; host pointers are the caller's buffers of `n`
    // bytes per the CUDA contract, device pointers are checked there.
    let r = match (d_dev, s_dev, stream) {
        (false, false, stream) => {
            if let Some(st) = stream {
                cu(unsafe { cuStreamSynchronize(st) })?;
            }
            if dst.is_null() || src.is_null() {
                return Err(cudaError::cudaErrorInvalidValue);
            }
            // SAFETY: two host buffers of `n` bytes per the contract; they may overlap.
            unsafe { std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), n) };
            CUresult::CUDA_SUCCESS
        }
        (true, false, None) => unsafe { cuMemcpyHtoD_v2(d, src, n) },
        (true, false, Some(st)) => unsafe { cuMemcpyHtoDAsync_v2(d, src, n, st) },
        (false, true, None) => unsafe { cuMemcpyDtoH_v2(dst, s, n) },
        (false, true, Some(st)) => unsafe { cuMemcpyDtoHAsync_v2(dst, s, n, st) },
        (true, true, None) => unsafe { cuMemcpyDtoD_v2(d, s, n) },
        (true, true, Some(st)) => unsafe { cuMemcpyDtoDAsync_v2(d, s, n, st) },
    };
    cu(r)
}

fn memcpy(dst: *mut c_void, src: *const c_void, n: usize, kind: K, _ns: NullStream) -> Rt<()> {
    copy(dst, src, n, kind, None)
}

fn memcpy_async(dst: *mut c_void, src: *const c_void, n: usize, kind: K, s: CUstream, ns: NullStream) -> Rt<()> {
    copy(dst, src, n, kind, Some(ns.resolve(s)))
}

/// Between the primary contexts of the two devices (the daemon holds every device of
/// the pool, so a peer copy is one device-to-device copy there).
fn peer(dst: *mut c_void, dd: c_int, src: *const c_void, sd: c_int, n: usize, stream: Option<CUstream>) -> Rt<()> {
    let (dc, sc) = (state::primary(dd)?, state::primary(sd)?);
    state::context()?;
    if n == 0 {
        return Ok(());
    }
    // SAFETY: our own exports; they check each pointer against its context.
    cu(unsafe {
        match stream {
            None => cuMemcpyPeer(dst as CUdeviceptr, dc, src as CUdeviceptr, sc, n),
            Some(st) => cuMemcpyPeerAsync(dst as CUdeviceptr, dc, src as CUdeviceptr, sc, n, st),
        }
    })
}

fn memcpy_peer(dst: *mut c_void, dd: c_int, src: *const c_void, sd: c_int, n: usize) -> Rt<()> {
    peer(dst, dd, src, sd, n, None)
}

fn memcpy_peer_async(dst: *mut c_void, _dd: c_int, src: *const c_void, _sd: c_int, n: usize, s: CUstream) -> Rt<()> {
    copy(dst, src, n, K::cudaMemcpyDeviceToDevice, Some(s))
}

pub(super) fn memory_kind(device: bool) -> MT {
    if device { MT::CU_MEMORYTYPE_DEVICE } else { MT::CU_MEMORYTYPE_HOST }
}

fn copy2d(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: K,
    stream: Option<CUstream>,
) -> Rt<()> {
    let (d_dev, s_dev) = direction(dst, src, kind)?;
    state::context()?;
    if width > dpitch || width > spitch {
        return Err(cudaError::cudaErrorInvalidPitchValue);
    }
    if width == 0 || height == 0 {
        return Ok(());
    }
    let p = CUDA_MEMCPY2D {
        srcMemoryType: memory_kind(s_dev),
        srcHost: src,
        srcDevice: src as CUdeviceptr,
        srcPitch: spitch,
        dstMemoryType: memory_kind(d_dev),
        dstHost: dst,
        dstDevice: dst as CUdeviceptr,
        dstPitch: dpitch,
        WidthInBytes: width,
        Height: height,
        ..Default::default()
    };
    // SAFETY: our own exports with a fully initialised descriptor.
    cu(unsafe {
        match stream {
            None => cuMemcpy2D_v2(&p),
            Some(s) => cuMemcpy2DAsync_v2(&p, s),
        }
    })
}

fn memcpy2d(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: K,
    _ns: NullStream,
) -> Rt<()> {
    copy2d(dst, dpitch, src, spitch, width, height, kind, None)
}

fn memcpy2d_async(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: K,
    s: CUstream,
    ns: NullStream,
) -> Rt<()> {
    copy2d(dst, dpitch, src, spitch, width, height, kind, Some(ns.resolve(s)))
}

/// 3D copies between linear memory (pitched pointers) and CUDA arrays. As NVIDIA documents,
/// positions and the extent's width count an array's elements where an array takes part
/// (bytes for linear memory).
fn copy3d(p: *const cudaMemcpy3DParms, stream: Option<CUstream>) -> Rt<()> {
    let c = params_3d(p)?;
    // SAFETY: our own exports with a fully initialised descriptor.
    cu(unsafe {
        match stream {
            None => cuMemcpy3D_v2(&c),
            Some(s) => cuMemcpy3DAsync_v2(&c, s),
        }
    })
}

/// The driver's descriptor of a runtime 3D copy (also a graph memcpy node's, `super::graph_mem`).
pub(super) fn params_3d(p: *const cudaMemcpy3DParms) -> Rt<CUDA_MEMCPY3D> {
    if p.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    // SAFETY: non-null; the caller passes a cudaMemcpy3DParms.
    let p = unsafe { p.read_unaligned() };
    let (d_dev, s_dev) = direction(p.dstPtr.ptr, p.srcPtr.ptr, p.kind)?;
    state::context()?;
    let elem = |a: cudaArray_t| if a.is_null() { Ok(1) } else { super::array::element_bytes(a) };
    let (se, de) = (elem(p.srcArray)?, elem(p.dstArray)?);
    let width_elem = if p.srcArray.is_null() { de } else { se };
    let bytes = |n: usize, e: usize| n.checked_mul(e).ok_or(cudaError::cudaErrorInvalidValue);
    let end = |a: cudaArray_t, dev: bool| if a.is_null() { memory_kind(dev) } else { MT::CU_MEMORYTYPE_ARRAY };
    let (sp, dp) = (p.srcPtr, p.dstPtr);
    let c = CUDA_MEMCPY3D {
        srcXInBytes: bytes(p.srcPos.x, se)?,
        srcY: p.srcPos.y,
        srcZ: p.srcPos.z,
        srcMemoryType: end(p.srcArray, s_dev),
        srcHost: sp.ptr,
        srcDevice: sp.ptr as CUdeviceptr,
        srcArray: p.srcArray.cast(),
        srcPitch: sp.pitch,
        srcHeight: sp.ysize,
        dstXInBytes: bytes(p.dstPos.x, de)?,
        dstY: p.dstPos.y,
        dstZ: p.dstPos.z,
        dstMemoryType: end(p.dstArray, d_dev),
        dstHost: dp.ptr,
        dstDevice: dp.ptr as CUdeviceptr,
        dstArray: p.dstArray.cast(),
        dstPitch: dp.pitch,
        dstHeight: dp.ysize,
        WidthInBytes: bytes(p.extent.width, width_elem)?,
        Height: p.extent.height,
        Depth: p.extent.depth,
        ..Default::default()
    };
    Ok(c)
}

fn memcpy3d(p: *const cudaMemcpy3DParms, _ns: NullStream) -> Rt<()> {
    copy3d(p, None)
}

fn memcpy3d_async(p: *const cudaMemcpy3DParms, s: CUstream, ns: NullStream) -> Rt<()> {
    copy3d(p, Some(ns.resolve(s)))
}

fn memset(p: *mut c_void, value: c_int, n: usize, _ns: NullStream) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the range.
    cu(unsafe { cuMemsetD8_v2(p as CUdeviceptr, value as u8, n) })
}

fn memset_async(p: *mut c_void, value: c_int, n: usize, s: CUstream, ns: NullStream) -> Rt<()> {
    state::context()?;
    // SAFETY: our own export; it checks the range.
    cu(unsafe { cuMemsetD8Async(p as CUdeviceptr, value as u8, n, ns.resolve(s)) })
}

fn set2d(p: *mut c_void, pitch: usize, value: c_int, w: usize, h: usize, stream: Option<CUstream>) -> Rt<()> {
    state::context()?;
    if w > pitch && h > 1 {
        return Err(cudaError::cudaErrorInvalidPitchValue);
    }
    // SAFETY: our own exports; they check the range.
    cu(unsafe {
        match stream {
            None => cuMemsetD2D8_v2(p as CUdeviceptr, pitch, value as u8, w, h),
            Some(s) => cuMemsetD2D8Async(p as CUdeviceptr, pitch, value as u8, w, h, s),
        }
    })
}

fn memset2d(p: *mut c_void, pitch: usize, value: c_int, w: usize, h: usize, _ns: NullStream) -> Rt<()> {
    set2d(p, pitch, value, w, h, None)
}

fn memset2d_async(
    p: *mut c_void,
    pitch: usize,
    value: c_int,
    w: usize,
    h: usize,
    s: CUstream,
    ns: NullStream,
) -> Rt<()> {
    set2d(p, pitch, value, w, h, Some(ns.resolve(s)))
}

/// A 3D memset is `depth` 2D memsets, one per slice of `pitch * ysize` bytes.
fn set3d(p: cudaPitchedPtr, value: c_int, e: cudaExtent, stream: Option<CUstream>) -> Rt<()> {
    let slice = p.pitch.checked_mul(p.ysize).ok_or(cudaError::cudaErrorInvalidValue)?;
    for z in 0..e.depth {
        let base = (p.ptr as usize).checked_add(z * slice).ok_or(cudaError::cudaErrorInvalidValue)?;
        set2d(base as *mut c_void, p.pitch, value, e.width, e.height, stream)?;
    }
    Ok(())
}

fn memset3d(p: cudaPitchedPtr, value: c_int, e: cudaExtent, _ns: NullStream) -> Rt<()> {
    set3d(p, value, e, None)
}

fn memset3d_async(p: cudaPitchedPtr, value: c_int, e: cudaExtent, s: CUstream, ns: NullStream) -> Rt<()> {
    set3d(p, value, e, Some(ns.resolve(s)))
}

/// The device range of `count` bytes at `offset` into the symbol.
pub(super) fn symbol_range(symbol: *const c_void, count: usize, offset: usize) -> Rt<CUdeviceptr> {
    let (base, size) = registry::symbol(symbol)?;
    if offset.checked_add(count).is_none_or(|end| end > size) {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    Ok(base + offset as u64)
}

fn to_symbol(
    symbol: *const c_void,
    src: *const c_void,
    n: usize,
    offset: usize,
    kind: K,
    s: Option<CUstream>,
) -> Rt<()> {
    let kind = match kind {
        K::cudaMemcpyHostToDevice | K::cudaMemcpyDeviceToDevice | K::cudaMemcpyDefault => kind,
        _ => return Err(cudaError::cudaErrorInvalidMemcpyDirection),
    };
    let d = symbol_range(symbol, n, offset)?;
    copy(d as *mut c_void, src, n, kind, s)
}

fn from_symbol(
    dst: *mut c_void,
    symbol: *const c_void,
    n: usize,
    offset: usize,
    kind: K,
    s: Option<CUstream>,
) -> Rt<()> {
    let kind = match kind {
        K::cudaMemcpyDeviceToHost | K::cudaMemcpyDeviceToDevice | K::cudaMemcpyDefault => kind,
        _ => return Err(cudaError::cudaErrorInvalidMemcpyDirection),
    };
    let sp = symbol_range(symbol, n, offset)?;
    copy(dst, sp as *const c_void, n, kind, s)
}

fn memcpy_to_symbol(
    symbol: *const c_void,
    src: *const c_void,
    n: usize,
    offset: usize,
    kind: K,
    _ns: NullStream,
) -> Rt<()> {
    to_symbol(symbol, src, n, offset, kind, None)
}

fn memcpy_to_symbol_async(
    symbol: *const c_void,
    src: *const c_void,
    n: usize,
    offset: usize,
    kind: K,
    s: CUstream,
    ns: NullStream,
) -> Rt<()> {
    to_symbol(symbol, src, n, offset, kind, Some(ns.resolve(s)))
}

fn memcpy_from_symbol(
    dst: *mut c_void,
    symbol: *const c_void,
    n: usize,
    offset: usize,
    kind: K,
    _ns: NullStream,
) -> Rt<()> {
    from_symbol(dst, symbol, n, offset, kind, None)
}

fn memcpy_from_symbol_async(
    dst: *mut c_void,
    symbol: *const c_void,
    n: usize,
    offset: usize,
    kind: K,
    s: CUstream,
    ns: NullStream,
) -> Rt<()> {
    from_symbol(dst, symbol, n, offset, kind, Some(ns.resolve(s)))
}

fn symbol_address(p: *mut *mut c_void, symbol: *const c_void) -> Rt<()> {
    if p.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    let (base, _) = registry::symbol(symbol)?;
    out(p, base as *mut c_void)
}

fn symbol_size(size: *mut usize, symbol: *const c_void) -> Rt<()> {
    if size.is_null() {
        return Err(cudaError::cudaErrorInvalidValue);
    }
    let (_, n) = registry::symbol(symbol)?;
    out(size, n)
}

rt_exports! {
    cudaMalloc => malloc(p: *mut *mut c_void, size: usize);
    cudaFree => free(p: *mut c_void);
    cudaMallocHost => malloc_host(p: *mut *mut c_void, size: usize);
    cudaHostAlloc => host_alloc(p: *mut *mut c_void, size: usize, flags: c_uint);
    cudaFreeHost => free_host(p: *mut c_void);
    cudaMallocPitch => malloc_pitch(p: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize);
    cudaMemGetInfo => mem_get_info(free: *mut usize, total: *mut usize);
    cudaHostGetDevicePointer => host_get_device_pointer(d: *mut *mut c_void, host: *mut c_void, flags: c_uint);
    cudaHostGetFlags => host_get_flags(flags: *mut c_uint, host: *mut c_void);
    cudaHostRegister => host_register(p: *mut c_void, size: usize, flags: c_uint);
    cudaHostUnregister => host_unregister(p: *mut c_void);
    cudaPointerGetAttributes => pointer_attributes(attr: *mut cudaPointerAttributes, p: *const c_void);
    cudaGetSymbolAddress => symbol_address(p: *mut *mut c_void, symbol: *const c_void);
    cudaGetSymbolSize => symbol_size(size: *mut usize, symbol: *const c_void);
    cudaMemcpyPeer => memcpy_peer(dst: *mut c_void, dd: c_int, src: *const c_void, sd: c_int, n: usize);
    cudaMemcpyPeerAsync => memcpy_peer_async(
        dst: *mut c_void, dd: c_int, src: *const c_void, sd: c_int, n: usize, s: CUstream);
}

rt_variants! {
    cudaMallocAsync / cudaMallocAsync_ptsz => malloc_async(p: *mut *mut c_void, size: usize, stream: CUstream);
    cudaFreeAsync / cudaFreeAsync_ptsz => free_async(p: *mut c_void, stream: CUstream);
    cudaMemcpy / cudaMemcpy_ptds => memcpy(dst: *mut c_void, src: *const c_void, n: usize, kind: K);
    cudaMemcpyAsync / cudaMemcpyAsync_ptsz => memcpy_async(dst: *mut c_void, src: *const c_void, n: usize, kind: K, s: CUstream);
    cudaMemcpy2D / cudaMemcpy2D_ptds => memcpy2d(
        dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: K);
    cudaMemcpy2DAsync / cudaMemcpy2DAsync_ptsz => memcpy2d_async(
        dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: K,
        s: CUstream);
    cudaMemcpy3D / cudaMemcpy3D_ptds => memcpy3d(p: *const cudaMemcpy3DParms);
    cudaMemcpy3DAsync / cudaMemcpy3DAsync_ptsz => memcpy3d_async(p: *const cudaMemcpy3DParms, s: CUstream);
    cudaMemset / cudaMemset_ptds => memset(p: *mut c_void, value: c_int, n: usize);
    cudaMemsetAsync / cudaMemsetAsync_ptsz => memset_async(p: *mut c_void, value: c_int, n: usize, s: CUstream);
    cudaMemset2D / cudaMemset2D_ptds => memset2d(p: *mut c_void, pitch: usize, value: c_int, w: usize, h: usize);
    cudaMemset2DAsync / cudaMemset2DAsync_ptsz => memset2d_async(
        p: *mut c_void, pitch: usize, value: c_int, w: usize, h: usize, s: CUstream);
    cudaMemset3D / cudaMemset3D_ptds => memset3d(p: cudaPitchedPtr, value: c_int, e: cudaExtent);
    cudaMemset3DAsync / cudaMemset3DAsync_ptsz => memset3d_async(p: cudaPitchedPtr, value: c_int, e: cudaExtent, s: CUstream);
    cudaMemcpyToSymbol / cudaMemcpyToSymbol_ptds => memcpy_to_symbol(
        symbol: *const c_void, src: *const c_void, n: usize, offset: usize, kind: K);
    cudaMemcpyToSymbolAsync / cudaMemcpyToSymbolAsync_ptsz => memcpy_to_symbol_async(
        symbol: *const c_void, src: *const c_void, n: usize, offset: usize, kind: K, s: CUstream);
    cudaMemcpyFromSymbol / cudaMemcpyFromSymbol_ptds => memcpy_from_symbol(
        dst: *mut c_void, symbol: *const c_void, n: usize, offset: usize, kind: K);
    cudaMemcpyFromSymbolAsync / cudaMemcpyFromSymbolAsync_ptsz => memcpy_from_symbol_async(
        dst: *mut c_void, symbol: *const c_void, n: usize, offset: usize, kind: K, s: CUstream);
}
