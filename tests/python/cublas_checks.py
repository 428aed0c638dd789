"""cuBLAS and cuBLASLt through the pool, against NumPy: run under `gpupool run` (see
pool-daemon/tests/blas.rs). Loads libcublas.so.13 / libcublasLt.so.13 by name, as a program
does; they must be libgpupool.so (the calls run in the daemon). Device memory comes from the
driver API (libcuda.so.1, also the interposer).

Usage: cublas_checks.py FOREIGN_PTR   (a device address another tenant owns)
Prints PASS/FAIL lines and SUMMARY passed/total; exits 1 on any failure.
"""
import ctypes as C
import sys

import numpy as np

cuda = C.CDLL("libcuda.so.1")
blas = C.CDLL("libcublas.so.13")
lt = C.CDLL("libcublasLt.so.13")

results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(("PASS " if ok else "FAIL ") + name + ("" if ok else f": {detail}"), flush=True)


def cu(r, what):
    if r != 0:
        raise RuntimeError(f"{what} failed: {r}")


def st(r, what):
    if r != 0:
        raise RuntimeError(f"{what}: cuBLAS status {r}")


cu(cuda.cuInit(0), "cuInit")
ctx = C.c_void_p()
cu(cuda.cuDevicePrimaryCtxRetain(C.byref(ctx), 0), "retain")
cu(cuda.cuCtxSetCurrent(ctx), "set current")


def alloc(nbytes):
    p = C.c_uint64()
    cu(cuda.cuMemAlloc_v2(C.byref(p), C.c_size_t(max(nbytes, 1))), "cuMemAlloc")
    return p.value


def put(arr):
    arr = np.ascontiguousarray(arr)
    p = alloc(arr.nbytes)
    cu(cuda.cuMemcpyHtoD_v2(C.c_uint64(p), arr.ctypes.data_as(C.c_void_p), C.c_size_t(arr.nbytes)), "HtoD")
    return p


def get(p, count, dtype):
    out = np.empty(count, dtype=dtype)
    cu(cuda.cuCtxSynchronize(), "sync")
    cu(cuda.cuMemcpyDtoH_v2(out.ctypes.data_as(C.c_void_p), C.c_uint64(p), C.c_size_t(out.nbytes)), "DtoH")
    return out


def colmajor(m, ld, dtype):
    """A matrix stored column major with leading dimension ld (padding filled with a marker)."""
    rows, cols = m.shape
    buf = np.full((cols, ld), 7, dtype=dtype)
    buf[:, :rows] = m.T
    return buf.reshape(-1)


def from_colmajor(flat, rows, cols, ld):
    return flat.reshape(cols, ld)[:, :rows].T


def bf16(x):
    """float32 -> bfloat16 bits (inputs here are exact in bfloat16)."""
    return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def from_bf16(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


rng = np.random.default_rng(7)


def exact(shape):
    """Values exact in fp16 and bf16, so sums in fp32 are exact too."""
    return rng.integers(-8, 9, size=shape).astype(np.float32) / 4


# The calls must reach libgpupool.so, never a cuBLAS in this process.
maps = open("/proc/self/maps").read()
check("libcublas.so.13 is the interposer", hasattr(blas, "cuMemAlloc_v2") and hasattr(lt, "cuInit")
      and "sim_blas" not in maps and "nvidia/cublas" not in maps, "a real cuBLAS is mapped")

h = C.c_void_p()
st(blas.cublasCreate_v2(C.byref(h)), "cublasCreate")
stream = C.c_void_p()
cu(cuda.cuStreamCreate(C.byref(stream), 0), "stream")
st(blas.cublasSetStream_v2(h, stream), "set stream")
got = C.c_void_p()
st(blas.cublasGetStream_v2(h, C.byref(got)), "get stream")
check("cublasGetStream returns the stream set", got.value == stream.value)
version = C.c_int()
st(blas.cublasGetVersion_v2(h, C.byref(version)), "version")
check("cublasGetVersion is a cuBLAS 12 or 13 version", 120000 <= version.value < 140000, version.value)

OP = {"N": 0, "T": 1}
F, D, H = C.c_float, C.c_double, C.c_uint16


def gemm_case(name, fn, dtype, scal, ta, tb, m, n, k, tol):
    A = exact((k, m) if ta == "T" else (m, k)).astype(dtype)
    B = exact((n, k) if tb == "T" else (k, n)).astype(dtype)
    Cm = exact((m, n)).astype(dtype)
    lda, ldb, ldc = A.shape[0] + 3, B.shape[0] + 1, m + 2
    pa, pb, pc = put(colmajor(A, lda, dtype)), put(colmajor(B, ldb, dtype)), put(colmajor(Cm, ldc, dtype))
    alpha, beta = scal(1.5) if dtype != np.float16 else H(np.float16(1.5).view(np.uint16)), \
        scal(-0.5) if dtype != np.float16 else H(np.float16(-0.5).view(np.uint16))
    st(fn(h, OP[ta], OP[tb], m, n, k, C.byref(alpha), C.c_void_p(pa), lda, C.c_void_p(pb), ldb,
          C.byref(beta), C.c_void_p(pc), ldc), name)
    out = get(pc, n * ldc, dtype)
    got = from_colmajor(out, m, n, ldc).astype(np.float64)
    a = A.T if ta == "T" else A
    b = B.T if tb == "T" else B
    want = 1.5 * a.astype(np.float64) @ b.astype(np.float64) - 0.5 * Cm.astype(np.float64)
    pad_kept = np.all(out.reshape(n, ldc)[:, m:] == dtype(7))
    err = np.max(np.abs(got - want))
    check(f"{name} {ta}{tb} {m}x{n}x{k}", err <= tol and pad_kept, f"max error {err}, padding kept {pad_kept}")


for ta, tb in [("N", "N"), ("T", "N"), ("N", "T"), ("T", "T")]:
    gemm_case("Sgemm", blas.cublasSgemm_v2, np.float32, F, ta, tb, 37, 29, 23, 1e-4)
gemm_case("Dgemm", blas.cublasDgemm_v2, np.float64, D, "N", "T", 31, 17, 40, 1e-10)
gemm_case("Hgemm", blas.cublasHgemm, np.float16, None, "T", "N", 16, 24, 8, 0.5)

# GemmEx: fp16 and bf16 inputs, fp32 output, fp32 compute.
R_16F, R_32F, R_16BF = 2, 0, 14
COMPUTE_32F = 68
for tname, t, enc in [("fp16", R_16F, lambda x: x.astype(np.float16)), ("bf16", R_16BF, bf16)]:
    m, n, k = 33, 20, 48
    A, B, Cm = exact((m, k)), exact((k, n)), exact((m, n))
    pa, pb, pc = put(colmajor(enc(A), m, enc(A).dtype)), put(colmajor(enc(B), k, enc(B).dtype)), put(colmajor(Cm, m, np.float32))
    alpha, beta = F(2.0), F(1.0)
    st(blas.cublasGemmEx(h, 0, 0, m, n, k, C.byref(alpha), C.c_void_p(pa), t, m, C.c_void_p(pb), t, k,
                         C.byref(beta), C.c_void_p(pc), R_32F, m, COMPUTE_32F, -1), f"GemmEx {tname}")
    got = from_colmajor(get(pc, m * n, np.float32), m, n, m)
    err = np.max(np.abs(got - (2 * A @ B + Cm)))
    check(f"GemmEx {tname} in, fp32 out", err <= 1e-3, f"max error {err}")

# bf16 in and out.
m, n, k = 8, 8, 8
A, B = exact((m, k)), exact((k, n))
pa, pb, pc = put(colmajor(bf16(A), m, np.uint16)), put(colmajor(bf16(B), k, np.uint16)), alloc(m * n * 2)
alpha, beta = F(1.0), F(0.0)
st(blas.cublasGemmEx(h, 0, 0, m, n, k, C.byref(alpha), C.c_void_p(pa), R_16BF, m, C.c_void_p(pb), R_16BF, k,
                     C.byref(beta), C.c_void_p(pc), R_16BF, m, COMPUTE_32F, -1), "GemmEx bf16 out")
got = from_bf16(get(pc, m * n, np.uint16)).reshape(n, m).T
err = np.max(np.abs(got - A @ B))
check("GemmEx bf16 in and out", err <= 0.25, f"max error {err}")

# Strided batches.
batch, m, n, k = 3, 12, 10, 7
As, Bs, Cs = exact((batch, m, k)), exact((batch, k, n)), exact((batch, m, n))
sa, sb, sc = m * k + 5, k * n + 2, m * n + 4


def strided(ms, stride):
    flat = np.zeros(stride * len(ms), np.float32)
    for i, x in enumerate(ms):
        flat[i * stride:i * stride + x.size] = colmajor(x, x.shape[0], np.float32)
    return flat


pa, pb, pc = put(strided(As, sa)), put(strided(Bs, sb)), put(strided(Cs, sc))
alpha, beta = F(1.0), F(2.0)
st(blas.cublasGemmStridedBatchedEx(h, 0, 0, m, n, k, C.byref(alpha), C.c_void_p(pa), R_32F, m, C.c_longlong(sa),
                                   C.c_void_p(pb), R_32F, k, C.c_longlong(sb), C.byref(beta), C.c_void_p(pc), R_32F,
                                   m, C.c_longlong(sc), batch, COMPUTE_32F, -1), "GemmStridedBatchedEx")
out = get(pc, sc * batch, np.float32)
err = max(np.max(np.abs(from_colmajor(out[i * sc:i * sc + m * n], m, n, m) - (As[i] @ Bs[i] + 2 * Cs[i])))
          for i in range(batch))
check("GemmStridedBatchedEx fp32, 3 batches", err <= 1e-4, f"max error {err}")
pc2 = put(strided(Cs, sc))
st(blas.cublasSgemmStridedBatched(h, 0, 0, m, n, k, C.byref(alpha), C.c_void_p(pa), m, C.c_longlong(sa),
                                  C.c_void_p(pb), k, C.c_longlong(sb), C.byref(beta), C.c_void_p(pc2), m,
                                  C.c_longlong(sc), batch), "SgemmStridedBatched")
check("SgemmStridedBatched matches GemmStridedBatchedEx", np.array_equal(get(pc2, sc * batch, np.float32), out))

# Pointer arrays (device arrays of device pointers).
ptrs = [[put(colmajor(x, x.shape[0], np.float32)) for x in group] for group in (As, Bs, Cs)]
arrays = [put(np.array(g, dtype=np.uint64)) for g in ptrs]
st(blas.cublasGemmBatchedEx(h, 0, 0, m, n, k, C.byref(alpha), C.c_void_p(arrays[0]), R_32F, m,
                            C.c_void_p(arrays[1]), R_32F, k, C.byref(beta), C.c_void_p(arrays[2]), R_32F, m, batch,
                            COMPUTE_32F, -1), "GemmBatchedEx")
err = max(np.max(np.abs(from_colmajor(get(ptrs[2][i], m * n, np.float32), m, n, m) - (As[i] @ Bs[i] + 2 * Cs[i])))
          for i in range(batch))
check("GemmBatchedEx fp32, 3 pointer triples", err <= 1e-4, f"max error {err}")

# Level 2 and 1.
m, n = 19, 13
A, x, y = exact((m, n)), exact(n), exact(m)
for tr, fn, dt, sc_ in [(0, blas.cublasSgemv_v2, np.float32, F), (1, blas.cublasDgemv_v2, np.float64, D)]:
    xs = x if tr == 0 else y
    ys = y if tr == 0 else x
    pa, px, py = put(colmajor(A.astype(dt), m + 1, dt)), put(np.repeat(xs.astype(dt), 2)), put(ys.astype(dt))
    st(fn(h, tr, m, n, C.byref(sc_(0.5)), C.c_void_p(pa), m + 1, C.c_void_p(px), 2, C.byref(sc_(3.0)),
          C.c_void_p(py), 1), "gemv")
    op = A if tr == 0 else A.T
    err = np.max(np.abs(get(py, ys.size, dt) - (0.5 * op @ xs + 3 * ys)))
    check(f"{'Sgemv N' if tr == 0 else 'Dgemv T'} with incx 2", err <= 1e-4, f"max error {err}")

v, w = exact(1000), exact(1000)
pv, pw = put(v), put(w)
res = F(0)
st(blas.cublasSdot_v2(h, 1000, C.c_void_p(pv), 1, C.c_void_p(pw), 1, C.byref(res)), "Sdot")
check("Sdot, result to host", abs(res.value - float(v @ w)) <= 1e-3, f"{res.value} vs {v @ w}")
pres = alloc(4)
st(blas.cublasSetPointerMode_v2(h, 1), "pointer mode device")
mode = C.c_int()
st(blas.cublasGetPointerMode_v2(h, C.byref(mode)), "get pointer mode")
st(blas.cublasSdot_v2(h, 500, C.c_void_p(pv), 2, C.c_void_p(pw), 2, C.c_void_p(pres)), "Sdot device")
check("Sdot, result to device memory (device pointer mode)",
      mode.value == 1 and abs(get(pres, 1, np.float32)[0] - float(v[::2] @ w[::2])) <= 1e-3)
# A GEMM with alpha and beta in device memory.
m = n = k = 9
A, B, Cm = exact((m, k)), exact((k, n)), exact((m, n))
pa, pb, pc, pab = put(colmajor(A, m, np.float32)), put(colmajor(B, k, np.float32)), put(colmajor(Cm, m, np.float32)), \
    put(np.array([3.0, -1.0], np.float32))
st(blas.cublasSgemm_v2(h, 0, 0, m, n, k, C.c_void_p(pab), C.c_void_p(pa), m, C.c_void_p(pb), k,
                       C.c_void_p(pab + 4), C.c_void_p(pc), m), "Sgemm device scalars")
err = np.max(np.abs(from_colmajor(get(pc, m * n, np.float32), m, n, m) - (3 * A @ B - Cm)))
check("Sgemm with alpha/beta in device memory", err <= 1e-4, f"max error {err}")
st(blas.cublasSetPointerMode_v2(h, 0), "pointer mode host")

# Captured into a CUDA graph on the handle's stream: an axpy node replayed three times; a dot whose
# result goes to host memory cannot be captured (it would return before running).
xs, ys = exact(300), exact(300)
px, py = put(xs), put(ys)
cu(cuda.cuStreamBeginCapture_v2(stream, 2), "begin capture")
dot_status = blas.cublasSdot_v2(h, 300, C.c_void_p(px), 1, C.c_void_p(py), 1, C.byref(F(0)))
st(blas.cublasSaxpy_v2(h, 300, C.byref(F(0.5)), C.c_void_p(px), 1, C.c_void_p(py), 1), "captured Saxpy")
graph, gexec = C.c_void_p(), C.c_void_p()
cu(cuda.cuStreamEndCapture(stream, C.byref(graph)), "end capture")
check("nothing ran during the capture", np.array_equal(get(py, 300, np.float32), ys))
cu(cuda.cuGraphInstantiateWithFlags(C.byref(gexec), graph, C.c_ulonglong(0)), "instantiate")
for _ in range(3):
    cu(cuda.cuGraphLaunch(gexec, stream), "graph launch")
cu(cuda.cuStreamSynchronize(stream), "sync")
err = np.max(np.abs(get(py, 300, np.float32) - (ys + 1.5 * xs)))
check("a captured Saxpy replayed three times", err <= 1e-4, f"max error {err}")
check("a captured Sdot to host memory is CUBLAS_STATUS_NOT_SUPPORTED", dot_status == 15, f"status {dot_status}")
cu(cuda.cuGraphExecDestroy(gexec), "exec destroy")
cu(cuda.cuGraphDestroy(graph), "graph destroy")

py = put(w)
st(blas.cublasSaxpy_v2(h, 1000, C.byref(F(-2.0)), C.c_void_p(pv), 1, C.c_void_p(py), 1), "Saxpy")
check("Saxpy", np.allclose(get(py, 1000, np.float32), w - 2 * v))
st(blas.cublasSscal_v2(h, 500, C.byref(F(0.5)), C.c_void_p(pv), 2), "Sscal")
want = v.copy()
want[::2] *= 0.5
check("Sscal with incx 2", np.array_equal(get(pv, 1000, np.float32), want))

# Math mode (TF32) round trip.
st(blas.cublasSetMathMode(h, 3), "math mode")
mm = C.c_int()
st(blas.cublasGetMathMode(h, C.byref(mm)), "get math mode")
check("math mode TF32 is kept", mm.value == 3)
st(blas.cublasSetMathMode(h, 0), "math mode default")

# cuBLASLt: D = epilogue(A B + bias), heuristic first.
lh = C.c_void_p()
st(lt.cublasLtCreate(C.byref(lh)), "cublasLtCreate")
m, n, k = 24, 16, 32
A, B = exact((m, k)), exact((k, n))
bias = exact(m)
pa, pb, pbias = put(colmajor(A, m, np.float32)), put(colmajor(B, k, np.float32)), put(bias)
ws = alloc(1 << 20)


def layout(rows, cols, ld):
    l = C.c_void_p()
    st(lt.cublasLtMatrixLayoutCreate(C.byref(l), R_32F, C.c_uint64(rows), C.c_uint64(cols), C.c_int64(ld)), "layout")
    return l


la, lb, lc = layout(m, k, m), layout(k, n, k), layout(m, n, m)
pref = C.c_void_p()
st(lt.cublasLtMatmulPreferenceCreate(C.byref(pref)), "pref")
wsz = C.c_uint64(1 << 20)
st(lt.cublasLtMatmulPreferenceSetAttribute(pref, 1, C.byref(wsz), 8), "pref workspace")


class Heuristic(C.Structure):
    _fields_ = [("algo", C.c_uint64 * 8), ("workspaceSize", C.c_size_t), ("state", C.c_int),
                ("wavesCount", C.c_float), ("reserved", C.c_int * 4)]


gelu = lambda z: 0.5 * z * (1 + np.tanh(0.7978845608028654 * (z + 0.044715 * z ** 3)))
epilogues = {"DEFAULT": (1, lambda z: z), "RELU": (2, lambda z: np.maximum(z, 0)),
             "BIAS": (4, lambda z: z + bias[:, None]), "RELU_BIAS": (6, lambda z: np.maximum(z + bias[:, None], 0)),
             "GELU": (32, gelu), "GELU_BIAS": (36, lambda z: gelu(z + bias[:, None]))}
for name, (epi, f) in epilogues.items():
    desc = C.c_void_p()
    st(lt.cublasLtMatmulDescCreate(C.byref(desc), COMPUTE_32F, R_32F), "desc")
    st(lt.cublasLtMatmulDescSetAttribute(desc, 7, C.byref(C.c_uint32(epi)), 4), "epilogue")
    st(lt.cublasLtMatmulDescSetAttribute(desc, 8, C.byref(C.c_uint64(pbias)), 8), "bias")
    results_ = (Heuristic * 4)()
    found = C.c_int()
    st(lt.cublasLtMatmulAlgoGetHeuristic(lh, desc, la, lb, lc, lc, pref, 4, results_, C.byref(found)), "heuristic")
    pd = alloc(m * n * 4)
    st(lt.cublasLtMatmul(lh, desc, C.byref(F(1.0)), C.c_void_p(pa), la, C.c_void_p(pb), lb, C.byref(F(0.0)),
                         C.c_void_p(pd), lc, C.c_void_p(pd), lc, C.byref(results_[0].algo), C.c_void_p(ws),
                         C.c_size_t(1 << 20), stream), f"cublasLtMatmul {name}")
    got = from_colmajor(get(pd, m * n, np.float32), m, n, m)
    err = np.max(np.abs(got - f(A @ B)))
    check(f"cublasLtMatmul epilogue {name}", found.value >= 1 and err <= 1e-3, f"found {found.value}, max error {err}")
    st(lt.cublasLtMatmulDescDestroy(desc), "desc destroy")

# Refusals: B's extent runs past its allocation; C is another tenant's.
m = n = k = 64
pa = put(np.zeros(m * k, np.float32))
pb_short = alloc(k * n * 4 - 4)
pc = alloc(m * n * 4)
r = blas.cublasSgemm_v2(h, 0, 0, m, n, k, C.byref(F(1.0)), C.c_void_p(pa), m, C.c_void_p(pb_short), k,
                        C.byref(F(0.0)), C.c_void_p(pc), m)
check("a GEMM whose B runs past its allocation is CUBLAS_STATUS_INVALID_VALUE", r == 7, f"status {r}")
foreign = int(sys.argv[1], 0)
r = blas.cublasSgemm_v2(h, 0, 0, 4, 4, 4, C.byref(F(1.0)), C.c_void_p(pa), 4, C.c_void_p(pa), 4,
                        C.byref(F(0.0)), C.c_void_p(foreign), 4)
check("a GEMM into another tenant's memory is CUBLAS_STATUS_INVALID_VALUE", r == 7, f"status {r}")
bogus = C.c_void_p(0x1234)
check("an unknown handle is CUBLAS_STATUS_NOT_INITIALIZED", blas.cublasSgemm_v2(
    bogus, 0, 0, 1, 1, 1, C.byref(F(1.0)), C.c_void_p(pa), 1, C.c_void_p(pa), 1, C.byref(F(0.0)),
    C.c_void_p(pc), 1) == 1)
check("a NULL out-pointer is CUBLAS_STATUS_INVALID_VALUE", blas.cublasCreate_v2(None) == 7)
blas.cublasGetStatusName.restype = C.c_char_p
check("cublasGetStatusName", blas.cublasGetStatusName(7) == b"CUBLAS_STATUS_INVALID_VALUE")

st(lt.cublasLtDestroy(lh), "cublasLtDestroy")
st(blas.cublasDestroy_v2(h), "cublasDestroy")
check("a destroyed handle is refused", blas.cublasSetMathMode(h, 0) == 1)
passed = sum(results)
print(f"SUMMARY {passed}/{len(results)}", flush=True)
sys.exit(0 if passed == len(results) else 1)
