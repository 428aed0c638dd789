"""Plain ctypes client of the driver API, run under LD_PRELOAD=libgpupool.so.

Modes (argv[1]):
  unreachable  cuInit against an endpoint nobody listens on: CUDA_ERROR_NOT_INITIALIZED (3)
  gone         set up, print READY, wait for a line on stdin (the test kills the daemon),
               then cuCtxSynchronize must fail with CUDA_ERROR_DEVICE_UNAVAILABLE (46) fast
  fork         the parent sets up and allocates, a forked child uses CUDA on its own fresh
               connection, then the parent's connection still works
  latency      median round trip of cuCtxSynchronize (forwarded) and cuCtxGetDevice (local)
"""
import ctypes, os, sys, time

cu = ctypes.CDLL("libcuda.so.1")  # answered by libgpupool.so's dlopen hook
u64 = ctypes.c_uint64


def check(what, rc, want=0):
    if rc != want:
        print(f"FAIL {what}: {rc} (want {want})", flush=True)
        sys.exit(1)


def setup():
    check("cuInit", cu.cuInit(0))
    dev = ctypes.c_int()
    check("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), 0))
    ctx = ctypes.c_void_p()
    check("retain", cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    check("set", cu.cuCtxSetCurrent(ctx))


def roundtrip(n):
    p = u64()
    check("alloc", cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)))
    src = (ctypes.c_ubyte * n)(*[(i * 7) & 0xFF for i in range(n)])
    dst = (ctypes.c_ubyte * n)()
    check("htod", cu.cuMemcpyHtoD_v2(p, src, ctypes.c_size_t(n)))
    check("dtoh", cu.cuMemcpyDtoH_v2(dst, p, ctypes.c_size_t(n)))
    check("data", bytes(src) == bytes(dst), True)
    return p


mode = sys.argv[1]
if mode == "unreachable":
    check("cuInit", cu.cuInit(0), 3)
    check("cuDeviceGetCount before init", cu.cuDeviceGetCount(ctypes.byref(ctypes.c_int())), 3)
elif mode == "gone":
    setup()
    roundtrip(4096)
    print("READY", flush=True)
    sys.stdin.readline()
    t = time.monotonic()
    rc = cu.cuCtxSynchronize()
    rc2 = cu.cuMemAlloc_v2(ctypes.byref(u64()), ctypes.c_size_t(4096))
    print(f"elapsed {time.monotonic() - t:.3f}", flush=True)
    check("sync after daemon gone", rc, 46)
    check("alloc after daemon gone", rc2, 46)
elif mode == "fork":
    setup()
    p = roundtrip(1 << 16)
    pid = os.fork()
    if pid == 0:
        try:
            setup()
            roundtrip(100_000)  # larger than the inline limit: through staging
            os._exit(0)
        except SystemExit as e:
            os._exit(e.code or 1)
    _, status = os.waitpid(pid, 0)
    check("child exit status", status, 0)
    roundtrip(1 << 16)
    check("free in parent", cu.cuMemFree_v2(p))
elif mode == "latency":
    setup()
    def median(f, n=5000):
        ts = []
        for _ in range(n):
            t = time.perf_counter_ns()
            f()
            ts.append(time.perf_counter_ns() - t)
        ts.sort()
        return ts[len(ts) // 2], ts[int(len(ts) * 0.99)]
    dev = ctypes.c_int()
    sync = median(cu.cuCtxSynchronize)
    local = median(lambda: cu.cuCtxGetDevice(ctypes.byref(dev)))
    print(f"cuCtxSynchronize p50_ns={sync[0]} p99_ns={sync[1]}; local cuCtxGetDevice p50_ns={local[0]} p99_ns={local[1]}")
else:
    sys.exit(f"unknown mode {mode}")
print("PASS", flush=True)
