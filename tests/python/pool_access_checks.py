"""cuMemPoolSetAccess / cuMemPoolGetAccess (and with --cudart the runtime's cudaMemPoolSetAccess /
cudaMemPoolGetAccess through libcudart.so.12) on single-device pools, through ctypes on whatever
libcuda.so.1 the loader finds: the simulator (test_pool_access.py) or, under `gpupool run`, the
pool (pool-daemon/tests/pool_access.rs). Both answer as gpupool_abi::pool_access says: read-write
for the pool's own device is accepted and read back; other flags for it, another device's access
and a location that is not a device are CUDA_ERROR_INVALID_VALUE; another device reads back no
access.

Prints PASS/FAIL lines and SUMMARY passed/total; exits 1 on any failure.
"""

import ctypes as C
import sys

LOC_DEVICE, LOC_HOST = 1, 2
NONE, READ, READWRITE = 0, 1, 3
INVALID_VALUE = 1


class Location(C.Structure):
    _fields_ = [("type", C.c_int), ("id", C.c_int)]


class AccessDesc(C.Structure):
    _fields_ = [("location", Location), ("flags", C.c_int)]


class PoolProps(C.Structure):
    _fields_ = [
        ("allocType", C.c_int),
        ("handleTypes", C.c_int),
        ("location", Location),
        ("win32SecurityAttributes", C.c_void_p),
        ("maxSize", C.c_size_t),
        ("usage", C.c_ushort),
        ("reserved", C.c_ubyte * 54),
    ]


cu = C.CDLL("libcuda.so.1")
results = []


def record(name, ok, why=""):
    results.append(ok)
    print(f"PASS {name}" if ok else f"FAIL {name}: {why}", flush=True)


def must(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what} returned {rc}")


def checks(set_access, get_access, pool, devices, what):
    rc = set_access(pool, C.byref(AccessDesc(Location(LOC_DEVICE, 0), READWRITE)), C.c_size_t(1))
    flags = C.c_int(-1)
    rc2 = get_access(C.byref(flags), pool, C.byref(Location(LOC_DEVICE, 0)))
    record(
        f"{what}: read-write for the pool's device is accepted and read back",
        rc == 0 and rc2 == 0 and flags.value == READWRITE,
        f"{rc} {rc2} {flags.value}",
    )
    rc = set_access(pool, C.byref(AccessDesc(Location(LOC_DEVICE, 0), READ)), C.c_size_t(1))
    rc2 = set_access(pool, C.byref(AccessDesc(Location(LOC_HOST, 0), READWRITE)), C.c_size_t(1))
    rc3 = get_access(C.byref(flags), pool, C.byref(Location(LOC_HOST, 0)))
    record(
        f"{what}: other flags, or a location that is not a device, are invalid",
        (rc, rc2, rc3) == (INVALID_VALUE,) * 3,
        f"{rc} {rc2} {rc3}",
    )
    if devices > 1:
        rc = set_access(pool, C.byref(AccessDesc(Location(LOC_DEVICE, 1), READWRITE)), C.c_size_t(1))
        flags.value = -1
        rc2 = get_access(C.byref(flags), pool, C.byref(Location(LOC_DEVICE, 1)))
        record(
            f"{what}: another device gets no access",
            rc == INVALID_VALUE and rc2 == 0 and flags.value == NONE,
            f"{rc} {rc2} {flags.value}",
        )


def main():
    must(cu.cuInit(0), "cuInit")
    dev, ctx, n = C.c_int(), C.c_void_p(), C.c_int()
    must(cu.cuDeviceGetCount(C.byref(n)), "cuDeviceGetCount")
    must(cu.cuDeviceGet(C.byref(dev), 0), "cuDeviceGet")
    must(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    must(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    default, made = C.c_void_p(), C.c_void_p()
    must(cu.cuDeviceGetDefaultMemPool(C.byref(default), dev), "cuDeviceGetDefaultMemPool")
    props = PoolProps(allocType=1, location=Location(LOC_DEVICE, 0))
    must(cu.cuMemPoolCreate(C.byref(made), C.byref(props)), "cuMemPoolCreate")
    for pool, what in ((default, "default pool"), (made, "created pool")):
        checks(cu.cuMemPoolSetAccess, cu.cuMemPoolGetAccess, pool, n.value, what)
    if "--cudart" in sys.argv:
        rt = C.CDLL("libcudart.so.12")
        checks(rt.cudaMemPoolSetAccess, rt.cudaMemPoolGetAccess, made, n.value, "runtime")
    must(cu.cuMemPoolDestroy(made), "cuMemPoolDestroy")
    print(f"SUMMARY {sum(results)}/{len(results)}", flush=True)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
