//! PTX text at module level: what `cuModuleLoadData` needs to know before anything
//! runs. The version and target, each kernel's parameter layout, performance
//! directives, static shared and local memory, the statements of its body, and the
//! module's `.global` / `.const` variables with their initialisers.
//!
//! Instruction semantics live elsewhere (the executor); this module only splits the
//! body into statements so the executor can refuse, by name, what it cannot run.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

type PResult<T> = Result<T, ParseError>;

fn err<T>(msg: impl Into<String>) -> PResult<T> {
    Err(ParseError(msg.into()))
}

#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// Identifiers, directives (`.u32`), registers (`%r1`), opcodes (`ld.global.u32`).
    Word(String),
    Num(String),
    Str(String),
    Punct(char),
}

pub fn tokenize(src: &str) -> PResult<Vec<Tok>> {
    let b = src.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    let word_char = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'%' | b'.');
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let end = src[i + 2..].find("*/").ok_or_else(|| ParseError("unterminated comment".into()))?;
            i += end + 4;
        } else if c == b'"' {
            let end = src[i + 1..].find('"').ok_or_else(|| ParseError("unterminated string".into()))?;
            out.push(Tok::Str(src[i + 1..i + 1 + end].to_string()));
            i += end + 2;
        } else if c.is_ascii_digit() {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                i += 1;
            }
            out.push(Tok::Num(src[s..i].to_string()));
        } else if word_char(c) {
            let s = i;
            while i < b.len() && word_char(b[i]) {
                i += 1;
            }
            out.push(Tok::Word(src[s..i].to_string()));
        } else {
            out.push(Tok::Punct(c as char));
            i += 1;
        }
    }
    Ok(out)
}

/// Size in bytes of a PTX fundamental type (`.u32`, `.f16`, `.pred`, ...).
pub fn type_size(ty: &str) -> Option<u64> {
    Some(match ty {
        ".b8" | ".u8" | ".s8" | ".pred" => 1,
        ".b16" | ".u16" | ".s16" | ".f16" | ".bf16" => 2,
        ".b32" | ".u32" | ".s32" | ".f32" | ".f16x2" | ".bf16x2" | ".tf32" => 4,
        ".b64" | ".u64" | ".s64" | ".f64" => 8,
        ".b128" => 16,
        _ => return None,
    })
}

/// A parameter of a kernel, as `cuFuncGetParamInfo` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: String,
    pub offset: u64,
    pub size: u64,
    pub align: u64,
}

/// One statement of a kernel body: an optional guard, the opcode, the operands.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    pub guard: Option<String>,
    pub opcode: String,
    pub operands: Vec<Tok>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Body {
    /// Instructions in order; labels are kept as `Label` entries.
    pub items: Vec<BodyItem>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum BodyItem {
    Label(String),
    /// A declaration inside the body (`.reg`, `.local`, `.shared`, `.param`).
    Decl(Decl),
    Instr(Statement),
}

/// A kernel (`.entry`) or a device function (`.func`).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub name: String,
    /// A `.func`'s return parameters (`func_retval0`); empty for kernels.
    pub returns: Vec<Param>,
    pub params: Vec<Param>,
    pub param_bytes: u64,
    pub maxntid: Option<[u32; 3]>,
    pub reqntid: Option<[u32; 3]>,
    pub body: Body,
}

/// A variable declaration (`.global`, `.const`, `.shared`, `.local`, `.reg`).
#[derive(Debug, Clone, PartialEq)]
pub struct Decl {
    pub space: String,
    pub name: String,
    pub ty: String,
    pub align: u64,
    /// Elements (product of the array dimensions; 1 for scalars; `None` for `[]`).
    pub count: Option<u64>,
    pub vector: u64,
    /// `%r<10>` declares 10 registers.
    pub reg_range: Option<u64>,
    pub init: Option<Vec<Tok>>,
    pub external: bool,
}

impl Decl {
    pub fn elem_size(&self) -> u64 {
        type_size(&self.ty).unwrap_or(1) * self.vector
    }

    pub fn byte_size(&self) -> Option<u64> {
        self.count.map(|n| n * self.elem_size())
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Module {
    /// e.g. (8, 5) for `.version 8.5`.
    pub version: (u32, u32),
    /// e.g. 90 for `.target sm_90a`.
    pub target_sm: u32,
    pub address_size: u32,
    pub entries: Vec<Entry>,
    pub variables: Vec<Decl>,
    /// Device functions defined in the module.
    pub functions: Vec<Entry>,
    /// Device functions declared `.extern` (provided by the driver, like `vprintf`).
    pub extern_functions: Vec<String>,
}

struct Cursor<'a> {
    toks: &'a [Tok],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<&'a Tok> {
        self.toks.get(self.pos)
    }
    fn next(&mut self) -> Option<&'a Tok> {
        let t = self.toks.get(self.pos);
        self.pos += 1;
        t
    }
    fn word(&mut self) -> PResult<&'a str> {
        match self.next() {
            Some(Tok::Word(w)) => Ok(w),
            other => err(format!("expected a name, found {other:?}")),
        }
    }
    fn num(&mut self) -> PResult<u64> {
        match self.next() {
            Some(Tok::Num(n)) => parse_uint(n).ok_or_else(|| ParseError(format!("bad number {n}"))),
            other => err(format!("expected a number, found {other:?}")),
        }
    }
    fn punct(&mut self, c: char) -> PResult<()> {
        match self.next() {
            Some(Tok::Punct(p)) if *p == c => Ok(()),
            other => err(format!("expected '{c}', found {other:?}")),
        }
    }
    fn is_punct(&self, c: char) -> bool {
        matches!(self.peek(), Some(Tok::Punct(p)) if *p == c)
    }
    /// Skips a balanced `{ ... }` block starting at the current `{`.
    fn skip_block(&mut self) -> PResult<()> {
        let mut depth = 0usize;
        loop {
            match self.next() {
                Some(Tok::Punct('{')) => depth += 1,
                Some(Tok::Punct('}')) => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(());
                    }
                }
                Some(_) => {}
                None => return err("unbalanced braces"),
            }
        }
    }
    fn skip_past(&mut self, c: char) -> PResult<()> {
        loop {
            match self.next() {
                Some(Tok::Punct(p)) if *p == c => return Ok(()),
                Some(_) => {}
                None => return err(format!("missing '{c}'")),
            }
        }
    }
}

pub fn parse_uint(n: &str) -> Option<u64> {
    let n = n.trim_end_matches(['U', 'u']);
    if let Some(h) = n.strip_prefix("0x").or_else(|| n.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if n.len() > 1 && n.starts_with('0') && n.bytes().all(|b| b.is_ascii_digit()) {
        u64::from_str_radix(&n[1..], 8).ok()
    } else {
        n.parse().ok()
    }
}

/// Parses a variable declaration after its state space word.
fn parse_decl(c: &mut Cursor, space: &str, external: bool) -> PResult<Decl> {
    let mut align = 0;
    let mut ty = String::new();
    let mut vector = 1;
    // After `.ptr`, `.space` and `.align N` describe the pointee, not the parameter.
    let mut pointee = false;
    loop {
        match c.peek() {
            Some(Tok::Word(w)) if w == ".align" => {
                c.next();
                let n = c.num()?;
                if !pointee {
                    align = n;
                }
            }
            Some(Tok::Word(w)) if w == ".ptr" => {
                c.next();
                pointee = true;
            }
            Some(Tok::Word(w)) if w == ".v2" || w == ".v4" || w == ".v8" => {
                vector = w[2..].parse().unwrap_or(1);
                c.next();
            }
            Some(Tok::Word(w)) if type_size(w).is_some() => {
                ty = w.clone();
                c.next();
            }
            Some(Tok::Word(w)) if w.starts_with('.') => {
                // .ptr, .attribute(...) and other qualifiers that do not affect layout.
                c.next();
                if c.is_punct('(') {
                    c.skip_past(')')?;
                }
            }
            _ => break,
        }
    }
    if ty.is_empty() {
        return err(format!("{space} declaration without a type"));
    }
    let name = c.word()?.to_string();
    let mut reg_range = None;
    if c.is_punct('<') {
        c.next();
        reg_range = Some(c.num()?);
        c.punct('>')?;
    }
    let mut count = Some(1u64);
    while c.is_punct('[') {
        c.next();
        if c.is_punct(']') {
            count = None;
        } else {
            let n = c.num()?;
            count = count.map(|k| k * n);
        }
        c.punct(']')?;
    }
    let mut init = None;
    if c.is_punct('=') {
        c.next();
        let start = c.pos;
        while !c.is_punct(';') {
            if c.next().is_none() {
                return err("unterminated initialiser");
            }
        }
        init = Some(c.toks[start..c.pos].to_vec());
    }
    let elem = type_size(&ty).unwrap_or(1) * vector;
    if align == 0 {
        align = elem;
    }
    let mut d = Decl { space: space.to_string(), name, ty, align, count, vector, reg_range, init, external };
    if d.count.is_none()
        && let Some(init) = &d.init
    {
        let values = init.iter().filter(|t| matches!(t, Tok::Num(_) | Tok::Word(_))).count() as u64;
        d.count = Some(values.div_ceil(d.vector.max(1)));
    }
    Ok(d)
}

fn parse_params(c: &mut Cursor) -> PResult<(Vec<Param>, u64)> {
    c.punct('(')?;
    let mut params = Vec::new();
    let mut offset = 0u64;
    while !c.is_punct(')') {
        let w = c.word()?;
        if w != ".param" && w != ".reg" {
            return err(format!("expected .param in a parameter list, found {w}"));
        }
        let d = parse_decl(c, ".param", false)?;
        let size = d.byte_size().ok_or_else(|| ParseError(format!("parameter {} has no size", d.name)))?;
        let align = d.align.max(1);
        offset = offset.next_multiple_of(align);
        params.push(Param { name: d.name, offset, size, align });
        offset += size;
        if c.is_punct(',') {
            c.next();
        }
    }
    c.punct(')')?;
    Ok((params, offset))
}

fn parse_dims(c: &mut Cursor) -> PResult<[u32; 3]> {
    let mut d = [1u32; 3];
    for (i, slot) in d.iter_mut().enumerate() {
        if i > 0 {
            if !c.is_punct(',') {
                break;
            }
            c.next();
        }
        *slot = c.num()? as u32;
    }
    Ok(d)
}

fn parse_body(c: &mut Cursor) -> PResult<Body> {
    c.punct('{')?;
    let mut items = Vec::new();
    let mut depth = 1usize;
    while depth > 0 {
        match c.peek() {
            None => return err("kernel body is not closed"),
            Some(Tok::Punct('{')) => {
                c.next();
                depth += 1;
            }
            Some(Tok::Punct('}')) => {
                c.next();
                depth -= 1;
            }
            Some(Tok::Punct(';')) => {
                c.next();
            }
            Some(Tok::Word(w)) if matches!(w.as_str(), ".reg" | ".local" | ".shared" | ".param") => {
                let space = w.clone();
                c.next();
                let mut d = parse_decl(c, &space, false)?;
                // `.reg .b32 %r<4>, %f<2>;` is several declarations of one type.
                let mut more = Vec::new();
                while c.is_punct(',') {
                    c.next();
                    let name = c.word()?.to_string();
                    let mut extra = Decl { name, reg_range: None, ..d.clone() };
                    if c.is_punct('<') {
                        c.next();
                        extra.reg_range = Some(c.num()?);
                        c.punct('>')?;
                    }
                    more.push(extra);
                }
                c.punct(';')?;
                d.external = false;
                items.push(BodyItem::Decl(d));
                items.extend(more.into_iter().map(BodyItem::Decl));
            }
            Some(Tok::Word(w)) if w == ".pragma" || w == ".loc" || w == ".file" => {
                c.skip_past(';').or(Ok::<(), ParseError>(()))?;
            }
            Some(Tok::Word(w)) if matches!(c.toks.get(c.pos + 1), Some(Tok::Punct(':'))) => {
                items.push(BodyItem::Label(w.clone()));
                c.pos += 2;
            }
            Some(_) => {
                let mut guard = None;
                if c.is_punct('@') {
                    c.next();
                    let neg = if c.is_punct('!') {
                        c.next();
                        "!"
                    } else {
                        ""
                    };
                    guard = Some(format!("{neg}{}", c.word()?));
                }
                let opcode = c.word()?.to_string();
                let start = c.pos;
                while !c.is_punct(';') {
                    if c.next().is_none() {
                        return err(format!("statement `{opcode}` is not terminated"));
                    }
                }
                let operands = c.toks[start..c.pos].to_vec();
                c.next();
                items.push(BodyItem::Instr(Statement { guard, opcode, operands }));
            }
        }
    }
    Ok(Body { items })
}

/// The word two tokens before `pos` (the linkage before `.func`), if any.
fn t_prev(toks: &[Tok], pos: usize) -> Option<&str> {
    match toks.get(pos.checked_sub(2)?) {
        Some(Tok::Word(w)) => Some(w),
        _ => None,
    }
}

/// Parses a PTX module's text.
pub fn parse(src: &str) -> PResult<Module> {
    let toks = tokenize(src)?;
    let mut c = Cursor { toks: &toks, pos: 0 };
    let mut m = Module { address_size: 64, ..Default::default() };
    let mut saw_version = false;
    while let Some(t) = c.next() {
        let Tok::Word(w) = t else {
            if matches!(t, Tok::Punct(';')) {
                continue;
            }
            return err(format!("unexpected {t:?} at module level"));
        };
        match w.as_str() {
            ".version" => {
                let v = match c.next() {
                    Some(Tok::Num(n)) => n.clone(),
                    other => return err(format!(".version needs a number, found {other:?}")),
                };
                let (a, b) = v.split_once('.').unwrap_or((&v, "0"));
                m.version = (a.parse().unwrap_or(0), b.parse().unwrap_or(0));
                saw_version = true;
            }
            ".target" => loop {
                let t = c.word()?;
                if let Some(sm) = t.strip_prefix("sm_").or_else(|| t.strip_prefix("compute_")) {
                    m.target_sm = sm.trim_end_matches(|ch: char| ch.is_ascii_alphabetic()).parse().unwrap_or(0);
                }
                if !c.is_punct(',') {
                    break;
                }
                c.next();
            },
            ".address_size" => m.address_size = c.num()? as u32,
            ".visible" | ".weak" | ".extern" | ".common" => {
                let external = w == ".extern";
                // The linkage applies to the declaration that follows.
                match c.peek() {
                    Some(Tok::Word(n)) if n == ".entry" || n == ".func" => {}
                    Some(Tok::Word(n)) if matches!(n.as_str(), ".global" | ".const" | ".shared") => {
                        let space = n.clone();
                        c.next();
                        let d = parse_decl(&mut c, &space, external)?;
                        c.punct(';')?;
                        m.variables.push(d);
                    }
                    other => return err(format!("{w} followed by {other:?}")),
                }
            }
            ".global" | ".const" | ".shared" => {
                let d = parse_decl(&mut c, w, false)?;
                c.punct(';')?;
                m.variables.push(d);
            }
            ".entry" => {
                let name = c.word()?.to_string();
                let (params, param_bytes) = if c.is_punct('(') { parse_params(&mut c)? } else { (Vec::new(), 0) };
                let mut e = Entry {
                    name,
                    returns: Vec::new(),
                    params,
                    param_bytes,
                    maxntid: None,
                    reqntid: None,
                    body: Body::default(),
                };
                loop {
                    match c.peek() {
                        Some(Tok::Word(d)) if d == ".maxntid" => {
                            c.next();
                            e.maxntid = Some(parse_dims(&mut c)?);
                        }
                        Some(Tok::Word(d)) if d == ".reqntid" => {
                            c.next();
                            e.reqntid = Some(parse_dims(&mut c)?);
                        }
                        Some(Tok::Word(d)) if d.starts_with('.') => {
                            // .minnctapersm, .maxnreg, .maxclusterrank, .explicitcluster, ...
                            c.next();
                            while matches!(c.peek(), Some(Tok::Num(_)) | Some(Tok::Punct(','))) {
                                c.next();
                            }
                        }
                        _ => break,
                    }
                }
                if c.is_punct(';') {
                    c.next();
                    continue;
                }
                e.body = parse_body(&mut c)?;
                m.entries.push(e);
            }
            ".func" => {
                let external = matches!(t_prev(&toks, c.pos), Some(".extern"));
                let returns = if c.is_punct('(') { parse_params(&mut c)?.0 } else { Vec::new() };
                let name = c.word()?.to_string();
                let (params, param_bytes) = if c.is_punct('(') { parse_params(&mut c)? } else { (Vec::new(), 0) };
                while matches!(c.peek(), Some(Tok::Word(d)) if d.starts_with('.')) {
                    c.next();
                    while matches!(c.peek(), Some(Tok::Num(_)) | Some(Tok::Punct(','))) {
                        c.next();
                    }
                }
                if c.is_punct('{') {
                    let body = parse_body(&mut c)?;
                    m.functions.push(Entry { name, returns, params, param_bytes, maxntid: None, reqntid: None, body });
                } else {
                    c.punct(';')?;
                    if external {
                        m.extern_functions.push(name);
                    }
                }
            }
            ".file" | ".loc" => {
                while matches!(c.peek(), Some(Tok::Num(_)) | Some(Tok::Str(_)) | Some(Tok::Punct(','))) {
                    c.next();
                }
            }
            ".section" => {
                c.word()?;
                c.skip_block()?;
            }
            ".pragma" => c.skip_past(';')?,
            other => return err(format!("unsupported module-level directive {other}")),
        }
    }
    if !saw_version {
        return err("not PTX: no .version directive");
    }
    Ok(m)
}

impl Entry {
    /// Bytes of `.shared` declared in the body plus module-scope `.shared` variables the
    /// body names.
    pub fn static_shared(&self, module: &Module) -> u64 {
        let own: u64 = self.decls(".shared").filter_map(Decl::byte_size).sum();
        let named: u64 = module
            .variables
            .iter()
            .filter(|v| v.space == ".shared" && !v.external && self.mentions(&v.name))
            .filter_map(Decl::byte_size)
            .sum();
        own + named
    }

    pub fn local_bytes(&self) -> u64 {
        self.decls(".local").filter_map(Decl::byte_size).sum()
    }

    /// Registers declared, in 32-bit units, as `cuFuncGetAttribute(NUM_REGS)` reports.
    pub fn registers(&self) -> u64 {
        self.decls(".reg")
            .map(|d| d.reg_range.unwrap_or(1) * d.elem_size().div_ceil(4).max(1))
            .sum::<u64>()
            .clamp(1, 255)
    }

    fn decls<'a>(&'a self, space: &'a str) -> impl Iterator<Item = &'a Decl> + 'a {
        self.body.items.iter().filter_map(move |i| match i {
            BodyItem::Decl(d) if d.space == space => Some(d),
            _ => None,
        })
    }

    fn mentions(&self, name: &str) -> bool {
        self.body.items.iter().any(|i| match i {
            BodyItem::Instr(s) => s.operands.iter().any(|t| matches!(t, Tok::Word(w) if w == name)),
            _ => false,
        })
    }

    /// The most threads a block may have: `.reqntid`/`.maxntid`, else 1024.
    pub fn max_threads(&self) -> u32 {
        self.reqntid.or(self.maxntid).map(|d| d.iter().product::<u32>().min(1024)).unwrap_or(1024)
    }
}

/// Encodes an initialiser of `decl` into little-endian bytes.
pub fn encode_initializer(decl: &Decl) -> PResult<Vec<u8>> {
    let size = decl.byte_size().ok_or_else(|| ParseError(format!("{} has no size", decl.name)))?;
    let mut out = vec![0u8; size as usize];
    let Some(init) = &decl.init else { return Ok(out) };
    let elem = type_size(&decl.ty).unwrap_or(1) as usize;
    let mut idx = 0usize;
    let mut negate = false;
    for t in init {
        let text = match t {
            Tok::Punct('{') | Tok::Punct('}') | Tok::Punct(',') => continue,
            Tok::Punct('-') => {
                negate = true;
                continue;
            }
            Tok::Num(n) => n.as_str(),
            other => {
                return err(format!(
                    "initialiser of {} uses {other:?}; only numeric initialisers are supported",
                    decl.name
                ));
            }
        };
        let bits = literal_bits(text, &decl.ty, negate)
            .ok_or_else(|| ParseError(format!("bad literal {text} in initialiser of {}", decl.name)))?;
        negate = false;
        let at = idx * elem;
        if at + elem > out.len() {
            return err(format!("initialiser of {} has more values than the variable holds", decl.name));
        }
        out[at..at + elem].copy_from_slice(&bits.to_le_bytes()[..elem]);
        idx += 1;
    }
    Ok(out)
}

/// The bit pattern of a PTX literal for type `ty`.
pub fn literal_bits(text: &str, ty: &str, negate: bool) -> Option<u64> {
    let float = matches!(ty, ".f32" | ".f64" | ".f16" | ".bf16");
    if let Some(h) = text.strip_prefix("0f").or_else(|| text.strip_prefix("0F")) {
        let b = u32::from_str_radix(h, 16).ok()?;
        return Some(if negate { (b ^ 0x8000_0000) as u64 } else { b as u64 });
    }
    if let Some(h) = text.strip_prefix("0d").or_else(|| text.strip_prefix("0D")) {
        let b = u64::from_str_radix(h, 16).ok()?;
        return Some(if negate { b ^ (1 << 63) } else { b });
    }
    if float && (text.contains('.') || text.contains('e')) {
        let v: f64 = text.parse().ok()?;
        let v = if negate { -v } else { v };
        return Some(if ty == ".f64" { v.to_bits() } else { (v as f32).to_bits() as u64 });
    }
    let v = parse_uint(text)?;
    if float {
        let f = if negate { -(v as f64) } else { v as f64 };
        return Some(if ty == ".f64" { f.to_bits() } else { (f as f32).to_bits() as u64 });
    }
    Some(if negate { v.wrapping_neg() } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NVRTC_LIKE: &str = r#"
//
// Generated by NVIDIA NVVM Compiler
.version 8.5
.target sm_90
.address_size 64

.global .align 4 .b8 table[16] = {1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0};
.const .align 4 .f32 scale = 0f40000000;
.extern .shared .align 16 .b8 dyn_smem[];

.visible .entry saxpy(
	.param .f32 saxpy_param_0,
	.param .u64 .ptr .global .align 4 saxpy_param_1,
	.param .u64 saxpy_param_2,
	.param .u32 saxpy_param_3,
	.param .align 8 .b8 saxpy_param_4[24]
)
.maxntid 256, 1, 1
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<6>;
	.reg .f32 	%f<4>;
	.reg .b64 	%rd<8>;
	.shared .align 4 .b8 tile[1024];

	ld.param.f32 	%f1, [saxpy_param_0];
	mov.u32 	%r1, %ctaid.x;
	setp.ge.s32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;
	st.global.f32 	[%rd7], %f3;
$L__BB0_2:
	ret;

}
"#;

    #[test]
    fn parses_what_nvrtc_emits() {
        let m = parse(NVRTC_LIKE).unwrap();
        assert_eq!(m.version, (8, 5));
        assert_eq!(m.target_sm, 90);
        let e = &m.entries[0];
        assert_eq!(e.name, "saxpy");
        let layout: Vec<(u64, u64)> = e.params.iter().map(|p| (p.offset, p.size)).collect();
        assert_eq!(layout, vec![(0, 4), (8, 8), (16, 8), (24, 4), (32, 24)]);
        assert_eq!(e.param_bytes, 56);
        assert_eq!(e.max_threads(), 256);
        assert_eq!(e.static_shared(&m), 1024);
        assert_eq!(e.registers(), 2 + 6 + 4 + 16);
        let opcodes: Vec<&str> = e
            .body
            .items
            .iter()
            .filter_map(|i| if let BodyItem::Instr(s) = i { Some(s.opcode.as_str()) } else { None })
            .collect();
        assert_eq!(opcodes, ["ld.param.f32", "mov.u32", "setp.ge.s32", "bra", "st.global.f32", "ret"]);
        let table = m.variables.iter().find(|v| v.name == "table").unwrap();
        assert_eq!(encode_initializer(table).unwrap()[..8], [1, 0, 0, 0, 2, 0, 0, 0]);
        let scale = m.variables.iter().find(|v| v.name == "scale").unwrap();
        assert_eq!(encode_initializer(scale).unwrap(), 2.0f32.to_le_bytes());
    }

    #[test]
    fn rejects_what_is_not_ptx() {
        assert!(parse("hello world").is_err());
        assert!(parse(".version 8.0\n.target sm_90\n.visible .entry k( {").is_err());
    }
}
