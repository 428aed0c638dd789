//! Explicit little-endian encoding of wire values: the [`Encode`] / [`Decode`] pair, the
//! [`Writer`] and [`Reader`] they work on, and the caps that bound every length.
//!
//! Rules every implementation keeps:
//! - integers are little-endian, fixed width; `bool` is one byte, 0 or 1 (anything else is an
//!   error, so each value has exactly one encoding);
//! - `Option<T>` is a tag byte (0 = none, 1 = some) followed by `T`;
//! - `String` is a `u32` byte length, at most [`MAX_STRING_LEN`], then UTF-8;
//! - `Vec<T>` is a `u32` count, at most `T::MAX_COUNT`, then the elements;
//! - byte blobs are newtypes ([`crate::ops::InlineBytes`], [`crate::ops::KernelParams`]) with
//!   their own caps;
//! - decoding checks a length against the bytes that are actually left *before* allocating,
//!   so a decoder never allocates more than a small multiple of the payload it was given
//!   (`Vec<T>` reserves at most `remaining / T::MIN_LEN` elements);
//! - encoding checks the same caps: a value the peer would refuse is refused here, as an
//!   [`EncodeError`], instead of going on the wire.
#![forbid(unsafe_code)]

use thiserror::Error;

/// Longest string on the wire, in bytes (names, messages, tokens). Mangled C++ kernel names
/// run to a few KiB; 64 KiB leaves room without letting one field dominate a frame.
pub const MAX_STRING_LEN: usize = 64 * 1024;

/// Default cap on the element count of a `Vec<T>` (types may lower or raise it through
/// [`Decode::MAX_COUNT`]).
pub const DEFAULT_MAX_COUNT: usize = 65_536;

/// A payload could not be decoded. Every variant is a refusal of the peer's bytes; none of
/// them leaves a partially-built value behind.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    #[error("payload ends early: {needed} more bytes needed, {remaining} left")]
    UnexpectedEnd { needed: usize, remaining: usize },
    #[error("{0} bytes left over after the value")]
    TrailingBytes(usize),
    #[error("unknown {what} opcode {opcode:#06x}")]
    UnknownOpcode { what: &'static str, opcode: u16 },
    #[error("{what}: length {len} exceeds the cap {max}")]
    TooLong { what: &'static str, len: usize, max: usize },
    #[error("string is not UTF-8")]
    InvalidUtf8,
    #[error("{what}: invalid tag {tag}")]
    InvalidTag { what: &'static str, tag: u32 },
    #[error("frame kind {kind:?} cannot carry opcode {opcode:#06x}")]
    KindMismatch { kind: crate::frame::FrameKind, opcode: u16 },
    #[error("a bye frame must have request id 0 and an empty payload")]
    BadBye,
    #[error("a checkpointed frame must have an empty payload")]
    BadCheckpointed,
    #[error("a device output frame must have request id 0")]
    BadDeviceOutput,
}

/// A value could not be encoded because it breaks a cap or a rule the decoder enforces.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EncodeError {
    #[error("{what}: length {len} exceeds the cap {max}")]
    TooLong { what: &'static str, len: usize, max: usize },
    #[error("payload of {len} bytes exceeds MAX_PAYLOAD ({max})")]
    PayloadTooLarge { len: usize, max: u32 },
    #[error("request {0} is synchronous: it cannot be sent without a reply")]
    NoReplyOnSyncRequest(&'static str),
}

/// Appends encoded values to a byte vector. Cap violations are remembered (the first one
/// wins) and reported by [`Writer::finish`], so `Encode::encode` stays infallible.
pub struct Writer<'a> {
    buf: &'a mut Vec<u8>,
    error: Option<EncodeError>,
}

impl<'a> Writer<'a> {
    pub fn new(buf: &'a mut Vec<u8>) -> Self {
        Writer { buf, error: None }
    }
    pub fn put_bytes(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }
    /// Records a cap violation; the first one is the one reported.
    pub fn fail(&mut self, error: EncodeError) {
        self.error.get_or_insert(error);
    }
    /// Checks `len <= max`, recording [`EncodeError::TooLong`] otherwise.
    pub fn check_len(&mut self, what: &'static str, len: usize, max: usize) -> bool {
        if len > max {
            self.fail(EncodeError::TooLong { what, len, max });
            false
        } else {
            true
        }
    }
    /// Bytes written so far (including what was in the vector before).
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    pub fn finish(self) -> Result<(), EncodeError> {
        match self.error {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}

/// Reads encoded values from a byte slice, never past its end.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(DecodeError::UnexpectedEnd { needed: n, remaining: self.buf.len() });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    pub fn take_array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
    /// Reads a `u32` length, checks it against `max` and against the bytes left when each
    /// unit takes at least `min_unit` bytes.
    pub fn length(&mut self, what: &'static str, max: usize, min_unit: usize) -> Result<usize, DecodeError> {
        let len = u32::decode(self)? as usize;
        if len > max {
            return Err(DecodeError::TooLong { what, len, max });
        }
        let needed = len.saturating_mul(min_unit.max(1));
        if needed > self.remaining() {
            return Err(DecodeError::UnexpectedEnd { needed, remaining: self.remaining() });
        }
        Ok(len)
    }
    /// Succeeds only when every byte was consumed.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() { Ok(()) } else { Err(DecodeError::TrailingBytes(self.buf.len())) }
    }
}

/// A value with one explicit little-endian encoding.
pub trait Encode {
    fn encode(&self, w: &mut Writer<'_>);
}

/// The inverse of [`Encode`]: `decode(encode(v)) == v`, and any bytes that decode encode back
/// to themselves (encodings are canonical).
pub trait Decode: Sized {
    /// The fewest bytes any encoding of `Self` takes (used to bound allocations).
    const MIN_LEN: usize;
    /// The most elements a `Vec<Self>` may hold on the wire.
    const MAX_COUNT: usize = DEFAULT_MAX_COUNT;
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError>;
}

macro_rules! int_codec {
    ($($t:ty),*) => {$(
        impl Encode for $t {
            fn encode(&self, w: &mut Writer<'_>) {
                w.put_bytes(&self.to_le_bytes());
            }
        }
        impl Decode for $t {
            const MIN_LEN: usize = size_of::<$t>();
            fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                Ok(<$t>::from_le_bytes(r.take_array()?))
            }
        }
    )*};
}
int_codec!(u8, u16, u32, u64, i8, i16, i32, i64);

impl Encode for bool {
    fn encode(&self, w: &mut Writer<'_>) {
        (*self as u8).encode(w);
    }
}
impl Decode for bool {
    const MIN_LEN: usize = 1;
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::decode(r)? {
            0 => Ok(false),
            1 => Ok(true),
            tag => Err(DecodeError::InvalidTag { what: "bool", tag: tag.into() }),
        }
    }
}

impl<T: Encode, const N: usize> Encode for [T; N] {
    fn encode(&self, w: &mut Writer<'_>) {
        for v in self {
            v.encode(w);
        }
    }
}
impl<T: Decode + Copy + Default, const N: usize> Decode for [T; N] {
    const MIN_LEN: usize = T::MIN_LEN * N;
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut out = [T::default(); N];
        for v in &mut out {
            *v = T::decode(r)?;
        }
        Ok(out)
    }
}

impl<T: Encode> Encode for Option<T> {
    fn encode(&self, w: &mut Writer<'_>) {
        match self {
            None => 0u8.encode(w),
            Some(v) => {
                1u8.encode(w);
                v.encode(w);
            }
        }
    }
}
impl<T: Decode> Decode for Option<T> {
    const MIN_LEN: usize = 1;
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::decode(r)? {
            0 => Ok(None),
            1 => Ok(Some(T::decode(r)?)),
            tag => Err(DecodeError::InvalidTag { what: "option", tag: tag.into() }),
        }
    }
}

// Large payloads travel boxed so that `Request` stays small for every other operation.
impl<T: Encode> Encode for Box<T> {
    fn encode(&self, w: &mut Writer<'_>) {
        (**self).encode(w);
    }
}
impl<T: Decode> Decode for Box<T> {
    const MIN_LEN: usize = T::MIN_LEN;
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        T::decode(r).map(Box::new)
    }
}

impl Encode for String {
    fn encode(&self, w: &mut Writer<'_>) {
        w.check_len("string", self.len(), MAX_STRING_LEN);
        (self.len() as u32).encode(w);
        w.put_bytes(self.as_bytes());
    }
}
impl Decode for String {
    const MIN_LEN: usize = 4;
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let len = r.length("string", MAX_STRING_LEN, 1)?;
        let bytes = r.take(len)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(DecodeError::InvalidUtf8),
        }
    }
}

impl<T: Encode + Decode> Encode for Vec<T> {
    fn encode(&self, w: &mut Writer<'_>) {
        w.check_len("vector", self.len(), T::MAX_COUNT);
        (self.len() as u32).encode(w);
        for v in self {
            v.encode(w);
        }
    }
}
impl<T: Decode> Decode for Vec<T> {
    const MIN_LEN: usize = 4;
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = r.length("vector", T::MAX_COUNT, T::MIN_LEN)?;
        // `length` proved n * MIN_LEN <= remaining, so this reservation is bounded by the
        // payload. Zero-sized encodings (MIN_LEN 0) are bounded by MAX_COUNT alone.
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(T::decode(r)?);
        }
        Ok(out)
    }
}

/// Declares a byte-blob newtype (`u32` length + bytes) with its own cap.
macro_rules! byte_blob {
    ($(#[$meta:meta])* $name:ident, $max:expr, $what:literal) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
        pub struct $name(pub Vec<u8>);
        impl $name {
            /// The most bytes this blob may hold on the wire.
            pub const MAX_LEN: usize = $max;
        }
        impl From<Vec<u8>> for $name {
            fn from(v: Vec<u8>) -> Self {
                $name(v)
            }
        }
        impl $crate::codec::Encode for $name {
            fn encode(&self, w: &mut $crate::codec::Writer<'_>) {
                w.check_len($what, self.0.len(), Self::MAX_LEN);
                (self.0.len() as u32).encode(w);
                w.put_bytes(&self.0);
            }
        }
        impl $crate::codec::Decode for $name {
            const MIN_LEN: usize = 4;
            fn decode(r: &mut $crate::codec::Reader<'_>) -> Result<Self, $crate::codec::DecodeError> {
                let len = r.length($what, Self::MAX_LEN, 1)?;
                Ok($name(r.take(len)?.to_vec()))
            }
        }
    };
}
pub(crate) use byte_blob;

/// Declares a struct whose encoding is its fields in order.
macro_rules! wire_struct {
    ($(#[$meta:meta])* pub struct $name:ident { $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty ),* $(,)? }
     $(max_count = $max:expr;)?) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub struct $name { $( $(#[$fmeta])* pub $field: $ty ),* }
        impl $crate::codec::Encode for $name {
            fn encode(&self, w: &mut $crate::codec::Writer<'_>) {
                $( $crate::codec::Encode::encode(&self.$field, w); )*
            }
        }
        impl $crate::codec::Decode for $name {
            const MIN_LEN: usize = 0 $( + <$ty as $crate::codec::Decode>::MIN_LEN )*;
            $(const MAX_COUNT: usize = $max;)?
            fn decode(r: &mut $crate::codec::Reader<'_>) -> Result<Self, $crate::codec::DecodeError> {
                Ok($name { $( $field: $crate::codec::Decode::decode(r)? ),* })
            }
        }
        #[cfg(test)]
        impl $crate::sample::Sample for $name {
            fn sample(g: &mut $crate::sample::Gen) -> Self {
                $name { $( $field: $crate::sample::Sample::sample(g) ),* }
            }
        }
    };
}
pub(crate) use wire_struct;

/// Declares a `u64` id newtype.
macro_rules! wire_id {
    ($($(#[$meta:meta])* $name:ident;)*) => {$(
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u64);
        impl $crate::codec::Encode for $name {
            fn encode(&self, w: &mut $crate::codec::Writer<'_>) {
                self.0.encode(w);
            }
        }
        impl $crate::codec::Decode for $name {
            const MIN_LEN: usize = 8;
            fn decode(r: &mut $crate::codec::Reader<'_>) -> Result<Self, $crate::codec::DecodeError> {
                Ok($name(u64::decode(r)?))
            }
        }
        #[cfg(test)]
        impl $crate::sample::Sample for $name {
            fn sample(g: &mut $crate::sample::Gen) -> Self {
                $name($crate::sample::Sample::sample(g))
            }
        }
    )*};
}
pub(crate) use wire_id;
