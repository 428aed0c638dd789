"""A cuda-python client that outlives its daemon (issue 23; pool-daemon/tests/checkpoint.rs).

Under `gpupool run`: fills 64 MiB with a known pattern (a 32-bit memset and 1 MiB of seeded
random bytes copied from the host), loads a PTX kernel, then runs it in a loop on a 16 KiB
working buffer (each word w becomes w * 1664525 + k in step k), reading the buffer back after
every step and comparing it with the same recurrence computed on the host, which is what an
uninterrupted run gives. It prints `READY` before the loop and `STEP k` every step, and stops
after the step in which a line `stop` arrives on stdin; then it reads all 64 MiB back. With
`--alloc`, every step also allocates and frees 1 MiB, which cannot be replayed after a restore.
With `--reads=N`, every step reads the buffer back N - 1 more times after its `STEP` line (each
read checked), so that a daemon killed when the test sees that line most likely goes during a
device-to-host copy. With `--writes`, every step also copies 2 MiB from the host into a buffer
of its own (bytes that differ from step to step), and the end checks that buffer holds the last
step's bytes: over the network such copies are replayed from the bytes the client kept.
A CUDA error ends it with `ERROR <code>` and exit status 3. Between
READY and stop the test checkpoints the session, SIGKILLs the daemon and starts it again with
--restore: the client must not notice beyond the pause. Prints PASS/FAIL lines and
`SUMMARY passed/total`; exits 0 only if all passed.
"""

import ctypes
import select
import sys

import numpy as np
from cuda.bindings import driver as cu

BIG = 64 << 20
READS = next((int(a.split("=", 1)[1]) for a in sys.argv if a.startswith("--reads=")), 1)
WORDS = 4096
ASIDE = 2 << 20
PATTERN = 0x6B000000
STEP_PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry step(.param .u64 p, .param .u32 k, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<9>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [p];
    ld.param.u32 %r1, [k];
    ld.param.u32 %r2, [n];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r6, %r3, %r4, %r5;
    setp.ge.u32 %p1, %r6, %r2;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r6, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r7, [%rd4];
    mad.lo.s32 %r8, %r7, 1664525, %r1;
    st.global.u32 [%rd4], %r8;
DONE:
    ret;
}
\x00"""

passed = 0
failed = 0


def report(name, ok, why=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"PASS {name}", flush=True)
    else:
        failed += 1
        print(f"FAIL {name}: {why}", flush=True)


class CudaError(Exception):
    pass


def check(r):
    """A cuda-python call's error checked; its one result, or None."""
    err, *rest = r
    if err != cu.CUresult.CUDA_SUCCESS:
        raise CudaError(int(err))
    return rest[0] if len(rest) == 1 else None


def main():
    check(cu.cuInit(0))
    dev = check(cu.cuDeviceGet(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev))
    check(cu.cuCtxSetCurrent(ctx))
    big = check(cu.cuMemAlloc(BIG))
    check(cu.cuMemsetD32(big, PATTERN, BIG // 4))
    rnd = np.random.default_rng(23).integers(0, 256, 1 << 20, dtype=np.uint8)
    check(cu.cuMemcpyHtoD(int(big) + (1 << 20), rnd.ctypes.data, rnd.nbytes))
    module = check(cu.cuModuleLoadData(STEP_PTX))
    func = check(cu.cuModuleGetFunction(module, b"step"))
    work = check(cu.cuMemAlloc(WORDS * 4))
    host = np.arange(WORDS, dtype=np.uint32) * np.uint32(2654435761)
    check(cu.cuMemcpyHtoD(work, host.ctypes.data, host.nbytes))
    writes = "--writes" in sys.argv
    aside_bytes = np.random.default_rng(24).integers(0, 256, ASIDE, dtype=np.uint8)
    aside = check(cu.cuMemAlloc(ASIDE)) if writes else None
    check(cu.cuCtxSynchronize())
    print("READY", flush=True)

    back = np.empty(WORDS, dtype=np.uint32)
    k = 0
    stop = False
    while not stop:
        if select.select([sys.stdin], [], [], 0)[0]:
            stop = sys.stdin.readline().strip() == "stop"
        args = [ctypes.c_uint64(int(work)), ctypes.c_uint32(k), ctypes.c_uint32(WORDS)]
        params = (ctypes.c_void_p * 3)(*[ctypes.addressof(a) for a in args])
        check(cu.cuLaunchKernel(func, WORDS // 256, 1, 1, 256, 1, 1, 0, 0, ctypes.addressof(params), 0))
        check(cu.cuCtxSynchronize())
        if "--alloc" in sys.argv:
            check(cu.cuMemFree(check(cu.cuMemAlloc(1 << 20))))
        if writes:
            np.bitwise_xor(aside_bytes, np.uint8(k & 0xFF), out=aside_bytes)
            check(cu.cuMemcpyHtoD(aside, aside_bytes.ctypes.data, ASIDE))
        host = (host * np.uint32(1664525) + np.uint32(k)).astype(np.uint32)
        check(cu.cuMemcpyDtoH(back.ctypes.data, work, back.nbytes))
        if not np.array_equal(back, host):
            report(f"step {k} as an uninterrupted run", False, f"first difference at word {np.argmax(back != host)}")
            break
        print(f"STEP {k}", flush=True)
        same = True
        for _ in range(READS - 1):
            back.fill(0)
            check(cu.cuMemcpyDtoH(back.ctypes.data, work, back.nbytes))
            same = same and np.array_equal(back, host)
        if not same:
            report(f"step {k}'s reads after it as an uninterrupted run", False, "a read differs")
            break
        k += 1
    report(f"{k} steps, each as an uninterrupted run", failed == 0)

    got = np.empty(BIG, dtype=np.uint8)
    check(cu.cuMemcpyDtoH(got.ctypes.data, big, BIG))
    want = np.frombuffer(np.full(BIG // 4, PATTERN, dtype=np.uint32).tobytes(), dtype=np.uint8).copy()
    want[1 << 20 : 2 << 20] = rnd
    report("64 MiB bit-identical", np.array_equal(got, want), "the pattern differs")
    if writes:
        got = np.empty(ASIDE, dtype=np.uint8)
        check(cu.cuMemcpyDtoH(got.ctypes.data, aside, ASIDE))
        report("the last step's 2 MiB written", np.array_equal(got, aside_bytes), "the bytes differ")
        check(cu.cuMemFree(aside))
    check(cu.cuMemFree(work))
    check(cu.cuMemFree(big))
    print(f"SUMMARY {passed}/{passed + failed}", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CudaError as e:
        print(f"ERROR {e.args[0]}", flush=True)
        sys.exit(3)
