//! How an export is defined: the vendor's name, the body run under [`crate::status::entry`]
//! (no panic crosses `extern "C"`), and a compile-time check that its signature is bindgen's
//! declaration of that name in `gpupool_shim` (itself cross-checked against cann-sys by
//! `cargo xtask cann-check`).

macro_rules! exports {
    ($module:ident -> $ret:ty, on panic $on_panic:expr;
     $( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $body:block )*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            crate::status::entry($on_panic, || $body)
        }
        const _: unsafe extern "C" fn($($ty),*) -> $ret = gpupool_shim::$module::$name;
    )*};
}
pub(crate) use exports;
