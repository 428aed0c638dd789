//! CUDART_INTERFACE: modules from the fat binaries the runtime registered, and a device's
//! primary context, both through this library's forwarded driver API.

use crate::api::{context, module};
use crate::util::{R, out};
use gpupool_shim::cuda::{CUcontext, CUdevice, CUmodule, CUresult};
use std::os::raw::{c_uint, c_void};

/// Slot 1: `wrapper` is a `__fatBinC_Wrapper_t` (magic 0x466243b1, version, data pointer),
/// as registered by `__cudaRegisterFatBinary`; the module is loaded in the current context.
pub fn module_from_fatbin(module: *mut CUmodule, wrapper: *const c_void) -> R<()> {
    crate::api::export::require(module)?;
    out(module, module::load(wrapper)?)
}

/// Slots 6 and 8 pass three more arguments; the runtimes we traced pass NULL, NULL, 0. What
/// other values would ask for is unknown, so they are refused with a log line.
fn plain_load(slot: &str, a3: *mut c_void, a4: *mut c_void, a5: c_uint) -> R<()> {
    if !a3.is_null() || !a4.is_null() || a5 != 0 {
        crate::util::warn(&format!(
            "export table CUDART_INTERFACE {slot}: extra arguments {a3:?} {a4:?} {a5} are not established; \
             CUDA_ERROR_NOT_SUPPORTED"
        ));
        return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
    }
    Ok(())
}

/// Slot 6: slot 1 with three more arguments.
pub fn module_from_fatbin_ext(
    module: *mut CUmodule,
    wrapper: *const c_void,
    a3: *mut c_void,
    a4: *mut c_void,
    a5: c_uint,
) -> R<()> {
    plain_load("slot 6", a3, a4, a5)?;
    module_from_fatbin(module, wrapper)
}

/// Slot 8: the fat binary container itself (magic 0xba55ed50) rather than its wrapper.
pub fn module_from_fatbin_header(
    header: *const c_void,
    module: *mut CUmodule,
    a3: *mut c_void,
    a4: *mut c_void,
    a5: c_uint,
) -> R<()> {
    plain_load("slot 8", a3, a4, a5)?;
    module_from_fatbin(module, header)
}

/// Slot 2: the device's primary context, which the runtime then makes current. It holds one
/// reference for this process (taken here on the first call, as retaining is how our
/// daemon creates it); later calls return the same context.
pub fn primary_context(pctx: *mut CUcontext, dev: CUdevice) -> R<()> {
    crate::api::export::require(pctx)?;
    out(pctx, context::primary_for_runtime(dev)?)
}

/// Slot 7: called with one integer and no result; the driver's use of it is not known, and
/// nothing here depends on it (the trace records the value).
pub fn runtime_notice(_value: usize) {}

/// Slot 12: NVIDIA's driver loads its PTX compiler here; the daemon's driver compiles, so
/// there is nothing to load.
pub fn load_compilers() -> R<()> {
    Ok(())
}
