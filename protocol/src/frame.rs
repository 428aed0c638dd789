//! Frames: the fixed header in front of every message, on every transport.
//!
//! ```text
//! offset size field
//!  0      4   magic           b"GPPL"
//!  4      2   version         PROTOCOL_VERSION          } this 8-byte prefix never changes, so
//!  6      2   header_len      HEADER_LEN (24)           } peers of any version can tell each other apart
//!  8      2   kind            FrameKind
//! 10      2   flags           Flags (undefined bits must be 0)
//! 12      4   payload_len     <= MAX_PAYLOAD
//! 16      8   request_id      replies and async errors echo the request's id
//! 24      -   payload         payload_len bytes (an encoded Request / Reply, or nothing)
//! ```
//! All fields are little-endian. Decoding is strict: checks run in the order magic, version,
//! header length, kind, flags, payload length, so a peer of another version is always
//! reported as [`FrameError::VersionMismatch`], never as garbage.
#![forbid(unsafe_code)]

use thiserror::Error;

/// The first four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"GPPL";
/// The wire version. Bump it on any change to the header or to an operation's encoding;
/// peers of different versions refuse each other at the first frame.
pub const PROTOCOL_VERSION: u16 = 5;
/// Size of the header in bytes (this version).
pub const HEADER_LEN: usize = 24;
/// The largest payload a frame may carry: 64 MiB. Bulk data normally travels through the
/// shared staging area and only its (offset, len) goes in a frame.
pub const MAX_PAYLOAD: u32 = 64 << 20;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum FrameKind {
    /// A [`crate::Request`] other than `Hello`.
    Request = 1,
    /// A [`crate::Reply`] to the request with the same id (other than `HelloReply`).
    Reply = 2,
    /// An error of an asynchronous request that was sent with [`Flags::NO_REPLY`]; the
    /// payload is a `Reply::Error`, the id is that request's.
    AsyncError = 3,
    /// The first frame of a client: `Request::Hello`.
    Hello = 4,
    /// The daemon's answer to `Hello`: `Reply::HelloReply`.
    HelloReply = 5,
    /// Orderly goodbye, either direction: request id 0, empty payload.
    Bye = 6,
    /// The daemon wrote a checkpoint of the session (version 4): the id is the last request
    /// that checkpoint had seen, the payload is empty. Sent before the reply to any later
    /// request, so a client may let go of what it kept to replay from before it.
    Checkpointed = 7,
    /// What the session's kernels printed (device `printf`), flushed by a backend call the
    /// session made (version 5): request id 0, the payload is the text's bytes. The client
    /// writes it to its standard output. Sent before the reply to the request whose call
    /// flushed it, or (a flush by an asynchronous launch) before the reply to a later one.
    DeviceOutput = 8,
}

impl FrameKind {
    pub const ALL: [FrameKind; 8] = [
        Self::Request,
        Self::Reply,
        Self::AsyncError,
        Self::Hello,
        Self::HelloReply,
        Self::Bye,
        Self::Checkpointed,
        Self::DeviceOutput,
    ];

    pub fn from_u16(v: u16) -> Option<Self> {
        Self::ALL.into_iter().find(|k| *k as u16 == v)
    }
}

/// Frame flags. Bits not defined here are reserved and must be 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Flags(u16);

impl Flags {
    pub const NONE: Flags = Flags(0);
    /// On a [`FrameKind::Request`] of an asynchronous operation: send no reply; an error goes
    /// back as a [`FrameKind::AsyncError`] frame and surfaces at the client's next sync point.
    pub const NO_REPLY: Flags = Flags(1 << 0);
    /// Every defined bit.
    pub const DEFINED: u16 = Self::NO_REPLY.0;

    /// `None` when a reserved bit is set.
    pub fn from_bits(bits: u16) -> Option<Flags> {
        (bits & !Self::DEFINED == 0).then_some(Flags(bits))
    }
    pub fn bits(self) -> u16 {
        self.0
    }
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
    pub fn union(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }
}

/// A frame header could not be accepted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FrameError {
    #[error("not a gpupool frame (magic {0:02x?})")]
    BadMagic([u8; 4]),
    #[error("incompatible gpupool protocol: we speak version {ours}, the peer speaks {theirs}")]
    VersionMismatch { ours: u16, theirs: u16 },
    #[error("header length {found}, expected {expected}")]
    BadHeaderLen { expected: u16, found: u16 },
    #[error("unknown frame kind {0}")]
    UnknownKind(u16),
    #[error("reserved flag bits set: {0:#06x}")]
    ReservedFlags(u16),
    #[error("flags {flags:#06x} are not allowed on a {kind:?} frame")]
    FlagNotAllowed { kind: FrameKind, flags: u16 },
    #[error("payload of {len} bytes exceeds MAX_PAYLOAD ({max})")]
    PayloadTooLarge { len: u32, max: u32 },
    #[error("frame truncated: {needed} bytes needed, {available} available")]
    Truncated { needed: usize, available: usize },
}

/// A decoded, validated frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameHeader {
    pub kind: FrameKind,
    pub flags: Flags,
    pub request_id: u64,
    pub payload_len: u32,
}

impl FrameHeader {
    /// The header's bytes. Does not validate: [`FrameHeader::decode`] is the gate.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&(HEADER_LEN as u16).to_le_bytes());
        b[8..10].copy_from_slice(&(self.kind as u16).to_le_bytes());
        b[10..12].copy_from_slice(&self.flags.bits().to_le_bytes());
        b[12..16].copy_from_slice(&self.payload_len.to_le_bytes());
        b[16..24].copy_from_slice(&self.request_id.to_le_bytes());
        b
    }

    /// Decodes and validates the header at the start of `bytes` (the payload need not be
    /// there yet: a stream reader calls this on the first [`HEADER_LEN`] bytes, then waits
    /// for [`FrameHeader::frame_len`]).
    pub fn decode(bytes: &[u8]) -> Result<FrameHeader, FrameError> {
        let u16_at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]);
        // The version prefix is checked on as few bytes as it needs, so even a short read
        // from a peer of another version says "incompatible".
        if bytes.len() < 4 {
            return Err(FrameError::Truncated { needed: HEADER_LEN, available: bytes.len() });
        }
        let magic = [bytes[0], bytes[1], bytes[2], bytes[3]];
        if magic != MAGIC {
            return Err(FrameError::BadMagic(magic));
        }
        if bytes.len() >= 6 && u16_at(4) != PROTOCOL_VERSION {
            return Err(FrameError::VersionMismatch { ours: PROTOCOL_VERSION, theirs: u16_at(4) });
        }
        if bytes.len() < HEADER_LEN {
            return Err(FrameError::Truncated { needed: HEADER_LEN, available: bytes.len() });
        }
        let header_len = u16_at(6);
        if header_len as usize != HEADER_LEN {
            return Err(FrameError::BadHeaderLen { expected: HEADER_LEN as u16, found: header_len });
        }
        let kind = FrameKind::from_u16(u16_at(8)).ok_or(FrameError::UnknownKind(u16_at(8)))?;
        let flag_bits = u16_at(10);
        let flags = Flags::from_bits(flag_bits).ok_or(FrameError::ReservedFlags(flag_bits & !Flags::DEFINED))?;
        if flags.contains(Flags::NO_REPLY) && kind != FrameKind::Request {
            return Err(FrameError::FlagNotAllowed { kind, flags: flag_bits });
        }
        let payload_len = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
        if payload_len > MAX_PAYLOAD {
            return Err(FrameError::PayloadTooLarge { len: payload_len, max: MAX_PAYLOAD });
        }
        let mut id = [0u8; 8];
        id.copy_from_slice(&bytes[16..24]);
        Ok(FrameHeader { kind, flags, request_id: u64::from_le_bytes(id), payload_len })
    }

    /// Header plus payload, in bytes.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.payload_len as usize
    }
}

/// Splits the frame at the start of `bytes` into its header and payload. Bytes after the
/// frame are left alone: the second value is the frame's total length, so a stream reader
/// can advance by it.
pub fn split_frame(bytes: &[u8]) -> Result<(FrameHeader, &[u8], usize), FrameError> {
    let header = FrameHeader::decode(bytes)?;
    let total = header.frame_len();
    if bytes.len() < total {
        return Err(FrameError::Truncated { needed: total, available: bytes.len() });
    }
    Ok((header, &bytes[HEADER_LEN..total], total))
}
