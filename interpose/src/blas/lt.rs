//! cuBLASLt: handles live in the daemon; matmul descriptors, matrix layouts and preferences
//! live here (each is a few scalars: remoting every create/set/destroy would cost a round trip
//! and daemon state apiece for nothing) and travel by value with each heuristic query and
//! matmul. The algorithms a heuristic returns are marked as gpupool's; a matmul lets the
//! daemon's library choose by its own heuristic (the client's 64 opaque bytes are never sent).

use super::{B, INVALID, NOT_INITIALIZED, NOT_SUPPORTED, Table, ask, refuse, scalar, scalar_size, stream_id};
use gpupool_protocol::DevicePtr;
use gpupool_protocol::Request;
use gpupool_protocol::ops::{BlasHandleId, LtDesc, LtLayout, Matmul, answer};
use gpupool_shim::cublas::{
    cublasComputeType_t, cublasLtHandle_t, cublasLtMatmulAlgo_t, cublasLtMatmulDesc_t,
    cublasLtMatmulDescAttributes_t as DA, cublasLtMatmulHeuristicResult_t, cublasLtMatmulPreference_t,
    cublasLtMatmulPreferenceAttributes_t as PA, cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t as LA,
    cublasStatus_t, cudaDataType, cudaStream_t,
};
use std::ffi::c_void;
use std::os::raw::c_int;

#[derive(Clone, Copy)]
struct Desc {
    d: LtDesc,
    pointer_mode: i32,
    transc: i32,
}

static HANDLES: Table<BlasHandleId> = Table::new();
static DESCS: Table<Desc> = Table::new();
static LAYOUTS: Table<LtLayout> = Table::new();
static PREFS: Table<Pref> = Table::new();

/// A matmul preference's attributes.
#[derive(Clone, Copy)]
struct Pref {
    max_workspace: u64,
    reduction_mask: u32,
}

/// "gpupool\0": the first word of every algorithm a heuristic here returns; the third is the
/// preference's reduction-scheme mask, which the matmul that uses the algorithm must honour.
const ALGO_MARK: u64 = u64::from_le_bytes(*b"gpupool\0");
const ALGO_REDUCTION_MASK: usize = 2;

/// `CUBLASLT_REDUCTION_SCHEME_MASK`: every split-K reduction (in place, in the compute type,
/// in the output type), the preference's default and a NULL algorithm's.
const ALL_REDUCTIONS: u32 = 7;

/// An attribute value from the caller's buffer: exactly the attribute's size, as cuBLASLt requires.
fn read<T: Copy>(buf: *const c_void, size: usize, what: &str) -> B<T> {
    if buf.is_null() || size != std::mem::size_of::<T>() {
        return refuse(INVALID, &format!("{what}: {size} bytes given, the attribute has {}", std::mem::size_of::<T>()));
    }
    // SAFETY: non-null and `size` bytes, the size of T (unaligned: any caller buffer).
    Ok(unsafe { buf.cast::<T>().read_unaligned() })
}

/// Writes an attribute value for a getter: `size` 0 asks only for the size.
fn write<T: Copy>(v: T, buf: *mut c_void, size: usize, written: *mut usize) -> B<()> {
    let need = std::mem::size_of::<T>();
    if size == 0 && !written.is_null() {
        crate::api::export::put(written, need);
        return Ok(());
    }
    if buf.is_null() || size < need {
        return refuse(INVALID, &format!("attribute buffer of {size} bytes, {need} needed"));
    }
    // SAFETY: non-null with at least `need` writable bytes, per the caller's `size`.
    unsafe { buf.cast::<T>().write_unaligned(v) };
    crate::api::export::put(written, need);
    Ok(())
}

/// The daemon's id of a cuBLASLt handle: one from `cublasLtCreate`, or a cuBLAS handle cast
/// to one (documented as valid; [`super::v2::lt_of`]).
fn handle(h: cublasLtHandle_t) -> B<BlasHandleId> {
    if let Some(id) = HANDLES.find(h as usize) {
        return Ok(id);
    }
    match super::v2::lt_of(h as usize) {
        Some(id) => id,
        None => refuse(NOT_INITIALIZED, &format!("cuBLASLt handle {:#x} is not one this process holds", h as usize)),
    }
}

pub fn create() -> B<cublasLtHandle_t> {
    let ctx = super::current_ctx()?;
    let answer::BlasHandle { handle } = ask(Request::LtCreate { ctx })?;
    Ok(HANDLES.insert(handle) as cublasLtHandle_t)
}

pub fn destroy(h: cublasLtHandle_t) -> B<()> {
    let id = HANDLES.remove(h as usize, NOT_INITIALIZED, "cuBLASLt handle")?;
    ask::<answer::Ok>(Request::LtDestroy { handle: id }).map(|_| ())
}

pub fn desc_create(compute: cublasComputeType_t, scale: cudaDataType) -> B<cublasLtMatmulDesc_t> {
    scalar_size(scale.0)?;
    let d = LtDesc { compute: compute.0, scale: scale.0, epilogue: 1, bias_dtype: u32::MAX, ..Default::default() };
    Ok(DESCS.insert(Desc { d, pointer_mode: 0, transc: 0 }) as cublasLtMatmulDesc_t)
}

pub fn desc_destroy(d: cublasLtMatmulDesc_t) -> B<()> {
    DESCS.remove(d as usize, INVALID, "matmul descriptor").map(|_| ())
}

pub fn desc_set(d: cublasLtMatmulDesc_t, attr: DA, buf: *const c_void, size: usize) -> B<()> {
    DESCS.update(d as usize, INVALID, "matmul descriptor", |x| {
        match attr {
            DA::CUBLASLT_MATMUL_DESC_COMPUTE_TYPE => x.d.compute = read(buf, size, "COMPUTE_TYPE")?,
            DA::CUBLASLT_MATMUL_DESC_SCALE_TYPE => {
                x.d.scale = read(buf, size, "SCALE_TYPE")?;
                scalar_size(x.d.scale)?;
            }
            DA::CUBLASLT_MATMUL_DESC_POINTER_MODE => x.pointer_mode = read(buf, size, "POINTER_MODE")?,
            DA::CUBLASLT_MATMUL_DESC_TRANSA => x.d.transa = read::<i32>(buf, size, "TRANSA")? as u32,
            DA::CUBLASLT_MATMUL_DESC_TRANSB => x.d.transb = read::<i32>(buf, size, "TRANSB")? as u32,
            DA::CUBLASLT_MATMUL_DESC_TRANSC => x.transc = read(buf, size, "TRANSC")?,
            DA::CUBLASLT_MATMUL_DESC_EPILOGUE => x.d.epilogue = read(buf, size, "EPILOGUE")?,
            DA::CUBLASLT_MATMUL_DESC_BIAS_POINTER => x.d.bias = DevicePtr(read::<u64>(buf, size, "BIAS_POINTER")?),
            DA::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE => {
                x.d.bias_dtype = read::<i32>(buf, size, "BIAS_DATA_TYPE")? as u32
            }
            other => {
                return refuse(
                    INVALID,
                    &format!("matmul descriptor attribute {} is not one gpupool forwards", other.0),
                );
            }
        }
        Ok(())
    })
}

pub fn desc_get(d: cublasLtMatmulDesc_t, attr: DA, buf: *mut c_void, size: usize, written: *mut usize) -> B<()> {
    let x = DESCS.get(d as usize, INVALID, "matmul descriptor")?;
    match attr {
        DA::CUBLASLT_MATMUL_DESC_COMPUTE_TYPE => write(x.d.compute, buf, size, written),
        DA::CUBLASLT_MATMUL_DESC_SCALE_TYPE => write(x.d.scale, buf, size, written),
        DA::CUBLASLT_MATMUL_DESC_POINTER_MODE => write(x.pointer_mode, buf, size, written),
        DA::CUBLASLT_MATMUL_DESC_TRANSA => write(x.d.transa as i32, buf, size, written),
        DA::CUBLASLT_MATMUL_DESC_TRANSB => write(x.d.transb as i32, buf, size, written),
        DA::CUBLASLT_MATMUL_DESC_TRANSC => write(x.transc, buf, size, written),
        DA::CUBLASLT_MATMUL_DESC_EPILOGUE => write(x.d.epilogue, buf, size, written),
        DA::CUBLASLT_MATMUL_DESC_BIAS_POINTER => write(x.d.bias.0, buf, size, written),
        DA::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE => write(x.d.bias_dtype as i32, buf, size, written),
        other => refuse(INVALID, &format!("matmul descriptor attribute {} is not one gpupool forwards", other.0)),
    }
}

pub fn layout_create(t: cudaDataType, rows: u64, cols: u64, ld: i64) -> B<cublasLtMatrixLayout_t> {
    let l = LtLayout { dtype: t.0, order: 0, rows, cols, ld, batch: 1, stride: 0 };
    Ok(LAYOUTS.insert(l) as cublasLtMatrixLayout_t)
}

pub fn layout_destroy(l: cublasLtMatrixLayout_t) -> B<()> {
    LAYOUTS.remove(l as usize, INVALID, "matrix layout").map(|_| ())
}

pub fn layout_set(l: cublasLtMatrixLayout_t, attr: LA, buf: *const c_void, size: usize) -> B<()> {
    LAYOUTS.update(l as usize, INVALID, "matrix layout", |x| {
        match attr {
            LA::CUBLASLT_MATRIX_LAYOUT_TYPE => x.dtype = read(buf, size, "TYPE")?,
            LA::CUBLASLT_MATRIX_LAYOUT_ORDER => x.order = read::<i32>(buf, size, "ORDER")? as u32,
            LA::CUBLASLT_MATRIX_LAYOUT_ROWS => x.rows = read(buf, size, "ROWS")?,
            LA::CUBLASLT_MATRIX_LAYOUT_COLS => x.cols = read(buf, size, "COLS")?,
            LA::CUBLASLT_MATRIX_LAYOUT_LD => x.ld = read(buf, size, "LD")?,
            LA::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT => x.batch = read(buf, size, "BATCH_COUNT")?,
            LA::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET => x.stride = read(buf, size, "STRIDED_BATCH_OFFSET")?,
            other => {
                return refuse(INVALID, &format!("matrix layout attribute {} is not one gpupool forwards", other.0));
            }
        }
        Ok(())
    })
}

pub fn layout_get(l: cublasLtMatrixLayout_t, attr: LA, buf: *mut c_void, size: usize, written: *mut usize) -> B<()> {
    let x = LAYOUTS.get(l as usize, INVALID, "matrix layout")?;
    match attr {
        LA::CUBLASLT_MATRIX_LAYOUT_TYPE => write(x.dtype, buf, size, written),
        LA::CUBLASLT_MATRIX_LAYOUT_ORDER => write(x.order as i32, buf, size, written),
        LA::CUBLASLT_MATRIX_LAYOUT_ROWS => write(x.rows, buf, size, written),
        LA::CUBLASLT_MATRIX_LAYOUT_COLS => write(x.cols, buf, size, written),
        LA::CUBLASLT_MATRIX_LAYOUT_LD => write(x.ld, buf, size, written),
        LA::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT => write(x.batch, buf, size, written),
        LA::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET => write(x.stride, buf, size, written),
        other => refuse(INVALID, &format!("matrix layout attribute {} is not one gpupool forwards", other.0)),
    }
}

pub fn pref_create() -> B<cublasLtMatmulPreference_t> {
    Ok(PREFS.insert(Pref { max_workspace: 0, reduction_mask: ALL_REDUCTIONS }) as cublasLtMatmulPreference_t)
}

pub fn pref_destroy(p: cublasLtMatmulPreference_t) -> B<()> {
    PREFS.remove(p as usize, INVALID, "matmul preference").map(|_| ())
}

pub fn pref_set(p: cublasLtMatmulPreference_t, attr: PA, buf: *const c_void, size: usize) -> B<()> {
    PREFS.update(p as usize, INVALID, "matmul preference", |x| {
        match attr {
            // Checked, not kept: the daemon's heuristic searches best-fit either way (an
            // algorithm id to limit it to is never handed out here).
            PA::CUBLASLT_MATMUL_PREF_SEARCH_MODE => {
                read::<u32>(buf, size, "SEARCH_MODE")?;
            }
            PA::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES => x.max_workspace = read(buf, size, "MAX_WORKSPACE_BYTES")?,
            // PyTorch sets it (no reduction in the output type) unless fp16/bf16 reduced
            // precision reductions are allowed. It travels with the heuristic query and, in
            // the algorithm returned, with each matmul, where the daemon's library honours it.
            PA::CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK => {
                let mask: u32 = read(buf, size, "REDUCTION_SCHEME_MASK")?;
                if mask & !ALL_REDUCTIONS != 0 {
                    return refuse(
                        INVALID,
                        &format!("REDUCTION_SCHEME_MASK {mask:#x} names no cublasLtReductionScheme_t"),
                    );
                }
                x.reduction_mask = mask;
            }
            // The caller's promise that its pointers are this aligned (PyTorch sets all four
            // from the tensors' addresses), which narrows NVIDIA's heuristic to algorithms that
            // need no more. An algorithm from `heuristic` here holds no such assumption: the
            // daemon's library chooses at each matmul, for the pointers it is given. So the
            // value is checked (a uint32_t, as cublasLt.h has it) and needs keeping nowhere.
            PA::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES
            | PA::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES
            | PA::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES
            | PA::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES => {
                read::<u32>(buf, size, "MIN_ALIGNMENT_*_BYTES")?;
            }
            other => {
                return refuse(
                    INVALID,
                    &format!("matmul preference attribute {} is not one gpupool forwards", other.0),
                );
            }
        }
        Ok(())
    })
}

/// The wire form of a matmul's descriptor and layouts (pointers zero: a heuristic query).
fn matmul_shape(desc: cublasLtMatmulDesc_t, layouts: [cublasLtMatrixLayout_t; 4]) -> B<(Desc, Matmul)> {
    let x = DESCS.get(desc as usize, INVALID, "matmul descriptor")?;
    if x.transc != 0 {
        return refuse(NOT_SUPPORTED, "a transposed C (TRANSC) is not one gpupool forwards");
    }
    let l = |i: usize| LAYOUTS.get(layouts[i] as usize, INVALID, "matrix layout");
    let zero = gpupool_protocol::ops::BlasScalar::Host(0);
    let mm = Matmul {
        desc: x.d,
        alpha: zero,
        beta: zero,
        a: DevicePtr(0),
        a_layout: l(0)?,
        b: DevicePtr(0),
        b_layout: l(1)?,
        c: DevicePtr(0),
        c_layout: l(2)?,
        d: DevicePtr(0),
        d_layout: l(3)?,
        workspace: DevicePtr(0),
        workspace_bytes: 0,
        stream: gpupool_protocol::StreamId::NULL,
        reduction_mask: ALL_REDUCTIONS,
    };
    Ok((x, mm))
}

#[allow(clippy::too_many_arguments)]
pub fn heuristic(
    h: cublasLtHandle_t,
    desc: cublasLtMatmulDesc_t,
    a: cublasLtMatrixLayout_t,
    b: cublasLtMatrixLayout_t,
    c: cublasLtMatrixLayout_t,
    d: cublasLtMatrixLayout_t,
    pref: cublasLtMatmulPreference_t,
    requested: c_int,
    results: *mut cublasLtMatmulHeuristicResult_t,
    returned: *mut c_int,
) -> B<()> {
    let id = handle(h)?;
    let pref = PREFS.get(pref as usize, INVALID, "matmul preference")?;
    if requested <= 0 || results.is_null() || returned.is_null() {
        return refuse(INVALID, "cublasLtMatmulAlgoGetHeuristic: no room for results");
    }
    let (_, mut matmul) = matmul_shape(desc, [a, b, c, d])?;
    matmul.reduction_mask = pref.reduction_mask;
    let max_workspace = pref.max_workspace;
    let answer::LtAlgos { count, workspace_bytes } =
        ask(Request::LtHeuristic { handle: id, matmul: Box::new(matmul), max_workspace, requested })?;
    let n = (count as usize).min(requested as usize);
    for i in 0..n {
        let mut algo = cublasLtMatmulAlgo_t { data: [0; 8] };
        algo.data[0] = ALGO_MARK;
        algo.data[1] = i as u64;
        algo.data[ALGO_REDUCTION_MASK] = pref.reduction_mask.into();
        let r = cublasLtMatmulHeuristicResult_t {
            algo,
            workspaceSize: workspace_bytes as usize,
            state: cublasStatus_t::CUBLAS_STATUS_SUCCESS,
            wavesCount: 1.0,
            reserved: [0; 4],
        };
        // SAFETY: the caller provides `requested` result slots; i < requested.
        unsafe { results.add(i).write_unaligned(r) };
    }
    crate::api::export::put(returned, n as c_int);
    if n == 0 { refuse(NOT_SUPPORTED, "the daemon's library has no algorithm for this matmul") } else { Ok(()) }
}

#[allow(clippy::too_many_arguments)]
pub fn matmul(
    h: cublasLtHandle_t,
    desc: cublasLtMatmulDesc_t,
    alpha: *const c_void,
    a: *const c_void,
    al: cublasLtMatrixLayout_t,
    b: *const c_void,
    bl: cublasLtMatrixLayout_t,
    beta: *const c_void,
    c: *const c_void,
    cl: cublasLtMatrixLayout_t,
    d: *mut c_void,
    dl: cublasLtMatrixLayout_t,
    algo: *const cublasLtMatmulAlgo_t,
    workspace: *mut c_void,
    workspace_bytes: usize,
    stream: cudaStream_t,
) -> B<()> {
    let id = handle(h)?;
    let mut reduction_mask = ALL_REDUCTIONS;
    if !algo.is_null() {
        // SAFETY: non-null: the caller's algorithm struct (64 bytes).
        let data = unsafe { algo.read_unaligned() }.data;
        if data[0] != ALGO_MARK {
            return refuse(INVALID, "an algorithm not from this library's heuristic");
        }
        reduction_mask = u32::try_from(data[ALGO_REDUCTION_MASK]).unwrap_or(ALL_REDUCTIONS) & ALL_REDUCTIONS;
    }
    let (x, mut mm) = matmul_shape(desc, [al, bl, cl, dl])?;
    mm.reduction_mask = reduction_mask;
    let size = scalar_size(x.d.scale)?;
    if !(0..=1).contains(&x.pointer_mode) {
        return refuse(NOT_SUPPORTED, &format!("pointer mode {} is not one gpupool forwards", x.pointer_mode));
    }
    let device_mode = x.pointer_mode == 1;
    let p = |v: *const c_void| DevicePtr(v as u64);
    mm.alpha = scalar(alpha, size, device_mode)?;
    mm.beta = scalar(beta, size, device_mode)?;
    (mm.a, mm.b, mm.c, mm.d) = (p(a), p(b), p(c), p(d.cast_const()));
    (mm.workspace, mm.workspace_bytes) = (p(workspace.cast_const()), workspace_bytes as u64);
    mm.stream = stream_id(stream.cast())?;
    ask::<answer::Ok>(Request::LtMatmul { handle: id, matmul: Box::new(mm) }).map(|_| ())
}
