//! The simulator's libcublas / libcublasLt (sim-blas), loaded from the simulator's libdir as
//! `libcublas.so.13` next to its `libcuda.so.1`, as the pool daemon loads a backend's cuBLAS.
//! Every routine is checked against a naive GEMM on the host, for each element type,
//! transposes, leading dimensions, strided and pointer-array batches, both pointer modes, the
//! cuBLASLt epilogues, ordering on the handle's stream, and the documented error statuses.

use gpupool_e2e::{Context, DeviceBuffer, Gate, Stream, call, check, cuda, sim_libdir};
use gpupool_shim::cublas::{cublasStatus_t as S, cudaDataType_t as T};
use half::{bf16, f16};
use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

type H = *mut c_void;
const OK: S = S::CUBLAS_STATUS_SUCCESS;
const INVALID: S = S::CUBLAS_STATUS_INVALID_VALUE;
const N: u32 = 0;
const TR: u32 = 1;

fn lib() -> &'static libloading::Library {
    static LIB: OnceLock<libloading::Library> = OnceLock::new();
    LIB.get_or_init(|| {
        cuda(); // the simulator first, as a process that uses cuBLAS has its driver loaded
        // SAFETY: the simulator's cuBLAS; loading it runs no initialisers with preconditions.
        unsafe { libloading::Library::new(sim_libdir().join("libcublas.so.13")) }.expect("load libcublas.so.13")
    })
}

/// An entry point of the library, typed by the caller.
macro_rules! f {
    ($name:literal: $ty:ty) => {
        entry::<$ty>(concat!($name, "\0"))
    };
}

/// The export `name` (NUL-terminated) as `F`, which must be its documented signature.
fn entry<F: Copy>(name: &str) -> F {
    // SAFETY: callers name the export with the signature NVIDIA documents for it.
    *unsafe { lib().get::<F>(name.as_bytes()) }.unwrap_or_else(|e| panic!("{name}: {e}"))
}

type Gemm = unsafe extern "C" fn(
    H,
    u32,
    u32,
    c_int,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    c_int,
    *const c_void,
    c_int,
    *const c_void,
    *mut c_void,
    c_int,
) -> S;
type GemmEx = unsafe extern "C" fn(
    H,
    u32,
    u32,
    c_int,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    T,
    c_int,
    *const c_void,
    T,
    c_int,
    *const c_void,
    *mut c_void,
    T,
    c_int,
    u32,
    i32,
) -> S;

/// A fresh context (current on this thread) and a cuBLAS handle in it.
fn setup() -> (Context, H) {
    let ctx = Context::new(0);
    let mut h: H = std::ptr::null_mut();
    assert_eq!(unsafe { f!("cublasCreate_v2": unsafe extern "C" fn(*mut H) -> S)(&mut h) }, OK);
    assert!(!h.is_null());
    (ctx, h)
}

fn destroy(h: H) {
    assert_eq!(unsafe { f!("cublasDestroy_v2": unsafe extern "C" fn(H) -> S)(h) }, OK);
}

/// Deterministic test values in [-1, 1), exactly representable in bf16.
fn values(n: usize, seed: u32) -> Vec<f64> {
    (0..n).map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 24) as f64 - 128.0) / 128.0).collect()
}

/// Column-major op(M)(i, j) of a stored matrix with leading dimension `ld`.
fn at(m: &[f64], ld: usize, trans: bool, i: usize, j: usize) -> f64 {
    if trans { m[j + i * ld] } else { m[i + j * ld] }
}

/// The reference: C = alpha op(A) op(B) + beta C, naive, in f64.
#[allow(clippy::too_many_arguments)]
fn reference(
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    alpha: f64,
    a: &[f64],
    lda: usize,
    b: &[f64],
    ldb: usize,
    beta: f64,
    c: &mut [f64],
    ldc: usize,
) {
    for j in 0..n {
        for i in 0..m {
            let s: f64 = (0..k).map(|p| at(a, lda, ta, i, p) * at(b, ldb, tb, p, j)).sum();
            c[i + j * ldc] = alpha * s + beta * c[i + j * ldc];
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Ty {
    F16,
    Bf16,
    F32,
    F64,
}

impl Ty {
    fn cuda(self) -> T {
        match self {
            Ty::F16 => T::CUDA_R_16F,
            Ty::Bf16 => T::CUDA_R_16BF,
            Ty::F32 => T::CUDA_R_32F,
            Ty::F64 => T::CUDA_R_64F,
        }
    }
    fn encode(self, v: &[f64]) -> Vec<u8> {
        v.iter()
            .flat_map(|&x| match self {
                Ty::F16 => f16::from_f64(x).to_le_bytes().to_vec(),
                Ty::Bf16 => bf16::from_f64(x).to_le_bytes().to_vec(),
                Ty::F32 => (x as f32).to_le_bytes().to_vec(),
                Ty::F64 => x.to_le_bytes().to_vec(),
            })
            .collect()
    }
    fn decode(self, b: &[u8]) -> Vec<f64> {
        match self {
            Ty::F16 => b.chunks(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
            Ty::Bf16 => b.chunks(2).map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f64()).collect(),
            Ty::F32 => b.chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect(),
            Ty::F64 => b.chunks(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect(),
        }
    }
    /// Relative tolerance of a k-term dot product rounded to this type.
    fn tol(self) -> f64 {
        match self {
            Ty::F16 => 2e-3,
            Ty::Bf16 => 1e-2,
            Ty::F32 => 1e-5,
            Ty::F64 => 1e-12,
        }
    }
}

fn upload(t: Ty, v: &[f64]) -> DeviceBuffer {
    let bytes = t.encode(v);
    let buf = DeviceBuffer::new(bytes.len().max(1));
    buf.write(&bytes);
    buf
}

#[track_caller]
fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()) * 8.0, "{what}: element {i}: got {g}, want {w}");
    }
}

/// One GemmEx in type `t` (C of `tc`), transposes and padded leading dimensions, checked.
fn gemm_ex_case(h: H, t: Ty, tc: Ty, ta: bool, tb: bool) {
    let (m, n, k) = (13, 7, 19);
    let (ar, ac) = if ta { (k, m) } else { (m, k) };
    let (br, bc) = if tb { (n, k) } else { (k, n) };
    let (lda, ldb, ldc) = (ar + 3, br + 1, m + 2);
    let a = values(lda * ac, 1);
    let b = values(ldb * bc, 2);
    let mut c = values(ldc * n, 3);
    let (da, db, dc) = (upload(t, &a), upload(t, &b), upload(tc, &c));
    let compute = if t == Ty::F64 { 70 } else { 68 }; // CUBLAS_COMPUTE_64F / _32F
    let scale = if t == Ty::F64 { Ty::F64 } else { Ty::F32 };
    let (alpha, beta) = (scale.encode(&[0.75]), scale.encode(&[-0.5]));
    let gemm_ex = f!("cublasGemmEx": GemmEx);
    let r = unsafe {
        gemm_ex(
            h,
            ta as u32,
            tb as u32,
            m as c_int,
            n as c_int,
            k as c_int,
            alpha.as_ptr().cast(),
            da.ptr as _,
            t.cuda(),
            lda as c_int,
            db.ptr as _,
            t.cuda(),
            ldb as c_int,
            beta.as_ptr().cast(),
            dc.ptr as _,
            tc.cuda(),
            ldc as c_int,
            compute,
            -1,
        )
    };
    assert_eq!(r, OK, "GemmEx {t:?}->{tc:?} ta={ta} tb={tb}");
    // The reference sees the inputs as the device holds them (rounded to the type).
    let (a, b) = (t.decode(&t.encode(&a)), t.decode(&t.encode(&b)));
    let c0 = tc.decode(&tc.encode(&c));
    c.copy_from_slice(&c0);
    reference(ta, tb, m, n, k, 0.75, &a, lda, &b, ldb, -0.5, &mut c, ldc);
    let got = tc.decode(&dc.read());
    // Padding rows below m keep their old values.
    let mut want = c0.clone();
    for j in 0..n {
        for i in 0..m {
            want[i + j * ldc] = c[i + j * ldc];
        }
    }
    assert_close(&got, &want, tc.tol().max(t.tol()), &format!("GemmEx {t:?}->{tc:?} ta={ta} tb={tb}"));
}

#[test]
fn gemm_ex_every_type_and_transpose_matches_the_reference() {
    let (_ctx, h) = setup();
    for (t, tc) in [
        (Ty::F32, Ty::F32),
        (Ty::F64, Ty::F64),
        (Ty::F16, Ty::F16),
        (Ty::F16, Ty::F32),
        (Ty::Bf16, Ty::Bf16),
        (Ty::Bf16, Ty::F32),
    ] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            gemm_ex_case(h, t, tc, ta, tb);
        }
    }
    destroy(h);
}

#[test]
fn sgemm_dgemm_hgemm_and_device_pointer_mode() {
    let (_ctx, h) = setup();
    let (m, n, k) = (9, 11, 5);
    for (name, t) in [("cublasSgemm_v2", Ty::F32), ("cublasDgemm_v2", Ty::F64), ("cublasHgemm", Ty::F16)] {
        for device_mode in [false, true] {
            let set_mode = f!("cublasSetPointerMode_v2": unsafe extern "C" fn(H, u32) -> S);
            assert_eq!(unsafe { set_mode(h, device_mode as u32) }, OK);
            let (a, b, mut c) = (values(m * k, 4), values(k * n, 5), values(m * n, 6));
            let (da, db, dc) = (upload(t, &a), upload(t, &b), upload(t, &c));
            let (alpha, beta) = (t.encode(&[1.5]), t.encode(&[0.25]));
            let (dalpha, dbeta) = (upload(t, &[1.5]), upload(t, &[0.25]));
            let (pa, pb): (*const c_void, *const c_void) = if device_mode {
                (dalpha.ptr as _, dbeta.ptr as _)
            } else {
                (alpha.as_ptr().cast(), beta.as_ptr().cast())
            };
            // SAFETY: the routine's documented signature.
            let gemm: Gemm = unsafe { *lib().get::<Gemm>(format!("{name}\0").as_bytes()).unwrap() };
            let r = unsafe {
                gemm(
                    h,
                    TR,
                    N,
                    m as c_int,
                    n as c_int,
                    k as c_int,
                    pa,
                    da.ptr as _,
                    k as c_int,
                    db.ptr as _,
                    k as c_int,
                    pb,
                    dc.ptr as _,
                    m as c_int,
                )
            };
            assert_eq!(r, OK, "{name}");
            let (a, b) = (t.decode(&t.encode(&a)), t.decode(&t.encode(&b)));
            c = t.decode(&t.encode(&c));
            reference(true, false, m, n, k, 1.5, &a, k, &b, k, 0.25, &mut c, m);
            assert_close(&t.decode(&dc.read()), &c, t.tol(), &format!("{name} device_mode={device_mode}"));
        }
    }
    destroy(h);
}

#[test]
fn strided_and_pointer_array_batches() {
    let (_ctx, h) = setup();
    let (m, n, k, batch) = (6, 5, 4, 3);
    let (sa, sb, sc) = (m * k + 2, k * n, m * n + 4);
    let a = values(sa * batch, 7);
    let b = values(sb * batch, 8);
    let c = values(sc * batch, 9);
    let mut want = c.clone();
    for i in 0..batch {
        reference(false, false, m, n, k, 1.0, &a[i * sa..], m, &b[i * sb..], k, 2.0, &mut want[i * sc..], m);
    }
    let (alpha, beta) = (1.0f32, 2.0f32);
    // SgemmStridedBatched
    let (da, db, dc) = (upload(Ty::F32, &a), upload(Ty::F32, &b), upload(Ty::F32, &c));
    type Strided = unsafe extern "C" fn(
        H,
        u32,
        u32,
        c_int,
        c_int,
        c_int,
        *const f32,
        u64,
        c_int,
        i64,
        u64,
        c_int,
        i64,
        *const f32,
        u64,
        c_int,
        i64,
        c_int,
    ) -> S;
    let sgemm_sb = f!("cublasSgemmStridedBatched": Strided);
    assert_eq!(
        unsafe {
            sgemm_sb(
                h, N, N, m as _, n as _, k as _, &alpha, da.ptr, m as _, sa as _, db.ptr, k as _, sb as _, &beta,
                dc.ptr, m as _, sc as _, batch as _,
            )
        },
        OK
    );
    assert_close(&Ty::F32.decode(&dc.read()), &want, 1e-5, "SgemmStridedBatched");
    // GemmStridedBatchedEx
    let dc = upload(Ty::F32, &c);
    type StridedEx = unsafe extern "C" fn(
        H,
        u32,
        u32,
        c_int,
        c_int,
        c_int,
        *const f32,
        u64,
        T,
        c_int,
        i64,
        u64,
        T,
        c_int,
        i64,
        *const f32,
        u64,
        T,
        c_int,
        i64,
        c_int,
        u32,
        i32,
    ) -> S;
    let ex = f!("cublasGemmStridedBatchedEx": StridedEx);
    let f32t = T::CUDA_R_32F;
    assert_eq!(
        unsafe {
            ex(
                h, N, N, m as _, n as _, k as _, &alpha, da.ptr, f32t, m as _, sa as _, db.ptr, f32t, k as _, sb as _,
                &beta, dc.ptr, f32t, m as _, sc as _, batch as _, 68, -1,
            )
        },
        OK
    );
    assert_close(&Ty::F32.decode(&dc.read()), &want, 1e-5, "GemmStridedBatchedEx");
    // GemmBatchedEx: device arrays of device pointers, in reverse order to prove they are read.
    let dc = upload(Ty::F32, &c);
    let ptrs = |base: u64, stride: usize| -> DeviceBuffer {
        let v: Vec<u8> = (0..batch).flat_map(|i| (base + (i * stride * 4) as u64).to_le_bytes()).collect();
        let d = DeviceBuffer::new(v.len());
        d.write(&v);
        d
    };
    let (pa, pb, pc) = (ptrs(da.ptr, sa), ptrs(db.ptr, sb), ptrs(dc.ptr, sc));
    type Batched = unsafe extern "C" fn(
        H,
        u32,
        u32,
        c_int,
        c_int,
        c_int,
        *const f32,
        u64,
        T,
        c_int,
        u64,
        T,
        c_int,
        *const f32,
        u64,
        T,
        c_int,
        c_int,
        u32,
        i32,
    ) -> S;
    let bex = f!("cublasGemmBatchedEx": Batched);
    assert_eq!(
        unsafe {
            bex(
                h, N, N, m as _, n as _, k as _, &alpha, pa.ptr, f32t, m as _, pb.ptr, f32t, k as _, &beta, pc.ptr,
                f32t, m as _, batch as _, 68, -1,
            )
        },
        OK
    );
    assert_close(&Ty::F32.decode(&dc.read()), &want, 1e-5, "GemmBatchedEx");
    destroy(h);
}

#[test]
fn level_one_and_two_routines() {
    let (_ctx, h) = setup();
    let (m, n) = (7, 5);
    let a = values(m * n, 10);
    let x = values(m * 2, 11); // read with increment 2
    let y = values(n * 3, 12); // written with increment 3
    // y = 2 A^T x + 0.5 y (Sgemv, trans), and the same in f64 (Dgemv).
    for (name, t) in [("cublasSgemv_v2", Ty::F32), ("cublasDgemv_v2", Ty::F64)] {
        let (da, dx, dy) = (upload(t, &a), upload(t, &x), upload(t, &y));
        let (alpha, beta) = (t.encode(&[2.0]), t.encode(&[0.5]));
        type Gemv = unsafe extern "C" fn(
            H,
            u32,
            c_int,
            c_int,
            *const c_void,
            u64,
            c_int,
            u64,
            c_int,
            *const c_void,
            u64,
            c_int,
        ) -> S;
        // SAFETY: the routine's documented signature.
        let gemv: Gemv = unsafe { *lib().get::<Gemv>(format!("{name}\0").as_bytes()).unwrap() };
        assert_eq!(
            unsafe {
                gemv(
                    h,
                    TR,
                    m as _,
                    n as _,
                    alpha.as_ptr().cast(),
                    da.ptr,
                    m as _,
                    dx.ptr,
                    2,
                    beta.as_ptr().cast(),
                    dy.ptr,
                    3,
                )
            },
            OK
        );
        let mut want = t.decode(&t.encode(&y));
        for j in 0..n {
            let s: f64 = (0..m).map(|i| a[i + j * m] * x[2 * i]).sum();
            want[3 * j] = 2.0 * s + 0.5 * want[3 * j];
        }
        assert_close(&t.decode(&dy.read()), &want, t.tol(), name);
    }
    // Sdot (host result), Saxpy, Sscal.
    let (dx, dy) = (upload(Ty::F32, &x), upload(Ty::F32, &y[..m * 2]));
    let mut result = 0f32;
    let sdot = f!("cublasSdot_v2": unsafe extern "C" fn(H, c_int, u64, c_int, u64, c_int, *mut f32) -> S);
    assert_eq!(unsafe { sdot(h, m as _, dx.ptr, 2, dy.ptr, 2, &mut result) }, OK);
    let want: f64 = (0..m).map(|i| x[2 * i] * y[2 * i]).sum();
    assert!((result as f64 - want).abs() < 1e-5, "Sdot: {result} vs {want}");
    let saxpy = f!("cublasSaxpy_v2": unsafe extern "C" fn(H, c_int, *const f32, u64, c_int, u64, c_int) -> S);
    assert_eq!(unsafe { saxpy(h, m as _, &3.0, dx.ptr, 2, dy.ptr, 2) }, OK);
    let sscal = f!("cublasSscal_v2": unsafe extern "C" fn(H, c_int, *const f32, u64, c_int) -> S);
    assert_eq!(unsafe { sscal(h, m as _, &-2.0, dy.ptr, 2) }, OK);
    let mut want = y[..m * 2].to_vec();
    for i in 0..m {
        want[2 * i] = -2.0 * (3.0 * x[2 * i] + y[2 * i]);
    }
    assert_close(&Ty::F32.decode(&dy.read()), &want, 1e-5, "Saxpy then Sscal");
    destroy(h);
}

#[test]
fn gemm_is_ordered_after_an_async_copy_on_the_handles_stream() {
    let (_ctx, h) = setup();
    let stream = Stream::new(1); // CU_STREAM_NON_BLOCKING: only its own order applies
    let set_stream = f!("cublasSetStream_v2": unsafe extern "C" fn(H, *mut c_void) -> S);
    let get_stream = f!("cublasGetStream_v2": unsafe extern "C" fn(H, *mut *mut c_void) -> S);
    assert_eq!(unsafe { set_stream(h, stream.raw.cast()) }, OK);
    let mut got: *mut c_void = std::ptr::null_mut();
    assert_eq!(unsafe { get_stream(h, &mut got) }, OK);
    assert_eq!(got, stream.raw.cast());
    let n = 16;
    let (a, b) = (values(n * n, 13), values(n * n, 14));
    let da = DeviceBuffer::new(n * n * 4);
    da.write(&vec![0u8; n * n * 4]); // zeros until the queued copy lands
    let (db, dc) = (upload(Ty::F32, &b), upload(Ty::F32, &vec![0.0; n * n]));
    let gate = Gate::new();
    gate.enqueue(stream.raw); // holds the stream until the GEMM is queued behind the copy
    let host_a = Ty::F32.encode(&a);
    let d = cuda();
    check(call!(d.cuMemcpyHtoDAsync_v2(da.ptr, host_a.as_ptr().cast(), host_a.len(), stream.raw)));
    let sgemm = f!("cublasSgemm_v2": Gemm);
    let (alpha, beta) = (1.0f32, 0.0f32);
    let r = unsafe {
        sgemm(
            h,
            N,
            N,
            n as _,
            n as _,
            n as _,
            (&alpha as *const f32).cast(),
            da.ptr as _,
            n as _,
            db.ptr as _,
            n as _,
            (&beta as *const f32).cast(),
            dc.ptr as _,
            n as _,
        )
    };
    assert_eq!(r, OK);
    gate.open();
    check(call!(d.cuStreamSynchronize(stream.raw)));
    let mut want = vec![0.0; n * n];
    reference(false, false, n, n, n, 1.0, &a, n, &b, n, 0.0, &mut want, n);
    assert_close(&Ty::F32.decode(&dc.read()), &want, 1e-5, "GEMM after async copy");
    assert_eq!(unsafe { set_stream(h, std::ptr::null_mut()) }, OK);
    destroy(h);
}

/// cuBLASLt: D = epilogue(alpha op(A) op(B) + beta C + bias) with C and D apart, fp32 and bf16.
#[test]
fn lt_matmul_with_every_epilogue() {
    let _ctx = Context::new(0);
    let lt = |name: &str| -> *const () {
        // SAFETY: looked up, then cast by the caller to its documented signature.
        unsafe { *lib().get::<*const ()>(format!("{name}\0").as_bytes()).unwrap() }
    };
    macro_rules! lt {
        ($name:literal: $ty:ty) => {{
            let p = lt($name);
            // SAFETY: `p` is the export of that name, whose signature NVIDIA documents as `$ty`.
            unsafe { std::mem::transmute::<*const (), $ty>(p) }
        }};
    }
    let mut handle: H = std::ptr::null_mut();
    let create = lt!("cublasLtCreate": unsafe extern "C" fn(*mut H) -> S);
    assert_eq!(unsafe { create(&mut handle) }, OK);
    let desc_create = lt!("cublasLtMatmulDescCreate": unsafe extern "C" fn(*mut H, u32, T) -> S);
    let desc_set = lt!("cublasLtMatmulDescSetAttribute": unsafe extern "C" fn(H, u32, *const c_void, usize) -> S);
    let desc_get =
        lt!("cublasLtMatmulDescGetAttribute": unsafe extern "C" fn(H, u32, *mut c_void, usize, *mut usize) -> S);
    let layout_create = lt!("cublasLtMatrixLayoutCreate": unsafe extern "C" fn(*mut H, T, u64, u64, i64) -> S);
    let layout_set = lt!("cublasLtMatrixLayoutSetAttribute": unsafe extern "C" fn(H, u32, *const c_void, usize) -> S);
    let pref_create = lt!("cublasLtMatmulPreferenceCreate": unsafe extern "C" fn(*mut H) -> S);
    let pref_set = lt!("cublasLtMatmulPreferenceSetAttribute": unsafe extern "C" fn(H, u32, *const c_void, usize) -> S);
    type Heur = unsafe extern "C" fn(
        H,
        H,
        H,
        H,
        H,
        H,
        H,
        c_int,
        *mut gpupool_shim::cublas::cublasLtMatmulHeuristicResult_t,
        *mut c_int,
    ) -> S;
    let heuristic = lt!("cublasLtMatmulAlgoGetHeuristic": Heur);
    type Matmul = unsafe extern "C" fn(
        H,
        H,
        *const c_void,
        u64,
        H,
        u64,
        H,
        *const c_void,
        u64,
        H,
        u64,
        H,
        *const gpupool_shim::cublas::cublasLtMatmulAlgo_t,
        u64,
        usize,
        *mut c_void,
    ) -> S;
    let matmul = lt!("cublasLtMatmul": Matmul);
    let (m, n, k, batch) = (8usize, 6usize, 10usize, 2usize);
    for t in [Ty::F32, Ty::Bf16] {
        for (epi, bias, gelu, relu) in [
            (1u32, false, false, false),
            (2, false, false, true),
            (4, true, false, false),
            (6, true, false, true),
            (32, false, true, false),
            (36, true, true, false),
        ] {
            let mut desc: H = std::ptr::null_mut();
            assert_eq!(unsafe { desc_create(&mut desc, 68, T::CUDA_R_32F) }, OK);
            let trans_a = 1u32; // A stored k x m
            assert_eq!(unsafe { desc_set(desc, 3, (&trans_a as *const u32).cast(), 4) }, OK);
            assert_eq!(unsafe { desc_set(desc, 7, (&epi as *const u32).cast(), 4) }, OK);
            let mut back = 0u32;
            let mut written = 0usize;
            assert_eq!(unsafe { desc_get(desc, 7, (&mut back as *mut u32).cast(), 4, &mut written) }, OK);
            assert_eq!((back, written), (epi, 4));
            let bias_v = values(m, 20);
            let dbias = upload(t, &bias_v);
            if bias {
                assert_eq!(unsafe { desc_set(desc, 8, (&dbias.ptr as *const u64).cast(), 8) }, OK);
            }
            let strides = [k * m, k * n, m * n, m * n + 8];
            let mut layouts = [std::ptr::null_mut(); 4];
            for (i, (r, c)) in [(k, m), (k, n), (m, n), (m, n)].into_iter().enumerate() {
                assert_eq!(unsafe { layout_create(&mut layouts[i], t.cuda(), r as u64, c as u64, r as i64) }, OK);
                let (b, s) = (batch as i32, strides[i] as i64);
                assert_eq!(unsafe { layout_set(layouts[i], 5, (&b as *const i32).cast(), 4) }, OK);
                assert_eq!(unsafe { layout_set(layouts[i], 6, (&s as *const i64).cast(), 8) }, OK);
            }
            let mut pref: H = std::ptr::null_mut();
            assert_eq!(unsafe { pref_create(&mut pref) }, OK);
            let ws = 1u64 << 20;
            assert_eq!(unsafe { pref_set(pref, 1, (&ws as *const u64).cast(), 8) }, OK);
            let mut result = gpupool_shim::cublas::cublasLtMatmulHeuristicResult_t::default();
            let mut count = 0;
            let [la, lb, lc, ld] = layouts;
            assert_eq!(unsafe { heuristic(handle, desc, la, lb, lc, ld, pref, 1, &mut result, &mut count) }, OK);
            assert_eq!((count, result.state), (1, OK));
            let (a, b, c) =
                (values(strides[0] * batch, 21), values(strides[1] * batch, 22), values(strides[2] * batch, 23));
            let (da, db, dc, dd) =
                (upload(t, &a), upload(t, &b), upload(t, &c), upload(t, &vec![0.0; strides[3] * batch]));
            let (alpha, beta) = (0.5f32, 1.0f32);
            let r = unsafe {
                matmul(
                    handle,
                    desc,
                    (&alpha as *const f32).cast(),
                    da.ptr,
                    la,
                    db.ptr,
                    lb,
                    (&beta as *const f32).cast(),
                    dc.ptr,
                    lc,
                    dd.ptr,
                    ld,
                    &result.algo,
                    0,
                    0,
                    std::ptr::null_mut(),
                )
            };
            assert_eq!(r, OK, "{t:?} epilogue {epi}");
            check(call!(cuda().cuCtxSynchronize()));
            let (a, b, c, bias_v) = (
                t.decode(&t.encode(&a)),
                t.decode(&t.encode(&b)),
                t.decode(&t.encode(&c)),
                t.decode(&t.encode(&bias_v)),
            );
            let mut want = vec![0.0; strides[3] * batch];
            for i in 0..batch {
                let mut out = c[i * strides[2]..(i + 1) * strides[2]].to_vec();
                reference(
                    true,
                    false,
                    m,
                    n,
                    k,
                    0.5,
                    &a[i * strides[0]..],
                    k,
                    &b[i * strides[1]..],
                    k,
                    1.0,
                    &mut out,
                    m,
                );
                for j in 0..n {
                    for r in 0..m {
                        let mut v = out[r + j * m] + if bias { bias_v[r] } else { 0.0 };
                        if relu {
                            v = v.max(0.0);
                        }
                        if gelu {
                            v = 0.5
                                * v
                                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh());
                        }
                        want[i * strides[3] + r + j * m] = v;
                    }
                }
            }
            assert_close(&t.decode(&dd.read()), &want, t.tol(), &format!("cublasLtMatmul {t:?} epilogue {epi}"));
        }
    }
}

#[test]
fn bad_arguments_get_the_documented_status() {
    let (_ctx, h) = setup();
    let sgemm = f!("cublasSgemm_v2": Gemm);
    let gemm_ex = f!("cublasGemmEx": GemmEx);
    let buf = DeviceBuffer::new(64 * 64 * 4);
    let (one, zero) = (1.0f32, 0.0f32);
    let (pa, pz): (*const c_void, *const c_void) = ((&one as *const f32).cast(), (&zero as *const f32).cast());
    let p = buf.ptr as *const c_void;
    let call_sgemm = |h: H, ta: u32, m: c_int, lda: c_int, a: *const c_void| unsafe {
        sgemm(h, ta, N, m, 4, 4, pa, a, lda, p, 4, pz, p as _, 8)
    };
    assert_eq!(call_sgemm(std::ptr::null_mut(), N, 4, 4, p), S::CUBLAS_STATUS_NOT_INITIALIZED, "NULL handle");
    assert_eq!(call_sgemm(h, 7, 4, 4, p), INVALID, "bad transa");
    assert_eq!(call_sgemm(h, N, -1, 4, p), INVALID, "negative m");
    assert_eq!(call_sgemm(h, N, 8, 4, p), INVALID, "lda < m");
    assert_eq!(call_sgemm(h, N, 4, 4, std::ptr::null()), INVALID, "NULL A");
    let host = [0f32; 16];
    assert_eq!(call_sgemm(h, N, 4, 4, host.as_ptr().cast()), INVALID, "A in host memory");
    assert_eq!(call_sgemm(h, N, 4, 4, (buf.ptr + 64 * 64 * 4 - 8) as _), INVALID, "A past the allocation");
    // f64 inputs with fp32 compute, and an integer type: NOT_SUPPORTED.
    let f64t = T::CUDA_R_64F;
    let r = unsafe { gemm_ex(h, N, N, 4, 4, 4, pa, p, f64t, 4, p, f64t, 4, pz, p as _, f64t, 4, 68, -1) };
    assert_eq!(r, S::CUBLAS_STATUS_NOT_SUPPORTED, "f64 with COMPUTE_32F");
    let i8t = T::CUDA_R_8I;
    let r = unsafe { gemm_ex(h, N, N, 4, 4, 4, pa, p, i8t, 4, p, i8t, 4, pz, p as _, T::CUDA_R_32I, 4, 72, -1) };
    assert_eq!(r, S::CUBLAS_STATUS_NOT_SUPPORTED, "int8");
    // Settings: unknown modes refused, TF32 accepted and read back, version and names.
    let set_math = f!("cublasSetMathMode": unsafe extern "C" fn(H, u32) -> S);
    let get_math = f!("cublasGetMathMode": unsafe extern "C" fn(H, *mut u32) -> S);
    assert_eq!(unsafe { set_math(h, 3) }, OK);
    let mut mode = 0;
    assert_eq!(unsafe { get_math(h, &mut mode) }, OK);
    assert_eq!(mode, 3);
    assert_eq!(unsafe { set_math(h, 9) }, INVALID);
    let set_ptr = f!("cublasSetPointerMode_v2": unsafe extern "C" fn(H, u32) -> S);
    assert_eq!(unsafe { set_ptr(h, 2) }, INVALID);
    let get_ptr = f!("cublasGetPointerMode_v2": unsafe extern "C" fn(H, *mut u32) -> S);
    assert_eq!(unsafe { get_ptr(h, std::ptr::null_mut()) }, INVALID);
    let set_ws = f!("cublasSetWorkspace_v2": unsafe extern "C" fn(H, *mut c_void, usize) -> S);
    assert_eq!(unsafe { set_ws(h, buf.ptr as _, 1024) }, OK);
    assert_eq!(unsafe { set_ws(h, host.as_ptr() as _, 64) }, INVALID, "host workspace");
    let mut version = 0;
    assert_eq!(unsafe { f!("cublasGetVersion_v2": unsafe extern "C" fn(H, *mut c_int) -> S)(h, &mut version) }, OK);
    assert_eq!(version, 120903);
    let name = f!("cublasGetStatusName": unsafe extern "C" fn(S) -> *const std::ffi::c_char);
    // SAFETY: a static NUL-terminated string.
    assert_eq!(unsafe { std::ffi::CStr::from_ptr(name(INVALID)) }.to_str().unwrap(), "CUBLAS_STATUS_INVALID_VALUE");
    let string = f!("cublasGetStatusString": unsafe extern "C" fn(S) -> *const std::ffi::c_char);
    // SAFETY: as above.
    assert!(!unsafe { std::ffi::CStr::from_ptr(string(S::CUBLAS_STATUS_NOT_SUPPORTED)) }.to_bytes().is_empty());
    destroy(h);
    // A destroyed handle is no handle.
    assert_eq!(call_sgemm(h, N, 4, 4, p), S::CUBLAS_STATUS_NOT_INITIALIZED, "destroyed handle");
    assert_eq!(unsafe { f!("cublasDestroy_v2": unsafe extern "C" fn(H) -> S)(h) }, S::CUBLAS_STATUS_NOT_INITIALIZED);
}
