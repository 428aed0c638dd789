//! cuBLAS and cuBLASLt as the daemon calls them: `libcublas.so.13` and `libcublasLt.so.13`
//! from the driver's directory (NVIDIA's on a GPU host, the simulator's `sim-blas` beside
//! the simulated driver), each entry point resolved once by name and typed with the
//! signatures of our checked header (`gpupool_cublas.h`, bindgen's `gpupool_shim::cublas`).
//!
//! Loaded on the first BLAS request, not at start: a host without the library still serves
//! everything else, and its BLAS calls fail with `CUBLAS_STATUS_NOT_INITIALIZED`.

use super::DriverSource;
use gpupool_shim::cublas::{
    cublasComputeType_t as Compute, cublasGemmAlgo_t as Algo, cublasHandle_t as H, cublasLtHandle_t as LtH,
    cublasLtMatmulAlgo_t, cublasLtMatmulDesc_t as Desc, cublasLtMatmulHeuristicResult_t,
    cublasLtMatmulPreference_t as Pref, cublasLtMatrixLayout_t as Layout, cublasMath_t, cublasOperation_t as Op,
    cublasPointerMode_t, cublasStatus_t, cudaDataType as Dt, cudaStream_t,
};
use libloading::Library;
use std::os::raw::{c_int, c_longlong, c_void};
use std::path::PathBuf;
use std::sync::OnceLock;

type V = *const c_void;

macro_rules! blas_table {
    ($Struct:ident from $soname:literal { $($name:ident: fn($($arg:ty),* $(,)?);)* }) => {
        /// The loaded library's entry points; keeps it mapped while any is held.
        #[allow(non_snake_case)]
        pub struct $Struct {
            $(pub $name: unsafe extern "C" fn($($arg),*) -> cublasStatus_t,)*
            _lib: Library,
        }

        impl $Struct {
            pub const SONAME: &'static str = $soname;

            fn load(path: &std::path::Path) -> Result<$Struct, String> {
                let err = |e: libloading::Error| format!("cannot load {}: {e}", path.display());
                // SAFETY: loading the vendor library runs its initialisers; that is the
                // documented way to use it.
                let lib = unsafe { Library::new(path) }.map_err(err)?;
                // SAFETY: each symbol is typed with the signature our header declares for
                // that exported name, and that header is checked against NVIDIA's.
                unsafe {
                    Ok($Struct {
                        $($name: *lib.get(concat!(stringify!($name), "\0").as_bytes()).map_err(err)?,)*
                        _lib: lib,
                    })
                }
            }
        }
    };
}

blas_table! { Cublas from "libcublas.so.13" {
    cublasCreate_v2: fn(*mut H);
    cublasDestroy_v2: fn(H);
    cublasSetStream_v2: fn(H, cudaStream_t);
    cublasSetWorkspace_v2: fn(H, *mut c_void, usize);
    cublasSetPointerMode_v2: fn(H, cublasPointerMode_t);
    cublasSetMathMode: fn(H, cublasMath_t);
    cublasSgemm_v2: fn(H, Op, Op, c_int, c_int, c_int, *const f32, *const f32, c_int, *const f32, c_int,
        *const f32, *mut f32, c_int);
    cublasDgemm_v2: fn(H, Op, Op, c_int, c_int, c_int, *const f64, *const f64, c_int, *const f64, c_int,
        *const f64, *mut f64, c_int);
    // NVIDIA declares it for C++ only (__half): 2-byte values, as the header notes.
    cublasHgemm: fn(H, Op, Op, c_int, c_int, c_int, *const u16, *const u16, c_int, *const u16, c_int,
        *const u16, *mut u16, c_int);
    cublasGemmEx: fn(H, Op, Op, c_int, c_int, c_int, V, V, Dt, c_int, V, Dt, c_int, V, *mut c_void, Dt, c_int,
        Compute, Algo);
    cublasGemmBatchedEx: fn(H, Op, Op, c_int, c_int, c_int, V, *const V, Dt, c_int, *const V, Dt, c_int, V,
        *const *mut c_void, Dt, c_int, c_int, Compute, Algo);
    cublasGemmStridedBatchedEx: fn(H, Op, Op, c_int, c_int, c_int, V, V, Dt, c_int, c_longlong, V, Dt, c_int,
        c_longlong, V, *mut c_void, Dt, c_int, c_longlong, c_int, Compute, Algo);
    cublasSgemmStridedBatched: fn(H, Op, Op, c_int, c_int, c_int, *const f32, *const f32, c_int, c_longlong,
        *const f32, c_int, c_longlong, *const f32, *mut f32, c_int, c_longlong, c_int);
    cublasSgemv_v2: fn(H, Op, c_int, c_int, *const f32, *const f32, c_int, *const f32, c_int, *const f32,
        *mut f32, c_int);
    cublasDgemv_v2: fn(H, Op, c_int, c_int, *const f64, *const f64, c_int, *const f64, c_int, *const f64,
        *mut f64, c_int);
    cublasSdot_v2: fn(H, c_int, *const f32, c_int, *const f32, c_int, *mut f32);
    cublasSaxpy_v2: fn(H, c_int, *const f32, *const f32, c_int, *mut f32, c_int);
    cublasSscal_v2: fn(H, c_int, *const f32, *mut f32, c_int);
}}

blas_table! { CublasLt from "libcublasLt.so.13" {
    cublasLtCreate: fn(*mut LtH);
    cublasLtDestroy: fn(LtH);
    cublasLtMatmulDescCreate: fn(*mut Desc, Compute, Dt);
    cublasLtMatmulDescDestroy: fn(Desc);
    cublasLtMatmulDescSetAttribute: fn(Desc, gpupool_shim::cublas::cublasLtMatmulDescAttributes_t, V, usize);
    cublasLtMatrixLayoutCreate: fn(*mut Layout, Dt, u64, u64, i64);
    cublasLtMatrixLayoutDestroy: fn(Layout);
    cublasLtMatrixLayoutSetAttribute: fn(Layout, gpupool_shim::cublas::cublasLtMatrixLayoutAttribute_t, V, usize);
    cublasLtMatmulPreferenceCreate: fn(*mut Pref);
    cublasLtMatmulPreferenceDestroy: fn(Pref);
    cublasLtMatmulPreferenceSetAttribute: fn(Pref, gpupool_shim::cublas::cublasLtMatmulPreferenceAttributes_t, V,
        usize);
    cublasLtMatmulAlgoGetHeuristic: fn(LtH, Desc, Layout, Layout, Layout, Layout, Pref, c_int,
        *mut cublasLtMatmulHeuristicResult_t, *mut c_int);
    cublasLtMatmul: fn(LtH, Desc, V, V, Layout, V, Layout, V, V, Layout, *mut c_void, Layout,
        *const cublasLtMatmulAlgo_t, *mut c_void, usize, cudaStream_t);
}}

/// Both libraries, loaded once on first use from the driver's directory (or the loader's
/// search path when the driver came from there).
pub struct Blas {
    source: DriverSource,
    v2: OnceLock<Result<Cublas, String>>,
    lt: OnceLock<Result<CublasLt, String>>,
}

impl Blas {
    pub fn new(source: DriverSource) -> Blas {
        Blas { source, v2: OnceLock::new(), lt: OnceLock::new() }
    }

    fn path(&self, soname: &str) -> PathBuf {
        self.source.library(soname)
    }

    /// cuBLAS, or why it cannot be loaded.
    pub fn v2(&self) -> Result<&Cublas, &str> {
        self.v2.get_or_init(|| Cublas::load(&self.path(Cublas::SONAME))).as_ref().map_err(String::as_str)
    }

    /// cuBLASLt, or why it cannot be loaded.
    pub fn lt(&self) -> Result<&CublasLt, &str> {
        self.lt.get_or_init(|| CublasLt::load(&self.path(CublasLt::SONAME))).as_ref().map_err(String::as_str)
    }
}
