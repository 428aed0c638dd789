//! Primary contexts, regular contexts and the per-thread context stack. Contexts are
//! ids the daemon issued; the stack is kept here, per thread, so push/pop/get/set never
//! cost a round trip.

use crate::api::export::read;
use crate::client::{self, CtxInfo, Kind, make, stack_pop, stack_push, stack_set, stack_top};
use crate::util::R;
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

fn create(flags: u32, dev: CUdevice) -> R<CUcontext> {
    if flags & !CTX_FLAGS_MASK != 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let h = client::call(|c| {
        let (ep, local) = c.route(dev)?;
        let answer::Context { ctx } = c.conn_at(ep)?.ask(Request::CtxCreate { device: local, flags })?;
        let h = make(Kind::Ctx, ep, ctx.0)?;
        c.reg.ctxs.insert(h, CtxInfo { id: ctx, device: dev as u32, flags, primary: false });
        Ok(h)
    })?;
    stack_push(h);
    Ok(h as CUcontext)
}

pub(super) fn create_v2(flags: c_uint, dev: CUdevice) -> R<CUcontext> {
    create(flags, dev)
}

pub(super) fn create_v3(
    params: *mut CUexecAffinityParam,
    num_params: c_int,
    flags: c_uint,
    dev: CUdevice,
) -> R<CUcontext> {
    if num_params < 0 || (num_params > 0 && params.is_null()) {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    if num_params > 0 {
        return Err(CUresult::CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY);
    }
    create(flags, dev)
}

pub(super) fn create_v4(params: *mut CUctxCreateParams, flags: c_uint, dev: CUdevice) -> R<CUcontext> {
    if !params.is_null() {
        let p = read::<_, CUresult>(params.cast_const())?;
        if p.numExecAffinityParams != 0 || !p.cigParams.is_null() {
            return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
        }
    }
    create(flags, dev)
}

pub(super) fn destroy(ctx: CUcontext) -> R<()> {
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
    context_gone(h);
    Ok(())
}

fn check_ctx(h: u64) -> R<()> {
    client::with(|c| {
        if !c.initialized {
            return Err(CUresult::CUDA_ERROR_NOT_INITIALIZED);
        }
        c.reg.ctx(h).map(|_| ())
    })
}

fn require_init() -> R<()> {
    client::with(|c| if c.initialized { Ok(()) } else { Err(CUresult::CUDA_ERROR_NOT_INITIALIZED) })
}

pub(super) fn push(ctx: CUcontext) -> R<()> {
    check_ctx(ctx as u64)?;
    stack_push(ctx as u64);
    Ok(())
}

pub(super) fn pop() -> R<CUcontext> {
    require_init()?;
    Ok(stack_pop().ok_or(CUresult::CUDA_ERROR_INVALID_CONTEXT)? as CUcontext)
}

pub(super) fn set_current(ctx: CUcontext) -> R<()> {
    if ctx.is_null() {
        require_init()?
    } else {
        check_ctx(ctx as u64)?
    }
    stack_set(ctx as u64);
    Ok(())
}

pub(super) fn get_current() -> R<CUcontext> {
    require_init()?;
    Ok(stack_top().unwrap_or(0) as CUcontext)
}

/// Context `h` was destroyed or reset: what NVIDIA's runtime kept with it (its storage
/// slots, whose destructors run now; the modules its libraries had there) goes with it, and
/// so do the handles of the arrays, textures and surfaces the daemon destroyed with it.
fn context_gone(h: u64) {
    crate::api::array::forget_context(h);
    crate::api::export_tables::context_reset(h);
    crate::api::library::forget_context(h);
}

/// The calling thread's current context (NULL if none), for the export tables.
pub(crate) fn current_handle() -> R<CUcontext> {
    get_current()
}

pub(super) fn get_device() -> R<CUdevice> {
    let (_, _, dev) = client::with(|c| c.current())?;
    Ok(dev as CUdevice)
}

pub(super) fn get_flags() -> R<c_uint> {
    client::with(|c| {
        let (h, ..) = c.current()?;
        Ok(c.reg.ctx(h)?.flags)
    })
}

pub(super) fn api_version(ctx: CUcontext) -> R<c_uint> {
    if ctx.is_null() {
        client::with(|c| c.current())?;
    } else {
        check_ctx(ctx as u64)?;
    }
    Ok(CTX_API_VERSION)
}

/// A synchronising call: waits for the context's work and reports earlier async failures.
pub(super) fn synchronize() -> R<()> {
    client::call(|c| {
        let (_, id, _) = c.current()?;
        let conn = c.live()?;
        conn.call_ok(Request::CtxSynchronize { ctx: id })?;
        conn.take_pending()
    })?;
    super::mempool::on_synchronize();
    Ok(())
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

pub(super) fn get_limit(limit: CUlimit) -> R<usize> {
    let (h, ..) = client::with(|c| c.current())?;
    let dflt = default_limit(limit).ok_or(CUresult::CUDA_ERROR_UNSUPPORTED_LIMIT)?;
    let map = LIMITS.lock().unwrap_or_else(|e| e.into_inner());
    Ok(map.as_ref().and_then(|m| m.get(&(h, limit.0)).copied()).unwrap_or(dflt))
}

pub(super) fn set_limit(limit: CUlimit, value: usize) -> R<()> {
    let (h, ..) = client::with(|c| c.current())?;
    default_limit(limit).ok_or(CUresult::CUDA_ERROR_UNSUPPORTED_LIMIT)?;
    LIMITS.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_with(HashMap::new).insert((h, limit.0), value);
    Ok(())
}

pub(super) fn get_cache_config() -> R<CUfunc_cache> {
    client::with(|c| c.current())?;
    Ok(CUfunc_cache::CU_FUNC_CACHE_PREFER_NONE)
}

pub(super) fn set_cache_config(config: CUfunc_cache) -> R<()> {
    client::with(|c| c.current())?;
    if config.0 > CUfunc_cache::CU_FUNC_CACHE_PREFER_EQUAL.0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

/// (least, greatest): either may be asked for alone.
pub(super) fn stream_priority_range() -> R<(c_int, c_int)> {
    client::with(|c| c.current())?;
    Ok((0, -5))
}

// ---- primary contexts ----

pub(super) fn primary_retain(dev: CUdevice) -> R<CUcontext> {
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
    Ok(h as CUcontext)
}

/// The device's primary context for NVIDIA's runtime (CUDART_INTERFACE slot 2): retained
/// once, on the first call while this process holds no reference, then returned as is.
pub(crate) fn primary_for_runtime(dev: CUdevice) -> R<CUcontext> {
    let held = client::with(|c| {
        c.device(dev)?;
        Ok(c.reg.primary.get(&(dev as u32)).filter(|p| p.1 > 0).map(|p| p.0))
    })?;
    match held {
        Some(h) => Ok(h as CUcontext),
        None => primary_retain(dev),
    }
}

pub(super) fn primary_release(dev: CUdevice) -> R<()> {
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
}

pub(super) fn primary_reset(dev: CUdevice) -> R<()> {
    client::call(|c| {
        let (ep, local) = c.route(dev)?;
        let d = dev as u32;
        c.conn_at(ep)?.call_ok(Request::PrimaryCtxReset { device: local })?;
        let reset = c.reg.primary.get_mut(&d).map(|p| {
            p.1 = 0;
            p.0
        });
        if let Some(h) = reset {
            c.reg.forget_ctx(h);
        }
        Ok(reset)
    })
    .map(|reset| reset.map_or((), context_gone))
}

/// (flags, active)
pub(super) fn primary_state(dev: CUdevice) -> R<(c_uint, c_int)> {
    client::call(|c| {
        c.device(dev)?;
        let (flags, active) = c.reg.primary.get(&(dev as u32)).map(|p| (p.2, p.1 > 0)).unwrap_or((0, false));
        Ok((flags, active as c_int))
    })
}

pub(super) fn primary_set_flags(dev: CUdevice, flags: c_uint) -> R<()> {
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
}
