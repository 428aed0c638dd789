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


def test_captured_kernel_node_parameters_read_back_and_changed(cuda, gctx):
    """cuGraphKernelNodeGetParams of a captured launch answers its function, configuration and a
    kernelParams array the program can read; cuGraphKernelNodeSetParams changes the graph's node:
    a new instantiation runs the new launch, one made before keeps the captured one."""
    import ctypes

    n = 700
    fn = load(AXPB).function("axpb")
    x_host = np.arange(n, dtype=np.float32)
    dx, dy = to_device(x_host), alloc(4 * n)
    stream = check(cuda.cuStreamCreate(0))
    keep, params = _args(ptr(dx), ptr(dy), ctypes.c_float(2.0), ctypes.c_float(1.0), i32(n))
    check(cuda.cuStreamBeginCapture(stream, cuda.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
    check(cuda.cuMemsetD32Async(dy, 0, n, stream))
    check(cuda.cuLaunchKernel(fn, ceil_div(n, 128), 1, 1, 128, 1, 1, 16, stream, ctypes.addressof(params), 0))
    graph = check(cuda.cuStreamEndCapture(stream))
    nodes, count = check(cuda.cuGraphGetNodes(graph, 2))
    types = [check(cuda.cuGraphNodeGetType(x)) for x in nodes[:count]]
    assert types == [cuda.CUgraphNodeType.CU_GRAPH_NODE_TYPE_MEMSET, cuda.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL]
    node = nodes[1]
    (err, _) = cuda.cuGraphKernelNodeGetParams(nodes[0])
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE
    p = check(cuda.cuGraphKernelNodeGetParams(node))
    assert int(p.func) == int(fn)
    assert (p.gridDimX, p.gridDimY, p.blockDimX, p.blockDimZ, p.sharedMemBytes) == (ceil_div(n, 128), 1, 128, 1, 16)
    assert p.kernelParams and not p.extra
    got = (ctypes.c_void_p * 5).from_address(p.kernelParams)
    assert ctypes.c_uint64.from_address(got[1]).value == int(dy)
    assert ctypes.c_float.from_address(got[2]).value == 2.0
    assert ctypes.c_int32.from_address(got[4]).value == n
    old = check(cuda.cuGraphInstantiate(graph, 0))

    keep2, params2 = _args(ptr(dx), ptr(dy), ctypes.c_float(5.0), ctypes.c_float(1.0), i32(n))
    p.kernelParams = ctypes.addressof(params2)
    check(cuda.cuGraphKernelNodeSetParams(node, p))
    back = check(cuda.cuGraphKernelNodeGetParams(node))
    got = (ctypes.c_void_p * 5).from_address(back.kernelParams)
    assert ctypes.c_float.from_address(got[2]).value == 5.0
    new = check(cuda.cuGraphInstantiate(graph, 1))  # CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
    assert int(check(cuda.cuGraphExecGetFlags(new))) == 1 and int(check(cuda.cuGraphExecGetFlags(old))) == 0
    for exe, a in [(new, 5.0), (old, 2.0)]:
        check(cuda.cuGraphLaunch(exe, stream))
        check(cuda.cuStreamSynchronize(stream))
        np.testing.assert_array_equal(from_device(dy, n, np.float32), a * x_host + 1.0)
    for exe in (new, old):
        check(cuda.cuGraphExecDestroy(exe))
    check(cuda.cuGraphDestroy(graph))
    check(cuda.cuStreamDestroy(stream))
    del keep, keep2


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


# ---- graphs built node by node ----

FILL = r"""
extern "C" __global__ void fill(int* y, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = v;
}
extern "C" __global__ void muladd(int* y, int m, int a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] * m + a;
}
"""


def _kernel_node(cuda, graph, deps, fn, grid, block, params):
    p = cuda.CUDA_KERNEL_NODE_PARAMS()
    p.func = fn
    p.gridDimX, p.gridDimY, p.gridDimZ = grid, 1, 1
    p.blockDimX, p.blockDimY, p.blockDimZ = block, 1, 1
    p.sharedMemBytes = 0
    p.kernelParams = params
    return check(cuda.cuGraphAddKernelNode(graph, deps, len(deps), p))


def test_node_graph_honours_dependencies_and_updates_kernel_parameters(cuda, gctx, tmp_path):
    import ctypes

    n = 300
    mod = load(FILL)
    fill, muladd = mod.function("fill"), mod.function("muladd")
    y = alloc(4 * n)
    graph = check(cuda.cuGraphCreate(0))
    keep1, a1 = _args(ptr(y), i32(7), i32(n))
    keep2, a2 = _args(ptr(y), i32(3), i32(1), i32(n))
    keep3, a3 = _args(ptr(y), i32(10), i32(0), i32(n))
    # Added out of order: the memset first, then muladd(*3+1), then fill(7) and muladd(*10);
    # dependencies make it memset -> fill -> muladd(*3+1) -> muladd(*10).
    ms = cuda.CUDA_MEMSET_NODE_PARAMS()
    ms.dst, ms.pitch, ms.value, ms.elementSize, ms.width, ms.height = int(y), 0, 0x55, 4, n, 1
    n_memset = check(cuda.cuGraphAddMemsetNode(graph, None, 0, ms, gctx))
    n_mul3 = _kernel_node(cuda, graph, [], muladd, ceil_div(n, 128), 128, ctypes.addressof(a2))
    n_fill = _kernel_node(cuda, graph, [n_memset], fill, ceil_div(n, 128), 128, ctypes.addressof(a1))
    n_mul10 = _kernel_node(cuda, graph, [n_mul3], muladd, ceil_div(n, 128), 128, ctypes.addressof(a3))
    check(cuda.cuGraphAddDependencies(graph, [n_fill], [n_mul3], 1))
    (err,) = cuda.cuGraphAddDependencies(graph, [n_fill], [n_mul3], 1)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE, "a dependency added twice"
    empty = check(cuda.cuGraphAddEmptyNode(graph, [n_mul10, n_fill], 2))

    # A child graph (copied when added): +5 after everything above.
    child = check(cuda.cuGraphCreate(0))
    keep4, a4 = _args(ptr(y), i32(1), i32(5), i32(n))
    _kernel_node(cuda, child, [], muladd, ceil_div(n, 128), 128, ctypes.addressof(a4))
    check(cuda.cuGraphAddChildGraphNode(graph, [empty], 1, child))
    check(cuda.cuGraphDestroy(child))

    # Host node and event record/wait: the host function runs after the child graph.
    calls = []
    cb_type = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

    def host(_):
        calls.append(1)  # a host node must not call CUDA

    cb = cb_type(host)
    hp = cuda.CUDA_HOST_NODE_PARAMS()
    hp.fn = cuda.CUhostFn(ctypes.cast(cb, ctypes.c_void_p).value)
    hp.userData = 0
    ev = check(cuda.cuEventCreate(0))
    h = check(cuda.cuGraphAddHostNode(graph, [empty], 1, hp))
    check(cuda.cuGraphAddEventRecordNode(graph, [h], 1, ev))

    dot = tmp_path / "g.dot"
    check(cuda.cuGraphDebugDotPrint(graph, str(dot).encode(), 0))
    text = dot.read_text()
    assert text.startswith("digraph") and "MEMSET" in text and "muladd" in text and "CHILD_GRAPH" in text
    assert "HOST" in text and "EVENT_RECORD" in text and "->" in text

    clone = check(cuda.cuGraphClone(graph))
    stream = check(cuda.cuStreamCreate(0))
    exe = check(cuda.cuGraphInstantiate(graph, 0))
    check(cuda.cuGraphLaunch(exe, stream))
    check(cuda.cuEventSynchronize(ev))
    want = ((7 * 3 + 1) * 10) + 5
    np.testing.assert_array_equal(from_device(y, n, np.int32), np.full(n, want, np.int32))
    assert len(calls) == 1

    # New parameters for the last muladd in the instantiated graph only; the graph is unchanged.
    keep5, a5 = _args(ptr(y), i32(100), i32(0), i32(n))
    p = cuda.CUDA_KERNEL_NODE_PARAMS()
    p.func = muladd
    p.gridDimX, p.gridDimY, p.gridDimZ = ceil_div(n, 128), 1, 1
    p.blockDimX, p.blockDimY, p.blockDimZ = 128, 1, 1
    p.kernelParams = ctypes.addressof(a5)
    check(cuda.cuGraphExecKernelNodeSetParams(exe, n_mul10, p))
    (err,) = cuda.cuGraphExecKernelNodeSetParams(exe, empty, p)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE, "an empty node is not a kernel node"
    check(cuda.cuGraphLaunch(exe, stream))
    check(cuda.cuStreamSynchronize(stream))
    np.testing.assert_array_equal(from_device(y, n, np.int32), np.full(n, (7 * 3 + 1) * 100 + 5, np.int32))

    # The clone, made before the update, still multiplies by 10.
    exe2 = check(cuda.cuGraphInstantiate(clone, 0))
    check(cuda.cuGraphLaunch(exe2, stream))
    check(cuda.cuStreamSynchronize(stream))
    np.testing.assert_array_equal(from_device(y, n, np.int32), np.full(n, want, np.int32))
    assert len(calls) == 3

    # A cycle cannot be instantiated.
    check(cuda.cuGraphAddDependencies(graph, [n_mul10], [n_fill], 1))
    err, _ = cuda.cuGraphInstantiate(graph, 0)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE
    (err,) = cuda.cuGraphAddEmptyNode(graph, [cuda.CUgraphNode(0x1234)], 1)[:1]
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE, "a dependency from nowhere"

    for e in (exe, exe2):
        check(cuda.cuGraphExecDestroy(e))
    for g in (graph, clone):
        check(cuda.cuGraphDestroy(g))
    check(cuda.cuEventDestroy(ev))
    check(cuda.cuStreamDestroy(stream))
    del keep1, keep2, keep3, keep4, keep5, cb


def test_memcpy_nodes_and_exec_update(cuda, gctx):
    import ctypes

    n = 256
    mod = load(FILL)
    fill, muladd = mod.function("fill"), mod.function("muladd")
    src_host = np.arange(n, dtype=np.int32)
    out_host = np.zeros(n, dtype=np.int32)
    x, y = alloc(4 * n), alloc(4 * n)

    def copy(dst_dev=None, dst_host=None, src_dev=None, src_host_ptr=None):
        p = cuda.CUDA_MEMCPY3D()
        M = cuda.CUmemorytype
        if src_dev is not None:
            p.srcMemoryType, p.srcDevice = M.CU_MEMORYTYPE_DEVICE, src_dev
        else:
            p.srcMemoryType, p.srcHost = M.CU_MEMORYTYPE_HOST, src_host_ptr
        if dst_dev is not None:
            p.dstMemoryType, p.dstDevice = M.CU_MEMORYTYPE_DEVICE, dst_dev
        else:
            p.dstMemoryType, p.dstHost = M.CU_MEMORYTYPE_HOST, dst_host
        p.WidthInBytes, p.Height, p.Depth = 4 * n, 1, 1
        return p

    def build(m):
        """host -> x; y = 0; x -> y; y = y * m + 1; y -> host."""
        g = check(cuda.cuGraphCreate(0))
        h2d = check(cuda.cuGraphAddMemcpyNode(g, None, 0, copy(dst_dev=x, src_host_ptr=src_host.ctypes.data), gctx))
        keep, a = _args(ptr(y), i32(0), i32(n))
        z = _kernel_node(cuda, g, [], fill, ceil_div(n, 128), 128, ctypes.addressof(a))
        keep2, a2 = _args(ptr(y), i32(m), i32(1), i32(n))
        d2d = check(cuda.cuGraphAddMemcpyNode(g, [h2d, z], 2, copy(dst_dev=y, src_dev=x), gctx))
        k = _kernel_node(cuda, g, [d2d], muladd, ceil_div(n, 128), 128, ctypes.addressof(a2))
        check(cuda.cuGraphAddMemcpyNode(g, [k], 1, copy(dst_host=out_host.ctypes.data, src_dev=y), gctx))
        return g, (keep, keep2)

    g3, keep3 = build(3)
    stream = check(cuda.cuStreamCreate(0))
    exe = check(cuda.cuGraphInstantiate(g3, 0))
    check(cuda.cuGraphLaunch(exe, stream))
    check(cuda.cuStreamSynchronize(stream))
    np.testing.assert_array_equal(out_host, src_host * 3 + 1)

    # The host source is read when the graph runs.
    src_host[:] = np.arange(n, dtype=np.int32) * 2
    g5, keep5 = build(5)
    err, info = cuda.cuGraphExecUpdate(exe, g5)
    assert err == cuda.CUresult.CUDA_SUCCESS, info
    assert info.result == cuda.CUgraphExecUpdateResult.CU_GRAPH_EXEC_UPDATE_SUCCESS
    check(cuda.cuGraphLaunch(exe, stream))
    check(cuda.cuStreamSynchronize(stream))
    np.testing.assert_array_equal(out_host, src_host * 5 + 1)

    # Another topology cannot update it, and the instantiated graph is unchanged.
    other = check(cuda.cuGraphCreate(0))
    check(cuda.cuGraphAddEmptyNode(other, None, 0))
    err, _ = cuda.cuGraphExecUpdate(exe, other)  # cuda-bindings returns no info on failure
    assert err == cuda.CUresult.CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE
    check(cuda.cuGraphLaunch(exe, stream))
    check(cuda.cuStreamSynchronize(stream))
    np.testing.assert_array_equal(out_host, src_host * 5 + 1)

    # A copy outside its allocation is refused when the node is added.
    bad = copy(dst_dev=int(x) + 8, src_dev=y)
    err, _ = cuda.cuGraphAddMemcpyNode(other, None, 0, bad, gctx)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE

    check(cuda.cuGraphExecDestroy(exe))
    for g in (g3, g5, other):
        check(cuda.cuGraphDestroy(g))
    check(cuda.cuStreamDestroy(stream))
    del keep3, keep5


def test_host_node_parameters_and_no_callbacks_in_a_capture(cuda, gctx):
    """cuGraphHostNodeGetParams/SetParams change the graph's node only (graphs instantiated before
    keep theirs), cuGraphExecHostNodeSetParams one instantiated graph; host functions run on a
    thread other than the caller's; cuStreamAddCallback cannot be captured (NVIDIA: "not supported
    with cuStreamBeginCapture and cuStreamEndCapture, unlike cuLaunchHostFunc") and invalidates
    the capture, while cuLaunchHostFunc becomes a host node."""
    import ctypes
    import threading

    hits, threads = {}, set()

    def host(user):
        hits[user] = hits.get(user, 0) + 1
        threads.add(threading.get_ident())

    cb = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(host)
    fn = ctypes.cast(cb, ctypes.c_void_p).value

    def params(user):
        hp = cuda.CUDA_HOST_NODE_PARAMS()
        hp.fn = cuda.CUhostFn(fn)
        hp.userData = user
        return hp

    graph = check(cuda.cuGraphCreate(0))
    node = check(cuda.cuGraphAddHostNode(graph, None, 0, params(1)))
    assert int(check(cuda.cuGraphHostNodeGetParams(node)).userData) == 1
    stream = check(cuda.cuStreamCreate(0))
    e1 = check(cuda.cuGraphInstantiate(graph, 0))
    check(cuda.cuGraphHostNodeSetParams(node, params(2)))
    e2 = check(cuda.cuGraphInstantiate(graph, 0))
    check(cuda.cuGraphLaunch(e1, stream))
    check(cuda.cuStreamSynchronize(stream))
    assert hits == {1: 1}
    check(cuda.cuGraphExecHostNodeSetParams(e1, node, params(3)))
    check(cuda.cuGraphLaunch(e1, stream))
    check(cuda.cuGraphLaunch(e2, stream))
    check(cuda.cuStreamSynchronize(stream))
    assert hits == {1: 1, 3: 1, 2: 1}
    assert int(check(cuda.cuGraphHostNodeGetParams(node)).userData) == 2
    assert threading.get_ident() not in threads

    empty = check(cuda.cuGraphAddEmptyNode(graph, None, 0))
    (err, _) = cuda.cuGraphHostNodeGetParams(empty)
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE, "an empty node is not a host node"
    (err,) = cuda.cuGraphExecHostNodeSetParams(e1, empty, params(4))
    assert err == cuda.CUresult.CUDA_ERROR_INVALID_VALUE

    check(cuda.cuStreamBeginCapture(stream, cuda.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
    check(cuda.cuLaunchHostFunc(stream, cuda.CUhostFn(fn), 5))
    captured = check(cuda.cuStreamEndCapture(stream))
    assert 5 not in hits
    e3 = check(cuda.cuGraphInstantiate(captured, 0))
    # Once: cuda-bindings wraps the function in a record of its own that it frees after one call.
    check(cuda.cuGraphLaunch(e3, stream))
    check(cuda.cuStreamSynchronize(stream))
    assert hits[5] == 1

    scb = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)(lambda s, st, u: host(6))
    check(cuda.cuStreamBeginCapture(stream, cuda.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
    (err,) = cuda.cuStreamAddCallback(stream, cuda.CUstreamCallback(ctypes.cast(scb, ctypes.c_void_p).value), 0, 0)
    assert err == cuda.CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    (err, g) = cuda.cuStreamEndCapture(stream)
    assert err == cuda.CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    check(cuda.cuStreamSynchronize(stream))
    assert 6 not in hits
    for e in (e1, e2, e3):
        check(cuda.cuGraphExecDestroy(e))
    check(cuda.cuGraphDestroy(graph))
    check(cuda.cuGraphDestroy(captured))
    check(cuda.cuStreamDestroy(stream))


def test_cross_stream_capture_forks_and_joins():
    """Fork/join capture across streams (capture_fork_checks.py lists what it checks) on the
    simulator in a process of its own; pool-daemon/tests/graphs.rs runs the same script under
    `gpupool run`."""
    import os
    import subprocess
    import sys

    from conftest import subprocess_env

    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "capture_fork_checks.py")
    out = subprocess.run([sys.executable, script], env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "SUMMARY 12/12" in out.stdout, out.stdout + out.stderr
