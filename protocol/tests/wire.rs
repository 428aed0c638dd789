//! The wire format through the public API: every operation's example round-trips, the
//! examples cover both opcode tables, and the bytes of one frame are pinned. The typed
//! errors are in `errors.rs`.

mod common;

use std::collections::BTreeSet;

use common::{all_reply_examples, all_request_examples};
use gpupool_protocol::ops::*;
use gpupool_protocol::*;

#[test]
fn examples_cover_every_opcode_exactly() {
    let reqs: BTreeSet<RequestOp> = all_request_examples().iter().map(|r| r.op()).collect();
    let all: BTreeSet<RequestOp> = RequestOp::ALL.iter().copied().collect();
    assert_eq!(reqs, all, "every request in the table needs one example in tests/common/mod.rs");
    assert_eq!(all_request_examples().len(), RequestOp::ALL.len(), "one example per request");
    let reps: BTreeSet<ReplyOp> = all_reply_examples().iter().map(|r| r.op()).collect();
    let all: BTreeSet<ReplyOp> = ReplyOp::ALL.iter().copied().collect();
    assert_eq!(reps, all, "every reply in the table needs one example in tests/common/mod.rs");
    assert_eq!(all_reply_examples().len(), ReplyOp::ALL.len(), "one example per reply");
}

#[test]
fn every_example_round_trips() {
    for (i, op) in all_request_examples().into_iter().enumerate() {
        let no_reply = op.is_async();
        let msg = Message::Request { id: i as u64 + 1, no_reply, op };
        let bytes = msg.encode().unwrap();
        assert_eq!(Message::decode(&bytes), Ok((msg.clone(), bytes.len())), "{msg:?}");
        let Message::Request { op, .. } = msg else { unreachable!() };
        let mut payload = Vec::new();
        op.encode_payload(&mut payload).unwrap();
        assert_eq!(&payload[..2], &op.opcode().to_le_bytes());
        assert_eq!(Request::decode_payload(&payload), Ok(op));
    }
    for (i, op) in all_reply_examples().into_iter().enumerate() {
        let msg = Message::Reply { id: i as u64 + 1, op };
        let bytes = msg.encode().unwrap();
        assert_eq!(Message::decode(&bytes), Ok((msg.clone(), bytes.len())), "{msg:?}");
    }
    for msg in [
        Message::Bye,
        Message::AsyncError { id: 9, code: 700, message: "illegal address".into() },
        Message::Checkpointed { seen: 41 },
    ] {
        let bytes = msg.encode().unwrap();
        assert_eq!(Message::decode(&bytes), Ok((msg, bytes.len())));
    }
}

#[test]
fn opcode_table_shape() {
    for op in RequestOp::ALL {
        assert!((0x0001..=0x7fff).contains(&op.code()));
        assert_eq!(RequestOp::from_code(op.code()), Some(*op));
    }
    for op in ReplyOp::ALL {
        assert!(op.code() >= 0x8000);
        assert_eq!(ReplyOp::from_code(op.code()), Some(*op));
    }
    assert_eq!(RequestOp::from_code(0x7fff), None);
    assert_eq!(RequestOp::MemAlloc.code(), 0x0301);
    assert_eq!(RequestOp::MemAlloc.name(), "MemAlloc");
    assert_eq!(RequestOp::MemAlloc.reply(), ReplyOp::MemPtr);
    assert_eq!(RequestOp::Hello.reply(), ReplyOp::HelloReply);
}

#[test]
fn async_operations_are_exactly_these() {
    use RequestOp::*;
    let expected: BTreeSet<RequestOp> = [
        MemcpyHtoDAsync,
        MemcpyDtoHAsync,
        MemcpyDtoHRegionAsync,
        MemcpyDtoDAsync,
        Memcpy2DAsync,
        Memcpy3DAsync,
        MemsetAsync,
        LaunchKernel,
        StreamWaitEvent,
        EventRecord,
        StagingWrite,
        GraphUpload,
        GraphLaunch,
        LaunchHostFunc,
    ]
    .into();
    let actual: BTreeSet<RequestOp> = RequestOp::ALL.iter().copied().filter(|o| o.is_async()).collect();
    assert_eq!(actual, expected);
    for op in all_request_examples() {
        assert_eq!(op.is_async(), expected.contains(&op.op()));
    }
}

#[test]
fn requests_accept_their_reply_or_an_error() {
    let alloc = Request::MemAlloc { ctx: CtxId(1), bytes: 8 };
    assert!(alloc.accepts(&Reply::MemPtr { ptr: DevicePtr(0x1000) }));
    assert!(alloc.accepts(&Reply::Error { code: 2, message: String::new() }));
    assert!(!alloc.accepts(&Reply::Ok {}));
}

/// The bytes of one frame, pinned: a change here is a wire change and needs a new
/// PROTOCOL_VERSION.
#[test]
fn golden_bytes() {
    let msg = Message::Request {
        id: 0x0102_0304_0506_0708,
        no_reply: false,
        op: Request::MemAlloc { ctx: CtxId(0x11), bytes: 0x2233 },
    };
    let expected: Vec<u8> = [
        &b"GPPL"[..],
        &[5, 0],        // version
        &[24, 0],       // header length
        &[1, 0],        // kind: request
        &[0, 0],        // flags
        &[18, 0, 0, 0], // payload length
        &[8, 7, 6, 5, 4, 3, 2, 1],
        &[0x01, 0x03], // opcode 0x0301
        &[0x11, 0, 0, 0, 0, 0, 0, 0],
        &[0x33, 0x22, 0, 0, 0, 0, 0, 0],
    ]
    .concat();
    assert_eq!(msg.encode().unwrap(), expected);

    let launch = Message::Request {
        id: 1,
        no_reply: true,
        op: Request::EventRecord { event: EventId(2), stream: StreamId::NULL },
    };
    let bytes = launch.encode().unwrap();
    assert_eq!(&bytes[8..12], &[1, 0, 1, 0], "request kind with NO_REPLY");
    let hello = Message::Request { id: 1, no_reply: false, op: all_request_examples().remove(0) };
    assert_eq!(hello.kind(), FrameKind::Hello);
    assert_eq!(&hello.encode().unwrap()[8..10], &[4, 0]);
}

#[test]
fn frames_split_from_a_stream() {
    let mut stream = Vec::new();
    let msgs: Vec<Message> = all_request_examples()
        .into_iter()
        .enumerate()
        .map(|(i, op)| Message::Request { id: i as u64, no_reply: false, op })
        .collect();
    for m in &msgs {
        m.encode_into(&mut stream).unwrap();
    }
    let mut at = 0;
    let mut decoded = Vec::new();
    while at < stream.len() {
        let (m, len) = Message::decode(&stream[at..]).unwrap();
        decoded.push(m);
        at += len;
    }
    assert_eq!(decoded, msgs);
    let (header, payload, len) = frame::split_frame(&stream).unwrap();
    assert_eq!(len, header.frame_len());
    assert_eq!(Message::from_parts(&header, payload).unwrap(), msgs[0]);
}
