"""cupy.matmul / cupy.dot through the pool (cuBLAS runs in the daemon), against NumPy.
CuPy's cublas module names libcublas.so.12 in DT_NEEDED; under `gpupool run` that is a
stand-in and every cublas* symbol resolves to libgpupool.so. Prints PASS/FAIL lines and
SUMMARY passed/total; exits 1 on any failure."""
import sys

import cupy as cp
import numpy as np

results = []


def check(name, ok, detail=""):
    results.append(bool(ok))
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else f": {detail}"), flush=True)


rng = np.random.default_rng(3)
maps = open("/proc/self/maps").read()
for dtype, tol in [(np.float32, 1e-3), (np.float64, 1e-9), (np.float16, 0.5)]:
    a = (rng.integers(-8, 9, size=(70, 45)) / 4).astype(dtype)
    b = (rng.integers(-8, 9, size=(45, 33)) / 4).astype(dtype)
    got = cp.asnumpy(cp.matmul(cp.asarray(a), cp.asarray(b))).astype(np.float64)
    err = np.max(np.abs(got - a.astype(np.float64) @ b.astype(np.float64)))
    check(f"cupy.matmul {np.dtype(dtype).name} 70x45 @ 45x33", err <= tol, f"max error {err}")
a = (rng.integers(-8, 9, size=(4, 20, 12)) / 4).astype(np.float32)
b = (rng.integers(-8, 9, size=(4, 12, 9)) / 4).astype(np.float32)
got = cp.asnumpy(cp.matmul(cp.asarray(a), cp.asarray(b)))
check("cupy.matmul batched 4x(20x12 @ 12x9)", np.allclose(got, a @ b), np.max(np.abs(got - a @ b)))
at = (rng.integers(-8, 9, size=(30, 50)) / 4).astype(np.float32)
got = cp.asnumpy(cp.asarray(at).T @ cp.asarray(at))
check("transposed operand (A.T @ A)", np.allclose(got, at.T @ at))
v = (rng.integers(-8, 9, size=1000) / 4).astype(np.float32)
w = (rng.integers(-8, 9, size=1000) / 4).astype(np.float32)
got = float(cp.dot(cp.asarray(v), cp.asarray(w)))
check("cupy.dot of two vectors", abs(got - float(v @ w)) <= 1e-3, f"{got} vs {v @ w}")
m = (rng.integers(-8, 9, size=(40, 1000)) / 4).astype(np.float32)
got = cp.asnumpy(cp.dot(cp.asarray(m), cp.asarray(v)))
check("cupy.dot matrix-vector", np.allclose(got, m @ v))
check("no cuBLAS of NVIDIA's mapped in the client", "nvidia/cublas/lib/libcublas" not in maps
      and "nvidia/cublas/lib/libcublas" not in open("/proc/self/maps").read())
passed = sum(results)
print(f"SUMMARY {passed}/{len(results)}", flush=True)
sys.exit(0 if passed == len(results) else 1)
