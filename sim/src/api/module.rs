//! Modules and functions.

use super::{c_str, out};
use crate::context::{current, current_healthy};
use crate::driver::initialized;
use crate::error::{CuResult, cuda_entry, fail};
use crate::fatbin;
use crate::module::{self, Function, Image};
use gpupool_shim::cuda::{
    CUdeviceptr, CUfunc_cache, CUfunction, CUfunction_attribute as F, CUjit_option, CUmodule, CUresult,
};
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::sync::Arc;

fn load(pmod: *mut CUmodule, image: *const c_void) -> CuResult<()> {
    let ctx = current_healthy()?;
    let driver = initialized()?;
    ctx.printf.flush();
    if pmod.is_null() || image.is_null() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null module or image pointer".into());
    }
    // SAFETY: the CUDA contract: `image` is a NUL-terminated PTX string or a binary
    // image whose header announces its kind.
    match unsafe { module::classify(image.cast()) } {
        Some(Image::Ptx(text)) => {
            let h = module::load_ptx(driver, &ctx, text)?;
            out(pmod, h as CUmodule)
        }
        Some(Image::Elf) => fail(CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU, || {
            "the image is a cubin (device machine code); the simulator runs PTX only".into()
        }),
        Some(Image::Fatbin) => {
            // SAFETY: as above: a fatbin container or a `__fatBinC_Wrapper_t`, readable
            // for the size its header declares.
            let entries = match unsafe { fatbin::ptx_entries(image.cast()) } {
                Ok(entries) => entries,
                Err(e) => {
                    let code = if e.is_no_ptx() {
                        CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU
                    } else if e.is_unsupported() {
                        CUresult::CUDA_ERROR_NOT_SUPPORTED
                    } else {
                        CUresult::CUDA_ERROR_INVALID_IMAGE
                    };
                    return fail(code, || e.to_string());
                }
            };
            let cc = ctx.device.cfg.cc_major * 10 + ctx.device.cfg.cc_minor;
            let Some(best) = fatbin::best_ptx(&entries, cc) else {
                return fail(CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU, || {
                    let sms: Vec<u32> = entries.iter().map(|e| e.sm_version).collect();
                    format!("the fatbin's PTX targets sm {sms:?}, all newer than the device's sm_{cc}")
                });
            };
            let h = module::load_ptx(driver, &ctx, &best.ptx)?;
            out(pmod, h as CUmodule)
        }
        None => fail(CUresult::CUDA_ERROR_INVALID_IMAGE, || "the image is neither PTX text nor a known binary".into()),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoadData(pmod: *mut CUmodule, image: *const c_void) -> CUresult {
    cuda_entry(|| load(pmod, image))
}

/// JIT options are accepted and ignored: there is no JIT to tune; output-buffer
/// options (logs) are left untouched, which callers must tolerate anyway.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    pmod: *mut CUmodule,
    image: *const c_void,
    num_options: c_uint,
    options: *mut CUjit_option,
    values: *mut *mut c_void,
) -> CUresult {
    cuda_entry(|| {
        if num_options > 0 && (options.is_null() || values.is_null()) {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "JIT options without arrays".into());
        }
        load(pmod, image)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleLoadFatBinary(pmod: *mut CUmodule, fat: *const c_void) -> CUresult {
    cuda_entry(|| load(pmod, fat))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleUnload(hmod: CUmodule) -> CUresult {
    cuda_entry(|| module::unload(initialized()?, hmod as u64))
}

/// The simulator loads every kernel of a module when the module is loaded.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleGetLoadingMode(mode: *mut gpupool_shim::cuda::CUmoduleLoadingMode) -> CUresult {
    cuda_entry(|| out(mode, gpupool_shim::cuda::CUmoduleLoadingMode::CU_MODULE_EAGER_LOADING))
}

fn module_of(hmod: CUmodule) -> CuResult<Arc<module::Module>> {
    match initialized()?.modules.get(hmod as u64) {
        Some(m) => Ok(m),
        None => fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{hmod:?} is not a loaded module")),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleGetFunction(hfunc: *mut CUfunction, hmod: CUmodule, name: *const c_char) -> CUresult {
    cuda_entry(|| {
        current()?;
        let m = module_of(hmod)?;
        let name = c_str(name, "function name")?;
        if hfunc.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null function output pointer".into());
        }
        match m.functions.get(name) {
            Some(h) => out(hfunc, *h as CUfunction),
            None => fail(CUresult::CUDA_ERROR_NOT_FOUND, || format!("no kernel named {name} in the module")),
        }
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuModuleGetGlobal_v2(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    hmod: CUmodule,
    name: *const c_char,
) -> CUresult {
    cuda_entry(|| {
        current()?;
        let m = module_of(hmod)?;
        let name = c_str(name, "variable name")?;
        let Some(&(addr, size)) = m.globals.get(name) else {
            return fail(CUresult::CUDA_ERROR_NOT_FOUND, || format!("no .global or .const variable named {name}"));
        };
        // Either output may be NULL.
        if !dptr.is_null() {
            out(dptr, addr)?;
        }
        if !bytes.is_null() {
            out(bytes, size as usize)?;
        }
        Ok(())
    })
}

pub fn function(hfunc: CUfunction) -> CuResult<Arc<Function>> {
    match initialized()?.functions.get(hfunc as u64) {
        Some(f) => Ok(f),
        None => fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{hfunc:?} is not a live function")),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuFuncGetAttribute(value: *mut c_int, attrib: F, hfunc: CUfunction) -> CUresult {
    cuda_entry(|| {
        let f = function(hfunc)?;
        let s = *f.settings.lock().unwrap_or_else(|e| e.into_inner());
        let v = match attrib {
            F::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK => f.entry.max_threads() as i64,
            F::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES => f.static_shared as i64,
            F::CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES => 0,
            F::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES => f.local_bytes as i64,
            F::CU_FUNC_ATTRIBUTE_NUM_REGS => f.registers as i64,
            F::CU_FUNC_ATTRIBUTE_PTX_VERSION => (f.ptx_version.0 * 10 + f.ptx_version.1) as i64,
            F::CU_FUNC_ATTRIBUTE_BINARY_VERSION => f.target_sm as i64,
            F::CU_FUNC_ATTRIBUTE_CACHE_MODE_CA => 0,
            F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES => {
                (s.max_dynamic_shared.max(crate::device::MAX_STATIC_SHARED) as u64).saturating_sub(f.static_shared)
                    as i64
            }
            F::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT => s.preferred_shared_carveout as i64,
            F::CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET
            | F::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH
            | F::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT
            | F::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH
            | F::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
            | F::CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE => 0,
            other => {
                return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown function attribute {}", other.0));
            }
        };
        out(value, v as c_int)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuFuncSetAttribute(hfunc: CUfunction, attrib: F, value: c_int) -> CUresult {
    cuda_entry(|| {
        let f = function(hfunc)?;
        let mut s = f.settings.lock().unwrap_or_else(|e| e.into_inner());
        match attrib {
            F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES => {
                let limit = crate::device::MAX_OPTIN_SHARED as u64 - f.static_shared;
                if value < 0 || value as u64 > limit {
                    return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                        format!("dynamic shared memory {value} exceeds the opt-in limit {limit}")
                    });
                }
                s.max_dynamic_shared = value as u32;
            }
            F::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT => {
                if !(-1..=100).contains(&value) {
                    return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("carveout {value} is not -1..=100"));
                }
                s.preferred_shared_carveout = value;
            }
            F::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
            | F::CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
            | F::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH
            | F::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT
            | F::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH => {}
            other => {
                return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                    format!("function attribute {} is read-only", other.0)
                });
            }
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuFuncSetCacheConfig(hfunc: CUfunction, config: CUfunc_cache) -> CUresult {
    cuda_entry(|| {
        let f = function(hfunc)?;
        if config.0 > CUfunc_cache::CU_FUNC_CACHE_PREFER_EQUAL.0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown cache config {}", config.0));
        }
        f.settings.lock().unwrap_or_else(|e| e.into_inner()).cache_config = config.0;
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuFuncGetParamInfo(
    func: CUfunction,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> CUresult {
    cuda_entry(|| {
        let f = function(func)?;
        let Some(p) = f.entry.params.get(index) else {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("{} has {} parameters; index {index} asked", f.name.to_string_lossy(), f.entry.params.len())
            });
        };
        if offset.is_null() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "null offset pointer".into());
        }
        out(offset, p.offset as usize)?;
        if !size.is_null() {
            out(size, p.size as usize)?;
        }
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuFuncGetName(name: *mut *const c_char, hfunc: CUfunction) -> CUresult {
    cuda_entry(|| {
        let f = function(hfunc)?;
        out(name, f.name.as_ptr())
    })
}
