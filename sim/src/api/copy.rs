//! Copies and memsets, every form: 1D, 2D, 3D, peer, unified; synchronous on the
//! default stream of the calling variant, or asynchronous on a stream.
//!
//! A copy's device pointers may belong to any context of the process (unified
//! addressing, see [`Scope`]); a memset's must belong to the current context.
//!
//! Host memory the driver did not allocate (pageable) follows the documented rules:
//! an async copy *from* it is staged before the call returns, an async copy *to* it
//! completes before the call returns. Page-locked memory is used in place, truly
//! asynchronously.

use super::{DefaultStream, read, resolve_stream, stream_variants};
use crate::array::Array;
use crate::context::Context;
use crate::driver::{Driver, initialized};
use crate::error::{CuResult, fail};
use crate::memory::{Allocation, PinnedBlock, window_owner};
use crate::stream::{Stream, Work};
use gpupool_shim::cuda::{
    CUDA_MEMCPY2D, CUDA_MEMCPY3D, CUarray, CUcontext, CUdeviceptr, CUmemorytype, CUresult, CUstream,
};
use std::os::raw::{c_uchar, c_uint, c_ushort, c_void};
use std::sync::Arc;

/// What keeps the bytes of a region alive while queued work uses them.
#[derive(Clone)]
enum Keep {
    Device(#[allow(dead_code)] Arc<Allocation>),
    Pinned(#[allow(dead_code)] Arc<PinnedBlock>),
    Array(#[allow(dead_code)] Arc<Array>),
    Pageable,
}

/// Where a copy reads or writes: the host-visible address of its first byte, and what
/// keeps those bytes alive.
///
/// Jobs reach the address only through [`Region::addr`], a method on the whole value:
/// a closure that read the field directly would capture just that `u64` (closures
/// capture the fields they use), drop `keep` at once, and let a `cuMemFree` right after
/// the call unmap the bytes the queued job then writes.
#[derive(Clone)]
struct Region {
    host_addr: u64,
    keep: Keep,
    /// The address as the application named it (a device pointer, or host memory's own
    /// address); 0 for an array, whose end a captured copy does not describe.
    ptr: u64,
}

impl Region {
    fn addr(&self) -> u64 {
        self.host_addr
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Expect {
    Device,
    Host,
    /// Inferred from the pointer value (unified addressing).
    Either,
}

/// Whose device memory an operand may name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Any context of the process. Copies infer where each pointer lives from its value
    /// under unified addressing (always on in a 64-bit process): "The function cuMemcpy()
    /// may be used to perform a copy between two pointers" (driver API, Unified
    /// Addressing), and between two devices' memories "using the regular memory copy
    /// functions" (Programming Guide, Peer-to-Peer Memory Copy). The copy still runs on
    /// the caller's stream, in the caller's context.
    Process,
    /// Only the given context: memsets (documented for copies only), and each side of
    /// `cuMemcpyPeer`, which names the context of its pointer.
    Context,
}

/// Locates `footprint` bytes at `ptr` for an operation issued in `ctx`.
fn locate(
    driver: &Driver,
    ctx: &Context,
    ptr: u64,
    footprint: u64,
    expect: Expect,
    scope: Scope,
    role: &str,
) -> CuResult<Region> {
    if ptr == 0 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{role} is NULL"));
    }
    if let Some(owner) = window_owner(ptr) {
        if expect == Expect::Host {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("{role} {ptr:#x} is device memory, not host memory")
            });
        }
        let (a, off) = if owner == ctx.handle() {
            ctx.memory.resolve(ptr, footprint, role)?
        } else if scope == Scope::Process {
            let Ok(home) = crate::context::lookup(driver, owner) else {
                return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                    format!("{role} {ptr:#x} belongs to a destroyed context")
                });
            };
            home.memory.resolve(ptr, footprint, role)?
        } else {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{role} {ptr:#x} belongs to another context"));
        };
        let addr = a.host_ptr(off, footprint).map(|p| p as u64).unwrap_or(0);
        return Ok(Region { host_addr: addr, keep: Keep::Device(a), ptr });
    }
    if let Some(b) = driver.pinned.find(ptr) {
        if ptr + footprint > b.addr() + b.len {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("{role}: {footprint} bytes at {ptr:#x} overrun a page-locked block")
            });
        }
        return Ok(Region { host_addr: ptr, keep: Keep::Pinned(b), ptr });
    }
    if expect == Expect::Device {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{role} {ptr:#x} is not device memory"));
    }
    Ok(Region { host_addr: ptr, keep: Keep::Pageable, ptr })
}

/// A (possibly strided, possibly 3D) transfer of `width` x `height` x `depth` bytes.
#[derive(Clone, Copy)]
struct Shape {
    width: u64,
    height: u64,
    depth: u64,
    dst_pitch: u64,
    dst_slice: u64,
    src_pitch: u64,
    src_slice: u64,
}

impl Shape {
    fn linear(n: u64) -> Shape {
        Shape { width: n, height: 1, depth: 1, dst_pitch: n, dst_slice: n, src_pitch: n, src_slice: n }
    }
    fn footprint(width: u64, height: u64, depth: u64, pitch: u64, slice: u64) -> u64 {
        if width == 0 || height == 0 || depth == 0 {
            return 0;
        }
        (depth - 1) * slice + (height - 1) * pitch + width
    }
    fn dst_footprint(&self) -> u64 {
        Self::footprint(self.width, self.height, self.depth, self.dst_pitch, self.dst_slice)
    }
    fn src_footprint(&self) -> u64 {
        Self::footprint(self.width, self.height, self.depth, self.src_pitch, self.src_slice)
    }
    fn is_empty(&self) -> bool {
        self.width == 0 || self.height == 0 || self.depth == 0
    }
}

/// Moves the bytes. Rows may overlap (device-to-device within one allocation), so
/// each row is a memmove.
fn run_copy(dst: u64, src: u64, s: &Shape) {
    for z in 0..s.depth {
        for y in 0..s.height {
            let d = dst + z * s.dst_slice + y * s.dst_pitch;
            let r = src + z * s.src_slice + y * s.src_pitch;
            // SAFETY: both footprints were validated against live allocations (or
            // belong to the application's host memory, per the CUDA contract), and
            // the regions are kept alive by the job that runs this.
            unsafe { std::ptr::copy(r as *const u8, d as *mut u8, s.width as usize) };
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Sync,
    Async,
}

/// A captured copy's parameters, as `cuGraphMemcpyNodeGetParams` answers them: each end's memory
/// type and address as the application named it, its pitch and slice height (in rows). A copy
/// to or from an array is kept without them (the simulator's array ends carry no handle).
fn captured_params(dst: &Region, src: &Region, s: &Shape) -> Option<CUDA_MEMCPY3D> {
    let end = |r: &Region| match r.keep {
        Keep::Device(_) => Some(CUmemorytype::CU_MEMORYTYPE_DEVICE),
        Keep::Pinned(_) | Keep::Pageable => Some(CUmemorytype::CU_MEMORYTYPE_HOST),
        Keep::Array(_) => None,
    };
    let rows = |pitch: u64, slice: u64| slice.checked_div(pitch).map_or(1, |r| r as usize);
    Some(CUDA_MEMCPY3D {
        srcMemoryType: end(src)?,
        srcHost: src.ptr as *const c_void,
        srcDevice: src.ptr,
        srcPitch: s.src_pitch as usize,
        srcHeight: rows(s.src_pitch, s.src_slice),
        dstMemoryType: end(dst)?,
        dstHost: dst.ptr as *mut c_void,
        dstDevice: dst.ptr,
        dstPitch: s.dst_pitch as usize,
        dstHeight: rows(s.dst_pitch, s.dst_slice),
        WidthInBytes: s.width as usize,
        Height: s.height as usize,
        Depth: s.depth as usize,
        ..Default::default()
    })
}

fn submit_copy(
    ctx: &Arc<Context>,
    stream: &Arc<Stream>,
    dst: Region,
    src: Region,
    shape: Shape,
    mode: Mode,
) -> CuResult<()> {
    ctx.check_sticky()?;
    if shape.is_empty() {
        return Ok(());
    }
    let must_wait = mode == Mode::Sync || matches!(dst.keep, Keep::Pageable);
    if must_wait {
        stream.refuse_if_capturing("a synchronous copy")?;
    }
    // A captured copy reads the host buffer each time the graph runs, so it is not
    // staged at capture time.
    let stage = !must_wait && matches!(src.keep, Keep::Pageable) && !stream.is_capturing();
    let params = captured_params(&dst, &src, &shape);
    let job: crate::stream::Job = if stage {
        // Stage the source now: the application may reuse its buffer when we return.
        let mut staged = vec![0u8; (shape.width * shape.height * shape.depth) as usize];
        let packed = Shape { dst_pitch: shape.width, dst_slice: shape.width * shape.height, ..shape };
        run_copy(staged.as_mut_ptr() as u64, src.addr(), &packed);
        let from = Shape { src_pitch: shape.width, src_slice: shape.width * shape.height, ..shape };
        std::sync::Arc::new(move || {
            run_copy(dst.addr(), staged.as_ptr() as u64, &from);
            Ok(())
        })
    } else {
        std::sync::Arc::new(move || {
            run_copy(dst.addr(), src.addr(), &shape);
            Ok(())
        })
    };
    let node = |j| match params {
        Some(p) => crate::graph::Op::Memcpy(Arc::new(crate::graph::MemcpyParams(p)), j),
        None => crate::graph::Op::Captured(Work::Memory, j),
    };
    if must_wait {
        stream.run_sync(ctx, Work::Memory, job, node);
        if mode == Mode::Sync {
            // A blocking copy writes what kernels printed ([`crate::printf`]).
            ctx.printf.flush();
        }
        ctx.check_sticky()?;
    } else {
        stream.enqueue_node(ctx, Work::Memory, Vec::new(), job, node);
    }
    Ok(())
}

fn linear(
    dst: u64,
    dst_kind: Expect,
    src: u64,
    src_kind: Expect,
    n: usize,
    stream: CUstream,
    d: DefaultStream,
    mode: Mode,
) -> CuResult<()> {
    let driver = initialized()?;
    let (ctx, s) = resolve_stream(driver, stream, d)?;
    if n == 0 {
        return ctx.check_sticky();
    }
    let graph_memory = |p: u64, kind: Expect| kind != Expect::Host && crate::graph_mem::holds(p, 1);
    if mode == Mode::Async && s.is_capturing() && (graph_memory(dst, dst_kind) || graph_memory(src, src_kind)) {
        // Graph memory (an allocation node's address) is allocated when its graph runs: the
        // copy is a memcpy node checked then, as a memcpy node added by hand is.
        let end = |p: u64, kind: Expect, what: &str| -> CuResult<CUmemorytype> {
            if graph_memory(p, kind) {
                return Ok(CUmemorytype::CU_MEMORYTYPE_DEVICE);
            }
            Ok(match locate(driver, &ctx, p, n as u64, kind, Scope::Process, what)?.keep {
                Keep::Device(_) | Keep::Array(_) => CUmemorytype::CU_MEMORYTYPE_DEVICE,
                Keep::Pinned(_) | Keep::Pageable => CUmemorytype::CU_MEMORYTYPE_HOST,
            })
        };
        let params = CUDA_MEMCPY3D {
            srcMemoryType: end(src, src_kind, "source")?,
            srcHost: src as *const c_void,
            srcDevice: src,
            dstMemoryType: end(dst, dst_kind, "destination")?,
            dstHost: dst as *mut c_void,
            dstDevice: dst,
            WidthInBytes: n,
            Height: 1,
            Depth: 1,
            ..Default::default()
        };
        ctx.check_sticky()?;
        let job = super::graph::memcpy_node_job(&ctx, &params)?;
        let node = |j| crate::graph::Op::Memcpy(Arc::new(crate::graph::MemcpyParams(params)), j);
        s.enqueue_node(&ctx, Work::Memory, Vec::new(), job, node);
        return Ok(());
    }
    let dst = locate(driver, &ctx, dst, n as u64, dst_kind, Scope::Process, "destination")?;
    let src = locate(driver, &ctx, src, n as u64, src_kind, Scope::Process, "source")?;
    submit_copy(&ctx, &s, dst, src, Shape::linear(n as u64), mode)
}

fn memcpy(dst: CUdeviceptr, src: CUdeviceptr, n: usize, d: DefaultStream) -> CuResult<()> {
    linear(dst, Expect::Either, src, Expect::Either, n, std::ptr::null_mut(), d, Mode::Sync)
}
fn memcpy_async(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream, d: DefaultStream) -> CuResult<()> {
    linear(dst, Expect::Either, src, Expect::Either, n, s, d, Mode::Async)
}
fn htod(dst: CUdeviceptr, src: *const c_void, n: usize, d: DefaultStream) -> CuResult<()> {
    linear(dst, Expect::Device, src as u64, Expect::Host, n, std::ptr::null_mut(), d, Mode::Sync)
}
fn htod_async(dst: CUdeviceptr, src: *const c_void, n: usize, s: CUstream, d: DefaultStream) -> CuResult<()> {
    linear(dst, Expect::Device, src as u64, Expect::Host, n, s, d, Mode::Async)
}
fn dtoh(dst: *mut c_void, src: CUdeviceptr, n: usize, d: DefaultStream) -> CuResult<()> {
    linear(dst as u64, Expect::Host, src, Expect::Device, n, std::ptr::null_mut(), d, Mode::Sync)
}
fn dtoh_async(dst: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream, d: DefaultStream) -> CuResult<()> {
    linear(dst as u64, Expect::Host, src, Expect::Device, n, s, d, Mode::Async)
}
fn dtod(dst: CUdeviceptr, src: CUdeviceptr, n: usize, d: DefaultStream) -> CuResult<()> {
    linear(dst, Expect::Device, src, Expect::Device, n, std::ptr::null_mut(), d, Mode::Sync)
}
fn dtod_async(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream, d: DefaultStream) -> CuResult<()> {
    linear(dst, Expect::Device, src, Expect::Device, n, s, d, Mode::Async)
}

fn peer_impl(
    dst: CUdeviceptr,
    dctx: CUcontext,
    src: CUdeviceptr,
    sctx: CUcontext,
    n: usize,
    stream: CUstream,
    d: DefaultStream,
    mode: Mode,
) -> CuResult<()> {
    let driver = initialized()?;
    let dctx = crate::context::lookup(driver, dctx as u64)?;
    let sctx = crate::context::lookup(driver, sctx as u64)?;
    let (ctx, s) = resolve_stream(driver, stream, d)?;
    if n == 0 {
        return Ok(());
    }
    let dst = locate(driver, &dctx, dst, n as u64, Expect::Device, Scope::Context, "destination")?;
    let src = locate(driver, &sctx, src, n as u64, Expect::Device, Scope::Context, "source")?;
    submit_copy(&ctx, &s, dst, src, Shape::linear(n as u64), mode)
}
fn peer(
    dst: CUdeviceptr,
    dctx: CUcontext,
    src: CUdeviceptr,
    sctx: CUcontext,
    n: usize,
    d: DefaultStream,
) -> CuResult<()> {
    peer_impl(dst, dctx, src, sctx, n, std::ptr::null_mut(), d, Mode::Sync)
}
fn peer_async(
    dst: CUdeviceptr,
    dctx: CUcontext,
    src: CUdeviceptr,
    sctx: CUcontext,
    n: usize,
    s: CUstream,
    d: DefaultStream,
) -> CuResult<()> {
    peer_impl(dst, dctx, src, sctx, n, s, d, Mode::Async)
}

fn expect_of(t: CUmemorytype) -> CuResult<Expect> {
    match t {
        CUmemorytype::CU_MEMORYTYPE_HOST => Ok(Expect::Host),
        CUmemorytype::CU_MEMORYTYPE_DEVICE => Ok(Expect::Device),
        CUmemorytype::CU_MEMORYTYPE_UNIFIED => Ok(Expect::Either),
        other => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown memory type {}", other.0)),
    }
}

/// One side of a 2D/3D copy: its address, kind and pitches; for an array side, the
/// array and the (x bytes, y, z) origin of the box.
struct Side {
    addr: u64,
    expect: Expect,
    pitch: u64,
    slice: u64,
    array: Option<(Arc<Array>, [u64; 3])>,
}

#[allow(clippy::too_many_arguments)]
fn side(
    t: CUmemorytype,
    host: u64,
    device: u64,
    array: CUarray,
    x: u64,
    y: u64,
    z: u64,
    pitch: u64,
    height: u64,
    width: u64,
) -> CuResult<Side> {
    if t == CUmemorytype::CU_MEMORYTYPE_ARRAY {
        // The array's own layout replaces the pitches (CUDA ignores them for arrays).
        let a = super::array::lookup(initialized()?, array)?;
        let (pitch, slice) = (a.extent.row_bytes(), a.slice_bytes());
        let addr = a.host_addr(0, 0, 0);
        return Ok(Side { addr, expect: Expect::Device, pitch, slice, array: Some((a, [x, y, z])) });
    }
    let expect = expect_of(t)?;
    let pitch = if pitch == 0 { width } else { pitch };
    let base = if expect == Expect::Host { host } else { device };
    if base == 0 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "NULL source or destination".into());
    }
    let slice = pitch * height;
    Ok(Side { addr: base + z * slice + y * pitch + x, expect, pitch, slice, array: None })
}

fn strided(
    dst: Side,
    src: Side,
    width: u64,
    height: u64,
    depth: u64,
    stream: CUstream,
    d: DefaultStream,
    mode: Mode,
) -> CuResult<()> {
    let driver = initialized()?;
    let (ctx, s) = resolve_stream(driver, stream, d)?;
    match regions(driver, &ctx, dst, src, width, height, depth)? {
        Some((dr, sr, shape)) => submit_copy(&ctx, &s, dr, sr, shape, mode),
        None => ctx.check_sticky(),
    }
}

/// The memory a strided copy reads and writes, checked against its allocations (or arrays), and
/// its shape; `None`: an empty copy.
fn regions(
    driver: &crate::driver::Driver,
    ctx: &Arc<Context>,
    dst: Side,
    src: Side,
    width: u64,
    height: u64,
    depth: u64,
) -> CuResult<Option<(Region, Region, Shape)>> {
    if (height > 1 || depth > 1) && (dst.pitch < width || src.pitch < width) {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("pitch smaller than the width {width}"));
    }
    let shape = Shape {
        width,
        height,
        depth,
        dst_pitch: dst.pitch,
        dst_slice: dst.slice,
        src_pitch: src.pitch,
        src_slice: src.slice,
    };
    if shape.is_empty() {
        return Ok(None);
    }
    let place = |side: Side, footprint: u64, role: &str| match side.array {
        Some((a, [x, y, z])) => {
            a.check_box(x, y, z, width, height, depth, role)?;
            Ok(Region { host_addr: a.host_addr(x, y, z), keep: Keep::Array(a), ptr: 0 })
        }
        None => locate(driver, ctx, side.addr, footprint, side.expect, Scope::Process, role),
    };
    let dr = place(dst, shape.dst_footprint(), "destination")?;
    let sr = place(src, shape.src_footprint(), "source")?;
    Ok(Some((dr, sr, shape)))
}

fn copy2d_impl(p: *const CUDA_MEMCPY2D, stream: CUstream, d: DefaultStream, mode: Mode) -> CuResult<()> {
    let c = read(p, "CUDA_MEMCPY2D")?;
    let (w, h) = (c.WidthInBytes as u64, c.Height as u64);
    let src = side(
        c.srcMemoryType,
        c.srcHost as u64,
        c.srcDevice,
        c.srcArray,
        c.srcXInBytes as u64,
        c.srcY as u64,
        0,
        c.srcPitch as u64,
        h,
        w,
    )?;
    let dst = side(
        c.dstMemoryType,
        c.dstHost as u64,
        c.dstDevice,
        c.dstArray,
        c.dstXInBytes as u64,
        c.dstY as u64,
        0,
        c.dstPitch as u64,
        h,
        w,
    )?;
    strided(dst, src, w, h, 1, stream, d, mode)
}
fn copy2d(p: *const CUDA_MEMCPY2D, d: DefaultStream) -> CuResult<()> {
    copy2d_impl(p, std::ptr::null_mut(), d, Mode::Sync)
}
fn copy2d_async(p: *const CUDA_MEMCPY2D, s: CUstream, d: DefaultStream) -> CuResult<()> {
    copy2d_impl(p, s, d, Mode::Async)
}

fn copy3d_impl(p: *const CUDA_MEMCPY3D, stream: CUstream, d: DefaultStream, mode: Mode) -> CuResult<()> {
    let c = read(p, "CUDA_MEMCPY3D")?;
    let (dst, src, [w, h, depth]) = sides3d(&c)?;
    strided(dst, src, w, h, depth, stream, d, mode)
}

/// The two ends and the extent of a 3D copy, checked as `cuMemcpy3D` checks them.
fn sides3d(c: &CUDA_MEMCPY3D) -> CuResult<(Side, Side, [u64; 3])> {
    if c.srcLOD != 0 || c.dstLOD != 0 || !c.reserved0.is_null() || !c.reserved1.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "LOD and reserved fields must be 0".into());
    }
    let (w, h, depth) = (c.WidthInBytes as u64, c.Height as u64, c.Depth as u64);
    let sh = if c.srcHeight == 0 { h } else { c.srcHeight as u64 };
    let dh = if c.dstHeight == 0 { h } else { c.dstHeight as u64 };
    if depth > 1 && (sh < h || dh < h) {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "srcHeight/dstHeight smaller than Height".into());
    }
    let src = side(
        c.srcMemoryType,
        c.srcHost as u64,
        c.srcDevice,
        c.srcArray,
        c.srcXInBytes as u64,
        c.srcY as u64,
        c.srcZ as u64,
        c.srcPitch as u64,
        sh,
        w,
    )?;
    let dst = side(
        c.dstMemoryType,
        c.dstHost as u64,
        c.dstDevice,
        c.dstArray,
        c.dstXInBytes as u64,
        c.dstY as u64,
        c.dstZ as u64,
        c.dstPitch as u64,
        dh,
        w,
    )?;
    Ok((dst, src, [w, h, depth]))
}

/// A graph memcpy node's job: the copy `c` describes, checked as `cuMemcpy3D` checks it in `ctx`,
/// done each time the graph runs (host memory is read or written then, as by a captured copy);
/// `None`: an empty copy.
pub(crate) fn memcpy_node_job(ctx: &Arc<Context>, c: &CUDA_MEMCPY3D) -> CuResult<Option<crate::stream::Job>> {
    let driver = initialized()?;
    let (dst, src, [width, height, depth]) = sides3d(c)?;
    let Some((dr, sr, shape)) = regions(driver, ctx, dst, src, width, height, depth)? else {
        return Ok(None);
    };
    Ok(Some(std::sync::Arc::new(move || {
        run_copy(dr.addr(), sr.addr(), &shape);
        Ok(())
    })))
}
fn copy3d(p: *const CUDA_MEMCPY3D, d: DefaultStream) -> CuResult<()> {
    copy3d_impl(p, std::ptr::null_mut(), d, Mode::Sync)
}
fn copy3d_async(p: *const CUDA_MEMCPY3D, s: CUstream, d: DefaultStream) -> CuResult<()> {
    copy3d_impl(p, s, d, Mode::Async)
}

/// `cuMemcpyHtoA` / `cuMemcpyAtoH`: `n` bytes at byte `offset` of an array, its rows
/// taken one after another (CUDA documents these for 1D arrays, where that is exact).
/// One end of a 1D copy with an array at one or both ends (`cuMemcpyHtoA`, `AtoH`, `AtoD`,
/// `DtoA`, `AtoA` and the async forms): an array and a byte offset into its rows taken one
/// after another (CUDA's own reading of the offset), or a linear pointer.
#[derive(Clone, Copy)]
enum End1 {
    Array(CUarray, usize),
    Memory(u64, Expect),
}

#[allow(clippy::too_many_arguments)]
fn array_linear(dst: End1, src: End1, n: usize, stream: CUstream, d: DefaultStream, mode: Mode) -> CuResult<()> {
    let driver = initialized()?;
    let (ctx, s) = resolve_stream(driver, stream, d)?;
    let n = n as u64;
    let region = |e: End1, role: &str| -> CuResult<Region> {
        match e {
            End1::Array(array, offset) => {
                let a = super::array::lookup(driver, array)?;
                let offset = offset as u64;
                if offset.checked_add(n).is_none_or(|end| end > a.extent.bytes()) {
                    return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                        format!("{role}: {n} bytes at offset {offset} run past the array's {} bytes", a.extent.bytes())
                    });
                }
                Ok(Region { host_addr: a.host_addr(0, 0, 0) + offset, keep: Keep::Array(a), ptr: 0 })
            }
            End1::Memory(p, Expect::Host) => locate(driver, &ctx, p, n, Expect::Host, Scope::Process, role),
            End1::Memory(p, expect) => locate(driver, &ctx, p, n, expect, Scope::Process, role),
        }
    };
    let (dst, src) = (region(dst, "destination")?, region(src, "source")?);
    if n == 0 {
        return ctx.check_sticky();
    }
    submit_copy(&ctx, &s, dst, src, Shape::linear(n), mode)
}
fn sync_1d(dst: End1, src: End1, n: usize, d: DefaultStream) -> CuResult<()> {
    array_linear(dst, src, n, std::ptr::null_mut(), d, Mode::Sync)
}
fn htoa(dst: CUarray, off: usize, src: *const c_void, n: usize, d: DefaultStream) -> CuResult<()> {
    sync_1d(End1::Array(dst, off), End1::Memory(src as u64, Expect::Host), n, d)
}
fn atoh(dst: *mut c_void, src: CUarray, off: usize, n: usize, d: DefaultStream) -> CuResult<()> {
    sync_1d(End1::Memory(dst as u64, Expect::Host), End1::Array(src, off), n, d)
}
fn htoa_async(dst: CUarray, off: usize, src: *const c_void, n: usize, s: CUstream, d: DefaultStream) -> CuResult<()> {
    array_linear(End1::Array(dst, off), End1::Memory(src as u64, Expect::Host), n, s, d, Mode::Async)
}
fn atoh_async(dst: *mut c_void, src: CUarray, off: usize, n: usize, s: CUstream, d: DefaultStream) -> CuResult<()> {
    array_linear(End1::Memory(dst as u64, Expect::Host), End1::Array(src, off), n, s, d, Mode::Async)
}
fn atod(dst: CUdeviceptr, src: CUarray, off: usize, n: usize, d: DefaultStream) -> CuResult<()> {
    sync_1d(End1::Memory(dst, Expect::Device), End1::Array(src, off), n, d)
}
fn dtoa(dst: CUarray, off: usize, src: CUdeviceptr, n: usize, d: DefaultStream) -> CuResult<()> {
    sync_1d(End1::Array(dst, off), End1::Memory(src, Expect::Device), n, d)
}
fn atoa(dst: CUarray, doff: usize, src: CUarray, soff: usize, n: usize, d: DefaultStream) -> CuResult<()> {
    sync_1d(End1::Array(dst, doff), End1::Array(src, soff), n, d)
}

/// Checks a memset of `width` elements of `elem` bytes in `height` rows `pitch` apart and makes
/// the job that does it (a stream runs it, or a graph's memset node at each launch); `None`: an
/// empty memset.
#[allow(clippy::too_many_arguments)]
pub(crate) fn memset_job(
    ctx: &crate::context::Context,
    dst: CUdeviceptr,
    pitch: usize,
    value: u32,
    elem: u64,
    width: usize,
    height: usize,
) -> CuResult<Option<crate::stream::Job>> {
    let driver = initialized()?;
    let (width, height) = (width as u64, height as u64);
    let row = width * elem;
    let pitch = if height <= 1 { row } else { pitch as u64 };
    if height > 1 && pitch < row {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("pitch {pitch} smaller than the row of {row} bytes")
        });
    }
    if !dst.is_multiple_of(elem) || (height > 1 && pitch % elem != 0) {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("{dst:#x} is not aligned to the {elem}-byte element")
        });
    }
    if row == 0 || height == 0 {
        return Ok(None);
    }
    let footprint = Shape::footprint(row, height, 1, pitch, 0);
    let region = locate(driver, ctx, dst, footprint, Expect::Device, Scope::Context, "memset destination")?;
    Ok(Some(std::sync::Arc::new(move || {
        let base = region.addr();
        for y in 0..height {
            let p = base + y * pitch;
            // SAFETY: the footprint was validated against a live allocation, which
            // `region` keeps alive; elements are written unaligned-safe.
            unsafe {
                match elem {
                    1 => std::ptr::write_bytes(p as *mut u8, value as u8, width as usize),
                    2 => (0..width).for_each(|i| ((p + 2 * i) as *mut u16).write_unaligned(value as u16)),
                    _ => (0..width).for_each(|i| ((p + 4 * i) as *mut u32).write_unaligned(value)),
                }
            }
        }
        Ok(())
    })))
}

/// Fills `width` elements of `elem` bytes in each of `height` rows `pitch` apart.
fn memset_impl(
    dst: CUdeviceptr,
    pitch: usize,
    value: u32,
    elem: u64,
    width: usize,
    height: usize,
    stream: CUstream,
    d: DefaultStream,
    mode: Mode,
) -> CuResult<()> {
    let driver = initialized()?;
    let (ctx, s) = resolve_stream(driver, stream, d)?;
    ctx.check_sticky()?;
    let params = crate::graph::MemsetParams {
        dst,
        pitch: if height > 1 { pitch } else { 0 },
        value,
        elementSize: elem as u32,
        width,
        height,
    };
    let in_graph_memory = crate::graph_mem::holds(dst, 1);
    let job = if mode == Mode::Async && in_graph_memory && s.is_capturing() {
        // Graph memory is allocated when its graph runs: checked then, as a memset node's is.
        super::graph::memset_node_job(&ctx, &params)?
    } else {
        match memset_job(&ctx, dst, pitch, value, elem, width, height)? {
            Some(job) => job,
            None => return Ok(()),
        }
    };
    if mode == Mode::Sync {
        s.refuse_if_capturing("a synchronous memset")?;
    }
    let seq = s.enqueue_node(&ctx, Work::Memory, Vec::new(), job, |j| crate::graph::Op::Memset(params, j));
    if mode == Mode::Sync {
        s.wait_for(seq);
        ctx.check_sticky()?;
    }
    Ok(())
}

fn d8(p: CUdeviceptr, v: c_uchar, n: usize, d: DefaultStream) -> CuResult<()> {
    memset_impl(p, 0, v as u32, 1, n, 1, std::ptr::null_mut(), d, Mode::Sync)
}
fn d16(p: CUdeviceptr, v: c_ushort, n: usize, d: DefaultStream) -> CuResult<()> {
    memset_impl(p, 0, v as u32, 2, n, 1, std::ptr::null_mut(), d, Mode::Sync)
}
fn d32(p: CUdeviceptr, v: c_uint, n: usize, d: DefaultStream) -> CuResult<()> {
    memset_impl(p, 0, v, 4, n, 1, std::ptr::null_mut(), d, Mode::Sync)
}
fn d2d8(p: CUdeviceptr, pitch: usize, v: c_uchar, w: usize, h: usize, d: DefaultStream) -> CuResult<()> {
    memset_impl(p, pitch, v as u32, 1, w, h, std::ptr::null_mut(), d, Mode::Sync)
}
fn d2d16(p: CUdeviceptr, pitch: usize, v: c_ushort, w: usize, h: usize, d: DefaultStream) -> CuResult<()> {
    memset_impl(p, pitch, v as u32, 2, w, h, std::ptr::null_mut(), d, Mode::Sync)
}
fn d2d32(p: CUdeviceptr, pitch: usize, v: c_uint, w: usize, h: usize, d: DefaultStream) -> CuResult<()> {
    memset_impl(p, pitch, v, 4, w, h, std::ptr::null_mut(), d, Mode::Sync)
}
fn d8_async(p: CUdeviceptr, v: c_uchar, n: usize, s: CUstream, d: DefaultStream) -> CuResult<()> {
    memset_impl(p, 0, v as u32, 1, n, 1, s, d, Mode::Async)
}
fn d16_async(p: CUdeviceptr, v: c_ushort, n: usize, s: CUstream, d: DefaultStream) -> CuResult<()> {
    memset_impl(p, 0, v as u32, 2, n, 1, s, d, Mode::Async)
}
fn d32_async(p: CUdeviceptr, v: c_uint, n: usize, s: CUstream, d: DefaultStream) -> CuResult<()> {
    memset_impl(p, 0, v, 4, n, 1, s, d, Mode::Async)
}
fn d2d8_async(
    p: CUdeviceptr,
    pitch: usize,
    v: c_uchar,
    w: usize,
    h: usize,
    s: CUstream,
    d: DefaultStream,
) -> CuResult<()> {
    memset_impl(p, pitch, v as u32, 1, w, h, s, d, Mode::Async)
}
fn d2d16_async(
    p: CUdeviceptr,
    pitch: usize,
    v: c_ushort,
    w: usize,
    h: usize,
    s: CUstream,
    d: DefaultStream,
) -> CuResult<()> {
    memset_impl(p, pitch, v as u32, 2, w, h, s, d, Mode::Async)
}
fn d2d32_async(
    p: CUdeviceptr,
    pitch: usize,
    v: c_uint,
    w: usize,
    h: usize,
    s: CUstream,
    d: DefaultStream,
) -> CuResult<()> {
    memset_impl(p, pitch, v, 4, w, h, s, d, Mode::Async)
}

stream_variants! {
    cuMemcpy / cuMemcpy_ptds => memcpy(dst: CUdeviceptr, src: CUdeviceptr, n: usize);
    cuMemcpyAsync / cuMemcpyAsync_ptsz => memcpy_async(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream);
    cuMemcpyHtoD_v2 / cuMemcpyHtoD_v2_ptds => htod(dst: CUdeviceptr, src: *const c_void, n: usize);
    cuMemcpyHtoDAsync_v2 / cuMemcpyHtoDAsync_v2_ptsz => htod_async(dst: CUdeviceptr, src: *const c_void, n: usize, s: CUstream);
    cuMemcpyDtoH_v2 / cuMemcpyDtoH_v2_ptds => dtoh(dst: *mut c_void, src: CUdeviceptr, n: usize);
    cuMemcpyDtoHAsync_v2 / cuMemcpyDtoHAsync_v2_ptsz => dtoh_async(dst: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream);
    cuMemcpyDtoD_v2 / cuMemcpyDtoD_v2_ptds => dtod(dst: CUdeviceptr, src: CUdeviceptr, n: usize);
    cuMemcpyDtoDAsync_v2 / cuMemcpyDtoDAsync_v2_ptsz => dtod_async(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream);
    cuMemcpyPeer / cuMemcpyPeer_ptds => peer(dst: CUdeviceptr, dctx: CUcontext, src: CUdeviceptr, sctx: CUcontext, n: usize);
    cuMemcpyPeerAsync / cuMemcpyPeerAsync_ptsz => peer_async(dst: CUdeviceptr, dctx: CUcontext, src: CUdeviceptr, sctx: CUcontext, n: usize, s: CUstream);
    cuMemcpyHtoA_v2 / cuMemcpyHtoA_v2_ptds => htoa(dst: CUarray, off: usize, src: *const c_void, n: usize);
    cuMemcpyAtoH_v2 / cuMemcpyAtoH_v2_ptds => atoh(dst: *mut c_void, src: CUarray, off: usize, n: usize);
    cuMemcpyHtoAAsync_v2 / cuMemcpyHtoAAsync_v2_ptsz => htoa_async(dst: CUarray, off: usize, src: *const c_void, n: usize, s: CUstream);
    cuMemcpyAtoHAsync_v2 / cuMemcpyAtoHAsync_v2_ptsz => atoh_async(dst: *mut c_void, src: CUarray, off: usize, n: usize, s: CUstream);
    cuMemcpyAtoD_v2 / cuMemcpyAtoD_v2_ptds => atod(dst: CUdeviceptr, src: CUarray, off: usize, n: usize);
    cuMemcpyDtoA_v2 / cuMemcpyDtoA_v2_ptds => dtoa(dst: CUarray, off: usize, src: CUdeviceptr, n: usize);
    cuMemcpyAtoA_v2 / cuMemcpyAtoA_v2_ptds => atoa(dst: CUarray, doff: usize, src: CUarray, soff: usize, n: usize);
    cuMemcpy2D_v2 / cuMemcpy2D_v2_ptds => copy2d(p: *const CUDA_MEMCPY2D);
    cuMemcpy2DUnaligned_v2 / cuMemcpy2DUnaligned_v2_ptds => copy2d(p: *const CUDA_MEMCPY2D);
    cuMemcpy2DAsync_v2 / cuMemcpy2DAsync_v2_ptsz => copy2d_async(p: *const CUDA_MEMCPY2D, s: CUstream);
    cuMemcpy3D_v2 / cuMemcpy3D_v2_ptds => copy3d(p: *const CUDA_MEMCPY3D);
    cuMemcpy3DAsync_v2 / cuMemcpy3DAsync_v2_ptsz => copy3d_async(p: *const CUDA_MEMCPY3D, s: CUstream);
    cuMemsetD8_v2 / cuMemsetD8_v2_ptds => d8(p: CUdeviceptr, v: c_uchar, n: usize);
    cuMemsetD16_v2 / cuMemsetD16_v2_ptds => d16(p: CUdeviceptr, v: c_ushort, n: usize);
    cuMemsetD32_v2 / cuMemsetD32_v2_ptds => d32(p: CUdeviceptr, v: c_uint, n: usize);
    cuMemsetD2D8_v2 / cuMemsetD2D8_v2_ptds => d2d8(p: CUdeviceptr, pitch: usize, v: c_uchar, w: usize, h: usize);
    cuMemsetD2D16_v2 / cuMemsetD2D16_v2_ptds => d2d16(p: CUdeviceptr, pitch: usize, v: c_ushort, w: usize, h: usize);
    cuMemsetD2D32_v2 / cuMemsetD2D32_v2_ptds => d2d32(p: CUdeviceptr, pitch: usize, v: c_uint, w: usize, h: usize);
    cuMemsetD8Async / cuMemsetD8Async_ptsz => d8_async(p: CUdeviceptr, v: c_uchar, n: usize, s: CUstream);
    cuMemsetD16Async / cuMemsetD16Async_ptsz => d16_async(p: CUdeviceptr, v: c_ushort, n: usize, s: CUstream);
    cuMemsetD32Async / cuMemsetD32Async_ptsz => d32_async(p: CUdeviceptr, v: c_uint, n: usize, s: CUstream);
    cuMemsetD2D8Async / cuMemsetD2D8Async_ptsz => d2d8_async(p: CUdeviceptr, pitch: usize, v: c_uchar, w: usize, h: usize, s: CUstream);
    cuMemsetD2D16Async / cuMemsetD2D16Async_ptsz => d2d16_async(p: CUdeviceptr, pitch: usize, v: c_ushort, w: usize, h: usize, s: CUstream);
    cuMemsetD2D32Async / cuMemsetD2D32Async_ptsz => d2d32_async(p: CUdeviceptr, pitch: usize, v: c_uint, w: usize, h: usize, s: CUstream);
}
