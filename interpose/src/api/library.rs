//! Libraries and kernels (`cuLibrary*`, `cuKernel*`, CUDA 12's context-independent
//! loading), which NVIDIA's runtime 12.x/13.x uses for every fat binary it registered.
//! A library keeps its image here; the daemon sees an ordinary module, loaded into a
//! context the first time the library or one of its kernels is used there (what the
//! driver does under lazy loading), and unloaded with the library or the context. A kernel
//! is a (library, name) pair: its function in the calling thread's current context is
//! looked up through [`module::get_function`], so launches, attributes and parameter
//! layouts are the module path's.

use super::module;
use crate::util::R;
use gpupool_shim::cuda::{
    CUdevice, CUdeviceptr, CUfunc_cache, CUfunction, CUfunction_attribute, CUjit_option, CUkernel, CUlibrary,
    CUlibraryOption, CUmodule, CUresult,
};
use std::collections::HashMap;
use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::sync::{Arc, Mutex};

/// Low bytes that mark our library and kernel handles (other handles use
/// [`crate::client::Kind`]'s).
const LIBRARY_TAG: u64 = 0x1b;
const KERNEL_TAG: u64 = 0x4b;

struct Library {
    /// The image, copied at load (exactly the bytes its headers span).
    image: Arc<Vec<u8>>,
    /// context handle -> the module this library is loaded as there.
    modules: HashMap<u64, u64>,
}

struct Kernel {
    library: u64,
    name: CString,
}

#[derive(Default)]
struct State {
    next: u64,
    libraries: HashMap<u64, Library>,
    kernels: HashMap<u64, Kernel>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> T {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(State::default))
}

fn new_handle(s: &mut State, tag: u64) -> u64 {
    s.next += 1;
    s.next << 8 | tag
}

/// JIT and library options are accepted and ignored (the daemon's driver compiles, and
/// the image is copied, so whether the caller preserves it does not matter); counts
/// without arrays are refused.
fn check_options<A, B>(
    n_jit: c_uint,
    jit: *mut A,
    jit_values: *mut *mut c_void,
    n_lib: c_uint,
    lib: *mut B,
    lib_values: *mut *mut c_void,
) -> R<()> {
    if (n_jit > 0 && (jit.is_null() || jit_values.is_null())) || (n_lib > 0 && (lib.is_null() || lib_values.is_null()))
    {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

fn add_library(image: Vec<u8>) -> CUlibrary {
    with_state(|s| {
        let h = new_handle(s, LIBRARY_TAG);
        s.libraries.insert(h, Library { image: Arc::new(image), modules: HashMap::new() });
        h as CUlibrary
    })
}

#[allow(clippy::too_many_arguments)]
pub(super) fn load_data(
    code: *const c_void,
    jit: *mut CUjit_option,
    jit_values: *mut *mut c_void,
    n_jit: c_uint,
    lib: *mut CUlibraryOption,
    lib_values: *mut *mut c_void,
    n_lib: c_uint,
) -> R<CUlibrary> {
    check_options(n_jit, jit, jit_values, n_lib, lib, lib_values)?;
    Ok(add_library(module::image_bytes(code)?.to_vec()))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn load_from_file(
    file: &str,
    jit: *mut CUjit_option,
    jit_values: *mut *mut c_void,
    n_jit: c_uint,
    lib: *mut CUlibraryOption,
    lib_values: *mut *mut c_void,
    n_lib: c_uint,
) -> R<CUlibrary> {
    check_options(n_jit, jit, jit_values, n_lib, lib, lib_values)?;
    let mut bytes = std::fs::read(file).map_err(|e| {
        crate::util::log(&format!("cuLibraryLoadFromFile({file}): {e}"));
        CUresult::CUDA_ERROR_FILE_NOT_FOUND
    })?;
    // A PTX file is text without its NUL; the module path reads text to the NUL.
    bytes.push(0);
    module::image_bytes(bytes.as_ptr().cast())?;
    Ok(add_library(bytes))
}

pub(super) fn unload(library: CUlibrary) -> R<()> {
    let h = library as u64;
    let lib = with_state(|s| {
        let lib = s.libraries.remove(&h)?;
        s.kernels.retain(|_, k| k.library != h);
        Some(lib)
    })
    .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
    for (ctx, m) in lib.modules {
        if let Err(e) = module::unload_anywhere(m as CUmodule) {
            crate::util::log(&format!("cuLibraryUnload: unloading its module in context {ctx:#x}: {e:?}"));
        }
    }
    Ok(())
}

/// The library's module in the calling thread's current context, loaded there on first use.
fn module_here(library: u64) -> R<CUmodule> {
    let ctx = super::context::current_handle()? as u64;
    if ctx == 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT);
    }
    let image = with_state(|s| {
        let lib = s.libraries.get(&library).ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
        Ok(match lib.modules.get(&ctx) {
            Some(&m) => Err(m),
            None => Ok(lib.image.clone()),
        })
    })?;
    let image = match image {
        Err(m) => return Ok(m as CUmodule),
        Ok(image) => image,
    };
    let m = module::load(image.as_ptr().cast())?;
    let kept = with_state(|s| match s.libraries.get_mut(&library) {
        // Another thread may have loaded it meanwhile: keep the first, drop ours.
        Some(lib) => Ok(*lib.modules.entry(ctx).or_insert(m as u64)),
        None => Err(CUresult::CUDA_ERROR_INVALID_HANDLE),
    });
    match kept {
        Ok(first) if first == m as u64 => Ok(m),
        other => {
            let _ = module::unload(m);
            other.map(|first| first as CUmodule)
        }
    }
}

pub(super) fn get_module(library: CUlibrary) -> R<CUmodule> {
    module_here(library as u64)
}

pub(super) fn get_global(library: CUlibrary, name: &str) -> R<(CUdeviceptr, usize)> {
    module::get_global(module_here(library as u64)?, name)
}

/// A kernel handle for (library, name); the name must be a kernel of the library where the
/// caller has a current context (without one it is checked at first use).
pub(super) fn get_kernel(library: CUlibrary, name: &str) -> R<CUkernel> {
    let lib = library as u64;
    let cname = CString::new(name).map_err(|_| CUresult::CUDA_ERROR_INVALID_VALUE)?;
    with_state(|s| s.libraries.get(&lib).map(|_| ()).ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE))?;
    if super::context::current_handle()?.is_null() {
        crate::util::log(&format!("cuLibraryGetKernel({name}): no current context; checked at first use"));
    } else {
        module::get_function(module_here(lib)?, name)?;
    }
    Ok(with_state(|s| {
        if let Some((&h, _)) = s.kernels.iter().find(|(_, k)| k.library == lib && k.name == cname) {
            return h;
        }
        let h = new_handle(s, KERNEL_TAG);
        s.kernels.insert(h, Kernel { library: lib, name: cname });
        h
    }) as CUkernel)
}

fn kernel(k: CUkernel) -> R<(u64, CString)> {
    with_state(|s| s.kernels.get(&(k as u64)).map(|k| (k.library, k.name.clone())))
        .ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)
}

/// The kernel's function in the current context.
pub(super) fn get_function(k: CUkernel) -> R<CUfunction> {
    let (lib, name) = kernel(k)?;
    let name = name.to_str().map_err(|_| CUresult::CUDA_ERROR_INVALID_VALUE)?;
    module::get_function(module_here(lib)?, name)
}

/// A function handle as passed to a launch: a kernel handle (which the driver accepts
/// wherever a CUfunction is taken) becomes its function in the current context.
pub fn resolve_function(f: CUfunction) -> R<CUfunction> {
    if f as u64 & 0xff == KERNEL_TAG && with_state(|s| s.kernels.contains_key(&(f as u64))) {
        return get_function(f as CUkernel);
    }
    Ok(f)
}

pub(super) fn get_attribute(attrib: CUfunction_attribute, k: CUkernel, _dev: CUdevice) -> R<c_int> {
    module::func_attribute(attrib, get_function(k)?)
}

pub(super) fn set_attribute(attrib: CUfunction_attribute, value: c_int, k: CUkernel, _dev: CUdevice) -> R<()> {
    module::set_func_attribute(get_function(k)?, attrib, value)
}

pub(super) fn set_cache_config(k: CUkernel, config: CUfunc_cache, _dev: CUdevice) -> R<()> {
    module::set_func_cache_config(get_function(k)?, config)
}

/// The kernel handle of function `name` of `module` when that module is a library's (in any
/// context): `cuGraphKernelNodeGetParams` answers such a node's kernel as the handle NVIDIA's
/// runtime launched it by.
pub(crate) fn kernel_of(module: u64, name: &std::ffi::CStr) -> Option<CUkernel> {
    with_state(|s| {
        let (&lib, _) = s.libraries.iter().find(|(_, l)| l.modules.values().any(|&m| m == module))?;
        let (&k, _) = s.kernels.iter().find(|(_, k)| k.library == lib && k.name.as_c_str() == name)?;
        Some(k as CUkernel)
    })
}

/// The name lives as long as the library.
pub(super) fn get_name(k: CUkernel) -> R<*const c_char> {
    with_state(|s| s.kernels.get(&(k as u64)).map(|k| k.name.as_ptr())).ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)
}

pub(super) fn param_info(k: CUkernel, index: usize) -> R<(usize, usize)> {
    module::param_info(get_function(k)?, index)
}

/// The context `ctx` is gone: the modules libraries had there went with it.
pub(crate) fn forget_context(ctx: u64) {
    with_state(|s| {
        for lib in s.libraries.values_mut() {
            lib.modules.remove(&ctx);
        }
    })
}
