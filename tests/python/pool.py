"""A real `gpupool daemon` on the simulator, and clients started with `gpupool run`, for
test_pool.py.

The daemon is ``target/debug/gpupool`` (``GPUPOOL_BIN`` overrides), serving the simulator
from conftest's SIM_LIBDIR with ``--driver-dir``, on a socket in a temporary directory. Its
clients are unmodified Python programs run as ``gpupool run --endpoint ... -- python ...``:
``gpupool run`` preloads ``libgpupool.so`` (next to the binary) and the client's
environment has no simulator on LD_LIBRARY_PATH, so the interposer is the only driver the
client can reach. ``Daemon.status()`` reads the control socket (``<socket>.ctl``: one JSON
document, then EOF), the same document ``gpupool status --json`` prints.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MiB = 1 << 20


def gpupool_bin():
    exe = os.environ.get("GPUPOOL_BIN") or os.path.join(ROOT, "target", "debug", "gpupool")
    lib = os.path.join(os.path.dirname(exe), "libgpupool.so")
    for p in (exe, lib):
        if not os.path.exists(p):
            raise RuntimeError(f"{p} is missing: run `cargo build --workspace` first (scripts/test does)")
    return exe


def client_env(extra=None):
    """This environment without the simulator: no LD_LIBRARY_PATH entry holding a
    libcuda.so.1 or libnvidia-ml.so.1, no GPUPOOL_SIM_*, no LD_PRELOAD (gpupool run sets it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_SIM_")}
    keep = [
        p
        for p in env.get("LD_LIBRARY_PATH", "").split(":")
        if p and not any(os.path.exists(os.path.join(p, n)) for n in ("libcuda.so.1", "libnvidia-ml.so.1"))
    ]
    env["LD_LIBRARY_PATH"] = ":".join(keep)
    for k in ("LD_PRELOAD", "GPUPOOL_ENDPOINT", "GPUPOOL_MEMORY", "GPUPOOL_COMPUTE", "GPUPOOL_TOKEN"):
        env.pop(k, None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


class Daemon:
    """`gpupool daemon` on `devices` simulated devices of `memory` each, with an optional
    quota config (TOML text). Use as a context manager: the daemon is killed on exit."""

    def __init__(self, sim_libdir, config=None, devices=2, memory="4GiB"):
        self.exe = gpupool_bin()
        self.dir = tempfile.mkdtemp(prefix="gpupool-pytest-")
        self.sock = os.path.join(self.dir, "s.sock")
        self.endpoint = "unix://" + self.sock
        self.log_path = os.path.join(self.dir, "daemon.log")
        args = [self.exe, "daemon", "--listen", self.endpoint, "--driver-dir", os.path.abspath(sim_libdir)]
        if config is not None:
            cfg = os.path.join(self.dir, "quota.toml")
            with open(cfg, "w") as f:
                f.write(config)
            args += ["--config", cfg]
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_SIM_")}
        env.update(GPUPOOL_SIM_DEVICES=str(devices), GPUPOOL_SIM_MEMORY=memory)
        env.pop("LD_PRELOAD", None)
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=self._log)
        self.clients = []
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                self.close()
                raise RuntimeError(f"gpupool daemon exited {self.proc.returncode}:\n{self.log()}")
            try:
                self.status()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f"gpupool daemon did not come up in 20 s:\n{self.log()}")
                time.sleep(0.01)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def status(self):
        """The control socket's JSON document (what `gpupool status --json` prints)."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(5)
            s.connect(self.sock + ".ctl")
            chunks = []
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
        finally:
            s.close()
        return json.loads(b"".join(chunks))

    def tenant(self, name, status=None):
        st = status if status is not None else self.status()
        for t in st["tenants"]:
            if t["tenant"] == name:
                return t
        return None

    def used(self, name, device=0, status=None):
        """(used, quota) of tenant `name` on `device`; (0, None) when the tenant is not listed."""
        t = self.tenant(name, status)
        if t is None:
            return 0, None
        for d in t["devices"]:
            if d["device"] == device:
                return d["used"], d["quota"]
        return 0, None

    def run_args(self, cmd, memory=None):
        args = [self.exe, "run", "--endpoint", self.endpoint]
        if memory is not None:
            args += ["--memory", memory]
        return args + ["--", *cmd]

    def python(self, code, *argv, memory=None, token=None, env=None, **popen):
        """Starts `python -c code argv...` under `gpupool run` (a Popen, killed at close)."""
        extra = dict(env or {})
        if token is not None:
            extra["GPUPOOL_TOKEN"] = token
        p = subprocess.Popen(
            self.run_args([sys.executable, "-c", code, *map(str, argv)], memory=memory),
            env=client_env(extra),
            cwd=ROOT,
            start_new_session=True,  # its own process group: close() kills gpupool run and CMD
            **popen,
        )
        self.clients.append(p)
        return p

    def close(self):
        for p in self.clients:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the group: `gpupool run` does not exec CMD
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def wait_for(pred, timeout, what, interval=0.002):
    """Polls pred() until it returns a true value (returned); AssertionError after timeout s."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def read_lines(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []
