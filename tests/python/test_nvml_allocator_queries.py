"""The NVML queries PyTorch's CUDA allocator resolves (c10_cuda asserts each exists), against
the simulator's libnvidia-ml.so.1: the handle by PCI bus id (and the PCI info it must agree
with), running compute processes (all three struct versions), GPU fabric info, the NvLink
remote queries, and peer-to-peer status (libtorch_cuda's tensorpipe).

The simulated devices belong to the process that loaded the simulator, so the process list
is that process alone, once it has a context or memory on the device.
"""

import ctypes

import pynvml
import pytest
from cuda.bindings import driver

from conftest import SIM_DEVICES, check

MiB = 1 << 20


def test_pci_info_and_bus_id_lookup_agree_with_cuda(nvml, cuda):
    seen = set()
    for i in range(SIM_DEVICES):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        pci = nvml.nvmlDeviceGetPciInfo(h)
        cu_text = check(cuda.cuDeviceGetPCIBusId(64, check(cuda.cuDeviceGet(i)))).split(b"\0", 1)[0].decode()
        # NVML_DEVICE_PCI_BUS_ID_FMT "%08X:%02X:%02X.0" and the legacy "%04X:%02X:%02X.0".
        assert pci.busId == f"{pci.domain:08X}:{pci.bus:02X}:{pci.device:02X}.0", pci.busId
        assert pci.busIdLegacy.lower() == cu_text, (pci.busIdLegacy, cu_text)
        assert pci.pciDeviceId & 0xFFFF == 0x10DE  # NVIDIA's vendor id in the low half
        seen.add(pci.busId)
        # Every documented format finds the same device: NVML's own text, CUDA's, without the
        # function, and bus:device.function.
        for text in (pci.busId, pci.busIdLegacy, cu_text, cu_text[:-2], f"{pci.bus:x}:{pci.device:x}.0"):
            found = nvml.nvmlDeviceGetHandleByPciBusId(text.encode())
            assert nvml.nvmlDeviceGetIndex(found) == i, text
    assert len(seen) == SIM_DEVICES


@pytest.mark.parametrize(
    "text, code",
    [
        (b"0000:ee:00.0", pynvml.NVML_ERROR_NOT_FOUND),  # well formed, no device there
        (b"0000:18:00.1", pynvml.NVML_ERROR_INVALID_ARGUMENT),  # a function no GPU of ours has
        (b"not a bus id", pynvml.NVML_ERROR_INVALID_ARGUMENT),
        (b"", pynvml.NVML_ERROR_INVALID_ARGUMENT),
    ],
)
def test_bad_or_unknown_bus_ids_are_refused(nvml, text, code):
    with pytest.raises(pynvml.NVMLError) as e:
        nvml.nvmlDeviceGetHandleByPciBusId(text)
    assert e.value.value == code


def test_null_arguments_of_the_new_queries(nvml):
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    out = ctypes.c_void_p()
    by_bus = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetHandleByPciBusId_v2")
    assert by_bus(None, ctypes.byref(out)) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert by_bus(b"0000:18:00.0", None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert pynvml._nvmlGetFunctionPointer("nvmlDeviceGetPciInfo_v3")(h, None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    procs = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses_v3")
    assert procs(h, None, None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    # A bad device handle, for every per-device query.
    bogus = ctypes.c_void_p(0x1234)
    for name in ("nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetGpuFabricInfoV"):
        assert pynvml._nvmlGetFunctionPointer(name)(bogus, ctypes.byref(pynvml.nvmlPciInfo_t())) == (
            pynvml.NVML_ERROR_INVALID_ARGUMENT
        ), name


# Runs in a fresh process: the test process has contexts on both devices from other tests.
PROCESSES_SCRIPT = r"""
import ctypes, os, pynvml
from cuda.bindings import driver as d

def ok(r):
    assert r[0] == d.CUresult.CUDA_SUCCESS, r
    return r[1] if len(r) == 2 else None

class V1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]

def v1_list(h):
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses")
    n = ctypes.c_uint(0)
    r = fn(h, ctypes.byref(n), None)
    if r == pynvml.NVML_SUCCESS:
        assert n.value == 0
        return []
    assert r == pynvml.NVML_ERROR_INSUFFICIENT_SIZE, r
    arr = (V1 * n.value)()
    assert fn(h, ctypes.byref(n), arr) == pynvml.NVML_SUCCESS
    return [(p.pid, p.usedGpuMemory) for p in arr[: n.value]]

def every_version(h):
    lists = [
        [(p.pid, p.usedGpuMemory) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)],  # _v3
        [(p.pid, p.usedGpuMemory) for p in pynvml.nvmlDeviceGetComputeRunningProcesses_v2(h)],
        v1_list(h),
    ]
    assert lists[0] == lists[1] == lists[2], lists
    return lists[0]

pynvml.nvmlInit()
h0, h1 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
ok(d.cuInit(0))
assert every_version(h0) == [] and every_version(h1) == [], "no context yet"
ctx = ok(d.cuCtxCreate(0, ok(d.cuDeviceGet(0))))
n = 48 << 20
p = ok(d.cuMemAlloc(n))
used = pynvml.nvmlDeviceGetMemoryInfo(h0).used
assert used >= n, used
assert every_version(h0) == [(os.getpid(), used)], (every_version(h0), os.getpid(), used)
assert every_version(h1) == [], "only the device holding the context"
v3 = pynvml.nvmlDeviceGetComputeRunningProcesses(h0)[0]
assert (v3.gpuInstanceId, v3.computeInstanceId) == (0xFFFFFFFF, 0xFFFFFFFF), "no MIG"
# Too small an array: INSUFFICIENT_SIZE, and the count says how many.
fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses_v3")
cnt = ctypes.c_uint(0)
assert fn(h0, ctypes.byref(cnt), None) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE and cnt.value == 1
ok(d.cuMemFree(p))
ok(d.cuCtxDestroy(ctx))
assert every_version(h0) == [], "the context is gone"
pynvml.nvmlShutdown()
print("PASS")
"""


def test_running_processes_are_this_process_once_it_has_a_context(py_subprocess):
    out = py_subprocess(PROCESSES_SCRIPT)
    assert out.strip().endswith("PASS"), out


def test_fabric_info_of_a_hopper_part_outside_a_fabric(nvml):
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    info = pynvml.c_nvmlGpuFabricInfo_v2_t()
    info.state = 0xAAAA  # overwritten by a successful call (pynvml: 4 bytes, nvml.h: 1 and padding)
    nvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))
    assert info.version == pynvml.nvmlGpuFabricInfo_v2
    assert info.state == pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED
    assert (info.cliqueId, info.healthMask, bytes(info.clusterUuid)) == (0, 0, bytes(16))
    # A later struct version than this library knows: ARGUMENT_VERSION_MISMATCH (torch then
    # retries with v2).
    v3 = pynvml.c_nvmlGpuFabricInfo_v3_t()
    with pytest.raises(pynvml.NVMLError) as e:
        nvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(v3))
    assert e.value.value == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH


def test_fabric_info_before_hopper_is_not_supported(py_subprocess, tmp_path):
    # "For Hopper or newer": an Ampere part (compute 8.6) answers NOT_SUPPORTED.
    config = tmp_path / "ampere.toml"
    config.write_text('[[device]]\ncompute_capability = "8.6"\n')
    out = py_subprocess(
        """
        import ctypes, pynvml
        pynvml.nvmlInit()
        info = pynvml.c_nvmlGpuFabricInfo_v2_t()
        try:
            pynvml.nvmlDeviceGetGpuFabricInfoV(pynvml.nvmlDeviceGetHandleByIndex(0), ctypes.byref(info))
            print("succeeded")
        except pynvml.NVMLError as e:
            print(e.value)
        """,
        GPUPOOL_SIM_CONFIG=str(config),
        GPUPOOL_SIM_DEVICES="1",
    )
    assert out.strip() == str(pynvml.NVML_ERROR_NOT_SUPPORTED), out


def test_nvlink_remote_queries_on_a_device_without_nvlink(nvml):
    # "NVML_ERROR_NOT_SUPPORTED if NVLink is not supported", whatever the link index.
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    for query in (nvml.nvmlDeviceGetNvLinkRemoteDeviceType, nvml.nvmlDeviceGetNvLinkRemotePciInfo):
        for link in (0, 17, pynvml.NVML_NVLINK_MAX_LINKS - 1):
            with pytest.raises(pynvml.NVMLError) as e:
                query(h, link)
            assert e.value.value == pynvml.NVML_ERROR_NOT_SUPPORTED, (query.__name__, link)
    out = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetNvLinkRemoteDeviceType")
    assert out(h, 0, None) == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_p2p_status_matches_cuda_peer_access(nvml, cuda):
    a, b = (nvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    can = check(cuda.cuDeviceCanAccessPeer(check(cuda.cuDeviceGet(0)), check(cuda.cuDeviceGet(1))))
    assert can == 0
    for index in range(pynvml.NVML_P2P_CAPS_INDEX_UNKNOWN):
        assert nvml.nvmlDeviceGetP2PStatus(a, b, index) == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
    with pytest.raises(pynvml.NVMLError) as e:
        nvml.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_UNKNOWN)
    assert e.value.value == pynvml.NVML_ERROR_INVALID_ARGUMENT
