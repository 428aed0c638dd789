//! Checkpoints (issue 23, step 1; README.md, "Checkpoints", and docs/checkpoint-format.md):
//! `gpupool checkpoint SESSION|TENANT --to DIR` asks the daemon, through the owner-only socket
//! `<socket>.ckpt`, to write a session's device state to a directory while the session runs on.
//!
//! The session's own thread writes it, between two of its requests (at its next call, or within
//! the session loop's idle poll when the client is quiet): the client's next request waits until
//! the checkpoint is on disk, so nothing the client asks changes the state while it is copied.
//! The thread first synchronizes every context the session touched (its streams' work drains),
//! then copies each allocation and module global to a file of its own and writes `manifest.json`.
//!
//! Owns the pending checkpoint requests and the record of what a restore will need that the
//! session does not otherwise keep (module images, function names). It does not restore (later
//! steps of issue 23) and changes no state of the session it writes.

use super::session::Session;
use super::{Raw, Shared};
use crate::call;
use anyhow::{Context as _, Result, anyhow, bail};
use dirty::GRAIN;
use gpupool_protocol::{FuncId, ModuleId};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub mod dirty;

/// The manifest's `format_version` (2: base files and patches); a reader refuses versions it
/// does not know and reads 1 too.
pub const FORMAT_VERSION: u32 = 2;
/// The manifest's `format`.
pub const FORMAT: &str = "gpupool-checkpoint";
/// How long a checkpoint waits for a session's thread to take it, unless the request says.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes copied from the device per step, and the host buffers doing it in turn: two, so one is
/// copied into while the other is written.
const CHUNK: u64 = 16 << 20;
const BUFFERS: usize = 2;
const MAX_REQUEST: u64 = 64 << 10;

/// `<socket>.ckpt`, next to the client socket.
pub fn socket_path(main: &Path) -> PathBuf {
    let mut s = main.as_os_str().to_owned();
    s.push(".ckpt");
    PathBuf::from(s)
}

/// One request on `<socket>.ckpt` (one JSON line; the answer is one JSON line).
#[derive(Serialize, Deserialize)]
pub struct Request {
    /// A session id, or a tenant's name (every session of it).
    pub target: String,
    pub to: PathBuf,
    pub timeout_ms: Option<u64>,
}

#[derive(Serialize, Deserialize, Debug)]
pub struct Reply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default)]
    pub sessions: Vec<Written>,
}

/// What one session's checkpoint wrote.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct Written {
    pub session: u64,
    pub dir: PathBuf,
    /// The device bytes the checkpoint holds.
    pub bytes: u64,
    /// The bytes written this time (less than `bytes` when incremental), images included.
    #[serde(default)]
    pub written: u64,
    #[serde(default)]
    pub generation: u64,
    #[serde(default)]
    pub incremental: bool,
    /// Time to drain (synchronize) its contexts.
    pub drain_ns: u64,
    /// Time to copy and write its memory and manifest (after the drain).
    pub write_ns: u64,
}

/// The manifest (`manifest.json`, documented in docs/checkpoint-format.md).
#[derive(Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub format_version: u32,
    /// 1 for the first checkpoint written to the directory, one more for each after it.
    #[serde(default = "one")]
    pub generation: u64,
    /// Whether it wrote only what changed since the previous generation.
    #[serde(default)]
    pub incremental: bool,
    pub session: u64,
    pub tenant: String,
    pub pid: u32,
    pub uid: u32,
    pub created_unix_ms: u128,
    pub contexts: Vec<Context>,
    pub allocations: Vec<Memory>,
    pub globals: Vec<Memory>,
    pub modules: Vec<Module>,
    pub streams: Vec<Handle>,
    pub events: Vec<Handle>,
    /// The tenant's ledger counts on the devices this session touched, when written.
    pub ledger: Vec<Ledger>,
    /// The session's secret (32 hex digits): its client resumes the restored session with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// The id of the last request the session had served: its client replays what it sent
    /// after that, where it can.
    #[serde(default)]
    pub last_request: u64,
}

#[derive(Serialize, Deserialize)]
pub struct Context {
    pub id: u64,
    pub device: u32,
    pub primary: bool,
}

fn one() -> u64 {
    1
}

#[derive(Serialize, Deserialize, Clone)]
pub struct Memory {
    pub address: u64,
    pub size: u64,
    pub device: u32,
    /// The module of a global.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<u64>,
    /// The base: relative to the manifest's directory, exactly `size` bytes.
    pub file: String,
    /// Applied over the base in order (format version 2; none in version 1).
    #[serde(default)]
    pub patches: Vec<Patch>,
}

impl Memory {
    fn new(address: u64, size: u64, device: u32, module: Option<u64>) -> Memory {
        Memory { address, size, device, module, file: String::new(), patches: Vec::new() }
    }
}

/// `len` bytes at `offset` of a region are in `file` at `file_offset`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Patch {
    pub offset: u64,
    pub len: u64,
    pub file: String,
    pub file_offset: u64,
}

#[derive(Serialize, Deserialize)]
pub struct Module {
    pub id: u64,
    pub device: u32,
    /// The image it was loaded from (PTX, cubin or fatbin, as the client passed it); absent for
    /// a module loaded through a path this step does not record.
    pub image: Option<String>,
    pub functions: Vec<Function>,
}

#[derive(Serialize, Deserialize)]
pub struct Function {
    pub id: u64,
    pub name: Option<String>,
}

#[derive(Serialize, Deserialize)]
pub struct Handle {
    pub id: u64,
    pub device: u32,
}

#[derive(Serialize, Deserialize)]
pub struct Ledger {
    pub device: u32,
    pub used: u64,
    pub pending: u64,
    pub quota: Option<u64>,
}

/// Per session, what the checkpoint needs and the session does not otherwise keep.
#[derive(Default)]
pub struct Record {
    pub images: HashMap<ModuleId, Arc<Vec<u8>>>,
    pub names: HashMap<FuncId, String>,
    /// Since the last checkpoint this session wrote: what stayed clean (incremental checkpoints).
    pub clean: Option<dirty::Clean<Memory>>,
    /// The session exported an allocation (cuIpcGetMemHandle): another session may write it, so
    /// nothing is known clean.
    pub exported: bool,
}

impl Record {
    /// Called before each request is served, after any checkpoint taken at it.
    pub fn note(
        &mut self,
        op: Option<&gpupool_protocol::Request>,
        view: Option<&gpupool_protocol::bulk::BulkView<'_>>,
    ) {
        if matches!(op, Some(gpupool_protocol::Request::IpcGetMemHandle { .. })) {
            self.exported = true;
        }
        if let Some(c) = &mut self.clean {
            c.note(dirty::writes(op, view));
        }
    }
}

struct Job {
    dir: PathBuf,
    /// Asked by the tenant's `checkpoint` period: nobody waits for it; its session's thread
    /// removes it when written.
    periodic: bool,
    running: bool,
    result: Option<std::result::Result<Written, String>>,
}

/// The daemon-wide side ([`Shared::checkpoints`]): checkpoints asked and not yet answered.
#[derive(Default)]
pub struct Pending {
    any: AtomicUsize,
    jobs: Mutex<HashMap<u64, Job>>,
    cv: Condvar,
    /// Per tenant, what its checkpoints cost (the status document's `checkpoints`).
    stats: Mutex<std::collections::BTreeMap<String, Stats>>,
}

/// A tenant's checkpoints, asked and periodic, all its sessions together.
#[derive(Default, Serialize)]
struct Stats {
    checkpoints: u64,
    periodic: u64,
    failures: u64,
    written_bytes: u64,
    /// The time its sessions' requests waited for checkpoints, in all.
    paused_ns: u64,
    last_session: u64,
    last_unix_ms: u128,
    last_bytes: u64,
    last_written_bytes: u64,
    last_incremental: bool,
    last_drain_ns: u64,
    last_write_ns: u64,
    /// Drain, write and any wait for evicted memory: what the client's next call waited.
    last_pause_ns: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
}

impl Pending {
    fn jobs(&self) -> MutexGuard<'_, HashMap<u64, Job>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, tenant: &str, periodic: bool, pause: Duration, res: &std::result::Result<Written, String>) {
        let mut all = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        let t = all.entry(tenant.to_string()).or_default();
        t.last_unix_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        t.last_pause_ns = pause.as_nanos() as u64;
        t.paused_ns += t.last_pause_ns;
        t.periodic += u64::from(periodic);
        match res {
            Ok(w) => {
                t.checkpoints += 1;
                t.written_bytes += w.written;
                t.last_session = w.session;
                t.last_bytes = w.bytes;
                t.last_written_bytes = w.written;
                t.last_incremental = w.incremental;
                t.last_drain_ns = w.drain_ns;
                t.last_write_ns = w.write_ns;
                t.last_error = None;
            }
            Err(e) => {
                t.failures += 1;
                t.last_error = Some(e.clone());
            }
        }
    }

    /// The status document's `checkpoints`: per tenant that has had one.
    pub fn status(&self) -> serde_json::Value {
        let all = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        let tenants: Vec<serde_json::Value> = all
            .iter()
            .map(|(name, s)| {
                let mut v = serde_json::to_value(s).unwrap_or_default();
                v["tenant"] = name.as_str().into();
                v
            })
            .collect();
        serde_json::json!({ "tenants": tenants })
    }
}

/// Asks each session of a tenant with a `checkpoint` period for one when it is due, to
/// `checkpoint_dir/session-ID` (the same directory each time, so incremental after the first).
pub fn periodic_loop(shared: Arc<Shared>) {
    let mut due: HashMap<u64, Instant> = HashMap::new();
    while !shared.stopping() {
        std::thread::sleep(Duration::from_millis(100));
        let config = shared.ledger.config();
        let live: Vec<(u64, String)> = {
            let sessions = shared.sessions.lock().unwrap_or_else(|e| e.into_inner());
            sessions.values().map(|s| (s.id, s.tenant.clone())).collect()
        };
        due.retain(|id, _| live.iter().any(|(l, _)| l == id));
        let p = &shared.checkpoints;
        let mut jobs = p.jobs();
        // A periodic job its session ended before taking will never be taken.
        let stale: Vec<u64> = jobs
            .iter()
            .filter(|(id, j)| j.periodic && !j.running && !live.iter().any(|(l, _)| l == *id))
            .map(|(id, _)| *id)
            .collect();
        for id in stale {
            jobs.remove(&id);
            p.any.fetch_sub(1, Ordering::AcqRel);
        }
        let now = Instant::now();
        for (id, tenant) in live {
            let tid = gpupool_quota::TenantId::new(&tenant);
            let spec = config.tenant(&tid).unwrap_or_else(|| config.default_tenant());
            let Some(every) = &spec.checkpoint else { continue };
            let at = *due.entry(id).or_insert(now + every.every);
            if now < at || jobs.contains_key(&id) {
                continue;
            }
            due.insert(id, now + every.every);
            let dir = every.dir.join(format!("session-{id}"));
            jobs.insert(id, Job { dir, periodic: true, running: false, result: None });
            p.any.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// Called by a session's thread between requests: writes a checkpoint asked of it, if any.
/// Returns the last request a checkpoint it wrote had seen, for the client's notice
/// ([`gpupool_protocol::Message::Checkpointed`]).
#[must_use = "the client is told of a checkpoint written"]
pub fn at_call(s: &mut Session) -> Option<u64> {
    // Before every request: one load, no reference count touched (a shared cache line).
    if s.shared.checkpoints.any.load(Ordering::Acquire) == 0 {
        return None;
    }
    let shared = s.shared.clone();
    let p = &shared.checkpoints;
    let (dir, periodic) = match p.jobs().get_mut(&s.id) {
        Some(j) if !j.running && j.result.is_none() => {
            j.running = true;
            (j.dir.clone(), j.periodic)
        }
        _ => return None,
    };
    let t0 = Instant::now();
    let seen = s.last_request;
    // Inside the eviction gate (issue 22): memory being evicted is waited for, and no eviction
    // unmaps the session's memory while it is copied.
    let res = match super::evict::gate(s) {
        Ok(inside) => {
            let res = write(s, &dir).map_err(|e| format!("{e:#}"));
            drop(inside);
            res
        }
        Err(super::evict::Gone) => Err("the client hung up while its session was paused".to_string()),
    };
    // The drain made the session's contexts current on this thread.
    s.current = Raw(std::ptr::null_mut());
    match &res {
        Ok(w) => tracing::info!(session = s.id, dir = %dir.display(), bytes = w.bytes,
            drain_ms = w.drain_ns / 1_000_000, write_ms = w.write_ns / 1_000_000, "checkpoint written"),
        Err(e) => tracing::warn!(session = s.id, dir = %dir.display(), "checkpoint failed: {e}"),
    }
    p.record(s.tenant(), periodic, t0.elapsed(), &res);
    let written = res.is_ok();
    let mut jobs = p.jobs();
    if periodic {
        jobs.remove(&s.id);
        p.any.fetch_sub(1, Ordering::AcqRel);
    } else if let Some(j) = jobs.get_mut(&s.id) {
        j.result = Some(res);
    }
    drop(jobs);
    p.cv.notify_all();
    written.then_some(seen)
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    f.write_all(bytes).with_context(|| format!("writing {}", path.display()))?;
    f.sync_all().with_context(|| format!("syncing {}", path.display()))
}

/// What the copy thread hands the file thread.
enum ToDisk {
    Open(PathBuf),
    Bytes(Vec<u8>, usize),
}

/// Copies device memory to files: the session's thread copies from the device into one buffer
/// while a second thread writes the other to its file, so device copies and file writes overlap
/// (the first version did them one after the other, and synced each file before the next began).
/// Files are synced at the end, together, after the kernel has been writing them back meanwhile.
struct Pipe<'a> {
    to_disk: std::sync::mpsc::SyncSender<ToDisk>,
    free: std::sync::mpsc::Receiver<Vec<u8>>,
    shared: &'a Shared,
}

impl Pipe<'_> {
    /// `runs` (offset, len) of the region at `address` (its device's context current), in
    /// order, one after another into a new file at `path`.
    fn copy(&self, address: u64, runs: &[(u64, u64)], path: &Path) -> Result<()> {
        let gone = || anyhow!("the file writer stopped");
        self.to_disk.send(ToDisk::Open(path.to_path_buf())).map_err(|_| gone())?;
        for &(off, len) in runs {
            let mut done = 0;
            while done < len {
                let mut buf = self.free.recv().map_err(|_| gone())?;
                let n = (buf.len() as u64).min(len - done) as usize;
                let at = address + off + done;
                call!(self.shared.cuda, cuMemcpyDtoH_v2(buf.as_mut_ptr().cast(), at, n))
                    .map_err(|e| anyhow!("copying {n} bytes at {at:#x}: {e}"))?;
                self.to_disk.send(ToDisk::Bytes(buf, n)).map_err(|_| gone())?;
                done += n as u64;
            }
        }
        Ok(())
    }
}

/// Runs `f` with a [`Pipe`]; returns once every file it opened is written and synced.
fn with_pipe<T>(shared: &Shared, f: impl FnOnce(&Pipe) -> Result<T>) -> Result<T> {
    let (to_disk, from_copy) = std::sync::mpsc::sync_channel::<ToDisk>(BUFFERS);
    let (back, free) = std::sync::mpsc::channel::<Vec<u8>>();
    for _ in 0..BUFFERS {
        // Zeroed by the allocator (fresh pages), not byte by byte as resize does.
        back.send(vec![0u8; CHUNK as usize]).map_err(|_| anyhow!("buffer channel"))?;
    }
    std::thread::scope(|scope| {
        let writer = scope.spawn(move || -> Result<()> {
            let mut files: Vec<(std::fs::File, PathBuf)> = Vec::new();
            for m in from_copy {
                match m {
                    ToDisk::Open(path) => {
                        let f = std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
                        files.push((f, path));
                    }
                    ToDisk::Bytes(buf, n) => {
                        let (f, path) = files.last_mut().ok_or_else(|| anyhow!("bytes before a file"))?;
                        f.write_all(&buf[..n]).with_context(|| format!("writing {}", path.display()))?;
                        // The copy thread waits for a buffer only when both are in flight.
                        let _ = back.send(buf);
                    }
                }
            }
            for (f, path) in &files {
                f.sync_all().with_context(|| format!("syncing {}", path.display()))?;
            }
            Ok(())
        });
        let pipe = Pipe { to_disk, free, shared };
        let out = f(&pipe);
        drop(pipe);
        let wrote = writer.join().map_err(|_| anyhow!("the file writer panicked"))?;
        // The writer's error explains a copy that stopped because the writer had.
        wrote.and(out)
    })
}

/// The file of region `address` written in `generation`.
fn region_file(kind: &str, address: u64, generation: u64) -> String {
    format!("{kind}-{address:016x}-{generation}.bin")
}

/// Per grain chunk of a region held by `held`: the file and offset its bytes are in, `None`
/// for the base file at the chunk's own offset.
fn chunk_sources(held: &Memory) -> Vec<Option<(String, u64)>> {
    let mut src = vec![None; held.size.div_ceil(GRAIN) as usize];
    for p in &held.patches {
        let first = p.offset / GRAIN;
        for c in first..(p.offset + p.len).div_ceil(GRAIN) {
            src[c as usize] = Some((p.file.clone(), p.file_offset + (c - first) * GRAIN));
        }
    }
    src
}

/// Patches from chunk sources: runs of chunks in one file at consecutive offsets.
fn patches_of(size: u64, src: &[Option<(String, u64)>]) -> Vec<Patch> {
    let mut out: Vec<Patch> = Vec::new();
    for (c, s) in src.iter().enumerate() {
        let Some((file, file_offset)) = s else { continue };
        let offset = c as u64 * GRAIN;
        let len = GRAIN.min(size - offset);
        match out.last_mut() {
            Some(p) if p.offset + p.len == offset && p.file == *file && p.file_offset + p.len == *file_offset => {
                p.len += len
            }
            _ => out.push(Patch { offset, len, file: file.clone(), file_offset: *file_offset }),
        }
    }
    out
}

/// Writes one region (allocation or global): unchanged since the last checkpoint, it is held as
/// it was; mostly clean, only its dirty chunks go to a new file, as patches over what held it;
/// otherwise all of it goes to a new base file. Returns the manifest entry and the bytes written.
fn write_region(
    pipe: &Pipe,
    dir: &Path,
    generation: u64,
    kind: &str,
    mut m: Memory,
    old: Option<&dirty::Region<Memory>>,
) -> Result<(Memory, u64)> {
    let address = m.address;
    let file = region_file(kind, address, generation);
    if let Some(old) = old.filter(|o| o.size == m.size) {
        let runs = old.dirty_runs();
        let dirty: u64 = runs.iter().map(|r| r.1).sum();
        if dirty == 0 {
            return Ok((Memory { file: old.held.file.clone(), patches: old.held.patches.clone(), ..m }, 0));
        }
        // Past half, a new base costs at most twice the patches and keeps reading simple.
        if dirty * 2 <= m.size {
            pipe.copy(address, &runs, &dir.join(&file))?;
            let mut src = chunk_sources(&old.held);
            let mut at = 0;
            for (off, len) in runs {
                for c in off / GRAIN..(off + len).div_ceil(GRAIN) {
                    src[c as usize] = Some((file.clone(), at + (c * GRAIN - off)));
                }
                at += len;
            }
            m.file = old.held.file.clone();
            m.patches = patches_of(m.size, &src);
            return Ok((m, dirty));
        }
    }
    pipe.copy(address, &[(0, m.size)], &dir.join(&file))?;
    m.file = file;
    m.patches = Vec::new();
    let size = m.size;
    Ok((m, size))
}

/// The manifest a directory holds, if any, of either version.
pub fn load(dir: &Path) -> Result<Manifest> {
    let path = dir.join("manifest.json");
    let text = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let m: Manifest = serde_json::from_slice(&text).with_context(|| format!("parsing {}", path.display()))?;
    if m.format != FORMAT {
        bail!("{}: format {:?}, not {FORMAT:?}", path.display(), m.format);
    }
    if !(1..=FORMAT_VERSION).contains(&m.format_version) {
        bail!("{}: format_version {} (this daemon reads 1 to {FORMAT_VERSION})", path.display(), m.format_version);
    }
    Ok(m)
}

/// A region's bytes from a checkpoint of either version: its base file, then its patches in order
/// (the restore copies the same to the device piece by piece, restore.rs `patch_in`).
#[cfg(test)]
fn read_memory(dir: &Path, m: &Memory) -> Result<Vec<u8>> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let base = dir.join(&m.file);
    let mut bytes = std::fs::read(&base).with_context(|| format!("reading {}", base.display()))?;
    if bytes.len() as u64 != m.size {
        bail!("{}: {} bytes, the manifest says {}", base.display(), bytes.len(), m.size);
    }
    for p in &m.patches {
        let end = p.offset.checked_add(p.len).filter(|&e| e <= m.size);
        let Some(end) = end else { bail!("{}: a patch past the region's end", base.display()) };
        let path = dir.join(&p.file);
        let mut f = std::fs::File::open(&path).with_context(|| format!("opening {}", path.display()))?;
        f.seek(SeekFrom::Start(p.file_offset))?;
        f.read_exact(&mut bytes[p.offset as usize..end as usize])
            .with_context(|| format!("reading {} bytes at {} of {}", p.len, p.file_offset, path.display()))?;
    }
    Ok(bytes)
}

fn write(s: &mut Session, dir: &Path) -> Result<Written> {
    let shared = s.shared.clone();
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // What the directory holds now: the next generation's files never overwrite its files.
    let before = load(dir).ok();
    let generation = before.as_ref().map_or(1, |m| m.generation + 1);
    // Incremental only over this session's own last checkpoint, still in place.
    let prev =
        s.ckpt.clean.take().filter(|c| {
            c.dir == dir && before.as_ref().is_some_and(|m| m.session == s.id && m.generation == c.generation)
        });
    let t0 = Instant::now();
    for (d, tc) in &s.tenant_ctxs {
        call!(shared.cuda, cuCtxSetCurrent(tc.ctx.0)).map_err(|e| anyhow!("device {d}: cuCtxSetCurrent: {e}"))?;
        call!(shared.cuda, cuCtxSynchronize()).map_err(|e| anyhow!("device {d}: draining the session: {e}"))?;
    }
    let drain = t0.elapsed();
    let t1 = Instant::now();
    let enter = |d: u32| -> Result<()> {
        let tc = s.tenant_ctxs.get(&d).ok_or_else(|| anyhow!("no context on device {d}"))?;
        call!(shared.cuda, cuCtxSetCurrent(tc.ctx.0)).map_err(|e| anyhow!("device {d}: cuCtxSetCurrent: {e}"))
    };
    // Memory another session may write (an IPC export) is never known clean.
    let known = prev.as_ref().filter(|p| !p.all_dirty && !s.ckpt.exported);
    let old = |a: u64| known.and_then(|p| p.regions.get(&a));
    let mut bytes = 0;
    let mut written = 0;
    let (allocations, globals) = with_pipe(&shared, |pipe| {
        let mut allocations = Vec::new();
        for (&address, a) in &s.allocs {
            enter(a.device)?;
            let m = Memory::new(address, a.size, a.device, None);
            let (m, n) = write_region(pipe, dir, generation, "alloc", m, old(address))?;
            bytes += a.size;
            written += n;
            allocations.push(m);
        }
        let mut globals = Vec::new();
        for (&address, &(size, module, device)) in &s.globals {
            enter(device)?;
            let m = Memory::new(address, size, device, Some(module.0));
            let (m, n) = write_region(pipe, dir, generation, "global", m, old(address))?;
            bytes += size;
            written += n;
            globals.push(m);
        }
        Ok((allocations, globals))
    })?;
    let mut modules: Vec<Module> = Vec::new();
    for (&id, &(_, device)) in &s.modules {
        let kept = prev.as_ref().and(before.as_ref()).and_then(|b| b.modules.iter().find(|m| m.id == id.0));
        let image = match (kept.and_then(|m| m.image.clone()), s.ckpt.images.get(&id)) {
            (Some(file), _) => Some(file),
            (None, Some(img)) => {
                let file = format!("module-{}-{generation}.image", id.0);
                write_file(&dir.join(&file), img)?;
                written += img.len() as u64;
                Some(file)
            }
            (None, None) => None,
        };
        let mut functions: Vec<Function> = s
            .funcs
            .iter()
            .filter(|(_, f)| f.module == id)
            .map(|(fid, _)| Function { id: fid.0, name: s.ckpt.names.get(fid).cloned() })
            .collect();
        functions.sort_by_key(|f| f.id);
        modules.push(Module { id: id.0, device, image, functions });
    }
    modules.sort_by_key(|m| m.id);
    let primaries: Vec<_> = s.primary.values().copied().collect();
    let mut contexts: Vec<Context> =
        s.ctxs.iter().map(|(id, &device)| Context { id: id.0, device, primary: primaries.contains(id) }).collect();
    contexts.sort_by_key(|c| c.id);
    let mut streams: Vec<Handle> = s.streams.iter().map(|(id, &(_, device))| Handle { id: id.0, device }).collect();
    streams.sort_by_key(|h| h.id);
    let mut events: Vec<Handle> = s.events.iter().map(|(id, &(_, device))| Handle { id: id.0, device }).collect();
    events.sort_by_key(|h| h.id);
    let snapshot = shared.ledger.snapshot(shared.devices.len() as u32);
    let ledger = snapshot
        .tenants
        .iter()
        .filter(|t| t.tenant == *s.quota.tenant())
        .flat_map(|t| t.devices.iter())
        .filter(|u| s.tenant_ctxs.contains_key(&u.device))
        .map(|u| Ledger { device: u.device, used: u.used, pending: u.pending, quota: u.quota })
        .collect();
    let incremental = prev.is_some() && written < bytes;
    let manifest = Manifest {
        format: FORMAT.into(),
        format_version: FORMAT_VERSION,
        generation,
        incremental,
        session: s.id,
        tenant: s.tenant().to_string(),
        pid: s.cred.pid,
        uid: s.cred.uid,
        created_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis()),
        contexts,
        allocations,
        globals,
        modules,
        streams,
        events,
        ledger,
        secret: Some(s.secret.iter().map(|b| format!("{b:02x}")).collect()),
        last_request: s.last_request,
    };
    // The manifest last, replacing the previous one in one rename: a directory with a manifest
    // holds a complete checkpoint, the old one until the new one is whole.
    let text = serde_json::to_vec_pretty(&manifest)?;
    let tmp = dir.join("manifest.json.tmp");
    write_file(&tmp, &text)?;
    std::fs::rename(&tmp, dir.join("manifest.json")).with_context(|| format!("renaming {}", tmp.display()))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing the directory {}", dir.display()))?;
    remove_unreferenced(dir, &manifest);
    let write = t1.elapsed();
    let region = |m: &Memory| (m.address, dirty::Region::new(m.size, m.clone()));
    let regions = manifest.allocations.iter().chain(&manifest.globals).map(region).collect();
    s.ckpt.clean = Some(dirty::Clean { dir: dir.to_path_buf(), generation, regions, all_dirty: false });
    Ok(Written {
        session: s.id,
        dir: dir.to_path_buf(),
        bytes,
        written,
        generation,
        incremental,
        drain_ns: drain.as_nanos() as u64,
        write_ns: write.as_nanos() as u64,
    })
}

/// Deletes the region and image files of earlier generations that `m` no longer refers to.
fn remove_unreferenced(dir: &Path, m: &Manifest) {
    let mut keep: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for r in m.allocations.iter().chain(&m.globals) {
        keep.insert(&r.file);
        keep.extend(r.patches.iter().map(|p| p.file.as_str()));
    }
    keep.extend(m.modules.iter().filter_map(|x| x.image.as_deref()));
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let ours = ["alloc-", "global-", "module-"].iter().any(|p| name.starts_with(p));
        if ours
            && !keep.contains(name)
            && let Err(err) = std::fs::remove_file(e.path())
        {
            tracing::warn!("checkpoint {}: removing {name}: {err}", dir.display());
        }
    }
}

/// The sessions `target` names: a live session's id, else every live session of a tenant
/// (then true: each is written under `session-ID`).
fn resolve(shared: &Shared, target: &str) -> Result<(Vec<u64>, bool)> {
    let sessions = shared.sessions.lock().unwrap_or_else(|e| e.into_inner());
    if let Ok(id) = target.parse::<u64>()
        && sessions.contains_key(&id)
    {
        return Ok((vec![id], false));
    }
    let ids: Vec<u64> = sessions.values().filter(|s| s.tenant == target).map(|s| s.id).collect();
    if ids.is_empty() {
        bail!("no session or tenant with live sessions named {target:?}");
    }
    Ok((ids, true))
}

/// Asks each session of `req.target` for its checkpoint and waits for all of them.
pub fn checkpoint(shared: &Shared, req: &Request) -> Result<Vec<Written>> {
    let (ids, many) = resolve(shared, &req.target)?;
    if !req.to.is_absolute() {
        bail!("--to must be an absolute path (the daemon writes it), not {}", req.to.display());
    }
    let p = &shared.checkpoints;
    {
        let mut jobs = p.jobs();
        if let Some(id) = ids.iter().find(|id| jobs.contains_key(id)) {
            bail!("session {id} is being checkpointed already");
        }
        for &id in &ids {
            let dir = if many { req.to.join(format!("session-{id}")) } else { req.to.clone() };
            jobs.insert(id, Job { dir, periodic: false, running: false, result: None });
            p.any.fetch_add(1, Ordering::AcqRel);
        }
    }
    let deadline = Instant::now() + req.timeout_ms.map_or(DEFAULT_TIMEOUT, Duration::from_millis);
    let mut jobs = p.jobs();
    loop {
        let waiting = ids.iter().any(|id| jobs.get(id).is_some_and(|j| j.result.is_none()));
        let now = Instant::now();
        let gone = |id: &u64| !shared.sessions.lock().unwrap_or_else(|e| e.into_inner()).contains_key(id);
        if !waiting || (now >= deadline && ids.iter().all(|id| jobs.get(id).is_none_or(|j| !j.running))) {
            break;
        }
        // A session that ended before taking its job will never take it.
        if ids.iter().all(|id| jobs.get(id).is_none_or(|j| j.result.is_some() || (!j.running && gone(id)))) {
            break;
        }
        jobs = p.cv.wait_timeout(jobs, Duration::from_millis(50)).unwrap_or_else(|e| e.into_inner()).0;
    }
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for id in &ids {
        let job = jobs.remove(id);
        p.any.fetch_sub(1, Ordering::AcqRel);
        match job.and_then(|j| j.result) {
            Some(Ok(w)) => out.push(w),
            Some(Err(e)) => errors.push(format!("session {id}: {e}")),
            None => errors.push(format!("session {id}: ended or made no call before the checkpoint could be taken")),
        }
    }
    if !errors.is_empty() {
        bail!("{}", errors.join("; "));
    }
    Ok(out)
}

/// Serves `<socket>.ckpt`: only root and the daemon's own user may checkpoint.
pub fn control_loop(shared: Arc<Shared>, listener: UnixListener) {
    for stream in listener.incoming() {
        if shared.stopping() {
            break;
        }
        let Ok(stream) = stream else { continue };
        let s = shared.clone();
        let _ = std::thread::Builder::new().name("gpupool-ckpt".into()).spawn(move || answer(&s, stream));
    }
}

fn answer(shared: &Shared, mut stream: UnixStream) {
    let me = rustix::process::getuid().as_raw();
    let reply = match super::listener::peer_cred(&stream) {
        Err(e) => {
            tracing::warn!("checkpoint request: SO_PEERCRED failed ({e}); refused");
            return;
        }
        Ok(c) if c.uid != 0 && c.uid != me => {
            tracing::warn!(pid = c.pid, uid = c.uid, "checkpoint request refused: not root nor the daemon's user");
            Reply { ok: false, error: Some("only root or the daemon's user may checkpoint".into()), sessions: vec![] }
        }
        Ok(c) => {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut line = String::new();
            let read =
                stream.try_clone().map(|s| BufReader::new(std::io::Read::take(s, MAX_REQUEST)).read_line(&mut line));
            let req = match read {
                Ok(Ok(_)) => serde_json::from_str::<Request>(&line).map_err(|e| anyhow!("malformed request: {e}")),
                Ok(Err(e)) | Err(e) => Err(anyhow!("reading the request: {e}")),
            };
            match req.and_then(|r| checkpoint(shared, &r)) {
                Ok(sessions) => Reply { ok: true, error: None, sessions },
                Err(e) => {
                    tracing::warn!(pid = c.pid, "checkpoint refused or failed: {e:#}");
                    Reply { ok: false, error: Some(format!("{e:#}")), sessions: vec![] }
                }
            }
        }
    };
    let mut text = serde_json::to_string(&reply).unwrap_or_else(|_| "{\"ok\":false}".into());
    text.push('\n');
    let _ = stream.write_all(text.as_bytes());
}

/// `gpupool checkpoint`: asks the daemon at `socket` and prints what was written.
pub fn run_cli(endpoint: Option<String>, target: String, to: PathBuf, timeout_s: f64) -> Result<()> {
    let socket = match crate::status::Source::new(endpoint)? {
        crate::status::Source::Local(socket) => socket,
        crate::status::Source::Remote(ep) => bail!("{ep}: checkpoints are asked on this host (unix://)"),
    };
    let timeout = Duration::try_from_secs_f64(timeout_s).map_err(|e| anyhow!("--timeout: {e}"))?;
    let to = std::path::absolute(&to).with_context(|| format!("--to {}", to.display()))?;
    let path = socket_path(&socket);
    let mut stream = UnixStream::connect(&path).with_context(|| format!("connecting to {}", path.display()))?;
    let req = Request { target, to, timeout_ms: Some(timeout.as_millis() as u64) };
    let mut text = serde_json::to_string(&req)?;
    text.push('\n');
    stream.write_all(text.as_bytes())?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).context("reading the daemon's answer")?;
    let reply: Reply = serde_json::from_str(&line).with_context(|| format!("a malformed answer: {line:?}"))?;
    if !reply.ok {
        bail!("checkpoint failed: {}", reply.error.unwrap_or_default());
    }
    for w in &reply.sessions {
        println!(
            "session {}: {} bytes to {}, generation {}, {} {} bytes (drain {:.3} s, write {:.3} s, {:.1} MB/s)",
            w.session,
            w.bytes,
            w.dir.display(),
            w.generation,
            if w.incremental { "incremental, wrote" } else { "full, wrote" },
            w.written,
            w.drain_ns as f64 / 1e9,
            w.write_ns as f64 / 1e9,
            w.written as f64 / 1e6 / (w.write_ns as f64 / 1e9).max(1e-9)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_replace_what_they_cover_and_read_back_over_the_base() {
        let dir = std::env::temp_dir().join(format!("gpupool-ckpt-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let size = 4 * GRAIN + 7;
        let base: Vec<u8> = (0..size).map(|i| i as u8).collect();
        std::fs::write(dir.join("b"), &base).unwrap();
        let mut m = Memory::new(0x1000, size, 0, None);
        m.file = "b".into();
        // Generation 2 changed chunk 1 and the partial last chunk; generation 3 chunks 1 and 2.
        std::fs::write(dir.join("p2"), [vec![0xaa; GRAIN as usize], vec![0xbb; 7]].concat()).unwrap();
        let mut src = chunk_sources(&m);
        src[1] = Some(("p2".into(), 0));
        src[4] = Some(("p2".into(), GRAIN));
        m.patches = patches_of(size, &src);
        assert_eq!(m.patches.len(), 2, "{:?}", m.patches);
        std::fs::write(dir.join("p3"), [vec![0xcc; GRAIN as usize], vec![0xdd; GRAIN as usize]].concat()).unwrap();
        let mut src = chunk_sources(&m);
        src[1] = Some(("p3".into(), 0));
        src[2] = Some(("p3".into(), GRAIN));
        m.patches = patches_of(size, &src);
        assert_eq!(
            m.patches,
            vec![
                Patch { offset: GRAIN, len: 2 * GRAIN, file: "p3".into(), file_offset: 0 },
                Patch { offset: 4 * GRAIN, len: 7, file: "p2".into(), file_offset: GRAIN },
            ]
        );
        let mut want = base.clone();
        want[GRAIN as usize..2 * GRAIN as usize].fill(0xcc);
        want[2 * GRAIN as usize..3 * GRAIN as usize].fill(0xdd);
        want[4 * GRAIN as usize..].fill(0xbb);
        assert!(read_memory(&dir, &m).unwrap() == want);
        // A patch past the region's end is refused, not read.
        m.patches.push(Patch { offset: size - 1, len: 2, file: "p3".into(), file_offset: 0 });
        assert!(read_memory(&dir, &m).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct TenantLabel {
    tenant: String,
}

/// `gpupool_tenant_checkpoints_total`, `_checkpoint_failures_total`, `_checkpoint_written_bytes_total`,
/// `_checkpoint_paused_seconds_total` and the last checkpoint's `gpupool_tenant_checkpoint_last_*`,
/// from the status document's `checkpoints`.
pub fn register_metrics(reg: &mut prometheus_client::registry::Registry, doc: &serde_json::Value) {
    use prometheus_client::metrics::{counter::Counter, family::Family, gauge::Gauge};
    use prometheus_client::registry::Unit;
    use std::sync::atomic::AtomicU64;
    type F64Counter = Counter<f64, AtomicU64>;
    type F64Gauge = Gauge<f64, AtomicU64>;
    let count = Family::<TenantLabel, Counter>::default();
    let failures = Family::<TenantLabel, Counter>::default();
    let written = Family::<TenantLabel, Counter>::default();
    let paused = Family::<TenantLabel, F64Counter>::default();
    let last_time = Family::<TenantLabel, F64Gauge>::default();
    let last_bytes = Family::<TenantLabel, Gauge>::default();
    let last_written = Family::<TenantLabel, Gauge>::default();
    let last_duration = Family::<TenantLabel, F64Gauge>::default();
    let last_pause = Family::<TenantLabel, F64Gauge>::default();
    for t in doc["checkpoints"]["tenants"].as_array().into_iter().flatten() {
        let l = TenantLabel { tenant: t["tenant"].as_str().unwrap_or("?").to_string() };
        let n = |k: &str| t[k].as_f64().unwrap_or(0.0);
        count.get_or_create(&l).inc_by(t["checkpoints"].as_u64().unwrap_or(0));
        failures.get_or_create(&l).inc_by(t["failures"].as_u64().unwrap_or(0));
        written.get_or_create(&l).inc_by(t["written_bytes"].as_u64().unwrap_or(0));
        paused.get_or_create(&l).inc_by(n("paused_ns") / 1e9);
        last_time.get_or_create(&l).set(n("last_unix_ms") / 1e3);
        last_bytes.get_or_create(&l).set(t["last_bytes"].as_i64().unwrap_or(0));
        last_written.get_or_create(&l).set(t["last_written_bytes"].as_i64().unwrap_or(0));
        last_duration.get_or_create(&l).set((n("last_drain_ns") + n("last_write_ns")) / 1e9);
        last_pause.get_or_create(&l).set(n("last_pause_ns") / 1e9);
    }
    reg.register("tenant_checkpoints", "Checkpoints written of a tenant's sessions (asked and periodic)", count);
    reg.register("tenant_checkpoint_failures", "Checkpoints of a tenant's sessions that failed", failures);
    reg.register_with_unit(
        "tenant_checkpoint_written",
        "Bytes written by a tenant's checkpoints, in all",
        Unit::Bytes,
        written,
    );
    reg.register_with_unit(
        "tenant_checkpoint_paused",
        "Time a tenant's requests waited for its checkpoints, in all",
        Unit::Seconds,
        paused,
    );
    reg.register_with_unit(
        "tenant_checkpoint_last_time",
        "When a tenant's last checkpoint ended (Unix time)",
        Unit::Seconds,
        last_time,
    );
    reg.register_with_unit(
        "tenant_checkpoint_last",
        "Device bytes a tenant's last checkpoint holds",
        Unit::Bytes,
        last_bytes,
    );
    reg.register_with_unit(
        "tenant_checkpoint_last_written",
        "Bytes a tenant's last checkpoint wrote",
        Unit::Bytes,
        last_written,
    );
    reg.register_with_unit(
        "tenant_checkpoint_last_duration",
        "A tenant's last checkpoint: drain plus write",
        Unit::Seconds,
        last_duration,
    );
    reg.register_with_unit(
        "tenant_checkpoint_last_pause",
        "What the client's next call waited for a tenant's last checkpoint",
        Unit::Seconds,
        last_pause,
    );
}
