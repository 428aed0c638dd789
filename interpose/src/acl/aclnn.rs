//! The `aclnn*` operators (`libopapi.so`) answered by `libgpupool.so`: tensors and scalars are
//! descriptions held here (they name device memory, so nothing is checked until the daemon sees
//! them); `aclnn<Op>GetWorkspaceSize` sends the operator and its operands to the daemon, which
//! checks every operand is this session's memory, in bounds, and holds the backend's executor;
//! `aclnn<Op>` runs it once on a stream of this process. Status codes are aclnn's (161001 for
//! NULL, 161002 for a refused operand).

use super::*;
use gpupool_protocol::ops::{
    NPU_OP_ADD, NPU_OP_MATMUL, NPU_OP_MUL, NPU_OP_REDUCE_SUM, NPU_OP_SOFTMAX, NPU_REDUCE_KEEP_DIM, NpuScalar, NpuTensor,
};
use gpupool_shim::aclnn::{
    self as nn, aclDataType, aclFormat, aclIntArray, aclOpExecutor, aclScalar, aclTensor, aclnnStatus,
};

const NULLPTR: aclnnStatus = nn::ACLNN_ERR_PARAM_NULLPTR as aclnnStatus;
const INVALID: aclnnStatus = nn::ACLNN_ERR_PARAM_INVALID as aclnnStatus;

/// What this process holds through the operator API.
#[derive(Default)]
pub struct Ops {
    tensors: std::collections::HashSet<usize>,
    scalars: std::collections::HashSet<usize>,
    int_arrays: std::collections::HashSet<usize>,
    /// Executor handle -> (endpoint, the daemon's executor id, the operator, its context handle).
    execs: HashMap<u64, (usize, u64, u32, u64)>,
}

fn guard(f: impl FnOnce() -> aclnnStatus) -> aclnnStatus {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(nn::ACLNN_ERR_INNER as aclnnStatus)
}

fn dims<'a>(p: *const i64, n: u64) -> Option<&'a [i64]> {
    if n > 8 || (n > 0 && p.is_null()) {
        return None;
    }
    // SAFETY: `n` (at most 8) readable values at `p`, by aclCreateTensor's contract.
    Some(if n == 0 { &[] } else { unsafe { std::slice::from_raw_parts(p, n as usize) } })
}

/// `aclCreateTensor`: the description, kept in this process (NULL for NULL arrays or more than
/// 8 dimensions).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclCreateTensor(
    view_dims: *const i64,
    view_dims_num: u64,
    data_type: aclDataType,
    stride: *const i64,
    offset: i64,
    format: aclFormat,
    storage_dims: *const i64,
    storage_dims_num: u64,
    tensor_data: *mut c_void,
) -> *mut aclTensor {
    std::panic::catch_unwind(|| {
        let (Some(view), Some(strides), Some(storage)) =
            (dims(view_dims, view_dims_num), dims(stride, view_dims_num), dims(storage_dims, storage_dims_num))
        else {
            note_error(NULLPTR, "aclCreateTensor: NULL dimensions or more than 8");
            return std::ptr::null_mut();
        };
        let t = Box::new(NpuTensor {
            data: DevicePtr(tensor_data as u64),
            dtype: data_type.0 as u32,
            format: format.0 as u32,
            offset,
            view: view.to_vec(),
            strides: strides.to_vec(),
            storage: storage.to_vec(),
        });
        let p = Box::into_raw(t);
        let _ = client::with(|c| {
            c.acl.ops.tensors.insert(p as usize);
            Ok(())
        });
        p.cast()
    })
    .unwrap_or(std::ptr::null_mut())
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
) -> *mut aclTensor = nn::aclCreateTensor;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclDestroyTensor(tensor: *const aclTensor) -> aclnnStatus {
    guard(|| {
        if tensor.is_null() {
            return 0;
        }
        let known = client::with(|c| Ok(c.acl.ops.tensors.remove(&(tensor as usize)))).unwrap_or(false);
        if !known {
            return note_error(INVALID, "aclDestroyTensor: not a live tensor of this process");
        }
        // SAFETY: made by Box::into_raw in aclCreateTensor and removed from the live set once.
        drop(unsafe { Box::from_raw(tensor as *mut NpuTensor) });
        0
    })
}
const _: unsafe extern "C" fn(*const aclTensor) -> aclnnStatus = nn::aclDestroyTensor;

fn scalar_bytes(dtype: i32) -> Option<usize> {
    Some(match dtype {
        0 | 3 | 8 => 4,
        1 | 6 | 7 | 27 => 2,
        2 | 4 | 12 => 1,
        9..=11 => 8,
        _ => return None,
    })
}

/// `aclCreateScalar`: the value's bytes copied now.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclCreateScalar(value: *mut c_void, data_type: aclDataType) -> *mut aclScalar {
    std::panic::catch_unwind(|| {
        let Some(n) = scalar_bytes(data_type.0).filter(|_| !value.is_null()) else {
            note_error(NULLPTR, "aclCreateScalar: NULL value or an unknown data type");
            return std::ptr::null_mut();
        };
        let mut bits = [0u8; 8];
        // SAFETY: `n` readable bytes at `value` for a scalar of this type, by the API's contract.
        unsafe { std::ptr::copy_nonoverlapping(value.cast::<u8>(), bits.as_mut_ptr(), n) };
        let p = Box::into_raw(Box::new(NpuScalar { bits: u64::from_le_bytes(bits), dtype: data_type.0 as u32 }));
        let _ = client::with(|c| {
            c.acl.ops.scalars.insert(p as usize);
            Ok(())
        });
        p.cast()
    })
    .unwrap_or(std::ptr::null_mut())
}
const _: unsafe extern "C" fn(*mut c_void, aclDataType) -> *mut aclScalar = nn::aclCreateScalar;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclDestroyScalar(scalar: *const aclScalar) -> aclnnStatus {
    guard(|| {
        if scalar.is_null() {
            return 0;
        }
        let known = client::with(|c| Ok(c.acl.ops.scalars.remove(&(scalar as usize)))).unwrap_or(false);
        if !known {
            return note_error(INVALID, "aclDestroyScalar: not a live scalar of this process");
        }
        // SAFETY: made by Box::into_raw in aclCreateScalar and removed from the live set once.
        drop(unsafe { Box::from_raw(scalar as *mut NpuScalar) });
        0
    })
}
const _: unsafe extern "C" fn(*const aclScalar) -> aclnnStatus = nn::aclDestroyScalar;

/// Phase one: the operands' descriptions to the daemon in the current context.
fn prepare(
    name: &str,
    op: u32,
    tensors: &[*const aclTensor],
    alpha: Option<*const aclScalar>,
    param: i64,
    ws: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    if ws.is_null() || executor.is_null() || tensors.iter().any(|t| t.is_null()) || alpha.is_some_and(|a| a.is_null()) {
        return note_error(NULLPTR, &format!("{name}GetWorkspaceSize: a NULL argument"));
    }
    let r = client::with(|c| {
        Ok((|| -> Result<(u64, u64), aclnnStatus> {
            let (ctx, x) = current(c).map_err(|e| e as aclnnStatus)?;
            let mut ts = Vec::new();
            for &t in tensors {
                if !c.acl.ops.tensors.contains(&(t as usize)) {
                    return Err(INVALID);
                }
                // SAFETY: a live tensor this process made (in the set).
                ts.push(unsafe { (*(t as *const NpuTensor)).clone() });
            }
            let alpha = match alpha {
                Some(a) if c.acl.ops.scalars.contains(&(a as usize)) => {
                    // SAFETY: a live scalar this process made.
                    Some(unsafe { *(a as *const NpuScalar) })
                }
                Some(_) => return Err(INVALID),
                None => None,
            };
            let req = Request::NpuOpPrepare { ctx: x.id, op, tensors: ts, alpha, param };
            let answer::NpuExecutor { exec, workspace_bytes } =
                c.conn_at(x.ep).and_then(|conn| conn.ask(req)).map_err(|e| acl_code(c.note(e)))?;
            let h = new_handle(c);
            c.acl.ops.execs.insert(h, (x.ep, exec, op, ctx));
            Ok((h, workspace_bytes))
        })())
    });
    match r.unwrap_or(Err(INVALID)) {
        Ok((h, bytes)) => {
            // SAFETY: both out-pointers checked non-NULL above.
            unsafe {
                ws.write(bytes);
                executor.write(h as *mut aclOpExecutor);
            }
            0
        }
        Err(code) => note_error(code, &format!("{name}GetWorkspaceSize refused")),
    }
}

/// Phase two: the executor, once, on `stream` (an executor of another operator is refused and
/// stays for its own).
fn run(
    name: &str,
    op: u32,
    workspace: *mut c_void,
    ws_bytes: u64,
    executor: *mut aclOpExecutor,
    stream: aclrtStream,
) -> aclnnStatus {
    if executor.is_null() {
        return note_error(NULLPTR, &format!("{name}: the executor is NULL"));
    }
    let r = client::with(|c| {
        Ok((|| -> Result<(), aclnnStatus> {
            match c.acl.ops.execs.get(&(executor as u64)) {
                Some(&(_, _, o, _)) if o == op => {}
                _ => return Err(INVALID),
            }
            let (ep, exec, _, ctx) = c.acl.ops.execs.remove(&(executor as u64)).ok_or(INVALID)?;
            if c.acl.faulted.contains(&ctx) {
                return Err(nn::ACLNN_ERR_RUNTIME_ERROR as aclnnStatus);
            }
            let stream = stream_of(c, stream, ep)?;
            let req =
                Request::NpuOpRun { exec, workspace: DevicePtr(workspace as u64), workspace_bytes: ws_bytes, stream };
            match c.conn_at(ep).and_then(|conn| conn.call_ok(req)).map_err(|e| acl_code(c.note(e))) {
                // The launch was accepted; as on CANN the fault is the context's from now on,
                // reported by its next synchronize or call.
                Err(AICORE_EXCEPTION) => {
                    c.acl.faulted.insert(ctx);
                    Ok(())
                }
                r => r,
            }
        })())
    });
    match r.unwrap_or(Err(INVALID)) {
        Ok(()) => 0,
        Err(code) => note_error(code, &format!("{name} refused")),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnAddGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclTensor,
    alpha: *const aclScalar,
    out: *mut aclTensor,
    workspace_size: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard(|| prepare("aclnnAdd", NPU_OP_ADD, &[self_, other, out], Some(alpha), 0, workspace_size, executor))
}
const _: unsafe extern "C" fn(
    *const aclTensor,
    *const aclTensor,
    *const aclScalar,
    *mut aclTensor,
    *mut u64,
    *mut *mut aclOpExecutor,
) -> aclnnStatus = nn::aclnnAddGetWorkspaceSize;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnMulGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclTensor,
    out: *mut aclTensor,
    workspace_size: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard(|| prepare("aclnnMul", NPU_OP_MUL, &[self_, other, out], None, 0, workspace_size, executor))
}
const _: unsafe extern "C" fn(
    *const aclTensor,
    *const aclTensor,
    *mut aclTensor,
    *mut u64,
    *mut *mut aclOpExecutor,
) -> aclnnStatus = nn::aclnnMulGetWorkspaceSize;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnMatmulGetWorkspaceSize(
    self_: *const aclTensor,
    mat2: *const aclTensor,
    out: *mut aclTensor,
    cube_math_type: i8,
    workspace_size: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard(|| {
        prepare(
            "aclnnMatmul",
            NPU_OP_MATMUL,
            &[self_, mat2, out],
            None,
            cube_math_type.into(),
            workspace_size,
            executor,
        )
    })
}
const _: unsafe extern "C" fn(
    *const aclTensor,
    *const aclTensor,
    *mut aclTensor,
    i8,
    *mut u64,
    *mut *mut aclOpExecutor,
) -> aclnnStatus = nn::aclnnMatmulGetWorkspaceSize;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnSoftmaxGetWorkspaceSize(
    self_: *const aclTensor,
    dim: i64,
    out: *mut aclTensor,
    workspace_size: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard(|| prepare("aclnnSoftmax", NPU_OP_SOFTMAX, &[self_, out], None, dim, workspace_size, executor))
}
const _: unsafe extern "C" fn(*const aclTensor, i64, *mut aclTensor, *mut u64, *mut *mut aclOpExecutor) -> aclnnStatus =
    nn::aclnnSoftmaxGetWorkspaceSize;

/// `aclCreateIntArray`: the values copied now (NULL for NULL values or more than 2^20 of them).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclCreateIntArray(value: *const i64, size: u64) -> *mut aclIntArray {
    std::panic::catch_unwind(|| {
        if (value.is_null() && size > 0) || size > 1 << 20 {
            note_error(NULLPTR, "aclCreateIntArray: NULL values or more than 2^20");
            return std::ptr::null_mut();
        }
        // SAFETY: `size` readable values at `value`, by the API's contract.
        let v =
            if size == 0 { Vec::new() } else { unsafe { std::slice::from_raw_parts(value, size as usize) }.to_vec() };
        let p = Box::into_raw(Box::new(v));
        let _ = client::with(|c| {
            c.acl.ops.int_arrays.insert(p as usize);
            Ok(())
        });
        p.cast()
    })
    .unwrap_or(std::ptr::null_mut())
}
const _: unsafe extern "C" fn(*const i64, u64) -> *mut aclIntArray = nn::aclCreateIntArray;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclDestroyIntArray(array: *const aclIntArray) -> aclnnStatus {
    guard(|| {
        if array.is_null() {
            return 0;
        }
        let known = client::with(|c| Ok(c.acl.ops.int_arrays.remove(&(array as usize)))).unwrap_or(false);
        if !known {
            return note_error(INVALID, "aclDestroyIntArray: not a live array of this process");
        }
        // SAFETY: made by Box::into_raw in aclCreateIntArray and removed from the live set once.
        drop(unsafe { Box::from_raw(array as *mut Vec<i64>) });
        0
    })
}
const _: unsafe extern "C" fn(*const aclIntArray) -> aclnnStatus = nn::aclDestroyIntArray;

/// `aclGetViewShape`: the view's dimensions in memory the caller frees with `free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclGetViewShape(tensor: *const aclTensor, dims: *mut *mut i64, num: *mut u64) -> aclnnStatus {
    guard(|| {
        if tensor.is_null() || dims.is_null() || num.is_null() {
            return note_error(NULLPTR, "aclGetViewShape: a NULL argument");
        }
        let view = client::with(|c| {
            // SAFETY: a live tensor this process made (in the set).
            Ok(c.acl
                .ops
                .tensors
                .contains(&(tensor as usize))
                .then(|| unsafe { (*(tensor as *const NpuTensor)).view.clone() }))
        });
        let Ok(Some(view)) = view else {
            return note_error(INVALID, "aclGetViewShape: not a live tensor of this process");
        };
        // SAFETY: malloc of a positive size; freed by the caller, as CANN's documentation says.
        let p = unsafe { libc::malloc(view.len().max(1) * 8) }.cast::<i64>();
        if p.is_null() {
            return note_error(nn::ACLNN_ERR_INNER as aclnnStatus, "aclGetViewShape: out of host memory");
        }
        // SAFETY: room for view.len() values at p; both out-pointers checked non-NULL.
        unsafe {
            std::ptr::copy_nonoverlapping(view.as_ptr(), p, view.len());
            dims.write(p);
            num.write(view.len() as u64);
        }
        0
    })
}
const _: unsafe extern "C" fn(*const aclTensor, *mut *mut i64, *mut u64) -> aclnnStatus = nn::aclGetViewShape;

/// The reduced dimensions as the protocol's mask of self's dimensions: each normalised
/// (negative counts from the end), none twice; an empty array reduces every dimension.
fn reduce_mask(dims: &[i64], rank: usize) -> Option<i64> {
    if dims.is_empty() {
        return Some((1i64 << rank) - 1);
    }
    let mut mask = 0i64;
    for &d in dims {
        let d = if d < 0 { d + rank as i64 } else { d };
        if !(0..rank as i64).contains(&d) || mask & (1 << d) != 0 {
            return None;
        }
        mask |= 1 << d;
    }
    Some(mask)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aclnnReduceSumGetWorkspaceSize(
    self_: *const aclTensor,
    dim: *const aclIntArray,
    keep_dim: bool,
    dtype: aclDataType,
    out: *mut aclTensor,
    workspace_size: *mut u64,
    executor: *mut *mut aclOpExecutor,
) -> aclnnStatus {
    guard(|| {
        if dim.is_null() || self_.is_null() {
            return note_error(NULLPTR, "aclnnReduceSumGetWorkspaceSize: a NULL argument");
        }
        let mask = client::with(|c| {
            let (a, t) =
                (c.acl.ops.int_arrays.contains(&(dim as usize)), c.acl.ops.tensors.contains(&(self_ as usize)));
            // SAFETY: a live array and a live tensor this process made (both in their sets).
            Ok((a && t)
                .then(|| unsafe { reduce_mask(&*(dim as *const Vec<i64>), (*(self_ as *const NpuTensor)).view.len()) }))
        });
        let Ok(Some(Some(mask))) = mask else {
            return note_error(INVALID, "aclnnReduceSumGetWorkspaceSize: dimensions out of range or given twice");
        };
        let param = mask | if keep_dim { NPU_REDUCE_KEEP_DIM } else { 0 } | (i64::from(dtype.0 as u32) << 32);
        prepare("aclnnReduceSum", NPU_OP_REDUCE_SUM, &[self_, out], None, param, workspace_size, executor)
    })
}
const _: unsafe extern "C" fn(
    *const aclTensor,
    *const aclIntArray,
    bool,
    aclDataType,
    *mut aclTensor,
    *mut u64,
    *mut *mut aclOpExecutor,
) -> aclnnStatus = nn::aclnnReduceSumGetWorkspaceSize;

macro_rules! run_exports {
    ($($name:ident = $op:ident),*) => {$(
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            workspace: *mut c_void,
            workspace_size: u64,
            executor: *mut aclOpExecutor,
            stream: aclrtStream,
        ) -> aclnnStatus {
            guard(|| run(stringify!($name), $op, workspace, workspace_size, executor, stream))
        }
        const _: unsafe extern "C" fn(*mut c_void, u64, *mut aclOpExecutor, aclrtStream) -> aclnnStatus = nn::$name;
    )*};
}
run_exports!(
    aclnnAdd = NPU_OP_ADD,
    aclnnMul = NPU_OP_MUL,
    aclnnMatmul = NPU_OP_MATMUL,
    aclnnSoftmax = NPU_OP_SOFTMAX,
    aclnnReduceSum = NPU_OP_REDUCE_SUM
);
