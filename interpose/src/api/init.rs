//! Initialisation, versions and error strings.

use crate::client;
use crate::util::{R, out};
use gpupool_abi::errors;
use gpupool_shim::cuda::{CUresult, CUuuid};
use std::os::raw::{c_char, c_int, c_uint, c_void};

/// The ABI we implement when no daemon has told us its driver's version.
pub const DEFAULT_DRIVER_VERSION: i32 = 13000;

/// Connects (lazily, here and nowhere earlier) and says hello.
pub(super) fn init(flags: c_uint) -> R<()> {
    if flags != 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    client::with(|c| {
        let n = c.device_list()?.len();
        if n == 0 {
            return Err(CUresult::CUDA_ERROR_NO_DEVICE);
        }
        c.initialized = true;
        Ok(())
    })
}

/// The daemon's driver version (connecting if needed), else the ABI we implement. Works
/// before `cuInit`, as the real driver's does.
pub fn driver_version() -> i32 {
    client::with(|c| {
        c.device_list()?;
        Ok(c.driver_version as i32)
    })
    .unwrap_or(DEFAULT_DRIVER_VERSION)
}

pub(super) fn get_driver_version() -> R<c_int> {
    Ok(driver_version())
}

/// An unknown code is INVALID_VALUE with the string set to NULL, as the driver does.
fn error_text(text: *mut *const c_char, s: Option<&'static std::ffi::CStr>) -> R<()> {
    match s {
        Some(s) => out(text, s.as_ptr()),
        None => {
            let _ = out(text, std::ptr::null());
            Err(CUresult::CUDA_ERROR_INVALID_VALUE)
        }
    }
}

pub(super) fn error_string(error: CUresult, text: *mut *const c_char) -> R<()> {
    error_text(text, errors::description_c(error))
}

pub(super) fn error_name(error: CUresult, text: *mut *const c_char) -> R<()> {
    error_text(text, errors::name_c(error))
}

/// NVIDIA's private tables, served by [`super::export_tables`].
pub(super) fn export_table(table: *mut *const c_void, uuid: CUuuid) -> R<()> {
    super::export_tables::get(table, uuid)
}
