"""Two processes of one tenant sharing a CUDA tensor through torch.multiprocessing (which
sends CUDA storages as IPC memory and event handles), run under `gpupool run` by
test_torch_ipc.py. Only copies touch the device: PyTorch's kernels are SASS and do not run
on the simulator, and a copy-back is what is checked.

The parent fills a tensor with a host-to-device copy and sends it; the child reads it back,
checks it, writes its own values into the same memory (host-to-device into the shared
tensor) and says so; the parent reads those values back from its own tensor. Prints
`PASS name` / `FAIL name: why` and `SUMMARY passed/total`.
"""

import sys
import traceback

import numpy as np
import torch
import torch.multiprocessing as mp

N = 1 << 20


def child(q, back):
    try:
        t = q.get(timeout=60)
        assert t.is_cuda and t.numel() == N, (t.device, t.numel())
        got = t.cpu().numpy()
        ok_read = bool(np.array_equal(got, np.arange(N, dtype=np.float32)))
        # Write through the shared memory: a host-to-device copy into the received tensor.
        t.copy_(torch.from_numpy(np.full(N, 7.5, dtype=np.float32)))
        torch.cuda.synchronize()
        back.put(("ok", ok_read, t.data_ptr()))
        # Keep the tensor (and so the IPC mapping) until the parent has read it.
        back.put(("wait", q.get(timeout=60)))
    except Exception:
        back.put(("error", traceback.format_exc(), 0))


def main():
    results = []

    def check(name, cond, why=""):
        results.append(cond)
        print(f"PASS {name}" if cond else f"FAIL {name}: {why}", flush=True)

    mp.set_start_method("spawn")
    x = torch.from_numpy(np.arange(N, dtype=np.float32)).cuda()
    torch.cuda.synchronize()
    q, back = mp.Queue(), mp.Queue()
    p = mp.Process(target=child, args=(q, back))
    p.start()
    q.put(x)
    status, read_ok, child_ptr = back.get(timeout=120)
    check("the child got the tensor", status == "ok", read_ok if status != "ok" else "")
    if status == "ok":
        check("the child reads the parent's values", read_ok)
        check("the child maps the same device memory", child_ptr == x.data_ptr(), f"{child_ptr:#x} vs {x.data_ptr():#x}")
        got = x.cpu().numpy()
        check("the parent reads the child's values", bool(np.all(got == 7.5)), f"first values {got[:4]}")
    q.put("done")
    back.get(timeout=60)
    p.join(timeout=60)
    check("the child exits cleanly", p.exitcode == 0, f"exit code {p.exitcode}")
    print(f"SUMMARY {sum(results)}/{len(results)}", flush=True)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
