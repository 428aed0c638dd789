"""CuPy through the pool, checked against NumPy (run by pool-daemon/tests/cupy.rs under
`gpupool run`, with CuPy 12 from target/venv-cupy). Prints `PASS name` / `FAIL name: why`
per check and `SUMMARY passed/total`; exits non-zero on any failure.

Usage: cupy_checks.py QUOTA_MIB
"""

import sys
import traceback

import numpy as np

results = []


def check(name, fn):
    try:
        ok, detail = fn()
    except Exception as e:  # a CUDA error surfaces as an exception: that is a failure
        ok, detail = False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
    results.append(ok)
    print(f"PASS {name}" if ok else f"FAIL {name}: {detail}", flush=True)


def same(got, want, atol=1e-6):
    got = got.get() if hasattr(got, "get") else got
    if got.shape != want.shape:
        return False, f"shape {got.shape} != {want.shape}"
    if np.issubdtype(want.dtype, np.floating):
        ok = np.allclose(got, want, rtol=1e-5, atol=atol)
    else:
        ok = np.array_equal(got, want)
    return ok, "" if ok else f"max diff {np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))}"


quota_mib = int(sys.argv[1])
import cupy as cp  # noqa: E402  (after argv: an import failure is reported by the harness)

rng = np.random.default_rng(7)
h_f = rng.standard_normal((257, 129)).astype(np.float32)
h_i = rng.integers(-1000, 1000, size=100_003, dtype=np.int64)

# --- the device as the tenant sees it ---
check("device_count", lambda: (cp.cuda.runtime.getDeviceCount() == 2, "want 2 pooled devices"))
check(
    "runtime_is_cuda_12",
    lambda: (12000 <= cp.cuda.runtime.runtimeGetVersion() < 13000, cp.cuda.runtime.runtimeGetVersion()),
)
free, total = cp.cuda.runtime.memGetInfo()
check("mem_total_is_the_quota", lambda: (total == quota_mib << 20, f"total {total}"))

# --- array creation and copies ---
d_f = cp.asarray(h_f)
check("asarray_roundtrip_float32_2d", lambda: same(d_f, h_f))
check("asarray_roundtrip_int64", lambda: same(cp.asarray(h_i), h_i))
check("arange", lambda: same(cp.arange(10_000, dtype=cp.int32), np.arange(10_000, dtype=np.int32)))
check("zeros_ones_full", lambda: same(cp.zeros(5000) + cp.ones(5000) + cp.full(5000, 2.5), np.full(5000, 3.5)))
check("slice_copy", lambda: same(d_f[3:200:2, 7:100].copy(), h_f[3:200:2, 7:100]))
check("transpose_contiguous", lambda: same(cp.ascontiguousarray(d_f.T), np.ascontiguousarray(h_f.T)))
d_copy = cp.empty_like(d_f)
d_copy[...] = d_f
check("device_to_device", lambda: same(d_copy, h_f))
check("asnumpy", lambda: same(cp.asnumpy(d_f), h_f))
with cp.cuda.Device(1):
    on1 = cp.asarray(h_i[:1000])
    check("second_device", lambda: same(on1 * 2, h_i[:1000] * 2))

# --- elementwise arithmetic ---
h_a, h_b = h_f, rng.standard_normal((257, 129)).astype(np.float32)
d_a, d_b = cp.asarray(h_a), cp.asarray(h_b)
check("a_times_b_plus_1", lambda: same(d_a * d_b + 1, h_a * h_b + 1))
check("sin_exp", lambda: same(cp.sin(d_a) + cp.exp(d_b / 4), np.sin(h_a) + np.exp(h_b / 4)))
check("broadcast_row", lambda: same(d_a - d_a[0], h_a - h_a[0]))
check("integer_ops", lambda: same((cp.asarray(h_i) * 3) // 7 % 5, (h_i * 3) // 7 % 5))
check("where", lambda: same(cp.where(d_a > 0, d_a, -d_b), np.where(h_a > 0, h_a, -h_b)))

# --- reductions (float32 sums in another order than NumPy's: the tolerance is what
# rounding over a few hundred terms of magnitude ~1 can give) ---
R_ATOL = 1e-4
check("sum_float", lambda: same(cp.asarray(float(d_a.sum())), np.asarray(float(h_a.sum())), atol=1e-2))
check("sum_int", lambda: (int(cp.asarray(h_i).sum()) == int(h_i.sum()), f"{int(cp.asarray(h_i).sum())}"))
check("max_min", lambda: (float(d_a.max()) == float(h_a.max()) and float(d_a.min()) == float(h_a.min()), ""))
check("sum_axis0", lambda: same(d_a.sum(axis=0), h_a.sum(axis=0), atol=R_ATOL))
check("mean_axis1", lambda: same(d_a.mean(axis=1), h_a.mean(axis=1), atol=R_ATOL))
check("argmax", lambda: (int(d_a.argmax()) == int(h_a.argmax()), f"{int(d_a.argmax())} != {int(h_a.argmax())}"))

# --- user kernels ---
saxpy = cp.ElementwiseKernel("float32 x, float32 y, float32 a", "float32 z", "z = a * x + y", "gpupool_saxpy")
check("elementwise_kernel", lambda: same(saxpy(d_a, d_b, np.float32(2.5)), 2.5 * h_a + h_b))
sq_sum = cp.ReductionKernel("float32 x", "float32 y", "x * x", "a + b", "y = a", "0", "gpupool_sq_sum")
check(
    "reduction_kernel",
    lambda: same(cp.asarray(float(sq_sum(d_a))), np.asarray(float((h_a * h_a).sum())), atol=1e-1),
)
raw = cp.RawKernel(
    r"""
extern "C" __global__ void gpupool_scale_rows(const float* x, float* y, int rows, int cols) {
    int r = blockIdx.x, c = threadIdx.x;
    for (; c < cols; c += blockDim.x) y[r * cols + c] = x[r * cols + c] * (r + 1);
}""",
    "gpupool_scale_rows",
)
d_out = cp.empty_like(d_a)
raw((h_a.shape[0],), (64,), (d_a, d_out, np.int32(h_a.shape[0]), np.int32(h_a.shape[1])))
check("raw_kernel", lambda: same(d_out, h_a * np.arange(1, h_a.shape[0] + 1, dtype=np.float32)[:, None]))

# --- a CUDA graph captured on two streams: forked to a second stream with an event and joined
# back, as multi-stream code captures; replayed with new inputs ---
def graph_fork_join():
    main, side = cp.cuda.Stream(), cp.cuda.Stream()
    x, y, z, out = (cp.empty_like(d_a) for _ in range(4))
    scale = cp.ElementwiseKernel("float32 x, float32 a", "float32 y", "y = a * x", "gpupool_scale")
    # Compiled and loaded before the capture (module loads are not stream work).
    scale(d_a, np.float32(1), y)
    saxpy(d_a, d_a, np.float32(1), out)
    cp.cuda.Device(0).synchronize()
    main.begin_capture()
    with main:
        scale(x, np.float32(2), y)
        side.wait_event(main.record())
        with side:
            side_capturing = side.is_capturing()
            scale(x, np.float32(-3), z)
        main.wait_event(side.record())
        saxpy(y, z, np.float32(0.5), out)  # 0.5 * 2x + (-3x) = -2x
    graph = main.end_capture()
    if not side_capturing or side.is_capturing():
        return False, f"the side stream's capture: during {side_capturing}, after {side.is_capturing()}"
    for k in range(3):
        h = h_a * (k + 1)
        x.set(h)
        graph.launch(stream=main)
        main.synchronize()
        ok, why = same(out, -2 * h)
        if not ok:
            return False, f"replay {k}: {why}"
    return True, ""


check("graph_captured_on_two_streams", graph_fork_join)

# --- CuPy's memory pool caches freed blocks and gives them back to the device on request ---
def memory_pool():
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    free_before = cp.cuda.runtime.memGetInfo()[0]
    block = cp.ones(64 << 20, dtype=cp.uint8)
    used, cached = pool.used_bytes(), pool.total_bytes()
    free_held = cp.cuda.runtime.memGetInfo()[0]
    del block
    after_del = (pool.used_bytes(), pool.total_bytes())
    pool.free_all_blocks()
    free_after = cp.cuda.runtime.memGetInfo()[0]
    ok = (
        used >= 64 << 20
        and free_before - free_held >= 64 << 20
        and after_del == (used - (64 << 20), cached)
        and pool.total_bytes() <= cached - (64 << 20)
        and free_after == free_before
    )
    return ok, f"used {used}, cached {cached}, after del {after_del}, free {free_before}/{free_held}/{free_after}"


check("memory_pool_caches_and_releases", memory_pool)

# --- the quota holds: over it is an OutOfMemoryError, and the pool recovers ---
def over_quota():
    cp.get_default_memory_pool().free_all_blocks()
    try:
        cp.empty(quota_mib << 20, dtype=cp.uint8)
    except cp.cuda.memory.OutOfMemoryError:
        return True, ""
    return False, "an allocation of the whole quota succeeded on top of live arrays"


check("allocation_over_quota_is_out_of_memory", over_quota)
check("works_after_oom", lambda: same(d_a + 1, h_a + 1))

cp.cuda.Device(0).synchronize()
passed = sum(results)
print(f"SUMMARY {passed}/{len(results)}", flush=True)
sys.exit(0 if passed == len(results) else 1)
