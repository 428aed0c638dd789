//! `dlopen` / `dlsym` hooks. Programs find the driver with `dlopen("libcuda.so.1")` and
//! `dlsym(handle, "cuGetProcAddress_v2")`; a lookup on a library handle does not see
//! LD_PRELOAD symbols, so `dlopen` of `libcuda.so*` / `libnvidia-ml.so*` /
//! `libcudart.so*` (frameworks that load the runtime lazily) returns a handle
//! to this library itself (no driver needs to exist on the client machine), and `dlsym`
//! answers lookups on that handle from our exports. Everything else goes to the real
//! functions: `dlopen` from `dlsym(RTLD_NEXT, "dlopen")`, `dlsym` from
//! `dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34")` (falling back to "GLIBC_2.2.5"). A
//! thread-local guard sends any lookup our own code makes while inside a hook straight to
//! the real functions. Nothing here allocates or panics.

use std::cell::Cell;
use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::OnceLock;

type DlopenFn = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;
type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

thread_local! {
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as inside a hook for the guard's lifetime.
struct Guard(bool);
impl Guard {
    fn enter() -> Guard {
        Guard(IN_HOOK.with(|g| g.replace(true)))
    }
    fn nested(&self) -> bool {
        self.0
    }
}
impl Drop for Guard {
    fn drop(&mut self) {
        let was = self.0;
        IN_HOOK.with(|g| g.set(was));
    }
}

fn real_dlsym() -> Option<DlsymFn> {
    static REAL: OnceLock<usize> = OnceLock::new();
    let p = *REAL.get_or_init(|| {
        for v in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: dlvsym with RTLD_NEXT and NUL-terminated names; it is not hooked.
            let p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), v.as_ptr()) };
            if !p.is_null() {
                return p as usize;
            }
        }
        0
    });
    // SAFETY: a non-zero value is glibc's dlsym, whose type is DlsymFn.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, DlsymFn>(p) })
}

fn real_dlopen() -> Option<DlopenFn> {
    static REAL: OnceLock<usize> = OnceLock::new();
    let p = *REAL.get_or_init(|| match real_dlsym() {
        // SAFETY: the real dlsym with RTLD_NEXT and a NUL-terminated name.
        Some(dlsym) => (unsafe { dlsym(libc::RTLD_NEXT, c"dlopen".as_ptr()) }) as usize,
        None => 0,
    });
    // SAFETY: a non-zero value is the next dlopen, whose type is DlopenFn.
    (p != 0).then(|| unsafe { std::mem::transmute::<usize, DlopenFn>(p) })
}

/// A handle to this library, from `dlopen` of its own path (found with `dladdr`).
fn own_handle() -> *mut c_void {
    static OWN: OnceLock<usize> = OnceLock::new();
    *OWN.get_or_init(|| {
        let Some(dlopen) = real_dlopen() else {
            return 0;
        };
        // SAFETY: Dl_info is plain data; zeroed is a valid initial value.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr on the address of one of our own functions, writing `info`.
        if unsafe { libc::dladdr(own_handle as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
            return 0;
        }
        // SAFETY: the real dlopen with the NUL-terminated path dladdr reported; this
        // library is already loaded, so this only takes a reference.
        unsafe { dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_GLOBAL) as usize }
    }) as *mut c_void
}

/// Whether `name`'s file name is a vendor library we stand in for.
fn is_vendor(name: &CStr) -> bool {
    let b = name.to_bytes();
    let base = match b.iter().rposition(|&c| c == b'/') {
        Some(i) => &b[i + 1..],
        None => b,
    };
    if let Some(version) = base.strip_prefix(b"libcudart.so") {
        // Which runtime the program asked for decides what cudaRuntimeGetVersion says.
        let major = match version {
            [b'.', b'1', b'2', ..] => 12,
            [b'.', b'1', b'3', ..] => 13,
            _ => 0,
        };
        if major != 0 {
            crate::runtime::DLOPENED_MAJOR.store(major, std::sync::atomic::Ordering::Relaxed);
        }
        return true;
    }
    base.starts_with(b"libcuda.so") || base.starts_with(b"libnvidia-ml.so")
}

/// # Safety
/// glibc's `dlopen` contract: `filename` is NULL or a NUL-terminated path.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void {
    let guard = Guard::enter();
    if !guard.nested() && !filename.is_null() {
        // SAFETY: dlopen's contract: a NUL-terminated file name.
        let name = unsafe { CStr::from_ptr(filename) };
        if is_vendor(name) {
            let own = own_handle();
            if !own.is_null() {
                return own;
            }
        }
    }
    match real_dlopen() {
        // SAFETY: forwarding the caller's arguments unchanged.
        Some(f) => unsafe { f(filename, flags) },
        None => std::ptr::null_mut(),
    }
}

/// # Safety
/// glibc's `dlsym` contract: a handle from `dlopen` (or RTLD_DEFAULT / RTLD_NEXT) and a
/// NUL-terminated symbol name.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    let Some(real) = real_dlsym() else {
        return std::ptr::null_mut();
    };
    let guard = Guard::enter();
    if !guard.nested()
        && !handle.is_null()
        && handle != libc::RTLD_NEXT
        && handle != libc::RTLD_DEFAULT
        && handle == own_handle()
    {
        // Our own handle: our exports answer (the real dlsym on our handle finds exactly
        // them, never another library's).
        // SAFETY: the real dlsym with our handle and the caller's NUL-terminated name.
        return unsafe { real(handle, symbol) };
    }
    // RTLD_NEXT is relative to the calling object, which glibc takes to be this library:
    // the application gets the next definition after us, never our own.
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { real(handle, symbol) }
}
