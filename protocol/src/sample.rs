//! Pseudo-random wire values for the property tests (test builds only): every value is
//! within the caps, and boundary numbers (0, 1, MAX) come up often.
#![forbid(unsafe_code)]

use crate::ops::{HostSrc, InlineBytes, KernelParams, MemSpace, MemsetValue};

/// A xorshift64* generator: deterministic per seed.
pub(crate) struct Gen(u64);

impl Gen {
    pub(crate) fn new(seed: u64) -> Gen {
        Gen(seed ^ 0x9e37_79b9_7f4a_7c15 | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// A number biased towards the edges: 0, 1, MAX, small, or anything.
    fn edgy(&mut self) -> u64 {
        match self.below(6) {
            0 => 0,
            1 => 1,
            2 => u64::MAX,
            3 => self.below(256),
            _ => self.next(),
        }
    }
    fn bytes(&mut self, max: u64) -> Vec<u8> {
        let n = self.below(max + 1);
        (0..n).map(|_| self.next() as u8).collect()
    }
}

pub(crate) trait Sample {
    fn sample(g: &mut Gen) -> Self;
}

macro_rules! int_sample {
    ($($t:ty),*) => {$(
        impl Sample for $t {
            fn sample(g: &mut Gen) -> Self {
                g.edgy() as $t
            }
        }
    )*};
}
int_sample!(u8, u16, u32, u64, i8, i16, i32, i64);

impl Sample for bool {
    fn sample(g: &mut Gen) -> Self {
        g.next() & 1 == 1
    }
}

impl<T: Sample, const N: usize> Sample for [T; N] {
    fn sample(g: &mut Gen) -> Self {
        std::array::from_fn(|_| T::sample(g))
    }
}

impl<T: Sample> Sample for Option<T> {
    fn sample(g: &mut Gen) -> Self {
        if g.next() & 1 == 1 { Some(T::sample(g)) } else { None }
    }
}

impl<T: Sample> Sample for Box<T> {
    fn sample(g: &mut Gen) -> Self {
        Box::new(T::sample(g))
    }
}

impl Sample for String {
    fn sample(g: &mut Gen) -> Self {
        const CHARS: &[char] = &['a', 'Z', '_', '0', ' ', 'é', '∂', '🦀', '\0'];
        let n = g.below(12);
        (0..n).map(|_| CHARS[g.below(CHARS.len() as u64) as usize]).collect()
    }
}

impl<T: Sample> Sample for Vec<T> {
    fn sample(g: &mut Gen) -> Self {
        let n = g.below(4);
        (0..n).map(|_| T::sample(g)).collect()
    }
}

impl Sample for InlineBytes {
    fn sample(g: &mut Gen) -> Self {
        InlineBytes(g.bytes(64))
    }
}

impl Sample for KernelParams {
    fn sample(g: &mut Gen) -> Self {
        KernelParams(g.bytes(64))
    }
}

impl Sample for HostSrc {
    fn sample(g: &mut Gen) -> Self {
        match g.below(3) {
            0 => HostSrc::Staging(Sample::sample(g)),
            1 => HostSrc::Inline(Sample::sample(g)),
            _ => HostSrc::Region(Sample::sample(g)),
        }
    }
}

impl Sample for MemSpace {
    fn sample(g: &mut Gen) -> Self {
        match g.next() % 4 {
            0 => MemSpace::Device(Sample::sample(g)),
            1 => MemSpace::Staging(Sample::sample(g)),
            2 => MemSpace::Array(Sample::sample(g)),
            _ => MemSpace::Region { id: Sample::sample(g), offset: Sample::sample(g) },
        }
    }
}

impl Sample for MemsetValue {
    fn sample(g: &mut Gen) -> Self {
        match g.below(3) {
            0 => MemsetValue::U8(Sample::sample(g)),
            1 => MemsetValue::U16(Sample::sample(g)),
            _ => MemsetValue::U32(Sample::sample(g)),
        }
    }
}
