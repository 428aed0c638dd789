"""Memory pools shared between processes of the simulator, with cuda-bindings: a pool created with
handleTypes POSIX_FILE_DESCRIPTOR is exported as a descriptor (cuMemPoolExportToShareableHandle)
and one of its allocations as export data (cuMemPoolExportPointer); a child process receives both
over a unix socket (SCM_RIGHTS), imports the pool and the pointer, reads the parent's bytes and
writes its own, which the parent reads back. The importer is charged nothing, its imported pool
does not allocate, and it frees the pointer with cuMemFreeAsync. A pool created without a handle
type, and its memory, are not exported (INVALID_VALUE)."""

import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
from conftest import check, subprocess_env

MiB = 1 << 20
N = 2 * MiB

CHILD = r"""
import ctypes, socket, sys
import numpy as np
from cuda.bindings import driver as d
R = d.CUresult
def ok(r):
    err, *rest = r
    assert err == R.CUDA_SUCCESS, err
    return rest[0] if len(rest) == 1 else (tuple(rest) or None)
N = int(sys.argv[1])
sock = socket.socket(fileno=int(sys.argv[2]))
raw, fds, _, _ = socket.recv_fds(sock, 64, 1)
ok(d.cuInit(0))
ctx = ok(d.cuCtxCreate(0, ok(d.cuDeviceGet(0))))
s = ok(d.cuStreamCreate(0))
POSIX_FD = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
pool = ok(d.cuMemPoolImportFromShareableHandle(fds[0], POSIX_FD, 0))
err, _ = d.cuMemAllocFromPoolAsync(4096, pool, s)
assert err == R.CUDA_ERROR_INVALID_VALUE, ("an imported pool does not allocate", err)
data = d.CUmemPoolPtrExportData()
ctypes.memmove(data.getPtr(), raw, 64)
free0 = ok(d.cuMemGetInfo())[0]
p = ok(d.cuMemPoolImportPointer(pool, data))
assert ok(d.cuMemGetInfo())[0] == free0, "the importer is charged nothing"
got = np.zeros(N, dtype=np.uint8)
ok(d.cuMemcpyDtoH(got.ctypes.data, p, N))
assert np.array_equal(got, (np.arange(N) % 251).astype(np.uint8)), "the child reads the parent's bytes"
ok(d.cuMemsetD8Async(p, 0x5A, N, s))
ok(d.cuMemFreeAsync(p, s))
ok(d.cuStreamSynchronize(s))
ok(d.cuMemPoolDestroy(pool))
sock.sendall(b"done")
print("child ok")
"""


def props(cuda, handle_types):
    p = cuda.CUmemPoolProps()
    p.allocType = cuda.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    p.handleTypes = handle_types
    p.location.type = cuda.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    p.location.id = 0
    return p


def test_pool_and_pointer_shared_with_another_process_of_the_simulator(cuda, ctx):
    import ctypes

    H = cuda.CUmemAllocationHandleType
    s = check(cuda.cuStreamCreate(0))
    plain = check(cuda.cuMemPoolCreate(props(cuda, H.CU_MEM_HANDLE_TYPE_NONE)))
    err, _ = cuda.cuMemPoolExportToShareableHandle(plain, H.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE, err
    q = check(cuda.cuMemAllocFromPoolAsync(4096, plain, s))
    err, _ = cuda.cuMemPoolExportPointer(q)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE, err
    check(cuda.cuMemFreeAsync(q, s))
    check(cuda.cuStreamSynchronize(s))
    check(cuda.cuMemPoolDestroy(plain))

    pool = check(cuda.cuMemPoolCreate(props(cuda, H.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)))
    buf = check(cuda.cuMemAllocFromPoolAsync(N, pool, s))
    data = (np.arange(N) % 251).astype(np.uint8)
    check(cuda.cuMemcpyHtoDAsync(buf, data.ctypes.data, N, s))
    fd = check(cuda.cuMemPoolExportToShareableHandle(pool, H.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))
    # A process does not import its own pool.
    err, _ = cuda.cuMemPoolImportFromShareableHandle(fd, H.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE, err
    raw = ctypes.string_at(check(cuda.cuMemPoolExportPointer(buf)).getPtr(), 64)
    ours, theirs = socket.socketpair()
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHILD), str(N), str(theirs.fileno())],
        env=subprocess_env(),
        pass_fds=[theirs.fileno()],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    theirs.close()
    socket.send_fds(ours, [raw], [fd])
    os.close(fd)  # the program owns the descriptor; the child has its own copy
    out, err_text = child.communicate(timeout=120)
    assert child.returncode == 0 and "child ok" in out, f"{child.returncode}\n{out}\n{err_text}"
    assert ours.recv(4) == b"done"
    back = np.zeros(N, dtype=np.uint8)
    check(cuda.cuMemcpyDtoH(back.ctypes.data, buf, N))
    assert np.all(back == 0x5A), "the parent reads the child's memset"
    check(cuda.cuMemFreeAsync(buf, s))
    check(cuda.cuStreamSynchronize(s))
    check(cuda.cuMemPoolDestroy(pool))
    check(cuda.cuStreamDestroy(s))
