"""nvidia-ml-py (``import pynvml``) against the simulator's libnvidia-ml.so.1.

pynvml and cuda-bindings load the same simulator library in this process (both symlinks
point at it), so allocations made through CUDA must show up in NVML's memory figures.
"""

import ctypes
import re
import time

import pynvml
import pytest
from cuda.bindings import driver

from conftest import SIM_DEVICES, SIM_DRIVER_VERSION, SIM_MEMORY, check, uuid_string

MiB = 1 << 20
UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def test_init_count_shutdown():
    pynvml.nvmlInit()
    try:
        assert pynvml.nvmlDeviceGetCount() == SIM_DEVICES
    finally:
        pynvml.nvmlShutdown()
    # After the last shutdown the library is uninitialised again.
    with pytest.raises(pynvml.NVMLError) as e:
        pynvml.nvmlDeviceGetCount()
    assert e.value.value == pynvml.NVML_ERROR_UNINITIALIZED


def test_init_is_reference_counted():
    # nvmlInit/nvmlShutdown are reference counted: NVML stays usable until every init is
    # matched by a shutdown.
    pynvml.nvmlInit()
    pynvml.nvmlInit()
    pynvml.nvmlShutdown()
    try:
        assert pynvml.nvmlDeviceGetCount() == SIM_DEVICES
    finally:
        pynvml.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError) as e:
        pynvml.nvmlDeviceGetCount()
    assert e.value.value == pynvml.NVML_ERROR_UNINITIALIZED


def test_calls_before_init_are_uninitialized(py_subprocess):
    # pynvml itself refuses calls before nvmlInit without reaching the library, so ask the
    # library directly, in a fresh process.
    out = py_subprocess(
        """
        import ctypes
        lib = ctypes.CDLL("libnvidia-ml.so.1")
        n = ctypes.c_uint(77)
        r = lib.nvmlDeviceGetCount_v2(ctypes.byref(n))
        assert r == 1, r                     # NVML_ERROR_UNINITIALIZED
        h = ctypes.c_void_p()
        r = lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
        assert r == 1, r
        assert lib.nvmlInit_v2() == 0
        r = lib.nvmlDeviceGetCount_v2(ctypes.byref(n))
        assert r == 0 and n.value == 2, (r, n.value)
        assert lib.nvmlShutdown() == 0
        print("ok")
        """
    )
    assert out.strip() == "ok"


def test_device_count_from_env(py_subprocess):
    out = py_subprocess(
        """
        import pynvml
        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        totals = [pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).total for i in range(n)]
        pynvml.nvmlShutdown()
        print(n, totals)
        """,
        GPUPOOL_SIM_DEVICES=3,
        GPUPOOL_SIM_MEMORY="2GiB",
    )
    n, totals = out.split(" ", 1)
    assert n == "3"
    assert totals.strip() == str([2 << 30] * 3)


def test_handles_and_indices(nvml):
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(SIM_DEVICES)]
    for i, h in enumerate(handles):
        assert nvml.nvmlDeviceGetIndex(h) == i
    assert len({ctypes.cast(h, ctypes.c_void_p).value for h in handles}) == SIM_DEVICES
    with pytest.raises(pynvml.NVMLError) as e:
        nvml.nvmlDeviceGetHandleByIndex(SIM_DEVICES)
    assert e.value.value == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_name_matches_cuda(nvml, cuda):
    for i in range(SIM_DEVICES):
        name = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i))
        assert "H100" in name
        cu_name = check(cuda.cuDeviceGetName(256, check(cuda.cuDeviceGet(i)))).split(b"\0", 1)[0].decode()
        assert name == cu_name


def test_uuid_matches_cuda(nvml, cuda):
    # NVML prints the same 16 bytes CUDA returns, as GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
    # With CUDA_DEVICE_ORDER=PCI_BUS_ID (set by conftest) CUDA ordinal i is NVML index i.
    nv = []
    for i in range(SIM_DEVICES):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        u = nvml.nvmlDeviceGetUUID(h)
        assert UUID_RE.match(u), u
        cu = uuid_string(check(cuda.cuDeviceGetUuid(check(cuda.cuDeviceGet(i)))).bytes)
        assert u == cu, f"device {i}: NVML {u}, CUDA {cu}"
        # and the UUID finds the same device back
        assert nvml.nvmlDeviceGetIndex(nvml.nvmlDeviceGetHandleByUUID(u)) == i
        nv.append(u)
    assert len(set(nv)) == SIM_DEVICES


def test_handle_by_unknown_uuid(nvml):
    with pytest.raises(pynvml.NVMLError) as e:
        nvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    assert e.value.value == pynvml.NVML_ERROR_NOT_FOUND


def test_memory_info_v1_v2(nvml, cuda):
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    m1 = nvml.nvmlDeviceGetMemoryInfo(h)
    m2 = nvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    # CUDA's usable total never exceeds the board's memory that NVML reports.
    cu_total = check(cuda.cuDeviceTotalMem(check(cuda.cuDeviceGet(0))))
    assert m1.total >= cu_total == SIM_MEMORY
    # v1: used is reserved + allocated, so free + used == total.
    assert m1.free + m1.used == m1.total
    # v2: total = reserved + free + used, and the same total and free as v1.
    assert m2.total == m1.total
    assert m2.reserved + m2.free + m2.used == m2.total
    assert m2.used + m2.reserved == m1.used


def test_memory_info_v2_version_mismatch(nvml):
    # nvmlDeviceGetMemoryInfo_v2 checks the struct version word.
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    m = pynvml.c_nvmlMemory_v2_t()
    m.version = 0x01000028  # version 1 with v2's size
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo_v2")
    assert fn(h, ctypes.byref(m)) == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH


def test_memory_used_tracks_cuda_allocations(nvml, cuda, ctx):
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    h1 = nvml.nvmlDeviceGetHandleByIndex(1)
    before = nvml.nvmlDeviceGetMemoryInfo(h)
    before2 = nvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    other_before = nvml.nvmlDeviceGetMemoryInfo(h1)
    cu_free0, _ = check(cuda.cuMemGetInfo())
    n = 256 * MiB
    d = check(cuda.cuMemAlloc(n))
    try:
        during = nvml.nvmlDeviceGetMemoryInfo(h)
        during2 = nvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        cu_free1, _ = check(cuda.cuMemGetInfo())
        assert during.used - before.used >= n
        assert during.used - before.used == cu_free0 - cu_free1
        assert before.free - during.free == during.used - before.used
        assert during2.used - before2.used == during.used - before.used
        assert during2.reserved == before2.reserved
        # another device is not affected
        assert nvml.nvmlDeviceGetMemoryInfo(h1).used == other_before.used
    finally:
        check(cuda.cuMemFree(d))
    after = nvml.nvmlDeviceGetMemoryInfo(h)
    assert after.used == before.used
    assert after.free == before.free


def test_utilization_range(nvml):
    for i in range(SIM_DEVICES):
        u = nvml.nvmlDeviceGetUtilizationRates(nvml.nvmlDeviceGetHandleByIndex(i))
        assert 0 <= u.gpu <= 100
        assert 0 <= u.memory <= 100


def test_utilization_busy_while_stream_runs_then_idle(nvml, cuda, ctx):
    # NVML: utilization.gpu is the "percent of time over the past sample period during which
    # one or more kernels was executing"; the sample period is between 1/6 s and 1 s.
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    n = 32 * MiB
    a = check(cuda.cuMemAlloc(n))
    b = check(cuda.cuMemAlloc(n))
    s = check(cuda.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING))
    try:
        # Calibrate: how long does one memset + copy pair take? The first pair also
        # faults the fresh pages in, so it is run once untimed.
        check(cuda.cuMemsetD32Async(a, 1, n // 4, s))
        check(cuda.cuMemcpyDtoDAsync(b, a, n, s))
        check(cuda.cuStreamSynchronize(s))
        t0 = time.monotonic()
        check(cuda.cuMemsetD32Async(a, 1, n // 4, s))
        check(cuda.cuMemcpyDtoDAsync(b, a, n, s))
        check(cuda.cuStreamSynchronize(s))
        per_pair = max(time.monotonic() - t0, 1e-4)
        pairs = min(2000, max(3, int(1.5 / per_pair)))  # about 1.5 s of device work
        for i in range(pairs):
            check(cuda.cuMemsetD32Async(a, i, n // 4, s))
            check(cuda.cuMemcpyDtoDAsync(b, a, n, s))
        busy = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.2)
            (q,) = cuda.cuStreamQuery(s)
            u = nvml.nvmlDeviceGetUtilizationRates(h)
            assert 0 <= u.gpu <= 100 and 0 <= u.memory <= 100
            if q == driver.CUresult.CUDA_ERROR_NOT_READY:
                busy.append((u.gpu, u.memory))
            else:
                assert q == driver.CUresult.CUDA_SUCCESS
                break
        assert busy, f"the stream finished before it could be sampled ({pairs} pairs at {per_pair:.4f} s)"
        assert max(g for g, _ in busy) > 0 or max(m for _, m in busy) > 0, f"never busy: {busy}"
        check(cuda.cuStreamSynchronize(s))
        time.sleep(1.5)
        idle = nvml.nvmlDeviceGetUtilizationRates(h)
        assert idle.gpu == 0, f"gpu utilization {idle.gpu}% 1.5 s after the device went idle"
    finally:
        cuda.cuStreamSynchronize(s)
        check(cuda.cuStreamDestroy(s))
        check(cuda.cuMemFree(a))
        check(cuda.cuMemFree(b))


def test_driver_versions(nvml, cuda):
    v = nvml.nvmlSystemGetDriverVersion()
    assert re.match(r"^\d+\.\d+(\.\d+)?$", v), v
    assert nvml.nvmlSystemGetCudaDriverVersion() == SIM_DRIVER_VERSION
    assert nvml.nvmlSystemGetCudaDriverVersion_v2() == SIM_DRIVER_VERSION
    assert check(cuda.cuDriverGetVersion()) == nvml.nvmlSystemGetCudaDriverVersion()
    nv = nvml.nvmlSystemGetNVMLVersion()
    assert nv and v in nv, f"NVML version {nv!r} does not carry the driver version {v!r}"


def test_error_strings():
    # nvmlErrorString works without nvmlInit and returns NVIDIA's fixed texts.
    assert pynvml.nvmlErrorString(pynvml.NVML_SUCCESS) == "Success"
    assert pynvml.nvmlErrorString(pynvml.NVML_ERROR_UNINITIALIZED) == "Uninitialized"
    assert pynvml.nvmlErrorString(pynvml.NVML_ERROR_INVALID_ARGUMENT) == "Invalid Argument"
    assert pynvml.nvmlErrorString(pynvml.NVML_ERROR_NOT_SUPPORTED) == "Not Supported"
    assert pynvml.nvmlErrorString(pynvml.NVML_ERROR_NOT_FOUND) == "Not Found"
    assert str(pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)) == "Invalid Argument"


def test_null_arguments_are_invalid_argument(nvml):
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetCount_v2")
    assert fn(None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo")
    assert fn(h, None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetName")
    buf = ctypes.create_string_buffer(2)
    # "NVML_ERROR_INSUFFICIENT_SIZE if length is too small"
    assert fn(h, buf, ctypes.c_uint(2)) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE


def test_topology_and_nvlink_follow_the_configured_wiring(py_subprocess, tmp_path):
    # 8 devices: NVLink islands 0-3 and 4-7, PCIe switches of two, a NUMA node per island.
    cfg = tmp_path / "sim.toml"
    cfg.write_text(
        "[topology]\n"
        "nvlink_islands = [[0, 1, 2, 3], [4, 5, 6, 7]]\n"
        "pcie_switches = [[0, 1], [2, 3], [4, 5], [6, 7]]\n"
        "numa_nodes = [[0, 1, 2, 3], [4, 5, 6, 7]]\n"
    )
    out = py_subprocess(
        """
        import pynvml as n
        n.nvmlInit()
        h = [n.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
        anc = lambda a, b: n.nvmlDeviceGetTopologyCommonAncestor(h[a], h[b])
        assert (anc(0, 0), anc(0, 1), anc(1, 3), anc(3, 4)) == (
            n.NVML_TOPOLOGY_INTERNAL, n.NVML_TOPOLOGY_SINGLE, n.NVML_TOPOLOGY_NODE, n.NVML_TOPOLOGY_SYSTEM)
        near = lambda d, level: [n.nvmlDeviceGetIndex(x) for x in n.nvmlDeviceGetTopologyNearestGpus(h[d], level)]
        assert near(5, n.NVML_TOPOLOGY_SINGLE) == [4], near(5, n.NVML_TOPOLOGY_SINGLE)
        assert near(5, n.NVML_TOPOLOGY_NODE) == [4, 6, 7]
        assert near(5, n.NVML_TOPOLOGY_SYSTEM) == [0, 1, 2, 3, 4, 6, 7]
        # Device 5's links lead to 4, 6 and 7 (buses 0x58, 0x78, 0x88); links 3..17 are inactive.
        # NVML_NVLINK_MAX_LINKS is 18 in the nvml.h our header is checked against (newer pynvml: 36).
        states = [n.nvmlDeviceGetNvLinkState(h[5], link) for link in range(18)]
        assert states == [1, 1, 1] + [0] * 15, states
        buses = [n.nvmlDeviceGetNvLinkRemotePciInfo(h[5], link).bus for link in range(3)]
        assert buses == [0x58, 0x78, 0x88], buses
        assert n.nvmlDeviceGetNvLinkRemoteDeviceType(h[5], 0) == n.NVML_NVLINK_DEVICE_TYPE_GPU
        for call, code in [
            (lambda: n.nvmlDeviceGetNvLinkState(h[5], 18), n.NVML_ERROR_INVALID_ARGUMENT),
            (lambda: n.nvmlDeviceGetNvLinkRemotePciInfo(h[5], 3), n.NVML_ERROR_NOT_SUPPORTED),
            (lambda: n.nvmlDeviceGetTopologyNearestGpus(h[5], 15), n.NVML_ERROR_INVALID_ARGUMENT),
        ]:
            try:
                call()
                raise AssertionError("accepted")
            except n.NVMLError as e:
                assert e.value == code, (e.value, code)
        # Peer access is not simulated, NVLink or not: every P2P attribute 0, as CanAccessPeer.
        from cuda.bindings import driver as d
        assert d.cuInit(0)[0] == d.CUresult.CUDA_SUCCESS
        A = d.CUdevice_P2PAttribute
        for attr in (A.CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, A.CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED,
                     A.CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, A.CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED):
            assert d.cuDeviceGetP2PAttribute(attr, 4, 5) == (d.CUresult.CUDA_SUCCESS, 0), attr
        assert d.cuDeviceCanAccessPeer(4, 5) == (d.CUresult.CUDA_SUCCESS, 0)
        assert d.cuDeviceGetP2PAttribute(A.CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 5, 5)[0] == d.CUresult.CUDA_ERROR_INVALID_DEVICE
        assert d.cuDeviceGetP2PAttribute(A.CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 5, 8)[0] == d.CUresult.CUDA_ERROR_INVALID_DEVICE
        print("OK")
        """,
        GPUPOOL_SIM_CONFIG=cfg,
        GPUPOOL_SIM_DEVICES=8,
    )
    assert out.strip() == "OK"
    # Without a [topology]: no NVLink, one NUMA node, no switch.
    out = py_subprocess(
        """
        import pynvml as n
        n.nvmlInit()
        a, b = n.nvmlDeviceGetHandleByIndex(0), n.nvmlDeviceGetHandleByIndex(1)
        assert n.nvmlDeviceGetTopologyCommonAncestor(a, b) == n.NVML_TOPOLOGY_NODE
        try:
            n.nvmlDeviceGetNvLinkState(a, 0)
            raise AssertionError("an NVLink without a topology")
        except n.NVMLError as e:
            assert e.value == n.NVML_ERROR_NOT_SUPPORTED
        print("OK")
        """
    )
    assert out.strip() == "OK"
