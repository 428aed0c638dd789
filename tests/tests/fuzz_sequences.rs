//! The fuzzer's sequences are well-defined under CUDA's stream rules, so a result that differs
//! between the pool and the simulator is a finding and never a race of the sequence itself
//! (`gpupool_e2e::fuzz::{ops, exec}`), checked on the simulator directly.

use std::collections::{HashMap, HashSet};

use gpupool_e2e::fuzz::exec::{CallResult, Executor, digest};
use gpupool_e2e::fuzz::ops::{Buf, CtxSlot, HOME, Kernel, Op, SCRATCH, Sequence, generate};
use gpupool_e2e::{Driver, sim_libdir};

/// Words of the buffer, and the threads per block that cover it in `WORDS / THREADS` blocks.
const WORDS: u32 = 16384;
const THREADS: u32 = 128;
/// `addv` launches queued after the fill: each result depends on the one before, so a read
/// that overtakes any of them sees other bytes.
const ADDS: u32 = 16;

/// Regression, fuzzer finding (CI seed 0x5eed_f022, round 208, sequence 0x7f05baff86d81171):
/// a buffer whose NON_BLOCKING owner stream was destroyed with a kernel still queued was read
/// back by the executor's epilogue after only `cuStreamSynchronize` of the legacy stream it
/// fell back to. `cuStreamDestroy` returns at once and the stream's work still runs, and a
/// NON_BLOCKING stream "should perform no implicit synchronization with stream 0", so the read
/// raced the kernel: the simulator run directly, on a loaded machine, read the buffer's zeros
/// where the pool read the kernel's result. The epilogue now synchronizes the context first.
#[test]
fn epilogue_reads_a_buffer_of_a_destroyed_nonblocking_stream_after_its_work() {
    let (stream, buf, module) = (0, 1, 2);
    let (fill, add) = (0x5eed_0001u32, 0x0000_0a1du32);
    let mut ops = vec![
        Op::StreamCreate { id: stream, ctx: HOME, nonblocking: true },
        Op::Alloc { id: buf, ctx: HOME, bytes: u64::from(WORDS) * 4, owner: Some(stream) },
        Op::ModuleLoad { id: module, ctx: HOME },
    ];
    let launch = |kernel, value| Op::Launch {
        module,
        kernel,
        dst: buf,
        src: buf,
        value,
        blocks: WORDS / THREADS,
        threads: THREADS,
    };
    ops.push(launch(Kernel::Fill, fill));
    ops.extend((0..ADDS).map(|_| launch(Kernel::Add, add)));
    ops.push(Op::StreamDestroy { id: stream });
    let seq = Sequence { seed: 1, ops };

    // What the kernels compute: fill32 `p[i] = v ^ i`, then addv `p[i] = 3 * p[i] + v`.
    let words = (0..WORDS).map(|i| (0..ADDS).fold(fill ^ i, |w, _| w.wrapping_mul(3).wrapping_add(add)));
    let expected: Vec<u8> = words.flat_map(u32::to_le_bytes).collect();

    let d = Driver::load(&sim_libdir().join("libcuda.so.1")).unwrap_or_else(|e| panic!("{e}"));
    let mut out = Vec::new();
    Executor::new(&d, &mut out).run(&seq);
    let text = String::from_utf8(out).expect("result lines are ASCII");
    let results: Vec<CallResult> = text.lines().filter_map(CallResult::parse).map(|(_, r)| r).collect();
    assert!(results.iter().all(|r| r.code == 0), "a call failed:\n{text}");
    // The epilogue reads the one buffer back, then the canary.
    let read = results.iter().position(|r| r.call == "cuMemcpyDtoH").unwrap_or_else(|| panic!("no read-back:\n{text}"));
    assert_eq!(
        results[read].digest,
        Some(digest(&expected)),
        "the read-back is not what the kernels computed (it overtook queued work):\n{}\n{text}",
        seq.listing()
    );
    assert_eq!(results[read - 2].call, "cuCtxSynchronize", "the read is fenced by a context synchronize:\n{text}");
}

/// The ops of `seq` that touch a buffer through a stream not ordered after the work of its
/// destroyed owner stream: since `cuStreamDestroy` there was no `cuCtxSynchronize` of its
/// context. Only `cuMemFree` may (it waits for the device's queued work). Worked out here
/// independently of the generator's own model.
fn unfenced_orphans(seq: &Sequence) -> Vec<String> {
    let mut owner: HashMap<Buf, (CtxSlot, Option<usize>)> = HashMap::new();
    let mut orphaned: HashSet<Buf> = HashSet::new();
    let mut found = Vec::new();
    for (i, op) in seq.ops.iter().enumerate() {
        let touched: Vec<Buf> = match *op {
            Op::Memset { id, .. } | Op::Upload { id, .. } | Op::Download { id } | Op::ReadBack { id } => vec![id],
            Op::FreeAsync { id } => vec![id],
            Op::Copy { dst, src, .. } | Op::CopyAcross { dst, src, .. } | Op::CopySync { dst, src, .. } => {
                vec![dst, src]
            }
            Op::Launch { dst, src, .. } => vec![dst, src],
            _ => Vec::new(),
        };
        for b in touched.iter().filter(|b| orphaned.contains(b)) {
            found.push(format!("op {i} ({op}) touches b{b}, orphaned"));
        }
        match *op {
            Op::Alloc { id, ctx, owner: o, .. } => {
                owner.insert(id, (ctx, o));
            }
            Op::StreamDestroy { id } => {
                for (b, (_, o)) in owner.iter_mut().filter(|(_, (_, o))| *o == Some(id)) {
                    *o = None;
                    orphaned.insert(*b);
                }
            }
            Op::CtxSync { ctx } => orphaned.retain(|b| owner[b].0 != ctx),
            Op::Free { id } | Op::FreeTwice { id } | Op::FreeAsync { id } => {
                owner.remove(&id);
                orphaned.remove(&id);
            }
            Op::CtxDestroy | Op::LaunchOutOfRange { .. } => {
                owner.retain(|_, (ctx, _)| *ctx != SCRATCH);
                orphaned.retain(|b| owner.contains_key(b));
            }
            _ => {}
        }
    }
    found
}

/// Regression, found by running CI-like sequences several times at once on the simulator
/// directly under load (seeds 1072 and 1091 faulted with CUDA_ERROR_ILLEGAL_ADDRESS in one run
/// of four): `cuMemFreeAsync` of a buffer whose NON_BLOCKING owner stream had just been
/// destroyed with a kernel on it queued the free on the legacy stream, which is not ordered
/// after that kernel, so the kernel could run on freed memory. The generator now fences such a
/// free with `cuCtxSynchronize`, as it fences reads and writes.
#[test]
fn generated_sequences_fence_every_use_of_a_buffer_of_a_destroyed_stream() {
    let seeds = [1072, 1091, 0x7f05_baff_86d8_1171].into_iter().chain(0..20_000);
    for seed in seeds {
        let seq = generate(seed, 120, true);
        let found = unfenced_orphans(&seq);
        assert!(found.is_empty(), "{}\n{}", found.join("\n"), seq.listing());
    }
}
