"""Cross-stream stream capture (fork/join graphs, as multi-stream programs capture them) with the
CUDA driver API through cuda-bindings. Run on the simulator directly by tests/python/test_graphs.py
and under `gpupool run` by pool-daemon/tests/graphs.rs: the same answers both ways.

- Fork and join: an event recorded on the capturing stream and waited for by another stream
  makes that stream join the capture (cuStreamIsCapturing ACTIVE, cuStreamGetCaptureInfo the same
  capture id and graph); work on both streams, joined back with an event the other way, is one
  graph of five nodes and five edges (A -> host function -> B on the forked stream, A -> C, both
  -> D), with no node for the records; cuStreamEndCapture takes the forked stream out of capture; the graph,
  replayed with new host data from page-locked memory, carries the data through the fork
  (A's copy read by B) and the join (B's result read by D), and runs the forked stream's host
  function once per launch (not during the capture).
- A stream-ordered allocation on the forked stream is an allocation node of the capture's graph
  (freed by a free node on the origin after the join); the graph replays.
- A fork whose stream did nothing needs no join; a fork whose work is not joined back ends with
  CUDA_ERROR_STREAM_CAPTURE_UNJOINED, no graph, and the forked stream out of capture and usable.
- cuStreamEndCapture on the forked stream is CUDA_ERROR_STREAM_CAPTURE_UNMATCHED and invalidates
  the capture (the origin's end is then CUDA_ERROR_STREAM_CAPTURE_INVALIDATED).
- A capturing stream waiting for an event recorded outside the capture is
  CUDA_ERROR_STREAM_CAPTURE_ISOLATION (invalidated); with CU_EVENT_WAIT_EXTERNAL it is a WAIT_EVENT
  node. cuEventRecordWithFlags(CU_EVENT_RECORD_EXTERNAL) in a capture is an EVENT_RECORD node (the
  event completes with each launch), and INVALID_VALUE outside capture.
- The legacy stream used while a blocking stream captures (an asynchronous memset on it, or a
  synchronous copy, which uses it) is CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and invalidates the
  capture; a non-blocking stream's capture leaves the legacy stream free.
- cuStreamEndCapture of a global-mode capture on another thread than the one that began it is
  CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD and the capture goes on; a relaxed one ends anywhere.
- A stream of one capture waiting for an event of another is CUDA_ERROR_STREAM_CAPTURE_MERGE.
- cuEventQuery of a captured event is CUDA_ERROR_CAPTURED_EVENT and invalidates the capture.

Prints PASS/FAIL lines and SUMMARY passed/total; exits 1 on any failure.
"""

import ctypes
import sys

import numpy as np
from cuda.bindings import driver as cuda

R = cuda.CUresult
S = cuda.CUstreamCaptureStatus
T = cuda.CUgraphNodeType
GLOBAL = cuda.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL
N = 1 << 16

results = []


def report(name, ok, why=""):
    results.append(bool(ok))
    print(f"PASS {name}" if ok else f"FAIL {name}: {why}", flush=True)


def check(r):
    err, *rest = r
    if err != R.CUDA_SUCCESS:
        raise RuntimeError(f"{err}")
    return rest[0] if len(rest) == 1 else (tuple(rest) or None)


def status(s):
    return check(cuda.cuStreamIsCapturing(s))


def nodes_and_edges(graph):
    _, count = check(cuda.cuGraphGetNodes(graph, 0))
    nodes, _ = check(cuda.cuGraphGetNodes(graph, count))
    _, _, n = check(cuda.cuGraphGetEdges(graph, 0))
    src, dst, _ = check(cuda.cuGraphGetEdges(graph, n)) if n else ([], [], 0)
    kind = {int(x): check(cuda.cuGraphNodeGetType(x)) for x in nodes}
    return kind, [(int(a), int(b)) for a, b in zip(src, dst)]


def replay_memset_and(graph, kind, done):
    """`graph` is a memset and one node of type `kind`, one edge between them: launched once on
    s0, `done()` waits for it; the graph and its instantiation are destroyed."""
    nodes, edges = nodes_and_edges(graph)
    types = sorted(int(t) for t in nodes.values())
    assert types == sorted([int(kind), int(T.CU_GRAPH_NODE_TYPE_MEMSET)]), types
    assert len(edges) == 1, edges
    exe = check(cuda.cuGraphInstantiate(graph, 0))
    check(cuda.cuGraphLaunch(exe, s0))
    done()
    check(cuda.cuGraphExecDestroy(exe))
    check(cuda.cuGraphDestroy(graph))


def run(name, f):
    try:
        f()
    except Exception as e:  # a failed check names what it saw, and where
        line = e.__traceback__.tb_next.tb_lineno if e.__traceback__.tb_next else 0
        report(name, False, f"{type(e).__name__} (line {line}): {e}")


check(cuda.cuInit(0))
dev = check(cuda.cuDeviceGet(0))
ctx = check(cuda.cuDevicePrimaryCtxRetain(dev))
check(cuda.cuCtxSetCurrent(ctx))
s0 = check(cuda.cuStreamCreate(0))
s1 = check(cuda.cuStreamCreate(0))
s2 = check(cuda.cuStreamCreate(0))
fork, join = check(cuda.cuEventCreate(0)), check(cuda.cuEventCreate(0))
ya, yb, yc = check(cuda.cuMemAlloc(N)), check(cuda.cuMemAlloc(N)), check(cuda.cuMemAlloc(N))
hin, hout = check(cuda.cuMemAllocHost(N)), check(cuda.cuMemAllocHost(N))
host_in = np.frombuffer((ctypes.c_uint8 * N).from_address(hin), dtype=np.uint8)
host_out = np.frombuffer((ctypes.c_uint8 * N).from_address(hout), dtype=np.uint8)


def fork_to(stream, origin=None):
    check(cuda.cuEventRecord(fork, origin or s0))
    check(cuda.cuStreamWaitEvent(stream, fork, 0))


def join_back(stream, origin=None):
    check(cuda.cuEventRecord(join, stream))
    check(cuda.cuStreamWaitEvent(origin or s0, join, 0))


host_calls = []
HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda user: host_calls.append(user))


def launch_host_func(stream, user):
    """cuLaunchHostFunc through ctypes: cuda-bindings' own wrapper frees its callback data after
    the first call, so a captured host function replayed twice would call freed memory."""
    r = ctypes.CDLL("libcuda.so.1").cuLaunchHostFunc(ctypes.c_void_p(int(stream)), HOST_FN, ctypes.c_void_p(user))
    assert r == 0, f"cuLaunchHostFunc: {r}"


def fork_join_graph():
    check(cuda.cuStreamBeginCapture(s0, GLOBAL))
    check(cuda.cuMemcpyHtoDAsync(ya, hin, N, s0))  # A
    fork_to(s1)
    # A host node on the forked stream: not run now, run by each launch (through the pool, in
    # this process).
    launch_host_func(s1, 7)
    st1, id1, g1, _, _ = check(cuda.cuStreamGetCaptureInfo(s1))
    st0, id0, g0, _, _ = check(cuda.cuStreamGetCaptureInfo(s0))
    assert st1 == S.CU_STREAM_CAPTURE_STATUS_ACTIVE, f"the forked stream's status {st1}"
    assert (int(id1), int(g1)) == (int(id0), int(g0)), f"the forked stream's capture {id1}/{g1} is not the origin's {id0}/{g0}"
    check(cuda.cuMemcpyDtoDAsync(yb, ya, N, s1))  # B, after A
    check(cuda.cuMemsetD8Async(yc, 7, N, s0))  # C, after A
    join_back(s1)
    check(cuda.cuMemcpyDtoHAsync(hout, yb, N, s0))  # D, after B and C
    graph = check(cuda.cuStreamEndCapture(s0))
    assert status(s1) == S.CU_STREAM_CAPTURE_STATUS_NONE, "the forked stream is still capturing after the end"
    assert status(s0) == S.CU_STREAM_CAPTURE_STATUS_NONE
    assert host_calls == [], "the captured host function ran at capture"
    kind, edges = nodes_and_edges(graph)
    types = sorted(int(t) for t in kind.values())
    want = sorted([int(T.CU_GRAPH_NODE_TYPE_MEMCPY)] * 3 + [int(T.CU_GRAPH_NODE_TYPE_MEMSET), int(T.CU_GRAPH_NODE_TYPE_HOST)])
    assert types == want, f"node types {types}, want {want} (no node for the event records)"
    assert len(edges) == 5, f"edges {edges}"
    into = {}
    for a, b in edges:
        into.setdefault(b, []).append(a)
    roots = [n for n in kind if n not in into]
    assert len(roots) == 1 and kind[roots[0]] == T.CU_GRAPH_NODE_TYPE_MEMCPY, f"roots {roots}"
    host = [n for n in kind if kind[n] == T.CU_GRAPH_NODE_TYPE_HOST]
    assert into.get(host[0]) == roots, "the host node does not follow the fork"
    sinks = [n for n, deps in into.items() if len(deps) == 2]
    assert len(sinks) == 1, f"no node depends on both streams' work: {edges}"
    assert sorted(int(kind[x]) for x in into[sinks[0]]) == sorted(
        [int(T.CU_GRAPH_NODE_TYPE_MEMCPY), int(T.CU_GRAPH_NODE_TYPE_MEMSET)]
    ), "the join's node does not depend on the forked copy and the origin's memset"
    exe = check(cuda.cuGraphInstantiate(graph, 0))
    for k in range(3):
        host_in[:] = (np.arange(N) * (k + 3) + k) % 251
        host_out[:] = 0
        check(cuda.cuGraphLaunch(exe, s0))
        check(cuda.cuStreamSynchronize(s0))
        assert np.array_equal(host_out, host_in), f"replay {k}: the data did not go through the fork and the join"
        assert host_calls == [7] * (k + 1), f"replay {k}: the forked stream's host node ran {host_calls}"
    got = np.zeros(16, dtype=np.uint8)
    check(cuda.cuMemcpyDtoH(got.ctypes.data, yc, 16))
    assert (got == 7).all(), "the origin's memset did not run"
    check(cuda.cuGraphExecDestroy(exe))
    check(cuda.cuGraphDestroy(graph))
    report("fork and join: one graph of five nodes, replayed through both streams", True)


def forked_allocation():
    check(cuda.cuStreamBeginCapture(s0, GLOBAL))
    check(cuda.cuMemcpyHtoDAsync(ya, hin, N, s0))
    fork_to(s1)
    tmp = check(cuda.cuMemAllocAsync(N, s1))
    check(cuda.cuMemcpyDtoDAsync(tmp, ya, N, s1))
    check(cuda.cuMemcpyDtoDAsync(yb, tmp, N, s1))
    join_back(s1)
    check(cuda.cuMemFreeAsync(tmp, s0))
    check(cuda.cuMemcpyDtoHAsync(hout, yb, N, s0))
    graph = check(cuda.cuStreamEndCapture(s0))
    kind, _ = nodes_and_edges(graph)
    types = [int(t) for t in kind.values()]
    assert types.count(int(T.CU_GRAPH_NODE_TYPE_MEM_ALLOC)) == 1, f"node types {types}"
    assert types.count(int(T.CU_GRAPH_NODE_TYPE_MEM_FREE)) == 1, f"node types {types}"
    exe = check(cuda.cuGraphInstantiate(graph, 0))
    host_in[:] = np.arange(N) % 239
    host_out[:] = 0
    check(cuda.cuGraphLaunch(exe, s0))
    check(cuda.cuStreamSynchronize(s0))
    assert np.array_equal(host_out, host_in), "the forked stream's allocation did not carry the data"
    check(cuda.cuGraphExecDestroy(exe))
    check(cuda.cuGraphDestroy(graph))
    check(cuda.cuDeviceGraphMemTrim(dev))
    report("a stream-ordered allocation on a forked stream is an allocation node", True)


def idle_fork_and_unjoined():
    check(cuda.cuStreamBeginCapture(s0, GLOBAL))
    check(cuda.cuMemsetD8Async(ya, 1, N, s0))
    fork_to(s1)
    check(cuda.cuMemsetD8Async(yb, 2, N, s0))
    graph = check(cuda.cuStreamEndCapture(s0))
    assert status(s1) == S.CU_STREAM_CAPTURE_STATUS_NONE
    check(cuda.cuGraphDestroy(graph))
    report("a forked stream that did nothing needs no join", True)
    check(cuda.cuStreamBeginCapture(s0, GLOBAL))
    fork_to(s1)
    check(cuda.cuMemsetD8Async(yb, 3, N, s1))
    err, graph = cuda.cuStreamEndCapture(s0)
    assert err == R.CUDA_ERROR_STREAM_CAPTURE_UNJOINED and graph is None, (err, graph)
    assert status(s1) == S.CU_STREAM_CAPTURE_STATUS_NONE, "an unjoined fork stays capturing"
    assert status(s0) == S.CU_STREAM_CAPTURE_STATUS_NONE
    check(cuda.cuMemsetD8Async(yb, 4, N, s1))
    check(cuda.cuStreamSynchronize(s1))
    got = np.zeros(16, dtype=np.uint8)
    check(cuda.cuMemcpyDtoH(got.ctypes.data, yb, 16))
    assert (got == 4).all(), f"the forked stream after the failed capture: {got}"
    report("an unjoined fork: CUDA_ERROR_STREAM_CAPTURE_UNJOINED, both streams out of capture", True)


def unmatched_end():
    check(cuda.cuStreamBeginCapture(s0, GLOBAL))
    fork_to(s1)
    err, graph = cuda.cuStreamEndCapture(s1)
    assert err == R.CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, err
    assert status(s0) == S.CU_STREAM_CAPTURE_STATUS_INVALIDATED, status(s0)
    err, graph = cuda.cuStreamEndCapture(s0)
    assert err == R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and graph is None, err
    assert status(s1) == S.CU_STREAM_CAPTURE_STATUS_NONE and status(s0) == S.CU_STREAM_CAPTURE_STATUS_NONE
    report("the end on a forked stream: CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, the capture invalidated", True)


def isolation_and_external_wait():
    outside = check(cuda.cuEventCreate(0))
    check(cuda.cuEventRecord(outside, s2))
    check(cuda.cuStreamBeginCapture(s0, GLOBAL))
    (err,) = cuda.cuStreamWaitEvent(s0, outside, 0)
    assert err == R.CUDA_ERROR_STREAM_CAPTURE_ISOLATION, err
    assert status(s0) == S.CU_STREAM_CAPTURE_STATUS_INVALIDATED
    err, _ = cuda.cuStreamEndCapture(s0)
    assert err == R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, err
    report("waiting for an event recorded outside the capture: CUDA_ERROR_STREAM_CAPTURE_ISOLATION", True)
    check(cuda.cuStreamBeginCapture(s0, GLOBAL))
    check(cuda.cuStreamWaitEvent(s0, outside, cuda.CUevent_wait_flags.CU_EVENT_WAIT_EXTERNAL))
    check(cuda.cuMemsetD8Async(ya, 5, N, s0))
    graph = check(cuda.cuStreamEndCapture(s0))
    replay_memset_and(graph, T.CU_GRAPH_NODE_TYPE_WAIT_EVENT, lambda: check(cuda.cuStreamSynchronize(s0)))
    check(cuda.cuEventDestroy(outside))
    report("CU_EVENT_WAIT_EXTERNAL in a capture is a WAIT_EVENT node", True)


def external_record():
    ext = check(cuda.cuEventCreate(0))
    (err,) = cuda.cuEventRecordWithFlags(ext, s0, cuda.CUevent_record_flags.CU_EVENT_RECORD_EXTERNAL)
    assert err == R.CUDA_ERROR_INVALID_VALUE, ("CU_EVENT_RECORD_EXTERNAL outside capture", err)
    check(cuda.cuStreamBeginCapture(s0, GLOBAL))
    check(cuda.cuMemsetD8Async(ya, 8, N, s0))
    check(cuda.cuEventRecordWithFlags(ext, s0, cuda.CUevent_record_flags.CU_EVENT_RECORD_EXTERNAL))
    graph = check(cuda.cuStreamEndCapture(s0))
    # The launch records the event: waiting for it waits for the launch.
    replay_memset_and(graph, T.CU_GRAPH_NODE_TYPE_EVENT_RECORD, lambda: (check(cuda.cuEventSynchronize(ext)), check(cuda.cuEventQuery(ext))))
    check(cuda.cuEventDestroy(ext))
    report("CU_EVENT_RECORD_EXTERNAL in a capture is an EVENT_RECORD node, recorded by each launch", True)


def legacy_stream_during_capture():
    legacy = cuda.CUstream(1)  # CU_STREAM_LEGACY
    check(cuda.cuStreamBeginCapture(s0, GLOBAL))
    (err,) = cuda.cuMemsetD8Async(ya, 1, N, legacy)
    assert err == R.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, ("legacy-stream work", err)
    assert status(s0) == S.CU_STREAM_CAPTURE_STATUS_INVALIDATED, status(s0)
    err, _ = cuda.cuStreamEndCapture(s0)
    assert err == R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, err
    check(cuda.cuStreamBeginCapture(s0, GLOBAL))
    host = np.zeros(16, dtype=np.uint8)
    (err,) = cuda.cuMemcpyDtoH(host.ctypes.data, ya, 16)
    assert err == R.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, ("a synchronous copy", err)
    err, _ = cuda.cuStreamEndCapture(s0)
    assert err == R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, err
    # A non-blocking stream's capture does not involve the legacy stream.
    free = check(cuda.cuStreamCreate(cuda.CUstream_flags.CU_STREAM_NON_BLOCKING))
    check(cuda.cuStreamBeginCapture(free, GLOBAL))
    check(cuda.cuMemsetD8Async(yc, 9, N, legacy))
    check(cuda.cuMemsetD8Async(ya, 2, N, free))
    graph = check(cuda.cuStreamEndCapture(free))
    check(cuda.cuStreamSynchronize(legacy))
    check(cuda.cuMemcpyDtoH(host.ctypes.data, yc, 16))
    assert (host == 9).all(), host
    check(cuda.cuGraphDestroy(graph))
    check(cuda.cuStreamDestroy(free))
    report("the legacy stream while a blocking stream captures: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", True)


def end_on_another_thread():
    import threading

    for mode, want in (
        (GLOBAL, R.CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD),
        (cuda.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED, R.CUDA_SUCCESS),
    ):
        check(cuda.cuStreamBeginCapture(s0, mode))
        check(cuda.cuMemsetD8Async(ya, 3, N, s0))
        got = []
        t = threading.Thread(target=lambda: (cuda.cuCtxSetCurrent(ctx), got.append(cuda.cuStreamEndCapture(s0))))
        t.start()
        t.join()
        err, graph = got[0]
        assert err == want, (mode, err)
        if err == R.CUDA_SUCCESS:
            check(cuda.cuGraphDestroy(graph))
        else:
            assert status(s0) == S.CU_STREAM_CAPTURE_STATUS_ACTIVE, "the capture goes on"
            check(cuda.cuGraphDestroy(check(cuda.cuStreamEndCapture(s0))))
    report("a global capture ends on its own thread (CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD), a relaxed one anywhere", True)


def merge():
    check(cuda.cuStreamBeginCapture(s0, GLOBAL))
    check(cuda.cuStreamBeginCapture(s2, GLOBAL))
    check(cuda.cuEventRecord(fork, s0))
    (err,) = cuda.cuStreamWaitEvent(s2, fork, 0)
    assert err == R.CUDA_ERROR_STREAM_CAPTURE_MERGE, err
    for s in (s2, s0):
        err, _ = cuda.cuStreamEndCapture(s)
        assert err == R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, err
    report("waiting for another capture's event: CUDA_ERROR_STREAM_CAPTURE_MERGE", True)


def captured_event_query():
    check(cuda.cuStreamBeginCapture(s0, GLOBAL))
    check(cuda.cuMemsetD8Async(ya, 6, N, s0))
    check(cuda.cuEventRecord(fork, s0))
    (err,) = cuda.cuEventQuery(fork)
    assert err == R.CUDA_ERROR_CAPTURED_EVENT, err
    assert status(s0) == S.CU_STREAM_CAPTURE_STATUS_INVALIDATED
    err, _ = cuda.cuStreamEndCapture(s0)
    assert err == R.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, err
    # Recorded again outside capture, it is an ordinary event.
    check(cuda.cuEventRecord(fork, s0))
    check(cuda.cuEventSynchronize(fork))
    check(cuda.cuEventQuery(fork))
    report("cuEventQuery of a captured event: CUDA_ERROR_CAPTURED_EVENT, the capture invalidated", True)


for name, f in [
    ("fork and join", fork_join_graph),
    ("forked allocation", forked_allocation),
    ("idle fork and unjoined", idle_fork_and_unjoined),
    ("unmatched end", unmatched_end),
    ("isolation and external wait", isolation_and_external_wait),
    ("external record", external_record),
    ("legacy stream during capture", legacy_stream_during_capture),
    ("end on another thread", end_on_another_thread),
    ("merge", merge),
    ("captured event query", captured_event_query),
]:
    run(name, f)
    # Whatever a failed check left capturing is ended, so the next starts clean.
    for s in (s0, s1, s2):
        if status(s) != S.CU_STREAM_CAPTURE_STATUS_NONE:
            cuda.cuStreamEndCapture(s)

for s in (s0, s1, s2):
    check(cuda.cuStreamSynchronize(s))
print(f"SUMMARY {sum(results)}/{len(results)}", flush=True)
sys.exit(0 if all(results) and len(results) == 12 else 1)
