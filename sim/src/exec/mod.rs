//! Kernel execution: PTX decoded once per function into [`ir`], then interpreted by
//! [`run`] over the launch's grid on the stream's worker thread, in real time.
//!
//! Every global access is checked against the launching context's allocations (and
//! page-locked host memory): an access anywhere else stops the kernel with
//! `CUDA_ERROR_ILLEGAL_ADDRESS`, logged with the kernel, thread, block and address,
//! and the stream machinery makes it sticky on that context only.

mod decode;
pub mod ir;
mod ops;
pub mod run;

use crate::error::{CuResult, fail};
use crate::module::Function;
use gpupool_shim::cuda::CUresult;
pub use run::{Fault, Launch, MemoryMap, Program};
use std::sync::Arc;

/// Decodes a function's body for execution.
pub fn compile(f: &Function, globals: &std::collections::HashMap<String, (u64, u64)>, module: &crate::ptx::Module) -> Result<Arc<Program>, String> {
    let d = decode::Decoder::new(&f.entry, decode::Symbols { globals, module });
    let instrs = d.decode()?;
    Ok(Arc::new(Program { instrs, nregs: d.num_regs(), shared_static: d.shared_static, local_bytes: d.local_bytes }))
}

/// Runs a launch; maps a fault to the error CUDA reports for it.
pub fn execute(l: &Launch) -> CuResult<()> {
    match run::run(l) {
        Ok(()) => Ok(()),
        Err(Fault::Illegal { space, addr, len, write, thread, block }) => fail(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS, || {
            format!(
                "invalid {:?} {} of size {len} at {addr:#x} by thread ({},{},{}) in block ({},{},{}) of kernel {}",
                space,
                if write { "write" } else { "read" },
                thread[0], thread[1], thread[2], block[0], block[1], block[2], l.kernel
            )
        }),
        Err(Fault::Misaligned { addr, len, thread, block }) => fail(CUresult::CUDA_ERROR_MISALIGNED_ADDRESS, || {
            format!(
                "misaligned access of size {len} at {addr:#x} by thread ({},{},{}) in block ({},{},{}) of kernel {}",
                thread[0], thread[1], thread[2], block[0], block[1], block[2], l.kernel
            )
        }),
        Err(Fault::Trap { thread, block }) => fail(CUresult::CUDA_ERROR_LAUNCH_FAILED, || {
            format!(
                "trap by thread ({},{},{}) in block ({},{},{}) of kernel {}",
                thread[0], thread[1], thread[2], block[0], block[1], block[2], l.kernel
            )
        }),
        Err(Fault::Unsupported(what)) => fail(CUresult::CUDA_ERROR_NOT_SUPPORTED, || what),
    }
}
