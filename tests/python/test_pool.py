"""The pool end to end, through real processes: a `gpupool daemon` on the simulator and
unmodified cuda-bindings programs under `gpupool run` (LD_PRELOAD=libgpupool.so, no
simulator on their LD_LIBRARY_PATH: the interposer is their only driver). See pool.py.

- 16 processes of one tenant allocate 1 MiB blocks at once until CUDA_ERROR_OUT_OF_MEMORY:
  together they get exactly the quota, and `status` never shows more than the quota.
- test_kernels.py's NVRTC kernels run as a pytest session under `gpupool run`; NVRTC 12.9
  and 13.0 compile next to the interposer (they cuInit and cuGetExportTable it).
- A deterministic kernel's output bytes are the same through the pool as on the simulator.
- A client SIGKILLed in an async copy loop has its memory back in the tenant's ledger within
  a second (the figure is printed), while another client of the tenant verifies its data.
- An illegal address in one tenant does not disturb another tenant's client.
- A dlopen of libcudart.so.12 / .13 is the interposer's runtime, reporting that version.

Each test starts its own daemon and kills it (and every client) at the end.
"""

import datetime
import hashlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np

from conftest import SIM_LIBDIR, subprocess_env
from kernels import compile_ptx
from pool import HERE, MiB, Daemon, client_env, read_lines, wait_for


def sha(token):
    return hashlib.sha256(token.encode()).hexdigest()


def fail_with(d, msg):
    raise AssertionError(f"{msg}\n--- daemon log ---\n{d.log()[-6000:]}")


# ---------------------------------------------------------------------------------------
# 16 processes, one tenant, concurrent allocation up to the quota
# ---------------------------------------------------------------------------------------

ALLOCATOR = r"""
import os, sys, time
from cuda.bindings import driver as d
R = d.CUresult
out, go, release = sys.argv[1:4]
def say(line):
    with open(out, "a") as f:
        f.write(line + "\n")
def wait_file(p):
    t0 = time.monotonic()
    while not os.path.exists(p):
        assert time.monotonic() - t0 < 60, "barrier never came: " + p
        time.sleep(0.002)
assert d.cuInit(0) == (R.CUDA_SUCCESS,)
err, dev = d.cuDeviceGet(0); assert err == R.CUDA_SUCCESS, err
err, ctx = d.cuDevicePrimaryCtxRetain(dev); assert err == R.CUDA_SUCCESS, err
assert d.cuCtxSetCurrent(ctx) == (R.CUDA_SUCCESS,)
err, free, total = d.cuMemGetInfo(); assert err == R.CUDA_SUCCESS, err
say(f"ready {os.getpid()} {free} {total}")
wait_file(go)
ptrs = []
while True:
    err, p = d.cuMemAlloc(1 << 20)
    if err == R.CUDA_ERROR_OUT_OF_MEMORY:
        break
    assert err == R.CUDA_SUCCESS, err
    ptrs.append(p)
# One byte more fails too, once the quota is full (nothing has been freed yet).
err, _ = d.cuMemAlloc(1)
say(f"count {len(ptrs)} {err.name}")
wait_file(release)
for p in ptrs:
    assert d.cuMemFree(p) == (R.CUDA_SUCCESS,)
say("done")
"""


def test_16_processes_of_one_tenant_allocate_exactly_the_quota_together(tmp_path):
    nproc, quota_mib = 16, 256
    config = f"""
[[tenant]]
name = "team"
uids = [{os.getuid()}]
memory = "{quota_mib}MiB"
"""
    with Daemon(SIM_LIBDIR, config=config, devices=2, memory="4GiB") as d:
        go, release = tmp_path / "go", tmp_path / "release"
        outs = [tmp_path / f"w{i}.out" for i in range(nproc)]
        procs = [d.python(ALLOCATOR, outs[i], go, release) for i in range(nproc)]

        # Watch the ledger from the first process to the last free.
        samples, over, stop = [], [], threading.Event()

        def watch():
            while not stop.is_set():
                try:
                    used, quota = d.used("team")
                except OSError:
                    continue
                samples.append(used)
                if quota is not None and used > quota:
                    over.append((used, quota))
                time.sleep(0.001)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            def lines(kind):
                return [l for o in outs for l in read_lines(o) if l.startswith(kind)]

            def exited():
                bad = [p.returncode for p in procs if p.poll() not in (None, 0)]
                if bad:
                    fail_with(d, f"an allocator exited early: {bad}: " + "\n".join(l for o in outs for l in read_lines(o)))

            def ready():
                exited()
                return len(lines("ready ")) == nproc

            wait_for(ready, 60, f"{nproc} allocators to connect")
            for l in lines("ready "):
                _, _, free, total = l.split()
                assert int(total) == quota_mib * MiB, f"the tenant sees its quota as the device size: {l}"
                assert int(free) == quota_mib * MiB, l
            go.touch()

            def counted():
                exited()
                return len(lines("count ")) == nproc

            wait_for(counted, 60, "every allocator to reach CUDA_ERROR_OUT_OF_MEMORY")
            counts = [int(l.split()[1]) for l in lines("count ")]
            assert all(l.split()[2] == "CUDA_ERROR_OUT_OF_MEMORY" for l in lines("count ")), lines("count ")
            # Everyone holds what it got: together exactly the quota, no MiB more or less.
            assert sum(counts) == quota_mib, f"total {sum(counts)} MiB across {nproc} processes, quota {quota_mib}: {counts}"
            used, quota = d.used("team")
            assert (used, quota) == (quota_mib * MiB, quota_mib * MiB)
            assert d.tenant("team")["sessions"] == nproc
            release.touch()
            for p in procs:
                assert p.wait(timeout=60) == 0, f"allocator exit {p.returncode}"
            assert len(lines("done")) == nproc
            wait_for(lambda: d.used("team")[0] == 0, 5, "the tenant's memory to be released")
        finally:
            stop.set()
            watcher.join(timeout=5)
        assert not over, f"status showed more than the quota: {over[:5]}"
        assert len(samples) > 10 and max(samples) == quota_mib * MiB, (len(samples), max(samples, default=None))
        print(f"\n16 processes: per-process MiB {sorted(counts)}; {len(samples)} status samples, max used {max(samples) // MiB} MiB")


# ---------------------------------------------------------------------------------------
# NVRTC kernels through the pool
# ---------------------------------------------------------------------------------------

# The tests of test_kernels.py that hold for the pool as for a process on its own. Not here:
# the illegal-address test (through the pool a sticky error poisons the tenant's context
# for all its sessions and contexts until the last session ends, pool-daemon/README.md;
# test_illegal_address_in_one_tenant_leaves_another_alone below covers containment), and
# the tests that would run after it in the same tenant.
KERNEL_TESTS = [
    "test_vector_add_f32_sample_style",  # NVRTC 12.9 in-process next to the interposer
    "test_vector_add_ptx_from_nvrtc13",
    "test_saxpy",  # f32, f64
    "test_reduction_shared_memory_atomic",
    "test_histogram_shared_and_global_atomics",
    "test_tiled_matmul",
    "test_warp_shuffle_ballot_any_all",
    "test_grid_stride_loop",
    "test_device_global_with_initializer",
    "test_device_global_written_by_kernel",
    "test_3d_grid_and_blocks",
    "test_integer_ops",
    "test_math_f32_f64",
    "test_conversions_and_rounding_modes",
]
KERNEL_TEST_COUNT = len(KERNEL_TESTS) + 1  # test_saxpy has two parameters


def interposer_libdir(d):
    """A directory whose libcuda.so.1 and libnvidia-ml.so.1 are libgpupool.so: satisfies
    conftest.py (it wants a driver directory on LD_LIBRARY_PATH) with no simulator in it."""
    lib = os.path.join(os.path.dirname(d.exe), "libgpupool.so")
    fake = os.path.join(d.dir, "driver")
    os.makedirs(fake, exist_ok=True)
    for n in ("libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1", "libnvidia-ml.so"):
        os.symlink(lib, os.path.join(fake, n))
    return fake


def test_nvrtc_kernels_of_test_kernels_pass_through_the_pool():
    with Daemon(SIM_LIBDIR, devices=2, memory="16GiB") as d:
        fake = interposer_libdir(d)
        ids = [f"tests/python/test_kernels.py::{t}" for t in KERNEL_TESTS]
        proc = subprocess.Popen(
            d.run_args([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs", *ids]),
            env=client_env({"LD_LIBRARY_PATH": fake, "GPUPOOL_SIM_LIBDIR": fake}),
            cwd=os.path.dirname(os.path.dirname(HERE)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # d.close() kills the group, children included
        )
        d.clients.append(proc)
        out, _ = proc.communicate(timeout=240)
        summary = out.strip().splitlines()[-1] if out.strip() else ""
        if proc.returncode != 0 or not re.fullmatch(rf"=*\s*{KERNEL_TEST_COUNT} passed in [0-9.]+s\s*=*", summary):
            fail_with(d, f"pytest under gpupool run: exit {proc.returncode}, wanted {KERNEL_TEST_COUNT} passed\n{out[-8000:]}")
        # The kernels ran in the daemon: pytest itself and the sample-style child were sessions.
        starts = d.log().count("session start")
        assert starts >= 2, f"only {starts} sessions: did the tests reach the daemon?\n{d.log()[-4000:]}"
        print(f"\n{summary.strip('= ')} through the pool ({starts} sessions)")


NVRTC_UNDER_POOL = r"""
import ctypes, os, subprocess, sys
sys.path.insert(0, sys.argv[1])
import kernels
from kernels import NVRTC13_VERSION, _NVRTC13_CHILD, _find_in_wheels, _options, load_nvrtc12
from cuda.bindings import driver as d
R = d.CUresult
# The libcuda.so.1 this process gets is the interposer, and it has cuGetExportTable
# (answering with an error and no table), so NVRTC may run here.
cuda = ctypes.CDLL("libcuda.so.1")
assert hasattr(cuda, "cuGetExportTable") and kernels.nvrtc_safe_in_process()
SRC = 'extern "C" __global__ void fill(unsigned *p, unsigned n) { unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = i * 2654435761u; }'
# NVRTC 12.9, in this process, as a user runs it: nothing on LD_LIBRARY_PATH holds its
# builtins and nothing loaded them; libnvrtc.so.12 dlopens them itself through its RUNPATH
# ($ORIGIN), past the interposer's dlopen.
def builtins_mapped():
    with open("/proc/self/maps") as f:
        return sorted({l.split()[-1] for l in f if "libnvrtc-builtins" in l})
nvrtc_dir = os.path.dirname(_find_in_wheels(os.path.join("cuda_nvrtc", "lib", "libnvrtc.so.12")))
for p in filter(None, os.environ.get("LD_LIBRARY_PATH", "").split(":")):
    assert not os.path.isdir(p) or not any(n.startswith("libnvrtc") for n in os.listdir(p)), ("NVRTC on LD_LIBRARY_PATH", p)
assert builtins_mapped() == [], builtins_mapped()
ptx12 = kernels._compile_here(SRC, "fill.cu", ())
assert builtins_mapped() == [os.path.realpath(os.path.join(nvrtc_dir, "libnvrtc-builtins.so.12.9"))], builtins_mapped()
# NVRTC 13.0, in a child that keeps LD_PRELOAD (the interposer) and GPUPOOL_ENDPOINT.
lib13 = _find_in_wheels(os.path.join("cu13", "lib", "libnvrtc.so.13"))
c = subprocess.run([sys.executable, "-c", _NVRTC13_CHILD, lib13, *_options(())], input=SRC.encode(), capture_output=True, timeout=120)
assert c.returncode == 0, (c.returncode, c.stderr.decode(errors="replace"))
assert c.stderr.decode().splitlines()[0] == "NVRTC %d.%d" % NVRTC13_VERSION, c.stderr
ptx13 = c.stdout
assert d.cuInit(0) == (R.CUDA_SUCCESS,)
err, dev = d.cuDeviceGet(0); assert err == R.CUDA_SUCCESS
err, ctx = d.cuCtxCreate(0, dev); assert err == R.CUDA_SUCCESS, err
n = 1000
for ptx in (ptx12, ptx13):
    err, mod = d.cuModuleLoadData(ptx); assert err == R.CUDA_SUCCESS, err
    err, fn = d.cuModuleGetFunction(mod, b"fill"); assert err == R.CUDA_SUCCESS, err
    err, p = d.cuMemAlloc(4 * n); assert err == R.CUDA_SUCCESS, err
    kernels.launch(fn, (8,), (128,), [kernels.ptr(p), kernels.u32(n)])
    assert d.cuCtxSynchronize() == (R.CUDA_SUCCESS,)
    got = kernels.from_device(int(p), n, kernels.np.uint32)
    want = (kernels.np.arange(n, dtype=kernels.np.uint64) * 2654435761 % (1 << 32)).astype(kernels.np.uint32)
    assert (got == want).all()
print("nvrtc ok")
"""


def test_nvrtc_12_and_13_compile_next_to_the_interposer():
    """NVRTC 12.9 and 13.0 dlopen libcuda.so.1, cuInit it and ask for cuGetExportTable;
    under gpupool run that is the interposer (a driver without cuGetExportTable makes NVRTC
    dereference NULL, kernels.py). Both compile, and their PTX runs through the pool. NVRTC
    12.9 finds its builtins through its own RUNPATH with no LD_LIBRARY_PATH naming them
    (the interposer's dlopen keeps its caller, interpose/src/hooks.rs)."""
    with Daemon(SIM_LIBDIR, devices=1, memory="1GiB") as d:
        p = d.python(NVRTC_UNDER_POOL, HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=120)
        if p.returncode != 0 or "nvrtc ok" not in out:
            fail_with(d, f"exit {p.returncode}\n--- stdout ---\n{out}\n--- stderr ---\n{err}")
        # Both NVRTCs really loaded the interposer: the client, and the NVRTC 13 child (whose
        # only CUDA calls are NVRTC's own), were sessions of the daemon.
        starts = d.log().count("session start")
        assert starts >= 2, f"{starts} session(s): NVRTC 13 did not reach the interposer?\n{d.log()[-4000:]}"


# ---------------------------------------------------------------------------------------
# The same bytes through the pool as on the simulator
# ---------------------------------------------------------------------------------------

DETERMINISTIC = r"""
import sys
import numpy as np
from cuda.bindings import driver as d
R = d.CUresult
hist_ptx, int_ptx, inputs, out = sys.argv[1:5]
def ok(r):
    assert r[0] == R.CUDA_SUCCESS, r
    return r[1] if len(r) == 2 else r[1:]
def launch(fn, grid, block, args):
    import ctypes
    params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
    ok((d.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, 0, ctypes.addressof(params), 0)[0],))
def dev(arr):
    p = ok(d.cuMemAlloc(arr.nbytes)); ok((d.cuMemcpyHtoD(p, arr.ctypes.data, arr.nbytes)[0],)); return int(p)
def host(p, n, dt):
    a = np.empty(n, dt); ok((d.cuMemcpyDtoH(a.ctypes.data, p, a.nbytes)[0],)); return a
import ctypes
P, U32, I32 = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int32
ok(d.cuInit(0))
ctx = ok(d.cuCtxCreate(0, ok(d.cuDeviceGet(0))))
z = np.load(inputs)
hist_fn = ok(d.cuModuleGetFunction(ok(d.cuModuleLoadData(open(hist_ptx, "rb").read())), b"histogram"))
int_fn = ok(d.cuModuleGetFunction(ok(d.cuModuleLoadData(open(int_ptx, "rb").read())), b"intops"))
data, hist0 = z["data"], z["hist0"]
nzero = int((data == 0).sum())
dd, dh, dc = dev(data), dev(hist0), dev(np.zeros(1, np.uint32))
ds = int(ok(d.cuMemAlloc(nzero * 4)))
launch(hist_fn, 6, 128, [P(dd), U32(data.size), P(dh), P(dc), P(ds)])
A, B = z["A"], z["B"]
n = A.size
da, db = dev(A), dev(B)
do = int(ok(d.cuMemAlloc(n * 32 * 8)))
ok((d.cuMemsetD8(do, 0xFF, n * 32 * 8)[0],))
launch(int_fn, (n + 127) // 128, 128, [P(da), P(db), P(do), I32(n)])
ok((d.cuCtxSynchronize()[0],))
# The slots' order depends on the schedule (atomicAdd order); their set does not.
slots = np.sort(host(ds, nzero, np.uint32))
blob = host(dh, 256, np.uint32).tobytes() + host(dc, 1, np.uint32).tobytes() + slots.tobytes() + host(do, n * 32, np.uint64).tobytes()
open(out, "wb").write(blob)
print("wrote", len(blob))
"""


def test_deterministic_kernels_give_the_same_bytes_through_the_pool_as_on_the_sim(tmp_path):
    from test_kernels import HISTOGRAM, INTOPS, _int_pairs

    hist_ptx, int_ptx = tmp_path / "hist.ptx", tmp_path / "int.ptx"
    hist_ptx.write_bytes(compile_ptx(HISTOGRAM))
    int_ptx.write_bytes(compile_ptx(INTOPS))
    r = np.random.default_rng(5)
    N = 60_000
    data = np.where(r.random(N) < 0.3, 0, np.where(r.random(N) < 0.5, 7, r.integers(0, 256, N))).astype(np.uint8)
    pairs = _int_pairs()
    inputs = tmp_path / "in.npz"
    np.savez(
        inputs,
        data=data,
        hist0=np.arange(256, dtype=np.uint32) * 1000,
        A=np.array([a for a, _ in pairs], np.int64),
        B=np.array([b for _, b in pairs], np.int64),
    )
    direct, pooled = tmp_path / "direct.bin", tmp_path / "pool.bin"
    code = textwrap.dedent(DETERMINISTIC)
    proc = subprocess.run(
        [sys.executable, "-c", code, hist_ptx, int_ptx, inputs, direct], env=subprocess_env(), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"on the sim: {proc.stdout}\n{proc.stderr}"
    with Daemon(SIM_LIBDIR, devices=1, memory="1GiB") as d:
        p = d.python(code, hist_ptx, int_ptx, inputs, pooled, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=120)
        if p.returncode != 0:
            fail_with(d, f"through the pool: exit {p.returncode}\n{out}\n{err}")
    a, b = direct.read_bytes(), pooled.read_bytes()
    assert len(a) == len(b) == 256 * 4 + 4 + int((data == 0).sum()) * 4 + len(pairs) * 32 * 8
    diff = np.flatnonzero(np.frombuffer(a, np.uint8) != np.frombuffer(b, np.uint8))
    assert diff.size == 0, f"{diff.size} bytes differ, first at {diff[:8]}"
    # ... and they are the right bytes, not the same garbage twice.
    hist = np.frombuffer(a[:1024], np.uint32)
    assert np.array_equal(hist, np.arange(256, dtype=np.uint32) * 1000 + np.bincount(data, minlength=256).astype(np.uint32))


# ---------------------------------------------------------------------------------------
# SIGKILL mid-copy: memory back at once, the tenant's other client carries on
# ---------------------------------------------------------------------------------------

VICTIM = r"""
import os, sys
import numpy as np
from cuda.bindings import driver as d
R = d.CUresult
out, n = sys.argv[1], int(sys.argv[2])
assert d.cuInit(0) == (R.CUDA_SUCCESS,)
err, dev = d.cuDeviceGet(0); assert err == R.CUDA_SUCCESS
err, ctx = d.cuCtxCreate(0, dev); assert err == R.CUDA_SUCCESS, err
err, p = d.cuMemAlloc(n); assert err == R.CUDA_SUCCESS, err
err, s = d.cuStreamCreate(0); assert err == R.CUDA_SUCCESS, err
h = np.full(n, 7, np.uint8)  # pageable: each copy goes through the staging area in pieces
i = 0
while True:
    assert d.cuMemcpyHtoDAsync(p, h.ctypes.data, n, s) == (R.CUDA_SUCCESS,)
    assert d.cuMemcpyDtoHAsync(h.ctypes.data, p, n, s) == (R.CUDA_SUCCESS,)
    i += 1
    if i == 2:
        with open(out, "a") as f:
            f.write(f"copying {os.getpid()}\n")
"""

SURVIVOR = r"""
import os, sys, time
import numpy as np
from cuda.bindings import driver as d
R = d.CUresult
out, stop, n, quota = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def say(line):
    with open(out, "a") as f:
        f.write(line + "\n")
assert d.cuInit(0) == (R.CUDA_SUCCESS,)
err, dev = d.cuDeviceGet(0); assert err == R.CUDA_SUCCESS
err, ctx = d.cuCtxCreate(0, dev); assert err == R.CUDA_SUCCESS, err
err, p = d.cuMemAlloc(n); assert err == R.CUDA_SUCCESS, err
err, q = d.cuMemAlloc(n); assert err == R.CUDA_SUCCESS, err
err, s = d.cuStreamCreate(0); assert err == R.CUDA_SUCCESS, err
say("ready")
back = np.empty(n, np.uint8)
i = 0
t0 = time.monotonic()
while not os.path.exists(stop):
    assert time.monotonic() - t0 < 60
    want = np.random.default_rng(i).integers(0, 256, n, dtype=np.uint8)
    assert d.cuMemcpyHtoDAsync(p, want.ctypes.data, n, s) == (R.CUDA_SUCCESS,)
    assert d.cuMemcpyDtoDAsync(q, p, n, s) == (R.CUDA_SUCCESS,)
    assert d.cuMemsetD8Async(p, 0, n, s) == (R.CUDA_SUCCESS,)
    assert d.cuMemcpyDtoHAsync(back.ctypes.data, q, n, s) == (R.CUDA_SUCCESS,)
    assert d.cuStreamSynchronize(s) == (R.CUDA_SUCCESS,)
    assert np.array_equal(back, want), f"iteration {i}: {int((back != want).sum())} bytes wrong"
    i += 1
    say(f"iter {i}")
# The tenant's free memory is the quota minus what this client holds: the killed one's is back.
err, free, total = d.cuMemGetInfo(); assert err == R.CUDA_SUCCESS
assert (free, total) == (quota - 2 * n, quota), (free, total)
say(f"ok {i}")
"""


def test_sigkill_mid_copy_gives_memory_back_while_another_client_carries_on(tmp_path):
    quota = 512 * MiB
    config = f"""
[[tenant]]
name = "shared"
token_sha256 = "{sha('kill-test')}"
memory = "512MiB"
"""
    victim_n, survivor_n = 96 * MiB, 16 * MiB
    with Daemon(SIM_LIBDIR, config=config, devices=1, memory="2GiB") as d:
        vout, sout, stop = tmp_path / "victim.out", tmp_path / "survivor.out", tmp_path / "stop"
        survivor = d.python(SURVIVOR, sout, stop, survivor_n, quota, token="kill-test", stderr=subprocess.PIPE, text=True)
        wait_for(lambda: survivor.poll() is not None or "ready" in read_lines(sout), 60, "the survivor to start")
        victim = d.python(VICTIM, vout, victim_n, token="kill-test", stderr=subprocess.PIPE, text=True)

        def copying():
            if victim.poll() is not None or survivor.poll() is not None:
                fail_with(d, f"a client exited: victim {victim.poll()}, survivor {survivor.poll()}: {victim.stderr.read() if victim.poll() is not None else ''}")
            return [l for l in read_lines(vout) if l.startswith("copying ")]

        pid = int(wait_for(copying, 60, "the victim's copy loop")[0].split()[1])
        assert d.used("shared") == (victim_n + 2 * survivor_n, quota)
        assert d.tenant("shared")["sessions"] == 2
        time.sleep(0.05)  # well into the loop: 96 MiB copies, each several staging passes
        before = len(read_lines(sout))

        wall0 = time.time()
        t0 = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        polls = 0
        while True:
            used, _ = d.used("shared")
            polls += 1
            if used == 2 * survivor_n:
                break
            assert time.perf_counter() - t0 < 5, f"still {used} bytes used 5 s after the kill\n{d.log()[-4000:]}"
            time.sleep(0.001)  # 2 cores: leave the daemon and the survivor room to run
        elapsed = time.perf_counter() - t0
        assert victim.wait(timeout=10) == 128 + signal.SIGKILL
        # The ledger is released before the session is counted out and its end logged.
        wait_for(lambda: d.tenant("shared")["sessions"] == 1, 5, "the killed session to end")
        def end_line():
            return [l for l in d.log().splitlines() if "session end" in l and f"pid={pid} " in l]

        try:
            end = wait_for(end_line, 2, "the session end line")
        except AssertionError:
            end = []
        logged = ""
        if end:  # the daemon's own time stamp of the session end, against the kill's
            stamp = datetime.datetime.strptime(end[0].split()[0].rstrip("Z")[:26], "%Y-%m-%dT%H:%M:%S.%f")
            ms = (stamp.replace(tzinfo=datetime.timezone.utc).timestamp() - wall0) * 1000
            logged = f"; daemon logged the session end {ms:.1f} ms after the kill ({end[0].split('session end ', 1)[1]})"
        print(f"\nSIGKILL mid-copy: {victim_n // MiB} MiB back in `status` {elapsed * 1000:.1f} ms after the kill ({polls} polls){logged}")
        assert elapsed < 1.0, f"memory came back {elapsed * 1000:.0f} ms after the kill"

        # The survivor goes on, and its data stays right.
        wait_for(lambda: survivor.poll() is not None or len(read_lines(sout)) >= before + 5, 30, "the survivor to go on")
        stop.touch()
        _, err = survivor.communicate(timeout=60)
        last = read_lines(sout)[-1:]
        if survivor.returncode != 0 or not last or not last[0].startswith("ok "):
            fail_with(d, f"survivor: exit {survivor.returncode}, last line {last}\n{err}")
        wait_for(lambda: d.used("shared")[0] == 0, 5, "the survivor's memory to be released")


# ---------------------------------------------------------------------------------------
# An illegal address is contained to its tenant
# ---------------------------------------------------------------------------------------

POKE = 'extern "C" __global__ void poke(int *p, unsigned long long idx, int v) { p[idx] = v; }'

POKER = r"""
import ctypes, os, sys, time
import numpy as np
from cuda.bindings import driver as d
R = d.CUresult
role, ptx_path, out, faulted = sys.argv[1:5]
def say(line):
    with open(out, "a") as f:
        f.write(line + "\n")
def poke(fn, p, idx, v):
    args = [ctypes.c_uint64(int(p)), ctypes.c_uint64(idx), ctypes.c_int32(v)]
    params = (ctypes.c_void_p * 3)(*[ctypes.addressof(a) for a in args])
    (err,) = d.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, ctypes.addressof(params), 0)
    assert err == R.CUDA_SUCCESS, err
    return d.cuCtxSynchronize()[0]
assert d.cuInit(0) == (R.CUDA_SUCCESS,)
err, dev = d.cuDeviceGet(0); assert err == R.CUDA_SUCCESS
err, ctx = d.cuCtxCreate(0, dev); assert err == R.CUDA_SUCCESS, err
err, mod = d.cuModuleLoadData(open(ptx_path, "rb").read()); assert err == R.CUDA_SUCCESS, err
err, fn = d.cuModuleGetFunction(mod, b"poke"); assert err == R.CUDA_SUCCESS, err
err, p = d.cuMemAlloc(256); assert err == R.CUDA_SUCCESS, err
src = np.arange(64, dtype=np.int32)
assert d.cuMemcpyHtoD(p, src.ctypes.data, 256) == (R.CUDA_SUCCESS,)
if role == "faulter":
    assert poke(fn, p, 3, 41) == R.CUDA_SUCCESS
    err = poke(fn, p, 1 << 20, 1)  # 4 MiB past a 256-byte allocation
    assert err == R.CUDA_ERROR_ILLEGAL_ADDRESS, err
    err, _ = d.cuMemAlloc(256)
    assert err == R.CUDA_ERROR_ILLEGAL_ADDRESS, ("sticky", err)
    say("faulted")
    sys.exit(0)
say("ready")
t0 = time.monotonic()
while not os.path.exists(faulted):
    assert time.monotonic() - t0 < 60
    time.sleep(0.002)
err = poke(fn, p, 10, -5)
host = np.zeros(64, np.int32)
if role == "bystander":  # another tenant: unaffected
    assert err == R.CUDA_SUCCESS, err
    assert d.cuMemcpyDtoH(host.ctypes.data, p, 256) == (R.CUDA_SUCCESS,)
    want = src.copy(); want[10] = -5
    assert host.tolist() == want.tolist(), host
    say("ok")
else:  # the faulter's tenant: its context is poisoned for all its sessions (pool-daemon/README.md)
    say(f"sibling {err.name}")
"""


def test_illegal_address_in_one_tenant_leaves_another_alone(tmp_path):
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
    ptx = tmp_path / "poke.ptx"
    ptx.write_bytes(compile_ptx(POKE))
    with Daemon(SIM_LIBDIR, config=config, devices=1, memory="1GiB") as d:
        faulted = tmp_path / "faulted"
        outs = {r: tmp_path / f"{r}.out" for r in ("bystander", "sibling", "faulter", "after")}

        def start(role, token):
            return d.python(POKER, role, ptx, outs[role], faulted, token=token, stderr=subprocess.PIPE, text=True)

        def finish(p, role):
            _, err = p.communicate(timeout=60)
            if p.returncode != 0:
                fail_with(d, f"{role}: exit {p.returncode}\n{err}")
            return read_lines(outs[role])

        bystander, sibling = start("bystander", "tenant-b"), start("sibling", "tenant-a")
        wait_for(
            lambda: bystander.poll() is not None or sibling.poll() is not None or (read_lines(outs["bystander"]) and read_lines(outs["sibling"])),
            60,
            "the bystander and the sibling",
        )
        assert finish(start("faulter", "tenant-a"), "faulter") == ["faulted"]
        faulted.touch()
        assert finish(bystander, "bystander") == ["ready", "ok"]
        assert finish(sibling, "sibling") == ["ready", "sibling CUDA_ERROR_ILLEGAL_ADDRESS"]
        # Once the faulted tenant's sessions have all ended, its next client starts clean.
        wait_for(lambda: d.tenant("a")["sessions"] == 0, 5, "tenant a's sessions to end")
        after = d.python(POKER, "bystander", ptx, outs["after"], faulted, token="tenant-a", stderr=subprocess.PIPE, text=True)
        assert finish(after, "after") == ["ready", "ok"]
        # Every client has gone: nothing of theirs is left in the ledger.
        wait_for(lambda: d.used("a")[0] == 0 and d.used("b")[0] == 0, 5, "both tenants' memory to be released")


# ---------------------------------------------------------------------------------------
# The CUDA runtime by dlopen
# ---------------------------------------------------------------------------------------

DLOPEN_CUDART = r"""
import ctypes, sys
major = int(sys.argv[1])
rt = ctypes.CDLL(f"libcudart.so.{major}")
v, n = ctypes.c_int(), ctypes.c_int()
assert rt.cudaRuntimeGetVersion(ctypes.byref(v)) == 0
assert rt.cudaGetDeviceCount(ctypes.byref(n)) == 0
p = ctypes.c_void_p()
assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(1 << 20)) == 0
src = (ctypes.c_ubyte * 4096)(*([7, 1, 2, 3] * 1024))
dst = (ctypes.c_ubyte * 4096)()
assert rt.cudaMemcpy(p, src, ctypes.c_size_t(4096), 1) == 0  # host to device
assert rt.cudaMemcpy(dst, p, ctypes.c_size_t(4096), 2) == 0  # device to host
assert bytes(dst) == bytes(src)
assert rt.cudaFree(p) == 0
rt.cudaGetErrorName.restype = ctypes.c_char_p
assert rt.cudaSetDevice(99) == 101 and rt.cudaGetErrorName(rt.cudaGetLastError()) == b"cudaErrorInvalidDevice"
# The handle is the interposer's: it also answers driver symbols, which no libcudart has.
assert hasattr(rt, "cuMemAlloc_v2")
print("runtime", v.value, "devices", n.value)
"""


def test_dlopen_of_libcudart_is_the_pool_and_reports_the_version_asked_for():
    """A framework that dlopens libcudart.so.12 or .13 gets the interposer's runtime (no
    NVIDIA runtime is on the client's library path), reporting the CUDA version of the
    soname it asked for."""
    with Daemon(SIM_LIBDIR, devices=2, memory="1GiB") as d:
        for major, want in ((12, 12090), (13, 13000)):
            p = d.python(DLOPEN_CUDART, str(major), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            out, err = p.communicate(timeout=60)
            if p.returncode != 0 or f"runtime {want} devices 2" not in out:
                fail_with(d, f"libcudart.so.{major}: exit {p.returncode}\n--- stdout ---\n{out}\n--- stderr ---\n{err}")
