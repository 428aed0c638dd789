//! The fuzzer's sequences: what a call sequence is ([`Op`]), and the generator that draws one
//! from a seed while keeping a model of what is live, so every sequence is valid-looking and its
//! results are the same on every correct driver.
//!
//! Determinism rules the generator keeps (each result must not depend on timing):
//! - every device buffer has one owner stream (or its context's legacy stream); all queued work
//!   that touches it goes on that stream, so its bytes never race. A copy between buffers of two
//!   owners is fenced both ways with events (record, wait, copy, record, wait);
//! - a read-back synchronizes the owner stream first; a buffer whose owner stream was destroyed
//!   with work queued is read, written or freed with `cuMemFreeAsync` only after a context
//!   synchronize (the executor's epilogue too): `cuStreamDestroy` returns at once and the work
//!   still runs, the legacy stream the buffer falls back to is not ordered after a
//!   `CU_STREAM_NON_BLOCKING` stream's work ("should perform no implicit synchronization with
//!   stream 0"), and `cuMemFreeAsync` frees in its stream's order only, so without the fence a
//!   kernel still queued faults on (or writes into reused) freed memory;
//! - a kernel with an out-of-range pointer runs in the scratch context, followed at once by
//!   `cuCtxSynchronize` (which reports the sticky `CUDA_ERROR_ILLEGAL_ADDRESS`), one call in the
//!   poisoned context, its destruction, and the process's exit (see [`fault`] for why it ends
//!   the sequence);
//! - freshly allocated buffers are zeroed before use (what a new allocation holds is unspecified).

use std::fmt;

use crate::churn::Rng;

/// Index of a context slot: [`HOME`] lives for the whole sequence (it holds the canary),
/// [`SCRATCH`] is created and destroyed by the sequence, and takes the faulting kernels.
pub type CtxSlot = usize;
pub const HOME: CtxSlot = 0;
pub const SCRATCH: CtxSlot = 1;

/// Objects are named by the index of their creation in the sequence, never reused.
pub type Buf = usize;
pub type StreamId = usize;
pub type EventId = usize;
pub type ModuleId = usize;

/// The kernels of [`crate::fuzz::KERNELS_PTX`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// `fill32(p, v)`: `p[i] = v ^ i`.
    Fill,
    /// `addv(dst, src, v)`: `dst[i] = 3 * src[i] + v`.
    Add,
}

/// Where an out-of-range kernel writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadPtr {
    /// Starting a quarter of the launch before the end of a live buffer: the rest falls in the
    /// unmapped gap after it.
    PastEnd(Buf),
    /// A small address no allocation can have.
    NearNull,
    /// Another tenant's memory: the watcher's canary (the executor's `foreign` address). A
    /// live buffer of the tenant's own home context is not drawn: through the pool a tenant's
    /// client contexts share one backend context, so a kernel in one reaches the others' memory
    /// (by design, see [`fault`]), where the simulator's contexts fault.
    OtherTenant,
}

/// A memset width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    D8,
    D16,
    D32,
}

impl Width {
    pub fn bytes(self) -> u64 {
        match self {
            Width::D8 => 1,
            Width::D16 => 2,
            Width::D32 => 4,
        }
    }
}

/// How a [`Op::CaptureForkJoin`] capture ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureEnd {
    /// The side stream's work joined back to the origin with an event: a graph of three nodes.
    Joined,
    /// The side stream did nothing after the fork: no join needed.
    IdleFork,
    /// The side stream's work left unjoined: CUDA_ERROR_STREAM_CAPTURE_UNJOINED.
    Unjoined,
    /// `cuStreamEndCapture` first on the side stream: UNMATCHED, then the origin's INVALIDATED.
    EndOnSide,
    /// An event recorded on the legacy stream before the join: STREAM_CAPTURE_IMPLICIT (and the
    /// capture invalidated) when either stream is a blocking one, allowed when both are not.
    LegacyTouched,
}

/// One step of a sequence; each is one or a few driver calls (see `exec`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `cuCtxCreate` of the scratch context.
    CtxCreate,
    /// `cuCtxDestroy` of the scratch context, with whatever it has queued.
    CtxDestroy,
    /// `cuCtxSynchronize` in `ctx`.
    CtxSync { ctx: CtxSlot },
    /// `cuStreamCreate` (default or non-blocking).
    StreamCreate { id: StreamId, ctx: CtxSlot, nonblocking: bool },
    /// `cuStreamDestroy` with whatever it has queued; its buffers move to the legacy stream.
    StreamDestroy { id: StreamId },
    /// `cuMemAlloc`, then a synchronous `cuMemsetD8` to zero and `cuStreamSynchronize` of the
    /// legacy stream (see `exec`: the memset may still be running when it returns).
    Alloc { id: Buf, ctx: CtxSlot, bytes: u64, owner: Option<StreamId> },
    /// `cuMemFree`, with whatever is queued on the buffer.
    Free { id: Buf },
    /// `cuMemFreeAsync` on the owner stream.
    FreeAsync { id: Buf },
    /// `cuMemFree` twice: the second is of a freed pointer.
    FreeTwice { id: Buf },
    /// `cuMemsetD{8,16,32}Async` of `count` elements at `offset` on the owner stream.
    Memset { id: Buf, width: Width, value: u32, offset: u64, count: u64 },
    /// `cuMemcpyHtoDAsync` of `len` bytes drawn from `data_seed` at `offset` on the owner stream.
    Upload { id: Buf, offset: u64, len: u64, data_seed: u64 },
    /// `cuMemcpyDtoHAsync` of the whole buffer on the owner stream, `cuStreamSynchronize`, digest.
    Download { id: Buf },
    /// `cuStreamSynchronize` of the owner, synchronous `cuMemcpyDtoH` of the whole buffer, digest.
    ReadBack { id: Buf },
    /// `cuMemcpyDtoDAsync` of `bytes` on the (shared) owner stream.
    Copy { dst: Buf, src: Buf, bytes: u64 },
    /// A copy between buffers of two owners, fenced with two fresh events both ways; the events
    /// are destroyed right after, still pending.
    CopyAcross { dst: Buf, src: Buf, bytes: u64 },
    /// Synchronous `cuMemcpyDtoD` after synchronizing both owners, then `cuStreamSynchronize` of
    /// the legacy stream (see `exec`: the copy may still be running when it returns).
    CopySync { dst: Buf, src: Buf, bytes: u64 },
    /// `cuEventCreate`.
    EventCreate { id: EventId, ctx: CtxSlot },
    /// `cuEventRecord` on a stream (None: the legacy stream).
    EventRecord { id: EventId, stream: Option<StreamId> },
    /// `cuStreamWaitEvent`.
    StreamWaitEvent { stream: Option<StreamId>, event: EventId },
    /// `cuEventSynchronize`.
    EventSync { id: EventId },
    /// `cuEventDestroy`, recorded work possibly still pending.
    EventDestroy { id: EventId },
    /// `cuModuleLoadData` of the kernels, and `cuModuleGetFunction` of both.
    ModuleLoad { id: ModuleId, ctx: CtxSlot },
    /// `cuModuleUnload`, with launches of it possibly queued.
    ModuleUnload { id: ModuleId },
    /// `cuLaunchKernel` on `dst`'s owner stream, within its bounds.
    Launch { module: ModuleId, kernel: Kernel, dst: Buf, src: Buf, value: u32, blocks: u32, threads: u32 },
    /// In the scratch context: a fill kernel through `ptr`, then `cuCtxSynchronize` (the sticky
    /// `CUDA_ERROR_ILLEGAL_ADDRESS`), a `cuMemAlloc` in the poisoned context, and `cuCtxDestroy`.
    LaunchOutOfRange { module: ModuleId, ptr: BadPtr, blocks: u32, threads: u32 },
    /// A capture on `origin` forked to `side` with an event: a memset of `a` on the origin, one
    /// of `b` on the side stream, then the capture ends as `end` says; a graph that comes of it
    /// is instantiated, launched on the origin (which owns both buffers), synchronized and
    /// destroyed.
    CaptureForkJoin { origin: StreamId, side: StreamId, a: Buf, b: Buf, value: u32, end: CaptureEnd },
    /// Ends the process here: `exit(0)` (atexit handlers run) or `_exit(0)` (none do).
    Exit { run_atexit: bool },
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = |o: &Option<StreamId>| o.map_or("legacy".to_string(), |s| format!("s{s}"));
        match self {
            Op::CtxCreate => write!(f, "cuCtxCreate(scratch)"),
            Op::CtxDestroy => write!(f, "cuCtxDestroy(scratch)"),
            Op::CtxSync { ctx } => write!(f, "cuCtxSynchronize() in ctx{ctx}"),
            Op::StreamCreate { id, ctx, nonblocking } => {
                write!(
                    f,
                    "s{id} = cuStreamCreate({}) in ctx{ctx}",
                    if *nonblocking { "NON_BLOCKING" } else { "DEFAULT" }
                )
            }
            Op::StreamDestroy { id } => write!(f, "cuStreamDestroy(s{id})"),
            Op::CaptureForkJoin { origin, side, a, b, value, end } => write!(
                f,
                "cuStreamBeginCapture(s{origin}); cuMemsetD32Async(b{a}, {value:#x}, s{origin}); fork to s{side}; \
                 cuMemsetD32Async(b{b}, s{side}); {end:?}; launch the graph on s{origin}"
            ),
            Op::Alloc { id, ctx, bytes, owner } => {
                write!(
                    f,
                    "b{id} = cuMemAlloc({bytes}) in ctx{ctx}, owner {}; cuMemsetD8(b{id}, 0, {bytes}); cuStreamSynchronize(legacy)",
                    s(owner)
                )
            }
            Op::Free { id } => write!(f, "cuMemFree(b{id})"),
            Op::FreeAsync { id } => write!(f, "cuMemFreeAsync(b{id}, owner)"),
            Op::FreeTwice { id } => write!(f, "cuMemFree(b{id}); cuMemFree(b{id})"),
            Op::Memset { id, width, value, offset, count } => {
                write!(f, "cuMemset{width:?}Async(b{id}+{offset}, {value:#x}, {count}, owner)")
            }
            Op::Upload { id, offset, len, data_seed } => {
                write!(f, "cuMemcpyHtoDAsync(b{id}+{offset}, data#{data_seed:x}, {len}, owner)")
            }
            Op::Download { id } => write!(f, "cuMemcpyDtoHAsync(host, b{id}, all, owner); cuStreamSynchronize(owner)"),
            Op::ReadBack { id } => write!(f, "cuStreamSynchronize(owner of b{id}); cuMemcpyDtoH(host, b{id}, all)"),
            Op::Copy { dst, src, bytes } => write!(f, "cuMemcpyDtoDAsync(b{dst}, b{src}, {bytes}, owner)"),
            Op::CopyAcross { dst, src, bytes } => write!(
                f,
                "e1,e2 = cuEventCreate; cuEventRecord(e1, owner b{src}); cuStreamWaitEvent(owner b{dst}, e1); \
                 cuMemcpyDtoDAsync(b{dst}, b{src}, {bytes}, owner b{dst}); cuEventRecord(e2, owner b{dst}); \
                 cuStreamWaitEvent(owner b{src}, e2); cuEventDestroy(e1); cuEventDestroy(e2)"
            ),
            Op::CopySync { dst, src, bytes } => {
                write!(
                    f,
                    "cuStreamSynchronize(owners of b{dst}, b{src}); cuMemcpyDtoD(b{dst}, b{src}, {bytes}); \
                     cuStreamSynchronize(legacy)"
                )
            }
            Op::EventCreate { id, ctx } => write!(f, "e{id} = cuEventCreate() in ctx{ctx}"),
            Op::EventRecord { id, stream } => write!(f, "cuEventRecord(e{id}, {})", s(stream)),
            Op::StreamWaitEvent { stream, event } => write!(f, "cuStreamWaitEvent({}, e{event})", s(stream)),
            Op::EventSync { id } => write!(f, "cuEventSynchronize(e{id})"),
            Op::EventDestroy { id } => write!(f, "cuEventDestroy(e{id})"),
            Op::ModuleLoad { id, ctx } => write!(f, "m{id} = cuModuleLoadData(kernels) in ctx{ctx}"),
            Op::ModuleUnload { id } => write!(f, "cuModuleUnload(m{id})"),
            Op::Launch { module, kernel, dst, src, value, blocks, threads } => match kernel {
                Kernel::Fill => {
                    write!(f, "cuLaunchKernel(m{module}.fill32<<<{blocks},{threads}, owner>>>(b{dst}, {value:#x}))")
                }
                Kernel::Add => {
                    write!(
                        f,
                        "cuLaunchKernel(m{module}.addv<<<{blocks},{threads}, owner>>>(b{dst}, b{src}, {value:#x}))"
                    )
                }
            },
            Op::LaunchOutOfRange { module, ptr, blocks, threads } => write!(
                f,
                "cuLaunchKernel(m{module}.fill32<<<{blocks},{threads}>>>({ptr:?})); cuCtxSynchronize(); \
                 cuMemAlloc(4096); cuCtxDestroy(scratch)"
            ),
            Op::Exit { run_atexit } => write!(f, "{}", if *run_atexit { "exit(0)" } else { "_exit(0)" }),
        }
    }
}

/// A generated sequence: its seed and its ops. The prologue (cuInit, the home context, the
/// canary) and the epilogue (read every live buffer back, check the canary, free and destroy
/// everything) are the executor's, around these.
#[derive(Clone, Debug)]
pub struct Sequence {
    pub seed: u64,
    pub ops: Vec<Op>,
}

impl Sequence {
    /// The readable reproducer: one op a line, numbered.
    pub fn listing(&self) -> String {
        let mut s = format!("sequence seed {:#x} ({} ops):\n", self.seed, self.ops.len());
        for (i, op) in self.ops.iter().enumerate() {
            s.push_str(&format!("  {i:3}: {op}\n"));
        }
        s
    }
}

struct BufModel {
    ctx: CtxSlot,
    bytes: u64,
    owner: Option<StreamId>,
    live: bool,
    /// Its owner stream was destroyed with work queued: a context synchronize must come first.
    orphaned: bool,
}

struct Model {
    scratch_live: bool,
    bufs: Vec<BufModel>,
    /// (ctx, live)
    streams: Vec<(CtxSlot, bool)>,
    events: Vec<(CtxSlot, bool)>,
    modules: Vec<(CtxSlot, bool)>,
    next_id: usize,
}

const SIZES: [u64; 5] = [512, 2048, 4096, 16384, 65536];
/// At most this many live buffers per context (all within any quota the harness sets).
const MAX_BUFS: usize = 8;

impl Model {
    fn id(&mut self) -> usize {
        self.next_id += 1;
        self.next_id - 1
    }

    fn live_bufs(&self, ctx: Option<CtxSlot>) -> Vec<Buf> {
        (0..self.bufs.len()).filter(|&b| self.bufs[b].live && ctx.is_none_or(|c| self.bufs[b].ctx == c)).collect()
    }

    fn live_streams(&self, ctx: CtxSlot) -> Vec<StreamId> {
        (0..self.streams.len()).filter(|&s| self.streams[s].1 && self.streams[s].0 == ctx).collect()
    }

    fn live_events(&self, ctx: Option<CtxSlot>) -> Vec<EventId> {
        (0..self.events.len()).filter(|&e| self.events[e].1 && ctx.is_none_or(|c| self.events[e].0 == c)).collect()
    }

    fn live_modules(&self, ctx: CtxSlot) -> Vec<ModuleId> {
        (0..self.modules.len()).filter(|&m| self.modules[m].1 && self.modules[m].0 == ctx).collect()
    }

    fn kill_ctx(&mut self, ctx: CtxSlot) {
        for b in self.bufs.iter_mut().filter(|b| b.ctx == ctx) {
            b.live = false;
        }
        for o in self.streams.iter_mut().chain(self.events.iter_mut()).chain(self.modules.iter_mut()) {
            if o.0 == ctx {
                o.1 = false;
            }
        }
    }
}

fn pick<T: Copy>(rng: &mut Rng, v: &[T]) -> Option<T> {
    if v.is_empty() { None } else { Some(v[rng.below(v.len() as u64) as usize]) }
}

/// Draws a sequence of about `len` ops from `seed`. With `allow_exit`, some sequences end the
/// process part-way through (an `Exit` op).
pub fn generate(seed: u64, len: usize, allow_exit: bool) -> Sequence {
    let mut rng = Rng::new(seed);
    let mut m = Model {
        scratch_live: false,
        bufs: Vec::new(),
        streams: Vec::new(),
        events: Vec::new(),
        modules: Vec::new(),
        next_id: 0,
    };
    let mut ops = Vec::new();
    let exit_at = (allow_exit && rng.below(5) == 0).then(|| rng.below(len as u64) as usize);
    let fault_at = (rng.below(4) == 0).then(|| len / 2 + rng.below(len as u64 / 2 + 1) as usize);
    while ops.len() < len {
        if exit_at == Some(ops.len()) {
            ops.push(Op::Exit { run_atexit: rng.below(2) == 0 });
            break;
        }
        if fault_at.is_some_and(|f| ops.len() >= f) {
            fault(&mut rng, &mut m, &mut ops);
            break;
        }
        step(&mut rng, &mut m, &mut ops);
    }
    Sequence { seed, ops }
}

/// Ends the sequence with a kernel through an out-of-range pointer in the scratch context
/// (created, with a module, if need be), and the process's exit.
///
/// Why it ends the sequence: through the pool a tenant's client contexts share one backend
/// context (DESIGN: tenants never share a context; a tenant's sessions do), so the sticky
/// `CUDA_ERROR_ILLEGAL_ADDRESS` reaches the tenant's home context too, where on the simulator
/// (and NVIDIA's driver) contexts fault alone. What comes after the fault would differ by design.
fn fault(rng: &mut Rng, m: &mut Model, ops: &mut Vec<Op>) {
    if !m.scratch_live {
        m.scratch_live = true;
        ops.push(Op::CtxCreate);
    }
    let module = match pick(rng, &m.live_modules(SCRATCH)) {
        Some(id) => id,
        None => {
            let id = m.id();
            grow(&mut m.modules, id, || (SCRATCH, false));
            m.modules[id] = (SCRATCH, true);
            ops.push(Op::ModuleLoad { id, ctx: SCRATCH });
            id
        }
    };
    let threads = [32u32, 64, 128][rng.below(3) as usize];
    let blocks = 1 + rng.below(2) as u32;
    let ptr = match (rng.below(3), pick(rng, &m.live_bufs(Some(SCRATCH)))) {
        (0, Some(b)) => BadPtr::PastEnd(b),
        (1, _) => BadPtr::OtherTenant,
        _ => BadPtr::NearNull,
    };
    m.kill_ctx(SCRATCH);
    m.scratch_live = false;
    ops.push(Op::LaunchOutOfRange { module, ptr, blocks, threads });
    ops.push(Op::Exit { run_atexit: rng.below(2) == 0 });
}

/// Appends one op (or a fence and one op) to `ops`.
fn step(rng: &mut Rng, m: &mut Model, ops: &mut Vec<Op>) {
    let ctx = if m.scratch_live && rng.below(3) == 0 { SCRATCH } else { HOME };
    // Buffers whose stream died with work queued: fence before touching any of them.
    let fence = |m: &mut Model, ops: &mut Vec<Op>, bufs: &[Buf]| {
        if bufs.iter().any(|&b| m.bufs[b].orphaned) {
            let c = m.bufs[bufs[0]].ctx;
            ops.push(Op::CtxSync { ctx: c });
            for b in m.bufs.iter_mut().filter(|b| b.ctx == c) {
                b.orphaned = false;
            }
        }
    };
    let bufs = m.live_bufs(Some(ctx));
    match rng.below(100) {
        0..=13 if bufs.len() < MAX_BUFS => {
            let owner = if rng.below(4) == 0 { None } else { pick(rng, &m.live_streams(ctx)) };
            let bytes = SIZES[rng.below(SIZES.len() as u64) as usize];
            let id = m.id();
            grow(&mut m.bufs, id, || BufModel { ctx, bytes, owner, live: false, orphaned: false });
            m.bufs[id] = BufModel { ctx, bytes, owner, live: true, orphaned: false };
            ops.push(Op::Alloc { id, ctx, bytes, owner });
        }
        14..=19 => {
            if let Some(id) = pick(rng, &bufs) {
                let op = match rng.below(4) {
                    0 => Op::FreeTwice { id },
                    1 => Op::FreeAsync { id },
                    _ => Op::Free { id },
                };
                // cuMemFree waits for the device's queued work itself; cuMemFreeAsync frees in
                // the order of its stream only, which for an orphaned buffer is the legacy one.
                if matches!(op, Op::FreeAsync { .. }) {
                    fence(m, ops, &[id]);
                }
                m.bufs[id].live = false;
                ops.push(op);
            }
        }
        20..=29 => {
            if let Some(id) = pick(rng, &bufs) {
                fence(m, ops, &[id]);
                let width = [Width::D8, Width::D16, Width::D32][rng.below(3) as usize];
                let w = width.bytes();
                let bytes = m.bufs[id].bytes;
                let offset = rng.below(bytes / 4) * 4 / w * w;
                let count = 1 + rng.below((bytes - offset) / w);
                let value = (rng.next_u64() as u32) & ((1u64 << (8 * w)) - 1) as u32;
                ops.push(Op::Memset { id, width, value, offset, count });
            }
        }
        30..=37 => {
            if let Some(id) = pick(rng, &bufs) {
                fence(m, ops, &[id]);
                let bytes = m.bufs[id].bytes;
                let offset = rng.below(bytes);
                let len = 1 + rng.below(bytes - offset);
                ops.push(Op::Upload { id, offset, len, data_seed: rng.next_u64() });
            }
        }
        38..=43 => {
            if let Some(id) = pick(rng, &bufs) {
                fence(m, ops, &[id]);
                ops.push(if rng.below(2) == 0 { Op::Download { id } } else { Op::ReadBack { id } });
            }
        }
        44..=53 => {
            if let (Some(dst), Some(src)) = (pick(rng, &bufs), pick(rng, &bufs)) {
                fence(m, ops, &[dst, src]);
                let bytes = 1 + rng.below(m.bufs[dst].bytes.min(m.bufs[src].bytes));
                let same = m.bufs[dst].owner == m.bufs[src].owner;
                ops.push(match rng.below(3) {
                    0 => Op::CopySync { dst, src, bytes },
                    _ if same => Op::Copy { dst, src, bytes },
                    _ if dst == src => Op::CopySync { dst, src, bytes },
                    _ => Op::CopyAcross { dst, src, bytes },
                });
            }
        }
        54..=69 => {
            if let Some(dst) = pick(rng, &bufs) {
                let Some(module) = pick(rng, &m.live_modules(ctx)) else {
                    let id = m.id();
                    grow(&mut m.modules, id, || (ctx, false));
                    m.modules[id] = (ctx, true);
                    ops.push(Op::ModuleLoad { id, ctx });
                    return;
                };
                let owner = m.bufs[dst].owner;
                let same_owner: Vec<Buf> = bufs.iter().copied().filter(|&b| m.bufs[b].owner == owner).collect();
                let src = pick(rng, &same_owner).unwrap_or(dst);
                fence(m, ops, &[dst, src]);
                let words = m.bufs[dst].bytes.min(m.bufs[src].bytes) / 4;
                let threads = [32u32, 64, 128][rng.below(3) as usize].min(words as u32);
                let blocks = 1 + rng.below((words / u64::from(threads)).min(2)) as u32;
                let kernel = if rng.below(2) == 0 { Kernel::Fill } else { Kernel::Add };
                ops.push(Op::Launch { module, kernel, dst, src, value: rng.next_u64() as u32, blocks, threads });
            }
        }
        70..=73 => {
            let id = m.id();
            grow(&mut m.streams, id, || (ctx, false));
            m.streams[id] = (ctx, true);
            ops.push(Op::StreamCreate { id, ctx, nonblocking: rng.below(2) == 0 });
        }
        74..=76 => {
            if let Some(id) = pick(rng, &m.live_streams(ctx)) {
                m.streams[id].1 = false;
                for b in m.bufs.iter_mut().filter(|b| b.owner == Some(id)) {
                    b.owner = None;
                    b.orphaned = true;
                }
                ops.push(Op::StreamDestroy { id });
            }
        }
        77..=85 => {
            let events = m.live_events(Some(ctx));
            let stream = if rng.below(3) == 0 { None } else { pick(rng, &m.live_streams(ctx)) };
            match (pick(rng, &events), rng.below(5)) {
                (None, _) | (_, 0) => {
                    let id = m.id();
                    grow(&mut m.events, id, || (ctx, false));
                    m.events[id] = (ctx, true);
                    ops.push(Op::EventCreate { id, ctx });
                }
                (Some(id), 1) => ops.push(Op::EventRecord { id, stream }),
                (Some(event), 2) => ops.push(Op::StreamWaitEvent { stream, event }),
                (Some(id), 3) => ops.push(Op::EventSync { id }),
                (Some(id), _) => {
                    m.events[id].1 = false;
                    ops.push(Op::EventDestroy { id });
                }
            }
        }
        86..=88 => match pick(rng, &m.live_modules(ctx)) {
            Some(id) if rng.below(2) == 0 => {
                m.modules[id].1 = false;
                ops.push(Op::ModuleUnload { id });
            }
            _ => {
                let id = m.id();
                grow(&mut m.modules, id, || (ctx, false));
                m.modules[id] = (ctx, true);
                ops.push(Op::ModuleLoad { id, ctx });
            }
        },
        89..=92 => {
            if m.scratch_live {
                m.kill_ctx(SCRATCH);
                m.scratch_live = false;
                ops.push(Op::CtxDestroy);
            } else {
                m.scratch_live = true;
                ops.push(Op::CtxCreate);
            }
        }
        93..=95 => {
            // Both buffers owned by the origin, so the graph's writes are ordered with the rest.
            let streams = m.live_streams(ctx);
            if let (Some(origin), Some(side)) = (pick(rng, &streams), pick(rng, &streams))
                && origin != side
            {
                let owned: Vec<Buf> = bufs.iter().copied().filter(|&b| m.bufs[b].owner == Some(origin)).collect();
                if let (Some(a), Some(b)) = (pick(rng, &owned), pick(rng, &owned)) {
                    fence(m, ops, &[a, b]);
                    let end = [
                        CaptureEnd::Joined,
                        CaptureEnd::Joined,
                        CaptureEnd::IdleFork,
                        CaptureEnd::Unjoined,
                        CaptureEnd::EndOnSide,
                        CaptureEnd::LegacyTouched,
                    ][rng.below(6) as usize];
                    ops.push(Op::CaptureForkJoin { origin, side, a, b, value: rng.next_u64() as u32, end });
                }
            }
        }
        _ => ops.push(Op::CtxSync { ctx }),
    }
}

/// Makes `v` long enough to index `id` (ids are shared by all kinds of object).
fn grow<T>(v: &mut Vec<T>, id: usize, filler: impl Fn() -> T) {
    while v.len() <= id {
        v.push(filler());
    }
}
