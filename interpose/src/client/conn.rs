//! The one connection of this process to the daemon: lazily opened on the first call that
//! needs it, one request in flight at a time (the caller holds the client lock), request ids
//! matched against replies, asynchronous failures kept until the next synchronising call.
//!
//! Failures map to documented codes: a daemon that cannot be reached or refuses the hello
//! is `CUDA_ERROR_NOT_INITIALIZED` from `cuInit`; a daemon that goes away later is
//! `CUDA_ERROR_DEVICE_UNAVAILABLE` from every call that needs it (the transport reports a
//! vanished peer as `PeerGone`, so nothing hangs).

use gpupool_protocol::ops::{DeviceInfo, HostSrc, InlineBytes, StagingRegion};
use gpupool_protocol::transport::shm::{ShmTransport, WaitPolicy, send_host_region};
use gpupool_protocol::transport::{Staging, Transport};
use gpupool_protocol::{Message, PROTOCOL_VERSION, Reply, Request};
use gpupool_shim::cuda::CUresult;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use crate::util::{R, log};

/// Copies at most this long travel inside the frame; longer ones go through staging.
pub const INLINE_MAX: usize = 64 * 1024;

pub struct Conn {
    t: ShmTransport,
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
}

/// Every this many async posts, failure frames the daemon queued are collected, so a
/// long run of failing async calls never fills the reply ring while nobody reads it.
const DRAIN_EVERY: u32 = 64;

/// Where the daemon listens: `GPUPOOL_ENDPOINT` (`unix:///path`), else the default.
fn endpoint() -> Result<String, String> {
    if let Ok(e) = std::env::var("GPUPOOL_ENDPOINT")
        && !e.is_empty()
    {
        return match e.strip_prefix("unix://") {
            Some(path) => Ok(path.to_string()),
            None if e.starts_with('/') => Ok(e),
            None => Err(format!("unsupported endpoint {e:?} (only unix:///path)")),
        };
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return Ok("/run/gpupool/gpupool.sock".into());
    }
    match std::env::var("XDG_RUNTIME_DIR") {
        Ok(d) if !d.is_empty() => Ok(format!("{d}/gpupool.sock")),
        // SAFETY: as above.
        _ => Ok(format!("/run/user/{}/gpupool.sock", unsafe { libc::geteuid() })),
    }
}

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
    /// Connects and says hello. Errors are for the log; the caller picks the CUresult.
    pub fn open() -> Result<Conn, String> {
        let path = endpoint()?;
        let sock = UnixStream::connect(&path).map_err(|e| format!("connecting to {path}: {e}"))?;
        let t = ShmTransport::connect(sock, WaitPolicy::default()).map_err(|e| format!("attaching to {path}: {e}"))?;
        let pid = std::process::id();
        let memory_limit = env_size("GPUPOOL_MEMORY").or_else(|| env_size("CUDA_DEVICE_MEMORY_LIMIT"));
        let compute_percent = std::env::var("GPUPOOL_COMPUTE")
            .or_else(|_| std::env::var("CUDA_DEVICE_SM_LIMIT"))
            .ok()
            .and_then(|v| v.trim().trim_end_matches('%').parse::<u8>().ok());
        let client_name = std::env::args().next().unwrap_or_default();
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let mut c = Conn {
            t,
            next_id: 1,
            buf: Vec::new(),
            out: Vec::new(),
            pending: None,
            driver_version: 0,
            devices: Vec::new(),
            broken: false,
            posted: 0,
        };
        let hello = Request::Hello {
            pid,
            uid,
            gid,
            protocol_version: PROTOCOL_VERSION,
            memory_limit,
            compute_percent,
            client_name,
            token: std::env::var("GPUPOOL_TOKEN").ok().filter(|t| !t.is_empty()),
        };
        match c.call_raw(hello) {
            Ok(Reply::HelloReply { driver_version, devices, .. }) => {
                c.driver_version = driver_version;
                c.devices = devices;
                Ok(c)
            }
            Ok(Reply::Error { code, message }) => Err(format!("daemon refused the session ({code}): {message}")),
            Ok(other) => Err(format!("unexpected hello reply {:?}", other.op())),
            Err(code) => Err(format!("hello failed ({})", code.0)),
        }
    }

    fn send(&mut self, op: Request, no_reply: bool) -> R<u64> {
        let id = self.next_id;
        self.next_id += 1;
        // One frame buffer, reused: no allocation per call once it has grown.
        let mut frame = std::mem::take(&mut self.out);
        frame.clear();
        let encoded = Message::Request { id, no_reply, op }.encode_into(&mut frame);
        let sent = match encoded {
            Err(e) => {
                log(&format!("encoding a request: {e}"));
                Err(CUresult::CUDA_ERROR_INVALID_VALUE)
            }
            Ok(_) => match self.t.send(&frame) {
                Err(e) => Err(self.fail(&format!("sending to the daemon: {e}"))),
                Ok(()) => Ok(id),
            },
        };
        if frame.capacity() <= 1 << 20 {
            self.out = frame;
        }
        sent
    }

    /// Sends `op` and waits for its reply (an `Error` reply is returned as a reply).
    fn call_raw(&mut self, op: Request) -> R<Reply> {
        let id = self.send(op, false)?;
        loop {
            if let Err(e) = self.t.recv_into(&mut self.buf, None) {
                return Err(self.fail(&format!("waiting for the daemon: {e}")));
            }
            if let Some(reply) = self.handle_frame(Some(id))? {
                return Ok(reply);
            }
        }
    }

    /// Marks the connection broken (sticky) and returns the code every call now gets.
    fn fail(&mut self, why: &str) -> CUresult {
        log(why);
        self.broken = true;
        CUresult::CUDA_ERROR_DEVICE_UNAVAILABLE
    }

    /// Handles the frame in `buf`: the reply to `want`, or an async failure kept for the
    /// next sync point (`None`).
    fn handle_frame(&mut self, want: Option<u64>) -> R<Option<Reply>> {
        match Message::decode(&self.buf) {
            Ok((Message::Reply { id, op }, _)) if Some(id) == want => Ok(Some(op)),
            Ok((Message::Reply { .. }, _)) => Ok(None),
            Ok((Message::AsyncError { code, message, .. }, _)) => {
                log(&format!("asynchronous failure {code}: {message}"));
                self.pending.get_or_insert(CUresult(code));
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

    /// A call whose only answer is `Ok`.
    pub fn call_ok(&mut self, op: Request) -> R<()> {
        self.call(op).map(|_| ())
    }

    /// An asynchronous request: sent without a reply; failures come back later.
    pub fn post(&mut self, op: Request) -> R<()> {
        debug_assert!(op.is_async());
        self.send(op, true)?;
        self.posted += 1;
        if self.posted >= DRAIN_EVERY {
            self.posted = 0;
            // No sync request is in flight (we hold the client lock), so whatever is
            // queued for us is an asynchronous failure.
            while self.t.recv_into(&mut self.buf, Some(std::time::Duration::ZERO)).is_ok() {
                self.handle_frame(None)?;
            }
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

    pub fn staging(&self) -> &Staging {
        self.t.staging().expect("the shared-memory transport always has staging")
    }

    /// Host bytes for the daemon: inline when short, else written to staging at `offset`.
    pub fn host_src(&mut self, bytes: &[u8]) -> R<HostSrc> {
        if bytes.len() <= INLINE_MAX {
            return Ok(HostSrc::Inline(InlineBytes(bytes.to_vec())));
        }
        self.staging().write(0, bytes).map_err(|_| CUresult::CUDA_ERROR_INVALID_VALUE)?;
        Ok(HostSrc::Staging(StagingRegion { offset: 0, len: bytes.len() as u64 }))
    }

    /// Shares a page-locked region with the daemon: its fd goes on the socket just before
    /// the `HostRegionMap` frame. Returns the region's id.
    pub fn map_region(&mut self, fd: &std::os::fd::OwnedFd, bytes: u64) -> R<u64> {
        if let Err(e) = send_host_region(self.t.socket(), fd) {
            return Err(self.fail(&format!("sending a host region: {e}")));
        }
        match self.call(Request::HostRegionMap { bytes })? {
            Reply::HostRegion { id } => Ok(id),
            _ => Err(CUresult::CUDA_ERROR_UNKNOWN),
        }
    }

    pub fn staging_len(&self) -> usize {
        self.staging().len()
    }

    /// After `fork`, in the child: give up the parent's connection without closing it in a
    /// way the parent would see (no close flag in the shared segment, no socket shutdown):
    /// the child's copies of its descriptors are closed and its mapping is left alone.
    pub fn abandon(self) {
        let fd = self.t.socket().as_raw_fd();
        std::mem::forget(self);
        // SAFETY: `fd` is this process's copy of the inherited socket; the transport that
        // owned it was forgotten above, so nothing else will use or close it.
        unsafe { libc::close(fd) };
    }
}
