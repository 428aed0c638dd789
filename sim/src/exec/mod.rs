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
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Decodes a kernel and every device function it calls into one program: the
/// functions follow the kernel, each with its own registers and region of local
/// memory, and every call is linked to its callee.
pub fn compile(f: &Function, globals: &HashMap<String, (u64, u64)>, module: &crate::ptx::Module) -> Result<Arc<Program>, String> {
    let syms = || decode::Symbols { globals, module };
    let kd = decode::Decoder::new(&f.entry, syms(), true, 0, 0);
    let shared_static = kd.shared_static;
    let shared = kd.shared_layout().clone();
    let kernel = kd.decode()?;
    let (mut nregs, mut local) = (kernel.nregs, kernel.local_end);
    let mut funcs: Vec<(String, decode::Decoded)> = Vec::new();
    let mut queue: VecDeque<String> = kernel.callees.iter().cloned().collect();
    while let Some(name) = queue.pop_front() {
        if funcs.iter().any(|(n, _)| *n == name) {
            continue;
        }
        let entry = module.functions.iter().find(|e| e.name == name).ok_or_else(|| format!("no device function {name}"))?;
        let base = u16::try_from(nregs).map_err(|_| "too many registers".to_string())?;
        let mut dd = decode::Decoder::new(entry, syms(), false, base, local.next_multiple_of(16));
        dd.inherit_shared(&shared);
        let d = dd.decode().map_err(|e| format!("in device function {name}: {e}"))?;
        nregs += d.nregs;
        local = d.local_end;
        queue.extend(d.callees.iter().cloned());
        funcs.push((name, d));
    }
    if nregs > u16::MAX as usize {
        return Err(format!("{nregs} registers are more than the interpreter addresses"));
    }
    reject_recursion(&kernel.callees, &funcs)?;
    let mut instrs = kernel.instrs;
    let mut starts = Vec::new();
    for (_, d) in &funcs {
        let base = instrs.len() as u32;
        starts.push(base);
        instrs.extend(d.instrs.iter().cloned().map(|mut i| {
            if let ir::Op::Bra { target } = &mut i.op {
                *target += base;
            }
            i
        }));
    }
    for ins in &mut instrs {
        if let ir::Op::Call(call) = &mut ins.op {
            if let ir::Callee::Function(name) = &call.callee {
                let idx = funcs.iter().position(|(n, _)| n == name).ok_or_else(|| format!("unlinked call to {name}"))?;
                let callee = &funcs[idx].1;
                if call.args.len() != callee.param_slots.len() {
                    return Err(format!("{name} takes {} arguments, called with {}", callee.param_slots.len(), call.args.len()));
                }
                call.target_pc = starts[idx];
                call.copies_in =
                    call.args.iter().zip(&callee.param_slots).map(|(&(src, a), &(dst, b))| (src, dst, a.min(b))).collect();
                call.copy_out = match (call.ret, callee.return_slots.first()) {
                    (Some((dst, a)), Some(&(src, b))) => Some((src, dst, a.min(b))),
                    _ => None,
                };
            }
        }
    }
    Ok(Arc::new(Program { instrs, nregs, shared_static, local_bytes: local }))
}

/// Device functions get one register set each, so a recursive call is refused.
fn reject_recursion(kernel_callees: &[String], funcs: &[(String, decode::Decoded)]) -> Result<(), String> {
    fn visit<'a>(name: &'a str, funcs: &'a [(String, decode::Decoded)], path: &mut Vec<&'a str>) -> Result<(), String> {
        if path.contains(&name) {
            return Err(format!("recursive device function {name} is not supported"));
        }
        path.push(name);
        if let Some((_, d)) = funcs.iter().find(|(n, _)| n == name) {
            for c in &d.callees {
                visit(c, funcs, path)?;
            }
        }
        path.pop();
        Ok(())
    }
    for c in kernel_callees {
        visit(c, funcs, &mut Vec::new())?;
    }
    Ok(())
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
        Err(Fault::Assert { message, thread, block }) => {
            fault(CUresult::CUDA_ERROR_ASSERT, format!("{message} ({})", at(thread, block, l.kernel)))
        }
        Err(Fault::Trap { thread, block }) => {
            fault(CUresult::CUDA_ERROR_LAUNCH_FAILED, format!("trap by {}", at(thread, block, l.kernel)))
        }
    }
}
