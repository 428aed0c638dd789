//! From PTX statements to the executor's instructions: registers become slot
//! numbers, symbols become addresses in their state space, labels become
//! instruction indices, and every opcode is checked against what the executor
//! implements. Anything else is refused here, by name, before a kernel runs.

use super::ir::*;
use crate::ptx::{self, BodyItem, Decl, Statement, Tok};
use std::collections::HashMap;

/// Where a kernel's named memory lives, known before it runs.
pub struct Symbols<'a> {
    /// Module `.global` / `.const` variables: device addresses.
    pub globals: &'a HashMap<String, (u64, u64)>,
    pub module: &'a ptx::Module,
}

pub struct Decoder<'a> {
    entry: &'a ptx::Entry,
    syms: Symbols<'a>,
    /// Kernels read their parameters from the launch's buffer; device functions
    /// from slots in the thread's local memory that `call` fills.
    is_kernel: bool,
    reg_base: u16,
    regs: HashMap<String, u16>,
    /// Shared-window offsets of static shared variables and the dynamic array.
    shared: HashMap<String, u64>,
    local: HashMap<String, u64>,
    labels: HashMap<String, u32>,
    /// Call-site `.param` slots in scope, by name: the latest declaration wins, as
    /// each `{ callseq }` block re-declares `param0`, `retval0`, ...
    call_slots: HashMap<String, (u64, u64)>,
    pub shared_static: u64,
    /// End of this function's region of local memory (absolute offset).
    pub local_end: u64,
    /// Absolute local offsets and sizes of a device function's parameters and returns.
    pub param_slots: Vec<(u64, u64)>,
    pub return_slots: Vec<(u64, u64)>,
    /// Device functions this one calls, in order of first call.
    pub callees: Vec<String>,
}

/// A decoded function, before linking.
pub struct Decoded {
    pub instrs: Vec<Instr>,
    pub nregs: usize,
    pub local_end: u64,
    pub param_slots: Vec<(u64, u64)>,
    pub return_slots: Vec<(u64, u64)>,
    pub callees: Vec<String>,
}

type DResult<T> = Result<T, String>;

fn bad<T>(msg: impl Into<String>) -> DResult<T> {
    Err(msg.into())
}

/// Splits operand tokens at top-level commas.
fn split_operands(toks: &[Tok]) -> Vec<&[Tok]> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, t) in toks.iter().enumerate() {
        match t {
            Tok::Punct('{') | Tok::Punct('[') | Tok::Punct('(') => depth += 1,
            Tok::Punct('}') | Tok::Punct(']') | Tok::Punct(')') => depth -= 1,
            Tok::Punct(',') if depth == 0 => {
                out.push(&toks[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < toks.len() {
        out.push(&toks[start..]);
    }
    out
}

fn parse_ty(s: &str) -> Option<Ty> {
    Some(match s {
        "b8" => Ty::B8,
        "b16" => Ty::B16,
        "b32" => Ty::B32,
        "b64" => Ty::B64,
        "u8" => Ty::U8,
        "u16" => Ty::U16,
        "u32" => Ty::U32,
        "u64" => Ty::U64,
        "s8" => Ty::S8,
        "s16" => Ty::S16,
        "s32" => Ty::S32,
        "s64" => Ty::S64,
        "f16" => Ty::F16,
        "bf16" => Ty::BF16,
        "f32" => Ty::F32,
        "f64" => Ty::F64,
        "pred" => Ty::Pred,
        "f16x2" => Ty::F16x2,
        "bf16x2" => Ty::BF16x2,
        _ => return None,
    })
}

fn special(name: &str) -> Option<Sreg> {
    let axis = |s: &str| match s {
        "x" => Some(0u8),
        "y" => Some(1),
        "z" => Some(2),
        _ => None,
    };
    if let Some((base, ax)) = name.rsplit_once('.') {
        let a = axis(ax)?;
        return Some(match base {
            "%tid" => Sreg::Tid(a),
            "%ntid" => Sreg::Ntid(a),
            "%ctaid" => Sreg::Ctaid(a),
            "%nctaid" => Sreg::Nctaid(a),
            _ => return None,
        });
    }
    Some(match name {
        "%laneid" => Sreg::Laneid,
        "%warpid" => Sreg::Warpid,
        "%nwarpid" => Sreg::Nwarpid,
        "%smid" => Sreg::Smid,
        "%nsmid" => Sreg::Nsmid,
        "%gridid" => Sreg::Gridid,
        "%clock" => Sreg::Clock,
        "%clock64" => Sreg::Clock64,
        "%globaltimer" => Sreg::Globaltimer,
        "%globaltimer_lo" => Sreg::GlobaltimerLo,
        "%globaltimer_hi" => Sreg::GlobaltimerHi,
        "%lanemask_eq" => Sreg::Lanemask(0),
        "%lanemask_le" => Sreg::Lanemask(1),
        "%lanemask_lt" => Sreg::Lanemask(2),
        "%lanemask_ge" => Sreg::Lanemask(3),
        "%lanemask_gt" => Sreg::Lanemask(4),
        "%dynamic_smem_size" => Sreg::DynSmem,
        "%total_smem_size" => Sreg::TotalSmem,
        n if n.starts_with("%envreg") => Sreg::Zero,
        _ => return None,
    })
}

impl<'a> Decoder<'a> {
    /// `reg_base` and `local_base` place this function's registers and local memory
    /// after those of the functions decoded before it.
    pub fn new(entry: &'a ptx::Entry, syms: Symbols<'a>, is_kernel: bool, reg_base: u16, local_base: u64) -> Self {
        let mut d = Decoder {
            entry,
            syms,
            is_kernel,
            reg_base,
            regs: HashMap::new(),
            shared: HashMap::new(),
            local: HashMap::new(),
            labels: HashMap::new(),
            call_slots: HashMap::new(),
            shared_static: 0,
            local_end: local_base,
            param_slots: Vec::new(),
            return_slots: Vec::new(),
            callees: Vec::new(),
        };
        d.layout();
        d
    }

    /// A device function sees the shared-memory layout of the kernel that calls it.
    pub fn inherit_shared(&mut self, kernel_shared: &HashMap<String, u64>) {
        self.shared = kernel_shared.clone();
    }

    pub fn shared_layout(&self) -> &HashMap<String, u64> {
        &self.shared
    }

    fn local_slot(&mut self, size: u64, align: u64) -> u64 {
        let at = self.local_end.next_multiple_of(align.max(1));
        self.local_end = at + size.max(1);
        at
    }

    fn reg_decls(&self) -> impl Iterator<Item = &'a Decl> + 'a {
        self.entry.body.items.iter().filter_map(|i| match i {
            BodyItem::Decl(d) => Some(d),
            _ => None,
        })
    }

    /// Assigns register slots and shared/local offsets.
    fn layout(&mut self) {
        let mut shared_off = 0u64;
        let mut local_off = self.local_end;
        let place = |off: &mut u64, d: &Decl| {
            let at = off.next_multiple_of(d.align.max(1));
            *off = at + d.byte_size().unwrap_or(0);
            at
        };
        for d in self.reg_decls().collect::<Vec<_>>() {
            match d.space.as_str() {
                ".reg" => match d.reg_range {
                    Some(n) => {
                        for i in 0..n {
                            let idx = self.reg_base + self.regs.len() as u16;
                            self.regs.entry(format!("{}{i}", d.name)).or_insert(idx);
                        }
                    }
                    // A name declared again (each inline-asm `{ .reg .f32 r0; ... }` block
                    // of CUB declares its own) keeps its register: the blocks run one
                    // after another and each writes before it reads.
                    None if self.regs.contains_key(&d.name) => {}
                    None => {
                        let idx = self.reg_base + self.regs.len() as u16;
                        self.regs.insert(d.name.clone(), idx);
                    }
                },
                ".shared" => {
                    let at = place(&mut shared_off, d);
                    self.shared.insert(d.name.clone(), at);
                }
                ".local" => {
                    let at = place(&mut local_off, d);
                    self.local.insert(d.name.clone(), at);
                }
                _ => {}
            }
        }
        // Every module-scope shared variable is laid out, so that device functions
        // called by the kernel find them at the same offsets.
        let module_shared: Vec<&Decl> = self.syms.module.variables.iter().filter(|v| v.space == ".shared").collect();
        for v in module_shared.iter().filter(|v| !v.external) {
            let at = place(&mut shared_off, v);
            self.shared.insert(v.name.clone(), at);
        }
        let dyn_align = module_shared.iter().filter(|v| v.external).map(|v| v.align).max().unwrap_or(16).max(16);
        self.shared_static = shared_off;
        let dyn_base = shared_off.next_multiple_of(dyn_align);
        for v in module_shared.iter().filter(|v| v.external) {
            self.shared.insert(v.name.clone(), dyn_base);
        }
        self.shared_static = dyn_base.max(shared_off);
        self.local_end = local_off;
        if !self.is_kernel {
            let entry = self.entry;
            for p in &entry.params {
                let at = self.local_slot(p.size, p.align);
                self.param_slots.push((at, p.size));
            }
            for p in &entry.returns {
                let at = self.local_slot(p.size, p.align);
                self.return_slots.push((at, p.size));
            }
        }
        let mut pc = 0u32;
        for item in &self.entry.body.items {
            match item {
                BodyItem::Label(l) => {
                    self.labels.insert(l.clone(), pc);
                }
                BodyItem::Instr(_) => pc += 1,
                BodyItem::Decl(_) => {}
            }
        }
    }

    fn reg(&self, name: &str) -> DResult<u16> {
        self.regs.get(name).copied().ok_or_else(|| format!("undeclared register {name}"))
    }

    /// The address a symbol names, in the state space it belongs to.
    fn symbol(&self, name: &str) -> Option<(Space, u64)> {
        if let Some(&(at, _)) = self.call_slots.get(name) {
            return Some((Space::Local, at));
        }
        if let Some(i) = self.entry.params.iter().position(|p| p.name == name) {
            return Some(if self.is_kernel {
                (Space::Param, self.entry.params[i].offset)
            } else {
                (Space::Local, self.param_slots[i].0)
            });
        }
        if let Some(i) = self.entry.returns.iter().position(|p| p.name == name) {
            return Some((Space::Local, self.return_slots[i].0));
        }
        if let Some(&o) = self.shared.get(name) {
            return Some((Space::Shared, o));
        }
        if let Some(&o) = self.local.get(name) {
            return Some((Space::Local, o));
        }
        self.syms.globals.get(name).map(|&(addr, _)| (Space::Global, addr))
    }

    fn imm(&self, toks: &[Tok], ty: Ty) -> DResult<Option<u64>> {
        let (neg, rest) = match toks {
            [Tok::Punct('-'), rest @ ..] => (true, rest),
            _ => (false, toks),
        };
        match rest {
            [Tok::Num(n)] => {
                let pty = ty.ptx_name();
                match ptx::literal_bits(n, &pty, neg) {
                    Some(v) => Ok(Some(v)),
                    None => bad(format!("bad literal {n}")),
                }
            }
            _ => Ok(None),
        }
    }

    /// A source or destination operand.
    fn operand(&self, toks: &[Tok], ty: Ty) -> DResult<Operand> {
        if let Some(v) = self.imm(toks, ty)? {
            return Ok(Operand::Imm(v));
        }
        match toks {
            [Tok::Word(w)] if w == "_" => Ok(Operand::Sink),
            [Tok::Word(w)] if w.starts_with('%') => {
                if let Some(s) = special(w) {
                    return Ok(Operand::Special(s));
                }
                Ok(Operand::Reg(self.reg(w)?))
            }
            [Tok::Punct('!'), Tok::Word(w)] => Ok(Operand::NotPred(self.reg(w)?)),
            // PTX register names need no `%` (`.reg .pred p;` in inline assembly).
            [Tok::Word(w)] if self.regs.contains_key(w.as_str()) => Ok(Operand::Reg(self.reg(w)?)),
            [Tok::Word(w)] => match self.symbol(w) {
                Some((_, addr)) => Ok(Operand::Imm(addr)),
                None => bad(format!("unknown symbol {w}")),
            },
            [Tok::Punct('{'), inner @ .., Tok::Punct('}')] => {
                let parts = split_operands(inner);
                let v: DResult<Vec<Operand>> = parts.iter().map(|p| self.operand(p, ty)).collect();
                Ok(Operand::Vec(v?))
            }
            _ => bad(format!("cannot read operand {toks:?}")),
        }
    }

    /// `[reg]`, `[reg+imm]`, `[sym]`, `[sym+imm]`, `[imm]`.
    fn address(&self, toks: &[Tok]) -> DResult<Addr> {
        let inner = match toks {
            [Tok::Punct('['), inner @ .., Tok::Punct(']')] => inner,
            _ => return bad(format!("expected an address, found {toks:?}")),
        };
        let (base_toks, offset) = match inner.iter().position(|t| matches!(t, Tok::Punct('+'))) {
            Some(p) => {
                let rest = &inner[p + 1..];
                let (neg, num) = match rest {
                    [Tok::Punct('-'), Tok::Num(n)] => (true, n),
                    [Tok::Num(n)] => (false, n),
                    _ => return bad(format!("bad address offset {rest:?}")),
                };
                let v = ptx::parse_uint(num).ok_or_else(|| format!("bad offset {num}"))? as i64;
                (&inner[..p], if neg { -v } else { v })
            }
            None => (inner, 0),
        };
        let base = match base_toks {
            [Tok::Word(w)] if w.starts_with('%') || self.regs.contains_key(w.as_str()) => AddrBase::Reg(self.reg(w)?),
            [Tok::Word(w)] => match self.symbol(w) {
                Some((space, a)) => AddrBase::Imm(a, Some(space)),
                None => return bad(format!("unknown symbol {w} in an address")),
            },
            [Tok::Num(n)] => AddrBase::Imm(ptx::parse_uint(n).ok_or_else(|| format!("bad address {n}"))?, None),
            _ => return bad(format!("bad address {inner:?}")),
        };
        Ok(Addr { base, offset })
    }

    fn label(&self, toks: &[Tok]) -> DResult<u32> {
        match toks {
            [Tok::Word(w)] => self.labels.get(w).copied().ok_or_else(|| format!("unknown label {w}")),
            _ => bad(format!("bad branch target {toks:?}")),
        }
    }

    fn guard(&self, s: &Statement) -> DResult<Option<(u16, bool)>> {
        match &s.guard {
            None => Ok(None),
            Some(g) => match g.strip_prefix('!') {
                Some(r) => Ok(Some((self.reg(r)?, true))),
                None => Ok(Some((self.reg(g)?, false))),
            },
        }
    }

    /// Decodes every instruction of the function. Branch targets are relative to its
    /// first instruction; calls name their callee until [`super::link`] resolves them.
    pub fn decode(mut self) -> DResult<Decoded> {
        let mut out = Vec::new();
        let entry = self.entry;
        for item in &entry.body.items {
            match item {
                BodyItem::Instr(s) => {
                    let op = if s.opcode == "call" || s.opcode.starts_with("call.") {
                        self.decode_call(s)
                    } else {
                        self.decode_op(s)
                    }
                    .map_err(|e| format!("`{}`: {e}", describe(s)))?;
                    out.push(Instr { guard: self.guard(s)?, op });
                }
                BodyItem::Decl(d) if d.space == ".shared" && !self.is_kernel => {
                    return bad(format!("device function {}: .shared declared inside a device function", entry.name));
                }
                BodyItem::Decl(d) if d.space == ".param" => {
                    let size = d.byte_size().unwrap_or(8);
                    let at = self.local_slot(size, d.align);
                    self.call_slots.insert(d.name.clone(), (at, size));
                }
                _ => {}
            }
        }
        out.push(Instr { guard: None, op: if self.is_kernel { Op::Exit } else { Op::Ret } });
        Ok(Decoded {
            instrs: out,
            nregs: self.regs.len(),
            local_end: self.local_end,
            param_slots: self.param_slots,
            return_slots: self.return_slots,
            callees: self.callees,
        })
    }

    /// `call (ret), f, (args);` to a device function of the module or a driver builtin.
    fn decode_call(&mut self, s: &Statement) -> DResult<Op> {
        let ops = split_operands(&s.operands);
        let paren_names = |toks: &[Tok]| -> DResult<Vec<String>> {
            match toks {
                [Tok::Punct('('), inner @ .., Tok::Punct(')')] => split_operands(inner)
                    .iter()
                    .map(|t| match t {
                        [Tok::Word(w)] => Ok(w.clone()),
                        other => bad(format!("bad call operand {other:?}")),
                    })
                    .collect(),
                other => bad(format!("expected a parenthesised list, found {other:?}")),
            }
        };
        let (ret, rest) = match ops.first() {
            Some(t) if matches!(t.first(), Some(Tok::Punct('('))) => (paren_names(t)?, &ops[1..]),
            _ => (Vec::new(), &ops[..]),
        };
        let target = match rest.first() {
            Some([Tok::Word(w)]) if !w.starts_with('%') => w.clone(),
            Some(other) => return bad(format!("indirect calls are not supported (target {other:?})")),
            None => return bad("call without a target"),
        };
        let args = match rest.get(1) {
            Some(t) => paren_names(t)?,
            None => Vec::new(),
        };
        let slot = |name: &String| -> DResult<(u64, u64)> {
            self.call_slots.get(name).copied().ok_or_else(|| format!("{name} is not a .param declared for this call"))
        };
        let args: Vec<(u64, u64)> = args.iter().map(slot).collect::<DResult<_>>()?;
        let ret = match ret.first() {
            Some(r) => Some(slot(r)?),
            None => None,
        };
        let callee = match target.as_str() {
            "vprintf" => Callee::Printf,
            "__assertfail" => Callee::AssertFail,
            "cudaGraphSetConditional" => Callee::GraphSetConditional,
            name if self.syms.module.functions.iter().any(|f| f.name == name) => {
                if !self.callees.contains(&target) {
                    self.callees.push(target.clone());
                }
                Callee::Function(target)
            }
            name if self.syms.module.extern_functions.iter().any(|f| f == name) => {
                return bad(format!("external device function {name} is not provided by the simulator"));
            }
            name => return bad(format!("call to unknown function {name}")),
        };
        Ok(Op::Call(Box::new(Call { callee, args, ret, target_pc: 0, copies_in: Vec::new(), copy_out: None })))
    }

    fn decode_op(&self, s: &Statement) -> DResult<Op> {
        let parts: Vec<&str> = s.opcode.split('.').collect();
        let name = parts[0];
        let mods = &parts[1..];
        let has = |m: &str| mods.contains(&m);
        // The last type-like modifier is the instruction type; cvt has two.
        let types: Vec<Ty> = mods.iter().filter_map(|m| parse_ty(m)).collect();
        let ty = types.last().copied();
        let ops = split_operands(&s.operands);
        let need = |n: usize| -> DResult<()> {
            if ops.len() < n { bad(format!("expected {n} operands, found {}", ops.len())) } else { Ok(()) }
        };
        let ty_or = |what: &str| ty.ok_or_else(|| format!("{what} needs a type"));
        let space = || -> Space {
            for m in mods {
                match *m {
                    "global" => return Space::Global,
                    "shared" => return Space::Shared,
                    "local" => return Space::Local,
                    "param" => return Space::Param,
                    "const" => return Space::Const,
                    _ => {}
                }
            }
            Space::Generic
        };
        let vec_width = || -> u8 {
            if has("v2") {
                2
            } else if has("v4") {
                4
            } else if has("v8") {
                8
            } else {
                1
            }
        };
        let rnd = || -> Round {
            for m in mods {
                match *m {
                    "rn" | "rni" => return Round::Nearest,
                    "rz" | "rzi" => return Round::Zero,
                    "rm" | "rmi" => return Round::Down,
                    "rp" | "rpi" => return Round::Up,
                    _ => {}
                }
            }
            Round::Nearest
        };
        Ok(match name {
            "mov" => {
                need(2)?;
                let t = ty_or("mov")?;
                Op::Mov { ty: t, d: self.operand(ops[0], t)?, a: self.operand(ops[1], t)? }
            }
            "add" | "sub" | "mul" | "div" | "rem" | "min" | "max" | "and" | "or" | "xor" | "shl" | "shr"
            | "copysign" | "mul24" => {
                need(3)?;
                let t = ty_or(name)?;
                let kind = match name {
                    "add" => Bin::Add,
                    "sub" => Bin::Sub,
                    "mul" if has("wide") => Bin::MulWide,
                    "mul" if has("hi") => Bin::MulHi,
                    "mul" | "mul24" => Bin::Mul,
                    "div" => Bin::Div,
                    "rem" => Bin::Rem,
                    "min" => Bin::Min,
                    "max" => Bin::Max,
                    "and" => Bin::And,
                    "or" => Bin::Or,
                    "xor" => Bin::Xor,
                    "shl" => Bin::Shl,
                    "shr" => Bin::Shr,
                    _ => Bin::Copysign,
                };
                let dty = if kind == Bin::MulWide { t.widened() } else { t };
                let sat = has("sat");
                Op::Bin {
                    kind,
                    ty: t,
                    rnd: rnd(),
                    sat,
                    d: self.operand(ops[0], dty)?,
                    a: self.operand(ops[1], t)?,
                    b: self.operand(ops[2], if matches!(kind, Bin::Shl | Bin::Shr) { Ty::U32 } else { t })?,
                }
            }
            "neg" | "not" | "abs" | "cnot" | "popc" | "clz" | "brev" | "sqrt" | "rsqrt" | "rcp" | "ex2" | "lg2"
            | "sin" | "cos" | "bfind" | "tanh" => {
                need(2)?;
                let t = ty_or(name)?;
                let kind = match name {
                    "neg" => Un::Neg,
                    "not" => Un::Not,
                    "abs" => Un::Abs,
                    "cnot" => Un::Cnot,
                    "popc" => Un::Popc,
                    "clz" => Un::Clz,
                    "brev" => Un::Brev,
                    "sqrt" => Un::Sqrt,
                    "rsqrt" => Un::Rsqrt,
                    "rcp" => Un::Rcp,
                    "ex2" => Un::Ex2,
                    "lg2" => Un::Lg2,
                    "sin" => Un::Sin,
                    "cos" => Un::Cos,
                    "tanh" => Un::Tanh,
                    _ => Un::Bfind,
                };
                let dty = if matches!(kind, Un::Popc | Un::Clz | Un::Bfind) { Ty::U32 } else { t };
                Op::Un { kind, ty: t, rnd: rnd(), d: self.operand(ops[0], dty)?, a: self.operand(ops[1], t)? }
            }
            "mad" | "fma" => {
                need(4)?;
                let t = ty_or(name)?;
                let kind = if t.is_float() {
                    Tern::Fma
                } else if has("wide") {
                    Tern::MadWide
                } else if has("hi") {
                    Tern::MadHi
                } else {
                    Tern::MadLo
                };
                let wide = kind == Tern::MadWide;
                Op::Tern {
                    kind,
                    ty: t,
                    rnd: rnd(),
                    sat: has("sat"),
                    d: self.operand(ops[0], if wide { t.widened() } else { t })?,
                    a: self.operand(ops[1], t)?,
                    b: self.operand(ops[2], t)?,
                    c: self.operand(ops[3], if wide { t.widened() } else { t })?,
                }
            }
            "selp" => {
                need(4)?;
                let t = ty_or("selp")?;
                Op::Tern {
                    kind: Tern::Selp,
                    ty: t,
                    rnd: Round::Nearest,
                    sat: false,
                    d: self.operand(ops[0], t)?,
                    a: self.operand(ops[1], t)?,
                    b: self.operand(ops[2], t)?,
                    c: self.operand(ops[3], Ty::Pred)?,
                }
            }
            "slct" => {
                need(4)?;
                let (dt, ct) = (types[0], *types.last().unwrap_or(&Ty::S32));
                Op::Slct {
                    ty: dt,
                    cty: ct,
                    d: self.operand(ops[0], dt)?,
                    a: self.operand(ops[1], dt)?,
                    b: self.operand(ops[2], dt)?,
                    c: self.operand(ops[3], ct)?,
                }
            }
            "bfe" | "bfi" | "prmt" => {
                let t = ty_or(name)?;
                let kind = match name {
                    "bfe" => Tern::Bfe,
                    "bfi" => Tern::Bfi,
                    _ => Tern::Prmt,
                };
                if kind == Tern::Prmt
                    && mods.iter().any(|m| matches!(*m, "f4e" | "b4e" | "rc8" | "ecl" | "ecr" | "rc16"))
                {
                    return bad("prmt modes other than the default are not implemented");
                }
                if kind == Tern::Bfi {
                    need(5)?;
                    Op::Bfi {
                        ty: t,
                        d: self.operand(ops[0], t)?,
                        a: self.operand(ops[1], t)?,
                        b: self.operand(ops[2], t)?,
                        pos: self.operand(ops[3], Ty::U32)?,
                        len: self.operand(ops[4], Ty::U32)?,
                    }
                } else {
                    need(4)?;
                    Op::Tern {
                        kind,
                        ty: t,
                        rnd: Round::Nearest,
                        sat: false,
                        d: self.operand(ops[0], t)?,
                        a: self.operand(ops[1], t)?,
                        b: self.operand(ops[2], Ty::U32)?,
                        c: self.operand(ops[3], Ty::U32)?,
                    }
                }
            }
            "shf" => {
                need(4)?;
                Op::Shf {
                    left: has("l"),
                    clamp: has("clamp"),
                    d: self.operand(ops[0], Ty::B32)?,
                    a: self.operand(ops[1], Ty::B32)?,
                    b: self.operand(ops[2], Ty::B32)?,
                    c: self.operand(ops[3], Ty::U32)?,
                }
            }
            "setp" | "set" => {
                need(3)?;
                let cmp = parse_cmp(mods.first().copied().unwrap_or(""))?;
                let t = *types.last().ok_or("setp needs a type")?;
                let combine = mods.iter().find_map(|m| match *m {
                    "and" => Some(BoolOp::And),
                    "or" => Some(BoolOp::Or),
                    "xor" => Some(BoolOp::Xor),
                    _ => None,
                });
                // Destination: `%p` or `%p|%q` (the second gets the complement).
                let (d, d2) = match ops[0] {
                    [Tok::Word(a), Tok::Punct('|'), Tok::Word(b)] => (self.reg(a)?, Some(self.reg(b)?)),
                    [Tok::Word(a)] => (self.reg(a)?, None),
                    other => return bad(format!("bad setp destination {other:?}")),
                };
                let c = match combine {
                    Some(op) => {
                        need(4)?;
                        Some((op, self.operand(ops[3], Ty::Pred)?))
                    }
                    None => None,
                };
                if name == "set" {
                    let dty = types[0];
                    return Ok(Op::Set {
                        cmp,
                        ty: t,
                        dty,
                        d,
                        a: self.operand(ops[1], t)?,
                        b: self.operand(ops[2], t)?,
                        combine: c,
                    });
                }
                Op::Setp { cmp, ty: t, d, d2, a: self.operand(ops[1], t)?, b: self.operand(ops[2], t)?, combine: c }
            }
            "cvt" => {
                need(2)?;
                if types.len() != 2 {
                    return bad("cvt needs a destination and a source type");
                }
                let (dt, st) = (types[0], types[1]);
                let int_round = mods.iter().any(|m| matches!(*m, "rni" | "rzi" | "rmi" | "rpi"));
                Op::Cvt {
                    dty: dt,
                    sty: st,
                    rnd: rnd(),
                    int_round,
                    sat: has("sat"),
                    d: self.operand(ops[0], dt)?,
                    a: self.operand(ops[1], st)?,
                }
            }
            "cvta" => {
                need(2)?;
                let t = ty_or("cvta")?;
                Op::Cvta { to: has("to"), space: space(), d: self.operand(ops[0], t)?, a: self.operand(ops[1], t)? }
            }
            "ld" | "ldu" => {
                need(2)?;
                let t = ty_or("ld")?;
                Op::Ld {
                    space: space(),
                    ty: t,
                    n: vec_width(),
                    d: self.operand(ops[0], t)?,
                    addr: self.address(ops[1])?,
                }
            }
            "st" => {
                need(2)?;
                let t = ty_or("st")?;
                Op::St {
                    space: space(),
                    ty: t,
                    n: vec_width(),
                    addr: self.address(ops[0])?,
                    a: self.operand(ops[1], t)?,
                }
            }
            "atom" | "red" => {
                let t = ty_or(name)?;
                let kind = mods
                    .iter()
                    .find_map(|m| {
                        Some(match *m {
                            "add" => Atomic::Add,
                            "min" => Atomic::Min,
                            "max" => Atomic::Max,
                            "exch" => Atomic::Exch,
                            "cas" => Atomic::Cas,
                            "and" => Atomic::And,
                            "or" => Atomic::Or,
                            "xor" => Atomic::Xor,
                            "inc" => Atomic::Inc,
                            "dec" => Atomic::Dec,
                            _ => return None,
                        })
                    })
                    .ok_or("atomic without an operation")?;
                let (d, rest) =
                    if name == "red" { (Operand::Sink, &ops[..]) } else { (self.operand(ops[0], t)?, &ops[1..]) };
                if rest.len() < 2 || (kind == Atomic::Cas && rest.len() < 3) {
                    return bad("too few atomic operands");
                }
                Op::Atom {
                    space: space(),
                    kind,
                    ty: t,
                    d,
                    addr: self.address(rest[0])?,
                    a: self.operand(rest[1], t)?,
                    b: if kind == Atomic::Cas { Some(self.operand(rest[2], t)?) } else { None },
                }
            }
            "bra" => {
                need(1)?;
                Op::Bra { target: self.label(ops[0])? }
            }
            "ret" => Op::Ret,
            "exit" => Op::Exit,
            "trap" | "brkpt" => Op::Trap,
            "bar" | "barrier" => {
                if has("red") {
                    return self.decode_bar_red(mods, &ops);
                }
                if has("arrive") { Op::Nop } else { Op::Barrier }
            }
            "membar" | "fence" | "prefetch" | "prefetchu" | "discard" | "griddepcontrol" | "setmaxnreg" => Op::Nop,
            "nanosleep" => {
                need(1)?;
                Op::Nanosleep { a: self.operand(ops[0], Ty::U32)? }
            }
            "activemask" => {
                need(1)?;
                Op::Activemask { d: self.operand(ops[0], Ty::B32)? }
            }
            "shfl" => {
                // shfl.sync takes a member mask last; the pre-Volta shfl does not.
                need(4)?;
                let mode = if has("up") {
                    Shfl::Up
                } else if has("down") {
                    Shfl::Down
                } else if has("bfly") {
                    Shfl::Bfly
                } else if has("idx") {
                    Shfl::Idx
                } else {
                    return bad("shfl without a mode");
                };
                let (d, p) = match ops[0] {
                    [Tok::Word(a), Tok::Punct('|'), Tok::Word(b)] => (self.reg(a)?, Some(self.reg(b)?)),
                    [Tok::Word(a)] => (self.reg(a)?, None),
                    other => return bad(format!("bad shfl destination {other:?}")),
                };
                Op::Shfl {
                    mode,
                    d,
                    p,
                    a: self.operand(ops[1], Ty::B32)?,
                    b: self.operand(ops[2], Ty::U32)?,
                    c: self.operand(ops[3], Ty::U32)?,
                }
            }
            "vote" => {
                need(2)?;
                let mode = if has("all") {
                    Vote::All
                } else if has("any") {
                    Vote::Any
                } else if has("uni") {
                    Vote::Uni
                } else if has("ballot") {
                    Vote::Ballot
                } else {
                    return bad("vote without a mode");
                };
                let dty = if mode == Vote::Ballot { Ty::B32 } else { Ty::Pred };
                Op::Vote { mode, d: self.operand(ops[0], dty)?, a: self.operand(ops[1], Ty::Pred)? }
            }
            "tex" | "tld4" | "suld" | "sust" | "txq" | "suq" => return self.decode_texture(name, mods, &ops),
            other => return bad(format!("the simulator does not execute `{other}` instructions")),
        })
    }

    /// `[handle, coords]` of a texture or surface instruction (`[handle]` for queries).
    fn resource(&self, toks: &[Tok], cty: Ty) -> DResult<(Operand, Operand)> {
        let inner = match toks {
            [Tok::Punct('['), inner @ .., Tok::Punct(']')] => inner,
            _ => return bad(format!("expected [handle, coordinates], found {toks:?}")),
        };
        let parts = split_operands(inner);
        let handle = match parts.first() {
            Some([Tok::Word(w)]) if w.starts_with('%') || self.regs.contains_key(w.as_str()) => {
                Operand::Reg(self.reg(w)?)
            }
            Some([Tok::Word(w)]) => {
                return bad(format!("texture/surface reference {w}: only texture and surface objects are simulated"));
            }
            _ => return bad(format!("bad texture/surface operand {toks:?}")),
        };
        let coords = match parts.len() {
            1 => Operand::Sink,
            2 => self.operand(parts[1], cty)?,
            _ => return bad("separate samplers (independent texturing mode) are not simulated"),
        };
        Ok((handle, coords))
    }

    fn decode_texture(&self, name: &str, mods: &[&str], ops: &[&[Tok]]) -> DResult<Op> {
        let has = |m: &str| mods.contains(&m);
        // The geometry: how many coordinates address a layer, and whether a layer index
        // comes first (`.a1d`, `.a2d`: layered textures).
        let geometry = || -> DResult<(u8, bool)> {
            for m in mods {
                match *m {
                    "1d" => return Ok((1, false)),
                    "2d" => return Ok((2, false)),
                    "3d" => return Ok((3, false)),
                    "a1d" => return Ok((1, true)),
                    "a2d" => return Ok((2, true)),
                    "cube" | "acube" | "2dms" | "a2dms" => {
                        return bad(format!("{name}.{m}: cubemap and multisample geometries are not simulated"));
                    }
                    _ => {}
                }
            }
            bad(format!("{name} without a geometry"))
        };
        let rank = || -> DResult<u8> {
            match geometry()? {
                (r, false) => Ok(r),
                (_, true) => bad(format!("{name} on a layered geometry is not simulated (only tex is)")),
            }
        };
        let types: Vec<Ty> = mods.iter().filter_map(|m| parse_ty(m)).collect();
        if ops.len() < 2 {
            return bad(format!("{name} needs two operands"));
        }
        if ops.iter().any(|o| o.iter().any(|t| matches!(t, Tok::Punct('|')))) {
            return bad(format!("{name} with a residency predicate (|p) is not simulated"));
        }
        match name {
            "tex" | "tld4" => {
                if has("grad") || has("base") || (has("level") && name == "tld4") {
                    return bad(format!("{name} with gradients, a base level or tld4 with a level is not simulated"));
                }
                let [dty, cty] = types[..] else { return bad(format!("{name} needs a result and a coordinate type")) };
                if !has("v4") || !matches!(dty, Ty::F32 | Ty::U32 | Ty::S32) || !matches!(cty, Ty::F32 | Ty::S32) {
                    return bad(format!("{name}: only .v4 results of .f32/.u32/.s32 from .f32/.s32 coordinates"));
                }
                let (handle, coords) = self.resource(ops[1], cty)?;
                let d = self.operand(ops[0], dty)?;
                if name == "tex" {
                    let lod = if has("level") {
                        let Some(l) = ops.get(2) else { return bad("tex.level needs a level operand") };
                        Some(self.operand(l, Ty::F32)?)
                    } else {
                        None
                    };
                    let (rank, layered) = geometry()?;
                    return Ok(Op::Tex { rank, layered, int_coords: cty == Ty::S32, d, handle, coords, lod });
                }
                if rank()? != 2 || cty != Ty::F32 {
                    return bad("tld4 is defined for .2d textures and .f32 coordinates");
                }
                let comp = ["r", "g", "b", "a"].iter().position(|c| has(c)).ok_or("tld4 without a component")?;
                Ok(Op::Tld4 { comp: comp as u8, d, handle, coords })
            }
            "suld" | "sust" => {
                if !has("b") {
                    return bad(format!("{name}: only .b (unformatted) surface accesses are simulated"));
                }
                let ty = match types[..] {
                    [t @ (Ty::B8 | Ty::B16 | Ty::B32 | Ty::B64)] => t,
                    _ => return bad(format!("{name}.b needs one of .b8/.b16/.b32/.b64")),
                };
                let clamp = if has("clamp") {
                    crate::texture::SurfClamp::Clamp
                } else if has("zero") {
                    crate::texture::SurfClamp::Zero
                } else {
                    crate::texture::SurfClamp::Trap
                };
                let n = if has("v2") {
                    2
                } else if has("v4") {
                    4
                } else {
                    1
                };
                let store = name == "sust";
                let (res, val) = if store { (ops[0], ops[1]) } else { (ops[1], ops[0]) };
                let (handle, coords) = self.resource(res, Ty::S32)?;
                Ok(Op::Surf { rank: rank()?, ty, n, clamp, handle, coords, d: self.operand(val, ty)?, store })
            }
            _ => {
                let what = if has("width") {
                    Query::Width
                } else if has("height") {
                    Query::Height
                } else if has("depth") {
                    Query::Depth
                } else if has("normalized_coords") {
                    Query::NormalizedCoords
                } else if has("filter_mode") {
                    Query::FilterMode
                } else if let Some(i) = ["addr_mode_0", "addr_mode_1", "addr_mode_2"].iter().position(|m| has(m)) {
                    Query::AddrMode(i as u8)
                } else {
                    return bad(format!(
                        "{name}: only width, height, depth, normalized_coords, filter_mode and addr_mode_N are simulated"
                    ));
                };
                if has("level") {
                    return bad(format!("{name}.level is not simulated"));
                }
                let surf = name == "suq";
                if surf && !matches!(what, Query::Width | Query::Height | Query::Depth) {
                    return bad("suq reads a surface's extent only");
                }
                let (handle, _) = self.resource(ops[1], Ty::B32)?;
                Ok(Op::Query { surf, what, d: self.operand(ops[0], Ty::B32)?, handle })
            }
        }
    }

    fn decode_bar_red(&self, mods: &[&str], ops: &[&[Tok]]) -> DResult<Op> {
        let kind = if mods.contains(&"popc") {
            Vote::Ballot
        } else if mods.contains(&"and") {
            Vote::All
        } else if mods.contains(&"or") {
            Vote::Any
        } else {
            return bad("bar.red without popc/and/or");
        };
        if ops.len() < 3 {
            return bad("bar.red needs a destination, a barrier and a predicate");
        }
        let pred = ops.last().copied().unwrap_or_default();
        let dty = if kind == Vote::Ballot { Ty::U32 } else { Ty::Pred };
        Ok(Op::BarRed { kind, d: self.operand(ops[0], dty)?, a: self.operand(pred, Ty::Pred)? })
    }
}

fn parse_cmp(s: &str) -> DResult<Cmp> {
    Ok(match s {
        "eq" => Cmp::Eq,
        "ne" => Cmp::Ne,
        "lt" | "lo" => Cmp::Lt,
        "le" | "ls" => Cmp::Le,
        "gt" | "hi" => Cmp::Gt,
        "ge" | "hs" => Cmp::Ge,
        "equ" => Cmp::Equ,
        "neu" => Cmp::Neu,
        "ltu" => Cmp::Ltu,
        "leu" => Cmp::Leu,
        "gtu" => Cmp::Gtu,
        "geu" => Cmp::Geu,
        "num" => Cmp::Num,
        "nan" => Cmp::Nan,
        other => return bad(format!("unknown comparison {other}")),
    })
}

pub fn describe(s: &Statement) -> String {
    match &s.guard {
        Some(g) => format!("@{g} {}", s.opcode),
        None => s.opcode.clone(),
    }
}
