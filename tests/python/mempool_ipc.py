"""Stream-ordered memory pools shared between processes through the pool: one role per process,
each run unmodified under `gpupool run` by pool-daemon/tests/mempool_ipc.rs (cuda-bindings).

    mempool_ipc.py exporter|importer|intruder WORKDIR NBYTES

- exporter (tenant `team`): creates a pool with handleTypes POSIX_FILE_DESCRIPTOR and a release
  threshold that keeps freed blocks, allocates NBYTES from it, writes them, exports the pool
  (a file descriptor) and the pointer (CUmemPoolPtrExportData), and hands both to each peer over
  a unix socket with SCM_RIGHTS (socket.send_fds). It reads back what the importer wrote, then
  frees the pointer (the block stays in its pool, reserved) and trims the pool once the importer
  saw its view end. The runtime's cudaMemPoolExportPointer gives the same export data, and
  cudaMemPoolExportToShareableHandle a descriptor the importer imports too.
- importer (tenant `team`): imports the pool from the descriptor and the pointer from the data,
  reads the exporter's bytes, writes its own; the imported pool does not allocate; the runtime's
  cudaMemPoolImportFromShareableHandle / cudaMemPoolImportPointer give the same pointer, closed by
  cudaFree. After the exporter's free its copies are INVALID_VALUE and the data no longer imports.
- intruder (tenant `other`): the same descriptor and data are INVALID_VALUE, as is a forged one.

Processes meet through files in WORKDIR (`name` written when a step is done); the test itself
writes `checked` once it read the ledgers while the importer held the memory.
"""

import ctypes
import os
import socket
import sys
import time

import numpy as np
from cuda.bindings import driver as d

R = d.CUresult
role, work, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
SOCK = os.path.join(work, "fds.sock")
POSIX_FD = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR


def ok(r):
    err, *rest = r
    assert err == R.CUDA_SUCCESS, err
    return rest[0] if len(rest) == 1 else (tuple(rest) or None)


def refused(r, what):
    err = r[0]
    assert err == R.CUDA_ERROR_INVALID_VALUE, (what, err)


def mark(name, text=""):
    with open(os.path.join(work, name + ".tmp"), "w") as f:
        f.write(text)
    os.rename(os.path.join(work, name + ".tmp"), os.path.join(work, name))


def wait(name):
    t0 = time.monotonic()
    while not os.path.exists(os.path.join(work, name)):
        assert time.monotonic() - t0 < 120, "never came: " + name
        time.sleep(0.005)
    return open(os.path.join(work, name)).read()


def data_bytes(data):
    # cuda-bindings exposes the 64 opaque bytes only through the struct's address.
    return ctypes.string_at(data.getPtr(), 64)


def data_from(raw):
    data = d.CUmemPoolPtrExportData()
    ctypes.memmove(data.getPtr(), raw, 64)
    return data


def receive():
    """(pool descriptors, pointer export data) from the exporter."""
    wait("listening")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(SOCK)
    msg, fds, _, _ = socket.recv_fds(s, 64, 2)
    s.close()
    assert len(msg) == 64 and len(fds) == 2, (len(msg), fds)
    return fds, msg


ok(d.cuInit(0))
dev = ok(d.cuDeviceGet(0))
ctx = ok(d.cuDevicePrimaryCtxRetain(dev))
ok(d.cuCtxSetCurrent(ctx))
s = ok(d.cuStreamCreate(0))
first = (np.arange(N, dtype=np.uint64) % 251).astype(np.uint8)
second = (np.arange(N, dtype=np.uint64) % 241).astype(np.uint8)[::-1].copy()
rt = ctypes.CDLL("libcudart.so.12")


def props(handle_types):
    p = d.CUmemPoolProps()
    p.allocType = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    p.handleTypes = handle_types
    p.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    p.location.id = 0
    return p


if role == "exporter":
    # A pool created without a handle type is not IPC capable, nor is its memory.
    plain = ok(d.cuMemPoolCreate(props(d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE)))
    refused(d.cuMemPoolExportToShareableHandle(plain, POSIX_FD, 0), "export of a plain pool")
    q = ok(d.cuMemAllocFromPoolAsync(4096, plain, s))
    refused(d.cuMemPoolExportPointer(q), "export of a plain pool's memory")
    ok(d.cuMemFreeAsync(q, s))
    ok(d.cuStreamSynchronize(s))
    ok(d.cuMemPoolDestroy(plain))

    pool = ok(d.cuMemPoolCreate(props(POSIX_FD)))
    # Freed blocks stay in the pool (reserved, charged): the free alone must end the importer's view.
    P = d.CUmemPool_attribute
    ok(d.cuMemPoolSetAttribute(pool, P.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, d.cuuint64_t(1 << 62)))
    buf = ok(d.cuMemAllocFromPoolAsync(N, pool, s))
    ok(d.cuMemcpyHtoDAsync(buf, first.ctypes.data, N, s))
    ok(d.cuStreamSynchronize(s))
    refused(d.cuMemPoolExportToShareableHandle(pool, POSIX_FD, 1), "flags other than 0")
    fd = ok(d.cuMemPoolExportToShareableHandle(pool, POSIX_FD, 0))
    assert isinstance(fd, int) and fd >= 0, fd
    data = data_bytes(ok(d.cuMemPoolExportPointer(buf)))
    # The runtime's export is the driver's: the same data, and another descriptor for the pool.
    raw = ctypes.create_string_buffer(64)
    assert rt.cudaMemPoolExportPointer(raw, ctypes.c_void_p(int(buf))) == 0
    assert raw.raw == data, "cudaMemPoolExportPointer gives the driver's export data"
    rt_fd = ctypes.c_int(-1)
    assert rt.cudaMemPoolExportToShareableHandle(ctypes.byref(rt_fd), ctypes.c_void_p(int(pool)), 1, 0) == 0
    assert rt_fd.value >= 0 and rt_fd.value != fd
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(SOCK)
    srv.listen(2)
    mark("listening")
    for _ in range(2):  # the importer and the intruder, in either order
        conn, _ = srv.accept()
        socket.send_fds(conn, [data], [fd, rt_fd.value])
        conn.close()
    srv.close()
    os.close(fd)
    os.close(rt_fd.value)
    wait("written")
    back = np.zeros(N, dtype=np.uint8)
    ok(d.cuMemcpyDtoH(back.ctypes.data, buf, N))
    assert np.array_equal(back, second), "the importer's bytes are in the exporter's allocation"
    wait("refused")
    wait("checked")
    ok(d.cuMemFreeAsync(buf, s))
    ok(d.cuStreamSynchronize(s))
    reserved = int(ok(d.cuMemPoolGetAttribute(pool, P.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)))
    assert reserved == N, ("the freed block stays in the pool", reserved)
    mark("freed")
    wait("done")
    ok(d.cuMemPoolTrimTo(pool, 0))
    # An exported block given back with cuMemFree ends its export with it; memory the pool
    # reserves later, at that address or another, frees as any other.
    q = ok(d.cuMemAllocFromPoolAsync(N, pool, s))
    ok(d.cuMemPoolExportPointer(q))
    ok(d.cuMemFree(q))
    q2 = ok(d.cuMemAllocFromPoolAsync(N, pool, s))
    ok(d.cuMemFreeAsync(q2, s))
    ok(d.cuStreamSynchronize(s))
    ok(d.cuMemPoolTrimTo(pool, 0))
    ok(d.cuMemPoolDestroy(pool))
    print("exporter ok")

elif role == "importer":
    (fd, rt_fd), raw = receive()
    pool = ok(d.cuMemPoolImportFromShareableHandle(fd, POSIX_FD, 0))
    refused(d.cuMemPoolImportFromShareableHandle(fd, POSIX_FD, 1), "flags other than 0")
    # An imported pool does not allocate, nor becomes a device's current pool.
    refused(d.cuMemAllocFromPoolAsync(4096, pool, s), "allocation from an imported pool")
    refused(d.cuDeviceSetMemPool(dev, pool), "an imported pool as the current pool")
    p = ok(d.cuMemPoolImportPointer(pool, data_from(raw)))
    got = np.zeros(N, dtype=np.uint8)
    ok(d.cuMemcpyDtoH(got.ctypes.data, p, N))
    assert np.array_equal(got, first), "the importer reads what the exporter wrote"
    ok(d.cuMemcpyHtoD(p, second.ctypes.data, N))
    # Through the runtime: the pool from the runtime's descriptor, the same pointer, closed by cudaFree.
    rt_pool = ctypes.c_void_p()
    assert rt.cudaMemPoolImportFromShareableHandle(ctypes.byref(rt_pool), ctypes.c_void_p(rt_fd), 1, 0) == 0
    rp = ctypes.c_void_p()
    assert rt.cudaMemPoolImportPointer(ctypes.byref(rp), rt_pool, ctypes.create_string_buffer(raw, 64)) == 0
    assert rp.value == int(p), (rp.value, int(p))
    assert rt.cudaFree(rp) == 0
    ok(d.cuMemcpyDtoH(got.ctypes.data, p, 64))  # the driver's import is still open
    free, total = ok(d.cuMemGetInfo())
    mark("written", f"{free} {total}")
    wait("freed")
    err, = d.cuMemcpyDtoH(got.ctypes.data, p, N)
    assert err == R.CUDA_ERROR_INVALID_VALUE, ("the view ends with the exporter's free", err)
    refused(d.cuMemPoolImportPointer(pool, data_from(raw)), "a pointer its exporter freed")
    ok(d.cuMemFreeAsync(p, s))  # closes this process's (dead) view
    ok(d.cuStreamSynchronize(s))
    err, = d.cuMemFree(p)
    assert err == R.CUDA_ERROR_INVALID_VALUE, ("closed once", err)
    ok(d.cuMemPoolDestroy(pool))
    mark("done")
    print("importer ok")

elif role == "intruder":
    (fd, _), raw = receive()
    refused(d.cuMemPoolImportFromShareableHandle(fd, POSIX_FD, 0), "another tenant's pool")
    own = ok(d.cuMemPoolCreate(props(POSIX_FD)))
    refused(d.cuMemPoolImportPointer(own, data_from(raw)), "a pointer through a pool not imported")
    # A descriptor that is not the pool's export.
    forged = os.memfd_create("forged")
    os.write(forged, b"GPPOOLX1" + bytes(16))
    refused(d.cuMemPoolImportFromShareableHandle(forged, POSIX_FD, 0), "a forged descriptor")
    ok(d.cuMemPoolDestroy(own))
    mark("refused")
    print("intruder ok")
