//! The executor: runs a decoded kernel over its grid, one block at a time.
//!
//! Within a block every thread has its own program counter. Each step runs the
//! instruction at the lowest pending counter for every thread waiting there, so
//! threads reconverge after divergent branches, all threads of a warp reach a
//! `shfl`/`vote` together, and `bar.sync` holds until every thread that is still
//! running has reached it. When all threads share one counter (the common case)
//! the step runs them all without scanning.

use super::ir::*;
use super::ops;
use crate::memory::{Allocation, PinnedBlock};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Generic addresses of the shared and local windows: above the 47-bit user address
/// space, so they never collide with a device or host pointer.
pub const SHARED_BASE: u64 = 1 << 48;
pub const LOCAL_BASE: u64 = 2 << 48;
const WINDOW: u64 = 1 << 48;

pub struct Program {
    pub instrs: Vec<Instr>,
    pub nregs: usize,
    pub shared_static: u64,
    pub local_bytes: u64,
}

/// Device memory a kernel may touch: its context's allocations and page-locked
/// host memory, held alive for the launch.
pub struct MemoryMap {
    regions: Vec<(u64, u64, usize)>,
    _keep: (Vec<Arc<Allocation>>, Vec<Arc<PinnedBlock>>),
}

impl MemoryMap {
    pub fn new(allocs: Vec<Arc<Allocation>>, pinned: Vec<Arc<PinnedBlock>>) -> MemoryMap {
        let mut regions: Vec<(u64, u64, usize)> = allocs
            .iter()
            .filter_map(|a| a.host_ptr(0, a.size).map(|p| (a.base, a.end(), p as usize)))
            .chain(pinned.iter().map(|b| (b.addr(), b.addr() + b.len, b.addr() as usize)))
            .collect();
        regions.sort_unstable_by_key(|r| r.0);
        MemoryMap { regions, _keep: (allocs, pinned) }
    }

    /// A map over raw regions `(device base, device end, host address)`, for tests.
    #[cfg(test)]
    pub fn from_regions(regions: Vec<(u64, u64, usize)>) -> MemoryMap {
        MemoryMap { regions, _keep: (Vec::new(), Vec::new()) }
    }

    fn translate(&self, addr: u64, len: u64) -> Option<*mut u8> {
        let i = self.regions.partition_point(|r| r.0 <= addr);
        let (base, end, host) = *self.regions.get(i.checked_sub(1)?)?;
        (addr.checked_add(len)? <= end).then(|| (host + (addr - base) as usize) as *mut u8)
    }
}

pub struct Launch<'a> {
    pub program: &'a Program,
    pub kernel: &'a str,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dynamic_shared: u32,
    pub params: &'a [u8],
    pub memory: &'a MemoryMap,
    pub sms: u32,
    pub clock_mhz: u32,
}

/// Why a kernel stopped early.
#[derive(Debug)]
pub enum Fault {
    Illegal { space: Space, addr: u64, len: u64, write: bool, thread: [u32; 3], block: [u32; 3] },
    Misaligned { addr: u64, len: u64, thread: [u32; 3], block: [u32; 3] },
    Trap { thread: [u32; 3], block: [u32; 3] },
    Assert { message: String, thread: [u32; 3], block: [u32; 3] },
}

/// A device function activation: where to resume, and the return value to hand back.
struct Frame {
    return_pc: u32,
    copy_out: Option<(u64, u64, u64)>,
}

/// `next` value of a thread that has finished.
const EXITED: u64 = u64::MAX;

struct Block<'a> {
    l: &'a Launch<'a>,
    n: usize,
    ctaid: [u32; 3],
    regs: Vec<u64>,
    pc: Vec<u32>,
    alive: Vec<bool>,
    /// u64 words, so atomics on shared and local memory are aligned.
    shared: Vec<u64>,
    shared_len: u64,
    local: Vec<u64>,
    local_len: u64,
    act: Vec<u32>,
    in_act: Vec<bool>,
    scratch: Vec<u64>,
    /// After a control-flow instruction: each executing thread's next pc, or EXITED.
    next: Vec<u64>,
    frames: Vec<Vec<Frame>>,
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

impl<'a> Block<'a> {
    fn tid(&self, t: usize) -> [u32; 3] {
        let [bx, by, _] = self.l.block;
        let t = t as u32;
        [t % bx, (t / bx) % by, t / (bx * by)]
    }

    #[inline]
    fn reg(&self, r: u16, t: usize) -> u64 {
        self.regs[r as usize * self.n + t]
    }

    #[inline]
    fn set(&mut self, r: u16, t: usize, v: u64) {
        let n = self.n;
        self.regs[r as usize * n + t] = v;
    }

    fn special(&self, s: Sreg, t: usize) -> u64 {
        let l = self.l;
        match s {
            Sreg::Tid(a) => self.tid(t)[a as usize] as u64,
            Sreg::Ntid(a) => l.block[a as usize] as u64,
            Sreg::Ctaid(a) => self.ctaid[a as usize] as u64,
            Sreg::Nctaid(a) => l.grid[a as usize] as u64,
            Sreg::Laneid => (t % 32) as u64,
            Sreg::Warpid => (t / 32) as u64,
            Sreg::Nwarpid => self.n.div_ceil(32) as u64,
            Sreg::Smid => {
                let linear = self.ctaid[0] as u64 + self.ctaid[1] as u64 * l.grid[0] as u64;
                linear % l.sms.max(1) as u64
            }
            Sreg::Nsmid => l.sms as u64,
            Sreg::Gridid => 1,
            Sreg::Clock => (now_ns().wrapping_mul(l.clock_mhz as u64) / 1000) & 0xffff_ffff,
            Sreg::Clock64 => now_ns().wrapping_mul(l.clock_mhz as u64) / 1000,
            Sreg::Globaltimer => now_ns(),
            Sreg::GlobaltimerLo => now_ns() & 0xffff_ffff,
            Sreg::GlobaltimerHi => now_ns() >> 32,
            Sreg::Lanemask(k) => {
                let lane = (t % 32) as u32;
                let bit = 1u64 << lane;
                (match k {
                    0 => bit,
                    1 => (bit << 1) - 1,
                    2 => bit - 1,
                    3 => !(bit - 1),
                    _ => !((bit << 1) - 1),
                }) & 0xffff_ffff
            }
            Sreg::DynSmem => l.dynamic_shared as u64,
            Sreg::TotalSmem => self.shared_len,
            Sreg::Zero => 0,
        }
    }

    #[inline]
    fn rd(&self, op: &Operand, t: usize) -> u64 {
        match op {
            Operand::Reg(r) => self.reg(*r, t),
            Operand::Imm(v) => *v,
            Operand::NotPred(r) => (self.reg(*r, t) & 1) ^ 1,
            Operand::Special(s) => self.special(*s, t),
            Operand::Vec(_) | Operand::Sink => 0,
        }
    }

    #[inline]
    fn wr(&mut self, op: &Operand, t: usize, v: u64) {
        if let Operand::Reg(r) = op {
            self.set(*r, t, v);
        }
    }

    fn fault_illegal(&self, space: Space, addr: u64, len: u64, write: bool, t: usize) -> Fault {
        Fault::Illegal { space, addr, len, write, thread: self.tid(t), block: self.ctaid }
    }

    /// Host pointer for `len` bytes at `addr` in `space`, as thread `t` sees it.
    fn access(&mut self, space: Space, addr: u64, len: u64, write: bool, t: usize) -> Result<*mut u8, Fault> {
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
    fn address(&self, a: &Addr, space: Space, t: usize) -> (u64, Space) {
        let (base, sym_space) = match &a.base {
            AddrBase::Reg(r) => (self.reg(*r, t), None),
            AddrBase::Imm(v, s) => (*v, *s),
        };
        (base.wrapping_add(a.offset as u64), sym_space.unwrap_or(space))
    }

    fn load(&mut self, space: Space, ty: Ty, addr: u64, t: usize) -> Result<u64, Fault> {
        let len = ty.bytes() as u64;
        let p = self.access(space, addr, len, false, t)?;
        let mut buf = [0u8; 8];
        // SAFETY: `p` points to `len` (<= 8) readable bytes, per `access`.
        unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), len as usize) };
        let v = u64::from_le_bytes(buf);
        Ok(if ty.is_signed() { ops::sext(v, ty.bits()) as u64 } else { v })
    }

    fn store(&mut self, space: Space, ty: Ty, addr: u64, v: u64, t: usize) -> Result<(), Fault> {
        let len = ty.bytes();
        let p = self.access(space, addr, len as u64, true, t)?;
        // SAFETY: `p` points to `len` (<= 8) writable bytes, per `access`.
        unsafe { std::ptr::copy_nonoverlapping(v.to_le_bytes().as_ptr(), p, len) };
        Ok(())
    }

    /// `operands` are the atomic's value and, for `cas`, the swap value.
    fn atomic(&mut self, space: Space, kind: Atomic, ty: Ty, addr: u64, operands: (u64, u64), t: usize) -> Result<u64, Fault> {
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

    /// Runs the block to completion.
    fn run(&mut self) -> Result<(), Fault> {
        let instrs = &self.l.program.instrs;
        let mut converged: Option<u32> = Some(0);
        self.act.clear();
        self.act.extend(0..self.n as u32);
        let mut act_is_all = true;
        loop {
            let pc = match converged {
                Some(pc) => {
                    if !act_is_all {
                        self.act.clear();
                        let alive = &self.alive;
                        self.act.extend((0..self.n as u32).filter(|&t| alive[t as usize]));
                        act_is_all = true;
                    }
                    if self.act.is_empty() {
                        return Ok(());
                    }
                    pc
                }
                None => {
                    let mut min = u32::MAX;
                    for t in 0..self.n {
                        if self.alive[t] && self.pc[t] < min {
                            min = self.pc[t];
                        }
                    }
                    if min == u32::MAX {
                        return Ok(());
                    }
                    self.act.clear();
                    for t in 0..self.n {
                        if self.alive[t] && self.pc[t] == min {
                            self.act.push(t as u32);
                        }
                    }
                    act_is_all = false;
                    min
                }
            };
            let ins = &instrs[pc as usize];
            let flow = self.step(ins, pc)?;
            match flow {
                Flow::Next => match converged {
                    Some(p) => converged = Some(p + 1),
                    None => {
                        for i in 0..self.act.len() {
                            let t = self.act[i] as usize;
                            self.pc[t] = pc + 1;
                        }
                    }
                },
                Flow::Jump => {
                    let first = self.next[self.act[0] as usize];
                    let uniform = first != EXITED && self.act.iter().all(|&t| self.next[t as usize] == first);
                    if let Some(p) = converged {
                        if uniform {
                            converged = Some(first as u32);
                            continue;
                        }
                        for t in 0..self.n {
                            self.pc[t] = p;
                        }
                        converged = None;
                    }
                    act_is_all = false;
                    for i in 0..self.act.len() {
                        let t = self.act[i] as usize;
                        match self.next[t] {
                            EXITED => self.alive[t] = false,
                            n => self.pc[t] = n as u32,
                        }
                    }
                }
            }
            if converged.is_none() {
                // Reconverge when every live thread waits at the same instruction.
                let mut common = None;
                let mut same = true;
                for t in 0..self.n {
                    if self.alive[t] {
                        match common {
                            None => common = Some(self.pc[t]),
                            Some(c) if c != self.pc[t] => {
                                same = false;
                                break;
                            }
                            _ => {}
                        }
                    }
                }
                match common {
                    None => return Ok(()),
                    Some(c) if same => {
                        converged = Some(c);
                        act_is_all = false;
                    }
                    _ => {}
                }
            }
        }
    }

    /// Whether the guard lets thread `t` execute.
    #[inline]
    fn guarded(&self, guard: Option<(u16, bool)>, t: usize) -> bool {
        match guard {
            None => true,
            Some((r, neg)) => ((self.reg(r, t) & 1) != 0) != neg,
        }
    }

    fn step(&mut self, ins: &Instr, pc: u32) -> Result<Flow, Fault> {
        let g = ins.guard;
        let act = std::mem::take(&mut self.act);
        let r = self.exec(ins, g, &act, pc);
        self.act = act;
        r
    }

    fn exec(&mut self, ins: &Instr, g: Option<(u16, bool)>, act: &[u32], pc: u32) -> Result<Flow, Fault> {
        macro_rules! each {
            (|$t:ident| $body:expr) => {
                for &tt in act {
                    let $t = tt as usize;
                    if self.guarded(g, $t) {
                        $body;
                    }
                }
            };
        }
        match &ins.op {
            Op::Mov { ty, d, a } => match (d, a) {
                (Operand::Vec(parts), src) => {
                    let w = ty.bits() / parts.len() as u32;
                    let m = if w >= 64 { u64::MAX } else { (1u64 << w) - 1 };
                    each!(|t| {
                        let v = self.rd(src, t);
                        for (i, p) in parts.iter().enumerate() {
                            self.wr(p, t, (v >> (w * i as u32)) & m);
                        }
                    })
                }
                (dst, Operand::Vec(parts)) => {
                    let w = ty.bits() / parts.len() as u32;
                    let m = if w >= 64 { u64::MAX } else { (1u64 << w) - 1 };
                    each!(|t| {
                        let mut v = 0u64;
                        for (i, p) in parts.iter().enumerate() {
                            v |= (self.rd(p, t) & m) << (w * i as u32);
                        }
                        self.wr(dst, t, v)
                    })
                }
                (dst, src) => {
                    let mask = if *ty == Ty::Pred { 1 } else { ty.mask() };
                    each!(|t| {
                        let v = self.rd(src, t) & mask;
                        self.wr(dst, t, v)
                    })
                }
            },
            Op::Bin { kind, ty, rnd, sat, d, a, b } => {
                each!(|t| {
                    let v = ops::bin(*kind, *ty, *rnd, *sat, self.rd(a, t), self.rd(b, t));
                    self.wr(d, t, v)
                })
            }
            Op::Un { kind, ty, rnd, d, a } => each!(|t| {
                let v = match kind {
                    Un::Sqrt | Un::Rcp if ty.is_float() => ops::sqrt_rcp(*kind == Un::Sqrt, *ty, *rnd, self.rd(a, t)),
                    _ => ops::un(*kind, *ty, self.rd(a, t)),
                };
                self.wr(d, t, v)
            }),
            Op::Tern { kind, ty, rnd, sat, d, a, b, c } => each!(|t| {
                let v = ops::tern(*kind, *ty, *rnd, *sat, self.rd(a, t), self.rd(b, t), self.rd(c, t));
                self.wr(d, t, v)
            }),
            Op::Bfi { ty, d, a, b, pos, len } => each!(|t| {
                let v = ops::bfi(*ty, self.rd(a, t), self.rd(b, t), self.rd(pos, t), self.rd(len, t));
                self.wr(d, t, v)
            }),
            Op::Shf { left, clamp, d, a, b, c } => each!(|t| {
                let v = ops::funnel_shift(*left, *clamp, self.rd(a, t), self.rd(b, t), self.rd(c, t));
                self.wr(d, t, v)
            }),
            Op::Slct { ty, cty, d, a, b, c } => each!(|t| {
                let cv = self.rd(c, t);
                let nonneg = if cty.is_float() { ops::f(cv, *cty) >= 0.0 } else { (ops::int(cv, *cty) as i64) >= 0 };
                let v = if nonneg { self.rd(a, t) } else { self.rd(b, t) };
                self.wr(d, t, v & ty.mask())
            }),
            Op::Setp { cmp, ty, d, d2, a, b, combine } => each!(|t| {
                let mut p = ops::compare(*cmp, *ty, self.rd(a, t), self.rd(b, t));
                let mut q = !p;
                if let Some((op, c)) = combine {
                    let cv = self.rd(c, t) & 1 != 0;
                    let f = |x: bool| match op {
                        BoolOp::And => x && cv,
                        BoolOp::Or => x || cv,
                        BoolOp::Xor => x ^ cv,
                    };
                    (p, q) = (f(p), f(q));
                }
                self.set(*d, t, p as u64);
                if let Some(d2) = d2 {
                    self.set(*d2, t, q as u64);
                }
            }),
            Op::Set { cmp, ty, dty, d, a, b, combine } => each!(|t| {
                let mut p = ops::compare(*cmp, *ty, self.rd(a, t), self.rd(b, t));
                if let Some((op, c)) = combine {
                    let cv = self.rd(c, t) & 1 != 0;
                    p = match op {
                        BoolOp::And => p && cv,
                        BoolOp::Or => p || cv,
                        BoolOp::Xor => p ^ cv,
                    };
                }
                let v = if dty.is_float() {
                    ops::to_float(if p { 1.0 } else { 0.0 }, *dty, Round::Nearest)
                } else if p {
                    dty.mask()
                } else {
                    0
                };
                self.set(*d, t, v)
            }),
            Op::Cvt { dty, sty, rnd, int_round, sat, d, a } => each!(|t| {
                let v = ops::cvt(*dty, *sty, *rnd, *int_round, *sat, self.rd(a, t));
                self.wr(d, t, v)
            }),
            Op::Cvta { to, space, d, a } => {
                let base = match space {
                    Space::Shared => SHARED_BASE,
                    Space::Local => LOCAL_BASE,
                    _ => 0,
                };
                each!(|t| {
                    let v = self.rd(a, t);
                    let r = if *to { v.wrapping_sub(base) } else { v.wrapping_add(base) };
                    self.wr(d, t, r)
                })
            }
            Op::Ld { space, ty, n, d, addr } => {
                let step = ty.bytes() as u64;
                for &tt in act {
                    let t = tt as usize;
                    if !self.guarded(g, t) {
                        continue;
                    }
                    let (a, sp) = self.address(addr, *space, t);
                    if *n > 1 {
                        let total = step * *n as u64;
                        // The whole vector must be aligned to its size.
                        if matches!(sp, Space::Global | Space::Generic) && a % total != 0 {
                            return Err(Fault::Misaligned { addr: a, len: total, thread: self.tid(t), block: self.ctaid });
                        }
                    }
                    match d {
                        Operand::Vec(parts) => {
                            for (i, p) in parts.iter().enumerate() {
                                let v = self.load(sp, *ty, a + i as u64 * step, t)?;
                                self.wr(p, t, v);
                            }
                        }
                        dst => {
                            let v = self.load(sp, *ty, a, t)?;
                            self.wr(dst, t, v);
                        }
                    }
                }
            }
            Op::St { space, ty, n: _, addr, a } => {
                let step = ty.bytes() as u64;
                for &tt in act {
                    let t = tt as usize;
                    if !self.guarded(g, t) {
                        continue;
                    }
                    let (ad, sp) = self.address(addr, *space, t);
                    match a {
                        Operand::Vec(parts) => {
                            for (i, p) in parts.iter().enumerate() {
                                let v = self.rd(p, t);
                                self.store(sp, *ty, ad + i as u64 * step, v, t)?;
                            }
                        }
                        src => {
                            let v = self.rd(src, t);
                            self.store(sp, *ty, ad, v, t)?;
                        }
                    }
                }
            }
            Op::Atom { space, kind, ty, d, addr, a, b } => {
                for &tt in act {
                    let t = tt as usize;
                    if !self.guarded(g, t) {
                        continue;
                    }
                    let (ad, sp) = self.address(addr, *space, t);
                    let (av, bv) = (self.rd(a, t), b.as_ref().map(|b| self.rd(b, t)).unwrap_or(0));
                    let old = self.atomic(sp, *kind, *ty, ad, (av, bv), t)?;
                    self.wr(d, t, old);
                }
            }
            Op::Bra { target } => {
                for &tt in act {
                    let t = tt as usize;
                    self.next[t] = if self.guarded(g, t) { *target as u64 } else { pc as u64 + 1 };
                }
                return Ok(Flow::Jump);
            }
            Op::Exit => {
                for &tt in act {
                    let t = tt as usize;
                    self.next[t] = if self.guarded(g, t) { EXITED } else { pc as u64 + 1 };
                }
                return Ok(Flow::Jump);
            }
            Op::Ret => {
                for &tt in act {
                    let t = tt as usize;
                    self.next[t] = if !self.guarded(g, t) {
                        pc as u64 + 1
                    } else {
                        match self.frames[t].pop() {
                            None => EXITED,
                            Some(f) => {
                                if let Some((src, dst, len)) = f.copy_out {
                                    self.local_copy(t, src, dst, len);
                                }
                                f.return_pc as u64
                            }
                        }
                    };
                }
                return Ok(Flow::Jump);
            }
            Op::Call(call) => {
                for &tt in act {
                    let t = tt as usize;
                    self.next[t] = pc as u64 + 1;
                    if !self.guarded(g, t) {
                        continue;
                    }
                    match &call.callee {
                        Callee::Function(_) => {
                            for &(src, dst, len) in &call.copies_in {
                                self.local_copy(t, src, dst, len);
                            }
                            self.frames[t].push(Frame { return_pc: pc + 1, copy_out: call.copy_out });
                            self.next[t] = call.target_pc as u64;
                        }
                        Callee::Printf => {
                            let fmt = self.local_word(t, call.args.first().map(|a| a.0));
                            let args = self.local_word(t, call.args.get(1).map(|a| a.0));
                            let n = self.printf(t, fmt, args)?;
                            if let Some((dst, _)) = call.ret {
                                self.store(Space::Local, Ty::U32, dst, n as u64, t)?;
                            }
                        }
                        Callee::AssertFail => {
                            let word = |i: usize| call.args.get(i).map(|a| a.0);
                            let (m, f, l, func) =
                                (self.local_word(t, word(0)), self.local_word(t, word(1)), self.local_word(t, word(2)), self.local_word(t, word(3)));
                            let (message, file, line, function) =
                                (self.c_string(t, m), self.c_string(t, f), l as u32, self.c_string(t, func));
                            return Err(Fault::Assert {
                                message: format!("{file}:{line}: {function}: Assertion `{message}` failed."),
                                thread: self.tid(t),
                                block: self.ctaid,
                            });
                        }
                    }
                }
                return Ok(Flow::Jump);
            }
            Op::Trap => {
                if let Some(&t) = act.iter().find(|&&t| self.guarded(g, t as usize)) {
                    return Err(Fault::Trap { thread: self.tid(t as usize), block: self.ctaid });
                }
            }
            Op::Barrier | Op::Nop => {}
            Op::BarRed { kind, d, a } => {
                let (mut count, mut all, mut any) = (0u64, true, false);
                for &tt in act {
                    let p = self.rd(a, tt as usize) & 1 != 0;
                    count += p as u64;
                    all &= p;
                    any |= p;
                }
                let v = match kind {
                    Vote::Ballot => count,
                    Vote::All => all as u64,
                    _ => any as u64,
                };
                for &tt in act {
                    self.wr(d, tt as usize, v);
                }
            }
            Op::Nanosleep { a } => {
                let mut ns = 0u64;
                each!(|t| ns = ns.max(self.rd(a, t) & 0xffff_ffff));
                // The hardware sleeps for at most about a millisecond per instruction.
                std::thread::sleep(Duration::from_nanos(ns.min(1_000_000)));
            }
            Op::Activemask { d } => {
                self.mark_active(act);
                each!(|t| {
                    let m = self.warp_mask(t);
                    self.wr(d, t, m)
                })
            }
            Op::Shfl { mode, d, p, a, b, c } => {
                self.mark_active(act);
                for &tt in act {
                    let t = tt as usize;
                    self.scratch[t] = self.rd(a, t);
                }
                let mut results: Vec<(usize, u64, bool)> = Vec::with_capacity(act.len());
                for &tt in act {
                    let t = tt as usize;
                    if !self.guarded(g, t) {
                        continue;
                    }
                    let lane = (t % 32) as u64;
                    let bval = self.rd(b, t) & 0x1f;
                    let cv = self.rd(c, t);
                    let (clamp, seg) = (cv & 0x1f, (cv >> 8) & 0x1f);
                    let max_lane = (lane & seg) | (clamp & !seg);
                    let min_lane = lane & seg;
                    let (j, ok) = match mode {
                        Shfl::Up => {
                            let j = lane as i64 - bval as i64;
                            (j, j >= max_lane as i64)
                        }
                        Shfl::Down => {
                            let j = (lane + bval) as i64;
                            (j, j <= max_lane as i64)
                        }
                        Shfl::Bfly => {
                            let j = (lane ^ bval) as i64;
                            (j, j <= max_lane as i64)
                        }
                        Shfl::Idx => {
                            let j = (min_lane | (bval & !seg)) as i64;
                            (j, j <= max_lane as i64)
                        }
                    };
                    let src = t - lane as usize + j.clamp(0, 31) as usize;
                    let v = if ok && src < self.n && self.in_act[src] { self.scratch[src] } else { self.scratch[t] };
                    results.push((t, v, ok));
                }
                for (t, v, ok) in results {
                    self.set(*d, t, v & 0xffff_ffff);
                    if let Some(p) = p {
                        self.set(*p, t, ok as u64);
                    }
                }
                self.unmark_active(act);
            }
            Op::Vote { mode, d, a } => {
                self.mark_active(act);
                for &tt in act {
                    let t = tt as usize;
                    self.scratch[t] = self.rd(a, t) & 1;
                }
                let mut out = Vec::with_capacity(act.len());
                for &tt in act {
                    let t = tt as usize;
                    if !self.guarded(g, t) {
                        continue;
                    }
                    let base = t - t % 32;
                    let (mut ballot, mut members) = (0u64, 0u64);
                    for lane in 0..32usize {
                        let u = base + lane;
                        if u < self.n && self.in_act[u] {
                            members |= 1 << lane;
                            ballot |= self.scratch[u] << lane;
                        }
                    }
                    let v = match mode {
                        Vote::Ballot => ballot,
                        Vote::All => (ballot == members) as u64,
                        Vote::Any => (ballot != 0) as u64,
                        Vote::Uni => (ballot == 0 || ballot == members) as u64,
                    };
                    out.push((t, v));
                }
                for (t, v) in out {
                    self.wr(d, t, v);
                }
                self.unmark_active(act);
            }
        }
        Ok(Flow::Next)
    }

    /// Copies `len` bytes within thread `t`'s local memory (call arguments).
    fn local_copy(&mut self, t: usize, src: u64, dst: u64, len: u64) {
        let stride = self.local_len.next_multiple_of(8) as usize;
        let bytes: &mut [u8] = bytemuck_bytes(&mut self.local);
        let base = t * stride;
        let (s, d, l) = (base + src as usize, base + dst as usize, len as usize);
        if s + l <= bytes.len() && d + l <= bytes.len() {
            bytes.copy_within(s..s + l, d);
        }
    }

    /// The 64-bit word in thread `t`'s local slot `at` (a call argument).
    fn local_word(&mut self, t: usize, at: Option<u64>) -> u64 {
        at.and_then(|a| self.load(Space::Local, Ty::U64, a, t).ok()).unwrap_or(0)
    }

    /// A NUL-terminated string at a generic address (at most 4 KiB, lossily decoded).
    fn c_string(&mut self, t: usize, addr: u64) -> String {
        let mut out = Vec::new();
        while out.len() < 4096 {
            match self.load(Space::Generic, Ty::U8, addr + out.len() as u64, t) {
                Ok(0) | Err(_) => break,
                Ok(b) => out.push(b as u8),
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Device `printf`: formats with the C library, one conversion at a time, reading
    /// each argument from the packed buffer at its natural alignment.
    fn printf(&mut self, t: usize, fmt: u64, args: u64) -> Result<i32, Fault> {
        let format = self.c_string(t, fmt);
        let mut out = String::new();
        let mut off = 0u64;
        let mut chars = format.char_indices().peekable();
        while let Some((i, ch)) = chars.next() {
            if ch != '%' {
                out.push(ch);
                continue;
            }
            let mut end = i + 1;
            let mut conv = None;
            for (j, c) in chars.by_ref() {
                end = j + c.len_utf8();
                if "diouxXcsfFeEgGaAp%n".contains(c) {
                    conv = Some(c);
                    break;
                }
            }
            let Some(conv) = conv else { break };
            let spec = &format[i..end];
            if conv == '%' {
                out.push('%');
                continue;
            }
            let long = spec.contains('l') || spec.contains('z') || spec.contains('j') || spec.contains('t');
            let size = match conv {
                'f' | 'F' | 'e' | 'E' | 'g' | 'G' | 'a' | 'A' | 's' | 'p' => 8,
                _ if long => 8,
                _ => 4,
            };
            off = off.next_multiple_of(size);
            let raw = self.load(Space::Generic, if size == 8 { Ty::U64 } else { Ty::U32 }, args + off, t)?;
            off += size;
            out.push_str(&c_format(spec, conv, raw, |addr| self.c_string(t, addr)));
        }
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(out.as_bytes());
        let _ = stdout.flush();
        Ok(out.len() as i32)
    }

    fn mark_active(&mut self, act: &[u32]) {
        for &t in act {
            self.in_act[t as usize] = true;
        }
    }

    fn unmark_active(&mut self, act: &[u32]) {
        for &t in act {
            self.in_act[t as usize] = false;
        }
    }

    fn warp_mask(&self, t: usize) -> u64 {
        let base = t - t % 32;
        (0..32).filter(|&l| base + l < self.n && self.in_act[base + l]).fold(0u64, |m, l| m | (1 << l))
    }
}

/// The bytes of a word buffer.
fn bytemuck_bytes(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: u8 has no alignment or validity requirements; the length covers exactly
    // the words' bytes, borrowed mutably for the same lifetime.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) }
}

/// One printf conversion, formatted by the C library so the output is exactly C's.
fn c_format(spec: &str, conv: char, raw: u64, mut string_at: impl FnMut(u64) -> String) -> String {
    let Ok(cspec) = std::ffi::CString::new(spec) else { return String::new() };
    let mut buf = vec![0u8; 512];
    let n = match conv {
        's' => {
            let s = std::ffi::CString::new(string_at(raw)).unwrap_or_default();
            // SAFETY: the spec holds exactly one conversion, of the type passed; the
            // buffer's length is passed, so snprintf never writes past it.
            unsafe { libc::snprintf(buf.as_mut_ptr().cast(), buf.len(), cspec.as_ptr(), s.as_ptr()) }
        }
        // SAFETY: as for %s, with a double.
        'f' | 'F' | 'e' | 'E' | 'g' | 'G' | 'a' | 'A' => unsafe {
            libc::snprintf(buf.as_mut_ptr().cast(), buf.len(), cspec.as_ptr(), f64::from_bits(raw))
        },
        // SAFETY: as above, with a 64-bit integer for long conversions and pointers.
        _ if spec.contains('l') || spec.contains('z') || spec.contains('j') || spec.contains('t') || conv == 'p' => unsafe {
            libc::snprintf(buf.as_mut_ptr().cast(), buf.len(), cspec.as_ptr(), raw)
        },
        // SAFETY: as above, with a 32-bit integer.
        _ => unsafe { libc::snprintf(buf.as_mut_ptr().cast(), buf.len(), cspec.as_ptr(), raw as u32) },
    };
    buf.truncate((n.max(0) as usize).min(buf.len() - 1));
    String::from_utf8_lossy(&buf).into_owned()
}

enum Flow {
    Next,
    /// Control flow: each executing thread's next pc is in `Block::next`.
    Jump,
}

/// Runs a whole launch, block after block.
pub fn run(l: &Launch) -> Result<(), Fault> {
    let n = l.block.iter().map(|&d| d as usize).product::<usize>();
    let shared_len = l.program.shared_static + l.dynamic_shared as u64;
    let local_len = l.program.local_bytes;
    let mut b = Block {
        l,
        n,
        ctaid: [0; 3],
        regs: vec![0; l.program.nregs.max(1) * n],
        pc: vec![0; n],
        alive: vec![true; n],
        shared: vec![0; (shared_len as usize).div_ceil(8)],
        shared_len,
        local: vec![0; (local_len.next_multiple_of(8) as usize / 8) * n],
        local_len,
        act: Vec::with_capacity(n),
        in_act: vec![false; n],
        scratch: vec![0; n],
        next: vec![0; n],
        frames: (0..n).map(|_| Vec::new()).collect(),
    };
    for z in 0..l.grid[2] {
        for y in 0..l.grid[1] {
            for x in 0..l.grid[0] {
                b.ctaid = [x, y, z];
                b.pc.fill(0);
                b.alive.fill(true);
                b.regs.fill(0);
                b.shared.fill(0);
                b.frames.iter_mut().for_each(Vec::clear);
                b.run()?;
            }
        }
    }
    Ok(())
}
