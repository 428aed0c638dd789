//! Stream-ordered memory pools (`cuMemPoolCreate`, `cuMemAllocFromPoolAsync`, the
//! per-device default and current pools), with the driver's documented bookkeeping
//! (`gpupool_abi::mempool`: reuse policies, release threshold, maxSize, attributes) over
//! blocks of the simulated device memory.
//!
//! A block lives in the address space of the context that allocated it (every pointer
//! of the simulator names its context), so a block is reused only by allocations made
//! through that same context; the blocks of a destroyed context leave the pool with it.
//!
//! A pool created with `handleTypes` POSIX_FILE_DESCRIPTOR is shared with other processes
//! (sim/src/api/mempool.rs): its descriptor names the exporting process and pool, and an
//! exported pointer is the block's IPC export ([`crate::memory::ipc`]), mapped by the
//! importer through an imported pool, which holds no blocks and does not allocate.

use crate::context::Context;
use crate::driver::Driver;
use crate::error::{CuResult, fail};
use crate::handles::{Kind, Registry};
use crate::stream::Stream;
use gpupool_abi::mempool::{Block, Policy, Room};
use gpupool_shim::cuda::{
    CUmemAllocationHandleType, CUmemAllocationType, CUmemLocationType, CUmemPool_attribute as A, CUmemPoolProps,
    CUresult,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

pub use gpupool_abi::mempool::is_u64_attribute;

/// The context a block lives in (the same context is the same `Arc`).
struct Ctx(Weak<Context>);

impl PartialEq for Ctx {
    fn eq(&self, other: &Ctx) -> bool {
        Weak::ptr_eq(&self.0, &other.0)
    }
}

fn alive(b: &Block<Ctx>) -> bool {
    b.ctx.0.upgrade().is_some_and(|c| !c.is_destroyed())
}

/// Gives blocks' memory back to the device.
fn release(blocks: Vec<Block<Ctx>>) {
    for b in blocks {
        if let Some(ctx) = b.ctx.0.upgrade() {
            let _ = ctx.memory.free(b.base);
        }
    }
}

struct State {
    policy: Policy<Ctx>,
    destroyed: bool,
}

impl State {
    /// Forgets the blocks of destroyed contexts (their memory went with the context).
    fn prune(&mut self) {
        self.policy.retain(alive);
    }

    /// Releases idle blocks, largest first, until at most `keep` bytes are reserved.
    fn release_down_to(&mut self, keep: u64) {
        self.prune();
        release(self.policy.shed_down_to(keep));
    }
}

pub struct MemPool {
    pub device: i32,
    pub is_default: bool,
    /// Created with `handleTypes` POSIX_FILE_DESCRIPTOR.
    pub exportable: bool,
    /// Imported: (the exporting process, its pool handle).
    pub imported: Option<(u32, u64)>,
    state: Mutex<State>,
}

impl MemPool {
    fn new(device: i32, is_default: bool, max_size: u64) -> MemPool {
        MemPool {
            device,
            is_default,
            exportable: false,
            imported: None,
            state: Mutex::new(State { policy: Policy::new(max_size), destroyed: false }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allocates `size` bytes for work on `stream` of `ctx`: an idle block of this
    /// context that the reuse policies allow, else a new block reserved from the device.
    pub fn alloc(self: &Arc<Self>, ctx: &Arc<Context>, stream: &Stream, size: u64) -> CuResult<u64> {
        if size == 0 {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "allocation of 0 bytes".into());
        }
        if self.imported.is_some() {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || "an imported pool does not allocate".into());
        }
        let mut st = self.state();
        st.prune();
        let me = Ctx(Arc::downgrade(ctx));
        let block = match st.policy.take_reusable(&me, stream.handle(), size) {
            Some(b) => b,
            None => {
                match st.policy.room_for(size) {
                    // Idle memory makes room before the pool's own limit refuses.
                    Room::Reserve(shed) => release(shed),
                    Room::OverMaxSize { asked, reserved, max_size } => {
                        return fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, || {
                            format!("pool: {asked} bytes asked, {reserved} of its maxSize {max_size} reserved")
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
                Block { ctx: me, base: a.base, size: a.size, freed_on: 0 }
            }
        };
        let base = block.base;
        st.policy.insert_used(block);
        drop(st);
        owners().insert(base, Arc::clone(self));
        Ok(base)
    }

    /// Returns the block at `base` to the pool (its free was reached on stream `s`); a
    /// destroyed pool gives it back to the device at once.
    fn give_back(&self, base: u64, s: u64) {
        let mut st = self.state();
        if st.destroyed {
            let b = st.policy.take_used(base);
            drop(st);
            release(b.into_iter().collect());
            return;
        }
        st.policy.give_back(base, s);
    }

    pub fn trim_to(&self, keep: u64) {
        self.state().release_down_to(keep);
    }

    /// What a synchronization does: above its release threshold, the pool gives idle
    /// memory back down to it.
    fn release_over_threshold(&self) {
        let mut st = self.state();
        st.prune();
        release(st.policy.shed_over_threshold());
    }

    pub fn get_attribute(&self, attr: A) -> CuResult<u64> {
        let mut st = self.state();
        st.prune();
        st.policy.get_attribute(attr).or_else(|why| fail(CUresult::CUDA_ERROR_INVALID_VALUE, || why))
    }

    /// `value` is the attribute's int (reuse policies) or cuuint64_t, read by the caller.
    pub fn set_attribute(&self, attr: A, value: u64) -> CuResult<()> {
        let mut st = self.state();
        st.prune();
        st.policy.set_attribute(attr, value).or_else(|why| fail(CUresult::CUDA_ERROR_INVALID_VALUE, || why))
    }
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
    if pool.imported.is_some() {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            "an imported pool cannot be a device's current pool".into()
        });
    }
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

/// `cuMemPoolCreate`: device-located, pinned pools, shareable as POSIX file descriptors or
/// not at all.
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
    let exportable = match props.handleTypes {
        CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE => false,
        CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR => true,
        other => {
            return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || {
                format!("handleTypes {:#x}: only POSIX file descriptors are simulated", other.0)
            });
        }
    };
    let device = props.location.id;
    if driver.device(device).is_err() {
        return fail(CUresult::CUDA_ERROR_INVALID_DEVICE, || format!("location id {device} is not a device"));
    }
    let pool = MemPool { exportable, ..MemPool::new(device, false, props.maxSize as u64) };
    Ok(pools().registry.insert(Arc::new(pool)))
}

/// `cuMemPoolImportFromShareableHandle`: a pool of this process standing for pool `handle` of
/// process `pid`, on `device`.
pub fn import(device: i32, pid: u32, handle: u64) -> u64 {
    let pool = MemPool { imported: Some((pid, handle)), ..MemPool::new(device, false, 0) };
    pools().registry.insert(Arc::new(pool))
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
        st.policy.is_used(ptr)
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
