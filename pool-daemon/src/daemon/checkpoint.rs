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
use gpupool_protocol::{FuncId, ModuleId};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The manifest's `format_version`; a reader refuses versions it does not know.
pub const FORMAT_VERSION: u32 = 1;
/// The manifest's `format`.
pub const FORMAT: &str = "gpupool-checkpoint";
/// How long a checkpoint waits for a session's thread to take it, unless the request says.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes copied from the device per step (one host buffer of this size is reused).
const CHUNK: u64 = 64 << 20;
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
    pub bytes: u64,
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

#[derive(Serialize, Deserialize)]
pub struct Memory {
    pub address: u64,
    pub size: u64,
    pub device: u32,
    /// The module of a global.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<u64>,
    /// Relative to the manifest's directory: exactly `size` bytes.
    pub file: String,
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
}

struct Job {
    dir: PathBuf,
    running: bool,
    result: Option<std::result::Result<Written, String>>,
}

/// The daemon-wide side ([`Shared::checkpoints`]): checkpoints asked and not yet answered.
#[derive(Default)]
pub struct Pending {
    any: AtomicUsize,
    jobs: Mutex<HashMap<u64, Job>>,
    cv: Condvar,
}

impl Pending {
    fn jobs(&self) -> MutexGuard<'_, HashMap<u64, Job>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Called by a session's thread between requests: writes a checkpoint asked of it, if any.
pub fn at_call(s: &mut Session) {
    let shared = s.shared.clone();
    let p = &shared.checkpoints;
    if p.any.load(Ordering::Acquire) == 0 {
        return;
    }
    let dir = match p.jobs().get_mut(&s.id) {
        Some(j) if !j.running && j.result.is_none() => {
            j.running = true;
            j.dir.clone()
        }
        _ => return,
    };
    // Inside the eviction gate (issue 22): memory being evicted is waited for, and no eviction
    // unmaps the session's memory while it is copied.
    let inside = super::evict::gate(s);
    let res = write(s, &dir).map_err(|e| format!("{e:#}"));
    drop(inside);
    // The drain made the session's contexts current on this thread.
    s.current = Raw(std::ptr::null_mut());
    match &res {
        Ok(w) => tracing::info!(session = s.id, dir = %dir.display(), bytes = w.bytes,
            drain_ms = w.drain_ns / 1_000_000, write_ms = w.write_ns / 1_000_000, "checkpoint written"),
        Err(e) => tracing::warn!(session = s.id, dir = %dir.display(), "checkpoint failed: {e}"),
    }
    if let Some(j) = p.jobs().get_mut(&s.id) {
        j.result = Some(res);
    }
    p.cv.notify_all();
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    f.write_all(bytes).with_context(|| format!("writing {}", path.display()))?;
    f.sync_all().with_context(|| format!("syncing {}", path.display()))
}

/// Copies `size` bytes at `address` (its device's context current) to `path`.
fn copy_out(shared: &Shared, address: u64, size: u64, path: &Path, buf: &mut Vec<u8>) -> Result<()> {
    let mut f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut off = 0;
    while off < size {
        let n = CHUNK.min(size - off) as usize;
        if buf.len() < n {
            buf.try_reserve_exact(n - buf.len()).map_err(|e| anyhow!("host memory for {n} bytes: {e}"))?;
            buf.resize(n, 0);
        }
        call!(shared.cuda, cuMemcpyDtoH_v2(buf.as_mut_ptr().cast(), address + off, n))
            .map_err(|e| anyhow!("copying {n} bytes at {:#x}: {e}", address + off))?;
        f.write_all(&buf[..n]).with_context(|| format!("writing {}", path.display()))?;
        off += n as u64;
    }
    f.sync_all().with_context(|| format!("syncing {}", path.display()))
}

fn write(s: &mut Session, dir: &Path) -> Result<Written> {
    let shared = s.shared.clone();
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
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
    let mut buf = Vec::new();
    let mut bytes = 0;
    let mut allocations = Vec::new();
    for (&address, a) in &s.allocs {
        enter(a.device)?;
        let file = format!("alloc-{address:016x}.bin");
        copy_out(&shared, address, a.size, &dir.join(&file), &mut buf)?;
        bytes += a.size;
        allocations.push(Memory { address, size: a.size, device: a.device, module: None, file });
    }
    let mut globals = Vec::new();
    for (&address, &(size, module, device)) in &s.globals {
        enter(device)?;
        let file = format!("global-{address:016x}.bin");
        copy_out(&shared, address, size, &dir.join(&file), &mut buf)?;
        bytes += size;
        globals.push(Memory { address, size, device, module: Some(module.0), file });
    }
    let mut modules: Vec<Module> = Vec::new();
    for (&id, &(_, device)) in &s.modules {
        let image = match s.ckpt.images.get(&id) {
            Some(img) => {
                let file = format!("module-{}.image", id.0);
                write_file(&dir.join(&file), img)?;
                Some(file)
            }
            None => None,
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
    let manifest = Manifest {
        format: FORMAT.into(),
        format_version: FORMAT_VERSION,
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
    // The manifest last: a directory with a manifest holds a complete checkpoint.
    let text = serde_json::to_vec_pretty(&manifest)?;
    write_file(&dir.join("manifest.json"), &text)?;
    Ok(Written {
        session: s.id,
        dir: dir.to_path_buf(),
        bytes,
        drain_ns: drain.as_nanos() as u64,
        write_ns: t1.elapsed().as_nanos() as u64,
    })
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
            jobs.insert(id, Job { dir, running: false, result: None });
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
            "session {}: {} bytes to {} (drain {:.3} s, write {:.3} s, {:.1} MB/s)",
            w.session,
            w.bytes,
            w.dir.display(),
            w.drain_ns as f64 / 1e9,
            w.write_ns as f64 / 1e9,
            w.bytes as f64 / 1e6 / (w.write_ns as f64 / 1e9).max(1e-9)
        );
    }
    Ok(())
}
