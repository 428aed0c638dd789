//! The runtime's notion of "the current device": a per-thread device ordinal (0 until
//! `cudaSetDevice`) whose primary context the runtime retains once per process and makes
//! current on the thread's first call that needs one, as cudart does. A context the
//! application made current through the driver API is used as it is (runtime/driver
//! interoperability). After `fork` the child starts over: the parent's contexts are not
//! its own.

use super::{Rt, cu};
use crate::api::exports::cuDeviceGetCount;
use crate::api::exports::cuInit;
use crate::api::exports::{cuCtxGetDevice, cuCtxSetCurrent, cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRetain};
use crate::client;
use gpupool_shim::cuda::{CUcontext, CUdevice};
use gpupool_shim::cudart::cudaError;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

thread_local! {
    static DEVICE: Cell<i32> = const { Cell::new(0) };
}

/// Per fork generation: the primary context retained per device ordinal.
struct Process {
    generation: u32,
    primary: HashMap<CUdevice, CUcontext>,
}

/// The fork generation + 1 in which `cuInit` succeeded (0: not yet). An atomic rather
/// than part of [`Process`]: every runtime call asks, and a lock there would sit on the
/// launch path.
static INITIALIZED: AtomicU32 = AtomicU32::new(0);

fn initialized() -> bool {
    INITIALIZED.load(Ordering::Acquire) == client::generation().wrapping_add(1)
}

// SAFETY: CUcontext values are handles (numbers this library issued), never dereferenced.
unsafe impl Send for Process {}

static PROCESS: Mutex<Option<Process>> = Mutex::new(None);

fn with_process<T>(f: impl FnOnce(&mut Process) -> T) -> T {
    let mut g = PROCESS.lock().unwrap_or_else(|e| e.into_inner());
    let generation = client::generation();
    let p = g.get_or_insert_with(|| Process { generation, primary: HashMap::new() });
    if p.generation != generation {
        *p = Process { generation, primary: HashMap::new() };
        super::registry::forget_contexts();
    }
    f(p)
}

/// `cuInit` once per process. A daemon that cannot be reached is `cudaErrorNoDevice`,
/// what NVIDIA's runtime reports on a machine without a usable device.
pub fn init() -> Rt<()> {
    if initialized() {
        return Ok(());
    }
    // SAFETY: plain call into our own export.
    cu(unsafe { cuInit(0) }).map_err(|e| match e {
        cudaError::cudaErrorInitializationError => cudaError::cudaErrorNoDevice,
        other => other,
    })?;
    // A forked child starts over: its generation differs, so the parent's state is reset
    // here before anything of the child's is recorded.
    let generation = with_process(|p| p.generation);
    INITIALIZED.store(generation.wrapping_add(1), Ordering::Release);
    Ok(())
}

pub fn device_count() -> Rt<i32> {
    init()?;
    let mut n = 0;
    // SAFETY: our own export with a valid out-pointer.
    cu(unsafe { cuDeviceGetCount(&mut n) })?;
    Ok(n)
}

pub fn check_device(d: i32) -> Rt<()> {
    if d < 0 || d >= device_count()? {
        return Err(cudaError::cudaErrorInvalidDevice);
    }
    Ok(())
}

/// The device's primary context, retained on first use by this process.
pub fn primary(d: CUdevice) -> Rt<CUcontext> {
    init()?;
    if let Some(c) = with_process(|p| p.primary.get(&d).copied()) {
        return Ok(c);
    }
    check_device(d)?;
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: our own export with a valid out-pointer.
    cu(unsafe { cuDevicePrimaryCtxRetain(&mut ctx, d) })?;
    let kept = with_process(|p| *p.primary.entry(d).or_insert(ctx));
    if kept != ctx {
        // Another thread retained it first: keep one reference per process.
        // SAFETY: releasing the reference we just took.
        let _ = unsafe { cuDevicePrimaryCtxRelease_v2(d) };
    }
    Ok(kept)
}

/// The context runtime calls on this thread use: the current driver context if there
/// is one, else the primary context of the thread's device, made current now.
pub fn context() -> Rt<CUcontext> {
    if let Some(h) = client::stack_top().filter(|&h| h != 0)
        && initialized()
    {
        return Ok(h as CUcontext);
    }
    let ctx = primary(DEVICE.with(Cell::get))?;
    // SAFETY: our own export; `ctx` is a handle it issued.
    cu(unsafe { cuCtxSetCurrent(ctx) })?;
    Ok(ctx)
}

/// `cudaSetDevice`: the thread's device from now on, its primary context current.
pub fn set_device(d: i32) -> Rt<()> {
    check_device(d)?;
    DEVICE.with(|c| c.set(d));
    let ctx = primary(d)?;
    // SAFETY: our own export; `ctx` is a handle it issued.
    cu(unsafe { cuCtxSetCurrent(ctx) })
}

/// `cudaGetDevice`: the device of the thread's current context, else its chosen device.
pub fn current_device() -> Rt<i32> {
    init()?;
    if client::stack_top().is_some_and(|h| h != 0) {
        let mut d = 0;
        // SAFETY: our own export with a valid out-pointer.
        if unsafe { cuCtxGetDevice(&mut d) } == gpupool_shim::cuda::CUresult::CUDA_SUCCESS {
            return Ok(d);
        }
    }
    Ok(DEVICE.with(Cell::get))
}

/// Forgets the device's primary context (after `cudaDeviceReset` released it).
pub fn forget_primary(d: CUdevice) -> Option<CUcontext> {
    with_process(|p| p.primary.remove(&d))
}
