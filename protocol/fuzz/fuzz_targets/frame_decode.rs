//! Decodes arbitrary bytes as a frame stream, a request payload and a reply payload.
//! The contract under test: no panic, no runaway allocation, and anything accepted encodes
//! back to exactly the bytes it came from (so corruption never yields a different message),
//! and the in-place reader of bulk frames agrees with the decoder.
#![no_main]

use gpupool_protocol::{Message, Reply, Request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A stream of frames, as a socket reader would see it.
    let mut at = 0;
    while at < data.len() {
        match gpupool_protocol::bulk::view(&data[at..]) {
            Ok(Some((v, len))) => assert_eq!(Message::decode(&data[at..]), Ok((v.to_message(), len))),
            Ok(None) => {}
            Err(e) => assert_eq!(Message::decode(&data[at..]), Err(e)),
        }
        match Message::decode(&data[at..]) {
            Ok((msg, len)) => {
                let again = msg.encode().expect("a decoded message re-encodes");
                assert_eq!(
                    &again[..],
                    &data[at..at + len],
                    "non-canonical frame accepted: {msg:?}"
                );
                at += len;
            }
            Err(_) => break,
        }
    }
    // Bare payloads, as the daemon decodes them after the transport split the header off.
    if let Ok(req) = Request::decode_payload(data) {
        let mut again = Vec::new();
        req.encode_payload(&mut again)
            .expect("a decoded request re-encodes");
        assert_eq!(&again[..], data);
    }
    if let Ok(rep) = Reply::decode_payload(data) {
        let mut again = Vec::new();
        rep.encode_payload(&mut again)
            .expect("a decoded reply re-encodes");
        assert_eq!(&again[..], data);
    }
});
