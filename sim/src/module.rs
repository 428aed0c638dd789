//! Loaded modules and their functions.

use crate::context::Context;
use crate::driver::Driver;
use crate::error::{CuResult, fail};
use crate::ptx;
use gpupool_shim::cuda::CUresult;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub struct Module {
    pub ctx_handle: u64,
    /// Kernel name -> function handle.
    pub functions: HashMap<String, u64>,
    /// `.global` / `.const` variable name -> (device address, size).
    pub globals: HashMap<String, (u64, u64)>,
    pub ptx: Arc<ptx::Module>,
}

/// Attributes a program may change with `cuFuncSetAttribute` / `cuFuncSetCacheConfig`.
#[derive(Default, Clone, Copy)]
pub struct FuncSettings {
    pub max_dynamic_shared: u32,
    pub preferred_shared_carveout: i32,
    pub cache_config: u32,
}

pub struct Function {
    pub ctx_handle: u64,
    pub module_handle: u64,
    pub name: std::ffi::CString,
    pub entry: ptx::Entry,
    pub static_shared: u64,
    pub local_bytes: u64,
    pub registers: u64,
    pub ptx_version: (u32, u32),
    pub target_sm: u32,
    pub settings: Mutex<FuncSettings>,
    /// The decoded body, built at the first launch.
    pub program: std::sync::OnceLock<Result<Arc<crate::exec::Program>, String>>,
}

/// What kind of image a program handed to `cuModuleLoadData`.
pub enum Image<'a> {
    Ptx(&'a str),
    Elf,
    Fatbin,
}

pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
pub const FATBIN_WRAPPER_MAGIC: u32 = 0x466243B1;

/// Classifies an image from its first bytes; `None` if it is none of the known kinds.
///
/// # Safety
/// `image` must point to readable memory holding a NUL-terminated string (PTX) or a
/// binary image of the kind its header announces.
pub unsafe fn classify<'a>(image: *const u8) -> Option<Image<'a>> {
    let mut head = [0u8; 4];
    for (i, slot) in head.iter_mut().enumerate() {
        // SAFETY: byte i is readable: either the image is binary (>= 4 bytes of
        // header) or it is a string whose terminator we have not passed yet.
        *slot = unsafe { *image.add(i) };
        if *slot == 0 {
            break;
        }
    }
    if head[0] == 0 {
        return None;
    }
    if &head == b"\x7fELF" {
        return Some(Image::Elf);
    }
    let magic = u32::from_le_bytes(head);
    if magic == FATBIN_MAGIC || magic == FATBIN_WRAPPER_MAGIC {
        return Some(Image::Fatbin);
    }
    // SAFETY: not a binary header, so per the contract a NUL-terminated PTX string.
    let text = unsafe { std::ffi::CStr::from_ptr(image.cast()) };
    text.to_str().ok().map(Image::Ptx)
}

/// Loads a PTX module into `ctx`: allocates and initialises its variables, registers
/// its kernels. Returns the module handle.
pub fn load_ptx(driver: &Driver, ctx: &Arc<Context>, text: &str) -> CuResult<u64> {
    let parsed = match ptx::parse(text) {
        Ok(m) => m,
        Err(e) => return fail(CUresult::CUDA_ERROR_INVALID_PTX, || format!("PTX rejected: {e}")),
    };
    if parsed.address_size != 64 {
        return fail(CUresult::CUDA_ERROR_INVALID_PTX, || "only .address_size 64 is supported".into());
    }
    let cc = ctx.device.cfg.cc_major * 10 + ctx.device.cfg.cc_minor;
    if parsed.target_sm > cc {
        return fail(CUresult::CUDA_ERROR_INVALID_PTX, || {
            format!("PTX targets sm_{} but the device is sm_{cc}", parsed.target_sm)
        });
    }
    let parsed = Arc::new(parsed);
    let mut globals = HashMap::new();
    let mut allocated = Vec::new();
    let undo = |allocated: &Vec<u64>| {
        for p in allocated {
            let _ = ctx.memory.free(*p);
        }
    };
    for v in parsed.variables.iter().filter(|v| v.space == ".global" || v.space == ".const") {
        if v.external {
            undo(&allocated);
            return fail(CUresult::CUDA_ERROR_NOT_FOUND, || format!("unresolved external variable {}", v.name));
        }
        let bytes = match ptx::encode_initializer(v) {
            Ok(b) => b,
            Err(e) => {
                undo(&allocated);
                return fail(CUresult::CUDA_ERROR_INVALID_PTX, || e.0);
            }
        };
        let size = bytes.len().max(1) as u64;
        let alloc = match ctx.memory.alloc(size) {
            Ok(a) => a,
            Err(e) => {
                undo(&allocated);
                return Err(e);
            }
        };
        if let Some(p) = alloc.host_ptr(0, bytes.len() as u64) {
            // SAFETY: `p` points to at least `bytes.len()` bytes of the fresh backing store.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
        }
        allocated.push(alloc.base);
        globals.insert(v.name.clone(), (alloc.base, size));
    }
    let mut module = Module { ctx_handle: ctx.handle(), functions: HashMap::new(), globals, ptx: parsed.clone() };
    let module_handle = driver.modules.insert(Arc::new(Module {
        ctx_handle: ctx.handle(),
        functions: HashMap::new(),
        globals: HashMap::new(),
        ptx: parsed.clone(),
    }));
    for e in &parsed.entries {
        let f = Function {
            ctx_handle: ctx.handle(),
            module_handle,
            name: std::ffi::CString::new(e.name.clone()).unwrap_or_default(),
            static_shared: e.static_shared(&parsed),
            local_bytes: e.local_bytes(),
            registers: e.registers(),
            entry: e.clone(),
            ptx_version: parsed.version,
            target_sm: parsed.target_sm,
            settings: Mutex::new(FuncSettings { preferred_shared_carveout: -1, ..Default::default() }),
            program: std::sync::OnceLock::new(),
        };
        let h = driver.functions.insert(Arc::new(f));
        module.functions.insert(e.name.clone(), h);
    }
    // Publish the complete module under the handle reserved above.
    driver.modules.replace(module_handle, Arc::new(module));
    Ok(module_handle)
}

/// Unloads a module: its variables' memory is freed and its functions forgotten.
pub fn unload(driver: &Driver, handle: u64) -> CuResult<()> {
    let Some(m) = driver.modules.remove(handle) else {
        return fail(CUresult::CUDA_ERROR_INVALID_HANDLE, || format!("{handle:#x} is not a loaded module"));
    };
    for f in m.functions.values() {
        driver.functions.remove(*f);
    }
    if let Some(ctx) = driver.contexts.get(m.ctx_handle) {
        // Launches already queued still run (and may read the variables).
        ctx.drain();
        ctx.printf.flush();
        for (base, _) in m.globals.values() {
            let _ = ctx.memory.free(*base);
        }
    }
    Ok(())
}
