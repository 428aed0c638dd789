//! The generator behind the operation tables of [`crate::ops`].
//!
//! `op_table!` turns one table line per operation into: the enum (`Request` / `Reply`), a
//! fieldless `#[repr(u16)]` opcode enum (`RequestOp` / `ReplyOp`) whose discriminants are
//! the opcodes, `op()` / `opcode()` / `name()`, the payload encoding (opcode as `u16`, then
//! the fields in table order), the decoding, and for requests `is_async()` and the reply
//! each one expects. Nothing about an operation is written twice.
#![forbid(unsafe_code)]

/// Fails const evaluation (so the build) when two opcodes of a table are equal.
///
/// Every table runs it in a `const _: () = ...;` item. It is the second of two guards: the
/// generated opcode enum is `#[repr(u16)]` with the opcodes as explicit discriminants, and
/// rustc rejects two equal discriminants (error E0081) before this check even runs.
///
/// ```compile_fail
/// const _: () = gpupool_protocol::ops::assert_unique_opcodes(&[0x0101, 0x0102, 0x0101]);
/// ```
/// ```
/// const _: () = gpupool_protocol::ops::assert_unique_opcodes(&[0x0101, 0x0102, 0x0103]);
/// ```
pub const fn assert_unique_opcodes(codes: &[u16]) {
    let mut i = 0;
    while i < codes.len() {
        let mut j = i + 1;
        while j < codes.len() {
            if codes[i] == codes[j] {
                panic!("duplicate opcode in an operation table");
            }
            j += 1;
        }
        i += 1;
    }
}

/// Fails const evaluation when an opcode lies outside `lo..=hi` (requests live in
/// `0x0001..=0x7fff`, replies in `0x8000..=0xffff`, so neither can be mistaken for the other).
pub const fn assert_opcodes_in(codes: &[u16], lo: u16, hi: u16) {
    let mut i = 0;
    while i < codes.len() {
        if codes[i] < lo || codes[i] > hi {
            panic!("opcode outside its table's range");
        }
        i += 1;
    }
}

macro_rules! is_async_kw {
    () => {
        false
    };
    (async) => {
        true
    };
}
pub(crate) use is_async_kw;

macro_rules! op_table {
    // Requests: `CODE Name method { field: Type, ... } => ReplyName [, async];`
    (
        $(#[$emeta:meta])*
        requests $Enum:ident / $Op:ident in $lo:literal ..= $hi:literal;
        $(
            $(#[$vmeta:meta])*
            $code:literal $name:ident $method:ident { $( $field:ident : $ty:ty ),* $(,)? } => $reply:ident $(, $kw:tt)? ;
        )*
    ) => {
        $crate::ops::macros::op_table! {
            @core $(#[$emeta])* $Enum / $Op in $lo ..= $hi, "request";
            $( $(#[$vmeta])* $code $name { $( $field : $ty ),* } ; )*
        }

        /// The daemon's side of the request table: one method per operation, named in its
        /// table line, taking the operation's fields and answering with the reply the line
        /// names ([`answer`]): an operation without a method, or a method answering with
        /// another reply, does not compile. [`Request::serve`] is the dispatch.
        #[allow(clippy::too_many_arguments)]
        pub trait Serve {
            /// Why an operation failed (the server's error, with its vendor code).
            type Fail;
            /// What the server's loop lends every call (say, the session's staging area).
            type Cx<'a>;
            $(
                $(#[$vmeta])*
                fn $method(&mut self, cx: Self::Cx<'_>, $( $field: $ty ),*) -> Result<answer::$reply, Self::Fail>;
            )*
        }

        impl $Enum {
            /// Hands the request to its method of `server`; the typed answer becomes a
            /// [`Reply`].
            pub fn serve<S: Serve + ?Sized>(self, server: &mut S, cx: S::Cx<'_>) -> Result<Reply, S::Fail> {
                match self {
                    $( Self::$name { $( $field ),* } => server.$method(cx, $( $field ),*).map(Reply::from), )*
                }
            }
        }

        impl $Op {
            /// The reply this request expects on success (`Reply::Error` is always possible).
            pub const fn reply(self) -> ReplyOp {
                match self { $( Self::$name => ReplyOp::$reply, )* }
            }
            /// Whether the request may be sent with [`crate::frame::Flags::NO_REPLY`]: its
            /// errors then surface at the client's next sync point, as CUDA's do.
            pub const fn is_async(self) -> bool {
                match self { $( Self::$name => $crate::ops::macros::is_async_kw!($($kw)?), )* }
            }
        }
    };

    // Replies: `CODE Name { field: Type, ... };`
    (
        $(#[$emeta:meta])*
        replies $Enum:ident / $Op:ident in $lo:literal ..= $hi:literal;
        $(
            $(#[$vmeta:meta])*
            $code:literal $name:ident { $( $field:ident : $ty:ty ),* $(,)? } ;
        )*
    ) => {
        $crate::ops::macros::op_table! {
            @core $(#[$emeta])* $Enum / $Op in $lo ..= $hi, "reply";
            $( $(#[$vmeta])* $code $name { $( $field : $ty ),* } ; )*
        }

        /// One struct per reply of the table, with the reply's fields: what a [`Serve`]
        /// method answers, and what a client's typed call ([`Answer`]) gets back.
        pub mod answer {
            #[allow(unused_imports)]
            use super::*;
            $(
                $(#[$vmeta])*
                #[derive(Debug, Clone, PartialEq, Eq, Hash)]
                pub struct $name { $( pub $field: $ty ),* }
            )*
        }

        /// A reply of the table as its own type ([`answer`]).
        pub trait Answer: TryFrom<$Enum, Error = $Enum> + Into<$Enum> {
            /// The reply's opcode.
            const OP: $Op;
        }

        $(
            impl From<answer::$name> for $Enum {
                fn from(a: answer::$name) -> Self {
                    let answer::$name { $( $field ),* } = a;
                    Self::$name { $( $field ),* }
                }
            }
            impl TryFrom<$Enum> for answer::$name {
                type Error = $Enum;
                /// The reply as this answer; any other reply comes back as the error.
                fn try_from(r: $Enum) -> Result<Self, $Enum> {
                    match r {
                        $Enum::$name { $( $field ),* } => Ok(answer::$name { $( $field ),* }),
                        other => Err(other),
                    }
                }
            }
            impl Answer for answer::$name {
                const OP: $Op = $Op::$name;
            }
        )*

        #[cfg(test)]
        impl $Enum {
            /// The reply through its own answer struct and back; `None` if the struct refused it.
            pub(crate) fn through_answer(self) -> Option<$Enum> {
                match self.op() {
                    $( $Op::$name => answer::$name::try_from(self).ok().map($Enum::from), )*
                }
            }
        }
    };

    (
        @core $(#[$emeta:meta])* $Enum:ident / $Op:ident in $lo:literal ..= $hi:literal, $what:literal;
        $( $(#[$vmeta:meta])* $code:literal $name:ident { $( $field:ident : $ty:ty ),* } ; )*
    ) => {
        $(#[$emeta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $Enum {
            $( $(#[$vmeta])* $name { $( $field: $ty ),* }, )*
        }

        #[doc = concat!("The opcodes of [`", stringify!($Enum), "`]: one fieldless variant per operation, ")]
        #[doc = "its discriminant the opcode (so two equal opcodes do not compile)."]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u16)]
        pub enum $Op {
            $( $name = $code, )*
        }

        const _: () = $crate::ops::assert_unique_opcodes(&[$($code),*]);
        const _: () = $crate::ops::assert_opcodes_in(&[$($code),*], $lo, $hi);

        impl $Op {
            /// Every operation of the table, in table order.
            pub const ALL: &'static [$Op] = &[$($Op::$name),*];

            pub const fn code(self) -> u16 {
                self as u16
            }
            pub const fn from_code(code: u16) -> Option<$Op> {
                match code {
                    $( $code => Some($Op::$name), )*
                    _ => None,
                }
            }
            pub const fn name(self) -> &'static str {
                match self { $( $Op::$name => stringify!($name), )* }
            }
        }

        impl $Enum {
            pub const fn op(&self) -> $Op {
                match self { $( Self::$name { .. } => $Op::$name, )* }
            }
            pub const fn opcode(&self) -> u16 {
                self.op() as u16
            }
            pub const fn name(&self) -> &'static str {
                self.op().name()
            }
            /// Appends the payload (opcode, then fields) to `out`.
            pub fn encode_payload(&self, out: &mut Vec<u8>) -> Result<(), $crate::codec::EncodeError> {
                let mut w = $crate::codec::Writer::new(out);
                $crate::codec::Encode::encode(self, &mut w);
                w.finish()
            }
            /// Decodes a whole payload; bytes left over are an error.
            pub fn decode_payload(payload: &[u8]) -> Result<Self, $crate::codec::DecodeError> {
                let mut r = $crate::codec::Reader::new(payload);
                let v = <Self as $crate::codec::Decode>::decode(&mut r)?;
                r.finish()?;
                Ok(v)
            }
        }

        impl $crate::codec::Encode for $Enum {
            fn encode(&self, w: &mut $crate::codec::Writer<'_>) {
                $crate::codec::Encode::encode(&self.opcode(), w);
                match self {
                    $( Self::$name { $( $field ),* } => { $( $crate::codec::Encode::encode($field, w); )* } )*
                }
            }
        }

        impl $crate::codec::Decode for $Enum {
            const MIN_LEN: usize = 2;
            fn decode(r: &mut $crate::codec::Reader<'_>) -> Result<Self, $crate::codec::DecodeError> {
                let code = <u16 as $crate::codec::Decode>::decode(r)?;
                match $Op::from_code(code) {
                    // Struct expressions evaluate their fields in source order: table order.
                    $( Some($Op::$name) => Ok(Self::$name { $( $field: $crate::codec::Decode::decode(r)? ),* }), )*
                    None => Err($crate::codec::DecodeError::UnknownOpcode { what: $what, opcode: code }),
                }
            }
        }

        #[cfg(test)]
        impl $Enum {
            /// A pseudo-random value of operation `op`, within every cap.
            pub(crate) fn sample(op: $Op, g: &mut $crate::sample::Gen) -> Self {
                match op {
                    $( $Op::$name => Self::$name { $( $field: $crate::sample::Sample::sample(g) ),* }, )*
                }
            }
        }
    };
}
pub(crate) use op_table;
