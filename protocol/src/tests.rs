//! Property tests over every operation of both tables, driven by the generated `sample`
//! constructors (so a new table line is covered without touching this file), and the
//! robustness properties: no input makes a decoder panic, and any input a decoder accepts
//! encodes back to exactly the same bytes (encodings are canonical, so a corrupted frame can
//! never decode to a *different* valid message).

use proptest::prelude::*;

use crate::bulk::{self, Bulk};
use crate::message::Message;
use crate::ops::{HostSrc, Reply, ReplyOp, Request, RequestOp};
use crate::sample::Gen;

fn sample_message(seed: u64) -> Message {
    let mut g = Gen::new(seed);
    let id = g.next();
    match g.below(8) {
        0..=3 => {
            let op = RequestOp::ALL[g.below(RequestOp::ALL.len() as u64) as usize];
            let op = Request::sample(op, &mut g);
            let no_reply = op.is_async() && g.next() & 1 == 1;
            Message::Request { id, no_reply, op }
        }
        4..=6 => {
            let op = ReplyOp::ALL[g.below(ReplyOp::ALL.len() as u64) as usize];
            Message::Reply { id, op: Reply::sample(op, &mut g) }
        }
        7 if g.next() & 1 == 1 => match Reply::sample(ReplyOp::Error, &mut g) {
            Reply::Error { code, message } => Message::AsyncError { id, code, message },
            _ => unreachable!(),
        },
        7 if g.next() & 1 == 1 => Message::Checkpointed { seen: id },
        7 if g.next() & 1 == 1 => {
            let n = g.below(64) as usize;
            Message::DeviceOutput { text: (0..n).map(|_| g.next() as u8).collect() }
        }
        _ => Message::Bye,
    }
}

/// A bulk message's kind and blob (the messages [`crate::bulk`] sends and reads in place).
fn as_bulk(msg: &Message) -> Option<(Bulk, &[u8])> {
    match msg {
        Message::Request { op: Request::MemcpyHtoD { dst, src: HostSrc::Inline(b) }, .. } => {
            Some((Bulk::HtoD { dst: *dst }, &b.0))
        }
        Message::Request { op: Request::StagingWrite { offset, data }, .. } => {
            Some((Bulk::StagingWrite { offset: *offset }, &data.0))
        }
        Message::Reply { op: Reply::Bytes { data }, .. } => Some((Bulk::Bytes, &data.0)),
        _ => None,
    }
}

/// The in-place reader agrees with the decoder on any bytes: the same message (or not a
/// bulk one), or the same error.
fn check_bulk_view(bytes: &[u8]) -> Result<(), TestCaseError> {
    let full = Message::decode(bytes);
    match bulk::view(bytes) {
        Ok(Some((v, len))) => prop_assert_eq!(full, Ok((v.to_message(), len))),
        Err(e) => prop_assert_eq!(full, Err(e)),
        Ok(None) => {
            if let Ok((msg, _)) = &full {
                prop_assert!(as_bulk(msg).is_none(), "bulk message {:?} not seen by view", msg);
            }
        }
    }
    Ok(())
}

/// A bulk message's head from `bulk::encode_head`, followed by its blob, is its encoding.
fn check_bulk_head(msg: &Message, bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Some((bulk, blob)) = as_bulk(msg) {
        let no_reply = matches!(msg, Message::Request { no_reply: true, .. });
        let mut head = vec![0xee];
        let n = bulk::encode_head(msg.request_id(), no_reply, bulk, blob.len(), &mut head).unwrap();
        prop_assert_eq!(n, head.len() - 1);
        head.extend_from_slice(blob);
        prop_assert_eq!(&head[1..], bytes);
    }
    Ok(())
}

/// The decoder's contract on arbitrary bytes: no panic, and `Ok` only for canonical bytes.
fn check_decode(bytes: &[u8]) -> Result<(), TestCaseError> {
    check_bulk_view(bytes)?;
    if let Ok((msg, len)) = Message::decode(bytes) {
        let again = msg.encode().map_err(|e| TestCaseError::fail(format!("re-encode {msg:?}: {e}")))?;
        prop_assert_eq!(&again[..], &bytes[..len], "accepted non-canonical bytes as {:?}", msg);
    }
    if let Ok(req) = Request::decode_payload(bytes) {
        let mut again = Vec::new();
        req.encode_payload(&mut again).unwrap();
        prop_assert_eq!(&again[..], bytes);
    }
    if let Ok(rep) = Reply::decode_payload(bytes) {
        let mut again = Vec::new();
        rep.encode_payload(&mut again).unwrap();
        prop_assert_eq!(&again[..], bytes);
    }
    Ok(())
}

#[test]
fn every_operation_round_trips() {
    for seed in 0..64u64 {
        for &op in RequestOp::ALL {
            let mut g = Gen::new(seed.wrapping_mul(0x1000_0001) ^ op.code() as u64);
            let req = Request::sample(op, &mut g);
            assert_eq!(req.op(), op);
            let no_reply = req.is_async() && seed & 1 == 1;
            let msg = Message::Request { id: seed, no_reply, op: req };
            let bytes = msg.encode().unwrap_or_else(|e| panic!("{msg:?}: {e}"));
            check_bulk_head(&msg, &bytes).unwrap();
            check_bulk_view(&bytes).unwrap();
            assert_eq!(Message::decode(&bytes), Ok((msg, bytes.len())));
        }
        for &op in ReplyOp::ALL {
            let mut g = Gen::new(seed.wrapping_mul(0x2000_0003) ^ op.code() as u64);
            let msg = Message::Reply { id: !seed, op: Reply::sample(op, &mut g) };
            let bytes = msg.encode().unwrap();
            check_bulk_head(&msg, &bytes).unwrap();
            check_bulk_view(&bytes).unwrap();
            assert_eq!(Message::decode(&bytes), Ok((msg, bytes.len())));
        }
    }
}

fn config() -> ProptestConfig {
    // Bounded and fast: the whole module runs in well under a second in a debug build.
    ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_messages_round_trip(seed in any::<u64>()) {
        let msg = sample_message(seed);
        let bytes = msg.encode().unwrap();
        check_bulk_head(&msg, &bytes)?;
        check_bulk_view(&bytes)?;
        prop_assert_eq!(Message::decode(&bytes), Ok((msg, bytes.len())));
    }

    #[test]
    fn frames_followed_by_more_bytes_decode_alone(seed in any::<u64>(), tail in proptest::collection::vec(any::<u8>(), 0..32)) {
        let msg = sample_message(seed);
        let mut bytes = msg.encode().unwrap();
        let len = bytes.len();
        bytes.extend_from_slice(&tail);
        prop_assert_eq!(Message::decode(&bytes), Ok((msg, len)));
    }

    #[test]
    fn truncated_frames_are_refused(seed in any::<u64>(), cut in any::<prop::sample::Index>()) {
        let bytes = sample_message(seed).encode().unwrap();
        let cut = cut.index(bytes.len());
        prop_assert!(Message::decode(&bytes[..cut]).is_err());
        check_decode(&bytes[..cut])?;
    }

    #[test]
    fn bit_flips_never_yield_a_different_message(seed in any::<u64>(), bit in any::<prop::sample::Index>()) {
        let mut bytes = sample_message(seed).encode().unwrap();
        let bit = bit.index(bytes.len() * 8);
        bytes[bit / 8] ^= 1 << (bit % 8);
        check_decode(&bytes)?;
    }

    #[test]
    fn byte_overwrites_never_yield_a_different_message(
        seed in any::<u64>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = sample_message(seed).encode().unwrap();
        for (at, v) in edits {
            let at = at.index(bytes.len());
            bytes[at] = v;
        }
        check_decode(&bytes)?;
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        check_decode(&bytes)?;
    }

    #[test]
    fn arbitrary_payloads_behind_a_valid_header(
        kind in 1u16..=6, flags in 0u16..=1, id in any::<u64>(),
        payload in proptest::collection::vec(any::<u8>(), 0..128),
        opcode in prop::sample::select(
            RequestOp::ALL.iter().map(|o| o.code()).chain(ReplyOp::ALL.iter().map(|o| o.code())).collect::<Vec<_>>()),
    ) {
        // A valid header and a known opcode get the fuzzing past the first checks.
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&crate::MAGIC);
        bytes.extend_from_slice(&crate::PROTOCOL_VERSION.to_le_bytes());
        bytes.extend_from_slice(&(crate::HEADER_LEN as u16).to_le_bytes());
        bytes.extend_from_slice(&kind.to_le_bytes());
        bytes.extend_from_slice(&flags.to_le_bytes());
        bytes.extend_from_slice(&(payload.len() as u32 + 2).to_le_bytes());
        bytes.extend_from_slice(&id.to_le_bytes());
        bytes.extend_from_slice(&opcode.to_le_bytes());
        bytes.extend_from_slice(&payload);
        check_decode(&bytes)?;
        check_decode(&bytes[crate::HEADER_LEN..])?;
    }
}

#[test]
fn bulk_heads_refuse_what_the_encoder_refuses() {
    use crate::ops::MAX_INLINE_BYTES;
    use crate::{DevicePtr, EncodeError};
    let mut out = vec![1, 2, 3];
    let htod = Bulk::HtoD { dst: DevicePtr(0x1000) };
    // A host-to-device copy is synchronous: never without a reply.
    assert_eq!(bulk::encode_head(1, true, htod, 10, &mut out), Err(EncodeError::NoReplyOnSyncRequest("MemcpyHtoD")));
    assert_eq!(
        bulk::encode_head(1, false, htod, MAX_INLINE_BYTES + 1, &mut out),
        Err(EncodeError::TooLong { what: "inline bytes", len: MAX_INLINE_BYTES + 1, max: MAX_INLINE_BYTES })
    );
    assert_eq!(out, [1, 2, 3], "a refused head leaves the buffer as it was");
    // The largest blob: head + 32 MiB is a frame the decoder takes, viewed in place.
    let blob = vec![0x5a; MAX_INLINE_BYTES];
    bulk::encode_head(9, true, Bulk::StagingWrite { offset: 64 }, blob.len(), &mut out).unwrap();
    out.extend_from_slice(&blob);
    let (v, len) = bulk::view(&out[3..]).unwrap().unwrap();
    assert_eq!(
        (v.id, v.no_reply, v.bulk, v.data.len(), len),
        (9, true, Bulk::StagingWrite { offset: 64 }, blob.len(), out.len() - 3)
    );
    assert!(std::ptr::eq(v.data.as_ptr(), out[out.len() - blob.len()..].as_ptr()), "the blob is borrowed, not copied");
    // Another source of a host-to-device copy is not a bulk message.
    let staged = Message::Request {
        id: 2,
        no_reply: false,
        op: Request::MemcpyHtoD {
            dst: DevicePtr(8),
            src: HostSrc::Staging(crate::ops::StagingRegion { offset: 0, len: 4 }),
        },
    };
    assert_eq!(bulk::view(&staged.encode().unwrap()), Ok(None));
}

#[test]
fn every_reply_converts_to_its_answer_and_back_and_no_other() {
    use crate::ops::{Answer, answer};
    for seed in 0..16u64 {
        for &op in ReplyOp::ALL {
            let r = Reply::sample(op, &mut Gen::new(seed ^ op.code() as u64));
            assert_eq!(r.clone().through_answer(), Some(r.clone()), "{op:?}");
            // Another reply is handed back untouched.
            if op != ReplyOp::Ok {
                assert_eq!(answer::Ok::try_from(r.clone()), Err(r));
            }
        }
    }
    assert_eq!(<answer::MemPtr as Answer>::OP, ReplyOp::MemPtr);
    assert_eq!(RequestOp::MemAlloc.reply(), <answer::MemPtr as Answer>::OP);
}
