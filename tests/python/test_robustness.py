"""No client can take the pool down (issue: "no client can crash the pool").

Unmodified cuda-bindings programs under `gpupool run` against a `gpupool daemon` on the
simulator (see pool.py):

- Every call that ends an object while the client's work on it is still queued on a
  non-blocking stream: `cuMemFree` after an async memset (the crash that took the daemon
  down, three times, with a tenant held to 128 MiB too), after async copies and after a
  kernel; `cuMemFreeAsync` on another stream; `cuMemFreeHost` under queued copies;
  `cuModuleUnload` with queued launches; `cuStreamDestroy`, `cuEventDestroy` and `cuCtxDestroy`
  with work queued; a client that exits with all of that still queued. Each call gets the
  documented result, and the daemon and another tenant's client carry on.
- A tenant that faults again and again (illegal addresses in fresh contexts and fresh
  processes) while two other tenants compute and check every result: theirs stay right, the
  faulter gets CUDA_ERROR_ILLEGAL_ADDRESS each time, and nothing is left in the ledger.
"""

import hashlib
import subprocess

from conftest import SIM_LIBDIR
from pool import Daemon, read_lines, wait_for

MiB = 1 << 20


def sha(token):
    return hashlib.sha256(token.encode()).hexdigest()


def tenants(*names, memory="512MiB"):
    return "".join(
        f'\n[[tenant]]\nname = "{n}"\ntoken_sha256 = "{sha("token-" + n)}"\nmemory = "{memory}"\n' for n in names
    )


def finish(d, p, what, timeout=120):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"{what}: timed out\n{out}\n{err}\n--- daemon log ---\n{d.log()[-4000:]}")
    if p.returncode != 0:
        raise AssertionError(f"{what}: exit {p.returncode}\n{out}\n{err}\n--- daemon log ---\n{d.log()[-4000:]}")
    return out


def assert_alive(d):
    assert d.proc.poll() is None, f"the daemon died ({d.proc.returncode}):\n{d.log()[-6000:]}"


# Shared by the client programs: the driver through cuda-bindings, and `fill(p, v)`, which
# stores v at p[tid.x] (u32).
PRELUDE = r"""
import ctypes, os, sys, time
import numpy as np
from cuda.bindings import driver as d
R = d.CUresult
MiB = 1 << 20
FILL_PTX = b'''.version 8.0
.target sm_90
.address_size 64
.visible .entry fill(.param .u64 p, .param .u32 v)
{
    .reg .b64 %rd<4>;
    .reg .b32 %r<3>;
    ld.param.u64 %rd1, [p];
    ld.param.u32 %r1, [v];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r2, %tid.x;
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd2, %rd2, %rd3;
    st.global.u32 [%rd2], %r1;
    ret;
}
\0'''
def ok(result, what=""):
    err = result[0]
    assert err == R.CUDA_SUCCESS, (what, err)
    return result[1] if len(result) == 2 else result[1:]
def fill(fn, p, v, threads, stream):
    args = [ctypes.c_uint64(int(p)), ctypes.c_uint32(v)]
    params = (ctypes.c_void_p * 2)(*[ctypes.addressof(a) for a in args])
    return d.cuLaunchKernel(fn, 1, 1, 1, threads, 1, 1, 0, stream, ctypes.addressof(params), 0)[0]
ok(d.cuInit(0))
dev = ok(d.cuDeviceGet(0))
def new_context():
    ctx = ok(d.cuCtxCreate(0, dev))
    mod = ok(d.cuModuleLoadData(FILL_PTX))
    return ctx, mod, ok(d.cuModuleGetFunction(mod, b"fill"))
NON_BLOCKING = d.CUstream_flags.CU_STREAM_NON_BLOCKING
"""

# Each scenario ends an object right after queuing work on it, and prints `name result`.
ENDER = PRELUDE + r"""
ctx, mod, fn = new_context()
def say(name, err):
    print(name, err.name if hasattr(err, "name") else err, flush=True)
def stream():
    return ok(d.cuStreamCreate(NON_BLOCKING))

# The issue's reproducer, three times.
for i in range(3):
    s = stream()
    p = ok(d.cuMemAlloc(64 * MiB))
    ok(d.cuMemsetD8Async(p, 1, 64 * MiB, s))
    say(f"memset_then_free_{i}", d.cuMemFree(p)[0])
    say(f"memset_then_free_sync_{i}", d.cuStreamSynchronize(s)[0])

s = stream()
pinned = ok(d.cuMemHostAlloc(8 * MiB, d.CU_MEMHOSTALLOC_DEVICEMAP))
a, b = ok(d.cuMemAlloc(8 * MiB)), ok(d.cuMemAlloc(8 * MiB))
ok(d.cuMemcpyHtoDAsync(a, pinned, 8 * MiB, s))
ok(d.cuMemcpyDtoDAsync(b, a, 8 * MiB, s))
ok(d.cuMemcpyDtoHAsync(pinned, b, 8 * MiB, s))
say("copies_then_free_src", d.cuMemFree(a)[0])
say("copies_then_free_dst", d.cuMemFree(b)[0])
say("copies_then_free_host", d.cuMemFreeHost(pinned)[0])
say("copies_sync", d.cuStreamSynchronize(s)[0])

s = stream()
p = ok(d.cuMemAlloc(4096))
for v in range(50):
    assert fill(fn, p, v, 1024, s) == R.CUDA_SUCCESS
say("kernels_then_free", d.cuMemFree(p)[0])
say("kernels_sync", d.cuStreamSynchronize(s)[0])

s, other = stream(), stream()
p = ok(d.cuMemAlloc(32 * MiB))
ok(d.cuMemsetD8Async(p, 3, 32 * MiB, s))
say("free_async_on_another_stream", d.cuMemFreeAsync(p, other)[0])
say("free_async_sync", d.cuCtxSynchronize()[0])

s = stream()
keep = ok(d.cuMemAlloc(4096))
m2 = ok(d.cuModuleLoadData(FILL_PTX))
f2 = ok(d.cuModuleGetFunction(m2, b"fill"))
for v in range(20):
    assert fill(f2, keep, 0x5eed, 1024, s) == R.CUDA_SUCCESS
say("module_unload_with_queued_launches", d.cuModuleUnload(m2)[0])
say("module_unload_sync", d.cuStreamSynchronize(s)[0])
host = np.zeros(1024, np.uint32)
ok(d.cuMemcpyDtoH(host.ctypes.data, keep, 4096))
say("module_unload_result", "ok" if (host == 0x5eed).all() else host[:8])

s = stream()
ok(d.cuMemsetD32Async(keep, 0x42424242, 1024, s))
say("stream_destroy_with_queued_work", d.cuStreamDestroy(s)[0])
ok(d.cuCtxSynchronize())
ok(d.cuMemcpyDtoH(host.ctypes.data, keep, 4096))
say("stream_destroy_result", "ok" if (host == 0x42424242).all() else host[:8])
say("stream_destroy_then_use", d.cuStreamSynchronize(s)[0])

s = stream()
e = ok(d.cuEventCreate(0))
ok(d.cuMemsetD8Async(keep, 1, 4096, s))
ok(d.cuEventRecord(e, s))
say("event_destroy_while_recorded", d.cuEventDestroy(e)[0])
say("event_destroy_then_wait", d.cuStreamWaitEvent(s, e, 0)[0])
ok(d.cuStreamSynchronize(s))

c2, m3, f3 = new_context()
s = stream()
q = ok(d.cuMemAlloc(16 * MiB))
ok(d.cuMemsetD8Async(q, 7, 16 * MiB, s))
for v in range(20):
    assert fill(f3, q, v, 1024, s) == R.CUDA_SUCCESS
say("ctx_destroy_with_queued_work", d.cuCtxDestroy(c2)[0])
ok(d.cuCtxSetCurrent(ctx))
say("ctx_destroy_then_free", d.cuMemFree(q)[0])

# Exit with work still queued on memory never freed: the daemon cleans up after us.
s = stream()
for i in range(4):
    p = ok(d.cuMemAlloc(16 * MiB))
    ok(d.cuMemsetD8Async(p, i, 16 * MiB, s))
    assert fill(fn, p, i, 1024, s) == R.CUDA_SUCCESS
say("exit_with_queued_work", "ok")
os._exit(0)
"""

EXPECTED = {
    **{f"memset_then_free_{i}": "CUDA_SUCCESS" for i in range(3)},
    **{f"memset_then_free_sync_{i}": "CUDA_SUCCESS" for i in range(3)},
    "copies_then_free_src": "CUDA_SUCCESS",
    "copies_then_free_dst": "CUDA_SUCCESS",
    "copies_then_free_host": "CUDA_SUCCESS",
    "copies_sync": "CUDA_SUCCESS",
    "kernels_then_free": "CUDA_SUCCESS",
    "kernels_sync": "CUDA_SUCCESS",
    "free_async_on_another_stream": "CUDA_SUCCESS",
    "free_async_sync": "CUDA_SUCCESS",
    "module_unload_with_queued_launches": "CUDA_SUCCESS",
    "module_unload_sync": "CUDA_SUCCESS",
    "module_unload_result": "ok",
    "stream_destroy_with_queued_work": "CUDA_SUCCESS",
    "stream_destroy_result": "ok",
    # A destroyed stream's handle is no longer the client's.
    "stream_destroy_then_use": "CUDA_ERROR_INVALID_HANDLE",
    "event_destroy_while_recorded": "CUDA_SUCCESS",
    "event_destroy_then_wait": "CUDA_ERROR_INVALID_HANDLE",
    "ctx_destroy_with_queued_work": "CUDA_SUCCESS",
    # The context's memory went with it.
    "ctx_destroy_then_free": "CUDA_ERROR_INVALID_VALUE",
    "exit_with_queued_work": "ok",
}

# Another tenant's client: its buffer must keep its bytes while the ender works.
BYSTANDER = PRELUDE + r"""
out, stop = sys.argv[1:3]
ctx, mod, fn = new_context()
s = ok(d.cuStreamCreate(NON_BLOCKING))
n = 1 << 16
p = ok(d.cuMemAlloc(4 * n))
rounds = 0
host = np.zeros(n, np.uint32)
while not os.path.exists(stop) or rounds < 3:
    ok(d.cuMemsetD32Async(p, rounds, n, s))
    assert fill(fn, p, rounds + 1, 1024, s) == R.CUDA_SUCCESS
    ok(d.cuMemcpyDtoHAsync(host.ctypes.data, p, 4 * n, s))
    ok(d.cuStreamSynchronize(s))
    assert (host[:1024] == rounds + 1).all() and (host[1024:] == rounds).all(), (rounds, host[:4], host[1024:1028])
    rounds += 1
with open(out, "w") as f:
    f.write(f"ok {rounds}\n")
"""


def test_every_ending_call_with_queued_work_gets_its_documented_result_and_the_daemon_lives(tmp_path):
    with Daemon(SIM_LIBDIR, config=tenants("ender", "bystander"), devices=1, memory="2GiB") as d:
        stop, out = tmp_path / "stop", tmp_path / "bystander.out"
        bystander = d.python(BYSTANDER, out, stop, token="token-bystander", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for memory in (None, "128MiB"):
            p = d.python(ENDER, token="token-ender", memory=memory, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            lines = finish(d, p, f"the ender (--memory {memory})").split()
            got = dict(zip(lines[::2], lines[1::2]))
            assert got == EXPECTED, f"--memory {memory}: {got}"
            assert_alive(d)
        stop.touch()
        finish(d, bystander, "the bystander")
        assert read_lines(out)[0].startswith("ok "), read_lines(out)
        assert_alive(d)
        wait_for(lambda: d.used("ender")[0] == 0 and d.used("bystander")[0] == 0, 5, "every byte back in the ledger")
        st = d.status()
        assert all(t["sessions"] == 0 for t in st["tenants"]), st["tenants"]


# Faults on purpose: one good launch, then a store 4 MiB past a 4 KiB allocation
# (CUDA_ERROR_ILLEGAL_ADDRESS). As on a GPU, the error is sticky: the process's contexts stay
# poisoned (in the pool: the tenant's context, until its sessions have ended), so each fault
# is a fresh process.
FAULTER = PRELUDE + r"""
ctx, mod, fn = new_context()
p = ok(d.cuMemAlloc(4096))
assert fill(fn, p, 1, 64, 0) == R.CUDA_SUCCESS
ok(d.cuCtxSynchronize())
assert fill(fn, int(p) + 4 * MiB, 1, 64, 0) == R.CUDA_SUCCESS  # queued; fails on the device
codes = [d.cuCtxSynchronize()[0].name, d.cuMemAlloc(4096)[0].name]
print(" ".join(codes))
"""


def test_a_tenant_faulting_again_and_again_leaves_two_others_computing_right(tmp_path):
    with Daemon(SIM_LIBDIR, config=tenants("a", "b", "faulty"), devices=1, memory="2GiB") as d:
        stop = tmp_path / "stop"
        outs = {t: tmp_path / f"{t}.out" for t in ("a", "b")}
        workers = {
            t: d.python(BYSTANDER, outs[t], stop, token=f"token-{t}", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for t in ("a", "b")
        }
        # Faulting processes in turn, two of them SIGKILLed with their fault queued.
        for i in range(8):
            wait_for(lambda: d.tenant("faulty") is None or d.tenant("faulty")["sessions"] == 0, 10, "the last faulter gone")
            f = d.python(FAULTER, token="token-faulty", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if i % 4 == 1:
                wait_for(lambda: d.tenant("faulty") and d.tenant("faulty")["sessions"] > 0, 20, "the faulter's session")
                f.kill()
                f.communicate()
                continue
            assert finish(d, f, f"faulter {i}").split() == ["CUDA_ERROR_ILLEGAL_ADDRESS"] * 2
            assert_alive(d)
        stop.touch()
        for t, w in workers.items():
            finish(d, w, f"tenant {t}")
            rounds = int(read_lines(outs[t])[0].split()[1])
            assert rounds >= 3, rounds
        assert_alive(d)
        wait_for(lambda: all(d.used(t)[0] == 0 for t in ("a", "b", "faulty")), 5, "every tenant's memory back")


# Page-locked memory used by one device's stream and then another's: freed while the second
# device's copies into it are still queued. The daemon maps the client's page-locked memory
# (a shared-memory region) and must not unmap it under either device's queued work.
PINNED_ACROSS_DEVICES = PRELUDE + r"""
ctx0 = ok(d.cuDevicePrimaryCtxRetain(ok(d.cuDeviceGet(0))))
ctx1 = ok(d.cuDevicePrimaryCtxRetain(ok(d.cuDeviceGet(1))))
ok(d.cuCtxSetCurrent(ctx0))
pinned = ok(d.cuMemHostAlloc(32 * MiB, d.CU_MEMHOSTALLOC_DEVICEMAP | d.CU_MEMHOSTALLOC_PORTABLE))
s0 = ok(d.cuStreamCreate(NON_BLOCKING))
a = ok(d.cuMemAlloc(32 * MiB))
ok(d.cuMemcpyHtoDAsync(a, pinned, 32 * MiB, s0))
ok(d.cuStreamSynchronize(s0))
ok(d.cuCtxSetCurrent(ctx1))
s1 = ok(d.cuStreamCreate(NON_BLOCKING))
b = ok(d.cuMemAlloc(256 * MiB))
for i in range(8):
    ok(d.cuMemsetD8Async(b, i, 256 * MiB, s1))  # keeps device 1 busy
for i in range(8):
    ok(d.cuMemcpyDtoHAsync(pinned, b, 32 * MiB, s1))
print("free_host", d.cuMemFreeHost(pinned)[0].name)
print("sync", d.cuStreamSynchronize(s1)[0].name)
"""


def test_page_locked_memory_freed_under_another_devices_queued_copies(tmp_path):
    with Daemon(SIM_LIBDIR, config=tenants("t", memory="1GiB"), devices=2, memory="2GiB") as d:
        for _ in range(3):
            p = d.python(PINNED_ACROSS_DEVICES, token="token-t", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert finish(d, p, "the client").split() == ["free_host", "CUDA_SUCCESS", "sync", "CUDA_SUCCESS"]
            assert_alive(d)


# Tenant B's page-locked memory lives in the daemon's process as a mapped region; tenant A
# learns where (here from /proc/<daemon>/maps, which an attacker would have to guess) and
# launches kernels that store there. They must fault in A's context and leave B's bytes alone.
PINNED_OWNER = PRELUDE + r"""
ready, stop = sys.argv[1:3]
ctx, mod, fn = new_context()
n = 1 << 20
pinned = ok(d.cuMemHostAlloc(n, d.CU_MEMHOSTALLOC_DEVICEMAP | d.CU_MEMHOSTALLOC_PORTABLE))
host = (ctypes.c_uint8 * n).from_address(int(pinned))
ctypes.memset(host, 0x11, n)
p = ok(d.cuMemAlloc(n))
ok(d.cuMemcpyHtoD(p, pinned, n))  # the daemon page-locks the region on first use
ok(d.cuMemcpyDtoH(pinned, p, n))
open(ready, "w").close()
while not os.path.exists(stop):
    time.sleep(0.01)
print("intact" if bytes(host) == b"\x11" * n else "changed")
"""

POKER = PRELUDE + r"""
ctx, mod, fn = new_context()
codes = []
for addr in sys.argv[1:]:
    assert fill(fn, int(addr, 16), 0xBAD, 64, 0) == R.CUDA_SUCCESS
    codes.append(d.cuCtxSynchronize()[0].name)
print(" ".join(codes))
"""


def daemon_pinned_mappings(pid):
    with open(f"/proc/{pid}/maps") as f:
        return [line.split("-")[0] for line in f if "gpupool-pinned" in line]


def test_a_kernel_cannot_reach_another_tenants_page_locked_memory_in_the_daemon(tmp_path):
    with Daemon(SIM_LIBDIR, config=tenants("owner", "attacker"), devices=1, memory="2GiB") as d:
        ready, stop = tmp_path / "ready", tmp_path / "stop"
        owner = d.python(PINNED_OWNER, ready, stop, token="token-owner", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: ready.exists() or owner.poll() is not None, 60, "the owner's region")
        targets = daemon_pinned_mappings(d.proc.pid)
        assert targets, "the daemon maps the owner's page-locked memory"
        attacker = d.python(POKER, *targets, token="token-attacker", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert finish(d, attacker, "the attacker").split() == ["CUDA_ERROR_ILLEGAL_ADDRESS"]
        stop.touch()
        assert finish(d, owner, "the owner").split() == ["intact"]
        assert_alive(d)
