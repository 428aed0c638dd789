//! Property tests over every operation of both tables, driven by the generated `sample`
//! constructors (so a new table line is covered without touching this file), and the
//! robustness properties: no input makes a decoder panic, and any input a decoder accepts
//! encodes back to exactly the same bytes (encodings are canonical, so a corrupted frame can
//! never decode to a *different* valid message).

use proptest::prelude::*;

use crate::message::Message;
use crate::ops::{Reply, ReplyOp, Request, RequestOp};
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
        _ => Message::Bye,
    }
}

/// The decoder's contract on arbitrary bytes: no panic, and `Ok` only for canonical bytes.
fn check_decode(bytes: &[u8]) -> Result<(), TestCaseError> {
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
            assert_eq!(Message::decode(&bytes), Ok((msg, bytes.len())));
        }
        for &op in ReplyOp::ALL {
            let mut g = Gen::new(seed.wrapping_mul(0x2000_0003) ^ op.code() as u64);
            let msg = Message::Reply { id: !seed, op: Reply::sample(op, &mut g) };
            let bytes = msg.encode().unwrap();
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
