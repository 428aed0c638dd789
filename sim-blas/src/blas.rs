//! The cuBLAS v2 exports: handles and their settings, GEMM in every form the library covers,
//! and the level-1/2 routines (gemv, dot, axpy, scal).

use crate::call::{Gemm, Operand, Place, Scalars, check_ld, dim, op};
use crate::device::{Job, sim};
use crate::export::{exports, out};
use crate::handle::{HANDLES, Handle, Settings, settings, update};
use crate::kernel::{self, Activation, Dtype, Stored, Vector};
use crate::status::{self, BlasResult, fail};
use gpupool_shim::cublas::{
    cublasComputeType_t as Compute, cublasGemmAlgo_t, cublasHandle_t, cublasMath_t, cublasOperation_t,
    cublasPointerMode_t, cublasStatus_t as S, cudaDataType, cudaStream_t,
};
use gpupool_shim::cuda::CUresult;
use std::ffi::{c_char, c_int, c_longlong, c_void};
use std::sync::Mutex;

/// The cuBLAS release whose headers this library is checked against (12.9.3), as
/// `CUBLAS_VERSION` encodes it.
pub const VERSION: c_int = 12 * 10000 + 9 * 100 + 3;

/// The element types of a GEMM and the type of its scalars, if cuBLAS supports the combination
/// for `compute` (cublasGemmEx's table, real types).
pub fn gemm_types(a: cudaDataType, b: cudaDataType, c: cudaDataType, compute: Compute) -> BlasResult<(Dtype, Dtype)> {
    let (ta, tb, tc) = (Dtype::from_cuda(a), Dtype::from_cuda(b), Dtype::from_cuda(c));
    let scale = match compute {
        Compute::CUBLAS_COMPUTE_16F | Compute::CUBLAS_COMPUTE_16F_PEDANTIC => {
            (ta == Some(Dtype::F16) && tb == ta && tc == ta).then_some(Dtype::F16)
        }
        Compute::CUBLAS_COMPUTE_32F
        | Compute::CUBLAS_COMPUTE_32F_PEDANTIC
        | Compute::CUBLAS_COMPUTE_32F_FAST_16F
        | Compute::CUBLAS_COMPUTE_32F_FAST_16BF
        | Compute::CUBLAS_COMPUTE_32F_FAST_TF32 => match (ta, tb, tc) {
            (Some(x), Some(y), Some(z)) if x == y && (x == z || z == Dtype::F32) && x != Dtype::F64 => Some(Dtype::F32),
            _ => None,
        },
        Compute::CUBLAS_COMPUTE_64F | Compute::CUBLAS_COMPUTE_64F_PEDANTIC => {
            (ta == Some(Dtype::F64) && tb == ta && tc == ta).then_some(Dtype::F64)
        }
        _ => None,
    };
    match (ta, scale) {
        (Some(t), Some(s)) => Ok((t, s)),
        _ => fail(S::CUBLAS_STATUS_NOT_SUPPORTED, || {
            format!("A/B/C types {}/{}/{} with compute type {} are not supported", a.0, b.0, c.0, compute.0)
        }),
    }
}

fn check_algo(algo: cublasGemmAlgo_t) -> BlasResult<()> {
    match algo.0 {
        -1..=23 | 99..=115 => Ok(()),
        v => fail(S::CUBLAS_STATUS_NOT_SUPPORTED, || format!("GEMM algorithm {v} does not exist")),
    }
}

/// The arguments every cuBLAS GEMM shares, before its types and placement are known.
struct Shape {
    transa: bool,
    transb: bool,
    m: usize,
    n: usize,
    k: usize,
    a: Stored,
    b: Stored,
    c: Stored,
}

fn shape(
    transa: cublasOperation_t,
    transb: cublasOperation_t,
    m: c_int,
    n: c_int,
    k: c_int,
    lds: [i64; 3],
) -> BlasResult<Shape> {
    let (transa, transb) = (op(transa.0, "transa")?, op(transb.0, "transb")?);
    let (m, n, k) = (dim(m.into(), "m")?, dim(n.into(), "n")?, dim(k.into(), "k")?);
    // Stored shapes: op(A) is m x k, op(B) k x n.
    let (ar, ac) = if transa { (k, m) } else { (m, k) };
    let (br, bc) = if transb { (n, k) } else { (k, n) };
    let a = Stored { rows: ar, cols: ac, ld: check_ld(lds[0], ar, "lda")? };
    let b = Stored { rows: br, cols: bc, ld: check_ld(lds[1], br, "ldb")? };
    let c = Stored { rows: m, cols: n, ld: check_ld(lds[2], m, "ldc")? };
    Ok(Shape { transa, transb, m, n, k, a, b, c })
}

/// Submits a GEMM of `shape` with operands of `dtype` (C of `ctype`) placed as given.
fn submit(
    s: &Settings,
    shape: Shape,
    types: [Dtype; 3],
    scale: Dtype,
    places: [Place; 3],
    batch: usize,
    alpha: *const c_void,
    beta: *const c_void,
) -> BlasResult<()> {
    if shape.m == 0 || shape.n == 0 || batch == 0 {
        return Ok(());
    }
    let scalars = Scalars::read(s.device_pointers, alpha as u64, beta as u64, scale, s.stream())?;
    Gemm {
        transa: shape.transa,
        transb: shape.transb,
        transc: false,
        m: shape.m,
        n: shape.n,
        k: shape.k,
        a: Operand { dtype: types[0], stored: shape.a, place: places[0] },
        b: Operand { dtype: types[1], stored: shape.b, place: places[1] },
        c: Operand { dtype: types[2], stored: shape.c, place: places[2] },
        d: None,
        batch,
        scalars,
        bias: None,
        act: Activation::None,
    }
    .submit(s.stream())
}

fn one(ptr: *const c_void) -> Place {
    Place::Strided { ptr: ptr as u64, stride: 0 }
}

fn stride(v: c_longlong, what: &str) -> BlasResult<usize> {
    dim(v, what)
}

/// A strided vector argument: its device range in elements.
fn vector(ptr: *const c_void, inc: c_int, what: &str) -> BlasResult<(u64, usize)> {
    if inc <= 0 {
        return fail(S::CUBLAS_STATUS_INVALID_VALUE, || {
            format!("{what}: increment {inc} (only positive ones are supported)")
        });
    }
    Ok((ptr as u64, inc as usize))
}

/// Reads a host-mode scalar now, or checks a device-mode one for the job to read.
fn scalar(s: &Settings, p: *const c_void, t: Dtype, what: &str) -> BlasResult<Scalar> {
    if p.is_null() {
        return fail(S::CUBLAS_STATUS_INVALID_VALUE, || format!("{what} is NULL"));
    }
    if s.device_pointers {
        sim()?.check(s.stream(), p as u64, t.size(), what)?;
        Ok(Scalar::Device(p as u64, t))
    } else {
        // SAFETY: host pointer mode: `p` points to one scalar of type `t`.
        Ok(Scalar::Host(unsafe { t.load(p.cast(), 0) }))
    }
}

#[derive(Clone, Copy)]
enum Scalar {
    Host(f64),
    Device(u64, Dtype),
}

impl Scalar {
    fn get(self, job: &Job) -> Result<f64, CUresult> {
        match self {
            Scalar::Host(v) => Ok(v),
            // SAFETY: the span holds one scalar of `t`.
            Scalar::Device(p, t) => Ok(unsafe { t.load(job.span(p, t.size())?, 0) }),
        }
    }
}

fn gemv(
    h: cublasHandle_t,
    trans: cublasOperation_t,
    m: c_int,
    n: c_int,
    t: Dtype,
    args: [*const c_void; 5],
    lda: c_int,
    incx: c_int,
    incy: c_int,
) -> BlasResult<()> {
    let s = settings(h as usize)?;
    let [alpha, a, x, beta, y] = args;
    let trans = op(trans.0, "trans")?;
    let (m, n) = (dim(m.into(), "m")?, dim(n.into(), "n")?);
    let stored = Stored { rows: m, cols: n, ld: check_ld(lda.into(), m, "lda")? };
    // y = alpha op(A) x + beta y, as a GEMM with one column: op(A) is rows x cols.
    let (rows, cols) = if trans { (n, m) } else { (m, n) };
    let (x, incx) = vector(x, incx, "x")?;
    let (y, incy) = vector(y, incy, "y")?;
    if rows == 0 {
        return Ok(());
    }
    let scalars = Scalars::read(s.device_pointers, alpha as u64, beta as u64, t, s.stream())?;
    // x and y as GEMM operands: stored as one row whose "columns" are the elements (ld = the
    // increment), used transposed, so op(x) is a column of `cols` and y one of `rows`.
    let xs = Stored { rows: 1, cols, ld: incx };
    let ys = Stored { rows: 1, cols: rows, ld: incy };
    Gemm {
        transa: trans,
        transb: true,
        transc: true,
        m: rows,
        n: 1,
        k: cols,
        a: Operand { dtype: t, stored, place: one(a) },
        b: Operand { dtype: t, stored: xs, place: Place::Strided { ptr: x, stride: 0 } },
        c: Operand { dtype: t, stored: ys, place: Place::Strided { ptr: y, stride: 0 } },
        d: None,
        batch: 1,
        scalars,
        bias: None,
        act: Activation::None,
    }
    .submit(s.stream())
}

exports! {
    fn cublasCreate_v2(handle: *mut cublasHandle_t) {
        if handle.is_null() {
            return fail(S::CUBLAS_STATUS_INVALID_VALUE, || "handle out-pointer is NULL".into());
        }
        sim()?;
        let settings = Settings { stream: 0, device_pointers: false, math_mode: 0, workspace: (0, 0) };
        let key = HANDLES.insert(Handle { settings: Mutex::new(settings) });
        out(handle, key as cublasHandle_t, "handle")
    }

    fn cublasDestroy_v2(handle: cublasHandle_t) {
        HANDLES.remove(handle as usize, S::CUBLAS_STATUS_NOT_INITIALIZED, "cublasHandle_t")
    }

    fn cublasGetVersion_v2(handle: cublasHandle_t, version: *mut c_int) {
        settings(handle as usize)?;
        out(version, VERSION, "version")
    }

    fn cublasSetWorkspace_v2(handle: cublasHandle_t, workspace: *mut c_void, bytes: usize) {
        let s = settings(handle as usize)?;
        // The library needs no workspace; a given one must still be device memory.
        if bytes > 0 {
            sim()?.check(s.stream(), workspace as u64, bytes, "workspace")?;
        }
        update(handle as usize, |s| s.workspace = (workspace as usize, bytes))
    }

    fn cublasSetStream_v2(handle: cublasHandle_t, stream: cudaStream_t) {
        update(handle as usize, |s| s.stream = stream as usize)
    }

    fn cublasGetStream_v2(handle: cublasHandle_t, stream: *mut cudaStream_t) {
        let s = settings(handle as usize)?;
        out(stream, s.stream as cudaStream_t, "stream")
    }

    fn cublasGetPointerMode_v2(handle: cublasHandle_t, mode: *mut cublasPointerMode_t) {
        let s = settings(handle as usize)?;
        out(mode, cublasPointerMode_t(s.device_pointers as u32), "mode")
    }

    fn cublasSetPointerMode_v2(handle: cublasHandle_t, mode: cublasPointerMode_t) {
        settings(handle as usize)?;
        let device = match mode {
            cublasPointerMode_t::CUBLAS_POINTER_MODE_HOST => false,
            cublasPointerMode_t::CUBLAS_POINTER_MODE_DEVICE => true,
            m => return fail(S::CUBLAS_STATUS_INVALID_VALUE, || format!("pointer mode {} does not exist", m.0)),
        };
        update(handle as usize, |s| s.device_pointers = device)
    }

    fn cublasGetMathMode(handle: cublasHandle_t, mode: *mut cublasMath_t) {
        let s = settings(handle as usize)?;
        out(mode, cublasMath_t(s.math_mode), "mode")
    }

    fn cublasSetMathMode(handle: cublasHandle_t, mode: cublasMath_t) {
        settings(handle as usize)?;
        // Any mode computes in full fp32 here: TF32 and tensor-op modes permit less precision,
        // they do not require it.
        let flag = cublasMath_t::CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION.0;
        if mode.0 & !flag > cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH.0 {
            return fail(S::CUBLAS_STATUS_INVALID_VALUE, || format!("math mode {} does not exist", mode.0));
        }
        update(handle as usize, |s| s.math_mode = mode.0)
    }

    fn cublasSgemm_v2(
        handle: cublasHandle_t, transa: cublasOperation_t, transb: cublasOperation_t, m: c_int, n: c_int, k: c_int,
        alpha: *const f32, a: *const f32, lda: c_int, b: *const f32, ldb: c_int, beta: *const f32, c: *mut f32, ldc: c_int,
    ) {
        let s = settings(handle as usize)?;
        let shape = shape(transa, transb, m, n, k, [lda.into(), ldb.into(), ldc.into()])?;
        let t = Dtype::F32;
        submit(&s, shape, [t; 3], t, [one(a.cast()), one(b.cast()), one(c.cast())], 1, alpha.cast(), beta.cast())
    }

    fn cublasDgemm_v2(
        handle: cublasHandle_t, transa: cublasOperation_t, transb: cublasOperation_t, m: c_int, n: c_int, k: c_int,
        alpha: *const f64, a: *const f64, lda: c_int, b: *const f64, ldb: c_int, beta: *const f64, c: *mut f64, ldc: c_int,
    ) {
        let s = settings(handle as usize)?;
        let shape = shape(transa, transb, m, n, k, [lda.into(), ldb.into(), ldc.into()])?;
        let t = Dtype::F64;
        submit(&s, shape, [t; 3], t, [one(a.cast()), one(b.cast()), one(c.cast())], 1, alpha.cast(), beta.cast())
    }

    fn cublasGemmEx(
        handle: cublasHandle_t, transa: cublasOperation_t, transb: cublasOperation_t, m: c_int, n: c_int, k: c_int,
        alpha: *const c_void, a: *const c_void, atype: cudaDataType, lda: c_int, b: *const c_void, btype: cudaDataType,
        ldb: c_int, beta: *const c_void, c: *mut c_void, ctype: cudaDataType, ldc: c_int, compute: Compute,
        algo: cublasGemmAlgo_t,
    ) {
        let s = settings(handle as usize)?;
        let shape = shape(transa, transb, m, n, k, [lda.into(), ldb.into(), ldc.into()])?;
        let (t, scale) = gemm_types(atype, btype, ctype, compute)?;
        check_algo(algo)?;
        let tc = Dtype::from_cuda(ctype).unwrap_or(t);
        submit(&s, shape, [t, t, tc], scale, [one(a), one(b), one(c)], 1, alpha, beta)
    }

    fn cublasGemmStridedBatchedEx(
        handle: cublasHandle_t, transa: cublasOperation_t, transb: cublasOperation_t, m: c_int, n: c_int, k: c_int,
        alpha: *const c_void, a: *const c_void, atype: cudaDataType, lda: c_int, stride_a: c_longlong,
        b: *const c_void, btype: cudaDataType, ldb: c_int, stride_b: c_longlong, beta: *const c_void, c: *mut c_void,
        ctype: cudaDataType, ldc: c_int, stride_c: c_longlong, batch: c_int, compute: Compute, algo: cublasGemmAlgo_t,
    ) {
        let s = settings(handle as usize)?;
        let shape = shape(transa, transb, m, n, k, [lda.into(), ldb.into(), ldc.into()])?;
        let (t, scale) = gemm_types(atype, btype, ctype, compute)?;
        check_algo(algo)?;
        let tc = Dtype::from_cuda(ctype).unwrap_or(t);
        let places = [
            Place::Strided { ptr: a as u64, stride: stride(stride_a, "strideA")? },
            Place::Strided { ptr: b as u64, stride: stride(stride_b, "strideB")? },
            Place::Strided { ptr: c as u64, stride: stride(stride_c, "strideC")? },
        ];
        submit(&s, shape, [t, t, tc], scale, places, dim(batch.into(), "batchCount")?, alpha, beta)
    }

    fn cublasGemmBatchedEx(
        handle: cublasHandle_t, transa: cublasOperation_t, transb: cublasOperation_t, m: c_int, n: c_int, k: c_int,
        alpha: *const c_void, a: *const *const c_void, atype: cudaDataType, lda: c_int, b: *const *const c_void,
        btype: cudaDataType, ldb: c_int, beta: *const c_void, c: *const *mut c_void, ctype: cudaDataType, ldc: c_int,
        batch: c_int, compute: Compute, algo: cublasGemmAlgo_t,
    ) {
        let s = settings(handle as usize)?;
        let shape = shape(transa, transb, m, n, k, [lda.into(), ldb.into(), ldc.into()])?;
        let (t, scale) = gemm_types(atype, btype, ctype, compute)?;
        check_algo(algo)?;
        let tc = Dtype::from_cuda(ctype).unwrap_or(t);
        let places = [Place::Array { ptr: a as u64 }, Place::Array { ptr: b as u64 }, Place::Array { ptr: c as u64 }];
        submit(&s, shape, [t, t, tc], scale, places, dim(batch.into(), "batchCount")?, alpha, beta)
    }

    fn cublasSgemmStridedBatched(
        handle: cublasHandle_t, transa: cublasOperation_t, transb: cublasOperation_t, m: c_int, n: c_int, k: c_int,
        alpha: *const f32, a: *const f32, lda: c_int, stride_a: c_longlong, b: *const f32, ldb: c_int,
        stride_b: c_longlong, beta: *const f32, c: *mut f32, ldc: c_int, stride_c: c_longlong, batch: c_int,
    ) {
        let s = settings(handle as usize)?;
        let shape = shape(transa, transb, m, n, k, [lda.into(), ldb.into(), ldc.into()])?;
        let t = Dtype::F32;
        let places = [
            Place::Strided { ptr: a as u64, stride: stride(stride_a, "strideA")? },
            Place::Strided { ptr: b as u64, stride: stride(stride_b, "strideB")? },
            Place::Strided { ptr: c as u64, stride: stride(stride_c, "strideC")? },
        ];
        submit(&s, shape, [t; 3], t, places, dim(batch.into(), "batchCount")?, alpha.cast(), beta.cast())
    }

    fn cublasSgemv_v2(
        handle: cublasHandle_t, trans: cublasOperation_t, m: c_int, n: c_int, alpha: *const f32, a: *const f32,
        lda: c_int, x: *const f32, incx: c_int, beta: *const f32, y: *mut f32, incy: c_int,
    ) {
        gemv(handle, trans, m, n, Dtype::F32, [alpha.cast(), a.cast(), x.cast(), beta.cast(), y.cast_const().cast()], lda, incx, incy)
    }

    fn cublasDgemv_v2(
        handle: cublasHandle_t, trans: cublasOperation_t, m: c_int, n: c_int, alpha: *const f64, a: *const f64,
        lda: c_int, x: *const f64, incx: c_int, beta: *const f64, y: *mut f64, incy: c_int,
    ) {
        gemv(handle, trans, m, n, Dtype::F64, [alpha.cast(), a.cast(), x.cast(), beta.cast(), y.cast_const().cast()], lda, incx, incy)
    }

    fn cublasSdot_v2(handle: cublasHandle_t, n: c_int, x: *const f32, incx: c_int, y: *const f32, incy: c_int, result: *mut f32) {
        let s = settings(handle as usize)?;
        let n = dim(n.into(), "n")?;
        let (x, incx) = vector(x.cast(), incx, "x")?;
        let (y, incy) = vector(y.cast(), incy, "y")?;
        if result.is_null() {
            return fail(S::CUBLAS_STATUS_INVALID_VALUE, || "result is NULL".into());
        }
        let t = Dtype::F32;
        let (xb, yb) = (Vector::extent(n, incx) * 4, Vector::extent(n, incy) * 4);
        if n > 0 {
            sim()?.check(s.stream(), x, xb, "x")?;
            sim()?.check(s.stream(), y, yb, "y")?;
        }
        let result = result as u64;
        if s.device_pointers {
            sim()?.check(s.stream(), result, 4, "result (device pointer mode)")?;
        }
        let device_result = s.device_pointers;
        if !device_result && sim()?.capturing(s.stream()) {
            return fail(S::CUBLAS_STATUS_NOT_SUPPORTED, || {
                "a result returned to host memory cannot be captured (CUBLAS_POINTER_MODE_DEVICE can)".into()
            });
        }
        let (tx, rx) = std::sync::mpsc::channel();
        sim()?.enqueue(s.stream(), Box::new(move |job: &Job| {
            let v = if n == 0 {
                0.0
            } else {
                let xv = Vector { ptr: job.span(x, xb)?, dtype: t, n, inc: incx as isize };
                let yv = Vector { ptr: job.span(y, yb)?, dtype: t, n, inc: incy as isize };
                // SAFETY: both vectors lie in spans resolved for this job.
                unsafe { kernel::dot(xv, yv) }
            };
            if device_result {
                // SAFETY: the span holds one f32.
                unsafe { t.store(job.span(result, 4)?, 0, v) };
            } else {
                let _ = tx.send(v as f32);
            }
            Ok(())
        }))?;
        if device_result {
            return Ok(());
        }
        // Host pointer mode: the call returns with the result, as cuBLAS's does.
        match rx.recv() {
            // SAFETY: host pointer mode: `result` points to one writable f32.
            Ok(v) => out(result as *mut f32, v, "result"),
            Err(_) => fail(S::CUBLAS_STATUS_EXECUTION_FAILED, || "the dot product did not run (the context has an error)".into()),
        }
    }

    fn cublasSaxpy_v2(handle: cublasHandle_t, n: c_int, alpha: *const f32, x: *const f32, incx: c_int, y: *mut f32, incy: c_int) {
        let s = settings(handle as usize)?;
        let n = dim(n.into(), "n")?;
        let (x, incx) = vector(x.cast(), incx, "x")?;
        let (y, incy) = vector(y.cast_const().cast(), incy, "y")?;
        let alpha = scalar(&s, alpha.cast(), Dtype::F32, "alpha")?;
        if n == 0 {
            return Ok(());
        }
        let (xb, yb) = (Vector::extent(n, incx) * 4, Vector::extent(n, incy) * 4);
        sim()?.check(s.stream(), x, xb, "x")?;
        sim()?.check(s.stream(), y, yb, "y")?;
        sim()?.enqueue(s.stream(), Box::new(move |job: &Job| {
            let a = alpha.get(job)?;
            let xv = Vector { ptr: job.span(x, xb)?, dtype: Dtype::F32, n, inc: incx as isize };
            let yv = Vector { ptr: job.span(y, yb)?, dtype: Dtype::F32, n, inc: incy as isize };
            // SAFETY: both vectors lie in spans resolved for this job.
            unsafe { kernel::axpy(a, xv, yv) };
            Ok(())
        }))
    }

    fn cublasSscal_v2(handle: cublasHandle_t, n: c_int, alpha: *const f32, x: *mut f32, incx: c_int) {
        let s = settings(handle as usize)?;
        let n = dim(n.into(), "n")?;
        let (x, incx) = vector(x.cast_const().cast(), incx, "x")?;
        let alpha = scalar(&s, alpha.cast(), Dtype::F32, "alpha")?;
        if n == 0 {
            return Ok(());
        }
        let xb = Vector::extent(n, incx) * 4;
        sim()?.check(s.stream(), x, xb, "x")?;
        sim()?.enqueue(s.stream(), Box::new(move |job: &Job| {
            let a = alpha.get(job)?;
            let xv = Vector { ptr: job.span(x, xb)?, dtype: Dtype::F32, n, inc: incx as isize };
            // SAFETY: the vector lies in a span resolved for this job.
            unsafe { kernel::scal(a, xv) };
            Ok(())
        }))
    }
}

/// `cublasHgemm`: NVIDIA declares it for C++ only (`__half` is a class there), so it is not in
/// the C bindings; its ABI is the Sgemm one with pointers to 2-byte IEEE halves.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cublasHgemm(
    handle: cublasHandle_t,
    transa: cublasOperation_t,
    transb: cublasOperation_t,
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
) -> S {
    status::entry(|| {
        let s = settings(handle as usize)?;
        let shape = shape(transa, transb, m, n, k, [lda.into(), ldb.into(), ldc.into()])?;
        let t = Dtype::F16;
        submit(&s, shape, [t; 3], t, [one(a.cast()), one(b.cast()), one(c.cast())], 1, alpha.cast(), beta.cast())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasGetStatusName(status: S) -> *const c_char {
    status::name_c(status).as_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasGetStatusString(status: S) -> *const c_char {
    status::string_c(status).as_ptr()
}

const _: unsafe extern "C" fn(S) -> *const c_char = gpupool_shim::cublas::cublasGetStatusName;
const _: unsafe extern "C" fn(S) -> *const c_char = gpupool_shim::cublas::cublasGetStatusString;
