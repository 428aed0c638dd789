//! The value types of the BLAS family (`0x0axx`): cuBLAS and cuBLASLt calls remoted to the
//! daemon, which runs them with the backend's library (DESIGN.md §8).
//!
//! A GEMM travels as one [`Gemm`] whatever entry point the program called ([`GemmFn`] says
//! which, so the daemon calls the same one): operands are device pointers with their element
//! type, leading dimension and batch stride, so the daemon can compute the footprint of every
//! matrix before the backend sees it. Scalars travel by value in host pointer mode and as
//! device pointers in device pointer mode ([`BlasScalar`]): the wire says where each one
//! lives, so the daemon needs no copy of the client's pointer mode.
//!
//! cuBLASLt's descriptors, layouts and preferences are a handful of scalars each: the client
//! keeps them and sends their values with each matmul ([`Matmul`]); the daemon builds the
//! backend's objects for the call and drops them after. Opaque bytes the vendor library
//! interprets (a heuristic's `cublasLtMatmulAlgo_t`) never come from a client.
#![forbid(unsafe_code)]

use crate::codec::{Decode, DecodeError, Encode, Reader, Writer, wire_id, wire_struct};
use crate::ops::{DevicePtr, StreamId};

wire_id! {
    /// A cuBLAS or cuBLASLt handle, as the daemon numbered it for this session.
    BlasHandleId;
}

/// alpha or beta: its bytes (host pointer mode; 2, 4 or 8 bytes of the scale type, little
/// endian in the low bytes) or where it lies in device memory (device pointer mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlasScalar {
    Host(u64),
    Device(DevicePtr),
}

impl Encode for BlasScalar {
    fn encode(&self, w: &mut Writer<'_>) {
        match self {
            BlasScalar::Host(v) => {
                0u8.encode(w);
                v.encode(w);
            }
            BlasScalar::Device(p) => {
                1u8.encode(w);
                p.encode(w);
            }
        }
    }
}
impl Decode for BlasScalar {
    const MIN_LEN: usize = 9;
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::decode(r)? {
            0 => Ok(BlasScalar::Host(Decode::decode(r)?)),
            1 => Ok(BlasScalar::Device(Decode::decode(r)?)),
            tag => Err(DecodeError::InvalidTag { what: "BLAS scalar", tag: tag.into() }),
        }
    }
}

#[cfg(test)]
impl crate::sample::Sample for BlasScalar {
    fn sample(g: &mut crate::sample::Gen) -> Self {
        match g.below(2) {
            0 => BlasScalar::Host(crate::sample::Sample::sample(g)),
            _ => BlasScalar::Device(crate::sample::Sample::sample(g)),
        }
    }
}

/// The cuBLAS entry point a [`Gemm`] came through (the daemon calls the same one).
pub mod gemm_fn {
    pub const SGEMM: u8 = 1;
    pub const DGEMM: u8 = 2;
    pub const HGEMM: u8 = 3;
    pub const GEMM_EX: u8 = 4;
    pub const SGEMM_STRIDED_BATCHED: u8 = 5;
    pub const GEMM_STRIDED_BATCHED_EX: u8 = 6;
    /// `a`, `b`, `c` are device arrays of `batch` device pointers.
    pub const GEMM_BATCHED_EX: u8 = 7;
}
/// One of [`gemm_fn`]'s values.
pub type GemmFn = u8;

wire_struct! {
    /// One GEMM operand: `ptr` (for [`gemm_fn::GEMM_BATCHED_EX`], a device array of
    /// pointers), its `cudaDataType`, leading dimension and batch stride in elements.
    #[derive(Copy, Default)]
    pub struct BlasMat { pub ptr: DevicePtr, pub dtype: u32, pub ld: i64, pub stride: i64 }
}

wire_struct! {
    /// `C = alpha op(A) op(B) + beta C` for each of `batch` matrices, as cuBLAS takes it
    /// (column major; `transa`/`transb` are `cublasOperation_t`, `compute` a
    /// `cublasComputeType_t` (for the typed entry points, the one they imply), `algo` a
    /// `cublasGemmAlgo_t`).
    #[derive(Copy)]
    pub struct Gemm {
        pub func: GemmFn, pub transa: u32, pub transb: u32, pub m: i32, pub n: i32, pub k: i32,
        pub alpha: BlasScalar, pub a: BlasMat, pub b: BlasMat, pub beta: BlasScalar, pub c: BlasMat,
        pub batch: i32, pub compute: u32, pub algo: i32,
    }
}

/// The level-1/2 routine a [`Vector`] call is.
pub mod vector_fn {
    /// `y = alpha op(A) x + beta y` (fp32).
    pub const SGEMV: u8 = 1;
    /// `y = alpha op(A) x + beta y` (fp64).
    pub const DGEMV: u8 = 2;
    /// `y = alpha x + y` (fp32; `a`, `beta` unused).
    pub const SAXPY: u8 = 3;
    /// `x = alpha x` (fp32; only `x` and `alpha`).
    pub const SSCAL: u8 = 4;
}

wire_struct! {
    /// A level-1/2 call ([`vector_fn`]): `m`/`n` and `a` are gemv's (axpy and scal take
    /// `n` elements), `x`/`y` vectors with their increments.
    #[derive(Copy)]
    pub struct Vector {
        pub func: u8, pub trans: u32, pub m: i32, pub n: i32, pub alpha: BlasScalar, pub a: DevicePtr, pub lda: i32,
        pub x: DevicePtr, pub incx: i32, pub beta: BlasScalar, pub y: DevicePtr, pub incy: i32,
    }
}

wire_struct! {
    /// A cuBLASLt matrix layout's attributes (`cublasLtMatrixLayoutAttribute_t`).
    #[derive(Copy, Default)]
    pub struct LtLayout {
        pub dtype: u32, pub order: u32, pub rows: u64, pub cols: u64, pub ld: i64, pub batch: i32, pub stride: i64,
    }
}

wire_struct! {
    /// A matmul descriptor's attributes (`cublasLtMatmulDescAttributes_t`): `bias` 0 is none.
    #[derive(Copy, Default)]
    pub struct LtDesc {
        pub compute: u32, pub scale: u32, pub transa: u32, pub transb: u32, pub epilogue: u32,
        pub bias: DevicePtr, pub bias_dtype: u32,
    }
}

wire_struct! {
    /// `D = epilogue(alpha op(A) op(B) + beta C)`, each layout with its matrix's pointer
    /// (zero in a heuristic query), on `stream` with `workspace_bytes` at `workspace`.
    /// `reduction_mask` is the preference's `CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK`
    /// (the split-K reductions the algorithm may use; 7, every one, by default).
    #[derive(Copy)]
    pub struct Matmul {
        pub desc: LtDesc, pub alpha: BlasScalar, pub beta: BlasScalar,
        pub a: DevicePtr, pub a_layout: LtLayout, pub b: DevicePtr, pub b_layout: LtLayout,
        pub c: DevicePtr, pub c_layout: LtLayout, pub d: DevicePtr, pub d_layout: LtLayout,
        pub workspace: DevicePtr, pub workspace_bytes: u64, pub stream: StreamId, pub reduction_mask: u32,
    }
}
