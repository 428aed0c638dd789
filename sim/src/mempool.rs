//! Stream-ordered memory pools (`cuMemPoolCreate`, `cuMemAllocFromPoolAsync`, the
//! per-device default and current pools), with the driver's documented bookkeeping.
//!
//! A pool reserves device memory in blocks, one per allocation it could not serve from
//! what it holds. A block freed with `cuMemFreeAsync` goes back to the pool when its
//! stream reaches the free, and stays reserved (charged to the device) for reuse: the
//! pool gives memory back only when a synchronization (stream, event, context) finds it
//! holding more than its release threshold, when it is trimmed (`cuMemPoolTrimTo`), or
//! when an allocation would otherwise fail. Reuse follows the pool's policies: a block
//! is always reusable on the stream that freed it; on another stream only with
//! `REUSE_ALLOW_OPPORTUNISTIC` or `REUSE_ALLOW_INTERNAL_DEPENDENCIES` (the simulator
//! does not track event dependencies between streams, so `REUSE_FOLLOW_EVENT_DEPENDENCIES`
//! alone never allows it: it only reuses less than the driver would, never unsafely).
//!
//! A block lives in the address space of the context that allocated it (every pointer
//! of the simulator names its context), so a block is reused only by allocations made
//! through that same context; the blocks of a destroyed context leave the pool with it.

use crate::context::Context;
use crate::driver::Driver;
use crate::error::{CuResult, fail};
use crate::handles::{Kind, Registry};
use crate::stream::Stream;
use gpupool_shim::cuda::{
    CUmemAllocationHandleType, CUmemAllocationType, CUmemLocationType, CUmemPool_attribute as A, CUmemPoolProps,
    CUresult,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// One block of device memory a pool reserved.
struct Block {
    ctx: Weak<Context>,
    base: u64,
    size: u64,
    /// The stream whose free returned it (0 while it is in use).
    freed_on: u64,
}

impl Block {
    fn alive(&self) -> bool {
        self.ctx.upgrade().is_some_and(|c| !c.is_destroyed())
    }

    /// Gives the block's memory back to the device.
    fn release(self) {
        if let Some(ctx) = self.ctx.upgrade() {
            let _ = ctx.memory.free(self.base);
        }
    }
}

struct State {
    release_threshold: u64,
    follow_event_deps: bool,
    opportunistic: bool,
    internal_deps: bool,
    idle: Vec<Block>,
    used: HashMap<u64, Block>,
    reserved_high: u64,
    used_high: u64,
    destroyed: bool,
}

impl State {
    /// Forgets the blocks of destroyed contexts (their memory went with the context).
    fn prune(&mut self) {
        self.idle.retain(Block::alive);
        self.used.retain(|_, b| b.alive());
    }

    fn used(&self) -> u64 {
        self.used.values().map(|b| b.size).sum()
    }

    fn reserved(&self) -> u64 {
        self.used() + self.idle.iter().map(|b| b.size).sum::<u64>()
    }

    /// Releases idle blocks, largest first, until at most `keep` bytes are reserved.
    fn release_down_to(&mut self, keep: u64) {
        self.prune();
        self.idle.sort_by_key(|b| b.size);
        let mut reserved = self.reserved();
        while reserved > keep {
            let Some(b) = self.idle.pop() else { break };
            reserved -= b.size;
            b.release();
        }
    }
}

pub struct MemPool {
    pub device: i32,
    pub is_default: bool,
    /// `maxSize` of the properties (0: no limit but the device's).
    max_size: u64,
    state: Mutex<State>,
}

impl MemPool {
    fn new(device: i32, is_default: bool, max_size: u64) -> MemPool {
        MemPool {
            device,
            is_default,
            max_size,
            state: Mutex::new(State {
                release_threshold: 0,
                follow_event_deps: true,
                opportunistic: true,
                internal_deps: true,
                idle: Vec::new(),
                used: HashMap::new(),
                reserved_high: 0,
                used_high: 0,
                destroyed: false,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allocates `size` bytes for work on `stream` of `ctx`: an idle block of this
    /// context that the reuse policies allow (the smallest that fits, at most twice the
    /// size asked), else a new block reserved from the device.
    pub fn alloc(self: &Arc<Self>, ctx: &Arc<Context>, stream: &Stream, size: u64) -> CuResult<u64> {
        if size == 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "allocation of 0 bytes".into());
        }
        let mut st = self.state();
        st.prune();
        let me = ctx.handle();
        let s = stream.handle();
        let any_stream = st.opportunistic || st.internal_deps;
        let fit = st
            .idle
            .iter()
            .enumerate()
            .filter(|(_, b)| b.size >= size && b.size / 2 <= size)
            .filter(|(_, b)| b.ctx.upgrade().is_some_and(|c| c.handle() == me))
            .filter(|(_, b)| b.freed_on == s || any_stream)
            .min_by_key(|(_, b)| b.size)
            .map(|(i, _)| i);
        let block = match fit {
            Some(i) => st.idle.swap_remove(i),
            None => {
                if self.max_size != 0 && st.reserved().saturating_add(size) > self.max_size {
                    // Idle memory makes room before the pool's own limit refuses.
                    st.release_down_to(self.max_size.saturating_sub(size));
                    if st.reserved().saturating_add(size) > self.max_size {
                        let reserved = st.reserved();
                        return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || {
                            format!("pool: {size} bytes asked, {reserved} of its maxSize {} reserved", self.max_size)
                        });
                    }
                }
                let a = match ctx.memory.alloc(size) {
                    Ok(a) => a,
                    Err(_) => {
                        // The driver gives the pool's idle memory back before it fails.
                        st.release_down_to(0);
                        ctx.memory.alloc(size)?
                    }
                };
                Block { ctx: Arc::downgrade(ctx), base: a.base, size: a.size, freed_on: 0 }
            }
        };
        let base = block.base;
        st.used.insert(base, Block { freed_on: 0, ..block });
        let (reserved, used) = (st.reserved(), st.used());
        st.reserved_high = st.reserved_high.max(reserved);
        st.used_high = st.used_high.max(used);
        drop(st);
        owners().insert(base, Arc::clone(self));
        Ok(base)
    }

    /// Returns the block at `base` to the pool (its free was reached on stream `s`); a
    /// destroyed pool gives it back to the device at once.
    fn give_back(&self, base: u64, s: u64) {
        let mut st = self.state();
        let Some(mut b) = st.used.remove(&base) else { return };
        if st.destroyed {
            drop(st);
            b.release();
            return;
        }
        b.freed_on = s;
        st.idle.push(b);
    }

    pub fn trim_to(&self, keep: u64) {
        self.state().release_down_to(keep);
    }

    /// What a synchronization does: above its release threshold, the pool gives idle
    /// memory back down to it.
    fn release_over_threshold(&self) {
        let mut st = self.state();
        let threshold = st.release_threshold;
        if st.reserved() > threshold {
            st.release_down_to(threshold);
        }
    }

    pub fn get_attribute(&self, attr: A) -> CuResult<u64> {
        let mut st = self.state();
        st.prune();
        Ok(match attr {
            A::CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES => st.follow_event_deps as u64,
            A::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC => st.opportunistic as u64,
            A::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES => st.internal_deps as u64,
            A::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD => st.release_threshold,
            A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT => st.reserved(),
            A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH => st.reserved_high,
            A::CU_MEMPOOL_ATTR_USED_MEM_CURRENT => st.used(),
            A::CU_MEMPOOL_ATTR_USED_MEM_HIGH => st.used_high,
            other => return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("unknown pool attribute {}", other.0)),
        })
    }

    /// `value` is the attribute's int (reuse policies) or cuuint64_t, read by the caller.
    pub fn set_attribute(&self, attr: A, value: u64) -> CuResult<()> {
        let mut st = self.state();
        st.prune();
        match attr {
            A::CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES => st.follow_event_deps = value != 0,
            A::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC => st.opportunistic = value != 0,
            A::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES => st.internal_deps = value != 0,
            A::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD => st.release_threshold = value,
            // The high-water marks may only be reset (to the current value) by setting 0.
            A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH | A::CU_MEMPOOL_ATTR_USED_MEM_HIGH if value != 0 => {
                return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                    "a high-water mark can only be reset with 0".into()
                });
            }
            A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH => st.reserved_high = st.reserved(),
            A::CU_MEMPOOL_ATTR_USED_MEM_HIGH => st.used_high = st.used(),
            other => {
                return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                    format!("pool attribute {} is not settable", other.0)
                });
            }
        }
        Ok(())
    }
}

/// Whether an attribute's value is a 64-bit `cuuint64_t` (otherwise an `int`).
pub fn is_u64_attribute(attr: A) -> bool {
    !matches!(
        attr,
        A::CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES
            | A::CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC
            | A::CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES
    )
}

/// Process-wide pool state: the handles, each device's default and current pool, and
/// which pool each live pool allocation came from.
struct Pools {
    registry: Registry<MemPool>,
    /// device ordinal -> (default pool handle, current pool handle)
    devices: Mutex<HashMap<i32, (u64, u64)>>,
}

fn pools() -> &'static Pools {
    static P: OnceLock<Pools> = OnceLock::new();
    P.get_or_init(|| Pools { registry: Registry::new(Kind::MemPool), devices: Mutex::new(HashMap::new()) })
}

/// Pool allocations by base address (device pointers are unique across contexts).
struct Owners(Mutex<HashMap<u64, Arc<MemPool>>>);

impl Owners {
    fn insert(&self, base: u64, pool: Arc<MemPool>) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(base, pool);
    }
    fn remove(&self, base: u64) -> Option<Arc<MemPool>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&base)
    }
    fn get(&self, base: u64) -> Option<Arc<MemPool>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(&base).cloned()
    }
}

fn owners() -> &'static Owners {
    static O: OnceLock<Owners> = OnceLock::new();
    O.get_or_init(|| Owners(Mutex::new(HashMap::new())))
}

pub fn lookup(handle: u64) -> CuResult<Arc<MemPool>> {
    match pools().registry.get(handle) {
        Some(p) => Ok(p),
        None => fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("{handle:#x} is not a live memory pool")),
    }
}

/// (default, current) pool handles of a device, its default pool made on first use.
fn device_pools(driver: &Driver, device: i32) -> CuResult<(u64, u64)> {
    driver.device(device)?;
    let p = pools();
    let mut d = p.devices.lock().unwrap_or_else(|e| e.into_inner());
    Ok(*d.entry(device).or_insert_with(|| {
        let h = p.registry.insert(Arc::new(MemPool::new(device, true, 0)));
        (h, h)
    }))
}

pub fn default_pool(driver: &Driver, device: i32) -> CuResult<u64> {
    device_pools(driver, device).map(|(d, _)| d)
}

pub fn current_pool(driver: &Driver, device: i32) -> CuResult<u64> {
    device_pools(driver, device).map(|(_, c)| c)
}

pub fn set_current_pool(driver: &Driver, device: i32, handle: u64) -> CuResult<()> {
    let pool = lookup(handle)?;
    device_pools(driver, device)?;
    if pool.device != device {
        return fail(CUresult::CUDA_ERROR_INVALID_DEVICE, || {
            format!("pool {handle:#x} is on device {}, not device {device}", pool.device)
        });
    }
    let mut d = pools().devices.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = d.get_mut(&device) {
        e.1 = handle;
    }
    Ok(())
}

/// `cuMemPoolCreate`: device-located, pinned pools; no shareable handle types (pools are
/// not exported between processes by the simulator).
pub fn create(driver: &Driver, props: &CUmemPoolProps) -> CuResult<u64> {
    if props.allocType != CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("allocType {} is not PINNED", props.allocType.0));
    }
    match props.location.type_ {
        CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE => {}
        CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST
        | CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA
        | CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT => {
            return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || "host-located memory pools are not simulated".into());
        }
        other => return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("location type {} is invalid", other.0)),
    }
    if props.handleTypes != CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE {
        return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || {
            format!("handleTypes {:#x}: exportable pools are not simulated", props.handleTypes.0)
        });
    }
    let device = props.location.id;
    if driver.device(device).is_err() {
        return fail(CUresult::CUDA_ERROR_INVALID_DEVICE, || format!("location id {device} is not a device"));
    }
    Ok(pools().registry.insert(Arc::new(MemPool::new(device, false, props.maxSize as u64))))
}

/// `cuMemPoolDestroy`: idle memory goes back now, memory still allocated when it is freed.
/// A device whose current pool it was gets its default pool back.
pub fn destroy(handle: u64) -> CuResult<()> {
    let pool = lookup(handle)?;
    if pool.is_default {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            "a device's default memory pool cannot be destroyed".into()
        });
    }
    pools().registry.remove(handle);
    for e in pools().devices.lock().unwrap_or_else(|e| e.into_inner()).values_mut() {
        if e.1 == handle {
            e.1 = e.0;
        }
    }
    let mut st = pool.state();
    st.destroyed = true;
    st.release_down_to(0);
    Ok(())
}

/// The pool an allocation came from, if it did (`CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE`).
pub fn pool_of(ptr: u64) -> Option<u64> {
    let pool = owners().get(ptr)?;
    let p = pools();
    let d = p.devices.lock().unwrap_or_else(|e| e.into_inner());
    if pool.is_default {
        return d.get(&pool.device).map(|e| e.0);
    }
    drop(d);
    let target = Arc::as_ptr(&pool);
    p.registry.select(|q| std::ptr::eq(q, target)).first().map(|(h, _)| *h)
}

/// The pool of the live pool allocation at `ptr`, taken out of the allocation map: the
/// caller frees it with [`free`]. `None` for any other pointer (a stale entry, left by a
/// destroyed context, is dropped).
pub fn take(ptr: u64) -> Option<Arc<MemPool>> {
    let pool = owners().remove(ptr)?;
    let live = {
        let mut st = pool.state();
        st.prune();
        st.used.contains_key(&ptr)
    };
    live.then_some(pool)
}

/// Returns the pool allocation at `ptr` to `pool` (its free was reached on stream `s`).
pub fn free(pool: &MemPool, ptr: u64, s: u64) {
    pool.give_back(ptr, s);
}

/// Called by every synchronization (stream, event, context): pools holding more than
/// their release threshold give idle memory back.
pub fn on_synchronize() {
    for (_, pool) in pools().registry.select(|_| true) {
        pool.release_over_threshold();
    }
}
