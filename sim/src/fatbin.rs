//! Fatbin containers: finding the PTX inside what `nvcc -fatbin` and nvcc's host code
//! hand to `cuModuleLoadData` / `cuModuleLoadFatBinary`.
//!
//! Two layouts reach the driver:
//! - a raw container (`FATBIN_MAGIC`, what `nvcc -fatbin` writes and the
//!   `.nv_fatbin` section holds);
//! - the `__fatBinC_Wrapper_t` struct of nvcc's host code (`fatbinary_section.h`:
//!   `int magic; int version; const unsigned long long *data; void *filename_or_fatbins;`),
//!   whose `data` points at a raw container. Versions 1 and 2 (`-rdc`) both carry the
//!   translation unit's own container in `data`; the prelinked cubins a version 2
//!   wrapper lists in `filename_or_fatbins` are machine code, so they are not read.
//!
//! The container, all little-endian (the layout ZLUDA, `jiegec/fatbinary` and
//! `n-eiling/cuda-fatbin-decompression` agree on, checked against nvcc 13.5's output):
//!
//! ```text
//! header (16 bytes): u32 magic 0xBA55ED50, u16 version 1, u16 header size (16),
//!                    u64 size of everything after the header
//! entries, back to back until the declared size:
//!   0  u16 kind (1 = PTX, 2 = ELF cubin; others exist, e.g. 0x100 for `-concat`)
//!   2  u16 entry version (0x0101)
//!   4  u32 entry header size (64, 80 for PTX in CUDA 13, 112 for some cubins)
//!   8  u64 payload size as stored (padded to 8 bytes)
//!   16 u32 compressed size (0 when the payload is not compressed)
//!   20 u32 options offset          24 u16 minor, u16 major (PTX ISA / ELF version)
//!   28 u32 sm version (90 = sm_90)  32 u32, u32 object name offset and length
//!   40 u64 flags                   48 u64 reserved
//!   56 u64 uncompressed size (for compressed payloads)
//!   the payload starts at the entry + its header size; the next entry follows it.
//! ```
//!
//! Flags: 0x1 64-bit, 0x2 debug, 0x4/0x8 producer CUDA/OpenCL, 0x10/0x20/0x40 host
//! Linux/Mac/Windows, 0x2000 LZ4-compressed (a plain LZ4 *block*, no frame: what
//! `fatbinary -compress-mode=speed` writes), 0x8000 Zstandard-compressed (a standard
//! zstd frame: the CUDA 13 default for PTX, and every entry with `-compress-all` or
//! `-compress-mode=size|balance|default`).

pub use crate::module::{FATBIN_MAGIC, FATBIN_WRAPPER_MAGIC};
use std::fmt;

const HEADER_LEN: usize = 16;
/// The fields this parser reads end at byte 64 of an entry header.
const ENTRY_HEADER_MIN: usize = 64;
// Payloads and their compression are read by gpupool-abi, which the pool daemon shares.
use gpupool_abi::fatbin::PayloadError;
pub use gpupool_abi::fatbin::{FLAG_COMPRESSED_LZ4, FLAG_COMPRESSED_ZSTD, MAX_CONTAINER_BYTES};

pub const KIND_PTX: u16 = 1;
pub const KIND_ELF: u16 = 2;

/// Every flag bit whose meaning is known (see the module docs).
const KNOWN_FLAGS: u64 = 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20 | 0x40 | FLAG_COMPRESSED_LZ4 | FLAG_COMPRESSED_ZSTD;

/// One PTX text found in a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtxEntry {
    /// The virtual architecture the PTX was generated for (`90` for `compute_90`).
    pub sm_version: u32,
    /// The text, without its NUL terminator and padding.
    pub ptx: String,
}

/// Why a container yielded no PTX.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FatbinError {
    /// The image does not start with either magic number.
    BadMagic { found: u32 },
    /// A `__fatBinC_Wrapper_t` of a version this parser does not know.
    BadWrapperVersion { version: u32 },
    /// A `__fatBinC_Wrapper_t` whose `data` pointer is NULL.
    NullWrapperData,
    /// The container header's version or header size is not the known one.
    BadHeader { version: u16, header_size: u16 },
    /// The container declares more bytes than this parser accepts.
    TooLarge { declared: u64 },
    /// The bytes end before the container (or a header in it) does.
    Truncated { what: String, needed: u64, available: u64 },
    /// An entry's fields contradict each other or the container.
    Malformed { entry: usize, offset: usize, why: String },
    /// An entry is well-formed but stored in a way this parser cannot read
    /// (compression scheme or entry kind it does not know).
    Unsupported { entry: usize, offset: usize, why: String },
    /// A well-formed container with no PTX entry (e.g. only cubins).
    NoPtx { cubins: Vec<u32>, other_kinds: Vec<u16> },
}

impl FatbinError {
    /// The container is fine but stored in a way this parser cannot read
    /// (the driver answers `CUDA_ERROR_NOT_SUPPORTED`).
    pub fn is_unsupported(&self) -> bool {
        matches!(self, FatbinError::Unsupported { .. })
    }

    /// The container holds no PTX (the driver answers `CUDA_ERROR_NO_BINARY_FOR_GPU`).
    pub fn is_no_ptx(&self) -> bool {
        matches!(self, FatbinError::NoPtx { .. })
    }
}

impl fmt::Display for FatbinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FatbinError::BadMagic { found } => write!(
                f,
                "bad magic {found:#010x}: neither a fatbin container ({FATBIN_MAGIC:#010x}) nor a \
                 __fatBinC_Wrapper_t ({FATBIN_WRAPPER_MAGIC:#010x})"
            ),
            FatbinError::BadWrapperVersion { version } => {
                write!(f, "__fatBinC_Wrapper_t version {version} (known: 1, 2)")
            }
            FatbinError::NullWrapperData => write!(f, "__fatBinC_Wrapper_t with a NULL data pointer"),
            FatbinError::BadHeader { version, header_size } => write!(
                f,
                "fatbin header version {version}, header size {header_size} (known: version 1, header size >= 16)"
            ),
            FatbinError::TooLarge { declared } => {
                write!(f, "fatbin declares {declared} bytes, more than the {MAX_CONTAINER_BYTES} accepted")
            }
            FatbinError::Truncated { what, needed, available } => {
                write!(f, "truncated fatbin: {what} needs {needed} bytes, {available} available")
            }
            FatbinError::Malformed { entry, offset, why } => {
                write!(f, "malformed fatbin entry {entry} at offset {offset:#x}: {why}")
            }
            FatbinError::Unsupported { entry, offset, why } => {
                write!(f, "unsupported fatbin entry {entry} at offset {offset:#x}: {why}")
            }
            FatbinError::NoPtx { cubins, other_kinds } => {
                write!(f, "the fatbin holds no PTX (cubins for sm {cubins:?}")?;
                if !other_kinds.is_empty() {
                    write!(f, ", entries of kinds {other_kinds:?}")?;
                }
                write!(f, "); the simulator runs PTX only")
            }
        }
    }
}

impl std::error::Error for FatbinError {}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

/// The container's total length (header included) from its 16-byte header.
pub fn container_len(header: &[u8; HEADER_LEN]) -> Result<usize, FatbinError> {
    let magic = u32_at(header, 0);
    if magic != FATBIN_MAGIC {
        return Err(FatbinError::BadMagic { found: magic });
    }
    let version = u16_at(header, 4);
    let header_size = u16_at(header, 6);
    if version != 1 || (header_size as usize) < HEADER_LEN {
        return Err(FatbinError::BadHeader { version, header_size });
    }
    let total = (header_size as u64).saturating_add(u64_at(header, 8));
    if total > MAX_CONTAINER_BYTES {
        return Err(FatbinError::TooLarge { declared: total });
    }
    Ok(total as usize)
}

/// The raw container an image points at, as a slice of exactly its declared length:
/// follows a `__fatBinC_Wrapper_t` to its `data`, reads the 16-byte header, and reads
/// nothing else.
///
/// # Safety
/// `image` must point to a fatbin container or a `__fatBinC_Wrapper_t` (as
/// `cuModuleLoadData` requires), whose memory is readable for as many bytes as its
/// header declares and unchanged for `'a`. A wrapper's `data` must satisfy the same.
pub unsafe fn container<'a>(image: *const u8) -> Result<&'a [u8], FatbinError> {
    if image.is_null() {
        return Err(FatbinError::BadMagic { found: 0 });
    }
    // SAFETY: every image the contract admits starts with at least 4 readable bytes
    // (a container header is 16, a wrapper 16 or more); no alignment is assumed.
    let magic = unsafe { image.cast::<u32>().read_unaligned() };
    let mut data = image;
    if u32::from_le(magic) == FATBIN_WRAPPER_MAGIC {
        // SAFETY: a wrapper is `{ int magic; int version; const u64 *data; void *x; }`:
        // the version is at byte 4 and `data` at byte 8 (pointer alignment on every
        // 64-bit ABI CUDA supports), all within the struct the caller vouches for.
        let (version, ptr) =
            unsafe { (image.add(4).cast::<u32>().read_unaligned(), image.add(8).cast::<*const u8>().read_unaligned()) };
        let version = u32::from_le(version);
        if version != 1 && version != 2 {
            return Err(FatbinError::BadWrapperVersion { version });
        }
        if ptr.is_null() {
            return Err(FatbinError::NullWrapperData);
        }
        data = ptr;
    }
    let mut header = [0u8; HEADER_LEN];
    // SAFETY: `data` is a container (the caller's contract, directly or through the
    // wrapper), whose 16-byte header is readable; the magic check follows.
    unsafe { std::ptr::copy_nonoverlapping(data, header.as_mut_ptr(), HEADER_LEN) };
    let len = container_len(&header)?;
    // SAFETY: the caller vouches for `len` readable bytes (the length the header
    // declares, bounded by MAX_CONTAINER_BYTES so far below isize::MAX), unchanged
    // for 'a; u8 has no alignment or validity requirements.
    Ok(unsafe { std::slice::from_raw_parts(data, len) })
}

/// Every PTX entry of the container (or wrapper) at `image`, decompressed.
///
/// # Safety
/// As for [`container`].
pub unsafe fn ptx_entries(image: *const u8) -> Result<Vec<PtxEntry>, FatbinError> {
    // SAFETY: forwarded contract.
    parse(unsafe { container(image)? })
}

/// Every PTX entry of a raw container held in `bytes` (which may extend past the
/// container; only its declared length is read).
///
/// Entries that cannot be read because of an unknown compression scheme or kind are
/// skipped when another PTX entry can be read; if none can, the first such problem is
/// the error. A container without PTX at all is [`FatbinError::NoPtx`].
pub fn parse(bytes: &[u8]) -> Result<Vec<PtxEntry>, FatbinError> {
    let Some(header) = bytes.first_chunk::<HEADER_LEN>() else {
        return Err(FatbinError::Truncated {
            what: "the fatbin header".into(),
            needed: HEADER_LEN as u64,
            available: bytes.len() as u64,
        });
    };
    let total = container_len(header)?;
    if bytes.len() < total {
        return Err(FatbinError::Truncated {
            what: "the container".into(),
            needed: total as u64,
            available: bytes.len() as u64,
        });
    }
    let bytes = &bytes[..total];
    let mut at = u16_at(bytes, 6) as usize;
    let mut found = Vec::new();
    let mut unsupported = None;
    let mut cubins = Vec::new();
    let mut other_kinds = Vec::new();
    let mut index = 0;
    while at < total {
        let entry = &bytes[at..];
        let malformed = |why: String| FatbinError::Malformed { entry: index, offset: at, why };
        if entry.len() < ENTRY_HEADER_MIN {
            return Err(FatbinError::Truncated {
                what: format!("entry {index}'s header at offset {at:#x}"),
                needed: ENTRY_HEADER_MIN as u64,
                available: entry.len() as u64,
            });
        }
        let kind = u16_at(entry, 0);
        let header_size = u32_at(entry, 4) as usize;
        let stored = u64_at(entry, 8);
        if header_size < ENTRY_HEADER_MIN {
            return Err(malformed(format!("header size {header_size} < {ENTRY_HEADER_MIN}")));
        }
        if header_size > entry.len() || stored > (entry.len() - header_size) as u64 {
            return Err(FatbinError::Truncated {
                what: format!("entry {index} at offset {at:#x} (header {header_size} + payload {stored})"),
                needed: header_size as u64 + stored,
                available: entry.len() as u64,
            });
        }
        let payload = &entry[header_size..header_size + stored as usize];
        let sm_version = u32_at(entry, 28);
        match kind {
            KIND_PTX => match ptx_text(entry, payload) {
                Ok(ptx) => found.push(PtxEntry { sm_version, ptx }),
                Err(Problem::Malformed(why)) => return Err(malformed(why)),
                Err(Problem::Unsupported(why)) => {
                    unsupported.get_or_insert(FatbinError::Unsupported { entry: index, offset: at, why });
                }
            },
            KIND_ELF => cubins.push(sm_version),
            0x100 => {
                // `fatbinary -concat`: several entries' payloads compressed together,
                // with their headers in an extended header. No source documents it.
                unsupported.get_or_insert(FatbinError::Unsupported {
                    entry: index,
                    offset: at,
                    why: "kind 0x100 (concatenated entries, `fatbinary -concat`) is not supported; \
                          rebuild without -concat"
                        .into(),
                });
            }
            other => other_kinds.push(other),
        }
        // header_size >= 64, so every iteration advances.
        at += header_size + stored as usize;
        index += 1;
    }
    if !found.is_empty() {
        return Ok(found);
    }
    Err(unsupported.unwrap_or(FatbinError::NoPtx { cubins, other_kinds }))
}

enum Problem {
    Malformed(String),
    Unsupported(String),
}

/// The PTX text of one PTX entry: decompressed if need be, cut at its first NUL.
fn ptx_text(entry: &[u8], payload: &[u8]) -> Result<String, Problem> {
    let flags = u64_at(entry, 40);
    let raw = gpupool_abi::fatbin::payload(entry, payload).map_err(|e| match e {
        PayloadError::Malformed(why) => Problem::Malformed(why),
        PayloadError::Unsupported(why) => Problem::Unsupported(why),
    })?;
    let text: &[u8] = &raw;
    let text = match text.iter().position(|&b| b == 0) {
        Some(nul) => &text[..nul],
        None => text,
    };
    match std::str::from_utf8(text) {
        Ok(s) => Ok(s.to_owned()),
        Err(e) => {
            let unknown = flags & !KNOWN_FLAGS;
            if unknown != 0 {
                Err(Problem::Unsupported(format!(
                    "the PTX payload is not text and flags {flags:#x} have bits {unknown:#x} this parser \
                     does not know (likely a compression scheme it cannot read)"
                )))
            } else {
                Err(Problem::Malformed(format!("the PTX payload is not UTF-8 text ({e})")))
            }
        }
    }
}

/// The entry a device of compute capability `cc` (`major * 10 + minor`) would JIT: the
/// highest `sm_version` not above `cc` (the first of equals). `None` if every entry
/// targets a newer architecture.
pub fn best_ptx(entries: &[PtxEntry], cc: u32) -> Option<&PtxEntry> {
    let mut best: Option<&PtxEntry> = None;
    for e in entries.iter().filter(|e| e.sm_version <= cc) {
        if best.is_none_or(|b| e.sm_version > b.sm_version) {
            best = Some(e);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Built by hand: one entry with the layout nvcc 13.5 writes.
    struct Entry {
        kind: u16,
        header_size: u32,
        sm: u32,
        flags: u64,
        compressed_size: u32,
        uncompressed: u64,
        payload: Vec<u8>,
    }

    fn ptx_entry(sm: u32, text: &str) -> Entry {
        let mut payload = text.as_bytes().to_vec();
        payload.push(0);
        while !payload.len().is_multiple_of(8) {
            payload.push(0);
        }
        Entry { kind: KIND_PTX, header_size: 80, sm, flags: 0x11, compressed_size: 0, uncompressed: 0, payload }
    }

    fn cubin_entry(sm: u32) -> Entry {
        let mut payload = b"\x7fELF\x02\x01\x01".to_vec();
        payload.resize(64, 0xAB);
        Entry { kind: KIND_ELF, header_size: 64, sm, flags: 0x11, compressed_size: 0, uncompressed: 0, payload }
    }

    fn build(entries: &[Entry]) -> Vec<u8> {
        let mut body = Vec::new();
        for e in entries {
            let start = body.len();
            body.extend_from_slice(&e.kind.to_le_bytes());
            body.extend_from_slice(&0x0101u16.to_le_bytes());
            body.extend_from_slice(&e.header_size.to_le_bytes());
            body.extend_from_slice(&(e.payload.len() as u64).to_le_bytes());
            body.extend_from_slice(&e.compressed_size.to_le_bytes());
            body.extend_from_slice(&0u32.to_le_bytes()); // options offset
            body.extend_from_slice(&5u16.to_le_bytes()); // minor
            body.extend_from_slice(&9u16.to_le_bytes()); // major
            body.extend_from_slice(&e.sm.to_le_bytes());
            body.extend_from_slice(&[0u8; 8]); // object name
            body.extend_from_slice(&e.flags.to_le_bytes());
            body.extend_from_slice(&0u64.to_le_bytes());
            body.extend_from_slice(&e.uncompressed.to_le_bytes());
            body.resize(start + e.header_size as usize, 0);
            body.extend_from_slice(&e.payload);
        }
        let mut out = Vec::new();
        out.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&16u16.to_le_bytes());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    const PTX80: &str = ".version 8.0\n.target sm_80\n.address_size 64\n";
    const PTX90: &str = ".version 9.5\n.target sm_90\n.address_size 64\n";

    #[test]
    fn raw_container_with_several_entries() {
        let image = build(&[ptx_entry(80, PTX80), cubin_entry(90), ptx_entry(90, PTX90)]);
        let got = parse(&image).unwrap();
        assert_eq!(
            got,
            vec![PtxEntry { sm_version: 80, ptx: PTX80.into() }, PtxEntry { sm_version: 90, ptx: PTX90.into() }]
        );
        // SAFETY: `image` is a whole container, alive for the call.
        let via_ptr = unsafe { ptx_entries(image.as_ptr()) }.unwrap();
        assert_eq!(via_ptr, got);
        assert_eq!(best_ptx(&got, 90).unwrap().sm_version, 90);
        assert_eq!(best_ptx(&got, 89).unwrap().sm_version, 80);
        assert_eq!(best_ptx(&got, 120).unwrap().sm_version, 90);
        assert!(best_ptx(&got, 75).is_none());
    }

    #[test]
    fn trailing_bytes_after_the_container_are_not_read() {
        let mut image = build(&[ptx_entry(90, PTX90)]);
        let len = image.len();
        image.extend_from_slice(b"garbage that is not an entry header, long enough to be mistaken for one......");
        assert_eq!(parse(&image).unwrap().len(), 1);
        // SAFETY: `image` holds a whole container.
        assert_eq!(unsafe { container(image.as_ptr()) }.unwrap().len(), len);
    }

    #[test]
    fn ptx_is_cut_at_its_nul_padding() {
        let mut e = ptx_entry(90, PTX90);
        e.payload.extend_from_slice(&[0; 24]);
        let got = parse(&build(&[e])).unwrap();
        assert_eq!(got[0].ptx, PTX90);
        // And a payload without any NUL is taken whole.
        let e = Entry { payload: PTX90.as_bytes().to_vec(), ..ptx_entry(90, "") };
        assert_eq!(parse(&build(&[e])).unwrap()[0].ptx, PTX90);
    }

    #[repr(C)]
    struct Wrapper {
        magic: u32,
        version: u32,
        data: *const u8,
        filename_or_fatbins: *const u8,
    }

    #[test]
    fn fatbinc_wrapper_is_followed_to_its_container() {
        let image = build(&[cubin_entry(90), ptx_entry(90, PTX90)]);
        for version in [1, 2] {
            let w = Wrapper {
                magic: FATBIN_WRAPPER_MAGIC,
                version,
                data: image.as_ptr(),
                filename_or_fatbins: std::ptr::null(),
            };
            // SAFETY: `w` is a wrapper whose data is a whole container, both alive.
            let got = unsafe { ptx_entries((&raw const w).cast()) }.unwrap();
            assert_eq!(got, vec![PtxEntry { sm_version: 90, ptx: PTX90.into() }]);
        }
        let w = Wrapper {
            magic: FATBIN_WRAPPER_MAGIC,
            version: 3,
            data: image.as_ptr(),
            filename_or_fatbins: std::ptr::null(),
        };
        // SAFETY: as above.
        assert_eq!(unsafe { ptx_entries((&raw const w).cast()) }, Err(FatbinError::BadWrapperVersion { version: 3 }));
        let w = Wrapper {
            magic: FATBIN_WRAPPER_MAGIC,
            version: 1,
            data: std::ptr::null(),
            filename_or_fatbins: std::ptr::null(),
        };
        // SAFETY: a wrapper with a NULL data pointer is refused before any dereference.
        assert_eq!(unsafe { ptx_entries((&raw const w).cast()) }, Err(FatbinError::NullWrapperData));
        // A wrapper pointing at another wrapper is not a container.
        let inner = Wrapper {
            magic: FATBIN_WRAPPER_MAGIC,
            version: 1,
            data: image.as_ptr(),
            filename_or_fatbins: std::ptr::null(),
        };
        let outer = Wrapper {
            magic: FATBIN_WRAPPER_MAGIC,
            version: 1,
            data: (&raw const inner).cast(),
            filename_or_fatbins: std::ptr::null(),
        };
        // SAFETY: `outer.data` points at 24 readable bytes (16 are read).
        let err = unsafe { ptx_entries((&raw const outer).cast()) }.unwrap_err();
        assert!(matches!(err, FatbinError::BadMagic { found: FATBIN_WRAPPER_MAGIC }), "{err}");
    }

    #[test]
    fn cubin_only_container_has_no_ptx() {
        let err = parse(&build(&[cubin_entry(80), cubin_entry(90)])).unwrap_err();
        assert_eq!(err, FatbinError::NoPtx { cubins: vec![80, 90], other_kinds: vec![] });
        assert!(err.is_no_ptx());
        assert!(err.to_string().contains("no PTX"), "{err}");
        let err = parse(&build(&[])).unwrap_err();
        assert_eq!(err, FatbinError::NoPtx { cubins: vec![], other_kinds: vec![] });
    }

    #[test]
    fn bad_headers_are_named() {
        let mut image = build(&[ptx_entry(90, PTX90)]);
        assert!(matches!(parse(&image[..10]), Err(FatbinError::Truncated { .. })));
        image[0] ^= 1;
        assert!(matches!(parse(&image), Err(FatbinError::BadMagic { .. })));
        image[0] ^= 1;
        image[4] = 2;
        assert_eq!(parse(&image), Err(FatbinError::BadHeader { version: 2, header_size: 16 }));
        image[4] = 1;
        image[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(parse(&image), Err(FatbinError::TooLarge { .. })));
        // SAFETY: only the 16-byte header is read before the size is refused.
        assert!(matches!(unsafe { container(image.as_ptr()) }, Err(FatbinError::TooLarge { .. })));
    }

    #[test]
    fn malformed_entries_are_named() {
        let mut e = ptx_entry(90, PTX90);
        e.header_size = 32;
        let err = parse(&build(&[ptx_entry(80, PTX80), e])).unwrap_err();
        assert!(matches!(err, FatbinError::Malformed { entry: 1, .. }), "{err}");

        let mut bad_text = ptx_entry(90, "");
        bad_text.payload = vec![0xff, 0xfe, 0x80, 0x00];
        let err = parse(&build(&[bad_text])).unwrap_err();
        assert!(matches!(err, FatbinError::Malformed { entry: 0, .. }), "{err}");

        // Compressed, but the compressed size is larger than what is stored.
        let mut e = ptx_entry(90, PTX90);
        e.flags |= FLAG_COMPRESSED_ZSTD;
        e.compressed_size = 1000;
        e.uncompressed = 100;
        let err = parse(&build(&[e])).unwrap_err();
        assert!(err.to_string().contains("compressed size 1000"), "{err}");

        // Compressed without an uncompressed size.
        let mut e = ptx_entry(90, PTX90);
        e.flags |= FLAG_COMPRESSED_LZ4;
        let err = parse(&build(&[e])).unwrap_err();
        assert!(err.to_string().contains("no uncompressed size"), "{err}");

        // Garbage in a "zstd" payload.
        let mut e = ptx_entry(90, PTX90);
        e.flags |= FLAG_COMPRESSED_ZSTD;
        e.uncompressed = 64;
        let err = parse(&build(&[e])).unwrap_err();
        assert!(matches!(err, FatbinError::Malformed { .. }) && err.to_string().contains("Zstandard"), "{err}");
    }

    #[test]
    fn hand_built_lz4_block_decompresses() {
        // LZ4 block: token 0x13 (1 literal, match of 3+4), literal 'a', offset 1 (so
        // eight 'a's), then the last sequence: token 0x60 and six literals.
        let block = [0x13, b'a', 0x01, 0x00, 0x60, b'b', b'c', b'd', b'e', b'f', 0];
        let e = Entry {
            kind: KIND_PTX,
            header_size: 64,
            sm: 90,
            flags: 0x11 | FLAG_COMPRESSED_LZ4,
            compressed_size: block.len() as u32,
            uncompressed: 15,
            payload: [&block[..], &[0u8; 5]].concat(),
        };
        assert_eq!(parse(&build(&[e])).unwrap()[0].ptx, "aaaaaaaabcdef");
        // A declared size too small for the data is an error, not an overrun.
        let e = Entry {
            kind: KIND_PTX,
            header_size: 64,
            sm: 90,
            flags: 0x11 | FLAG_COMPRESSED_LZ4,
            compressed_size: block.len() as u32,
            uncompressed: 4,
            payload: block.to_vec(),
        };
        assert!(matches!(parse(&build(&[e])), Err(FatbinError::Malformed { .. })));
        // A declared size no LZ4 block of this length can reach is refused before
        // anything is allocated.
        let e = Entry {
            kind: KIND_PTX,
            header_size: 64,
            sm: 90,
            flags: 0x11 | FLAG_COMPRESSED_LZ4,
            compressed_size: block.len() as u32,
            uncompressed: 1 << 29,
            payload: block.to_vec(),
        };
        assert!(parse(&build(&[e])).unwrap_err().to_string().contains("cannot expand"));
    }

    #[test]
    fn unsupported_storage_is_not_malformed() {
        // Both compression flags at once.
        let mut e = ptx_entry(90, PTX90);
        e.flags |= FLAG_COMPRESSED_LZ4 | FLAG_COMPRESSED_ZSTD;
        e.uncompressed = 100;
        let err = parse(&build(&[cubin_entry(90), e])).unwrap_err();
        assert!(err.is_unsupported(), "{err}");
        assert!(matches!(err, FatbinError::Unsupported { entry: 1, .. }));
        // Unknown flag bits on a payload that is not text.
        let mut e = ptx_entry(90, "");
        e.flags |= 0x4000;
        e.payload = vec![0x91, 0x92, 0x93, 0x94, 0, 0, 0, 0];
        let err = parse(&build(&[e])).unwrap_err();
        assert!(err.is_unsupported() && err.to_string().contains("0x4000"), "{err}");
        // Unknown flag bits on a payload that is text: accepted.
        let mut e = ptx_entry(90, PTX90);
        e.flags |= 0x4000;
        assert_eq!(parse(&build(&[e])).unwrap()[0].ptx, PTX90);
        // A `-concat` entry alone.
        let mut e = ptx_entry(0, PTX90);
        e.kind = 0x100;
        let err = parse(&build(&[cubin_entry(90), e])).unwrap_err();
        assert!(err.is_unsupported() && err.to_string().contains("-concat"), "{err}");
        // ...but a readable PTX entry beside an unreadable one wins.
        let mut bad = ptx_entry(90, PTX90);
        bad.flags |= FLAG_COMPRESSED_LZ4 | FLAG_COMPRESSED_ZSTD;
        bad.uncompressed = 100;
        let got = parse(&build(&[bad, ptx_entry(80, PTX80)])).unwrap();
        assert_eq!(got, vec![PtxEntry { sm_version: 80, ptx: PTX80.into() }]);
    }

    #[test]
    fn unknown_kinds_are_reported_with_no_ptx() {
        let mut e = ptx_entry(90, PTX90);
        e.kind = 0x40;
        assert_eq!(
            parse(&build(&[cubin_entry(90), e])),
            Err(FatbinError::NoPtx { cubins: vec![90], other_kinds: vec![0x40] })
        );
    }

    /// xorshift64*: deterministic test randomness without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn real_fixtures() -> [&'static [u8]; 3] {
        [FIXTURE_PLAIN, FIXTURE_LZ4, FIXTURE_ZSTD]
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let mut images = vec![build(&[ptx_entry(80, PTX80), cubin_entry(90), ptx_entry(90, PTX90)])];
        images.extend(real_fixtures().iter().map(|f| f.to_vec()));
        for image in &images {
            assert!(parse(image).is_ok());
            for n in 0..image.len() {
                assert!(parse(&image[..n]).is_err(), "a {n}-byte prefix of {} parsed", image.len());
            }
        }
    }

    #[test]
    fn random_bytes_and_mutations_never_panic() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        // Random bytes behind a valid header prefix, so parsing gets past the magic.
        for _ in 0..3000 {
            let len = rng.below(400);
            let mut image: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            if len >= 16 && rng.below(4) != 0 {
                image[..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
                image[4..8].copy_from_slice(&[1, 0, 16, 0]);
                let size = if rng.below(2) == 0 { (len - 16) as u64 } else { rng.next() % 1024 };
                image[8..16].copy_from_slice(&size.to_le_bytes());
            }
            let _ = parse(&image);
        }
        // Byte flips in valid containers, hand-built and real (compressed ones reach the
        // LZ4 and zstd decoders with corrupt streams).
        let mut images = vec![build(&[ptx_entry(80, PTX80), cubin_entry(90), ptx_entry(90, PTX90)])];
        images.extend(real_fixtures().iter().map(|f| f.to_vec()));
        for image in &images {
            for _ in 0..1500 {
                let mut m = image.clone();
                for _ in 0..1 + rng.below(4) {
                    let i = rng.below(m.len());
                    m[i] = match rng.below(3) {
                        0 => rng.next() as u8,
                        1 => m[i] ^ (1 << rng.below(8)),
                        _ => 0xff,
                    };
                }
                let _ = parse(&m);
            }
        }
    }

    // Real containers from nvcc 13.5 (see tests/fixtures/README.md): one PTX
    // (compute_90) and one sm_90 cubin each, the PTX stored plainly, LZ4- and
    // zstd-compressed.
    const FIXTURE_PLAIN: &[u8] = include_bytes!("../tests/fixtures/add_one.plain.fatbin");
    const FIXTURE_LZ4: &[u8] = include_bytes!("../tests/fixtures/add_one.lz4.fatbin");
    const FIXTURE_ZSTD: &[u8] = include_bytes!("../tests/fixtures/add_one.zstd.fatbin");

    #[test]
    fn real_nvcc_fatbins_yield_their_ptx() {
        let mut texts = Vec::new();
        for (name, image) in [("plain", FIXTURE_PLAIN), ("lz4", FIXTURE_LZ4), ("zstd", FIXTURE_ZSTD)] {
            let got = parse(image).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(got.len(), 1, "{name}");
            assert_eq!(got[0].sm_version, 90, "{name}");
            let ptx = &got[0].ptx;
            assert!(ptx.contains(".target sm_90"), "{name}: {ptx}");
            assert!(ptx.contains(".visible .entry add_one("), "{name}: {ptx}");
            assert!(ptx.trim_end().ends_with('}'), "{name}: {ptx}");
            texts.push(ptx.clone());
            // The PTX parses as the simulator's own front end sees it.
            let module = crate::ptx::parse(ptx).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!(module.target_sm, 90, "{name}");
        }
        assert!(texts.windows(2).all(|w| w[0] == w[1]), "the three encodings hold the same PTX");
    }

    #[test]
    fn real_fatbin_through_a_wrapper() {
        // An 8-aligned copy, as the .nv_fatbin section is.
        let words: Vec<u64> =
            FIXTURE_ZSTD.chunks(8).map(|c| c.iter().rev().fold(0u64, |a, &b| (a << 8) | b as u64)).collect();
        let w = Wrapper {
            magic: FATBIN_WRAPPER_MAGIC,
            version: 1,
            data: words.as_ptr().cast(),
            filename_or_fatbins: std::ptr::null(),
        };
        // SAFETY: `w.data` holds the whole container (its length is a multiple of 8).
        let got = unsafe { ptx_entries((&raw const w).cast()) }.unwrap();
        assert_eq!(got, parse(FIXTURE_ZSTD).unwrap());
    }

    /// Through the driver's exported entry points, in process: `cuModuleLoadData` and
    /// `cuModuleLoadFatBinary` load a fatbin's PTX and map each failure to its code.
    #[test]
    fn module_load_takes_fatbins() {
        use crate::api::context::{cuCtxSetCurrent, cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRetain};
        use crate::api::init::cuInit;
        use crate::api::module::{cuModuleGetFunction, cuModuleLoadData, cuModuleLoadFatBinary, cuModuleUnload};
        use gpupool_shim::cuda::{CUcontext, CUfunction, CUmodule, CUresult};

        // SAFETY (this whole test): every pointer passed is to a live local or to a
        // whole container (fixture or hand-built) or wrapper, as the API requires.
        unsafe {
            assert_eq!(cuInit(0), CUresult::CUDA_SUCCESS);
            let mut ctx: CUcontext = std::ptr::null_mut();
            assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx, 0), CUresult::CUDA_SUCCESS);
            assert_eq!(cuCtxSetCurrent(ctx), CUresult::CUDA_SUCCESS);

            let load = |image: *const u8| {
                let mut m: CUmodule = std::ptr::null_mut();
                let r = cuModuleLoadData(&mut m, image.cast());
                (r, m)
            };
            for image in real_fixtures() {
                let (r, m) = load(image.as_ptr());
                assert_eq!(r, CUresult::CUDA_SUCCESS);
                let mut f: CUfunction = std::ptr::null_mut();
                assert_eq!(cuModuleGetFunction(&mut f, m, c"add_one".as_ptr()), CUresult::CUDA_SUCCESS);
                assert!(!f.is_null());
                assert_eq!(cuModuleUnload(m), CUresult::CUDA_SUCCESS);
            }

            // Through a wrapper, with cuModuleLoadFatBinary.
            let w = Wrapper {
                magic: FATBIN_WRAPPER_MAGIC,
                version: 1,
                data: FIXTURE_PLAIN.as_ptr(),
                filename_or_fatbins: std::ptr::null(),
            };
            let mut m: CUmodule = std::ptr::null_mut();
            assert_eq!(cuModuleLoadFatBinary(&mut m, (&raw const w).cast()), CUresult::CUDA_SUCCESS);
            assert_eq!(cuModuleUnload(m), CUresult::CUDA_SUCCESS);

            // Only cubins, or only PTX for a newer device: no binary for this GPU.
            assert_eq!(load(build(&[cubin_entry(90)]).as_ptr()).0, CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU);
            let newer = ".version 9.5\n.target sm_100\n.address_size 64\n";
            assert_eq!(load(build(&[ptx_entry(100, newer)]).as_ptr()).0, CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU);
            // The best entry for an sm_90 device is picked from several.
            let image = build(&[ptx_entry(100, newer), ptx_entry(80, PTX80), cubin_entry(90)]);
            let (r, m) = load(image.as_ptr());
            assert_eq!(r, CUresult::CUDA_SUCCESS);
            assert_eq!(cuModuleUnload(m), CUresult::CUDA_SUCCESS);
            // Unreadable storage: not supported.
            let mut concat = ptx_entry(0, PTX90);
            concat.kind = 0x100;
            assert_eq!(load(build(&[concat]).as_ptr()).0, CUresult::CUDA_ERROR_NOT_SUPPORTED);
            // Malformed: an invalid image.
            let mut image = build(&[ptx_entry(90, PTX90)]);
            image[16 + 4] = 8; // entry header size 8
            assert_eq!(load(image.as_ptr()).0, CUresult::CUDA_ERROR_INVALID_IMAGE);

            assert_eq!(cuDevicePrimaryCtxRelease_v2(0), CUresult::CUDA_SUCCESS);
        }
    }
}
