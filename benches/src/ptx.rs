//! The `ptx` figures: how fast the simulator's PTX interpreter runs kernels, next to plain
//! Rust loops doing the same work in the same run.
//!
//! Part 1 launches hand-written kernels (benches/kernels/interp.ptx) whose dynamic
//! instruction count per thread is known exactly (prologue + n * body + epilogue, counted
//! from the PTX; `tests::counts_match_the_ptx` recounts them), times each launch with
//! `cuEventRecord`/`cuEventElapsedTime` and with the host clock, and reports thread-
//! instructions per second. The interpreter runs a launch on one thread (the stream's
//! worker), so that rate is per core. Part 2 is a 1M-element f32 vector add end to end,
//! with the PTX NVRTC 12.9 emits for it (benches/kernels/vector_add.ptx). Part 3 prices
//! single instruction classes: a loop repeating one instruction, minus the loop alone.

use std::ffi::c_void;
use std::fmt::Write;
use std::hint::black_box;
use std::ptr::null_mut;
use std::time::Instant;

use gpupool_e2e::cu::{CUevent, CUfunction, CUstream};
use gpupool_e2e::{Driver, call};

use crate::report::{cpus, grid, json_str, json_summary};
use crate::sim::ok;
use crate::stats::{Summary, summarize};

/// The stated target: at least this many thread-instructions per second per core.
pub const TARGET_M_PER_S: f64 = 20.0;

const INTERP_PTX: &str = concat!(include_str!("../kernels/interp.ptx"), "\0");
const VECTOR_ADD_PTX: &str = concat!(include_str!("../kernels/vector_add.ptx"), "\0");

const BLOCK: u32 = 256;
const WARMUP: usize = 2;
const SAMPLES: usize = 11;

/// Vector add: 1M f32, 256 threads per block, every thread in bounds.
const VA_N: usize = 1 << 20;
const VA_INSTR_PER_THREAD: u64 = 22;
const VA_WARMUP: usize = 1;
const VA_SAMPLES: usize = 7;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Which {
    AluInt,
    FmaF32,
    MemGlobal,
    MemShared,
    Divergent,
}

/// One microbenchmark kernel and its per-thread instruction counts.
struct Kernel {
    which: Which,
    name: &'static str,
    mix: &'static str,
    prologue: u64,
    /// Instructions each thread executes per loop iteration.
    body: u64,
    epilogue: u64,
    blocks: u32,
    iters: u32,
}

impl Kernel {
    fn threads(&self) -> u64 {
        self.blocks as u64 * BLOCK as u64
    }
    fn per_thread(&self) -> u64 {
        self.prologue + self.body * self.iters as u64 + self.epilogue
    }
    fn total(&self) -> u64 {
        self.per_thread() * self.threads()
    }
}

const KERNELS: &[Kernel] = &[
    Kernel {
        which: Which::AluInt,
        name: "alu_int",
        mix: "add.s32, xor.b32, mad.lo.s32, setp, @p bra",
        prologue: 8,
        body: 5,
        epilogue: 5,
        blocks: 4,
        iters: 1000,
    },
    Kernel {
        which: Which::FmaF32,
        name: "fma_f32",
        mix: "4x fma.rn.f32, add.s32, setp, @p bra",
        prologue: 11,
        body: 7,
        epilogue: 5,
        blocks: 4,
        iters: 700,
    },
    Kernel {
        which: Which::MemGlobal,
        name: "mem_global",
        mix: "ld.global.u32, add.s32, st.global.u32, add.s64, add.s32, setp, @p bra",
        prologue: 13,
        body: 7,
        epilogue: 1,
        blocks: 4,
        iters: 700,
    },
    Kernel {
        which: Which::MemShared,
        name: "mem_shared",
        mix: "st.shared, bar.sync, ld.shared, bar.sync, 2x add.s32, setp, @p bra",
        prologue: 15,
        body: 8,
        epilogue: 5,
        blocks: 4,
        iters: 600,
    },
    Kernel {
        which: Which::Divergent,
        name: "divergent",
        mix: "@p bra (odd lanes taken); {mad, bra.uni} | {xor, mad}; add, setp, @p bra",
        prologue: 10,
        body: 6,
        epilogue: 5,
        blocks: 4,
        iters: 800,
    },
];

/// One kernel's figures.
pub struct KernelRow {
    pub name: String,
    pub mix: String,
    pub threads: u64,
    pub iters: u32,
    pub per_thread: u64,
    pub total: u64,
    /// Kernel time from events, ms.
    pub event_ms: Summary,
    /// Host wall clock from before the first cuEventRecord to after cuEventSynchronize, ms.
    pub host_ms: Summary,
    /// Process CPU time (user + system, all threads) over the host-clock window, ms.
    pub cpu_ms: Summary,
    /// The same work as a Rust loop, ms.
    pub native_ms: Summary,
}

impl KernelRow {
    /// Million thread-instructions per second at the median event time.
    pub fn m_per_s(&self) -> f64 {
        self.total as f64 / (self.event_ms.median * 1e-3) / 1e6
    }
    /// The same at the p99 (slow end) event time.
    pub fn m_per_s_p99(&self) -> f64 {
        self.total as f64 / (self.event_ms.p99 * 1e-3) / 1e6
    }
    /// Million thread-instructions per CPU-second (the process's, over the launch window):
    /// what one core does when it is not shared with other work.
    pub fn m_per_cpu_s(&self) -> f64 {
        self.total as f64 / (self.cpu_ms.median * 1e-3) / 1e6
    }
    pub fn cpu_per_wall(&self) -> f64 {
        self.cpu_ms.median / self.host_ms.median
    }
    pub fn pass(&self) -> bool {
        self.m_per_s() >= TARGET_M_PER_S
    }
    /// How many times the Rust loop's time interpretation takes.
    pub fn slowdown(&self) -> f64 {
        self.event_ms.median / self.native_ms.median
    }
}

pub struct VectorAdd {
    /// HtoD a, HtoD b, launch, DtoH c (synchronous), ms.
    pub total_ms: Summary,
    /// Kernel only, from events, ms.
    pub kernel_ms: Summary,
    /// Kernel only, host clock from cuEventRecord(start) to cuEventSynchronize(stop), ms.
    pub kernel_host_ms: Summary,
    /// `for i in 0..n { c[i] = a[i] + b[i] }`, ms.
    pub native_ms: Summary,
}

pub struct PtxRun {
    pub sim_library: String,
    pub cpus: usize,
    pub kernels: Vec<KernelRow>,
    pub vector_add: VectorAdd,
    pub classes: Classes,
}

/// User + system CPU time of the whole process, seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: `rusage` is a C struct of integers, for which all-zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

struct Timed {
    event_ms: f64,
    host_ms: f64,
    cpu_ms: f64,
}

/// Records `ev.0`, launches `f` (`grid` blocks of BLOCK threads) and records `ev.1`, all on
/// the legacy default stream, then waits for `ev.1`. `params` must match the kernel's
/// parameters (the launch reads them as the kernel declares them); `what` names the launch
/// in errors.
fn launch_between_events(
    d: &Driver,
    ev: (CUevent, CUevent),
    f: CUfunction,
    grid: u32,
    params: &mut [*mut c_void],
    what: &str,
) -> Result<(), String> {
    let stream: CUstream = null_mut();
    ok(call!(d.cuEventRecord(ev.0, stream)), "cuEventRecord")?;
    ok(call!(d.cuLaunchKernel(f, grid, 1, 1, BLOCK, 1, 1, 0, stream, params.as_mut_ptr(), null_mut(),)), what)?;
    ok(call!(d.cuEventRecord(ev.1, stream)), "cuEventRecord")?;
    ok(call!(d.cuEventSynchronize(ev.1)), "cuEventSynchronize")
}

/// One launch between two events (see [`launch_between_events`]), timed three ways.
fn timed_launch(
    d: &Driver,
    ev: (CUevent, CUevent),
    f: CUfunction,
    grid: u32,
    params: &mut [*mut c_void],
) -> Result<Timed, String> {
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    launch_between_events(d, ev, f, grid, params, "cuLaunchKernel")?;
    let host = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let mut ms = 0f32;
    ok(call!(d.cuEventElapsedTime(&mut ms, ev.0, ev.1)), "cuEventElapsedTime")?;
    Ok(Timed { event_ms: ms as f64, host_ms: host * 1e3, cpu_ms: cpu * 1e3 })
}

// ---------------------------------------------------------------------------------------
// The Rust loops: the same computation as each kernel, one thread after another.
// ---------------------------------------------------------------------------------------

#[inline(never)]
fn native_alu_int(out: &mut [u32], n: u32) {
    for (i, o) in out.iter_mut().enumerate() {
        let mut acc = i as u32;
        for k in 1..=n {
            acc ^= k;
            acc = acc.wrapping_mul(1664525).wrapping_add(1013904223);
        }
        *o = acc;
    }
}

#[inline(never)]
fn native_fma_f32(out: &mut [f32], n: u32) {
    for (i, o) in out.iter_mut().enumerate() {
        let (mut a, mut b, mut c, mut d) = (i as f32, 1.0f32, 0.0f32, 0.0f32);
        for _ in 0..n {
            a = a.mul_add(0.5, 1.0);
            b = b.mul_add(0.5, a);
            c = c.mul_add(0.75, b);
            d = d.mul_add(0.25, c);
        }
        *o = d;
    }
}

/// Row after row (the order the interpreter touches memory in, a block's threads at a
/// time), not thread after thread: that order would stride by `threads` words and measure
/// cache and TLB misses instead.
#[inline(never)]
fn native_mem_global(buf: &mut [u32], threads: usize, n: u32) {
    for (k, row) in buf.chunks_mut(threads).take(n as usize).enumerate() {
        for x in row {
            *x = x.wrapping_add(k as u32);
        }
    }
}

#[inline(never)]
fn native_mem_shared(out: &mut [u32], block: usize, n: u32) {
    let mut s = vec![0u32; block];
    for (b, acc) in out.chunks_mut(block).enumerate() {
        for (t, a) in acc.iter_mut().enumerate() {
            *a = (b * block + t) as u32;
        }
        for _ in 0..n {
            s.copy_from_slice(acc);
            for (t, a) in acc.iter_mut().enumerate() {
                let nb = if t + 1 == block { 0 } else { t + 1 };
                *a = a.wrapping_add(s[nb]);
            }
        }
    }
}

#[inline(never)]
fn native_divergent(out: &mut [u32], n: u32) {
    for (i, o) in out.iter_mut().enumerate() {
        let mut acc = i as u32;
        let odd = i & 1 == 1;
        for k in 0..n {
            acc = if odd { (acc ^ k).wrapping_mul(3).wrapping_add(1) } else { acc.wrapping_mul(5).wrapping_add(k) };
        }
        *o = acc;
    }
}

fn native(k: &Kernel, host: &mut [u32]) {
    let n = black_box(k.iters);
    let threads = k.threads() as usize;
    match k.which {
        Which::AluInt => native_alu_int(black_box(host), n),
        Which::FmaF32 => {
            let mut f = vec![0f32; host.len()];
            native_fma_f32(black_box(&mut f), n);
            for (h, x) in host.iter_mut().zip(&f) {
                *h = x.to_bits();
            }
        }
        Which::MemGlobal => native_mem_global(black_box(host), threads, n),
        Which::MemShared => native_mem_shared(black_box(host), BLOCK as usize, n),
        Which::Divergent => native_divergent(black_box(host), n),
    }
}

/// Runs one kernel: samples launch and Rust loop alternately, then checks the device
/// result against the loop's.
fn bench_kernel(
    d: &Driver,
    module: gpupool_e2e::cu::CUmodule,
    ev: (CUevent, CUevent),
    k: &Kernel,
) -> Result<KernelRow, String> {
    let mut f = null_mut();
    let cname = std::ffi::CString::new(k.name).unwrap();
    ok(call!(d.cuModuleGetFunction(&mut f, module, cname.as_ptr())), "cuModuleGetFunction")?;
    let threads = k.threads() as usize;
    let words = if k.which == Which::MemGlobal { threads * k.iters as usize } else { threads };
    let mut buf = 0;
    ok(call!(d.cuMemAlloc_v2(&mut buf, words * 4)), "cuMemAlloc_v2")?;
    ok(call!(d.cuMemsetD32_v2(buf, 0, words)), "cuMemsetD32_v2")?;
    let mut host = vec![0u32; words];
    let (mut p0, mut p1) = (buf, k.iters);
    let mut params: [*mut c_void; 2] = [(&raw mut p0).cast(), (&raw mut p1).cast()];
    let (mut ev_ms, mut host_ms, mut cpu, mut nat) = (vec![], vec![], vec![], vec![]);
    for i in 0..WARMUP + SAMPLES {
        let t = timed_launch(d, ev, f, k.blocks, &mut params)?;
        let t0 = Instant::now();
        native(k, &mut host);
        let native_ms = t0.elapsed().as_secs_f64() * 1e3;
        if i >= WARMUP {
            ev_ms.push(t.event_ms);
            host_ms.push(t.host_ms);
            cpu.push(t.cpu_ms);
            nat.push(native_ms);
        }
    }
    let mut got = vec![0u32; words];
    ok(call!(d.cuMemcpyDtoH_v2(got.as_mut_ptr().cast(), buf, words * 4)), "cuMemcpyDtoH_v2")?;
    ok(call!(d.cuMemFree_v2(buf)), "cuMemFree_v2")?;
    // mem_global accumulates over every launch, and the Rust loop ran as many times.
    if let Some(i) = (0..words).find(|&i| got[i] != host[i]) {
        let bad = (0..words).filter(|&i| got[i] != host[i]).count();
        return Err(format!(
            "{}: {bad} of {words} results differ from the Rust loop's; first at [{i}]: got {:#x}, want {:#x}",
            k.name, got[i], host[i]
        ));
    }
    Ok(KernelRow {
        name: k.name.into(),
        mix: k.mix.into(),
        threads: k.threads(),
        iters: k.iters,
        per_thread: k.per_thread(),
        total: k.total(),
        event_ms: summarize(ev_ms),
        host_ms: summarize(host_ms),
        cpu_ms: summarize(cpu),
        native_ms: summarize(nat),
    })
}

#[inline(never)]
fn native_vector_add(a: &[f32], b: &[f32], c: &mut [f32]) {
    for i in 0..c.len() {
        c[i] = a[i] + b[i];
    }
}

fn bench_vector_add(d: &Driver, ev: (CUevent, CUevent)) -> Result<VectorAdd, String> {
    let n = VA_N;
    let bytes = n * 4;
    let mut module = null_mut();
    ok(call!(d.cuModuleLoadData(&mut module, VECTOR_ADD_PTX.as_ptr().cast())), "cuModuleLoadData(vector_add.ptx)")?;
    let mut f = null_mut();
    ok(call!(d.cuModuleGetFunction(&mut f, module, c"vector_add".as_ptr())), "cuModuleGetFunction(vector_add)")?;
    // Inputs with full mantissas and mixed signs and exponents.
    let val = |i: usize, salt: u64| {
        let h = (i as u64 ^ salt).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        ((h >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * (1 << ((h >> 20) % 16)) as f32
    };
    let a: Vec<f32> = (0..n).map(|i| val(i, 1)).collect();
    let b: Vec<f32> = (0..n).map(|i| val(i, 2)).collect();
    let mut c = vec![0f32; n];
    let mut want = vec![0f32; n];
    let (mut da, mut db, mut dc) = (0, 0, 0);
    ok(call!(d.cuMemAlloc_v2(&mut da, bytes)), "cuMemAlloc_v2")?;
    ok(call!(d.cuMemAlloc_v2(&mut db, bytes)), "cuMemAlloc_v2")?;
    ok(call!(d.cuMemAlloc_v2(&mut dc, bytes)), "cuMemAlloc_v2")?;
    let (mut pa, mut pb, mut pc, mut pn) = (da, db, dc, n as i32);
    let mut params: [*mut c_void; 4] =
        [(&raw mut pa).cast(), (&raw mut pb).cast(), (&raw mut pc).cast(), (&raw mut pn).cast()];
    let grid = n.div_ceil(BLOCK as usize) as u32;
    let (mut total, mut kernel, mut kernel_host, mut nat) = (vec![], vec![], vec![], vec![]);
    for i in 0..VA_WARMUP + VA_SAMPLES {
        // Clear the output (untimed), so every sample's check sees this sample's results.
        ok(call!(d.cuMemsetD32_v2(dc, 0, n)), "cuMemsetD32_v2")?;
        ok(call!(d.cuCtxSynchronize()), "cuCtxSynchronize")?;
        c.fill(0.0);
        let t0 = Instant::now();
        ok(call!(d.cuMemcpyHtoD_v2(da, a.as_ptr().cast(), bytes)), "cuMemcpyHtoD_v2")?;
        ok(call!(d.cuMemcpyHtoD_v2(db, b.as_ptr().cast(), bytes)), "cuMemcpyHtoD_v2")?;
        let k0 = Instant::now();
        launch_between_events(d, ev, f, grid, &mut params, "cuLaunchKernel(vector_add)")?;
        let tk = k0.elapsed();
        ok(call!(d.cuMemcpyDtoH_v2(c.as_mut_ptr().cast(), dc, bytes)), "cuMemcpyDtoH_v2")?;
        let tt = t0.elapsed();
        let mut ms = 0f32;
        ok(call!(d.cuEventElapsedTime(&mut ms, ev.0, ev.1)), "cuEventElapsedTime")?;
        let t1 = Instant::now();
        native_vector_add(black_box(&a), black_box(&b), black_box(&mut want));
        let native_ms = t1.elapsed().as_secs_f64() * 1e3;
        if let Some(j) = (0..n).find(|&j| c[j].to_bits() != want[j].to_bits()) {
            let bad = (0..n).filter(|&j| c[j].to_bits() != want[j].to_bits()).count();
            return Err(format!(
                "vector_add: {bad} of {n} results wrong; first c[{j}] = {} (a {} + b {} = {})",
                c[j], a[j], b[j], want[j]
            ));
        }
        if i >= VA_WARMUP {
            total.push(tt.as_secs_f64() * 1e3);
            kernel.push(ms as f64);
            kernel_host.push(tk.as_secs_f64() * 1e3);
            nat.push(native_ms);
        }
    }
    // More samples of the (short) Rust loop, so its median is a steady one.
    for _ in 0..50 {
        let t1 = Instant::now();
        native_vector_add(black_box(&a), black_box(&b), black_box(&mut want));
        nat.push(t1.elapsed().as_secs_f64() * 1e3);
    }
    ok(call!(d.cuMemFree_v2(da)), "cuMemFree_v2")?;
    ok(call!(d.cuMemFree_v2(db)), "cuMemFree_v2")?;
    ok(call!(d.cuMemFree_v2(dc)), "cuMemFree_v2")?;
    ok(call!(d.cuModuleUnload(module)), "cuModuleUnload")?;
    Ok(VectorAdd {
        total_ms: summarize(total),
        kernel_ms: summarize(kernel),
        kernel_host_ms: summarize(kernel_host),
        native_ms: summarize(nat),
    })
}

// ---------------------------------------------------------------------------------------
// Part 3: cost of one instruction class, from a kernel whose loop repeats it.
// ---------------------------------------------------------------------------------------

/// (label, the instruction repeated CLASS_COPIES times in the loop body).
const CLASSES: &[(&str, &str)] = &[
    ("add.s32", "add.s32 %r5, %r5, %r2;"),
    ("xor.b32", "xor.b32 %r5, %r5, %r4;"),
    ("mad.lo.s32", "mad.lo.s32 %r5, %r5, %r4, %r2;"),
    ("setp.lt.u32", "setp.lt.u32 %p3, %r5, %r2;"),
    ("selp.b32", "selp.b32 %r5, %r5, %r4, %p2;"),
    ("mov.u32 reg", "mov.u32 %r5, %r4;"),
    ("mov.u32 %tid.x", "mov.u32 %r5, %tid.x;"),
    ("add.s64", "add.s64 %rd5, %rd5, %rd3;"),
    ("mul.wide.u32", "mul.wide.u32 %rd5, %r5, %r4;"),
    ("add.f32", "add.f32 %f1, %f1, %f2;"),
    ("fma.rn.f32", "fma.rn.f32 %f1, %f1, %f2, %f2;"),
    ("cvt.rn.f32.u32", "cvt.rn.f32.u32 %f1, %r5;"),
    ("@p add.s32 (p true in half)", "@%p2 add.s32 %r5, %r5, %r2;"),
    ("ld.param.u32", "ld.param.u32 %r5, [k_param_1];"),
    ("ld.global.u32", "ld.global.u32 %r5, [%rd4];"),
    ("st.global.u32", "st.global.u32 [%rd4], %r5;"),
    ("ld.shared.u32", "ld.shared.u32 %r5, [%r7];"),
    ("st.shared.u32", "st.shared.u32 [%r7], %r5;"),
    ("bar.sync", "bar.sync 0;"),
];
const CLASS_COPIES: usize = 16;
const CLASS_ITERS: u32 = 100;
const CLASS_BLOCKS: u32 = 4;
const CLASS_SAMPLES: usize = 9;

/// A kernel `k(u64 buf, u32 n)` whose loop runs `body` (CLASS_COPIES copies of one
/// instruction, or nothing) then `add.s32, setp, @p bra`, n times. Each thread owns
/// buf[tid] and s[tid]; %p2 is true in odd threads.
fn class_kernel(body: &str) -> String {
    let mut lines = String::new();
    let copies = if body.is_empty() { 0 } else { CLASS_COPIES };
    for _ in 0..copies {
        let _ = writeln!(lines, "\t{body}");
    }
    format!(
        ".version 8.0\n.target sm_90\n.address_size 64\n\
         .visible .entry k(.param .u64 k_param_0, .param .u32 k_param_1)\n{{\n\
         \t.reg .pred %p<4>;\n\t.reg .b32 %r<9>;\n\t.reg .f32 %f<3>;\n\t.reg .b64 %rd<6>;\n\
         \t.shared .align 4 .b8 sbuf[1024];\n\
         \tld.param.u64 %rd1, [k_param_0];\n\tld.param.u32 %r1, [k_param_1];\n\
         \tmov.u32 %r4, %tid.x;\n\tcvta.to.global.u64 %rd2, %rd1;\n\tmul.wide.u32 %rd3, %r4, 4;\n\
         \tadd.s64 %rd4, %rd2, %rd3;\n\tmov.u32 %r2, 0;\n\tmov.u32 %r5, %r4;\n\tmov.u64 %rd5, 0;\n\
         \tcvt.rn.f32.u32 %f1, %r4;\n\tmov.f32 %f2, 0f3F000000;\n\
         \tmov.u32 %r6, sbuf;\n\tshl.b32 %r7, %r4, 2;\n\tadd.s32 %r7, %r6, %r7;\n\
         \tand.b32 %r8, %r4, 1;\n\tsetp.ne.s32 %p2, %r8, 0;\n\
         $L_loop:\n{lines}\tadd.s32 %r2, %r2, 1;\n\tsetp.lt.u32 %p1, %r2, %r1;\n\t@%p1 bra $L_loop;\n\
         \tst.global.u32 [%rd4], %r5;\n\tret;\n}}\n\0"
    )
}

pub struct ClassRow {
    pub label: String,
    /// Median kernel time (events), ms.
    pub kernel_ms: Summary,
    /// Median over pairs of (kernel - loop-only kernel) / (thread-instructions of the
    /// class), ns.
    pub ns: f64,
}

pub struct Classes {
    /// The loop alone (add.s32, setp, @p bra per iteration), ms.
    pub base_ms: Summary,
    pub rows: Vec<ClassRow>,
}

impl Classes {
    fn reference_ns(&self) -> f64 {
        self.rows[0].ns
    }
}

/// Loads `class_kernel(body)`; returns its module and function.
fn class_function(d: &Driver, body: &str) -> Result<(gpupool_e2e::cu::CUmodule, CUfunction), String> {
    let src = class_kernel(body);
    let mut module = null_mut();
    ok(
        call!(d.cuModuleLoadData(&mut module, src.as_ptr().cast())),
        &format!("cuModuleLoadData(class kernel `{body}`)"),
    )?;
    let mut f = null_mut();
    ok(call!(d.cuModuleGetFunction(&mut f, module, c"k".as_ptr())), "cuModuleGetFunction(k)")?;
    Ok((module, f))
}

/// Each class kernel is sampled alternately with the loop-only kernel (loop, class, loop,
/// class, ...) and its cost is the median of the per-pair differences, so both sides of
/// a difference see the same machine conditions.
fn bench_classes(d: &Driver, ev: (CUevent, CUevent)) -> Result<Classes, String> {
    let threads = (CLASS_BLOCKS * BLOCK) as usize;
    let mut buf = 0;
    ok(call!(d.cuMemAlloc_v2(&mut buf, threads * 4)), "cuMemAlloc_v2")?;
    let (mut p0, mut p1) = (buf, CLASS_ITERS);
    let mut params: [*mut c_void; 2] = [(&raw mut p0).cast(), (&raw mut p1).cast()];
    let (base_module, base) = class_function(d, "")?;
    let per = (threads * CLASS_ITERS as usize * CLASS_COPIES) as f64;
    let mut base_ms = Vec::new();
    let mut rows = Vec::new();
    for (label, body) in CLASSES {
        let (module, f) = class_function(d, body)?;
        let (mut ms, mut ns) = (Vec::new(), Vec::new());
        for i in 0..1 + CLASS_SAMPLES {
            let b = timed_launch(d, ev, base, CLASS_BLOCKS, &mut params)?;
            let t = timed_launch(d, ev, f, CLASS_BLOCKS, &mut params)?;
            if i >= 1 {
                base_ms.push(b.event_ms);
                ms.push(t.event_ms);
                ns.push((t.event_ms - b.event_ms) * 1e6 / per);
            }
        }
        ok(call!(d.cuModuleUnload(module)), "cuModuleUnload")?;
        rows.push(ClassRow { label: label.to_string(), kernel_ms: summarize(ms), ns: summarize(ns).median });
    }
    ok(call!(d.cuModuleUnload(base_module)), "cuModuleUnload")?;
    ok(call!(d.cuMemFree_v2(buf)), "cuMemFree_v2")?;
    Ok(Classes { base_ms: summarize(base_ms), rows })
}

pub fn run() -> Result<PtxRun, String> {
    let d = crate::sim::load()?;
    let mut kernels = Vec::new();
    let (vector_add, classes);
    ok(call!(d.cuInit(0)), "cuInit")?;
    let mut ctx = null_mut();
    ok(call!(d.cuCtxCreate_v2(&mut ctx, 0, 0)), "cuCtxCreate_v2")?;
    let (mut e0, mut e1) = (null_mut(), null_mut());
    ok(call!(d.cuEventCreate(&mut e0, 0)), "cuEventCreate")?;
    ok(call!(d.cuEventCreate(&mut e1, 0)), "cuEventCreate")?;
    let mut module = null_mut();
    ok(call!(d.cuModuleLoadData(&mut module, INTERP_PTX.as_ptr().cast())), "cuModuleLoadData(interp.ptx)")?;
    for k in KERNELS {
        kernels.push(bench_kernel(&d, module, (e0, e1), k)?);
    }
    ok(call!(d.cuModuleUnload(module)), "cuModuleUnload")?;
    vector_add = bench_vector_add(&d, (e0, e1))?;
    classes = bench_classes(&d, (e0, e1))?;
    ok(call!(d.cuEventDestroy_v2(e0)), "cuEventDestroy_v2")?;
    ok(call!(d.cuEventDestroy_v2(e1)), "cuEventDestroy_v2")?;
    ok(call!(d.cuCtxDestroy_v2(ctx)), "cuCtxDestroy_v2")?;
    Ok(PtxRun { sim_library: d.path.display().to_string(), cpus: cpus(), kernels, vector_add, classes })
}

// ---------------------------------------------------------------------------------------
// Output.
// ---------------------------------------------------------------------------------------

fn num(x: f64) -> String {
    if x >= 1000.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else if x >= 0.1 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

pub fn table(run: &PtxRun) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "gpupool-bench ptx: {} ({} CPUs)", run.sim_library, run.cpus);
    let _ =
        writeln!(out, "medians (p99) over {SAMPLES} launches after {WARMUP} warm-up; one launch runs on one core\n");
    let _ = writeln!(
        out,
        "1. Interpreter throughput: thread-instructions / kernel time (events), {BLOCK} threads per block"
    );
    let head = [
        "kernel",
        "threads x iters",
        "instr/thread",
        "M thr-instr",
        "event ms",
        "host ms",
        "cpu/wall",
        "M thr-instr/s",
        "(at p99)",
        ">= 20",
        "M/CPU-s",
        "Rust loop ms",
        "interp/Rust",
    ];
    let rows: Vec<Vec<String>> = run
        .kernels
        .iter()
        .map(|k| {
            vec![
                k.name.clone(),
                format!("{} x {}", k.threads, k.iters),
                k.per_thread.to_string(),
                format!("{:.2}", k.total as f64 / 1e6),
                format!("{} ({})", num(k.event_ms.median), num(k.event_ms.p99)),
                num(k.host_ms.median),
                format!("{:.2}", k.cpu_per_wall()),
                num(k.m_per_s()),
                num(k.m_per_s_p99()),
                if k.pass() { "PASS" } else { "BELOW" }.into(),
                num(k.m_per_cpu_s()),
                format!("{} ({})", num(k.native_ms.median), num(k.native_ms.p99)),
                format!("{}x", num(k.slowdown())),
            ]
        })
        .collect();
    out.push_str(&grid(&head, &rows, &[0, 1, 9]));
    for k in &run.kernels {
        // The host window adds one launch and one hand-off: well under a millisecond.
        let gap = k.host_ms.median - k.event_ms.median;
        if gap.abs() > 0.5 + 0.05 * k.event_ms.median {
            let _ = writeln!(
                out,
                "CHECK {}: host clock {} ms vs events {} ms",
                k.name,
                num(k.host_ms.median),
                num(k.event_ms.median)
            );
        }
    }
    let _ = writeln!(out, "\nmixes (per loop iteration):");
    for k in &run.kernels {
        let _ = writeln!(out, "  {:<10} {}", k.name, k.mix);
    }

    let v = &run.vector_add;
    let instr = (VA_N as u64 * VA_INSTR_PER_THREAD) as f64;
    let _ = writeln!(
        out,
        "\n2. vector_add (NVRTC 12.9 PTX), {VA_N} f32, {BLOCK} threads per block, all results checked; \
         medians (p99) over {VA_SAMPLES} runs after {VA_WARMUP} warm-up"
    );
    let head = ["figure", "sim ms", "Rust loop ms", "sim/Rust"];
    let row = |name: &str, s: &Summary| {
        vec![
            name.to_string(),
            format!("{} ({})", num(s.median), num(s.p99)),
            format!("{} ({})", num(v.native_ms.median), num(v.native_ms.p99)),
            format!("{}x", num(s.median / v.native_ms.median)),
        ]
    };
    let rows = vec![
        row("end to end: 2x HtoD 4 MiB, launch, DtoH 4 MiB", &v.total_ms),
        row("kernel only (events)", &v.kernel_ms),
        row("kernel only (host clock, record..sync)", &v.kernel_host_ms),
    ];
    out.push_str(&grid(&head, &rows, &[0]));
    let _ = writeln!(
        out,
        "kernel: {VA_INSTR_PER_THREAD} instr/thread, {:.1} M thread-instructions, {} M thr-instr/s ({})",
        instr / 1e6,
        num(instr / (v.kernel_ms.median * 1e-3) / 1e6),
        if instr / (v.kernel_ms.median * 1e-3) / 1e6 >= TARGET_M_PER_S { "PASS" } else { "BELOW" }
    );
    let c = &run.classes;
    let _ = writeln!(
        out,
        "\n3. Cost per instruction class: a loop of {CLASS_COPIES} copies + (add.s32, setp, @p bra), \
         {} threads x {CLASS_ITERS} iterations, minus the loop alone ({} ms) sampled alternately; medians of {CLASS_SAMPLES} pairs",
        CLASS_BLOCKS * BLOCK,
        num(c.base_ms.median)
    );
    let head = ["instruction", "kernel ms", "ns/thread-instr", "M/s", "x add.s32"];
    let rows: Vec<Vec<String>> = c
        .rows
        .iter()
        .map(|r| {
            // Below 0.1 ns the difference is within the noise of the two medians.
            let measurable = r.ns >= 0.1;
            vec![
                r.label.clone(),
                format!("{} ({})", num(r.kernel_ms.median), num(r.kernel_ms.p99)),
                if measurable { num(r.ns) } else { "< 0.1".into() },
                if measurable { num(1e3 / r.ns) } else { "-".into() },
                if measurable { format!("{}x", num(r.ns / c.reference_ns())) } else { "~0".into() },
            ]
        })
        .collect();
    out.push_str(&grid(&head, &rows, &[0]));
    let _ = writeln!(
        out,
        "\nRust loop = the same computation as plain Rust on this thread; interp/Rust = how many times \
         its time the interpreter takes"
    );
    out
}

pub fn json(run: &PtxRun) -> String {
    let kernels: Vec<String> = run
        .kernels
        .iter()
        .map(|k| {
            format!(
                "    {{\"name\": {}, \"mix\": {}, \"threads\": {}, \"iterations\": {}, \"instructions_per_thread\": {}, \
                 \"thread_instructions\": {}, \"event_ms\": {}, \"host_ms\": {}, \"cpu_ms\": {}, \
                 \"m_thread_instr_per_s\": {}, \"m_thread_instr_per_cpu_s\": {}, \"target_m_per_s\": {TARGET_M_PER_S}, \"pass\": {}, \
                 \"baseline\": {{\"name\": \"Rust loop, same computation\", \"ms\": {}}}, \"ratio\": {}, \
                 \"ratio_meaning\": \"interpreter median time / Rust loop median time (how many times slower)\"}}",
                json_str(&k.name),
                json_str(&k.mix),
                k.threads,
                k.iters,
                k.per_thread,
                k.total,
                json_summary(&k.event_ms),
                json_summary(&k.host_ms),
                json_summary(&k.cpu_ms),
                k.m_per_s(),
                k.m_per_cpu_s(),
                k.pass(),
                json_summary(&k.native_ms),
                k.slowdown(),
            )
        })
        .collect();
    let v = &run.vector_add;
    format!(
        "{{\n  \"bench\": \"ptx\",\n  \"sim_library\": {},\n  \"cpus\": {},\n  \"kernels\": [\n{}\n  ],\n  \
         \"vector_add\": {{\"elements\": {VA_N}, \"total_ms\": {}, \"kernel_ms\": {}, \"kernel_host_ms\": {}, \
         \"baseline\": {{\"name\": \"Rust loop c[i] = a[i] + b[i]\", \"ms\": {}}}, \
         \"ratio_total\": {}, \"ratio_kernel\": {}}},\n  \"classes\": {{\"copies\": {CLASS_COPIES}, \
         \"threads\": {}, \"iterations\": {CLASS_ITERS}, \"loop_only_ms\": {}, \"rows\": [\n{}\n  ]}}\n}}\n",
        json_str(&run.sim_library),
        run.cpus,
        kernels.join(",\n"),
        json_summary(&v.total_ms),
        json_summary(&v.kernel_ms),
        json_summary(&v.kernel_host_ms),
        json_summary(&v.native_ms),
        v.total_ms.median / v.native_ms.median,
        v.kernel_ms.median / v.native_ms.median,
        CLASS_BLOCKS * BLOCK,
        json_summary(&run.classes.base_ms),
        run.classes
            .rows
            .iter()
            .map(|r| format!(
                "    {{\"instruction\": {}, \"kernel_ms\": {}, \"ns_per_thread_instr\": {}, \"ratio_to_add_s32\": {}}}",
                json_str(&r.label),
                json_summary(&r.kernel_ms),
                r.ns,
                r.ns / run.classes.reference_ns()
            ))
            .collect::<Vec<_>>()
            .join(",\n"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (prologue, static loop body, epilogue) instruction counts of `entry` in `ptx`:
    /// instructions before `$L_loop:`, from there to `$L_done:`, and after.
    fn count(ptx: &str, entry: &str) -> (u64, u64, u64) {
        let start = ptx.find(&format!(".entry {entry}(")).unwrap_or_else(|| panic!("no entry {entry}"));
        let body = &ptx[start..];
        let body = &body[body.find('{').unwrap() + 1..];
        let body = &body[..body.find('}').unwrap()];
        let mut counts = [0u64; 3];
        let mut part = 0;
        for line in body.lines().map(str::trim) {
            match line {
                "$L_loop:" => part = 1,
                "$L_done:" => part = 2,
                l if l.is_empty() || l.starts_with("//") || l.starts_with('.') || l.ends_with(':') => {}
                l => {
                    assert!(l.ends_with(';'), "{entry}: {l}");
                    counts[part] += 1;
                }
            }
        }
        (counts[0], counts[1], counts[2])
    }

    #[test]
    fn counts_match_the_ptx() {
        for k in KERNELS {
            let (pro, body, epi) = count(INTERP_PTX, k.name);
            // The divergent kernel's threads each skip one of its two 2-instruction paths.
            let body = if k.which == Which::Divergent { body - 2 } else { body };
            assert_eq!((k.prologue, k.body, k.epilogue), (pro, body, epi), "{}", k.name);
        }
    }

    #[test]
    fn vector_add_count_matches_the_ptx() {
        // Straight-line apart from the bounds check: an in-bounds thread runs every instruction.
        let (all, _, _) = count(VECTOR_ADD_PTX, "vector_add");
        assert_eq!(all, VA_INSTR_PER_THREAD);
    }
}
