//! The CUDA runtime API (`cuda*`, what `libcudart.so.12` / `.13` export), served in
//! forwarding mode by this library itself (the default; `gpupool run --cudart nvidia` lets
//! NVIDIA's cudart run over our driver API instead, through the export tables of
//! [`crate::api::export_tables`]): a program that links cudart dynamically finds these
//! exports (preloading wins symbol
//! resolution; `gpupool run` also puts `libcudart.so.12` / `.13` stand-ins on the library
//! path, and a `dlopen` of `libcudart.so*` returns this library).
//!
//! Layered exactly as cudart is: every runtime call is a thin translation onto this
//! library's own driver-API exports ([`crate::api`]), so quotas, the compute scheduler,
//! pointer checks and the wire protocol are the driver path's, with no second copy.
//! - [`state`]: the calling thread's device and the primary context per device, made
//!   current on first use (as cudart does);
//! - [`registry`]: what nvcc's generated code registers from constructors (fatbins,
//!   kernels, variables), kept locally and loaded into a context on first use, and the
//!   `<<<>>>` launch configuration;
//! - [`device`], [`memory`], [`stream`], [`launch`], [`errors`]: the API families;
//! - [`unsupported`]: every other libcudart export, failing with
//!   `cudaErrorNotSupported` and one log line naming it.
//!
//! Must not: talk to the daemon itself (only through [`crate::api`]), do work in
//! registration calls beyond recording (they run in the application's constructors),
//! or let a panic cross `extern "C"` (every export runs under [`rt_entry`]).
//!
//! Error model: each failing call records its code as the calling thread's last error
//! (`cudaGetLastError` returns it once and resets it, `cudaPeekAtLastError` does not).
#![allow(clippy::missing_safety_doc, clippy::too_many_arguments, non_snake_case)]

pub mod array;
pub mod device;
pub mod errors;
pub mod graph;
pub mod graph_capture;
pub mod graph_mem;
pub mod graph_node;
pub mod graph_nodes;
pub mod graph_query;
pub mod ipc;
pub mod launch;
pub mod memory;
pub mod mempool;
pub mod registry;
pub mod state;
pub mod stream;
pub mod unsupported;

use gpupool_shim::cuda::{CUresult, CUstream};
use gpupool_shim::cudart::cudaError;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

pub type Rt<T> = Result<T, cudaError>;

thread_local! {
    static LAST_ERROR: Cell<cudaError> = const { Cell::new(cudaError::cudaSuccess) };
}

/// Runs a runtime export's body: a failure becomes the thread's last error, and a panic
/// never crosses `extern "C"` (it is `cudaErrorUnknown`).
pub fn rt_entry(body: impl FnOnce() -> Rt<()>) -> cudaError {
    let code = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return cudaError::cudaSuccess,
        Ok(Err(code)) => code,
        Err(_) => {
            crate::util::log("internal panic in a runtime call; returning cudaErrorUnknown");
            cudaError::cudaErrorUnknown
        }
    };
    set_last_error(code);
    code
}

pub fn set_last_error(code: cudaError) {
    LAST_ERROR.with(|e| e.set(code));
}

pub fn take_last_error(reset: bool) -> cudaError {
    LAST_ERROR.with(|e| if reset { e.replace(cudaError::cudaSuccess) } else { e.get() })
}

/// The runtime code for a driver result: the runtime deliberately shares its numbers
/// with the driver for every error both can report, so this is the identity except where
/// the runtime names the condition differently.
pub fn from_driver(r: CUresult) -> cudaError {
    match r {
        CUresult::CUDA_ERROR_NOT_INITIALIZED => cudaError::cudaErrorInitializationError,
        CUresult::CUDA_ERROR_DEINITIALIZED => cudaError::cudaErrorCudartUnloading,
        CUresult::CUDA_ERROR_INVALID_CONTEXT => cudaError::cudaErrorDeviceUninitialized,
        other => cudaError(other.0 as _),
    }
}

/// A driver call's result as the runtime's.
pub fn cu(r: CUresult) -> Rt<()> {
    if r == CUresult::CUDA_SUCCESS { Ok(()) } else { Err(from_driver(r)) }
}

/// Which stream the NULL handle means: the export's variant (`_ptds` / `_ptsz` for
/// programs built with `--default-stream per-thread`) decides, as in the driver API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NullStream {
    Legacy,
    PerThread,
}

impl NullStream {
    /// The stream handle to hand the driver: the per-thread variants turn NULL into
    /// `CU_STREAM_PER_THREAD`; explicit handles (including `cudaStreamLegacy`) stay.
    pub fn resolve(self, s: CUstream) -> CUstream {
        if s.is_null() && self == NullStream::PerThread { 0x2 as CUstream } else { s }
    }
}

/// Defines a runtime export and its per-thread-default-stream twin from one
/// implementation that takes the meaning of the NULL stream last.
macro_rules! rt_variants {
    ($($legacy:ident / $ptds:ident => $imp:ident ( $($arg:ident : $ty:ty),* $(,)? );)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $legacy($($arg: $ty),*) -> gpupool_shim::cudart::cudaError {
            crate::runtime::rt_entry(|| $imp($($arg,)* crate::runtime::NullStream::Legacy))
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $ptds($($arg: $ty),*) -> gpupool_shim::cudart::cudaError {
            crate::runtime::rt_entry(|| $imp($($arg,)* crate::runtime::NullStream::PerThread))
        }
    )*};
}
pub(crate) use rt_variants;

/// Defines plain runtime exports whose bodies return `Rt<()>`.
macro_rules! rt_exports {
    ($($name:ident => $imp:ident ( $($arg:ident : $ty:ty),* $(,)? );)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> gpupool_shim::cudart::cudaError {
            crate::runtime::rt_entry(|| $imp($($arg),*))
        }
    )*};
}
pub(crate) use rt_exports;

/// Writes through an application out-pointer; NULL is `cudaErrorInvalidValue`.
pub fn out<T>(ptr: *mut T, value: T) -> Rt<()> {
    crate::util::out(ptr, value).map_err(|_| cudaError::cudaErrorInvalidValue)
}

/// The CUDA runtime version this process was built against: 12 when it loaded
/// `libcudart.so.12` (and not `.13`), else 13. Programs compare `cudaRuntimeGetVersion`
/// with the headers they were built with, so it has to match their soname.
/// A `dlopen("libcudart.so.12")` answered by this library counts as loading it.
pub fn runtime_major() -> u32 {
    let dlopened = DLOPENED_MAJOR.load(std::sync::atomic::Ordering::Relaxed);
    let twelve = dlopened == 12 || loaded_object_named(b"libcudart.so.12");
    if twelve && dlopened != 13 && !loaded_object_named(b"libcudart.so.13") { 12 } else { 13 }
}

/// The major version of the last `libcudart.so.N` a `dlopen` asked for (0: none).
pub static DLOPENED_MAJOR: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

pub fn runtime_version() -> i32 {
    if runtime_major() == 12 { 12090 } else { 13000 }
}

/// Whether a loaded object's path ends in `name` (`dl_iterate_phdr`; no allocation).
fn loaded_object_named(name: &'static [u8]) -> bool {
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut libc::c_void) -> libc::c_int {
        // SAFETY: glibc passes a valid dl_phdr_info; `data` is the name slice we passed.
        let (info, name) = unsafe { (&*info, &*(data as *const &[u8])) };
        if info.dlpi_name.is_null() {
            return 0;
        }
        // SAFETY: dlpi_name is a NUL-terminated path owned by the dynamic loader.
        let path = unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_bytes();
        path.ends_with(name) as libc::c_int
    }
    let mut name: &[u8] = name;
    // SAFETY: `visit` only reads what glibc hands it and the slice behind `data`, which
    // outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut name as *mut &[u8]).cast()) != 0 }
}
