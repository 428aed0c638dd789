"""IPC memory handles between processes of the simulator, with cuda-bindings: a handle of this
process's allocation opened by another process (cuIpcOpenMemHandle_v2) is the same memory: the
child reads what the parent wrote, writes back, and the parent reads that; opened twice it is
one pointer, closed as often; the opener is charged nothing. A process cannot open its own
handle (INVALID_CONTEXT), pool memory has none (INVALID_VALUE), and event handles are
CUDA_ERROR_NOT_SUPPORTED on the simulator."""

import ctypes

import numpy as np
from conftest import check

MiB = 1 << 20
N = 2 * MiB

CHILD = r'''
import ctypes, sys
import numpy as np
from cuda.bindings import driver as d
R = d.CUresult
def ok(r):
    err, *rest = r
    assert err == R.CUDA_SUCCESS, err
    return rest[0] if len(rest) == 1 else (tuple(rest) or None)
N = int(sys.argv[1])
ok(d.cuInit(0))
ctx = ok(d.cuCtxCreate(0, ok(d.cuDeviceGet(0))))
h = d.CUipcMemHandle()
ctypes.memmove(h.getPtr(), bytes.fromhex(sys.argv[2]), 64)
free0 = ok(d.cuMemGetInfo())[0]
p = ok(d.cuIpcOpenMemHandle(h, 1))
assert int(ok(d.cuIpcOpenMemHandle(h, 1))) == int(p), "opened twice: one pointer"
assert ok(d.cuMemGetInfo())[0] == free0, "the opener is charged nothing"
got = np.zeros(N, dtype=np.uint8)
ok(d.cuMemcpyDtoH(got.ctypes.data, p, N))
assert np.array_equal(got, (np.arange(N) % 251).astype(np.uint8)), "the child reads the parent's bytes"
ok(d.cuMemsetD8(p, 0x5A, N))
ok(d.cuCtxSynchronize())
ok(d.cuIpcCloseMemHandle(p))
ok(d.cuIpcCloseMemHandle(p))
err, = d.cuIpcCloseMemHandle(p)
assert err == R.CUDA_ERROR_INVALID_VALUE, err
print("child ok")
'''


def test_ipc_memory_between_two_processes_of_the_simulator(cuda, ctx, py_subprocess):
    buf = check(cuda.cuMemAlloc(N))
    data = (np.arange(N) % 251).astype(np.uint8)
    check(cuda.cuMemcpyHtoD(buf, data.ctypes.data, N))
    h = check(cuda.cuIpcGetMemHandle(buf))
    # A process does not open its own handle.
    err, _ = cuda.cuIpcOpenMemHandle(h, 1)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_CONTEXT
    hexed = ctypes.string_at(h.getPtr(), 64).hex()
    out = py_subprocess(f"import sys; sys.argv = ['child', '{N}', '{hexed}']\n" + CHILD)
    assert "child ok" in out
    back = np.zeros(N, dtype=np.uint8)
    check(cuda.cuMemcpyDtoH(back.ctypes.data, buf, N))
    assert np.all(back == 0x5A), "the parent reads the child's memset"
    # The same allocation gives the same handle; it stays usable after the export.
    again = check(cuda.cuIpcGetMemHandle(buf))
    assert ctypes.string_at(again.getPtr(), 64) == ctypes.string_at(h.getPtr(), 64)
    check(cuda.cuMemsetD8(buf, 1, N))
    check(cuda.cuMemcpyDtoH(back.ctypes.data, buf, N))
    assert np.all(back == 1)
    check(cuda.cuMemFree(buf))


def test_pool_memory_and_events_have_no_ipc_handle_on_the_simulator(cuda, ctx):
    s = check(cuda.cuStreamCreate(0))
    p = check(cuda.cuMemAllocAsync(MiB, s))
    err, _ = cuda.cuIpcGetMemHandle(p)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE
    check(cuda.cuMemFreeAsync(p, s))
    check(cuda.cuStreamSynchronize(s))
    check(cuda.cuStreamDestroy(s))
    F = cuda.CUevent_flags
    ev = check(cuda.cuEventCreate(F.CU_EVENT_INTERPROCESS | F.CU_EVENT_DISABLE_TIMING))
    err, _ = cuda.cuIpcGetEventHandle(ev)
    assert err == cuda.CUresult.CUDA_ERROR_NOT_SUPPORTED
    check(cuda.cuEventDestroy(ev))
