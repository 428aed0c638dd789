//! The executor's instruction set: PTX after decoding.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    B8,
    B16,
    B32,
    B64,
    U8,
    U16,
    U32,
    U64,
    S8,
    S16,
    S32,
    S64,
    F16,
    BF16,
    F32,
    F64,
    Pred,
    F16x2,
    BF16x2,
}

impl Ty {
    pub fn bits(self) -> u32 {
        match self {
            Ty::B8 | Ty::U8 | Ty::S8 => 8,
            Ty::B16 | Ty::U16 | Ty::S16 | Ty::F16 | Ty::BF16 => 16,
            Ty::B32 | Ty::U32 | Ty::S32 | Ty::F32 | Ty::F16x2 | Ty::BF16x2 => 32,
            Ty::B64 | Ty::U64 | Ty::S64 | Ty::F64 => 64,
            Ty::Pred => 1,
        }
    }

    pub fn bytes(self) -> usize {
        (self.bits() as usize).div_ceil(8)
    }

    pub fn is_signed(self) -> bool {
        matches!(self, Ty::S8 | Ty::S16 | Ty::S32 | Ty::S64)
    }

    pub fn is_float(self) -> bool {
        matches!(self, Ty::F16 | Ty::BF16 | Ty::F32 | Ty::F64)
    }

    /// The type of twice the width (`.wide` results).
    pub fn widened(self) -> Ty {
        match self {
            Ty::U16 => Ty::U32,
            Ty::S16 => Ty::S32,
            Ty::U32 => Ty::U64,
            Ty::S32 => Ty::S64,
            Ty::B16 => Ty::B32,
            Ty::B32 => Ty::B64,
            other => other,
        }
    }

    /// The PTX spelling, for literal parsing (`.f32`).
    pub fn ptx_name(self) -> String {
        format!(".{}", format!("{self:?}").to_ascii_lowercase())
    }

    pub fn mask(self) -> u64 {
        match self.bits() {
            64 => u64::MAX,
            b => (1u64 << b) - 1,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    Generic,
    Global,
    Shared,
    Local,
    Param,
    Const,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sreg {
    Tid(u8),
    Ntid(u8),
    Ctaid(u8),
    Nctaid(u8),
    Laneid,
    Warpid,
    Nwarpid,
    Smid,
    Nsmid,
    Gridid,
    Clock,
    Clock64,
    Globaltimer,
    GlobaltimerLo,
    GlobaltimerHi,
    /// eq, le, lt, ge, gt
    Lanemask(u8),
    DynSmem,
    TotalSmem,
    Zero,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    Reg(u16),
    /// A predicate register read negated (`!%p`).
    NotPred(u16),
    /// A bit pattern already in the instruction's type.
    Imm(u64),
    Special(Sreg),
    /// `{a, b, ...}`: vector loads/stores and `mov` packing.
    Vec(Vec<Operand>),
    /// `_`: a result nobody reads.
    Sink,
}

#[derive(Clone, Debug, PartialEq)]
pub enum AddrBase {
    Reg(u16),
    /// A constant address; the space is known when it came from a symbol.
    Imm(u64, Option<Space>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Addr {
    pub base: AddrBase,
    pub offset: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Round {
    Nearest,
    Zero,
    Down,
    Up,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bin {
    Add,
    Sub,
    Mul,
    MulWide,
    MulHi,
    Div,
    Rem,
    Min,
    Max,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    Copysign,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Un {
    Neg,
    Not,
    Abs,
    Cnot,
    Popc,
    Clz,
    Brev,
    Bfind,
    Sqrt,
    Rsqrt,
    Rcp,
    Ex2,
    Lg2,
    Sin,
    Cos,
    Tanh,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tern {
    MadLo,
    MadHi,
    MadWide,
    Fma,
    Selp,
    Bfe,
    Bfi,
    Prmt,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoolOp {
    And,
    Or,
    Xor,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Atomic {
    Add,
    Min,
    Max,
    Exch,
    Cas,
    And,
    Or,
    Xor,
    Inc,
    Dec,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shfl {
    Up,
    Down,
    Bfly,
    Idx,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vote {
    All,
    Any,
    Uni,
    Ballot,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Mov {
        ty: Ty,
        d: Operand,
        a: Operand,
    },
    Bin {
        kind: Bin,
        ty: Ty,
        rnd: Round,
        sat: bool,
        d: Operand,
        a: Operand,
        b: Operand,
    },
    Un {
        kind: Un,
        ty: Ty,
        rnd: Round,
        d: Operand,
        a: Operand,
    },
    Tern {
        kind: Tern,
        ty: Ty,
        rnd: Round,
        sat: bool,
        d: Operand,
        a: Operand,
        b: Operand,
        c: Operand,
    },
    Bfi {
        ty: Ty,
        d: Operand,
        a: Operand,
        b: Operand,
        pos: Operand,
        len: Operand,
    },
    /// Funnel shift of the 64-bit pair b:a (`shf.l` / `shf.r`, `.clamp` or `.wrap`).
    Shf {
        left: bool,
        clamp: bool,
        d: Operand,
        a: Operand,
        b: Operand,
        c: Operand,
    },
    Slct {
        ty: Ty,
        cty: Ty,
        d: Operand,
        a: Operand,
        b: Operand,
        c: Operand,
    },
    Setp {
        cmp: Cmp,
        ty: Ty,
        d: u16,
        d2: Option<u16>,
        a: Operand,
        b: Operand,
        combine: Option<(BoolOp, Operand)>,
    },
    Set {
        cmp: Cmp,
        ty: Ty,
        dty: Ty,
        d: u16,
        a: Operand,
        b: Operand,
        combine: Option<(BoolOp, Operand)>,
    },
    Cvt {
        dty: Ty,
        sty: Ty,
        rnd: Round,
        int_round: bool,
        sat: bool,
        d: Operand,
        a: Operand,
    },
    Cvta {
        to: bool,
        space: Space,
        d: Operand,
        a: Operand,
    },
    Ld {
        space: Space,
        ty: Ty,
        n: u8,
        d: Operand,
        addr: Addr,
    },
    St {
        space: Space,
        ty: Ty,
        n: u8,
        addr: Addr,
        a: Operand,
    },
    Atom {
        space: Space,
        kind: Atomic,
        ty: Ty,
        d: Operand,
        addr: Addr,
        a: Operand,
        b: Option<Operand>,
    },
    Bra {
        target: u32,
    },
    /// Returns from a device function; in a kernel, ends the thread.
    Ret,
    /// Ends the thread.
    Exit,
    Call(Box<Call>),
    Trap,
    Barrier,
    BarRed {
        kind: Vote,
        d: Operand,
        a: Operand,
    },
    Nop,
    Nanosleep {
        a: Operand,
    },
    Activemask {
        d: Operand,
    },
    Shfl {
        mode: Shfl,
        d: u16,
        p: Option<u16>,
        a: Operand,
        b: Operand,
        c: Operand,
    },
    Vote {
        mode: Vote,
        d: Operand,
        a: Operand,
    },
    /// `tex.{1d,2d,3d,a1d,a2d}.v4`: `int_coords` for `.s32` coordinates (texel indices);
    /// `layered`: the first coordinate is a layer index; `lod`: `tex.level`'s explicit mipmap
    /// level (an `.f32` operand).
    Tex {
        rank: u8,
        layered: bool,
        int_coords: bool,
        d: Operand,
        handle: Operand,
        coords: Operand,
        lod: Option<Operand>,
    },
    /// `tld4.{r,g,b,a}.2d.v4`: one channel of the four bilinear texels.
    Tld4 {
        comp: u8,
        d: Operand,
        handle: Operand,
        coords: Operand,
    },
    /// `suld.b` (`store: None`) and `sust.b`: `n` elements of `ty`, x in bytes.
    Surf {
        rank: u8,
        ty: Ty,
        n: u8,
        clamp: crate::texture::SurfClamp,
        handle: Operand,
        coords: Operand,
        d: Operand,
        store: bool,
    },
    /// `txq` / `suq`: a property of a texture or surface object.
    Query {
        surf: bool,
        what: Query,
        d: Operand,
        handle: Operand,
    },
}

/// What `txq` / `suq` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Query {
    Width,
    Height,
    Depth,
    NormalizedCoords,
    FilterMode,
    AddrMode(u8),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Instr {
    /// Execute only where the predicate register is true (false when negated).
    pub guard: Option<(u16, bool)>,
    pub op: Op,
}

/// What a `call` calls.
#[derive(Clone, Debug, PartialEq)]
pub enum Callee {
    /// A device function of the module, by name until linked.
    Function(String),
    /// `vprintf(format, args)`: printed on the host's stdout.
    Printf,
    /// `__assertfail(message, file, line, function, charSize)`: a failed `assert`.
    AssertFail,
    /// `cudaGraphSetConditional(handle, value)`: a conditional node's value ([`crate::graph_cond`]).
    GraphSetConditional,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub callee: Callee,
    /// The caller's argument slots (local offset, size).
    pub args: Vec<(u64, u64)>,
    /// The caller's return slot.
    pub ret: Option<(u64, u64)>,
    /// Filled in by linking, for device functions: where the callee starts, and the
    /// copies from the caller's slots into its parameter slots and back.
    pub target_pc: u32,
    pub copies_in: Vec<(u64, u64, u64)>,
    pub copy_out: Option<(u64, u64, u64)>,
}
