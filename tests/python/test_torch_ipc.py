"""PyTorch through the pool, on what issue 19 added: torch.multiprocessing, where two processes
of one tenant share a CUDA tensor (IPC memory and event handles) and each reads the other's
values back (torch_ipc.py), and the cudaMallocAsync allocator backend, whose default memory
pool is held to the quota and trimmed by empty_cache, with torch.cuda.graph whose captured
allocations are graph memory (torch_mallocasync.py). Each runs under
`gpupool run`; the tenant's ledger is back to 0 when the processes have gone."""

import os
import subprocess

from conftest import SIM_LIBDIR
from pool import ROOT, Daemon, client_env, wait_for

TORCH_PYTHON = os.path.join(ROOT, "target", "venv-torch", "bin", "python")
SCRIPT = os.path.join(ROOT, "tests", "python", "torch_ipc.py")
MALLOC_ASYNC = os.path.join(ROOT, "tests", "python", "torch_mallocasync.py")


def test_torch_multiprocessing_shares_a_cuda_tensor_through_the_pool():
    assert os.path.exists(TORCH_PYTHON), (
        f"{TORCH_PYTHON} is missing: scripts/test installs it "
        "(scripts/setup-venv venv-torch tests/python/requirements-torch.txt)"
    )
    with Daemon(SIM_LIBDIR, devices=1, memory="4GiB") as d:
        env = client_env({"GPUPOOL_ENDPOINT": d.endpoint, "GPUPOOL_LOG": "1"})
        cmd = [d.exe, "run", "--memory", "256MiB", "--", TORCH_PYTHON, SCRIPT]
        p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0 and "FAIL" not in p.stdout and "SUMMARY 5/5" in p.stdout, (
            f"exit {p.returncode}\n--- stdout ---\n{p.stdout}\n--- stderr ---\n{p.stderr[-6000:]}"
            f"\n--- daemon ---\n{d.log()[-4000:]}"
        )
        wait_for(lambda: d.used("default")[0] == 0, 5, "the ledger back to 0")


def test_torch_cudamallocasync_backend_is_held_to_the_quota_and_trimmed():
    assert os.path.exists(TORCH_PYTHON), f"{TORCH_PYTHON} is missing (scripts/setup-venv venv-torch ...)"
    with Daemon(SIM_LIBDIR, devices=1, memory="4GiB") as d:
        env = client_env({"GPUPOOL_ENDPOINT": d.endpoint, "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
        cmd = [d.exe, "run", "--memory", "256MiB", "--", TORCH_PYTHON, MALLOC_ASYNC, "256"]
        p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0 and "FAIL" not in p.stdout and "SUMMARY 9/9" in p.stdout, (
            f"exit {p.returncode}\n--- stdout ---\n{p.stdout}\n--- stderr ---\n{p.stderr[-6000:]}"
            f"\n--- daemon ---\n{d.log()[-4000:]}"
        )
        wait_for(lambda: d.used("default")[0] == 0, 5, "the ledger back to 0")
