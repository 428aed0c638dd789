//! The `acl_meta.h` objects behind `libopapi.so`'s operators: tensors (view shape, strides and
//! offset in elements over a storage shape, a data type, a device address), scalars and int
//! arrays, kept in tables under numbered handles (a forged or stale handle is refused, never
//! dereferenced). Creation copies everything it is given, as CANN's does.

use crate::status::{Code, Res, code, fail};
use gpupool_shim::aclnn::{aclDataType, aclFormat};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// At most this many dimensions (CANN's operators take up to 8).
pub const MAX_DIMS: usize = 8;

/// `aclCreateTensor` refuses more dimensions than this (it copies what it is given).
pub const MAX_CREATE_DIMS: u64 = 64;

/// The most elements one operand may have: the simulator computes on host memory, and an
/// operand beyond this (possible with zero strides over a small allocation) would exhaust the
/// host running it (a pool daemon, for instance) rather than fail one call.
pub const MAX_ELEMENTS: u64 = 1 << 28;

#[derive(Clone, Debug)]
pub struct Tensor {
    pub dims: Vec<i64>,
    pub strides: Vec<i64>,
    pub offset: i64,
    pub dtype: aclDataType,
    pub format: aclFormat,
    pub storage: Vec<i64>,
    pub data: u64,
}

#[derive(Clone, Debug)]
pub struct Scalar {
    pub dtype: aclDataType,
    pub bytes: Vec<u8>,
}

/// Bytes per element of the types CANN sizes (`aclDataTypeSize`).
pub fn dtype_size(t: aclDataType) -> Option<usize> {
    Some(match t.0 {
        0 | 3 | 8 => 4,      // FLOAT, INT32, UINT32
        1 | 6 | 7 | 27 => 2, // FLOAT16, INT16, UINT16, BF16
        2 | 4 | 12 => 1,     // INT8, UINT8, BOOL
        9..=11 | 16 => 8,    // INT64, UINT64, DOUBLE, COMPLEX64
        17 => 16,            // COMPLEX128
        33 => 4,             // COMPLEX32
        34..=37 => 1,        // HIFLOAT8, FLOAT8_*
        _ => return None,
    })
}

impl Tensor {
    pub fn numel(&self) -> u64 {
        self.dims.iter().map(|&d| d as u64).product()
    }

    pub fn elem_size(&self) -> usize {
        dtype_size(self.dtype).unwrap_or(1)
    }

    /// The element-index range `[lo, hi]` the view touches, relative to `data` (none if empty).
    pub fn touched(&self) -> Option<(i64, i64)> {
        if self.numel() == 0 {
            return None;
        }
        let span: i128 = self.dims.iter().zip(&self.strides).map(|(&d, &s)| (d as i128 - 1) * s as i128).sum();
        Some((self.offset, i64::try_from(self.offset as i128 + span).unwrap_or(i64::MAX)))
    }
}

/// A table of objects under numbered, pointer-sized handles.
pub struct Table<T> {
    items: Mutex<HashMap<u64, Arc<T>>>,
}

static NEXT: AtomicU64 = AtomicU64::new(1);

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table { items: Mutex::new(HashMap::new()) }
    }
}

impl<T> Table<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<T>>> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub fn insert(&self, v: T) -> u64 {
        let h = 0x7c00_0000_0000 + NEXT.fetch_add(1, Ordering::Relaxed) * 16;
        self.lock().insert(h, Arc::new(v));
        h
    }
    pub fn get(&self, h: u64) -> Option<Arc<T>> {
        self.lock().get(&h).cloned()
    }
    pub fn remove(&self, h: u64) -> Option<Arc<T>> {
        self.lock().remove(&h)
    }
}

pub fn tensors() -> &'static Table<Tensor> {
    static T: std::sync::OnceLock<Table<Tensor>> = std::sync::OnceLock::new();
    T.get_or_init(Table::default)
}
pub fn scalars() -> &'static Table<Scalar> {
    static T: std::sync::OnceLock<Table<Scalar>> = std::sync::OnceLock::new();
    T.get_or_init(Table::default)
}
pub fn int_arrays() -> &'static Table<Vec<i64>> {
    static T: std::sync::OnceLock<Table<Vec<i64>>> = std::sync::OnceLock::new();
    T.get_or_init(Table::default)
}

/// An operand by handle: NULL is ACLNN_ERR_PARAM_NULLPTR, an unknown handle ACLNN_ERR_PARAM_INVALID.
pub fn tensor(h: u64, what: &str) -> Res<Arc<Tensor>> {
    if h == 0 {
        return fail(code::ACLNN_PARAM_NULLPTR, || format!("{what} is NULL"));
    }
    tensors()
        .get(h)
        .ok_or(())
        .or_else(|_| fail(code::ACLNN_PARAM_INVALID, || format!("{what} {h:#x} is not a live aclTensor")))
}

/// Builds a tensor from `aclCreateTensor`'s arguments (already copied out of the caller).
pub fn make(
    dims: Vec<i64>,
    strides: Option<Vec<i64>>,
    offset: i64,
    dtype: aclDataType,
    format: aclFormat,
    storage: Vec<i64>,
    data: u64,
) -> Result<Tensor, String> {
    if dims.iter().chain(&storage).any(|&d| d < 0) {
        return Err(format!("negative dimension in view {dims:?} or storage {storage:?}"));
    }
    let strides = match strides {
        Some(s) => s,
        None => contiguous(&dims),
    };
    if offset < 0 {
        return Err(format!("negative offset {offset}"));
    }
    Ok(Tensor { dims, strides, offset, dtype, format, storage, data })
}

/// Row-major strides of `dims`.
pub fn contiguous(dims: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1].max(1);
    }
    s
}

/// The checks every operand gets when an operator is set up: a float type the simulator
/// computes (fp32, fp16), at most [`MAX_DIMS`] dimensions and [`MAX_ELEMENTS`] elements,
/// non-negative strides, a view inside its storage shape, and an address when it has elements.
pub fn check_operand(t: &Tensor, what: &str) -> Res<()> {
    let invalid = code::ACLNN_PARAM_INVALID;
    if !matches!(t.dtype.0, 0 | 1) {
        return fail(invalid, || {
            format!("{what}: data type {} (the simulator computes ACL_FLOAT and ACL_FLOAT16)", t.dtype.0)
        });
    }
    if t.dims.len() > MAX_DIMS {
        return fail(invalid, || format!("{what}: {} dimensions (at most {MAX_DIMS})", t.dims.len()));
    }
    if t.dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64)).is_none_or(|n| n > MAX_ELEMENTS) {
        return fail(invalid, || {
            format!("{what}: shape {:?} has more than {MAX_ELEMENTS} elements (a simulator limit)", t.dims)
        });
    }
    if t.strides.len() != t.dims.len() || t.strides.iter().any(|&s| s < 0) {
        return fail(invalid, || format!("{what}: strides {:?} for shape {:?}", t.strides, t.dims));
    }
    if let Some((_, hi)) = t.touched() {
        let storage = t.storage.iter().try_fold(1i64, |n, &d| n.checked_mul(d)).unwrap_or(i64::MAX);
        if hi >= storage {
            return fail(invalid, || {
                format!(
                    "{what}: view {:?} strides {:?} offset {} reaches element {hi} of a storage of {storage}",
                    t.dims, t.strides, t.offset
                )
            });
        }
        if t.data == 0 {
            return fail(code::ACLNN_PARAM_NULLPTR, || format!("{what}: tensor data is NULL"));
        }
    }
    Ok(())
}

/// A scalar's value as f64 (the numeric types CANN's scalars take).
pub fn scalar_value(s: &Scalar) -> Result<f64, Code> {
    let b = &s.bytes;
    let arr = |n: usize| -> [u8; 8] {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(&b[..n]);
        a
    };
    Ok(match s.dtype.0 {
        0 => f32::from_le_bytes(arr(4)[..4].try_into().unwrap_or_default()) as f64,
        1 => half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
        27 => half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f64(),
        11 => f64::from_le_bytes(arr(8)),
        2 => b[0] as i8 as f64,
        4 => b[0] as f64,
        12 => (b[0] != 0) as u8 as f64,
        6 => i16::from_le_bytes([b[0], b[1]]) as f64,
        3 => i32::from_le_bytes(arr(4)[..4].try_into().unwrap_or_default()) as f64,
        9 => i64::from_le_bytes(arr(8)) as f64,
        other => return fail(code::ACLNN_PARAM_INVALID, || format!("scalar of data type {other}")),
    })
}
