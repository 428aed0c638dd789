//! The wire between `libgpupool.so` and `gpupool daemon`.
//!
//! Owns: the vendor-neutral operation set (device query, context, alloc/free, copy,
//! memset, module load, function lookup with its parameter layout, launch, stream,
//! event, sync), its explicit little-endian frames with a version word, and the
//! transports that carry them (shared-memory rings, TCP + TLS).
//!
//! Must not: call a vendor library, or hold policy (quotas, tenants): it moves
//! requests and replies, nothing more.
//!
//! Status: the operation set and frames arrive with the pool issue (#4); until then
//! this crate holds no code, so nothing can depend on a half-made wire format.

// The transports need `unsafe` for shared memory and futexes; nothing else here does.
#[allow(unsafe_code)]
pub mod transport;
