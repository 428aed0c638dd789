//! The AscendCL runtime as the daemon calls it (`libascendcl.so`, CANN's or the simulated
//! NPU's): each entry point resolved once by name, typed with the signatures bindgen generated
//! from our CANN declarations (shim-headers/include/gpupool_acl.h, cross-checked against
//! cann-sys by `cargo xtask cann-check`). Loaded beside the CUDA driver when present; a host
//! without it serves GPUs alone.

use gpupool_shim::acl::{self as acl, aclError, aclrtContext, aclrtMemAttr, aclrtMemcpyKind, aclrtStream};
use gpupool_shim::aclnn;
use libloading::Library;
use std::os::raw::{c_char, c_int, c_void};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum AclError {
    #[error("cannot load {path}: {source}")]
    Load { path: String, source: libloading::Error },
    #[error("{call} failed: aclError {code}")]
    Call { call: &'static str, code: u32 },
}

macro_rules! acl_table {
    ($($name:ident: fn($($arg:ty),*);)*) => {
        /// A loaded AscendCL runtime. Keeps the library mapped while any pointer is held.
        #[allow(non_snake_case)]
        pub struct Acl {
            $(pub $name: unsafe extern "C" fn($($arg),*) -> aclError,)*
            pub aclrtGetSocName: unsafe extern "C" fn() -> *const c_char,
            _lib: Library,
        }

        impl Acl {
            pub fn load(path: &Path) -> Result<Acl, AclError> {
                let err = |source| AclError::Load { path: path.display().to_string(), source };
                // SAFETY: loading the vendor runtime runs its initialisers; that is the
                // documented way to use it.
                let lib = unsafe { Library::new(path) }.map_err(err)?;
                // SAFETY: each symbol is typed with the signature our header declares for that
                // exported name (the const checks below tie both to bindgen's declarations).
                unsafe {
                    Ok(Acl {
                        $($name: *lib.get(concat!(stringify!($name), "\0").as_bytes()).map_err(err)?,)*
                        aclrtGetSocName: *lib.get(b"aclrtGetSocName\0").map_err(err)?,
                        _lib: lib,
                    })
                }
            }
        }
        $(const _: unsafe extern "C" fn($($arg),*) -> aclError = acl::$name;)*
    };
}

acl_table! {
    aclInit: fn(*const c_char);
    aclrtGetDeviceCount: fn(*mut u32);
    aclrtSetDevice: fn(i32);
    aclrtCreateContext: fn(*mut aclrtContext, i32);
    aclrtDestroyContext: fn(aclrtContext);
    aclrtSetCurrentContext: fn(aclrtContext);
    aclrtSynchronizeDevice: fn();
    aclrtMalloc: fn(*mut *mut c_void, usize, acl::aclrtMemMallocPolicy);
    aclrtMallocAlign32: fn(*mut *mut c_void, usize, acl::aclrtMemMallocPolicy);
    aclrtStreamQuery: fn(aclrtStream, *mut acl::aclrtStreamStatus);
    aclrtFree: fn(*mut c_void);
    aclrtGetMemInfo: fn(aclrtMemAttr, *mut usize, *mut usize);
    aclrtMemcpy: fn(*mut c_void, usize, *const c_void, usize, aclrtMemcpyKind);
    aclrtMemset: fn(*mut c_void, usize, i32, usize);
    aclrtMemcpyAsync: fn(*mut c_void, usize, *const c_void, usize, aclrtMemcpyKind, aclrtStream);
    aclrtMemsetAsync: fn(*mut c_void, usize, i32, usize, aclrtStream);
    aclrtCreateStream: fn(*mut aclrtStream);
    aclrtDestroyStream: fn(aclrtStream);
    aclrtSynchronizeStream: fn(aclrtStream);
    aclrtCreateEventWithFlag: fn(*mut acl::aclrtEvent, u32);
    aclrtDestroyEvent: fn(acl::aclrtEvent);
    aclrtRecordEvent: fn(acl::aclrtEvent, aclrtStream);
    aclrtSynchronizeEvent: fn(acl::aclrtEvent);
    aclrtQueryEventStatus: fn(acl::aclrtEvent, *mut acl::aclrtEventRecordedStatus);
    aclrtEventElapsedTime: fn(*mut f32, acl::aclrtEvent, acl::aclrtEvent);
    aclrtStreamWaitEvent: fn(aclrtStream, acl::aclrtEvent);
}

impl Acl {
    /// Turns a status into a `Result`, naming the call.
    pub fn check(&self, call: &'static str, res: aclError) -> Result<(), AclError> {
        if res == acl::ACL_SUCCESS as c_int { Ok(()) } else { Err(AclError::Call { call, code: res as u32 }) }
    }

    /// The SoC name of the calling thread's current device (`aclrtGetSocName`).
    pub fn soc_name(&self) -> Option<String> {
        // SAFETY: aclrtGetSocName takes nothing and returns a static NUL-terminated string or NULL.
        let p = unsafe { (self.aclrtGetSocName)() };
        // SAFETY: non-null: a NUL-terminated string the runtime owns for its lifetime.
        (!p.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
}

/// Calls an AscendCL entry point and converts its status: `acl_call!(acl, aclrtSetDevice(0))?`.
#[macro_export]
macro_rules! acl_call {
    ($acl:expr, $name:ident($($arg:expr),* $(,)?)) => {{
        let acl = &$acl;
        // SAFETY: the arguments follow the entry point's documented contract; every pointer
        // passed is to a live local or buffer of the right size, or device memory the session
        // owns (checked by dispatch before the call).
        #[allow(clippy::macro_metavars_in_unsafe)]
        let res = unsafe { (acl.$name)($($arg),*) };
        acl.check(stringify!($name), res)
    }};
}

/// The operators' library (`libopapi.so`, beside `libascendcl.so`): the tensor descriptions of
/// `acl_meta.h` and the two-phase operators the pool forwards.
#[allow(non_snake_case)]
pub struct Opapi {
    pub aclCreateTensor: unsafe extern "C" fn(
        *const i64,
        u64,
        aclnn::aclDataType,
        *const i64,
        i64,
        aclnn::aclFormat,
        *const i64,
        u64,
        *mut c_void,
    ) -> *mut aclnn::aclTensor,
    pub aclDestroyTensor: unsafe extern "C" fn(*const aclnn::aclTensor) -> aclnn::aclnnStatus,
    pub aclCreateScalar: unsafe extern "C" fn(*mut c_void, aclnn::aclDataType) -> *mut aclnn::aclScalar,
    pub aclDestroyScalar: unsafe extern "C" fn(*const aclnn::aclScalar) -> aclnn::aclnnStatus,
    pub aclnnAddGetWorkspaceSize: unsafe extern "C" fn(
        *const aclnn::aclTensor,
        *const aclnn::aclTensor,
        *const aclnn::aclScalar,
        *mut aclnn::aclTensor,
        *mut u64,
        *mut *mut aclnn::aclOpExecutor,
    ) -> aclnn::aclnnStatus,
    pub aclnnMulGetWorkspaceSize: unsafe extern "C" fn(
        *const aclnn::aclTensor,
        *const aclnn::aclTensor,
        *mut aclnn::aclTensor,
        *mut u64,
        *mut *mut aclnn::aclOpExecutor,
    ) -> aclnn::aclnnStatus,
    pub aclnnMatmulGetWorkspaceSize: unsafe extern "C" fn(
        *const aclnn::aclTensor,
        *const aclnn::aclTensor,
        *mut aclnn::aclTensor,
        i8,
        *mut u64,
        *mut *mut aclnn::aclOpExecutor,
    ) -> aclnn::aclnnStatus,
    pub aclnnSoftmaxGetWorkspaceSize: unsafe extern "C" fn(
        *const aclnn::aclTensor,
        i64,
        *mut aclnn::aclTensor,
        *mut u64,
        *mut *mut aclnn::aclOpExecutor,
    ) -> aclnn::aclnnStatus,
    pub aclCreateIntArray: unsafe extern "C" fn(*const i64, u64) -> *mut aclnn::aclIntArray,
    pub aclDestroyIntArray: unsafe extern "C" fn(*const aclnn::aclIntArray) -> aclnn::aclnnStatus,
    pub aclnnReduceSumGetWorkspaceSize: ReduceSumPrepareFn,
    pub aclnnReduceSum: RunFn,
    pub aclnnSoftmax: RunFn,
    pub aclnnAdd: RunFn,
    pub aclnnMul: RunFn,
    pub aclnnMatmul: RunFn,
    _lib: Library,
}

/// Phase two of every operator: workspace, its size, the executor, the stream.
pub type RunFn = unsafe extern "C" fn(*mut c_void, u64, *mut aclnn::aclOpExecutor, aclrtStream) -> aclnn::aclnnStatus;

const _: RunFn = aclnn::aclnnAdd;
const _: RunFn = aclnn::aclnnMul;
const _: RunFn = aclnn::aclnnMatmul;
const _: RunFn = aclnn::aclnnSoftmax;
const _: RunFn = aclnn::aclnnReduceSum;

/// `aclnnReduceSumGetWorkspaceSize`: self, the dimensions, keepDim, dtype, out, and the two outs.
pub type ReduceSumPrepareFn = unsafe extern "C" fn(
    *const aclnn::aclTensor,
    *const aclnn::aclIntArray,
    bool,
    aclnn::aclDataType,
    *mut aclnn::aclTensor,
    *mut u64,
    *mut *mut aclnn::aclOpExecutor,
) -> aclnn::aclnnStatus;
const _: ReduceSumPrepareFn = aclnn::aclnnReduceSumGetWorkspaceSize;
const _: unsafe extern "C" fn(*const i64, u64) -> *mut aclnn::aclIntArray = aclnn::aclCreateIntArray;
const _: unsafe extern "C" fn(*const aclnn::aclIntArray) -> aclnn::aclnnStatus = aclnn::aclDestroyIntArray;
const _: unsafe extern "C" fn(
    *const aclnn::aclTensor,
    i64,
    *mut aclnn::aclTensor,
    *mut u64,
    *mut *mut aclnn::aclOpExecutor,
) -> aclnn::aclnnStatus = aclnn::aclnnSoftmaxGetWorkspaceSize;

impl Opapi {
    pub fn load(path: &Path) -> Result<Opapi, AclError> {
        let err = |source| AclError::Load { path: path.display().to_string(), source };
        // SAFETY: loading the vendor library runs its initialisers, as CANN documents its use.
        let lib = unsafe { Library::new(path) }.map_err(err)?;
        // SAFETY: each symbol is typed as bindgen declares that name (the consts below check the
        // field types against gpupool_shim::aclnn's declarations).
        unsafe {
            let o = Opapi {
                aclCreateTensor: *lib.get(b"aclCreateTensor\0").map_err(err)?,
                aclDestroyTensor: *lib.get(b"aclDestroyTensor\0").map_err(err)?,
                aclCreateScalar: *lib.get(b"aclCreateScalar\0").map_err(err)?,
                aclDestroyScalar: *lib.get(b"aclDestroyScalar\0").map_err(err)?,
                aclnnAddGetWorkspaceSize: *lib.get(b"aclnnAddGetWorkspaceSize\0").map_err(err)?,
                aclnnMulGetWorkspaceSize: *lib.get(b"aclnnMulGetWorkspaceSize\0").map_err(err)?,
                aclnnMatmulGetWorkspaceSize: *lib.get(b"aclnnMatmulGetWorkspaceSize\0").map_err(err)?,
                aclnnSoftmaxGetWorkspaceSize: *lib.get(b"aclnnSoftmaxGetWorkspaceSize\0").map_err(err)?,
                aclCreateIntArray: *lib.get(b"aclCreateIntArray\0").map_err(err)?,
                aclDestroyIntArray: *lib.get(b"aclDestroyIntArray\0").map_err(err)?,
                aclnnReduceSumGetWorkspaceSize: *lib.get(b"aclnnReduceSumGetWorkspaceSize\0").map_err(err)?,
                aclnnReduceSum: *lib.get(b"aclnnReduceSum\0").map_err(err)?,
                aclnnSoftmax: *lib.get(b"aclnnSoftmax\0").map_err(err)?,
                aclnnAdd: *lib.get(b"aclnnAdd\0").map_err(err)?,
                aclnnMul: *lib.get(b"aclnnMul\0").map_err(err)?,
                aclnnMatmul: *lib.get(b"aclnnMatmul\0").map_err(err)?,
                _lib: lib,
            };
            Ok(o)
        }
    }
}

// The hand-written field types above, checked against bindgen's declarations of the same names.
const _: unsafe extern "C" fn(
    *const i64,
    u64,
    aclnn::aclDataType,
    *const i64,
    i64,
    aclnn::aclFormat,
    *const i64,
    u64,
    *mut c_void,
) -> *mut aclnn::aclTensor = aclnn::aclCreateTensor;
const _: unsafe extern "C" fn(*const aclnn::aclTensor) -> aclnn::aclnnStatus = aclnn::aclDestroyTensor;
const _: unsafe extern "C" fn(*mut c_void, aclnn::aclDataType) -> *mut aclnn::aclScalar = aclnn::aclCreateScalar;
const _: unsafe extern "C" fn(*const aclnn::aclScalar) -> aclnn::aclnnStatus = aclnn::aclDestroyScalar;
const _: unsafe extern "C" fn(
    *const aclnn::aclTensor,
    *const aclnn::aclTensor,
    *const aclnn::aclScalar,
    *mut aclnn::aclTensor,
    *mut u64,
    *mut *mut aclnn::aclOpExecutor,
) -> aclnn::aclnnStatus = aclnn::aclnnAddGetWorkspaceSize;
const _: unsafe extern "C" fn(
    *const aclnn::aclTensor,
    *const aclnn::aclTensor,
    *mut aclnn::aclTensor,
    *mut u64,
    *mut *mut aclnn::aclOpExecutor,
) -> aclnn::aclnnStatus = aclnn::aclnnMulGetWorkspaceSize;
const _: unsafe extern "C" fn(
    *const aclnn::aclTensor,
    *const aclnn::aclTensor,
    *mut aclnn::aclTensor,
    i8,
    *mut u64,
    *mut *mut aclnn::aclOpExecutor,
) -> aclnn::aclnnStatus = aclnn::aclnnMatmulGetWorkspaceSize;
