//! Whole messages: a frame header and its decoded payload, with the rules that tie the two
//! together (which kind carries which operation, which flags are allowed).
#![forbid(unsafe_code)]

use thiserror::Error;

use crate::codec::{DecodeError, EncodeError};
use crate::frame::{Flags, FrameError, FrameHeader, FrameKind, HEADER_LEN, MAX_PAYLOAD, split_frame};
use crate::ops::{Reply, ReplyOp, Request, RequestOp};

/// A frame or its payload was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProtocolError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("bad payload: {0}")]
    Payload(#[from] DecodeError),
    #[error("request {0} is synchronous but was sent with NO_REPLY")]
    NoReplyOnSyncRequest(&'static str),
}

impl ProtocolError {
    /// Whether the peer speaks another protocol version (say "incompatible", not "garbage").
    pub fn is_version_mismatch(&self) -> bool {
        matches!(self, ProtocolError::Frame(FrameError::VersionMismatch { .. }))
    }
}

/// One message, either direction.
///
/// The frame kind follows from the variant: `Request` of `Request::Hello` travels as
/// [`FrameKind::Hello`], other requests as [`FrameKind::Request`]; `Reply` of
/// `Reply::HelloReply` as [`FrameKind::HelloReply`], other replies as [`FrameKind::Reply`]
/// (a refused hello is answered by a plain `Reply::Error`). Decoding checks that the kind
/// and the payload agree.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Message {
    /// `no_reply` is allowed only for [`Request::is_async`] operations.
    Request {
        id: u64,
        no_reply: bool,
        op: Request,
    },
    Reply {
        id: u64,
        op: Reply,
    },
    /// The failure of the asynchronous request `id`, sent with `NO_REPLY`.
    AsyncError {
        id: u64,
        code: u32,
        message: String,
    },
    Bye,
    /// The daemon wrote a checkpoint of the session that had seen the requests up to `seen`
    /// ([`FrameKind::Checkpointed`]).
    Checkpointed {
        seen: u64,
    },
    /// Device `printf` output for the client's standard output ([`FrameKind::DeviceOutput`]).
    DeviceOutput {
        text: Vec<u8>,
    },
}

impl Message {
    pub fn kind(&self) -> FrameKind {
        match self {
            Message::Request { op: Request::Hello { .. }, .. } => FrameKind::Hello,
            Message::Request { .. } => FrameKind::Request,
            Message::Reply { op: Reply::HelloReply { .. }, .. } => FrameKind::HelloReply,
            Message::Reply { .. } => FrameKind::Reply,
            Message::AsyncError { .. } => FrameKind::AsyncError,
            Message::Bye => FrameKind::Bye,
            Message::Checkpointed { .. } => FrameKind::Checkpointed,
            Message::DeviceOutput { .. } => FrameKind::DeviceOutput,
        }
    }

    pub fn request_id(&self) -> u64 {
        match self {
            Message::Request { id, .. } | Message::Reply { id, .. } | Message::AsyncError { id, .. } => *id,
            Message::Checkpointed { seen } => *seen,
            Message::Bye | Message::DeviceOutput { .. } => 0,
        }
    }

    /// Appends the whole frame (header and payload) to `out`; returns its length. On error
    /// `out` is left as it was.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<usize, EncodeError> {
        let start = out.len();
        let result = self.encode_inner(out, start);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    /// The whole frame as a new vector.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let mut out = Vec::new();
        self.encode_into(&mut out)?;
        Ok(out)
    }

    fn encode_inner(&self, out: &mut Vec<u8>, start: usize) -> Result<usize, EncodeError> {
        out.extend_from_slice(&[0u8; HEADER_LEN]);
        let mut flags = Flags::NONE;
        match self {
            Message::Request { no_reply, op, .. } => {
                if *no_reply {
                    if !op.is_async() {
                        return Err(EncodeError::NoReplyOnSyncRequest(op.name()));
                    }
                    flags = Flags::NO_REPLY;
                }
                op.encode_payload(out)?;
            }
            Message::Reply { op, .. } => op.encode_payload(out)?,
            Message::AsyncError { code, message, .. } => {
                Reply::Error { code: *code, message: message.clone() }.encode_payload(out)?
            }
            Message::Bye | Message::Checkpointed { .. } => {}
            Message::DeviceOutput { text } => out.extend_from_slice(text),
        }
        let payload_len = out.len() - start - HEADER_LEN;
        if payload_len > MAX_PAYLOAD as usize {
            return Err(EncodeError::PayloadTooLarge { len: payload_len, max: MAX_PAYLOAD });
        }
        let header =
            FrameHeader { kind: self.kind(), flags, request_id: self.request_id(), payload_len: payload_len as u32 };
        out[start..start + HEADER_LEN].copy_from_slice(&header.encode());
        Ok(HEADER_LEN + payload_len)
    }

    /// Decodes the frame at the start of `bytes`; returns the message and the frame's length
    /// (bytes after it are left for the next call). Any `Ok` value encodes back to exactly
    /// `bytes[..len]`.
    pub fn decode(bytes: &[u8]) -> Result<(Message, usize), ProtocolError> {
        let (header, payload, len) = split_frame(bytes)?;
        Ok((Self::from_parts(&header, payload)?, len))
    }

    /// Decodes a payload under an already-validated header (for transports that read the
    /// header and the payload separately). `payload` must be exactly `header.payload_len`
    /// bytes.
    pub fn from_parts(header: &FrameHeader, payload: &[u8]) -> Result<Message, ProtocolError> {
        if payload.len() != header.payload_len as usize {
            return Err(FrameError::Truncated { needed: header.payload_len as usize, available: payload.len() }.into());
        }
        let id = header.request_id;
        let mismatch = |opcode: u16| DecodeError::KindMismatch { kind: header.kind, opcode };
        let msg = match header.kind {
            FrameKind::Request | FrameKind::Hello => {
                let op = Request::decode_payload(payload)?;
                let is_hello = op.op() == RequestOp::Hello;
                if is_hello != (header.kind == FrameKind::Hello) {
                    return Err(mismatch(op.opcode()).into());
                }
                let no_reply = header.flags.contains(Flags::NO_REPLY);
                if no_reply && !op.is_async() {
                    return Err(ProtocolError::NoReplyOnSyncRequest(op.name()));
                }
                Message::Request { id, no_reply, op }
            }
            FrameKind::Reply | FrameKind::HelloReply => {
                let op = Reply::decode_payload(payload)?;
                let is_hello = op.op() == ReplyOp::HelloReply;
                if is_hello != (header.kind == FrameKind::HelloReply) {
                    return Err(mismatch(op.opcode()).into());
                }
                Message::Reply { id, op }
            }
            FrameKind::AsyncError => match Reply::decode_payload(payload)? {
                Reply::Error { code, message } => Message::AsyncError { id, code, message },
                other => return Err(mismatch(other.opcode()).into()),
            },
            FrameKind::Bye => {
                if id != 0 || !payload.is_empty() {
                    return Err(DecodeError::BadBye.into());
                }
                Message::Bye
            }
            FrameKind::Checkpointed => {
                if !payload.is_empty() {
                    return Err(DecodeError::BadCheckpointed.into());
                }
                Message::Checkpointed { seen: id }
            }
            FrameKind::DeviceOutput => {
                if id != 0 {
                    return Err(DecodeError::BadDeviceOutput.into());
                }
                Message::DeviceOutput { text: payload.to_vec() }
            }
        };
        Ok(msg)
    }
}
