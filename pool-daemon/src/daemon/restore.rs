//! Restore (issue 23, items 2-3; README.md, "Checkpoints"; docs/checkpoint-format.md):
//! `gpupool daemon --restore DIR` reads the checkpoints under DIR back into sessions that wait
//! for their clients, and a client's new connection attaches to its session with `Resume`
//! (the session id and the secret minted at its hello, which the checkpoint holds).
//!
//! **Handles keep their values.** The client holds device addresses and the daemon's ids for
//! its contexts, modules, functions, streams and events; a restored session has the same ones,
//! so no request needs translating: each id is the key of the new backend handle in the
//! session's tables, and the memory is put back at its old addresses through virtual memory
//! management, the one documented way to ask for an address (`cuMemAddressReserve` with the
//! address as its hint, then `cuMemCreate`/`cuMemMap`/`cuMemSetAccess`). `cuMemAlloc` packs
//! small allocations closer than the mapping granularity (2 MiB), so allocations whose
//! granules touch share one reserved and mapped *extent*; the extent goes when its last
//! allocation is freed. A checkpoint whose addresses cannot be had (something else of this
//! process holds them) is not restored, and the daemon logs why.
//!
//! A restored session nobody resumes is freed after the config's `restore_wait_s` (default
//! [`DEFAULT_WAIT`]), as a session whose client died.
//!
//! Owns the sessions waiting for their client. It does not write checkpoints
//! ([`super::checkpoint`]) and restores nothing format 1 does not hold.

use super::checkpoint::Manifest;
use super::cleanup::Handle;
use super::dispatch::{DEVICE_UNAVAILABLE, Fail};
use super::listener::PeerCred;
use super::session::{Alloc, Func, Session};
use super::{Raw, SessionInfo, Shared};
use crate::call;
use anyhow::{Context as _, Result, anyhow, bail};
use gpupool_protocol::{CtxId, EventId, FuncId, ModuleId, PROTOCOL_VERSION, StreamId};
use gpupool_quota::{ClientRequest, TenantId};
use gpupool_shim::cuda::CUmemGenericAllocationHandle;
use gpupool_shim::cuda::{CUevent, CUfunction, CUmodule, CUstream};
use std::collections::{BTreeMap, HashMap};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a restored session waits for its client unless the config's `restore_wait_s` says.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(60);
/// How often the waiting sessions are looked at.
const SWEEP: Duration = Duration::from_millis(200);
/// Bytes copied to the device per step.
const CHUNK: usize = 64 << 20;

struct Waiting {
    session: Box<Session>,
    since: Instant,
}

/// Reserved and mapped memory holding restored allocations.
struct Extent {
    size: u64,
    handle: CUmemGenericAllocationHandle,
    /// Its allocations not yet freed.
    members: usize,
}

#[derive(Default)]
struct Memory {
    extents: BTreeMap<u64, Extent>,
    /// A restored allocation's address -> its extent's base.
    member_of: HashMap<u64, u64>,
}

/// The daemon-wide side ([`Shared::restored`]): restored sessions not yet resumed, and the
/// memory restored allocations live in.
#[derive(Default)]
pub struct Restored {
    waiting: Mutex<HashMap<u64, Waiting>>,
    memory: Mutex<Memory>,
    /// Some allocation was ever restored (until then [`Restored::owns`] costs nothing).
    active: AtomicBool,
    /// What `--restore` did at start-up, for the status document.
    pass: Mutex<Option<Pass>>,
}

/// The `--restore` pass: sessions brought back, their bytes, and the time from reading the
/// first manifest to the last session waiting for its client (mapping, file reads, copies).
#[derive(Clone, Copy)]
struct Pass {
    sessions: usize,
    bytes: u64,
    ns: u64,
}

impl Restored {
    fn waiting(&self) -> MutexGuard<'_, HashMap<u64, Waiting>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn memory(&self) -> MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The status document's `restore`: null when the daemon started without `--restore`.
    pub fn status(&self) -> serde_json::Value {
        match *self.pass.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(p) => serde_json::json!({ "sessions": p.sessions, "bytes": p.bytes, "ns": p.ns }),
            None => serde_json::Value::Null,
        }
    }

    /// Whether `ptr` is the start of a restored allocation (freed through [`free`]).
    pub fn owns(&self, ptr: u64) -> bool {
        self.active.load(Ordering::Relaxed) && self.memory().member_of.contains_key(&ptr)
    }
}

fn wait_bound(shared: &Shared) -> Duration {
    shared.ledger.config().restore_wait_ms.map_or(DEFAULT_WAIT, Duration::from_millis)
}

/// The checkpoint directories under `dir`: `dir` itself if it holds a manifest, else those
/// below it, up to three levels down (`gpupool checkpoint TENANT --to DIR/TENANT` writes
/// `DIR/TENANT/session-ID`).
fn manifests(dir: &Path) -> Result<Vec<PathBuf>> {
    fn walk(d: &Path, depth: u32, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        if d.join("manifest.json").is_file() {
            out.push(d.to_path_buf());
            return Ok(());
        }
        if depth == 0 {
            return Ok(());
        }
        for e in std::fs::read_dir(d)? {
            let p = e?.path();
            if p.is_dir() {
                walk(&p, depth - 1, out)?;
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, 3, &mut out).with_context(|| format!("--restore {}", dir.display()))?;
    out.sort();
    Ok(out)
}

/// Restores every checkpoint under `dir` (before the daemon accepts clients) and starts the
/// sweep that frees those not resumed in time. A checkpoint that cannot be restored is logged
/// and skipped; none found at all is an error.
pub fn restore_all(shared: &Arc<Shared>, dir: &Path) -> Result<usize> {
    let started = Instant::now();
    let dirs = manifests(dir)?;
    if dirs.is_empty() {
        bail!("--restore {}: no manifest.json there or in its subdirectories", dir.display());
    }
    let mut read = Vec::new();
    for d in dirs {
        match read_manifest(&d) {
            Ok(m) => read.push((d, m)),
            Err(e) => tracing::error!(dir = %d.display(), "checkpoint not restored: {e:#}"),
        }
    }
    // The memory first, for all sessions at once: sessions of one tenant shared its context's
    // address space, so one granule may hold allocations of two of them.
    let (held, failed) = map_all(shared, &read);
    let (mut n, mut restored_bytes) = (0, 0);
    for (d, m) in &read {
        let t0 = Instant::now();
        let res = match m.allocations.iter().find(|a| failed.contains_key(&a.address)) {
            Some(a) => Err(anyhow!("{}", failed[&a.address])),
            None => restore_one(shared, d, m),
        };
        match res {
            Ok((s, bytes)) => {
                tracing::info!(session = s.id, tenant = %s.tenant(), dir = %d.display(), bytes,
                    allocations = s.allocs.len(), modules = s.modules.len(), ms = t0.elapsed().as_millis() as u64,
                    "session restored; waiting for its client");
                shared.restored.waiting().insert(s.id, Waiting { session: s, since: Instant::now() });
                n += 1;
                restored_bytes += bytes;
            }
            Err(e) => {
                // Its memory is mapped but no session holds it.
                for a in &m.allocations {
                    if shared.restored.owns(a.address)
                        && let Ok(tc) = shared.tenant_ctx(&TenantId::new(&m.tenant), a.device)
                        && call!(shared.cuda, cuCtxSetCurrent(tc.ctx.0)).is_ok()
                    {
                        let _ = free(shared, a.address);
                    }
                }
                tracing::error!(dir = %d.display(), "checkpoint not restored: {e:#}");
            }
        }
    }
    for tc in held {
        shared.release_ctx(tc);
    }
    let pass = Pass { sessions: n, bytes: restored_bytes, ns: started.elapsed().as_nanos() as u64 };
    *shared.restored.pass.lock().unwrap_or_else(|e| e.into_inner()) = Some(pass);
    let s = shared.clone();
    std::thread::Builder::new().name("gpupool-restored".into()).spawn(move || sweep(&s))?;
    Ok(n)
}

/// Either format version (1, or 2 with patches over the bases).
fn read_manifest(dir: &Path) -> Result<Manifest> {
    super::checkpoint::load(dir)
}

/// Maps the memory of every checkpoint's allocations, per tenant and device in that tenant's
/// context: the contexts, held until the sessions hold them, and the addresses that could not
/// be had, with why.
fn map_all(shared: &Shared, read: &[(PathBuf, Manifest)]) -> (Vec<Arc<super::TenantCtx>>, HashMap<u64, String>) {
    let mut by: BTreeMap<(String, u32), Vec<Span>> = BTreeMap::new();
    for (_, m) in read {
        for a in &m.allocations {
            by.entry((m.tenant.clone(), a.device)).or_default().push((a.address, a.size, a.device));
        }
    }
    let mut held = Vec::new();
    let mut failed = HashMap::new();
    for ((tenant, d), list) in by {
        let mapped = (|| -> Result<()> {
            if d >= shared.first_npu() {
                bail!("device {d} is not one of this daemon's GPUs");
            }
            let tc = shared.tenant_ctx(&TenantId::new(&tenant), d).map_err(fail)?;
            call!(shared.cuda, cuCtxSetCurrent(tc.ctx.0)).map_err(|e| anyhow!("device {d}: {e}"))?;
            held.push(tc);
            for (_, lo, hi, members) in extents(shared, &list)? {
                if let Err(e) = map_extent(shared, d, lo, hi - lo, members.len()) {
                    for a in members {
                        failed.insert(a, format!("{e:#}"));
                    }
                    continue;
                }
                let mut mem = shared.restored.memory();
                for a in members {
                    mem.member_of.insert(a, lo);
                }
            }
            Ok(())
        })();
        if let Err(e) = mapped {
            for (a, _, _) in list {
                failed.insert(a, format!("{e:#}"));
            }
        }
    }
    (held, failed)
}

/// Frees the restored sessions whose client did not come back within the bound.
fn sweep(shared: &Shared) {
    loop {
        std::thread::sleep(SWEEP);
        let bound = wait_bound(shared);
        let stale: Vec<Waiting> = {
            let mut w = shared.restored.waiting();
            let ids: Vec<u64> = w.iter().filter(|(_, x)| x.since.elapsed() >= bound).map(|(&id, _)| id).collect();
            ids.into_iter().filter_map(|id| w.remove(&id)).collect()
        };
        for mut x in stale {
            x.session.current = Raw(std::ptr::null_mut());
            let why = format!("restored, its client did not resume it within {:.1} s", bound.as_secs_f64());
            super::cleanup::end(*x.session, &why);
        }
        if shared.stopping() {
            let all: Vec<Waiting> = shared.restored.waiting().drain().map(|(_, x)| x).collect();
            for mut x in all {
                x.session.current = Raw(std::ptr::null_mut());
                super::cleanup::end(*x.session, "daemon shutting down");
            }
            return;
        }
    }
}

/// `Resume`: the waiting session `id` if `secret` is its own (and, for a client on this host,
/// its user is the checkpointed one or root). Refusals are DEVICE_UNAVAILABLE, what the client
/// would have had without a restore.
pub fn resume(
    shared: &Shared,
    id: u64,
    secret: &[u8; 16],
    protocol_version: u16,
    cred: Option<PeerCred>,
) -> std::result::Result<Box<Session>, (u32, String)> {
    if protocol_version != PROTOCOL_VERSION {
        return Err((1, format!("protocol version {protocol_version}, the daemon speaks {PROTOCOL_VERSION}")));
    }
    let mut w = shared.restored.waiting();
    // Compared in full whatever differs, so the time taken says nothing about the secret.
    let ok = w.get(&id).is_some_and(|x| x.session.secret.iter().zip(secret).fold(0u8, |a, (x, y)| a | (x ^ y)) == 0);
    if !ok {
        return Err((DEVICE_UNAVAILABLE, format!("no restored session {id} with this secret waits for a client")));
    }
    if let Some(c) = cred
        && c.uid != 0
        && c.uid != w[&id].session.cred.uid
    {
        let want = w[&id].session.cred.uid;
        return Err((DEVICE_UNAVAILABLE, format!("session {id} was uid {want}'s, not uid {}'s", c.uid)));
    }
    let x = w.remove(&id).expect("checked above");
    let mut s = x.session;
    s.current = Raw(std::ptr::null_mut());
    if let Some(c) = cred {
        s.cred.pid = c.pid;
        if let Some(info) = shared.sessions.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&id) {
            info.pid = c.pid;
        }
    }
    Ok(s)
}

/// A resumed session whose client left before it was answered: it waits again (its bound
/// starts over).
pub fn wait_again(shared: &Shared, s: Box<Session>) {
    shared.restored.waiting().insert(s.id, Waiting { session: s, since: Instant::now() });
}

/// Frees a restored allocation (its device's context current): its extent goes with its last.
pub fn free(shared: &Shared, ptr: u64) -> std::result::Result<(), Fail> {
    let mut mem = shared.restored.memory();
    let base = mem.member_of.remove(&ptr).ok_or_else(|| Fail::invalid_value(format!("{ptr:#x} is not restored")))?;
    let e = mem.extents.get_mut(&base).expect("an allocation's extent lives while it does");
    e.members -= 1;
    if e.members > 0 {
        return Ok(());
    }
    let e = mem.extents.remove(&base).expect("just seen");
    drop(mem);
    call!(shared.cuda, cuMemUnmap(base, e.size as usize))?;
    call!(shared.cuda, cuMemRelease(e.handle))?;
    call!(shared.cuda, cuMemAddressFree(base, e.size as usize))?;
    Ok(())
}

/// Reserves `[base, base + size)` exactly and maps new memory there (the device's context
/// current); registers it as an extent with `members` allocations.
fn map_extent(shared: &Shared, device: u32, base: u64, size: u64, members: usize) -> Result<()> {
    let mut got = 0;
    let g = granularity(shared, device)?;
    call!(shared.cuda, cuMemAddressReserve(&mut got, size as usize, g as usize, base, 0))
        .map_err(|e| anyhow!("reserving {size} bytes at {base:#x}: {e}"))?;
    if got != base {
        let _ = call!(shared.cuda, cuMemAddressFree(got, size as usize));
        bail!("the device's addresses [{base:#x}, +{size}) are taken (the driver offered {got:#x})");
    }
    let handle = match super::evict::create_map(shared, device, base, size) {
        Ok(h) => h,
        Err(f) => {
            let _ = call!(shared.cuda, cuMemAddressFree(base, size as usize));
            bail!("mapping {size} bytes at {base:#x}: {}", f.message);
        }
    };
    shared.restored.active.store(true, Ordering::Relaxed);
    shared.restored.memory().extents.insert(base, Extent { size, handle, members });
    Ok(())
}

fn granularity(shared: &Shared, device: u32) -> Result<u64> {
    let prop = super::evict::prop(shared, device);
    let mut g = 0usize;
    let min = gpupool_shim::cuda::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM;
    call!(shared.cuda, cuMemGetAllocationGranularity(&mut g, &prop, min)).map_err(|e| anyhow!("granularity: {e}"))?;
    Ok((g as u64).max(1))
}

/// An allocation: address, size, device.
type Span = (u64, u64, u32);
/// An extent to map: device, first and end address, its allocations' addresses.
type Planned = (u32, u64, u64, Vec<u64>);

/// The extents that hold `allocs` (address, size, device): granule-aligned ranges, merged where
/// they overlap, per device; each with its allocations' addresses.
fn extents(shared: &Shared, allocs: &[Span]) -> Result<Vec<Planned>> {
    let mut sorted = allocs.to_vec();
    sorted.sort_by_key(|&(a, _, d)| (d, a));
    let mut out: Vec<Planned> = Vec::new();
    for (addr, size, d) in sorted {
        let g = granularity(shared, d)?;
        let lo = addr / g * g;
        let hi = addr.checked_add(size).and_then(|e| e.checked_next_multiple_of(g)).ok_or_else(|| anyhow!("size"))?;
        match out.last_mut() {
            Some((ld, _, lhi, members)) if *ld == d && lo < *lhi => {
                *lhi = (*lhi).max(hi);
                members.push(addr);
            }
            _ => out.push((d, lo, hi, vec![addr])),
        }
    }
    Ok(out)
}

fn hex16(s: &str) -> Result<[u8; 16]> {
    let b = s.as_bytes();
    if b.len() != 32 {
        bail!("secret: 32 hex digits expected");
    }
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|e| anyhow!("secret: {e}"))?;
    }
    Ok(out)
}

/// Copies the file `path` (exactly `size` bytes) to the device at `address` (its context current).
fn copy_in(shared: &Shared, path: &Path, address: u64, size: u64, buf: &mut Vec<u8>) -> Result<()> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
    if len != size {
        bail!("{} holds {len} bytes, the manifest says {size}", path.display());
    }
    let mut off = 0u64;
    while off < size {
        let n = CHUNK.min((size - off) as usize);
        buf.resize(n, 0);
        f.read_exact(&mut buf[..n]).with_context(|| format!("reading {}", path.display()))?;
        call!(shared.cuda, cuMemcpyHtoD_v2(address + off, buf.as_ptr().cast(), n))
            .map_err(|e| anyhow!("copying {n} bytes to {:#x}: {e}", address + off))?;
        off += n as u64;
    }
    Ok(())
}

/// `p.len` bytes of `p.file` at `p.file_offset` to `p.offset` of the allocation `a`.
fn patch_in(
    shared: &Shared,
    dir: &Path,
    a: &super::checkpoint::Memory,
    p: &super::checkpoint::Patch,
    buf: &mut Vec<u8>,
) -> Result<()> {
    use std::io::{Seek as _, SeekFrom};
    if p.offset.checked_add(p.len).is_none_or(|end| end > a.size) {
        bail!("{:#x}: a patch of {} bytes at {} is past its {} bytes", a.address, p.len, p.offset, a.size);
    }
    let path = dir.join(&p.file);
    let mut f = std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
    f.seek(SeekFrom::Start(p.file_offset)).with_context(|| format!("seeking in {}", path.display()))?;
    let mut off = 0u64;
    while off < p.len {
        let n = CHUNK.min((p.len - off) as usize);
        buf.resize(n, 0);
        f.read_exact(&mut buf[..n]).with_context(|| format!("reading {}", path.display()))?;
        let to = a.address + p.offset + off;
        call!(shared.cuda, cuMemcpyHtoD_v2(to, buf.as_ptr().cast(), n))
            .map_err(|e| anyhow!("copying {n} bytes to {to:#x}: {e}"))?;
        off += n as u64;
    }
    Ok(())
}

/// One checkpoint (its memory mapped already) into a session, not yet waiting: the session
/// and its bytes.
fn restore_one(shared: &Arc<Shared>, dir: &Path, m: &Manifest) -> Result<(Box<Session>, u64)> {
    let secret = hex16(m.secret.as_deref().ok_or_else(|| anyhow!("the manifest has no session secret"))?)?;
    if !m.globals.is_empty() {
        bail!("module globals are not restored (format 1 does not record their names)");
    }
    if shared.sessions.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&m.session) {
        bail!("session {} is restored already (two checkpoints of one session?)", m.session);
    }
    let config = shared.ledger.config();
    let tenant = TenantId::new(&m.tenant);
    if config.tenant(&tenant).is_none() && m.tenant != TenantId::DEFAULT_NAME {
        bail!("tenant {:?} is not in this daemon's config", m.tenant);
    }
    let request = ClientRequest::default();
    let limits = config.effective_limits(&tenant, &request).map_err(|e| anyhow!("{e}"))?;
    let quota = shared.ledger.open_session(&tenant, &request).map_err(|e| anyhow!("{e}"))?;
    for d in m.contexts.iter().map(|c| c.device).chain(m.allocations.iter().map(|a| a.device)) {
        if d as usize >= shared.devices.len() || d >= shared.first_npu() {
            bail!("device {d} is not one of this daemon's GPUs");
        }
    }
    let cred = PeerCred { pid: m.pid, uid: m.uid, gid: m.uid };
    let mut s =
        Box::new(Session::empty(shared.clone(), m.session, cred, quota, None, limits.compute, None, None, secret));
    s.last_request = m.last_request;
    shared.bump_session_id(m.session);
    shared.sessions.lock().unwrap_or_else(|e| e.into_inner()).insert(
        m.session,
        SessionInfo {
            id: m.session,
            pid: m.pid,
            uid: m.uid,
            gid: m.uid,
            tenant: m.tenant.clone(),
            client: "restored".into(),
            remote: None,
            container: None,
            started_unix_ms: m.created_unix_ms,
            placement: None,
            placed_quota: Vec::new(),
        },
    );
    // From here a failure frees what was made, as a session's end does.
    match fill(&mut s, m, dir) {
        Ok(bytes) => Ok((s, bytes)),
        Err(e) => {
            super::cleanup::end(*s, "restore failed");
            Err(e)
        }
    }
}

/// The allocations of `m`, at their addresses, with their bytes: the bytes restored.
/// `registered`: the allocations given memory (address, device), for a failure to free.
fn memory(
    s: &mut Session,
    m: &Manifest,
    dir: &Path,
    ctx_of: &HashMap<u32, CtxId>,
    registered: &mut Vec<(u64, u32)>,
) -> Result<u64> {
    let shared = s.shared.clone();
    for a in &m.allocations {
        if !shared.restored.owns(a.address) {
            bail!("allocation {:#x} has no restored memory", a.address);
        }
        registered.push((a.address, a.device));
    }
    let mut buf = Vec::new();
    let mut bytes = 0;
    for a in &m.allocations {
        let owner = *ctx_of.get(&a.device).ok_or_else(|| anyhow!("no context on device {}", a.device))?;
        s.enter(a.device).map_err(fail)?;
        let r = shared.ledger.reserve(&s.quota, a.device, a.size).map_err(|e| anyhow!("{:#x}: {e}", a.address))?;
        r.commit();
        s.allocs.insert(a.address, Alloc { size: a.size, device: a.device });
        s.owner.insert(Handle::Alloc(a.address), owner);
        copy_in(&shared, &dir.join(&a.file), a.address, a.size, &mut buf)?;
        // An incremental checkpoint's patches, over the base, in order.
        for p in &a.patches {
            patch_in(&shared, dir, a, p, &mut buf)?;
        }
        bytes += a.size;
    }
    Ok(bytes)
}

fn fail(f: Fail) -> anyhow::Error {
    anyhow!("{}", f.message)
}

fn fill(s: &mut Session, m: &Manifest, dir: &Path) -> Result<u64> {
    let shared = s.shared.clone();
    let mut last = 0u64;
    // The client context each handle belongs to: the device's primary one, else its first.
    let mut ctx_of: HashMap<u32, CtxId> = HashMap::new();
    for c in &m.contexts {
        s.enter(c.device).map_err(fail)?;
        s.ctxs.insert(CtxId(c.id), c.device);
        if c.primary {
            s.primary.insert(c.device, CtxId(c.id));
            ctx_of.insert(c.device, CtxId(c.id));
        } else {
            ctx_of.entry(c.device).or_insert(CtxId(c.id));
        }
        last = last.max(c.id);
    }
    let owner = |d: u32| ctx_of.get(&d).copied().ok_or_else(|| anyhow!("no context on device {d}"));
    let mut registered = Vec::new();
    let bytes = match memory(s, m, dir, &ctx_of, &mut registered) {
        Ok(b) => b,
        Err(e) => {
            // What the session does not hold yet, its end would not free.
            let orphans: Vec<(u64, u32)> = registered.into_iter().filter(|(a, _)| !s.allocs.contains_key(a)).collect();
            for (a, d) in orphans {
                if s.enter(d).is_ok() {
                    let _ = free(&shared, a);
                }
            }
            return Err(e);
        }
    };
    for md in &m.modules {
        let file = md.image.as_ref().ok_or_else(|| anyhow!("module {} has no image", md.id))?;
        let mut image = std::fs::read(dir.join(file)).with_context(|| format!("reading {file}"))?;
        s.enter(md.device).map_err(fail)?;
        // PTX must end in NUL; a cubin or fatbin does not mind one more byte.
        image.push(0);
        let mut h: CUmodule = std::ptr::null_mut();
        call!(shared.cuda, cuModuleLoadData(&mut h, image.as_ptr().cast()))
            .map_err(|e| anyhow!("module {}: cuModuleLoadData: {e}", md.id))?;
        if crate::backend::device_output::may_print(&image) {
            crate::backend::device_output::note_printer(shared.cuda.current_context(), s.id);
        }
        image.pop();
        let id = ModuleId(md.id);
        s.modules.insert(id, (Raw(h), md.device));
        s.ckpt.images.insert(id, Arc::new(image));
        s.owner.insert(Handle::Module(id), owner(md.device)?);
        last = last.max(md.id);
        for f in &md.functions {
            let name = f.name.as_ref().ok_or_else(|| anyhow!("function {} has no name", f.id))?;
            let cname = std::ffi::CString::new(name.as_str()).map_err(|_| anyhow!("NUL in {name:?}"))?;
            let mut fh: CUfunction = std::ptr::null_mut();
            call!(shared.cuda, cuModuleGetFunction(&mut fh, h, cname.as_ptr()))
                .map_err(|e| anyhow!("function {name:?}: {e}"))?;
            let params = s.param_layout(fh);
            s.funcs.insert(FuncId(f.id), Func { f: Raw(fh), module: id, device: md.device, params });
            s.ckpt.names.insert(FuncId(f.id), name.clone());
            last = last.max(f.id);
        }
    }
    // Flags and priorities are not in format 1: streams come back as cuStreamCreate(0) made them,
    // events as cuEventCreate(0).
    for h in &m.streams {
        s.enter(h.device).map_err(fail)?;
        let mut st: CUstream = std::ptr::null_mut();
        call!(shared.cuda, cuStreamCreateWithPriority(&mut st, super::legacy::BACKEND_STREAM_FLAGS, 0))
            .map_err(|e| anyhow!("stream {}: {e}", h.id))?;
        s.streams.insert(StreamId(h.id), (Raw(st), h.device));
        s.note_stream(StreamId(h.id), h.device, 0);
        s.owner.insert(Handle::Stream(StreamId(h.id)), owner(h.device)?);
        last = last.max(h.id);
    }
    for h in &m.events {
        s.enter(h.device).map_err(fail)?;
        let mut ev: CUevent = std::ptr::null_mut();
        call!(shared.cuda, cuEventCreate(&mut ev, 0)).map_err(|e| anyhow!("event {}: {e}", h.id))?;
        s.events.insert(EventId(h.id), (Raw(ev), h.device));
        s.owner.insert(Handle::Event(EventId(h.id)), owner(h.device)?);
        last = last.max(h.id);
    }
    s.handles_from(last);
    for d in s.tenant_ctxs.keys().copied().collect::<Vec<_>>() {
        s.enter(d).map_err(fail)?;
        call!(shared.cuda, cuCtxSynchronize()).map_err(|e| anyhow!("device {d}: {e}"))?;
    }
    // Another thread serves the session: nothing is current there yet.
    s.current = Raw(std::ptr::null_mut());
    Ok(bytes)
}
