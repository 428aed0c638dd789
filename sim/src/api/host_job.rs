//! Private exports for the simulator's own math libraries (`sim-blas`: the libcublas and
//! libcublasLt the simulator ships). No NVIDIA API has them; they are the whole boundary
//! between such a library and the simulated device:
//!
//! - `gpupool_sim_check_device_span(stream, ptr, bytes)`: whether `[ptr, ptr + bytes)` lies in
//!   one live allocation of the context `stream` belongs to, so a bad pointer is refused when
//!   the call is made;
//! - `gpupool_sim_enqueue_host_job(stream, run, release, user)`: queues `run` on `stream` as
//!   device work (kernel time for NVML), ordered with the stream's kernels and copies; on a
//!   capturing stream it is a kernel node, run at every launch of the graph (so `run` may be
//!   called many times, and from two streams at once, before the one `release`);
//! - `gpupool_sim_job_device_span(job, ptr, bytes, &host)`: inside `run`, the host address of
//!   the bytes behind a device range of the job's context. The allocation is held until `run`
//!   returns, so a free racing the job cannot unmap them.
//!
//! A library that finds these symbols in its process's `libcuda.so.1` is running over the
//! simulator; NVIDIA's driver has none of them.

use super::{DefaultStream, resolve_stream};
use crate::context::Context;
use crate::driver::initialized;
use crate::error::{CuResult, cuda_entry, fail};
use crate::memory::Allocation;
use crate::stream::Work;
use gpupool_shim::cuda::{CUdeviceptr, CUresult, CUstream};
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// A running host job: its context and the allocations it has resolved (held until it ends).
pub struct GpupoolSimJob {
    ctx: Arc<Context>,
    held: Mutex<Vec<Arc<Allocation>>>,
}

/// The job body: returns `CUDA_SUCCESS`, or the error the stream then reports.
pub type GpupoolSimJobRun = unsafe extern "C" fn(user: *mut c_void, job: *const GpupoolSimJob) -> CUresult;
/// Called exactly once for every `gpupool_sim_enqueue_host_job` given both functions: after
/// `run`, or instead of it (the enqueue failed, or a context with a sticky error runs nothing),
/// so the library frees `user` in one place.
pub type GpupoolSimJobRelease = unsafe extern "C" fn(user: *mut c_void);

/// The caller's job state, released when the queued work is dropped, run or not.
struct UserData {
    user: usize,
    release: GpupoolSimJobRelease,
}

impl Drop for UserData {
    fn drop(&mut self) {
        // SAFETY: the release function and argument the library passed together, called once.
        unsafe { (self.release)(self.user as *mut c_void) };
    }
}

fn check_span(stream: CUstream, ptr: CUdeviceptr, bytes: usize) -> CuResult<()> {
    let (ctx, _) = resolve_stream(initialized()?, stream, DefaultStream::Legacy)?;
    ctx.memory.resolve(ptr, bytes as u64, "math library operand").map(|_| ())
}

fn enqueue(
    stream: CUstream,
    run: Option<GpupoolSimJobRun>,
    release: Option<GpupoolSimJobRelease>,
    user: *mut c_void,
) -> CuResult<()> {
    let (Some(run), Some(release)) = (run, release) else {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null host job function".into());
    };
    let data = UserData { user: user as usize, release };
    let (ctx, s) = resolve_stream(initialized()?, stream, DefaultStream::Legacy)?;
    ctx.check_sticky()?;
    // On a capturing stream the job becomes a kernel node that every launch of the graph runs;
    // `user` is released when the last graph holding it goes.
    let job_ctx = ctx.clone();
    s.enqueue(
        &ctx,
        Work::Kernel,
        Vec::new(),
        Arc::new(move || {
            // The whole value, not its `user` field (closures capture the fields they use): it
            // must live, and release `user`, with this job.
            let data = &data;
            let job = GpupoolSimJob { ctx: job_ctx.clone(), held: Mutex::new(Vec::new()) };
            // SAFETY: the library's job function with its own argument and a job valid for the call.
            let code = unsafe { run(data.user as *mut c_void, &job) };
            if code == CUresult::CUDA_SUCCESS { Ok(()) } else { Err(code) }
        }),
    );
    Ok(())
}

fn job_span(job: *const GpupoolSimJob, ptr: CUdeviceptr, bytes: usize, host: *mut *mut c_void) -> CuResult<()> {
    if job.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null host job".into());
    }
    // SAFETY: non-null; the library passes the job it was handed, which lives for the call.
    let job = unsafe { &*job };
    let (alloc, offset) = job.ctx.memory.resolve(ptr, bytes as u64, "math library operand")?;
    let Some(p) = alloc.host_ptr(offset, bytes as u64) else {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{bytes} bytes at {ptr:#x} out of range"));
    };
    job.held.lock().unwrap_or_else(|e| e.into_inner()).push(alloc);
    super::out(host, p.cast::<c_void>())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpupool_sim_check_device_span(stream: CUstream, ptr: CUdeviceptr, bytes: usize) -> CUresult {
    cuda_entry(|| check_span(stream, ptr, bytes))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpupool_sim_enqueue_host_job(
    stream: CUstream,
    run: Option<GpupoolSimJobRun>,
    release: Option<GpupoolSimJobRelease>,
    user: *mut c_void,
) -> CUresult {
    cuda_entry(|| enqueue(stream, run, release, user))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpupool_sim_job_device_span(
    job: *const GpupoolSimJob,
    ptr: CUdeviceptr,
    bytes: usize,
    host: *mut *mut c_void,
) -> CUresult {
    cuda_entry(|| job_span(job, ptr, bytes, host))
}
