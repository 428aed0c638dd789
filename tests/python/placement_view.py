"""A placed process's view of its GPUs (README.md, "Placement"): run as
`gpupool run --gpus 2 -- target/venv/bin/python tests/python/placement_view.py` (or with
PLACEMENT_GPUS=N for another count), cuda-python and nvidia-ml-py, unmodified, see exactly N
devices, numbered 0..N-1, and agree on each one's UUID and PCI bus id (CUDA's list narrowed by
CUDA_VISIBLE_DEVICES if it is set, NVML's not, as NVIDIA's); handles by UUID and PCI bus id find
the same index; the next device does not exist; memory can be used on CUDA's last one.
pool-daemon/tests/placement.rs checks that the UUIDs printed (`VIEW i uuid busid` for NVML,
`CUDA i uuid`) are the physical devices the daemon placed the process on.

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
nvml_count = pynvml.nvmlDeviceGetCount()
record(f"NVML sees {N} devices", nvml_count == N, f"{nvml_count}")
nvml = []
for i in range(nvml_count):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    uuid = text(pynvml.nvmlDeviceGetUUID(h))
    bus = text(pynvml.nvmlDeviceGetPciInfo(h).busId).lower()
    by_uuid = pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(uuid))
    by_bus = pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByPciBusId(bus))
    record(f"NVML device {i}: found again by UUID and PCI bus id", (by_uuid, by_bus) == (i, i), f"{by_uuid} {by_bus}")
    nvml.append((uuid, bus))
    print(f"VIEW {i} {uuid} {bus}", flush=True)

# CUDA sees NVML's devices, narrowed and reordered by CUDA_VISIBLE_DEVICES (indices here) if set.
visible = os.environ.get("CUDA_VISIBLE_DEVICES")
expected = [nvml[int(x)] for x in visible.split(",")] if visible is not None else nvml
count = ok(d.cuDeviceGetCount())
record(f"CUDA sees {len(expected)} devices", count == len(expected), f"{count}")
for i in range(min(count, len(expected))):
    dev = ok(d.cuDeviceGet(i))
    cu_uuid = cuda_uuid(dev)
    cu_bus = text(ok(d.cuDeviceGetPCIBusId(64, dev))).split("\0")[0].strip().lower()
    uuid, bus = expected[i]
    record(f"CUDA device {i}: NVML's UUID", cu_uuid == uuid, f"{cu_uuid} vs {uuid}")
    # NVML's bus id has an 8-digit domain, CUDA's 4 digits: compare from the bus on.
    record(f"CUDA device {i}: NVML's PCI bus id", cu_bus[-7:] == bus[-7:], f"{cu_bus} vs {bus}")
    cu_by_bus = int(ok(d.cuDeviceGetByPCIBusId(cu_bus.encode())))
    record(f"CUDA device {i}: found again by PCI bus id", cu_by_bus == i, f"{cu_by_bus}")
    print(f"CUDA {i} {cu_uuid}", flush=True)
N_CUDA = len(expected)

if N_CUDA >= 2:
    # No peer access through the pool, whatever the wiring: CanAccessPeer and every P2P attribute 0.
    A = d.CUdevice_P2PAttribute
    rank = ok(d.cuDeviceGetP2PAttribute(A.CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1))
    record("no peer access between the placed devices", ok(d.cuDeviceCanAccessPeer(0, 1)) == 0 and rank == 0, f"{rank}")

err, _ = d.cuDeviceGet(N_CUDA)
record(f"CUDA device {N_CUDA} does not exist", err == d.CUresult.CUDA_ERROR_INVALID_DEVICE, f"{err}")
try:
    pynvml.nvmlDeviceGetHandleByIndex(N)
    record(f"NVML device {N} does not exist", False, "a handle came back")
except pynvml.NVMLError as e:
    record(f"NVML device {N} does not exist", e.value == pynvml.NVML_ERROR_INVALID_ARGUMENT, str(e))

last = ok(d.cuDeviceGet(N_CUDA - 1))
ctx = ok(d.cuDevicePrimaryCtxRetain(last))
ok(d.cuCtxSetCurrent(ctx))
ptr = ok(d.cuMemAlloc(1 << 20))
ok(d.cuMemsetD32(ptr, 7, (1 << 20) // 4))
free, total = ok(d.cuMemGetInfo())
record(f"memory on CUDA device {N_CUDA - 1} is usable", total > 0 and free < total, f"free {free} total {total}")
ok(d.cuMemFree(ptr))

print(f"SUMMARY {sum(results)}/{len(results)}", flush=True)
sys.exit(0 if all(results) else 1)
