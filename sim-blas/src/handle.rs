//! cuBLAS handles: the stream, pointer mode, math mode and workspace a `cublasHandle_t`
//! carries. A handle is a pointer to a [`Handle`]; every call looks it up in the live set
//! first, so a NULL, destroyed or made-up handle is NOT_INITIALIZED, never dereferenced.

use crate::status::{BlasResult, fail};
use gpupool_shim::cublas::cublasStatus_t as S;
use gpupool_shim::cuda::CUstream;
use std::sync::{Arc, Mutex};

#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// The `CUstream` the handle's work goes to (NULL: the legacy default stream).
    pub stream: usize,
    pub device_pointers: bool,
    pub math_mode: u32,
    pub workspace: (usize, usize),
}

impl Settings {
    pub fn stream(&self) -> CUstream {
        self.stream as CUstream
    }
}

pub struct Handle {
    pub settings: Mutex<Settings>,
}

/// Live handles of one kind (cuBLAS, or a cuBLASLt object type), by address.
pub struct Registry<T> {
    live: Mutex<Option<std::collections::HashMap<usize, Arc<T>>>>,
}

impl<T> Registry<T> {
    pub const fn new() -> Self {
        Registry { live: Mutex::new(None) }
    }

    /// Registers `value`; its address is the handle the application sees.
    pub fn insert(&self, value: T) -> usize {
        let value = Arc::new(value);
        let key = Arc::as_ptr(&value) as usize;
        self.live.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert_default().insert(key, value);
        key
    }

    pub fn get(&self, key: usize, status: S, what: &str) -> BlasResult<Arc<T>> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        match live.as_ref().and_then(|m| m.get(&key)) {
            Some(v) => Ok(v.clone()),
            None if key == 0 => fail(status, || format!("{what} is NULL")),
            None => fail(status, || format!("{what} {key:#x} is not live (destroyed, or never created)")),
        }
    }

    pub fn remove(&self, key: usize, status: S, what: &str) -> BlasResult<()> {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        match live.as_mut().and_then(|m| m.remove(&key)) {
            Some(_) => Ok(()),
            None => fail(status, || format!("{what} {key:#x} is not live")),
        }
    }
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Self::new()
    }
}

pub static HANDLES: Registry<Handle> = Registry::new();

/// The settings of a live handle, copied, for one call.
pub fn settings(h: usize) -> BlasResult<Settings> {
    let handle = HANDLES.get(h, S::CUBLAS_STATUS_NOT_INITIALIZED, "cublasHandle_t")?;
    Ok(*handle.settings.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Changes a live handle's settings.
pub fn update(h: usize, f: impl FnOnce(&mut Settings)) -> BlasResult<()> {
    let handle = HANDLES.get(h, S::CUBLAS_STATUS_NOT_INITIALIZED, "cublasHandle_t")?;
    f(&mut handle.settings.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(())
}
