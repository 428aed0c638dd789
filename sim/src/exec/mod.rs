//! Kernel execution: PTX decoded once per function into [`ir`], then interpreted by
//! [`run`] over the launch's grid on the stream's worker thread, in real time.
//!
//! Every global access is checked against the launching context's allocations (and
//! page-locked host memory): an access anywhere else stops the kernel with
//! `CUDA_ERROR_ILLEGAL_ADDRESS`, reported with the kernel, thread, block and
//! address, and the stream machinery makes it sticky on that context only.

mod decode;
pub mod ir;
mod ops;
pub mod run;

use crate::error::CuResult;
use crate::module::Function;
use gpupool_shim::cuda::CUresult;
pub use run::{Fault, Launch, MemoryMap, Program};
use std::collections::HashMap;
use std::sync::Arc;

/// Decodes a function's body for execution.
pub fn compile(f: &Function, globals: &HashMap<String, (u64, u64)>, module: &crate::ptx::Module) -> Result<Arc<Program>, String> {
    let d = decode::Decoder::new(&f.entry, decode::Symbols { globals, module });
    let instrs = d.decode()?;
    Ok(Arc::new(Program { instrs, nregs: d.num_regs(), shared_static: d.shared_static, local_bytes: d.local_bytes }))
}

/// A kernel fault: always reported on stderr, like compute-sanitizer's report, since
/// it poisons the context and that one line is what finds the bug.
fn fault(code: CUresult, what: String) -> CuResult<()> {
    eprintln!("gpupool-sim: {} ({}): {what}", crate::api::errors::name(code), code.0);
    Err(code)
}

fn at(thread: [u32; 3], block: [u32; 3], kernel: &str) -> String {
    format!(
        "thread ({},{},{}) in block ({},{},{}) of kernel {kernel}",
        thread[0], thread[1], thread[2], block[0], block[1], block[2]
    )
}

/// Runs a launch; maps a fault to the error CUDA reports for it.
pub fn execute(l: &Launch) -> CuResult<()> {
    match run::run(l) {
        Ok(()) => Ok(()),
        Err(Fault::Illegal { space, addr, len, write, thread, block }) => fault(
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            format!(
                "invalid {space:?} {} of size {len} at {addr:#x} by {}",
                if write { "write" } else { "read" },
                at(thread, block, l.kernel)
            ),
        ),
        Err(Fault::Misaligned { addr, len, thread, block }) => fault(
            CUresult::CUDA_ERROR_MISALIGNED_ADDRESS,
            format!("misaligned access of size {len} at {addr:#x} by {}", at(thread, block, l.kernel)),
        ),
        Err(Fault::Trap { thread, block }) => {
            fault(CUresult::CUDA_ERROR_LAUNCH_FAILED, format!("trap by {}", at(thread, block, l.kernel)))
        }
    }
}
