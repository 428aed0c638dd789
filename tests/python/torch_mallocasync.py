"""PyTorch's cudaMallocAsync allocator backend (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync,
which allocates from the device's default memory pool with a release threshold it raises, and
trims the pool in empty_cache) under `gpupool run --memory QUOTA_MIB`, run by
test_torch_ipc.py; and torch.cuda.graph under it, whose tensors made during capture are CUDA
graph allocation nodes (cudaMallocAsync on the capturing stream), counted while the graph
holds them and given back by cuDeviceGraphMemTrim. Prints `PASS name` / `FAIL name: why` and `SUMMARY passed/total`."""

import ctypes
import sys

import numpy as np
import torch

quota = int(sys.argv[1]) << 20
results = []


def check(name, cond, why=""):
    results.append(bool(cond))
    print(f"PASS {name}" if cond else f"FAIL {name}: {why}", flush=True)


check("the backend is cudaMallocAsync", torch.cuda.get_allocator_backend() == "cudaMallocAsync")
block = 32 << 20
xs = []
try:
    while len(xs) <= quota // block:
        xs.append(torch.from_numpy(np.full(block // 4, len(xs), dtype=np.float32)).cuda())
except torch.cuda.OutOfMemoryError:
    pass
check("OutOfMemoryError exactly at the quota", len(xs) == quota // block, f"{len(xs)} blocks of 32 MiB")
free, total = torch.cuda.mem_get_info()
check("the pool's memory is the tenant's", (free, total) == (0, quota), (free, total))
check("the blocks hold their values", all(float(x[-1:].cpu()) == i for i, x in enumerate(xs)))
del xs
torch.cuda.synchronize()
torch.cuda.empty_cache()
free, total = torch.cuda.mem_get_info()
check("empty_cache trims the pool back to the quota", free == quota, f"free {free}")
y = torch.from_numpy(np.arange(1 << 20, dtype=np.float32)).cuda()
check("allocation after the trim", bool((y.cpu().numpy() == np.arange(1 << 20)).all()))

# torch.cuda.graph: what the capture allocates comes from graph allocation nodes. Only copies are
# captured (PyTorch's own kernels are SASS only, which the simulator cannot run).
n = 1 << 18
x = torch.from_numpy(np.zeros(n, dtype=np.float32)).cuda()
torch.cuda.synchronize()
torch.cuda.empty_cache()
free0 = torch.cuda.mem_get_info()[0]
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    gy = x.clone()
    gz = gy.clone()
free1 = torch.cuda.mem_get_info()[0]
check("a graph's captured allocations are counted", free0 - free1 >= 2 * n * 4, f"{free0 - free1} bytes")
replays = []
for r in range(1, 4):
    x.copy_(torch.from_numpy(np.full(n, r, dtype=np.float32)).cuda())
    g.replay()
    torch.cuda.synchronize()
    replays.append((float(gy[7].cpu()), float(gz[n - 1].cpu())))
check("the graph replays with new inputs", replays == [(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)], replays)
del g, gy, gz
torch.cuda.synchronize()
torch.cuda.empty_cache()
rc = ctypes.CDLL("libcuda.so.1").cuDeviceGraphMemTrim(0)
free2 = torch.cuda.mem_get_info()[0]
check("cuDeviceGraphMemTrim gives the graph's memory back", rc == 0 and free2 == free0, (rc, free2, free0))
print(f"SUMMARY {sum(results)}/{len(results)}", flush=True)
sys.exit(0 if all(results) else 1)
