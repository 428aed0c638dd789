"""A placed process's view of its GPUs' wiring through NVML (README.md, "Placement"), with
nvidia-ml-py unmodified under `gpupool run --gpus N`: the topology and NVLink queries answer
for its own GPUs only (numbered 0..N-1), and every answer is consistent with the others.
pool-daemon/tests/placement.rs compares what it prints with the physical wiring of the GPUs the
daemon placed it on:

    LEVEL i j level        nvmlDeviceGetTopologyCommonAncestor between its devices i and j
    LINK i link j          an active NVLink of device i whose far end is its device j
    NEAR i level j,k,...   nvmlDeviceGetTopologyNearestGpus (indices)
    GPU i uuid             which device its device i is

Prints PASS/FAIL lines and SUMMARY passed/total; exits 1 on any failure.
"""

import sys

import pynvml as N

results = []


def record(name, ok, why=""):
    results.append(ok)
    print(f"PASS {name}" if ok else f"FAIL {name}: {why}", flush=True)


def error_of(f, *args):
    try:
        f(*args)
        return None
    except N.NVMLError as e:
        return e.value


def text(b):
    return b.decode() if isinstance(b, bytes) else b


LEVELS = [N.NVML_TOPOLOGY_INTERNAL, N.NVML_TOPOLOGY_SINGLE, N.NVML_TOPOLOGY_MULTIPLE, N.NVML_TOPOLOGY_HOSTBRIDGE,
          N.NVML_TOPOLOGY_NODE, N.NVML_TOPOLOGY_SYSTEM]

N.nvmlInit()
n = N.nvmlDeviceGetCount()
handles = [N.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
buses = [text(N.nvmlDeviceGetPciInfo(h).busId).lower() for h in handles]
index_of = {N.nvmlDeviceGetIndex(h): i for i, h in enumerate(handles)}
for i, h in enumerate(handles):
    print(f"GPU {i} {text(N.nvmlDeviceGetUUID(h))}", flush=True)

level = [[N.nvmlDeviceGetTopologyCommonAncestor(a, b) for b in handles] for a in handles]
for i in range(n):
    for j in range(n):
        print(f"LEVEL {i} {j} {level[i][j]}", flush=True)
record("a device is INTERNAL to itself", all(level[i][i] == N.NVML_TOPOLOGY_INTERNAL for i in range(n)))
record("levels are symmetric", all(level[i][j] == level[j][i] for i in range(n) for j in range(n)))

near_ok = True
for i, h in enumerate(handles):
    for lv in LEVELS:
        near = sorted(index_of[N.nvmlDeviceGetIndex(x)] for x in N.nvmlDeviceGetTopologyNearestGpus(h, lv))
        want = [j for j in range(n) if j != i and level[i][j] <= lv]
        if near != want:
            print(f"device {i}: nearest GPUs at level {lv}: {near}, not {want}", flush=True)
            near_ok = False
        print(f"NEAR {i} {lv} {','.join(map(str, near))}", flush=True)
record("nearest GPUs at every level follow the common ancestors", near_ok)
record("an undefined level is INVALID_ARGUMENT",
       error_of(N.nvmlDeviceGetTopologyNearestGpus, handles[0], 15) == N.NVML_ERROR_INVALID_ARGUMENT)

links_ok = True
for i, h in enumerate(handles):
    link = 0
    while True:
        err = error_of(N.nvmlDeviceGetNvLinkState, h, link)
        if err is not None:
            # Past the last link (or no NVLink at all): the same error for the remote queries.
            if link == 0:
                links_ok &= err == N.NVML_ERROR_NOT_SUPPORTED
            else:
                links_ok &= err == N.NVML_ERROR_INVALID_ARGUMENT
            links_ok &= error_of(N.nvmlDeviceGetNvLinkRemotePciInfo, h, link) == err
            break
        if N.nvmlDeviceGetNvLinkState(h, link) == N.NVML_FEATURE_ENABLED:
            bus = text(N.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId).lower()
            far = buses.index(bus) if bus in buses else None
            kind = N.nvmlDeviceGetNvLinkRemoteDeviceType(h, link)
            if far is None or far == i or kind != N.NVML_NVLINK_DEVICE_TYPE_GPU:
                record(f"device {i} link {link} leads to another of its GPUs", False, f"{bus} {kind} {buses}")
                links_ok = False
            else:
                print(f"LINK {i} {link} {far}", flush=True)
                # The far device's handle by bus id is the same device.
                links_ok &= N.nvmlDeviceGetHandleByPciBusId(bus) is not None
        else:
            links_ok &= error_of(N.nvmlDeviceGetNvLinkRemotePciInfo, h, link) == N.NVML_ERROR_NOT_SUPPORTED
        link += 1
record("NVLink states, far ends and errors are consistent", links_ok)

if n >= 2:
    p2p = N.nvmlDeviceGetP2PStatus(handles[0], handles[1], N.NVML_P2P_CAPS_INDEX_NVLINK)
    record("no peer access through the pool", p2p == N.NVML_P2P_STATUS_NOT_SUPPORTED, f"{p2p}")

print(f"SUMMARY {sum(results)}/{len(results)}", flush=True)
sys.exit(0 if all(results) else 1)
