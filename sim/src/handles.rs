//! Opaque handles: what the driver hands out as `CUcontext`, `CUstream`, `CUevent`,
//! `CUmodule`, `CUfunction` and `nvmlDevice_t`.
//!
//! A handle is never a pointer to our memory: it is a kind tag plus a never-reused
//! id, looked up in a registry on every call. A stale, forged or wrong-kind handle is
//! therefore a lookup miss (an error code), not a use-after-free.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

/// Handles live in a range no allocator hands out to the host (above the canonical
/// user half is not possible, so: a high, unmapped-by-convention region), and each
/// kind has its own sub-range so a stream handle is never accepted as an event.
const HANDLE_BASE: u64 = 0x7e00_0000_0000;
const KIND_SHIFT: u32 = 36;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum Kind {
    Context = 1,
    Stream = 2,
    /// Memory pools take a kind far from the others', like arrays (see below).
    MemPool = 20,
    Event = 3,
    Module = 4,
    Function = 5,
    NvmlDevice = 6,
    Graph = 7,
    GraphExec = 8,
    // Arrays and texture objects take kinds far from the others', so that kinds added
    // for other families never collide with them.
    Array = 24,
    MipmappedArray = 25,
    TexObject = 26,
    SurfObject = 27,
}

pub struct Registry<T> {
    kind: Kind,
    next: AtomicU64,
    /// foldhash: every call looks its handles up here, and SipHash was most of the lookup.
    live: RwLock<HashMap<u64, Arc<T>, foldhash::fast::RandomState>>,
}

impl<T> Registry<T> {
    pub fn new(kind: Kind) -> Self {
        Registry { kind, next: AtomicU64::new(1), live: RwLock::new(HashMap::default()) }
    }

    fn encode(&self, id: u64) -> u64 {
        HANDLE_BASE + ((self.kind as u64) << KIND_SHIFT) + id * 16
    }

    fn decode(&self, handle: u64) -> Option<u64> {
        let base = HANDLE_BASE + ((self.kind as u64) << KIND_SHIFT);
        let off = handle.checked_sub(base)?;
        (off % 16 == 0 && off < (1 << KIND_SHIFT)).then_some(off / 16)
    }

    /// Registers an object; returns its handle value.
    pub fn insert(&self, value: Arc<T>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.live.write().unwrap_or_else(|e| e.into_inner()).insert(id, value);
        self.encode(id)
    }

    pub fn get(&self, handle: u64) -> Option<Arc<T>> {
        let id = self.decode(handle)?;
        self.live.read().unwrap_or_else(|e| e.into_inner()).get(&id).cloned()
    }

    /// Replaces the object behind a live handle (publishing a fully built object
    /// under a handle that had to exist before it was complete).
    pub fn replace(&self, handle: u64, value: Arc<T>) {
        if let Some(id) = self.decode(handle)
            && let Some(slot) = self.live.write().unwrap_or_else(|e| e.into_inner()).get_mut(&id)
        {
            *slot = value;
        }
    }

    pub fn remove(&self, handle: u64) -> Option<Arc<T>> {
        let id = self.decode(handle)?;
        self.live.write().unwrap_or_else(|e| e.into_inner()).remove(&id)
    }

    /// Removes every object the predicate selects (used when a context dies).
    pub fn remove_where(&self, mut pred: impl FnMut(&T) -> bool) -> Vec<Arc<T>> {
        let mut live = self.live.write().unwrap_or_else(|e| e.into_inner());
        let ids: Vec<u64> = live.iter().filter(|(_, v)| pred(v)).map(|(k, _)| *k).collect();
        ids.into_iter().filter_map(|id| live.remove(&id)).collect()
    }

    /// The live objects the predicate selects, with their handles.
    pub fn select(&self, mut pred: impl FnMut(&T) -> bool) -> Vec<(u64, Arc<T>)> {
        let live = self.live.read().unwrap_or_else(|e| e.into_inner());
        live.iter().filter(|(_, v)| pred(v)).map(|(k, v)| (self.encode(*k), v.clone())).collect()
    }

    /// Whether any live object satisfies the predicate.
    pub fn any(&self, pred: impl FnMut(&Arc<T>) -> bool) -> bool {
        self.live.read().unwrap_or_else(|e| e.into_inner()).values().any(pred)
    }

    pub fn len(&self) -> usize {
        self.live.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_forged_and_foreign_handles_miss() {
        let streams: Registry<u32> = Registry::new(Kind::Stream);
        let events: Registry<u32> = Registry::new(Kind::Event);
        let h = streams.insert(Arc::new(7));
        assert_eq!(*streams.get(h).unwrap(), 7);
        assert!(events.get(h).is_none(), "a stream handle is not an event");
        assert!(streams.get(h + 1).is_none(), "misaligned");
        assert!(streams.get(0).is_none() && streams.get(u64::MAX).is_none());
        streams.remove(h);
        assert!(streams.get(h).is_none(), "stale");
        let h2 = streams.insert(Arc::new(8));
        assert_ne!(h, h2, "ids are never reused");
    }
}
