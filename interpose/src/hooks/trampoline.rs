//! The exported `dlopen` and `dlmopen`: trampolines that let the code they pick (see
//! [`super`]) run as if the program had called it directly.
//!
//! On x86_64 and aarch64 each is a naked function: save the argument registers, call the
//! Rust function that picks the target (it takes the hooked function's leading arguments,
//! which are already in the right registers), restore the registers and the stack pointer
//! to their values at entry, and jump to the target. The return address (on the stack on
//! x86_64, in x30 on aarch64) is then the program's, so glibc's `RETURN_ADDRESS (0)`
//! names the caller's object, and our frame is gone before any library constructor runs.
//! The Rust function runs with a 16-byte aligned stack, as the C ABI requires at a call, and
//! call-frame information describes each step, so debuggers and profilers unwind through it.
//!
//! Elsewhere the hooks are ordinary functions that call the target themselves: the vendor
//! names are still answered, but glibc sees this library as the caller of the real
//! functions (a bare name is not looked up in the caller's RUNPATH).

use std::os::raw::{c_char, c_int, c_void};

pub(super) type DlopenFn = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;

#[cfg(target_arch = "x86_64")]
mod arch {
    use super::super::{dlmopen_target, dlopen_target};
    use std::os::raw::{c_char, c_int, c_void};

    /// # Safety
    /// glibc's `dlopen` contract: `filename` is NULL or a NUL-terminated path.
    // SAFETY: the body keeps the C ABI: callee-saved registers untouched, the stack and the
    // argument registers restored before the jump, the target's return is the caller's.
    #[unsafe(naked)]
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void {
        // rsp is 8 mod 16 at entry (the return address); three pushes align it for the call.
        core::arch::naked_asm!(
            ".cfi_startproc",
            "push rdi",
            ".cfi_adjust_cfa_offset 8",
            "push rsi",
            ".cfi_adjust_cfa_offset 8",
            "push rdx",
            ".cfi_adjust_cfa_offset 8",
            "call {target}",
            "pop rdx",
            ".cfi_adjust_cfa_offset -8",
            "pop rsi",
            ".cfi_adjust_cfa_offset -8",
            "pop rdi",
            ".cfi_adjust_cfa_offset -8",
            "jmp rax",
            ".cfi_endproc",
            target = sym dlopen_target,
        )
    }

    /// # Safety
    /// glibc's `dlmopen` contract: a namespace id and `filename` NULL or NUL-terminated.
    // SAFETY: as dlopen's.
    #[unsafe(naked)]
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn dlmopen(lmid: libc::Lmid_t, filename: *const c_char, flags: c_int) -> *mut c_void {
        core::arch::naked_asm!(
            ".cfi_startproc",
            "push rdi",
            ".cfi_adjust_cfa_offset 8",
            "push rsi",
            ".cfi_adjust_cfa_offset 8",
            "push rdx",
            ".cfi_adjust_cfa_offset 8",
            "call {target}",
            "pop rdx",
            ".cfi_adjust_cfa_offset -8",
            "pop rsi",
            ".cfi_adjust_cfa_offset -8",
            "pop rdi",
            ".cfi_adjust_cfa_offset -8",
            "jmp rax",
            ".cfi_endproc",
            target = sym dlmopen_target,
        )
    }
}

#[cfg(target_arch = "aarch64")]
mod arch {
    use super::super::{dlmopen_target, dlopen_target};
    use std::os::raw::{c_char, c_int, c_void};

    /// # Safety
    /// glibc's `dlopen` contract: `filename` is NULL or a NUL-terminated path.
    // SAFETY: the body keeps the C ABI: callee-saved registers untouched, the stack and the
    // argument registers restored before the jump, the target's return is the caller's.
    #[unsafe(naked)]
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void {
        // A frame record (x29, x30) and x0-x2 in 48 bytes; the target goes through x16,
        // the intra-procedure-call register a BTI `bti c` landing pad accepts.
        core::arch::naked_asm!(
            ".cfi_startproc",
            "stp x29, x30, [sp, #-48]!",
            ".cfi_def_cfa_offset 48",
            ".cfi_offset x29, -48",
            ".cfi_offset x30, -40",
            "mov x29, sp",
            "stp x0, x1, [sp, #16]",
            "str x2, [sp, #32]",
            "bl {target}",
            "mov x16, x0",
            "ldp x0, x1, [sp, #16]",
            "ldr x2, [sp, #32]",
            "ldp x29, x30, [sp], #48",
            ".cfi_def_cfa_offset 0",
            ".cfi_restore x29",
            ".cfi_restore x30",
            "br x16",
            ".cfi_endproc",
            target = sym dlopen_target,
        )
    }

    /// # Safety
    /// glibc's `dlmopen` contract: a namespace id and `filename` NULL or NUL-terminated.
    // SAFETY: as dlopen's.
    #[unsafe(naked)]
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn dlmopen(lmid: libc::Lmid_t, filename: *const c_char, flags: c_int) -> *mut c_void {
        core::arch::naked_asm!(
            ".cfi_startproc",
            "stp x29, x30, [sp, #-48]!",
            ".cfi_def_cfa_offset 48",
            ".cfi_offset x29, -48",
            ".cfi_offset x30, -40",
            "mov x29, sp",
            "stp x0, x1, [sp, #16]",
            "str x2, [sp, #32]",
            "bl {target}",
            "mov x16, x0",
            "ldp x0, x1, [sp, #16]",
            "ldr x2, [sp, #32]",
            "ldp x29, x30, [sp], #48",
            ".cfi_def_cfa_offset 0",
            ".cfi_restore x29",
            ".cfi_restore x30",
            "br x16",
            ".cfi_endproc",
            target = sym dlmopen_target,
        )
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod arch {
    use super::super::{dlmopen_target, dlopen_target};
    use super::DlopenFn;
    use std::os::raw::{c_char, c_int, c_void};

    type DlmopenFn = unsafe extern "C" fn(libc::Lmid_t, *const c_char, c_int) -> *mut c_void;

    /// # Safety
    /// glibc's `dlopen` contract: `filename` is NULL or a NUL-terminated path.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void {
        // SAFETY: the target is the real dlopen or an answer that ignores its arguments.
        let target = unsafe { std::mem::transmute::<usize, DlopenFn>(dlopen_target(filename)) };
        // SAFETY: forwarding the caller's arguments unchanged.
        unsafe { target(filename, flags) }
    }

    /// # Safety
    /// glibc's `dlmopen` contract: a namespace id and `filename` NULL or NUL-terminated.
    #[unsafe(no_mangle)]
    pub unsafe extern "C" fn dlmopen(lmid: libc::Lmid_t, filename: *const c_char, flags: c_int) -> *mut c_void {
        // SAFETY: the target is the real dlmopen or an answer that ignores its arguments.
        let target = unsafe { std::mem::transmute::<usize, DlmopenFn>(dlmopen_target(lmid, filename)) };
        // SAFETY: forwarding the caller's arguments unchanged.
        unsafe { target(lmid, filename, flags) }
    }
}
