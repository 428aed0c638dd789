"""Real CUDA C kernels, compiled from source by NVRTC to PTX (compute_90), loaded into the
simulator with cuModuleLoadData and launched through cuda-bindings' driver API; every
result is checked against a reference computed here on the CPU (numpy).

Integers are compared exactly. Floating point: either exactly (operations IEEE 754 defines
as correctly rounded: add, mul, fma, div and sqrt with NVRTC's default -prec-div/-prec-sqrt,
conversions, the explicit-rounding intrinsics such as __fadd_rd, whose references are exact
rationals rounded by `_round_frac`) or within the maximum ulp errors the CUDA C++ Programming Guide documents
for each math function (appendix "Mathematical Functions"); reductions and dot products,
whose summation order is not fixed, within a rounding-error bound stated at the check.

Each test runs in its own context (fixture ``kctx``), so a kernel that faults cannot
poison the next test; the illegal-address, printf and NVRTC 13 tests run in child
processes. Sizes are chosen for a CPU interpreter (the whole file: well under a minute).
See kernels.py for how NVRTC is located.
"""

import ctypes
import math
import os
import time
from fractions import Fraction

import numpy as np
import pytest

from conftest import check, run_python
from kernels import (
    Module,
    alloc,
    bf16_bits_rne,
    ceil_div,
    compile_ptx,
    compile_ptx13,
    f32,
    f64,
    from_device,
    i32,
    i64,
    is_nan_bf16_bits,
    is_nan_f16_bits,
    launch,
    load,
    ptr,
    sync,
    to_device,
    u32,
    u64,
    ulp_error_f32,
)

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def kctx(cuda):
    """A fresh context on device 0, current for the test, destroyed after it."""
    dev = check(cuda.cuDeviceGet(0))
    c = check(cuda.cuCtxCreate(0, dev))
    yield c
    check(cuda.cuCtxDestroy(c))


def rng(seed):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------
# Vector add, the way NVIDIA's cuda-python samples do it
# ---------------------------------------------------------------------------------------

VEC_ADD = """\
extern "C" __global__
void vecAdd(const float *A, const float *B, float *C, size_t N)
{
    size_t i = (size_t)blockDim.x * blockIdx.x + threadIdx.x;
    if (i < N)
        C[i] = A[i] + B[i];
}
"""


VEC_ADD_SAMPLE = """\
import sys
sys.path.insert(0, HERE)
from kernels import load_nvrtc12

load_nvrtc12()  # libnvrtc.so.12 for cuda-bindings 12.9 (see kernels.py)
from cuda.bindings import driver, nvrtc
import numpy as np

def checkCudaErrors(result):
    if result[0].value:
        raise RuntimeError(f"CUDA error code={result[0].value}({result[0]!r})")
    if len(result) == 1:
        return None
    elif len(result) == 2:
        return result[1]
    else:
        return result[1:]

checkCudaErrors(driver.cuInit(0))
cuDevice = checkCudaErrors(driver.cuDeviceGet(0))
major = checkCudaErrors(
    driver.cuDeviceGetAttribute(driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cuDevice)
)
minor = checkCudaErrors(
    driver.cuDeviceGetAttribute(driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cuDevice)
)
arch_arg = bytes(f"--gpu-architecture=compute_{major}{minor}", "ascii")
assert arch_arg == b"--gpu-architecture=compute_90"

prog = checkCudaErrors(nvrtc.nvrtcCreateProgram(str.encode(VEC_ADD_SOURCE), b"vecAdd.cu", 0, [], []))
opts = [b"--fmad=false", arch_arg]
checkCudaErrors(nvrtc.nvrtcCompileProgram(prog, 2, opts))
ptxSize = checkCudaErrors(nvrtc.nvrtcGetPTXSize(prog))
ptx = b" " * ptxSize
checkCudaErrors(nvrtc.nvrtcGetPTX(prog, ptx))
checkCudaErrors(nvrtc.nvrtcDestroyProgram(prog))

context = checkCudaErrors(driver.cuCtxCreate(0, cuDevice))
try:
    ptx = np.char.array(ptx)
    module = checkCudaErrors(driver.cuModuleLoadData(ptx.ctypes.data))
    kernel = checkCudaErrors(driver.cuModuleGetFunction(module, b"vecAdd"))

    NUM_THREADS = 256
    N = 1_000_000  # not a multiple of the block: the last block is partial
    NUM_BLOCKS = (N + NUM_THREADS - 1) // NUM_THREADS
    n = np.array(N, dtype=np.uint64)  # size_t
    bufferSize = N * np.dtype(np.float32).itemsize
    r = np.random.default_rng(1)
    hA = r.random(N, dtype=np.float32)
    hB = (r.random(N, dtype=np.float32) - 0.5) * 1000
    hC = np.zeros(N, dtype=np.float32)

    dAclass = checkCudaErrors(driver.cuMemAlloc(bufferSize))
    dBclass = checkCudaErrors(driver.cuMemAlloc(bufferSize))
    dCclass = checkCudaErrors(driver.cuMemAlloc(bufferSize))
    stream = checkCudaErrors(driver.cuStreamCreate(0))
    checkCudaErrors(driver.cuMemcpyHtoDAsync(dAclass, hA.ctypes.data, bufferSize, stream))
    checkCudaErrors(driver.cuMemcpyHtoDAsync(dBclass, hB.ctypes.data, bufferSize, stream))
    checkCudaErrors(driver.cuMemsetD32Async(dCclass, 0x7FC00000, N, stream))  # NaN: untouched shows

    dA = np.array([int(dAclass)], dtype=np.uint64)
    dB = np.array([int(dBclass)], dtype=np.uint64)
    dC = np.array([int(dCclass)], dtype=np.uint64)
    args = [dA, dB, dC, n]
    args = np.array([arg.ctypes.data for arg in args], dtype=np.uint64)
    checkCudaErrors(
        driver.cuLaunchKernel(kernel, NUM_BLOCKS, 1, 1, NUM_THREADS, 1, 1, 0, stream, args.ctypes.data, 0)
    )
    checkCudaErrors(driver.cuMemcpyDtoHAsync(hC.ctypes.data, dCclass, bufferSize, stream))
    checkCudaErrors(driver.cuStreamSynchronize(stream))

    # float32 addition is correctly rounded on both sides: exact equality.
    hRef = hA + hB
    bad = np.flatnonzero(hC != hRef)
    assert bad.size == 0, f"{bad.size} wrong elements, first {bad[:5]}: got {hC[bad[:5]]}, want {hRef[bad[:5]]}"

    checkCudaErrors(driver.cuStreamDestroy(stream))
    for p in (dAclass, dBclass, dCclass):
        checkCudaErrors(driver.cuMemFree(p))
    checkCudaErrors(driver.cuModuleUnload(module))
finally:
    checkCudaErrors(driver.cuCtxDestroy(context))
print("vecAdd ok")
"""


def test_vector_add_f32_sample_style():
    """NVIDIA's cuda-python "Overview" flow, in one process as a user writes it: NVRTC
    compile for the device's own compute capability, cuCtxCreate, cuModuleLoadData,
    numpy host arrays, async copies on a stream, cuLaunchKernel with an array of argument
    addresses, copy back. 1M elements. Run in a child process: NVRTC next to a driver
    without cuGetExportTable dies with SIGSEGV (kernels.py), which must fail this test
    rather than end the session."""
    import subprocess
    import sys

    from conftest import subprocess_env

    code = "HERE = %r\n" % HERE + VEC_ADD_SAMPLE.replace("VEC_ADD_SOURCE", repr(VEC_ADD))
    proc = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), capture_output=True, text=True, timeout=300)
    hint = ""
    if proc.returncode < 0:
        hint = (
            f"\nkilled by signal {-proc.returncode}: nvrtcCompileProgram dlopens libcuda.so.1, calls cuInit "
            "and cuGetExportTable; a driver without cuGetExportTable makes it dereference NULL"
        )
    assert proc.returncode == 0 and "vecAdd ok" in proc.stdout, (
        f"rc={proc.returncode}{hint}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    )


def test_vector_add_ptx_from_nvrtc13(kctx):
    """The same kernel compiled by NVRTC 13.0 (PTX ISA 9.0, what CUDA 13 toolchains emit)."""
    ptx = compile_ptx13(VEC_ADD)
    assert b".version 9.0" in ptx
    m = Module(ptx)
    fn = m.function("vecAdd")
    N = 70_001
    r = rng(2)
    a = r.standard_normal(N).astype(np.float32)
    b = r.standard_normal(N).astype(np.float32)
    da, db, dc = to_device(a), to_device(b), alloc(N * 4, fill=0xFF)
    launch(fn, (ceil_div(N, 128),), (128,), [ptr(da), ptr(db), ptr(dc), u64(N)])
    sync()
    c = from_device(dc, N, np.float32)
    assert np.array_equal(c, a + b)


# ---------------------------------------------------------------------------------------
# saxpy, f32 and f64 (fma)
# ---------------------------------------------------------------------------------------

SAXPY = """\
extern "C" __global__ void saxpy(T a, const T *x, T *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def _round_fraction(fr, dtype):
    """Correctly rounded (nearest, ties to even) value of an exact rational in dtype."""
    d = float(fr)  # Python's int/int division is correctly rounded to double
    if dtype == np.float64:
        return np.float64(d)
    f = np.float32(d)
    if Fraction(float(f)) == fr:
        return f
    # d may sit exactly half-way between two floats only after rounding: decide exactly.
    lo, hi = (f, np.nextafter(f, np.float32(np.inf))) if Fraction(float(f)) < fr else (
        np.nextafter(f, np.float32(-np.inf)), f)
    mid = (Fraction(float(lo)) + Fraction(float(hi))) / 2
    if fr < mid:
        return lo
    if fr > mid:
        return hi
    return lo if int(np.array(lo).view(np.uint32)) % 2 == 0 else hi


@pytest.mark.parametrize("ctype,dtype", [("float", np.float32), ("double", np.float64)], ids=["f32", "f64"])
def test_saxpy(kctx, ctype, dtype):
    ptx = compile_ptx(SAXPY.replace("T ", ctype + " ").replace("T *", ctype + " *"))
    # NVRTC contracts a*x+y into one fused multiply-add (default --fmad=true); the
    # reference below is therefore the exactly rounded a*x+y.
    assert (b"fma.rn.f32" if dtype == np.float32 else b"fma.rn.f64") in ptx
    fn = Module(ptx).function("saxpy")
    N = 20_000
    r = rng(3)
    a = dtype(-1.7320508075688772)
    x = (r.standard_normal(N) * 100).astype(dtype)
    y = (r.standard_normal(N) * 100).astype(dtype)
    dx, dy = to_device(x), to_device(y)
    launch(fn, (ceil_div(N, 256),), (256,), [(f32 if dtype == np.float32 else f64)(a), ptr(dx), ptr(dy), i32(N)])
    sync()
    got = from_device(dy, N, dtype)
    fa = Fraction(float(a))
    want = np.array([_round_fraction(fa * Fraction(float(xi)) + Fraction(float(yi)), dtype) for xi, yi in zip(x, y)], dtype=dtype)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{bad.size} wrong, first at {bad[:5]}: got {got[bad[:5]]!r} want {want[bad[:5]]!r}"


# ---------------------------------------------------------------------------------------
# Reduction: dynamic shared memory, __syncthreads, atomicAdd of block partials
# ---------------------------------------------------------------------------------------

REDUCE = """\
extern "C" __global__ void reduce_sum(const float *in, float *partials, float *out, unsigned int n)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * (blockDim.x * 2) + threadIdx.x;
    float v = 0.0f;
    if (i < n) v = in[i];
    if (i + blockDim.x < n) v += in[i + blockDim.x];
    sdata[tid] = v;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) {
        partials[blockIdx.x] = sdata[0];
        atomicAdd(out, sdata[0]);
    }
}
"""


def test_reduction_shared_memory_atomic(kctx):
    fn = load(REDUCE).function("reduce_sum")
    N, T = 100_003, 256
    blocks = ceil_div(N, 2 * T)
    x = rng(4).random(N, dtype=np.float32)
    dx, dpart, dout = to_device(x), alloc(blocks * 4, fill=0xFF), to_device(np.array([0.0], np.float32))
    launch(fn, (blocks,), (T,), [ptr(dx), ptr(dpart), ptr(dout), u32(N)], shared=T * 4)
    sync()
    # The per-block tree is a fixed sequence of float32 additions: reproduce it exactly.
    v = np.zeros(blocks * 2 * T, np.float32)
    v[:N] = x
    v = v.reshape(blocks, 2 * T)
    tree = v[:, :T] + v[:, T:]
    s = T // 2
    while s > 0:
        tree[:, :s] = tree[:, :s] + tree[:, s : 2 * s]
        s //= 2
    want_partials = tree[:, 0]
    partials = from_device(dpart, blocks, np.float32)
    bad = np.flatnonzero(partials != want_partials)
    assert bad.size == 0, f"block partials differ at {bad[:5]}: {partials[bad[:5]]} vs {want_partials[bad[:5]]}"
    # atomicAdd order is unspecified: float32 sequential summation of `blocks` terms is
    # within (blocks-1) * 2^-24 * sum|p| of the exact sum (plus the initial 0).
    total = float(from_device(dout, 1, np.float32)[0])
    exact = float(np.sum(want_partials.astype(np.float64)))
    bound = (blocks - 1) * 2.0**-24 * float(np.sum(np.abs(want_partials.astype(np.float64))))
    assert abs(total - exact) <= bound, (total, exact, bound)


# ---------------------------------------------------------------------------------------
# Histogram: shared-memory atomics, global atomics (and atomicAdd's return value)
# ---------------------------------------------------------------------------------------

HISTOGRAM = """\
#define BINS 256
extern "C" __global__ void histogram(const unsigned char *data, unsigned int n, unsigned int *hist,
                                     unsigned int *zero_count, unsigned int *zero_slots)
{
    __shared__ unsigned int local[BINS];
    for (unsigned int b = threadIdx.x; b < BINS; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        unsigned char c = data[i];
        atomicAdd(&local[c], 1u);
        if (c == 0) {
            unsigned int slot = atomicAdd(zero_count, 1u);  // a unique ticket per zero byte
            zero_slots[slot] = i;
        }
    }
    __syncthreads();
    for (unsigned int b = threadIdx.x; b < BINS; b += blockDim.x)
        if (local[b]) atomicAdd(&hist[b], local[b]);
}
"""


def test_histogram_shared_and_global_atomics(kctx):
    fn = load(HISTOGRAM).function("histogram")
    N = 60_000
    r = rng(5)
    # Skewed: many zeros and a few hot bins, so atomics really collide.
    data = np.where(r.random(N) < 0.3, 0, np.where(r.random(N) < 0.5, 7, r.integers(0, 256, N))).astype(np.uint8)
    hist0 = np.arange(256, dtype=np.uint32) * 1000  # atomics add to what is there
    nzero = int(np.count_nonzero(data == 0))
    ddata, dhist = to_device(data), to_device(hist0)
    dcount, dslots = to_device(np.array([0], np.uint32)), alloc(nzero * 4, fill=0xFF)
    launch(fn, (6,), (128,), [ptr(ddata), u32(N), ptr(dhist), ptr(dcount), ptr(dslots)])
    sync()
    hist = from_device(dhist, 256, np.uint32)
    want = hist0 + np.bincount(data, minlength=256).astype(np.uint32)
    assert np.array_equal(hist, want), np.flatnonzero(hist != want)[:10]
    assert int(from_device(dcount, 1, np.uint32)[0]) == nzero
    slots = from_device(dslots, nzero, np.uint32)
    assert np.array_equal(np.sort(slots), np.flatnonzero(data == 0).astype(np.uint32))


# ---------------------------------------------------------------------------------------
# Tiled matrix multiply, 16x16 tiles, sizes not multiples of 16
# ---------------------------------------------------------------------------------------

MATMUL = """\
#define TILE 16
extern "C" __global__ void matmul(const float *A, const float *B, float *C, int M, int N, int K)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + TILE - 1) / TILE; ++t) {
        int ak = t * TILE + threadIdx.x;
        int bk = t * TILE + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ak < K) ? A[row * K + ak] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (bk < K && col < N) ? B[bk * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k)
            acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
"""


def test_tiled_matmul(kctx):
    fn = load(MATMUL).function("matmul")
    M, K, N = 37, 41, 33
    r = rng(6)
    A = r.standard_normal((M, K)).astype(np.float32)
    B = r.standard_normal((K, N)).astype(np.float32)
    dA, dB, dC = to_device(A), to_device(B), alloc(M * N * 4, fill=0xFF)
    launch(fn, (ceil_div(N, 16), ceil_div(M, 16)), (16, 16), [ptr(dA), ptr(dB), ptr(dC), i32(M), i32(N), i32(K)])
    sync()
    C = from_device(dC, M * N, np.float32).reshape(M, N)
    exact = A.astype(np.float64) @ B.astype(np.float64)
    # K fused multiply-adds in float32: |error| <= K * 2^-24 * sum_k |a_ik b_kj| (gamma_K);
    # we allow 2^-23 per step.
    bound = K * 2.0**-23 * (np.abs(A).astype(np.float64) @ np.abs(B).astype(np.float64))
    err = np.abs(C.astype(np.float64) - exact)
    assert np.all(np.isfinite(C))
    assert np.all(err <= bound), f"max err/bound {np.max(err / bound)} at {np.unravel_index(np.argmax(err / bound), err.shape)}"


# ---------------------------------------------------------------------------------------
# Warp intrinsics: __shfl_down_sync / __shfl_xor_sync / __shfl_sync, __ballot_sync,
# __any_sync, __all_sync
# ---------------------------------------------------------------------------------------

WARP = """\
extern "C" __global__ void warp_ops(const int *in, int *lane_sum, unsigned int *ballot, int *any_, int *all_,
                                    int *xor_out, int *bcast_out, int threshold)
{
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    int warp = tid >> 5;
    int lane = threadIdx.x & 31;
    int v = in[tid];
    int s = v;
    for (int off = 16; off > 0; off >>= 1)
        s += __shfl_down_sync(0xffffffffu, s, off);
    lane_sum[tid] = s;   // lane 0 holds the warp's sum; others partial sums
    unsigned int b = __ballot_sync(0xffffffffu, v > threshold);
    int a = __any_sync(0xffffffffu, v == 7777);
    int al = __all_sync(0xffffffffu, v >= 0);
    xor_out[tid] = __shfl_xor_sync(0xffffffffu, v, 1);
    bcast_out[tid] = __shfl_sync(0xffffffffu, v, 5);
    if (lane == 0) {
        ballot[warp] = b;
        any_[warp] = a;
        all_[warp] = al;
    }
}
"""


def test_warp_shuffle_ballot_any_all(kctx):
    fn = load(WARP).function("warp_ops")
    blocks, T = 4, 64
    n = blocks * T
    W = n // 32
    r = rng(7)
    v = r.integers(-1000, 1000, n).astype(np.int32)
    v[0:32] = np.abs(v[0:32])  # warp 0: all >= 0, contains 7777
    v[13] = 7777
    v[64:96] = np.abs(v[64:96])  # warp 2: all >= 0, no 7777
    v[64 + 31] = 7777  # ... except its last lane
    v[32 * 5 + 31] = 7777  # warp 5: mixed signs, 7777 in lane 31
    v[32 * 7 : 32 * 8] = -np.abs(v[32 * 7 : 32 * 8]) - 1  # warp 7: all negative
    threshold = 100
    dv = to_device(v)
    bufs = [alloc(n * 4, fill=0xEE) for _ in range(6)]
    dsum, dballot, dany, dall, dxor, dbc = bufs
    launch(fn, (blocks,), (T,), [ptr(dv)] + [ptr(b) for b in bufs] + [i32(threshold)])
    sync()
    # Reference: __shfl_down_sync returns the caller's own value when lane + delta > 31.
    s = v.reshape(W, 32).astype(np.int64)
    off = 16
    while off > 0:
        shifted = s.copy()
        shifted[:, : 32 - off] = s[:, off:]
        s = s + shifted
        off //= 2
    got_sum = from_device(dsum, n, np.int32).reshape(W, 32)
    assert np.array_equal(got_sum, s.astype(np.int32)), np.argwhere(got_sum != s)[:5]
    assert np.array_equal(got_sum[:, 0], v.reshape(W, 32).sum(axis=1))
    vw = v.reshape(W, 32)
    want_ballot = [sum(1 << l for l in range(32) if vw[w, l] > threshold) for w in range(W)]
    assert from_device(dballot, W, np.uint32).tolist() == want_ballot
    got_any = from_device(dany, W, np.int32)
    got_all = from_device(dall, W, np.int32)
    assert [bool(x) for x in got_any] == [bool(np.any(vw[w] == 7777)) for w in range(W)]
    assert [bool(x) for x in got_all] == [bool(np.all(vw[w] >= 0)) for w in range(W)]
    assert got_any.tolist()[0] != 0 and got_all.tolist()[7] == 0
    lanes = np.arange(32)
    assert np.array_equal(from_device(dxor, n, np.int32).reshape(W, 32), vw[:, lanes ^ 1])
    assert np.array_equal(from_device(dbc, n, np.int32).reshape(W, 32), np.repeat(vw[:, 5:6], 32, axis=1))


# ---------------------------------------------------------------------------------------
# Grid-stride loop
# ---------------------------------------------------------------------------------------

GRID_STRIDE = """\
extern "C" __global__ void grid_stride(const int *in, int *out, int *who, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        out[i] = in[i] * 3 - i;
        who[i] = blockIdx.x * blockDim.x + threadIdx.x;
    }
}
"""


def test_grid_stride_loop(kctx):
    fn = load(GRID_STRIDE).function("grid_stride")
    N, blocks, T = 100_003, 5, 96
    x = rng(8).integers(-(1 << 20), 1 << 20, N).astype(np.int32)
    dx, dout, dwho = to_device(x), alloc(N * 4, fill=0xFF), alloc(N * 4, fill=0xFF)
    launch(fn, (blocks,), (T,), [ptr(dx), ptr(dout), ptr(dwho), i32(N)])
    sync()
    idx = np.arange(N, dtype=np.int64)
    assert np.array_equal(from_device(dout, N, np.int32), (x.astype(np.int64) * 3 - idx).astype(np.int32))
    assert np.array_equal(from_device(dwho, N, np.int32), (idx % (blocks * T)).astype(np.int32))


# ---------------------------------------------------------------------------------------
# __device__ / __constant__ globals
# ---------------------------------------------------------------------------------------

GLOBALS_READ = """\
__device__ int table[8] = {3, 1, 4, 1, 5, 9, 2, 6};
__constant__ int ctable[4] = {10, -20, 30, -40};
__device__ double dscale = 0.25;
extern "C" __global__ void lookup(const int *idx, int *out, double *dout, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int k = idx[i];
        out[i] = table[k & 7] * ctable[(k >> 3) & 3] + k;
        dout[i] = k * dscale;
    }
}
"""

GLOBALS_WRITE = """\
__device__ unsigned long long counter;
__device__ float results[4];
extern "C" __global__ void writer(unsigned long long base)
{
    atomicAdd(&counter, base + threadIdx.x);
    if (threadIdx.x < 4) results[threadIdx.x] = threadIdx.x * 1.5f;
}
"""


def test_device_global_with_initializer(kctx, cuda):
    m = load(GLOBALS_READ)
    fn = m.function("lookup")
    table_ptr, table_size = m.global_("table")
    assert table_size == 32
    assert from_device(table_ptr, 8, np.int32).tolist() == [3, 1, 4, 1, 5, 9, 2, 6]
    ct_ptr, ct_size = m.global_("ctable")
    assert ct_size == 16 and from_device(ct_ptr, 4, np.int32).tolist() == [10, -20, 30, -40]
    n = 200
    k = rng(9).integers(0, 1000, n).astype(np.int32)
    dk, dout, ddout = to_device(k), alloc(n * 4, fill=0xFF), alloc(n * 8, fill=0xFF)
    launch(fn, (2,), (128,), [ptr(dk), ptr(dout), ptr(ddout), i32(n)])
    sync()
    table = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    ctable = np.array([10, -20, 30, -40])
    assert from_device(dout, n, np.int32).tolist() == (table[k & 7] * ctable[(k >> 3) & 3] + k).tolist()
    assert from_device(ddout, n, np.float64).tolist() == (k * 0.25).tolist()
    # The host changes a __device__ variable; the next launch sees it.
    check(cuda.cuMemcpyHtoD(table_ptr, np.full(8, -2, np.int32).ctypes.data, 32))
    launch(fn, (2,), (128,), [ptr(dk), ptr(dout), ptr(ddout), i32(n)])
    sync()
    assert from_device(dout, n, np.int32).tolist() == (-2 * ctable[(k >> 3) & 3] + k).tolist()


def test_device_global_written_by_kernel(kctx, cuda):
    m = load(GLOBALS_WRITE)
    fn = m.function("writer")
    cptr, csize = m.global_("counter")
    rptr, rsize = m.global_("results")
    assert (csize, rsize) == (8, 16)
    # Variables without an initializer start zeroed.
    assert from_device(cptr, 1, np.uint64)[0] == 0
    launch(fn, (1,), (32,), [u64(1 << 40)])
    sync()
    got = np.zeros(1, np.uint64)
    check(cuda.cuMemcpyDtoH(got.ctypes.data, cptr, 8))
    assert int(got[0]) == 32 * (1 << 40) + sum(range(32))
    res = np.zeros(4, np.float32)
    check(cuda.cuMemcpyDtoH(res.ctypes.data, rptr, 16))
    assert res.tolist() == [0.0, 1.5, 3.0, 4.5]
    # It persists across launches: a second launch accumulates.
    launch(fn, (1,), (32,), [u64(5)])
    sync()
    check(cuda.cuMemcpyDtoH(got.ctypes.data, cptr, 8))
    assert int(got[0]) == 32 * (1 << 40) + 2 * sum(range(32)) + 32 * 5


# ---------------------------------------------------------------------------------------
# 3-D grid and 3-D blocks
# ---------------------------------------------------------------------------------------

FILL3D = """\
extern "C" __global__ void fill3d(unsigned int *out, unsigned int *ids, unsigned int *dims, int X, int Y, int Z)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x < X && y < Y && z < Z) {
        size_t i = ((size_t)z * Y + y) * X + x;
        out[i] = (x * 73856093u) ^ (y * 19349663u) ^ (z * 83492791u);
        ids[i] = threadIdx.x | (threadIdx.y << 5) | (threadIdx.z << 10)
               | (blockIdx.x << 15) | (blockIdx.y << 20) | (blockIdx.z << 25);
        dims[i] = blockDim.x | (blockDim.y << 5) | (blockDim.z << 10)
                | (gridDim.x << 15) | (gridDim.y << 20) | (gridDim.z << 25);
    }
}
"""


def test_3d_grid_and_blocks(kctx):
    fn = load(FILL3D).function("fill3d")
    block = (8, 4, 3)
    X, Y, Z = 21, 15, 5
    grid = (ceil_div(X, 8), ceil_div(Y, 4), ceil_div(Z, 3))
    assert grid == (3, 4, 2)
    n = X * Y * Z
    bufs = [alloc(n * 4, fill=0xFF) for _ in range(3)]
    launch(fn, grid, block, [ptr(b) for b in bufs] + [i32(X), i32(Y), i32(Z)])
    sync()
    z, y, x = np.meshgrid(np.arange(Z), np.arange(Y), np.arange(X), indexing="ij")
    x, y, z = (a.astype(np.uint64).ravel() for a in (x, y, z))
    m32 = 0xFFFFFFFF
    want = ((x * 73856093) & m32) ^ ((y * 19349663) & m32) ^ ((z * 83492791) & m32)
    want_ids = (x % 8) | ((y % 4) << 5) | ((z % 3) << 10) | ((x // 8) << 15) | ((y // 4) << 20) | ((z // 3) << 25)
    want_dims = 8 | (4 << 5) | (3 << 10) | (3 << 15) | (4 << 20) | (2 << 25)
    out, ids, dims = (from_device(b, n, np.uint32) for b in bufs)
    assert np.array_equal(out, want.astype(np.uint32))
    assert np.array_equal(ids, want_ids.astype(np.uint32))
    assert np.all(dims == want_dims)


# ---------------------------------------------------------------------------------------
# Math functions
# ---------------------------------------------------------------------------------------

MATH = """\
extern "C" __global__ void math_f32(const float *x, const float *p, const float *y, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float a = x[i], b = p[i], c = y[i];
    float *o = out + 8 * i;
    o[0] = sinf(a);
    o[1] = cosf(a);
    o[2] = expf(a);
    o[3] = logf(b);
    o[4] = sqrtf(b);
    o[5] = rsqrtf(b);
    o[6] = fabsf(a);
    o[7] = a / c;
}
extern "C" __global__ void math_f64(const double *p, const double *y, double *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[2 * i] = sqrt(p[i]);
    out[2 * i + 1] = p[i] / y[i];
}
"""

# CUDA C++ Programming Guide, "Mathematical Functions", single precision, maximum ulp error
# (default compilation: no -use_fast_math, so -prec-div=true -prec-sqrt=true -ftz=false).
F32_ULP = {"sinf": 2, "cosf": 2, "expf": 2, "logf": 1, "rsqrtf": 2}


def test_math_f32_f64(kctx):
    m = load(MATH)
    r = rng(10)
    n = 1024
    specials_x = [0.0, -0.0, 1.0, -1.0, 1e-3, math.pi, 88.0, 89.0, -110.0, 12345.678, 1e6, -3.0e5]
    specials_p = [0.0, 1.0, 4.0, 2.0, -1.0, np.inf, 1e-30, 1e30, 0.5, 3.0]
    specials_y = [0.0, -0.0, 0.0, -0.0, 1e-30, 1e30, 3.0, -7.0]
    x = np.concatenate([specials_x, r.uniform(-20, 20, n - len(specials_x))]).astype(np.float32)
    p = np.concatenate([specials_p, 10.0 ** r.uniform(-30, 30, n - len(specials_p))]).astype(np.float32)
    y = np.concatenate([specials_y, r.standard_normal(n - len(specials_y)) * 10]).astype(np.float32)
    dx, dp, dy, dout = to_device(x), to_device(p), to_device(y), alloc(n * 8 * 4, fill=0xFF)
    launch(m.function("math_f32"), (ceil_div(n, 128),), (128,), [ptr(dx), ptr(dp), ptr(dy), ptr(dout), i32(n)])
    sync()
    out = from_device(dout, n * 8, np.float32).reshape(n, 8)
    x64, p64 = x.astype(np.float64), p.astype(np.float64)
    with np.errstate(all="ignore"):
        refs = {
            "sinf": (0, np.sin(x64)),
            "cosf": (1, np.cos(x64)),
            "expf": (2, np.exp(x64)),
            "logf": (3, np.log(p64)),
            "rsqrtf": (5, 1.0 / np.sqrt(p64)),
        }
        for name, (col, ref) in refs.items():
            err = ulp_error_f32(out[:, col], ref)
            worst = int(np.argmax(err))
            arg = (x if col < 3 else p)[worst]
            assert err[worst] <= F32_ULP[name] + 0.5, (
                f"{name}({arg!r}) = {out[worst, col]!r}, exact {ref[worst]!r}: "
                f"{err[worst]:.2f} ulp > {F32_ULP[name]} (+0.5 for the reference's rounding)"
            )
        # Correctly rounded: sqrtf, division (0 ulp), fabsf (exact).
        for col, want in ((4, np.sqrt(p)), (6, np.abs(x)), (7, x / y)):
            got = out[:, col]
            same = (got == want) | (np.isnan(got) & np.isnan(want))
            bad = np.flatnonzero(~same)
            assert bad.size == 0, f"column {col}: at {bad[:5]} got {got[bad[:5]]!r} want {want[bad[:5]]!r}"
            # the sign of zero too (fabsf(-0) = +0, 0/-7 = -0)
            assert np.array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)]))
    # Specials spelled out.
    assert out[0, 2] == 1.0 and out[7, 2] == np.inf and out[8, 2] == 0.0  # expf(0), expf(89), expf(-110)
    assert out[0, 3] == -np.inf and out[1, 3] == 0.0 and np.isnan(out[4, 3]) and out[5, 3] == np.inf
    assert out[0, 5] == np.inf and out[5, 5] == 0.0 and np.isnan(out[4, 5])  # rsqrtf(0), (inf), (-1)
    assert np.isnan(out[0, 7]) and out[2, 7] == np.inf and out[3, 7] == np.inf  # 0/0, 1/0, -1/-0
    assert out[1, 6] == 0.0 and not np.signbit(out[1, 6])  # fabsf(-0) = +0

    # double: sqrt and division are correctly rounded -> exact against Python/numpy.
    pd = np.concatenate([[0.0, 2.0, -1.0, np.inf, 1e-300, 1e300], 10.0 ** r.uniform(-300, 300, n - 6)])
    yd = np.concatenate([[3.0, -0.0, 7.0, 1e-300, 1e300, 3.0], r.standard_normal(n - 6) * 1e5])
    dpd, dyd, doutd = to_device(pd), to_device(yd), alloc(n * 16, fill=0xFF)
    launch(m.function("math_f64"), (ceil_div(n, 128),), (128,), [ptr(dpd), ptr(dyd), ptr(doutd), i32(n)])
    sync()
    outd = from_device(doutd, 2 * n, np.float64).reshape(n, 2)
    with np.errstate(all="ignore"):
        for col, want in ((0, np.sqrt(pd)), (1, pd / yd)):
            got = outd[:, col]
            same = (got == want) | (np.isnan(got) & np.isnan(want))
            bad = np.flatnonzero(~same)
            assert bad.size == 0, f"f64 column {col}: at {bad[:5]} got {got[bad[:5]]!r} want {want[bad[:5]]!r}"
    assert outd[0, 0] == 0.0 and math.isnan(outd[2, 0]) and outd[3, 0] == math.inf
    assert outd[0, 1] == 0.0 and outd[1, 1] == -math.inf and math.isinf(outd[3, 1])


HALF = """\
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void to_half(const float *x, unsigned short *h, unsigned short *bf, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        h[i] = __half_as_ushort(__float2half(x[i]));
        bf[i] = __bfloat16_as_ushort(__float2bfloat16(x[i]));
    }
}
extern "C" __global__ void from_half(const unsigned short *bits, float *hf, float *bff)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // all 65536 patterns
    hf[i] = __half2float(__ushort_as_half(bits[i]));
    bff[i] = __bfloat162float(__ushort_as_bfloat16(bits[i]));
}
"""


def test_math_fp16_bf16_conversions(kctx):
    # cuda_fp16.h / cuda_bf16.h come from the nvidia-cuda-runtime-cu12 wheel (kernels.py).
    m = load(HALF)
    specials = [
        0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, 1e6, -1e6, 1e-8, 6e-8, 5.96e-8, 2.98e-8,
        1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-8, 1 + 3 * 2**-8, 3.0e38, np.inf, -np.inf, np.nan,
        np.float32(1.0 + 2**-8 + 2**-20), 1e-40, -1e-45,
    ]
    r = rng(11)
    n = 4096
    x = np.concatenate([np.array(specials, np.float32), (r.standard_normal(n - len(specials)) * 10.0 ** r.integers(-8, 6, n - len(specials))).astype(np.float32)])
    dx, dh, dbf = to_device(x), alloc(n * 2, fill=0xFF), alloc(n * 2, fill=0xFF)
    launch(m.function("to_half"), (ceil_div(n, 256),), (256,), [ptr(dx), ptr(dh), ptr(dbf), i32(n)])
    sync()
    h = from_device(dh, n, np.uint16)
    bf = from_device(dbf, n, np.uint16)
    nan = np.isnan(x)
    # __float2half: round to nearest even (numpy's float32 -> float16 cast does the same).
    with np.errstate(all="ignore"):
        want_h = x.astype(np.float16).view(np.uint16)
    assert np.all(is_nan_f16_bits(h[nan]))
    bad = np.flatnonzero((h != want_h) & ~nan)
    assert bad.size == 0, f"__float2half({x[bad[:5]]!r}) = {h[bad[:5]]} want {want_h[bad[:5]]}"
    want_bf = bf16_bits_rne(x)
    assert np.all(is_nan_bf16_bits(bf[nan]))
    bad = np.flatnonzero((bf != want_bf) & ~nan)
    assert bad.size == 0, f"__float2bfloat16({x[bad[:5]]!r}) = {bf[bad[:5]]} want {want_bf[bad[:5]]}"
    assert h[6] == 0x7C00 and h[5] == 0x7BFF  # 65520 rounds (tie, to even) to inf; 65519.99 to max
    assert h[13] == 0x3C00 and h[14] == 0x3C02  # ties to even at 1 + 2^-11, 1 + 3*2^-11
    assert bf[15] == 0x3F80 and bf[16] == 0x3F82 and bf[21] == 0x3F81  # bf16 ties, and just above one
    assert h[1] == 0x8000 and bf[1] == 0x8000 and h[18] == 0x7C00 and bf[19] == 0xFF80  # -0, inf, -inf

    bits = np.arange(65536, dtype=np.uint16)
    dbits, dhf, dbff = to_device(bits), alloc(65536 * 4, fill=0xFF), alloc(65536 * 4, fill=0xFF)
    launch(m.function("from_half"), (256,), (256,), [ptr(dbits), ptr(dhf), ptr(dbff)])
    sync()
    hf = from_device(dhf, 65536, np.float32)
    bff = from_device(dbff, 65536, np.float32)
    want_hf = bits.view(np.float16).astype(np.float32)
    want_bff = (bits.astype(np.uint32) << 16).view(np.float32)
    for got, want, what in ((hf, want_hf, "__half2float"), (bff, want_bff, "__bfloat162float")):
        wnan = np.isnan(want)
        assert np.array_equal(np.isnan(got), wnan), what
        bad = np.flatnonzero((got.view(np.uint32) != want.view(np.uint32)) & ~wnan)
        assert bad.size == 0, f"{what} of bits {bits[bad[:5]]}: got {got[bad[:5]]!r} want {want[bad[:5]]!r}"


# ---------------------------------------------------------------------------------------
# Conversions and explicit rounding modes
# ---------------------------------------------------------------------------------------

CONV = """\
#define K 36
extern "C" __global__ void conv(const float *X, const double *D, const long long *L, unsigned long long *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = X[i];
    double d = D[i];
    long long l = L[i];
    float y = (float)d;
    unsigned long long *o = out + (size_t)i * K;
    o[0] = (unsigned int)__float2int_rn(x);
    o[1] = (unsigned int)__float2int_rz(x);
    o[2] = (unsigned int)__float2int_rd(x);
    o[3] = (unsigned int)__float2int_ru(x);
    o[4] = __float2uint_rz(x);
    o[5] = (unsigned long long)__float2ll_rz(x);
    o[6] = __float2ull_rz(x);
    o[7] = (unsigned int)__double2int_rz(d);
    o[8] = (unsigned long long)__double2ll_rz(d);
    o[9] = __double2ull_rz(d);
    o[10] = __float_as_uint(__ll2float_rn(l));
    o[11] = __float_as_uint(__ll2float_rz(l));
    o[12] = __float_as_uint(__ll2float_rd(l));
    o[13] = (unsigned long long)__double_as_longlong(__ll2double_rn(l));
    o[14] = __float_as_uint(__ull2float_ru((unsigned long long)l));
    o[15] = __float_as_uint(__double2float_rn(d));
    o[16] = __float_as_uint(__double2float_rz(d));
    o[17] = __float_as_uint(__double2float_ru(d));
    o[18] = __float_as_uint(__double2float_rd(d));
    o[19] = __float_as_uint(rintf(x));
    o[20] = __float_as_uint(roundf(x));
    o[21] = __float_as_uint(truncf(x));
    o[22] = __float_as_uint(floorf(x));
    o[23] = __float_as_uint(ceilf(x));
    o[24] = __float_as_uint(__fadd_rd(x, y));
    o[25] = __float_as_uint(__fadd_ru(x, y));
    o[26] = __float_as_uint(__fmul_rz(x, y));
    o[27] = __float_as_uint(__fmul_ru(x, y));
    o[28] = __float_as_uint(__fdiv_rd(x, y));
    o[29] = __float_as_uint(__fsqrt_ru(fabsf(x)));
    o[30] = __float_as_uint(__fmaf_rz(x, y, 1.0f));
    o[31] = (unsigned long long)__double_as_longlong(__dadd_rz(d, (double)x));
    o[32] = (unsigned long long)__double_as_longlong(__dmul_rd(d, (double)x));
    o[33] = (unsigned long long)__double_as_longlong(__ddiv_ru(d, (double)x));
    o[34] = __float_as_uint(fminf(x, y));
    o[35] = __float_as_uint(fmaxf(x, y));
}
"""

_FMT = {np.float32: (24, 128), np.float64: (53, 1024)}  # (precision, emax + 1)


def _round_frac(fr, mode, dtype, zero=0.0):
    """The exact rational `fr` rounded to `dtype` ('rn' ties to even, 'rz', 'rd', 'ru'),
    with IEEE overflow: rn -> inf past max + half an ulp, rz -> max, rd/ru by direction.
    An exact zero gives `zero` (its sign depends on the operation)."""
    p, top = _FMT[dtype]
    if fr == 0:
        return zero
    neg = fr < 0
    a = -fr if neg else fr
    # Floor of |fr| in the format: exponent e with 2^e <= a < 2^(e+1), ulp 2^(e-p+1),
    # subnormals: ulp never below 2^(2 - top - p + 1 - 1) = the minimum subnormal.
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    min_e = 2 - top  # exponent of the smallest normal (-126 / -1022)
    ulp = Fraction(2) ** (max(e, min_e) - p + 1)
    lo = (a // ulp) * ulp
    hi = lo if lo == a else lo + ulp
    big = Fraction(2) ** top  # stands for infinity
    maxv = big - Fraction(2) ** (top - p)
    if mode == "rn":
        if lo == hi:
            r = lo
        else:
            mid = (lo + hi) / 2
            r = lo if a < mid else hi if a > mid else (lo if (lo / ulp) % 2 == 0 else hi)
        r = big if r >= big else r
    else:
        toward_zero = mode == "rz" or (mode == "rd" and not neg) or (mode == "ru" and neg)
        r = lo if toward_zero else hi
        if r >= big:
            r = maxv if toward_zero else big
        elif r > maxv:
            r = maxv if toward_zero else big
    v = math.inf if r >= big else float(r)
    return -v if neg else v


def _bits(v, dtype):
    return int(np.array(v, dtype=dtype).view(np.uint32 if dtype == np.float32 else np.uint64))


def _f2i(v, mode, bits, signed, nan_value):
    if math.isnan(v):
        return nan_value
    if math.isinf(v):
        q = v
    else:
        fv = Fraction(v)
        q = {"rn": round(fv), "rz": math.trunc(fv), "rd": math.floor(fv), "ru": math.ceil(fv)}[mode]
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    q = lo if q < lo else hi if q > hi else int(q)
    return q & ((1 << bits) - 1)


def _sum_zero(a, b, mode):
    """IEEE sign of an exact zero sum a + b: -0 when rounding down, unless both are +0;
    the common sign when both are zeros of one sign; else +0."""
    if a == 0 and b == 0 and math.copysign(1, a) == math.copysign(1, b):
        return a
    return -0.0 if mode == "rd" else 0.0


def _prod_zero(a, b):
    return -0.0 if (math.copysign(1, a) < 0) != (math.copysign(1, b) < 0) else 0.0


def _conv_ref(x, d, l):
    x, d = float(x), float(d)
    with np.errstate(over="ignore"):
        y = float(np.float32(d))  # (float)d: round to nearest, overflow to inf
    o = [None] * 36
    o[0], o[1], o[2], o[3] = (_f2i(x, m, 32, True, 0) for m in ("rn", "rz", "rd", "ru"))
    o[4] = _f2i(x, "rz", 32, False, 0)
    o[5] = _f2i(x, "rz", 64, True, 1 << 63)  # NaN to a 64-bit integer: 1 << 63 (PTX cvt)
    o[6] = _f2i(x, "rz", 64, False, 1 << 63)
    o[7] = _f2i(d, "rz", 32, True, 1 << 31)  # NaN from f64: 1 << 31
    o[8] = _f2i(d, "rz", 64, True, 1 << 63)
    o[9] = _f2i(d, "rz", 64, False, 1 << 63)
    o[10], o[11], o[12] = (_bits(_round_frac(Fraction(l), m, np.float32), np.float32) for m in ("rn", "rz", "rd"))
    o[13] = _bits(_round_frac(Fraction(l), "rn", np.float64), np.float64)
    o[14] = _bits(_round_frac(Fraction(l & M64), "ru", np.float32), np.float32)
    for k, m in zip((15, 16, 17, 18), ("rn", "rz", "ru", "rd")):
        o[k] = "nan" if math.isnan(d) else _bits(d if math.isinf(d) else _round_frac(Fraction(d), m, np.float32), np.float32)
    with np.errstate(all="ignore"):
        x32 = np.float32(x)
        o[19] = _bits(np.rint(x32), np.float32)
        o[20] = _bits(np.float32(math.copysign(math.floor(abs(x) + 0.5), x)) if math.isfinite(x) and abs(x) < 2**23 else x32, np.float32)
        o[21], o[22], o[23] = (_bits(f(x32), np.float32) for f in (np.trunc, np.floor, np.ceil))
    fin = math.isfinite(x) and math.isfinite(y)
    if fin:
        fx, fy = Fraction(x), Fraction(y)
        o[24] = _bits(_round_frac(fx + fy, "rd", np.float32, _sum_zero(x, y, "rd")), np.float32)
        o[25] = _bits(_round_frac(fx + fy, "ru", np.float32, _sum_zero(x, y, "ru")), np.float32)
        o[26] = _bits(_round_frac(fx * fy, "rz", np.float32, _prod_zero(x, y)), np.float32)
        o[27] = _bits(_round_frac(fx * fy, "ru", np.float32, _prod_zero(x, y)), np.float32)
        if y != 0:
            o[28] = _bits(_round_frac(fx / fy, "rd", np.float32, _prod_zero(x, y)), np.float32)
        o[30] = _bits(_round_frac(fx * fy + 1, "rz", np.float32), np.float32)
    if math.isfinite(x):
        # sqrt rounded up: the least float r with r*r >= |x|
        ax = Fraction(abs(x))
        r = np.float32(math.sqrt(abs(x)))
        while Fraction(float(r)) ** 2 < ax:
            r = np.nextafter(r, np.float32(np.inf))
        while float(r) > 0 and Fraction(float(np.nextafter(r, np.float32(0)))) ** 2 >= ax:
            r = np.nextafter(r, np.float32(0))
        o[29] = _bits(r, np.float32)
    if math.isfinite(x) and math.isfinite(d):
        fx, fd = Fraction(x), Fraction(d)
        o[31] = _bits(_round_frac(fd + fx, "rz", np.float64, _sum_zero(d, x, "rz")), np.float64)
        o[32] = _bits(_round_frac(fd * fx, "rd", np.float64, _prod_zero(d, x)), np.float64)
        if x != 0:
            o[33] = _bits(_round_frac(fd / fx, "ru", np.float64, _prod_zero(d, x)), np.float64)
    if not (math.isnan(x) and math.isnan(y)):
        o[34] = ("min", x, y)
        o[35] = ("max", x, y)
    return o


def test_conversions_and_rounding_modes(kctx):
    fn = load(CONV).function("conv")
    xs = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 1e10, -1e10, 3e9, -3e9, 2147483520.0,
          2147483648.0, -2147483648.0, 4294967040.0, 4294967296.0, 9.3e18, -9.3e18, 1.8e19, 2e19, math.nan,
          math.inf, -math.inf, 1e-40, -0.0, 8388607.5, -8388607.5, 3.0e38, 1e-30]
    ds = [math.nan, math.inf, -math.inf, 2147483647.5, 2147483648.0, -2147483648.5, -2147483649.0, 9.3e18,
          9.223372036854775807e18, -9.3e18, 1.9e19, 3.4028235677973366e38, 3.4028234663852886e38, -3.5e38, 1e-46,
          0.1, -0.1, 1 / 3, 2.0**-149 * 1.5, -(2.0**-149) * 0.5, 1e30, 7.0, -3.0, 0.0, 1e-30, 6.0, 1.1, 1e38,
          -1e-39, 5e-324]
    ls = [0, 1, -1, (1 << 24) + 1, (1 << 53) + 1, (1 << 63) - 1, -(1 << 63), (1 << 62) + 12345, -(1 << 40) - 3,
          16777217, -16777217, (1 << 25) + 3, -((1 << 25) + 3), 123456789, (1 << 54) - 1]
    r = rng(14)
    n = 256
    xr = (r.standard_normal(n) * 10.0 ** r.integers(-5, 12, n)).astype(np.float32)
    dr = r.standard_normal(n) * 10.0 ** r.integers(-40, 40, n)
    lr = r.integers(-(1 << 63), 1 << 63, n, dtype=np.int64) >> r.integers(0, 63, n)
    x = xr.copy()
    x[: len(xs)] = xs
    d = dr.copy()
    d[: len(ds)] = ds
    lv = lr.copy()
    lv[: len(ls)] = ls
    dx, dd, dl, dout = to_device(x), to_device(d), to_device(lv), alloc(n * 36 * 8, fill=0xFF)
    launch(fn, (ceil_div(n, 64),), (64,), [ptr(dx), ptr(dd), ptr(dl), ptr(dout), i32(n)])
    sync()
    out = from_device(dout, n * 36, np.uint64).reshape(n, 36)
    names = ["f2i_rn", "f2i_rz", "f2i_rd", "f2i_ru", "f2ui_rz", "f2ll_rz", "f2ull_rz", "d2i_rz", "d2ll_rz",
             "d2ull_rz", "ll2f_rn", "ll2f_rz", "ll2f_rd", "ll2d_rn", "ull2f_ru", "d2f_rn", "d2f_rz", "d2f_ru",
             "d2f_rd", "rintf", "roundf", "truncf", "floorf", "ceilf", "fadd_rd", "fadd_ru", "fmul_rz", "fmul_ru",
             "fdiv_rd", "fsqrt_ru", "fmaf_rz", "dadd_rz", "dmul_rd", "ddiv_ru", "fminf", "fmaxf"]
    failures = []
    for i in range(n):
        want = _conv_ref(x[i], d[i], int(lv[i]))
        for j, w in enumerate(want):
            g = int(out[i, j])
            if w is None:
                continue
            if w == "nan":
                ok = math.isnan(float(np.array(g, np.uint32).view(np.float32)))
            elif isinstance(w, tuple):
                op, a, b = w
                gv = float(np.array(g & M32, np.uint32).view(np.float32))
                wv = float(np.fmin(np.float32(a), np.float32(b)) if op == "min" else np.fmax(np.float32(a), np.float32(b)))
                ok = gv == wv
                w = wv
            else:
                ok = g == w
            if not ok:
                failures.append(f"{names[j]}(x={x[i]!r}, d={d[i]!r}, l={int(lv[i])}): got {g:#x}, want {w if isinstance(w, float) else hex(w)}")
    if os.environ.get("KERNELS_DEBUG"):
        print("\n".join(failures))
    assert not failures, f"{len(failures)} wrong:\n" + "\n".join(failures[:30])


# ---------------------------------------------------------------------------------------
# Integer operations
# ---------------------------------------------------------------------------------------

INTOPS = """\
#define K 32
extern "C" __global__ void intops(const long long *A, const long long *B, unsigned long long *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long a = A[i], b = B[i];
    unsigned long long ua = a, ub = b;
    int a32 = (int)a, b32 = (int)b;
    unsigned int ua32 = (unsigned int)a, ub32 = (unsigned int)b;
    unsigned long long *o = out + (size_t)i * K;
    bool sdiv_ok = b != 0 && !(a == (-9223372036854775807LL - 1) && b == -1);
    bool sdiv32_ok = b32 != 0 && !(a32 == (-2147483647 - 1) && b32 == -1);
    o[0] = ua * ub;
    o[1] = sdiv_ok ? (unsigned long long)(a / b) : 0xdeadull;
    o[2] = sdiv_ok ? (unsigned long long)(a % b) : 0xdeadull;
    o[3] = ub ? ua / ub : 0xbeefull;
    o[4] = ub ? ua % ub : 0xbeefull;
    o[5] = ua << (b & 63);
    o[6] = ua >> (b & 63);
    o[7] = (unsigned long long)(a >> (b & 63));
    o[8] = (unsigned long long)min(a, b);
    o[9] = (unsigned long long)max(a, b);
    o[10] = min(ua, ub);
    o[11] = max(ua, ub);
    o[12] = __popcll(ua);
    o[13] = __clzll(a);
    o[14] = __brevll(ua);
    o[15] = __popc(ua32);
    o[16] = __clz(a32);
    o[17] = __brev(ua32);
    o[18] = (a < b) | ((ua < ub) << 1) | ((a32 < b32) << 2) | ((ua32 < ub32) << 3)
          | ((a <= b) << 4) | ((a == b) << 5) | ((ua >= ub) << 6) | ((a32 > b32) << 7) | ((ua32 != ub32) << 8);
    o[19] = (a < b) ? (ua ^ 0x5555555555555555ull) : (ub + 7);
    o[20] = __umul64hi(ua, ub);
    o[21] = (unsigned long long)__mul64hi(a, b);
    o[22] = (unsigned int)(ua32 * ub32);
    o[23] = __umulhi(ua32, ub32);
    o[24] = (unsigned long long)(long long)(sdiv32_ok ? a32 / b32 : 0xdead);
    o[25] = (unsigned long long)(long long)(sdiv32_ok ? a32 % b32 : 0xdead);
    o[26] = ub32 ? ua32 / ub32 : 0xbeefu;
    o[27] = (unsigned long long)(long long)(a32 >> (b32 & 31));
    o[28] = (unsigned long long)(long long)min(a32, b32) ^ ((unsigned long long)max(ua32, ub32) << 32);
    o[29] = (unsigned long long)(a * 7 - b);
    o[30] = (unsigned long long)ua32 + ub32;
    o[31] = (unsigned long long)(long long)__mulhi(a32, b32) ^ ((unsigned long long)__ffsll(a) << 40);
}
"""

M64 = (1 << 64) - 1
M32 = (1 << 32) - 1


def _s64(v):
    v &= M64
    return v - (1 << 64) if v >> 63 else v


def _s32(v):
    v &= M32
    return v - (1 << 32) if v >> 31 else v


def _tdiv(a, b):  # C division truncates toward zero; remainder has the dividend's sign
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _brev(v, bits):
    return int(format(v, f"0{bits}b")[::-1], 2)


def _clz(v, bits):
    return bits - v.bit_length()


def _intops_ref(a, b):
    ua, ub = a & M64, b & M64
    a32, b32 = _s32(a), _s32(b)
    ua32, ub32 = a & M32, b & M32
    sdiv_ok = b != 0 and not (a == -(1 << 63) and b == -1)
    sdiv32_ok = b32 != 0 and not (a32 == -(1 << 31) and b32 == -1)
    o = [0] * 32
    o[0] = ua * ub
    o[1] = _tdiv(a, b) if sdiv_ok else 0xDEAD
    o[2] = a - b * _tdiv(a, b) if sdiv_ok else 0xDEAD
    o[3] = ua // ub if ub else 0xBEEF
    o[4] = ua % ub if ub else 0xBEEF
    s = b & 63
    o[5] = ua << s
    o[6] = ua >> s
    o[7] = a >> s
    o[8], o[9] = min(a, b), max(a, b)
    o[10], o[11] = min(ua, ub), max(ua, ub)
    o[12] = bin(ua).count("1")
    o[13] = _clz(ua, 64)
    o[14] = _brev(ua, 64)
    o[15] = bin(ua32).count("1")
    o[16] = _clz(ua32, 32)
    o[17] = _brev(ua32, 32)
    o[18] = (
        (a < b) | (ua < ub) << 1 | (a32 < b32) << 2 | (ua32 < ub32) << 3 | (a <= b) << 4 | (a == b) << 5
        | (ua >= ub) << 6 | (a32 > b32) << 7 | (ua32 != ub32) << 8
    )
    o[19] = (ua ^ 0x5555555555555555) if a < b else ub + 7
    o[20] = (ua * ub) >> 64
    o[21] = (a * b) >> 64
    o[22] = (ua32 * ub32) & M32
    o[23] = (ua32 * ub32) >> 32
    o[24] = _tdiv(a32, b32) if sdiv32_ok else 0xDEAD
    o[25] = a32 - b32 * _tdiv(a32, b32) if sdiv32_ok else 0xDEAD
    o[26] = ua32 // ub32 if ub32 else 0xBEEF
    o[27] = a32 >> (b32 & 31)
    o[28] = (min(a32, b32) & M64) ^ (max(ua32, ub32) << 32)
    o[29] = a * 7 - b
    o[30] = ua32 + ub32
    ffs = (ua & -ua).bit_length()  # 1-based index of the least significant set bit, 0 if none
    o[31] = (((a32 * b32) >> 32) & M64) ^ (ffs << 40)
    return [v & M64 for v in o]


def _int_pairs():
    edges = [0, 1, -1, 2, -2, 3, 7, -7, 31, 32, 63, 64, 65, (1 << 31) - 1, -(1 << 31), (1 << 32) - 1, 1 << 32,
             (1 << 63) - 1, -(1 << 63), 0x123456789ABCDEF0, -0x0FEDCBA987654321, 1000000007]
    edges = [_s64(e) for e in edges]
    pairs = [(a, b) for a in edges for b in edges]
    r = rng(12)
    while len(pairs) < 768:  # random values of every magnitude and sign
        a, b = (int(v) >> int(s) for v, s in zip(r.integers(-(1 << 63), 1 << 63, 2, dtype=np.int64), r.integers(0, 63, 2)))
        pairs.append((a, b))
    return pairs


def test_integer_ops(kctx):
    fn = load(INTOPS).function("intops")
    pairs = _int_pairs()
    n = len(pairs)
    A = np.array([a for a, _ in pairs], np.int64)
    B = np.array([b for _, b in pairs], np.int64)
    dA, dB, dout = to_device(A), to_device(B), alloc(n * 32 * 8, fill=0xFF)
    launch(fn, (ceil_div(n, 128),), (128,), [ptr(dA), ptr(dB), ptr(dout), i32(n)])
    sync()
    out = from_device(dout, n * 32, np.uint64).reshape(n, 32)
    names = ["mul", "sdiv", "srem", "udiv", "urem", "shl", "shr.u", "shr.s", "min.s", "max.s", "min.u", "max.u",
             "popcll", "clzll", "brevll", "popc", "clz", "brev", "compares", "selp", "umul64hi", "mul64hi",
             "mul.lo.u32", "umulhi", "div.s32", "rem.s32", "div.u32", "shr.s32", "min.s32/max.u32", "a*7-b",
             "u32+u32 widened", "mulhi/ffsll"]
    failures = []
    for i, (a, b) in enumerate(pairs):
        want = _intops_ref(a, b)
        got = [int(v) for v in out[i]]
        for j in range(32):
            if got[j] != want[j]:
                failures.append(f"{names[j]}(a={a:#x}, b={b:#x}): got {got[j]:#x} want {want[j]:#x}")
    assert not failures, f"{len(failures)} wrong results:\n" + "\n".join(failures[:25])


FUNNEL = """\
extern "C" __global__ void funnel(const unsigned int *X, const unsigned int *Y, const unsigned int *S,
                                  unsigned int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int x = X[i], y = Y[i], s = S[i];
    unsigned int *o = out + 6 * i;
    o[0] = __funnelshift_l(x, y, s);
    o[1] = __funnelshift_lc(x, y, s);
    o[2] = __funnelshift_r(x, y, s);
    o[3] = __funnelshift_rc(x, y, s);
    o[4] = __byte_perm(x, y, s & 0x7777u);  // 3-bit selectors: bit 3 of each nibble unused
    o[5] = (x << (s & 31)) | (x >> ((32 - (s & 31)) & 31));  // rotate idiom
}
"""


def test_integer_funnelshift_byte_perm(kctx):
    fn = load(FUNNEL).function("funnel")
    r = rng(13)
    n = 512
    x = r.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    y = r.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    s = r.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    s[:70] = np.arange(70)  # every shift amount 0..69: wrap (& 31) versus clamp (min 32)
    dx, dy, ds, dout = to_device(x), to_device(y), to_device(s), alloc(n * 6 * 4, fill=0xFF)
    launch(fn, (ceil_div(n, 128),), (128,), [ptr(dx), ptr(dy), ptr(ds), ptr(dout), i32(n)])
    sync()
    out = from_device(dout, n * 6, np.uint32).reshape(n, 6)
    failures = []
    for i in range(n):
        xi, yi, si = int(x[i]), int(y[i]), int(s[i])
        pair = (yi << 32) | xi  # hi:lo
        sel = si & 0x7777
        want = [
            ((pair << (si & 31)) >> 32) & M32,  # the high word of hi:lo << (s & 31)
            ((pair << min(si, 32)) >> 32) & M32,
            (pair >> (si & 31)) & M32,  # the low word of hi:lo >> (s & 31)
            (pair >> min(si, 32)) & M32,
            sum(((pair >> (8 * ((sel >> (4 * k)) & 7))) & 0xFF) << (8 * k) for k in range(4)),
            ((xi << (si & 31)) | (xi >> ((32 - (si & 31)) & 31))) & M32,
        ]
        for j, name in enumerate(["funnelshift_l", "funnelshift_lc", "funnelshift_r", "funnelshift_rc", "byte_perm", "rotate"]):
            if int(out[i, j]) != want[j]:
                failures.append(f"{name}({xi:#x}, {yi:#x}, {si:#x}) = {int(out[i, j]):#x}, want {want[j]:#x}")
    assert not failures, f"{len(failures)} wrong:\n" + "\n".join(failures[:20])


# ---------------------------------------------------------------------------------------
# Illegal address: sticky in its context, other contexts unaffected
# ---------------------------------------------------------------------------------------


POKE = 'extern "C" __global__ void poke(int *p, unsigned long long idx, int v) { p[idx] = v; }'


def test_illegal_address_is_sticky_and_contained(py_subprocess):
    ptx = compile_ptx(POKE)
    out = py_subprocess(
        f"""
        import sys
        sys.path.insert(0, {HERE!r})
        import numpy as np
        from cuda.bindings import driver as d
        from kernels import ptr, u64, i32, launch
        import ctypes
        R = d.CUresult
        ptx = {ptx!r}
        assert d.cuInit(0) == (R.CUDA_SUCCESS,)
        err, dev = d.cuDeviceGet(0); assert err == R.CUDA_SUCCESS
        err, a = d.cuCtxCreate(0, dev); assert err == R.CUDA_SUCCESS, err
        err, mod = d.cuModuleLoadData(ptx); assert err == R.CUDA_SUCCESS, err
        err, fn = d.cuModuleGetFunction(mod, b"poke"); assert err == R.CUDA_SUCCESS, err
        err, p = d.cuMemAlloc(256); assert err == R.CUDA_SUCCESS, err
        # In bounds first: the kernel works.
        launch(fn, (1,), (1,), [ptr(p), u64(3), i32(41)])
        assert d.cuCtxSynchronize() == (R.CUDA_SUCCESS,)
        # Index 1<<20 of an int array: 4 MiB past a 256-byte allocation.
        args = [ptr(p), u64(1 << 20), i32(1)]
        params = (ctypes.c_void_p * 3)(*[ctypes.addressof(x) for x in args])
        (err,) = d.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, ctypes.addressof(params), 0)
        assert err == R.CUDA_SUCCESS, ("launch itself is asynchronous", err)
        (err,) = d.cuCtxSynchronize()
        assert err == R.CUDA_ERROR_ILLEGAL_ADDRESS, err
        # Sticky: every later call in this context reports it.
        err, _ = d.cuMemAlloc(256)
        assert err == R.CUDA_ERROR_ILLEGAL_ADDRESS, err
        assert d.cuCtxSynchronize() == (R.CUDA_ERROR_ILLEGAL_ADDRESS,)
        host = np.zeros(64, np.int32)
        (err,) = d.cuMemcpyDtoH(host.ctypes.data, p, 256)
        assert err == R.CUDA_ERROR_ILLEGAL_ADDRESS, err
        # Another context on the same device, same process, is unaffected.
        err, b = d.cuCtxCreate(0, dev); assert err == R.CUDA_SUCCESS, err
        err, mod2 = d.cuModuleLoadData(ptx); assert err == R.CUDA_SUCCESS, err
        err, fn2 = d.cuModuleGetFunction(mod2, b"poke"); assert err == R.CUDA_SUCCESS, err
        err, q = d.cuMemAlloc(256); assert err == R.CUDA_SUCCESS, err
        src = np.arange(64, dtype=np.int32)
        assert d.cuMemcpyHtoD(q, src.ctypes.data, 256) == (R.CUDA_SUCCESS,)
        launch(fn2, (1,), (1,), [ptr(q), u64(10), i32(-5)])
        assert d.cuCtxSynchronize() == (R.CUDA_SUCCESS,)
        assert d.cuMemcpyDtoH(host.ctypes.data, q, 256) == (R.CUDA_SUCCESS,)
        want = src.copy(); want[10] = -5
        assert host.tolist() == want.tolist(), host
        # ... and the faulted one is still faulted.
        assert d.cuCtxSetCurrent(a) == (R.CUDA_SUCCESS,)
        err, _ = d.cuMemAlloc(256)
        assert err == R.CUDA_ERROR_ILLEGAL_ADDRESS, err
        assert d.cuCtxSetCurrent(b) == (R.CUDA_SUCCESS,)
        err, _ = d.cuMemAlloc(256)
        assert err == R.CUDA_SUCCESS, err
        print("ok")
        """,
        timeout=120,
    )
    assert out.strip().endswith("ok")


# ---------------------------------------------------------------------------------------
# Time: %globaltimer spin, __nanosleep
# ---------------------------------------------------------------------------------------

TIMED = """\
__device__ __forceinline__ unsigned long long globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
extern "C" __global__ void spin(unsigned long long ns, unsigned long long *out)
{
    unsigned long long t0 = globaltimer(), t;
    unsigned long long iters = 0;
    do { t = globaltimer(); ++iters; } while (t - t0 < ns);
    out[0] = t0; out[1] = t; out[2] = iters;
}
extern "C" __global__ void nap_until(unsigned long long ns, unsigned long long *out)
{
    unsigned long long t0 = globaltimer(), t;
    unsigned long long iters = 0;
    do { __nanosleep(100000); t = globaltimer(); ++iters; } while (t - t0 < ns);
    out[0] = t0; out[1] = t; out[2] = iters;
}
extern "C" __global__ void nap_count(unsigned int count, unsigned long long *out)
{
    unsigned long long t0 = globaltimer();
    for (unsigned int i = 0; i < count; ++i) __nanosleep(1000000);
    out[0] = t0; out[1] = globaltimer(); out[2] = count;
}
"""


def _timed_launch(cuda, fn, args):
    s = check(cuda.cuStreamCreate(0))
    e0, e1 = check(cuda.cuEventCreate(0)), check(cuda.cuEventCreate(0))
    try:
        t0 = time.perf_counter()
        check(cuda.cuEventRecord(e0, s))
        launch(fn, (1,), (1,), args, stream=s)
        check(cuda.cuEventRecord(e1, s))
        check(cuda.cuEventSynchronize(e1))
        wall = time.perf_counter() - t0
        return check(cuda.cuEventElapsedTime(e0, e1)), wall
    finally:
        check(cuda.cuEventDestroy(e0))
        check(cuda.cuEventDestroy(e1))
        check(cuda.cuStreamDestroy(s))


def test_globaltimer_spin_50ms(kctx, cuda):
    fn = load(TIMED).function("spin")
    dout = alloc(24, fill=0)
    ms, wall = _timed_launch(cuda, fn, [u64(50_000_000), ptr(dout)])
    t0, t1, iters = (int(v) for v in from_device(dout, 3, np.uint64))
    assert t1 - t0 >= 50_000_000 and iters >= 2
    assert 50.0 <= ms < 2000.0, ms  # the events bracket the whole kernel
    assert 0.050 <= wall < 2.0, wall
    # %globaltimer is nanoseconds since an epoch; the span it measured fits in the events'.
    assert (t1 - t0) / 1e6 <= ms + 1.0


def test_nanosleep(kctx, cuda):
    m = load(TIMED)
    dout = alloc(24, fill=0)
    # __nanosleep(t) sleeps "approximately" t ns, anywhere in [0, 2t]: only a loop on the
    # timer gives a lower bound.
    ms, wall = _timed_launch(cuda, m.function("nap_until"), [u64(20_000_000), ptr(dout)])
    t0, t1, iters = (int(v) for v in from_device(dout, 3, np.uint64))
    assert t1 - t0 >= 20_000_000 and iters >= 1
    assert 20.0 <= ms < 2000.0 and wall < 2.0, (ms, wall)
    # Upper bound: 20 sleeps of 1 ms (the documented maximum) take at most ~2 * 20 ms.
    ms, wall = _timed_launch(cuda, m.function("nap_count"), [u32(20), ptr(dout)])
    t0, t1, count = (int(v) for v in from_device(dout, 3, np.uint64))
    assert count == 20 and t1 >= t0
    assert ms < 500.0 and wall < 2.0, (ms, wall)


# ---------------------------------------------------------------------------------------
# Device printf: kept per context, written at the flush points CUDA documents
# ---------------------------------------------------------------------------------------


def test_printf_is_written_at_cudas_flush_points():
    """printf_checks.py (its docstring lists the checks) on the simulator, in a process of its own
    (it points its file descriptor 1 at a file); pool-daemon/tests/device_printf.rs runs the same
    script under `gpupool run`."""
    import subprocess
    import sys

    from conftest import subprocess_env

    script = os.path.join(HERE, "printf_checks.py")
    out = subprocess.run([sys.executable, script], env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "SUMMARY 14/14" in out.stdout, out.stdout + out.stderr
