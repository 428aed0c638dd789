//! The `aclnn` operators (`libopapi.so`): tensor, scalar and int-array exports, and the
//! two-phase aclnnAdd, aclnnMul, aclnnMatmul, aclnnSoftmax and aclnnReduceSum on fp32/fp16.
//!
//! Phase one (`GetWorkspaceSize`) checks every operand as CANN documents (NULL operands
//! ACLNN_ERR_PARAM_NULLPTR 161001; data types, shapes, broadcasting, dims and views
//! ACLNN_ERR_PARAM_INVALID 161002), copies their descriptions into an executor and needs no
//! workspace. Phase two queues the executor on a stream, once. When the stream reaches it, each
//! operand's touched range must lie inside one allocation of the stream's device: if one does
//! not, nothing is written and the context faults with ACL_ERROR_RT_AICORE_EXCEPTION (507015),
//! as an AI Core's out-of-range access does on hardware: sticky, reported by every later
//! synchronize and call in that context until the device is reset.

use crate::export::exports;
use crate::memory;
use crate::runtime;
use crate::status::{Code, Res, code, fail, out};
use crate::tensor::{self, Tensor, check_operand, contiguous, int_arrays, scalars, tensors};
use gpupool_shim::aclnn::{aclDataType, aclFormat, aclIntArray, aclOpExecutor, aclScalar, aclTensor, aclrtStream};
use std::ffi::c_void;
use std::sync::Arc;

const NULLPTR: Code = code::ACLNN_PARAM_NULLPTR;
const INVALID: Code = code::ACLNN_PARAM_INVALID;

#[derive(Debug)]
pub enum Op {
    /// out = a + alpha * b (Add) or a * b (Mul, alpha None), broadcasting.
    Binary {
        a: Tensor,
        b: Tensor,
        alpha: Option<f64>,
        out: Tensor,
    },
    Matmul {
        a: Tensor,
        b: Tensor,
        out: Tensor,
    },
    Softmax {
        x: Tensor,
        dim: usize,
        out: Tensor,
    },
    ReduceSum {
        x: Tensor,
        dims: Vec<usize>,
        keep: bool,
        out: Tensor,
    },
}

pub struct Executor {
    pub name: &'static str,
    pub op: Op,
}

fn executors() -> &'static tensor::Table<Executor> {
    static T: std::sync::OnceLock<tensor::Table<Executor>> = std::sync::OnceLock::new();
    T.get_or_init(tensor::Table::default)
}

fn shape_err<T>(what: &str, detail: String) -> Res<T> {
    fail(INVALID, || format!("{what}: {detail}"))
}

/// NumPy/PyTorch broadcasting of two shapes, or None if they do not broadcast.
pub fn broadcast(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let x = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
            let y = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
            match (x, y) {
                (x, y) if x == y => Some(x),
                (1, y) => Some(y),
                (x, 1) => Some(x),
                _ => None,
            }
        })
        .collect()
}

fn get_tensor(h: *const aclTensor, what: &str) -> Res<Tensor> {
    let t = tensor::tensor(h as u64, what)?;
    check_operand(&t, what)?;
    Ok((*t).clone())
}

fn finish(name: &'static str, op: Op, ws: *mut u64, executor: *mut *mut aclOpExecutor) -> Res<()> {
    if ws.is_null() || executor.is_null() {
        return fail(NULLPTR, || format!("{name}GetWorkspaceSize: workspaceSize or executor is NULL"));
    }
    let h = executors().insert(Executor { name, op });
    out(ws, 0, NULLPTR, "workspaceSize")?;
    out(executor, h as *mut aclOpExecutor, NULLPTR, "executor")
}

fn binary(
    name: &'static str,
    a: *const aclTensor,
    b: *const aclTensor,
    alpha: Option<f64>,
    o: *mut aclTensor,
    ws: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> Res<()> {
    let (a, b, out_t) = (get_tensor(a, "self")?, get_tensor(b, "other")?, get_tensor(o, "out")?);
    let Some(shape) = broadcast(&a.dims, &b.dims) else {
        return shape_err(name, format!("self {:?} and other {:?} do not broadcast", a.dims, b.dims));
    };
    if shape != out_t.dims {
        return shape_err(name, format!("out is {:?}, the broadcast shape is {shape:?}", out_t.dims));
    }
    finish(name, Op::Binary { a, b, alpha, out: out_t }, ws, executor)
}

/// The shape torch.matmul gives, with the operands' batch and matrix dims.
fn matmul_shape(a: &[i64], b: &[i64]) -> Result<Vec<i64>, String> {
    if a.is_empty() || b.is_empty() {
        return Err("matmul of a 0-d tensor".into());
    }
    let k_a = a[a.len() - 1];
    let k_b = if b.len() == 1 { b[0] } else { b[b.len() - 2] };
    if k_a != k_b {
        return Err(format!("inner dimensions differ: self {a:?}, mat2 {b:?}"));
    }
    let a2: Vec<i64> = if a.len() == 1 { vec![1, a[0]] } else { a.to_vec() };
    let b2: Vec<i64> = if b.len() == 1 { vec![b[0], 1] } else { b.to_vec() };
    let batch = broadcast(&a2[..a2.len() - 2], &b2[..b2.len() - 2])
        .ok_or_else(|| format!("batch dimensions of {a:?} and {b:?} do not broadcast"))?;
    let mut s = batch;
    if a.len() > 1 {
        s.push(a2[a2.len() - 2]);
    }
    if b.len() > 1 {
        s.push(b2[b2.len() - 1]);
    }
    Ok(s)
}

fn norm_dim(d: i64, rank: usize, what: &str) -> Res<usize> {
    let r = rank.max(1) as i64;
    if d < -r || d >= r {
        return shape_err(what, format!("dim {d} out of range for rank {rank}"));
    }
    Ok(if d < 0 { (d + r) as usize } else { d as usize })
}

fn launch(
    name: &'static str,
    workspace: *mut c_void,
    size: u64,
    executor: *mut aclOpExecutor,
    stream: aclrtStream,
) -> Res<()> {
    let _ = (workspace, size);
    if executor.is_null() {
        return fail(NULLPTR, || format!("{name}: executor is NULL"));
    }
    let h = executor as u64;
    match executors().get(h) {
        Some(e) if e.name == name => {}
        Some(e) => return fail(INVALID, || format!("{name}: the executor is {}'s", e.name)),
        None => return fail(INVALID, || format!("{name}: executor {h:#x} is not live (an executor runs once)")),
    }
    let (ctx, st) = match runtime::stream(stream as u64) {
        Ok(v) => v,
        Err(c) if c == code::RT_CONTEXT_NULL || c == code::UNINITIALIZE => {
            return fail(code::ACLNN_RUNTIME_ERROR, || format!("{name}: no current context ({c})"));
        }
        Err(c) => return fail(INVALID, || format!("{name}: bad stream ({c})")),
    };
    if let Some(c) = ctx.fault.get() {
        return fail(code::ACLNN_RUNTIME_ERROR, || format!("{name}: the context has faulted ({c})"));
    }
    let Some(exec) = executors().remove(h) else {
        return fail(INVALID, || format!("{name}: executor {h:#x} was taken by another launch"));
    };
    st.enqueue(Box::new(move |env| {
        if env.fault.is_some() {
            return Ok(());
        }
        let start = std::time::Instant::now();
        let r = execute(&exec.op, env.device);
        crate::util::busy(env.device, start, std::time::Instant::now());
        r.or_else(|c| fail(c, || format!("{name}: {c}")))
    }));
    Ok(())
}

// ---- execution ---------------------------------------------------------------------------

/// An operand's bytes, resolved when the operator runs: the range it touches must be one
/// allocation of `device`, else the AI Core exception.
struct Bound {
    region: Arc<memory::Region>,
    /// Offset in the region of the lowest element the view touches, element index `lo`.
    off: u64,
    lo: i64,
}

fn bind(t: &Tensor, device: u32, what: &str) -> Result<Option<Bound>, Code> {
    let Some((lo, hi)) = t.touched() else { return Ok(None) };
    let es = t.elem_size() as u64;
    let start = (lo as u64).checked_mul(es).and_then(|o| t.data.checked_add(o)).unwrap_or(u64::MAX);
    let len = ((hi - lo) as u64).saturating_add(1).saturating_mul(es);
    match memory::find(start, len) {
        Some((region, off)) if region.device == device => Ok(Some(Bound { region, off, lo })),
        _ => fail(code::RT_AICORE_EXCEPTION, || {
            format!("{what}: [{start:#x}, +{len}) is not inside one allocation of device {device}: AI Core exception")
        }),
    }
}

/// Element offsets of a view, row-major over `dims`, with `strides` (0 where broadcast).
fn offsets(dims: &[i64], strides: &[i64], base: i64) -> Vec<i64> {
    let n: i64 = dims.iter().product();
    let mut v = Vec::with_capacity(n.max(0) as usize);
    let mut idx = vec![0i64; dims.len()];
    for _ in 0..n {
        v.push(base + idx.iter().zip(strides).map(|(i, s)| i * s).sum::<i64>());
        for k in (0..dims.len()).rev() {
            idx[k] += 1;
            if idx[k] < dims[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    v
}

/// Element by element, not the whole extent at once: a sparse view (large strides) over a large
/// allocation touches a few elements, and copying its extent could exhaust the host.
fn get(t: &Tensor, b: &Bound, elem: i64) -> f32 {
    let at = b.off + (elem - b.lo) as u64 * t.elem_size() as u64;
    match t.dtype.0 {
        1 => {
            let mut x = [0u8; 2];
            b.region.read(at, &mut x);
            half::f16::from_le_bytes(x).to_f32()
        }
        _ => {
            let mut x = [0u8; 4];
            b.region.read(at, &mut x);
            f32::from_le_bytes(x)
        }
    }
}

/// The view's values, row-major; `view` gives the index space (broadcast dims and strides).
fn load(t: &Tensor, device: u32, what: &str, dims: &[i64], strides: &[i64]) -> Result<Vec<f32>, Code> {
    let Some(b) = bind(t, device, what)? else { return Ok(Vec::new()) };
    Ok(offsets(dims, strides, t.offset).into_iter().map(|e| get(t, &b, e)).collect())
}

fn load_own(t: &Tensor, device: u32, what: &str) -> Result<Vec<f32>, Code> {
    load(t, device, what, &t.dims, &t.strides)
}

fn store(t: &Tensor, device: u32, values: &[f32]) -> Result<(), Code> {
    let Some(b) = bind(t, device, "out")? else { return Ok(()) };
    let es = t.elem_size() as u64;
    for (e, v) in offsets(&t.dims, &t.strides, t.offset).into_iter().zip(values) {
        let at = b.off + (e - b.lo) as u64 * es;
        match t.dtype.0 {
            1 => b.region.write(at, &half::f16::from_f32(*v).to_le_bytes()),
            _ => b.region.write(at, &v.to_le_bytes()),
        }
    }
    Ok(())
}

/// `t`'s strides over `shape` (right-aligned), 0 where `t` is broadcast.
fn broadcast_strides(t: &Tensor, shape: &[i64]) -> Vec<i64> {
    let pad = shape.len() - t.dims.len();
    (0..shape.len()).map(|i| if i < pad || t.dims[i - pad] == 1 { 0 } else { t.strides[i - pad] }).collect()
}

pub fn execute(op: &Op, device: u32) -> Result<(), Code> {
    match op {
        Op::Binary { a, b, alpha, out } => {
            let va = load(a, device, "self", &out.dims, &broadcast_strides(a, &out.dims))?;
            let vb = load(b, device, "other", &out.dims, &broadcast_strides(b, &out.dims))?;
            bind(out, device, "out")?;
            let r: Vec<f32> = match alpha {
                Some(al) => va.iter().zip(&vb).map(|(x, y)| x + (*al as f32) * y).collect(),
                None => va.iter().zip(&vb).map(|(x, y)| x * y).collect(),
            };
            store(out, device, &r)
        }
        Op::Matmul { a, b, out } => {
            let va = load_own(a, device, "self")?;
            let vb = load_own(b, device, "mat2")?;
            bind(out, device, "out")?;
            store(out, device, &matmul(&a.dims, &va, &b.dims, &vb))
        }
        Op::Softmax { x, dim, out } => {
            let v = load_own(x, device, "self")?;
            bind(out, device, "out")?;
            store(out, device, &softmax(&x.dims, &v, *dim))
        }
        Op::ReduceSum { x, dims, keep: _, out } => {
            let v = load_own(x, device, "self")?;
            bind(out, device, "out")?;
            store(out, device, &reduce_sum(&x.dims, &v, dims))
        }
    }
}

/// torch.matmul on row-major values (f32 accumulation).
pub fn matmul(ad: &[i64], a: &[f32], bd: &[i64], b: &[f32]) -> Vec<f32> {
    let a2: Vec<i64> = if ad.len() == 1 { vec![1, ad[0]] } else { ad.to_vec() };
    let b2: Vec<i64> = if bd.len() == 1 { vec![bd[0], 1] } else { bd.to_vec() };
    let (m, k, n) = (a2[a2.len() - 2] as usize, a2[a2.len() - 1] as usize, b2[b2.len() - 1] as usize);
    let (ab, bb) = (&a2[..a2.len() - 2], &b2[..b2.len() - 2]);
    let batch = broadcast(ab, bb).unwrap_or_default();
    let idx_a = offsets(&batch, &batch_strides(ab, &batch, m * k), 0);
    let idx_b = offsets(&batch, &batch_strides(bb, &batch, k * n), 0);
    let mut r = Vec::with_capacity(idx_a.len().max(1) * m * n);
    for (oa, ob) in idx_a.iter().zip(&idx_b) {
        let (oa, ob) = (*oa as usize, *ob as usize);
        for i in 0..m {
            for j in 0..n {
                let mut s = 0f32;
                for p in 0..k {
                    s += a[oa + i * k + p] * b[ob + p * n + j];
                }
                r.push(s);
            }
        }
    }
    r
}

/// Strides, in elements, of a contiguous batch of matrices of `mat` elements, broadcast to `batch`.
fn batch_strides(own: &[i64], batch: &[i64], mat: usize) -> Vec<i64> {
    let own_strides: Vec<i64> = contiguous(own).into_iter().map(|s| s * mat as i64).collect();
    let pad = batch.len() - own.len();
    (0..batch.len()).map(|i| if i < pad || own[i - pad] == 1 { 0 } else { own_strides[i - pad] }).collect()
}

pub fn softmax(dims: &[i64], v: &[f32], dim: usize) -> Vec<f32> {
    if dims.is_empty() {
        return v.iter().map(|_| 1.0).collect();
    }
    let len = dims[dim] as usize;
    let inner: usize = dims[dim + 1..].iter().product::<i64>() as usize;
    let outer: usize = dims[..dim].iter().product::<i64>() as usize;
    let mut r = v.to_vec();
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| o * len * inner + j * inner + i;
            let max = (0..len).map(|j| v[at(j)]).fold(f32::NEG_INFINITY, f32::max);
            let sum: f32 = (0..len).map(|j| (v[at(j)] - max).exp()).sum();
            for j in 0..len {
                r[at(j)] = (v[at(j)] - max).exp() / sum;
            }
        }
    }
    r
}

pub fn reduce_sum(dims: &[i64], v: &[f32], reduce: &[usize]) -> Vec<f32> {
    let kept: Vec<i64> = dims.iter().enumerate().map(|(i, &d)| if reduce.contains(&i) { 1 } else { d }).collect();
    let out_strides: Vec<i64> =
        contiguous(&kept).into_iter().enumerate().map(|(i, s)| if reduce.contains(&i) { 0 } else { s }).collect();
    let n: i64 = kept.iter().product();
    let mut r = vec![0f32; n.max(0) as usize];
    for (x, o) in v.iter().zip(offsets(dims, &out_strides, 0)) {
        r[o as usize] += x;
    }
    r
}

// ---- exports -----------------------------------------------------------------------------

/// Copies `n` values from a caller's array (NULL allowed only when `n` is 0).
fn copy_in<T: Copy>(p: *const T, n: u64) -> Option<Vec<T>> {
    match (p.is_null(), n) {
        (_, 0) => Some(Vec::new()),
        (true, _) => None,
        // SAFETY: the caller passes `n` readable elements by the API's contract.
        (false, n) => Some(unsafe { std::slice::from_raw_parts(p, n as usize) }.to_vec()),
    }
}

/// Runs a creating export's body: a panic is NULL (CANN's answer for a failed creation), never
/// an unwind across `extern "C"`.
fn guarded<T>(body: impl FnOnce() -> *mut T) -> *mut T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(std::ptr::null_mut())
}

/// Hands an array back to the caller in malloc'd memory (theirs to free with free()).
fn copy_out(v: &[i64], ptr: *mut *mut i64, num: *mut u64) -> Res<()> {
    if ptr.is_null() || num.is_null() {
        return fail(NULLPTR, || "an out-pointer is NULL".into());
    }
    // SAFETY: malloc of at least one element; failure is checked below.
    let p = unsafe { libc::malloc(v.len().max(1) * 8) } as *mut i64;
    if p.is_null() {
        return fail(code::ACLNN_INNER, || "out of host memory".into());
    }
    // SAFETY: `p` holds `v.len()` elements.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), p, v.len()) };
    out(ptr, p, NULLPTR, "array")?;
    out(num, v.len() as u64, NULLPTR, "size")
}

#[unsafe(no_mangle)]
pub extern "C" fn aclCreateTensor(
    viewDims: *const i64,
    viewDimsNum: u64,
    dataType: aclDataType,
    stride: *const i64,
    offset: i64,
    format: aclFormat,
    storageDims: *const i64,
    storageDimsNum: u64,
    tensorData: *mut c_void,
) -> *mut aclTensor {
    let made = std::panic::catch_unwind(|| {
        if viewDimsNum > tensor::MAX_CREATE_DIMS || storageDimsNum > tensor::MAX_CREATE_DIMS {
            return Err(format!("{viewDimsNum} view or {storageDimsNum} storage dimensions"));
        }
        let (Some(dims), Some(storage)) = (copy_in(viewDims, viewDimsNum), copy_in(storageDims, storageDimsNum)) else {
            return Err("viewDims or storageDims is NULL".to_string());
        };
        let strides = if stride.is_null() { None } else { copy_in(stride, viewDimsNum) };
        tensor::make(dims, strides, offset, dataType, format, storage, tensorData as u64)
    });
    match made {
        Ok(Ok(t)) => tensors().insert(t) as *mut aclTensor,
        Ok(Err(why)) => {
            let _ = fail::<()>(INVALID, || format!("aclCreateTensor: {why}"));
            std::ptr::null_mut()
        }
        Err(_) => std::ptr::null_mut(),
    }
}
const _: unsafe extern "C" fn(
    *const i64,
    u64,
    aclDataType,
    *const i64,
    i64,
    aclFormat,
    *const i64,
    u64,
    *mut c_void,
) -> *mut aclTensor = gpupool_shim::aclnn::aclCreateTensor;

#[unsafe(no_mangle)]
pub extern "C" fn aclCreateScalar(value: *mut c_void, dataType: aclDataType) -> *mut aclScalar {
    guarded(|| {
        let Some(size) = tensor::dtype_size(dataType) else {
            let _ = fail::<()>(INVALID, || format!("aclCreateScalar: data type {}", dataType.0));
            return std::ptr::null_mut();
        };
        match copy_in(value as *const u8, size as u64) {
            Some(bytes) if !value.is_null() => {
                scalars().insert(tensor::Scalar { dtype: dataType, bytes }) as *mut aclScalar
            }
            _ => std::ptr::null_mut(),
        }
    })
}
const _: unsafe extern "C" fn(*mut c_void, aclDataType) -> *mut aclScalar = gpupool_shim::aclnn::aclCreateScalar;

#[unsafe(no_mangle)]
pub extern "C" fn aclCreateIntArray(value: *const i64, size: u64) -> *mut aclIntArray {
    guarded(|| {
        if size > 1 << 20 {
            let _ = fail::<()>(INVALID, || format!("aclCreateIntArray of {size} values"));
            return std::ptr::null_mut();
        }
        match copy_in(value, size) {
            Some(v) => int_arrays().insert(v) as *mut aclIntArray,
            None => std::ptr::null_mut(),
        }
    })
}
const _: unsafe extern "C" fn(*const i64, u64) -> *mut aclIntArray = gpupool_shim::aclnn::aclCreateIntArray;

fn destroy<T>(t: &tensor::Table<T>, h: u64, what: &str) -> Res<()> {
    if h == 0 {
        return Ok(());
    }
    match t.remove(h) {
        Some(_) => Ok(()),
        None => fail(INVALID, || format!("{what} {h:#x} is not live")),
    }
}

exports! { aclnn -> gpupool_shim::aclnn::aclnnStatus, on panic code::ACLNN_INNER;

fn aclDestroyTensor(tensor: *const aclTensor) {
    destroy(tensors(), tensor as u64, "aclDestroyTensor: tensor")
}

fn aclDestroyScalar(scalar: *const aclScalar) {
    destroy(scalars(), scalar as u64, "aclDestroyScalar: scalar")
}

fn aclDestroyIntArray(array: *const aclIntArray) {
    destroy(int_arrays(), array as u64, "aclDestroyIntArray: array")
}

fn aclGetViewShape(tensor: *const aclTensor, viewDims: *mut *mut i64, viewDimsNum: *mut u64) {
    let t = tensor::tensor(tensor as u64, "tensor")?;
    copy_out(&t.dims, viewDims, viewDimsNum)
}

fn aclGetStorageShape(tensor: *const aclTensor, storageDims: *mut *mut i64, storageDimsNum: *mut u64) {
    let t = tensor::tensor(tensor as u64, "tensor")?;
    copy_out(&t.storage, storageDims, storageDimsNum)
}

fn aclGetViewStrides(tensor: *const aclTensor, stridesValue: *mut *mut i64, stridesNum: *mut u64) {
    let t = tensor::tensor(tensor as u64, "tensor")?;
    copy_out(&t.strides, stridesValue, stridesNum)
}

fn aclGetViewOffset(tensor: *const aclTensor, offset: *mut i64) {
    let t = tensor::tensor(tensor as u64, "tensor")?;
    out(offset, t.offset, NULLPTR, "offset")
}

fn aclGetFormat(tensor: *const aclTensor, format: *mut aclFormat) {
    let t = tensor::tensor(tensor as u64, "tensor")?;
    out(format, t.format, NULLPTR, "format")
}

fn aclGetDataType(tensor: *const aclTensor, dataType: *mut aclDataType) {
    let t = tensor::tensor(tensor as u64, "tensor")?;
    out(dataType, t.dtype, NULLPTR, "dataType")
}

fn aclGetIntArraySize(array: *const aclIntArray, size: *mut u64) {
    let Some(a) = int_arrays().get(array as u64) else {
        return fail(if array.is_null() { NULLPTR } else { INVALID }, || "aclGetIntArraySize: not a live aclIntArray".into());
    };
    out(size, a.len() as u64, NULLPTR, "size")
}

fn aclnnAddGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, alpha: *const aclScalar, out: *mut aclTensor,
                            workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor) {
    if alpha.is_null() {
        return fail(NULLPTR, || "aclnnAdd: alpha is NULL".into());
    }
    let Some(s) = scalars().get(alpha as u64) else {
        return fail(INVALID, || "aclnnAdd: alpha is not a live aclScalar".into());
    };
    let alpha = tensor::scalar_value(&s)?;
    binary("aclnnAdd", self_, other, Some(alpha), out, workspaceSize, executor)
}

fn aclnnAdd(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream) {
    launch("aclnnAdd", workspace, workspaceSize, executor, stream)
}

fn aclnnMulGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor, workspaceSize: *mut u64,
                            executor: *mut *mut aclOpExecutor) {
    binary("aclnnMul", self_, other, None, out, workspaceSize, executor)
}

fn aclnnMul(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream) {
    launch("aclnnMul", workspace, workspaceSize, executor, stream)
}

fn aclnnMatmulGetWorkspaceSize(self_: *const aclTensor, mat2: *const aclTensor, out: *mut aclTensor, cubeMathType: i8,
                               workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor) {
    let (a, b, o) = (get_tensor(self_, "self")?, get_tensor(mat2, "mat2")?, get_tensor(out, "out")?);
    if !(0..=3).contains(&cubeMathType) {
        return shape_err("aclnnMatmul", format!("cubeMathType {cubeMathType} (0..=3)"));
    }
    if a.dtype != b.dtype || a.dtype != o.dtype {
        return shape_err("aclnnMatmul", format!("data types self {} mat2 {} out {} differ", a.dtype.0, b.dtype.0, o.dtype.0));
    }
    let shape = matmul_shape(&a.dims, &b.dims).or_else(|e| shape_err("aclnnMatmul", e))?;
    if shape != o.dims {
        return shape_err("aclnnMatmul", format!("out is {:?}, self @ mat2 is {shape:?}", o.dims));
    }
    finish("aclnnMatmul", Op::Matmul { a, b, out: o }, workspaceSize, executor)
}

fn aclnnMatmul(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream) {
    launch("aclnnMatmul", workspace, workspaceSize, executor, stream)
}

fn aclnnSoftmaxGetWorkspaceSize(self_: *const aclTensor, dim: i64, out: *mut aclTensor, workspaceSize: *mut u64,
                                executor: *mut *mut aclOpExecutor) {
    let (x, o) = (get_tensor(self_, "self")?, get_tensor(out, "out")?);
    let d = norm_dim(dim, x.dims.len(), "aclnnSoftmax")?;
    if x.dims != o.dims {
        return shape_err("aclnnSoftmax", format!("out {:?} is not self's shape {:?}", o.dims, x.dims));
    }
    finish("aclnnSoftmax", Op::Softmax { x, dim: d, out: o }, workspaceSize, executor)
}

fn aclnnSoftmax(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream) {
    launch("aclnnSoftmax", workspace, workspaceSize, executor, stream)
}

fn aclnnReduceSumGetWorkspaceSize(self_: *const aclTensor, dim: *const aclIntArray, keepDim: bool, dtype: aclDataType,
                                  out: *mut aclTensor, workspaceSize: *mut u64, executor: *mut *mut aclOpExecutor) {
    let (x, o) = (get_tensor(self_, "self")?, get_tensor(out, "out")?);
    if dim.is_null() {
        return fail(NULLPTR, || "aclnnReduceSum: dim is NULL".into());
    }
    let Some(list) = int_arrays().get(dim as u64) else {
        return fail(INVALID, || "aclnnReduceSum: dim is not a live aclIntArray".into());
    };
    if dtype != o.dtype {
        return shape_err("aclnnReduceSum", format!("dtype {} is not out's {}", dtype.0, o.dtype.0));
    }
    let mut dims = Vec::new();
    for &d in list.iter() {
        let d = norm_dim(d, x.dims.len(), "aclnnReduceSum")?;
        if dims.contains(&d) {
            return shape_err("aclnnReduceSum", format!("dim {d} given twice"));
        }
        dims.push(d);
    }
    if dims.is_empty() {
        dims = (0..x.dims.len()).collect();
    }
    let shape: Vec<i64> = x
        .dims
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| match (dims.contains(&i), keepDim) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    if shape != o.dims {
        return shape_err("aclnnReduceSum", format!("out is {:?}, the reduction gives {shape:?}", o.dims));
    }
    finish("aclnnReduceSum", Op::ReduceSum { x, dims, keep: keepDim, out: o }, workspaceSize, executor)
}

fn aclnnReduceSum(workspace: *mut c_void, workspaceSize: u64, executor: *mut aclOpExecutor, stream: aclrtStream) {
    launch("aclnnReduceSum", workspace, workspaceSize, executor, stream)
}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast(&[2, 3], &[3]), Some(vec![2, 3]));
        assert_eq!(broadcast(&[4, 1, 5], &[3, 1]), Some(vec![4, 3, 5]));
        assert_eq!(broadcast(&[2, 3], &[2]), None);
        assert_eq!(broadcast(&[], &[7]), Some(vec![7]));
    }

    #[test]
    fn matmul_shapes_follow_torch() {
        assert_eq!(matmul_shape(&[3], &[3]), Ok(vec![]));
        assert_eq!(matmul_shape(&[2, 3], &[3]), Ok(vec![2]));
        assert_eq!(matmul_shape(&[3], &[3, 4]), Ok(vec![4]));
        assert_eq!(matmul_shape(&[5, 2, 3], &[3, 4]), Ok(vec![5, 2, 4]));
        assert_eq!(matmul_shape(&[5, 1, 2, 3], &[6, 3, 4]), Ok(vec![5, 6, 2, 4]));
        assert!(matmul_shape(&[2, 3], &[4, 5]).is_err());
    }

    #[test]
    fn kernels_compute_what_they_say() {
        // [[1,2],[3,4]] @ [[5,6],[7,8]] = [[19,22],[43,50]]
        assert_eq!(matmul(&[2, 2], &[1., 2., 3., 4.], &[2, 2], &[5., 6., 7., 8.]), vec![19., 22., 43., 50.]);
        // batch 2 against one broadcast matrix
        let r = matmul(&[2, 1, 2], &[1., 1., 2., 2.], &[2, 1], &[3., 4.]);
        assert_eq!(r, vec![7., 14.]);
        let s = softmax(&[2, 2], &[0., 0., 1., 1.], 0);
        assert!((s[0] - 0.268_941_4).abs() < 1e-6 && (s[2] - 0.731_058_6).abs() < 1e-6);
        assert_eq!(reduce_sum(&[2, 3], &[1., 2., 3., 4., 5., 6.], &[1]), vec![6., 15.]);
        assert_eq!(reduce_sum(&[2, 3], &[1., 2., 3., 4., 5., 6.], &[0]), vec![5., 7., 9.]);
        assert_eq!(reduce_sum(&[2, 3], &[1., 2., 3., 4., 5., 6.], &[0, 1]), vec![21.]);
    }
}
