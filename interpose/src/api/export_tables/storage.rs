//! CONTEXT_LOCAL_STORAGE: the runtime keeps its per-context state (its context object,
//! the modules it loaded there) under a key in the driver, with a destructor the driver
//! calls when the context is destroyed or a primary context reset, so the runtime forgets
//! state that no longer exists on the device.

use crate::util::R;
use gpupool_shim::cuda::{CUcontext, CUresult};
use std::collections::HashMap;
use std::os::raw::c_void;
use std::sync::Mutex;

pub type Destructor = extern "C" fn(CUcontext, *mut c_void, *mut c_void);

struct Entry {
    value: usize,
    dtor: Option<Destructor>,
}

/// (context handle, key) -> value.
static STORE: Mutex<Option<HashMap<(u64, usize), Entry>>> = Mutex::new(None);

fn with_store<T>(f: impl FnOnce(&mut HashMap<(u64, usize), Entry>) -> T) -> T {
    let mut g = STORE.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

/// NULL means the calling thread's current context, which must exist.
fn context_of(ctx: CUcontext) -> R<u64> {
    if !ctx.is_null() {
        return Ok(ctx as u64);
    }
    let cur = crate::api::context::current_handle()?;
    if cur.is_null() { Err(CUresult::CUDA_ERROR_INVALID_CONTEXT) } else { Ok(cur as u64) }
}

/// Slot 0: stores `value` under (ctx, key), replacing a previous value.
pub fn put(ctx: CUcontext, key: *mut c_void, value: *mut c_void, dtor: Option<Destructor>) -> R<()> {
    let h = context_of(ctx)?;
    with_store(|s| s.insert((h, key as usize), Entry { value: value as usize, dtor }));
    Ok(())
}

/// Slot 1: forgets (ctx, key) without calling its destructor.
pub fn delete(ctx: CUcontext, key: *mut c_void) -> R<()> {
    let h = context_of(ctx)?;
    with_store(|s| s.remove(&(h, key as usize)));
    Ok(())
}

/// Slot 2: the value under (ctx, key); none stored is CUDA_ERROR_INVALID_HANDLE (the
/// runtime then creates its state and puts it).
pub fn get(value: *mut *mut c_void, ctx: CUcontext, key: *mut c_void) -> R<()> {
    crate::api::export::require(value)?;
    let h = context_of(ctx)?;
    let v = with_store(|s| s.get(&(h, key as usize)).map(|e| e.value)).ok_or(CUresult::CUDA_ERROR_INVALID_HANDLE)?;
    crate::util::out(value, v as *mut c_void)
}

/// The context `h` was destroyed or reset: every value stored under it is forgotten and its
/// destructor called (outside the lock: a destructor may call back into the table).
pub(crate) fn context_reset(h: u64) {
    let gone: Vec<((u64, usize), Entry)> = with_store(|s| {
        let keys: Vec<(u64, usize)> = s.keys().filter(|k| k.0 == h).copied().collect();
        keys.into_iter().filter_map(|k| s.remove(&k).map(|e| (k, e))).collect()
    });
    for ((ctx, key), e) in gone {
        if let Some(d) = e.dtor {
            crate::api::export_tables::trace(format_args!(
                "CONTEXT_LOCAL_STORAGE destructor {d:?}(ctx={ctx:#x}, key={key:#x}, value={:#x})",
                e.value
            ));
            d(ctx as CUcontext, key as *mut c_void, e.value as *mut c_void);
        }
    }
}
