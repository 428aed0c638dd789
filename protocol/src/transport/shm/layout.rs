//! The segment's layout: the types that live in shared memory, and the checks a segment
//! passes before anything but its header is touched.
//!
//! ```text
//! offset 0      SegmentHeader   (128 B) magic "GPUPSHM1", layout version, sizes, offsets,
//!                               closed flags of both ends
//! 128           RingControl     (256 B) request ring: four cache lines: tail | head |
//!                               data futex word + waiter flag + yielding CPU | the same for space
//! 384           RingControl     (256 B) response ring
//! 4096          request data    (capacity, a power of two)
//! ...           response data   (capacity, a power of two)
//! ...           staging         (page aligned, staging_size bytes)
//! ```
//! Every offset and size is in the header (little-endian, the only byte order we run on),
//! so a later layout version can move things; a reader checks them all before use.

use std::mem::{align_of, size_of};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// Types that may be placed in, and viewed from, shared memory.
///
/// # Safety
/// Implementors are `#[repr(C)]` (or transparent), contain no pointers or references,
/// have no `Drop`, and are valid for every bit pattern (a peer may write anything):
/// plain integers and atomics only.
pub unsafe trait ShmSafe: Sized {}

// SAFETY: integers and atomics are valid for every bit pattern and hold no pointers.
unsafe impl ShmSafe for u32 {}
// SAFETY: as above.
unsafe impl ShmSafe for u64 {}
// SAFETY: as above; AtomicU32 has u32's layout.
unsafe impl ShmSafe for AtomicU32 {}
// SAFETY: as above; AtomicU64 has u64's layout.
unsafe impl ShmSafe for AtomicU64 {}

pub const MAGIC: [u8; 8] = *b"GPUPSHM1";
/// 2: a ring's producer may go back to the ring's start when it is empty (a skip marker,
/// `ring::REWIND`), which a consumer of version 1 would take for a corrupt frame length.
pub const LAYOUT_VERSION: u32 = 2;
/// Index of the request ring (client -> daemon) in `SegmentLayout::rings`.
pub const REQUEST: usize = 0;
/// Index of the response ring (daemon -> client).
pub const RESPONSE: usize = 1;
/// Index of the client's / the daemon's flag in `SegmentHeader::closed`.
pub const CLIENT: usize = 0;
pub const SERVER: usize = 1;

const PAGE: u64 = 4096;
pub const MIN_RING: u64 = 64;
pub const MAX_RING: u64 = 1 << 30;

/// Where one ring lives.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingLayout {
    /// Offset of its [`RingControl`].
    pub control_offset: u64,
    /// Offset of its data bytes.
    pub data_offset: u64,
    /// Data bytes; a power of two in `MIN_RING..=MAX_RING`.
    pub capacity: u64,
}

/// The immutable part of the header: written once by the creator, copied out (one
/// volatile read) and validated by the attacher, never re-read after that.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentLayout {
    pub magic: [u8; 8],
    pub version: u32,
    /// `size_of::<SegmentHeader>()` of the writer.
    pub header_size: u32,
    /// Total bytes; must equal the memfd's size.
    pub segment_size: u64,
    pub rings: [RingLayout; 2],
    pub staging_offset: u64,
    pub staging_size: u64,
    /// Process id of the creator (diagnostics only).
    pub creator_pid: u32,
    pub _reserved: u32,
}

/// Offset 0 of every segment.
#[repr(C, align(64))]
pub struct SegmentHeader {
    pub layout: SegmentLayout,
    /// Nonzero once that end ([`CLIENT`], [`SERVER`]) closed cleanly.
    pub closed: [AtomicU32; 2],
}

/// An atomic on a cache line of its own, so producer and consumer do not false-share.
#[repr(C, align(64))]
pub struct Line<T>(pub T);

/// Control block of one single-producer single-consumer ring. Positions are byte counts
/// since creation (they never wrap in practice: u64); the data index is `pos % capacity`.
#[repr(C, align(64))]
pub struct RingControl {
    /// Bytes published by the producer (written by the producer only, Release).
    pub tail: Line<AtomicU64>,
    /// Bytes consumed (written by the consumer only, Release).
    pub head: Line<AtomicU64>,
    /// Where the consumer sleeps while the ring is empty.
    pub data_wait: Line<WaitWords>,
    /// Where the producer sleeps while the ring is full.
    pub space_wait: Line<WaitWords>,
}

/// A futex word and the flag that says someone sleeps (or is about to) on it: the other
/// side makes the FUTEX_WAKE syscall only when the flag is set.
#[repr(C)]
pub struct WaitWords {
    /// The futex word; bumped by the waker before FUTEX_WAKE.
    pub seq: AtomicU32,
    /// Nonzero while the waiter is (about to be) asleep on `seq`.
    pub waiting: AtomicU32,
    /// The CPU the waiter was on when it last began yielding, plus one (0: not known; a peer
    /// of an earlier version never writes it). Lets the other side tell that both run on one
    /// core ([`super::WaitPolicy::leave_shared_core`]).
    pub yielding_on: AtomicU32,
}

// SAFETY: repr(C), integers/atomics/arrays of them only, valid for any bit pattern.
unsafe impl ShmSafe for SegmentHeader {}
// SAFETY: as above (Line<T> is repr(C) around atomics).
unsafe impl ShmSafe for RingControl {}
// SAFETY: repr(C), three atomics.
unsafe impl ShmSafe for WaitWords {}

const _: () = {
    assert!(size_of::<SegmentHeader>() == 128);
    assert!(size_of::<RingControl>() == 256);
    assert!(align_of::<RingControl>() == 64);
};

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl SegmentLayout {
    /// The layout for rings of `ring_capacity` bytes each and `staging_size` bytes of
    /// staging. The caller validates the result (sizes out of range fail there).
    pub fn new(ring_capacity: u64, staging_size: u64) -> Self {
        let hdr = size_of::<SegmentHeader>() as u64;
        let ctl = size_of::<RingControl>() as u64;
        let req_data = align_up(hdr + 2 * ctl, PAGE);
        let resp_data = align_up(req_data + ring_capacity, PAGE);
        let staging = align_up(resp_data + ring_capacity, PAGE);
        Self {
            magic: MAGIC,
            version: LAYOUT_VERSION,
            header_size: hdr as u32,
            segment_size: align_up(staging + staging_size, PAGE),
            rings: [
                RingLayout { control_offset: hdr, data_offset: req_data, capacity: ring_capacity },
                RingLayout { control_offset: hdr + ctl, data_offset: resp_data, capacity: ring_capacity },
            ],
            staging_offset: staging,
            staging_size,
            creator_pid: std::process::id(),
            _reserved: 0,
        }
    }

    /// Checks everything an attacher relies on, against the real size of the file.
    /// After this, every region lies inside the segment, is aligned for its type, and
    /// overlaps no other region.
    pub fn validate(&self, file_size: u64) -> Result<(), String> {
        if self.magic != MAGIC {
            return Err(format!("bad magic {:02x?} (want {:02x?})", self.magic, MAGIC));
        }
        if self.version != LAYOUT_VERSION {
            return Err(format!("layout version {} (this build speaks {LAYOUT_VERSION})", self.version));
        }
        if self.header_size as usize != size_of::<SegmentHeader>() {
            return Err(format!("header size {} (want {})", self.header_size, size_of::<SegmentHeader>()));
        }
        if self.segment_size != file_size {
            return Err(format!("header says {} bytes, the segment has {file_size}", self.segment_size));
        }
        let mut regions = vec![(0u64, size_of::<SegmentHeader>() as u64, "header")];
        for (i, r) in self.rings.iter().enumerate() {
            let name = ["request ring", "response ring"][i];
            if !r.capacity.is_power_of_two() || !(MIN_RING..=MAX_RING).contains(&r.capacity) {
                return Err(format!("{name}: capacity {} not a power of two in {MIN_RING}..={MAX_RING}", r.capacity));
            }
            if r.control_offset % align_of::<RingControl>() as u64 != 0 || r.data_offset % 8 != 0 {
                return Err(format!("{name}: misaligned offsets"));
            }
            regions.push((r.control_offset, size_of::<RingControl>() as u64, name));
            regions.push((r.data_offset, r.capacity, name));
        }
        regions.push((self.staging_offset, self.staging_size, "staging"));
        for &(off, len, name) in &regions {
            match off.checked_add(len) {
                Some(end) if end <= self.segment_size => {}
                _ => {
                    return Err(format!("{name} ({off}+{len}) outside the segment ({})", self.segment_size));
                }
            }
        }
        for (i, a) in regions.iter().enumerate() {
            for b in &regions[i + 1..] {
                let disjoint = a.1 == 0 || b.1 == 0 || a.0 + a.1 <= b.0 || b.0 + b.1 <= a.0;
                if !disjoint {
                    return Err(format!("{} and {} overlap", a.2, b.2));
                }
            }
        }
        Ok(())
    }
}
