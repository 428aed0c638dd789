//! The simulator's cuBLAS and cuBLASLt: a `libcublas.so.13` / `.12` and `libcublasLt.so.13` /
//! `.12` (one library under four names, laid out by `scripts/sim-libdir`) with NVIDIA's C ABI,
//! computing on the CPU over the simulated device memory.
//!
//! Owns: cuBLAS handles and their settings, cuBLASLt handles, descriptors, layouts and
//! preferences, argument checking with cuBLAS's documented statuses, and the arithmetic
//! (`matrixmultiply` for GEMM; fp16/bf16 widened to f32). The pool daemon loads it with
//! libloading exactly as it loads NVIDIA's libcublas on a GPU host.
//!
//! Must not: reach device memory other than through the simulator's private exports
//! ([`device`]: check a range, queue a job on a stream, resolve a range inside the job), so
//! every operation is ordered on its stream and every pointer is checked as the driver checks
//! a copy's. It knows nothing of the pool.
//!
//! Layout: [`blas`] and [`lt`] are the `extern "C"` edges; [`call`] is a checked GEMM and its
//! job; [`kernel`] the arithmetic on host memory.
#![allow(clippy::missing_safety_doc, clippy::too_many_arguments, non_snake_case)]

pub mod blas;
pub mod call;
pub mod device;
mod export;
pub mod handle;
pub mod kernel;
pub mod lt;
pub mod status;
