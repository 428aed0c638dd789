//! The fuzzer's executor: runs a [`Sequence`] against a loaded [`Driver`] (the simulator itself,
//! or libgpupool.so under `gpupool run`) in the tenant's own process, and writes one line per
//! driver call: its index, name, result code, and for every read-back a digest of the bytes.
//! The line is written as soon as the call returns, so a process SIGKILLed part-way has printed
//! a prefix of what a complete run prints.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::io::Write;
use std::ptr::null_mut;

use super::ops::{BadPtr, Buf, CaptureEnd, CtxSlot, HOME, Kernel, Op, SCRATCH, Sequence, Width};
use crate::churn::Rng;
use crate::cu::{CUcontext, CUdeviceptr, CUevent, CUfunction, CUmodule, CUresult, CUstream};
use crate::{Driver, call};

/// Bytes of each tenant's canary, in its home context, untouched by its own sequence.
pub const CANARY_BYTES: usize = 64 << 10;
/// `CU_STREAM_NON_BLOCKING`, `CU_EVENT_DISABLE_TIMING`.
const NON_BLOCKING: u32 = 1;
const DISABLE_TIMING: u32 = 2;

/// A call's line: `index name code [digest]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallResult {
    pub call: String,
    pub code: i32,
    pub digest: Option<u64>,
}

impl CallResult {
    pub fn line(&self, index: usize) -> String {
        match self.digest {
            Some(d) => format!("{index} {} {} {d:016x}", self.call, self.code),
            None => format!("{index} {} {}", self.call, self.code),
        }
    }

    /// Parses a line [`CallResult::line`] wrote; other lines are `None`.
    pub fn parse(line: &str) -> Option<(usize, CallResult)> {
        let mut f = line.split(' ');
        let index = f.next()?.parse().ok()?;
        let call = f.next()?.to_string();
        let code = f.next()?.parse().ok()?;
        let digest = match f.next() {
            Some(d) => Some(u64::from_str_radix(d, 16).ok()?),
            None => None,
        };
        f.next().is_none().then_some((index, CallResult { call, code, digest }))
    }
}

/// FNV-1a, 64 bits: a digest of read-back bytes for comparing runs.
pub fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// Bytes drawn from `seed` (upload payloads, the canary).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    v.truncate(len);
    v
}

/// The canary's content for a sequence seed.
pub fn canary_pattern(seed: u64) -> Vec<u8> {
    pattern(seed ^ 0xca4a_7c0d_e000_0001, CANARY_BYTES)
}

struct BufState {
    ptr: CUdeviceptr,
    bytes: u64,
    ctx: CtxSlot,
    owner: Option<Buf>,
    /// Its owner stream was destroyed, perhaps with work on it still queued: the legacy stream
    /// it moved to is not ordered after that work (the stream may have been NON_BLOCKING), so
    /// only a `cuCtxSynchronize` makes it safe to read.
    orphaned: bool,
}

/// Runs sequences and writes result lines to `out`.
pub struct Executor<'d, W: Write> {
    d: &'d Driver,
    out: W,
    calls: usize,
    ctx: [CUcontext; 2],
    current: Option<CtxSlot>,
    bufs: BTreeMap<Buf, BufState>,
    streams: BTreeMap<usize, (CUstream, CtxSlot)>,
    events: BTreeMap<usize, (CUevent, CtxSlot)>,
    modules: BTreeMap<usize, (CUmodule, [CUfunction; 2], CtxSlot)>,
    /// Host memory handed to queued copies: kept until the sequence ends.
    keep: Vec<Vec<u8>>,
    canary: CUdeviceptr,
    /// Another tenant's device address, for kernels through [`BadPtr::OtherTenant`].
    foreign: CUdeviceptr,
}

impl<'d, W: Write> Executor<'d, W> {
    pub fn new(d: &'d Driver, out: W) -> Self {
        Executor {
            d,
            out,
            calls: 0,
            ctx: [null_mut(); 2],
            current: None,
            bufs: BTreeMap::new(),
            streams: BTreeMap::new(),
            events: BTreeMap::new(),
            modules: BTreeMap::new(),
            keep: Vec::new(),
            canary: 0,
            foreign: 0,
        }
    }

    /// Sets the address [`BadPtr::OtherTenant`] kernels write to.
    pub fn with_foreign(mut self, addr: CUdeviceptr) -> Self {
        self.foreign = addr;
        self
    }

    /// The canary's device address (after [`Executor::start`]).
    pub fn canary_ptr(&self) -> CUdeviceptr {
        self.canary
    }

    fn rec(&mut self, call: &str, r: CUresult, digest: Option<u64>) -> CUresult {
        let line = CallResult { call: call.to_string(), code: r.0 as i32, digest }.line(self.calls);
        self.calls += 1;
        self.emit(&line);
        r
    }

    /// Writes one whole line with one write, so a kill never leaves half of one in the pipe.
    fn emit(&mut self, line: &str) {
        // A closed stdout (the harness gone) ends the tenant as a SIGPIPE would.
        if self.out.write_all(format!("{line}\n").as_bytes()).and_then(|_| self.out.flush()).is_err() {
            std::process::exit(0);
        }
    }

    fn make_current(&mut self, ctx: CtxSlot) {
        let d = self.d;
        if self.current != Some(ctx) {
            let r = call!(d.cuCtxSetCurrent(self.ctx[ctx]));
            self.rec("cuCtxSetCurrent", r, None);
            self.current = Some(ctx);
        }
    }

    fn stream_of(&self, owner: Option<usize>) -> CUstream {
        owner.and_then(|s| self.streams.get(&s)).map_or(null_mut(), |s| s.0)
    }

    /// Two fresh events (without timing) in the current context, both creations recorded.
    fn two_events(&mut self) -> (CUevent, CUevent) {
        let d = self.d;
        let (mut a, mut b) = (null_mut(), null_mut());
        let r = call!(d.cuEventCreate(&mut a, DISABLE_TIMING));
        self.rec("cuEventCreate", r, None);
        let r = call!(d.cuEventCreate(&mut b, DISABLE_TIMING));
        self.rec("cuEventCreate", r, None);
        (a, b)
    }

    /// [`Op::CaptureForkJoin`]: every call's result is recorded, and the status the side stream
    /// is left in (it must be out of capture whatever the end).
    fn capture_fork_join(&mut self, origin: usize, side: usize, a: Buf, b: Buf, value: u32, end: CaptureEnd) {
        let d = self.d;
        let ((so, ctx), (ss, _)) = (self.streams[&origin], self.streams[&side]);
        let ((pa, na, ..), (pb, nb, ..)) = (self.buf(a), self.buf(b));
        self.make_current(ctx);
        let (fork, join) = self.two_events();
        let r = call!(d.cuStreamBeginCapture_v2(so, crate::cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL));
        self.rec("cuStreamBeginCapture", r, None);
        let r = call!(d.cuMemsetD32Async(pa, value, (na / 4) as usize, so));
        self.rec("cuMemsetD32Async", r, None);
        let r = call!(d.cuEventRecord(fork, so));
        self.rec("cuEventRecord", r, None);
        let r = call!(d.cuStreamWaitEvent(ss, fork, 0));
        self.rec("cuStreamWaitEvent", r, None);
        if end != CaptureEnd::IdleFork {
            let r = call!(d.cuMemsetD32Async(pb, value.rotate_left(7), (nb / 8) as usize, ss));
            self.rec("cuMemsetD32Async", r, None);
        }
        if end == CaptureEnd::LegacyTouched {
            let r = call!(d.cuEventRecord(join, null_mut()));
            self.rec("cuEventRecord(legacy)", r, None);
        }
        if matches!(end, CaptureEnd::Joined | CaptureEnd::LegacyTouched) {
            let r = call!(d.cuEventRecord(join, ss));
            self.rec("cuEventRecord", r, None);
            let r = call!(d.cuStreamWaitEvent(so, join, 0));
            self.rec("cuStreamWaitEvent", r, None);
        }
        let mut graph = null_mut();
        if end == CaptureEnd::EndOnSide {
            let r = call!(d.cuStreamEndCapture(ss, &mut graph));
            self.rec("cuStreamEndCapture(side)", r, None);
        }
        let r = call!(d.cuStreamEndCapture(so, &mut graph));
        self.rec("cuStreamEndCapture", r, None);
        let mut status = crate::cu::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE;
        let r = call!(d.cuStreamIsCapturing(ss, &mut status));
        self.rec("cuStreamIsCapturing(side)", r, Some(u64::from(status.0)));
        if !graph.is_null() {
            let mut exec = null_mut();
            let r = call!(d.cuGraphInstantiateWithFlags(&mut exec, graph, 0));
            self.rec("cuGraphInstantiate", r, None);
            if r == CUresult::CUDA_SUCCESS {
                let r = call!(d.cuGraphLaunch(exec, so));
                self.rec("cuGraphLaunch", r, None);
                let r = call!(d.cuStreamSynchronize(so));
                self.rec("cuStreamSynchronize", r, None);
                let r = call!(d.cuGraphExecDestroy(exec));
                self.rec("cuGraphExecDestroy", r, None);
            }
            let r = call!(d.cuGraphDestroy(graph));
            self.rec("cuGraphDestroy", r, None);
        }
        for e in [fork, join] {
            let r = call!(d.cuEventDestroy_v2(e));
            self.rec("cuEventDestroy", r, None);
        }
    }

    fn buf(&self, id: Buf) -> (CUdeviceptr, u64, CtxSlot, CUstream) {
        let b = &self.bufs[&id];
        (b.ptr, b.bytes, b.ctx, self.stream_of(b.owner))
    }

    /// The prologue: `cuInit`, the home context, and the canary written and synchronized.
    pub fn start(&mut self, seed: u64) {
        let d = self.d;
        let r = call!(d.cuInit(0));
        self.rec("cuInit", r, None);
        let mut dev = 0;
        let r = call!(d.cuDeviceGet(&mut dev, 0));
        self.rec("cuDeviceGet", r, None);
        let r = call!(d.cuCtxCreate_v2(&mut self.ctx[HOME], 0, dev));
        self.rec("cuCtxCreate", r, None);
        self.current = Some(HOME);
        let r = call!(d.cuMemAlloc_v2(&mut self.canary, CANARY_BYTES));
        self.rec("cuMemAlloc(canary)", r, None);
        let c = canary_pattern(seed);
        let r = call!(d.cuMemcpyHtoD_v2(self.canary, c.as_ptr().cast(), c.len()));
        self.rec("cuMemcpyHtoD(canary)", r, None);
    }

    /// Runs every op of `seq` (an `Exit` op ends the process), then the epilogue.
    pub fn run(&mut self, seq: &Sequence) {
        self.start(seq.seed);
        for (i, op) in seq.ops.iter().enumerate() {
            self.emit(&format!("op {i}"));
            self.op(op);
        }
        self.finish(seq.seed);
    }

    /// Reads the canary back: `true` when it still holds what `start` wrote.
    pub fn canary_intact(&mut self, seed: u64) -> bool {
        let d = self.d;
        self.make_current(HOME);
        let mut host = vec![0u8; CANARY_BYTES];
        let r = call!(d.cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), self.canary, CANARY_BYTES));
        let intact = host == canary_pattern(seed);
        self.rec(if intact { "canary-intact" } else { "canary-CHANGED" }, r, Some(digest(&host)));
        intact
    }

    /// The epilogue: every live buffer read back, the canary checked, everything freed.
    pub fn finish(&mut self, seed: u64) {
        let d = self.d;
        let ids: Vec<Buf> = self.bufs.keys().copied().collect();
        for &id in &ids {
            self.read_back(id);
        }
        self.canary_intact(seed);
        for id in ids {
            self.free(id);
        }
        for (_, (m, _, ctx)) in std::mem::take(&mut self.modules) {
            self.make_current(ctx);
            let r = call!(d.cuModuleUnload(m));
            self.rec("cuModuleUnload", r, None);
        }
        for (_, (e, ctx)) in std::mem::take(&mut self.events) {
            self.make_current(ctx);
            let r = call!(d.cuEventDestroy_v2(e));
            self.rec("cuEventDestroy", r, None);
        }
        for (_, (s, ctx)) in std::mem::take(&mut self.streams) {
            self.make_current(ctx);
            let r = call!(d.cuStreamDestroy_v2(s));
            self.rec("cuStreamDestroy", r, None);
        }
        self.make_current(HOME);
        let r = call!(d.cuMemFree_v2(self.canary));
        self.rec("cuMemFree(canary)", r, None);
        if !self.ctx[SCRATCH].is_null() {
            self.destroy_scratch();
        }
        let r = call!(d.cuCtxDestroy_v2(self.ctx[HOME]));
        self.rec("cuCtxDestroy(home)", r, None);
        self.current = None;
    }

    /// Reads a buffer back: its owner stream synchronized, then a synchronous copy. An orphaned
    /// buffer's context is synchronized first (the generator fences its own reads so; this is
    /// for the epilogue's).
    fn read_back(&mut self, id: Buf) {
        let d = self.d;
        let (ptr, bytes, ctx, stream) = self.buf(id);
        self.make_current(ctx);
        if self.bufs[&id].orphaned {
            self.ctx_sync(ctx);
        }
        let r = call!(d.cuStreamSynchronize(stream));
        self.rec("cuStreamSynchronize", r, None);
        let mut host = vec![0u8; bytes as usize];
        let r = call!(d.cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), ptr, host.len()));
        self.rec("cuMemcpyDtoH", r, Some(digest(&host)));
    }

    fn free(&mut self, id: Buf) {
        let d = self.d;
        let (ptr, _, ctx, _) = self.buf(id);
        self.make_current(ctx);
        let r = call!(d.cuMemFree_v2(ptr));
        self.rec("cuMemFree", r, None);
        self.bufs.remove(&id);
    }

    /// `cuStreamSynchronize` of the legacy stream, after a "synchronous" memset or device-to-device
    /// copy: CUDA documents both as asynchronous with respect to the host for device memory
    /// ("API synchronization behavior"), and they run on the legacy stream, which a
    /// NON_BLOCKING owner stream's later work is not ordered after.
    fn legacy_sync(&mut self) {
        let d = self.d;
        let r = call!(d.cuStreamSynchronize(null_mut()));
        self.rec("cuStreamSynchronize(legacy)", r, None);
    }

    /// `cuCtxSynchronize` of the current context `ctx`: every buffer of it is ordered again.
    fn ctx_sync(&mut self, ctx: CtxSlot) {
        let d = self.d;
        let r = call!(d.cuCtxSynchronize());
        self.rec("cuCtxSynchronize", r, None);
        for b in self.bufs.values_mut().filter(|b| b.ctx == ctx) {
            b.orphaned = false;
        }
    }

    fn destroy_scratch(&mut self) {
        let d = self.d;
        let r = call!(d.cuCtxDestroy_v2(self.ctx[SCRATCH]));
        self.rec("cuCtxDestroy(scratch)", r, None);
        self.ctx[SCRATCH] = null_mut();
        self.bufs.retain(|_, b| b.ctx != SCRATCH);
        self.streams.retain(|_, s| s.1 != SCRATCH);
        self.events.retain(|_, e| e.1 != SCRATCH);
        self.modules.retain(|_, m| m.2 != SCRATCH);
        // Destroying a context pops it if it was current; the home context is set again next.
        self.current = None;
    }

    fn launch(&mut self, f: CUfunction, blocks: u32, threads: u32, stream: CUstream, params: &mut [*mut c_void]) {
        let d = self.d;
        let r = call!(d.cuLaunchKernel(f, blocks, 1, 1, threads, 1, 1, 0, stream, params.as_mut_ptr(), null_mut()));
        self.rec("cuLaunchKernel", r, None);
    }

    /// Runs one op.
    pub fn op(&mut self, op: &Op) {
        let d = self.d;
        match *op {
            Op::CtxCreate => {
                let mut c = null_mut();
                let r = call!(d.cuCtxCreate_v2(&mut c, 0, 0));
                self.rec("cuCtxCreate(scratch)", r, None);
                self.ctx[SCRATCH] = c;
                self.current = Some(SCRATCH);
            }
            Op::CtxDestroy => self.destroy_scratch(),
            Op::CtxSync { ctx } => {
                self.make_current(ctx);
                self.ctx_sync(ctx);
            }
            Op::StreamCreate { id, ctx, nonblocking } => {
                self.make_current(ctx);
                let mut s = null_mut();
                let r = call!(d.cuStreamCreate(&mut s, if nonblocking { NON_BLOCKING } else { 0 }));
                self.rec("cuStreamCreate", r, None);
                self.streams.insert(id, (s, ctx));
            }
            Op::StreamDestroy { id } => {
                let (s, ctx) = self.streams.remove(&id).expect("the generator names live streams");
                self.make_current(ctx);
                let r = call!(d.cuStreamDestroy_v2(s));
                self.rec("cuStreamDestroy", r, None);
                for b in self.bufs.values_mut().filter(|b| b.owner == Some(id)) {
                    b.owner = None;
                    b.orphaned = true;
                }
            }
            Op::CaptureForkJoin { origin, side, a, b, value, end } => {
                self.capture_fork_join(origin, side, a, b, value, end)
            }
            Op::Alloc { id, ctx, bytes, owner } => {
                self.make_current(ctx);
                let mut ptr = 0;
                let r = call!(d.cuMemAlloc_v2(&mut ptr, bytes as usize));
                self.rec("cuMemAlloc", r, None);
                let r = call!(d.cuMemsetD8_v2(ptr, 0, bytes as usize));
                self.rec("cuMemsetD8", r, None);
                self.legacy_sync();
                self.bufs.insert(id, BufState { ptr, bytes, ctx, owner, orphaned: false });
            }
            Op::Free { id } => self.free(id),
            Op::FreeAsync { id } => {
                let (ptr, _, ctx, stream) = self.buf(id);
                self.make_current(ctx);
                let r = call!(d.cuMemFreeAsync(ptr, stream));
                self.rec("cuMemFreeAsync", r, None);
                self.bufs.remove(&id);
            }
            Op::FreeTwice { id } => {
                let (ptr, ..) = self.buf(id);
                self.free(id);
                let r = call!(d.cuMemFree_v2(ptr));
                self.rec("cuMemFree(again)", r, None);
            }
            Op::Memset { id, width, value, offset, count } => {
                let (ptr, _, ctx, s) = self.buf(id);
                self.make_current(ctx);
                let (p, n) = (ptr + offset, count as usize);
                let r = match width {
                    Width::D8 => call!(d.cuMemsetD8Async(p, value as u8, n, s)),
                    Width::D16 => call!(d.cuMemsetD16Async(p, value as u16, n, s)),
                    Width::D32 => call!(d.cuMemsetD32Async(p, value, n, s)),
                };
                self.rec(&format!("cuMemset{width:?}Async"), r, None);
            }
            Op::Upload { id, offset, len, data_seed } => {
                let (ptr, _, ctx, s) = self.buf(id);
                self.make_current(ctx);
                let data = pattern(data_seed, len as usize);
                let r = call!(d.cuMemcpyHtoDAsync_v2(ptr + offset, data.as_ptr().cast(), data.len(), s));
                self.keep.push(data);
                self.rec("cuMemcpyHtoDAsync", r, None);
            }
            Op::Download { id } => {
                let (ptr, bytes, ctx, s) = self.buf(id);
                self.make_current(ctx);
                let mut host = vec![0u8; bytes as usize];
                let r = call!(d.cuMemcpyDtoHAsync_v2(host.as_mut_ptr().cast(), ptr, host.len(), s));
                self.rec("cuMemcpyDtoHAsync", r, None);
                let r = call!(d.cuStreamSynchronize(s));
                self.rec("cuStreamSynchronize", r, Some(digest(&host)));
            }
            Op::ReadBack { id } => self.read_back(id),
            Op::Copy { dst, src, bytes } => {
                let (dp, _, ctx, s) = self.buf(dst);
                let (sp, ..) = self.buf(src);
                self.make_current(ctx);
                let r = call!(d.cuMemcpyDtoDAsync_v2(dp, sp, bytes as usize, s));
                self.rec("cuMemcpyDtoDAsync", r, None);
            }
            Op::CopyAcross { dst, src, bytes } => {
                let (dp, _, ctx, ds) = self.buf(dst);
                let (sp, _, _, ss) = self.buf(src);
                self.make_current(ctx);
                let (e1, e2) = self.two_events();
                let r = call!(d.cuEventRecord(e1, ss));
                self.rec("cuEventRecord", r, None);
                let r = call!(d.cuStreamWaitEvent(ds, e1, 0));
                self.rec("cuStreamWaitEvent", r, None);
                let r = call!(d.cuMemcpyDtoDAsync_v2(dp, sp, bytes as usize, ds));
                self.rec("cuMemcpyDtoDAsync", r, None);
                let r = call!(d.cuEventRecord(e2, ds));
                self.rec("cuEventRecord", r, None);
                let r = call!(d.cuStreamWaitEvent(ss, e2, 0));
                self.rec("cuStreamWaitEvent", r, None);
                let r = call!(d.cuEventDestroy_v2(e1));
                self.rec("cuEventDestroy", r, None);
                let r = call!(d.cuEventDestroy_v2(e2));
                self.rec("cuEventDestroy", r, None);
            }
            Op::CopySync { dst, src, bytes } => {
                let (dp, _, ctx, ds) = self.buf(dst);
                let (sp, _, _, ss) = self.buf(src);
                self.make_current(ctx);
                for s in [ds, ss] {
                    let r = call!(d.cuStreamSynchronize(s));
                    self.rec("cuStreamSynchronize", r, None);
                }
                let r = call!(d.cuMemcpyDtoD_v2(dp, sp, bytes as usize));
                self.rec("cuMemcpyDtoD", r, None);
                self.legacy_sync();
            }
            Op::EventCreate { id, ctx } => {
                self.make_current(ctx);
                let mut e = null_mut();
                let r = call!(d.cuEventCreate(&mut e, DISABLE_TIMING));
                self.rec("cuEventCreate", r, None);
                self.events.insert(id, (e, ctx));
            }
            Op::EventRecord { id, stream } => {
                let (e, ctx) = self.events[&id];
                self.make_current(ctx);
                let r = call!(d.cuEventRecord(e, self.stream_of(stream)));
                self.rec("cuEventRecord", r, None);
            }
            Op::StreamWaitEvent { stream, event } => {
                let (e, ctx) = self.events[&event];
                self.make_current(ctx);
                let r = call!(d.cuStreamWaitEvent(self.stream_of(stream), e, 0));
                self.rec("cuStreamWaitEvent", r, None);
            }
            Op::EventSync { id } => {
                let (e, ctx) = self.events[&id];
                self.make_current(ctx);
                let r = call!(d.cuEventSynchronize(e));
                self.rec("cuEventSynchronize", r, None);
            }
            Op::EventDestroy { id } => {
                let (e, ctx) = self.events.remove(&id).expect("the generator names live events");
                self.make_current(ctx);
                let r = call!(d.cuEventDestroy_v2(e));
                self.rec("cuEventDestroy", r, None);
            }
            Op::ModuleLoad { id, ctx } => {
                self.make_current(ctx);
                let mut m = null_mut();
                let r = call!(d.cuModuleLoadData(&mut m, super::KERNELS_PTX.as_ptr().cast()));
                self.rec("cuModuleLoadData", r, None);
                let mut f = [null_mut(); 2];
                for (slot, name) in f.iter_mut().zip([c"fill32", c"addv"]) {
                    let r = call!(d.cuModuleGetFunction(slot, m, name.as_ptr()));
                    self.rec("cuModuleGetFunction", r, None);
                }
                self.modules.insert(id, (m, f, ctx));
            }
            Op::ModuleUnload { id } => {
                let (m, _, ctx) = self.modules.remove(&id).expect("the generator names live modules");
                self.make_current(ctx);
                let r = call!(d.cuModuleUnload(m));
                self.rec("cuModuleUnload", r, None);
            }
            Op::Launch { module, kernel, dst, src, value, blocks, threads } => {
                let (_, f, _) = self.modules[&module];
                let (dp, _, ctx, s) = self.buf(dst);
                let (sp, ..) = self.buf(src);
                self.make_current(ctx);
                let (mut dp, mut sp, mut v) = (dp, sp, value);
                match kernel {
                    Kernel::Fill => {
                        let mut params: [*mut c_void; 2] = [(&raw mut dp).cast(), (&raw mut v).cast()];
                        self.launch(f[0], blocks, threads, s, &mut params);
                    }
                    Kernel::Add => {
                        let mut params: [*mut c_void; 3] =
                            [(&raw mut dp).cast(), (&raw mut sp).cast(), (&raw mut v).cast()];
                        self.launch(f[1], blocks, threads, s, &mut params);
                    }
                }
            }
            Op::LaunchOutOfRange { module, ptr, blocks, threads } => {
                let (_, f, _) = self.modules[&module];
                let mut p: CUdeviceptr = match ptr {
                    BadPtr::PastEnd(b) => {
                        let (p, bytes, ..) = self.buf(b);
                        p + bytes - u64::from(blocks * threads)
                    }
                    BadPtr::NearNull => 0x100,
                    BadPtr::OtherTenant => self.foreign,
                };
                self.make_current(SCRATCH);
                let mut v = 0xbad0_0000u32;
                let mut params: [*mut c_void; 2] = [(&raw mut p).cast(), (&raw mut v).cast()];
                self.launch(f[0], blocks, threads, null_mut(), &mut params);
                let r = call!(d.cuCtxSynchronize());
                self.rec("cuCtxSynchronize", r, None);
                let mut q = 0;
                let r = call!(d.cuMemAlloc_v2(&mut q, 4096));
                self.rec("cuMemAlloc(poisoned-ctx)", r, None);
                self.destroy_scratch();
            }
            Op::Exit { run_atexit } => {
                let _ = self.out.flush();
                if run_atexit {
                    std::process::exit(0);
                }
                // SAFETY: _exit(2) takes a plain integer and does not return.
                unsafe { libc::_exit(0) };
            }
        }
    }

    /// Driver calls made so far.
    pub fn calls(&self) -> usize {
        self.calls
    }
}
