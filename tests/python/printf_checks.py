"""Device printf (CUDA C compiled by NVRTC 12.9, driven through cuda-bindings) where NVIDIA's CUDA
C++ Programming Guide ("Formatted Output") says it appears: in the process's standard output, only
when the program launches a kernel, synchronizes (context, stream, event), copies with a blocking
copy, loads or unloads a module, or destroys the context, and never at exit without one. Run on the
simulator directly by tests/python/test_kernels.py and under `gpupool run` by
pool-daemon/tests/device_printf.rs (`--pool`): the same output at the same points, in the client's
own standard output.

The script points file descriptor 1 at a file of its own and reads what arrived there after each
step; its report goes to the original standard output.

- Nothing of a finished kernel's output is written before a flush point (the stream queried until
  it is idle, a pause); cuStreamSynchronize then writes all of it, every thread's line once.
- cuEventSynchronize, cuCtxSynchronize, a blocking cuMemcpyDtoH, cuModuleLoadData, cuModuleUnload
  and cuCtxDestroy of another context each write what was printed before them.
- The next kernel launch writes what earlier kernels printed (through the pool, the launch is not
  answered, and a process gets its kernels' lines only at its own flush points: they arrive with
  the next synchronization, and not with an answered cuStreamQuery before it).
- A kernel's many lines (256 threads x 16, 94 KiB) arrive whole and in each thread's order.
- The program's own printf before a synchronization comes before the kernels' lines in the same
  output (both go through the C library's stdout).
- A process that launches a printing kernel and exits without synchronizing prints none of it.
- Another process that synchronizes and copies while this process's output waits does not print it,
  and this process's next synchronization does (through the pool, a tenant's processes share a
  backend context and its buffer: the daemon gives a flush to the process that loaded printing
  kernels).
- On the simulator directly: CU_LIMIT_PRINTF_FIFO_SIZE, set in a new context before its first
  printing kernel, bounds what one flush writes (the newest lines are kept), and setting it after
  that launch is CUDA_ERROR_INVALID_VALUE; through the pool the client's limit is not applied
  (README).

`--chatter TAG SECONDS`: instead, launch a printing kernel tagged TAG and synchronize, over and
over for SECONDS, printing the kernel's lines to the real standard output (pool-daemon's test runs
two tenants at once this way and checks that each sees only its own tag).

Prints PASS/FAIL lines and SUMMARY passed/total; exits 1 on any failure.
"""

import ctypes
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernels import compile_ptx  # noqa: E402

from cuda.bindings import driver as cuda  # noqa: E402

R = cuda.CUresult
POOL = "--pool" in sys.argv

SOURCE = r"""
extern "C" __global__ void say(int tag, int lines) {
    for (int i = 0; i < lines; ++i) printf("tag %d thread %d line %d\n", tag, (int)threadIdx.x, i);
}
extern "C" __global__ void quiet(int *p) { p[threadIdx.x] = threadIdx.x; }
"""

libc = ctypes.CDLL(None)
results = []
real_stdout = None


def report(name, ok, why=""):
    results.append(bool(ok))
    print(f"PASS {name}" if ok else f"FAIL {name}: {why}", file=real_stdout, flush=True)


def check(r):
    err, *rest = r
    if err != R.CUDA_SUCCESS:
        raise RuntimeError(f"{err}")
    return rest[0] if len(rest) == 1 else (tuple(rest) or None)


def launch(fn, block, args, stream=0):
    holders = [ctypes.c_int32(a) if isinstance(a, int) else a for a in args]
    params = (ctypes.c_void_p * len(holders))(*[ctypes.addressof(h) for h in holders])
    check(cuda.cuLaunchKernel(fn, 1, 1, 1, block, 1, 1, 0, stream, ctypes.addressof(params), 0))


def expected(tag, threads, lines=1):
    return sorted(f"tag {tag} thread {t} line {i}" for t in range(threads) for i in range(lines))


class Output:
    """File descriptor 1 pointed at a temporary file; `new()` is what arrived since the last call."""

    def __init__(self):
        global real_stdout
        sys.stdout.flush()
        real_stdout = os.fdopen(os.dup(1), "w", buffering=1)
        self.file = tempfile.TemporaryFile()
        os.dup2(self.file.fileno(), 1)
        self.seen = 0

    def new(self):
        libc.fflush(None)
        size = os.fstat(1).st_size
        data = os.pread(1, size - self.seen, self.seen)
        self.seen = size
        return data.decode(errors="replace")


def tagged(text, tag):
    return sorted(line for line in text.splitlines() if line.startswith(f"tag {tag} "))


def idle(stream):
    """Waits until `stream` is idle, by queries (which write nothing)."""
    t0 = time.time()
    while True:
        err, = cuda.cuStreamQuery(stream)
        if err == R.CUDA_SUCCESS:
            return
        assert err == R.CUDA_ERROR_NOT_READY, err
        assert time.time() - t0 < 60, "the stream never became idle"
        time.sleep(0.01)


def create_context(dev):
    """cuCtxCreate in cuda-bindings 12's form (flags, device) or 13's (params, flags, device)."""
    try:
        return check(cuda.cuCtxCreate(0, dev))
    except TypeError:
        return check(cuda.cuCtxCreate(None, 0, dev))


def written_by(out, fn, tag, stream, action):
    """Launches `fn` printing `tag` (4 threads, a line each) on `stream`, waits for it by queries,
    then runs `action`: the kernel's lines that `action` wrote."""
    launch(fn, 4, [tag, 1], stream)
    idle(stream)
    out.new()
    action()
    return tagged(out.new(), tag)


def chatter(tag, seconds):
    check(cuda.cuInit(0))
    ctx = create_context(check(cuda.cuDeviceGet(0)))
    mod = check(cuda.cuModuleLoadData(compile_ptx(SOURCE)))
    say = check(cuda.cuModuleGetFunction(mod, b"say"))
    end = time.time() + seconds
    rounds = 0
    while time.time() < end:
        launch(say, 4, [tag, 2])
        check(cuda.cuCtxSynchronize())
        rounds += 1
    print(f"ROUNDS {rounds}", flush=True)
    check(cuda.cuCtxDestroy(ctx))


def main():
    out = Output()
    check(cuda.cuInit(0))
    dev = check(cuda.cuDeviceGet(0))
    ctx = check(cuda.cuDevicePrimaryCtxRetain(dev))
    check(cuda.cuCtxSetCurrent(ctx))
    ptx = compile_ptx(SOURCE)
    mod = check(cuda.cuModuleLoadData(ptx))
    say = check(cuda.cuModuleGetFunction(mod, b"say"))
    quiet = check(cuda.cuModuleGetFunction(mod, b"quiet"))
    buf = check(cuda.cuMemAlloc(1024))
    stream = check(cuda.cuStreamCreate(1))
    out.new()

    # A finished kernel's output waits for a flush point; the stream's synchronization writes it.
    launch(say, 32, [1, 1], stream)
    idle(stream)
    time.sleep(0.2)
    early = out.new()
    report("nothing of a finished kernel is written before a flush point", early == "", repr(early[:200]))
    check(cuda.cuStreamSynchronize(stream))
    got = tagged(out.new(), 1)
    report("cuStreamSynchronize writes every thread's line once", got == expected(1, 32), got[:5])

    # The next launch writes what earlier kernels printed. Through the pool the launch is not
    # answered, and a process gets its kernels' lines only at one of its own flush points: they
    # arrive with the next synchronization, not with the next answered call.
    launch(say, 8, [2, 1], stream)
    idle(stream)
    out.new()
    launch(quiet, 32, [ctypes.c_uint64(int(buf))], stream)
    if POOL:
        cuda.cuStreamQuery(stream)
        early = tagged(out.new(), 2)
        check(cuda.cuStreamSynchronize(stream))
        got = tagged(out.new(), 2)
        ok = early == [] and got == expected(2, 8)
        report("a kernel launch's flush reaches the process at its next synchronization, not before", ok, (early, got))
    else:
        got = tagged(out.new(), 2)
        report("a kernel launch writes what earlier kernels printed", got == expected(2, 8), got[:5])
        check(cuda.cuStreamSynchronize(stream))
    out.new()

    # An event's synchronization.
    event = check(cuda.cuEventCreate(0))
    launch(say, 4, [3, 1], stream)
    check(cuda.cuEventRecord(event, stream))
    check(cuda.cuEventSynchronize(event))
    got = tagged(out.new(), 3)
    report("cuEventSynchronize writes it", got == expected(3, 4), got)

    # The context's synchronization, after the program's own printf.
    launch(say, 4, [4, 1], stream)
    libc.printf(b"host before synchronize\n")
    check(cuda.cuCtxSynchronize())
    text = out.new()
    lines = text.splitlines()
    ok = tagged(text, 4) == expected(4, 4) and lines[:1] == ["host before synchronize"]
    report("cuCtxSynchronize writes it, after the program's own earlier printf", ok, lines[:3])

    # A blocking copy (on the legacy stream, after the kernel there).
    launch(say, 4, [5, 1])
    host = (ctypes.c_int32 * 4)()
    check(cuda.cuMemcpyDtoH(ctypes.addressof(host), buf, 16))
    got = tagged(out.new(), 5)
    report("a blocking cuMemcpyDtoH writes it", got == expected(5, 4), got)

    # Loading and unloading a module.
    loaded = []
    got = written_by(out, say, 6, stream, lambda: loaded.append(check(cuda.cuModuleLoadData(ptx))))
    report("cuModuleLoadData writes it", got == expected(6, 4), got)
    other_say = check(cuda.cuModuleGetFunction(loaded[0], b"say"))
    got = written_by(out, other_say, 7, stream, lambda: check(cuda.cuModuleUnload(loaded[0])))
    report("cuModuleUnload writes it", got == expected(7, 4), got)

    # Another context, destroyed.
    ctx2 = create_context(dev)
    mod2 = check(cuda.cuModuleLoadData(ptx))
    say2 = check(cuda.cuModuleGetFunction(mod2, b"say"))
    s2 = check(cuda.cuStreamCreate(1))
    got = written_by(out, say2, 8, s2, lambda: check(cuda.cuCtxDestroy(ctx2)))
    report("cuCtxDestroy writes it", got == expected(8, 4), got)
    check(cuda.cuCtxSetCurrent(ctx))

    # Many lines at once, whole and in each thread's order.
    launch(say, 256, [9, 16], stream)
    check(cuda.cuStreamSynchronize(stream))
    text = out.new()
    got = tagged(text, 9)
    ordered = all(
        [int(line.split()[5]) for line in text.splitlines() if line.startswith(f"tag 9 thread {t} ")] == list(range(16))
        for t in (0, 100, 255)
    )
    report(
        f"256 threads x 16 lines ({len(text)} bytes) arrive whole, each thread's in order",
        got == expected(9, 256, 16) and ordered,
        f"{len(got)} lines",
    )

    if not POOL:
        # The buffer's size, set before any printing kernel of a new context, bounds one flush
        # (the newest lines are kept); after such a launch it can no longer change.
        ctx3 = create_context(dev)
        check(cuda.cuCtxSetLimit(cuda.CUlimit.CU_LIMIT_PRINTF_FIFO_SIZE, 4096))
        mod3 = check(cuda.cuModuleLoadData(ptx))
        say3 = check(cuda.cuModuleGetFunction(mod3, b"say"))
        launch(say3, 1, [10, 1000])
        check(cuda.cuCtxSynchronize())
        text = out.new()
        got = [int(line.split()[5]) for line in text.splitlines() if line.startswith("tag 10 ")]
        ok = 0 < len(got) < 1000 and got == list(range(1000 - len(got), 1000)) and len(text) <= 4096
        report("CU_LIMIT_PRINTF_FIFO_SIZE bounds a flush, keeping the newest lines", ok, f"{len(got)} lines, {len(text)} bytes")
        (err,) = cuda.cuCtxSetLimit(cuda.CUlimit.CU_LIMIT_PRINTF_FIFO_SIZE, 1 << 20)
        report(
            "CU_LIMIT_PRINTF_FIFO_SIZE after a printing kernel's launch is CUDA_ERROR_INVALID_VALUE",
            err == R.CUDA_ERROR_INVALID_VALUE,
            err,
        )
        check(cuda.cuCtxDestroy(ctx3))
        check(cuda.cuCtxSetCurrent(ctx))

    # A process that exits without a flush point prints nothing of its kernels.
    child = in_another_process("exit_without_flush")
    ok = child.returncode == 0 and "LAUNCHED" in child.stdout and "tag 11" not in child.stdout
    report("a process that exits without synchronizing prints none of its kernels' output", ok, child.stdout[-300:] + child.stderr[-300:])

    # Another process (of the same tenant, through the pool) that synchronizes while this
    # process's output waits leaves it to this process.
    launch(say, 4, [12, 1], stream)
    idle(stream)
    # Through the pool another flush of the tenant's context (the exiting process's cleanup,
    # above) may have caught them already: they still wait for this process's flush point.
    before = tagged(out.new(), 12)
    child = in_another_process("sibling_synchronizes")
    check(cuda.cuStreamSynchronize(stream))
    got = tagged(out.new(), 12)
    ok = child.returncode == 0 and "SYNCHRONIZED" in child.stdout and "tag 12" not in child.stdout and before == []
    report(
        "another process's synchronization leaves this process's output to it",
        ok and got == expected(12, 4),
        f"mine: {before} before, {got} after; the other's: {child.stdout[-300:]}{child.stderr[-300:]}",
    )

    check(cuda.cuStreamDestroy(stream))
    check(cuda.cuMemFree(buf))
    check(cuda.cuDevicePrimaryCtxRelease(dev))
    passed = sum(results)
    print(f"SUMMARY {passed}/{len(results)}", file=real_stdout, flush=True)
    return 0 if passed == len(results) else 1


def in_another_process(function):
    """Runs this module's `function` in a new Python process (under `gpupool run`, another
    session of the same tenant); its completed process, output captured."""
    code = "import sys; sys.path.insert(0, %r)\nimport printf_checks\nprintf_checks.%s()\n" % (
        os.path.dirname(os.path.abspath(__file__)),
        function,
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def exit_without_flush():
    check(cuda.cuInit(0))
    create_context(check(cuda.cuDeviceGet(0)))
    mod = check(cuda.cuModuleLoadData(compile_ptx(SOURCE)))
    say = check(cuda.cuModuleGetFunction(mod, b"say"))
    stream = check(cuda.cuStreamCreate(1))
    launch(say, 4, [11, 1], stream)
    idle(stream)
    print("LAUNCHED", flush=True)
    os._exit(0)


def sibling_synchronizes():
    """A process with no printing kernel of its own: synchronizes and copies, then exits."""
    check(cuda.cuInit(0))
    create_context(check(cuda.cuDeviceGet(0)))
    buf = check(cuda.cuMemAlloc(64))
    check(cuda.cuCtxSynchronize())
    host = (ctypes.c_int32 * 4)()
    check(cuda.cuMemcpyDtoH(ctypes.addressof(host), buf, 16))
    check(cuda.cuCtxSynchronize())
    print("SYNCHRONIZED", flush=True)


if __name__ == "__main__":
    if "--chatter" in sys.argv:
        i = sys.argv.index("--chatter")
        chatter(int(sys.argv[i + 1]), float(sys.argv[i + 2]))
        sys.exit(0)
    sys.exit(main())
