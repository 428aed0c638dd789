//! The cuBLASLt exports: the handle, matmul descriptors, matrix layouts and preferences (each
//! a registered Rust value behind the opaque pointer), the heuristic (one algorithm: this
//! library has one), and `cublasLtMatmul` with its bias / ReLU / GELU epilogues.

use crate::blas::{VERSION, gemm_types};
use crate::call::{Gemm, Operand, Place, Scalars, check_ld};
use crate::export::{exports, out};
use crate::handle::Registry;
use crate::kernel::{Activation, Dtype, Stored};
use crate::status::{self, BlasResult, fail};
use gpupool_shim::cublas::{
    cublasComputeType_t as Compute, cublasLtEpilogue_t as Epi, cublasLtHandle_t, cublasLtMatmulAlgo_t,
    cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t as DescAttr, cublasLtMatmulHeuristicResult_t,
    cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t as PrefAttr, cublasLtMatrixLayout_t,
    cublasLtMatrixLayoutAttribute_t as LayoutAttr, cublasStatus_t as S, cudaDataType, cudaDataType_t, cudaStream_t,
};
use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;

struct LtHandle;

#[derive(Clone, Copy, Debug)]
struct Desc {
    compute: u32,
    scale: u32,
    device_pointers: u32,
    transa: u32,
    transb: u32,
    transc: u32,
    epilogue: u32,
    bias: u64,
    /// 0: the type of D, as cuBLASLt defaults it.
    bias_type: i32,
}

#[derive(Clone, Copy, Debug)]
struct Layout {
    dtype: u32,
    order: i32,
    rows: u64,
    cols: u64,
    ld: i64,
    batch: i32,
    stride: i64,
}

#[derive(Clone, Copy, Debug)]
struct Pref {
    search: u32,
    max_workspace: u64,
}

static LT: Registry<LtHandle> = Registry::new();
static DESCS: Registry<Mutex<Desc>> = Registry::new();
static LAYOUTS: Registry<Mutex<Layout>> = Registry::new();
static PREFS: Registry<Mutex<Pref>> = Registry::new();

/// Marks the one algorithm the heuristic returns, so `cublasLtMatmul` can tell it from garbage.
const ALGO_ID: u64 = 0x6770_7073_696d_0001;

fn get<T: Copy>(r: &Registry<Mutex<T>>, key: usize, what: &str) -> BlasResult<T> {
    let v = r.get(key, S::CUBLAS_STATUS_INVALID_VALUE, what)?;
    Ok(*v.lock().unwrap_or_else(|e| e.into_inner()))
}

fn set<T>(r: &Registry<Mutex<T>>, key: usize, what: &str, f: impl FnOnce(&mut T)) -> BlasResult<()> {
    let v = r.get(key, S::CUBLAS_STATUS_INVALID_VALUE, what)?;
    f(&mut v.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(())
}

/// An attribute value from the caller's buffer: exactly the attribute's size, as cuBLASLt requires.
fn read_attr<T: Copy>(buf: *const c_void, size: usize, what: &str) -> BlasResult<T> {
    if buf.is_null() || size != std::mem::size_of::<T>() {
        return fail(S::CUBLAS_STATUS_INVALID_VALUE, || {
            format!("{what}: buffer of {size} bytes, the attribute has {}", std::mem::size_of::<T>())
        });
    }
    // SAFETY: non-null and `size` bytes, the size of T.
    Ok(unsafe { buf.cast::<T>().read_unaligned() })
}

/// Writes an attribute value; `written` (optional) gets its size. A buffer of size 0 asks for the size.
fn write_attr<T: Copy>(v: T, buf: *mut c_void, size: usize, written: *mut usize) -> BlasResult<()> {
    let need = std::mem::size_of::<T>();
    if !written.is_null() {
        // SAFETY: non-null out-pointer per the API.
        unsafe { written.write_unaligned(need) };
    }
    if size == 0 && !written.is_null() {
        return Ok(());
    }
    if buf.is_null() || size < need {
        return fail(S::CUBLAS_STATUS_INVALID_VALUE, || format!("attribute buffer of {size} bytes, need {need}"));
    }
    // SAFETY: at least `need` writable bytes.
    unsafe { buf.cast::<T>().write_unaligned(v) };
    Ok(())
}

fn activation(epilogue: u32) -> BlasResult<(bool, Activation)> {
    match Epi(epilogue) {
        Epi::CUBLASLT_EPILOGUE_DEFAULT => Ok((false, Activation::None)),
        Epi::CUBLASLT_EPILOGUE_RELU => Ok((false, Activation::Relu)),
        Epi::CUBLASLT_EPILOGUE_BIAS => Ok((true, Activation::None)),
        Epi::CUBLASLT_EPILOGUE_RELU_BIAS => Ok((true, Activation::Relu)),
        Epi::CUBLASLT_EPILOGUE_GELU => Ok((false, Activation::Gelu)),
        Epi::CUBLASLT_EPILOGUE_GELU_BIAS => Ok((true, Activation::Gelu)),
        e => fail(S::CUBLAS_STATUS_NOT_SUPPORTED, || format!("epilogue {} is not supported", e.0)),
    }
}

/// The whole problem the four layouts and the descriptor describe, checked.
struct Problem {
    transa: bool,
    transb: bool,
    m: usize,
    n: usize,
    k: usize,
    a: (Dtype, Stored, usize),
    b: (Dtype, Stored, usize),
    c: (Dtype, Stored, usize),
    d: (Dtype, Stored, usize),
    batch: usize,
    scale: Dtype,
    device_pointers: bool,
    bias: Option<(u64, Dtype)>,
    act: Activation,
}

fn layout_of(l: &Layout, what: &str) -> BlasResult<(Dtype, Stored, usize)> {
    if l.order != 0 {
        return fail(S::CUBLAS_STATUS_NOT_SUPPORTED, || format!("{what}: only CUBLASLT_ORDER_COL is supported"));
    }
    let Some(t) = Dtype::from_cuda(cudaDataType_t(l.dtype)) else {
        return fail(S::CUBLAS_STATUS_NOT_SUPPORTED, || format!("{what}: data type {} is not supported", l.dtype));
    };
    if l.stride < 0 || l.batch < 1 {
        return fail(S::CUBLAS_STATUS_INVALID_VALUE, || format!("{what}: batch {} / stride {}", l.batch, l.stride));
    }
    let stored = Stored { rows: l.rows as usize, cols: l.cols as usize, ld: check_ld(l.ld, l.rows as usize, what)? };
    Ok((t, stored, l.stride as usize))
}

fn problem(desc: usize, layouts: [usize; 4]) -> BlasResult<Problem> {
    let d = get(&DESCS, desc, "cublasLtMatmulDesc_t")?;
    let names = ["Adesc", "Bdesc", "Cdesc", "Ddesc"];
    let mut ls = Vec::new();
    for (key, name) in layouts.iter().zip(names) {
        ls.push(get(&LAYOUTS, *key, name)?);
    }
    let (la, lb, lc, ld) = (
        layout_of(&ls[0], "Adesc")?,
        layout_of(&ls[1], "Bdesc")?,
        layout_of(&ls[2], "Cdesc")?,
        layout_of(&ls[3], "Ddesc")?,
    );
    let transa = crate::call::op(d.transa, "CUBLASLT_MATMUL_DESC_TRANSA")?;
    let transb = crate::call::op(d.transb, "CUBLASLT_MATMUL_DESC_TRANSB")?;
    if d.transc != 0 {
        return fail(S::CUBLAS_STATUS_NOT_SUPPORTED, || "CUBLASLT_MATMUL_DESC_TRANSC must be CUBLAS_OP_N".into());
    }
    let (m, k) = if transa { (la.1.cols, la.1.rows) } else { (la.1.rows, la.1.cols) };
    let (kb, n) = if transb { (lb.1.cols, lb.1.rows) } else { (lb.1.rows, lb.1.cols) };
    let shapes_agree = kb == k && lc.1.rows == m && lc.1.cols == n && ld.1.rows == m && ld.1.cols == n;
    if !shapes_agree {
        return fail(S::CUBLAS_STATUS_INVALID_VALUE, || {
            format!("op(A) is {m}x{k}, op(B) {kb}x{n}, C {}x{}, D {}x{}", lc.1.rows, lc.1.cols, ld.1.rows, ld.1.cols)
        });
    }
    let batches = [ls[0].batch, ls[1].batch, ls[2].batch, ls[3].batch];
    if batches.iter().any(|b| *b != batches[3]) {
        return fail(S::CUBLAS_STATUS_INVALID_VALUE, || format!("batch counts differ: {batches:?}"));
    }
    let types = |l: &Layout| cudaDataType(l.dtype);
    let (t, scale) = gemm_types(types(&ls[0]), types(&ls[1]), types(&ls[3]), Compute(d.compute))?;
    if lc.0 != ld.0 || Dtype::from_cuda(cudaDataType_t(d.scale)) != Some(scale) {
        return fail(S::CUBLAS_STATUS_NOT_SUPPORTED, || {
            format!(
                "C type {}, D type {}, scale type {} do not fit compute type {}",
                ls[2].dtype, ls[3].dtype, d.scale, d.compute
            )
        });
    }
    let _ = t;
    let (has_bias, act) = activation(d.epilogue)?;
    let bias = if has_bias {
        let bt = if d.bias_type == 0 { Some(ld.0) } else { Dtype::from_cuda(cudaDataType_t(d.bias_type as u32)) };
        match bt {
            Some(bt) if d.bias != 0 => Some((d.bias, bt)),
            _ => {
                return fail(S::CUBLAS_STATUS_INVALID_VALUE, || {
                    "a BIAS epilogue needs CUBLASLT_MATMUL_DESC_BIAS_POINTER".into()
                });
            }
        }
    } else {
        None
    };
    let device_pointers = match d.device_pointers {
        0 => false,
        1 => true,
        p => return fail(S::CUBLAS_STATUS_NOT_SUPPORTED, || format!("pointer mode {p} is not supported")),
    };
    Ok(Problem {
        transa,
        transb,
        m,
        n,
        k,
        a: la,
        b: lb,
        c: lc,
        d: ld,
        batch: batches[3] as usize,
        scale,
        device_pointers,
        bias,
        act,
    })
}

exports! {
    fn cublasLtCreate(handle: *mut cublasLtHandle_t) {
        if handle.is_null() {
            return fail(S::CUBLAS_STATUS_INVALID_VALUE, || "handle out-pointer is NULL".into());
        }
        crate::device::sim()?;
        out(handle, LT.insert(LtHandle) as cublasLtHandle_t, "handle")
    }

    fn cublasLtDestroy(handle: cublasLtHandle_t) {
        LT.remove(handle as usize, S::CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtHandle_t")
    }

    fn cublasLtMatmulDescCreate(desc: *mut cublasLtMatmulDesc_t, compute: Compute, scale: cudaDataType_t) {
        if desc.is_null() {
            return fail(S::CUBLAS_STATUS_INVALID_VALUE, || "descriptor out-pointer is NULL".into());
        }
        let d = Desc { compute: compute.0, scale: scale.0, device_pointers: 0, transa: 0, transb: 0, transc: 0, epilogue: 1, bias: 0, bias_type: 0 };
        out(desc, DESCS.insert(Mutex::new(d)) as cublasLtMatmulDesc_t, "descriptor")
    }

    fn cublasLtMatmulDescDestroy(desc: cublasLtMatmulDesc_t) {
        DESCS.remove(desc as usize, S::CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDesc_t")
    }

    fn cublasLtMatmulDescSetAttribute(desc: cublasLtMatmulDesc_t, attr: DescAttr, buf: *const c_void, size: usize) {
        let key = desc as usize;
        let what = "cublasLtMatmulDesc_t";
        get(&DESCS, key, what)?;
        match attr {
            DescAttr::CUBLASLT_MATMUL_DESC_COMPUTE_TYPE => { let v: u32 = read_attr(buf, size, "COMPUTE_TYPE")?; set(&DESCS, key, what, |d| d.compute = v) }
            DescAttr::CUBLASLT_MATMUL_DESC_SCALE_TYPE => { let v: u32 = read_attr(buf, size, "SCALE_TYPE")?; set(&DESCS, key, what, |d| d.scale = v) }
            DescAttr::CUBLASLT_MATMUL_DESC_POINTER_MODE => { let v: u32 = read_attr(buf, size, "POINTER_MODE")?; set(&DESCS, key, what, |d| d.device_pointers = v) }
            DescAttr::CUBLASLT_MATMUL_DESC_TRANSA => { let v: u32 = read_attr(buf, size, "TRANSA")?; set(&DESCS, key, what, |d| d.transa = v) }
            DescAttr::CUBLASLT_MATMUL_DESC_TRANSB => { let v: u32 = read_attr(buf, size, "TRANSB")?; set(&DESCS, key, what, |d| d.transb = v) }
            DescAttr::CUBLASLT_MATMUL_DESC_TRANSC => { let v: u32 = read_attr(buf, size, "TRANSC")?; set(&DESCS, key, what, |d| d.transc = v) }
            DescAttr::CUBLASLT_MATMUL_DESC_EPILOGUE => { let v: u32 = read_attr(buf, size, "EPILOGUE")?; activation(v)?; set(&DESCS, key, what, |d| d.epilogue = v) }
            DescAttr::CUBLASLT_MATMUL_DESC_BIAS_POINTER => { let v: u64 = read_attr(buf, size, "BIAS_POINTER")?; set(&DESCS, key, what, |d| d.bias = v) }
            DescAttr::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE => { let v: i32 = read_attr(buf, size, "BIAS_DATA_TYPE")?; set(&DESCS, key, what, |d| d.bias_type = v) }
            a => fail(S::CUBLAS_STATUS_NOT_SUPPORTED, || format!("matmul descriptor attribute {} is not supported", a.0)),
        }
    }

    fn cublasLtMatmulDescGetAttribute(desc: cublasLtMatmulDesc_t, attr: DescAttr, buf: *mut c_void, size: usize, written: *mut usize) {
        let d = get(&DESCS, desc as usize, "cublasLtMatmulDesc_t")?;
        match attr {
            DescAttr::CUBLASLT_MATMUL_DESC_COMPUTE_TYPE => write_attr(d.compute, buf, size, written),
            DescAttr::CUBLASLT_MATMUL_DESC_SCALE_TYPE => write_attr(d.scale, buf, size, written),
            DescAttr::CUBLASLT_MATMUL_DESC_POINTER_MODE => write_attr(d.device_pointers, buf, size, written),
            DescAttr::CUBLASLT_MATMUL_DESC_TRANSA => write_attr(d.transa, buf, size, written),
            DescAttr::CUBLASLT_MATMUL_DESC_TRANSB => write_attr(d.transb, buf, size, written),
            DescAttr::CUBLASLT_MATMUL_DESC_TRANSC => write_attr(d.transc, buf, size, written),
            DescAttr::CUBLASLT_MATMUL_DESC_EPILOGUE => write_attr(d.epilogue, buf, size, written),
            DescAttr::CUBLASLT_MATMUL_DESC_BIAS_POINTER => write_attr(d.bias, buf, size, written),
            DescAttr::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE => write_attr(d.bias_type, buf, size, written),
            a => fail(S::CUBLAS_STATUS_NOT_SUPPORTED, || format!("matmul descriptor attribute {} is not supported", a.0)),
        }
    }

    fn cublasLtMatrixLayoutCreate(layout: *mut cublasLtMatrixLayout_t, dtype: cudaDataType, rows: u64, cols: u64, ld: i64) {
        if layout.is_null() {
            return fail(S::CUBLAS_STATUS_INVALID_VALUE, || "layout out-pointer is NULL".into());
        }
        let l = Layout { dtype: dtype.0, order: 0, rows, cols, ld, batch: 1, stride: 0 };
        out(layout, LAYOUTS.insert(Mutex::new(l)) as cublasLtMatrixLayout_t, "layout")
    }

    fn cublasLtMatrixLayoutDestroy(layout: cublasLtMatrixLayout_t) {
        LAYOUTS.remove(layout as usize, S::CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayout_t")
    }

    fn cublasLtMatrixLayoutSetAttribute(layout: cublasLtMatrixLayout_t, attr: LayoutAttr, buf: *const c_void, size: usize) {
        let (key, what) = (layout as usize, "cublasLtMatrixLayout_t");
        get(&LAYOUTS, key, what)?;
        match attr {
            LayoutAttr::CUBLASLT_MATRIX_LAYOUT_TYPE => { let v: u32 = read_attr(buf, size, "TYPE")?; set(&LAYOUTS, key, what, |l| l.dtype = v) }
            LayoutAttr::CUBLASLT_MATRIX_LAYOUT_ORDER => { let v: i32 = read_attr(buf, size, "ORDER")?; set(&LAYOUTS, key, what, |l| l.order = v) }
            LayoutAttr::CUBLASLT_MATRIX_LAYOUT_ROWS => { let v: u64 = read_attr(buf, size, "ROWS")?; set(&LAYOUTS, key, what, |l| l.rows = v) }
            LayoutAttr::CUBLASLT_MATRIX_LAYOUT_COLS => { let v: u64 = read_attr(buf, size, "COLS")?; set(&LAYOUTS, key, what, |l| l.cols = v) }
            LayoutAttr::CUBLASLT_MATRIX_LAYOUT_LD => { let v: i64 = read_attr(buf, size, "LD")?; set(&LAYOUTS, key, what, |l| l.ld = v) }
            LayoutAttr::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT => { let v: i32 = read_attr(buf, size, "BATCH_COUNT")?; set(&LAYOUTS, key, what, |l| l.batch = v) }
            LayoutAttr::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET => { let v: i64 = read_attr(buf, size, "STRIDED_BATCH_OFFSET")?; set(&LAYOUTS, key, what, |l| l.stride = v) }
            a => fail(S::CUBLAS_STATUS_NOT_SUPPORTED, || format!("matrix layout attribute {} is not supported", a.0)),
        }
    }

    fn cublasLtMatrixLayoutGetAttribute(layout: cublasLtMatrixLayout_t, attr: LayoutAttr, buf: *mut c_void, size: usize, written: *mut usize) {
        let l = get(&LAYOUTS, layout as usize, "cublasLtMatrixLayout_t")?;
        match attr {
            LayoutAttr::CUBLASLT_MATRIX_LAYOUT_TYPE => write_attr(l.dtype, buf, size, written),
            LayoutAttr::CUBLASLT_MATRIX_LAYOUT_ORDER => write_attr(l.order, buf, size, written),
            LayoutAttr::CUBLASLT_MATRIX_LAYOUT_ROWS => write_attr(l.rows, buf, size, written),
            LayoutAttr::CUBLASLT_MATRIX_LAYOUT_COLS => write_attr(l.cols, buf, size, written),
            LayoutAttr::CUBLASLT_MATRIX_LAYOUT_LD => write_attr(l.ld, buf, size, written),
            LayoutAttr::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT => write_attr(l.batch, buf, size, written),
            LayoutAttr::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET => write_attr(l.stride, buf, size, written),
            a => fail(S::CUBLAS_STATUS_NOT_SUPPORTED, || format!("matrix layout attribute {} is not supported", a.0)),
        }
    }

    fn cublasLtMatmulPreferenceCreate(pref: *mut cublasLtMatmulPreference_t) {
        if pref.is_null() {
            return fail(S::CUBLAS_STATUS_INVALID_VALUE, || "preference out-pointer is NULL".into());
        }
        let p = Pref { search: 0, max_workspace: 0 };
        out(pref, PREFS.insert(Mutex::new(p)) as cublasLtMatmulPreference_t, "preference")
    }

    fn cublasLtMatmulPreferenceDestroy(pref: cublasLtMatmulPreference_t) {
        PREFS.remove(pref as usize, S::CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreference_t")
    }

    fn cublasLtMatmulPreferenceSetAttribute(pref: cublasLtMatmulPreference_t, attr: PrefAttr, buf: *const c_void, size: usize) {
        let (key, what) = (pref as usize, "cublasLtMatmulPreference_t");
        get(&PREFS, key, what)?;
        match attr {
            PrefAttr::CUBLASLT_MATMUL_PREF_SEARCH_MODE => { let v: u32 = read_attr(buf, size, "SEARCH_MODE")?; set(&PREFS, key, what, |p| p.search = v) }
            PrefAttr::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES => { let v: u64 = read_attr(buf, size, "MAX_WORKSPACE_BYTES")?; set(&PREFS, key, what, |p| p.max_workspace = v) }
            // The one algorithm here splits no sum (no split-K), so it fits every mask of
            // reduction schemes; a mask naming none of cublasLtReductionScheme_t is refused.
            PrefAttr::CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK => {
                let v: u32 = read_attr(buf, size, "REDUCTION_SCHEME_MASK")?;
                if v & !7 != 0 {
                    return fail(S::CUBLAS_STATUS_INVALID_VALUE, || format!("REDUCTION_SCHEME_MASK {v:#x} names no scheme"));
                }
                Ok(())
            }
            a => fail(S::CUBLAS_STATUS_NOT_SUPPORTED, || format!("preference attribute {} is not supported", a.0)),
        }
    }

    fn cublasLtMatmulAlgoGetHeuristic(
        handle: cublasLtHandle_t, desc: cublasLtMatmulDesc_t, adesc: cublasLtMatrixLayout_t, bdesc: cublasLtMatrixLayout_t,
        cdesc: cublasLtMatrixLayout_t, ddesc: cublasLtMatrixLayout_t, pref: cublasLtMatmulPreference_t, requested: c_int,
        results: *mut cublasLtMatmulHeuristicResult_t, returned: *mut c_int,
    ) {
        LT.get(handle as usize, S::CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtHandle_t")?;
        get(&PREFS, pref as usize, "cublasLtMatmulPreference_t")?;
        if requested < 1 || results.is_null() || returned.is_null() {
            return fail(S::CUBLAS_STATUS_INVALID_VALUE, || format!("requestedAlgoCount {requested}, or a NULL out-pointer"));
        }
        if let Err(e) = problem(desc as usize, [adesc as usize, bdesc as usize, cdesc as usize, ddesc as usize]) {
            out(returned, 0, "returnAlgoCount")?;
            return Err(e);
        }
        // One algorithm, needing no workspace, fits any MAX_WORKSPACE_BYTES.
        let mut algo = cublasLtMatmulAlgo_t::default();
        algo.data[0] = ALGO_ID;
        let r = cublasLtMatmulHeuristicResult_t { algo, workspaceSize: 0, state: S::CUBLAS_STATUS_SUCCESS, wavesCount: 1.0, reserved: [0; 4] };
        out(results, r, "heuristicResultsArray")?;
        out(returned, 1, "returnAlgoCount")
    }

    fn cublasLtMatmul(
        handle: cublasLtHandle_t, desc: cublasLtMatmulDesc_t, alpha: *const c_void, a: *const c_void,
        adesc: cublasLtMatrixLayout_t, b: *const c_void, bdesc: cublasLtMatrixLayout_t, beta: *const c_void,
        c: *const c_void, cdesc: cublasLtMatrixLayout_t, d: *mut c_void, ddesc: cublasLtMatrixLayout_t,
        algo: *const cublasLtMatmulAlgo_t, _workspace: *mut c_void, _workspace_bytes: usize, stream: cudaStream_t,
    ) {
        LT.get(handle as usize, S::CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtHandle_t")?;
        let p = problem(desc as usize, [adesc as usize, bdesc as usize, cdesc as usize, ddesc as usize])?;
        // SAFETY: a non-NULL algo points to a cublasLtMatmulAlgo_t per the API.
        if !algo.is_null() && unsafe { (*algo).data[0] } != ALGO_ID {
            return fail(S::CUBLAS_STATUS_INVALID_VALUE, || "algo is not one cublasLtMatmulAlgoGetHeuristic returned".into());
        }
        let stream = stream as gpupool_shim::cuda::CUstream;
        if p.m == 0 || p.n == 0 {
            return Ok(());
        }
        let scalars = Scalars::read(p.device_pointers, alpha as u64, beta as u64, p.scale, stream)?;
        let operand = |(dtype, stored, stride): (Dtype, Stored, usize), ptr: u64| Operand { dtype, stored, place: Place::Strided { ptr, stride } };
        Gemm {
            transa: p.transa,
            transb: p.transb,
            transc: false,
            m: p.m,
            n: p.n,
            k: p.k,
            a: operand(p.a, a as u64),
            b: operand(p.b, b as u64),
            c: operand(p.c, c as u64),
            d: Some(operand(p.d, d as u64)),
            batch: p.batch,
            scalars,
            bias: p.bias,
            act: p.act,
        }
        .submit(stream)
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtGetStatusName(status: S) -> *const c_char {
    status::name_c(status).as_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtGetStatusString(status: S) -> *const c_char {
    status::string_c(status).as_ptr()
}

#[unsafe(no_mangle)]
pub extern "C" fn cublasLtGetVersion() -> usize {
    VERSION as usize
}

const _: unsafe extern "C" fn(S) -> *const c_char = gpupool_shim::cublas::cublasLtGetStatusName;
const _: unsafe extern "C" fn(S) -> *const c_char = gpupool_shim::cublas::cublasLtGetStatusString;
const _: unsafe extern "C" fn() -> usize = gpupool_shim::cublas::cublasLtGetVersion;
