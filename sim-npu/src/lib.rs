//! The simulated Huawei Ascend NPU: one library that answers as `libascendcl.so` (AscendCL
//! runtime), `libnnopbase.so` (tensors, scalars, int arrays: `acl_meta.h`), `libopapi.so` (the
//! `aclnn` operators), `libruntime.so` (the lower runtime's memory calls, [`rt`]) and `libdcmi.so`
//! (DCMI monitoring), laid out under those names by `scripts/sim-libdir`, with CANN's C ABI,
//! running on the CPU.
//!
//! Owns: the NPU configuration ([`config`]: `GPUPOOL_SIM_NPU_CONFIG`, `GPUPOOL_SIM_NPU_DEVICES`,
//! `GPUPOOL_SIM_NPU_MEMORY`), the runtime's state machine (init, devices, default and explicit
//! contexts, the thread's current context), device memory with CANN's accounting ([`memory`]),
//! streams run by worker threads in order ([`stream`]), events ([`event`]), the operators'
//! descriptors and arithmetic ([`tensor`], [`ops`]), the sticky fault of a context whose
//! operator touched memory outside its allocations, and the DCMI view of the same devices
//! ([`dcmi`], [`util`]). Every export is CANN's name and signature, checked at compile time
//! against `gpupool-shim`'s bindings of our headers ([`export`]).
//!
//! Must not: know about the pool, or about the GPU simulator. It is a vendor runtime; the
//! daemon loads it as it would load CANN's. Not simulated: `aclrtLaunchKernel` and model
//! execution (their payloads are Ascend binaries), data types other than fp32/fp16 in the
//! operators, peer access.
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

pub mod acl;
pub mod config;
pub mod dcmi;
pub mod event;
mod export;
pub mod memory;
pub mod ops;
pub mod rt;
pub mod runtime;
pub mod status;
pub mod stream;
pub mod tensor;
pub mod util;
