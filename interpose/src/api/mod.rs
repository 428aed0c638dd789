//! The exported CUDA driver API and NVML. [`exports`] is the one table of every exported
//! function: each line names the function, each argument's role and the implementation,
//! and [`export::exports!`] generates the `extern "C"` shell from it (NULL checks before
//! any round trip, the panic guard, out-pointer writes after success, the per-thread
//! default-stream twin). The family modules hold the implementations, plain Rust
//! functions that take checked values and return results; a handle this process was
//! never issued is INVALID_HANDLE / INVALID_CONTEXT there, without a round trip. Every
//! signature is checked at compile time against bindgen's declarations by the
//! `cuGetProcAddress` table in [`proc_address`].
#![allow(clippy::missing_safety_doc, clippy::too_many_arguments, non_snake_case)]

pub mod array;
pub mod context;
pub mod copy;
pub mod copy3d;
pub mod device;
pub mod event;
pub mod export;
pub mod export_tables;
pub mod exports;
pub mod extra;
pub mod features;
pub mod graph;
pub mod graph_edit;
pub mod graph_kernel;
pub mod graph_mem;
pub mod graph_node;
pub mod graph_params;
pub mod graph_topology;
pub mod init;
pub mod ipc;
pub mod launch;
pub mod library;
pub mod link;
pub mod memory;
pub mod mempool;
pub mod memset;
pub mod module;
pub mod nvml;
pub mod occupancy;
pub mod proc_address;
pub mod stream;
pub mod vmm;

/// Which stream the NULL handle means for the calling variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultStream {
    Legacy,
    PerThread,
}
