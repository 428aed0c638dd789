//! Memory as a kernel thread sees it: state spaces, generic addresses, the checks
//! that turn a stray access into a fault, and atomics.

use super::{Block, Fault, LOCAL_BASE, SHARED_BASE, WINDOW};
use crate::exec::ir::{Addr, AddrBase, Atomic, Bin, Round, Space, Ty};
use crate::exec::ops;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

impl Block<'_> {
    pub(super) fn fault_illegal(&self, space: Space, addr: u64, len: u64, write: bool, t: usize) -> Fault {
        Fault::Illegal { space, addr, len, write, thread: self.tid(t), block: self.ctaid }
    }

    /// Host pointer for `len` bytes at `addr` in `space`, as thread `t` sees it.
    pub(super) fn access(
        &mut self,
        space: Space,
        addr: u64,
        len: u64,
        write: bool,
        t: usize,
    ) -> Result<*mut u8, Fault> {
        let (space, addr) = match space {
            Space::Generic => match addr {
                a if (SHARED_BASE..SHARED_BASE + WINDOW).contains(&a) => (Space::Shared, a - SHARED_BASE),
                a if (LOCAL_BASE..LOCAL_BASE + WINDOW).contains(&a) => (Space::Local, a - LOCAL_BASE),
                a => (Space::Global, a),
            },
            s => (s, addr),
        };
        let ptr = match space {
            Space::Global | Space::Const | Space::Generic => {
                if len > 1 && addr % len.min(16) != 0 {
                    return Err(Fault::Misaligned { addr, len, thread: self.tid(t), block: self.ctaid });
                }
                self.l.memory.translate(addr, len)
            }
            Space::Shared => (addr.checked_add(len).is_some_and(|e| e <= self.shared_len)).then(|| {
                // SAFETY: within the block's shared buffer (checked above).
                unsafe { self.shared.as_mut_ptr().cast::<u8>().add(addr as usize) }
            }),
            Space::Local => (addr.checked_add(len).is_some_and(|e| e <= self.local_len)).then(|| {
                let base = t as u64 * self.local_len.next_multiple_of(8);
                // SAFETY: within this thread's slice of the local buffer (checked above).
                unsafe { self.local.as_mut_ptr().cast::<u8>().add((base + addr) as usize) }
            }),
            Space::Param => {
                let ok = !write && addr.checked_add(len).is_some_and(|e| e <= self.l.params.len() as u64);
                ok.then(|| self.l.params.as_ptr().wrapping_add(addr as usize) as *mut u8)
            }
        };
        ptr.ok_or_else(|| self.fault_illegal(space, addr, len, write, t))
    }

    /// The address an operand names for thread `t`, and its state space: a symbol's
    /// own space wins over the instruction's (a call's `.param` slots live in local
    /// memory though `st.param` names them).
    pub(super) fn address(&self, a: &Addr, space: Space, t: usize) -> (u64, Space) {
        let (base, sym_space) = match &a.base {
            AddrBase::Reg(r) => (self.reg(*r, t), None),
            AddrBase::Imm(v, s) => (*v, *s),
        };
        (base.wrapping_add(a.offset as u64), sym_space.unwrap_or(space))
    }

    pub(super) fn load(&mut self, space: Space, ty: Ty, addr: u64, t: usize) -> Result<u64, Fault> {
        let len = ty.bytes() as u64;
        let p = self.access(space, addr, len, false, t)?;
        let mut buf = [0u8; 8];
        // SAFETY: `p` points to `len` (<= 8) readable bytes, per `access`.
        unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), len as usize) };
        let v = u64::from_le_bytes(buf);
        Ok(if ty.is_signed() { ops::sext(v, ty.bits()) as u64 } else { v })
    }

    pub(super) fn store(&mut self, space: Space, ty: Ty, addr: u64, v: u64, t: usize) -> Result<(), Fault> {
        let len = ty.bytes();
        let p = self.access(space, addr, len as u64, true, t)?;
        // SAFETY: `p` points to `len` (<= 8) writable bytes, per `access`.
        unsafe { std::ptr::copy_nonoverlapping(v.to_le_bytes().as_ptr(), p, len) };
        Ok(())
    }

    /// `operands` are the atomic's value and, for `cas`, the swap value.
    pub(super) fn atomic(
        &mut self,
        space: Space,
        kind: Atomic,
        ty: Ty,
        addr: u64,
        operands: (u64, u64),
        t: usize,
    ) -> Result<u64, Fault> {
        let (a, b) = operands;
        let len = ty.bytes() as u64;
        let p = self.access(space, addr, len, true, t)?;
        if !(p as usize).is_multiple_of(len as usize) {
            return Err(Fault::Misaligned { addr, len, thread: self.tid(t), block: self.ctaid });
        }
        let update = |old: u64| -> u64 {
            match kind {
                Atomic::Add => ops::bin(Bin::Add, ty, Round::Nearest, false, old, a),
                Atomic::Min => ops::bin(Bin::Min, ty, Round::Nearest, false, old, a),
                Atomic::Max => ops::bin(Bin::Max, ty, Round::Nearest, false, old, a),
                Atomic::Exch => a,
                Atomic::Cas => {
                    if old & ty.mask() == a & ty.mask() {
                        b
                    } else {
                        old
                    }
                }
                Atomic::And => old & a,
                Atomic::Or => old | a,
                Atomic::Xor => old ^ a,
                Atomic::Inc => {
                    if (old as u32) >= (a as u32) {
                        0
                    } else {
                        old.wrapping_add(1)
                    }
                }
                Atomic::Dec => {
                    if old as u32 == 0 || (old as u32) > (a as u32) {
                        a
                    } else {
                        old.wrapping_sub(1)
                    }
                }
            }
        };
        let old = match len {
            4 => {
                // SAFETY: aligned (checked) and valid for 4 bytes; other streams may
                // touch the same memory concurrently, so access it atomically.
                let cell = unsafe { AtomicU32::from_ptr(p.cast()) };
                cell.fetch_update(Ordering::AcqRel, Ordering::Acquire, |o| Some(update(o as u64) as u32))
                    .unwrap_or_else(|o| o) as u64
            }
            8 => {
                // SAFETY: as above, for 8 bytes.
                let cell = unsafe { AtomicU64::from_ptr(p.cast()) };
                cell.fetch_update(Ordering::AcqRel, Ordering::Acquire, |o| Some(update(o))).unwrap_or_else(|o| o)
            }
            _ => {
                let old = self.load(space, ty, addr, t)?;
                self.store(space, ty, addr, update(old), t)?;
                old
            }
        };
        Ok(if ty.is_signed() { ops::sext(old, ty.bits()) as u64 } else { old })
    }
}
