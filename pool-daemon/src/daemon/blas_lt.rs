//! The backend's cuBLASLt objects for one remoted matmul or heuristic query: the client keeps
//! its descriptors, layouts and preferences (a handful of scalars each) and sends their values
//! with the call ([`gpupool_protocol::ops::Matmul`]); they are built here, used, and destroyed
//! when the call returns (cuBLASLt reads them during the call only). The algorithm is always
//! the backend's own heuristic choice: a client's `cublasLtMatmulAlgo_t` is opaque bytes the
//! vendor library would interpret, and is never passed on. With the default preferences that
//! is `algo` NULL (the library's implicit heuristic); a matmul whose algorithm came from a
//! preference restricting the split-K reductions (PyTorch's, unless reduced-precision
//! reductions are allowed) gets the first algorithm of a heuristic query under that
//! restriction.

use super::dispatch::{Fail, Result};
use crate::backend::CublasLt;
use gpupool_protocol::ops::{BlasScalar, LtLayout, Matmul};
use gpupool_shim::cublas::{
    cublasComputeType_t, cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t as DA, cublasLtMatmulHeuristicResult_t,
    cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t as PA, cublasLtMatrixLayout_t,
    cublasLtMatrixLayoutAttribute_t as LA, cublasStatus_t, cudaDataType, cudaStream_t,
};
use std::os::raw::c_void;

/// `CUBLASLT_REDUCTION_SCHEME_MASK`: every reduction scheme, the preference's default.
const ALL_REDUCTIONS: u32 = 7;

/// Epilogues that add a bias (BIAS, RELU_BIAS, GELU_BIAS).
pub fn has_bias(epilogue: u32) -> bool {
    matches!(epilogue, 4 | 6 | 36)
}

fn check(call: &str, s: cublasStatus_t) -> Result<()> {
    if s == cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Fail::new(s.0, format!("{call} failed ({})", s.0)))
    }
}

/// Sets one attribute from a plain value.
fn attr<T>(set: impl FnOnce(*const c_void, usize) -> cublasStatus_t, what: &str, v: T) -> Result<()> {
    check(what, set((&v as *const T).cast(), std::mem::size_of::<T>()))
}

/// A descriptor, four layouts and a preference of the backend, destroyed on drop.
pub struct Objects<'l> {
    lib: &'l CublasLt,
    desc: cublasLtMatmulDesc_t,
    layouts: Vec<cublasLtMatrixLayout_t>,
    pref: cublasLtMatmulPreference_t,
    /// Not every reduction scheme is allowed: a matmul asks the heuristic for its algorithm.
    restricted: bool,
}

impl<'l> Objects<'l> {
    pub fn new(lib: &'l CublasLt, mm: &Matmul) -> Result<Objects<'l>> {
        if mm.reduction_mask & !ALL_REDUCTIONS != 0 {
            return Err(Fail::new(
                cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE.0,
                format!("reduction scheme mask {:#x} names no cublasLtReductionScheme_t", mm.reduction_mask),
            ));
        }
        let restricted = mm.reduction_mask != ALL_REDUCTIONS;
        let mut o =
            Objects { lib, desc: std::ptr::null_mut(), layouts: Vec::new(), pref: std::ptr::null_mut(), restricted };
        let d = &mm.desc;
        // SAFETY (every call below): the backend's own create/set entry points with a live
        // out-pointer or an object created just before, and values of the attribute's size.
        check("cublasLtMatmulDescCreate", unsafe {
            (lib.cublasLtMatmulDescCreate)(&mut o.desc, cublasComputeType_t(d.compute), cudaDataType(d.scale))
        })?;
        let desc = o.desc;
        let set =
            |a: DA| move |p: *const c_void, n: usize| unsafe { (lib.cublasLtMatmulDescSetAttribute)(desc, a, p, n) };
        attr(set(DA::CUBLASLT_MATMUL_DESC_TRANSA), "TRANSA", d.transa as i32)?;
        attr(set(DA::CUBLASLT_MATMUL_DESC_TRANSB), "TRANSB", d.transb as i32)?;
        attr(set(DA::CUBLASLT_MATMUL_DESC_EPILOGUE), "EPILOGUE", d.epilogue)?;
        let device_mode = matches!(mm.alpha, BlasScalar::Device(_));
        attr(set(DA::CUBLASLT_MATMUL_DESC_POINTER_MODE), "POINTER_MODE", device_mode as i32)?;
        if d.bias.0 != 0 {
            attr(set(DA::CUBLASLT_MATMUL_DESC_BIAS_POINTER), "BIAS_POINTER", d.bias.0 as *const c_void)?;
        }
        if d.bias_dtype != u32::MAX {
            attr(set(DA::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), "BIAS_DATA_TYPE", d.bias_dtype as i32)?;
        }
        for l in [&mm.a_layout, &mm.b_layout, &mm.c_layout, &mm.d_layout] {
            let layout = o.layout(l)?;
            o.layouts.push(layout);
        }
        check("cublasLtMatmulPreferenceCreate", unsafe { (lib.cublasLtMatmulPreferenceCreate)(&mut o.pref) })?;
        if restricted {
            let pref = o.pref;
            attr(
                |p, n| unsafe {
                    (lib.cublasLtMatmulPreferenceSetAttribute)(
                        pref,
                        PA::CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                        p,
                        n,
                    )
                },
                "REDUCTION_SCHEME_MASK",
                mm.reduction_mask,
            )?;
        }
        Ok(o)
    }

    fn layout(&self, l: &LtLayout) -> Result<cublasLtMatrixLayout_t> {
        let lib = self.lib;
        let mut m: cublasLtMatrixLayout_t = std::ptr::null_mut();
        // SAFETY: as in `new`.
        check("cublasLtMatrixLayoutCreate", unsafe {
            (lib.cublasLtMatrixLayoutCreate)(&mut m, cudaDataType(l.dtype), l.rows, l.cols, l.ld)
        })?;
        let set =
            |a: LA| move |p: *const c_void, n: usize| unsafe { (lib.cublasLtMatrixLayoutSetAttribute)(m, a, p, n) };
        let r = attr(set(LA::CUBLASLT_MATRIX_LAYOUT_ORDER), "ORDER", l.order as i32)
            .and_then(|()| attr(set(LA::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT), "BATCH_COUNT", l.batch))
            .and_then(|()| {
                attr(set(LA::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET), "STRIDED_BATCH_OFFSET", l.stride)
            });
        if let Err(e) = r {
            // SAFETY: created above, not yet handed anywhere.
            unsafe { (lib.cublasLtMatrixLayoutDestroy)(m) };
            return Err(e);
        }
        Ok(m)
    }

    /// How many algorithms the backend's heuristic finds (at most `requested`) and the
    /// workspace the first needs.
    pub fn heuristic(
        &self,
        handle: gpupool_shim::cublas::cublasLtHandle_t,
        max_workspace: u64,
        requested: i32,
    ) -> Result<(u32, u64)> {
        let found = self.search(handle, max_workspace, requested)?;
        Ok((found.len() as u32, found.first().map_or(0, |r| r.workspaceSize as u64)))
    }

    /// The backend heuristic's results (at most `requested`, 1..=16) within `max_workspace`.
    fn search(
        &self,
        handle: gpupool_shim::cublas::cublasLtHandle_t,
        max_workspace: u64,
        requested: i32,
    ) -> Result<Vec<cublasLtMatmulHeuristicResult_t>> {
        let lib = self.lib;
        let pref = self.pref;
        attr(
            |p, n| unsafe {
                (lib.cublasLtMatmulPreferenceSetAttribute)(pref, PA::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, p, n)
            },
            "MAX_WORKSPACE_BYTES",
            max_workspace,
        )?;
        let want = requested.clamp(1, 16);
        // SAFETY: all-zero bytes are a valid heuristic result (integers, floats and a byte array).
        let mut results: Vec<cublasLtMatmulHeuristicResult_t> = vec![unsafe { std::mem::zeroed() }; want as usize];
        let mut found = 0;
        let l = &self.layouts;
        // SAFETY: objects created by this library; `results` holds `want` entries.
        check("cublasLtMatmulAlgoGetHeuristic", unsafe {
            (lib.cublasLtMatmulAlgoGetHeuristic)(
                handle,
                self.desc,
                l[0],
                l[1],
                l[2],
                l[3],
                pref,
                want,
                results.as_mut_ptr(),
                &mut found,
            )
        })?;
        results.truncate(found.clamp(0, want) as usize);
        Ok(results)
    }

    /// `cublasLtMatmul` with the checked pointers of `mm`, on `stream`.
    pub fn matmul(
        &self,
        handle: gpupool_shim::cublas::cublasLtHandle_t,
        mm: &Matmul,
        alpha: *const c_void,
        beta: *const c_void,
        stream: cudaStream_t,
    ) -> Result<()> {
        let chosen = if self.restricted {
            let found = self.search(handle, mm.workspace_bytes, 1)?;
            match found.first() {
                Some(r) => Some(r.algo),
                None => {
                    return Err(Fail::new(
                        cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED.0,
                        "the backend has no algorithm for this matmul with its reduction schemes and workspace",
                    ));
                }
            }
        } else {
            None
        };
        let algo = chosen.as_ref().map_or(std::ptr::null(), |a| a as *const _);
        let l = &self.layouts;
        let p = |d: gpupool_protocol::DevicePtr| d.0 as *const c_void;
        // SAFETY: every device pointer was checked against the session's memory for its
        // layout's extent; the scalars are live locals or checked device pointers.
        check("cublasLtMatmul", unsafe {
            (self.lib.cublasLtMatmul)(
                handle,
                self.desc,
                alpha,
                p(mm.a),
                l[0],
                p(mm.b),
                l[1],
                beta,
                p(mm.c),
                l[2],
                mm.d.0 as *mut c_void,
                l[3],
                algo,
                mm.workspace.0 as *mut c_void,
                mm.workspace_bytes as usize,
                stream,
            )
        })
    }
}

impl Drop for Objects<'_> {
    fn drop(&mut self) {
        // SAFETY: each object was created by this library and is destroyed once.
        unsafe {
            for &l in &self.layouts {
                (self.lib.cublasLtMatrixLayoutDestroy)(l);
            }
            if !self.pref.is_null() {
                (self.lib.cublasLtMatmulPreferenceDestroy)(self.pref);
            }
            if !self.desc.is_null() {
                (self.lib.cublasLtMatmulDescDestroy)(self.desc);
            }
        }
    }
}
