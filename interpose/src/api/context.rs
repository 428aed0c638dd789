//! Primary contexts, regular contexts and the per-thread context stack. Contexts are
//! ids the daemon issued; the stack is kept here, per thread, so push/pop/get/set never
//! cost a round trip.

use crate::client::{self, CtxInfo, Kind, make, stack_pop, stack_push, stack_set, stack_top};
use crate::util::{R, entry, out};
use gpupool_protocol::Request;
use gpupool_protocol::ops::answer;
use gpupool_shim::cuda::{
    CUcontext, CUctxCreateParams, CUdevice, CUexecAffinityParam, CUfunc_cache, CUlimit, CUresult,
};
use std::collections::HashMap;
use std::os::raw::{c_int, c_uint};
use std::sync::Mutex;

const CTX_FLAGS_MASK: u32 = 0xFF;
const CTX_API_VERSION: u32 = 3020;

fn create(pctx: *mut CUcontext, flags: u32, dev: CUdevice) -> R<()> {
    if pctx.is_null() || flags & !CTX_FLAGS_MASK != 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let h = client::call(|c| {
        let (ep, local) = c.route(dev)?;
        let answer::Context { ctx } = c.conn_at(ep)?.ask(Request::CtxCreate { device: local, flags })?;
        let h = make(Kind::Ctx, ep, ctx.0)?;
        c.reg.ctxs.insert(h, CtxInfo { id: ctx, device: dev as u32, flags, primary: false });
        Ok(h)
    })?;
    out(pctx, h as CUcontext)?;
    stack_push(h);
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v2(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CUresult {
    entry(|| create(pctx, flags, dev))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v3(
    pctx: *mut CUcontext,
    params: *mut CUexecAffinityParam,
    num_params: c_int,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    entry(|| {
        if num_params < 0 || (num_params > 0 && params.is_null()) {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        if num_params > 0 {
            return Err(CUresult::CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
        }
        create(pctx, flags, dev)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxCreate_v4(
    pctx: *mut CUcontext,
    params: *mut CUctxCreateParams,
    flags: c_uint,
    dev: CUdevice,
) -> CUresult {
    entry(|| {
        if !params.is_null() {
            // SAFETY: non-null; the caller passes a valid CUctxCreateParams.
            let p = unsafe { params.read_unaligned() };
            if p.numExecAffinityParams != 0 || !p.cigParams.is_null() {
                return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
            }
        }
        create(pctx, flags, dev)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxDestroy_v2(ctx: CUcontext) -> CUresult {
    entry(|| {
        let h = ctx as u64;
        client::call(|c| {
            let info = c.reg.ctx(h)?;
            if info.primary {
                return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT);
            }
            let id = info.id;
            c.conn_of(h)?.call_ok(Request::CtxDestroy { ctx: id })?;
            c.reg.forget_ctx(h);
            Ok(())
        })?;
        if stack_top() == Some(h) {
            stack_pop();
        }
        Ok(())
    })
}

fn check_ctx(h: u64) -> R<()> {
    client::with(|c| {
        if !c.initialized {
            return Err(CUresult::CUDA_ERROR_NOT_INITIALIZED);
        }
        c.reg.ctx(h).map(|_| ())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CUresult {
    entry(|| {
        check_ctx(ctx as u64)?;
        stack_push(ctx as u64);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CUresult {
    entry(|| {
        client::with(|c| if c.initialized { Ok(()) } else { Err(CUresult::CUDA_ERROR_NOT_INITIALIZED) })?;
        let h = stack_pop().ok_or(CUresult::CUDA_ERROR_INVALID_CONTEXT)?;
        if !pctx.is_null() {
            out(pctx, h as CUcontext)?;
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    entry(|| {
        if !ctx.is_null() {
            check_ctx(ctx as u64)?;
        } else {
            client::with(|c| if c.initialized { Ok(()) } else { Err(CUresult::CUDA_ERROR_NOT_INITIALIZED) })?;
        }
        stack_set(ctx as u64);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult {
    entry(|| {
        if pctx.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        client::with(|c| if c.initialized { Ok(()) } else { Err(CUresult::CUDA_ERROR_NOT_INITIALIZED) })?;
        out(pctx, stack_top().unwrap_or(0) as CUcontext)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut CUdevice) -> CUresult {
    entry(|| {
        if device.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let (_, _, dev) = client::with(|c| c.current())?;
        out(device, dev as CUdevice)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetFlags(flags: *mut c_uint) -> CUresult {
    entry(|| {
        if flags.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let f = client::with(|c| {
            let (h, ..) = c.current()?;
            Ok(c.reg.ctx(h)?.flags)
        })?;
        out(flags, f)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetApiVersion(ctx: CUcontext, version: *mut c_uint) -> CUresult {
    entry(|| {
        if ctx.is_null() {
            client::with(|c| c.current())?;
        } else {
            check_ctx(ctx as u64)?;
        }
        out(version, CTX_API_VERSION)
    })
}

/// A synchronising call: waits for the context's work and reports earlier async failures.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    entry(|| {
        client::call(|c| {
            let (_, id, _) = c.current()?;
            let conn = c.live()?;
            conn.call_ok(Request::CtxSynchronize { ctx: id })?;
            conn.take_pending()
        })
    })
}

/// Limits are kept per context here (the pool does not enforce them).
static LIMITS: Mutex<Option<HashMap<(u64, u32), usize>>> = Mutex::new(None);

fn default_limit(limit: CUlimit) -> Option<usize> {
    Some(match limit {
        CUlimit::CU_LIMIT_STACK_SIZE => 1024,
        CUlimit::CU_LIMIT_PRINTF_FIFO_SIZE => 1 << 20,
        CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE => 8 << 20,
        _ => return None,
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetLimit(value: *mut usize, limit: CUlimit) -> CUresult {
    entry(|| {
        let (h, ..) = client::with(|c| c.current())?;
        let dflt = default_limit(limit).ok_or(CUresult::CUDA_ERROR_UNSUPPORTED_LIMIT)?;
        let map = LIMITS.lock().unwrap_or_else(|e| e.into_inner());
        let v = map.as_ref().and_then(|m| m.get(&(h, limit.0)).copied()).unwrap_or(dflt);
        out(value, v)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxSetLimit(limit: CUlimit, value: usize) -> CUresult {
    entry(|| {
        let (h, ..) = client::with(|c| c.current())?;
        default_limit(limit).ok_or(CUresult::CUDA_ERROR_UNSUPPORTED_LIMIT)?;
        LIMITS.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new).insert((h, limit.0), value);
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetCacheConfig(config: *mut CUfunc_cache) -> CUresult {
    entry(|| {
        client::with(|c| c.current())?;
        out(config, CUfunc_cache::CU_FUNC_CACHE_PREFER_NONE)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxSetCacheConfig(config: CUfunc_cache) -> CUresult {
    entry(|| {
        client::with(|c| c.current())?;
        if config.0 > CUfunc_cache::CU_FUNC_CACHE_PREFER_EQUAL.0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) -> CUresult {
    entry(|| {
        client::with(|c| c.current())?;
        if !least.is_null() {
            out(least, 0)?;
        }
        if !greatest.is_null() {
            out(greatest, -5)?;
        }
        Ok(())
    })
}

// ---- primary contexts ----

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    entry(|| {
        if pctx.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let h = client::call(|c| {
            let (ep, local) = c.route(dev)?;
            let d = dev as u32;
            let answer::Context { ctx } = c.conn_at(ep)?.ask(Request::PrimaryCtxRetain { device: local })?;
            let h = make(Kind::Ctx, ep, ctx.0)?;
            let flags = c.reg.primary.get(&d).map(|p| p.2).unwrap_or(0);
            let entry = c.reg.primary.entry(d).or_insert((h, 0, flags));
            entry.0 = h;
            entry.1 += 1;
            c.reg.ctxs.insert(h, CtxInfo { id: ctx, device: d, flags, primary: true });
            Ok(h)
        })?;
        out(pctx, h as CUcontext)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    entry(|| {
        client::call(|c| {
            let (ep, local) = c.route(dev)?;
            let d = dev as u32;
            match c.reg.primary.get(&d) {
                Some(&(_, n, _)) if n > 0 => {}
                _ => return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT),
            }
            c.conn_at(ep)?.call_ok(Request::PrimaryCtxRelease { device: local })?;
            let p = c.reg.primary.get_mut(&d).expect("checked above");
            p.1 -= 1;
            if p.1 == 0 {
                let h = p.0;
                c.reg.forget_ctx(h);
            }
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset_v2(dev: CUdevice) -> CUresult {
    entry(|| {
        client::call(|c| {
            let (ep, local) = c.route(dev)?;
            let d = dev as u32;
            c.conn_at(ep)?.call_ok(Request::PrimaryCtxReset { device: local })?;
            if let Some(p) = c.reg.primary.get_mut(&d) {
                let h = p.0;
                p.1 = 0;
                c.reg.forget_ctx(h);
            }
            Ok(())
        })
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(dev: CUdevice, flags: *mut c_uint, active: *mut c_int) -> CUresult {
    entry(|| {
        if flags.is_null() || active.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let (f, a) = client::call(|c| {
            c.device(dev)?;
            Ok(c.reg.primary.get(&(dev as u32)).map(|p| (p.2, p.1 > 0)).unwrap_or((0, false)))
        })?;
        out(flags, f)?;
        out(active, a as c_int)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDevicePrimaryCtxSetFlags_v2(dev: CUdevice, flags: c_uint) -> CUresult {
    entry(|| {
        if flags & !CTX_FLAGS_MASK != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        client::call(|c| {
            c.device(dev)?;
            let p = c.reg.primary.entry(dev as u32).or_insert((0, 0, 0));
            p.2 = flags;
            let h = p.0;
            if let Some(ci) = c.reg.ctxs.get_mut(&h) {
                ci.flags = flags;
            }
            Ok(())
        })
    })
}
