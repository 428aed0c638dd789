"""Every driver entry point PyTorch's c10 resolves (through `cudaGetDriverEntryPoint`, and
asserts non-NULL) is found through the pool: a program under `gpupool run` dlopens
libcudart.so.13 (the interposer's runtime) and asks for each, and asks libcuda.so.1's
cuGetProcAddress_v2 too. Also what those entry points answer through the pool: the
2 MiB granularity, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED 0, multicast and green contexts
CUDA_ERROR_NOT_SUPPORTED, a stream-ordered cuStreamWriteValue32."""

import subprocess

from conftest import SIM_LIBDIR
from pool import Daemon

# From libc10_cuda.so (torch 2.15): the table c10/cuda/driver_api.cpp resolves.
TORCH_NAMES = """cuCtxFromGreenCtx cuCtxGetCurrent cuCtxPopCurrent cuCtxPushCurrent cuCtxSetCurrent
cuDevResourceGenerateDesc cuDevSmResourceSplitByCount cuDeviceGet cuDeviceGetAttribute cuDeviceGetDevResource
cuGetErrorString cuGreenCtxCreate cuGreenCtxDestroy cuGreenCtxStreamCreate cuLogsRegisterCallback
cuLogsUnregisterCallback cuMemAddressFree cuMemAddressReserve cuMemCreate cuMemExportToShareableHandle
cuMemGetAddressRange cuMemGetAllocationGranularity cuMemGetAllocationPropertiesFromHandle
cuMemImportFromShareableHandle cuMemMap cuMemRelease cuMemRetainAllocationHandle cuMemSetAccess cuMemUnmap
cuMemsetD32Async cuMulticastAddDevice cuMulticastBindMem cuMulticastCreate cuMulticastUnbind
cuStreamWriteValue32""".split()

PROGRAM = r"""
import ctypes, sys
names = sys.argv[1].split(",")
rt = ctypes.CDLL("libcudart.so.13")
drv = ctypes.CDLL("libcuda.so.1")
missing = []
for name in names:
    fn, st = ctypes.c_void_p(), ctypes.c_int(-1)
    r = rt.cudaGetDriverEntryPoint(name.encode(), ctypes.byref(fn), ctypes.c_ulonglong(0), ctypes.byref(st))
    fn2, st2 = ctypes.c_void_p(), ctypes.c_int(-1)
    r2 = drv.cuGetProcAddress_v2(name.encode(), ctypes.byref(fn2), 13000, ctypes.c_ulonglong(0), ctypes.byref(st2))
    if r != 0 or st.value != 0 or not fn.value or r2 != 0 or st2.value != 0 or fn2.value != fn.value:
        missing.append((name, r, st.value, fn.value, r2, st2.value, fn2.value))
assert not missing, missing

# What they answer through the pool.
assert drv.cuInit(0) == 0
ctx = ctypes.c_void_p()
assert drv.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert drv.cuCtxSetCurrent(ctx) == 0
v = ctypes.c_int(-1)
assert drv.cuDeviceGetAttribute(ctypes.byref(v), 132, 0) == 0 and v.value == 0, v.value  # MULTICAST_SUPPORTED

class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]

class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", ctypes.c_ubyte * 8)]

prop = Prop(1, 1, Location(1, 0))
g = ctypes.c_size_t()
assert drv.cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(prop), 1) == 0 and g.value == 2 << 20
assert drv.cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(Prop(1, 1, Location(1, 9))), 0) == 101
h = ctypes.c_ulonglong()
assert drv.cuMulticastCreate(ctypes.byref(h), ctypes.c_void_p(0)) == 801
assert drv.cuGreenCtxCreate(ctypes.byref(ctypes.c_void_p()), None, 0, 0) == 801

# cuStreamWriteValue32: ordered after a memset on the same stream.
s, p = ctypes.c_void_p(), ctypes.c_ulonglong()
assert drv.cuStreamCreate(ctypes.byref(s), 0) == 0
assert drv.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(64)) == 0
assert drv.cuMemsetD32Async(p, ctypes.c_uint(5), ctypes.c_size_t(16), s) == 0
assert drv.cuStreamWriteValue32_v2(s, ctypes.c_ulonglong(p.value + 8), ctypes.c_uint(0xfeedface), 0) == 0
assert drv.cuStreamSynchronize(s) == 0
out = (ctypes.c_uint * 16)()
assert drv.cuMemcpyDtoH_v2(out, p, ctypes.c_size_t(64)) == 0
assert list(out) == [5, 5, 0xfeedface] + [5] * 13, list(out)
assert drv.cuStreamWriteValue32_v2(s, ctypes.c_ulonglong(p.value + 2), ctypes.c_uint(1), 0) == 1
print("resolved", len(names))
"""


def test_every_entry_point_pytorch_resolves_is_found_through_the_pool():
    with Daemon(SIM_LIBDIR, devices=1, memory="1GiB") as d:
        p = d.python(PROGRAM, ",".join(TORCH_NAMES), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and f"resolved {len(TORCH_NAMES)}" in out, (
            f"exit {p.returncode}\n--- stdout ---\n{out}\n--- stderr ---\n{err}\n--- daemon ---\n{d.log()[-4000:]}"
        )
