"""Shared set-up for the Python client tests (cuda-bindings and nvidia-ml-py) against the sim.

The simulator is a real ``libcuda.so.1`` / ``libnvidia-ml.so.1``: the clients load it by
soname, so its directory must be on LD_LIBRARY_PATH *when the interpreter starts* (the
dynamic loader reads the variable once). Give the directory either way:

    LD_LIBRARY_PATH=$(scripts/sim-libdir) python -m pytest tests/python
    GPUPOOL_SIM_LIBDIR=$(scripts/sim-libdir) python -m pytest tests/python

With only GPUPOOL_SIM_LIBDIR set, this file re-executes pytest once with the directory
prepended to LD_LIBRARY_PATH. With neither, the session stops with an error (never a skip).

The simulator reads GPUPOOL_SIM_* when it is loaded; this file pins them for the test
process and for every subprocess the tests start (see ``SIM_ENV``), so expectations below
do not depend on the caller's environment.
"""

import os
import subprocess
import sys
import textwrap

import pytest

# The configuration the in-process simulator runs with (and the default for subprocesses).
SIM_DEVICES = 2
SIM_MEMORY = 16 << 30
SIM_DRIVER_VERSION = 13000
SIM_ENV = {
    "GPUPOOL_SIM_DEVICES": str(SIM_DEVICES),
    "GPUPOOL_SIM_MEMORY": "16GiB",
    "GPUPOOL_SIM_DRIVER_VERSION": "13.0",
    # CUDA enumerates fastest-first unless told to use PCI order; NVML always uses PCI
    # order. With this, CUDA ordinal i and NVML index i are documented to be the same GPU.
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
}
_REEXEC_MARK = "GPUPOOL_PYTEST_REEXECED"


def _has_lib(d):
    return bool(d) and os.path.exists(os.path.join(d, "libcuda.so.1")) and os.path.exists(
        os.path.join(d, "libnvidia-ml.so.1")
    )


def _find_libdir():
    """The sim lib dir, and whether it is already on LD_LIBRARY_PATH."""
    ld = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    explicit = os.environ.get("GPUPOOL_SIM_LIBDIR", "")
    if explicit:
        on_path = any(os.path.realpath(p) == os.path.realpath(explicit) for p in ld)
        return explicit, on_path
    for p in ld:
        if _has_lib(p):
            return p, True
    return None, False


def _fail_session(msg):
    sys.stderr.write("\n" + msg + "\n")
    pytest.exit(msg, returncode=3)


SIM_LIBDIR, _ON_PATH = _find_libdir()


def pytest_configure(config):
    if SIM_LIBDIR is None:
        _fail_session(
            "tests/python needs the gpupool simulator: set GPUPOOL_SIM_LIBDIR=$(scripts/sim-libdir) "
            "or put that directory on LD_LIBRARY_PATH (it must hold libcuda.so.1 and libnvidia-ml.so.1)."
        )
    if not _has_lib(SIM_LIBDIR):
        _fail_session(
            f"GPUPOOL_SIM_LIBDIR={SIM_LIBDIR!r} does not hold libcuda.so.1 and libnvidia-ml.so.1 "
            "(run scripts/sim-libdir and use the directory it prints)."
        )
    if not _ON_PATH:
        if os.environ.get(_REEXEC_MARK):
            _fail_session(f"re-executed with LD_LIBRARY_PATH={os.environ.get('LD_LIBRARY_PATH')!r} but {SIM_LIBDIR} is still not on it")
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = SIM_LIBDIR + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        env[_REEXEC_MARK] = "1"
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-m", "pytest", *config.invocation_params.args], env)
    # Pin the simulator's configuration before anything loads it in this process.
    os.environ.pop("GPUPOOL_SIM_CONFIG", None)
    os.environ.pop("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", None)
    os.environ.update(SIM_ENV)


def subprocess_env(**overrides):
    """Environment for a child process: the sim on LD_LIBRARY_PATH, SIM_ENV, then overrides
    (a value of None removes the variable)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_SIM_")}
    env.update(SIM_ENV)
    env["GPUPOOL_SIM_LIBDIR"] = SIM_LIBDIR
    ld = env.get("LD_LIBRARY_PATH", "")
    if SIM_LIBDIR not in ld.split(":"):
        env["LD_LIBRARY_PATH"] = SIM_LIBDIR + (":" + ld if ld else "")
    for k, v in overrides.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def run_python(code, timeout=120, **env_overrides):
    """Runs `code` in a fresh interpreter against the sim; fails the test unless it exits 0.
    Returns its stdout."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=subprocess_env(**env_overrides),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, (
        f"subprocess failed with {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    )
    return proc.stdout


@pytest.fixture(scope="session")
def sim_libdir():
    return SIM_LIBDIR


@pytest.fixture
def py_subprocess():
    """`py_subprocess(code, **env)` runs Python code in a child process against the sim."""
    return run_python


# ---------------------------------------------------------------------------------------
# CUDA (cuda-bindings) fixtures.
# ---------------------------------------------------------------------------------------


def check(result):
    """Unwraps a cuda-bindings result tuple, asserting CUDA_SUCCESS; returns the value(s)."""
    from cuda.bindings import driver

    err, *rest = result
    assert err == driver.CUresult.CUDA_SUCCESS, f"CUDA call failed: {err!r}"
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


@pytest.fixture(scope="session")
def cuda():
    """The cuda-bindings driver module after cuInit(0)."""
    from cuda.bindings import driver

    check(driver.cuInit(0))
    return driver


@pytest.fixture(scope="session")
def primary_ctx(cuda):
    """Device 0's primary context, retained and current on the main thread for the session."""
    dev = check(cuda.cuDeviceGet(0))
    ctx = check(cuda.cuDevicePrimaryCtxRetain(dev))
    check(cuda.cuCtxSetCurrent(ctx))
    yield ctx
    cuda.cuCtxSetCurrent(None)
    cuda.cuDevicePrimaryCtxRelease(dev)


@pytest.fixture
def ctx(cuda, primary_ctx):
    """Makes sure device 0's primary context is current for the test."""
    check(cuda.cuCtxSetCurrent(primary_ctx))
    return primary_ctx


@pytest.fixture(scope="session")
def libcuda(cuda):
    """ctypes handle on the libcuda.so.1 that cuda-bindings loaded (same object, by soname)."""
    import ctypes

    return ctypes.CDLL("libcuda.so.1")


# ---------------------------------------------------------------------------------------
# NVML (nvidia-ml-py) fixtures.
# ---------------------------------------------------------------------------------------


@pytest.fixture
def nvml():
    """pynvml, initialised for the test and shut down after it."""
    import pynvml

    pynvml.nvmlInit()
    yield pynvml
    pynvml.nvmlShutdown()


def uuid_string(raw16):
    """CUDA's 16 UUID bytes in NVML's form: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx."""
    h = bytes(raw16).hex()
    assert len(h) == 32
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
