//! Primary contexts, regular contexts and the per-thread context stack.

use super::out;
use crate::context::{self, Context, current, lookup};
use crate::driver::{Driver, initialized};
use crate::error::{CuResult, cuda_entry, fail};
use gpupool_shim::cuda::{
    CUcontext, CUctxCreateParams, CUdevice, CUexecAffinityParam, CUfunc_cache, CUlimit, CUresult,
};
use std::os::raw::{c_int, c_uint};
use std::sync::Arc;

/// All documented `CUctx_flags` bits.
const CTX_FLAGS_MASK: u32 = 0xFF;
/// The API version a context reports (`cuCtxGetApiVersion`): contexts made through
/// the `_v2` entry points report 3020, as the real driver does.
const CTX_API_VERSION: u32 = 3020;
const LEAST_STREAM_PRIORITY: c_int = 0;
const GREATEST_STREAM_PRIORITY: c_int = -5;

fn as_handle(ctx: &Context) -> CUcontext {
    ctx.handle() as CUcontext
}

fn check_flags(flags: u32) -> CuResult<()> {
    if flags & !CTX_FLAGS_MASK != 0 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown context flags {flags:#x}"));
    }
    Ok(())
}

fn create(driver: &Driver, pctx: *mut CUcontext, flags: u32, dev: CUdevice) -> CuResult<()> {
    if pctx.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null context output pointer".into());
    }
    check_flags(flags)?;
    let device = driver.device(dev)?.clone();
    let ctx = Context::create(driver, device, flags, false)?;
    out(pctx, as_handle(&ctx))?;
    context::push(ctx);
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v2(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CUresult {
    cuda_entry(|| create(initialized()?, pctx, flags, dev))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v3(
    pctx: *mut CUcontext,
    params: *mut CUexecAffinityParam,
    num_params: c_int,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        if num_params < 0 || (num_params > 0 && params.is_null()) {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "bad execution affinity parameters".into());
        }
        if num_params > 0 {
            return fail(CUresult::CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, || {
                "execution affinity (SM partitions) is not simulated".into()
            });
        }
        create(driver, pctx, flags, dev)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v4(
    pctx: *mut CUcontext,
    params: *mut CUctxCreateParams,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        if !params.is_null() {
            let p = super::read(params, "context creation parameters")?;
            if p.numExecAffinityParams != 0 || !p.cigParams.is_null() {
                return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || {
                    "execution affinity and CIG contexts are not simulated".into()
                });
            }
        }
        create(driver, pctx, flags, dev)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxDestroy_v2(ctx: CUcontext) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        let c = lookup(driver, ctx as u64)?;
        if c.primary {
            return fail(CUresult::CUDA_ERROR_INVALID_CONTEXT, || {
                "a primary context is released with cuDevicePrimaryCtxRelease, not destroyed".into()
            });
        }
        c.destroy(driver);
        context::forget_on_this_thread(c.handle());
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CUresult {
    cuda_entry(|| {
        let c = lookup(initialized()?, ctx as u64)?;
        context::push(c);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CUresult {
    cuda_entry(|| {
        initialized()?;
        match context::pop() {
            Some(c) => {
                if !pctx.is_null() {
                    out(pctx, as_handle(&c))?;
                }
                Ok(())
            }
            None => fail(CUresult::CUDA_ERROR_INVALID_CONTEXT, || "the context stack is empty".into()),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        let c = if ctx.is_null() { None } else { Some(lookup(driver, ctx as u64)?) };
        context::set_current(c);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult {
    cuda_entry(|| {
        initialized()?;
        let h = context::current_or_none().map(|c| as_handle(&c)).unwrap_or(std::ptr::null_mut());
        out(pctx, h)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut CUdevice) -> CUresult {
    cuda_entry(|| out(device, current()?.device.ordinal))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetFlags(flags: *mut c_uint) -> CUresult {
    cuda_entry(|| out(flags, current()?.flags.load(std::sync::atomic::Ordering::Relaxed)))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetApiVersion(ctx: CUcontext, version: *mut c_uint) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        if ctx.is_null() {
            current()?
        } else {
            lookup(driver, ctx as u64)?
        };
        out(version, CTX_API_VERSION)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    cuda_entry(|| {
        let ctx = current()?;
        let r = ctx.synchronize();
        ctx.printf.flush();
        crate::mempool::on_synchronize();
        r
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetLimit(value: *mut usize, limit: CUlimit) -> CUresult {
    cuda_entry(|| match current()?.limit(limit) {
        Some(v) => out(value, v),
        None => fail(CUresult::CUDA_ERROR_UNSUPPORTED_LIMIT, || format!("limit {} is not supported", limit.0)),
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxSetLimit(limit: CUlimit, value: usize) -> CUresult {
    cuda_entry(|| {
        let ctx = current()?;
        if limit == CUlimit::CU_LIMIT_PRINTF_FIFO_SIZE && ctx.printf_launched.load(std::sync::atomic::Ordering::Relaxed)
        {
            // NVIDIA: "must be performed before launching any kernel that uses the printf()
            // device system call, otherwise CUDA_ERROR_INVALID_VALUE will be returned".
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                "CU_LIMIT_PRINTF_FIFO_SIZE cannot change after a kernel that uses printf was launched".into()
            });
        }
        let mut limits = ctx.limits.lock().unwrap_or_else(|e| e.into_inner());
        match limits.get_mut(&limit.0) {
            Some(slot) => {
                *slot = value;
                Ok(())
            }
            None => fail(CUresult::CUDA_ERROR_UNSUPPORTED_LIMIT, || format!("limit {} is not supported", limit.0)),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCacheConfig(config: *mut CUfunc_cache) -> CUresult {
    cuda_entry(|| out(config, CUfunc_cache(current()?.cache_config.load(std::sync::atomic::Ordering::Relaxed))))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxSetCacheConfig(config: CUfunc_cache) -> CUresult {
    cuda_entry(|| {
        let ctx = current()?;
        if config.0 > CUfunc_cache::CU_FUNC_CACHE_PREFER_EQUAL.0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown cache config {}", config.0));
        }
        ctx.cache_config.store(config.0, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> CUresult {
    cuda_entry(|| {
        current()?;
        // Either pointer may be NULL: the caller only wants the other bound.
        if !least.is_null() {
            out(least, LEAST_STREAM_PRIORITY)?;
        }
        if !greatest.is_null() {
            out(greatest, GREATEST_STREAM_PRIORITY)?;
        }
        Ok(())
    })
}

/// Clamps a requested stream priority into the device's range, as CUDA does.
pub fn clamp_priority(p: c_int) -> c_int {
    p.clamp(GREATEST_STREAM_PRIORITY, LEAST_STREAM_PRIORITY)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        if pctx.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null context output pointer".into());
        }
        let device = driver.device(dev)?.clone();
        let mut p = device.primary.lock().unwrap_or_else(|e| e.into_inner());
        let ctx = match &p.ctx {
            Some(c) => c.clone(),
            None => {
                let c = Context::create(driver, device.clone(), p.flags, true)?;
                p.ctx = Some(c.clone());
                c
            }
        };
        p.refcount += 1;
        out(pctx, as_handle(&ctx))
    })
}

fn drop_primary(driver: &Driver, ctx: Arc<Context>) {
    ctx.destroy(driver);
    context::forget_on_this_thread(ctx.handle());
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        let device = driver.device(dev)?;
        let mut p = device.primary.lock().unwrap_or_else(|e| e.into_inner());
        if p.refcount == 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_CONTEXT, || {
                format!("device {dev}: primary context not retained")
            });
        }
        p.refcount -= 1;
        if p.refcount == 0
            && let Some(c) = p.ctx.take()
        {
            drop(p);
            drop_primary(driver, c);
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset_v2(dev: CUdevice) -> CUresult {
    cuda_entry(|| {
        let driver = initialized()?;
        let device = driver.device(dev)?;
        let mut p = device.primary.lock().unwrap_or_else(|e| e.into_inner());
        p.refcount = 0;
        p.flags = 0;
        if let Some(c) = p.ctx.take() {
            drop(p);
            drop_primary(driver, c);
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(dev: CUdevice, flags: *mut c_uint, active: *mut c_int) -> CUresult {
    cuda_entry(|| {
        let device = initialized()?.device(dev)?;
        if flags.is_null() || active.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null output pointer".into());
        }
        let p = device.primary.lock().unwrap_or_else(|e| e.into_inner());
        out(flags, p.flags)?;
        out(active, p.ctx.is_some() as c_int)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxSetFlags_v2(dev: CUdevice, flags: c_uint) -> CUresult {
    cuda_entry(|| {
        let device = initialized()?.device(dev)?;
        check_flags(flags)?;
        let mut p = device.primary.lock().unwrap_or_else(|e| e.into_inner());
        p.flags = flags;
        if let Some(c) = &p.ctx {
            c.flags.store(flags, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    })
}
