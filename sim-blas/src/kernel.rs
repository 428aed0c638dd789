//! The arithmetic, on host memory: GEMM through `matrixmultiply` (strided f32/f64 kernels, so
//! cuBLAS's column-major layouts, transposes and leading dimensions are passed as strides, and
//! beta = 0 overwrites C without reading it, as cuBLAS specifies), fp16/bf16 widened to f32 so
//! they accumulate in fp32, the cuBLASLt epilogues, and the level-1/2 routines.

use half::{bf16, f16};

/// Element types the library computes with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dtype {
    F16,
    Bf16,
    F32,
    F64,
}

impl Dtype {
    pub fn size(self) -> usize {
        match self {
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::F32 => 4,
            Dtype::F64 => 8,
        }
    }

    pub fn from_cuda(t: gpupool_shim::cublas::cudaDataType_t) -> Option<Dtype> {
        use gpupool_shim::cublas::cudaDataType_t as T;
        match t {
            T::CUDA_R_16F => Some(Dtype::F16),
            T::CUDA_R_16BF => Some(Dtype::Bf16),
            T::CUDA_R_32F => Some(Dtype::F32),
            T::CUDA_R_64F => Some(Dtype::F64),
            _ => None,
        }
    }

    /// Reads element `i` of a typed array as f64.
    ///
    /// # Safety
    /// `p` must point to at least `i + 1` readable elements of this type.
    pub unsafe fn load(self, p: *const u8, i: isize) -> f64 {
        // SAFETY: per the contract; unaligned reads, since scalars may be anywhere.
        unsafe {
            match self {
                Dtype::F16 => p.cast::<f16>().offset(i).read_unaligned().to_f64(),
                Dtype::Bf16 => p.cast::<bf16>().offset(i).read_unaligned().to_f64(),
                Dtype::F32 => p.cast::<f32>().offset(i).read_unaligned() as f64,
                Dtype::F64 => p.cast::<f64>().offset(i).read_unaligned(),
            }
        }
    }

    /// Writes `v` (rounded to nearest) as element `i`.
    ///
    /// # Safety
    /// `p` must point to at least `i + 1` writable elements of this type.
    pub unsafe fn store(self, p: *mut u8, i: isize, v: f64) {
        // SAFETY: per the contract.
        unsafe {
            match self {
                Dtype::F16 => p.cast::<f16>().offset(i).write_unaligned(f16::from_f64(v)),
                Dtype::Bf16 => p.cast::<bf16>().offset(i).write_unaligned(bf16::from_f64(v)),
                Dtype::F32 => p.cast::<f32>().offset(i).write_unaligned(v as f32),
                Dtype::F64 => p.cast::<f64>().offset(i).write_unaligned(v),
            }
        }
    }
}

/// A matrix as stored in column-major memory: `rows` x `cols`, column stride `ld` elements.
#[derive(Clone, Copy, Debug)]
pub struct Stored {
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
}

impl Stored {
    /// Elements from the first to one past the last it touches (0 when empty).
    pub fn extent(&self) -> usize {
        if self.rows == 0 || self.cols == 0 { 0 } else { (self.cols - 1) * self.ld + self.rows }
    }

    /// `op(M)` over host memory at `ptr`: its shape and element strides.
    pub fn view(&self, ptr: *mut u8, dtype: Dtype, trans: bool) -> Mat {
        let ld = self.ld as isize;
        if trans {
            Mat { ptr, dtype, rows: self.cols, cols: self.rows, rs: ld, cs: 1 }
        } else {
            Mat { ptr, dtype, rows: self.rows, cols: self.cols, rs: 1, cs: ld }
        }
    }
}

/// `op(M)` in host memory: element (i, j) is at `ptr + (i * rs + j * cs) * size`.
#[derive(Clone, Copy, Debug)]
pub struct Mat {
    pub ptr: *mut u8,
    pub dtype: Dtype,
    pub rows: usize,
    pub cols: usize,
    pub rs: isize,
    pub cs: isize,
}

impl Mat {
    fn at(&self, i: usize, j: usize) -> isize {
        i as isize * self.rs + j as isize * self.cs
    }

    /// Copies the matrix into a column-major f32 buffer.
    ///
    /// # Safety
    /// The view must describe readable memory.
    unsafe fn widen(&self) -> Vec<f32> {
        let mut out = Vec::with_capacity(self.rows * self.cols);
        for j in 0..self.cols {
            for i in 0..self.rows {
                // SAFETY: (i, j) is inside the view.
                out.push(unsafe { self.dtype.load(self.ptr, self.at(i, j)) } as f32);
            }
        }
        out
    }
}

/// What cuBLASLt applies to each element of the result before it is stored.
#[derive(Clone, Copy, Debug)]
pub struct Epilogue {
    /// A vector of `rows` elements added to every column.
    pub bias: Option<(*const u8, Dtype)>,
    pub act: Activation,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    None,
    Relu,
    /// The tanh approximation, as cuBLASLt's GELU epilogue.
    Gelu,
}

impl Epilogue {
    pub const NONE: Epilogue = Epilogue { bias: None, act: Activation::None };

    fn is_none(&self) -> bool {
        self.bias.is_none() && self.act == Activation::None
    }

    /// # Safety
    /// `bias`, when set, must point to at least `row + 1` readable elements.
    unsafe fn apply(&self, row: usize, v: f64) -> f64 {
        // SAFETY: per the contract.
        let v = match self.bias {
            Some((p, t)) => v + unsafe { t.load(p, row as isize) },
            None => v,
        };
        match self.act {
            Activation::None => v,
            Activation::Relu => v.max(0.0),
            Activation::Gelu => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())
            }
        }
    }
}

/// `C = epilogue(alpha * A * B + beta * C)` where A, B, C are already `op(.)` views with
/// A: m x k, B: k x n, C: m x n. Accumulates in f64 when every operand is f64, else in f32.
///
/// # Safety
/// The views must describe readable (A, B, bias) and writable (C) host memory.
pub unsafe fn gemm(a: Mat, b: Mat, c: Mat, alpha: f64, beta: f64, epi: Epilogue) {
    let (m, k, n) = (c.rows, a.cols, c.cols);
    debug_assert!(a.rows == m && b.rows == k && b.cols == n);
    if m == 0 || n == 0 {
        return;
    }
    let all = |t| a.dtype == t && b.dtype == t && c.dtype == t;
    // SAFETY (each block): the views are valid per the contract; the strides keep every
    // access inside them, and matrixmultiply reads and writes only through them.
    if all(Dtype::F64) {
        unsafe {
            matrixmultiply::dgemm(
                m,
                k,
                n,
                alpha,
                a.ptr.cast(),
                a.rs,
                a.cs,
                b.ptr.cast(),
                b.rs,
                b.cs,
                beta,
                c.ptr.cast(),
                c.rs,
                c.cs,
            )
        };
    } else if all(Dtype::F32) {
        unsafe {
            matrixmultiply::sgemm(
                m,
                k,
                n,
                alpha as f32,
                a.ptr.cast(),
                a.rs,
                a.cs,
                b.ptr.cast(),
                b.rs,
                b.cs,
                beta as f32,
                c.ptr.cast(),
                c.rs,
                c.cs,
            )
        };
    } else {
        // Half-precision operands: widened, multiplied and accumulated in f32, rounded once.
        let (wa, wb) = unsafe { (a.widen(), b.widen()) };
        let mut wc = if beta != 0.0 { unsafe { c.widen() } } else { vec![0.0; m * n] };
        let (mi, ki) = (m as isize, k as isize);
        unsafe {
            matrixmultiply::sgemm(
                m,
                k,
                n,
                alpha as f32,
                wa.as_ptr(),
                1,
                mi,
                wb.as_ptr(),
                1,
                ki,
                beta as f32,
                wc.as_mut_ptr(),
                1,
                mi,
            )
        };
        for j in 0..n {
            for i in 0..m {
                let v = unsafe { epi.apply(i, wc[i + j * m] as f64) };
                unsafe { c.dtype.store(c.ptr, c.at(i, j), v) };
            }
        }
        return;
    }
    if !epi.is_none() {
        for j in 0..n {
            for i in 0..m {
                let at = c.at(i, j);
                // SAFETY: (i, j) is inside C; the bias has m elements.
                unsafe {
                    let v = epi.apply(i, c.dtype.load(c.ptr, at));
                    c.dtype.store(c.ptr, at, v);
                }
            }
        }
    }
}

/// A strided vector of `n` elements.
#[derive(Clone, Copy, Debug)]
pub struct Vector {
    pub ptr: *mut u8,
    pub dtype: Dtype,
    pub n: usize,
    pub inc: isize,
}

impl Vector {
    /// Elements from the first to one past the last touched.
    pub fn extent(n: usize, inc: usize) -> usize {
        if n == 0 { 0 } else { (n - 1) * inc + 1 }
    }

    /// The vector as an n x 1 matrix.
    pub fn as_column(&self) -> Mat {
        Mat { ptr: self.ptr, dtype: self.dtype, rows: self.n, cols: 1, rs: self.inc, cs: 1 }
    }

    /// # Safety
    /// The vector must be readable.
    unsafe fn get(&self, i: usize) -> f64 {
        // SAFETY: i < n, inside the vector.
        unsafe { self.dtype.load(self.ptr, i as isize * self.inc) }
    }

    /// # Safety
    /// The vector must be writable.
    unsafe fn set(&self, i: usize, v: f64) {
        // SAFETY: i < n, inside the vector.
        unsafe { self.dtype.store(self.ptr, i as isize * self.inc, v) }
    }
}

/// `x . y`, accumulated in the vectors' own precision (f32 for Sdot), as cuBLAS.
///
/// # Safety
/// Both vectors must be readable.
pub unsafe fn dot(x: Vector, y: Vector) -> f64 {
    let mut acc = 0.0f32;
    for i in 0..x.n {
        // SAFETY: per the contract.
        acc += unsafe { (x.get(i) * y.get(i)) as f32 };
    }
    acc as f64
}

/// `y = alpha * x + y`.
///
/// # Safety
/// `x` readable, `y` writable.
pub unsafe fn axpy(alpha: f64, x: Vector, y: Vector) {
    for i in 0..x.n {
        // SAFETY: per the contract.
        unsafe { y.set(i, (alpha as f32 * x.get(i) as f32 + y.get(i) as f32) as f64) };
    }
}

/// `x = alpha * x`.
///
/// # Safety
/// `x` writable.
pub unsafe fn scal(alpha: f64, x: Vector) {
    for i in 0..x.n {
        // SAFETY: per the contract.
        unsafe { x.set(i, (alpha as f32 * x.get(i) as f32) as f64) };
    }
}
