//! `cuModuleLoad` and the JIT linker (`cuLink*`), for clients that build modules at run
//! time (CuPy links through it). The pool's devices execute PTX, so linking is done here
//! for what needs no real linker: a single PTX input (text or a file) is the linked
//! image, loaded with `cuModuleLoadData` like any other. Several inputs (separate
//! compilation with extern device functions), cubins, object files and libraries need
//! NVIDIA's nvlink: `CUDA_ERROR_NOT_SUPPORTED`, with a log line saying which.

use crate::api::export::c_str;
use crate::util::{R, log};
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

pub(super) fn create(n: c_uint, options: *mut CUjit_option, values: *mut *mut c_void) -> R<CUlinkState> {
    check_options(n, options, values)?;
    Ok(Box::into_raw(Box::<Link>::default()).cast())
}

pub(super) fn add_data(
    s: CUlinkState,
    kind: CUjitInputType,
    data: *mut c_void,
    size: usize,
    name: *const c_char,
    n: c_uint,
    options: *mut CUjit_option,
    values: *mut *mut c_void,
) -> R<()> {
    check_options(n, options, values)?;
    let l = state(s)?;
    let name = if name.is_null() { "" } else { c_str::<CUresult>(name)? };
    let bytes = crate::util::host_bytes(data, size)?;
    if bytes.is_empty() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    add(l, kind, bytes, name)
}

pub(super) fn add_file(
    s: CUlinkState,
    kind: CUjitInputType,
    path: &str,
    n: c_uint,
    options: *mut CUjit_option,
    values: *mut *mut c_void,
) -> R<()> {
    check_options(n, options, values)?;
    let l = state(s)?;
    let bytes = std::fs::read(path).map_err(|e| {
        log(&format!("cuLinkAddFile: {path}: {e}"));
        CUresult::CUDA_ERROR_FILE_NOT_FOUND
    })?;
    add(l, kind, &bytes, path)
}

/// (image, size): the image stays valid until `cuLinkDestroy`.
pub(super) fn complete(s: CUlinkState) -> R<(*mut c_void, usize)> {
    let l = state(s)?;
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
    Ok((l.image.as_mut_ptr().cast(), l.image.len()))
}

pub(super) fn destroy(s: CUlinkState) -> R<()> {
    state(s)?;
    // SAFETY: made by Box::into_raw in cuLinkCreate_v2; the contract ends its use here.
    drop(unsafe { Box::from_raw(s.cast::<Link>()) });
    Ok(())
}

pub(super) fn load_file(path: &str) -> R<CUmodule> {
    let mut bytes = std::fs::read(path).map_err(|e| {
        log(&format!("cuModuleLoad: {path}: {e}"));
        CUresult::CUDA_ERROR_FILE_NOT_FOUND
    })?;
    // A PTX file has no NUL; the image reader stops at one.
    bytes.push(0);
    super::module::load(bytes.as_ptr().cast())
}
