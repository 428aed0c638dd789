"""Stream capture and CUDA graphs on the simulator, as frameworks use them (PyTorch's
CUDA graphs are stream capture): capture once, instantiate, replay with new inputs."""

import numpy as np
import pytest
from conftest import check
from kernels import alloc, ceil_div, from_device, load, ptr, i32, to_device

AXPB = r"""
extern "C" __global__ void axpb(const float* x, float* y, float a, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}
"""


@pytest.fixture
def gctx(cuda):
    dev = check(cuda.cuDeviceGet(0))
    c = check(cuda.cuCtxCreate(0, dev))
    yield c
    check(cuda.cuCtxDestroy(c))


def _args(*vals):
    import ctypes

    return list(vals), (ctypes.c_void_p * len(vals))(*[ctypes.addressof(v) for v in vals])


def test_captured_graph_replays_kernel_copy_and_memset(cuda, gctx):
    import ctypes

    n = 5000
    fn = load(AXPB).function("axpb")
    x_host = np.arange(n, dtype=np.float32)
    dx, dy, dz = alloc(4 * n), alloc(4 * n), alloc(4 * n)
    stream = check(cuda.cuStreamCreate(0))
    keep, params = _args(ptr(dx), ptr(dy), ctypes.c_float(2.0), ctypes.c_float(1.0), i32(n))

    check(cuda.cuStreamBeginCapture(stream, cuda.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
    assert check(cuda.cuStreamIsCapturing(stream)) == cuda.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE
    # Captured work does not run: the host buffer is read each time the graph runs.
    check(cuda.cuMemcpyHtoDAsync(dx, x_host.ctypes.data, 4 * n, stream))
    check(cuda.cuLaunchKernel(fn, ceil_div(n, 256), 1, 1, 256, 1, 1, 0, stream, ctypes.addressof(params), 0))
    check(cuda.cuMemcpyDtoDAsync(dz, dy, 4 * n, stream))
    check(cuda.cuMemsetD32Async(dy, 0, n, stream))
    graph = check(cuda.cuStreamEndCapture(stream))
    assert check(cuda.cuStreamIsCapturing(stream)) == cuda.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
    check(cuda.cuStreamSynchronize(stream))
    assert not from_device(dz, n, np.float32).any(), "capture must not execute the work"

    exe = check(cuda.cuGraphInstantiate(graph, 0))
    for round_ in range(3):
        x_host[:] = np.arange(n, dtype=np.float32) * (round_ + 1)
        check(cuda.cuGraphLaunch(exe, stream))
        check(cuda.cuStreamSynchronize(stream))
        np.testing.assert_array_equal(from_device(dz, n, np.float32), 2.0 * x_host + 1.0)
        assert not from_device(dy, n, np.float32).any(), "the captured memset ran last"
    check(cuda.cuGraphExecDestroy(exe))
    check(cuda.cuGraphDestroy(graph))
    check(cuda.cuStreamDestroy(stream))
    del keep


def test_synchronous_calls_invalidate_a_capture(cuda, gctx):
    stream = check(cuda.cuStreamCreate(0))
    dx = alloc(64)
    host = np.zeros(16, dtype=np.float32)
    check(cuda.cuStreamBeginCapture(stream, cuda.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
    (err,) = cuda.cuStreamSynchronize(stream)
    assert err == cuda.CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    assert check(cuda.cuStreamIsCapturing(stream)) == cuda.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_INVALIDATED
    err, graph = cuda.cuStreamEndCapture(stream)
    assert err == cuda.CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and graph is None
    # The stream works normally afterwards.
    check(cuda.cuMemcpyDtoHAsync(host.ctypes.data, dx, 64, stream))
    check(cuda.cuStreamSynchronize(stream))
    check(cuda.cuStreamDestroy(stream))


def test_capture_refusals(cuda, gctx):
    stream = check(cuda.cuStreamCreate(0))
    mode = cuda.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL
    (err,) = cuda.cuStreamBeginCapture(cuda.CUstream(1), mode)  # CU_STREAM_LEGACY
    assert err == cuda.CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    err, _ = cuda.cuStreamEndCapture(stream)
    assert err == cuda.CUresult.CUDA_ERROR_ILLEGAL_STATE
    check(cuda.cuStreamBeginCapture(stream, mode))
    (err,) = cuda.cuStreamBeginCapture(stream, mode)
    assert err == cuda.CUresult.CUDA_ERROR_ILLEGAL_STATE
    graph = check(cuda.cuStreamEndCapture(stream))
    exe = check(cuda.cuGraphInstantiate(graph, 0))
    check(cuda.cuGraphLaunch(exe, stream))  # an empty graph is fine
    check(cuda.cuStreamSynchronize(stream))
    (err,) = cuda.cuGraphLaunch(cuda.CUgraphExec(0x1234), stream)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_HANDLE
    check(cuda.cuGraphExecDestroy(exe))
    check(cuda.cuGraphDestroy(graph))
    check(cuda.cuStreamDestroy(stream))
