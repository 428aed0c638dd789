//! Modules and functions. The image bytes go to the daemon (PTX text with its NUL, a
//! fatbin container of the length its header declares, or an ELF cubin of the length its
//! headers span); the daemon answers with each kernel's parameter layout, cached here so
//! launches pack their parameters locally.

use crate::client::{self, Client, FuncInfo, Kind, ModuleInfo, make};
use crate::util::R;
use gpupool_protocol::ops::{FunctionInfo, answer};
use gpupool_protocol::{FuncId, Request};
use gpupool_shim::cuda::{
    CUdeviceptr, CUfunc_cache, CUfunction, CUfunction_attribute as F, CUjit_option, CUmodule, CUresult,
};
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_uint, c_void};

const FATBIN_MAGIC: u32 = 0xBA55_ED50;
const FATBIN_WRAPPER_MAGIC: u32 = 0x4662_43B1;
const MAX_IMAGE: usize = 1 << 30;

/// Reads `n` bytes at `p + off` into an array.
///
/// SAFETY (for callers): `p .. p + off + N` must be readable.
unsafe fn bytes_at<const N: usize>(p: *const u8, off: usize) -> [u8; N] {
    let mut b = [0u8; N];
    // SAFETY: the caller vouches for the range.
    unsafe { std::ptr::copy_nonoverlapping(p.add(off), b.as_mut_ptr(), N) };
    b
}

/// The image's bytes: exactly what the daemon needs, never reading past it.
pub(super) fn image_bytes<'a>(image: *const c_void) -> R<&'a [u8]> {
    if image.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let mut p = image.cast::<u8>();
    // SAFETY: every image cuModuleLoadData admits starts with at least 4 readable bytes.
    let magic = u32::from_le_bytes(unsafe { bytes_at::<4>(p, 0) });
    let len = if magic == FATBIN_WRAPPER_MAGIC || magic == FATBIN_MAGIC {
        if magic == FATBIN_WRAPPER_MAGIC {
            // SAFETY: a __fatBinC_Wrapper_t holds its data pointer at byte 8.
            p = usize::from_le_bytes(unsafe { bytes_at::<8>(p, 8) }) as *const u8;
            if p.is_null() {
                return Err(CUresult::CUDA_ERROR_INVALID_IMAGE);
            }
        }
        // SAFETY: a container starts with a 16-byte header.
        let h = unsafe { bytes_at::<16>(p, 0) };
        if u32::from_le_bytes(h[0..4].try_into().expect("4")) != FATBIN_MAGIC {
            return Err(CUresult::CUDA_ERROR_INVALID_IMAGE);
        }
        let header_size = u16::from_le_bytes([h[6], h[7]]) as u64;
        let body = u64::from_le_bytes(h[8..16].try_into().expect("8"));
        (header_size.max(16)).saturating_add(body) as usize
    } else if magic == u32::from_le_bytes(*b"\x7fELF") {
        // SAFETY: an ELF64 header is 64 bytes.
        let h = unsafe { bytes_at::<64>(p, 0) };
        let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8"));
        let u16_at = |o: usize| u16::from_le_bytes([h[o], h[o + 1]]) as u64;
        let sh_end = u64_at(0x28).saturating_add(u16_at(0x3c) * u16_at(0x3a));
        let ph_end = u64_at(0x20).saturating_add(u16_at(0x38) * u16_at(0x36));
        sh_end.max(ph_end).max(64) as usize
    } else {
        // PTX text, NUL-terminated: send it with its NUL.
        // SAFETY: a text image is NUL-terminated per the CUDA contract.
        unsafe { std::ffi::CStr::from_ptr(p.cast()) }.to_bytes_with_nul().len()
    };
    if len > MAX_IMAGE {
        return Err(CUresult::CUDA_ERROR_INVALID_IMAGE);
    }
    // SAFETY: the image's own headers declare `len` bytes, which the caller vouches for.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// A fatbin container cut down to what a device of compute capability `sm` (90 for 9.0)
/// runs: its cubins for exactly that architecture and the newest PTX not newer than it
/// (which the driver can JIT). None if the image is not a container or nothing fits.
/// Entry layout: u16 kind (1 PTX, 2 ELF), u16 version, u32 header size, u64 payload
/// size, ..., u32 sm at byte 28 (see sim/src/fatbin.rs for the whole header).
fn fit_to_device(image: &[u8], sm: u32) -> Option<Vec<u8>> {
    let u32_at = |b: &[u8], at: usize| Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |b: &[u8], at: usize| Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?));
    if u32_at(image, 0)? != FATBIN_MAGIC {
        return None;
    }
    let header = usize::from(u16::from_le_bytes([*image.get(6)?, *image.get(7)?])).max(16);
    let end = header.checked_add(usize::try_from(u64_at(image, 8)?).ok()?)?.min(image.len());
    let mut entries = Vec::new();
    let mut at = header;
    while at + 32 <= end {
        let kind = u16::from_le_bytes([image[at], image[at + 1]]);
        let len = (u32_at(image, at + 4)? as usize).checked_add(usize::try_from(u64_at(image, at + 8)?).ok()?)?;
        let entry = image.get(at..at.checked_add(len)?)?;
        entries.push((kind, u32_at(image, at + 28)?, entry));
        at += len;
    }
    let ptx = entries.iter().filter(|e| e.0 == 1 && e.1 <= sm).map(|e| e.1).max();
    let kept: Vec<&[u8]> =
        entries.iter().filter(|e| (e.0 == 2 && e.1 == sm) || (e.0 == 1 && Some(e.1) == ptx)).map(|e| e.2).collect();
    if kept.is_empty() {
        return None;
    }
    let body: usize = kept.iter().map(|e| e.len()).sum();
    let mut out = Vec::with_capacity(16 + body);
    out.extend_from_slice(&image[..8]);
    out[6..8].copy_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(&(body as u64).to_le_bytes());
    for e in kept {
        out.extend_from_slice(e);
    }
    Some(out)
}

fn add_function(c: &mut Client, module: u64, f: FunctionInfo) -> R<u64> {
    let h = make(Kind::Func, client::endpoint_of(module), f.func.0)?;
    let name = CString::new(f.name).unwrap_or_default();
    c.reg.funcs.insert(h, FuncInfo { id: f.func, module, name, params: f.params });
    Ok(h)
}

pub(super) fn load(image: *const c_void) -> R<CUmodule> {
    let bytes = image_bytes(image)?;
    let h = client::call(|c| {
        let (ctx_h, ctx, dev) = c.current()?;
        let [major, minor] = c.device(dev as i32)?.compute_capability;
        let conn = c.live()?;
        // A fat binary for many architectures (CuPy's CUB module is 32 MiB for eleven)
        // travels as the part this device can use.
        let fitted;
        let bytes = if bytes.len() > conn.staging_len() {
            fitted = fit_to_device(bytes, major * 10 + minor).ok_or_else(|| {
                crate::util::log(&format!(
                    "module image of {} bytes exceeds the {}-byte staging area",
                    bytes.len(),
                    conn.staging_len()
                ));
                CUresult::CUDA_ERROR_NOT_SUPPORTED
            })?;
            &fitted[..]
        } else {
            bytes
        };
        if bytes.len() > conn.staging_len() {
            crate::util::log(&format!("module image of {} bytes exceeds the staging area", bytes.len()));
            return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
        }
        let src = conn.host_src(bytes)?;
        let answer::Module { module, functions } = conn.ask(Request::ModuleLoad { ctx, image: src })?;
        let h = make(Kind::Module, client::endpoint_of(ctx_h), module.0)?;
        c.reg.modules.insert(h, ModuleInfo { id: module, ctx: ctx_h });
        for f in functions {
            add_function(c, h, f)?;
        }
        Ok(h)
    })?;
    Ok(h as CUmodule)
}

/// JIT options are accepted and ignored (the daemon's driver compiles).
pub(super) fn load_ex(
    image: *const c_void,
    num_options: c_uint,
    options: *mut CUjit_option,
    values: *mut *mut c_void,
) -> R<CUmodule> {
    if num_options > 0 && (options.is_null() || values.is_null()) {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    load(image)
}

/// CU_MODULE_EAGER_LOADING: the daemon loads a module's every kernel when it is loaded.
/// (NVIDIA's runtime reads this at start and, for lazy loading, would defer its loads.)
pub(super) fn loading_mode() -> R<gpupool_shim::cuda::CUmoduleLoadingMode> {
    Ok(gpupool_shim::cuda::CUmoduleLoadingMode::CU_MODULE_EAGER_LOADING)
}

fn module_id(c: &mut Client, h: CUmodule) -> R<gpupool_protocol::ModuleId> {
    c.current()?;
    c.reg.modules.get(&(h as u64)).map(|m| m.id).ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)
}

pub(super) fn unload(hmod: CUmodule) -> R<()> {
    client::with(|c| c.current().map(|_| ()))?;
    unload_anywhere(hmod)
}

/// Unloads a module whatever the calling thread's current context (a library's modules,
/// unloaded with the library, may live in contexts not current here).
pub(super) fn unload_anywhere(hmod: CUmodule) -> R<()> {
    client::call(|c| {
        if !c.initialized {
            return Err(CUresult::CUDA_ERROR_NOT_INITIALIZED);
        }
        let module = c.reg.modules.get(&(hmod as u64)).map(|m| m.id).ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
        c.conn_of(hmod as u64)?.call_ok(Request::ModuleUnload { module })?;
        let h = hmod as u64;
        c.reg.modules.remove(&h);
        c.reg.funcs.retain(|_, f| f.module != h);
        Ok(())
    })
}

pub(super) fn get_function(hmod: CUmodule, name: &str) -> R<CUfunction> {
    let h = client::call(|c| {
        let module = module_id(c, hmod)?;
        let m = hmod as u64;
        if let Some((&h, _)) = c.reg.funcs.iter().find(|(_, f)| f.module == m && f.name.to_bytes() == name.as_bytes()) {
            return Ok(h);
        }
        let req = Request::ModuleGetFunction { module, name: name.to_string() };
        let answer::Function { func, params } = c.conn_of(m)?.ask(req)?;
        add_function(c, m, FunctionInfo { func, name: name.to_string(), params })
    })?;
    Ok(h as CUfunction)
}

/// (address, size); either may be asked for alone.
pub(super) fn get_global(hmod: CUmodule, name: &str) -> R<(CUdeviceptr, usize)> {
    client::call(|c| {
        let module = module_id(c, hmod)?;
        let ctx = c.reg.modules[&(hmod as u64)].ctx;
        let ep = client::endpoint_of(hmod as u64);
        let answer::Global { ptr, size } =
            c.conn_at(ep)?.ask(Request::ModuleGetGlobal { module, name: name.to_string() })?;
        // Globals are device memory this client may copy to and from.
        c.reg.allocs.entry((ep, ptr.0)).or_insert((size, ctx));
        Ok((ptr.0, size as usize))
    })
}

pub fn func_id(c: &mut Client, h: CUfunction) -> R<FuncId> {
    if !c.initialized {
        return Err(CUresult::CUDA_ERROR_NOT_INITIALIZED);
    }
    c.reg.funcs.get(&(h as u64)).map(|f| f.id).ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)
}

pub fn func_attribute(attrib: F, hfunc: CUfunction) -> R<c_int> {
    // A kernel handle stands for its function in the current context (occupancy too).
    let hfunc = super::library::resolve_function(hfunc)?;
    client::call(|c| {
        let func = func_id(c, hfunc)?;
        let answer::Attribute { value } = c.live()?.ask(Request::FuncGetAttribute { func, attribute: attrib.0 })?;
        Ok(value as c_int)
    })
}

pub(super) fn set_func_attribute(hfunc: CUfunction, attrib: F, value: c_int) -> R<()> {
    client::call(|c| {
        let func = func_id(c, hfunc)?;
        c.live()?.call_ok(Request::FuncSetAttribute { func, attribute: attrib.0, value })
    })
}

pub(super) fn set_func_cache_config(hfunc: CUfunction, config: CUfunc_cache) -> R<()> {
    client::with(|c| func_id(c, hfunc))?;
    if config.0 > CUfunc_cache::CU_FUNC_CACHE_PREFER_EQUAL.0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

/// (offset, size) of parameter `index`, from the cached layout.
pub(super) fn param_info(func: CUfunction, index: usize) -> R<(usize, usize)> {
    let p = client::with(|c| {
        func_id(c, func)?;
        c.reg.funcs[&(func as u64)].params.get(index).copied().ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)
    })?;
    Ok((p.offset as usize, p.size as usize))
}

/// The name lives in the registry until the module is unloaded.
pub(super) fn func_name(hfunc: CUfunction) -> R<*const c_char> {
    client::with(|c| {
        func_id(c, hfunc)?;
        Ok(c.reg.funcs[&(hfunc as u64)].name.as_ptr())
    })
}
