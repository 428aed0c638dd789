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
use crate::texture::{SurfObject, TexObject};
use std::collections::HashMap;
use std::sync::Arc;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod calls;
mod memory;
mod texture;
mod warp;

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
    /// It calls `vprintf` (reachable or not): launching it fixes the context's printf buffer.
    pub prints: bool,
}

/// Device memory a kernel may touch: its context's allocations and page-locked
/// host memory, held alive for the launch.
pub struct MemoryMap {
    regions: Vec<(u64, u64, usize)>,
    _keep: (Vec<Arc<Allocation>>, Vec<Arc<PinnedBlock>>),
    /// The context's texture and surface objects, by handle: a kernel reaches them
    /// through the 64-bit handles it is passed.
    textures: HashMap<u64, Arc<TexObject>>,
    surfaces: HashMap<u64, Arc<SurfObject>>,
    /// The launching context: conditional handles of its graphs are the ones a kernel may set.
    ctx_handle: u64,
}

impl MemoryMap {
    pub fn new(allocs: Vec<Arc<Allocation>>, pinned: Vec<Arc<PinnedBlock>>) -> MemoryMap {
        let mut regions: Vec<(u64, u64, usize)> = allocs
            .iter()
            .filter_map(|a| a.host_ptr(0, a.size).map(|p| (a.base, a.end(), p as usize)))
            .chain(pinned.iter().map(|b| (b.addr(), b.addr() + b.len, b.addr() as usize)))
            .collect();
        regions.sort_unstable_by_key(|r| r.0);
        MemoryMap {
            regions,
            _keep: (allocs, pinned),
            textures: HashMap::new(),
            surfaces: HashMap::new(),
            ctx_handle: 0,
        }
    }

    /// Adds the texture and surface objects the kernel may use.
    pub fn with_objects(
        mut self,
        textures: impl IntoIterator<Item = (u64, Arc<TexObject>)>,
        surfaces: impl IntoIterator<Item = (u64, Arc<SurfObject>)>,
    ) -> MemoryMap {
        self.textures.extend(textures);
        self.surfaces.extend(surfaces);
        self
    }

    /// The launching context's handle.
    pub fn in_context(mut self, ctx_handle: u64) -> MemoryMap {
        self.ctx_handle = ctx_handle;
        self
    }

    /// A map over raw regions `(device base, device end, host address)`, for tests.
    #[cfg(test)]
    pub fn from_regions(regions: Vec<(u64, u64, usize)>) -> MemoryMap {
        MemoryMap {
            regions,
            _keep: (Vec::new(), Vec::new()),
            textures: HashMap::new(),
            surfaces: HashMap::new(),
            ctx_handle: 0,
        }
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
    /// The launching context's preemption: consulted before each block ([`crate::preempt`]).
    pub preemption: Option<&'a crate::preempt::Preemption>,
    /// Where device `printf` goes, and the buffer's size at this launch; `None` prints at once.
    pub printf: Option<(&'a crate::printf::Fifo, usize)>,
}

/// Why a kernel stopped early.
#[derive(Debug)]
pub enum Fault {
    Illegal {
        space: Space,
        addr: u64,
        len: u64,
        write: bool,
        thread: [u32; 3],
        block: [u32; 3],
    },
    Misaligned {
        addr: u64,
        len: u64,
        thread: [u32; 3],
        block: [u32; 3],
    },
    Trap {
        thread: [u32; 3],
        block: [u32; 3],
    },
    Assert {
        message: String,
        thread: [u32; 3],
        block: [u32; 3],
    },
    // A texture or surface instruction named no live object of the context.
    BadObject {
        handle: u64,
        surface: bool,
        thread: [u32; 3],
        block: [u32; 3],
    },
    /// `cudaGraphSetConditional` with a handle no graph made.
    BadConditional {
        handle: u64,
        thread: [u32; 3],
        block: [u32; 3],
    },
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
                            return Err(Fault::Misaligned {
                                addr: a,
                                len: total,
                                thread: self.tid(t),
                                block: self.ctaid,
                            });
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
                        Callee::GraphSetConditional => {
                            let handle = self.local_word(t, call.args.first().map(|a| a.0));
                            // A .b32 argument: a 4-byte slot.
                            let at = call.args.get(1).map(|a| a.0);
                            let value =
                                at.and_then(|a| self.load(Space::Local, Ty::U32, a, t).ok()).unwrap_or(0) as u32;
                            if !crate::graph_cond::set(handle, value, self.l.memory.ctx_handle) {
                                return Err(Fault::BadConditional { handle, thread: self.tid(t), block: self.ctaid });
                            }
                        }
                        Callee::AssertFail => {
                            let word = |i: usize| call.args.get(i).map(|a| a.0);
                            let (m, f, l, func) = (
                                self.local_word(t, word(0)),
                                self.local_word(t, word(1)),
                                self.local_word(t, word(2)),
                                self.local_word(t, word(3)),
                            );
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
            Op::Shfl { mode, d, p, a, b, c } => self.shfl(act, g, *mode, *d, *p, (a, b, c)),
            Op::Vote { mode, d, a } => self.vote(act, g, *mode, d, a),
            Op::Tex { .. } | Op::Tld4 { .. } | Op::Surf { .. } | Op::Query { .. } => self.texture(&ins.op, g, act)?,
        }
        Ok(Flow::Next)
    }
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
                if let Some(p) = l.preemption {
                    p.boundary();
                }
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
