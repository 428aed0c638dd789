//! What a driver answers for features its devices do not have, shared by the simulator
//! and the interposer so both say the same: green contexts (SM partitions: the pool
//! shares a device by time, not by SMs, and the simulator has no SMs to split) and
//! multicast objects (NVLink SHARP: `CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED` is 0).
//! Also the registry behind `cuLogsRegisterCallback` / `cuLogsUnregisterCallback`.

use gpupool_shim::cuda::{CUlogsCallback, CUresult};
use std::collections::BTreeMap;
use std::os::raw::c_void;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// A refusal: the status code, and why (for the caller's log line).
pub type Refusal = (CUresult, &'static str);

/// `cuGreenCtxCreate`, `cuDeviceGetDevResource`, `cuDevSmResourceSplitByCount`,
/// `cuDevResourceGenerateDesc`: `CUDA_ERROR_NOT_SUPPORTED` (documented for
/// `cuGreenCtxCreate`; the resource queries lead only to it).
pub const GREEN_CONTEXTS: Refusal =
    (CUresult::CUDA_ERROR_NOT_SUPPORTED, "green contexts (SM partitions) are not offered on this device");

/// `cuCtxFromGreenCtx`, `cuGreenCtxDestroy`, `cuGreenCtxStreamCreate`: no green context
/// can exist, so every handle is invalid.
pub const NO_GREEN_CONTEXT: Refusal =
    (CUresult::CUDA_ERROR_INVALID_CONTEXT, "not a green context (none can be created on this device)");

/// `cuMulticast*`: the device's `CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED` is 0.
pub const MULTICAST: Refusal =
    (CUresult::CUDA_ERROR_NOT_SUPPORTED, "multicast objects need CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, which is 0");

/// Registered log callbacks. The driver's log entries are its error messages, which
/// go to its own log (`GPUPOOL_SIM_LOG`, the interposer's tracing); callbacks are
/// kept so that registration and removal behave as documented.
pub struct LogCallbacks {
    next: AtomicU64,
    live: Mutex<BTreeMap<u64, (usize, usize)>>,
}

impl Default for LogCallbacks {
    fn default() -> Self {
        Self::new()
    }
}

impl LogCallbacks {
    pub const fn new() -> LogCallbacks {
        LogCallbacks { next: AtomicU64::new(1), live: Mutex::new(BTreeMap::new()) }
    }

    /// `cuLogsRegisterCallback`: a non-NULL handle for a non-NULL callback.
    pub fn register(&self, callback: CUlogsCallback, user: *mut c_void) -> Result<u64, Refusal> {
        let Some(f) = callback else {
            return Err((CUresult::CUDA_ERROR_INVALID_VALUE, "null log callback"));
        };
        // Handles are small, never-reused numbers: never a pointer the caller could
        // dereference, never one that names a callback that was removed.
        let handle = self.next.fetch_add(1, Ordering::Relaxed) << 4;
        self.live.lock().unwrap_or_else(|e| e.into_inner()).insert(handle, (f as usize, user as usize));
        Ok(handle)
    }

    /// `cuLogsUnregisterCallback`: `CUDA_ERROR_INVALID_VALUE` for a handle not registered.
    pub fn unregister(&self, handle: u64) -> Result<(), Refusal> {
        match self.live.lock().unwrap_or_else(|e| e.into_inner()).remove(&handle) {
            Some(_) => Ok(()),
            None => Err((CUresult::CUDA_ERROR_INVALID_VALUE, "not a registered log callback")),
        }
    }

    pub fn len(&self) -> usize {
        self.live.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn cb(_: *mut c_void, _: gpupool_shim::cuda::CUlogLevel, _: *mut std::os::raw::c_char, _: usize) {
    }

    #[test]
    fn register_unregister() {
        let r = LogCallbacks::new();
        assert_eq!(r.register(None, std::ptr::null_mut()).unwrap_err().0, CUresult::CUDA_ERROR_INVALID_VALUE);
        let a = r.register(Some(cb), std::ptr::null_mut()).unwrap();
        let b = r.register(Some(cb), std::ptr::null_mut()).unwrap();
        assert_ne!(a, b);
        assert_ne!(a, 0);
        assert_eq!(r.len(), 2);
        r.unregister(a).unwrap();
        assert_eq!(r.unregister(a).unwrap_err().0, CUresult::CUDA_ERROR_INVALID_VALUE);
        assert_eq!(r.len(), 1);
    }
}
