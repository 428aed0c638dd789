//! End-to-end test support: drive the simulator through its real C ABI.
//!
//! Owns: locating the simulator (`GPUPOOL_SIM_LIBDIR`, else `scripts/sim-libdir`), loading
//! `libcuda.so.1` from there with libloading, a typed table of the driver entry points the
//! tests use ([`Driver`], called through [`call!`]), small RAII and stream helpers, and [`isolated_test!`], which runs a
//! test body in a fresh copy of the test binary (the simulator is process-global state:
//! `cuInit` happens once and `GPUPOOL_SIM_*` is read when the library loads), and building the
//! client programs: `tests/c` with the system C compiler ([`compile_c`]), `tests/cuda` with
//! NVIDIA's nvcc from the venv ([`compile_cu`]), `tests/cuda12` (host-only C++ against CUDA
//! 12's runtime headers and `libcudart.so.12`) with the system C++ compiler
//! ([`compile_cuda12_host`]). Also: README commands as written ([`readme`]), and terminal
//! programs under tmux ([`tmux`]).
//!
//! Must not: link against the simulator, or reimplement driver semantics. Every signature
//! in the table is checked at compile time against `gpupool_shim::cuda`.

#![allow(non_snake_case)]
// CUDA handles are opaque pointers that only the driver interprets (and, in the simulator,
// validates); functions here pass them on and never dereference them.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod churn;
pub mod compute_load;
pub mod containers;
pub mod delay_relay;
pub mod fuzz;
pub mod readme;
pub mod timed;
pub mod tmux;

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cu::{
    CUcontext, CUdevice, CUdeviceptr, CUdriverProcAddressQueryResult, CUevent, CUfunction, CUhostFn, CUmodule,
    CUresult, CUstream, cuuint64_t,
};
pub use gpupool_shim::cuda as cu;

/// Environment variable naming a directory that holds `libcuda.so.1` (the simulator).
pub const LIBDIR_ENV: &str = "GPUPOOL_SIM_LIBDIR";
/// Set in a child started by [`isolated_test!`]: the full name of the test it must run.
pub const CHILD_ENV: &str = "GPUPOOL_E2E_CHILD";
/// The simulator's configuration variables; children start with none of them but their own.
pub const SIM_ENV: &[&str] = &[
    "GPUPOOL_SIM_DEVICES",
    "GPUPOOL_SIM_MEMORY",
    "GPUPOOL_SIM_DRIVER_VERSION",
    "GPUPOOL_SIM_CONFIG",
    "GPUPOOL_SIM_NPU_DEVICES",
    "GPUPOOL_SIM_NPU_MEMORY",
    "GPUPOOL_SIM_NPU_CONFIG",
];

/// Result codes, short names for the ones tests compare against.
pub mod status {
    use super::cu::{CUresult, cudaError_enum as E};
    pub const SUCCESS: CUresult = E::CUDA_SUCCESS;
    pub const INVALID_VALUE: CUresult = E::CUDA_ERROR_INVALID_VALUE;
    pub const OUT_OF_MEMORY: CUresult = E::CUDA_ERROR_OUT_OF_MEMORY;
    pub const NOT_INITIALIZED: CUresult = E::CUDA_ERROR_NOT_INITIALIZED;
    pub const INVALID_DEVICE: CUresult = E::CUDA_ERROR_INVALID_DEVICE;
    pub const INVALID_CONTEXT: CUresult = E::CUDA_ERROR_INVALID_CONTEXT;
    pub const INVALID_HANDLE: CUresult = E::CUDA_ERROR_INVALID_HANDLE;
    pub const NOT_FOUND: CUresult = E::CUDA_ERROR_NOT_FOUND;
    pub const NOT_READY: CUresult = E::CUDA_ERROR_NOT_READY;
}

/// A driver entry point: a function pointer that [`Driver::load`] resolved from the simulator
/// under its export name, with its signature checked at compile time against bindgen's
/// declaration of that export (see `driver_table!`). Only `Driver::load` makes one, it is
/// neither `Copy` nor `Clone`, and a [`Driver`] cannot be taken apart (it implements `Drop`),
/// so an `Entry` is only reachable through the `Driver` that keeps its library loaded.
///
/// Call one with [`call!`]: `call!(d.cuMemAlloc_v2(&mut p, len))`.
pub struct Entry<F>(F);

/// `Entry::call` for each arity the table uses (0 to 11 arguments).
macro_rules! entry_arity {
    ($( ($($a:ident: $t:ident),*) )*) => {$(
        impl<$($t),*> Entry<unsafe extern "C" fn($($t),*) -> CUresult> {
            /// Calls the entry point with `args` and returns its result code.
            ///
            /// Contract (the C driver API's own, which every test and bench call site keeps):
            /// each pointer argument is null or points to live memory of the type and size
            /// the entry point reads or writes; handles may be stale or bogus, since the
            /// simulator validates every handle before it uses one.
            #[inline]
            pub fn call(&self, ($($a,)*): ($($t,)*)) -> CUresult {
                // SAFETY: `self.0` is the export of its field's name, typed as bindgen declares
                // it (`driver_table!`), loaded while its `Driver` lives; arguments: see above.
                unsafe { (self.0)($($a),*) }
            }
        }
    )*};
}

entry_arity! {
    ()
    (a: A)
    (a: A, b: B)
    (a: A, b: B, c: C)
    (a: A, b: B, c: C, d: D)
    (a: A, b: B, c: C, d: D, e: E)
    (a: A, b: B, c: C, d: D, e: E, f: F)
    (a: A, b: B, c: C, d: D, e: E, f: F, g: G)
    (a: A, b: B, c: C, d: D, e: E, f: F, g: G, h: H)
    (a: A, b: B, c: C, d: D, e: E, f: F, g: G, h: H, i: I)
    (a: A, b: B, c: C, d: D, e: E, f: F, g: G, h: H, i: I, j: J)
    (a: A, b: B, c: C, d: D, e: E, f: F, g: G, h: H, i: I, j: J, k: K)
}

/// Calls a [`Driver`] entry point: `call!(d.cuMemAlloc_v2(&mut p, len))` or
/// `call!(cuda().cuStreamQuery(s))`, giving the `CUresult`. The arguments keep the contract
/// of [`Entry::call`].
#[macro_export]
macro_rules! call {
    ($d:ident . $f:ident ( $($arg:expr),* $(,)? )) => {
        $d.$f.call(($($arg,)*))
    };
    ($g:ident () . $f:ident ( $($arg:expr),* $(,)? )) => {
        $g().$f.call(($($arg,)*))
    };
}

/// Declares [`Driver`]: one field per entry point, loaded by its export name, with a
/// compile-time proof that the written signature is the one bindgen generated.
macro_rules! driver_table {
    ($(#[$doc:meta])* $table:ident; $( $name:ident ( $($arg:ty),* $(,)? ); )*) => {
        $(#[$doc])*
        pub struct $table {
            $( pub $name: Entry<unsafe extern "C" fn($($arg),*) -> CUresult>, )*
            /// Where the library was loaded from.
            pub path: PathBuf,
            lib: libloading::Library,
        }

        $( const _: unsafe extern "C" fn($($arg),*) -> CUresult = cu::$name; )*

        impl $table {
            /// Loads `path` and resolves every entry point of the table.
            pub fn load(path: &Path) -> Result<$table, String> {
                // SAFETY: loading the simulator runs its initialisers, which is what we test.
                let lib = unsafe { libloading::Library::new(path) }
                    .map_err(|e| format!("loading {}: {e}", path.display()))?;
                Ok($table {
                    $( $name: Entry(
                        // SAFETY: read as bindgen's type for this export (the `const _` above);
                        // the pointer is kept next to `lib`, in the same `Driver`.
                        unsafe {
                            *lib.get::<unsafe extern "C" fn($($arg),*) -> CUresult>(
                                concat!(stringify!($name), "\0").as_bytes(),
                            )
                            .map_err(|e| format!("{} in {}: {e}", stringify!($name), path.display()))?
                        }
                    ), )*
                    path: path.to_path_buf(),
                    lib,
                })
            }
        }

        /// Keeps the table whole: no entry point can be moved out of it and outlive its library.
        impl Drop for $table {
            fn drop(&mut self) {}
        }
    };
}

driver_table! {
    /// The driver entry points the tests call, resolved by export name from the simulator or,
    /// in the fuzzer's tenants, from libgpupool.so: every one is exported by both.
    Driver;
    cuInit(c_uint);
    cuDriverGetVersion(*mut c_int);
    cuGetErrorName(CUresult, *mut *const c_char);
    cuGetProcAddress_v2(*const c_char, *mut *mut c_void, c_int, cuuint64_t,
                        *mut CUdriverProcAddressQueryResult);
    cuDeviceGet(*mut CUdevice, c_int);
    cuDeviceGetCount(*mut c_int);
    cuDeviceGetName(*mut c_char, c_int, CUdevice);
    cuDeviceTotalMem_v2(*mut usize, CUdevice);
    cuDevicePrimaryCtxRetain(*mut CUcontext, CUdevice);
    cuDevicePrimaryCtxRelease_v2(CUdevice);
    cuCtxCreate_v2(*mut CUcontext, c_uint, CUdevice);
    cuCtxDestroy_v2(CUcontext);
    cuCtxPushCurrent_v2(CUcontext);
    cuCtxPopCurrent_v2(*mut CUcontext);
    cuCtxSetCurrent(CUcontext);
    cuCtxGetCurrent(*mut CUcontext);
    cuCtxGetDevice(*mut CUdevice);
    cuCtxSynchronize();
    cuMemGetInfo_v2(*mut usize, *mut usize);
    cuMemAlloc_v2(*mut CUdeviceptr, usize);
    cuMemFree_v2(CUdeviceptr);
    cuMemGetAddressRange_v2(*mut CUdeviceptr, *mut usize, CUdeviceptr);
    cuMemAllocHost_v2(*mut *mut c_void, usize);
    cuMemHostAlloc(*mut *mut c_void, usize, c_uint);
    cuMemFreeHost(*mut c_void);
    cuMemFreeAsync(CUdeviceptr, CUstream);
    cuMemcpyHtoD_v2(CUdeviceptr, *const c_void, usize);
    cuMemcpyDtoH_v2(*mut c_void, CUdeviceptr, usize);
    cuMemcpyDtoD_v2(CUdeviceptr, CUdeviceptr, usize);
    cuMemcpyHtoDAsync_v2(CUdeviceptr, *const c_void, usize, CUstream);
    cuMemcpyDtoHAsync_v2(*mut c_void, CUdeviceptr, usize, CUstream);
    cuMemcpyDtoDAsync_v2(CUdeviceptr, CUdeviceptr, usize, CUstream);
    cuMemcpy(CUdeviceptr, CUdeviceptr, usize);
    cuMemcpyAsync(CUdeviceptr, CUdeviceptr, usize, CUstream);
    cuMemcpy2D_v2(*const cu::CUDA_MEMCPY2D);
    cuMemcpy2DAsync_v2(*const cu::CUDA_MEMCPY2D, CUstream);
    cuMemcpy3D_v2(*const cu::CUDA_MEMCPY3D);
    cuMemsetD8_v2(CUdeviceptr, u8, usize);
    cuMemsetD32_v2(CUdeviceptr, c_uint, usize);
    cuMemsetD8Async(CUdeviceptr, u8, usize, CUstream);
    cuMemsetD16Async(CUdeviceptr, u16, usize, CUstream);
    cuMemsetD32Async(CUdeviceptr, c_uint, usize, CUstream);
    cuMemsetD2D32Async(CUdeviceptr, usize, c_uint, usize, usize, CUstream);
    cuStreamCreate(*mut CUstream, c_uint);
    cuStreamDestroy_v2(CUstream);
    cuStreamGetFlags(CUstream, *mut c_uint);
    cuStreamQuery(CUstream);
    cuStreamSynchronize(CUstream);
    cuStreamWaitEvent(CUstream, CUevent, c_uint);
    cuLaunchHostFunc(CUstream, CUhostFn, *mut c_void);
    cuEventCreate(*mut CUevent, c_uint);
    cuEventRecord(CUevent, CUstream);
    cuEventQuery(CUevent);
    cuEventSynchronize(CUevent);
    cuEventElapsedTime(*mut f32, CUevent, CUevent);
    cuEventDestroy_v2(CUevent);
    cuStreamBeginCapture_v2(CUstream, cu::CUstreamCaptureMode);
    cuStreamEndCapture(CUstream, *mut cu::CUgraph);
    cuStreamIsCapturing(CUstream, *mut cu::CUstreamCaptureStatus);
    cuGraphInstantiateWithFlags(*mut cu::CUgraphExec, cu::CUgraph, u64);
    cuGraphLaunch(cu::CUgraphExec, CUstream);
    cuGraphExecDestroy(cu::CUgraphExec);
    cuGraphDestroy(cu::CUgraph);
    cuModuleLoadData(*mut CUmodule, *const c_void);
    cuModuleUnload(CUmodule);
    cuModuleGetFunction(*mut CUfunction, CUmodule, *const c_char);
    cuFuncGetParamInfo(CUfunction, usize, *mut usize, *mut usize);
    cuLaunchKernel(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream,
                   *mut *mut c_void, *mut *mut c_void);
    cuMemAddressReserve(*mut CUdeviceptr, usize, usize, CUdeviceptr, u64);
    cuMemAddressFree(CUdeviceptr, usize);
    cuMemCreate(*mut u64, usize, *const cu::CUmemAllocationProp, u64);
    cuMemRelease(u64);
    cuMemMap(CUdeviceptr, usize, usize, u64, u64);
    cuMemUnmap(CUdeviceptr, usize);
    cuMemSetAccess(CUdeviceptr, usize, *const cu::CUmemAccessDesc, usize);
    cuMemGetAccess(*mut u64, *const cu::CUmemLocation, CUdeviceptr);
    cuMemGetAllocationGranularity(*mut usize, *const cu::CUmemAllocationProp, cu::CUmemAllocationGranularity_flags);
    cuMemGetAllocationPropertiesFromHandle(*mut cu::CUmemAllocationProp, u64);
    cuMemRetainAllocationHandle(*mut u64, *mut c_void);
    cuMemExportToShareableHandle(*mut c_void, u64, cu::CUmemAllocationHandleType, u64);
    cuMemImportFromShareableHandle(*mut u64, *mut c_void, cu::CUmemAllocationHandleType);
    cuStreamWriteValue32_v2(CUstream, CUdeviceptr, u32, c_uint);
    cuDeviceGetAttribute(*mut c_int, cu::CUdevice_attribute, CUdevice);
    cuMulticastCreate(*mut u64, *const cu::CUmulticastObjectProp);
    cuGreenCtxCreate(*mut cu::CUgreenCtx, cu::CUdevResourceDesc, CUdevice, c_uint);
    cuCtxFromGreenCtx(*mut CUcontext, cu::CUgreenCtx);
    cuLogsRegisterCallback(cu::CUlogsCallback, *mut c_void, *mut cu::CUlogsCallbackHandle);
    cuLogsUnregisterCallback(cu::CUlogsCallbackHandle);
    cuMemcpy3DAsync_v2(*const cu::CUDA_MEMCPY3D, CUstream);
    cuArrayCreate_v2(*mut cu::CUarray, *const cu::CUDA_ARRAY_DESCRIPTOR);
    cuArray3DCreate_v2(*mut cu::CUarray, *const cu::CUDA_ARRAY3D_DESCRIPTOR);
    cuArray3DGetDescriptor_v2(*mut cu::CUDA_ARRAY3D_DESCRIPTOR, cu::CUarray);
    cuArrayDestroy(cu::CUarray);
    cuMipmappedArrayCreate(*mut cu::CUmipmappedArray, *const cu::CUDA_ARRAY3D_DESCRIPTOR, c_uint);
    cuMipmappedArrayGetLevel(*mut cu::CUarray, cu::CUmipmappedArray, c_uint);
    cuMipmappedArrayDestroy(cu::CUmipmappedArray);
    cuMemcpyHtoA_v2(cu::CUarray, usize, *const c_void, usize);
    cuMemcpyAtoH_v2(*mut c_void, cu::CUarray, usize, usize);
    cuTexObjectCreate(*mut u64, *const cu::CUDA_RESOURCE_DESC, *const cu::CUDA_TEXTURE_DESC,
                      *const cu::CUDA_RESOURCE_VIEW_DESC);
    cuTexObjectDestroy(u64);
    cuTexObjectGetResourceDesc(*mut cu::CUDA_RESOURCE_DESC, u64);
    cuSurfObjectCreate(*mut u64, *const cu::CUDA_RESOURCE_DESC);
    cuSurfObjectDestroy(u64);
}

impl Driver {
    /// Address of an exported symbol, for comparing with what `cuGetProcAddress_v2` returns.
    pub fn export(&self, name: &str) -> Option<*mut c_void> {
        let mut sym = name.as_bytes().to_vec();
        sym.push(0);
        // SAFETY: only the address is read, never called through this type.
        unsafe { self.lib.get::<*mut c_void>(&sym).ok().map(|s| *s) }
    }

    /// `cuGetProcAddress_v2(symbol, &pfn, version, flags, &status)` as a tuple.
    pub fn proc_address(
        &self,
        symbol: &CStr,
        version: c_int,
        flags: u64,
    ) -> (CUresult, *mut c_void, CUdriverProcAddressQueryResult) {
        let mut pfn: *mut c_void = std::ptr::dangling_mut(); // must be overwritten
        let mut st = cu::CUdriverProcAddressQueryResult(0xdead);
        let r = self.cuGetProcAddress_v2.call((symbol.as_ptr(), &mut pfn, version, flags, &mut st));
        (r, pfn, st)
    }
}

/// The directory holding `libcuda.so.1`: `$GPUPOOL_SIM_LIBDIR`, else the one that
/// `scripts/sim-libdir` builds (debug profile). Resolved once per process.
pub fn sim_libdir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| match std::env::var_os(LIBDIR_ENV) {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => build_sim_libdir(false).unwrap_or_else(|e| panic!("{e}")),
    })
}

/// Runs `scripts/sim-libdir [--release]` from the workspace root and returns the directory.
pub fn build_sim_libdir(release: bool) -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cmd = Command::new(root.join("scripts/sim-libdir"));
    if release {
        cmd.arg("--release");
    }
    let out = cmd.stderr(Stdio::inherit()).output().map_err(|e| format!("running scripts/sim-libdir: {e}"))?;
    if !out.status.success() {
        return Err(format!("scripts/sim-libdir failed: {}", out.status));
    }
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok(PathBuf::from(dir))
}

/// The simulator's driver table, loaded once per process. Does not call `cuInit`.
pub fn driver() -> &'static Driver {
    DRIVER.get_or_init(|| Driver::load(&sim_libdir().join("libcuda.so.1")).unwrap_or_else(|e| panic!("{e}")))
}

/// The driver after a successful `cuInit(0)` (done once per process).
pub fn cuda() -> &'static Driver {
    static INIT: OnceLock<()> = OnceLock::new();
    let d = driver();
    INIT.get_or_init(|| check(call!(d.cuInit(0))));
    d
}

/// The driver's name for a result code, e.g. `CUDA_ERROR_INVALID_VALUE (1)`.
pub fn name(res: CUresult) -> String {
    let mut p: *const c_char = std::ptr::null();
    let known =
        DRIVER.get().map(|d| call!(d.cuGetErrorName(res, &mut p)) == status::SUCCESS && !p.is_null()).unwrap_or(false);
    if known {
        // SAFETY: on success `cuGetErrorName` points `p` (checked non-null) at a static
        // NUL-terminated string of the driver's.
        let text = unsafe { CStr::from_ptr(p) };
        format!("{} ({})", text.to_string_lossy(), res.0)
    } else {
        format!("CUresult({})", res.0)
    }
}
static DRIVER: OnceLock<Driver> = OnceLock::new();

/// Panics with the code's name unless `res` is `CUDA_SUCCESS`.
#[track_caller]
pub fn check(res: CUresult) {
    if res != status::SUCCESS {
        panic!("CUDA call failed: {}", name(res));
    }
}

/// [`check`] for `Drop` impls: does nothing while the thread is already panicking, where a
/// second panic would abort the test binary instead of reporting the first failure.
#[track_caller]
pub fn check_in_drop(res: CUresult) {
    if !std::thread::panicking() {
        check(res);
    }
}

/// Asserts that `res` is `want`, naming both on failure.
#[track_caller]
pub fn expect(res: CUresult, want: CUresult, what: &str) {
    if res != want {
        panic!("{what}: expected {}, got {}", name(want), name(res));
    }
}

/// A raw CUDA handle that may cross threads (handles are pointers, hence !Send).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shared<T>(pub T);
// `Shared` never dereferences the pointer: it carries a CUDA handle back to the driver, which
// is thread-safe and (in the simulator) validates every handle it is given.
// SAFETY: a raw pointer has no thread affinity of its own, and CUDA handles are process-wide,
// valid on any thread.
unsafe impl<T> Send for Shared<*mut T> {}
// SAFETY: as for `Send`: a shared `Shared` only gives out copies of the pointer.
unsafe impl<T> Sync for Shared<*mut T> {}

/// A context created with `cuCtxCreate_v2` (current on the creating thread), destroyed on drop.
pub struct Context {
    pub raw: CUcontext,
}
// SAFETY: `raw` is a process-wide CUDA context handle, valid on any thread; `Context` only
// passes it to the (thread-safe) driver, never dereferences it.
unsafe impl Send for Context {}
// SAFETY: as for `Send`; `&Context` only exposes the handle's value.
unsafe impl Sync for Context {}

impl Context {
    /// Creates a context on `dev`; it becomes current on the calling thread.
    pub fn new(dev: CUdevice) -> Context {
        let d = cuda();
        let mut raw = std::ptr::null_mut();
        check(call!(d.cuCtxCreate_v2(&mut raw, 0, dev)));
        assert!(!raw.is_null());
        Context { raw }
    }
    /// Makes this context current on the calling thread (replacing the top of its stack).
    pub fn make_current(&self) {
        check(call!(cuda().cuCtxSetCurrent(self.raw)));
    }
}
impl Drop for Context {
    fn drop(&mut self) {
        check_in_drop(call!(cuda().cuCtxDestroy_v2(self.raw)));
    }
}

/// A stream of the current context, destroyed on drop.
pub struct Stream {
    pub raw: CUstream,
}
// SAFETY: `raw` is a CUDA stream handle, valid on any thread of the process; `Stream` only
// passes it to the (thread-safe) driver, never dereferences it.
unsafe impl Send for Stream {}
// SAFETY: as for `Send`; `&Stream` only exposes the handle's value.
unsafe impl Sync for Stream {}
impl Stream {
    pub fn new(flags: c_uint) -> Stream {
        let mut raw = std::ptr::null_mut();
        check(call!(cuda().cuStreamCreate(&mut raw, flags)));
        assert!(!raw.is_null());
        Stream { raw }
    }
}
impl Drop for Stream {
    fn drop(&mut self) {
        check_in_drop(call!(cuda().cuStreamDestroy_v2(self.raw)));
    }
}

/// Device memory in the current context, freed on drop.
pub struct DeviceBuffer {
    pub ptr: CUdeviceptr,
    pub len: usize,
}
impl DeviceBuffer {
    pub fn new(len: usize) -> DeviceBuffer {
        let mut ptr = 0;
        check(call!(cuda().cuMemAlloc_v2(&mut ptr, len)));
        assert_ne!(ptr, 0);
        DeviceBuffer { ptr, len }
    }
    /// Copies the whole buffer to the host (synchronous).
    pub fn read(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        check(call!(cuda().cuMemcpyDtoH_v2(v.as_mut_ptr().cast(), self.ptr, self.len)));
        v
    }
    /// Copies `data` to the start of the buffer (synchronous).
    pub fn write(&self, data: &[u8]) {
        assert!(data.len() <= self.len);
        check(call!(cuda().cuMemcpyHtoD_v2(self.ptr, data.as_ptr().cast(), data.len())));
    }
}
impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        check_in_drop(call!(cuda().cuMemFree_v2(self.ptr)));
    }
}

/// Enqueues a Rust closure on `stream` with `cuLaunchHostFunc`. Returns the driver's code;
/// on failure the closure is dropped without running.
pub fn host_fn<F: FnOnce() + Send + 'static>(stream: CUstream, f: F) -> CUresult {
    unsafe extern "C" fn trampoline(data: *mut c_void) {
        // The driver calls a host function once per successful `cuLaunchHostFunc`.
        // SAFETY: `data` is the `Box::into_raw` pointer below, launched with this function, so
        // the box comes back here exactly once.
        let f: Box<Box<dyn FnOnce() + Send>> = unsafe { Box::from_raw(data.cast()) };
        // A panic must not unwind into the driver's worker thread.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    }
    let boxed: Box<Box<dyn FnOnce() + Send>> = Box::new(Box::new(f));
    let data = Box::into_raw(boxed);
    let r = call!(cuda().cuLaunchHostFunc(stream, Some(trampoline), data.cast()));
    if r != status::SUCCESS {
        // SAFETY: the launch failed, so the driver never calls `trampoline` with `data`, and
        // the box made by `Box::into_raw` above is still ours to reclaim, once.
        drop(unsafe { Box::from_raw(data) });
    }
    r
}

/// A host function that holds its stream until opened: `enqueue` it, check what must not
/// have happened yet, then `open`. Dropping the gate opens it, so a failing test never
/// leaves a driver worker blocked.
#[derive(Default)]
pub struct Gate {
    inner: Arc<(Mutex<GateState>, Condvar)>,
}
#[derive(Default)]
struct GateState {
    open: bool,
    entered: bool,
}
impl Gate {
    pub fn new() -> Gate {
        Gate::default()
    }
    /// Enqueues the blocking host function on `stream`.
    pub fn enqueue(&self, stream: CUstream) {
        let inner = Arc::clone(&self.inner);
        check(host_fn(stream, move || {
            let (m, cv) = &*inner;
            let mut s = m.lock().unwrap();
            s.entered = true;
            cv.notify_all();
            while !s.open {
                s = cv.wait(s).unwrap();
            }
        }));
    }
    /// Lets the held stream go on.
    pub fn open(&self) {
        let (m, cv) = &*self.inner;
        m.lock().unwrap().open = true;
        cv.notify_all();
    }
    /// Waits until the stream has reached the gate; false if it did not within `timeout`.
    pub fn wait_entered(&self, timeout: Duration) -> bool {
        let (m, cv) = &*self.inner;
        let deadline = Instant::now() + timeout;
        let mut s = m.lock().unwrap();
        while !s.entered {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            s = cv.wait_timeout(s, deadline - now).unwrap().0;
        }
        true
    }
}
impl Drop for Gate {
    fn drop(&mut self) {
        self.open();
    }
}

/// Runs `f` on a new thread and returns its result, or `None` if it did not finish within
/// `timeout` (the thread is left behind). Turns "the driver deadlocked" into a failure.
pub fn within<T: Send + 'static>(timeout: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(timeout).ok()
}

/// Runs `f` on a new thread with `ctx` current there; its result arrives on the receiver.
/// With `recv_timeout`, "returned too early" and "never returned" are both checkable.
pub fn spawn_in<T: Send + 'static>(
    ctx: CUcontext,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::sync::mpsc::Receiver<T> {
    let ctx = Shared(ctx);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let ctx = ctx;
        check(call!(cuda().cuCtxSetCurrent(ctx.0)));
        let _ = tx.send(f());
    });
    rx
}

/// `cuStreamSynchronize(stream)` on a new thread with `ctx` current (see [`spawn_in`]).
pub fn sync_stream_in(ctx: CUcontext, stream: CUstream) -> std::sync::mpsc::Receiver<CUresult> {
    let s = Shared(stream);
    spawn_in(ctx, move || {
        let s = s;
        call!(cuda().cuStreamSynchronize(s.0))
    })
}

/// PTX of a kernel whose body is only `ret;`, with a u64 and a u32 parameter.
pub const EMPTY_PTX: &str = "\
.version 8.0
.target sm_90
.address_size 64
.visible .entry empty(.param .u64 p0, .param .u32 p1)
{
\tret;
}
\0";

/// `fill(p, v)`: `p[tid.x] = v` (u32).
pub const FILL_PTX: &str = "\
.version 8.0
.target sm_90
.address_size 64
.visible .entry fill(.param .u64 p, .param .u32 v)
{
\t.reg .b64 %rd<4>;
\t.reg .b32 %r<3>;
\tld.param.u64 %rd1, [p];
\tld.param.u32 %r1, [v];
\tcvta.to.global.u64 %rd2, %rd1;
\tmov.u32 %r2, %tid.x;
\tmul.wide.u32 %rd3, %r2, 4;
\tadd.s64 %rd2, %rd2, %rd3;
\tst.global.u32 [%rd2], %r1;
\tret;
}
\0";

/// Loads [`FILL_PTX`] in the current context: its module and `fill`.
pub fn load_fill() -> (CUmodule, CUfunction) {
    let (mut m, mut f) = (std::ptr::null_mut(), std::ptr::null_mut());
    check(call!(cuda().cuModuleLoadData(&mut m, FILL_PTX.as_ptr().cast())));
    check(call!(cuda().cuModuleGetFunction(&mut f, m, c"fill".as_ptr())));
    (m, f)
}

/// Queues `fill(p, v)` with one block of `threads` threads on `stream`.
pub fn launch_fill(f: CUfunction, p: u64, v: u32, threads: u32, stream: CUstream) -> CUresult {
    let (mut p, mut v) = (p, v);
    let mut params: [*mut c_void; 2] = [(&raw mut p).cast(), (&raw mut v).cast()];
    call!(cuda().cuLaunchKernel(f, 1, 1, 1, threads, 1, 1, 0, stream, params.as_mut_ptr(), std::ptr::null_mut()))
}

/// Number of simulated devices, from `cuDeviceGetCount`.
pub fn device_count() -> c_int {
    let mut n = 0;
    check(call!(cuda().cuDeviceGetCount(&mut n)));
    n
}

// ---------------------------------------------------------------------------------------
// Isolated tests: one fresh process per test body.
// ---------------------------------------------------------------------------------------

/// The name libtest knows a test by: `module_path!()` without the crate, plus the fn name.
pub fn test_name(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_, rest)) => format!("{rest}::{name}"),
        None => name.to_string(),
    }
}

/// True in the child process started for exactly this test.
pub fn is_child(test: &str) -> bool {
    std::env::var(CHILD_ENV).is_ok_and(|v| v == test)
}

const CHILD_MARK: &str = "gpupool-e2e child finished:";

/// Called by the child when the body returned normally.
pub fn child_done(test: &str) {
    println!("{CHILD_MARK} {test}");
}

/// Runs `cmd` with its output captured and the simulator configured by `env` alone (every
/// other `GPUPOOL_SIM_*` removed). Returns its output, or `None` if it did not finish within
/// `timeout`, in which case it was killed (SIGKILL).
pub fn output_with_sim_env(mut cmd: Command, env: &[(&str, &str)], timeout: Duration) -> Option<std::process::Output> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    for k in SIM_ENV {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let program = cmd.get_program().to_string_lossy().into_owned();
    let child = cmd.spawn().unwrap_or_else(|e| panic!("starting {program}: {e}"));
    let pid = child.id();
    match within(timeout, move || child.wait_with_output()) {
        Some(out) => Some(out.unwrap_or_else(|e| panic!("waiting for {program}: {e}"))),
        None => {
            // SAFETY: kill(2) takes plain integers and touches none of this process's memory.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            None
        }
    }
}

/// Re-executes the current test binary to run only `test`, with the simulator configured by
/// `env` (and no other `GPUPOOL_SIM_*`), and fails unless the child ran the body and passed.
pub fn run_in_child(test: &str, env: &[(&str, &str)], timeout: Duration) {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"]).env(CHILD_ENV, test).env(LIBDIR_ENV, sim_libdir());
    let Some(out) = output_with_sim_env(cmd, env, timeout) else {
        panic!("isolated test {test} did not finish within {timeout:?} (killed)");
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // libtest may print "test NAME ... " on the same line before the marker.
    let ran = stdout.contains(&format!("{CHILD_MARK} {test}\n"));
    if !out.status.success() || !ran {
        panic!(
            "isolated test {test} failed ({}; body completed: {ran})\n--- child stdout ---\n{stdout}\n--- child stderr ---\n{stderr}",
            out.status
        );
    }
}

/// A `#[test]` whose body runs in a fresh process with its own simulator configuration:
///
/// ```text
/// isolated_test!(fn oom_at_capacity() env("GPUPOOL_SIM_MEMORY" => "64MiB") {
///     /* first load of the simulator in this process, cuInit not yet called */
/// });
/// ```
#[macro_export]
macro_rules! isolated_test {
    ($(#[$m:meta])* fn $name:ident() env($($k:expr => $v:expr),* $(,)?) $body:block) => {
        $(#[$m])*
        #[test]
        fn $name() {
            let test = $crate::test_name(module_path!(), stringify!($name));
            if $crate::is_child(&test) {
                $body
                $crate::child_done(&test);
            } else {
                $crate::run_in_child(&test, &[$(($k, $v)),*], ::std::time::Duration::from_secs(60));
            }
        }
    };
    ($(#[$m:meta])* fn $name:ident() $body:block) => {
        $crate::isolated_test!($(#[$m])* fn $name() env() $body);
    };
}

/// Compiles `tests/c/<name>.c` (C11, warnings on, `-ldl -lpthread`, our headers on the include
/// path) into `out_dir/<name>` and returns the executable. Compiler: `$CC`, else `cc`.
/// Runs a compiler; panics with its command line and output unless it succeeded.
fn run_compiler(cmd: &mut Command, what: &str, source: &Path) {
    let out = cmd.output().unwrap_or_else(|e| panic!("running {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed on {} ({}):\n{cmd:?}\n{}{}",
        source.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn compile_c(name: &str, out_dir: &Path) -> PathBuf {
    std::fs::create_dir_all(out_dir).expect("creating the output directory");
    let exe = out_dir.join(name);
    compile_c_into(&format!("{name}.c"), &exe, &[]);
    exe
}

/// Compiles `tests/c/<source>` as [`compile_c`] does into `output`, with `extra` after the
/// source (before `-ldl -lpthread`): `-shared -fPIC` and linker options for a library.
pub fn compile_c_into(source: &str, output: &Path, extra: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cc = std::env::var("CC").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "cc".into());
    let source = root.join("tests/c").join(source);
    let mut cmd = Command::new(&cc);
    cmd.args(["-std=c11", "-O1", "-g", "-Wall", "-Wextra"])
        .args(["-Werror=implicit-function-declaration", "-Werror=incompatible-pointer-types", "-Werror=int-conversion"])
        .arg("-I")
        .arg(root.join("shim-headers/include"))
        .arg(&source)
        .arg("-o")
        .arg(output)
        .args(extra)
        .args(["-ldl", "-lpthread"]);
    run_compiler(&mut cmd, &format!("the C compiler `{cc}`"), &source);
}

/// Environment variable naming the `nvcc` [`compile_cu`] uses. Unset: NVIDIA's nvcc 13 from the
/// PyPI wheels in `target/venv` (`nvidia-cuda-nvcc` and friends, pinned in
/// `tests/python/requirements.txt`; `scripts/setup-venv` installs them).
pub const NVCC_ENV: &str = "GPUPOOL_NVCC";

/// The `nvcc` to build `tests/cuda` with: `$GPUPOOL_NVCC`, else
/// `target/venv/lib/python3.*/site-packages/nvidia/cu13/bin/nvcc`. A missing nvcc is a failure
/// (with how to get one), never a skip.
pub fn nvcc() -> PathBuf {
    if let Some(p) = std::env::var_os(NVCC_ENV).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        assert!(p.exists(), "{NVCC_ENV}={} does not exist", p.display());
        return p;
    }
    let venv_lib = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").join("target/venv/lib");
    let found = std::fs::read_dir(&venv_lib).ok().and_then(|dir| {
        let mut pythons: Vec<PathBuf> = dir
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("python3")))
            .collect();
        pythons.sort();
        pythons.into_iter().rev().map(|p| p.join("site-packages/nvidia/cu13/bin/nvcc")).find(|p| p.exists())
    });
    found.unwrap_or_else(|| {
        panic!(
            "nvcc not found under {}/python3.*/site-packages/nvidia/cu13/bin: run scripts/setup-venv (it installs \
             nvidia-cuda-nvcc, -crt, -runtime and nvidia-nvvm 13.0 from tests/python/requirements.txt), or set \
             {NVCC_ENV}",
            venv_lib.display()
        )
    })
}

/// The `// nvcc-flags: ...` lines of a CUDA source (whitespace-separated flags, all lines joined).
pub fn nvcc_flags_of(source: &str) -> Vec<String> {
    source
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("// nvcc-flags:"))
        .flat_map(|rest| rest.split_whitespace().map(str::to_string))
        .collect()
}

/// The directory of the toolkit's libraries next to `nvcc` (`../lib`, or `../lib64` in a
/// classic toolkit layout): where `libcudart.so.*` and `libcudadevrt.a` are.
fn cuda_libdir(nvcc: &Path) -> PathBuf {
    let top = nvcc.parent().and_then(Path::parent).unwrap_or(Path::new("/"));
    let dirs = [top.join("lib"), top.join("lib64")];
    dirs.iter().find(|d| d.join("libcudadevrt.a").exists()).cloned().unwrap_or_else(|| {
        panic!("no libcudadevrt.a in {} or {} (next to {})", dirs[0].display(), dirs[1].display(), nvcc.display())
    })
}

/// A directory holding only `libcudart.so`, a link to the toolkit's `libcudart.so.N` (the wheels
/// ship no unversioned name, which `-cudart shared` links against). Programs built here record
/// `libcudart.so.N` as NEEDED and no run path: at run time the runtime is whoever provides that
/// soname (under `gpupool run`, libgpupool.so), never the wheel's.
fn cudart_link_dir(libdir: &Path, out_dir: &Path) -> PathBuf {
    let mut real: Vec<PathBuf> = std::fs::read_dir(libdir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", libdir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.strip_prefix("libcudart.so.").is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()))
            })
        })
        .collect();
    real.sort();
    let Some(target) = real.pop() else { panic!("no libcudart.so.N in {}", libdir.display()) };
    let dir = out_dir.join("cudart-link");
    std::fs::create_dir_all(&dir).expect("creating the libcudart link directory");
    let link = dir.join("libcudart.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&target, &link)
        .unwrap_or_else(|e| panic!("linking {} -> {}: {e}", link.display(), target.display()));
    dir
}

/// Compiles `tests/cuda/<name>.cu` with NVIDIA's nvcc ([`nvcc`]) into `out_dir/<name>` and
/// returns the executable: `-cudart shared` (the runtime is a shared library the pool can
/// stand in for), PTX only for compute_90 embedded (the simulator JITs PTX), host code with
/// `-O2 -Xcompiler -Wall`, then the file's `// nvcc-flags:` line(s), then `extra_flags`.
/// Built once per (name, out_dir, flags) in a process; a failed build panics with nvcc's output.
pub fn compile_cu(name: &str, out_dir: &Path, extra_flags: &[&str]) -> PathBuf {
    compile_cu_with(name, out_dir, extra_flags, true)
}

/// As [`compile_cu`], with nvcc's default runtime: NVIDIA's `libcudart_static.a` linked into
/// the program (no `-cudart shared`), so the program runs NVIDIA's own runtime whatever
/// provides `libcudart.so`, and that runtime asks the driver for its private export tables.
pub fn compile_cu_static(name: &str, out_dir: &Path) -> PathBuf {
    compile_cu_with(name, out_dir, &[], false)
}

fn compile_cu_with(name: &str, out_dir: &Path, extra_flags: &[&str], shared_runtime: bool) -> PathBuf {
    type Key = (String, PathBuf, Vec<String>, bool);
    static BUILT: Mutex<Vec<(Key, PathBuf)>> = Mutex::new(Vec::new());
    let key: Key = (
        name.to_string(),
        out_dir.to_path_buf(),
        extra_flags.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        shared_runtime,
    );
    // Held while compiling: one nvcc at a time, and never the same program twice.
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, exe)) = built.iter().find(|(k, _)| *k == key) {
        return exe.clone();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root");
    let source = root.join("tests/cuda").join(format!("{name}.cu"));
    let text = std::fs::read_to_string(&source).unwrap_or_else(|e| panic!("reading {}: {e}", source.display()));
    std::fs::create_dir_all(out_dir).expect("creating the output directory");
    let nvcc = nvcc();
    let libdir = cuda_libdir(&nvcc);
    let link_dir = cudart_link_dir(&libdir, out_dir);
    let exe = out_dir.join(name);
    // nvcc runs its own tools (cicc, ptxas, fatbinary, the host compiler) by PATH too.
    let bin = nvcc.parent().unwrap().to_path_buf();
    let path = std::env::join_paths(
        std::iter::once(bin)
            .chain(std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default()),
    )
    .unwrap();
    let file_flags = nvcc_flags_of(&text);
    let mut cmd = Command::new(&nvcc);
    if shared_runtime {
        cmd.args(["-cudart", "shared"]);
    }
    cmd.env("PATH", path)
        .args(["-gencode", "arch=compute_90,code=compute_90", "-O2", "-Xcompiler", "-Wall"])
        .arg("-L")
        .arg(&link_dir)
        .arg("-L")
        .arg(&libdir)
        .args(&file_flags)
        .args(extra_flags)
        .arg(&source)
        .arg("-o")
        .arg(&exe);
    run_compiler(&mut cmd, &format!("nvcc ({})", nvcc.display()), &source);
    built.push((key, exe.clone()));
    exe
}

/// `target/venv/lib/python3.*/site-packages/nvidia/<rel>`, the newest Python's that exists.
fn venv_nvidia(rel: &str) -> Option<PathBuf> {
    let venv_lib = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?.join("target/venv/lib");
    let mut pythons: Vec<PathBuf> = std::fs::read_dir(&venv_lib)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("python3")))
        .collect();
    pythons.sort();
    pythons.into_iter().rev().map(|p| p.join("site-packages/nvidia").join(rel)).find(|p| p.exists())
}

/// NVIDIA's `libcudart.so.12` from the venv (`nvidia-cuda-runtime-cu12`,
/// `nvidia/cuda_runtime/lib`). A missing one is a failure (with how to get it), never a skip.
pub fn cudart12() -> PathBuf {
    venv_nvidia("cuda_runtime/lib/libcudart.so.12").unwrap_or_else(|| {
        panic!(
            "libcudart.so.12 not found under target/venv/lib/python3.*/site-packages/nvidia/cuda_runtime/lib: run \
             scripts/setup-venv (it installs nvidia-cuda-runtime-cu12 from tests/python/requirements.txt)"
        )
    })
}

/// NVIDIA's `libcudart.so.13` from the venv (`nvidia/cu13/lib`, next to nvcc 13).
pub fn cudart13() -> PathBuf {
    venv_nvidia("cu13/lib/libcudart.so.13").unwrap_or_else(|| {
        panic!(
            "libcudart.so.13 not found under target/venv/lib/python3.*/site-packages/nvidia/cu13/lib: run \
             scripts/setup-venv (it installs CUDA 13's runtime and nvcc from tests/python/requirements.txt)"
        )
    })
}

/// Compiles `tests/cuda12/<name>.cpp`, host-only C++ that uses CUDA 12's runtime API, into
/// `out_dir/<name>` and returns the executable: the system C++ compiler (`$CXX`, else `c++`;
/// no nvcc 12 is installed, and host code needs none), C++17, `-O2 -Wall -Wextra`, CUDA 12's
/// headers from the venv (`nvidia/cuda_runtime/include`, plus `nvidia/cuda_nvcc/include` for
/// `crt/host_defines.h`), `-lcudart` against a directory holding only `libcudart.so` ->
/// the venv's `libcudart.so.12`. The program records `libcudart.so.12` as NEEDED, binds its
/// runtime calls to `...@libcudart.so.12` (e.g. `cudaGetDeviceProperties_v2`, which CUDA 12's
/// header calls `cudaGetDeviceProperties`) and has no run path: under `gpupool run` the
/// runtime is libgpupool.so. Built once per (name, out_dir) in a process; a failed build
/// panics with the compiler's output.
pub fn compile_cuda12_host(name: &str, out_dir: &Path) -> PathBuf {
    static BUILT: Mutex<Vec<((String, PathBuf), PathBuf)>> = Mutex::new(Vec::new());
    let key = (name.to_string(), out_dir.to_path_buf());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, exe)) = built.iter().find(|(k, _)| *k == key) {
        return exe.clone();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root");
    let source = root.join("tests/cuda12").join(format!("{name}.cpp"));
    let cudart = cudart12();
    let runtime_include = cudart.parent().and_then(Path::parent).unwrap().join("include");
    let nvcc_include = venv_nvidia("cuda_nvcc/include").unwrap_or_else(|| {
        panic!(
            "nvidia/cuda_nvcc/include (crt/host_defines.h) not found in target/venv: run scripts/setup-venv (it \
             installs nvidia-cuda-nvcc-cu12)"
        )
    });
    std::fs::create_dir_all(out_dir).expect("creating the output directory");
    let link_dir = cudart_link_dir(cudart.parent().unwrap(), &out_dir.join("cuda12"));
    let exe = out_dir.join(name);
    let cxx = std::env::var("CXX").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "c++".into());
    let mut cmd = Command::new(&cxx);
    cmd.args(["-std=c++17", "-O2", "-g", "-Wall", "-Wextra"])
        .arg("-I")
        .arg(&runtime_include)
        .arg("-I")
        .arg(&nvcc_include)
        .arg(&source)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&link_dir)
        .arg("-lcudart");
    run_compiler(&mut cmd, &format!("the C++ compiler `{cxx}`"), &source);
    built.push((key, exe.clone()));
    exe
}

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

/// target/<profile>, from the running test executable's path (target/<profile>/deps/...).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").to_path_buf()
}

/// `target/<profile>/<name>`, built from `package` first when it is missing (a test run of
/// one package alone).
pub fn built(name: &str, package: &str) -> PathBuf {
    let path = profile_dir().join(name);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo).current_dir(workspace_root()).args(["build", "-p", package]).status().unwrap();
        assert!(st.success(), "building {package}");
    }
    assert!(path.exists(), "{} missing", path.display());
    path
}

/// The venv's Python with cuda-python and nvidia-ml-py. Missing is a failure, not a skip:
/// `scripts/test` creates it before the Rust tests run.
pub fn venv_python() -> PathBuf {
    let p = workspace_root().join("target/venv/bin/python");
    assert!(p.exists(), "{} is missing: run scripts/test (or scripts/setup-venv) first", p.display());
    p
}

/// A finished process's status, stdout and stderr, for assertion messages.
pub fn output_text(out: &std::process::Output) -> String {
    format!("{}\n{}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}
