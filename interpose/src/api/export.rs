//! How an export table line becomes an `extern "C"` function (see [`exports!`]).
//!
//! Every argument is declared with its role. The generated shell checks what the role
//! promises before the implementation runs, so a NULL out-pointer or input struct never
//! costs a round trip, and it writes out-values only once the implementation succeeded,
//! so a failed call leaves the caller's memory as it was.

use gpupool_shim::cuda::CUresult;
use gpupool_shim::nvml::nvmlReturn_t;
use std::os::raw::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The result type of an exported API: what success, a refused argument and a contained
/// panic are called there.
pub trait ApiResult: Copy + Sized {
    const SUCCESS: Self;
    const INVALID_ARGUMENT: Self;
    const INTERNAL: Self;
}

impl ApiResult for CUresult {
    const SUCCESS: Self = CUresult::CUDA_SUCCESS;
    const INVALID_ARGUMENT: Self = CUresult::CUDA_ERROR_INVALID_VALUE;
    const INTERNAL: Self = CUresult::CUDA_ERROR_UNKNOWN;
}

impl ApiResult for nvmlReturn_t {
    const SUCCESS: Self = nvmlReturn_t::NVML_SUCCESS;
    const INVALID_ARGUMENT: Self = nvmlReturn_t::NVML_ERROR_INVALID_ARGUMENT;
    const INTERNAL: Self = nvmlReturn_t::NVML_ERROR_UNKNOWN;
}

/// Runs an export's body: a panic never crosses `extern "C"` (it is the API's "unknown
/// error", logged).
pub fn entry<E: ApiResult>(body: impl FnOnce() -> Result<(), E>) -> E {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => E::SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => {
            crate::util::log("internal panic in an exported call; returning the API's unknown error");
            E::INTERNAL
        }
    }
}

/// Role `out`: the pointer must be non-NULL.
pub fn require<T, E: ApiResult>(p: *mut T) -> Result<(), E> {
    if p.is_null() { Err(E::INVALID_ARGUMENT) } else { Ok(()) }
}

/// Roles `out` (checked non-NULL before the call) and `opt` (NULL means "not wanted"):
/// writes the implementation's value after it succeeded.
pub fn put<T>(p: *mut T, value: T) {
    if !p.is_null() {
        // SAFETY: non-null; the API's contract makes the caller responsible for it
        // pointing to a writable `T` (unaligned writes: C callers may pack structs).
        unsafe { p.write_unaligned(value) };
    }
}

/// Role `read`: an input struct, copied out of the caller's memory; NULL is refused.
pub fn read<T: Copy, E: ApiResult>(p: *const T) -> Result<T, E> {
    if p.is_null() {
        return Err(E::INVALID_ARGUMENT);
    }
    // SAFETY: non-null; the caller guarantees it points to a readable `T`.
    Ok(unsafe { p.read_unaligned() })
}

/// Role `cstr`: a NUL-terminated UTF-8 string; NULL or invalid UTF-8 is refused.
pub fn c_str<'a, E: ApiResult>(p: *const c_char) -> Result<&'a str, E> {
    if p.is_null() {
        return Err(E::INVALID_ARGUMENT);
    }
    // SAFETY: non-null and, per the API's contract, NUL-terminated.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_str().map_err(|_| E::INVALID_ARGUMENT)
}

/// Writes a tuple of out-values through the matching tuple of pointers.
pub trait PutAll<P> {
    fn put_all(self, ptrs: P);
}

macro_rules! put_all_tuples {
    ($(($($v:ident $p:ident),+))*) => {$(
        impl<$($v),+> PutAll<($(*mut $v,)+)> for ($($v,)+) {
            #[allow(non_snake_case)]
            fn put_all(self, ($($p,)+): ($(*mut $v,)+)) {
                let ($($v,)+) = self;
                $(put($p, $v);)+
            }
        }
    )*};
}
put_all_tuples! { (A pa, B pb) (A pa, B pb, C pc) (A pa, B pb, C pc, D pd) }

/// Defines `extern "C"` exports from table lines. A line is
///
/// ```text
/// cuName [| cuName_ptsz] (arg: ROLE Type, ...) = path::to::implementation;
/// ```
///
/// and the roles are:
/// - `val T`: passed to the implementation as it is;
/// - `read T`: a `*const T` input struct, read (NULL is the API's invalid-argument error);
/// - `cstr`: a `*const c_char` string, passed as `&str` (NULL or bad UTF-8 is refused);
/// - `out T`: a `*mut T` the call must write; NULL is refused before anything else runs;
/// - `opt T`: a `*mut T` the caller may leave NULL.
///
/// The implementation takes the `val`, `read` and `cstr` arguments in order and returns
/// the out-values (`()`, one value, or a tuple in the order of the `out`/`opt` arguments),
/// which the shell writes after it succeeded. With a second name, the line defines the
/// per-thread-default-stream twin too, and the implementation takes a
/// [`super::DefaultStream`] last. The first token of the invocation names the result type
/// (an [`ApiResult`]). Every shell runs under [`entry`].
///
/// Under `cfg(test)` each line with an `out` argument also gets a test, in a module of
/// the export's name, that calls the export with every argument zero (so every pointer
/// NULL) in a process with no daemon, and expects the invalid-argument error: the check
/// is local, before any connection is attempted.
macro_rules! exports {
    // Sort each argument by role into: the shell's parameters, the checks before the
    // call, the implementation's arguments, and the out-pointers.
    (@munch $cx:tt [$($p:tt)*] [$($c:tt)*] [$($a:tt)*] [$($o:tt)*] $n:ident : val $t:ty $(, $($rest:tt)*)?) => {
        $crate::api::export::exports!(@munch $cx [$($p)* $n: $t,] [$($c)*] [$($a)* $n,] [$($o)*] $($($rest)*)?);
    };
    (@munch $cx:tt [$($p:tt)*] [$($c:tt)*] [$($a:tt)*] [$($o:tt)*] $n:ident : read $t:ty $(, $($rest:tt)*)?) => {
        $crate::api::export::exports!(@munch $cx [$($p)* $n: *const $t,]
            [$($c)* let $n = $crate::api::export::read($n)?;] [$($a)* $n,] [$($o)*] $($($rest)*)?);
    };
    (@munch $cx:tt [$($p:tt)*] [$($c:tt)*] [$($a:tt)*] [$($o:tt)*] $n:ident : cstr $(, $($rest:tt)*)?) => {
        $crate::api::export::exports!(@munch $cx [$($p)* $n: *const ::std::os::raw::c_char,]
            [$($c)* let $n = $crate::api::export::c_str($n)?;] [$($a)* $n,] [$($o)*] $($($rest)*)?);
    };
    (@munch $cx:tt [$($p:tt)*] [$($c:tt)*] [$($a:tt)*] [$($o:tt)*] $n:ident : out $t:ty $(, $($rest:tt)*)?) => {
        $crate::api::export::exports!(@munch $cx [$($p)* $n: *mut $t,]
            [$($c)* $crate::api::export::require($n)?;] [$($a)*] [$($o)* (out $n)] $($($rest)*)?);
    };
    (@munch $cx:tt [$($p:tt)*] [$($c:tt)*] [$($a:tt)*] [$($o:tt)*] $n:ident : opt $t:ty $(, $($rest:tt)*)?) => {
        $crate::api::export::exports!(@munch $cx [$($p)* $n: *mut $t,] [$($c)*] [$($a)*] [$($o)* (opt $n)] $($($rest)*)?);
    };

    // All arguments sorted: the export (the implementation takes `DefaultStream::Legacy`
    // last when the line has a twin), the twin, and the local-check test.
    (@munch ($res:ty, $name:ident, (), $imp:path) [$($p:tt)*] [$($c:tt)*] [$($a:tt)*] [$($o:tt)*]) => {
        $crate::api::export::exports!(@shell $res, $name, [$($p)*] [$($c)*] [$($a)*] [$($o)*] ($imp));
        $crate::api::export::exports!(@probe $res, $name, [$($p)*] [$($o)*]);
    };
    (@munch ($res:ty, $name:ident, ($twin:ident), $imp:path) [$($p:tt)*] [$($c:tt)*] [$($a:tt)*] [$($o:tt)*]) => {
        $crate::api::export::exports!(@shell $res, $name,
            [$($p)*] [$($c)*] [$($a)* $crate::api::DefaultStream::Legacy,] [$($o)*] ($imp));
        $crate::api::export::exports!(@shell $res, $twin,
            [$($p)*] [$($c)*] [$($a)* $crate::api::DefaultStream::PerThread,] [$($o)*] ($imp));
        $crate::api::export::exports!(@probe $res, $name, [$($p)*] [$($o)*]);
        $crate::api::export::exports!(@probe $res, $twin, [$($p)*] [$($o)*]);
    };

    (@shell $res:ty, $name:ident, [$($p:tt)*] [$($c:tt)*] [$($a:tt)*] [$($o:tt)*] ($imp:path)) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($p)*) -> $res {
            $crate::api::export::entry::<$res>(|| {
                $($c)*
                $crate::api::export::exports!(@call [$($o)*] ($imp) ($($a)*))
            })
        }
    };

    (@call [] ($imp:path) ($($a:tt)*)) => { $imp($($a)*) };
    (@call [($k:ident $n:ident)] ($imp:path) ($($a:tt)*)) => {{
        $crate::api::export::put($n, $imp($($a)*)?);
        Ok(())
    }};
    (@call [$(($k:ident $n:ident))+] ($imp:path) ($($a:tt)*)) => {{
        $crate::api::export::PutAll::put_all($imp($($a)*)?, ($($n,)+));
        Ok(())
    }};

    // Only lines with an `out` argument promise the invalid-argument error for NULL.
    (@probe $res:ty, $name:ident, [$($p:tt)*] [$((opt $n:ident))*]) => {};
    (@probe $res:ty, $name:ident, [$($pn:ident : $pt:ty,)*] [$($o:tt)*]) => {
        #[cfg(test)]
        #[allow(non_snake_case)]
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[test]
            fn null_out_pointers_are_refused_before_any_round_trip() {
                // SAFETY: every parameter is a C scalar, handle or pointer, for which all
                // zero bits is a valid value (NULL); the export must refuse the call
                // before it dereferences any of them.
                let got = unsafe { super::$name($(::std::mem::zeroed::<$pt>()),*) };
                assert_eq!(got, <$res as $crate::api::export::ApiResult>::INVALID_ARGUMENT);
                assert!(!$crate::client::ever_connected(), "a NULL out-pointer must be refused locally");
            }
        }
    };

    // The entry: one line per export.
    ($res:ty; $($name:ident $(| $twin:ident)? ( $($args:tt)* ) = $imp:path;)*) => {$(
        $crate::api::export::exports!(@munch ($res, $name, ($($twin)?), $imp) [] [] [] [] $($args)*);
    )*};
}
pub(crate) use exports;
