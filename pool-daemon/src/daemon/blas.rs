//! cuBLAS and cuBLASLt served in the daemon (the protocol's BLAS family, `0x0axx`): each call
//! runs with the backend's library ([`crate::backend::Blas`]) in the tenant's context, on the
//! stream the client named, and is charged to the tenant's compute quota by its measured
//! device time like a kernel ([`super::compute`]).
//!
//! Before the backend sees a call, every handle must be one this session created, and every
//! device pointer must lie inside memory the session owns for the whole extent the call
//! touches: the footprint of each matrix from its dimensions, transpose, leading dimension,
//! batch count and stride (and of each vector from its length and increment). A call that
//! would reach past the caller's allocation is refused with `CUBLAS_STATUS_INVALID_VALUE`
//! and a log line. Batched GEMMs' pointer arrays live in device memory: the daemon reads
//! them, checks each pointer, and hands the backend its own checked copy, so nothing the
//! client writes later can change what the library dereferences.
//!
//! Errors are `cublasStatus_t` codes (the BLAS family's replies); failures of the shared
//! helpers (CUDA codes) are translated once, by [`cu`].

use super::Raw;
use super::dispatch::{Fail, Result};
use super::session::Session;
use crate::backend::{Cublas, CublasLt};
use crate::call;
use gpupool_protocol::ops::blas::{gemm_fn, vector_fn};
use gpupool_protocol::ops::{BlasHandleId, BlasScalar, Gemm, LtLayout, Matmul, Vector};
use gpupool_protocol::{CtxId, DevicePtr, StreamId};
use gpupool_shim::cublas::{
    self as cb, cublasComputeType_t, cublasGemmAlgo_t, cublasHandle_t, cublasLtHandle_t, cublasMath_t,
    cublasOperation_t, cublasPointerMode_t, cublasStatus_t, cudaDataType,
};
use gpupool_shim::cuda::{CUdeviceptr, CUstream};
use std::collections::HashMap;
use std::os::raw::c_void;

pub const NOT_INITIALIZED: u32 = 1;
pub const ALLOC_FAILED: u32 = 3;
pub const INVALID_VALUE: u32 = 7;
pub const EXECUTION_FAILED: u32 = 13;
pub const NOT_SUPPORTED: u32 = 15;

fn invalid(message: impl Into<String>) -> Fail {
    Fail::new(INVALID_VALUE, message)
}

/// A failure of the shared (CUDA) helpers as the cuBLAS status a library call reports.
fn cu<T>(r: Result<T>) -> Result<T> {
    use super::dispatch as d;
    r.map_err(|f| {
        let code = match f.code {
            d::INVALID_VALUE | d::INVALID_HANDLE | d::INVALID_DEVICE => INVALID_VALUE,
            d::OUT_OF_MEMORY => ALLOC_FAILED,
            d::NOT_SUPPORTED => NOT_SUPPORTED,
            d::DEVICE_UNAVAILABLE => NOT_INITIALIZED,
            _ => EXECUTION_FAILED,
        };
        Fail::new(code, f.message)
    })
}

/// A backend call's status as a result (the backend's own status is the client's).
fn status(call: &str, s: cublasStatus_t) -> Result<()> {
    if s == cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Fail::new(s.0, format!("{call} failed ({})", s.0)))
    }
}

macro_rules! blas {
    ($lib:expr, $name:ident($($arg:expr),* $(,)?)) => {{
        let lib = $lib;
        // SAFETY: the arguments follow the entry point's documented contract: handles are
        // ones this session created, device pointers were checked against the session's
        // memory for the extent the call touches, host pointers are to live locals.
        #[allow(clippy::macro_metavars_in_unsafe)]
        let s = unsafe { (lib.$name)($($arg),*) };
        status(stringify!($name), s)
    }};
}

/// A cuBLAS handle of the session.
pub struct Handle {
    raw: Raw<cublasHandle_t>,
    device: u32,
    ctx: CtxId,
    stream: StreamId,
    /// The caller's workspace (cublasSetWorkspace), checked again before each call.
    workspace: Option<(DevicePtr, u64)>,
    /// The backend handle's pointer mode (device: true), switched as each call's scalars say.
    device_mode: bool,
    /// The daemon's own device memory for batched GEMMs' checked pointer arrays (ptr, bytes).
    arrays: Option<(CUdeviceptr, u64)>,
}

/// A cuBLASLt handle of the session.
pub struct LtHandle {
    raw: Raw<cublasLtHandle_t>,
    device: u32,
    ctx: CtxId,
}

/// The session's BLAS handles.
#[derive(Default)]
pub struct Handles {
    v2: HashMap<BlasHandleId, Handle>,
    lt: HashMap<BlasHandleId, LtHandle>,
}

/// Bytes of one element of a `cudaDataType` (real and complex types cuBLAS takes).
fn element_size(t: u32) -> Result<u64> {
    Ok(match t {
        3 | 8 => 1,           // R_8I, R_8U
        2 | 14 => 2,          // R_16F, R_16BF
        0 | 10 | 6 | 15 => 4, // R_32F, R_32I, C_16F, C_16BF
        1 | 4 => 8,           // R_64F, C_32F
        5 => 16,              // C_64F
        _ => return Err(Fail::new(NOT_SUPPORTED, format!("data type {t} is not one cuBLAS takes"))),
    })
}

/// Bytes of alpha and beta for a `cublasComputeType_t`.
fn scale_size(compute: u32) -> Result<u64> {
    Ok(match compute {
        64 | 65 => 2,
        68 | 69 | 74 | 75 | 77 | 72 | 73 => 4,
        70 | 71 => 8,
        _ => return Err(Fail::new(NOT_SUPPORTED, format!("compute type {compute} is not one cuBLAS takes"))),
    })
}

fn count(v: i64, what: &str) -> Result<u64> {
    u64::try_from(v).map_err(|_| invalid(format!("{what} = {v} is negative")))
}

/// Bytes a column-major `rows` x `cols` matrix with leading dimension `ld` spans.
fn matrix_span(rows: u64, cols: u64, ld: u64, es: u64, what: &str) -> Result<u64> {
    if ld < rows.max(1) {
        return Err(invalid(format!("{what}: leading dimension {ld} < {rows} rows")));
    }
    if rows == 0 || cols == 0 {
        return Ok(0);
    }
    (cols - 1)
        .checked_mul(ld)
        .and_then(|x| x.checked_add(rows))
        .and_then(|x| x.checked_mul(es))
        .ok_or_else(|| invalid(format!("{what}: extent overflows")))
}

/// Bytes `batch` matrices of `span` bytes, `stride` elements apart, span.
fn batch_span(span: u64, batch: u64, stride: i64, es: u64, what: &str) -> Result<u64> {
    if span == 0 || batch <= 1 {
        return Ok(span);
    }
    let stride = count(stride, &format!("{what}'s batch stride"))?;
    (batch - 1)
        .checked_mul(stride)
        .and_then(|x| x.checked_mul(es))
        .and_then(|x| x.checked_add(span))
        .ok_or_else(|| invalid(format!("{what}: batch extent overflows")))
}

/// Bytes a vector of `n` elements with increment `inc` spans.
fn vector_span(n: u64, inc: i32, es: u64, what: &str) -> Result<u64> {
    if inc == 0 {
        return Err(invalid(format!("{what}: increment 0")));
    }
    if n == 0 {
        return Ok(0);
    }
    ((n - 1) * inc.unsigned_abs() as u64 + 1)
        .checked_mul(es)
        .ok_or_else(|| invalid(format!("{what}: extent overflows")))
}

/// A host scalar's bytes, or the checked device pointer: what the backend is handed.
enum Scalar {
    Host(u64),
    Device(u64),
}

impl Scalar {
    fn ptr(&self) -> *const c_void {
        match self {
            Scalar::Host(v) => (v as *const u64).cast(),
            Scalar::Device(p) => *p as *const c_void,
        }
    }
}

impl Session {
    /// `[ptr, ptr + bytes)` must be memory of this session on `device` (nothing when empty).
    fn blas_owned(&self, ptr: DevicePtr, bytes: u64, device: u32, what: &str) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let d = cu(self.owned(ptr, bytes))
            .map_err(|f| invalid(format!("{what} ({bytes} bytes at {:#x}): {}", ptr.0, f.message)))?;
        if d != device {
            return Err(invalid(format!("{what} at {:#x} is on device {d}, the handle on {device}", ptr.0)));
        }
        Ok(())
    }

    /// alpha and beta, checked: both in one pointer mode, device ones inside the session's memory.
    fn blas_scalars(&self, s: [BlasScalar; 2], size: u64, device: u32) -> Result<(bool, [Scalar; 2])> {
        let one = |v: BlasScalar, what| match v {
            BlasScalar::Host(bits) => Ok(Scalar::Host(bits)),
            BlasScalar::Device(p) => self.blas_owned(p, size, device, what).map(|()| Scalar::Device(p.0)),
        };
        let device_mode = matches!(s[0], BlasScalar::Device(_));
        if device_mode != matches!(s[1], BlasScalar::Device(_)) {
            return Err(invalid("alpha and beta in different pointer modes"));
        }
        Ok((device_mode, [one(s[0], "alpha")?, one(s[1], "beta")?]))
    }

    fn blas_lib(&self) -> Result<&Cublas> {
        self.shared.blas.v2().map_err(|why| Fail::new(NOT_INITIALIZED, why.to_string()))
    }

    fn lt_lib(&self) -> Result<&CublasLt> {
        self.shared.blas.lt().map_err(|why| Fail::new(NOT_INITIALIZED, why.to_string()))
    }

    fn blas_handle(&self, h: BlasHandleId) -> Result<&Handle> {
        self.blas
            .v2
            .get(&h)
            .ok_or_else(|| Fail::new(NOT_INITIALIZED, format!("cuBLAS handle {} is not one this session holds", h.0)))
    }

    /// Readies handle `h` for a call: its context current, its stream (still the session's)
    /// and workspace (still owned) set on the backend handle, the pointer mode the call's
    /// scalars need. Returns the backend handle, its device and stream.
    fn blas_prepare(&mut self, h: BlasHandleId, device_mode: bool) -> Result<(cublasHandle_t, u32, Raw<CUstream>)> {
        let (raw, d, stream, workspace, mode) = {
            let hd = self.blas_handle(h)?;
            (hd.raw, hd.device, hd.stream, hd.workspace, hd.device_mode)
        };
        let (s, _) = cu(self.stream(stream, Some(d)))?;
        cu(self.enter(d))?;
        let shared = self.shared.clone();
        let lib = shared.blas.v2().map_err(|w| Fail::new(NOT_INITIALIZED, w.to_string()))?;
        blas!(lib, cublasSetStream_v2(raw.0, s.0 as cb::cudaStream_t))?;
        if let Some((p, bytes)) = workspace
            && self.blas_owned(p, bytes, d, "workspace").is_err()
        {
            tracing::info!(
                session = self.id,
                handle = h.0,
                "the handle's workspace was freed; the library's own is used"
            );
            blas!(lib, cublasSetWorkspace_v2(raw.0, std::ptr::null_mut(), 0))?;
            self.blas.v2.get_mut(&h).expect("checked").workspace = None;
        }
        if mode != device_mode {
            let m = if device_mode {
                cublasPointerMode_t::CUBLAS_POINTER_MODE_DEVICE
            } else {
                cublasPointerMode_t::CUBLAS_POINTER_MODE_HOST
            };
            blas!(lib, cublasSetPointerMode_v2(raw.0, m))?;
            self.blas.v2.get_mut(&h).expect("checked").device_mode = device_mode;
        }
        Ok((raw.0, d, s))
    }

    /// Runs `go` (the backend call) on `stream` of device `d` under the compute scheduler, as
    /// a kernel of kind `kind`: admitted against the tenant's quota, bracketed by events, and
    /// charged its measured device time.
    fn blas_charged(
        &mut self,
        d: u32,
        stream: Raw<CUstream>,
        kind: u64,
        go: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let shared = self.shared.clone();
        // Captured, the call's kernels are nodes of a graph, charged when the graph is launched:
        // events recorded now would be captured events (they stand for nodes; asking them
        // whether they completed is an error that invalidates the capture).
        if !shared.compute.enabled || self.capturing(stream) {
            return go();
        }
        let tc = self.tenant_ctxs[&d].clone();
        let key = super::compute::Compute::stream_key(&tc, stream);
        let grant = cu(shared.compute.admit(&shared, d, &tc, self.id, kind, key, self.peer.as_ref()))?;
        // The backend's own failures keep their cuBLAS status; the scheduler's are translated.
        let mut backend: Option<Fail> = None;
        let r = shared.compute.dispatch(&shared, d, &tc, self.id, kind, stream, grant, || {
            go().inspect_err(|f| backend = Some(Fail::new(f.code, f.message.clone())))
        });
        match (r, backend) {
            (Ok(()), _) => Ok(()),
            (Err(_), Some(f)) => Err(f),
            (Err(f), None) => cu(Err(f)),
        }
    }

    pub fn blas_create(&mut self, ctx: CtxId) -> Result<BlasHandleId> {
        let d = cu(self.ctx_device(ctx))?;
        cu(self.enter(d))?;
        let lib = self.blas_lib()?;
        let mut raw: cublasHandle_t = std::ptr::null_mut();
        blas!(lib, cublasCreate_v2(&mut raw))?;
        let id = BlasHandleId(self.next_handle());
        let h = Handle {
            raw: Raw(raw),
            device: d,
            ctx,
            stream: StreamId::NULL,
            workspace: None,
            device_mode: false,
            arrays: None,
        };
        self.blas.v2.insert(id, h);
        Ok(id)
    }

    pub fn blas_destroy(&mut self, h: BlasHandleId) -> Result<()> {
        self.blas_handle(h)?;
        let hd = self.blas.v2.remove(&h).expect("checked");
        self.destroy_blas_handle(hd)
    }

    fn destroy_blas_handle(&mut self, hd: Handle) -> Result<()> {
        cu(self.enter(hd.device))?;
        let shared = self.shared.clone();
        let lib = self.blas_lib()?;
        // cublasDestroy waits for the handle's work; the arrays may be freed after it.
        let r = blas!(lib, cublasDestroy_v2(hd.raw.0));
        if let Some((p, _)) = hd.arrays {
            let _ = call!(shared.cuda, cuCtxSynchronize());
            let _ = call!(shared.cuda, cuMemFree_v2(p));
        }
        r
    }

    pub fn blas_set_stream(&mut self, h: BlasHandleId, stream: StreamId) -> Result<()> {
        let d = self.blas_handle(h)?.device;
        cu(self.stream(stream, Some(d)))?;
        self.blas.v2.get_mut(&h).expect("checked").stream = stream;
        Ok(())
    }

    pub fn blas_set_workspace(&mut self, h: BlasHandleId, ptr: DevicePtr, bytes: u64) -> Result<()> {
        let (raw, d) = {
            let hd = self.blas_handle(h)?;
            (hd.raw, hd.device)
        };
        if ptr.0 == 0 && bytes != 0 {
            return Err(invalid("a NULL workspace of non-zero size"));
        }
        self.blas_owned(ptr, bytes, d, "workspace")?;
        cu(self.enter(d))?;
        let lib = self.blas_lib()?;
        blas!(lib, cublasSetWorkspace_v2(raw.0, ptr.0 as *mut c_void, bytes as usize))?;
        self.blas.v2.get_mut(&h).expect("checked").workspace = (ptr.0 != 0).then_some((ptr, bytes));
        Ok(())
    }

    pub fn blas_set_math_mode(&mut self, h: BlasHandleId, mode: u32) -> Result<()> {
        let (raw, d) = {
            let hd = self.blas_handle(h)?;
            (hd.raw, hd.device)
        };
        if !matches!(mode & !16, 0..=3) {
            return Err(invalid(format!("math mode {mode} is not a cublasMath_t")));
        }
        cu(self.enter(d))?;
        let lib = self.blas_lib()?;
        blas!(lib, cublasSetMathMode(raw.0, cublasMath_t(mode)))
    }

    pub fn blas_gemm(&mut self, h: BlasHandleId, g: Gemm) -> Result<()> {
        let d = self.blas_handle(h)?.device;
        let (m, n, k) = (count(g.m.into(), "m")?, count(g.n.into(), "n")?, count(g.k.into(), "k")?);
        let batch = count(g.batch.into(), "batchCount")?;
        let op = |t: u32, what: &str| match t {
            0 => Ok(false),
            1 | 2 => Ok(true),
            _ => Err(invalid(format!("{what} = {t} is not a cublasOperation_t"))),
        };
        let (ta, tb) = (op(g.transa, "transa")?, op(g.transb, "transb")?);
        let (ar, ac) = if ta { (k, m) } else { (m, k) };
        let (br, bc) = if tb { (n, k) } else { (k, n) };
        let es = [element_size(g.a.dtype)?, element_size(g.b.dtype)?, element_size(g.c.dtype)?];
        let ld = |v: i64, what: &str| count(v, what);
        let mut spans = [
            matrix_span(ar, ac, ld(g.a.ld, "lda")?, es[0], "A")?,
            matrix_span(br, bc, ld(g.b.ld, "ldb")?, es[1], "B")?,
            matrix_span(m, n, ld(g.c.ld, "ldc")?, es[2], "C")?,
        ];
        if k == 0 {
            // A and B are not read.
            spans[0] = 0;
            spans[1] = 0;
        }
        let batched = g.func == gemm_fn::GEMM_BATCHED_EX;
        let mats = [(g.a, "A"), (g.b, "B"), (g.c, "C")];
        let strided = matches!(g.func, gemm_fn::SGEMM_STRIDED_BATCHED | gemm_fn::GEMM_STRIDED_BATCHED_EX);
        if !strided && !batched && batch != 1 {
            return Err(invalid("batchCount of an unbatched GEMM"));
        }
        if !batched {
            for (i, (mat, what)) in mats.iter().enumerate() {
                let span = batch_span(spans[i], batch, mat.stride, es[i], what)?;
                self.blas_owned(mat.ptr, if batch == 0 { 0 } else { span }, d, what)?;
            }
        }
        let (device_mode, [alpha, beta]) = self.blas_scalars([g.alpha, g.beta], scale_size(g.compute)?, d)?;
        let arrays = if batched && batch > 0 {
            Some(self.blas_arrays(h, d, [g.a.ptr, g.b.ptr, g.c.ptr], spans, batch)?)
        } else {
            None
        };
        let (raw, d, s) = self.blas_prepare(h, device_mode)?;
        let shared = self.shared.clone();
        let lib = shared.blas.v2().map_err(|w| Fail::new(NOT_INITIALIZED, w.to_string()))?;
        let kind = shape_kind(&[0x0a06, g.func as u64, m, n, k, batch, g.a.dtype.into(), g.compute.into()]);
        let (a, b, c) = (g.a.ptr.0 as *const c_void, g.b.ptr.0 as *const c_void, g.c.ptr.0 as *mut c_void);
        let (oa, ob) = (cublasOperation_t(g.transa), cublasOperation_t(g.transb));
        let (mi, ni, ki) = (g.m, g.n, g.k);
        let (lda, ldb, ldc) = (int(g.a.ld, "lda")?, int(g.b.ld, "ldb")?, int(g.c.ld, "ldc")?);
        let (ad, bd, cd) = (cudaDataType(g.a.dtype), cudaDataType(g.b.dtype), cudaDataType(g.c.dtype));
        let (compute, algo) = (cublasComputeType_t(g.compute), cublasGemmAlgo_t(g.algo));
        let (al, be) = (alpha.ptr(), beta.ptr());
        self.blas_charged(d, s, kind, || match g.func {
            gemm_fn::SGEMM => blas!(
                lib,
                cublasSgemm_v2(
                    raw,
                    oa,
                    ob,
                    mi,
                    ni,
                    ki,
                    al.cast(),
                    a.cast(),
                    lda,
                    b.cast(),
                    ldb,
                    be.cast(),
                    c.cast(),
                    ldc
                )
            ),
            gemm_fn::DGEMM => blas!(
                lib,
                cublasDgemm_v2(
                    raw,
                    oa,
                    ob,
                    mi,
                    ni,
                    ki,
                    al.cast(),
                    a.cast(),
                    lda,
                    b.cast(),
                    ldb,
                    be.cast(),
                    c.cast(),
                    ldc
                )
            ),
            gemm_fn::HGEMM => blas!(
                lib,
                cublasHgemm(raw, oa, ob, mi, ni, ki, al.cast(), a.cast(), lda, b.cast(), ldb, be.cast(), c.cast(), ldc)
            ),
            gemm_fn::GEMM_EX => blas!(
                lib,
                cublasGemmEx(raw, oa, ob, mi, ni, ki, al, a, ad, lda, b, bd, ldb, be, c, cd, ldc, compute, algo)
            ),
            gemm_fn::SGEMM_STRIDED_BATCHED => blas!(
                lib,
                cublasSgemmStridedBatched(
                    raw,
                    oa,
                    ob,
                    mi,
                    ni,
                    ki,
                    al.cast(),
                    a.cast(),
                    lda,
                    g.a.stride,
                    b.cast(),
                    ldb,
                    g.b.stride,
                    be.cast(),
                    c.cast(),
                    ldc,
                    g.c.stride,
                    g.batch
                )
            ),
            gemm_fn::GEMM_STRIDED_BATCHED_EX => blas!(
                lib,
                cublasGemmStridedBatchedEx(
                    raw, oa, ob, mi, ni, ki, al, a, ad, lda, g.a.stride, b, bd, ldb, g.b.stride, be, c, cd, ldc,
                    g.c.stride, g.batch, compute, algo
                )
            ),
            gemm_fn::GEMM_BATCHED_EX => {
                let arr = arrays.unwrap_or([0; 3]);
                blas!(
                    lib,
                    cublasGemmBatchedEx(
                        raw,
                        oa,
                        ob,
                        mi,
                        ni,
                        ki,
                        al,
                        arr[0] as *const *const c_void,
                        ad,
                        lda,
                        arr[1] as *const *const c_void,
                        bd,
                        ldb,
                        be,
                        arr[2] as *const *mut c_void,
                        cd,
                        ldc,
                        g.batch,
                        compute,
                        algo
                    )
                )
            }
            f => Err(Fail::new(NOT_SUPPORTED, format!("GEMM entry point {f} is not one gpupool forwards"))),
        })
    }

    /// A batched GEMM's three device arrays of `batch` pointers: read once the context's work
    /// is done (so the caller's earlier writes to them have landed), each pointer checked for
    /// its matrix's span, and copied to the daemon's own device memory, which is what the
    /// backend reads. Returns the device addresses of the three checked arrays.
    fn blas_arrays(
        &mut self,
        h: BlasHandleId,
        d: u32,
        arrays: [DevicePtr; 3],
        spans: [u64; 3],
        batch: u64,
    ) -> Result<[u64; 3]> {
        let bytes = batch.checked_mul(8).ok_or_else(|| invalid("batchCount overflows"))?;
        let names = ["Aarray", "Barray", "Carray"];
        for (p, what) in arrays.iter().zip(names) {
            self.blas_owned(*p, bytes, d, what)?;
        }
        cu(self.enter(d))?;
        let shared = self.shared.clone();
        cu(call!(shared.cuda, cuCtxSynchronize()).map_err(Fail::from))?;
        let mut all = vec![0u64; 3 * batch as usize];
        for (i, p) in arrays.iter().enumerate() {
            let dst = &mut all[i * batch as usize..(i + 1) * batch as usize];
            cu(call!(shared.cuda, cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), p.0, bytes as usize)).map_err(Fail::from))?;
            for (j, &q) in dst.iter().enumerate() {
                self.blas_owned(DevicePtr(q), spans[i], d, &format!("{}[{j}]", names[i]))?;
            }
        }
        let need = 3 * bytes;
        let have = self.blas_handle(h)?.arrays;
        let base = match have {
            Some((p, n)) if n >= need => p,
            _ => {
                if let Some((p, _)) = have {
                    let _ = call!(shared.cuda, cuMemFree_v2(p));
                    self.blas.v2.get_mut(&h).expect("checked").arrays = None;
                }
                let mut p: CUdeviceptr = 0;
                cu(call!(shared.cuda, cuMemAlloc_v2(&mut p, need as usize)).map_err(Fail::from))?;
                self.blas.v2.get_mut(&h).expect("checked").arrays = Some((p, need));
                p
            }
        };
        cu(call!(shared.cuda, cuMemcpyHtoD_v2(base, all.as_ptr().cast(), need as usize)).map_err(Fail::from))?;
        Ok([base, base + bytes, base + 2 * bytes])
    }

    pub fn blas_vector(&mut self, h: BlasHandleId, v: Vector) -> Result<()> {
        let d = self.blas_handle(h)?.device;
        let es = if v.func == vector_fn::DGEMV { 8 } else { 4 };
        let (m, n) = (count(v.m.into(), "m")?, count(v.n.into(), "n")?);
        match v.func {
            vector_fn::SGEMV | vector_fn::DGEMV => {
                let t = match v.trans {
                    0 => false,
                    1 | 2 => true,
                    t => return Err(invalid(format!("trans = {t} is not a cublasOperation_t"))),
                };
                let (lx, ly) = if t { (m, n) } else { (n, m) };
                let a = matrix_span(m, n, count(v.lda.into(), "lda")?, es, "A")?;
                self.blas_owned(v.a, a, d, "A")?;
                self.blas_owned(v.x, vector_span(lx, v.incx, es, "x")?, d, "x")?;
                self.blas_owned(v.y, vector_span(ly, v.incy, es, "y")?, d, "y")?;
            }
            vector_fn::SAXPY => {
                self.blas_owned(v.x, vector_span(n, v.incx, es, "x")?, d, "x")?;
                self.blas_owned(v.y, vector_span(n, v.incy, es, "y")?, d, "y")?;
            }
            vector_fn::SSCAL => {
                // cuBLAS returns at once for a non-positive increment, touching nothing.
                if v.incx > 0 {
                    self.blas_owned(v.x, vector_span(n, v.incx, es, "x")?, d, "x")?;
                }
            }
            f => return Err(Fail::new(NOT_SUPPORTED, format!("vector routine {f} is not one gpupool forwards"))),
        }
        // axpy and scal take alpha only: beta travels as alpha's twin.
        let (device_mode, [alpha, beta]) = self.blas_scalars([v.alpha, v.beta], es, d)?;
        let (raw, d, s) = self.blas_prepare(h, device_mode)?;
        let shared = self.shared.clone();
        let lib = shared.blas.v2().map_err(|w| Fail::new(NOT_INITIALIZED, w.to_string()))?;
        let kind = shape_kind(&[0x0a07, v.func as u64, m, n]);
        let (al, be) = (alpha.ptr(), beta.ptr());
        let (a, x, y) = (v.a.0 as *const c_void, v.x.0 as *mut c_void, v.y.0 as *mut c_void);
        let tr = cublasOperation_t(v.trans);
        self.blas_charged(d, s, kind, || match v.func {
            vector_fn::SGEMV => blas!(
                lib,
                cublasSgemv_v2(
                    raw,
                    tr,
                    v.m,
                    v.n,
                    al.cast(),
                    a.cast(),
                    v.lda,
                    x.cast(),
                    v.incx,
                    be.cast(),
                    y.cast(),
                    v.incy
                )
            ),
            vector_fn::DGEMV => blas!(
                lib,
                cublasDgemv_v2(
                    raw,
                    tr,
                    v.m,
                    v.n,
                    al.cast(),
                    a.cast(),
                    v.lda,
                    x.cast(),
                    v.incx,
                    be.cast(),
                    y.cast(),
                    v.incy
                )
            ),
            vector_fn::SAXPY => blas!(lib, cublasSaxpy_v2(raw, v.n, al.cast(), x.cast(), v.incx, y.cast(), v.incy)),
            _ => blas!(lib, cublasSscal_v2(raw, v.n, al.cast(), x.cast(), v.incx)),
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub fn blas_sdot(
        &mut self,
        h: BlasHandleId,
        n: i32,
        x: DevicePtr,
        incx: i32,
        y: DevicePtr,
        incy: i32,
        result: Option<DevicePtr>,
    ) -> Result<u64> {
        let d = self.blas_handle(h)?.device;
        let len = count(n.into(), "n")?;
        self.blas_owned(x, vector_span(len, incx, 4, "x")?, d, "x")?;
        self.blas_owned(y, vector_span(len, incy, 4, "y")?, d, "y")?;
        if let Some(r) = result {
            self.blas_owned(r, 4, d, "result")?;
        }
        let (raw, d, s) = self.blas_prepare(h, result.is_some())?;
        let shared = self.shared.clone();
        let lib = shared.blas.v2().map_err(|w| Fail::new(NOT_INITIALIZED, w.to_string()))?;
        let mut value = 0f32;
        let out: *mut f32 = match result {
            Some(r) => r.0 as *mut f32,
            None => &mut value,
        };
        let kind = shape_kind(&[0x0a08, len]);
        // In host pointer mode the library returns once the value is written.
        self.blas_charged(d, s, kind, || {
            blas!(lib, cublasSdot_v2(raw, n, x.0 as *const f32, incx, y.0 as *const f32, incy, out))
        })?;
        Ok(value.to_bits().into())
    }

    fn lt_handle(&self, h: BlasHandleId) -> Result<&LtHandle> {
        self.blas
            .lt
            .get(&h)
            .ok_or_else(|| Fail::new(NOT_INITIALIZED, format!("cuBLASLt handle {} is not one this session holds", h.0)))
    }

    pub fn lt_create(&mut self, ctx: CtxId) -> Result<BlasHandleId> {
        let d = cu(self.ctx_device(ctx))?;
        cu(self.enter(d))?;
        let lib = self.lt_lib()?;
        let mut raw: cublasLtHandle_t = std::ptr::null_mut();
        blas!(lib, cublasLtCreate(&mut raw))?;
        let id = BlasHandleId(self.next_handle());
        self.blas.lt.insert(id, LtHandle { raw: Raw(raw), device: d, ctx });
        Ok(id)
    }

    pub fn lt_destroy(&mut self, h: BlasHandleId) -> Result<()> {
        self.lt_handle(h)?;
        let hd = self.blas.lt.remove(&h).expect("checked");
        cu(self.enter(hd.device))?;
        let lib = self.lt_lib()?;
        blas!(lib, cublasLtDestroy(hd.raw.0))
    }

    /// The backend's objects for `mm`, made for one call and destroyed after it.
    fn lt_objects<'l>(&self, lib: &'l CublasLt, mm: &Matmul) -> Result<super::blas_lt::Objects<'l>> {
        super::blas_lt::Objects::new(lib, mm)
    }

    pub fn lt_heuristic(
        &mut self,
        h: BlasHandleId,
        mm: Matmul,
        max_workspace: u64,
        requested: i32,
    ) -> Result<(u32, u64)> {
        let (raw, d) = {
            let hd = self.lt_handle(h)?;
            (hd.raw, hd.device)
        };
        if requested <= 0 {
            return Err(invalid(format!("requestedAlgoCount = {requested}")));
        }
        cu(self.enter(d))?;
        let shared = self.shared.clone();
        let lib = shared.blas.lt().map_err(|w| Fail::new(NOT_INITIALIZED, w.to_string()))?;
        let o = self.lt_objects(lib, &mm)?;
        o.heuristic(raw.0, max_workspace, requested)
    }

    pub fn lt_matmul(&mut self, h: BlasHandleId, mm: Matmul) -> Result<()> {
        let (raw, d) = {
            let hd = self.lt_handle(h)?;
            (hd.raw, hd.device)
        };
        let layouts =
            [(mm.a, mm.a_layout, "A"), (mm.b, mm.b_layout, "B"), (mm.c, mm.c_layout, "C"), (mm.d, mm.d_layout, "D")];
        for (p, l, what) in layouts {
            let span = layout_span(&l, what)?;
            if span > 0 && p.0 == 0 {
                return Err(invalid(format!("{what} is NULL")));
            }
            self.blas_owned(p, span, d, what)?;
        }
        if super::blas_lt::has_bias(mm.desc.epilogue) {
            let t = if mm.desc.bias_dtype == u32::MAX { mm.d_layout.dtype } else { mm.desc.bias_dtype };
            let bytes =
                mm.d_layout.rows.checked_mul(element_size(t)?).ok_or_else(|| invalid("bias extent overflows"))?;
            if mm.desc.bias.0 == 0 {
                return Err(invalid("a bias epilogue without a bias pointer"));
            }
            self.blas_owned(mm.desc.bias, bytes, d, "bias")?;
        }
        if mm.workspace_bytes > 0 {
            self.blas_owned(mm.workspace, mm.workspace_bytes, d, "workspace")?;
        }
        let (_, [alpha, beta]) = self.blas_scalars([mm.alpha, mm.beta], element_size(mm.desc.scale)?, d)?;
        let (s, _) = cu(self.stream(mm.stream, Some(d)))?;
        cu(self.enter(d))?;
        let shared = self.shared.clone();
        let lib = shared.blas.lt().map_err(|w| Fail::new(NOT_INITIALIZED, w.to_string()))?;
        let o = self.lt_objects(lib, &mm)?;
        let kind = shape_kind(&[
            0x0a13,
            mm.d_layout.rows,
            mm.d_layout.cols,
            mm.a_layout.cols,
            mm.desc.epilogue.into(),
            mm.a_layout.dtype.into(),
        ]);
        self.blas_charged(d, s, kind, || o.matmul(raw.0, &mm, alpha.ptr(), beta.ptr(), s.0 as cb::cudaStream_t))
    }

    /// Destroys the handles created through client context `only` (all: `None`), and the
    /// daemon's memory they hold (for the session's end, or a context's destruction).
    pub fn free_blas(&mut self, only: Option<CtxId>) -> usize {
        let mine = |c: CtxId| only.is_none_or(|o| o == c);
        let v2: Vec<_> = self.blas.v2.iter().filter(|(_, h)| mine(h.ctx)).map(|(&k, _)| k).collect();
        let lt: Vec<_> = self.blas.lt.iter().filter(|(_, h)| mine(h.ctx)).map(|(&k, _)| k).collect();
        let n = v2.len() + lt.len();
        for k in v2 {
            if let Err(e) = self.blas_destroy(k) {
                tracing::debug!(session = self.id, "freeing a cuBLAS handle: {}", e.message);
            }
        }
        for k in lt {
            if let Err(e) = self.lt_destroy(k) {
                tracing::debug!(session = self.id, "freeing a cuBLASLt handle: {}", e.message);
            }
        }
        n
    }
}

fn int(v: i64, what: &str) -> Result<i32> {
    i32::try_from(v).map_err(|_| invalid(format!("{what} = {v} does not fit an int")))
}

/// Bytes a cuBLASLt matrix spans (its layout's order, leading dimension, batch and stride).
pub fn layout_span(l: &LtLayout, what: &str) -> Result<u64> {
    let es = element_size(l.dtype)?;
    let span = match l.order {
        0 => matrix_span(l.rows, l.cols, count(l.ld, "ld")?, es, what)?,
        1 => matrix_span(l.cols, l.rows, count(l.ld, "ld")?, es, what)?,
        o => return Err(Fail::new(NOT_SUPPORTED, format!("{what}: matrix order {o} is not one gpupool forwards"))),
    };
    batch_span(span, count(l.batch.into(), "batch count")?, l.stride, es, what)
}

/// The scheduler's kind for a BLAS call: its operation and shape (so its time estimate is
/// per shape), with the top bit set so it never equals a kernel's function id.
fn shape_kind(parts: &[u64]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    h.finish() | 1 << 63
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footprints_follow_dimensions_leading_dimension_and_batch() {
        // 3x2 column major, ld 4: the last column starts at 4 and holds 3.
        assert_eq!(matrix_span(3, 2, 4, 4, "A").unwrap(), (4 + 3) * 4);
        assert_eq!(matrix_span(0, 5, 1, 4, "A").unwrap(), 0);
        assert_eq!(matrix_span(3, 2, 2, 4, "A").unwrap_err().code, INVALID_VALUE);
        assert_eq!(batch_span(28, 3, 10, 4, "A").unwrap(), 2 * 10 * 4 + 28);
        assert_eq!(batch_span(28, 3, -1, 4, "A").unwrap_err().code, INVALID_VALUE);
        assert_eq!(vector_span(4, -2, 4, "x").unwrap(), (3 * 2 + 1) * 4);
        assert_eq!(vector_span(4, 0, 4, "x").unwrap_err().code, INVALID_VALUE);
        let row = LtLayout { dtype: 0, order: 1, rows: 2, cols: 3, ld: 5, batch: 1, stride: 0 };
        assert_eq!(layout_span(&row, "A").unwrap(), (5 + 3) * 4);
    }
}
