//! Initialisation, versions and error strings.

use super::{errors, out};
use crate::driver::state;
use crate::error::{cuda_entry, fail};
use gpupool_shim::cuda::CUresult;
use std::os::raw::{c_char, c_int, c_uint};

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    cuda_entry(|| state().init(flags))
}

/// Works before `cuInit`, as the real driver's does.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    cuda_entry(|| out(version, state().config.driver_version))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorString(error: CUresult, text: *mut *const c_char) -> CUresult {
    cuda_entry(|| match errors::description_c(error) {
        Some(s) => out(text, s.as_ptr()),
        None => {
            let _ = out(text, std::ptr::null());
            fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown CUresult {}", error.0))
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetErrorName(error: CUresult, text: *mut *const c_char) -> CUresult {
    cuda_entry(|| match errors::name_c(error) {
        Some(s) => out(text, s.as_ptr()),
        None => {
            let _ = out(text, std::ptr::null());
            fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown CUresult {}", error.0))
        }
    })
}
