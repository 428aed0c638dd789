//! Initialisation, versions and error strings.

use super::out;
use crate::driver::state;
use crate::error::{cuda_entry, fail};
use gpupool_abi::errors;
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

/// NVIDIA's private entry-point tables (cudart and NVRTC ask for them by UUID). The
/// simulator implements none: the table pointer is NULL and the call fails, which the
/// callers handle, instead of their dereferencing a symbol that does not exist.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetExportTable(
    table: *mut *const std::os::raw::c_void,
    id: *const gpupool_shim::cuda::CUuuid,
) -> CUresult {
    cuda_entry(|| {
        if !table.is_null() {
            out(table, std::ptr::null())?;
        }
        let uuid = super::read(id, "export table id")?;
        let hex: String = uuid.bytes.iter().map(|b| format!("{:02x}", *b as u8)).collect();
        fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || format!("export table {hex} is NVIDIA-internal; not provided"))
    })
}
