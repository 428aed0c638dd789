//! The exported cuBLAS and cuBLASLt functions: one line per function, naming each argument's
//! role and the function that implements it ([`crate::api::export::exports!`], with
//! `cublasStatus_t` as the result: a NULL out-pointer is `CUBLAS_STATUS_INVALID_VALUE` before
//! any round trip, a panic is `CUBLAS_STATUS_INTERNAL_ERROR`). Names are the real symbols
//! (`cublasCreate_v2`, the target of cublas_v2.h's `cublasCreate` macro); signatures are
//! bindgen's from `gpupool_cublas.h`, which abi-check holds to NVIDIA's headers.

use super::{lt, v2};
use crate::api::export::exports;
use gpupool_shim::cublas::*;
use std::ffi::c_void;
use std::os::raw::{c_int, c_longlong};

exports! { cublasStatus_t;
    // ---- cuBLAS handles ----
    cublasCreate_v2(handle: out cublasHandle_t) = v2::create;
    cublasDestroy_v2(handle: val cublasHandle_t) = v2::destroy;
    cublasGetVersion_v2(handle: val cublasHandle_t, version: out c_int) = v2::version;
    cublasSetWorkspace_v2(handle: val cublasHandle_t, workspace: val *mut c_void, bytes: val usize) = v2::set_workspace;
    cublasSetStream_v2(handle: val cublasHandle_t, stream: val cudaStream_t) = v2::set_stream;
    cublasGetStream_v2(handle: val cublasHandle_t, stream: out cudaStream_t) = v2::get_stream;
    cublasGetPointerMode_v2(handle: val cublasHandle_t, mode: out cublasPointerMode_t) = v2::get_pointer_mode;
    cublasSetPointerMode_v2(handle: val cublasHandle_t, mode: val cublasPointerMode_t) = v2::set_pointer_mode;
    cublasGetMathMode(handle: val cublasHandle_t, mode: out cublasMath_t) = v2::get_math_mode;
    cublasSetMathMode(handle: val cublasHandle_t, mode: val cublasMath_t) = v2::set_math_mode;

    // ---- GEMM (alpha/beta: host scalars or device pointers, per the pointer mode) ----
    cublasSgemm_v2(handle: val cublasHandle_t, transa: val cublasOperation_t, transb: val cublasOperation_t,
        m: val c_int, n: val c_int, k: val c_int, alpha: val *const f32, a: val *const f32, lda: val c_int,
        b: val *const f32, ldb: val c_int, beta: val *const f32, c: val *mut f32, ldc: val c_int) = v2::sgemm;
    cublasDgemm_v2(handle: val cublasHandle_t, transa: val cublasOperation_t, transb: val cublasOperation_t,
        m: val c_int, n: val c_int, k: val c_int, alpha: val *const f64, a: val *const f64, lda: val c_int,
        b: val *const f64, ldb: val c_int, beta: val *const f64, c: val *mut f64, ldc: val c_int) = v2::dgemm;
    cublasHgemm(handle: val cublasHandle_t, transa: val cublasOperation_t, transb: val cublasOperation_t,
        m: val c_int, n: val c_int, k: val c_int, alpha: val *const u16, a: val *const u16, lda: val c_int,
        b: val *const u16, ldb: val c_int, beta: val *const u16, c: val *mut u16, ldc: val c_int) = v2::hgemm;
    cublasGemmEx(handle: val cublasHandle_t, transa: val cublasOperation_t, transb: val cublasOperation_t,
        m: val c_int, n: val c_int, k: val c_int, alpha: val *const c_void, a: val *const c_void,
        atype: val cudaDataType, lda: val c_int, b: val *const c_void, btype: val cudaDataType, ldb: val c_int,
        beta: val *const c_void, c: val *mut c_void, ctype: val cudaDataType, ldc: val c_int,
        compute: val cublasComputeType_t, algo: val cublasGemmAlgo_t) = v2::gemm_ex;
    cublasGemmBatchedEx(handle: val cublasHandle_t, transa: val cublasOperation_t, transb: val cublasOperation_t,
        m: val c_int, n: val c_int, k: val c_int, alpha: val *const c_void, a: val *const *const c_void,
        atype: val cudaDataType, lda: val c_int, b: val *const *const c_void, btype: val cudaDataType,
        ldb: val c_int, beta: val *const c_void, c: val *const *mut c_void, ctype: val cudaDataType,
        ldc: val c_int, batch: val c_int, compute: val cublasComputeType_t,
        algo: val cublasGemmAlgo_t) = v2::gemm_batched_ex;
    cublasGemmStridedBatchedEx(handle: val cublasHandle_t, transa: val cublasOperation_t,
        transb: val cublasOperation_t, m: val c_int, n: val c_int, k: val c_int, alpha: val *const c_void,
        a: val *const c_void, atype: val cudaDataType, lda: val c_int, stride_a: val c_longlong,
        b: val *const c_void, btype: val cudaDataType, ldb: val c_int, stride_b: val c_longlong,
        beta: val *const c_void, c: val *mut c_void, ctype: val cudaDataType, ldc: val c_int,
        stride_c: val c_longlong, batch: val c_int, compute: val cublasComputeType_t,
        algo: val cublasGemmAlgo_t) = v2::gemm_strided_batched_ex;
    cublasSgemmStridedBatched(handle: val cublasHandle_t, transa: val cublasOperation_t,
        transb: val cublasOperation_t, m: val c_int, n: val c_int, k: val c_int, alpha: val *const f32,
        a: val *const f32, lda: val c_int, stride_a: val c_longlong, b: val *const f32, ldb: val c_int,
        stride_b: val c_longlong, beta: val *const f32, c: val *mut f32, ldc: val c_int, stride_c: val c_longlong,
        batch: val c_int) = v2::sgemm_strided_batched;
    cublasDgemmStridedBatched(handle: val cublasHandle_t, transa: val cublasOperation_t,
        transb: val cublasOperation_t, m: val c_int, n: val c_int, k: val c_int, alpha: val *const f64,
        a: val *const f64, lda: val c_int, stride_a: val c_longlong, b: val *const f64, ldb: val c_int,
        stride_b: val c_longlong, beta: val *const f64, c: val *mut f64, ldc: val c_int, stride_c: val c_longlong,
        batch: val c_int) = v2::dgemm_strided_batched;

    // ---- level 1 and 2 ----
    cublasSgemv_v2(handle: val cublasHandle_t, trans: val cublasOperation_t, m: val c_int, n: val c_int,
        alpha: val *const f32, a: val *const f32, lda: val c_int, x: val *const f32, incx: val c_int,
        beta: val *const f32, y: val *mut f32, incy: val c_int) = v2::sgemv;
    cublasDgemv_v2(handle: val cublasHandle_t, trans: val cublasOperation_t, m: val c_int, n: val c_int,
        alpha: val *const f64, a: val *const f64, lda: val c_int, x: val *const f64, incx: val c_int,
        beta: val *const f64, y: val *mut f64, incy: val c_int) = v2::dgemv;
    cublasSdot_v2(handle: val cublasHandle_t, n: val c_int, x: val *const f32, incx: val c_int,
        y: val *const f32, incy: val c_int, result: val *mut f32) = v2::sdot;
    cublasSaxpy_v2(handle: val cublasHandle_t, n: val c_int, alpha: val *const f32, x: val *const f32,
        incx: val c_int, y: val *mut f32, incy: val c_int) = v2::saxpy;
    cublasSscal_v2(handle: val cublasHandle_t, n: val c_int, alpha: val *const f32, x: val *mut f32,
        incx: val c_int) = v2::sscal;
}

exports! { cublasStatus_t;
    // ---- cuBLASLt: handles in the daemon, descriptors here ----
    cublasLtCreate(handle: out cublasLtHandle_t) = lt::create;
    cublasLtDestroy(handle: val cublasLtHandle_t) = lt::destroy;
    cublasLtMatmulDescCreate(desc: out cublasLtMatmulDesc_t, compute: val cublasComputeType_t,
        scale: val cudaDataType_t) = lt::desc_create;
    cublasLtMatmulDescDestroy(desc: val cublasLtMatmulDesc_t) = lt::desc_destroy;
    cublasLtMatmulDescSetAttribute(desc: val cublasLtMatmulDesc_t, attr: val cublasLtMatmulDescAttributes_t,
        buf: val *const c_void, size: val usize) = lt::desc_set;
    cublasLtMatmulDescGetAttribute(desc: val cublasLtMatmulDesc_t, attr: val cublasLtMatmulDescAttributes_t,
        buf: val *mut c_void, size: val usize, written: val *mut usize) = lt::desc_get;
    cublasLtMatrixLayoutCreate(layout: out cublasLtMatrixLayout_t, dtype: val cudaDataType, rows: val u64,
        cols: val u64, ld: val i64) = lt::layout_create;
    cublasLtMatrixLayoutDestroy(layout: val cublasLtMatrixLayout_t) = lt::layout_destroy;
    cublasLtMatrixLayoutSetAttribute(layout: val cublasLtMatrixLayout_t, attr: val cublasLtMatrixLayoutAttribute_t,
        buf: val *const c_void, size: val usize) = lt::layout_set;
    cublasLtMatrixLayoutGetAttribute(layout: val cublasLtMatrixLayout_t, attr: val cublasLtMatrixLayoutAttribute_t,
        buf: val *mut c_void, size: val usize, written: val *mut usize) = lt::layout_get;
    cublasLtMatmulPreferenceCreate(pref: out cublasLtMatmulPreference_t) = lt::pref_create;
    cublasLtMatmulPreferenceDestroy(pref: val cublasLtMatmulPreference_t) = lt::pref_destroy;
    cublasLtMatmulPreferenceSetAttribute(pref: val cublasLtMatmulPreference_t,
        attr: val cublasLtMatmulPreferenceAttributes_t, buf: val *const c_void, size: val usize) = lt::pref_set;
    cublasLtMatmulAlgoGetHeuristic(handle: val cublasLtHandle_t, desc: val cublasLtMatmulDesc_t,
        a: val cublasLtMatrixLayout_t, b: val cublasLtMatrixLayout_t, c: val cublasLtMatrixLayout_t,
        d: val cublasLtMatrixLayout_t, pref: val cublasLtMatmulPreference_t, requested: val c_int,
        results: val *mut cublasLtMatmulHeuristicResult_t, returned: val *mut c_int) = lt::heuristic;
    cublasLtMatmul(handle: val cublasLtHandle_t, desc: val cublasLtMatmulDesc_t, alpha: val *const c_void,
        a: val *const c_void, a_layout: val cublasLtMatrixLayout_t, b: val *const c_void,
        b_layout: val cublasLtMatrixLayout_t, beta: val *const c_void, c: val *const c_void,
        c_layout: val cublasLtMatrixLayout_t, d: val *mut c_void, d_layout: val cublasLtMatrixLayout_t,
        algo: val *const cublasLtMatmulAlgo_t, workspace: val *mut c_void, workspace_bytes: val usize,
        stream: val cudaStream_t) = lt::matmul;
}
