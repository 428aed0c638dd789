//! What the simulator (a driver) and the interposer (a driver front-end) both need to
//! know about NVIDIA's driver ABI beyond types: which exported function answers each
//! `cuGetProcAddress` request, and the names and descriptions of the status codes.
//!
//! Owns: the one table of entry points ([`driver_entry_points!`]) and its lookup
//! ([`proc::lookup`], [`proc::validate`]), [`errors`], the answers for features no
//! device of ours has ([`absent`]), NVML's shared answers ([`nvml`]: PCI identity,
//! process lists, NVLink, fabric and peer-to-peer), and the documented bookkeeping of a
//! stream-ordered memory pool ([`mempool`]: reuse, release threshold, maxSize, attributes), and
//! fat binary payloads, compressed or not ([`fatbin`]), and how device `printf` text is written
//! ([`device_output`]).
//! Must not: implement any entry point; the crates that export them pass their own
//! functions in (the table names them, and they resolve where the macro is invoked).

pub mod absent;
pub mod device_output;
pub mod errors;
pub mod fatbin;
pub mod graph_node;
pub mod identity;
pub mod launch;
pub mod mempool;
pub mod nvml;
pub mod peer;
pub mod pool_access;
pub mod proc;

#[doc(hidden)]
pub use gpupool_shim as shim;
