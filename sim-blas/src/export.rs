//! How an export is defined: the vendor's name, the body run under [`crate::status::entry`],
//! and a compile-time check that its signature is bindgen's declaration of that name in
//! `gpupool_shim::cublas` (itself checked against NVIDIA's headers by `cargo xtask abi-check`).

macro_rules! exports {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $body:block )*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> gpupool_shim::cublas::cublasStatus_t {
            crate::status::entry(|| $body)
        }
        const _: unsafe extern "C" fn($($ty),*) -> gpupool_shim::cublas::cublasStatus_t = gpupool_shim::cublas::$name;
    )*};
}
pub(crate) use exports;

/// Writes `value` through an application's out-pointer, refusing NULL.
pub fn out<T>(ptr: *mut T, value: T, what: &str) -> crate::status::BlasResult<()> {
    if ptr.is_null() {
        return crate::status::fail(gpupool_shim::cublas::cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE, || {
            format!("{what} is NULL")
        });
    }
    // SAFETY: non-null; the cuBLAS contract makes the caller responsible for it pointing to a `T`.
    unsafe { ptr.write_unaligned(value) };
    Ok(())
}
