//! Kernel launches: validation of the configuration against the device's limits and
//! the function's attributes, and execution on a stream.
//!
//! Kernel bodies are decoded at their first launch; one that uses an instruction
//! the executor does not implement is refused then with `CUDA_ERROR_NOT_SUPPORTED`,
//! naming the instruction, never skipped silently.

use crate::context::Context;
use crate::device::{MAX_BLOCKS_PER_SM, MAX_OPTIN_SHARED, MAX_STATIC_SHARED};
use crate::driver::Driver;
use crate::error::{CuResult, fail};
use crate::exec::{Launch, MemoryMap, Program};
use crate::module::Function;
use crate::stream::{Job, Stream, Work};
use gpupool_shim::cuda::{CUlimit, CUresult};
use std::sync::Arc;

#[derive(Clone, Copy, Debug)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dynamic_shared: u32,
    pub cooperative: bool,
}

const MAX_GRID: [u32; 3] = [i32::MAX as u32, 65535, 65535];
const MAX_BLOCK: [u32; 3] = [1024, 1024, 64];

/// Checks a launch the way the driver does before queuing it.
pub fn validate(ctx: &Context, f: &Function, cfg: &LaunchConfig) -> CuResult<()> {
    for (i, axis) in ["x", "y", "z"].iter().enumerate() {
        if cfg.grid[i] == 0 || cfg.grid[i] > MAX_GRID[i] {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("grid dimension {axis} = {} (allowed 1..={})", cfg.grid[i], MAX_GRID[i])
            });
        }
        if cfg.block[i] == 0 || cfg.block[i] > MAX_BLOCK[i] {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
                format!("block dimension {axis} = {} (allowed 1..={})", cfg.block[i], MAX_BLOCK[i])
            });
        }
    }
    let threads: u64 = cfg.block.iter().map(|&d| d as u64).product();
    let max_threads = f.entry.max_threads() as u64;
    if threads > max_threads {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("{threads} threads per block; {} allows at most {max_threads}", f.name.to_string_lossy())
        });
    }
    if let Some(req) = f.entry.reqntid
        && req != cfg.block
    {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("block {:?} differs from .reqntid {req:?}", cfg.block)
        });
    }
    let settings = *f.settings.lock().unwrap_or_else(|e| e.into_inner());
    let dyn_limit = MAX_STATIC_SHARED.max(settings.max_dynamic_shared) as u64;
    let total_shared = f.static_shared + cfg.dynamic_shared as u64;
    if cfg.dynamic_shared as u64 > dyn_limit || total_shared > MAX_OPTIN_SHARED as u64 {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!(
                "{} bytes of dynamic shared memory (static {}); the limit is {dyn_limit} without cuFuncSetAttribute",
                cfg.dynamic_shared, f.static_shared
            )
        });
    }
    if cfg.cooperative {
        let blocks: u64 = cfg.grid.iter().map(|&d| d as u64).product();
        let per_sm = (2048 / threads.max(1)).clamp(1, MAX_BLOCKS_PER_SM as u64);
        let resident = per_sm * ctx.device.cfg.sms as u64;
        if blocks > resident {
            return fail(CUresult::CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, || {
                format!("{blocks} blocks cannot all be resident (at most {resident})")
            });
        }
    }
    Ok(())
}

/// The function's decoded body, decoding it on first use.
fn program(driver: &Driver, f: &Function) -> CuResult<Arc<Program>> {
    let built = f.program.get_or_init(|| {
        let Some(m) = driver.modules.get(f.module_handle) else {
            return Err("the function's module was unloaded".into());
        };
        crate::exec::compile(f, &m.globals, &m.ptx)
    });
    match built {
        Ok(p) => Ok(p.clone()),
        Err(e) => fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || format!("kernel {}: {e}", f.name.to_string_lossy())),
    }
}

/// Validates and queues a launch of function `handle`; `params` is the packed parameter buffer.
/// A capture records it as a kernel node with its launch, as the driver does.
pub fn launch(
    ctx: &Arc<Context>,
    stream: &Arc<Stream>,
    handle: u64,
    f: Arc<Function>,
    cfg: LaunchConfig,
    params: Vec<u8>,
) -> CuResult<()> {
    let driver = crate::driver::initialized()?;
    if driver.config.discard_kernels && !stream.is_capturing() {
        // The backend that does nothing (config.rs): every check a launch gets, then nothing.
        check(driver, ctx, &f, &cfg, &params)?;
        return Ok(());
    }
    let job = kernel_job(ctx, f.clone(), cfg, params.clone())?;
    if let Ok(prog) = program(driver, &f)
        && prog.prints
    {
        ctx.printf_launched.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    if !stream.is_capturing() {
        // What earlier kernels printed is written at the start of a launch.
        ctx.printf.flush();
    }
    let node = move |j| {
        let args = crate::graph::KernelArgs::new(&f, params);
        crate::graph::Op::Kernel(crate::graph::KernelLaunch { handle, f, cfg, args }, j)
    };
    stream.enqueue_node(ctx, Work::Kernel, Vec::new(), job, node);
    Ok(())
}

/// A launch's checks: its configuration, its decoded body, its parameter buffer's size.
fn check(driver: &Driver, ctx: &Context, f: &Function, cfg: &LaunchConfig, params: &[u8]) -> CuResult<Arc<Program>> {
    validate(ctx, f, cfg)?;
    let prog = program(driver, f)?;
    if params.len() as u64 != f.entry.param_bytes {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!(
                "parameter buffer is {} bytes; {} takes {}",
                params.len(),
                f.name.to_string_lossy(),
                f.entry.param_bytes
            )
        });
    }
    Ok(prog)
}

/// Validates a launch and makes the job that runs it (a stream runs it, or a graph's kernel node
/// at each launch of the graph).
pub fn kernel_job(ctx: &Arc<Context>, f: Arc<Function>, cfg: LaunchConfig, params: Vec<u8>) -> CuResult<Job> {
    let driver = crate::driver::initialized()?;
    let prog = check(driver, ctx, &f, &cfg, &params)?;
    let ctx2 = ctx.clone();
    // The buffer's size is fixed when the kernel is launched (read only for a kernel that prints:
    // the limits sit behind a lock, and this is every launch's path).
    let printf_capacity =
        if prog.prints { ctx.limit(CUlimit::CU_LIMIT_PRINTF_FIFO_SIZE).unwrap_or(1 << 20) } else { 0 };
    Ok(std::sync::Arc::new(move || {
        // The kernel sees the memory that exists when it runs, as on a GPU.
        let me = ctx2.handle();
        let memory = MemoryMap::new(ctx2.memory.live_allocations(), driver.pinned.visible_to(me))
            .with_objects(
                driver.textures.select(|t| t.ctx_handle == me),
                driver.surfaces.select(|s| s.ctx_handle == me),
            )
            .in_context(me);
        let name = f.name.to_string_lossy();
        let _grid = ctx2.preemption.grid();
        crate::exec::execute(&Launch {
            program: &prog,
            kernel: &name,
            grid: cfg.grid,
            block: cfg.block,
            dynamic_shared: cfg.dynamic_shared,
            params: &params,
            memory: &memory,
            sms: ctx2.device.cfg.sms,
            clock_mhz: ctx2.device.cfg.clock_mhz,
            preemption: Some(&ctx2.preemption),
            printf: Some((&ctx2.printf, printf_capacity)),
        })
    }))
}
