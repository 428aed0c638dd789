//! A validated GEMM call, shared by the cuBLAS and cuBLASLt entry points: its operands as
//! device ranges, its scalars (host values or device pointers), the checks made when the call
//! is made, and the job that computes it on the stream.

use crate::device::{Job, sim};
use crate::kernel::{self, Activation, Dtype, Epilogue, Mat, Stored};
use crate::status::{BlasResult, fail};
use gpupool_shim::cublas::cublasStatus_t as S;
use gpupool_shim::cuda::{CUresult, CUstream};

/// Where the matrices of a batch are.
#[derive(Clone, Copy, Debug)]
pub enum Place {
    /// Matrix `i` at `ptr + i * stride` elements.
    Strided { ptr: u64, stride: usize },
    /// A device array of `batch` device pointers.
    Array { ptr: u64 },
}

/// One GEMM operand: its element type, stored shape and where each batch's matrix is.
#[derive(Clone, Copy, Debug)]
pub struct Operand {
    pub dtype: Dtype,
    pub stored: Stored,
    pub place: Place,
}

/// alpha and beta: read when the call is made (host pointer mode) or by the job (device mode).
#[derive(Clone, Copy, Debug)]
pub enum Scalars {
    Host { alpha: f64, beta: f64 },
    Device { alpha: u64, beta: u64, dtype: Dtype },
}

impl Scalars {
    /// Reads host-mode scalars of `dtype` now; device-mode ones are checked now and read later.
    pub fn read(device_mode: bool, alpha: u64, beta: u64, dtype: Dtype, stream: CUstream) -> BlasResult<Scalars> {
        if alpha == 0 || beta == 0 {
            return fail(S::CUBLAS_STATUS_INVALID_VALUE, || "alpha or beta is NULL".into());
        }
        if device_mode {
            let sim = sim()?;
            sim.check(stream, alpha, dtype.size(), "alpha (device pointer mode)")?;
            sim.check(stream, beta, dtype.size(), "beta (device pointer mode)")?;
            return Ok(Scalars::Device { alpha, beta, dtype });
        }
        // SAFETY: host pointer mode: the caller passes pointers to one scalar of the scale type.
        let (alpha, beta) = unsafe { (dtype.load(alpha as *const u8, 0), dtype.load(beta as *const u8, 0)) };
        Ok(Scalars::Host { alpha, beta })
    }

    fn resolve(&self, job: &Job) -> Result<(f64, f64), CUresult> {
        match *self {
            Scalars::Host { alpha, beta } => Ok((alpha, beta)),
            Scalars::Device { alpha, beta, dtype } => {
                let (a, b) = (job.span(alpha, dtype.size())?, job.span(beta, dtype.size())?);
                // SAFETY: each span holds one scalar of `dtype`, alive for the job.
                Ok(unsafe { (dtype.load(a, 0), dtype.load(b, 0)) })
            }
        }
    }
}

/// `C[i] = epilogue(alpha * op(A[i]) op(B[i]) + beta * C[i])` for each of `batch` matrices.
/// With `d` set (cuBLASLt), the result goes to D and C is only read.
pub struct Gemm {
    pub transa: bool,
    pub transb: bool,
    /// C and D used transposed (gemv's y: a row with its increment as leading dimension).
    pub transc: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: Operand,
    pub b: Operand,
    pub c: Operand,
    pub d: Option<Operand>,
    pub batch: usize,
    pub scalars: Scalars,
    pub bias: Option<(u64, Dtype)>,
    pub act: Activation,
}

/// cuBLAS's rule for a leading dimension: at least the stored rows, and at least 1.
pub fn check_ld(ld: i64, rows: usize, what: &str) -> BlasResult<usize> {
    if ld < 1 || (ld as u64) < rows as u64 {
        return fail(S::CUBLAS_STATUS_INVALID_VALUE, || format!("{what} = {ld} is less than max(1, {rows})"));
    }
    Ok(ld as usize)
}

/// A dimension or count argument: non-negative.
pub fn dim(v: i64, what: &str) -> BlasResult<usize> {
    if v < 0 {
        return fail(S::CUBLAS_STATUS_INVALID_VALUE, || format!("{what} = {v} is negative"));
    }
    Ok(v as usize)
}

/// `CUBLAS_OP_N` is false, `T` and `C` (the same for real types) true.
pub fn op(v: u32, what: &str) -> BlasResult<bool> {
    match v {
        0 => Ok(false),
        1 | 2 => Ok(true),
        _ => fail(S::CUBLAS_STATUS_INVALID_VALUE, || format!("{what} = {v} is not CUBLAS_OP_N, _T or _C")),
    }
}

impl Operand {
    fn bytes_for(&self, batch: usize) -> usize {
        let one = self.stored.extent();
        match self.place {
            Place::Strided { stride, .. } if one > 0 && batch > 0 => ((batch - 1) * stride + one) * self.dtype.size(),
            Place::Strided { .. } => 0,
            Place::Array { .. } => batch * 8,
        }
    }

    fn check(&self, stream: CUstream, batch: usize, what: &str) -> BlasResult<()> {
        let bytes = self.bytes_for(batch);
        if bytes == 0 {
            return Ok(());
        }
        let ptr = match self.place {
            Place::Strided { ptr, .. } => ptr,
            Place::Array { ptr } => ptr,
        };
        let align = if matches!(self.place, Place::Array { .. }) { 8 } else { self.dtype.size() as u64 };
        if ptr % align != 0 {
            return fail(S::CUBLAS_STATUS_INVALID_VALUE, || format!("{what} at {ptr:#x} is not {align}-byte aligned"));
        }
        sim()?.check(stream, ptr, bytes, what)
    }

    /// Host addresses of each batch's matrix.
    fn resolve(&self, job: &Job, batch: usize) -> Result<Vec<*mut u8>, CUresult> {
        let size = self.dtype.size();
        match self.place {
            Place::Strided { ptr, stride } => {
                let bytes = self.bytes_for(batch);
                let base = if bytes == 0 { std::ptr::null_mut() } else { job.span(ptr, bytes)? };
                // SAFETY (wrapping_add): pointers into the span just resolved; not dereferenced when empty.
                Ok((0..batch).map(|i| base.wrapping_add(i * stride * size)).collect())
            }
            Place::Array { ptr } => {
                let table = job.span(ptr, batch * 8)?;
                let one = self.stored.extent() * size;
                (0..batch)
                    .map(|i| {
                        // SAFETY: the table holds `batch` device pointers.
                        let p = unsafe { table.cast::<u64>().add(i).read_unaligned() };
                        if one == 0 { Ok(std::ptr::null_mut()) } else { job.span(p, one) }
                    })
                    .collect()
            }
        }
    }
}

impl Gemm {
    /// Checks every device range against the stream's context, then queues the computation.
    pub fn submit(self, stream: CUstream) -> BlasResult<()> {
        if self.m == 0 || self.n == 0 || self.batch == 0 {
            return Ok(());
        }
        if self.k > 0 {
            self.a.check(stream, self.batch, "A")?;
            self.b.check(stream, self.batch, "B")?;
        }
        self.c.check(stream, self.batch, "C")?;
        if let Some(d) = &self.d {
            d.check(stream, self.batch, "D")?;
        }
        if let Some((ptr, t)) = self.bias {
            if ptr % t.size() as u64 != 0 {
                return fail(S::CUBLAS_STATUS_INVALID_VALUE, || format!("bias at {ptr:#x} is misaligned"));
            }
            sim()?.check(stream, ptr, self.m * t.size(), "bias")?;
        }
        let sim = sim()?;
        sim.enqueue(stream, Box::new(move |job: &Job| self.run(job)))
    }

    fn run(&self, job: &Job) -> Result<(), CUresult> {
        let (alpha, beta) = self.scalars.resolve(job)?;
        let batch = self.batch;
        let a = if self.k > 0 { self.a.resolve(job, batch)? } else { vec![std::ptr::null_mut(); batch] };
        let b = if self.k > 0 { self.b.resolve(job, batch)? } else { vec![std::ptr::null_mut(); batch] };
        let c = self.c.resolve(job, batch)?;
        let d = match &self.d {
            Some(d) => Some(d.resolve(job, batch)?),
            None => None,
        };
        let bias = match self.bias {
            Some((ptr, t)) => Some((job.span(ptr, self.m * t.size())?.cast_const(), t)),
            None => None,
        };
        let epi = Epilogue { bias, act: self.act };
        for i in 0..batch {
            let av = self.a.stored.view(a[i], self.a.dtype, self.transa);
            let bv = self.b.stored.view(b[i], self.b.dtype, self.transb);
            let out = match (&self.d, &d) {
                (Some(dop), Some(dp)) => {
                    let dv = dop.stored.view(dp[i], dop.dtype, self.transc);
                    let cv = self.c.stored.view(c[i], self.c.dtype, self.transc);
                    if beta != 0.0 && dp[i] != c[i] {
                        // SAFETY: both are m x n views inside resolved spans.
                        unsafe { copy(cv, dv) };
                    }
                    dv
                }
                _ => self.c.stored.view(c[i], self.c.dtype, self.transc),
            };
            // SAFETY: every view lies inside a span resolved for this job.
            unsafe { kernel::gemm(av, bv, out, alpha, beta, epi) };
        }
        Ok(())
    }
}

/// Copies C into D (cuBLASLt's out-of-place result), element by element.
///
/// # Safety
/// Both views must be valid, `src` readable and `dst` writable.
unsafe fn copy(src: Mat, dst: Mat) {
    for j in 0..dst.cols {
        for i in 0..dst.rows {
            let (s, d) = (i as isize * src.rs + j as isize * src.cs, i as isize * dst.rs + j as isize * dst.cs);
            // SAFETY: per the contract.
            unsafe { dst.dtype.store(dst.ptr, d, src.dtype.load(src.ptr, s)) };
        }
    }
}
