//! One client session: its transport (shared memory for a local client, TCP or TLS for a
//! remote one), the hello handshake (the tenant from SO_PEERCRED and the quota config
//! locally; from the token alone over the network; from the endpoint through a container's
//! socket, [`super::containers`]), then requests until Bye, the client's
//! death, a malformed frame or shutdown; then [`super::cleanup`] frees everything it owned.

use super::admission::{HELLO_TIMEOUT, Ticket};
use super::dispatch::{Cx, Fail, NOT_PERMITTED};
use super::exec::QueuedLaunch;
use super::listener::PeerCred;
use super::{Raw, SessionInfo, Shared, TenantCtx};
use crate::backend::device_output;
use gpupool_protocol::bulk::{self, Bulk, BulkView};
use gpupool_protocol::frame::split_frame;
use gpupool_protocol::ops::{DeviceInfo, ParamInfo};
use gpupool_protocol::transport::net::NetTransport;
use gpupool_protocol::transport::shm::{ShmConfig, ShmTransport, WaitPolicy};
use gpupool_protocol::transport::{Transport, TransportError};
use gpupool_protocol::{
    CtxId, EventId, FuncId, Message, ModuleId, PROTOCOL_VERSION, Reply, Request, RequestOp, StreamId,
};
use gpupool_quota::{ClientRequest, MemoryQuota};
use gpupool_shim::cuda::{CUcontext, CUevent, CUfunction, CUmodule, CUstream};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often an idle session looks at the shutdown flag.
const IDLE_POLL: Duration = Duration::from_millis(100);

pub struct Alloc {
    pub size: u64,
    pub device: u32,
}

pub struct Func {
    pub f: Raw<CUfunction>,
    pub module: ModuleId,
    pub device: u32,
    pub params: Vec<ParamInfo>,
}

/// Everything one client owns, by the ids the daemon handed it.
pub struct Session {
    pub shared: Arc<Shared>,
    pub id: u64,
    pub cred: PeerCred,
    pub quota: gpupool_quota::Session,
    /// The tenant's context per device this session touched.
    pub tenant_ctxs: BTreeMap<u32, Arc<TenantCtx>>,
    /// Client-visible contexts → device.
    pub ctxs: super::HandleMap<CtxId, u32>,
    pub primary: HashMap<u32, CtxId>,
    pub allocs: BTreeMap<u64, Alloc>,
    /// Module globals: address → (size, module, device).
    pub globals: BTreeMap<u64, (u64, ModuleId, u32)>,
    pub streams: super::HandleMap<StreamId, (Raw<CUstream>, u32)>,
    /// The session's own default stream per device, and the legacy ordering ([`super::legacy`]).
    pub legacy: super::legacy::Legacy,
    /// An event after the last operation of each stream the session destroyed while work was
    /// queued on it, by device: that work still runs, and the session's `cuCtxSynchronize`
    /// waits for it as the driver's would (events of the tenant context's pool).
    pub stream_tails: Vec<(u32, Raw<CUevent>)>,
    pub events: super::HandleMap<EventId, (Raw<CUevent>, u32)>,
    pub modules: HashMap<ModuleId, (Raw<CUmodule>, u32)>,
    pub funcs: super::HandleMap<FuncId, Func>,
    /// Client host-memory regions by id ([`super::regions`]).
    pub regions: HashMap<u64, super::regions::Region>,
    /// Allocations of the tenant's other sessions opened from IPC handles ([`super::ipc`]).
    pub ipc: super::ipc::Imports,
    /// The client context each allocation, stream, event and module was created through.
    pub owner: HashMap<super::cleanup::Handle, CtxId>,
    pub tenant_name: String,
    /// The client's address, for a session over the network.
    pub remote: Option<SocketAddr>,
    /// The session's socket (a duplicate), to notice the client's death while the session waits
    /// for compute credit (the request loop notices it through the transport).
    pub peer: Option<OwnedFd>,
    /// The container endpoint the session came through; its removal ends the session.
    pub container: Option<Arc<super::containers::Endpoint>>,
    /// The compute percent this client may use (its tenant's, or less if it narrowed it).
    pub compute_limit: u8,
    /// cuBLAS / cuBLASLt handles ([`super::blas`]).
    pub blas: super::blas::Handles,
    /// Reservations, allocation handles and mappings ([`super::vmm`]).
    pub vmm: super::vmm::Owned,
    /// Graphs, instantiated graphs and captures ([`super::graph`]).
    pub graphs: super::graph::Graphs,
    /// Texture objects ([`super::texture`]).
    pub textures: super::texture::Textures,
    /// CUDA arrays, mipmapped arrays and surface objects ([`super::array`]).
    pub arrays: super::array::Arrays,
    /// NPU operators' executors between their two phases ([`super::npu`]).
    pub npu_execs: super::npu::Execs,
    /// The GPUs placed for this session ([`super::placement`]); None: every device.
    pub placed: Option<Vec<u32>>,
    /// Module images and function names for checkpoints ([`super::checkpoint`]).
    pub ckpt: super::checkpoint::Record,
    /// Minted at the hello, saved in checkpoints: a client presents it to resume this session
    /// on a daemon that restored it ([`super::restore`]).
    pub secret: [u8; 16],
    /// The id of the last request served (what a checkpoint written now has seen).
    pub last_request: u64,
    next_handle: u64,
    pub current: Raw<CUcontext>,
    /// The buffer of the last bulk device-to-host reply, sent and kept for the next one
    /// ([`Session::reply_buffer`]).
    reply_spare: Vec<u8>,
}

impl Session {
    /// A buffer of `len` bytes for a device-to-host reply, every one of which the caller
    /// overwrites before it is sent: the last bulk reply's buffer when there is one. A fresh
    /// one per chunk cost a zeroing pass over it and its allocation (a megabyte of each per
    /// chunk over the network).
    pub(super) fn reply_buffer(&mut self, len: usize) -> Vec<u8> {
        if len <= BULK_REPLY_MIN {
            // Encoded into the reply frame, not handed back: the spare stays for bulk ones.
            return vec![0; len];
        }
        let mut out = std::mem::take(&mut self.reply_spare);
        // Only growth is zeroed: the bytes already there are this session's and overwritten.
        out.resize(len, 0);
        out
    }

    pub fn next_handle(&mut self) -> u64 {
        self.next_handle += 1;
        self.next_handle
    }

    /// A restore gives handles the values the client holds; new ones come after the largest.
    pub(super) fn handles_from(&mut self, last: u64) {
        self.next_handle = self.next_handle.max(last);
    }

    /// A session with nothing in it yet.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn empty(
        shared: Arc<Shared>,
        id: u64,
        cred: PeerCred,
        quota: gpupool_quota::Session,
        remote: Option<SocketAddr>,
        compute_limit: u8,
        container: Option<Arc<super::containers::Endpoint>>,
        placed: Option<Vec<u32>>,
        secret: [u8; 16],
    ) -> Session {
        let tenant_name = quota.tenant().as_str().to_string();
        Session {
            shared,
            id,
            cred,
            quota,
            tenant_ctxs: BTreeMap::new(),
            ctxs: Default::default(),
            primary: HashMap::new(),
            allocs: BTreeMap::new(),
            globals: BTreeMap::new(),
            streams: Default::default(),
            legacy: Default::default(),
            stream_tails: Vec::new(),
            events: Default::default(),
            modules: HashMap::new(),
            funcs: Default::default(),
            regions: HashMap::new(),
            ipc: Default::default(),
            owner: HashMap::new(),
            tenant_name,
            remote,
            compute_limit,
            container,
            peer: None,
            blas: Default::default(),
            vmm: Default::default(),
            graphs: Default::default(),
            textures: Default::default(),
            arrays: Default::default(),
            npu_execs: Default::default(),
            placed,
            ckpt: Default::default(),
            secret,
            last_request: 0,
            next_handle: 0,
            reply_spare: Vec::new(),
            current: Raw(std::ptr::null_mut()),
        }
    }

    pub fn tenant(&self) -> &str {
        self.quota.tenant().as_str()
    }
}

pub(super) fn reply(t: &mut dyn Transport, id: u64, op: Reply) -> Result<(), TransportError> {
    let frame = Message::Reply { id, op }.encode().map_err(|e| TransportError::Corrupt(e.to_string()))?;
    t.send(&frame)
}

/// Who is at the other end of a session's transport.
enum Origin {
    /// A process on this host, as the kernel reports it.
    Local(PeerCred),
    /// A peer on the network: it authenticates with its token.
    Remote(SocketAddr),
    /// A process in a container, through the container's endpoint: the endpoint names the tenant.
    Container(PeerCred, Arc<super::containers::Endpoint>),
}

/// A transport and what only its kind of socket can do.
struct Link {
    t: Box<dyn Transport>,
    /// A duplicate of the socket, for hang-up checks while the session waits for the device.
    peer: Option<OwnedFd>,
    /// The unix socket that carries host-region fds (local sessions only).
    fds: Option<UnixStream>,
}

/// A local client's session thread: shared memory set up over its unix socket.
pub fn run(shared: Arc<Shared>, stream: UnixStream, cred: PeerCred, ticket: Ticket) {
    run_unix(shared, stream, Origin::Local(cred), cred, ticket)
}

/// A session thread for a client in a container, through the container's endpoint.
pub fn run_in_container(
    shared: Arc<Shared>,
    stream: UnixStream,
    cred: PeerCred,
    ticket: Ticket,
    endpoint: Arc<super::containers::Endpoint>,
) {
    run_unix(shared, stream, Origin::Container(cred, endpoint), cred, ticket)
}

fn run_unix(shared: Arc<Shared>, stream: UnixStream, origin: Origin, cred: PeerCred, ticket: Ticket) {
    let t0 = Instant::now();
    let config = ShmConfig { wait: WaitPolicy::session(), ..ShmConfig::default() };
    let transport = match ShmTransport::serve(stream, &config) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(pid = cred.pid, uid = cred.uid, "transport set-up failed: {e}");
            return;
        }
    };
    let fds = transport.socket().try_clone().ok();
    let peer = fds.as_ref().and_then(|s| s.try_clone().ok()).map(OwnedFd::from);
    run_link(shared, Link { t: Box::new(transport), peer, fds }, origin, t0, ticket);
}

/// A remote client's session thread, after its TLS (or plain TCP) handshake.
pub fn run_remote(shared: Arc<Shared>, transport: NetTransport, t0: Instant, ticket: Ticket) {
    let addr = transport.peer();
    let peer = transport.socket().try_clone().ok().map(OwnedFd::from);
    run_link(shared, Link { t: Box::new(transport), peer, fds: None }, Origin::Remote(addr), t0, ticket);
}

/// `ticket`: the connection's place among those waiting for their hello, given back once
/// the hello was answered or refused.
fn run_link(shared: Arc<Shared>, mut link: Link, origin: Origin, t0: Instant, ticket: Ticket) {
    let hello = hello(&shared, &mut link, &origin, t0);
    drop(ticket);
    let mut session = match hello {
        Ok(Opened::Session(s)) => *s,
        Ok(Opened::Answered) => {
            link.t.close();
            return;
        }
        Ok(Opened::HostChannel(ch, session)) => {
            let why = super::host_fn::serve(&ch, &mut *link.t, link.peer.as_ref());
            tracing::debug!(session, "host-function channel closed: {why}");
            link.t.close();
            return;
        }
        Err(why) => {
            match origin {
                Origin::Local(cred) => tracing::warn!(pid = cred.pid, uid = cred.uid, "hello refused: {why}"),
                Origin::Container(cred, ep) => {
                    tracing::warn!(pid = cred.pid, uid = cred.uid, container = %ep.id, "hello refused: {why}")
                }
                Origin::Remote(addr) => tracing::warn!(remote = %addr, "hello refused: {why}"),
            }
            link.t.close();
            return;
        }
    };
    // Through its cleanup too: what that flushes is the session's (device_output).
    let _output = device_output::SessionThread::start(session.id);
    let reason = serve(&mut session, &mut link);
    link.t.close();
    _output.client_gone();
    super::cleanup::end(session, &reason);
}

/// What a connection's first frame opened.
enum Opened {
    Session(Box<Session>),
    /// The status document was asked for and answered ([`super::status_view::connection`]).
    Answered,
    /// A session's host-function channel (of the session named), attached ([`super::host_fn`]).
    HostChannel(Arc<super::host_fn::Channel>, u64),
}

/// The session a hello opens, or what else the first frame asked for.
fn hello(shared: &Arc<Shared>, link: &mut Link, origin: &Origin, t0: Instant) -> Result<Opened, String> {
    let t = &mut *link.t;
    // The hello must come within HELLO_TIMEOUT (checking for shutdown meanwhile).
    let mut frame = Vec::new();
    loop {
        match t.recv_into(&mut frame, Some(IDLE_POLL)) {
            Ok(()) => break,
            Err(TransportError::Timeout) if t0.elapsed() < HELLO_TIMEOUT && !shared.stopping() => {}
            Err(e) => return Err(format!("no hello: {e}")),
        }
    }
    let (msg, _) = Message::decode(&frame).map_err(|e| format!("malformed hello frame: {e}"))?;
    if let Message::Request { id, op: Request::Status { token }, .. } = &msg {
        let (own, who) = match origin {
            Origin::Local(c) => (Some(shared.ledger.config().resolve(c.uid, c.gid, None)), format!("pid {}", c.pid)),
            Origin::Remote(addr) => (None, addr.to_string()),
            Origin::Container(c, ep) => (Some(ep.tenant.clone()), format!("pid {} in container {}", c.pid, ep.id)),
        };
        super::status_view::connection(shared, t, *id, token.as_deref(), own.as_ref(), &who);
        return Ok(Opened::Answered);
    }
    if let Message::Request { id, op: Request::Resume { session, secret, protocol_version }, .. } = &msg {
        let cred = match origin {
            Origin::Local(c) | Origin::Container(c, _) => Some(*c),
            Origin::Remote(_) => None,
        };
        let mut s =
            super::restore::resume(shared, *session, secret, *protocol_version, cred).map_err(|(code, why)| {
                let _ = reply(t, *id, Reply::Error { code, message: why.clone() });
                why
            })?;
        s.peer = link.peer.as_ref().and_then(|p| p.try_clone().ok());
        let devices = s.visible_devices().into_iter().map(|d| s.device_info(d)).collect();
        let hr = Reply::Resumed {
            session_id: s.id,
            tenant: s.tenant().to_string(),
            driver_version: shared.driver_version,
            devices,
            last_request: s.last_request,
        };
        if let Err(e) = reply(t, *id, hr) {
            // The client went again: the session waits for it anew.
            super::restore::wait_again(shared, s);
            return Err(format!("sending the resume reply: {e}"));
        }
        tracing::info!(session = s.id, tenant = %s.tenant(), "session resumed by its client after a restore");
        return Ok(Opened::Session(s));
    }
    if let Message::Request { id, op: Request::HostChannelAttach { session, secret }, .. } = &msg {
        return super::host_fn::attach(t, *id, *session, *secret).map(|ch| Opened::HostChannel(ch, *session));
    }
    let Message::Request {
        id,
        op: Request::Hello { pid, uid, gid, protocol_version, memory_limit, compute_percent, client_name, token, gpus },
        ..
    } = msg
    else {
        return Err(format!("first frame is not a hello: {msg:?}").chars().take(200).collect());
    };
    let refuse = |t: &mut dyn Transport, code: u32, message: String| {
        let _ = reply(t, id, Reply::Error { code, message: message.clone() });
        message
    };
    if protocol_version != PROTOCOL_VERSION {
        return Err(refuse(t, 1, format!("protocol version {protocol_version}, the daemon speaks {PROTOCOL_VERSION}")));
    }
    let config = shared.ledger.config();
    let (cred, remote, tenant) = match origin {
        Origin::Local(cred) => (*cred, None, config.resolve(cred.uid, cred.gid, token.as_deref())),
        // The socket is the capability: a token naming another tenant is refused, not obeyed.
        Origin::Container(cred, ep) => match token.as_deref().and_then(|tk| config.resolve_token(tk)) {
            Some(other) if other != ep.tenant => {
                let why = format!(
                    "container {}'s socket is bound to tenant `{}`; a token cannot name another tenant",
                    ep.id,
                    ep.tenant.as_str()
                );
                return Err(refuse(t, NOT_PERMITTED, why));
            }
            _ => (*cred, None, ep.tenant.clone()),
        },
        // Over the network only a token names a tenant: a uid means nothing across hosts.
        Origin::Remote(addr) => match token.as_deref().and_then(|tk| config.resolve_token(tk)) {
            Some(tenant) => (PeerCred { pid, uid, gid }, Some(*addr), tenant),
            None => {
                let why = if token.is_none() { "no token was presented" } else { "the token matches no tenant" };
                return Err(refuse(t, NOT_PERMITTED, format!("authentication failed: {why} (set GPUPOOL_TOKEN)")));
            }
        },
    };
    let mut request = ClientRequest {
        memory: memory_limit.map_or_else(MemoryQuota::default, MemoryQuota::all),
        compute: compute_percent,
    };
    let container = match origin {
        Origin::Container(_, ep) => {
            request = ep.narrow(request);
            Some(ep.clone())
        }
        _ => None,
    };
    let limits = config.effective_limits(&tenant, &request).map_err(|e| refuse(t, 1, e.to_string()))?;
    let quota = shared.ledger.open_session(&tenant, &request).map_err(|e| refuse(t, 1, e.to_string()))?;
    let id_s = shared.next_session_id();
    let tenant_devices = config.tenant(&tenant).and_then(|s| s.devices);
    let want = super::placement::wanted(tenant_devices, gpus, id_s);
    // Placed and recorded under one lock, so concurrent hellos see each other's placements.
    let mut sessions = shared.sessions.lock().unwrap_or_else(|e| e.into_inner());
    let (placed, placed_quota) = match want {
        Some(n) => match super::placement::place(shared, &sessions, n, &limits.memory) {
            Ok((p, q)) => (Some(p), q),
            Err((code, why)) => {
                drop(sessions);
                return Err(refuse(t, code, why));
            }
        },
        None => (None, Vec::new()),
    };
    sessions.insert(
        id_s,
        SessionInfo {
            id: id_s,
            pid: cred.pid,
            uid: cred.uid,
            gid: cred.gid,
            tenant: tenant.as_str().to_string(),
            client: client_name.clone(),
            remote,
            container: container.as_ref().map(|c| c.id.clone()),
            started_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis()),
            placement: placed.clone(),
            placed_quota,
        },
    );
    drop(sessions);
    let secret = match super::ipc::random_secret() {
        Ok(b) => b,
        Err(f) => {
            shared.sessions.lock().unwrap_or_else(|e| e.into_inner()).remove(&id_s);
            return Err(refuse(t, f.code, f.message));
        }
    };
    let mut session =
        Session::empty(shared.clone(), id_s, cred, quota, remote, limits.compute, container.clone(), placed, secret);
    session.peer = link.peer.as_ref().and_then(|p| p.try_clone().ok());
    let devices = session.visible_devices().into_iter().map(|d| session.device_info(d)).collect();
    let hr = Reply::HelloReply {
        session_id: id_s,
        tenant: tenant.as_str().to_string(),
        driver_version: shared.driver_version,
        devices,
    };
    if let Err(e) = reply(t, id, hr) {
        shared.sessions.lock().unwrap_or_else(|e| e.into_inner()).remove(&id_s);
        return Err(format!("sending the hello reply: {e}"));
    }
    tracing::info!(
        session = id_s, pid = cred.pid, uid = cred.uid, gid = cred.gid, remote = ?remote, tenant = %tenant.as_str(),
        container = ?container.as_ref().map(|c| c.id.as_str()),
        client = %client_name, memory = ?limits.memory, compute = limits.compute, placement = ?session.placed,
        clamped = limits.clamped.len(), hello_us = t0.elapsed().as_micros() as u64,
        "session start"
    );
    Ok(Opened::Session(Box::new(session)))
}

impl Session {
    /// The daemon's devices this session may use, in the order it numbers them: the GPUs it
    /// was placed on (all of them if it was not placed), then every NPU.
    pub fn visible_devices(&self) -> Vec<u32> {
        let gpus = self.shared.first_npu();
        let npus = gpus..self.shared.devices.len() as u32;
        match &self.placed {
            Some(p) => p.iter().copied().chain(npus).collect(),
            None => (0..self.shared.devices.len() as u32).collect(),
        }
    }

    /// A device as this tenant sees it: its quota as the total memory.
    pub fn device_info(&self, d: u32) -> DeviceInfo {
        let dev = &self.shared.devices[d as usize];
        let seen = self.shared.ledger.mem_info(&self.quota, d, dev.total_memory, dev.total_memory);
        DeviceInfo {
            ordinal: d,
            name: dev.name.clone(),
            uuid: dev.uuid,
            total_memory: seen.total,
            compute_capability: dev.compute_capability,
            attributes: dev.attributes.clone(),
            vendor: dev.vendor,
        }
    }
}

/// Replies with more bytes than this are sent as a head and the bytes ([`bulk`]); below
/// it, one copy into the reply buffer costs less than a second write.
const BULK_REPLY_MIN: usize = 64 << 10;
/// A bulk reply's buffer up to this size is kept for the session's next one: a network copy's
/// chunk (1 MiB), so that an idle session holds at most that much (a larger one-off reply's
/// buffer goes back to the allocator).
const REPLY_SPARE_MAX: usize = 1 << 20;

/// Serves requests until the session ends; returns why it ended.
fn serve(s: &mut Session, link: &mut Link) -> String {
    let t = &mut *link.t;
    let mut buf = Vec::new();
    let mut out = Vec::new();
    // A frame taken while looking for launches to batch ([`queued_launches`]), served next.
    let mut ahead = Vec::new();
    let mut have_ahead = false;
    loop {
        let got = if std::mem::take(&mut have_ahead) {
            std::mem::swap(&mut buf, &mut ahead);
            Ok(())
        } else {
            t.recv_into(&mut buf, Some(IDLE_POLL))
        };
        match got {
            Ok(()) => {}
            Err(TransportError::Timeout) => {
                // A quiet client's checkpoint is written here, within one poll.
                if let Err(why) = checkpoint_at_call(s, t, &mut out) {
                    return why;
                }
                if s.shared.stopping() {
                    return "daemon shutting down".into();
                }
                if s.container.as_ref().is_some_and(|c| c.removed()) {
                    return "the container's endpoint was removed".into();
                }
                continue;
            }
            Err(TransportError::PeerGone) => return "client gone (closed or died)".into(),
            Err(e) => return format!("transport failed: {e}"),
        }
        // Bulk requests (copies' bytes) are served from the frame in place; the header is
        // checked once for both readings.
        let (header, payload) = match split_frame(&buf) {
            Ok((h, p, _)) => (h, p),
            Err(e) => return format!("malformed frame: {e}"),
        };
        let view = match bulk::view_parts(&header, payload) {
            Ok(v) => v,
            Err(e) => return format!("malformed frame: {e}"),
        };
        let (id, no_reply, mut op) = match view {
            Some(v) => (v.id, v.no_reply, None),
            None => match Message::from_parts(&header, payload) {
                Ok(Message::Request { id, no_reply, op }) => (id, no_reply, Some(op)),
                Ok(Message::Bye) => return "bye".into(),
                Ok(other) => {
                    return format!("malformed: unexpected {:?} frame from a client", other.kind());
                }
                Err(e) => return format!("malformed frame: {e}"),
            },
        };
        let kind = match (&op, &view) {
            (Some(Request::Hello { .. }), _) => return "malformed: a second hello".into(),
            (Some(op), _) => op.op(),
            (None, Some(BulkView { bulk: Bulk::HtoD { .. }, .. })) => RequestOp::MemcpyHtoD,
            (None, Some(BulkView { bulk: Bulk::StagingWrite { .. }, .. })) => RequestOp::StagingWrite,
            (None, _) => return "malformed: unexpected Reply frame from a client".into(),
        };
        let name = kind.name();
        // A checkpoint asked of this session is written before the request is served.
        if let Err(why) = checkpoint_at_call(s, t, &mut out) {
            return why;
        }
        // What it may write, for the next incremental checkpoint (before serving: conservative).
        s.ckpt.note(op.as_ref(), view.as_ref());
        // Paused here while the tenant's memory is evicted (issue 22).
        let Ok(inside) = super::evict::gate(s) else {
            return "client gone (hung up while paused for memory preemption)".into();
        };
        if let Some(Request::LaunchKernel { stream, .. }) = &op
            && no_reply
            && s.shared.compute.enabled
        {
            let stream = *stream;
            // Noted above: the batch's other launches may write what the first may (anything).
            let launches = queued_launches(t, id, op.take(), stream, &mut ahead, &mut have_ahead);
            let n = (launches.len() as u32).max(1);
            let started = Instant::now();
            let done = s.launch_queued(stream, launches);
            drop(inside);
            let each = started.elapsed() / n;
            let mut served = 0;
            for (id, result) in done {
                s.last_request = id;
                match result {
                    Ok(()) => served += 1,
                    Err(Fail { code, message }) => {
                        s.shared.calls.record(s.id, kind, each, Some(code));
                        log_refusal(s, name, code, &message);
                        if let Err(why) = send(t, &mut out, Message::AsyncError { id, code, message }) {
                            return why;
                        }
                    }
                }
            }
            s.shared.calls.record_n(s.id, kind, each, served);
            continue;
        }
        let started = Instant::now();
        // A synchronous copy runs on the backend context's legacy stream, which the session's
        // streams are apart from: it waits for their work first, as it would in CUDA.
        let settled = if super::legacy::synchronous_copy(kind) { s.settle_legacy() } else { Ok(()) };
        let result = match (op, &view, settled) {
            (_, _, Err(e)) => Err(e),
            (Some(op), _, Ok(())) => op.serve(s, Cx { staging: t.staging(), fds: link.fds.as_ref() }),
            (None, Some(v), Ok(())) => s.handle_bulk(v, t.staging()),
            (None, None, Ok(())) => unreachable!("a request or a bulk view"),
        };
        drop(inside);
        s.last_request = id;
        s.shared.calls.record(s.id, kind, started.elapsed(), result.as_ref().err().map(|f| f.code));
        let msg = match result {
            Ok(_) if no_reply => continue,
            // Copied bytes go from the reply's buffer to the transport, not through `out`.
            Ok(Reply::Bytes { data }) if data.0.len() > BULK_REPLY_MIN => {
                if flushes_output(kind)
                    && let Err(why) = send_device_output(t, &mut out)
                {
                    return why;
                }
                out.clear();
                if let Err(e) = bulk::encode_head(id, false, Bulk::Bytes, data.0.len(), &mut out) {
                    return format!("cannot encode a reply: {e}");
                }
                let sent = t.send_parts(&[&out, &data.0], false);
                if data.0.capacity() <= REPLY_SPARE_MAX {
                    s.reply_spare = data.0;
                }
                match sent {
                    Ok(()) => continue,
                    Err(TransportError::PeerGone) => return "client gone (closed or died)".into(),
                    Err(e) => return format!("transport failed: {e}"),
                }
            }
            Ok(r) => Message::Reply { id, op: r },
            Err(Fail { code, message }) => {
                log_refusal(s, name, code, &message);
                if no_reply {
                    Message::AsyncError { id, code, message }
                } else {
                    Message::Reply { id, op: Reply::Error { code, message } }
                }
            }
        };
        if let Message::Reply { .. } = msg
            && flushes_output(kind)
            && let Err(why) = send_device_output(t, &mut out)
        {
            return why;
        }
        if let Err(why) = send(t, &mut out, msg) {
            return why;
        }
    }
}

/// Requests at which CUDA writes kernels' printf output (CUDA C++ Programming Guide, "Formatted
/// Output"): the session's device output goes to the client before their replies, and only
/// theirs, so a process never sees its kernels' lines before one of its own flush points, even
/// when another of the tenant's processes flushed them (a launch's own flush waits for the next).
fn flushes_output(op: RequestOp) -> bool {
    use RequestOp as R;
    (super::legacy::synchronous_copy(op) && op != R::Memset)
        || matches!(
            op,
            R::LaunchKernel
                | R::CtxSynchronize
                | R::StreamSynchronize
                | R::EventSynchronize
                | R::ModuleLoad
                | R::ModuleUnload
                | R::CtxDestroy
                | R::PrimaryCtxRelease
                | R::PrimaryCtxReset
        )
}

/// What the session's kernels printed and the daemon caught since it last sent some, to the
/// client before the reply to a request at which CUDA writes it ([`flushes_output`]): the client
/// reads frames while it waits for a reply, so the daemon never sends what it would not read
/// ([`device_output`]).
fn send_device_output(t: &mut dyn Transport, out: &mut Vec<u8>) -> Result<(), String> {
    let text = device_output::take_pending();
    for chunk in text.chunks(gpupool_protocol::MAX_PAYLOAD as usize) {
        send(t, out, Message::DeviceOutput { text: chunk.to_vec() })?;
    }
    Ok(())
}

/// Writes a checkpoint asked of the session, if any ([`super::checkpoint::at_call`]), and tells
/// the client, before the reply to its next request: it keeps what it sent since to replay
/// on a daemon that restores this checkpoint, and lets go of what came before.
fn checkpoint_at_call(s: &mut Session, t: &mut dyn Transport, out: &mut Vec<u8>) -> Result<(), String> {
    match super::checkpoint::at_call(s) {
        Some(seen) => send(t, out, Message::Checkpointed { seen }),
        None => Ok(()),
    }
}

fn log_refusal(s: &Session, request: &str, code: u32, message: &str) {
    tracing::info!(session = s.id, pid = s.cred.pid, tenant = %s.tenant(), request, code, "refused: {message}");
}

/// Encodes `msg` into `out` and sends it; the session's end, and why, if that fails.
fn send(t: &mut dyn Transport, out: &mut Vec<u8>, msg: Message) -> Result<(), String> {
    out.clear();
    if let Err(e) = msg.encode_into(out) {
        return Err(format!("cannot encode a reply: {e}"));
    }
    match t.send(out) {
        Ok(()) => Ok(()),
        Err(TransportError::PeerGone) => Err("client gone (closed or died)".into()),
        Err(e) => Err(format!("transport failed: {e}")),
    }
}

/// The most launches served as one batch (the scheduler may grant fewer at a time).
const MAX_BATCH: usize = 64;

/// `first` (launch `id` on `stream`) and the asynchronous launches on the same stream the
/// client has already queued right behind it, up to [`MAX_BATCH`]: served together, the
/// compute scheduler admits and brackets them as batches ([`Session::launch_queued`]). The
/// first other frame found is left in `ahead`.
fn queued_launches(
    t: &mut dyn Transport,
    id: u64,
    first: Option<Request>,
    stream: StreamId,
    ahead: &mut Vec<u8>,
    have_ahead: &mut bool,
) -> Vec<QueuedLaunch> {
    let mut launches: Vec<QueuedLaunch> = first.into_iter().filter_map(|op| queued(id, op)).collect();
    while launches.len() < MAX_BATCH {
        // A transport error shows again at the next receive, where the session ends on it.
        if !matches!(t.try_recv_into(ahead), Ok(true)) {
            break;
        }
        let next = split_frame(ahead).ok().and_then(|(header, payload, _)| match bulk::view_parts(&header, payload) {
            Ok(None) => Message::from_parts(&header, payload).ok(),
            _ => None,
        });
        match next {
            Some(Message::Request { id, no_reply: true, op: op @ Request::LaunchKernel { stream: st, .. } })
                if st == stream =>
            {
                launches.extend(queued(id, op));
            }
            _ => {
                *have_ahead = true;
                break;
            }
        }
    }
    launches
}

/// A launch request as [`Session::launch_queued`] takes it.
fn queued(id: u64, op: Request) -> Option<QueuedLaunch> {
    match op {
        Request::LaunchKernel { func, grid, block, shared_mem_bytes, params, cooperative, .. } => {
            Some(QueuedLaunch { id, func, grid, block, shared_mem_bytes, params: params.0, cooperative })
        }
        _ => None,
    }
}
