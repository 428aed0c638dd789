//! The fuzzer's sequences are well-defined under CUDA's stream rules, so a result that differs
//! between the pool and the simulator is a finding and never a race of the sequence itself
//! (`gpupool_e2e::fuzz::{ops, exec}`), checked on the simulator directly.

use gpupool_e2e::fuzz::exec::{CallResult, Executor, digest};
use gpupool_e2e::fuzz::ops::{HOME, Kernel, Op, Sequence};
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
