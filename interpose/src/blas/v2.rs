//! cuBLAS v2: handles and the calls gpupool forwards. A handle's stream, pointer mode and math
//! mode are kept here too (the getters answer locally; the pointer mode decides how alpha and
//! beta travel); the daemon holds the backend's handle and checks every call again.
// The entry points take cuBLAS's argument lists as they are.
#![allow(clippy::too_many_arguments)]

use super::{B, INVALID, NOT_INITIALIZED, Table, ask, refuse, scalar, stream_id};
use gpupool_protocol::Request;
use gpupool_protocol::ops::blas::{GemmFn, gemm_fn, vector_fn};
use gpupool_protocol::ops::{BlasHandleId, BlasMat, Gemm, Vector, answer};
use gpupool_protocol::{CtxId, DevicePtr};
use gpupool_shim::cublas::{
    cublasComputeType_t, cublasGemmAlgo_t, cublasHandle_t, cublasMath_t, cublasOperation_t, cublasPointerMode_t,
    cudaDataType, cudaStream_t,
};
use std::ffi::c_void;
use std::os::raw::{c_int, c_longlong};

#[derive(Clone, Copy)]
pub struct Handle {
    id: BlasHandleId,
    /// The context it was created in (its cuBLASLt handle is made there too).
    ctx: CtxId,
    /// The cuBLASLt handle it encapsulates, made in the daemon on first use (see [`lt_of`]).
    lt: Option<BlasHandleId>,
    stream: usize,
    device_mode: bool,
    math: u32,
}

static HANDLES: Table<Handle> = Table::new();

fn handle(h: cublasHandle_t) -> B<Handle> {
    HANDLES.get(h as usize, NOT_INITIALIZED, "cuBLAS handle")
}

fn ok(op: Request) -> B<()> {
    ask::<answer::Ok>(op).map(|_| ())
}

pub fn create() -> B<cublasHandle_t> {
    let ctx = super::current_ctx()?;
    let answer::BlasHandle { handle } = ask(Request::BlasCreate { ctx })?;
    let hd = Handle { id: handle, ctx, lt: None, stream: 0, device_mode: false, math: 0 };
    Ok(HANDLES.insert(hd) as cublasHandle_t)
}

pub fn destroy(h: cublasHandle_t) -> B<()> {
    let hd = HANDLES.remove(h as usize, NOT_INITIALIZED, "cuBLAS handle")?;
    let lt = match hd.lt {
        Some(lt) => ok(Request::LtDestroy { handle: lt }),
        None => Ok(()),
    };
    ok(Request::BlasDestroy { handle: hd.id }).and(lt)
}

/// The cuBLASLt handle that cuBLAS handle `h` encapsulates, or None if `h` is not a cuBLAS
/// handle of this process. cuBLASLt documents that any valid `cublasHandle_t` can be used in
/// place of a `cublasLtHandle_t` with a cast, and PyTorch does so for every cuBLASLt call.
/// The daemon's cuBLASLt handle is made on first use, in the handle's context, and lives as
/// long as the cuBLAS handle.
pub fn lt_of(h: usize) -> Option<B<BlasHandleId>> {
    let hd = HANDLES.find(h)?;
    if let Some(lt) = hd.lt {
        return Some(Ok(lt));
    }
    Some((|| {
        let answer::BlasHandle { handle: made } = ask(Request::LtCreate { ctx: hd.ctx })?;
        // Another thread may have made one meanwhile: the first stored is kept.
        let mut kept = made;
        HANDLES.update(h, NOT_INITIALIZED, "cuBLAS handle", |x| {
            kept = *x.lt.get_or_insert(made);
            Ok(())
        })?;
        if kept != made {
            ok(Request::LtDestroy { handle: made })?;
        }
        Ok(kept)
    })())
}

pub fn version(h: cublasHandle_t) -> B<c_int> {
    handle(h)?;
    Ok(super::version())
}

pub fn set_workspace(h: cublasHandle_t, ws: *mut c_void, bytes: usize) -> B<()> {
    let hd = handle(h)?;
    ok(Request::BlasSetWorkspace { handle: hd.id, ptr: DevicePtr(ws as u64), bytes: bytes as u64 })
}

pub fn set_stream(h: cublasHandle_t, s: cudaStream_t) -> B<()> {
    let hd = handle(h)?;
    let stream = stream_id(s.cast())?;
    ok(Request::BlasSetStream { handle: hd.id, stream })?;
    HANDLES.update(h as usize, NOT_INITIALIZED, "cuBLAS handle", |hd| {
        hd.stream = s as usize;
        Ok(())
    })
}

pub fn get_stream(h: cublasHandle_t) -> B<cudaStream_t> {
    Ok(handle(h)?.stream as cudaStream_t)
}

pub fn get_pointer_mode(h: cublasHandle_t) -> B<cublasPointerMode_t> {
    Ok(cublasPointerMode_t(handle(h)?.device_mode as u32))
}

pub fn set_pointer_mode(h: cublasHandle_t, mode: cublasPointerMode_t) -> B<()> {
    if mode.0 > 1 {
        return refuse(INVALID, &format!("pointer mode {} is not a cublasPointerMode_t", mode.0));
    }
    HANDLES.update(h as usize, NOT_INITIALIZED, "cuBLAS handle", |hd| {
        hd.device_mode = mode.0 == 1;
        Ok(())
    })
}

pub fn get_math_mode(h: cublasHandle_t) -> B<cublasMath_t> {
    Ok(cublasMath_t(handle(h)?.math))
}

pub fn set_math_mode(h: cublasHandle_t, mode: cublasMath_t) -> B<()> {
    let hd = handle(h)?;
    ok(Request::BlasSetMathMode { handle: hd.id, mode: mode.0 })?;
    HANDLES.update(h as usize, NOT_INITIALIZED, "cuBLAS handle", |hd| {
        hd.math = mode.0;
        Ok(())
    })
}

/// Bytes of alpha and beta for a `cublasComputeType_t`.
fn compute_scalar_size(compute: u32) -> B<usize> {
    match compute {
        64 | 65 => Ok(2),
        68 | 69 | 74 | 75 | 77 | 72 | 73 => Ok(4),
        70 | 71 => Ok(8),
        _ => refuse(INVALID, &format!("compute type {compute} is not a cublasComputeType_t")),
    }
}

fn mat(p: *const c_void, dtype: u32, ld: c_int, stride: c_longlong) -> BlasMat {
    BlasMat { ptr: DevicePtr(p as u64), dtype, ld: ld.into(), stride }
}

/// One GEMM of any entry point: alpha/beta read per the handle's pointer mode.
#[allow(clippy::too_many_arguments)]
fn gemm(
    h: cublasHandle_t,
    func: GemmFn,
    (transa, transb): (cublasOperation_t, cublasOperation_t),
    (m, n, k): (c_int, c_int, c_int),
    [alpha, beta]: [*const c_void; 2],
    [a, b, c]: [BlasMat; 3],
    batch: c_int,
    compute: u32,
    algo: c_int,
) -> B<()> {
    let hd = handle(h)?;
    let size = compute_scalar_size(compute)?;
    let gemm = Gemm {
        func,
        transa: transa.0,
        transb: transb.0,
        m,
        n,
        k,
        alpha: scalar(alpha, size, hd.device_mode)?,
        a,
        b,
        beta: scalar(beta, size, hd.device_mode)?,
        c,
        batch,
        compute,
        algo,
    };
    ok(Request::BlasGemm { handle: hd.id, gemm })
}

const F32: u32 = 0;
const F64: u32 = 1;
const F16: u32 = 2;
const COMPUTE_16F: u32 = 64;
const COMPUTE_32F: u32 = 68;
const COMPUTE_64F: u32 = 70;
const DEFAULT_ALGO: c_int = -1;

pub fn sgemm(
    h: cublasHandle_t,
    ta: cublasOperation_t,
    tb: cublasOperation_t,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f32,
    a: *const f32,
    lda: c_int,
    b: *const f32,
    ldb: c_int,
    beta: *const f32,
    c: *mut f32,
    ldc: c_int,
) -> B<()> {
    let mats = [mat(a.cast(), F32, lda, 0), mat(b.cast(), F32, ldb, 0), mat(c.cast(), F32, ldc, 0)];
    gemm(h, gemm_fn::SGEMM, (ta, tb), (m, n, k), [alpha.cast(), beta.cast()], mats, 1, COMPUTE_32F, DEFAULT_ALGO)
}

pub fn dgemm(
    h: cublasHandle_t,
    ta: cublasOperation_t,
    tb: cublasOperation_t,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f64,
    a: *const f64,
    lda: c_int,
    b: *const f64,
    ldb: c_int,
    beta: *const f64,
    c: *mut f64,
    ldc: c_int,
) -> B<()> {
    let mats = [mat(a.cast(), F64, lda, 0), mat(b.cast(), F64, ldb, 0), mat(c.cast(), F64, ldc, 0)];
    gemm(h, gemm_fn::DGEMM, (ta, tb), (m, n, k), [alpha.cast(), beta.cast()], mats, 1, COMPUTE_64F, DEFAULT_ALGO)
}

/// `__half` values as their 2 bytes.
pub fn hgemm(
    h: cublasHandle_t,
    ta: cublasOperation_t,
    tb: cublasOperation_t,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const u16,
    a: *const u16,
    lda: c_int,
    b: *const u16,
    ldb: c_int,
    beta: *const u16,
    c: *mut u16,
    ldc: c_int,
) -> B<()> {
    let mats = [mat(a.cast(), F16, lda, 0), mat(b.cast(), F16, ldb, 0), mat(c.cast(), F16, ldc, 0)];
    gemm(h, gemm_fn::HGEMM, (ta, tb), (m, n, k), [alpha.cast(), beta.cast()], mats, 1, COMPUTE_16F, DEFAULT_ALGO)
}

pub fn gemm_ex(
    h: cublasHandle_t,
    ta: cublasOperation_t,
    tb: cublasOperation_t,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    at: cudaDataType,
    lda: c_int,
    b: *const c_void,
    bt: cudaDataType,
    ldb: c_int,
    beta: *const c_void,
    c: *mut c_void,
    ct: cudaDataType,
    ldc: c_int,
    compute: cublasComputeType_t,
    algo: cublasGemmAlgo_t,
) -> B<()> {
    let mats = [mat(a, at.0, lda, 0), mat(b, bt.0, ldb, 0), mat(c, ct.0, ldc, 0)];
    gemm(h, gemm_fn::GEMM_EX, (ta, tb), (m, n, k), [alpha, beta], mats, 1, compute.0, algo.0)
}

pub fn gemm_batched_ex(
    h: cublasHandle_t,
    ta: cublasOperation_t,
    tb: cublasOperation_t,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const *const c_void,
    at: cudaDataType,
    lda: c_int,
    b: *const *const c_void,
    bt: cudaDataType,
    ldb: c_int,
    beta: *const c_void,
    c: *const *mut c_void,
    ct: cudaDataType,
    ldc: c_int,
    batch: c_int,
    compute: cublasComputeType_t,
    algo: cublasGemmAlgo_t,
) -> B<()> {
    // The arrays are device arrays of device pointers: the daemon reads and checks them.
    let mats = [mat(a.cast(), at.0, lda, 0), mat(b.cast(), bt.0, ldb, 0), mat(c.cast(), ct.0, ldc, 0)];
    gemm(h, gemm_fn::GEMM_BATCHED_EX, (ta, tb), (m, n, k), [alpha, beta], mats, batch, compute.0, algo.0)
}

pub fn gemm_strided_batched_ex(
    h: cublasHandle_t,
    ta: cublasOperation_t,
    tb: cublasOperation_t,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    a: *const c_void,
    at: cudaDataType,
    lda: c_int,
    sa: c_longlong,
    b: *const c_void,
    bt: cudaDataType,
    ldb: c_int,
    sb: c_longlong,
    beta: *const c_void,
    c: *mut c_void,
    ct: cudaDataType,
    ldc: c_int,
    sc: c_longlong,
    batch: c_int,
    compute: cublasComputeType_t,
    algo: cublasGemmAlgo_t,
) -> B<()> {
    let mats = [mat(a, at.0, lda, sa), mat(b, bt.0, ldb, sb), mat(c, ct.0, ldc, sc)];
    gemm(h, gemm_fn::GEMM_STRIDED_BATCHED_EX, (ta, tb), (m, n, k), [alpha, beta], mats, batch, compute.0, algo.0)
}

pub fn sgemm_strided_batched(
    h: cublasHandle_t,
    ta: cublasOperation_t,
    tb: cublasOperation_t,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f32,
    a: *const f32,
    lda: c_int,
    sa: c_longlong,
    b: *const f32,
    ldb: c_int,
    sb: c_longlong,
    beta: *const f32,
    c: *mut f32,
    ldc: c_int,
    sc: c_longlong,
    batch: c_int,
) -> B<()> {
    let mats = [mat(a.cast(), F32, lda, sa), mat(b.cast(), F32, ldb, sb), mat(c.cast(), F32, ldc, sc)];
    let f = gemm_fn::SGEMM_STRIDED_BATCHED;
    gemm(h, f, (ta, tb), (m, n, k), [alpha.cast(), beta.cast()], mats, batch, COMPUTE_32F, DEFAULT_ALGO)
}

/// `cublasDgemmStridedBatched` is GemmStridedBatchedEx over fp64 with fp64 compute (what
/// cuBLAS documents it as), so the daemon needs no function of its own for it.
pub fn dgemm_strided_batched(
    h: cublasHandle_t,
    ta: cublasOperation_t,
    tb: cublasOperation_t,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f64,
    a: *const f64,
    lda: c_int,
    sa: c_longlong,
    b: *const f64,
    ldb: c_int,
    sb: c_longlong,
    beta: *const f64,
    c: *mut f64,
    ldc: c_int,
    sc: c_longlong,
    batch: c_int,
) -> B<()> {
    let mats = [mat(a.cast(), F64, lda, sa), mat(b.cast(), F64, ldb, sb), mat(c.cast(), F64, ldc, sc)];
    let f = gemm_fn::GEMM_STRIDED_BATCHED_EX;
    gemm(h, f, (ta, tb), (m, n, k), [alpha.cast(), beta.cast()], mats, batch, COMPUTE_64F, DEFAULT_ALGO)
}

/// A level-1/2 call; `beta` is alpha again where the routine has none (axpy, scal).
#[allow(clippy::too_many_arguments)]
fn vector(
    h: cublasHandle_t,
    func: u8,
    trans: u32,
    (m, n): (c_int, c_int),
    alpha: *const c_void,
    size: usize,
    (a, lda): (*const c_void, c_int),
    (x, incx): (*const c_void, c_int),
    beta: *const c_void,
    (y, incy): (*const c_void, c_int),
) -> B<()> {
    let hd = handle(h)?;
    let p = |v: *const c_void| DevicePtr(v as u64);
    let call = Vector {
        func,
        trans,
        m,
        n,
        alpha: scalar(alpha, size, hd.device_mode)?,
        a: p(a),
        lda,
        x: p(x),
        incx,
        beta: scalar(beta, size, hd.device_mode)?,
        y: p(y),
        incy,
    };
    ok(Request::BlasVector { handle: hd.id, call })
}

pub fn sgemv(
    h: cublasHandle_t,
    t: cublasOperation_t,
    m: c_int,
    n: c_int,
    alpha: *const f32,
    a: *const f32,
    lda: c_int,
    x: *const f32,
    incx: c_int,
    beta: *const f32,
    y: *mut f32,
    incy: c_int,
) -> B<()> {
    let (al, be) = (alpha.cast(), beta.cast());
    vector(h, vector_fn::SGEMV, t.0, (m, n), al, 4, (a.cast(), lda), (x.cast(), incx), be, (y.cast(), incy))
}

pub fn dgemv(
    h: cublasHandle_t,
    t: cublasOperation_t,
    m: c_int,
    n: c_int,
    alpha: *const f64,
    a: *const f64,
    lda: c_int,
    x: *const f64,
    incx: c_int,
    beta: *const f64,
    y: *mut f64,
    incy: c_int,
) -> B<()> {
    let (al, be) = (alpha.cast(), beta.cast());
    vector(h, vector_fn::DGEMV, t.0, (m, n), al, 8, (a.cast(), lda), (x.cast(), incx), be, (y.cast(), incy))
}

pub fn saxpy(
    h: cublasHandle_t,
    n: c_int,
    alpha: *const f32,
    x: *const f32,
    incx: c_int,
    y: *mut f32,
    incy: c_int,
) -> B<()> {
    let al = alpha.cast();
    vector(h, vector_fn::SAXPY, 0, (0, n), al, 4, (std::ptr::null(), 1), (x.cast(), incx), al, (y.cast(), incy))
}

pub fn sscal(h: cublasHandle_t, n: c_int, alpha: *const f32, x: *mut f32, incx: c_int) -> B<()> {
    let al = alpha.cast();
    vector(h, vector_fn::SSCAL, 0, (0, n), al, 4, (std::ptr::null(), 1), (x.cast(), incx), al, (std::ptr::null(), 1))
}

/// The result goes to host memory (the value comes back in the reply) or, in device pointer
/// mode, to device memory.
pub fn sdot(
    h: cublasHandle_t,
    n: c_int,
    x: *const f32,
    incx: c_int,
    y: *const f32,
    incy: c_int,
    result: *mut f32,
) -> B<()> {
    let hd = handle(h)?;
    if result.is_null() {
        return refuse(INVALID, "cublasSdot: result is NULL");
    }
    let (x, y) = (DevicePtr(x as u64), DevicePtr(y as u64));
    let to = hd.device_mode.then_some(DevicePtr(result as u64));
    let answer::BlasValue { bits } = ask(Request::BlasSdot { handle: hd.id, n, x, incx, y, incy, result: to })?;
    if !hd.device_mode {
        crate::api::export::put(result, f32::from_bits(bits as u32));
    }
    Ok(())
}
