//! The error-log table (ERROR_LOG), the tools' callback buffers and the context checks:
//! the slots whose work stays in this process.

use crate::util::R;
use gpupool_shim::cuda::CUcontext;
use std::cell::UnsafeCell;
use std::os::raw::{c_char, c_int, c_void};

unsafe extern "C" {
    fn vsnprintf(buf: *mut c_char, n: usize, format: *const c_char, args: *mut c_void) -> c_int;
}

/// ERROR_LOG slot 1: the runtime reports an error message ("%s cannot be NULL", ...) as
/// component, level, printf format and `va_list`; the driver keeps it in its error log.
/// Here it becomes a `GPUPOOL_LOG` line.
pub fn log_message(component: *const c_char, level: c_int, format: *const c_char, args: *mut c_void) {
    if format.is_null() {
        return;
    }
    let mut buf = [0 as c_char; 512];
    // SAFETY: `format` and `args` are the caller's printf format and its va_list (the
    // caller passes `va_list` as the pointer it decays to); the buffer's length is given.
    let n = unsafe { vsnprintf(buf.as_mut_ptr(), buf.len(), format, args) };
    if n < 0 {
        return;
    }
    // SAFETY: vsnprintf NUL-terminates within the buffer.
    let text = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
    let component = if component.is_null() {
        "?".into()
    } else {
        // SAFETY: a non-NULL component is a NUL-terminated name ("CUDA").
        unsafe { std::ffi::CStr::from_ptr(component) }.to_string_lossy()
    };
    crate::util::log(&format!("{component} runtime error log (level {level}): {text}"));
}

/// A zeroed buffer the runtime's tools layer reads and writes through a pointer we hand out.
struct SharedBuffer<const N: usize>(UnsafeCell<[u32; N]>);
// SAFETY: the buffer is only ever handed to the runtime as a raw pointer; this library
// never reads or writes it, so there is no Rust-side access to synchronise.
unsafe impl<const N: usize> Sync for SharedBuffer<N> {}

static CALLBACK_BUFFER: SharedBuffer<1024> = SharedBuffer(UnsafeCell::new([0; 1024]));
static CALLBACK_FLAGS: SharedBuffer<14> = SharedBuffer(UnsafeCell::new([0; 14]));

fn hand_out<const N: usize>(b: &'static SharedBuffer<N>, ptr: *mut *mut c_void, size: *mut usize) {
    crate::api::export::put(ptr, b.0.get().cast::<c_void>());
    crate::api::export::put(size, N);
}

/// TOOLS_RUNTIME_CALLBACK_HOOKS slot 2: the callback table's buffer and its length in
/// 32-bit words; zeroed, i.e. no tool subscribed.
pub fn callback_buffer(ptr: *mut *mut c_void, size: *mut usize) {
    hand_out(&CALLBACK_BUFFER, ptr, size)
}

/// TOOLS_RUNTIME_CALLBACK_HOOKS slot 6: the per-domain enable flags, all off.
pub fn callback_flags(ptr: *mut *mut c_void, size: *mut usize) {
    hand_out(&CALLBACK_FLAGS, ptr, size)
}

/// CONTEXT_CHECKS slot 2: flags the driver reports for a context; none apply to ours.
pub fn context_check(_ctx: CUcontext, flags: *mut u32, _extra: *mut *const c_void) -> R<()> {
    crate::util::out(flags, 0)
}

/// CONTEXT_CHECKS slot 3: always 0 on NVIDIA's driver.
pub fn check_fn3() -> u32 {
    0
}
