//! The `extern "C"` edge of the simulator: every exported CUDA driver and NVML
//! symbol, split by API family. Functions here convert raw arguments into checked
//! values (a null out-pointer is `CUDA_ERROR_INVALID_VALUE` before any logic runs),
//! call the safe core, and map the result, and any panic, to the vendor's code.
//!
//! The exports' safety contracts are NVIDIA's documented ones (CUDA Driver API and
//! NVML references), so they carry no `# Safety` sections of their own, and their
//! argument counts are the vendor's.
#![allow(clippy::missing_safety_doc, clippy::too_many_arguments)]

pub mod array;
pub mod context;
pub mod copy;
pub mod device;
pub mod event;
pub mod features;
pub mod graph;
pub mod graph_node;
pub mod host_job;
pub mod init;
pub mod ipc;
pub mod launch;
pub mod memory;
pub mod mempool;
pub mod module;
pub mod nvml;
pub mod nvml_links;
pub mod preempt;
pub mod proc_address;
pub mod stream;
pub mod texture;
pub mod vmm;

use crate::context::{self as ctxmod, Context};
use crate::driver::Driver;
use crate::error::{CuResult, fail};
use crate::stream::Stream;
use gpupool_shim::cuda::{CUresult, CUstream};
use std::sync::Arc;

/// Which stream the NULL handle means for the calling variant: the plain export
/// uses the legacy default stream, the `_ptds` / `_ptsz` export the per-thread one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultStream {
    Legacy,
    PerThread,
}

/// Writes `value` through an out-pointer supplied by the application.
pub(crate) fn out<T>(ptr: *mut T, value: T) -> CuResult<()> {
    if ptr.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null output pointer".into());
    }
    // SAFETY: non-null; the CUDA contract makes the caller responsible for it
    // pointing to a writable `T`.
    unsafe { ptr.write_unaligned(value) };
    Ok(())
}

/// Reads an input struct supplied by the application.
pub(crate) fn read<T: Copy>(ptr: *const T, what: &str) -> CuResult<T> {
    if ptr.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("null {what}"));
    }
    // SAFETY: non-null; the caller guarantees it points to a readable `T`.
    Ok(unsafe { ptr.read_unaligned() })
}

/// A NUL-terminated string argument.
pub(crate) fn c_str<'a>(ptr: *const std::os::raw::c_char, what: &str) -> CuResult<&'a str> {
    if ptr.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("null {what}"));
    }
    // SAFETY: non-null and, per the CUDA contract, NUL-terminated.
    let s = unsafe { std::ffi::CStr::from_ptr(ptr) };
    match s.to_str() {
        Ok(s) => Ok(s),
        Err(_) => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{what} is not UTF-8")),
    }
}

/// Copies `text` into a caller's buffer of `len` bytes, NUL-terminated and truncated
/// to fit, as `cuDeviceGetName` does.
pub(crate) fn write_c_string(buf: *mut std::os::raw::c_char, len: usize, text: &str) -> CuResult<()> {
    if buf.is_null() || len == 0 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null or empty string buffer".into());
    }
    let n = text.len().min(len - 1);
    // SAFETY: the caller provides `len` writable bytes at `buf`; we write n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    Ok(())
}

const LEGACY_HANDLE: u64 = 0x1;
const PER_THREAD_HANDLE: u64 = 0x2;

/// As [`resolve_stream_quiet`], for a call that uses the stream (queues work on it, waits for it
/// or asks it): the legacy stream is refused while a blocking stream of its context captures
/// (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, which invalidates that capture), since its implicit
/// synchronization would make it depend on the capture. Synchronous calls use it too.
pub fn resolve_stream(
    driver: &Driver,
    handle: CUstream,
    default: DefaultStream,
) -> CuResult<(Arc<Context>, Arc<Stream>)> {
    let (ctx, s) = resolve_stream_quiet(driver, handle, default)?;
    if s.kind == crate::stream::StreamKind::Legacy {
        ctx.refuse_legacy_during_capture()?;
    }
    Ok((ctx, s))
}

/// Resolves a stream argument to the stream and the context whose work it carries (for calls
/// that only read what the stream is, or begin and end captures, which check it themselves).
pub fn resolve_stream_quiet(
    driver: &Driver,
    handle: CUstream,
    default: DefaultStream,
) -> CuResult<(Arc<Context>, Arc<Stream>)> {
    let h = handle as u64;
    let special = match h {
        0 => Some(default),
        LEGACY_HANDLE => Some(DefaultStream::Legacy),
        PER_THREAD_HANDLE => Some(DefaultStream::PerThread),
        _ => None,
    };
    if let Some(kind) = special {
        let ctx = ctxmod::current()?;
        let s = match kind {
            DefaultStream::Legacy => ctx.legacy_stream(),
            DefaultStream::PerThread => ctx.per_thread_stream(),
        };
        return Ok((ctx, s));
    }
    crate::driver::initialized()?;
    let Some(s) = driver.streams.get(h) else {
        return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{h:#x} is not a live stream"));
    };
    match s.context() {
        Some(ctx) if !ctx.is_destroyed() => Ok((ctx, s)),
        _ => fail(CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED, || "the stream's context was destroyed".into()),
    }
}

/// Defines the plain export and its per-thread-default-stream twin (`_ptds`/`_ptsz`)
/// from one implementation that takes the meaning of the NULL stream last.
macro_rules! stream_variants {
    ($($legacy:ident / $ptds:ident => $imp:ident ( $($arg:ident : $ty:ty),* $(,)? );)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $legacy($($arg: $ty),*) -> gpupool_shim::cuda::CUresult {
            crate::error::cuda_entry(|| $imp($($arg,)* crate::api::DefaultStream::Legacy))
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $ptds($($arg: $ty),*) -> gpupool_shim::cuda::CUresult {
            crate::error::cuda_entry(|| $imp($($arg,)* crate::api::DefaultStream::PerThread))
        }
    )*};
}
pub(crate) use stream_variants;
