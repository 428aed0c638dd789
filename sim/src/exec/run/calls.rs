//! Device-function call plumbing and the driver's own device functions (`vprintf`).

use super::{Block, Fault};
use crate::exec::ir::{Space, Ty};

impl Block<'_> {
    /// Copies `len` bytes within thread `t`'s local memory (call arguments).
    pub(super) fn local_copy(&mut self, t: usize, src: u64, dst: u64, len: u64) {
        let stride = self.local_len.next_multiple_of(8) as usize;
        let bytes: &mut [u8] = bytemuck_bytes(&mut self.local);
        let base = t * stride;
        let (s, d, l) = (base + src as usize, base + dst as usize, len as usize);
        if s + l <= bytes.len() && d + l <= bytes.len() {
            bytes.copy_within(s..s + l, d);
        }
    }

    /// The 64-bit word in thread `t`'s local slot `at` (a call argument).
    pub(super) fn local_word(&mut self, t: usize, at: Option<u64>) -> u64 {
        at.and_then(|a| self.load(Space::Local, Ty::U64, a, t).ok()).unwrap_or(0)
    }

    /// A NUL-terminated string at a generic address (at most 4 KiB, lossily decoded).
    pub(super) fn c_string(&mut self, t: usize, addr: u64) -> String {
        let mut out = Vec::new();
        while out.len() < 4096 {
            match self.load(Space::Generic, Ty::U8, addr + out.len() as u64, t) {
                Ok(0) | Err(_) => break,
                Ok(b) => out.push(b as u8),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Device `printf`: formats with the C library, one conversion at a time, reading
    /// each argument from the packed buffer at its natural alignment.
    pub(super) fn printf(&mut self, t: usize, fmt: u64, args: u64) -> Result<i32, Fault> {
        let format = self.c_string(t, fmt);
        let mut out = String::new();
        let mut off = 0u64;
        let mut chars = format.char_indices().peekable();
        while let Some((i, ch)) = chars.next() {
            if ch != '%' {
                out.push(ch);
                continue;
            }
            let mut end = i + 1;
            let mut conv = None;
            for (j, c) in chars.by_ref() {
                end = j + c.len_utf8();
                if "diouxXcsfFeEgGaAp%n".contains(c) {
                    conv = Some(c);
                    break;
                }
            }
            let Some(conv) = conv else { break };
            let spec = &format[i..end];
            if conv == '%' {
                out.push('%');
                continue;
            }
            let long = spec.contains('l') || spec.contains('z') || spec.contains('j') || spec.contains('t');
            let size = match conv {
                'f' | 'F' | 'e' | 'E' | 'g' | 'G' | 'a' | 'A' | 's' | 'p' => 8,
                _ if long => 8,
                _ => 4,
            };
            off = off.next_multiple_of(size);
            let raw = self.load(Space::Generic, if size == 8 { Ty::U64 } else { Ty::U32 }, args + off, t)?;
            off += size;
            out.push_str(&c_format(spec, conv, raw, |addr| self.c_string(t, addr)));
        }
        let n = out.len() as i32;
        match self.l.printf {
            Some((fifo, capacity)) => fifo.push(out, capacity),
            None => {
                use std::io::Write;
                let mut stdout = std::io::stdout().lock();
                let _ = stdout.write_all(out.as_bytes());
                let _ = stdout.flush();
            }
        }
        Ok(n)
    }
}

/// The bytes of a word buffer.
fn bytemuck_bytes(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: u8 has no alignment or validity requirements; the length covers exactly
    // the words' bytes, borrowed mutably for the same lifetime.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) }
}

/// One printf conversion, formatted by the C library so the output is exactly C's.
fn c_format(spec: &str, conv: char, raw: u64, mut string_at: impl FnMut(u64) -> String) -> String {
    let Ok(cspec) = std::ffi::CString::new(spec) else { return String::new() };
    let mut buf = vec![0u8; 512];
    let n = match conv {
        's' => {
            let s = std::ffi::CString::new(string_at(raw)).unwrap_or_default();
            // SAFETY: the spec holds exactly one conversion, of the type passed; the
            // buffer's length is passed, so snprintf never writes past it.
            unsafe { libc::snprintf(buf.as_mut_ptr().cast(), buf.len(), cspec.as_ptr(), s.as_ptr()) }
        }
        // SAFETY: as for %s, with a double.
        'f' | 'F' | 'e' | 'E' | 'g' | 'G' | 'a' | 'A' => unsafe {
            libc::snprintf(buf.as_mut_ptr().cast(), buf.len(), cspec.as_ptr(), f64::from_bits(raw))
        },
        // SAFETY: as above, with a 64-bit integer for long conversions and pointers.
        _ if spec.contains('l') || spec.contains('z') || spec.contains('j') || spec.contains('t') || conv == 'p' => unsafe {
            libc::snprintf(buf.as_mut_ptr().cast(), buf.len(), cspec.as_ptr(), raw)
        },
        // SAFETY: as above, with a 32-bit integer.
        _ => unsafe { libc::snprintf(buf.as_mut_ptr().cast(), buf.len(), cspec.as_ptr(), raw as u32) },
    };
    buf.truncate((n.max(0) as usize).min(buf.len() - 1));
    String::from_utf8_lossy(&buf).into_owned()
}
