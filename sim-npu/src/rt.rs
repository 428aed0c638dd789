//! The lower runtime's memory calls (CANN's `libruntime.so`, laid out under that name by
//! `scripts/sim-libdir`): `rtMalloc`, `rtFree` and `rtMemGetInfoEx` over the same devices and
//! memory ledger as AscendCL's calls, in the current context.
//!
//! Codes are the runtime's external ones: a NULL or unknown argument ACL_ERROR_RT_PARAM_INVALID
//! (107000, where AscendCL's own calls answer ACL_ERROR_INVALID_PARAM), past the device's
//! memory ACL_ERROR_RT_MEMORY_ALLOCATION (207001). `rtMalloc` charges the size rounded up to 32
//! bytes: the 32 bytes more that `aclrtMalloc` costs are AscendCL's padding, added above this
//! call. Only device HBM is simulated: a device DDR or other memory type is refused.

use crate::export::exports;
use crate::memory;
use crate::runtime;
use crate::status::{Code, code, fail, out};
use gpupool_shim::acl::{rtMemInfoType_t, rtMemType_t};
use std::ffi::c_void;

const P: Code = code::RT_PARAM_INVALID;

exports! { acl -> gpupool_shim::acl::rtError_t, on panic code::RT_INTERNAL_ERROR;

fn rtMalloc(devPtr: *mut *mut c_void, size: u64, type_: rtMemType_t, moduleId: u16) {
    let _ = moduleId; // CANN keys its memory statistics by it; the simulator keeps none per module.
    if devPtr.is_null() || size == 0 {
        return fail(P, || format!("rtMalloc: devPtr NULL or size {size}"));
    }
    let kind = type_ & gpupool_shim::acl::MEM_ALLOC_TYPE_BIT;
    if kind != gpupool_shim::acl::RT_MEMORY_DEFAULT && kind != gpupool_shim::acl::RT_MEMORY_HBM {
        return fail(P, || format!("rtMalloc: memory type {kind:#x} is not the device's HBM (not simulated)"));
    }
    let ctx = runtime::current_healthy()?;
    let total = runtime::config().devices[ctx.device as usize].memory_bytes;
    let p = memory::alloc(ctx.device, total, size, false)?;
    out(devPtr, p as *mut c_void, P, "devPtr")
}

fn rtFree(devPtr: *mut c_void) {
    if devPtr.is_null() {
        return fail(P, || "rtFree: devPtr is NULL".into());
    }
    runtime::device_count()?;
    memory::free(devPtr as u64).map_err(|c| if c == code::INVALID_PARAM { P } else { c })
}

fn rtMemGetInfoEx(memInfoType: rtMemInfoType_t, free: *mut usize, total: *mut usize) {
    if free.is_null() || total.is_null() {
        return fail(P, || "rtMemGetInfoEx: free or total is NULL".into());
    }
    let ctx = runtime::current()?;
    let dev_total = runtime::config().devices[ctx.device as usize].memory_bytes;
    let (f, t) = match memInfoType.0 {
        // The simulated NPU's memory is its HBM; it has no device DDR.
        0 | 2 | 3 | 6 | 7 => (0, 0),
        1 | 4 | 5 | 8 | 9 => (dev_total - memory::used(ctx.device), dev_total),
        other => return fail(P, || format!("rtMemGetInfoEx: unknown memory info type {other}")),
    };
    out(free, f as usize, P, "free")?;
    out(total, t as usize, P, "total")
}

}
