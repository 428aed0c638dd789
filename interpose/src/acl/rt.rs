//! The lower runtime's memory calls (CANN's `libruntime.so`, which `gpupool run` links to
//! `libgpupool.so` as it links `libascendcl.so`): `rtMalloc`, `rtFree` and `rtMemGetInfoEx`, the
//! calls hami-vnpu-core hooks, answered through the same daemon operations and the same handles
//! as AscendCL's `aclrtMalloc`/`aclrtFree`/`aclrtGetMemInfo`, in the thread's current context.
//! So memory a library allocates beneath AscendCL is in the tenant's ledger and quota, and
//! `rtMemGetInfoEx` shows the quota as the total.
//!
//! Codes are the runtime's external ones: where AscendCL answers ACL_ERROR_INVALID_PARAM
//! (100000) the runtime answers ACL_ERROR_RT_PARAM_INVALID (107000); past the quota
//! ACL_ERROR_RT_MEMORY_ALLOCATION (207001), as hami-vnpu-core's hook answers it.

use super::*;
use gpupool_shim::acl::{
    MEM_ALLOC_TYPE_BIT, RT_MEMORY_DEFAULT, RT_MEMORY_HBM, rtError_t, rtMemInfoType_t, rtMemType_t,
};

const RT_PARAM_INVALID: aclError = acl::ACL_ERROR_RT_PARAM_INVALID as aclError;

/// `with`, its AscendCL-level refusals in the runtime's numbering (logged as that code).
fn rt_call(what: &str, f: impl FnOnce(&mut Client) -> A<()>) -> rtError_t {
    let r = client::with(|c| Ok(f(c))).unwrap_or_else(|e| Err(acl_code(e)));
    match r {
        Ok(()) => SUCCESS,
        Err(INVALID_PARAM) => note_error(RT_PARAM_INVALID, what),
        Err(code) => note_error(code, what),
    }
}

macro_rules! rt_exports {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $body:block )*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> rtError_t {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> rtError_t { $body }))
                .unwrap_or(acl::ACL_ERROR_RT_INTERNAL_ERROR as rtError_t)
        }
        const _: unsafe extern "C" fn($($ty),*) -> rtError_t = gpupool_shim::acl::$name;
    )*};
}

rt_exports! {
    fn rtMalloc(dev_ptr: *mut *mut c_void, size: u64, type_: rtMemType_t, module_id: u16) {
        // The module id keys CANN's per-module memory statistics; the pool's ledger is per tenant.
        let _ = module_id;
        let kind = type_ & MEM_ALLOC_TYPE_BIT;
        if kind != RT_MEMORY_DEFAULT && kind != RT_MEMORY_HBM {
            return note_error(RT_PARAM_INVALID, &format!("rtMalloc: memory type {kind:#x}: the pool serves NPU HBM only"));
        }
        rt_call("rtMalloc", |c| {
            if dev_ptr.is_null() || size == 0 {
                return Err(INVALID_PARAM);
            }
            let (h, x) = current_healthy(c)?;
            let p = allocate(c, h, x, size, false)?;
            out(dev_ptr, p)
        })
    }
    fn rtFree(dev_ptr: *mut c_void) {
        rt_call("rtFree", |c| free(c, dev_ptr as u64))
    }
    fn rtMemGetInfoEx(mem_info_type: rtMemInfoType_t, free: *mut usize, total: *mut usize) {
        rt_call("rtMemGetInfoEx", |c| {
            if free.is_null() || total.is_null() || mem_info_type.0 > 9 {
                return Err(INVALID_PARAM);
            }
            let (f, t) = mem_info_of(c, mem_info_type.0)?;
            out(free, f)?;
            out(total, t)
        })
    }
}
