//! `cuModuleLoad` and the JIT linker (`cuLink*`), for clients that build modules at run
//! time (CuPy links through it). The pool's devices execute PTX, so linking is done here
//! for what needs no real linker: a single PTX input (text or a file) is the linked
//! image, loaded with `cuModuleLoadData` like any other. Several inputs (separate
//! compilation with extern device functions), cubins, object files and libraries need
//! NVIDIA's nvlink: `CUDA_ERROR_NOT_SUPPORTED`, with a log line saying which.

use super::module::cuModuleLoadData;
use crate::util::{R, c_str, entry, log, out};
use gpupool_shim::cuda::{CUjit_option, CUjitInputType, CUlinkState, CUmodule, CUresult};
use std::os::raw::{c_char, c_uint, c_void};

/// One link in progress: the PTX inputs, and the image handed out by `cuLinkComplete`
/// (valid until `cuLinkDestroy`, as the driver's is).
#[derive(Default)]
struct Link {
    inputs: Vec<Vec<u8>>,
    image: Vec<u8>,
}

fn state<'a>(s: CUlinkState) -> R<&'a mut Link> {
    if s.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
    }
    // SAFETY: a non-null CUlinkState comes from cuLinkCreate_v2 (Box::into_raw) and the
    // CUDA contract forbids using it concurrently or after cuLinkDestroy.
    Ok(unsafe { &mut *s.cast::<Link>() })
}

fn check_options(n: c_uint, options: *mut CUjit_option, values: *mut *mut c_void) -> R<()> {
    if n > 0 && (options.is_null() || values.is_null()) {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

/// PTX text without its terminating NUL (and anything after one).
fn ptx_text(bytes: &[u8]) -> Vec<u8> {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    bytes[..end].to_vec()
}

fn add(l: &mut Link, kind: CUjitInputType, bytes: &[u8], name: &str) -> R<()> {
    if kind != CUjitInputType::CU_JIT_INPUT_PTX {
        log(&format!("cuLinkAdd: input {name:?} of type {}: only PTX inputs are linked here", kind.0));
        return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
    }
    l.inputs.push(ptx_text(bytes));
    Ok(())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLinkCreate_v2(
    n: c_uint,
    options: *mut CUjit_option,
    values: *mut *mut c_void,
    state_out: *mut CUlinkState,
) -> CUresult {
    entry(|| {
        check_options(n, options, values)?;
        if state_out.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        out(state_out, Box::into_raw(Box::<Link>::default()).cast())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLinkAddData_v2(
    s: CUlinkState,
    kind: CUjitInputType,
    data: *mut c_void,
    size: usize,
    name: *const c_char,
    n: c_uint,
    options: *mut CUjit_option,
    values: *mut *mut c_void,
) -> CUresult {
    entry(|| {
        check_options(n, options, values)?;
        let l = state(s)?;
        let name = if name.is_null() { "" } else { c_str(name)? };
        let bytes = crate::util::host_bytes(data, size)?;
        if bytes.is_empty() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        add(l, kind, bytes, name)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLinkAddFile_v2(
    s: CUlinkState,
    kind: CUjitInputType,
    path: *const c_char,
    n: c_uint,
    options: *mut CUjit_option,
    values: *mut *mut c_void,
) -> CUresult {
    entry(|| {
        check_options(n, options, values)?;
        let l = state(s)?;
        let path = c_str(path)?;
        let bytes = std::fs::read(path).map_err(|e| {
            log(&format!("cuLinkAddFile: {path}: {e}"));
            CUresult::CUDA_ERROR_FILE_NOT_FOUND
        })?;
        add(l, kind, &bytes, path)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLinkComplete(s: CUlinkState, image: *mut *mut c_void, size: *mut usize) -> CUresult {
    entry(|| {
        let l = state(s)?;
        if image.is_null() || size.is_null() {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        match l.inputs.len() {
            1 => {}
            0 => return Err(CUresult::CUDA_ERROR_INVALID_VALUE),
            n => {
                log(&format!("cuLinkComplete: {n} PTX inputs need a device linker; one is linked here"));
                return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
            }
        }
        l.image = std::mem::take(&mut l.inputs[0]);
        l.image.push(0);
        out(size, l.image.len())?;
        out(image, l.image.as_mut_ptr().cast())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuLinkDestroy(s: CUlinkState) -> CUresult {
    entry(|| {
        state(s)?;
        // SAFETY: made by Box::into_raw in cuLinkCreate_v2; the contract ends its use here.
        drop(unsafe { Box::from_raw(s.cast::<Link>()) });
        Ok(())
    })
}

fn load_file(m: *mut CUmodule, path: *const c_char) -> R<()> {
    let path = c_str(path)?;
    let mut bytes = std::fs::read(path).map_err(|e| {
        log(&format!("cuModuleLoad: {path}: {e}"));
        CUresult::CUDA_ERROR_FILE_NOT_FOUND
    })?;
    // A PTX file has no NUL; the image reader stops at one.
    bytes.push(0);
    // SAFETY: our own export; the image lives until it returns.
    let r = unsafe { cuModuleLoadData(m, bytes.as_ptr().cast()) };
    if r == CUresult::CUDA_SUCCESS { Ok(()) } else { Err(r) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoad(m: *mut CUmodule, path: *const c_char) -> CUresult {
    entry(|| load_file(m, path))
}
