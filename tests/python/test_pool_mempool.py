"""Stream-ordered memory pools and managed memory through the pool: an unmodified
cuda-bindings program under `gpupool run` (see pool.py), its tenant's ledger read from the
daemon at each step.

- What a pool reserves counts against the tenant's quota exactly: allocating past the quota
  through a pool is CUDA_ERROR_OUT_OF_MEMORY; blocks a pool keeps after their free (below its
  release threshold) stay charged, in cuMemGetInfo and in the daemon's accounting; trimming
  gives them back; a synchronization releases down to the threshold; destroying a pool
  releases what it kept.
- The runtime's cudaDeviceGetDefaultMemPool / cudaMallocFromPoolAsync / cudaMemPool* (through
  ctypes on libcudart.so.12, which is the pool's) are the same pools.
- Managed memory is refused with CUDA_ERROR_NOT_SUPPORTED and a log line, and the devices
  report CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY 0 (the README says why).
"""

import os
import subprocess

from conftest import SIM_LIBDIR
from pool import MiB, Daemon, wait_for

QUOTA_MIB = 256

CLIENT = r"""
import os, sys, time
from cuda.bindings import driver as d
R = d.CUresult
P = d.CUmemPool_attribute
MiB = 1 << 20
step_dir = sys.argv[1]
def ok(r):
    err, *rest = r
    assert err == R.CUDA_SUCCESS, err
    return rest[0] if len(rest) == 1 else (tuple(rest) or None)
def checkpoint(name, **values):
    # Tells the test where we are and what we see, then waits for it to look at the daemon.
    with open(os.path.join(step_dir, name + ".at"), "w") as f:
        f.write(" ".join(f"{k}={v}" for k, v in values.items()))
    t0 = time.monotonic()
    while not os.path.exists(os.path.join(step_dir, name + ".ack")):
        assert time.monotonic() - t0 < 60, "no ack for " + name
        time.sleep(0.002)
def free_mem():
    return ok(d.cuMemGetInfo())[0]
def attr(pool, a):
    return int(ok(d.cuMemPoolGetAttribute(pool, a)))
def threshold(pool, n):
    ok(d.cuMemPoolSetAttribute(pool, P.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, d.cuuint64_t(n)))

ok(d.cuInit(0))
dev = ok(d.cuDeviceGet(0))
ctx = ok(d.cuDevicePrimaryCtxRetain(dev))
ok(d.cuCtxSetCurrent(ctx))
stream = ok(d.cuStreamCreate(0))
total = ok(d.cuMemGetInfo())[1]
assert total == QUOTA, (total, QUOTA)

# The default pool, keeping everything it frees.
pool = ok(d.cuDeviceGetDefaultMemPool(dev))
assert int(ok(d.cuDeviceGetMemPool(dev))) == int(pool)
threshold(pool, 1 << 62)
ptrs = []
while True:
    err, p = d.cuMemAllocAsync(64 * MiB, stream)
    if err == R.CUDA_ERROR_OUT_OF_MEMORY:
        break
    assert err == R.CUDA_SUCCESS, err
    ptrs.append(p)
assert len(ptrs) == QUOTA // (64 * MiB), len(ptrs)
owner = ok(d.cuPointerGetAttribute(d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, ptrs[0]))
assert int(owner) == int(pool)
checkpoint("full", free=free_mem(), reserved=attr(pool, P.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT))
for p in ptrs:
    ok(d.cuMemFreeAsync(p, stream))
ok(d.cuStreamSynchronize(stream))
assert attr(pool, P.CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0
# Kept memory is the tenant's still: nothing else fits.
err, _ = d.cuMemAlloc(MiB)
assert err == R.CUDA_ERROR_OUT_OF_MEMORY, err
# ... but the pool reuses it.
again = ok(d.cuMemAllocAsync(64 * MiB, stream))
assert int(again) in [int(q) for q in ptrs]
ok(d.cuMemFreeAsync(again, stream))
ok(d.cuStreamSynchronize(stream))
checkpoint("kept", free=free_mem(), reserved=attr(pool, P.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT))
ok(d.cuMemPoolTrimTo(pool, 0))
checkpoint("trimmed", free=free_mem(), reserved=attr(pool, P.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT))

# A created pool: past the quota is OUT_OF_MEMORY; the release threshold at synchronize.
props = d.CUmemPoolProps()
props.allocType = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
props.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
props.location.id = 0
mine = ok(d.cuMemPoolCreate(props))
err, _ = d.cuMemAllocFromPoolAsync(QUOTA + MiB, mine, stream)
assert err == R.CUDA_ERROR_OUT_OF_MEMORY, err
threshold(mine, 32 * MiB)
blocks = [ok(d.cuMemAllocFromPoolAsync(32 * MiB, mine, stream)) for _ in range(3)]
for p in blocks:
    ok(d.cuMemFreeAsync(p, stream))
ok(d.cuCtxSynchronize())
checkpoint("threshold", free=free_mem(), reserved=attr(mine, P.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT))
ok(d.cuDeviceSetMemPool(dev, mine))
p = ok(d.cuMemAllocAsync(16 * MiB, stream))
owner = ok(d.cuPointerGetAttribute(d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p))
assert int(owner) == int(mine), "cuMemAllocAsync takes the current pool"
ok(d.cuMemPoolDestroy(mine))
assert int(ok(d.cuDeviceGetMemPool(dev))) == int(pool), "the default pool is current again"
# An allocation outliving its destroyed pool goes back to the quota when freed.
ok(d.cuMemFreeAsync(p, stream))
ok(d.cuStreamSynchronize(stream))
checkpoint("destroyed", free=free_mem())
err, = d.cuMemPoolDestroy(pool)
assert err == R.CUDA_ERROR_INVALID_VALUE, err

# The runtime's pools (libcudart.so.12 is the pool's runtime too): the same default pool.
import ctypes
rt = ctypes.CDLL("libcudart.so.12")
rt_pool = ctypes.c_void_p()
assert rt.cudaDeviceGetDefaultMemPool(ctypes.byref(rt_pool), 0) == 0
assert rt_pool.value == int(pool)
cur = ctypes.c_void_p()
assert rt.cudaDeviceGetMemPool(ctypes.byref(cur), 0) == 0 and cur.value == int(pool)
keep = ctypes.c_uint64(1 << 62)
assert rt.cudaMemPoolSetAttribute(rt_pool, int(P.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), ctypes.byref(keep)) == 0
s = ctypes.c_void_p(int(stream))
bufs = []
for _ in range(2):
    b = ctypes.c_void_p()
    assert rt.cudaMallocFromPoolAsync(ctypes.byref(b), ctypes.c_size_t(64 * MiB), rt_pool, s) == 0
    bufs.append(b)
big = ctypes.c_void_p()
# cudaErrorMemoryAllocation past the quota.
assert rt.cudaMallocFromPoolAsync(ctypes.byref(big), ctypes.c_size_t(QUOTA), rt_pool, s) == 2
for b in bufs:
    assert rt.cudaFreeAsync(b, s) == 0
assert rt.cudaStreamSynchronize(s) == 0
res = ctypes.c_uint64()
assert rt.cudaMemPoolGetAttribute(rt_pool, int(P.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), ctypes.byref(res)) == 0
checkpoint("runtime", free=free_mem(), reserved=res.value)
assert rt.cudaMemPoolTrimTo(rt_pool, ctypes.c_size_t(0)) == 0
managed = ctypes.c_void_p()
assert rt.cudaMallocManaged(ctypes.byref(managed), ctypes.c_size_t(MiB), 1) == 801  # cudaErrorNotSupported

# Managed memory: refused, and the device says it has none.
A = d.CUdevice_attribute
assert ok(d.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, dev)) == 0
err, _ = d.cuMemAllocManaged(MiB, d.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL)
assert err == R.CUDA_ERROR_NOT_SUPPORTED, err
print("DONE")
""".replace("QUOTA", str(QUOTA_MIB << 20))


def test_pools_are_held_to_the_quota_and_trimming_gives_it_back(tmp_path):
    config = f"""
[[tenant]]
name = "team"
uids = [{os.getuid()}]
memory = "{QUOTA_MIB}MiB"
"""
    quota = QUOTA_MIB * MiB
    with Daemon(SIM_LIBDIR, config=config, devices=1, memory="1GiB") as d:
        p = d.python(CLIENT, tmp_path, env={"GPUPOOL_LOG": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

        def at(name):
            f = tmp_path / (name + ".at")

            def seen():
                if p.poll() is not None:
                    out, err = p.communicate()
                    raise AssertionError(f"client exited {p.returncode} before {name}:\n{out.decode()}\n{err.decode()}")
                return f.exists() and f.read_text()

            text = wait_for(seen, 60, name)
            values = dict(kv.split("=") for kv in text.split())
            return {k: int(v) for k, v in values.items()}

        def ack(name):
            (tmp_path / (name + ".ack")).write_text("")

        v = at("full")
        assert d.used("team") == (quota, quota), d.used("team")
        assert v == {"free": 0, "reserved": quota}
        ack("full")
        v = at("kept")
        assert d.used("team")[0] == quota, "blocks a pool keeps are charged"
        assert v == {"free": 0, "reserved": quota}
        ack("kept")
        v = at("trimmed")
        assert d.used("team")[0] == 0, "trimming gives the memory back to the tenant"
        assert v == {"free": quota, "reserved": 0}
        ack("trimmed")
        v = at("threshold")
        assert d.used("team")[0] == 32 * MiB, "a synchronization releases down to the threshold"
        assert v == {"free": quota - 32 * MiB, "reserved": 32 * MiB}
        ack("threshold")
        v = at("destroyed")
        assert d.used("team")[0] == 0
        assert v == {"free": quota}
        ack("destroyed")
        v = at("runtime")
        assert d.used("team")[0] == 128 * MiB, "the runtime's pool keeps its freed blocks charged"
        assert v == {"free": quota - 128 * MiB, "reserved": 128 * MiB}
        ack("runtime")
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0 and out.decode().strip().endswith("DONE"), f"{out.decode()}\n{err.decode()}"
        assert "managed memory is not supported through the pool" in err.decode(), err.decode()
        wait_for(lambda: d.used("team")[0] == 0, 5, "the tenant's memory to be released")
