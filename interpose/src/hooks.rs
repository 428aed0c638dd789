//! The `dlopen` / `dlmopen` hooks: programs find the driver with `dlopen("libcuda.so.1")`
//! and `dlsym(handle, "cuGetProcAddress_v2")`, and a lookup on a library handle does not
//! see LD_PRELOAD symbols. So a `dlopen` of `libcuda.so*`, `libnvidia-ml.so*`,
//! `libcudart.so*` (frameworks that load the runtime lazily) or `libcublas.so*` /
//! `libcublasLt.so*` (cuBLAS, remoted to the daemon), by any path, returns a
//! handle to this library itself (no driver needs to exist on the client machine), and
//! glibc's `dlsym` on that handle finds our exports. `dlmopen` does the same for those
//! names in the base namespace (`LM_ID_BASE`); a new namespace does not see LD_PRELOAD,
//! so what a program loads there is left to glibc.
//!
//! Every other name is glibc's business, and glibc decides *from the caller*: `dlopen`
//! takes its own return address, finds the object that contains it, and searches that
//! object's DT_RPATH / DT_RUNPATH (with its `$ORIGIN`) for a bare name (this is how
//! `libnvrtc.so.12` finds `libnvrtc-builtins.so.12.9` next to itself); `dlmopen` with
//! `LM_ID_NEWLM` and `dlsym(RTLD_NEXT, …)` are relative to the caller in the same way. A
//! hook written as an ordinary function that calls the real `dlopen` makes *this* library
//! the caller, and every library that loads a neighbour by bare name then fails.
//!
//! How the caller is kept: the exported `dlopen` and `dlmopen` are naked trampolines
//! ([`trampoline`]). Each saves its argument registers, asks a Rust function here which
//! code should handle the call (the next definition after this library, found once with
//! `dlsym(RTLD_NEXT, …)`: glibc's, or that of a library preloaded after us, which then sees
//! the caller too; or [`own_handle_answer`]), restores the registers and the stack exactly
//! as they were at entry, and *jumps* there. The real `dlopen` then runs as if the program
//! had called it directly: same arguments, same return address, our frame gone (so a
//! library constructor that dlopens a vendor name inside it is answered like any caller).
//! Alternatives rejected: emulating the loader's search from the caller's link map
//! (`dladdr1` on the return address, then RPATH vs RUNPATH, `LD_LIBRARY_PATH` order,
//! `ld.so.cache`, `$ORIGIN`/`$LIB`/`$PLATFORM`, secure mode) would duplicate ld.so and
//! drift from it; glibc's internal `_dl_open`, which takes a caller address, is not
//! exported. On targets other than x86_64 and aarch64 the hooks are ordinary functions
//! and the real functions see this library as their caller (named in [`trampoline`]).
//!
//! With `GPUPOOL_CUDART=nvidia`, `libcudart.so*` is left to glibc: NVIDIA's runtime loads and
//! runs over this library's driver API (`gpupool run --cudart nvidia`).
//!
//! `dlsym` is not interposed: on our handle glibc's `dlsym` already answers from our
//! exports, and a hook could only make `RTLD_NEXT` mean "after libgpupool.so" instead of
//! "after the caller".
//!
//! A thread-local guard sends a `dlopen` that our own code causes while deciding (loading
//! a reference to ourselves) straight to the real function. Our code takes no lock and
//! allocates nothing (lazily filled atomics, so a `fork` at any point leaves nothing held),
//! and nothing here panics.

mod trampoline;

use std::cell::Cell;
use std::ffi::CStr;
use std::os::raw::{c_char, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

thread_local! {
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as deciding a hooked call for the guard's lifetime.
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

/// The next definition of `name` after this library (glibc's, unless a library preloaded
/// after us wraps it too), looked up once. 0 when there is none. Racing threads store the
/// same value.
fn next_definition(cache: &AtomicUsize, name: &CStr) -> usize {
    let cached = cache.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    // SAFETY: glibc's dlsym (not interposed) with RTLD_NEXT and a NUL-terminated name.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    cache.store(found, Ordering::Relaxed);
    found
}

fn real_dlopen() -> usize {
    static REAL: AtomicUsize = AtomicUsize::new(0);
    next_definition(&REAL, c"dlopen")
}

fn real_dlmopen() -> usize {
    static REAL: AtomicUsize = AtomicUsize::new(0);
    next_definition(&REAL, c"dlmopen")
}

/// This library's own handle, from a real `dlopen` of its own path (found with `dladdr`;
/// the library is already loaded, so that only takes a reference). 0 when that fails.
static OWN: AtomicUsize = AtomicUsize::new(0);

fn own_handle() -> usize {
    let cached = OWN.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    let real = real_dlopen();
    if real == 0 {
        return 0;
    }
    // SAFETY: Dl_info is plain data; zeroed is a valid initial value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr on the address of one of our own functions, writing `info`.
    if unsafe { libc::dladdr(own_handle as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return 0;
    }
    // SAFETY: `real` is the next `dlopen`, whose type this is.
    let dlopen: trampoline::DlopenFn = unsafe { std::mem::transmute::<usize, trampoline::DlopenFn>(real) };
    // SAFETY: the real dlopen with the NUL-terminated path dladdr reported. Two racing
    // threads take two references, which is harmless: this library is never unloaded.
    let handle = unsafe { dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_GLOBAL) } as usize;
    OWN.store(handle, Ordering::Relaxed);
    handle
}

/// Where a trampoline sends a call we answer: our handle, whatever the arguments the
/// trampoline left in the argument registers (a C callee may ignore them).
extern "C" fn own_handle_answer() -> *mut c_void {
    OWN.load(Ordering::Relaxed) as *mut c_void
}

/// Where a trampoline sends a call when the real function cannot be found (not on glibc).
extern "C" fn no_real_function() -> *mut c_void {
    std::ptr::null_mut()
}

/// Whether `GPUPOOL_CUDART=nvidia` (`gpupool run --cudart nvidia`) asks that a program loading
/// `libcudart.so*` get NVIDIA's runtime, which then runs over this library's driver API.
/// Read once, without allocating (0 unknown, 1 no, 2 yes).
fn nvidia_cudart() -> bool {
    static STATE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    match STATE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            // SAFETY: getenv with a NUL-terminated name; the result is NULL or a C string.
            let v = unsafe { libc::getenv(c"GPUPOOL_CUDART".as_ptr()) };
            // SAFETY: non-null: a NUL-terminated value owned by the environment.
            let yes = !v.is_null() && unsafe { CStr::from_ptr(v) }.to_bytes() == b"nvidia";
            STATE.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
            yes
        }
    }
}

/// Whether `name`'s file name is a vendor library we stand in for.
fn is_vendor(name: &CStr) -> bool {
    let b = name.to_bytes();
    let base = match b.iter().rposition(|&c| c == b'/') {
        Some(i) => &b[i + 1..],
        None => b,
    };
    if let Some(version) = base.strip_prefix(b"libcudart.so") {
        if nvidia_cudart() {
            return false;
        }
        // Which runtime the program asked for decides what cudaRuntimeGetVersion says.
        let major = match version {
            [b'.', b'1', b'2', ..] => 12,
            [b'.', b'1', b'3', ..] => 13,
            _ => 0,
        };
        if major != 0 {
            crate::runtime::DLOPENED_MAJOR.store(major, Ordering::Relaxed);
        }
        return true;
    }
    // libcublas.so* and libcublasLt.so*: cuBLAS runs in the daemon (crate::blas).
    base.starts_with(b"libcuda.so") || base.starts_with(b"libnvidia-ml.so") || base.starts_with(b"libcublas")
}

/// Whether a call loading `filename` gets our handle (never while our own code decides).
fn answer_with_own_handle(filename: *const c_char) -> bool {
    let guard = Guard::enter();
    if guard.nested() || filename.is_null() {
        return false;
    }
    // SAFETY: dlopen's contract: a non-null file name is NUL-terminated.
    let name = unsafe { CStr::from_ptr(filename) };
    is_vendor(name) && own_handle() != 0
}

/// The code `dlopen(filename, flags)` jumps to, with the caller's arguments and return
/// address: [`own_handle_answer`] for a vendor library, else the real `dlopen`.
extern "C" fn dlopen_target(filename: *const c_char) -> usize {
    if answer_with_own_handle(filename) {
        return own_handle_answer as *const () as usize;
    }
    match real_dlopen() {
        0 => no_real_function as *const () as usize,
        real => real,
    }
}

/// The code `dlmopen(lmid, filename, flags)` jumps to: as [`dlopen_target`] in the base
/// namespace; a new or other namespace always gets the real `dlmopen`.
extern "C" fn dlmopen_target(lmid: libc::Lmid_t, filename: *const c_char) -> usize {
    if lmid == libc::LM_ID_BASE && answer_with_own_handle(filename) {
        return own_handle_answer as *const () as usize;
    }
    match real_dlmopen() {
        0 => no_real_function as *const () as usize,
        real => real,
    }
}
