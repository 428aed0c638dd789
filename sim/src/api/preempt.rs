//! The simulator's own compute-preemption exports (not NVIDIA's: its driver offers no call for one
//! context to preempt another). The pool's daemon looks them up by name and, on a driver without
//! them, keeps a higher priority waiting for the kernels already queued ([`crate::preempt`]).
//!
//! - `gpupool_sim_ctx_stop(ctx)`: every grid of `ctx` stops at its next thread-block boundary, and
//!   grids it starts later stop before their first block, until resumed; returns at once.
//! - `gpupool_sim_ctx_wait_stopped(ctx, timeout_us)`: `CUDA_SUCCESS` once every running grid of
//!   `ctx` has stopped (or no stop is in force), `CUDA_ERROR_NOT_READY` if some still ran when
//!   `timeout_us` microseconds passed (the stop stays in force).
//! - `gpupool_sim_ctx_resume(ctx)`: stopped grids go on with the blocks they have left.
//! - `gpupool_sim_event_wait(event, timeout_us)`: `cuEventSynchronize` for at most `timeout_us`
//!   microseconds (`CUDA_ERROR_NOT_READY` if the event had not completed by then), for a waiter
//!   that must not block on a kernel a stop may hold back.
//!
//! A context that is not live is `CUDA_ERROR_INVALID_CONTEXT`; destroying a context resumes it.

use crate::context::lookup;
use crate::driver::initialized;
use crate::error::{cuda_entry, fail};
use gpupool_shim::cuda::{CUcontext, CUevent, CUresult};
use std::os::raw::c_uint;
use std::time::Duration;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpupool_sim_ctx_stop(ctx: CUcontext) -> CUresult {
    cuda_entry(|| {
        lookup(initialized()?, ctx as u64)?.preemption.stop();
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpupool_sim_ctx_wait_stopped(ctx: CUcontext, timeout_us: c_uint) -> CUresult {
    cuda_entry(|| {
        let c = lookup(initialized()?, ctx as u64)?;
        if c.preemption.wait_stopped(Duration::from_micros(timeout_us.into())) {
            Ok(())
        } else {
            fail(CUresult::CUDA_ERROR_NOT_READY, || format!("a grid of context {:#x} is still in a block", ctx as u64))
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpupool_sim_ctx_resume(ctx: CUcontext) -> CUresult {
    cuda_entry(|| {
        lookup(initialized()?, ctx as u64)?.preemption.resume();
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn gpupool_sim_event_wait(event: CUevent, timeout_us: c_uint) -> CUresult {
    cuda_entry(|| {
        let Some(e) = initialized()?.events.get(event as u64) else {
            return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{:#x} is not an event", event as u64));
        };
        if e.wait_timeout(Duration::from_micros(timeout_us.into())) {
            Ok(())
        } else {
            Err(CUresult::CUDA_ERROR_NOT_READY)
        }
    })
}
