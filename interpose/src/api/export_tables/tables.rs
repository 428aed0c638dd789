//! The driver-private tables this library serves, one line per slot (see
//! [`super::export_tables!`]); interpose/EXPORT_TABLES.md says for each slot what it does
//! and how we know. UUIDs are written in the byte order the caller passes them.

use super::export_tables;
use super::{cudart, integrity, storage, tools};
use gpupool_shim::cuda::{CUcontext, CUdevice, CUmodule, CUresult};
use std::os::raw::{c_char, c_int, c_uint, c_void};

export_tables! {
    /// What the runtime needs to run over a driver: modules from fat binaries, the primary
    /// context of a device.
    CUDART_INTERFACE = "6bd5fb6c-5bf4-e74a-8987-d93912fd9df9" [13] {
        0 => size;
        1 => module_from_fatbin(module: *mut CUmodule, wrapper: *const c_void) -> CUresult
            = cudart::module_from_fatbin;
        2 => primary_context(pctx: *mut CUcontext, dev: CUdevice) -> CUresult = cudart::primary_context;
        3 => unknown;
        4 => unknown;
        5 => unknown;
        6 => module_from_fatbin_ext(module: *mut CUmodule, wrapper: *const c_void, a3: *mut c_void,
            a4: *mut c_void, a5: c_uint) -> CUresult = cudart::module_from_fatbin_ext;
        7 => runtime_notice(value: usize) -> () = cudart::runtime_notice;
        8 => module_from_fatbin_header(header: *const c_void, module: *mut CUmodule, a3: *mut c_void,
            a4: *mut c_void, a5: c_uint) -> CUresult = cudart::module_from_fatbin_header;
        9 => unknown;
        10 => unknown;
        11 => unknown;
        12 => load_compilers() -> CUresult = cudart::load_compilers;
    }

    /// The runtime's error messages, handed to the driver's error log (CUDA 12.9+).
    ERROR_LOG = "f8cff951-2146-8b4e-b9e2-fb469e7c0dd9" [2] {
        0 => size;
        1 => log_message(component: *const c_char, level: c_int, format: *const c_char, args: *mut c_void) -> ()
            = tools::log_message;
    }

    /// Buffers the profiling tools' callback layer shares with the runtime.
    TOOLS_RUNTIME_CALLBACK_HOOKS = "a094798c-2e74-2e74-93f2-0800200c0a66" [7] {
        0 => size;
        1 => unknown;
        2 => callback_buffer(ptr: *mut *mut c_void, size: *mut usize) -> () = tools::callback_buffer;
        3 => unknown;
        4 => unknown;
        5 => unknown;
        6 => callback_flags(ptr: *mut *mut c_void, size: *mut usize) -> () = tools::callback_flags;
    }

    /// Per-thread state of the profiling tools' layer.
    TOOLS_TLS = "42d85a81-23f6-cb47-8298-f6e78a3aecdc" [4] {
        0 => size;
        1 => unknown;
        2 => unknown;
        3 => unknown;
    }

    /// The runtime's per-context state: a value per (context, key), with a destructor the
    /// driver calls when the context goes away.
    CONTEXT_LOCAL_STORAGE = "c693336e-1121-df11-a8c3-68f355d89593" [4] {
        0 => put(ctx: CUcontext, key: *mut c_void, value: *mut c_void, dtor: Option<storage::Destructor>)
            -> CUresult = storage::put;
        1 => delete(ctx: CUcontext, key: *mut c_void) -> CUresult = storage::delete;
        2 => get(value: *mut *mut c_void, ctx: CUcontext, key: *mut c_void) -> CUresult = storage::get;
        3 => unknown;
    }

    /// Proof that the driver is the one the runtime talks to (see [`integrity`]).
    INTEGRITY_CHECK = "d4082055-bde6-704b-8d34-ba123c66e1f2" [3] {
        0 => size;
        1 => integrity_check(version: u32, unix_seconds: u64, result: *mut [u64; 2]) -> CUresult
            = integrity::integrity_check;
        2 => unknown;
    }

    /// Checks the runtime makes of a context it is handed.
    CONTEXT_CHECKS = "263e8860-7cd2-6143-92f6-bbd5006dfa7e" [4] {
        0 => size;
        1 => unknown;
        2 => context_check(ctx: CUcontext, flags: *mut u32, extra: *mut *const c_void) -> CUresult
            = tools::context_check;
        3 => check_fn3() -> u32 = tools::check_fn3;
    }
}

/// "6bd5fb6c-5bf4-..." -> its 16 bytes, at compile time (a malformed literal fails the build).
pub const fn uuid_bytes(s: &str) -> [u8; 16] {
    let b = s.as_bytes();
    let mut out = [0u8; 16];
    let (mut i, mut n) = (0, 0);
    while i < b.len() {
        if b[i] == b'-' {
            i += 1;
            continue;
        }
        assert!(n < 16 && i + 1 < b.len(), "a UUID is 32 hex digits");
        out[n] = hex_digit(b[i]) << 4 | hex_digit(b[i + 1]);
        n += 1;
        i += 2;
    }
    assert!(n == 16, "a UUID is 32 hex digits");
    out
}

const fn hex_digit(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => panic!("not a hex digit"),
    }
}
