//! Every way a frame or payload can be wrong gets its typed error, lengths are capped
//! before anything is allocated, and encoding refuses what decoding would refuse.

mod common;

use common::all_request_examples;
use gpupool_protocol::codec::MAX_STRING_LEN;
use gpupool_protocol::ops::*;
use gpupool_protocol::*;

fn valid_frame() -> Vec<u8> {
    Message::Request { id: 5, no_reply: false, op: Request::MemFree { ptr: DevicePtr(0x1000) } }.encode().unwrap()
}

fn frame_err(bytes: &[u8]) -> FrameError {
    match Message::decode(bytes) {
        Err(ProtocolError::Frame(e)) => e,
        other => panic!("expected a frame error, got {other:?}"),
    }
}

fn payload_err(bytes: &[u8]) -> DecodeError {
    match Message::decode(bytes) {
        Err(ProtocolError::Payload(e)) => e,
        other => panic!("expected a payload error, got {other:?}"),
    }
}

#[test]
fn header_errors_are_typed() {
    let good = valid_frame();
    let mut b = good.clone();
    b[0] = b'X';
    assert_eq!(frame_err(&b), FrameError::BadMagic(*b"XPPL"));

    let mut b = good.clone();
    b[4..6].copy_from_slice(&7u16.to_le_bytes());
    let e = frame_err(&b);
    assert_eq!(e, FrameError::VersionMismatch { ours: PROTOCOL_VERSION, theirs: 7 });
    assert!(e.to_string().contains("incompatible"), "{e}");
    assert!(ProtocolError::from(e).is_version_mismatch());
    // Even the first 6 bytes of another version's frame say so.
    assert_eq!(FrameHeader::decode(&b[..6]), Err(FrameError::VersionMismatch { ours: PROTOCOL_VERSION, theirs: 7 }));

    let mut b = good.clone();
    b[6] = 32;
    assert_eq!(frame_err(&b), FrameError::BadHeaderLen { expected: 24, found: 32 });

    for kind in [0u16, 9, 0xffff] {
        let mut b = good.clone();
        b[8..10].copy_from_slice(&kind.to_le_bytes());
        assert_eq!(frame_err(&b), FrameError::UnknownKind(kind));
    }

    let mut b = good.clone();
    b[10..12].copy_from_slice(&0x8001u16.to_le_bytes());
    assert_eq!(frame_err(&b), FrameError::ReservedFlags(0x8000));

    let mut reply = Message::Reply { id: 5, op: Reply::Ok {} }.encode().unwrap();
    reply[10] = 1;
    assert_eq!(frame_err(&reply), FrameError::FlagNotAllowed { kind: FrameKind::Reply, flags: 1 });

    let mut b = good.clone();
    b[12..16].copy_from_slice(&(MAX_PAYLOAD + 1).to_le_bytes());
    assert_eq!(frame_err(&b), FrameError::PayloadTooLarge { len: MAX_PAYLOAD + 1, max: MAX_PAYLOAD });

    assert_eq!(frame_err(&good[..3]), FrameError::Truncated { needed: HEADER_LEN, available: 3 });
    assert_eq!(frame_err(&good[..HEADER_LEN]), FrameError::Truncated { needed: good.len(), available: HEADER_LEN });
    assert_eq!(
        frame_err(&good[..good.len() - 1]),
        FrameError::Truncated { needed: good.len(), available: good.len() - 1 }
    );
}

/// Re-frames `payload` under the header of `frame` (fixing the payload length).
fn with_payload(frame: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut b = frame[..HEADER_LEN].to_vec();
    b[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    b.extend_from_slice(payload);
    b
}

#[test]
fn payload_errors_are_typed() {
    let good = valid_frame();
    let payload = &good[HEADER_LEN..];

    let mut p = payload.to_vec();
    p.push(0);
    assert_eq!(payload_err(&with_payload(&good, &p)), DecodeError::TrailingBytes(1));
    assert!(matches!(payload_err(&with_payload(&good, &payload[..5])), DecodeError::UnexpectedEnd { .. }));
    assert_eq!(
        payload_err(&with_payload(&good, &[0xfe, 0x7f])),
        DecodeError::UnknownOpcode { what: "request", opcode: 0x7ffe }
    );
    // A reply's opcode in a request frame is unknown there.
    assert!(matches!(payload_err(&with_payload(&good, &[0x00, 0x80])), DecodeError::UnknownOpcode { .. }));

    // Hello only in a hello frame, and a hello frame only with Hello.
    let hello = Message::Request { id: 1, no_reply: false, op: all_request_examples().remove(0) }.encode().unwrap();
    let mut b = hello.clone();
    b[8] = FrameKind::Request as u8;
    assert_eq!(payload_err(&b), DecodeError::KindMismatch { kind: FrameKind::Request, opcode: 0x0001 });
    let mut b = good.clone();
    b[8] = FrameKind::Hello as u8;
    assert_eq!(payload_err(&b), DecodeError::KindMismatch { kind: FrameKind::Hello, opcode: 0x0303 });
    // An async error carries an Error reply and nothing else.
    let mut b = Message::Reply { id: 1, op: Reply::Ok {} }.encode().unwrap();
    b[8] = FrameKind::AsyncError as u8;
    assert_eq!(payload_err(&b), DecodeError::KindMismatch { kind: FrameKind::AsyncError, opcode: 0x8000 });
    // Bye is empty, id 0.
    let mut b = Message::Bye.encode().unwrap();
    b[16] = 1;
    assert_eq!(payload_err(&b), DecodeError::BadBye);
    // A checkpoint notice is empty too.
    let mut b = Message::Reply { id: 1, op: Reply::Ok {} }.encode().unwrap();
    b[8] = FrameKind::Checkpointed as u8;
    assert_eq!(payload_err(&b), DecodeError::BadCheckpointed);

    // NO_REPLY on a synchronous request.
    let mut b = good.clone();
    b[10] = 1;
    assert_eq!(Message::decode(&b), Err(ProtocolError::NoReplyOnSyncRequest("MemFree")));

    // bool, option, enum tags, UTF-8.
    let ready = Message::Reply { id: 1, op: Reply::Ready { ready: true } }.encode().unwrap();
    let mut b = ready.clone();
    *b.last_mut().unwrap() = 2;
    assert_eq!(payload_err(&b), DecodeError::InvalidTag { what: "bool", tag: 2 });
    let get = Message::Request {
        id: 1,
        no_reply: false,
        op: Request::ModuleGetFunction { module: ModuleId(1), name: "ab".into() },
    }
    .encode()
    .unwrap();
    let mut b = get.clone();
    *b.last_mut().unwrap() = 0xff;
    assert_eq!(payload_err(&b), DecodeError::InvalidUtf8);
    let memset = Message::Request {
        id: 1,
        no_reply: false,
        op: all_request_examples().into_iter().find(|r| r.op() == RequestOp::Memset).unwrap(),
    }
    .encode()
    .unwrap();
    let mut b = memset.clone();
    b[HEADER_LEN + 2 + 8] = 3; // element size 3
    assert_eq!(payload_err(&b), DecodeError::InvalidTag { what: "memset element size", tag: 3 });
}

#[test]
fn lengths_are_capped_before_allocating() {
    // A string claiming 4 GiB in a 20-byte payload.
    let mut p = RequestOp::ModuleGetFunction.code().to_le_bytes().to_vec();
    p.extend_from_slice(&1u64.to_le_bytes());
    p.extend_from_slice(&u32::MAX.to_le_bytes());
    let b = with_payload(&valid_frame(), &p);
    assert_eq!(payload_err(&b), DecodeError::TooLong { what: "string", len: u32::MAX as usize, max: MAX_STRING_LEN });
    // A vector claiming more elements than the bytes left can hold.
    let mut p = ReplyOp::Function.code().to_le_bytes().to_vec();
    p.extend_from_slice(&1u64.to_le_bytes());
    p.extend_from_slice(&1000u32.to_le_bytes());
    let reply = Message::Reply { id: 1, op: Reply::Ok {} }.encode().unwrap();
    assert_eq!(payload_err(&with_payload(&reply, &p)), DecodeError::UnexpectedEnd { needed: 8000, remaining: 0 });
    // ...or more than its cap.
    let mut p = ReplyOp::Function.code().to_le_bytes().to_vec();
    p.extend_from_slice(&1u64.to_le_bytes());
    p.extend_from_slice(&(MAX_KERNEL_PARAMS as u32 + 1).to_le_bytes());
    assert!(matches!(payload_err(&with_payload(&reply, &p)), DecodeError::TooLong { what: "vector", .. }));
}

#[test]
fn encoding_refuses_what_decoding_would() {
    let long = Request::ModuleGetFunction { module: ModuleId(1), name: "x".repeat(MAX_STRING_LEN + 1) };
    let mut out = vec![1, 2, 3];
    let e = Message::Request { id: 1, no_reply: false, op: long }.encode_into(&mut out).unwrap_err();
    assert_eq!(e, EncodeError::TooLong { what: "string", len: MAX_STRING_LEN + 1, max: MAX_STRING_LEN });
    assert_eq!(out, [1, 2, 3], "a failed encode leaves the buffer as it was");

    let params = KernelParams(vec![0; MAX_KERNEL_PARAM_BYTES + 1]);
    let launch = Request::LaunchKernel {
        func: FuncId(1),
        grid: [1; 3],
        block: [1; 3],
        shared_mem_bytes: 0,
        stream: StreamId::NULL,
        params,
        cooperative: false,
    };
    assert!(matches!(
        Message::Request { id: 1, no_reply: true, op: launch }.encode(),
        Err(EncodeError::TooLong { what: "kernel parameters", .. })
    ));

    let sync = Message::Request { id: 1, no_reply: true, op: Request::MemFree { ptr: DevicePtr(1) } };
    assert_eq!(sync.encode(), Err(EncodeError::NoReplyOnSyncRequest("MemFree")));

    // Two 32 MiB inline blobs fit their own cap but not one frame.
    let name = "n".repeat(MAX_STRING_LEN);
    let f = FunctionInfo { func: FuncId(1), name, params: vec![] };
    let big = Reply::Module { module: ModuleId(1), functions: vec![f; (MAX_PAYLOAD as usize / MAX_STRING_LEN) + 1] };
    assert!(matches!(Message::Reply { id: 1, op: big }.encode(), Err(EncodeError::PayloadTooLarge { .. })));
}
