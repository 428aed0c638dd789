//! A fat binary entry's payload as stored: plain, or compressed with LZ4 (flag 0x2000) or
//! Zstandard (flag 0x8000), as nvcc writes it by default since CUDA 12.4 (`-compress-mode`). The
//! simulator reads PTX entries through [`payload`] (sim/src/fatbin.rs has the container's layout);
//! the daemon asks [`names`] whether any entry of an image mentions a symbol (`vprintf`).

use std::borrow::Cow;

/// The first word of a raw container.
pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
pub const FLAG_COMPRESSED_LZ4: u64 = 0x2000;
pub const FLAG_COMPRESSED_ZSTD: u64 = 0x8000;
/// A sanity bound on one container and on one decompressed payload: a garbage size field is
/// refused instead of being trusted for a slice or an allocation.
pub const MAX_CONTAINER_BYTES: u64 = 1 << 30;
/// LZ4 cannot expand data by more than this factor (one 255-extension byte per 255 bytes of
/// match), so a larger declared uncompressed size is garbage.
const LZ4_MAX_RATIO: u64 = 255;
/// The fields read here end at byte 64 of an entry header.
const ENTRY_HEADER_MIN: usize = 64;

/// Why an entry's payload cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadError {
    /// Its fields contradict each other, or the compressed data is corrupt.
    Malformed(String),
    /// Stored in a way this code does not know.
    Unsupported(String),
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).map_or(0, |s| u64::from_le_bytes(s.try_into().unwrap_or([0; 8])))
}

/// The payload of the entry whose header starts `entry` (at least 64 bytes), `stored` being its
/// bytes as stored: decompressed when its flags (byte 40) say so, to the size at byte 56.
pub fn payload<'a>(entry: &[u8], stored: &'a [u8]) -> Result<Cow<'a, [u8]>, PayloadError> {
    let flags = u64_at(entry, 40);
    let compression = flags & (FLAG_COMPRESSED_LZ4 | FLAG_COMPRESSED_ZSTD);
    if compression == 0 {
        return Ok(Cow::Borrowed(stored));
    }
    let compressed_size = u32_at(entry, 16) as usize;
    if compressed_size > stored.len() {
        return Err(PayloadError::Malformed(format!(
            "compressed size {compressed_size} exceeds the stored payload ({} bytes)",
            stored.len()
        )));
    }
    // 0 would mean "not compressed" elsewhere; with a compression flag, take the whole stored
    // payload (both decoders stop at the end of their stream).
    let input = if compressed_size == 0 { stored } else { &stored[..compressed_size] };
    let declared = u64_at(entry, 56);
    if declared == 0 {
        return Err(PayloadError::Malformed(format!("compressed (flags {flags:#x}) but no uncompressed size")));
    }
    if declared > MAX_CONTAINER_BYTES {
        return Err(PayloadError::Malformed(format!(
            "uncompressed size {declared} is more than the {MAX_CONTAINER_BYTES} accepted"
        )));
    }
    match compression {
        FLAG_COMPRESSED_LZ4 => lz4(input, declared).map(Cow::Owned),
        FLAG_COMPRESSED_ZSTD => zstd(input, declared).map(Cow::Owned),
        _ => Err(PayloadError::Unsupported(format!(
            "flags {flags:#x} claim both LZ4 (0x2000) and Zstandard (0x8000) compression"
        ))),
    }
}

fn lz4(input: &[u8], declared: u64) -> Result<Vec<u8>, PayloadError> {
    if declared > (input.len() as u64).saturating_mul(LZ4_MAX_RATIO).saturating_add(16) {
        return Err(PayloadError::Malformed(format!(
            "LZ4 payload of {} bytes cannot expand to the declared {declared}",
            input.len()
        )));
    }
    let mut out = vec![0u8; declared as usize];
    match lz4_flex::block::decompress_into(input, &mut out) {
        Ok(n) => {
            out.truncate(n);
            Ok(out)
        }
        Err(e) => Err(PayloadError::Malformed(format!("LZ4 (flag 0x2000) decompression failed: {e}"))),
    }
}

fn zstd(input: &[u8], declared: u64) -> Result<Vec<u8>, PayloadError> {
    use std::io::Read;
    let decoder = match ruzstd::decoding::StreamingDecoder::new(input) {
        Ok(d) => d,
        Err(e) => return Err(PayloadError::Malformed(format!("Zstandard (flag 0x8000) frame header rejected: {e}"))),
    };
    // One byte more than declared, to tell "too long" from "exactly right"; the output grows
    // only as the decoder produces it.
    let mut out = Vec::new();
    if let Err(e) = decoder.take(declared + 1).read_to_end(&mut out) {
        return Err(PayloadError::Malformed(format!("Zstandard (flag 0x8000) decompression failed: {e}")));
    }
    if out.len() as u64 > declared {
        return Err(PayloadError::Malformed(format!(
            "Zstandard payload decompresses to more than the declared {declared} bytes"
        )));
    }
    Ok(out)
}

/// Whether `image` (PTX text, a cubin, or a raw fat binary container) mentions `symbol` in any
/// entry, compressed entries decompressed: `None` when a container's entries cannot all be read.
pub fn names(image: &[u8], symbol: &[u8]) -> Option<bool> {
    let mentions = |b: &[u8]| !symbol.is_empty() && b.windows(symbol.len()).any(|w| w == symbol);
    if u32_at(image, 0) != FATBIN_MAGIC || image.len() < 16 {
        return Some(mentions(image));
    }
    let header = u32::from(u16::from_le_bytes([image[6], image[7]])) as u64;
    let total = header.checked_add(u64_at(image, 8))?;
    if total > image.len() as u64 || total > MAX_CONTAINER_BYTES {
        return None;
    }
    let bytes = &image[..total as usize];
    let mut at = header as usize;
    let mut found = false;
    while at < bytes.len() {
        let entry = &bytes[at..];
        let header_size = u32_at(entry, 4) as usize;
        let stored = u64_at(entry, 8);
        if entry.len() < ENTRY_HEADER_MIN || header_size < ENTRY_HEADER_MIN || header_size > entry.len() {
            return None;
        }
        let stored = usize::try_from(stored).ok().filter(|&s| s <= entry.len() - header_size)?;
        found |= mentions(&payload(entry, &entry[header_size..header_size + stored]).ok()?);
        at += header_size + stored;
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A container of one entry holding `payload` with `flags` (and the sizes they need).
    fn container(stored: &[u8], flags: u64, uncompressed: u64) -> Vec<u8> {
        let mut entry = vec![0u8; 64];
        entry[0..2].copy_from_slice(&1u16.to_le_bytes());
        entry[4..8].copy_from_slice(&64u32.to_le_bytes());
        entry[8..16].copy_from_slice(&(stored.len() as u64).to_le_bytes());
        if flags & (FLAG_COMPRESSED_LZ4 | FLAG_COMPRESSED_ZSTD) != 0 {
            entry[16..20].copy_from_slice(&(stored.len() as u32).to_le_bytes());
        }
        entry[40..48].copy_from_slice(&flags.to_le_bytes());
        entry[56..64].copy_from_slice(&uncompressed.to_le_bytes());
        entry.extend_from_slice(stored);
        let mut c = Vec::new();
        c.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
        c.extend_from_slice(&1u16.to_le_bytes());
        c.extend_from_slice(&16u16.to_le_bytes());
        c.extend_from_slice(&(entry.len() as u64).to_le_bytes());
        c.extend_from_slice(&entry);
        c
    }

    #[test]
    fn a_symbol_is_found_in_plain_and_compressed_entries_and_not_where_absent() {
        let with = b".extern .func (.param .b32 r) vprintf (.param .b64 a, .param .b64 b);\n".repeat(4);
        let without = b".visible .entry k() { ret; }\n".repeat(4);
        assert_eq!(names(&with, b"vprintf"), Some(true));
        assert_eq!(names(&container(&without, 0x11, 0), b"vprintf"), Some(false));
        assert_eq!(names(&container(&with, 0x11, 0), b"vprintf"), Some(true));
        let lz4 = lz4_flex::block::compress(&with);
        assert_eq!(names(&container(&lz4, 0x11 | FLAG_COMPRESSED_LZ4, with.len() as u64), b"vprintf"), Some(true));
        let lz4 = lz4_flex::block::compress(&without);
        assert_eq!(names(&container(&lz4, 0x11 | FLAG_COMPRESSED_LZ4, without.len() as u64), b"vprintf"), Some(false));
        let zstd = |t: &[u8]| ruzstd::encoding::compress_to_vec(t, ruzstd::encoding::CompressionLevel::Fastest);
        let fat = container(&zstd(&with), 0x11 | FLAG_COMPRESSED_ZSTD, with.len() as u64);
        assert_eq!(names(&fat, b"vprintf"), Some(true));
        let fat = container(&zstd(&without), 0x11 | FLAG_COMPRESSED_ZSTD, without.len() as u64);
        assert_eq!(names(&fat, b"vprintf"), Some(false));
    }

    #[test]
    fn an_unreadable_container_is_none() {
        let mut fat = container(b"garbage that is not lz4 at all", 0x11 | FLAG_COMPRESSED_LZ4, 1000);
        assert_eq!(names(&fat, b"vprintf"), None);
        fat.truncate(40);
        assert_eq!(names(&fat, b"vprintf"), None);
    }
}
