"""CUDA arrays, texture and surface objects on the simulator through cuda-bindings:
texture_checks.py (NVRTC kernels sampling 2D and 3D textures with linear filtering against the
Programming Guide's 8-bit-weight reference, writing and reading a surface, box copies and 1D
copies with array ends), run in a child process as it runs under `gpupool run`."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_texture_checks_pass_on_the_simulator():
    r = subprocess.run(
        [sys.executable, os.path.join(HERE, "texture_checks.py")], capture_output=True, text=True, timeout=300
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "FAIL" not in out, out
    assert "SUMMARY 18/18" in out, out
