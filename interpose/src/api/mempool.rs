//! Stream-ordered memory pools through the pool (`cuMemPoolCreate`, `cuMemAllocFromPoolAsync`,
//! `cuMemAllocAsync`, the per-device default and current pools, release threshold, trimming,
//! reuse policies), kept in this process over the daemon's allocations.
//!
//! Every block a pool reserves is one `MemAlloc` in the daemon, so the tenant's ledger counts
//! exactly what the pools hold, used or kept for reuse: a pool that keeps freed blocks (below
//! its release threshold) keeps them charged, and releasing or trimming them is a `MemFree`
//! that gives the quota back. A client that dies leaves nothing behind, since the daemon frees
//! its allocations at the session's end. The pool's bookkeeping is the driver's documented
//! one, kept for the simulator too (`gpupool_abi::mempool`): a free returns the block to its
//! pool (here once its stream got there: the free synchronizes the stream); a synchronization
//! (stream, event, context) finds pools above their release threshold and releases idle
//! blocks down to it; an allocation the quota refuses first releases the pool's idle blocks.
//!
//! Pools created with `handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR` are shared with
//! other processes of the same tenant. The shareable handle is a sealed memfd holding a tag and
//! the daemon's 128-bit secret for the pool (pool-daemon/src/daemon/ipc.rs): the program passes
//! it itself (SCM_RIGHTS), and the daemon lets only a session of the pool's tenant import it, so
//! the descriptor leaking to another tenant gives nothing. `CUmemPoolPtrExportData` holds a tag
//! and the daemon's secret for one allocation of the pool, importable only through the imported
//! pool. An imported pointer is the exporter's allocation, counted once, in the exporter's
//! ledger; `cuMemFree`/`cuMemFreeAsync` in the importer close it; the exporter's free (the block
//! going back to its pool) ends every importer's view, and the session's end closes them all.
//! An imported pool does not allocate (as NVIDIA documents).

use super::DefaultStream;
use crate::client;
use crate::util::{R, log};
use gpupool_abi::mempool::{Policy, Room, is_u64_attribute as is_u64};
use gpupool_protocol::ops::answer;
use gpupool_protocol::{DevicePtr, Request};
use gpupool_shim::cuda::{
    CUdevice, CUdeviceptr, CUmemAllocationHandleType, CUmemAllocationType, CUmemLocationType, CUmemPool_attribute as A,
    CUmemPoolProps, CUmemPoolPtrExportData, CUmemoryPool, CUresult, CUstream,
};
use std::collections::{HashMap, HashSet};
use std::os::raw::{c_int, c_ulonglong, c_void};
use std::sync::Mutex;

/// Pool handles: opaque values in a range of their own, looked up in [`POOLS`].
const HANDLE_BASE: u64 = 0x7d00_0000_0000;

/// A block's context handle.
type Block = gpupool_abi::mempool::Block<u64>;

/// Tags a pool's shareable descriptor, and a pointer's export data; the secret follows.
const POOL_MAGIC: &[u8; 8] = b"GPPOOLX1";
const PTR_MAGIC: &[u8; 8] = b"GPPOOLP1";
const POSIX_FD: u32 = CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.0;

struct Pool {
    device: i32,
    is_default: bool,
    policy: Policy<u64>,
    /// Created with `handleTypes` POSIX_FD.
    exportable: bool,
    /// Imported from another process: it holds no blocks and does not allocate.
    imported: bool,
    /// The daemon's secret for the pool: once exported, or the one it was imported with.
    secret: Option<[u8; 16]>,
    /// Pointers of this pool exported (their export ends when they are freed).
    exported: HashSet<u64>,
}

impl Pool {
    fn new(device: i32, is_default: bool, max_size: u64) -> Pool {
        Pool {
            device,
            is_default,
            policy: Policy::new(max_size),
            exportable: false,
            imported: false,
            secret: None,
            exported: HashSet::new(),
        }
    }
}

/// A pointer imported from another process's pool.
struct ImportedPtr {
    pool: u64,
    /// The context handle it was imported in.
    ctx: u64,
    /// Times imported, each undone by a free.
    count: u32,
}

#[derive(Default)]
struct Pools {
    next: u64,
    pools: HashMap<u64, Pool>,
    /// client device ordinal -> (default pool, current pool)
    devices: HashMap<i32, (u64, u64)>,
    /// Live pool allocations: base -> pool handle.
    owners: HashMap<u64, u64>,
    /// Allocations of destroyed pools, still live: base -> context handle (given back to the
    /// daemon when freed).
    orphans: HashMap<u64, u64>,
    /// Pointers imported from other processes: base -> import.
    imported: HashMap<u64, ImportedPtr>,
}

static POOLS: Mutex<Option<Pools>> = Mutex::new(None);

/// Runs `f` on the pool state. Never call into the client (a round trip) from `f`: the
/// client's lock is taken while this one is not, and blocks are freed after.
fn with_pools<T>(f: impl FnOnce(&mut Pools) -> T) -> T {
    let mut g = POOLS.lock().unwrap_or_else(|e| e.into_inner());
    f(g.get_or_insert_with(Pools::default))
}

impl Pools {
    fn insert(&mut self, pool: Pool) -> u64 {
        self.next += 1;
        let h = HANDLE_BASE + self.next * 16;
        self.pools.insert(h, pool);
        h
    }

    fn pool(&mut self, h: u64) -> R<&mut Pool> {
        self.pools.get_mut(&h).ok_or_else(|| {
            log(&format!("memory pool {h:#x} is not a live pool"));
            CUresult::CUDA_ERROR_INVALID_VALUE
        })
    }

    fn device(&mut self, device: i32) -> (u64, u64) {
        if let Some(&e) = self.devices.get(&device) {
            return e;
        }
        let h = self.insert(Pool::new(device, true, 0));
        self.devices.insert(device, (h, h));
        (h, h)
    }
}

/// Gives a block's memory back to the daemon (and the tenant's quota). Its context may
/// be gone already, which freed it.
fn release(blocks: Vec<Block>) {
    for b in blocks {
        let _ = client::call(|c| {
            let key = (client::endpoint_of(b.ctx), b.base);
            if c.reg.allocs.remove(&key).is_none() {
                return Ok(());
            }
            c.conn_of(b.ctx)?.call_ok(Request::MemFree { ptr: DevicePtr(b.base) })
        });
    }
}

/// Forgets the blocks whose allocation no longer exists (their context was destroyed).
fn prune(p: &mut Pools) {
    let live = client::with(|c| {
        let mut keep = std::collections::HashSet::new();
        for pool in p.pools.values() {
            for b in pool.policy.blocks() {
                if c.reg.allocs.contains_key(&(client::endpoint_of(b.ctx), b.base)) {
                    keep.insert(b.base);
                }
            }
        }
        Ok(keep)
    })
    .unwrap_or_default();
    for pool in p.pools.values_mut() {
        pool.policy.retain(|b| live.contains(&b.base));
    }
    p.owners.retain(|base, _| live.contains(base));
}

/// The current context: (handle, client device ordinal).
fn current() -> R<(u64, i32)> {
    client::call(|c| {
        let (h, _, _) = c.current()?;
        Ok((h, c.reg.ctx(h)?.device as i32))
    })
}

fn check_device(device: CUdevice) -> R<()> {
    client::call(|c| c.device(device).map(|_| ()))
}

pub(super) fn create(props: CUmemPoolProps) -> R<CUmemoryPool> {
    client::call(|c| c.devices().map(|_| ()))?;
    if props.allocType != CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED {
        log(&format!("cuMemPoolCreate: allocType {} is not PINNED", props.allocType.0));
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    if props.location.type_ != CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE {
        log("cuMemPoolCreate: only device-located pools are served through the pool");
        return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
    }
    let exportable = match props.handleTypes.0 {
        0 => false,
        POSIX_FD => true,
        other => {
            log(&format!("cuMemPoolCreate: handleTypes {other:#x}: only POSIX file descriptors are shareable here"));
            return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
        }
    };
    if check_device(props.location.id).is_err() {
        log(&format!("cuMemPoolCreate: location id {} is not a device", props.location.id));
        return Err(CUresult::CUDA_ERROR_INVALID_DEVICE);
    }
    let pool = Pool { exportable, ..Pool::new(props.location.id, false, props.maxSize as u64) };
    Ok(with_pools(|p| p.insert(pool)) as CUmemoryPool)
}

pub(super) fn destroy(pool: CUmemoryPool) -> R<()> {
    let h = pool as u64;
    let shed = with_pools(|p| {
        let pl = p.pool(h)?;
        if pl.is_default {
            log("cuMemPoolDestroy: a device's default memory pool cannot be destroyed");
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let mut pl = p.pools.remove(&h).expect("looked up above");
        for e in p.devices.values_mut() {
            if e.1 == h {
                e.1 = e.0;
            }
        }
        // Memory still allocated from it goes back when it is freed.
        for b in pl.policy.take_all_used() {
            p.orphans.insert(b.base, b.ctx);
        }
        Ok((pl.policy.shed_down_to(0), pl.secret.filter(|_| !pl.imported)))
    })?;
    let (shed, exported) = shed;
    release(shed);
    if let Some(pool) = exported {
        // No new imports of it; pointers already imported live until freed.
        client::call(|c| c.live()?.call_ok(Request::MemPoolUnexport { pool }))?;
    }
    Ok(())
}

pub(super) fn trim_to(pool: CUmemoryPool, keep: usize) -> R<()> {
    let shed = with_pools(|p| {
        prune(p);
        p.pool(pool as u64).map(|pl| pl.policy.shed_down_to(keep as u64))
    })?;
    release(shed);
    Ok(())
}

pub(super) fn set_attribute(pool: CUmemoryPool, attr: A, value: *mut c_void) -> R<()> {
    if value.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the attribute names the value's type (an int or a cuuint64_t).
    let v = unsafe {
        if is_u64(attr) { value.cast::<u64>().read_unaligned() } else { value.cast::<c_int>().read_unaligned() as u64 }
    };
    with_pools(|p| {
        prune(p);
        p.pool(pool as u64)?.policy.set_attribute(attr, v).map_err(|why| {
            log(&format!("cuMemPoolSetAttribute: {why}"));
            CUresult::CUDA_ERROR_INVALID_VALUE
        })
    })
}

pub(super) fn get_attribute(pool: CUmemoryPool, attr: A, value: *mut c_void) -> R<()> {
    if value.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let v = with_pools(|p| {
        prune(p);
        p.pool(pool as u64)?.policy.get_attribute(attr).map_err(|why| {
            log(&format!("cuMemPoolGetAttribute: {why}"));
            CUresult::CUDA_ERROR_INVALID_VALUE
        })
    })?;
    // SAFETY: non-null; the attribute names the value's type.
    unsafe {
        if is_u64(attr) {
            value.cast::<u64>().write_unaligned(v)
        } else {
            value.cast::<c_int>().write_unaligned(v as c_int)
        }
    }
    Ok(())
}

pub(super) fn default_pool(dev: CUdevice) -> R<CUmemoryPool> {
    check_device(dev)?;
    Ok(with_pools(|p| p.device(dev).0) as CUmemoryPool)
}

pub(super) fn current_pool(dev: CUdevice) -> R<CUmemoryPool> {
    check_device(dev)?;
    Ok(with_pools(|p| p.device(dev).1) as CUmemoryPool)
}

pub(super) fn set_current_pool(dev: CUdevice, pool: CUmemoryPool) -> R<()> {
    check_device(dev)?;
    with_pools(|p| {
        p.device(dev);
        let pl = p.pool(pool as u64)?;
        if pl.imported {
            log("cuDeviceSetMemPool: an imported pool does not allocate, so it cannot be a current pool");
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let device = pl.device;
        if device != dev {
            log(&format!("cuDeviceSetMemPool: the pool is on device {device}, not device {dev}"));
            return Err(CUresult::CUDA_ERROR_INVALID_DEVICE);
        }
        if let Some(e) = p.devices.get_mut(&dev) {
            e.1 = pool as u64;
        }
        Ok(())
    })
}

/// Stream-ordered allocation from pool `pool` (`None`: the current pool of the current
/// context's device), in the current context.
pub(super) fn alloc_from(bytesize: usize, pool: Option<u64>, h: CUstream, d: DefaultStream) -> R<CUdeviceptr> {
    // On a capturing stream: an allocation node (super::graph_mem), after the pool's checks.
    let capturing = client::call(|c| {
        let stream = super::stream::resolve(c, h, d)?;
        Ok(super::graph::capturing(stream, client::current_endpoint()).then_some(stream))
    })?;
    if bytesize == 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let (ctx, device) = current()?;
    if let Some(stream) = capturing {
        if let Some(handle) = pool {
            with_pools(|p| {
                let pl = p.pool(handle)?;
                if pl.imported || pl.device != device {
                    log("stream-ordered allocation: an imported pool, or a pool of another device than the context's");
                    return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
                }
                Ok(())
            })?;
        }
        return client::call(|c| super::graph_mem::captured_alloc(c, stream, bytesize));
    }
    let size = bytesize as u64;
    let stream = h as u64;
    // An idle block this context may reuse on this stream, or room to reserve a new one.
    let (handle, reused, shed) = with_pools(|p| {
        prune(p);
        let handle = match pool {
            Some(h) => h,
            None => p.device(device).1,
        };
        let pl = p.pool(handle)?;
        if pl.imported {
            log("stream-ordered allocation: an imported pool does not allocate");
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        if pl.device != device {
            log(&format!("stream-ordered allocation: the pool is on device {}, the context on {device}", pl.device));
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        if let Some(b) = pl.policy.take_reusable(&ctx, stream, size) {
            return Ok((handle, Some(b), Vec::new()));
        }
        match pl.policy.room_for(size) {
            Room::Reserve(shed) => Ok((handle, None, shed)),
            Room::OverMaxSize { asked, reserved, max_size } => {
                log(&format!(
                    "stream-ordered allocation: {asked} bytes asked, {reserved} of the pool's maxSize {max_size} reserved"
                ));
                Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY)
            }
        }
    })?;
    release(shed);
    let block = match reused {
        Some(b) => b,
        None => {
            let base = match super::memory::alloc(bytesize) {
                Ok(b) => b,
                Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY) => {
                    // The quota refused: the pool's idle memory goes back first, as the
                    // driver releases a pool's unused memory before it fails.
                    let shed = with_pools(|p| p.pool(handle).map(|pl| pl.policy.shed_down_to(0)).unwrap_or_default());
                    if shed.is_empty() {
                        return Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
                    }
                    release(shed);
                    super::memory::alloc(bytesize)?
                }
                Err(e) => return Err(e),
            };
            Block { ctx, base, size, freed_on: 0 }
        }
    };
    let base = block.base;
    with_pools(|p| match p.pools.get_mut(&handle) {
        Some(pl) => {
            p.owners.insert(base, handle);
            // A block just put in use has no live export (one at this address, of memory since
            // given back with cuMemFree, ended with it).
            pl.exported.remove(&base);
            pl.policy.insert_used(block);
        }
        // Destroyed meanwhile by another thread: the memory is the caller's still.
        None => {
            p.orphans.insert(base, ctx);
        }
    });
    Ok(base)
}

pub(super) fn alloc_from_pool(bytesize: usize, pool: CUmemoryPool, h: CUstream, d: DefaultStream) -> R<CUdeviceptr> {
    alloc_from(bytesize, Some(pool as u64), h, d)
}

/// Frees a pool allocation whose free was reached on stream `h`: back to its pool (a
/// destroyed pool's memory to the daemon). `false`: `ptr` is no pool allocation.
pub(super) fn free(ptr: CUdeviceptr, h: CUstream) -> R<bool> {
    if free_imported(ptr)? {
        return Ok(true);
    }
    let (found, orphan, revoke) = with_pools(|p| {
        prune(p);
        if let Some(ctx) = p.orphans.remove(&ptr) {
            return (true, Some(Block { ctx, base: ptr, size: 0, freed_on: 0 }), None);
        }
        let Some(&pool) = p.owners.get(&ptr) else { return (false, None, None) };
        let Some(pl) = p.pools.get_mut(&pool) else { return (false, None, None) };
        let ctx = pl.policy.used_block(ptr).map(|b| b.ctx);
        if !pl.policy.give_back(ptr, h as u64) {
            return (false, None, None);
        }
        p.owners.remove(&ptr);
        (true, None, ctx.filter(|_| pl.exported.remove(&ptr)))
    });
    if let Some(b) = orphan {
        release(vec![b]);
    }
    if let Some(ctx) = revoke {
        // The block stays allocated for reuse: its export ends here, and the importers' views.
        client::call(|c| c.conn_of(ctx)?.call_ok(Request::MemPoolRevokePointer { ptr: DevicePtr(ptr) }))?;
    }
    Ok(found)
}

/// `cuMemFree`/`cuMemFreeAsync` of a pointer imported from another process's pool: closes this
/// process's view of it (the exporter's memory stays). `false`: `ptr` was not imported.
pub(super) fn free_imported(ptr: CUdeviceptr) -> R<bool> {
    let Some((ctx, last)) = with_pools(|p| {
        let e = p.imported.get_mut(&ptr)?;
        e.count -= 1;
        let (ctx, last) = (e.ctx, e.count == 0);
        if last {
            p.imported.remove(&ptr);
        }
        Some((ctx, last))
    }) else {
        return Ok(false);
    };
    client::call(|c| {
        c.conn_of(ctx)?.call_ok(Request::IpcCloseMemHandle { ptr: DevicePtr(ptr) })?;
        if last {
            c.reg.allocs.remove(&(client::endpoint_of(ctx), ptr));
        }
        Ok(true)
    })
}

fn invalid<T>(why: &str) -> R<T> {
    log(why);
    Err(CUresult::CUDA_ERROR_INVALID_VALUE)
}

/// The daemon's secret for exportable pool `h`, asked for at its first export.
fn pool_secret(h: u64, what: &str) -> R<[u8; 16]> {
    let known = with_pools(|p| {
        let pl = p.pool(h)?;
        if pl.imported {
            return invalid(&format!("{what}: the pool was imported; only its exporter exports it"));
        }
        if !pl.exportable {
            return invalid(&format!("{what}: the pool was not created with handleTypes POSIX_FILE_DESCRIPTOR"));
        }
        Ok(pl.secret)
    })?;
    if let Some(s) = known {
        return Ok(s);
    }
    let answer::MemExported { secret } = client::call(|c| c.live()?.ask(Request::MemPoolExport {}))?;
    // Another thread may have exported it meanwhile: the first secret stays.
    with_pools(|p| Ok(*p.pool(h)?.secret.get_or_insert(secret)))
}

pub(super) fn export_to_shareable(
    handle_out: *mut c_void,
    pool: CUmemoryPool,
    kind: CUmemAllocationHandleType,
    flags: c_ulonglong,
) -> R<()> {
    let what = "cuMemPoolExportToShareableHandle";
    if handle_out.is_null() || kind.0 != POSIX_FD || flags != 0 {
        return invalid(&format!("{what}: a non-null handle_out, handle type POSIX_FILE_DESCRIPTOR and flags 0"));
    }
    let secret = pool_secret(pool as u64, what)?;
    let fd = super::vmm::sealed_descriptor(POOL_MAGIC, &secret, what)?;
    crate::util::out(handle_out.cast::<c_int>(), fd)
}

pub(super) fn import_from_shareable(
    handle: *mut c_void,
    kind: CUmemAllocationHandleType,
    flags: c_ulonglong,
) -> R<CUmemoryPool> {
    let what = "cuMemPoolImportFromShareableHandle";
    if kind.0 != POSIX_FD || flags != 0 {
        return invalid(&format!("{what}: handle type POSIX_FILE_DESCRIPTOR and flags 0"));
    }
    let (_, device) = current()?;
    // For POSIX file descriptors the descriptor travels in the pointer's value.
    let secret = super::vmm::read_secret(handle as usize as c_int, POOL_MAGIC, what)?;
    client::call(|c| c.live()?.call_ok(Request::MemPoolImport { pool: secret }))?;
    let pool = Pool { imported: true, secret: Some(secret), ..Pool::new(device, false, 0) };
    Ok(with_pools(|p| p.insert(pool)) as CUmemoryPool)
}

pub(super) fn export_pointer(ptr: CUdeviceptr) -> R<CUmemPoolPtrExportData> {
    let what = "cuMemPoolExportPointer";
    let (pool, ctx) = with_pools(|p| {
        prune(p);
        let pool = p.owners.get(&ptr).copied();
        let ctx = pool.and_then(|h| p.pools.get(&h)).and_then(|pl| pl.policy.used_block(ptr)).map(|b| b.ctx);
        match (pool, ctx) {
            (Some(pool), Some(ctx)) => Ok((pool, ctx)),
            _ => invalid(&format!("{what}: {ptr:#x} is not the base of a live allocation of a pool")),
        }
    })?;
    let secret = pool_secret(pool, what)?;
    let answer::MemExported { secret: mine } =
        client::call(|c| c.conn_of(ctx)?.ask(Request::MemPoolExportPointer { pool: secret, ptr: DevicePtr(ptr) }))?;
    with_pools(|p| p.pools.get_mut(&pool).map(|pl| pl.exported.insert(ptr)));
    let mut data = CUmemPoolPtrExportData::default();
    for (i, b) in PTR_MAGIC.iter().chain(mine.iter()).enumerate() {
        data.reserved[i] = *b;
    }
    Ok(data)
}

pub(super) fn import_pointer(pool: CUmemoryPool, data: *mut CUmemPoolPtrExportData) -> R<CUdeviceptr> {
    let what = "cuMemPoolImportPointer";
    if data.is_null() {
        return invalid(&format!("{what}: null shareData"));
    }
    // SAFETY: non-null; the caller passes export data (64 bytes, any alignment).
    let data = unsafe { data.read_unaligned() };
    if &data.reserved[..8] != PTR_MAGIC {
        return invalid(&format!("{what}: not export data made through the pool"));
    }
    let mut mine = [0u8; 16];
    mine.copy_from_slice(&data.reserved[8..24]);
    let secret = with_pools(|p| {
        let pl = p.pool(pool as u64)?;
        match pl.secret {
            Some(s) if pl.imported => Ok(s),
            _ => invalid(&format!("{what}: the pool was not imported (cuMemPoolImportFromShareableHandle)")),
        }
    })?;
    let (base, ctx) = client::call(|c| {
        let (cur, ..) = c.current()?;
        let answer::AddressRange { base, size } =
            c.live()?.ask(Request::MemPoolImportPointer { pool: secret, secret: mine })?;
        c.reg.allocs.insert((client::endpoint_of(cur), base.0), (size, cur));
        Ok((base.0, cur))
    })?;
    with_pools(|p| p.imported.entry(base).or_insert(ImportedPtr { pool: pool as u64, ctx, count: 0 }).count += 1);
    Ok(base)
}

/// The pool an allocation came from (`CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE`).
pub fn pool_of(ptr: u64) -> Option<u64> {
    with_pools(|p| p.owners.get(&ptr).copied().or_else(|| p.imported.get(&ptr).map(|e| e.pool)))
}

/// Called after every synchronization (stream, event, context): pools above their release
/// threshold give idle blocks back down to it.
pub fn on_synchronize() {
    let shed = with_pools(|p| {
        if !p.pools.values().any(|pl| pl.policy.has_idle()) {
            return Vec::new();
        }
        prune(p);
        p.pools.values_mut().flat_map(|pl| pl.policy.shed_over_threshold()).collect()
    });
    release(shed);
}

/// Managed memory is refused through the pool: the daemon's device memory lives in the
/// daemon's process (or on another host), where this process can never touch it, and no
/// memory could be both the client's and the device's. The devices report
/// `CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY` 0, for which NVIDIA documents this error.
pub(super) fn alloc_managed(bytesize: usize, flags: std::os::raw::c_uint) -> R<CUdeviceptr> {
    client::call(|c| c.current().map(|_| ()))?;
    if bytesize == 0 || (flags != 1 && flags != 2) {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    log("cuMemAllocManaged: managed memory is not supported through the pool (device memory lives in the \
         daemon, which this process cannot map); CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY is 0");
    Err(CUresult::CUDA_ERROR_NOT_SUPPORTED)
}

/// Pools of one device: `gpupool_abi::pool_access` says what is accepted.
pub(super) fn set_access(pool: CUmemoryPool, map: *const gpupool_shim::cuda::CUmemAccessDesc, count: usize) -> R<()> {
    let device = with_pools(|p| p.pool(pool as u64).map(|pl| pl.device))?;
    let devices = client::call(|c| c.devices().map(|d| d.len() as i32))?;
    if map.is_null() && count > 0 {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let descs = if count == 0 {
        &[][..]
    } else {
        // SAFETY: `count` descriptors at `map`, as the API documents.
        unsafe { std::slice::from_raw_parts(map, count) }
    };
    gpupool_abi::pool_access::set(device, devices, descs).map_err(|(code, why)| {
        log(why);
        code
    })
}

pub(super) fn get_access(
    pool: CUmemoryPool,
    location: *mut gpupool_shim::cuda::CUmemLocation,
) -> R<gpupool_shim::cuda::CUmemAccess_flags> {
    if location.is_null() {
        return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null; the API's contract makes it point to a location.
    let location = unsafe { location.read_unaligned() };
    let device = with_pools(|p| p.pool(pool as u64).map(|pl| pl.device))?;
    let devices = client::call(|c| c.devices().map(|d| d.len() as i32))?;
    gpupool_abi::pool_access::get(device, devices, &location).map_err(|(code, why)| {
        log(why);
        code
    })
}
