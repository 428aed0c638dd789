//! The boundary to the simulated device: the simulator's private exports (sim/src/api/host_job.rs),
//! found in the `libcuda.so.1` already loaded in this process.
//!
//! Everything this library does to device memory goes through three calls: checking that a
//! range is one live allocation of a stream's context when the call is made, queueing a job on
//! the stream (so it is ordered with that stream's kernels and copies), and, inside the job,
//! turning a device range into the host address of its bytes (held alive until the job ends).

// Streams are CUDA handles the simulator validates; this module passes them on, never dereferences them.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use crate::status::{BlasResult, fail};
use gpupool_shim::cublas::cublasStatus_t as S;
use gpupool_shim::cuda::{CUdeviceptr, CUresult, CUstream, CUstreamCaptureStatus};
use std::ffi::c_void;
use std::sync::OnceLock;

type RunFn = unsafe extern "C" fn(*mut c_void, *const c_void) -> CUresult;
type ReleaseFn = unsafe extern "C" fn(*mut c_void);
type CheckFn = unsafe extern "C" fn(CUstream, CUdeviceptr, usize) -> CUresult;
type EnqueueFn = unsafe extern "C" fn(CUstream, Option<RunFn>, Option<ReleaseFn>, *mut c_void) -> CUresult;
type SpanFn = unsafe extern "C" fn(*const c_void, CUdeviceptr, usize, *mut *mut c_void) -> CUresult;
type IsCapturingFn = unsafe extern "C" fn(CUstream, *mut CUstreamCaptureStatus) -> CUresult;

/// The simulator's private exports.
pub struct Sim {
    check: CheckFn,
    enqueue: EnqueueFn,
    span: SpanFn,
    is_capturing: IsCapturingFn,
    /// Keeps the functions above loaded.
    _lib: libloading::os::unix::Library,
}

/// The simulator this process runs on, or why there is none (then no handle can be created).
pub fn sim() -> BlasResult<&'static Sim> {
    static SIM: OnceLock<Result<Sim, String>> = OnceLock::new();
    match SIM.get_or_init(load) {
        Ok(s) => Ok(s),
        Err(why) => fail(S::CUBLAS_STATUS_NOT_INITIALIZED, || why.clone()),
    }
}

fn load() -> Result<Sim, String> {
    use libloading::os::unix::{Library, RTLD_NOW};
    // The driver the application already loaded; else load it, as NVIDIA's runtime does.
    // SAFETY: loading the CUDA driver runs no initialisers with preconditions.
    let lib = unsafe { Library::open(Some("libcuda.so.1"), RTLD_NOW | libc::RTLD_NOLOAD) }
        .or_else(|_| unsafe { Library::open(Some("libcuda.so.1"), RTLD_NOW) })
        .map_err(|e| format!("cannot load libcuda.so.1: {e}"))?;
    let missing = |e: libloading::Error| {
        format!("libcuda.so.1 is not gpupool's simulator ({e}); this libcublas computes only over it")
    };
    // SAFETY: each symbol is the simulator's private export of that name, with that signature
    // (sim/src/api/host_job.rs); the library stays loaded in `_lib`.
    unsafe {
        Ok(Sim {
            check: *lib.get::<CheckFn>(b"gpupool_sim_check_device_span\0").map_err(missing)?,
            enqueue: *lib.get::<EnqueueFn>(b"gpupool_sim_enqueue_host_job\0").map_err(missing)?,
            span: *lib.get::<SpanFn>(b"gpupool_sim_job_device_span\0").map_err(missing)?,
            is_capturing: *lib.get::<IsCapturingFn>(b"cuStreamIsCapturing\0").map_err(missing)?,
            _lib: lib,
        })
    }
}

/// A job body: computes with the device ranges it resolves through the [`Job`]. It may run more
/// than once: a stream capture records it as a node that every launch of the graph runs.
pub type Body = Box<dyn Fn(&Job) -> Result<(), CUresult> + Send + Sync>;

/// The queued body, owned by the simulator between enqueue and release.
struct Queued(Body);

unsafe extern "C" fn run_queued(user: *mut c_void, job: *const c_void) -> CUresult {
    // SAFETY: `user` is the `Queued` that `enqueue` leaked; the simulator calls run (once per
    // launch of a captured job, maybe from two streams at once: the body is `Sync`) only before
    // release.
    let queued = unsafe { &*user.cast::<Queued>() };
    let Ok(sim) = sim() else { return CUresult::CUDA_ERROR_NOT_INITIALIZED };
    let job = Job { sim, raw: job };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (queued.0)(&job)))
        .unwrap_or_else(|_| {
            eprintln!("gpupool-sim-blas: internal panic in a queued cuBLAS job");
            Err(CUresult::CUDA_ERROR_UNKNOWN)
        })
        .err()
        .unwrap_or(CUresult::CUDA_SUCCESS)
}

unsafe extern "C" fn release_queued(user: *mut c_void) {
    // SAFETY: the simulator releases each enqueued job exactly once.
    drop(unsafe { Box::from_raw(user.cast::<Queued>()) });
}

impl Sim {
    /// Whether work queued on `stream` is being captured (not run now).
    pub fn capturing(&self, stream: CUstream) -> bool {
        let mut st = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: the driver's own call, with a valid out-pointer; it validates the stream.
        let r = unsafe { (self.is_capturing)(stream, &mut st) };
        r == CUresult::CUDA_SUCCESS && st != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
    }

    /// Refuses a range that is not inside one live allocation of `stream`'s context.
    pub fn check(&self, stream: CUstream, ptr: u64, bytes: usize, what: &str) -> BlasResult<()> {
        if ptr == 0 {
            return fail(S::CUBLAS_STATUS_INVALID_VALUE, || format!("{what} is NULL"));
        }
        // SAFETY: the simulator's export validates every argument.
        let r = unsafe { (self.check)(stream, ptr, bytes) };
        if r == CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            fail(S::CUBLAS_STATUS_INVALID_VALUE, || {
                format!(
                    "{what}: {bytes} bytes at {ptr:#x} are not device memory of the stream's context (CUresult {})",
                    r.0
                )
            })
        }
    }

    /// Queues `body` on `stream` (on a capturing stream, records it in the capture's graph). A
    /// stream the simulator refuses (destroyed, a context with a sticky error) fails the call with
    /// EXECUTION_FAILED.
    pub fn enqueue(&self, stream: CUstream, body: Body) -> BlasResult<()> {
        let user = Box::into_raw(Box::new(Queued(body)));
        // SAFETY: the simulator calls `run_queued` before, and `release_queued` exactly once with
        // `user`, also when it refuses the enqueue.
        let r = unsafe { (self.enqueue)(stream, Some(run_queued), Some(release_queued), user.cast()) };
        if r == CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            fail(S::CUBLAS_STATUS_EXECUTION_FAILED, || format!("the stream refused the work (CUresult {})", r.0))
        }
    }
}

/// A running job: resolves device ranges of its stream's context.
pub struct Job {
    sim: &'static Sim,
    raw: *const c_void,
}

impl Job {
    /// Host address of the bytes of `[ptr, ptr + bytes)`, valid until the job returns.
    /// A range that is no longer device memory faults like a kernel would.
    pub fn span(&self, ptr: u64, bytes: usize) -> Result<*mut u8, CUresult> {
        let mut host: *mut c_void = std::ptr::null_mut();
        // SAFETY: `raw` is the job the simulator handed to this run; `host` is a valid out-pointer.
        let r = unsafe { (self.sim.span)(self.raw, ptr, bytes, &mut host) };
        if r == CUresult::CUDA_SUCCESS { Ok(host.cast()) } else { Err(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS) }
    }
}
