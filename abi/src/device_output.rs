//! Device `printf` text written the way NVIDIA's driver writes it: through the C library's
//! `stdout`, flushed, so it keeps its order with the program's own `printf` output in that
//! buffer. The simulator writes its contexts' buffers this way, and `libgpupool.so` what the
//! daemon sends it.

// SAFETY: glibc defines `stdout` as a `FILE *` variable; it is only read here.
unsafe extern "C" {
    static stdout: *mut libc::FILE;
}

/// Writes `pieces` in order to the C library's `stdout`, then flushes it.
pub fn write_to_stdout<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) {
    for p in pieces {
        // SAFETY: `p` is a live buffer of `p.len()` bytes; `stdout` is the C library's stream.
        unsafe { libc::fwrite(p.as_ptr().cast(), 1, p.len(), stdout) };
    }
    // SAFETY: as above.
    unsafe { libc::fflush(stdout) };
}
