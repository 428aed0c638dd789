//! Kernel launches: validation of the configuration against the device's limits and
//! the function's attributes, and execution on a stream.
//!
//! Execution of kernel bodies: this milestone runs the control-flow-free subset
//! (`ret`, `exit`, `trap`). A body that uses anything else is refused at launch with
//! `CUDA_ERROR_NOT_SUPPORTED`, naming the instruction, never skipped silently.

use crate::context::Context;
use crate::device::{MAX_BLOCKS_PER_SM, MAX_OPTIN_SHARED, MAX_STATIC_SHARED};
use crate::error::{CuResult, fail};
use crate::module::Function;
use crate::ptx::{BodyItem, Statement};
use crate::stream::{Stream, Work};
use gpupool_shim::cuda::CUresult;
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
    if let Some(req) = f.entry.reqntid {
        if req != cfg.block {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || format!("block {:?} differs from .reqntid {req:?}", cfg.block));
        }
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
    executable(f)
}

/// The first statement this milestone's executor cannot run, as an error.
fn executable(f: &Function) -> CuResult<()> {
    for item in &f.entry.body.items {
        if let BodyItem::Instr(s) = item {
            if s.guard.is_some() || !matches!(s.opcode.as_str(), "ret" | "exit" | "trap") {
                return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || {
                    format!(
                        "kernel {} uses PTX instruction `{}`, which the simulator does not execute yet",
                        f.name.to_string_lossy(),
                        describe(s)
                    )
                });
            }
        }
    }
    Ok(())
}

fn describe(s: &Statement) -> String {
    match &s.guard {
        Some(g) => format!("@{g} {}", s.opcode),
        None => s.opcode.clone(),
    }
}

/// Runs one kernel to completion on the calling (worker) thread.
fn execute(f: &Function, _cfg: &LaunchConfig, _params: &[u8]) -> CuResult<()> {
    for item in &f.entry.body.items {
        if let BodyItem::Instr(s) = item {
            match s.opcode.as_str() {
                "ret" | "exit" => return Ok(()),
                "trap" => {
                    return fail(CUresult::CUDA_ERROR_LAUNCH_FAILED, || {
                        format!("kernel {} executed trap", f.name.to_string_lossy())
                    });
                }
                other => {
                    return fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || format!("instruction {other}"));
                }
            }
        }
    }
    Ok(())
}

/// Validates and queues a launch; `params` is the packed parameter buffer.
pub fn launch(
    ctx: &Arc<Context>,
    stream: &Arc<Stream>,
    f: Arc<Function>,
    cfg: LaunchConfig,
    params: Vec<u8>,
) -> CuResult<()> {
    validate(ctx, &f, &cfg)?;
    if params.len() as u64 != f.entry.param_bytes {
        return fail(CUresult::CUDA_ERROR_INVALID_VALUE, || {
            format!("parameter buffer is {} bytes; {} takes {}", params.len(), f.name.to_string_lossy(), f.entry.param_bytes)
        });
    }
    stream.enqueue(ctx, Work::Kernel, Vec::new(), Box::new(move || execute(&f, &cfg, &params)));
    Ok(())
}
