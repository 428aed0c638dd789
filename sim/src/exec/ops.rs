//! Arithmetic on register values. A register holds a bit pattern; the instruction's
//! type says how to read it and how many bits of the result to keep.

use super::ir::{Bin, Cmp, Round, Tern, Ty, Un};
use half::{bf16, f16};
use std::cmp::Ordering;

pub fn sext(v: u64, bits: u32) -> i64 {
    if bits >= 64 {
        v as i64
    } else {
        let s = 64 - bits;
        ((v << s) as i64) >> s
    }
}

/// The value of `v` read as type `ty`, widened to 64 bits (signed types sign-extend).
pub fn int(v: u64, ty: Ty) -> u64 {
    if ty.is_signed() { sext(v, ty.bits()) as u64 } else { v & ty.mask() }
}

pub fn f(v: u64, ty: Ty) -> f64 {
    match ty {
        Ty::F32 => f32::from_bits(v as u32) as f64,
        Ty::F64 => f64::from_bits(v),
        Ty::F16 => f16::from_bits(v as u16).to_f64(),
        Ty::BF16 => bf16::from_bits(v as u16).to_f64(),
        _ => v as f64,
    }
}

/// Rounds an exact-enough f64 to `ty` in the given direction.
pub fn to_float(x: f64, ty: Ty, rnd: Round) -> u64 {
    match ty {
        Ty::F64 => x.to_bits(),
        Ty::F32 => round_f32(x, rnd).to_bits() as u64,
        Ty::F16 => f16::from_f64(x).to_bits() as u64,
        Ty::BF16 => bf16::from_f64(x).to_bits() as u64,
        _ => x as i64 as u64,
    }
}

fn round_f32(x: f64, rnd: Round) -> f32 {
    let n = x as f32;
    if rnd == Round::Nearest || x.is_nan() || (n as f64) == x {
        return n;
    }
    let below = if (n as f64) > x { n.next_down() } else { n };
    let above = if (n as f64) < x { n.next_up() } else { n };
    match rnd {
        Round::Down => below,
        Round::Up => above,
        Round::Zero => {
            if x > 0.0 {
                below
            } else {
                above
            }
        }
        Round::Nearest => n,
    }
}

/// The result of rounding an exact value in direction `rnd`, given its
/// round-to-nearest result `n` and whether the exact value lies above (`Greater`) or
/// below `n`. Works for f32 and f64 through `up`/`down` (the neighbours of `n`).
fn directed<T: Copy + PartialOrd + Default>(n: T, exact_vs_n: Ordering, rnd: Round, up: T, down: T) -> T {
    use Ordering::*;
    match (rnd, exact_vs_n) {
        (Round::Nearest, _) | (_, Equal) => n,
        (Round::Up, Greater) => up,
        (Round::Down, Less) => down,
        (Round::Up, Less) | (Round::Down, Greater) => n,
        (Round::Zero, Greater) => {
            if n < T::default() {
                up
            } else {
                n
            }
        }
        (Round::Zero, Less) => {
            if n > T::default() {
                down
            } else {
                n
            }
        }
    }
}

fn sign(x: f64) -> Ordering {
    x.partial_cmp(&0.0).unwrap_or(Ordering::Equal)
}

/// s and e with s + e == a + b exactly (Knuth's TwoSum).
fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

/// Where the exact value lies against an infinite rounded result: an overflow from
/// finite operands is a finite value past the largest float; with an infinite
/// operand, the exact result is the infinity itself.
fn beyond(n_positive: bool, finite_operands: bool) -> Ordering {
    match (finite_operands, n_positive) {
        (false, _) => Ordering::Equal,
        (true, true) => Ordering::Less,
        (true, false) => Ordering::Greater,
    }
}

fn round32(exact_hi: f64, exact_lo: f64, rnd: Round, finite_operands: bool) -> f32 {
    let n = exact_hi as f32;
    if rnd == Round::Nearest || n.is_nan() {
        return n;
    }
    let ord = if n.is_infinite() {
        beyond(n > 0.0, finite_operands)
    } else {
        // hi - n is exact: n is the float nearest hi, within a factor of two of it.
        sign((exact_hi - n as f64) + exact_lo)
    };
    directed(n, ord, rnd, n.next_up(), n.next_down())
}

fn round64(n: f64, exact_vs_n: Ordering, rnd: Round, finite_operands: bool) -> f64 {
    if n.is_nan() || rnd == Round::Nearest {
        return n;
    }
    let ord = if n.is_infinite() { beyond(n > 0.0, finite_operands) } else { exact_vs_n };
    directed(n, ord, rnd, n.next_up(), n.next_down())
}

fn fbin(kind: Bin, ty: Ty, rnd: Round, a: u64, b: u64) -> u64 {
    if ty == Ty::F64 {
        let (x, y) = (f64::from_bits(a), f64::from_bits(b));
        let fin = x.is_finite() && y.is_finite();
        let r = match kind {
            Bin::Add | Bin::Sub => {
                let y = if kind == Bin::Sub { -y } else { y };
                let (s, e) = two_sum(x, y);
                round64(s, sign(e), rnd, fin)
            }
            Bin::Mul => {
                let p = x * y;
                round64(p, sign(x.mul_add(y, -p)), rnd, fin)
            }
            Bin::Div => {
                let q = x / y;
                // The remainder x - q*y is exact; its sign against y's says where x/y lies.
                let r = (-q).mul_add(y, x);
                let ord = if y > 0.0 { sign(r) } else { sign(r).reverse() };
                round64(q, ord, rnd, fin && y != 0.0)
            }
            Bin::Min => x.min(y),
            Bin::Max => x.max(y),
            Bin::Copysign => y.copysign(x),
            _ => f64::NAN,
        };
        return r.to_bits();
    }
    if ty != Ty::F32 {
        let (x, y) = (f(a, ty), f(b, ty));
        let r = match kind {
            Bin::Add => x + y,
            Bin::Sub => x - y,
            Bin::Mul => x * y,
            Bin::Div => x / y,
            Bin::Min => x.min(y),
            Bin::Max => x.max(y),
            Bin::Copysign => y.copysign(x),
            _ => f64::NAN,
        };
        return to_float(r, ty, rnd);
    }
    let (x, y) = (f(a, ty), f(b, ty));
    let fin = x.is_finite() && y.is_finite();
    let r = match kind {
        Bin::Add | Bin::Sub => {
            let (s, e) = two_sum(x, if kind == Bin::Sub { -y } else { y });
            round32(s, if fin { e } else { 0.0 }, rnd, fin)
        }
        // A product of two f32 is exact in f64.
        Bin::Mul => round32(x * y, 0.0, rnd, fin),
        Bin::Div => {
            let q = (x as f32) / (y as f32);
            if rnd == Round::Nearest || q.is_nan() {
                q
            } else if q.is_infinite() {
                directed(q, beyond(q > 0.0, fin && y != 0.0), rnd, q.next_up(), q.next_down())
            } else {
                let r = x - q as f64 * y;
                let ord = if y > 0.0 { sign(r) } else { sign(r).reverse() };
                directed(q, ord, rnd, q.next_up(), q.next_down())
            }
        }
        Bin::Min => (x as f32).min(y as f32),
        Bin::Max => (x as f32).max(y as f32),
        Bin::Copysign => (y as f32).copysign(x as f32),
        _ => f32::NAN,
    };
    r.to_bits() as u64
}

/// Correctly rounded square root and reciprocal in any direction.
pub fn sqrt_rcp(sqrt: bool, ty: Ty, rnd: Round, a: u64) -> u64 {
    let x = f(a, ty);
    match ty {
        Ty::F64 => {
            let r = if sqrt {
                let s = x.sqrt();
                round64(s, sign((-s).mul_add(s, x)), rnd, x.is_finite())
            } else {
                let q = 1.0 / x;
                let r = (-q).mul_add(x, 1.0);
                round64(q, if x > 0.0 { sign(r) } else { sign(r).reverse() }, rnd, x.is_finite() && x != 0.0)
            };
            r.to_bits()
        }
        Ty::F32 => {
            let r = if sqrt {
                let s = (x as f32).sqrt();
                if rnd == Round::Nearest || !s.is_finite() || s == 0.0 {
                    s
                } else {
                    directed(s, sign(x - s as f64 * s as f64), rnd, s.next_up(), s.next_down())
                }
            } else {
                let q = 1.0 / (x as f32);
                if rnd == Round::Nearest || !q.is_finite() {
                    q
                } else {
                    let r = 1.0 - q as f64 * x;
                    directed(q, if x > 0.0 { sign(r) } else { sign(r).reverse() }, rnd, q.next_up(), q.next_down())
                }
            };
            r.to_bits() as u64
        }
        _ => to_float(if sqrt { x.sqrt() } else { 1.0 / x }, ty, rnd),
    }
}

pub fn bin(kind: Bin, ty: Ty, rnd: Round, sat: bool, a: u64, b: u64) -> u64 {
    if ty.is_float() {
        let r = fbin(kind, ty, rnd, a, b);
        return if sat { saturate(r, ty) } else { r };
    }
    let bits = ty.bits();
    let (ua, ub) = (int(a, ty), int(b, ty));
    let (sa, sb) = (ua as i64, ub as i64);
    let signed = ty.is_signed();
    let r = match kind {
        Bin::Add if sat && signed => (sa as i128 + sb as i128).clamp(i32::MIN as i128, i32::MAX as i128) as u64,
        Bin::Sub if sat && signed => (sa as i128 - sb as i128).clamp(i32::MIN as i128, i32::MAX as i128) as u64,
        Bin::Add => ua.wrapping_add(ub),
        Bin::Sub => ua.wrapping_sub(ub),
        Bin::Mul => ua.wrapping_mul(ub),
        Bin::MulWide => {
            return if signed { (sa.wrapping_mul(sb)) as u64 } else { ua.wrapping_mul(ub) } & ty.widened().mask();
        }
        Bin::MulHi => {
            if signed {
                ((sa as i128 * sb as i128) >> bits) as u64
            } else {
                ((ua as u128 * ub as u128) >> bits) as u64
            }
        }
        // Division by zero has no trap on a GPU: all ones for div, the dividend for rem.
        Bin::Div if ub & ty.mask() == 0 => u64::MAX,
        Bin::Rem if ub & ty.mask() == 0 => ua,
        Bin::Div => {
            if signed {
                sa.wrapping_div(sb) as u64
            } else {
                ua / ub
            }
        }
        Bin::Rem => {
            if signed {
                sa.wrapping_rem(sb) as u64
            } else {
                ua % ub
            }
        }
        Bin::Min => {
            if signed {
                sa.min(sb) as u64
            } else {
                ua.min(ub)
            }
        }
        Bin::Max => {
            if signed {
                sa.max(sb) as u64
            } else {
                ua.max(ub)
            }
        }
        Bin::And => ua & ub,
        Bin::Or => ua | ub,
        Bin::Xor => ua ^ ub,
        // Shift amounts past the width give 0 (or the sign for arithmetic right shifts).
        Bin::Shl => {
            let s = b & 0xffff_ffff;
            if s >= bits as u64 { 0 } else { ua << s }
        }
        Bin::Shr => {
            let s = (b & 0xffff_ffff).min(bits as u64 - 1 + (!signed) as u64);
            if signed {
                (sa >> s.min(63)) as u64
            } else if s >= bits as u64 {
                0
            } else {
                ua >> s
            }
        }
        Bin::Copysign => ub,
    };
    if ty == Ty::Pred { r & 1 } else { r & ty.mask() }
}

fn saturate(bitsv: u64, ty: Ty) -> u64 {
    let x = f(bitsv, ty);
    let c = if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) };
    to_float(c, ty, Round::Nearest)
}

pub fn un(kind: Un, ty: Ty, a: u64) -> u64 {
    if ty.is_float() {
        let x = f(a, ty);
        let r = match kind {
            Un::Neg => return a ^ (1u64 << (ty.bits() - 1)),
            Un::Abs => return a & !(1u64 << (ty.bits() - 1)),
            Un::Sqrt => x.sqrt(),
            Un::Rsqrt => 1.0 / x.sqrt(),
            Un::Rcp => 1.0 / x,
            Un::Ex2 => x.exp2(),
            Un::Lg2 => x.log2(),
            Un::Sin => x.sin(),
            Un::Cos => x.cos(),
            Un::Tanh => x.tanh(),
            _ => f64::NAN,
        };
        return to_float(r, ty, Round::Nearest);
    }
    let bits = ty.bits();
    let v = int(a, ty);
    let r = match kind {
        Un::Neg => (v as i64).wrapping_neg() as u64,
        Un::Not => !v,
        Un::Abs => (v as i64).wrapping_abs() as u64,
        Un::Cnot => (v & ty.mask() == 0) as u64,
        Un::Popc => return (v & ty.mask()).count_ones() as u64,
        Un::Clz => return ((v & ty.mask()).leading_zeros() - (64 - bits)) as u64,
        Un::Brev => (v & ty.mask()).reverse_bits() >> (64 - bits),
        Un::Bfind => {
            let m = v & ty.mask();
            let x = if ty.is_signed() && (sext(m, bits) < 0) { !m & ty.mask() } else { m };
            return if x == 0 { 0xffff_ffff } else { (63 - x.leading_zeros()) as u64 };
        }
        _ => v,
    };
    if ty == Ty::Pred { r & 1 } else { r & ty.mask() }
}

pub fn tern(kind: Tern, ty: Ty, rnd: Round, sat: bool, a: u64, b: u64, c: u64) -> u64 {
    match kind {
        Tern::Fma => {
            let r = if ty == Ty::F64 {
                let (x, y, z) = (f64::from_bits(a), f64::from_bits(b), f64::from_bits(c));
                let s = x.mul_add(y, z);
                // Residual x*y + z - s from the exact product's two parts.
                let p = x * y;
                let pe = x.mul_add(y, -p);
                let (t, te) = two_sum(p, z);
                let fin = x.is_finite() && y.is_finite() && z.is_finite();
                round64(s, sign(((t - s) + te) + pe), rnd, fin).to_bits()
            } else if ty == Ty::F32 {
                // The product of two f32 is exact in f64; add the addend exactly.
                let (x, y, z) = (f(a, ty), f(b, ty), f(c, ty));
                let fin = x.is_finite() && y.is_finite() && z.is_finite();
                let (s, e) = two_sum(x * y, z);
                round32(s, if fin { e } else { 0.0 }, rnd, fin).to_bits() as u64
            } else {
                to_float(f(a, ty).mul_add(f(b, ty), f(c, ty)), ty, rnd)
            };
            if sat { saturate(r, ty) } else { r }
        }
        Tern::MadLo => bin(Bin::Add, ty, rnd, sat, bin(Bin::Mul, ty, rnd, false, a, b), c),
        Tern::MadHi => bin(Bin::Add, ty, rnd, sat, bin(Bin::MulHi, ty, rnd, false, a, b), c),
        Tern::MadWide => {
            let w = ty.widened();
            bin(Bin::Add, w, rnd, false, bin(Bin::MulWide, ty, rnd, false, a, b), c)
        }
        Tern::Selp => {
            if c & 1 != 0 {
                a
            } else {
                b
            }
        }
        Tern::Bfe => {
            let bits = ty.bits() as u64;
            let pos = (b & 0xff).min(bits);
            let len = (c & 0xff).min(bits);
            let v = a & ty.mask();
            let field =
                if len == 0 { 0 } else { (v >> pos.min(63)) & (if len >= 64 { u64::MAX } else { (1 << len) - 1 }) };
            let field = if pos >= bits { 0 } else { field };
            if ty.is_signed() && len > 0 {
                // Sign bit: the field's top bit, or the value's when the field runs off the end.
                let sbit = if pos + len > bits { (v >> (bits - 1)) & 1 } else { (v >> (pos + len - 1).min(63)) & 1 };
                let r = if sbit == 1 && len < 64 { field | (u64::MAX << len) } else { field };
                r & ty.mask()
            } else {
                field
            }
        }
        Tern::Prmt => {
            let bytes = ((b as u32 as u64) << 32 | (a as u32 as u64)).to_le_bytes();
            let mut out = [0u8; 4];
            for (i, o) in out.iter_mut().enumerate() {
                let sel = (c >> (4 * i)) & 0xf;
                let byte = bytes[(sel & 7) as usize];
                *o = if sel & 8 != 0 { if byte & 0x80 != 0 { 0xff } else { 0 } } else { byte };
            }
            u32::from_le_bytes(out) as u64
        }
        Tern::Bfi => a,
    }
}

pub fn bfi(ty: Ty, a: u64, b: u64, pos: u64, len: u64) -> u64 {
    let bits = ty.bits() as u64;
    let (pos, len) = (pos & 0xff, len & 0xff);
    if len == 0 || pos >= bits {
        return b & ty.mask();
    }
    let len = len.min(bits - pos);
    let m = (if len >= 64 { u64::MAX } else { (1u64 << len) - 1 }) << pos;
    ((b & !m) | ((a << pos) & m)) & ty.mask()
}

/// `shf`: shifts the 64-bit value b:a and keeps 32 bits (the high half for `.l`).
pub fn funnel_shift(left: bool, clamp: bool, a: u64, b: u64, c: u64) -> u64 {
    let n = if clamp { (c as u32).min(32) } else { c as u32 & 31 };
    let pair = ((b as u32 as u64) << 32) | a as u32 as u64;
    if left { ((pair << n) >> 32) & 0xffff_ffff } else { (pair >> n) & 0xffff_ffff }
}

pub fn compare(cmp: Cmp, ty: Ty, a: u64, b: u64) -> bool {
    if ty.is_float() {
        let (x, y) = (f(a, ty), f(b, ty));
        let unordered = x.is_nan() || y.is_nan();
        return match cmp {
            Cmp::Eq => !unordered && x == y,
            Cmp::Ne => !unordered && x != y,
            Cmp::Lt => !unordered && x < y,
            Cmp::Le => !unordered && x <= y,
            Cmp::Gt => !unordered && x > y,
            Cmp::Ge => !unordered && x >= y,
            Cmp::Equ => unordered || x == y,
            Cmp::Neu => unordered || x != y,
            Cmp::Ltu => unordered || x < y,
            Cmp::Leu => unordered || x <= y,
            Cmp::Gtu => unordered || x > y,
            Cmp::Geu => unordered || x >= y,
            Cmp::Num => !unordered,
            Cmp::Nan => unordered,
        };
    }
    let (ua, ub) = (int(a, ty), int(b, ty));
    if ty.is_signed() {
        let (x, y) = (ua as i64, ub as i64);
        ordered(cmp, x.cmp(&y))
    } else {
        ordered(cmp, ua.cmp(&ub))
    }
}

fn ordered(cmp: Cmp, o: std::cmp::Ordering) -> bool {
    use std::cmp::Ordering::*;
    match cmp {
        Cmp::Eq | Cmp::Equ => o == Equal,
        Cmp::Ne | Cmp::Neu => o != Equal,
        Cmp::Lt | Cmp::Ltu => o == Less,
        Cmp::Le | Cmp::Leu => o != Greater,
        Cmp::Gt | Cmp::Gtu => o == Greater,
        Cmp::Ge | Cmp::Geu => o != Less,
        Cmp::Num => true,
        Cmp::Nan => false,
    }
}

/// `cvt`: between any two of the integer and floating-point types.
pub fn cvt(dty: Ty, sty: Ty, rnd: Round, int_round: bool, sat: bool, a: u64) -> u64 {
    match (dty.is_float(), sty.is_float()) {
        (false, false) => {
            let v = int(a, sty);
            if sat {
                let (lo, hi) = int_range(dty);
                let x: i128 = if sty.is_signed() { v as i64 as i128 } else { v as i128 };
                return (x.clamp(lo, hi) as u64) & dty.mask();
            }
            v & dty.mask()
        }
        (true, false) => {
            let v: i128 = if sty.is_signed() { int(a, sty) as i64 as i128 } else { int(a, sty) as i128 };
            let r = int_to_float(v, dty, rnd);
            if sat { saturate(r, dty) } else { r }
        }
        (false, true) => {
            let x = f(a, sty);
            let x = match rnd {
                Round::Nearest => x.round_ties_even(),
                Round::Zero => x.trunc(),
                Round::Down => x.floor(),
                Round::Up => x.ceil(),
            };
            // Float to integer saturates to the destination's range. NaN gives 0 from
            // f32 to a 32-bit integer, and the sign bit alone otherwise, as the hardware does.
            let (lo, hi) = int_range(dty);
            if x.is_nan() {
                return if sty == Ty::F32 && dty.bits() <= 32 { 0 } else { 1u64 << (dty.bits() - 1) };
            }
            let v = if x <= lo as f64 {
                lo
            } else if x >= hi as f64 {
                hi
            } else {
                x as i128
            };
            (v as u64) & dty.mask()
        }
        (true, true) => {
            let x = f(a, sty);
            let x = if int_round {
                match rnd {
                    Round::Nearest => x.round_ties_even(),
                    Round::Zero => x.trunc(),
                    Round::Down => x.floor(),
                    Round::Up => x.ceil(),
                }
            } else {
                x
            };
            let r = to_float(x, dty, rnd);
            if sat { saturate(r, dty) } else { r }
        }
    }
}

/// An integer rounded to a float type in any direction, exactly: the nearest float,
/// then one step toward the direction if the integer lies on the other side of it.
fn int_to_float(v: i128, ty: Ty, rnd: Round) -> u64 {
    match ty {
        Ty::F32 => {
            let n = v as f32;
            let ord = if n.is_finite() { v.cmp(&(n as i128)) } else { beyond(n > 0.0, true) };
            directed(n, ord, rnd, n.next_up(), n.next_down()).to_bits() as u64
        }
        Ty::F64 => {
            let n = v as f64;
            directed(n, v.cmp(&(n as i128)), rnd, n.next_up(), n.next_down()).to_bits()
        }
        _ => to_float(v as f64, ty, rnd),
    }
}

fn int_range(ty: Ty) -> (i128, i128) {
    let bits = ty.bits();
    if ty.is_signed() { (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1) } else { (0, (1i128 << bits) - 1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_semantics() {
        assert_eq!(bin(Bin::Add, Ty::U32, Round::Nearest, false, 0xffff_ffff, 1), 0);
        assert_eq!(bin(Bin::MulWide, Ty::S32, Round::Nearest, false, 0xffff_ffff, 4), (-4i64) as u64);
        assert_eq!(bin(Bin::MulHi, Ty::U32, Round::Nearest, false, 0x8000_0000, 4), 2);
        assert_eq!(bin(Bin::Shr, Ty::S32, Round::Nearest, false, 0x8000_0000, 31), 0xffff_ffff);
        assert_eq!(bin(Bin::Shl, Ty::B32, Round::Nearest, false, 1, 32), 0);
        assert_eq!(bin(Bin::Div, Ty::S32, Round::Nearest, false, (-7i32) as u32 as u64, 2), (-3i32) as u32 as u64);
        assert_eq!(bin(Bin::Min, Ty::S32, Round::Nearest, false, (-1i32) as u32 as u64, 1), 0xffff_ffff);
        assert_eq!(bin(Bin::Min, Ty::U32, Round::Nearest, false, (-1i32) as u32 as u64, 1), 1);
        assert_eq!(un(Un::Clz, Ty::B32, 1), 31);
        assert_eq!(un(Un::Popc, Ty::B64, u64::MAX), 64);
        assert_eq!(un(Un::Brev, Ty::B32, 1), 0x8000_0000);
        assert!(compare(Cmp::Lt, Ty::S32, 0xffff_ffff, 0));
        assert!(!compare(Cmp::Lt, Ty::U32, 0xffff_ffff, 0));
        assert_eq!(tern(Tern::Bfe, Ty::U32, Round::Nearest, false, 0xabcd, 4, 8), 0xbc);
        assert_eq!(tern(Tern::Bfe, Ty::S32, Round::Nearest, false, 0x80, 4, 4), 0xffff_fff8);
        assert_eq!(bfi(Ty::B32, 0xf, 0, 4, 4), 0xf0);
        assert_eq!(tern(Tern::Prmt, Ty::B32, Round::Nearest, false, 0x4433_2211, 0x8877_6655, 0x3210), 0x4433_2211);
        assert_eq!(tern(Tern::Prmt, Ty::B32, Round::Nearest, false, 0x4433_2211, 0x8877_6655, 0x7654), 0x8877_6655);
    }

    #[test]
    fn conversions_and_floats() {
        assert_eq!(cvt(Ty::S64, Ty::S32, Round::Nearest, false, false, 0xffff_ffff), u64::MAX);
        assert_eq!(cvt(Ty::U64, Ty::U32, Round::Nearest, false, false, 0xffff_ffff), 0xffff_ffff);
        assert_eq!(cvt(Ty::S32, Ty::F32, Round::Zero, true, false, (-2.7f32).to_bits() as u64), (-2i32) as u32 as u64);
        assert_eq!(cvt(Ty::S32, Ty::F32, Round::Nearest, true, false, 2.5f32.to_bits() as u64), 2);
        assert_eq!(cvt(Ty::U8, Ty::F32, Round::Zero, true, false, 300f32.to_bits() as u64), 255);
        assert_eq!(cvt(Ty::F32, Ty::S32, Round::Nearest, false, false, 3), 3f32.to_bits() as u64);
        assert_eq!(cvt(Ty::F16, Ty::F32, Round::Nearest, false, false, 1.5f32.to_bits() as u64), 0x3e00);
        assert_eq!(cvt(Ty::F32, Ty::F16, Round::Nearest, false, false, 0x3e00), 1.5f32.to_bits() as u64);
        let third = bin(Bin::Div, Ty::F32, Round::Nearest, false, 1f32.to_bits() as u64, 3f32.to_bits() as u64);
        assert_eq!(f32::from_bits(third as u32), 1.0f32 / 3.0);
        let down = bin(Bin::Add, Ty::F32, Round::Down, false, 1f32.to_bits() as u64, 1e-10f32.to_bits() as u64);
        assert_eq!(f32::from_bits(down as u32), 1.0);
        let up = bin(Bin::Add, Ty::F32, Round::Up, false, 1f32.to_bits() as u64, 1e-10f32.to_bits() as u64);
        assert_eq!(f32::from_bits(up as u32), 1.0f32.next_up());
        assert!(compare(Cmp::Neu, Ty::F32, f32::NAN.to_bits() as u64, 0));
        assert!(!compare(Cmp::Ne, Ty::F32, f32::NAN.to_bits() as u64, 0));
    }

    #[test]
    fn directed_rounding_is_exact_even_when_f64_would_round() {
        let one = 1f32.to_bits() as u64;
        let tiny = 0xA180_0000u64; // -2^-60
        assert_eq!(bin(Bin::Add, Ty::F32, Round::Down, false, one, tiny), 0x3f7f_ffff);
        assert_eq!(tern(Tern::Fma, Ty::F32, Round::Zero, false, one, tiny, one), 0x3f7f_ffff);
        assert_eq!(sqrt_rcp(true, Ty::F32, Round::Up, 0.5f32.to_bits() as u64), 0x3f35_04f4);
        let (one64, tiny64) = (1f64.to_bits(), 0xBC30_0000_0000_0000u64);
        assert_eq!(bin(Bin::Add, Ty::F64, Round::Zero, false, one64, tiny64), 0x3fef_ffff_ffff_ffff);
        assert_eq!(bin(Bin::Div, Ty::F64, Round::Up, false, one64, 3f64.to_bits()), 0x3fd5_5555_5555_5556);
        assert_eq!(cvt(Ty::F32, Ty::S64, Round::Zero, false, false, i64::MAX as u64), 0x5eff_ffff);
        assert_eq!(cvt(Ty::F32, Ty::U64, Round::Up, false, false, (1u64 << 53) + 1), 0x5a00_0001);
        // Overflow from finite operands rounds toward zero to the largest float ...
        let big = f32::MAX.to_bits() as u64;
        assert_eq!(bin(Bin::Mul, Ty::F32, Round::Down, false, big, 2f32.to_bits() as u64), big);
        // ... but an infinite operand gives infinity in every direction.
        let inf = f32::INFINITY.to_bits() as u64;
        assert_eq!(bin(Bin::Add, Ty::F32, Round::Zero, false, inf, 0.5f32.to_bits() as u64), inf);
    }

    #[test]
    fn nan_to_integer_follows_the_hardware() {
        let nan32 = f32::NAN.to_bits() as u64;
        assert_eq!(cvt(Ty::S32, Ty::F32, Round::Zero, true, false, nan32), 0);
        assert_eq!(cvt(Ty::S64, Ty::F32, Round::Zero, true, false, nan32), 1 << 63);
        assert_eq!(cvt(Ty::S32, Ty::F64, Round::Zero, true, false, f64::NAN.to_bits()), 1 << 31);
        assert_eq!(funnel_shift(true, false, 0x8000_0000, 0x1, 1), 0x3);
        assert_eq!(funnel_shift(false, true, 0x0, 0x1, 40), 0x1);
    }
}
