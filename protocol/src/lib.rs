//! The wire between `libgpupool.so` and `gpupool daemon`.
//!
//! Owns: the vendor-neutral operation set ([`ops`]: device query, context, alloc/free, copy,
//! memset, module load, function lookup with its parameter layout, launch, stream, event,
//! sync, NVML-like management), its explicit little-endian encoding ([`codec`]), the frames
//! with their version word ([`frame`]), whole messages ([`message`]), and the transports
//! that carry them (`transport`, shared-memory rings and sockets).
//!
//! Must not: call a vendor library, hold policy (quotas, tenants, scheduling), or put a host
//! pointer on the wire: handles are ids ([`CtxId`], [`StreamId`], ...), device addresses are
//! [`DevicePtr`]s the daemon checks. It moves requests and replies, nothing more.
//!
//! Every decoder here takes untrusted bytes: it returns a typed error, never panics, and
//! never allocates more than a small multiple of the bytes it was given. The codec, frame,
//! operation and message modules are `#![forbid(unsafe_code)]`; only the transports may use
//! `unsafe` (shared memory, futexes).
//!
//! ```
//! use gpupool_protocol::{Message, Request, CtxId};
//! let msg = Message::Request { id: 7, no_reply: false, op: Request::MemAlloc { ctx: CtxId(1), bytes: 1 << 20 } };
//! let bytes = msg.encode().unwrap();
//! assert_eq!(Message::decode(&bytes).unwrap(), (msg, bytes.len()));
//! ```
//!
//! Caps (all checked when encoding and when decoding): a frame payload at most
//! [`MAX_PAYLOAD`] (64 MiB); strings [`codec::MAX_STRING_LEN`] (64 KiB); inline bytes
//! [`ops::MAX_INLINE_BYTES`] (32 MiB); kernel parameters [`ops::MAX_KERNEL_PARAM_BYTES`]
//! (32 KiB); devices [`ops::MAX_DEVICES`] (256); attributes per device
//! [`ops::MAX_DEVICE_ATTRIBUTES`] (1024); functions per module [`ops::MAX_MODULE_FUNCTIONS`]
//! (65536); parameters per kernel [`ops::MAX_KERNEL_PARAMS`]; any other vector
//! [`codec::DEFAULT_MAX_COUNT`] (65536).
//!
//! Tests: `cargo test -p gpupool-protocol` (examples of every operation, golden bytes, typed
//! errors, an allocation bound, and bounded proptest runs over every operation and over
//! truncated, bit-flipped and arbitrary frames). Fuzzing (nightly, not in CI):
//! `cd protocol && cargo +nightly fuzz run frame_decode -- -max_total_time=60`; on stable,
//! `cargo check --manifest-path protocol/fuzz/Cargo.toml` checks that the target builds.
#![deny(unsafe_code)]

pub mod bulk;
pub mod codec;
pub mod frame;
pub mod message;
pub mod ops;
#[cfg(test)]
mod sample;
#[cfg(test)]
mod tests;
// The transports need `unsafe` for shared memory and futexes (their module allows it).
pub mod transport;

pub use codec::{DecodeError, EncodeError};
pub use frame::{Flags, FrameError, FrameHeader, FrameKind, HEADER_LEN, MAGIC, MAX_PAYLOAD, PROTOCOL_VERSION};
pub use message::{Message, ProtocolError};
pub use ops::{CtxId, DevicePtr, EventId, FuncId, ModuleId, Reply, ReplyOp, Request, RequestOp, StreamId};
