//! A demo tenant's program: `gpupool __demo-tenant ...`, run by `gpupool demo` under
//! `LD_PRELOAD=libgpupool.so`. It is an ordinary CUDA driver-API client: it loads `libcuda.so.1` (which
//! the interposer answers) and runs a timed PTX kernel that spins on `%globaltimer` and adds its own
//! body time to a device counter, so the parent can measure each tenant's share from outside.
//!
//! Output, one line each on stdout: `start <monotonic ns>`, `busy <monotonic ns> <kernels> <body ns>
//! <monotonic ns>` (every 100 ms and at the end; the counter is read between the two clock readings,
//! which a busy host can set far apart), `latency <p50 us> <p99 us> <n>` (`--period`),
//! `oom <bytes> <code>` (`--oom`).

use crate::backend::Cuda;
use crate::call;
use anyhow::{Context as _, Result, bail};
use gpupool_shim::cuda::{CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUmodule, CUstream};
use std::os::raw::c_void;
use std::time::{Duration, Instant};

const PTX: &str = "\
.version 7.0
.target sm_50
.address_size 64
.visible .entry spin(.param .u64 ns, .param .u64 total)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<9>;
    ld.param.u64 %rd1, [ns];
    ld.param.u64 %rd2, [total];
    cvta.to.global.u64 %rd2, %rd2;
    mov.u64 %rd3, %globaltimer;
    add.u64 %rd4, %rd3, %rd1;
$L_spin:
    mov.u64 %rd5, %globaltimer;
    setp.lt.u64 %p1, %rd5, %rd4;
    @%p1 bra $L_spin;
    mov.u64 %rd6, %globaltimer;
    sub.u64 %rd7, %rd6, %rd3;
    atom.global.add.u64 %rd8, [%rd2], %rd7;
    ret;
}
\0";

/// What one demo tenant does.
#[derive(Debug, Clone, clap::Args)]
pub struct Workload {
    /// Kernel length in microseconds.
    #[arg(long, default_value_t = 1000)]
    pub kernel_us: u64,
    /// Run for this many seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Latency-sensitive: one kernel, wait for it, then idle until the next period (milliseconds).
    #[arg(long)]
    pub period_ms: Option<u64>,
    /// First allocate 64 MiB blocks until the pool says CUDA_ERROR_OUT_OF_MEMORY (and keep them).
    #[arg(long)]
    pub oom: bool,
    /// A working set of this many MiB, allocated at the start and kept.
    #[arg(long, default_value_t = 0)]
    pub hold_mib: u64,
}

pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn run(w: &Workload) -> Result<()> {
    let cuda = Cuda::load(std::path::Path::new("libcuda.so.1")).context("loading libcuda.so.1")?;
    call!(cuda, cuInit(0))?;
    let mut dev: CUdevice = 0;
    call!(cuda, cuDeviceGet(&mut dev, 0))?;
    let mut ctx: CUcontext = std::ptr::null_mut();
    call!(cuda, cuDevicePrimaryCtxRetain(&mut ctx, dev))?;
    call!(cuda, cuCtxSetCurrent(ctx))?;
    let mut module: CUmodule = std::ptr::null_mut();
    call!(cuda, cuModuleLoadData(&mut module, PTX.as_ptr().cast()))?;
    let mut func: CUfunction = std::ptr::null_mut();
    call!(cuda, cuModuleGetFunction(&mut func, module, c"spin".as_ptr()))?;
    let mut counter: CUdeviceptr = 0;
    call!(cuda, cuMemAlloc_v2(&mut counter, 8))?;
    call!(cuda, cuMemsetD8_v2(counter, 0, 8))?;
    // Held until the end, so the memory shows against the quota while the demo runs.
    let mut held = if w.oom { oom(&cuda)? } else { Vec::new() };
    if w.hold_mib > 0 {
        let mut p: CUdeviceptr = 0;
        call!(cuda, cuMemAlloc_v2(&mut p, (w.hold_mib << 20) as usize))?;
        held.push(p);
    }
    let mut stream: CUstream = std::ptr::null_mut();
    // CU_STREAM_NON_BLOCKING: the counter reads (legacy stream) do not wait for the kernels.
    call!(cuda, cuStreamCreateWithPriority(&mut stream, 1, 0))?;
    let mut ns = w.kernel_us * 1000;
    let mut params: [*mut c_void; 2] = [(&mut ns as *mut u64).cast(), (&mut counter as *mut u64).cast()];
    let mut launch =
        || call!(cuda, cuLaunchKernel(func, 1, 1, 1, 1, 1, 1, 0, stream, params.as_mut_ptr(), std::ptr::null_mut()));
    let read_busy = || -> Result<u64> {
        let mut v = 0u64;
        call!(cuda, cuMemcpyDtoH_v2((&mut v as *mut u64).cast(), counter, 8))?;
        Ok(v)
    };
    let report_busy = |kernels: u64| -> Result<()> {
        let before = monotonic_ns();
        let body = read_busy()?;
        println!("busy {before} {kernels} {body} {}", monotonic_ns());
        Ok(())
    };
    let start = monotonic_ns();
    println!("start {start}");
    let end = Instant::now() + Duration::from_secs_f64(w.duration);
    let mut next_report = Instant::now();
    let mut kernels = 0u64;
    let mut latencies = Vec::new();
    let mut events = [std::ptr::null_mut::<gpupool_shim::cuda::CUevent_st>(); 2];
    for e in &mut events {
        call!(cuda, cuEventCreate(e as *mut CUevent, 0))?;
    }
    let mut batch = 0usize;
    while Instant::now() < end {
        if let Some(period) = w.period_ms {
            let t0 = Instant::now();
            launch()?;
            call!(cuda, cuStreamSynchronize(stream))?;
            latencies.push(t0.elapsed().as_secs_f64() * 1e6);
            kernels += 1;
            std::thread::sleep(Duration::from_millis(period).saturating_sub(t0.elapsed()));
        } else {
            // Two batches of 4 in flight, so the stream never drains.
            for _ in 0..4 {
                launch()?;
            }
            call!(cuda, cuEventRecord(events[batch % 2], stream))?;
            if batch > 0 {
                call!(cuda, cuEventSynchronize(events[(batch - 1) % 2]))?;
                kernels += 4;
            }
            batch += 1;
        }
        if Instant::now() >= next_report {
            report_busy(kernels)?;
            next_report += Duration::from_millis(100);
        }
    }
    call!(cuda, cuStreamSynchronize(stream))?;
    if w.period_ms.is_none() && batch > 0 {
        kernels += 4;
    }
    report_busy(kernels)?;
    if !latencies.is_empty() {
        latencies.sort_by(f64::total_cmp);
        let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize];
        println!("latency {:.1} {:.1} {}", at(0.5), at(0.99), latencies.len());
    }
    for p in held {
        call!(cuda, cuMemFree_v2(p))?;
    }
    Ok(())
}

/// Allocates until the pool refuses, and reports the refusal (the program carries on: that is the
/// clean out-of-memory a caching allocator handles).
fn oom(cuda: &Cuda) -> Result<Vec<CUdeviceptr>> {
    const BLOCK: usize = 64 << 20;
    let mut held = Vec::new();
    let code = loop {
        let mut p: CUdeviceptr = 0;
        match call!(cuda, cuMemAlloc_v2(&mut p, BLOCK)) {
            Ok(()) => held.push(p),
            Err(crate::backend::CudaError::Call { name, code, .. }) => break format!("{name}({code})"),
            Err(e) => return Err(e.into()),
        }
        if held.len() > 4096 {
            bail!("no quota: allocated {} blocks", held.len());
        }
    };
    println!("oom {} {}", held.len() * BLOCK, code.replace(' ', "_"));
    Ok(held)
}
