"""Unmodified PyTorch (the PyPI wheel, CUDA 13 build, in target/venv-torch: scripts/test
installs it from requirements-torch.txt) through the pool, and scripts/gpu-smoke's parts
that run without a GPU.

Each section of torch_checks.py runs in its own process as the README shows it,
`gpupool run --memory 256MiB -- python torch_checks.py SECTION 256` (the endpoint in
GPUPOOL_ENDPOINT), against one `gpupool daemon` on two simulated devices: init and
properties, the allocator in both modes (default and expandable_segments, which goes through
the VMM API) up to torch.cuda.OutOfMemoryError at the quota and on, copies of every kind,
streams and events, two devices and a peer copy, torch.cuda.graph capture and replay (copies,
torch.mm / F.linear on cuBLAS in the daemon, and a capture forked to a side stream and joined back),
and torch.mm / bmm / addmm / F.linear on
cuBLAS and cuBLASLt in the daemon in fp32, fp64, fp16 and bf16 against the CPU. After each,
the daemon's ledger is back to zero.

What needs PyTorch's own kernels (SASS only in the wheel) cannot run on the simulator;
scripts/gpu-smoke trains on a real GPU, and here its comparison is checked CPU against CPU.
"""

import json
import os
import subprocess

import pytest

from conftest import SIM_LIBDIR
from pool import ROOT, Daemon, client_env, wait_for

TORCH_PYTHON = os.path.join(ROOT, "target", "venv-torch", "bin", "python")
CHECKS = os.path.join(ROOT, "tests", "python", "torch_checks.py")
TRAIN = os.path.join(ROOT, "tests", "python", "torch_train.py")
GPU_SMOKE = os.path.join(ROOT, "scripts", "gpu-smoke")
QUOTA_MIB = 256


@pytest.fixture(scope="module")
def torch_python():
    assert os.path.exists(TORCH_PYTHON), (
        f"{TORCH_PYTHON} is missing: scripts/test installs it "
        "(scripts/setup-venv venv-torch tests/python/requirements-torch.txt)"
    )
    return TORCH_PYTHON


@pytest.fixture(scope="module")
def daemon():
    with Daemon(SIM_LIBDIR, devices=2, memory="4GiB") as d:
        yield d


def run_section(daemon, python, section, alloc_conf=None):
    env = client_env({"GPUPOOL_ENDPOINT": daemon.endpoint, "PYTORCH_CUDA_ALLOC_CONF": alloc_conf})
    # As the README shows it: gpupool run --memory SIZE -- CMD.
    cmd = [daemon.exe, "run", "--memory", f"{QUOTA_MIB}MiB", "--", python, CHECKS, section, str(QUOTA_MIB)]
    p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (
        f"torch_checks {section} exited {p.returncode}\n--- stdout ---\n{p.stdout}\n--- stderr ---\n{p.stderr}"
        f"\n--- daemon ---\n{daemon.log()[-4000:]}"
    )
    # Everything the process held is back when it is gone.
    wait_for(lambda: all(daemon.used("default", dev)[0] == 0 for dev in (0, 1)), 5, "the ledger back to 0")
    return p


SECTIONS = {
    "init": 3,
    "copies": 5,
    "streams": 3,
    "devices": 2,
    "graphs": 5,
}


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_torch_section_under_the_pool(daemon, torch_python, section):
    out = run_section(daemon, torch_python, section).stdout
    passes = [line for line in out.splitlines() if line.startswith(f"PASS {section}:")]
    assert len(passes) == SECTIONS[section], out


@pytest.mark.parametrize("alloc_conf", [None, "expandable_segments:True"], ids=["default", "expandable_segments"])
def test_torch_allocator_out_of_memory_at_the_quota_and_after(daemon, torch_python, alloc_conf):
    p = run_section(daemon, torch_python, "alloc", alloc_conf)
    mode = "expandable_segments" if alloc_conf else "default"
    passes = [line for line in p.stdout.splitlines() if line.startswith(f"PASS alloc[{mode}]:")]
    assert len(passes) == 3 and "OutOfMemoryError after" in passes[1], p.stdout
    # The expandable segments were mapped through the VMM API, and its cuMemCreate met the quota.
    mapped = "expandable_segments: memory mapping failed with OOM" in p.stderr
    assert mapped == (alloc_conf is not None), p.stderr


def test_torch_matmuls_on_cublas_in_the_daemon_match_the_cpu(daemon, torch_python):
    out = run_section(daemon, torch_python, "blas").stdout
    errors = {}
    for line in out.splitlines():
        if line.startswith("ERROR "):
            _, op, dtype, err, ratio = line.split()
            errors[(op, dtype)] = (float(err), float(ratio))
    ops = ("mm", "bmm", "addmm", "addmm_beta", "linear", "linear3d")
    dtypes = ("float32", "float64", "float16", "bfloat16")
    assert set(errors) == {(o, d) for o in ops for d in dtypes}, out
    assert all(r <= 1.0 for _, r in errors.values()), out
    print("\n".join(f"{o:11s} {d:9s} max |err| {e:.3e} ({r:.2f} of the bound)" for (o, d), (e, r) in errors.items()))


# ---- scripts/gpu-smoke without a GPU ------------------------------------------------------


def train(python, tmp_path, name, steps=8, **env):
    out = tmp_path / f"{name}.json"
    e = dict(os.environ, **env)
    subprocess.run(
        [python, TRAIN, "train", "--device", "cpu", "--steps", str(steps), "--out", str(out)],
        check=True,
        env=e,
        capture_output=True,
        timeout=300,
    )
    return out


def compare(python, a, b):
    return subprocess.run([python, TRAIN, "compare", str(a), str(b)], capture_output=True, text=True, timeout=120)


def test_gpu_smoke_comparison_accepts_a_matching_run_and_rejects_a_different_one(torch_python, tmp_path):
    # Two CPU runs with different thread counts: same maths, another summation order.
    a = train(torch_python, tmp_path, "a")
    b = train(torch_python, tmp_path, "b", OMP_NUM_THREADS="1")
    r = compare(torch_python, a, b)
    assert r.returncode == 0 and "matches" in r.stdout, r.stdout + r.stderr

    run = json.loads(a.read_text())
    # One weight moved past the tolerance (atol 1e-4 + rtol 1e-3 of its value), one loss too.
    w = run["models"]["cnn"]["weights"]["0.weight"]
    w[3] += 1e-4 + 2e-3 * abs(w[3]) + 1e-4
    run["models"]["mlp"]["losses"][5] *= 1.01
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(run))
    r = compare(torch_python, a, bad)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "MISMATCH cnn.0.weight[3]" in r.stdout and "MISMATCH mlp: loss at step 5" in r.stdout, r.stdout

    # Fewer steps is a mismatch, not a crash.
    short = train(torch_python, tmp_path, "short", steps=7)
    r = compare(torch_python, a, short)
    assert r.returncode == 1 and "8 steps vs 7" in r.stdout, r.stdout


def test_gpu_smoke_parses_its_arguments_and_refuses_a_host_without_a_driver():
    subprocess.run(["bash", "-n", GPU_SMOKE], check=True)
    h = subprocess.run([GPU_SMOKE, "--help"], capture_output=True, text=True, timeout=30)
    assert h.returncode == 0 and "--memory SIZE" in h.stdout and "--compute PCT" in h.stdout, h.stdout
    bad = subprocess.run([GPU_SMOKE, "--no-such-flag"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unexpected argument --no-such-flag" in bad.stderr, bad.stderr
    has_driver = b"libcuda.so.1 " in subprocess.run(["ldconfig", "-p"], capture_output=True).stdout
    if not has_driver:
        # This host (CI) has no NVIDIA driver: the script says so instead of failing later.
        r = subprocess.run([GPU_SMOKE], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and "no NVIDIA driver" in r.stderr, r.stderr
