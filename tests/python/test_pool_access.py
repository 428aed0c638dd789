"""cuMemPoolSetAccess / cuMemPoolGetAccess on the simulator (pool_access_checks.py in a process
of its own, with the simulator as its libcuda.so.1)."""

import os
import subprocess
import sys


def test_pool_access_on_the_simulator():
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pool_access_checks.py")
    out = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    passed = sum(1 for line in out.stdout.splitlines() if line.startswith("PASS "))
    assert passed >= 4 and f"SUMMARY {passed}/{passed}" in out.stdout, out.stdout
