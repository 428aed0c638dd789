//! Status codes inside the simulator and how they cross the C boundary: AscendCL's `aclError`,
//! `aclnnStatus` and DCMI's `int` are all C ints, so one result type serves the three APIs.
//! A refused call logs why (with `GPUPOOL_SIM_LOG`; a runtime must not write to a program's
//! stderr otherwise) and leaves the reason for `aclGetRecentErrMsg` on the calling thread.

use gpupool_shim::{acl, aclnn, dcmi};
use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

pub type Code = i32;
pub type Res<T> = Result<T, Code>;

/// The codes the simulator answers with, as `i32` (the headers mix `static const int` and
/// macros, which bindgen types differently).
pub mod code {
    use super::*;
    pub const SUCCESS: Code = acl::ACL_SUCCESS;
    pub const INVALID_PARAM: Code = acl::ACL_ERROR_INVALID_PARAM;
    pub const UNINITIALIZE: Code = acl::ACL_ERROR_UNINITIALIZE;
    pub const REPEAT_INITIALIZE: Code = acl::ACL_ERROR_REPEAT_INITIALIZE;
    pub const REPEAT_FINALIZE: Code = acl::ACL_ERROR_REPEAT_FINALIZE;
    pub const RT_PARAM_INVALID: Code = acl::ACL_ERROR_RT_PARAM_INVALID as Code;
    pub const RT_INVALID_DEVICEID: Code = acl::ACL_ERROR_RT_INVALID_DEVICEID as Code;
    pub const RT_CONTEXT_NULL: Code = acl::ACL_ERROR_RT_CONTEXT_NULL as Code;
    pub const RT_STREAM_CONTEXT: Code = acl::ACL_ERROR_RT_STREAM_CONTEXT as Code;
    pub const RT_INVALID_HANDLE: Code = acl::ACL_ERROR_RT_INVALID_HANDLE as Code;
    pub const RT_MEMORY_ALLOCATION: Code = acl::ACL_ERROR_RT_MEMORY_ALLOCATION as Code;
    pub const RT_EVENT_NOT_COMPLETE: Code = acl::ACL_ERROR_RT_EVENT_NOT_COMPLETE as Code;
    pub const RT_STREAM_SYNC_TIMEOUT: Code = acl::ACL_ERROR_RT_STREAM_SYNC_TIMEOUT as Code;
    pub const RT_AICORE_EXCEPTION: Code = acl::ACL_ERROR_RT_AICORE_EXCEPTION as Code;
    pub const RT_INTERNAL_ERROR: Code = acl::ACL_ERROR_RT_INTERNAL_ERROR as Code;
    pub const ACLNN_PARAM_NULLPTR: Code = aclnn::ACLNN_ERR_PARAM_NULLPTR as Code;
    pub const ACLNN_PARAM_INVALID: Code = aclnn::ACLNN_ERR_PARAM_INVALID as Code;
    pub const ACLNN_RUNTIME_ERROR: Code = aclnn::ACLNN_ERR_RUNTIME_ERROR as Code;
    pub const ACLNN_INNER: Code = aclnn::ACLNN_ERR_INNER as Code;
    pub const DCMI_INVALID_PARAMETER: Code = dcmi::DCMI_ERR_CODE_INVALID_PARAMETER;
    pub const DCMI_INVALID_DEVICE_ID: Code = dcmi::DCMI_ERR_CODE_INVALID_DEVICE_ID;
    pub const DCMI_NOT_SUPPORT: Code = dcmi::DCMI_ERR_CODE_NOT_SUPPORT;
    pub const DCMI_INNER_ERR: Code = dcmi::DCMI_ERR_CODE_INNER_ERR;
}

thread_local! {
    static RECENT: RefCell<Option<CString>> = const { RefCell::new(None) };
    static LAST_ERROR: RefCell<Code> = const { RefCell::new(0) };
}

pub fn log_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var_os("GPUPOOL_SIM_LOG").is_some_and(|v| !v.is_empty() && v != "0"))
}

/// Refuses a call with `code`: logs why and keeps the reason for `aclGetRecentErrMsg`.
pub fn fail<T>(code: Code, why: impl FnOnce() -> String) -> Res<T> {
    let why = why();
    if log_enabled() {
        eprintln!("gpupool-sim-npu: error {code}: {why}");
    }
    RECENT.with(|r| *r.borrow_mut() = CString::new(format!("EE{code}: {why}")).ok());
    LAST_ERROR.with(|l| *l.borrow_mut() = code);
    Err(code)
}

/// `aclGetRecentErrMsg`: the calling thread's last refusal, cleared by reading it, or NULL.
pub fn take_recent_message() -> *const c_char {
    thread_local! { static HELD: RefCell<Option<CString>> = const { RefCell::new(None) }; }
    let msg = RECENT.with(|r| r.borrow_mut().take());
    HELD.with(|h| {
        let mut h = h.borrow_mut();
        *h = msg;
        h.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())
    })
}

/// The calling thread's last error; `reset` clears it (`aclrtGetLastError` vs `Peek`).
pub fn last_error(reset: bool) -> Code {
    LAST_ERROR.with(|l| if reset { std::mem::take(&mut *l.borrow_mut()) } else { *l.borrow() })
}

/// Runs an exported function's body: `Ok` is 0, a panic is `on_panic`, so no unwinding
/// crosses `extern "C"`.
pub fn entry(on_panic: Code, body: impl FnOnce() -> Res<()>) -> Code {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err(c)) => c,
        Err(_) => {
            eprintln!("gpupool-sim-npu: internal panic in a CANN call; returning {on_panic}");
            on_panic
        }
    }
}

/// Writes `value` through an application's out-pointer, refusing NULL with `null_code`.
pub(crate) fn out<T>(ptr: *mut T, value: T, null_code: Code, what: &str) -> Res<()> {
    if ptr.is_null() {
        return fail(null_code, || format!("{what} is NULL"));
    }
    // SAFETY: non-null; the API contract makes the caller responsible for it pointing to a `T`.
    unsafe { ptr.write_unaligned(value) };
    Ok(())
}
