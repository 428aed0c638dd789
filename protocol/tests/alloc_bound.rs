//! Decoding never allocates more than a small multiple of the bytes it was given, whatever
//! lengths and counts the bytes claim. A counting global allocator measures every byte the
//! decoders ask for (its own test binary, one test, so nothing else allocates meanwhile).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use gpupool_protocol::{HEADER_LEN, Message, Reply, ReplyOp, Request, RequestOp};

struct Counting;
static REQUESTED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged, only counting.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        REQUESTED.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        REQUESTED.fetch_add(new_size, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Bytes allocated while decoding `bytes` (errors included).
fn allocated_by_decode(bytes: &[u8]) -> usize {
    let before = REQUESTED.load(Ordering::Relaxed);
    let r = Message::decode(bytes);
    let _ = Request::decode_payload(bytes.get(HEADER_LEN..).unwrap_or_default());
    let _ = Reply::decode_payload(bytes.get(HEADER_LEN..).unwrap_or_default());
    let after = REQUESTED.load(Ordering::Relaxed);
    drop(r);
    after - before
}

/// The bound: four decodes' worth of 8x the input plus a little for error values.
fn assert_bounded(what: &str, bytes: &[u8]) {
    let n = allocated_by_decode(bytes);
    let bound = 3 * 8 * bytes.len() + 1024;
    assert!(n <= bound, "{what}: decoding {} bytes allocated {n} (bound {bound})", bytes.len());
}

#[test]
fn decoding_allocates_in_proportion_to_the_input() {
    // Real messages.
    for (i, op) in common::all_request_examples().into_iter().enumerate() {
        let bytes = Message::Request { id: i as u64, no_reply: false, op }.encode().unwrap();
        assert_bounded("request example", &bytes);
    }
    for op in common::all_reply_examples() {
        let bytes = Message::Reply { id: 1, op }.encode().unwrap();
        assert_bounded("reply example", &bytes);
    }
    // Hostile ones: every opcode followed by fields that all claim the maximum (0xff bytes
    // make every u32 length u32::MAX) or a count just under the cap.
    let reply_header = Message::Reply { id: 1, op: Reply::Ok {} }.encode().unwrap();
    let request_header = Message::Request { id: 1, no_reply: false, op: Request::DeviceGetCount {} }.encode().unwrap();
    for fill in [0xffu8, 0x01, 0x00, 0x10] {
        for len in [0usize, 4, 16, 64, 300] {
            let codes = RequestOp::ALL
                .iter()
                .map(|o| (o.code(), &request_header))
                .chain(ReplyOp::ALL.iter().map(|o| (o.code(), &reply_header)));
            for (code, header) in codes {
                let mut b = header[..HEADER_LEN].to_vec();
                let mut p = code.to_le_bytes().to_vec();
                p.resize(2 + len, fill);
                // Put a plausible vector count (cap-sized) after each possible id.
                if len >= 12 {
                    p[10..14].copy_from_slice(&65_535u32.to_le_bytes());
                }
                b[12..16].copy_from_slice(&(p.len() as u32).to_le_bytes());
                b.extend_from_slice(&p);
                assert_bounded("hostile payload", &b);
            }
        }
    }
}
