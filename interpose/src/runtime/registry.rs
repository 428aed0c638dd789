//! What nvcc's generated host code registers, and the `<<<>>>` configuration.
//!
//! Registration runs in the application's constructors, before `main`, so it only
//! records: the fatbin (which stays in the application's image until it unregisters),
//! each kernel's host stub address and device name, each `__device__` / `__constant__`
//! variable's host shadow address, device name and size. A fatbin is loaded into a
//! context (`cuModuleLoadData`, which sends it to the daemon and brings back every
//! kernel's parameter layout) the first time something in that context needs it: a
//! launch, an attribute query, a symbol copy. Functions are then looked up by
//! (host stub, context) without a round trip.
//!
//! ABI (nvcc's crt/host_runtime.h; NVIDIA declares these only for generated code):
//! - `void **__cudaRegisterFatBinary(void *wrapper)`: wrapper = { int magic 0x466243b1;
//!   int version; const void *fatbin; void *unused }; returns the handle passed below;
//! - `void __cudaRegisterFatBinaryEnd(void **h)`, `void __cudaUnregisterFatBinary(void **h)`;
//! - `void __cudaRegisterFunction(void **h, const char *hostFun, char *deviceFun,
//!   const char *deviceName, int threadLimit, uint3 *tid, uint3 *bid, dim3 *bDim,
//!   dim3 *gDim, int *wSize)`;
//! - `void __cudaRegisterVar(void **h, char *hostVar, char *deviceAddress,
//!   const char *deviceName, int ext, size_t size, int constant, int global)`;
//! - `unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem, void *stream)`,
//!   `cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shmem, void *stream)`;
//! - CUDA 13's launch path: `cudaError_t __cudaGetKernel(cudaKernel_t *k, const void *hostFun)`
//!   once per stub, then `__cudaLaunchKernel(_ptsz)(k, grid, block, args, shmem, stream)`.
//!   A `cudaKernel_t` we hand out is the host stub's address, so it names the same
//!   registration as the stub does everywhere else.

use super::{Rt, cu};
use crate::api::exports::{cuModuleGetFunction, cuModuleGetGlobal_v2, cuModuleLoadData};
use gpupool_shim::cuda::{CUcontext, CUdeviceptr, CUfunction, CUmodule};
use gpupool_shim::cudart::{cudaError, dim3};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::sync::Mutex;

const WRAPPER_MAGIC: u32 = 0x4662_43B1;

struct Fatbin {
    /// The application's `__fatBinC_Wrapper_t`, which `cuModuleLoadData` accepts as is.
    wrapper: usize,
    /// Loaded per context.
    modules: HashMap<usize, CUmodule>,
}

struct Kernel {
    fatbin: usize,
    name: CString,
}

struct Var {
    fatbin: usize,
    name: CString,
    size: usize,
}

#[derive(Default)]
struct Registry {
    /// By handle (the address of the slot we returned).
    fatbins: crate::util::HandleMap<usize, Fatbin>,
    /// By host stub address.
    kernels: crate::util::HandleMap<usize, Kernel>,
    /// By host shadow address.
    vars: HashMap<usize, Var>,
    /// (host stub, context) -> the function loaded there.
    functions: crate::util::HandleMap<(usize, usize), CUfunction>,
}

// SAFETY: the raw handles inside are numbers this library issued (never dereferenced
// here); the registry is only reached under its mutex.
unsafe impl Send for Registry {}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut g = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Registry::default))
}

/// After `fork`: nothing loaded in the parent's contexts is ours.
pub fn forget_contexts() {
    with(|r| {
        r.functions.clear();
        for f in r.fatbins.values_mut() {
            f.modules.clear();
        }
    });
}

/// After `cudaDeviceReset`: the context and its modules are gone in the daemon.
pub fn forget_context(ctx: CUcontext) {
    let c = ctx as usize;
    with(|r| {
        r.functions.retain(|&(_, fc), _| fc != c);
        for f in r.fatbins.values_mut() {
            f.modules.remove(&c);
        }
    });
}

fn c_string(p: *const c_char) -> Option<CString> {
    // SAFETY: nvcc passes NUL-terminated names from the image's string table.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_owned())
}

/// The fatbin's module in `ctx` (which is current), loaded now if needed.
fn module_in(r: &mut Registry, fatbin: usize, ctx: CUcontext) -> Rt<CUmodule> {
    let f = r.fatbins.get_mut(&fatbin).ok_or(cudaError::cudaErrorInvalidDeviceFunction)?;
    if let Some(&m) = f.modules.get(&(ctx as usize)) {
        return Ok(m);
    }
    let mut m: CUmodule = std::ptr::null_mut();
    // SAFETY: the wrapper lies in the application's image, registered and not yet
    // unregistered; our export reads exactly the container its header declares.
    cu(unsafe { cuModuleLoadData(&mut m, f.wrapper as *const c_void) }).map_err(|e| {
        crate::util::log(&format!("loading a registered fatbin into a context failed: {}", e.0));
        match e {
            cudaError::cudaErrorInvalidKernelImage | cudaError::cudaErrorInvalidPtx => {
                cudaError::cudaErrorNoKernelImageForDevice
            }
            other => other,
        }
    })?;
    f.modules.insert(ctx as usize, m);
    Ok(m)
}

/// The kernel registered for host stub `stub`, loaded in the current runtime context.
pub fn function(stub: *const c_void) -> Rt<CUfunction> {
    let ctx = super::state::context()?;
    with(|r| {
        if let Some(&f) = r.functions.get(&(stub as usize, ctx as usize)) {
            return Ok(f);
        }
        let k = r.kernels.get(&(stub as usize)).ok_or(cudaError::cudaErrorInvalidDeviceFunction)?;
        let (fatbin, name) = (k.fatbin, k.name.clone());
        let m = module_in(r, fatbin, ctx)?;
        let mut f: CUfunction = std::ptr::null_mut();
        // SAFETY: our own export; `m` is a module it issued, `name` NUL-terminated.
        cu(unsafe { cuModuleGetFunction(&mut f, m, name.as_ptr()) })
            .map_err(|_| cudaError::cudaErrorInvalidDeviceFunction)?;
        r.functions.insert((stub as usize, ctx as usize), f);
        Ok(f)
    })
}

/// The host stub of the registered kernel `f` was loaded for (`cudaGraphKernelNodeGetParams`
/// answers the stub, as the application named it); `None` for a function loaded otherwise.
pub fn stub_of(f: CUfunction) -> Option<*const c_void> {
    with(|r| r.functions.iter().find(|(_, g)| **g == f).map(|(&(stub, _), _)| stub as *const c_void))
}

/// The device address and size of the variable whose host shadow is `symbol`, in the
/// current runtime context.
pub fn symbol(symbol: *const c_void) -> Rt<(CUdeviceptr, usize)> {
    let ctx = super::state::context()?;
    with(|r| {
        let v = r.vars.get(&(symbol as usize)).ok_or(cudaError::cudaErrorInvalidSymbol)?;
        let (fatbin, name, size) = (v.fatbin, v.name.clone(), v.size);
        let m = module_in(r, fatbin, ctx)?;
        let (mut dptr, mut bytes): (CUdeviceptr, usize) = (0, 0);
        // SAFETY: our own export with valid out-pointers and a NUL-terminated name.
        cu(unsafe { cuModuleGetGlobal_v2(&mut dptr, &mut bytes, m, name.as_ptr()) })
            .map_err(|_| cudaError::cudaErrorInvalidSymbol)?;
        Ok((dptr, if bytes > 0 { bytes } else { size }))
    })
}

/// `cudaGetKernel` / `__cudaGetKernel`: the handle of a registered kernel is its stub's
/// address (no context needed).
pub fn kernel_handle(kernel: *mut *mut c_void, stub: *const c_void) -> Rt<()> {
    if !with(|r| r.kernels.contains_key(&(stub as usize))) {
        return Err(cudaError::cudaErrorInvalidDeviceFunction);
    }
    super::out(kernel, stub.cast_mut())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cudaRegisterFatBinary(wrapper: *mut c_void) -> *mut *mut c_void {
    let body = || {
        if wrapper.is_null() {
            crate::util::log("__cudaRegisterFatBinary: NULL fatbin wrapper");
            return std::ptr::null_mut();
        }
        // SAFETY: nvcc passes its __fatBinC_Wrapper_t, whose first word is the magic.
        let magic = unsafe { wrapper.cast::<u32>().read_unaligned() };
        if magic != WRAPPER_MAGIC {
            crate::util::log(&format!("__cudaRegisterFatBinary: not a fatbin wrapper (magic {magic:#x})"));
        }
        // The handle is a slot of our own, so no two registrations share one.
        let handle = Box::into_raw(Box::new([wrapper, std::ptr::null_mut()])).cast::<*mut c_void>();
        with(|r| r.fatbins.insert(handle as usize, Fatbin { wrapper: wrapper as usize, modules: HashMap::new() }));
        handle
    };
    std::panic::catch_unwind(body).unwrap_or(std::ptr::null_mut())
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cudaRegisterFatBinaryEnd(_handle: *mut *mut c_void) {}

/// At exit (nvcc registers this with atexit) or when a library that registered is
/// unloaded: its kernels and variables are forgotten. Its modules stay loaded until the
/// process disconnects, when the daemon frees them with everything else: at exit the
/// thread-locals the driver path needs may already be gone, and a round trip per module
/// would only slow every exit down.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cudaUnregisterFatBinary(handle: *mut *mut c_void) {
    let _ = std::panic::catch_unwind(|| {
        let h = handle as usize;
        let known = with(|r| {
            let stubs: Vec<usize> = r.kernels.iter().filter(|(_, k)| k.fatbin == h).map(|(&s, _)| s).collect();
            r.kernels.retain(|_, k| k.fatbin != h);
            r.vars.retain(|_, v| v.fatbin != h);
            r.functions.retain(|&(stub, _), _| !stubs.contains(&stub));
            r.fatbins.remove(&h).is_some()
        });
        if known {
            // SAFETY: the slot was made by Box::into_raw in __cudaRegisterFatBinary.
            drop(unsafe { Box::from_raw(handle.cast::<[*mut c_void; 2]>()) });
        }
    });
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cudaRegisterFunction(
    handle: *mut *mut c_void,
    host_fun: *const c_char,
    _device_fun: *mut c_char,
    device_name: *const c_char,
    _thread_limit: c_int,
    _tid: *mut c_void,
    _bid: *mut c_void,
    _bdim: *mut dim3,
    _gdim: *mut dim3,
    _wsize: *mut c_int,
) {
    let _ = std::panic::catch_unwind(|| {
        let Some(name) = c_string(device_name) else {
            crate::util::log("__cudaRegisterFunction: NULL device name");
            return;
        };
        with(|r| r.kernels.insert(host_fun as usize, Kernel { fatbin: handle as usize, name }));
    });
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cudaRegisterVar(
    handle: *mut *mut c_void,
    host_var: *mut c_char,
    _device_address: *mut c_char,
    device_name: *const c_char,
    _ext: c_int,
    size: usize,
    _constant: c_int,
    _global: c_int,
) {
    let _ = std::panic::catch_unwind(|| {
        let Some(name) = c_string(device_name) else {
            crate::util::log("__cudaRegisterVar: NULL device name");
            return;
        };
        with(|r| r.vars.insert(host_var as usize, Var { fatbin: handle as usize, name, size }));
    });
}

/// Managed variables need memory both sides address alike, which forwarding cannot give.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cudaRegisterManagedVar(
    _handle: *mut *mut c_void,
    _host_var_ptr: *mut *mut c_void,
    _device_address: *mut c_char,
    device_name: *const c_char,
    _ext: c_int,
    _size: usize,
    _constant: c_int,
    _global: c_int,
) {
    let _ = std::panic::catch_unwind(|| {
        let name = c_string(device_name).map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        super::unsupported::report(&format!("__cudaRegisterManagedVar ({name}: __managed__ variables)"));
    });
}

/// nvcc's `__cudaInitModule`: loads the fatbin into the current context; 1 on success.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cudaInitModule(handle: *mut *mut c_void) -> c_char {
    let r = std::panic::catch_unwind(|| {
        let ctx = super::state::context().ok()?;
        with(|r| module_in(r, handle as usize, ctx).ok()).map(|_| 1)
    });
    r.ok().flatten().unwrap_or(0)
}

thread_local! {
    /// `<<<grid, block, shmem, stream>>>` pushed by the call site, popped by the stub.
    static CONFIGS: RefCell<Vec<(dim3, dim3, usize, *mut c_void)>> = const { RefCell::new(Vec::new()) };
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cudaPushCallConfiguration(
    grid: dim3,
    block: dim3,
    shmem: usize,
    stream: *mut c_void,
) -> c_uint {
    CONFIGS.with(|c| c.borrow_mut().push((grid, block, shmem, stream)));
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cudaPopCallConfiguration(
    grid: *mut dim3,
    block: *mut dim3,
    shmem: *mut usize,
    stream: *mut c_void,
) -> cudaError {
    super::rt_entry(|| {
        let (g, b, s, st) = CONFIGS.with(|c| c.borrow_mut().pop()).ok_or(cudaError::cudaErrorMissingConfiguration)?;
        super::out(grid, g)?;
        super::out(block, b)?;
        super::out(shmem, s)?;
        // The stub passes a `cudaStream_t *` typed as `void *`.
        super::out(stream.cast::<*mut c_void>(), st)
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __cudaGetKernel(kernel: *mut *mut c_void, stub: *const c_void) -> cudaError {
    super::rt_entry(|| kernel_handle(kernel, stub))
}
