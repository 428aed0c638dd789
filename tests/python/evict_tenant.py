"""One tenant of the memory-preemption end-to-end test (pool-daemon/tests/evict.rs), run
unmodified under `gpupool run` (cuda-python for the driver API, the runtime by dlopen of
libcudart.so.12, as a program would); the tenant is chosen by GPUPOOL_TOKEN.

    evict_tenant.py low    fills the device with known bytes through every allocation path
                           that memory preemption evicts (cuMemAlloc, cudaMalloc,
                           cuMemAllocPitch, cudaMallocPitch, cuMemAllocFromPoolAsync), prints
                           READY, waits (no call) until the file EVICT_GO exists, then checks
                           every byte at the same addresses and runs a kernel on it
    evict_tenant.py high   allocates EVICT_BYTES, runs a kernel and a memset on it, checks them
    evict_tenant.py equal  allocates EVICT_BYTES: CUDA_ERROR_OUT_OF_MEMORY expected

Prints PASS/FAIL lines and SUMMARY passed/total, plus `TIME name ms` figures; exits 1 on any
failure.
"""

import ctypes as C
import os
import sys
import time

import numpy as np
from cuda.bindings import driver as d

MiB = 1 << 20
MODE = sys.argv[1]
R = d.CUresult
results = []
t_start = time.monotonic()

FILL_PTX = b""".version 8.0
.target sm_90
.address_size 64
.visible .entry fill(.param .u64 p, .param .u32 v)
{
    .reg .b64 %rd<4>;
    .reg .b32 %r<4>;
    ld.param.u64 %rd1, [p];
    ld.param.u32 %r1, [v];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r2, %tid.x;
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd2, %rd2, %rd3;
    st.global.u32 [%rd2], %r1;
    ret;
}
\0"""


def record(name, good, why=""):
    results.append(good)
    print(f"PASS {name}" if good else f"FAIL {name}: {why}", flush=True)


def ok(r):
    err = r[0] if isinstance(r, tuple) else r
    if err != R.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err}")
    return r[1] if isinstance(r, tuple) and len(r) == 2 else r[1:]


def finish():
    print(f"SUMMARY {sum(results)}/{len(results)}", flush=True)
    sys.exit(0 if results and all(results) else 1)


def fill_kernel(ptr, value):
    """One block of 256 threads: words 0..255 at ptr become value."""
    mod = ok(d.cuModuleLoadData(FILL_PTX))
    fn = ok(d.cuModuleGetFunction(mod, b"fill"))
    p, v = C.c_uint64(int(ptr)), C.c_uint32(value)
    params = (C.c_void_p * 2)(C.addressof(p), C.addressof(v))
    ok(d.cuLaunchKernel(fn, 1, 1, 1, 256, 1, 1, 0, 0, C.addressof(params), 0))


def pattern(seed, n):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


ok(d.cuInit(0))
dev = ok(d.cuDeviceGet(0))
ctx = ok(d.cuDevicePrimaryCtxRetain(dev))
ok(d.cuCtxSetCurrent(ctx))

if MODE == "low":
    rt = C.CDLL("libcudart.so.12")
    bufs = []  # (name, device pointer, size)

    def cu_alloc(n):
        return int(ok(d.cuMemAlloc(n)))

    def cuda_malloc(n):
        p = C.c_void_p()
        assert rt.cudaMalloc(C.byref(p), C.c_size_t(n)) == 0, "cudaMalloc"
        return p.value

    for i in range(2):
        bufs.append((f"cuMemAlloc #{i}", cu_alloc(8 * MiB), 8 * MiB))
    bufs.append(("cudaMalloc", cuda_malloc(6 * MiB), 6 * MiB))
    # Pitched: the width is not a multiple of the pitch alignment, so rows are padded.
    ptr, pitch = ok(d.cuMemAllocPitch(3000, 1024, 4))
    bufs.append(("cuMemAllocPitch", int(ptr), pitch * 1024))
    record("cuMemAllocPitch pads rows", pitch >= 3000 and pitch % 32 == 0, f"pitch {pitch}")
    p, rpitch = C.c_void_p(), C.c_size_t()
    assert rt.cudaMallocPitch(C.byref(p), C.byref(rpitch), C.c_size_t(2000), C.c_size_t(1024)) == 0
    bufs.append(("cudaMallocPitch", p.value, rpitch.value * 1024))
    pool = ok(d.cuDeviceGetDefaultMemPool(dev))
    stream = ok(d.cuStreamCreate(0))
    ptr = ok(d.cuMemAllocFromPoolAsync(6 * MiB, pool, stream))
    ok(d.cuStreamSynchronize(stream))
    bufs.append(("cuMemAllocFromPoolAsync", int(ptr), 6 * MiB))
    for i, (name, ptr, size) in enumerate(bufs):
        data = pattern(i, size)
        ok(d.cuMemcpyHtoD(ptr, data.ctypes.data, size))
    # A memset and a kernel's stores over the start of the first buffer.
    ok(d.cuMemsetD32(bufs[0][1] + 4096, 0x5A5A5A5A, 1024))
    fill_kernel(bufs[1][1], 0xC0FFEE01)
    ok(d.cuCtxSynchronize())
    total = sum(size for _, _, size in bufs)
    print(f"READY {total}", flush=True)

    go = os.environ["EVICT_GO"]
    deadline = time.monotonic() + 120
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            record("told to continue within 120 s", False)
            finish()
        time.sleep(0.02)

    # The first call after the high-priority tenant has gone brings the memory back.
    t0 = time.monotonic()
    first = np.empty(4096, dtype=np.uint8)
    ok(d.cuMemcpyDtoH(first.ctypes.data, bufs[0][1], 4096))
    print(f"TIME first_call_after_eviction_ms {(time.monotonic() - t0) * 1e3:.1f}", flush=True)
    record("first bytes back", bytes(first) == bytes(pattern(0, 4096)))
    for i, (name, ptr, size) in enumerate(bufs):
        want = pattern(i, size)
        if i == 0:
            want[4096 : 4096 + 4096] = np.frombuffer(np.full(1024, 0x5A5A5A5A, dtype=np.uint32).tobytes(), np.uint8)
        if i == 1:
            want[:1024] = np.frombuffer(np.full(256, 0xC0FFEE01, dtype=np.uint32).tobytes(), np.uint8)
        got = np.empty(size, dtype=np.uint8)
        ok(d.cuMemcpyDtoH(got.ctypes.data, ptr, size))
        bad = np.flatnonzero(got != want)
        record(f"{name}: {size} bytes bit-identical at {ptr:#x}", bad.size == 0, f"{bad.size} bytes differ from {bad[:1]}")
    # And it computes on it as before.
    fill_kernel(bufs[2][1], 77)
    ok(d.cuCtxSynchronize())
    words = np.empty(256, dtype=np.uint32)
    ok(d.cuMemcpyDtoH(words.ctypes.data, bufs[2][1], 1024))
    record("a kernel runs on the restored memory", bool((words == 77).all()))
    ok(d.cuMemFreeAsync(bufs[-1][1], stream))
    ok(d.cuStreamSynchronize(stream))
    finish()

nbytes = int(os.environ["EVICT_BYTES"])
if MODE == "high":
    t0 = time.monotonic()
    err, ptr = d.cuMemAlloc(nbytes)
    ms = (time.monotonic() - t0) * 1e3
    print(f"TIME start_to_first_alloc_ms {(time.monotonic() - t_start) * 1e3:.1f}", flush=True)
    print(f"TIME alloc_ms {ms:.1f}", flush=True)
    record(f"cuMemAlloc of {nbytes} bytes on the full device", err == R.CUDA_SUCCESS, f"{err}")
    if err == R.CUDA_SUCCESS:
        ok(d.cuMemsetD8(ptr, 0xAB, nbytes))
        fill_kernel(ptr, 0x12345678)
        ok(d.cuCtxSynchronize())
        head = np.empty(256, dtype=np.uint32)
        ok(d.cuMemcpyDtoH(head.ctypes.data, ptr, 1024))
        tail = np.empty(MiB, dtype=np.uint8)
        ok(d.cuMemcpyDtoH(tail.ctypes.data, int(ptr) + nbytes - MiB, MiB))
        record("kernel and memset results", bool((head == 0x12345678).all() and (tail == 0xAB).all()))
        ok(d.cuMemFree(ptr))
elif MODE == "equal":
    err, _ = d.cuMemAlloc(nbytes)
    record("equal priority: CUDA_ERROR_OUT_OF_MEMORY", err == R.CUDA_ERROR_OUT_OF_MEMORY, f"{err}")
else:
    record(f"mode {MODE}", False, "low, high or equal")
finish()
