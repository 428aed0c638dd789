//! Bulk messages: the three whose last field is a byte blob of up to megabytes — a
//! host-to-device copy with inline bytes, a staging write, and the `Bytes` reply of a
//! device-to-host copy. Over the network these carry every byte of a copy, so the blob is
//! never copied by the encoder or the decoder:
//!
//! - [`encode_head`] writes the frame up to the blob's bytes (header, fields, blob length);
//!   the sender then hands the caller's slice to the transport behind it
//!   ([`crate::transport::Transport::send_parts`]).
//! - [`view`] reads such a frame in place: the fields, and the blob as a slice of the
//!   received frame.
//!
//! Both are the same bytes as [`Message::encode_into`] and [`Message::decode`] (the tests
//! check head + blob against the full encoding, and the view against the full decode), and
//! [`view`] refuses what `decode` refuses, with the same errors.
#![forbid(unsafe_code)]

use crate::codec::{Decode, EncodeError, Reader};
use crate::frame::{Flags, FrameError, FrameHeader, FrameKind, HEADER_LEN, MAX_PAYLOAD, split_frame};
use crate::message::{Message, ProtocolError};
use crate::ops::{DevicePtr, HostSrc, InlineBytes, MAX_INLINE_BYTES, Reply, ReplyOp, Request, RequestOp};

/// Which bulk message, with its fields other than the blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bulk {
    /// `Request::MemcpyHtoD { dst, src: HostSrc::Inline(blob) }`.
    HtoD { dst: DevicePtr },
    /// `Request::StagingWrite { offset, data: blob }`.
    StagingWrite { offset: u64 },
    /// `Reply::Bytes { data: blob }`.
    Bytes,
}

impl Bulk {
    /// The message with an empty blob: its encoding ends with the blob's `u32` length.
    fn with_empty_blob(self, id: u64, no_reply: bool) -> Message {
        let empty = InlineBytes(Vec::new());
        match self {
            Bulk::HtoD { dst } => {
                Message::Request { id, no_reply, op: Request::MemcpyHtoD { dst, src: HostSrc::Inline(empty) } }
            }
            Bulk::StagingWrite { offset } => {
                Message::Request { id, no_reply, op: Request::StagingWrite { offset, data: empty } }
            }
            Bulk::Bytes => Message::Reply { id, op: Reply::Bytes { data: empty } },
        }
    }
}

/// Appends the frame of `bulk` whose blob is `blob_len` bytes, up to (not including) those
/// bytes, to `out`; returns the head's length. The frame is the head followed by the blob.
/// `no_reply` is refused on a synchronous request, as by `encode_into`. On error `out` is
/// left as it was.
pub fn encode_head(
    id: u64,
    no_reply: bool,
    bulk: Bulk,
    blob_len: usize,
    out: &mut Vec<u8>,
) -> Result<usize, EncodeError> {
    if blob_len > MAX_INLINE_BYTES {
        return Err(EncodeError::TooLong { what: "inline bytes", len: blob_len, max: MAX_INLINE_BYTES });
    }
    let start = out.len();
    let head_len = bulk.with_empty_blob(id, no_reply).encode_into(out)?;
    let payload_len = head_len - HEADER_LEN + blob_len;
    if payload_len > MAX_PAYLOAD as usize {
        out.truncate(start);
        return Err(EncodeError::PayloadTooLarge { len: payload_len, max: MAX_PAYLOAD });
    }
    // The payload length at header offset 12, the blob's length in the last 4 bytes.
    out[start + 12..start + 16].copy_from_slice(&(payload_len as u32).to_le_bytes());
    let end = start + head_len;
    out[end - 4..end].copy_from_slice(&(blob_len as u32).to_le_bytes());
    Ok(head_len)
}

/// A bulk message read in place; `data` borrows the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BulkView<'a> {
    pub id: u64,
    pub no_reply: bool,
    pub bulk: Bulk,
    pub data: &'a [u8],
}

impl BulkView<'_> {
    /// The owned message (a copy of the blob): what `Message::decode` returns.
    pub fn to_message(&self) -> Message {
        let mut m = self.bulk.with_empty_blob(self.id, self.no_reply);
        let blob = match &mut m {
            Message::Request { op: Request::MemcpyHtoD { src: HostSrc::Inline(b), .. }, .. }
            | Message::Request { op: Request::StagingWrite { data: b, .. }, .. }
            | Message::Reply { op: Reply::Bytes { data: b }, .. } => b,
            _ => unreachable!("with_empty_blob makes only bulk messages"),
        };
        blob.0 = self.data.to_vec();
        m
    }
}

/// The bulk message at the start of `bytes`, and the frame's length; `Ok(None)` when the
/// frame is valid so far but another message (decode it with [`Message::decode`]). A frame
/// `decode` refuses is refused here with the same error.
pub fn view(bytes: &[u8]) -> Result<Option<(BulkView<'_>, usize)>, ProtocolError> {
    let (header, payload, len) = split_frame(bytes)?;
    Ok(view_parts(&header, payload)?.map(|v| (v, len)))
}

/// [`view`] under an already-validated header, as [`Message::from_parts`] is to
/// [`Message::decode`]: a reader that views first and decodes the rest checks the header once.
pub fn view_parts<'a>(header: &FrameHeader, payload: &'a [u8]) -> Result<Option<BulkView<'a>>, ProtocolError> {
    if payload.len() != header.payload_len as usize {
        return Err(FrameError::Truncated { needed: header.payload_len as usize, available: payload.len() }.into());
    }
    let mut r = Reader::new(payload);
    let id = header.request_id;
    let no_reply = header.flags.contains(Flags::NO_REPLY);
    let bulk = match header.kind {
        FrameKind::Request => match RequestOp::from_code(u16::decode(&mut r)?) {
            Some(RequestOp::MemcpyHtoD) => {
                let dst = DevicePtr::decode(&mut r)?;
                // Another source (staging, a region) is a small message: decode it whole.
                if r.remaining() == 0 || payload[payload.len() - r.remaining()] != 1 {
                    return Ok(None);
                }
                u8::decode(&mut r)?;
                Bulk::HtoD { dst }
            }
            Some(RequestOp::StagingWrite) => Bulk::StagingWrite { offset: u64::decode(&mut r)? },
            _ => return Ok(None),
        },
        FrameKind::Reply => match ReplyOp::from_code(u16::decode(&mut r)?) {
            Some(ReplyOp::Bytes) => Bulk::Bytes,
            _ => return Ok(None),
        },
        _ => return Ok(None),
    };
    let blob_len = r.length("inline bytes", MAX_INLINE_BYTES, 1)?;
    let data = r.take(blob_len)?;
    r.finish()?;
    if no_reply && matches!(bulk, Bulk::HtoD { .. }) {
        return Err(ProtocolError::NoReplyOnSyncRequest(RequestOp::MemcpyHtoD.name()));
    }
    Ok(Some(BulkView { id, no_reply, bulk, data }))
}
