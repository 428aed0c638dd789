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
pub fn compile(
    f: &Function,
    globals: &HashMap<String, (u64, u64)>,
    module: &crate::ptx::Module,
) -> Result<Arc<Program>, String> {
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
        let entry =
            module.functions.iter().find(|e| e.name == name).ok_or_else(|| format!("no device function {name}"))?;
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
        if let ir::Op::Call(call) = &mut ins.op
            && let ir::Callee::Function(name) = &call.callee
        {
            let idx = funcs.iter().position(|(n, _)| n == name).ok_or_else(|| format!("unlinked call to {name}"))?;
            let callee = &funcs[idx].1;
            if call.args.len() != callee.param_slots.len() {
                return Err(format!(
                    "{name} takes {} arguments, called with {}",
                    callee.param_slots.len(),
                    call.args.len()
                ));
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
    let prints = instrs.iter().any(|i| matches!(&i.op, ir::Op::Call(c) if c.callee == ir::Callee::Printf));
    Ok(Arc::new(Program { instrs, nregs, shared_static, local_bytes: local, prints }))
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
    eprintln!("gpupool-sim: {} ({}): {what}", gpupool_abi::errors::name(code), code.0);
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
        Err(Fault::BadConditional { handle, thread, block }) => fault(
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            format!(
                "cudaGraphSetConditional: {handle:#x} is not a conditional handle, used by {}",
                at(thread, block, l.kernel)
            ),
        ),
        // A forged object handle reads whatever descriptor the hardware finds there; the
        // simulator stops the kernel as an illegal access instead of inventing texels.
        Err(Fault::BadObject { handle, surface, thread, block }) => fault(
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            format!(
                "{handle:#x} is not a live {} object of the context, used by {}",
                if surface { "surface" } else { "texture" },
                at(thread, block, l.kernel)
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `kernel` from `src` over `grid` x `block` with one u64 parameter pointing
    /// at a buffer of `words` u32s; returns the buffer or the fault.
    fn run_ptx(src: &str, kernel: &str, grid: [u32; 3], block: [u32; 3], words: usize) -> Result<Vec<u32>, Fault> {
        let module = crate::ptx::parse(src).expect("test PTX parses");
        let entry = module.entries.iter().find(|e| e.name == kernel).expect("kernel exists").clone();
        let f = Function {
            ctx_handle: 0,
            module_handle: 0,
            name: std::ffi::CString::new(kernel).unwrap(),
            static_shared: entry.static_shared(&module),
            local_bytes: entry.local_bytes(),
            registers: entry.registers(),
            entry,
            ptx_version: module.version,
            target_sm: module.target_sm,
            settings: Default::default(),
            program: Default::default(),
        };
        let program = compile(&f, &HashMap::new(), &module).expect("decodes");
        let mut buf = vec![0u32; words];
        let base = 0x1000_0000u64;
        let memory = MemoryMap::from_regions(vec![(base, base + 4 * words as u64, buf.as_mut_ptr() as usize)]);
        let params = base.to_le_bytes();
        run::run(&Launch {
            program: &program,
            kernel,
            grid,
            block,
            dynamic_shared: 0,
            params: &params,
            memory: &memory,
            sms: 132,
            clock_mhz: 1980,
            preemption: None,
            printf: None,
        })?;
        Ok(buf)
    }

    const HEAD: &str = ".version 8.0\n.target sm_90\n.address_size 64\n";

    #[test]
    fn divergent_loops_reconverge_and_each_thread_keeps_its_own_state() {
        // out[t] = sum of 0..t, with a trip count that differs per thread.
        let src = format!(
            "{HEAD}.visible .entry k(.param .u64 p)
{{
 .reg .pred %p<2>; .reg .b32 %r<6>; .reg .b64 %rd<4>;
 ld.param.u64 %rd1, [p];
 mov.u32 %r1, %tid.x;
 mov.u32 %r2, 0;
 mov.u32 %r3, 0;
$L_loop:
 setp.ge.u32 %p1, %r3, %r1;
 @%p1 bra $L_done;
 add.s32 %r2, %r2, %r3;
 add.s32 %r3, %r3, 1;
 bra.uni $L_loop;
$L_done:
 mul.wide.u32 %rd2, %r1, 4;
 add.s64 %rd3, %rd1, %rd2;
 st.global.u32 [%rd3], %r2;
 ret;
}}"
        );
        let out = run_ptx(&src, "k", [1, 1, 1], [40, 1, 1], 40).unwrap();
        for (t, v) in out.iter().enumerate() {
            assert_eq!(*v as usize, (0..t).sum::<usize>(), "thread {t}");
        }
    }

    #[test]
    fn shuffles_follow_the_isa_including_out_of_range_lanes() {
        // shfl.down by 1 with clamp 31: lane 31 keeps its own value, others get lane+1's.
        let src = format!(
            "{HEAD}.visible .entry k(.param .u64 p)
{{
 .reg .pred %p<2>; .reg .b32 %r<6>; .reg .b64 %rd<4>;
 ld.param.u64 %rd1, [p];
 mov.u32 %r1, %tid.x;
 mul.lo.s32 %r2, %r1, 10;
 shfl.sync.down.b32 %r3|%p1, %r2, 1, 31, -1;
 selp.u32 %r4, 1000, 0, %p1;
 add.s32 %r5, %r3, %r4;
 mul.wide.u32 %rd2, %r1, 4;
 add.s64 %rd3, %rd1, %rd2;
 st.global.u32 [%rd3], %r5;
 ret;
}}"
        );
        let out = run_ptx(&src, "k", [1, 1, 1], [64, 1, 1], 64).unwrap();
        for (t, v) in out.iter().enumerate() {
            let lane = t % 32;
            let want = if lane == 31 { t as u32 * 10 } else { (t as u32 + 1) * 10 + 1000 };
            assert_eq!(*v, want, "thread {t}");
        }
    }

    #[test]
    fn inline_asm_blocks_declare_registers_without_percent_and_again() {
        // CUB's warp reduction, as nvcc emits its inline assembly: each `{ }` block
        // declares `r0` and `p` (no `%`) anew; the second block must not clobber %r2.
        let src = format!(
            "{HEAD}.visible .entry k(.param .u64 p)
{{
 .reg .b32 %r<6>; .reg .b64 %rd<4>; .reg .f32 %f<4>;
 ld.param.u64 %rd1, [p];
 mov.u32 %r1, %tid.x;
 mov.u32 %r2, 7;
 cvt.rn.f32.u32 %f1, %r1;
 {{ .reg .f32 r0; .reg .pred p;
   shfl.sync.down.b32 r0|p, %f1, 1, 31, -1;
   @p add.f32 r0, r0, %f1;
   mov.f32 %f2, r0; }}
 {{ .reg .f32 r0; .reg .pred p;
   shfl.sync.down.b32 r0|p, %f2, 2, 31, -1;
   @p add.f32 r0, r0, %f2;
   mov.f32 %f3, r0; }}
 cvt.rzi.u32.f32 %r3, %f3;
 mad.lo.s32 %r4, %r2, 1000, %r3;
 mul.wide.u32 %rd2, %r1, 4;
 add.s64 %rd3, %rd1, %rd2;
 st.global.u32 [%rd3], %r4;
 ret;
}}"
        );
        let out = run_ptx(&src, "k", [1, 1, 1], [32, 1, 1], 32).unwrap();
        let step1 = |l: u32| if l < 31 { 2 * l + 1 } else { l };
        for (t, v) in out.iter().enumerate() {
            let l = t as u32;
            let want = if l < 30 { step1(l) + step1(l + 2) } else { step1(l) };
            assert_eq!(*v, 7000 + want, "lane {t}");
        }
    }

    #[test]
    fn barriers_order_shared_memory_and_atomics_count_exactly() {
        // Each thread writes its id to shared memory; after the barrier it reads its
        // neighbour's; thread 0 also counts arrivals with a shared atomic.
        let src = format!(
            "{HEAD}.visible .entry k(.param .u64 p)
{{
 .shared .align 4 .b8 s[512];
 .shared .align 4 .u32 count;
 .reg .b32 %r<8>; .reg .b64 %rd<4>; .reg .pred %p<2>;
 ld.param.u64 %rd1, [p];
 mov.u32 %r1, %tid.x;
 shl.b32 %r2, %r1, 2;
 mov.u32 %r3, s;
 add.s32 %r4, %r3, %r2;
 st.shared.u32 [%r4], %r1;
 atom.shared.add.u32 %r7, [count], 1;
 bar.sync 0;
 add.s32 %r5, %r1, 1;
 and.b32 %r5, %r5, 127;
 shl.b32 %r5, %r5, 2;
 add.s32 %r5, %r3, %r5;
 ld.shared.u32 %r6, [%r5];
 ld.shared.u32 %r7, [count];
 mad.lo.s32 %r6, %r7, 1000, %r6;
 mul.wide.u32 %rd2, %r1, 4;
 add.s64 %rd3, %rd1, %rd2;
 st.global.u32 [%rd3], %r6;
 ret;
}}"
        );
        let out = run_ptx(&src, "k", [1, 1, 1], [128, 1, 1], 128).unwrap();
        for (t, v) in out.iter().enumerate() {
            assert_eq!(*v, 128 * 1000 + ((t as u32 + 1) % 128), "thread {t}");
        }
    }

    #[test]
    fn device_function_calls_pass_arguments_and_results() {
        let src = format!(
            "{HEAD}.func (.param .b32 ret) twice_plus(.param .b32 a, .param .b32 b)
{{
 .reg .b32 %r<4>;
 ld.param.u32 %r1, [a];
 ld.param.u32 %r2, [b];
 mad.lo.s32 %r3, %r1, 2, %r2;
 st.param.b32 [ret+0], %r3;
 ret;
}}
.visible .entry k(.param .u64 p)
{{
 .reg .b32 %r<4>; .reg .b64 %rd<4>;
 ld.param.u64 %rd1, [p];
 mov.u32 %r1, %tid.x;
 {{
 .param .b32 param0;
 st.param.b32 [param0+0], %r1;
 .param .b32 param1;
 st.param.b32 [param1+0], 7;
 .param .b32 retval0;
 call.uni (retval0), twice_plus, (param0, param1);
 ld.param.b32 %r2, [retval0+0];
 }}
 mul.wide.u32 %rd2, %r1, 4;
 add.s64 %rd3, %rd1, %rd2;
 st.global.u32 [%rd3], %r2;
 ret;
}}"
        );
        let out = run_ptx(&src, "k", [1, 1, 1], [16, 1, 1], 16).unwrap();
        for (t, v) in out.iter().enumerate() {
            assert_eq!(*v, 2 * t as u32 + 7);
        }
    }

    #[test]
    fn an_access_outside_every_allocation_is_a_fault_naming_thread_and_block() {
        let src = format!(
            "{HEAD}.visible .entry k(.param .u64 p)
{{
 .reg .b32 %r<2>; .reg .b64 %rd<4>;
 ld.param.u64 %rd1, [p];
 mov.u32 %r1, %ctaid.x;
 mul.wide.u32 %rd2, %r1, 4096;
 add.s64 %rd3, %rd1, %rd2;
 st.global.u32 [%rd3], %r1;
 ret;
}}"
        );
        match run_ptx(&src, "k", [3, 1, 1], [1, 1, 1], 16) {
            Err(Fault::Illegal { block, write, len, .. }) => {
                assert_eq!((block, write, len), ([1, 0, 0], true, 4));
            }
            other => panic!("expected an illegal-address fault, got {other:?}"),
        }
    }

    #[test]
    fn unsupported_instructions_are_named_when_decoding() {
        let src = format!(
            "{HEAD}.visible .entry k(.param .u64 p)\n{{\n .reg .b32 %r<2>;\n tex.1d.v4.f32.s32 {{%r1, %r1, %r1, %r1}}, [t, {{%r1}}];\n ret;\n}}"
        );
        let module = crate::ptx::parse(&src).unwrap();
        let entry = module.entries[0].clone();
        let f = Function {
            ctx_handle: 0,
            module_handle: 0,
            name: std::ffi::CString::new("k").unwrap(),
            static_shared: 0,
            local_bytes: 0,
            registers: 1,
            entry,
            ptx_version: module.version,
            target_sm: module.target_sm,
            settings: Default::default(),
            program: Default::default(),
        };
        let err = compile(&f, &HashMap::new(), &module).err().expect("tex is not executed");
        assert!(err.contains("tex"), "{err}");
    }
}
