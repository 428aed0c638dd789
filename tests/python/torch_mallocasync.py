"""PyTorch's cudaMallocAsync allocator backend (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync,
which allocates from the device's default memory pool with a release threshold it raises, and
trims the pool in empty_cache) under `gpupool run --memory QUOTA_MIB`, run by
test_torch_ipc.py. Prints `PASS name` / `FAIL name: why` and `SUMMARY passed/total`."""

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
print(f"SUMMARY {sum(results)}/{len(results)}", flush=True)
sys.exit(0 if all(results) else 1)
