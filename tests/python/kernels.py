"""CUDA C -> PTX with NVRTC, and small driver-API helpers, for test_kernels.py.

NVRTC 12.9 (wheel ``nvidia-cuda-nvrtc-cu12``) through ``cuda.bindings.nvrtc``
---------------------------------------------------------------------------
cuda-bindings does not link NVRTC; on first use it asks cuda-pathfinder for "nvrtc".
Pathfinder's Linux search order is libnvrtc.so.13, then libnvrtc.so.12, and it looks in
site-packages ``nvidia/cu13/lib`` before ``nvidia/cuda_nvrtc/lib``: with both NVRTC wheels
installed (requirements.txt pins both) cuda-bindings 12.9 would silently get NVRTC 13.
Before anything else pathfinder checks whether one of those sonames is *already loaded*
(``dlopen(RTLD_NOLOAD)``) and then uses it. So ``load_nvrtc12()`` dlopens
``nvidia/cuda_nvrtc/lib/libnvrtc.so.12`` with RTLD_GLOBAL before the first NVRTC call, and
checks ``nvrtcVersion() == (12, 9)``. No environment variable selects the major version
(CUDA_PATH / CUDA_HOME are consulted only after site-packages), so the explicit load is the
reliable way; without the 13.x wheel, pathfinder alone would also find libnvrtc.so.12.
libnvrtc.so.12 dlopens ``libnvrtc-builtins.so.12.9`` by bare name when it compiles and finds
it through its own RUNPATH (``$ORIGIN``), under ``gpupool run`` too (the interposer's dlopen
keeps its caller, interpose/src/hooks.rs): nothing is preloaded for it and no
LD_LIBRARY_PATH names the wheel.

NVRTC 13.0 (wheel ``nvidia-cuda-nvrtc``, ``nvidia/cu13/lib/libnvrtc.so.13``)
---------------------------------------------------------------------------
``compile_ptx13()`` drives it through ctypes in a child process, so the two NVRTC
libraries (same symbol names) never share a process. 13.0 matches the simulated driver
(CUDA 13.0): its PTX is ISA 9.0, which a 13.0 driver accepts; a newer NVRTC's would not.
That wheel's libnvrtc.so.13 has no RUNPATH, so it cannot find its builtins next to itself
(with or without the interposer: "failed to open libnvrtc-builtins.so.13.0"); the child
loads ``libnvrtc-builtins.so.13.*`` from the same directory first.

NVRTC and a loadable libcuda.so.1 (the simulator)
-------------------------------------------------
nvrtcCompileProgram (12.9 and 13.0 alike) dlopens libcuda.so.1 when it can, calls cuInit(0)
and dlsym("cuGetExportTable") (export table da9151d3-3ae6-cc41-a5c0-4f26d533e328). Given a
driver without that symbol it dereferences NULL and the process dies with SIGSEGV; given
one whose cuGetExportTable returns an error it compiles normally (checked with a shim).
Real drivers have it; where no driver is installed the dlopen fails and NVRTC goes on.
So ``compile_ptx`` compiles in this process only when the libcuda.so.1 it would get exports
cuGetExportTable (or none loads); otherwise it hands the source to a helper process
(``python kernels.py --nvrtc-worker``) whose LD_LIBRARY_PATH lacks the simulator, which is
then just a machine without a driver. test_kernels.py's sample-style test still runs
NVRTC next to the simulator (in a child process), so the gap stays visible.

Headers
-------
NVRTC 12.9 has no built-in cuda_fp16.h / cuda_bf16.h ("could not open source file").
They come from the ``nvidia-cuda-runtime-cu12`` wheel already pinned for the ABI check
(``nvidia/cuda_runtime/include``); every compile passes it as ``--include-path``.
"""

import atexit
import ctypes
import functools
import json
import os
import subprocess
import sys
import threading

import numpy as np


def check(result):
    from conftest import check as conftest_check

    return conftest_check(result)

ARCH = "compute_90"  # the simulated devices are compute capability 9.0
NVRTC12_VERSION = (12, 9)
NVRTC13_VERSION = (13, 0)


def _nvidia_dirs():
    import nvidia  # namespace package shared by NVIDIA's wheels

    return list(nvidia.__path__)


def _find_in_wheels(rel):
    for base in _nvidia_dirs():
        p = os.path.join(base, rel)
        if os.path.exists(p):
            return p
    raise RuntimeError(f"{rel} not found under the 'nvidia' wheels ({_nvidia_dirs()}); is requirements.txt installed?")


def cuda_include_dir():
    return os.path.dirname(_find_in_wheels(os.path.join("cuda_runtime", "include", "cuda_fp16.h")))


@functools.cache
def load_nvrtc12():
    """Makes cuda.bindings.nvrtc use libnvrtc.so.12 from nvidia-cuda-nvrtc-cu12 (see module doc).
    Returns the nvrtc module."""
    lib = _find_in_wheels(os.path.join("cuda_nvrtc", "lib", "libnvrtc.so.12"))
    ctypes.CDLL(lib, mode=os.RTLD_GLOBAL)
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    assert (major, minor) == NVRTC12_VERSION, (
        f"cuda.bindings.nvrtc uses NVRTC {major}.{minor}, wanted {NVRTC12_VERSION} from {lib} "
        "(was another libnvrtc loaded into this process first?)"
    )
    return nvrtc


def _options(options):
    return [f"--gpu-architecture={ARCH}", f"--include-path={cuda_include_dir()}", "--std=c++17", *options]


class CompileError(AssertionError):
    pass


def env_without_driver():
    """This environment minus every LD_LIBRARY_PATH entry holding a libcuda.so.1."""
    env = dict(os.environ)
    keep = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p and not os.path.exists(os.path.join(p, "libcuda.so.1"))]
    env["LD_LIBRARY_PATH"] = ":".join(keep)
    env.pop("LD_PRELOAD", None)
    return env


@functools.cache
def nvrtc_safe_in_process():
    """Whether NVRTC can run here: no loadable libcuda.so.1, or one with cuGetExportTable."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return True
    return hasattr(lib, "cuGetExportTable")


class _Worker:
    """A `python kernels.py --nvrtc-worker` child: JSON lines in, JSON lines out."""

    def __init__(self):
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--nvrtc-worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env_without_driver(),
            text=True,
        )
        atexit.register(self.close)

    def compile(self, source, name, options):
        with self.lock:
            self.proc.stdin.write(json.dumps({"src": source, "name": name, "opts": list(options)}) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"NVRTC worker died (exit {self.proc.poll()})")
        reply = json.loads(line)
        if "error" in reply:
            raise CompileError(reply["error"])
        return reply["ptx"].encode("latin-1")

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@functools.cache
def _worker():
    return _Worker()


@functools.lru_cache(maxsize=None)
def compile_ptx(source, name="kernel.cu", options=()):
    """Compiles CUDA C++ with NVRTC 12.9 to PTX for compute_90. Returns the PTX as bytes,
    NUL-terminated (what cuModuleLoadData wants). Raises CompileError with the log.
    In this process when that is safe, else in the worker (see the module doc)."""
    if nvrtc_safe_in_process():
        return _compile_here(source, name, tuple(options))
    return _worker().compile(source, name, tuple(options))


def _compile_here(source, name, options):
    nvrtc = load_nvrtc12()

    def ok(result):
        err, *rest = result
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, f"NVRTC call failed: {err!r}"
        return rest[0] if len(rest) == 1 else (tuple(rest) if rest else None)

    prog = ok(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []))
    try:
        opts = [o.encode() for o in _options(options)]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log_size = ok(nvrtc.nvrtcGetProgramLogSize(prog))
        log = b" " * log_size
        ok(nvrtc.nvrtcGetProgramLog(prog, log))
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC failed to compile {name}: {err!r}\n{log.decode(errors='replace')}")
        size = ok(nvrtc.nvrtcGetPTXSize(prog))
        ptx = b" " * size
        ok(nvrtc.nvrtcGetPTX(prog, ptx))
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    assert ptx.endswith(b"\0")
    return ptx


_NVRTC13_CHILD = r"""
import ctypes, glob, os, sys
# libnvrtc.so.13 dlopens its builtins by soname and has no RUNPATH: load them first.
for b in sorted(glob.glob(os.path.join(os.path.dirname(sys.argv[1]), "libnvrtc-builtins.so.13.*"))):
    ctypes.CDLL(b, mode=os.RTLD_GLOBAL)
lib = ctypes.CDLL(sys.argv[1])
src = sys.stdin.buffer.read()
opts = [o.encode() for o in sys.argv[2:]]
prog = ctypes.c_void_p()
def ok(rc, what):
    if rc != 0:
        sys.stderr.write(f"{what} failed: {rc}\n"); sys.exit(2)
major, minor = ctypes.c_int(), ctypes.c_int()
ok(lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
sys.stderr.write(f"NVRTC {major.value}.{minor.value}\n")
ok(lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"kernel.cu", 0, None, None), "nvrtcCreateProgram")
arr = (ctypes.c_char_p * len(opts))(*opts)
rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
n = ctypes.c_size_t()
ok(lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n)), "nvrtcGetProgramLogSize")
log = ctypes.create_string_buffer(n.value)
ok(lib.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
sys.stderr.write(log.value.decode(errors="replace"))
ok(rc, "nvrtcCompileProgram")
ok(lib.nvrtcGetPTXSize(prog, ctypes.byref(n)), "nvrtcGetPTXSize")
ptx = ctypes.create_string_buffer(n.value)
ok(lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
sys.stdout.buffer.write(ptx.raw)
"""


@functools.lru_cache(maxsize=None)
def compile_ptx13(source, options=()):
    """Like compile_ptx, with NVRTC 13.0 from nvidia-cuda-nvrtc, in a child process."""
    lib = _find_in_wheels(os.path.join("cu13", "lib", "libnvrtc.so.13"))
    proc = subprocess.run(
        [sys.executable, "-c", _NVRTC13_CHILD, lib, *_options(options)],
        input=source.encode(),
        capture_output=True,
        timeout=120,
        env=env_without_driver(),  # NVRTC 13 too would load the simulator (module doc)
    )
    log = proc.stderr.decode(errors="replace")
    if proc.returncode != 0:
        raise CompileError(f"NVRTC 13 failed:\n{log}")
    first = log.splitlines()[0] if log else ""
    assert first == "NVRTC %d.%d" % NVRTC13_VERSION, f"expected NVRTC 13.0, child said {first!r}"
    ptx = proc.stdout
    assert ptx.endswith(b"\0")
    return ptx


# ---------------------------------------------------------------------------------------
# Driver-API helpers (cuda-bindings). All of them assert CUDA_SUCCESS.
# ---------------------------------------------------------------------------------------


def driver():
    from cuda.bindings import driver as d

    return d


class Module:
    """A PTX module loaded into the current context."""

    def __init__(self, ptx):
        d = driver()
        self.handle = check(d.cuModuleLoadData(ptx))

    def function(self, name):
        return check(driver().cuModuleGetFunction(self.handle, name.encode()))

    def global_(self, name):
        """(device pointer as int, size in bytes) of a __device__ / __constant__ variable."""
        dptr, size = check(driver().cuModuleGetGlobal(self.handle, name.encode()))
        return int(dptr), int(size)


def load(source, options=()):
    return Module(compile_ptx(source, options=tuple(options)))


def to_device(arr):
    """Allocates device memory holding a copy of the numpy array; returns the pointer (int)."""
    d = driver()
    arr = np.ascontiguousarray(arr)
    dptr = check(d.cuMemAlloc(max(arr.nbytes, 1)))
    if arr.nbytes:
        check(d.cuMemcpyHtoD(dptr, arr.ctypes.data, arr.nbytes))
    return int(dptr)


def alloc(nbytes, fill=None):
    """Allocates device memory; fill=byte value to memset it to (None: leave as is)."""
    d = driver()
    dptr = check(d.cuMemAlloc(nbytes))
    if fill is not None:
        check(d.cuMemsetD8(dptr, fill, nbytes))
    return int(dptr)


def from_device(dptr, count, dtype):
    out = np.empty(count, dtype=dtype)
    if out.nbytes:
        check(driver().cuMemcpyDtoH(out.ctypes.data, dptr, out.nbytes))
    return out


# Kernel argument wrappers: each is a ctypes object whose address goes in the args array.
def ptr(p):
    return ctypes.c_uint64(int(p))


i32, u32, i64, u64 = ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64, ctypes.c_uint64
f32, f64 = ctypes.c_float, ctypes.c_double


def launch(fn, grid, block, args, shared=0, stream=0):
    """cuLaunchKernel with an args array (void*[] of pointers to each argument)."""
    grid = tuple(grid) + (1,) * (3 - len(grid))
    block = tuple(block) + (1,) * (3 - len(block))
    params = (ctypes.c_void_p * max(len(args), 1))(*[ctypes.addressof(a) for a in args])
    check(driver().cuLaunchKernel(fn, *grid, *block, shared, stream, ctypes.addressof(params), 0))


def sync():
    check(driver().cuCtxSynchronize())


def ceil_div(a, b):
    return (a + b - 1) // b


# ---------------------------------------------------------------------------------------
# Floating-point reference helpers.
# ---------------------------------------------------------------------------------------


def ulp_error_f32(got, ref64):
    """|got - ref| in units of the float32 ulp at ref (ref in float64, the 'exact' value).
    Infinite/NaN references must match exactly (returns 0 where they do, inf where not)."""
    got = np.asarray(got, dtype=np.float32).astype(np.float64)
    ref64 = np.asarray(ref64, dtype=np.float64)
    ref32 = ref64.astype(np.float32)  # overflow -> inf, as the float result must
    err = np.zeros(got.shape)
    special = ~np.isfinite(ref32)
    same_special = (np.isnan(ref32) & np.isnan(got)) | (ref32.astype(np.float64) == got)
    err[special] = np.where(same_special[special], 0.0, np.inf)
    fin = ~special
    with np.errstate(invalid="ignore"):
        ulp = np.spacing(np.abs(ref32[fin])).astype(np.float64)
        e = np.abs(got[fin] - ref64[fin]) / ulp
    err[fin] = np.where(np.isfinite(got[fin]), e, np.inf)
    return err


def bf16_bits_rne(x32):
    """float32 -> bfloat16 bit patterns, round to nearest even (NaN -> a NaN pattern)."""
    bits = np.asarray(x32, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return rounded


def is_nan_f16_bits(b):
    b = np.asarray(b, dtype=np.uint16)
    return ((b & 0x7C00) == 0x7C00) & ((b & 0x03FF) != 0)


def is_nan_bf16_bits(b):
    b = np.asarray(b, dtype=np.uint16)
    return ((b & 0x7F80) == 0x7F80) & ((b & 0x007F) != 0)


def _worker_main():
    for line in sys.stdin:
        req = json.loads(line)
        try:
            reply = {"ptx": _compile_here(req["src"], req["name"], tuple(req["opts"])).decode("latin-1")}
        except CompileError as e:
            reply = {"error": str(e)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__" and sys.argv[1:] == ["--nvrtc-worker"]:
    _worker_main()
