"""A placed process's view of its GPUs (README.md, "Placement"): run as
`gpupool run --gpus 2 -- target/venv/bin/python tests/python/placement_view.py` (or with
PLACEMENT_GPUS=N for another count), cuda-python and nvidia-ml-py, unmodified, see exactly N
devices, numbered 0..N-1, and agree on each one's UUID and PCI bus id; handles by UUID and PCI
bus id find the same index; device N does not exist for either; memory can be used on the last
one. pool-daemon/tests/placement.rs checks that the UUIDs printed (`VIEW i uuid busid`) are the
physical devices the daemon placed the process on.

Prints PASS/FAIL lines and SUMMARY passed/total; exits 1 on any failure.
"""

import os
import sys

import pynvml
from cuda.bindings import driver as d

N = int(os.environ.get("PLACEMENT_GPUS", "2"))
results = []


def record(name, ok, why=""):
    results.append(ok)
    print(f"PASS {name}" if ok else f"FAIL {name}: {why}", flush=True)


def ok(r):
    err = r[0] if isinstance(r, tuple) else r
    if err != d.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA error {err}")
    return r[1] if isinstance(r, tuple) and len(r) == 2 else r[1:]


def text(b):
    return b.decode() if isinstance(b, bytes) else b


def cuda_uuid(dev):
    raw = bytes(ok(d.cuDeviceGetUuid(dev)).bytes)
    h = raw.hex()
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


ok(d.cuInit(0))
pynvml.nvmlInit()
count = ok(d.cuDeviceGetCount())
record(f"CUDA sees {N} devices", count == N, f"{count}")
nvml_count = pynvml.nvmlDeviceGetCount()
record(f"NVML sees {N} devices", nvml_count == N, f"{nvml_count}")

for i in range(min(count, nvml_count)):
    dev = ok(d.cuDeviceGet(i))
    cu_uuid = cuda_uuid(dev)
    cu_bus = text(ok(d.cuDeviceGetPCIBusId(64, dev))).split("\0")[0].strip().lower()
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    nv_uuid = text(pynvml.nvmlDeviceGetUUID(h))
    nv_bus = text(pynvml.nvmlDeviceGetPciInfo(h).busId).lower()
    record(f"device {i}: CUDA and NVML give one UUID", cu_uuid == nv_uuid, f"{cu_uuid} vs {nv_uuid}")
    # NVML's bus id has an 8-digit domain, CUDA's 4 digits: compare from the bus on.
    record(f"device {i}: CUDA and NVML give one PCI bus id", cu_bus[-7:] == nv_bus[-7:], f"{cu_bus} vs {nv_bus}")
    by_uuid = pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(nv_uuid))
    by_bus = pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByPciBusId(nv_bus))
    cu_by_bus = ok(d.cuDeviceGetByPCIBusId(cu_bus.encode()))
    record(
        f"device {i}: found again by UUID and PCI bus id as index {i}",
        by_uuid == i and by_bus == i and int(cu_by_bus) == i,
        f"NVML by UUID {by_uuid}, by bus {by_bus}; CUDA by bus {int(cu_by_bus)}",
    )
    print(f"VIEW {i} {nv_uuid} {nv_bus}", flush=True)

err, _ = d.cuDeviceGet(N)
record(f"CUDA device {N} does not exist", err == d.CUresult.CUDA_ERROR_INVALID_DEVICE, f"{err}")
try:
    pynvml.nvmlDeviceGetHandleByIndex(N)
    record(f"NVML device {N} does not exist", False, "a handle came back")
except pynvml.NVMLError as e:
    record(f"NVML device {N} does not exist", e.value == pynvml.NVML_ERROR_INVALID_ARGUMENT, str(e))

last = ok(d.cuDeviceGet(N - 1))
ctx = ok(d.cuDevicePrimaryCtxRetain(last))
ok(d.cuCtxSetCurrent(ctx))
ptr = ok(d.cuMemAlloc(1 << 20))
ok(d.cuMemsetD32(ptr, 7, (1 << 20) // 4))
free, total = ok(d.cuMemGetInfo())
record(f"memory on device {N - 1} is usable", total > 0 and free < total, f"free {free} total {total}")
ok(d.cuMemFree(ptr))

print(f"SUMMARY {sum(results)}/{len(results)}", flush=True)
sys.exit(0 if all(results) else 1)
