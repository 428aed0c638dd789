//! The one connection of this process to the daemon: lazily opened on the first call that
//! needs it, one request in flight at a time (the caller holds the client lock), request ids
//! matched against replies, asynchronous failures kept until the next synchronising call.
//!
//! Failures map to documented codes: a daemon that cannot be reached or refuses the hello
//! is `CUDA_ERROR_NOT_INITIALIZED` from `cuInit`; a daemon that goes away later is
//! `CUDA_ERROR_DEVICE_UNAVAILABLE` from every call that needs it (the transport reports a
//! vanished peer as `PeerGone`, so nothing hangs), unless a daemon that restored the session
//! comes back within `GPUPOOL_RECONNECT` ([`super::resume`]).
//!
//! Two kinds of link: shared memory over a unix socket (a daemon on this host), and TCP
//! or TLS (`tls://HOST:PORT`, [`super::endpoint`]). Over the network the staging area lives
//! in the daemon alone: it is written and read with requests, host bytes travel inline,
//! asynchronous requests are batched into few writes, and device-to-host copies are
//! pipelined in chunks so a large copy keeps the link busy.

use gpupool_protocol::bulk::{self, Bulk};
use gpupool_protocol::ops::{Answer, DeviceInfo, HostSrc, InlineBytes, StagingRegion};
use gpupool_protocol::transport::net::NetTransport;
use gpupool_protocol::transport::shm::{ShmConfig, ShmTransport, WaitPolicy, send_host_region};
use gpupool_protocol::transport::{Transport, TransportError};
use gpupool_protocol::{DevicePtr, EncodeError, Message, PROTOCOL_VERSION, Reply, Request};
use gpupool_shim::cuda::CUresult;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;

use super::endpoint::{Endpoint, NetSettings};

/// The request id in an encoded frame.
fn split_id(frame: &[u8]) -> Option<u64> {
    let (head, payload, _) = gpupool_protocol::frame::split_frame(frame).ok()?;
    match bulk::view_parts(&head, payload).ok()? {
        Some(v) => Some(v.id),
        None => match Message::from_parts(&head, payload).ok()? {
            Message::Request { id, .. } => Some(id),
            _ => None,
        },
    }
}
use crate::util::{R, log, warn};

/// Copies at most this long travel inside the frame; longer ones go through staging.
pub const INLINE_MAX: usize = 64 * 1024;
/// A copy's chunk over the network (either direction), and how many device-to-host chunks
/// are asked for at once.
const NET_CHUNK: usize = 1 << 20;
const NET_WINDOW: usize = 8;
/// A pipelined pageable copy through shared staging: slots of this size, at most this many
/// in flight. What is in flight has to stay in a core's cache (2 MiB of L2 per core here, as
/// on most current server cores): a slot one side writes is then read by the other from that
/// cache, and the staging area's lines go back to memory not at all, so the copy moves its
/// bytes across the memory bus about as often as a memcpy does. Host to device, two slots of
/// 256 KiB (the client fills one while the daemon empties the other); device to host, the
/// daemon keeps four of 512 KiB ahead of the client. Sixteen slots of 512 KiB, the whole
/// staging area, ran ahead of the cache: 63-66% of memcpy host to device and a median of
/// 84% back, against 91-97% and 92% (benches/README.md, "Issue 24").
const HTOD_SLOT: usize = 256 << 10;
const HTOD_SLOTS: usize = 2;
const DTOH_SLOT: usize = 512 << 10;
const DTOH_SLOTS: usize = 4;

// One per connection, never in bulk: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
enum Link {
    Shm(ShmTransport),
    Net(NetTransport),
}

pub struct Conn {
    t: Link,
    /// Where this connection goes, for messages.
    pub endpoint: String,
    next_id: u64,
    buf: Vec<u8>,
    out: Vec<u8>,
    /// The first asynchronous failure not yet reported.
    pub pending: Option<CUresult>,
    pub driver_version: u32,
    pub devices: Vec<DeviceInfo>,
    /// The transport failed (the daemon is gone or broke the protocol): sticky.
    pub broken: bool,
    /// Asynchronous requests posted since the last look for failure frames.
    posted: u32,
    /// This session's host-function channel is attached; its thread clears it when the channel
    /// ends ([`super::host_channel`]).
    pub host_channel: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Resuming the session on a daemon that restored it ([`super::resume`]); None: off.
    resume: Option<super::resume::Resume>,
}

/// What the resume journal keeps of a request sent ([`super::resume`]).
#[derive(Clone, Copy)]
struct Keep {
    /// It can be sent again after a restore.
    replay: bool,
    /// It is answered.
    reply: bool,
    /// Its bulk bytes are left in the caller's memory until its reply ([`Conn::keep_tail`]).
    tail_later: bool,
}

/// Every this many async posts, failure frames the daemon queued are collected, so a
/// long run of failing async calls never fills the reply ring while nobody reads it.
const DRAIN_EVERY: u32 = 64;

fn env_size(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let (num, mult) = match v.find(|c: char| !c.is_ascii_digit()) {
        None => (v, 1u64),
        Some(i) => {
            let unit = v[i..].trim().to_ascii_lowercase();
            let m = match unit.as_str() {
                "b" => 1,
                "k" | "kb" | "kib" => 1 << 10,
                // HAMi's CUDA_DEVICE_MEMORY_LIMIT is in MiB when it says "m".
                "m" | "mb" | "mib" => 1 << 20,
                "g" | "gb" | "gib" => 1 << 30,
                _ => return None,
            };
            (&v[..i], m)
        }
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

impl Conn {
    /// Connects and says hello. Errors name the endpoint and the reason; the caller picks
    /// the CUresult.
    pub fn open(ep: &Endpoint, settings: &mut NetSettings) -> Result<Conn, String> {
        let mut c = Conn::connect(ep, settings)?;
        let pid = std::process::id();
        // hami-vnpu-core's NPU_MEM_QUOTA is in MB (a bare number), HAMi's CUDA variable takes
        // suffixes; like it, a request for every device, which may only narrow the quota.
        let npu_mb = || std::env::var("NPU_MEM_QUOTA").ok()?.trim().parse::<u64>().ok()?.checked_mul(1 << 20);
        let memory_limit = env_size("GPUPOOL_MEMORY").or_else(|| env_size("CUDA_DEVICE_MEMORY_LIMIT")).or_else(npu_mb);
        // hami-vnpu-core's NPU_PRIORITY is its compute share (a number its limiter reads as the
        // percent of device time, clamped to 1..=100): like CUDA_DEVICE_SM_LIMIT, a request.
        let npu_share = || {
            let v = std::env::var("NPU_PRIORITY").ok()?.trim().parse::<f64>().ok()?;
            (v.is_finite() && v > 0.0).then(|| v.round().clamp(1.0, 100.0) as u8)
        };
        let compute_percent = std::env::var("GPUPOOL_COMPUTE")
            .or_else(|_| std::env::var("CUDA_DEVICE_SM_LIMIT"))
            .ok()
            .and_then(|v| v.trim().trim_end_matches('%').parse::<u8>().ok())
            .or_else(npu_share);
        let client_name = std::env::args().next().unwrap_or_default();
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let hello = Request::Hello {
            pid,
            uid,
            gid,
            protocol_version: PROTOCOL_VERSION,
            memory_limit,
            compute_percent,
            client_name,
            token: std::env::var("GPUPOOL_TOKEN").ok().filter(|t| !t.is_empty()),
            // `gpupool run --gpus N`: the daemon places the process on N GPUs it chooses.
            gpus: std::env::var("GPUPOOL_GPUS").ok().and_then(|v| v.trim().parse::<u32>().ok()),
        };
        match c.call_raw(hello) {
            Ok(Reply::HelloReply { driver_version, devices, .. }) => {
                c.driver_version = driver_version;
                c.devices = devices;
                let bound = super::resume::bound_from_env();
                if !bound.is_zero() {
                    match c.call_raw(Request::SessionKey {}) {
                        Ok(Reply::SessionKey { session, secret }) => {
                            let sent = c.next_id - 1;
                            c.resume = Some(super::resume::Resume::new(ep.clone(), session, secret, bound, sent));
                        }
                        // A daemon that cannot say: the session just cannot be resumed.
                        Ok(other) => log(&format!("no session key ({:?}): reconnecting is off", other.op())),
                        Err(code) => return Err(format!("asking the session key failed ({})", code.0)),
                    }
                }
                Ok(c)
            }
            Ok(Reply::Error { code, message }) => Err(format!("{ep} refused the session ({code}): {message}")),
            Ok(other) => Err(format!("unexpected hello reply {:?}", other.op())),
            Err(code) => Err(format!("hello failed ({})", code.0)),
        }
    }

    /// A second connection to `ep`, attached as `session`'s host-function channel.
    pub fn open_host_channel(
        ep: &Endpoint,
        settings: &mut NetSettings,
        session: u64,
        secret: [u8; 16],
    ) -> Result<Conn, String> {
        let mut c = Conn::connect(ep, settings)?;
        match c.call_raw(Request::HostChannelAttach { session, secret }) {
            Ok(Reply::Ok {}) => Ok(c),
            Ok(Reply::Error { code, message }) => {
                Err(format!("{ep} refused the host-function channel ({code}): {message}"))
            }
            Ok(other) => Err(format!("unexpected reply {:?} to the host-function channel", other.op())),
            Err(code) => Err(format!("attaching the host-function channel failed ({})", code.0)),
        }
    }

    /// On a host-function channel: reports call `done` (0: none) returned and waits for the next
    /// function to run: (call, function, argument).
    pub fn next_host_call(&mut self, done: u64) -> R<(u64, u64, u64)> {
        match self.call_raw(Request::HostCallNext { done })? {
            Reply::HostCall { call, func, user } => Ok((call, func, user)),
            Reply::Error { code, message } => {
                log(&message);
                Err(CUresult(code))
            }
            other => {
                log(&format!("unexpected reply {:?} on the host-function channel", other.op()));
                Err(CUresult::CUDA_ERROR_UNKNOWN)
            }
        }
    }

    /// The transport to `ep`, not yet greeted.
    fn connect(ep: &Endpoint, settings: &mut NetSettings) -> Result<Conn, String> {
        let t = match ep {
            Endpoint::Unix(path) => {
                let sock = UnixStream::connect(path).map_err(|e| format!("connecting to {}: {e}", path.display()))?;
                let t = ShmTransport::connect(sock, WaitPolicy::default())
                    .map_err(|e| format!("attaching to {}: {e}", path.display()))?;
                Link::Shm(t)
            }
            Endpoint::Net { .. } => Link::Net(super::endpoint::dial(ep, settings)?),
        };
        Ok(Conn {
            t,
            endpoint: ep.to_string(),
            next_id: 1,
            buf: Vec::new(),
            out: Vec::new(),
            pending: None,
            driver_version: 0,
            devices: Vec::new(),
            broken: false,
            posted: 0,
            host_channel: Default::default(),
            resume: None,
        })
    }

    fn t(&mut self) -> &mut dyn Transport {
        match &mut self.t {
            Link::Shm(t) => t,
            Link::Net(t) => t,
        }
    }

    /// Whether page-locked memory can be shared with the daemon (a local session).
    pub fn shares_memory(&self) -> bool {
        matches!(self.t, Link::Shm(_))
    }

    /// Encodes and sends `op`; `defer` lets it wait in the transport's write queue (it goes
    /// out with the next write or wait, at the latest).
    fn send_frame(&mut self, op: Request, no_reply: bool, defer: bool) -> R<u64> {
        self.send_frame_keeping(op, no_reply, defer).0
    }

    /// [`Self::send_frame`], handing `op` back: to be sent again after a resume without a
    /// copy of it kept for every call.
    fn send_frame_keeping(&mut self, op: Request, no_reply: bool, defer: bool) -> (R<u64>, Request) {
        let replay = self.resume.is_some() && super::resume::replayable(&op);
        let mut msg = Message::Request { id: 0, no_reply, op };
        let sent = self.send_encoded(
            |id, out| {
                if let Message::Request { id: at, .. } = &mut msg {
                    *at = id;
                }
                msg.encode_into(out)
            },
            &[],
            defer,
            Keep { replay, reply: !no_reply, tail_later: false },
        );
        match msg {
            Message::Request { op, .. } => (sent, op),
            _ => unreachable!("built as a request above"),
        }
    }

    /// Numbers a request, encodes it with `encode` into the reused frame buffer (no
    /// allocation per call once it has grown) and sends it, followed by `tail` (a bulk
    /// request's bytes, sent from the caller's memory) if there is one; `keep` says what the
    /// resume journal keeps of it.
    fn send_encoded(
        &mut self,
        encode: impl FnOnce(u64, &mut Vec<u8>) -> Result<usize, EncodeError>,
        tail: &[u8],
        defer: bool,
        keep: Keep,
    ) -> R<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let mut frame = std::mem::take(&mut self.out);
        frame.clear();
        let sent = match encode(id, &mut frame) {
            Err(e) => {
                log(&format!("encoding a request: {e}"));
                Err(CUresult::CUDA_ERROR_INVALID_VALUE)
            }
            Ok(_) => {
                let t = self.t();
                let r = match (tail.is_empty(), defer) {
                    (true, true) => t.send_deferred(&frame),
                    (true, false) => t.send(&frame),
                    (false, _) => t.send_parts(&[&frame, tail], defer),
                };
                if let Some(j) = &mut self.resume {
                    let Keep { replay, reply, tail_later } = keep;
                    if tail_later {
                        j.record_head(id, &[&frame], tail.len(), replay, reply);
                    } else {
                        j.record(id, &[&frame, tail], replay, reply);
                    }
                }
                r.map(|()| id).map_err(|e| self.fail(&format!("sending to {}: {e}", self.endpoint)))
            }
        };
        if frame.capacity() <= 1 << 20 {
            self.out = frame;
        }
        sent
    }

    /// Sends a bulk request ([`bulk`]): its head, then `data` straight from the caller's
    /// memory. A host-to-device copy's reply must be awaited while `data` is still there, and
    /// `data` then given to [`Self::keep_tail`]: the journal copies it only if a checkpoint
    /// may need it.
    fn send_bulk(&mut self, b: Bulk, no_reply: bool, data: &[u8], defer: bool) -> R<u64> {
        let replay = matches!(b, Bulk::HtoD { .. } | Bulk::StagingWrite { .. });
        let tail_later = matches!(b, Bulk::HtoD { .. }) && !no_reply;
        self.send_encoded(
            |id, out| bulk::encode_head(id, no_reply, b, data.len(), out),
            data,
            defer,
            Keep { replay, reply: !no_reply, tail_later },
        )
    }

    /// Request `id`, answered, was a bulk copy sent with `tail` as its bytes: the resume
    /// journal takes a copy of them if it still holds the request ([`super::resume::Resume::keep_tail`]).
    fn keep_tail(&mut self, id: u64, tail: &[u8]) {
        if let Some(j) = &mut self.resume {
            j.keep_tail(id, tail);
        }
    }

    /// Sends `op` and waits for its reply (an `Error` reply is returned as a reply).
    fn call_raw(&mut self, op: Request) -> R<Reply> {
        self.again_after_resume_with(op, |c, op| {
            let (sent, op) = c.send_frame_keeping(op, false, false);
            (sent.and_then(|id| c.wait_reply(id)), Some(op))
        })
    }

    /// After the daemon went away while request `failed` was sent or awaited: waits for a
    /// daemon that restored this session, resumes it, and replays what the checkpoint missed
    /// before `failed` ([`super::resume`]). The caller sends its request again.
    fn reconnect(&mut self, failed: u64) -> R<()> {
        let Some(mut j) = self.resume.take() else { return Err(CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE) };
        j.forget_from(failed);
        let deadline = std::time::Instant::now() + j.bound;
        let mut left = super::resume::candidates(&j.ep, &super::resume::failover_from_env());
        let names: Vec<String> = left.iter().map(|e| e.to_string()).collect();
        warn(&format!(
            "the daemon at {} went away; waiting up to {:.1} s (GPUPOOL_RECONNECT) for one that restored session {} \
             (trying {})",
            self.endpoint,
            j.bound.as_secs_f64(),
            j.session,
            names.join(", ")
        ));
        let why = 'wait: loop {
            let mut last = String::new();
            let mut i = 0;
            while i < left.len() {
                let ep = left[i].clone();
                let attempt = Conn::connect(&ep, &mut NetSettings::from_env()).and_then(|mut c| {
                    let resume =
                        Request::Resume { session: j.session, secret: j.secret, protocol_version: PROTOCOL_VERSION };
                    match c.call_raw(resume) {
                        Ok(Reply::Resumed { last_request, .. }) => Ok(Ok((c, last_request))),
                        Ok(Reply::Error { code, message }) => {
                            Ok(Err(format!("{ep} refused to resume ({code}): {message}")))
                        }
                        Ok(other) => Ok(Err(format!("unexpected reply {:?} to Resume from {ep}", other.op()))),
                        Err(code) => Err(format!("resuming at {ep} failed ({})", code.0)),
                    }
                });
                match attempt {
                    Ok(Ok((c, last_request))) => match j.lost(last_request, failed - 1) {
                        Ok(frames) => {
                            let frames: Vec<(Vec<u8>, bool)> =
                                frames.into_iter().map(|(f, r)| (f.to_vec(), r)).collect();
                            let n = frames.len();
                            self.t = c.into_link();
                            self.endpoint = ep.to_string();
                            self.broken = false;
                            self.posted = 0;
                            for (frame, reply) in frames {
                                self.replay(&frame, reply)?;
                            }
                            warn(&format!(
                                "session {} resumed at {ep}; {n} requests sent after its checkpoint replayed",
                                j.session
                            ));
                            // A later reconnect looks here first.
                            j.ep = ep;
                            j.resumed_from(last_request);
                            self.resume = Some(j);
                            return Ok(());
                        }
                        // Dropping `c` ends the session there: the daemon frees it.
                        Err(e) => break 'wait format!("session {}'s checkpoint is stale: {e}", j.session),
                    },
                    // A daemon is there and does not have the session: it will not get it.
                    Ok(Err(e)) => {
                        left.remove(i);
                        last = e;
                    }
                    Err(e) => {
                        i += 1;
                        last = e;
                    }
                }
            }
            if left.is_empty() || std::time::Instant::now() >= deadline {
                break last;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        };
        warn(&format!("{why}; every later call fails with CUDA_ERROR_DEVICE_UNAVAILABLE"));
        Err(CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE)
    }

    /// Sends a journaled frame again (its own id); an answered one's reply is read and dropped.
    fn replay(&mut self, frame: &[u8], reply: bool) -> R<()> {
        if let Err(e) = self.t().send(frame) {
            return Err(self.fail(&format!("replaying to {}: {e}", self.endpoint)));
        }
        if reply {
            let id = match split_id(frame) {
                Some(id) => id,
                None => return Err(self.fail("a journaled frame without an id")),
            };
            if let Reply::Error { code, message } = self.wait_reply(id)? {
                log(&format!("a replayed request failed ({code}): {message}"));
                self.pending.get_or_insert(CUresult(code));
            }
        }
        Ok(())
    }

    fn into_link(self) -> Link {
        self.t
    }

    /// Receives the next frame from the daemon into `self.buf`, waiting as long as it takes
    /// (a dead link ends the wait through the transport's liveness bound).
    fn recv_next(&mut self) -> R<()> {
        let mut buf = std::mem::take(&mut self.buf);
        let r = self.t().recv_into(&mut buf, None);
        self.buf = buf;
        r.map_err(|e| self.fail(&format!("waiting for {}: {e}", self.endpoint)))
    }

    fn wait_reply(&mut self, id: u64) -> R<Reply> {
        loop {
            self.recv_next()?;
            if let Some(reply) = self.handle_frame(Some(id))? {
                return Ok(reply);
            }
        }
    }

    /// The daemon answered request `id` (so it served every one before it): the journal lets go
    /// of what no checkpoint can need.
    fn served(&mut self, id: u64) {
        if let Some(j) = &mut self.resume {
            j.served(id);
        }
    }

    /// Marks the connection broken (sticky) and returns the code every call now gets.
    fn fail(&mut self, why: &str) -> CUresult {
        if !self.broken && self.resume.is_none() {
            warn(&format!("{why}; every later call fails with CUDA_ERROR_DEVICE_UNAVAILABLE"));
        } else if !self.broken {
            warn(why);
        }
        self.broken = true;
        CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE
    }

    /// Handles the frame in `buf`: the reply to `want`, or an async failure kept for the
    /// next sync point (`None`).
    fn handle_frame(&mut self, want: Option<u64>) -> R<Option<Reply>> {
        match Message::decode(&self.buf) {
            Ok((Message::Reply { id, op }, _)) => {
                self.served(id);
                Ok((Some(id) == want).then_some(op))
            }
            Ok((Message::AsyncError { id, code, message }, _)) => {
                self.served(id);
                log(&format!("asynchronous failure {code}: {message}"));
                self.pending.get_or_insert(CUresult(code));
                Ok(None)
            }
            Ok((Message::Checkpointed { seen }, _)) => {
                if let Some(j) = &mut self.resume {
                    j.checkpointed(seen);
                }
                Ok(None)
            }
            Ok((Message::DeviceOutput { text }, _)) => {
                // What the client's kernels printed, as NVIDIA's driver writes it.
                gpupool_abi::device_output::write_to_stdout([text.as_slice()]);
                Ok(None)
            }
            Ok((Message::Bye, _)) => Err(self.fail("the daemon said goodbye")),
            Ok((Message::Request { .. }, _)) => Err(self.fail("the daemon sent a request")),
            Err(e) => Err(self.fail(&format!("undecodable frame from the daemon: {e}"))),
        }
    }

    /// A synchronous call: `Reply::Error{code}` becomes `Err(code)`.
    pub fn call(&mut self, op: Request) -> R<Reply> {
        match self.call_raw(op)? {
            Reply::Error { code, message } => {
                if !message.is_empty() {
                    log(&message);
                }
                Err(CUresult(code))
            }
            r => Ok(r),
        }
    }

    /// A synchronous call answered with the reply its line of the protocol's table names, as
    /// that reply's struct ([`gpupool_protocol::ops::answer`]). Asking for another answer is a bug of ours: it is
    /// logged and refused before anything is sent.
    pub fn ask<A: Answer>(&mut self, op: Request) -> R<A> {
        if op.reply_op() != A::OP {
            log(&format!("bug: {} is answered by {:?}, not {:?}", op.name(), op.reply_op(), A::OP));
            return Err(CUresult::CUDA_ERROR_UNKNOWN);
        }
        let name = op.name();
        A::try_from(self.call(op)?).map_err(|other| {
            log(&format!("the daemon answered {name} with {:?}", other.op()));
            CUresult::CUDA_ERROR_UNKNOWN
        })
    }

    /// A call whose only answer is `Ok`.
    pub fn call_ok(&mut self, op: Request) -> R<()> {
        self.call(op).map(|_| ())
    }

    /// An asynchronous request: sent without a reply; failures come back later.
    pub fn post(&mut self, op: Request) -> R<()> {
        debug_assert!(op.is_async());
        if crate::api::graph::answer_now(&op) {
            // Work on stream 0 while this process captures: CUDA refuses it at the call when a
            // blocking stream captures (the daemon says so), not at the next synchronization.
            return self.call_ok(op);
        }
        self.post_any(op)
    }

    /// Any request, sent without waiting for its reply: it runs in order with the others,
    /// and its failure is reported at the next sync point as an asynchronous one's is.
    fn post_any(&mut self, op: Request) -> R<()> {
        self.again_after_resume_with(op, |c, op| {
            let mut back = None;
            let posted = c.posted_with(|c| {
                // A request that waits for nothing may wait in the write queue.
                let (sent, op) = c.send_frame_keeping(op, true, true);
                back = Some(op);
                sent
            });
            (posted, back)
        })
    }

    /// Bookkeeping of a request sent without a reply by `send`: the flusher is woken for a
    /// newly queued write, and failure frames are collected now and then.
    fn posted_with(&mut self, send: impl FnOnce(&mut Self) -> R<u64>) -> R<()> {
        let queued_before = self.t().has_deferred();
        send(self)?;
        if !queued_before && self.t().has_deferred() {
            super::flusher::wake();
        }
        self.posted += 1;
        if self.posted >= DRAIN_EVERY {
            self.posted = 0;
            self.drain()?;
        }
        Ok(())
    }

    /// Collects failure frames the daemon queued. No sync request is in flight (we hold the
    /// client lock), so whatever is queued for us is an asynchronous failure.
    fn drain(&mut self) -> R<()> {
        loop {
            let mut buf = std::mem::take(&mut self.buf);
            let r = self.t().recv_into(&mut buf, Some(std::time::Duration::ZERO));
            self.buf = buf;
            match r {
                Ok(()) => {
                    self.handle_frame(None)?;
                }
                Err(TransportError::Timeout) => return Ok(()),
                Err(e) => return Err(self.fail(&format!("reading from {}: {e}", self.endpoint))),
            }
        }
    }

    /// Writes out batched asynchronous requests (the flusher calls this shortly after the
    /// first one was queued, so a program that posts and then computes still gets its work
    /// started).
    pub fn flush(&mut self) -> R<()> {
        if let Err(e) = self.t().flush() {
            return Err(self.fail(&format!("sending to {}: {e}", self.endpoint)));
        }
        Ok(())
    }

    /// A synchronisation point: reports (and clears) the first asynchronous failure.
    pub fn take_pending(&mut self) -> R<()> {
        match self.pending.take() {
            Some(code) => Err(code),
            None => Ok(()),
        }
    }

    /// Writes `bytes` into the staging area at `offset`: shared memory locally, a request
    /// (ordered before the ones that use it) over the network.
    pub fn stage_write(&mut self, offset: usize, bytes: &[u8]) -> R<()> {
        match &self.t {
            Link::Shm(t) => {
                let st = t.staging().expect("the shared-memory transport always has staging");
                st.write(offset, bytes).map_err(|_| CUresult::CUDA_ERROR_INVALID_VALUE)
            }
            Link::Net(_) => {
                self.posted_with(|c| c.send_bulk(Bulk::StagingWrite { offset: offset as u64 }, true, bytes, true))
            }
        }
    }

    /// Reads `dst.len()` bytes of the staging area at `offset`.
    pub fn stage_read(&mut self, offset: usize, dst: &mut [u8]) -> R<()> {
        match &self.t {
            Link::Shm(t) => {
                let st = t.staging().expect("the shared-memory transport always has staging");
                st.read(offset, dst).map_err(|_| CUresult::CUDA_ERROR_UNKNOWN)
            }
            Link::Net(_) => {
                let len = u32::try_from(dst.len()).map_err(|_| CUresult::CUDA_ERROR_INVALID_VALUE)?;
                match self.call(Request::StagingRead { offset: offset as u64, len })? {
                    Reply::Bytes { data } if data.0.len() == dst.len() => {
                        dst.copy_from_slice(&data.0);
                        Ok(())
                    }
                    _ => Err(CUresult::CUDA_ERROR_UNKNOWN),
                }
            }
        }
    }

    /// Host bytes for the daemon: inline when short or over the network, else written to
    /// the shared staging area at offset 0.
    pub fn host_src(&mut self, bytes: &[u8]) -> R<HostSrc> {
        if bytes.len() <= INLINE_MAX || !self.shares_memory() {
            return Ok(HostSrc::Inline(InlineBytes(bytes.to_vec())));
        }
        self.stage_write(0, bytes)?;
        Ok(HostSrc::Staging(StagingRegion { offset: 0, len: bytes.len() as u64 }))
    }

    /// The staging area as (slot size, slots) for a pipelined copy: slots of at most `slot`
    /// bytes, at least two and at most `most` of them.
    fn staging_slots(&self, slot: usize, most: usize) -> (usize, usize) {
        let slot = slot.min(self.staging_len() / 2).max(1);
        (slot, (self.staging_len() / slot).min(most.max(2)))
    }

    /// Host-to-device through the shared staging area, its slots in turn: this thread fills
    /// one slot while the daemon copies earlier ones into the device, so the two memory passes
    /// of a pageable copy overlap instead of adding up (and a slot is still in cache when the
    /// daemon reads it).
    pub fn write_device_staged(&mut self, dst: u64, src: &[u8]) -> R<()> {
        let (slot, slots) = self.staging_slots(HTOD_SLOT, HTOD_SLOTS);
        // Chunk i reuses the slot of chunk i - slots: at most `slots` in flight.
        self.write_pipelined(src, slot, slots, |c, i, part| {
            let offset = (i % slots) * slot;
            c.stage_write(offset, part)?;
            let op = Request::MemcpyHtoD {
                dst: DevicePtr(dst + (i * slot) as u64),
                src: HostSrc::Staging(StagingRegion { offset: offset as u64, len: part.len() as u64 }),
            };
            c.send_frame(op, false, false)
        })
    }

    /// Device-to-host through the shared staging area, its slots in turn: the daemon fills
    /// the next slots while this thread copies one out.
    pub fn read_device_staged(&mut self, dst: &mut [u8], src: u64) -> R<()> {
        let (slot, slots) = self.staging_slots(DTOH_SLOT, DTOH_SLOTS);
        let region = move |k: usize, n: usize| StagingRegion { offset: ((k % slots) * slot) as u64, len: n as u64 };
        self.read_pipelined(
            dst,
            slot,
            slots,
            |c, k, o, n| {
                c.send_frame(Request::MemcpyDtoH { src: DevicePtr(src + o as u64), dst: region(k, n) }, false, false)
            },
            |c, k, id, part, first_err| {
                c.expect_ok(id, first_err)?;
                if first_err.is_none() {
                    c.stage_read((k % slots) * slot, part)?;
                }
                Ok(())
            },
        )
    }

    /// A host-to-device copy as a pipeline: `send` sends chunk i (`chunk` bytes of `src`) and
    /// returns its request's id, once fewer than `window` replies are outstanding. Replies
    /// come back in order and must all be `Ok`; the first failure stops the sending.
    fn write_pipelined(
        &mut self,
        src: &[u8],
        chunk: usize,
        window: usize,
        mut send: impl FnMut(&mut Self, usize, &[u8]) -> R<u64>,
    ) -> R<()> {
        let mut in_flight = std::collections::VecDeque::new();
        let mut first_err = None;
        for (i, part) in src.chunks(chunk).enumerate() {
            if in_flight.len() == window {
                let (id, sent) = in_flight.pop_front().expect("a full window");
                self.expect_ok(id, &mut first_err)?;
                self.keep_tail(id, sent);
            }
            if first_err.is_some() {
                break;
            }
            in_flight.push_back((send(self, i, part)?, part));
        }
        for (id, sent) in in_flight {
            self.expect_ok(id, &mut first_err)?;
            self.keep_tail(id, sent);
        }
        self.first_or_pending(first_err)
    }

    /// A device-to-host copy as a pipeline: `request` asks for chunk k (offset, length) up
    /// to `window` chunks ahead of the one `collect` receives into its part of `dst` (chunk
    /// k + window is asked for once chunk k is in). The first failure stops the asking.
    fn read_pipelined(
        &mut self,
        dst: &mut [u8],
        chunk: usize,
        window: usize,
        mut request: impl FnMut(&mut Self, usize, usize, usize) -> R<u64>,
        mut collect: impl FnMut(&mut Self, usize, u64, &mut [u8], &mut Option<CUresult>) -> R<()>,
    ) -> R<()> {
        let total = dst.len();
        let chunks = total.div_ceil(chunk);
        let span = |k: usize| (k * chunk, chunk.min(total - k * chunk));
        let mut in_flight = std::collections::VecDeque::new();
        let mut first_err = None;
        for k in 0..chunks.min(window) {
            let (o, n) = span(k);
            in_flight.push_back(request(self, k, o, n)?);
        }
        for k in 0..chunks {
            let Some(id) = in_flight.pop_front() else { break };
            let (o, n) = span(k);
            collect(self, k, id, &mut dst[o..o + n], &mut first_err)?;
            if first_err.is_none() && k + window < chunks {
                let (o, n) = span(k + window);
                in_flight.push_back(request(self, k + window, o, n)?);
            }
        }
        self.first_or_pending(first_err)
    }

    /// Waits for the reply to `id`, which must be `Ok`; anything else is noted in `first_err`.
    fn expect_ok(&mut self, id: u64, first_err: &mut Option<CUresult>) -> R<()> {
        if let Some(r) = self.reply_or_note(id, first_err)?
            && !matches!(r, Reply::Ok {})
        {
            first_err.get_or_insert(CUresult::CUDA_ERROR_UNKNOWN);
        }
        Ok(())
    }

    /// Host-to-device over the network: every chunk is sent before any reply is awaited
    /// (the daemon answers each in order), so the copy streams at the link's rate. Chunks of
    /// [`NET_CHUNK`], not the staging area's size: a chunk that fits in a core's L2 cache is
    /// still there when the journal copies it after encryption here and when the daemon
    /// copies it into the device after decryption there (8 MiB chunks made each of those
    /// copies a second pass over memory; benches/README.md, "Issue 24").
    pub fn write_device_streamed(&mut self, dst: u64, src: &[u8]) -> R<()> {
        let chunk = NET_CHUNK;
        self.again_after_resume(|c| {
            c.write_pipelined(src, chunk, usize::MAX, |c, i, part| {
                c.send_bulk(Bulk::HtoD { dst: DevicePtr(dst + (i * chunk) as u64) }, false, part, true)
            })
        })
    }

    /// Runs `send`, requests that can all be sent again from the first (a single call, or a
    /// network copy whose chunks carry their bytes in their frames or only read the device); if
    /// the daemon went away meanwhile and the session can be resumed, resumes it (replaying
    /// what came before) and runs `send` again from the start.
    fn again_after_resume<T>(&mut self, mut send: impl FnMut(&mut Self) -> R<T>) -> R<T> {
        let first = self.next_id;
        match send(self) {
            Err(_) if self.broken && self.resume.is_some() => {
                self.reconnect(first)?;
                send(self)
            }
            r => r,
        }
    }

    /// [`Self::again_after_resume`] for `send` of one request, which hands `op` back after
    /// sending it (encoding reads it in place), for the second try: no copy of the request
    /// per call, where there was one (with its parameter bytes) whenever the session could be
    /// resumed.
    fn again_after_resume_with<T>(
        &mut self,
        op: Request,
        mut send: impl FnMut(&mut Self, Request) -> (R<T>, Option<Request>),
    ) -> R<T> {
        let mut op = Some(op);
        self.again_after_resume(|c| {
            let (r, back) = send(c, op.take().ok_or(CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE)?);
            op = back;
            r
        })
    }

    /// Device-to-host over the network: chunks requested [`NET_WINDOW`] ahead of the one
    /// being received, so the daemon always has the next one to send.
    pub fn read_device_pipelined(&mut self, dst: &mut [u8], src: u64) -> R<()> {
        self.again_after_resume(|c| {
            c.read_pipelined(
                dst,
                NET_CHUNK,
                NET_WINDOW,
                // Deferred: requests leave together when we next wait.
                |c, _, o, n| {
                    c.send_frame(
                        Request::MemcpyDtoHInline { src: DevicePtr(src + o as u64), len: n as u32 },
                        false,
                        true,
                    )
                },
                |c, _, id, part, first_err| {
                    if !c.bytes_reply_into(id, part, first_err)? {
                        first_err.get_or_insert(CUresult::CUDA_ERROR_UNKNOWN);
                    }
                    Ok(())
                },
            )
        })
    }

    /// Waits for the reply to `id`, a `Bytes` reply of exactly `dst.len()` bytes, and copies
    /// them into `dst` straight from the received frame. False for any other reply (an
    /// error reply is first noted in `first_err`, as [`Self::reply_or_note`] does).
    fn bytes_reply_into(&mut self, id: u64, dst: &mut [u8], first_err: &mut Option<CUresult>) -> R<bool> {
        // The reply's head as the daemon encodes it (encodings are canonical): a frame that
        // begins with these bytes and is as long as they and `dst` is the reply.
        let mut expected = Vec::with_capacity(64);
        if bulk::encode_head(id, false, Bulk::Bytes, dst.len(), &mut expected).is_err() {
            return Ok(false);
        }
        loop {
            // Over a stream the bytes are read straight into `dst` (benches/README.md, "Issue 24").
            let mut buf = std::mem::take(&mut self.buf);
            let split = self.t().recv_split(&mut buf, expected.len(), dst);
            self.buf = buf;
            match split {
                Ok(true) if self.buf == expected => {
                    self.served(id);
                    return Ok(true);
                }
                // Another frame of that length: whole again, and read as any other.
                Ok(true) => self.buf.extend_from_slice(dst),
                Ok(false) => {}
                Err(e) => return Err(self.fail(&format!("waiting for {}: {e}", self.endpoint))),
            }
            if let Ok(Some((v, _))) = bulk::view(&self.buf)
                && v.id == id
                && v.bulk == Bulk::Bytes
            {
                if let Some(j) = &mut self.resume {
                    j.served(id);
                }
                if v.data.len() != dst.len() {
                    return Ok(false);
                }
                dst.copy_from_slice(v.data);
                return Ok(true);
            }
            match self.handle_frame(Some(id))? {
                Some(Reply::Error { code, message }) => {
                    if !message.is_empty() {
                        log(&message);
                    }
                    first_err.get_or_insert(CUresult(code));
                    return Ok(false);
                }
                Some(_) => return Ok(false),
                None => {}
            }
        }
    }

    /// The reply to `id`; an error reply is logged and kept in `first_err` (if it is the
    /// first), and comes back as `None`.
    fn reply_or_note(&mut self, id: u64, first_err: &mut Option<CUresult>) -> R<Option<Reply>> {
        match self.wait_reply(id)? {
            Reply::Error { code, message } => {
                if !message.is_empty() {
                    log(&message);
                }
                first_err.get_or_insert(CUresult(code));
                Ok(None)
            }
            r => Ok(Some(r)),
        }
    }

    /// The end of a pipelined transfer: its first failure, else any asynchronous one.
    fn first_or_pending(&mut self, first_err: Option<CUresult>) -> R<()> {
        match first_err {
            Some(e) => Err(e),
            None => self.take_pending(),
        }
    }

    /// Shares a page-locked region with the daemon: its fd goes on the socket just before
    /// the `HostRegionMap` frame. Returns the region's id.
    pub fn map_region(&mut self, fd: &std::os::fd::OwnedFd, bytes: u64) -> R<u64> {
        let Link::Shm(t) = &self.t else {
            return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
        };
        if let Err(e) = send_host_region(t.socket(), fd) {
            return Err(self.fail(&format!("sending a host region: {e}")));
        }
        match self.call(Request::HostRegionMap { bytes })? {
            Reply::HostRegion { id } => Ok(id),
            _ => Err(CUresult::CUDA_ERROR_UNKNOWN),
        }
    }

    /// The staging area's size: the most host bytes one request carries.
    pub fn staging_len(&self) -> usize {
        match &self.t {
            Link::Shm(t) => t.staging().map_or(0, |s| s.len()),
            // The daemon gives a network session a private area of the default size.
            Link::Net(_) => ShmConfig::default().staging_size,
        }
    }

    pub fn is_network(&self) -> bool {
        matches!(self.t, Link::Net(_))
    }

    pub fn raw_fd(&self) -> RawFd {
        match &self.t {
            Link::Shm(t) => t.socket().as_raw_fd(),
            Link::Net(t) => t.socket().as_raw_fd(),
        }
    }

    /// After `fork`, in the child: give up the parent's connection without closing it in a
    /// way the parent would see (no close flag in the shared segment, no socket shutdown,
    /// no TLS close_notify): the child's copies of its descriptors are closed and its
    /// mapping is left alone.
    pub fn abandon(self) {
        let fd = self.raw_fd();
        std::mem::forget(self);
        // SAFETY: `fd` is this process's copy of the inherited socket; the transport that
        // owned it was forgotten above, so nothing else will use or close it.
        unsafe { libc::close(fd) };
    }
}
