"""IPC memory handles through the pool: unmodified cuda-bindings programs under `gpupool run`
(see pool.py), as processes of two tenants.

- One process of tenant `a` allocates and fills a buffer and exports it (cuIpcGetMemHandle);
  another process of `a` opens the handle (cuIpcOpenMemHandle_v2), reads the bytes, writes
  new ones that the first reads back. The memory is counted once, in the allocator's
  session: the tenant's ledger holds the buffer once.
- A process of tenant `b` opening the same handle gets CUDA_ERROR_INVALID_HANDLE, and the
  daemon logs the refusal naming both tenants.
- When the allocator frees the buffer, the opener's view ends: its copies are refused
  (CUDA_ERROR_INVALID_VALUE) and the handle can no longer be opened (INVALID_HANDLE).
- Event handles: an INTERPROCESS | DISABLE_TIMING event exported by the allocator is
  opened, synchronized, queried and waited on by the opener, still after the allocator
  destroyed its own; another tenant's open is INVALID_HANDLE; an ordinary event is not
  exported (INVALID_VALUE).
- The runtime's cudaIpcGetMemHandle / cudaIpcOpenMemHandle / cudaIpcCloseMemHandle /
  cudaIpcGetEventHandle (through ctypes on libcudart.so.12, which is the pool's) are the same
  handles.
"""

import hashlib
import os
import subprocess

from conftest import SIM_LIBDIR
from pool import MiB, Daemon, wait_for

N = 4 * MiB

CLIENT = r"""
import ctypes, os, sys, time
import numpy as np
from cuda.bindings import driver as d
R = d.CUresult
role, work = sys.argv[1], sys.argv[2]
N = int(sys.argv[3])
def ok(r):
    err, *rest = r
    assert err == R.CUDA_SUCCESS, err
    return rest[0] if len(rest) == 1 else (tuple(rest) or None)
def mark(name, text=""):
    with open(os.path.join(work, name + ".tmp"), "w") as f:
        f.write(text)
    os.rename(os.path.join(work, name + ".tmp"), os.path.join(work, name))
def wait(name):
    t0 = time.monotonic()
    while not os.path.exists(os.path.join(work, name)):
        assert time.monotonic() - t0 < 60, "never came: " + name
        time.sleep(0.002)
    return open(os.path.join(work, name)).read()
def handle_bytes(h):
    # cuda-bindings exposes the 64 opaque bytes only through the struct's address.
    return ctypes.string_at(h.getPtr(), 64)
def handle_from(hexbytes):
    h = d.CUipcMemHandle()
    ctypes.memmove(h.getPtr(), bytes.fromhex(hexbytes), 64)
    return h
ok(d.cuInit(0))
dev = ok(d.cuDeviceGet(0))
ctx = ok(d.cuDevicePrimaryCtxRetain(dev))
ok(d.cuCtxSetCurrent(ctx))
first = (np.arange(N, dtype=np.uint64) % 251).astype(np.uint8)
second = (np.arange(N, dtype=np.uint64) % 241).astype(np.uint8)[::-1].copy()

if role == "allocator":
    buf = ok(d.cuMemAlloc(N))
    ok(d.cuMemcpyHtoD(buf, first.ctypes.data, N))
    h = ok(d.cuIpcGetMemHandle(buf))
    again = ok(d.cuIpcGetMemHandle(buf))
    assert handle_bytes(again) == handle_bytes(h), "one allocation, one handle"
    # A process does not open its own handle.
    err, _ = d.cuIpcOpenMemHandle(h, 1)
    assert err == R.CUDA_ERROR_INVALID_CONTEXT, err
    # Memory of a stream-ordered pool is not exported this way.
    s = ok(d.cuStreamCreate(0))
    pooled = ok(d.cuMemAllocAsync(MiB_ := 1 << 20, s))
    err, _ = d.cuIpcGetMemHandle(pooled)
    assert err == R.CUDA_ERROR_INVALID_VALUE, err
    ok(d.cuMemFreeAsync(pooled, s))
    ok(d.cuStreamSynchronize(s))
    ok(d.cuMemPoolTrimTo(ok(d.cuDeviceGetDefaultMemPool(dev)), 0))
    # The runtime's handle is the driver's.
    rt = ctypes.CDLL("libcudart.so.12")
    raw = ctypes.create_string_buffer(64)
    assert rt.cudaIpcGetMemHandle(raw, ctypes.c_void_p(int(buf))) == 0
    assert raw.raw == handle_bytes(h)
    # An event shared with the opener: recorded here, waited for there.
    plain = ok(d.cuEventCreate(0))
    err, _ = d.cuIpcGetEventHandle(plain)
    assert err == R.CUDA_ERROR_INVALID_VALUE, ("not INTERPROCESS | DISABLE_TIMING", err)
    F = d.CUevent_flags
    ev = ok(d.cuEventCreate(F.CU_EVENT_INTERPROCESS | F.CU_EVENT_DISABLE_TIMING))
    ok(d.cuEventRecord(ev, s))
    eh = ok(d.cuIpcGetEventHandle(ev))
    raw_ev = ctypes.create_string_buffer(64)
    assert rt.cudaIpcGetEventHandle(raw_ev, ctypes.c_void_p(int(ev))) == 0
    assert raw_ev.raw == handle_bytes(eh)
    mark("handle", handle_bytes(h).hex() + " " + handle_bytes(eh).hex())
    wait("opened")
    # The opener's event lives on after the exporter destroys its own.
    ok(d.cuEventDestroy(ev))
    mark("event_destroyed")
    wait("written")
    back = np.zeros(N, dtype=np.uint8)
    ok(d.cuMemcpyDtoH(back.ctypes.data, buf, N))
    assert np.array_equal(back, second), "the opener's bytes are in the allocator's buffer"
    wait("refused")
    # The test reads the ledger while the buffer is still allocated.
    wait("checked")
    ok(d.cuMemFree(buf))
    mark("freed")
    wait("done")
    print("allocator ok")

elif role == "opener":
    mem_hex, ev_hex = wait("handle").split()
    h = handle_from(mem_hex)
    eh = d.CUipcEventHandle()
    ctypes.memmove(eh.getPtr(), bytes.fromhex(ev_hex), 64)
    ev = ok(d.cuIpcOpenEventHandle(eh))
    mark("opened")
    wait("event_destroyed")
    ok(d.cuEventSynchronize(ev))
    ok(d.cuEventQuery(ev))
    s = ok(d.cuStreamCreate(0))
    ok(d.cuStreamWaitEvent(s, ev, 0))
    ok(d.cuStreamSynchronize(s))
    p = ok(d.cuIpcOpenMemHandle(h, d.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
    p2 = ok(d.cuIpcOpenMemHandle(h, 1))
    assert int(p2) == int(p), "opened twice: the same pointer, counted"
    ok(d.cuIpcCloseMemHandle(p2))
    got = np.zeros(N, dtype=np.uint8)
    ok(d.cuMemcpyDtoH(got.ctypes.data, p, N))
    assert np.array_equal(got, first), "the opener reads what the allocator wrote"
    free, total = ok(d.cuMemGetInfo())
    ok(d.cuMemcpyHtoD(p, second.ctypes.data, N))
    # The runtime opens the same handle to the same pointer.
    rt = ctypes.CDLL("libcudart.so.12")
    rp = ctypes.c_void_p()
    class Handle(ctypes.Structure):
        _fields_ = [("reserved", ctypes.c_ubyte * 64)]
    r = rt.cudaIpcOpenMemHandle(ctypes.byref(rp), Handle.from_buffer_copy(handle_bytes(h)), 1)
    assert r == 0, r
    assert rp.value == int(p)
    assert rt.cudaIpcCloseMemHandle(rp) == 0
    mark("written", f"{free} {total}")
    wait("freed")
    # After the intruder's attempt (the allocator waited for it): the last holder's destroy.
    ok(d.cuEventDestroy(ev))
    err, = d.cuMemcpyDtoH(got.ctypes.data, p, N)
    assert err == R.CUDA_ERROR_INVALID_VALUE, ("the view ends with the allocator's free", err)
    err, _ = d.cuIpcOpenMemHandle(h, 1)
    assert err == R.CUDA_ERROR_INVALID_HANDLE, err
    ok(d.cuIpcCloseMemHandle(p))
    err, = d.cuIpcCloseMemHandle(p)
    assert err == R.CUDA_ERROR_INVALID_VALUE, err
    mark("done")
    print("opener ok")

elif role == "intruder":
    mem_hex, ev_hex = wait("handle").split()
    h = handle_from(mem_hex)
    eh = d.CUipcEventHandle()
    ctypes.memmove(eh.getPtr(), bytes.fromhex(ev_hex), 64)
    err, _ = d.cuIpcOpenEventHandle(eh)
    assert err == R.CUDA_ERROR_INVALID_HANDLE, err
    err, _ = d.cuIpcOpenMemHandle(h, 1)
    assert err == R.CUDA_ERROR_INVALID_HANDLE, err
    forged = d.CUipcMemHandle()
    err, _ = d.cuIpcOpenMemHandle(forged, 1)
    assert err == R.CUDA_ERROR_INVALID_HANDLE, err
    mark("refused")
    print("intruder ok")
"""


def sha(token):
    return hashlib.sha256(token.encode()).hexdigest()


def test_ipc_between_processes_of_one_tenant_and_refused_across_tenants(tmp_path):
    config = f"""
[[tenant]]
name = "a"
token_sha256 = "{sha('tenant-a')}"
memory = "256MiB"

[[tenant]]
name = "b"
token_sha256 = "{sha('tenant-b')}"
memory = "256MiB"
"""
    with Daemon(SIM_LIBDIR, config=config, devices=1, memory="1GiB") as d:
        procs = {}
        for role, token in (("allocator", "tenant-a"), ("opener", "tenant-a"), ("intruder", "tenant-b")):
            procs[role] = d.python(
                CLIENT, role, tmp_path, N, token=token, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )

        def written():
            for role, p in procs.items():
                if p.poll() not in (None, 0):
                    out, err = p.communicate()
                    raise AssertionError(f"{role} exited {p.returncode}:\n{out}\n{err}\n--- daemon ---\n{d.log()}")
            f = tmp_path / "written"
            return f.exists() and f.read_text()

        free, total = map(int, wait_for(written, 60, "the opener's write").split())
        # Counted once, where it was allocated.
        assert d.used("a")[0] == N, d.used("a")
        assert (free, total) == (256 * MiB - N, 256 * MiB)
        assert d.used("b")[0] == 0
        (tmp_path / "checked").write_text("")
        for role, p in procs.items():
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0 and f"{role} ok" in out, f"{role}: {p.returncode}\n{out}\n{err}\n{d.log()}"
        for what in ("cuIpcOpenMemHandle", "cuIpcOpenEventHandle"):
            refusals = [l for l in d.log().splitlines() if what + " refused" in l]
            assert refusals and "tenant=b" in refusals[0] and "owner=a" in refusals[0], d.log()
        wait_for(lambda: d.used("a")[0] == 0, 5, "tenant a's memory to be released")
