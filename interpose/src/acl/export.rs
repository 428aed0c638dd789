//! The exported AscendCL functions: CANN's names, each signature checked at compile time
//! against bindgen's declaration in `gpupool_shim::acl`, each body run under `catch_unwind`
//! (a panic answers ACL_ERROR_INTERNAL_ERROR and crosses nothing).

use super::*;
use std::sync::OnceLock;

macro_rules! exports {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $body:block )*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> aclError {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> aclError { $body }))
                .unwrap_or(acl::ACL_ERROR_INTERNAL_ERROR)
        }
        const _: unsafe extern "C" fn($($ty),*) -> aclError = gpupool_shim::acl::$name;
    )*};
}

/// The NPUs' names, NUL-terminated, for `aclrtGetSocName` (fixed once the list is known).
static SOC_NAMES: OnceLock<Vec<std::ffi::CString>> = OnceLock::new();

exports! {
    fn aclInit(_config_path: *const c_char) {
        status(with("aclInit", |c| {
            init(c)?;
            load_npus(c)?;
            let _ = SOC_NAMES.set(c.acl.names.iter().map(|n| std::ffi::CString::new(n.as_str()).unwrap_or_default()).collect());
            Ok(())
        }))
    }
    fn aclFinalize() {
        status(with("aclFinalize", |c| {
            if !c.acl.initialized {
                return Err(acl::ACL_ERROR_REPEAT_FINALIZE);
            }
            c.acl.initialized = false;
            Ok(())
        }))
    }
    fn aclrtGetDeviceCount(count: *mut u32) {
        status(with("aclrtGetDeviceCount", |c| {
            initialized(c)?;
            out(count, c.acl.npus.len() as u32)
        }))
    }
    fn aclrtSetDevice(device_id: i32) {
        status(with("aclrtSetDevice", |c| set_device(c, device_id)))
    }
    fn aclrtResetDevice(device_id: i32) {
        status(with("aclrtResetDevice", |c| reset_device(c, device_id)))
    }
    fn aclrtGetDevice(device_id: *mut i32) {
        status(with("aclrtGetDevice", |c| {
            let (_, x) = current(c)?;
            out(device_id, x.device)
        }))
    }
    fn aclrtGetRunMode(run_mode: *mut aclrtRunMode) {
        // The program runs on the host, its NPU reached through the pool.
        out(run_mode, aclrtRunMode::ACL_HOST).err().unwrap_or(SUCCESS)
    }
    fn aclrtCreateContext(context: *mut aclrtContext, device_id: i32) {
        status(with("aclrtCreateContext", |c| {
            if context.is_null() {
                return Err(INVALID_PARAM);
            }
            let h = create_context(c, device_id)?;
            out(context, h)
        }))
    }
    fn aclrtDestroyContext(context: aclrtContext) {
        status(with("aclrtDestroyContext", |c| destroy_context(c, context as u64)))
    }
    fn aclrtSetCurrentContext(context: aclrtContext) {
        status(with("aclrtSetCurrentContext: not a live context of this process", |c| {
            initialized(c)?;
            if context.is_null() {
                return Err(INVALID_PARAM);
            }
            if !c.acl.ctxs.contains_key(&(context as u64)) {
                return Err(acl::ACL_ERROR_RT_INVALID_HANDLE as aclError);
            }
            CURRENT.with(|x| *x.borrow_mut() = Some(context as u64));
            Ok(())
        }))
    }
    fn aclrtGetCurrentContext(context: *mut aclrtContext) {
        status(with("aclrtGetCurrentContext", |c| {
            let (h, _) = current(c)?;
            out(context, h as aclrtContext)
        }))
    }
    fn aclrtMalloc(dev_ptr: *mut *mut c_void, size: usize, policy: acl::aclrtMemMallocPolicy) {
        status(with("aclrtMalloc", |c| {
            if dev_ptr.is_null() {
                return Err(INVALID_PARAM);
            }
            let p = malloc(c, size, policy, true)?;
            out(dev_ptr, p)
        }))
    }
    fn aclrtMallocAlign32(dev_ptr: *mut *mut c_void, size: usize, policy: acl::aclrtMemMallocPolicy) {
        status(with("aclrtMallocAlign32", |c| {
            if dev_ptr.is_null() {
                return Err(INVALID_PARAM);
            }
            let p = malloc(c, size, policy, false)?;
            out(dev_ptr, p)
        }))
    }
    fn aclrtGetVersion(major: *mut i32, minor: *mut i32, patch: *mut i32) {
        // The AscendCL version whose ABI gpupool_acl.h declares.
        let r = out(major, acl::ACL_MAJOR_VERSION as i32)
            .and_then(|()| out(minor, acl::ACL_MINOR_VERSION as i32))
            .and_then(|()| out(patch, acl::ACL_PATCH_VERSION as i32));
        r.err().map_or(SUCCESS, |e| note_error(e, "aclrtGetVersion: a NULL out-pointer"))
    }
    fn aclrtPeekAtLastError(level: acl::aclrtLastErrLevel) {
        if level != acl::aclrtLastErrLevel::ACL_RT_THREAD_LEVEL { INVALID_PARAM } else { last_code(false) }
    }
    fn aclrtGetLastError(level: acl::aclrtLastErrLevel) {
        if level != acl::aclrtLastErrLevel::ACL_RT_THREAD_LEVEL { INVALID_PARAM } else { last_code(true) }
    }
    fn aclrtStreamQuery(stream: aclrtStream, st: *mut acl::aclrtStreamStatus) {
        status(with("aclrtStreamQuery", |c| {
            if st.is_null() {
                return Err(INVALID_PARAM);
            }
            let done = query_stream(c, stream)?;
            out(st, if done {
                acl::aclrtStreamStatus::ACL_STREAM_STATUS_COMPLETE
            } else {
                acl::aclrtStreamStatus::ACL_STREAM_STATUS_NOT_READY
            })
        }))
    }
    fn aclrtQueryEvent(event: acl::aclrtEvent, st: *mut acl::aclrtEventStatus) {
        status(with("aclrtQueryEvent", |c| {
            if st.is_null() {
                return Err(INVALID_PARAM);
            }
            let done = query_event(c, event)?;
            out(st, if done { acl::aclrtEventStatus::ACL_EVENT_STATUS_COMPLETE } else { acl::aclrtEventStatus::ACL_EVENT_STATUS_NOT_READY })
        }))
    }
    fn aclrtFree(dev_ptr: *mut c_void) {
        status(with("aclrtFree", |c| free(c, dev_ptr as u64)))
    }
    fn aclrtMallocHost(host_ptr: *mut *mut c_void, size: usize) {
        if host_ptr.is_null() || size == 0 {
            return note_error(INVALID_PARAM, "aclrtMallocHost: NULL or 0 bytes");
        }
        // Host memory stays the process's own: copies from it travel as pageable ones do.
        // SAFETY: plain malloc of a positive size.
        let p = unsafe { libc::malloc(size) };
        if p.is_null() {
            return note_error(acl::ACL_ERROR_BAD_ALLOC, "aclrtMallocHost: out of host memory");
        }
        status(out(host_ptr, p))
    }
    fn aclrtFreeHost(host_ptr: *mut c_void) {
        if host_ptr.is_null() {
            return note_error(INVALID_PARAM, "aclrtFreeHost: NULL");
        }
        // SAFETY: memory aclrtMallocHost returned, by the API's contract.
        unsafe { libc::free(host_ptr) };
        SUCCESS
    }
    fn aclrtMemcpy(dst: *mut c_void, dest_max: usize, src: *const c_void, count: usize, kind: aclrtMemcpyKind) {
        status(with("aclrtMemcpy", |c| memcpy(c, dst, dest_max, src, count, kind, None)))
    }
    fn aclrtMemcpyAsync(dst: *mut c_void, dest_max: usize, src: *const c_void, count: usize, kind: aclrtMemcpyKind, stream: aclrtStream) {
        status(with("aclrtMemcpyAsync", |c| memcpy(c, dst, dest_max, src, count, kind, Some(stream))))
    }
    fn aclrtMemset(dev_ptr: *mut c_void, max_count: usize, value: i32, count: usize) {
        status(with("aclrtMemset", |c| memset(c, dev_ptr, max_count, value, count, None)))
    }
    fn aclrtMemsetAsync(dev_ptr: *mut c_void, max_count: usize, value: i32, count: usize, stream: aclrtStream) {
        status(with("aclrtMemsetAsync", |c| memset(c, dev_ptr, max_count, value, count, Some(stream))))
    }
    fn aclrtGetMemInfo(attr: aclrtMemAttr, free: *mut usize, total: *mut usize) {
        status(with("aclrtGetMemInfo", |c| {
            if free.is_null() || total.is_null() {
                return Err(INVALID_PARAM);
            }
            let (f, t) = mem_info_of(c, attr.0)?;
            out(free, f)?;
            out(total, t)
        }))
    }
    fn aclrtCreateStream(stream: *mut aclrtStream) {
        status(with("aclrtCreateStream", |c| {
            if stream.is_null() {
                return Err(INVALID_PARAM);
            }
            let s = create_stream(c)?;
            out(stream, s)
        }))
    }
    fn aclrtDestroyStream(stream: aclrtStream) {
        status(with("aclrtDestroyStream", |c| destroy_stream(c, stream)))
    }
    fn aclrtSynchronizeStream(stream: aclrtStream) {
        status(with("aclrtSynchronizeStream", |c| synchronize_stream(c, stream)))
    }
    fn aclrtCreateEvent(event: *mut acl::aclrtEvent) {
        status(with("aclrtCreateEvent", |c| {
            if event.is_null() {
                return Err(INVALID_PARAM);
            }
            // CANN's default event: timed and synchronizable.
            let e = create_event(c, acl::ACL_EVENT_TIME_LINE | acl::ACL_EVENT_SYNC)?;
            out(event, e)
        }))
    }
    fn aclrtCreateEventWithFlag(event: *mut acl::aclrtEvent, flag: u32) {
        status(with("aclrtCreateEventWithFlag", |c| {
            if event.is_null() {
                return Err(INVALID_PARAM);
            }
            let e = create_event(c, flag)?;
            out(event, e)
        }))
    }
    fn aclrtDestroyEvent(event: acl::aclrtEvent) {
        status(with("aclrtDestroyEvent", |c| destroy_event(c, event)))
    }
    fn aclrtRecordEvent(event: acl::aclrtEvent, stream: aclrtStream) {
        status(with("aclrtRecordEvent", |c| event_on_stream(c, event, stream, false)))
    }
    fn aclrtStreamWaitEvent(stream: aclrtStream, event: acl::aclrtEvent) {
        status(with("aclrtStreamWaitEvent", |c| event_on_stream(c, event, stream, true)))
    }
    fn aclrtSynchronizeEvent(event: acl::aclrtEvent) {
        status(with("aclrtSynchronizeEvent", |c| synchronize_event(c, event)))
    }
    fn aclrtQueryEventStatus(event: acl::aclrtEvent, st: *mut acl::aclrtEventRecordedStatus) {
        status(with("aclrtQueryEventStatus", |c| {
            if st.is_null() {
                return Err(INVALID_PARAM);
            }
            let done = query_event(c, event)?;
            out(st, if done {
                acl::aclrtEventRecordedStatus::ACL_EVENT_RECORDED_STATUS_COMPLETE
            } else {
                acl::aclrtEventRecordedStatus::ACL_EVENT_RECORDED_STATUS_NOT_READY
            })
        }))
    }
    fn aclrtEventElapsedTime(ms: *mut f32, start: acl::aclrtEvent, end: acl::aclrtEvent) {
        status(with("aclrtEventElapsedTime", |c| {
            if ms.is_null() {
                return Err(INVALID_PARAM);
            }
            let v = elapsed(c, start, end)?;
            out(ms, v)
        }))
    }
    fn aclrtSynchronizeDevice() {
        status(with("aclrtSynchronizeDevice", synchronize_device))
    }
}

/// `aclrtGetSocName`: the current device's name (NULL before `aclInit` or without a device).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclrtGetSocName() -> *const c_char {
    std::panic::catch_unwind(|| {
        let i = client::with(|c| {
            Ok(current(c).ok().and_then(|(_, x)| c.acl.npus.get(x.device as usize).map(|n| n.name_index)))
        })
        .ok()
        .flatten();
        i.and_then(|i| SOC_NAMES.get()?.get(i)).map_or(std::ptr::null(), |n| n.as_ptr())
    })
    .unwrap_or(std::ptr::null())
}
const _: unsafe extern "C" fn() -> *const c_char = gpupool_shim::acl::aclrtGetSocName;

/// `aclGetRecentErrMsg`: the calling thread's last failure, or NULL when there was none.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclGetRecentErrMsg() -> *const c_char {
    LAST_ERROR
        .try_with(|e| {
            let e = e.borrow();
            if e.as_bytes().is_empty() { std::ptr::null() } else { e.as_ptr() }
        })
        .unwrap_or(std::ptr::null())
}
const _: unsafe extern "C" fn() -> *const c_char = gpupool_shim::acl::aclGetRecentErrMsg;

#[unsafe(no_mangle)]
pub extern "C" fn aclFloat16ToFloat(value: acl::aclFloat16) -> f32 {
    half::f16::from_bits(value).to_f32()
}
const _: unsafe extern "C" fn(acl::aclFloat16) -> f32 = gpupool_shim::acl::aclFloat16ToFloat;

#[unsafe(no_mangle)]
pub extern "C" fn aclFloatToFloat16(value: f32) -> acl::aclFloat16 {
    half::f16::from_f32(value).to_bits()
}
const _: unsafe extern "C" fn(f32) -> acl::aclFloat16 = gpupool_shim::acl::aclFloatToFloat16;

/// Bytes per element of a data type, 0 for one CANN does not size.
#[unsafe(no_mangle)]
pub extern "C" fn aclDataTypeSize(data_type: acl::aclDataType) -> usize {
    match data_type.0 {
        0 | 3 | 8 | 33 => 4,
        1 | 6 | 7 | 27 => 2,
        2 | 4 | 12 | 34..=37 => 1,
        9..=11 | 16 => 8,
        17 => 16,
        _ => 0,
    }
}
const _: unsafe extern "C" fn(acl::aclDataType) -> usize = gpupool_shim::acl::aclDataTypeSize;
