//! The exported CUDA driver API, split by family. Every export converts raw arguments
//! into checked values (a null out-pointer is CUDA_ERROR_INVALID_VALUE, a handle this
//! process was never issued INVALID_HANDLE / INVALID_CONTEXT, before any round trip),
//! runs under [`crate::util::entry`] (no panic crosses `extern "C"`), and has exactly the
//! signature of the simulator's export of the same name (checked at compile time against
//! bindgen's declarations by the `cuGetProcAddress` table in [`proc_address`]).
#![allow(clippy::missing_safety_doc, clippy::too_many_arguments, non_snake_case)]

pub mod context;
pub mod copy;
pub mod copy3d;
pub mod device;
pub mod event;
pub mod extra;
pub mod init;
pub mod launch;
pub mod link;
pub mod memory;
pub mod memset;
pub mod module;
pub mod nvml;
pub mod occupancy;
pub mod proc_address;
pub mod stream;

/// Which stream the NULL handle means for the calling variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultStream {
    Legacy,
    PerThread,
}

/// Defines the plain export and its per-thread-default-stream twin (`_ptds`/`_ptsz`)
/// from one implementation that takes the meaning of the NULL stream last.
macro_rules! stream_variants {
    ($($legacy:ident / $ptds:ident => $imp:ident ( $($arg:ident : $ty:ty),* $(,)? );)*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $legacy($($arg: $ty),*) -> gpupool_shim::cuda::CUresult {
            crate::util::entry(|| $imp($($arg,)* crate::api::DefaultStream::Legacy))
        }
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $ptds($($arg: $ty),*) -> gpupool_shim::cuda::CUresult {
            crate::util::entry(|| $imp($($arg,)* crate::api::DefaultStream::PerThread))
        }
    )*};
}
pub(crate) use stream_variants;
