//! Helpers for implementations: results, logging, checked out-pointers and host buffers
//! (the boundary itself, panic guard and argument roles, is [`crate::api::export`]).

use gpupool_shim::cuda::CUresult;
use std::os::raw::c_char;

pub type R<T> = Result<T, CUresult>;

/// One line on stderr, always: for what the user must see (a session refused, a link lost).
pub fn warn(msg: &str) {
    eprintln!("libgpupool: {msg}");
}

/// One line on stderr when `GPUPOOL_LOG` is set.
pub fn log(msg: &str) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("GPUPOOL_LOG").is_some_and(|v| !v.is_empty() && v != "0")) {
        eprintln!("libgpupool: {msg}");
    }
}

/// Writes through an application out-pointer; NULL is CUDA_ERROR_INVALID_VALUE.
pub fn out<T>(ptr: *mut T, value: T) -> R<()> {
    crate::api::export::require(ptr)?;
    crate::api::export::put(ptr, value);
    Ok(())
}

/// Copies `text` into a caller's buffer of `len` bytes, NUL-terminated and truncated.
pub fn write_c_string(buf: *mut c_char, len: usize, text: &str) -> R<()> {
    if buf.is_null() || len == 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let n = text.len().min(len - 1);
    // SAFETY: the caller provides `len` writable bytes at `buf`; we write n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    Ok(())
}

/// Views `n` bytes of application memory at `p` (NULL with n > 0 is INVALID_VALUE).
pub fn host_bytes<'a>(p: *const std::os::raw::c_void, n: usize) -> R<&'a [u8]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: per the CUDA contract the caller's buffer holds `n` readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) })
}

/// Views `n` writable bytes of application memory at `p`.
pub fn host_bytes_mut<'a>(p: *mut std::os::raw::c_void, n: usize) -> R<&'a mut [u8]> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: per the CUDA contract the caller's buffer holds `n` writable bytes that
    // nothing else accesses during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), n) })
}

/// A map by handle on a call's path (every launch looks up its function, stream and context):
/// foldhash, several times faster than std's SipHash for integer keys, which were a twelfth of
/// a forwarded launch's client time (benches/README.md, "Issue 24"). The keys are handles and
/// addresses, not input chosen to collide, and the hasher is seeded per process all the same.
pub type HandleMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
