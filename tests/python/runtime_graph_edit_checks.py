"""The CUDA runtime's graphs built and edited node by node through the pool (ctypes on
libcudart.so.12, or with --cudart13 libcudart.so.13, which under `gpupool run` are the pool's
runtime): run by pool-daemon/tests/graphs.rs under `gpupool run`, once with each, and once with
each of NVIDIA's own (the wheels' libcudart.so.12 and .13, `gpupool run --cudart nvidia`).

- cudaGraphAddMemsetNode (a cudaMemsetParams, a = 5) and a copy a -> b after it
  (cudaGraphAddMemcpyNode1D): the launch writes b = 5; cudaGraphMemcpyNodeGetParams gives the copy
  back as a cudaMemcpy3DParms (pointers, width, one row, cudaMemcpyDeviceToDevice).
- cudaGraphRemoveDependencies (CUDA 12's four arguments, CUDA 13's five with edge data, by the
  runtime loaded) removes memset -> copy: two roots; a second time cudaErrorInvalidValue;
  cudaGraphAddDependencies adds copy -> memset: with a = 3 beforehand the launch copies 3 to b and
  then sets a = 5; the form with edge data (CUDA 12's `_v2`, CUDA 13's plain name), NULL edge data,
  removes it again: two roots.
- cudaGraphDestroyNode: an empty node added and destroyed, 3 nodes then 2.
- cudaGraphClone and cudaGraphNodeFindInClone: the clone's copy of the memcpy node is a MEMCPY
  node other than the original; a graph that is not a clone is cudaErrorInvalidValue.
- cudaGraphAddChildGraphNode: a graph whose child is the clone, launched, writes b = 5.
- cudaGraphAddEventRecordNode / cudaGraphAddEventWaitNode: two events never recorded have no
  elapsed time (an error); a graph recording both around a memset, with a wait node on the first,
  has node types EVENT_RECORD (7) and WAIT_EVENT (6), and after its launch the elapsed time exists
  and is >= 0.

- cudaGraphGetEdges, cudaGraphNodeGetDependencies / GetDependentNodes (CUDA 12's plain forms
  without edge data, CUDA 13's with it, and the edge-data form by the runtime's name for it): the
  one edge memset -> copy (the count alone, then a list of two: NULL past the end), its edge data
  zeroed (a default edge), the copy's one dependency and the memset's one dependent, none before
  the memset.
- cudaGraphExecUpdate (a cudaGraphExecUpdateResultInfo): an instantiated graph of one memset node
  (a = 5) takes a = 7 from a graph of the same topology (the launch writes 7); a graph of two
  nodes is cudaErrorGraphExecUpdateFailure with cudaGraphExecUpdateErrorTopologyChanged, one of an
  empty node cudaGraphExecUpdateErrorNodeTypeChanged naming that node; the exec still writes 7.
- cudaGraphDebugDotPrint: the memset/copy graph written as a DOT file (a digraph with both nodes'
  lines); a path in a missing directory is an error.
- cudaGraphAddNode (CUDA 12's four arguments, CUDA 13's with edge data) of a memset (a = 9) and an
  event record node: their types, cudaGraphEventRecordNodeGetEvent gives the event back; a launch
  writes 9; cudaGraphNodeSetParams (a = 11) and cudaGraphExecNodeSetParams (a = 12): the exec
  writes 12, a new instantiation 11.
- cudaGraphConditionalHandleCreate (default 1, assigned at each launch) and a conditional IF node
  from cudaGraphAddNode: its body graph comes back in phGraph_out; a memset added there runs
  (a = 17).

Prints PASS/FAIL lines and SUMMARY passed/total; exits 1 on any failure.
"""

import ctypes as C
import os
import sys
import tempfile

CUDART13 = "--cudart13" in sys.argv
rt = C.CDLL("libcudart.so.13" if CUDART13 else "libcudart.so.12")
N = 4096
INVALID_VALUE = 1
D2D = 3
MEMCPY, WAIT_EVENT, EVENT_RECORD = 1, 6, 7
GRAPH_EXEC_UPDATE_FAILURE = 910
TOPOLOGY_CHANGED, NODE_TYPE_CHANGED = 2, 3
results = []


class MemsetParams(C.Structure):
    _fields_ = [
        ("dst", C.c_void_p),
        ("pitch", C.c_size_t),
        ("value", C.c_uint),
        ("elementSize", C.c_uint),
        ("width", C.c_size_t),
        ("height", C.c_size_t),
    ]


class Pos(C.Structure):
    _fields_ = [("x", C.c_size_t), ("y", C.c_size_t), ("z", C.c_size_t)]


class PitchedPtr(C.Structure):
    _fields_ = [("ptr", C.c_void_p), ("pitch", C.c_size_t), ("xsize", C.c_size_t), ("ysize", C.c_size_t)]


class Extent(C.Structure):
    _fields_ = [("width", C.c_size_t), ("height", C.c_size_t), ("depth", C.c_size_t)]


class Memcpy3DParms(C.Structure):
    _fields_ = [
        ("srcArray", C.c_void_p),
        ("srcPos", Pos),
        ("srcPtr", PitchedPtr),
        ("dstArray", C.c_void_p),
        ("dstPos", Pos),
        ("dstPtr", PitchedPtr),
        ("extent", Extent),
        ("kind", C.c_int),
    ]


def record(name, ok, why=""):
    results.append(ok)
    print(f"PASS {name}" if ok else f"FAIL {name}: {why}", flush=True)


def call(name, *args):
    rc = getattr(rt, name)(*args)
    if rc != 0:
        raise RuntimeError(f"{name} returned {rc}")


def words(dev):
    host = (C.c_uint32 * (N // 4))()
    call("cudaMemcpy", host, dev, C.c_size_t(N), 2)
    return set(host)


def edges(name, g, frm, to):
    """cudaGraphAdd/RemoveDependencies with one edge, in the loaded runtime's plain form."""
    if CUDART13:
        return getattr(rt, name)(g, C.byref(frm), C.byref(to), None, C.c_size_t(1))
    return getattr(rt, name)(g, C.byref(frm), C.byref(to), C.c_size_t(1))


def with_edge_data(name):
    """The form with edge data: CUDA 12's `_v2`, CUDA 13's plain name (13 exports no `_v2`)."""
    return getattr(rt, name if CUDART13 else name + "_v2")


class UpdateInfo(C.Structure):
    _fields_ = [("result", C.c_int), ("errorNode", C.c_void_p), ("errorFromNode", C.c_void_p)]


def plain_query(name, *args):
    """A topology query in the loaded runtime's plain form: CUDA 13's takes edge data (NULL here)
    before the count."""
    if CUDART13:
        args = args[:-1] + (None,) + args[-1:]
    return getattr(rt, name)(*args)


def count(what, g):
    n = C.c_size_t(0)
    call(what, g, None, C.byref(n))
    return n.value


MEMSET_T = 2
CONDITIONAL_T = 13


class CondParams(C.Structure):
    """cudaConditionalNodeParams: the handle, IF (0) / WHILE / SWITCH, the body count, and the
    array of body graphs the runtime writes."""

    _fields_ = [("handle", C.c_uint64), ("type", C.c_int), ("size", C.c_uint), ("phGraph_out", C.POINTER(C.c_void_p))]


class NodeParams(C.Structure):
    """cudaGraphNodeParams: the type, then a 232-byte union of the per-type parameters."""

    _fields_ = [("type", C.c_int), ("reserved0", C.c_int * 3), ("union", C.c_longlong * 29), ("reserved2", C.c_longlong)]


def node_params(t, member):
    p = NodeParams()
    p.type = t
    C.memmove(C.addressof(p.union), C.addressof(member), C.sizeof(member))
    return p


def add_node(out, g, deps, n, p):
    """cudaGraphAddNode in the loaded runtime's form: CUDA 13's takes edge data (NULL here)."""
    if CUDART13:
        return rt.cudaGraphAddNode(C.byref(out), g, deps, None, C.c_size_t(n), C.byref(p))
    return rt.cudaGraphAddNode(C.byref(out), g, deps, C.c_size_t(n), C.byref(p))


def driver_node_type(node):
    """The driver's cuGraphNodeGetType (libcuda.so.1: the pool's), for a conditional node: NVIDIA's
    runtime 12.9's cudaGraphNodeGetType answered cudaErrorUnknown for one over the pool's driver,
    whose cuGraphNodeGetType answers CU_GRAPH_NODE_TYPE_CONDITIONAL (not investigated further)."""
    t = C.c_int(-1)
    rc = C.CDLL("libcuda.so.1").cuGraphNodeGetType(node, C.byref(t))
    return t.value if rc == 0 else -rc


def node_type(node):
    t = C.c_int(-1)
    call("cudaGraphNodeGetType", node, C.byref(t))
    return t.value


def launch(g, s):
    e = C.c_void_p()
    call("cudaGraphInstantiate", C.byref(e), g, C.c_uint64(0))
    call("cudaGraphLaunch", e, s)
    call("cudaStreamSynchronize", s)
    call("cudaGraphExecDestroy", e)


def main():
    call("cudaSetDevice", 0)
    a, b = C.c_void_p(), C.c_void_p()
    call("cudaMalloc", C.byref(a), C.c_size_t(N))
    call("cudaMalloc", C.byref(b), C.c_size_t(N))
    call("cudaMemset", a, 3, C.c_size_t(N))
    call("cudaMemset", b, 0, C.c_size_t(N))
    s = C.c_void_p()
    call("cudaStreamCreate", C.byref(s))

    g, ms, mc = C.c_void_p(), C.c_void_p(), C.c_void_p()
    call("cudaGraphCreate", C.byref(g), 0)
    p = MemsetParams(a, 0, 5, 4, N // 4, 1)
    call("cudaGraphAddMemsetNode", C.byref(ms), g, None, C.c_size_t(0), C.byref(p))
    call("cudaGraphAddMemcpyNode1D", C.byref(mc), g, C.byref(ms), C.c_size_t(1), b, a, C.c_size_t(N), D2D)
    launch(g, s)
    record("cudaGraphAddMemsetNode then a copy", words(b) == {5}, f"b = {words(b)}")

    got = Memcpy3DParms()
    call("cudaGraphMemcpyNodeGetParams", mc, C.byref(got))
    record(
        "cudaGraphMemcpyNodeGetParams",
        got.srcPtr.ptr == a.value
        and got.dstPtr.ptr == b.value
        and got.extent.width == N
        and got.extent.height == 1
        and got.extent.depth == 1
        and got.kind == D2D
        and not got.srcArray
        and not got.dstArray,
        f"src {got.srcPtr.ptr} dst {got.dstPtr.ptr} extent {got.extent.width}x{got.extent.height}x"
        f"{got.extent.depth} kind {got.kind}",
    )

    n = C.c_size_t(0)
    rc_count = plain_query("cudaGraphGetEdges", g, None, None, C.byref(n))
    frm, to, n2 = (C.c_void_p * 2)(), (C.c_void_p * 2)(), C.c_size_t(2)
    rc_list = plain_query("cudaGraphGetEdges", g, frm, to, C.byref(n2))
    frm3, to3, n3, data = (C.c_void_p * 2)(), (C.c_void_p * 2)(), C.c_size_t(2), (C.c_uint8 * 16)(*[0xFF] * 16)
    rc_data = with_edge_data("cudaGraphGetEdges")(g, frm3, to3, data, C.byref(n3))
    record(
        "cudaGraphGetEdges",
        (rc_count, n.value, rc_list, n2.value, rc_data, n3.value) == (0, 1, 0, 1, 0, 1)
        and (frm[0], to[0], frm[1], to[1]) == (ms.value, mc.value, None, None)
        and (frm3[0], to3[0]) == (ms.value, mc.value)
        and list(data) == [0] * 16,
        f"rc {rc_count},{rc_list},{rc_data} n {n.value},{n2.value},{n3.value} from {list(frm)} to {list(to)} "
        f"data {list(data)}",
    )

    deps, nd = (C.c_void_p * 2)(), C.c_size_t(2)
    rc_d = plain_query("cudaGraphNodeGetDependencies", mc, deps, C.byref(nd))
    dnts, nt = (C.c_void_p * 2)(), C.c_size_t(2)
    rc_t = plain_query("cudaGraphNodeGetDependentNodes", ms, dnts, C.byref(nt))
    n_root = C.c_size_t(9)
    rc_r = plain_query("cudaGraphNodeGetDependencies", ms, None, C.byref(n_root))
    dd, ndd, ddata = (C.c_void_p * 1)(), C.c_size_t(1), (C.c_uint8 * 8)(*[0xFF] * 8)
    rc_dd = with_edge_data("cudaGraphNodeGetDependentNodes")(ms, dd, ddata, C.byref(ndd))
    record(
        "cudaGraphNodeGetDependencies / GetDependentNodes",
        (rc_d, nd.value, deps[0], deps[1]) == (0, 1, ms.value, None)
        and (rc_t, nt.value, dnts[0], dnts[1]) == (0, 1, mc.value, None)
        and (rc_r, n_root.value) == (0, 0)
        and (rc_dd, ndd.value, dd[0], list(ddata)) == (0, 1, mc.value, [0] * 8),
        f"deps rc {rc_d} {nd.value} {list(deps)} dependents rc {rc_t} {nt.value} {list(dnts)} "
        f"root rc {rc_r} {n_root.value} with data rc {rc_dd} {ndd.value} {dd[0]} {list(ddata)}",
    )

    rc1 = edges("cudaGraphRemoveDependencies", g, ms, mc)
    roots = count("cudaGraphGetRootNodes", g)
    rc2 = edges("cudaGraphRemoveDependencies", g, ms, mc)
    rc3 = edges("cudaGraphAddDependencies", g, mc, ms)
    call("cudaMemset", a, 3, C.c_size_t(N))
    call("cudaMemset", b, 0, C.c_size_t(N))
    launch(g, s)
    wb, wa = words(b), words(a)
    rc4 = with_edge_data("cudaGraphRemoveDependencies")(g, C.byref(mc), C.byref(ms), None, C.c_size_t(1))
    roots2 = count("cudaGraphGetRootNodes", g)
    record(
        "cudaGraphRemoveDependencies / AddDependencies / RemoveDependencies_v2",
        (rc1, roots, rc2, rc3, rc4, roots2) == (0, 2, INVALID_VALUE, 0, 0, 2)
        and wb == {0x03030303}
        and wa == {5},
        f"rc {rc1},{rc2},{rc3},{rc4} roots {roots},{roots2} b {wb} a {wa}",
    )

    empty = C.c_void_p()
    call("cudaGraphAddEmptyNode", C.byref(empty), g, C.byref(mc), C.c_size_t(1))
    before = count("cudaGraphGetNodes", g)
    call("cudaGraphDestroyNode", empty)
    record("cudaGraphDestroyNode", (before, count("cudaGraphGetNodes", g)) == (3, 2), f"{before}")

    rc = with_edge_data("cudaGraphAddDependencies")(g, C.byref(ms), C.byref(mc), None, C.c_size_t(1))
    if rc != 0:
        raise RuntimeError(f"cudaGraphAddDependencies with edge data returned {rc}")
    clone, found, t = C.c_void_p(), C.c_void_p(), C.c_int(-1)
    call("cudaGraphClone", C.byref(clone), g)
    call("cudaGraphNodeFindInClone", C.byref(found), mc, clone)
    call("cudaGraphNodeGetType", found, C.byref(t))
    rc = rt.cudaGraphNodeFindInClone(C.byref(C.c_void_p()), mc, g)
    record(
        "cudaGraphClone and cudaGraphNodeFindInClone",
        found.value not in (None, mc.value) and t.value == MEMCPY and rc == INVALID_VALUE,
        f"found {found.value} type {t.value} rc {rc}",
    )

    parent, child = C.c_void_p(), C.c_void_p()
    call("cudaGraphCreate", C.byref(parent), 0)
    call("cudaGraphAddChildGraphNode", C.byref(child), parent, None, C.c_size_t(0), clone)
    call("cudaMemset", b, 0, C.c_size_t(N))
    launch(parent, s)
    record("cudaGraphAddChildGraphNode", words(b) == {5}, f"b = {words(b)}")

    e1, e2, ms_t = C.c_void_p(), C.c_void_p(), C.c_float(-1)
    call("cudaEventCreate", C.byref(e1))
    call("cudaEventCreate", C.byref(e2))
    unrecorded = rt.cudaEventElapsedTime(C.byref(ms_t), e1, e2)
    ev, r1, w, m, r2 = C.c_void_p(), C.c_void_p(), C.c_void_p(), C.c_void_p(), C.c_void_p()
    call("cudaGraphCreate", C.byref(ev), 0)
    call("cudaGraphAddEventRecordNode", C.byref(r1), ev, None, C.c_size_t(0), e1)
    call("cudaGraphAddEventWaitNode", C.byref(w), ev, C.byref(r1), C.c_size_t(1), e1)
    p2 = MemsetParams(b, 0, 9, 4, N // 4, 1)
    call("cudaGraphAddMemsetNode", C.byref(m), ev, C.byref(w), C.c_size_t(1), C.byref(p2))
    call("cudaGraphAddEventRecordNode", C.byref(r2), ev, C.byref(m), C.c_size_t(1), e2)
    t1, t2 = C.c_int(-1), C.c_int(-1)
    call("cudaGraphNodeGetType", r1, C.byref(t1))
    call("cudaGraphNodeGetType", w, C.byref(t2))
    launch(ev, s)
    call("cudaEventSynchronize", e2)
    rc = rt.cudaEventElapsedTime(C.byref(ms_t), e1, e2)
    record(
        "cudaGraphAddEventRecordNode and cudaGraphAddEventWaitNode",
        unrecorded != 0 and (t1.value, t2.value) == (EVENT_RECORD, WAIT_EVENT) and rc == 0 and ms_t.value >= 0
        and words(b) == {9},
        f"unrecorded {unrecorded} types {t1.value},{t2.value} rc {rc} ms {ms_t.value}",
    )

    u1, u2, u3, u4, x, n1, n2_, n3a, n3b, n4 = (C.c_void_p() for _ in range(10))
    for gr in (u1, u2, u3, u4):
        call("cudaGraphCreate", C.byref(gr), 0)
    call("cudaGraphAddMemsetNode", C.byref(n1), u1, None, C.c_size_t(0), C.byref(MemsetParams(a, 0, 5, 4, N // 4, 1)))
    call("cudaGraphInstantiate", C.byref(x), u1, C.c_uint64(0))
    call("cudaGraphAddMemsetNode", C.byref(n2_), u2, None, C.c_size_t(0), C.byref(MemsetParams(a, 0, 7, 4, N // 4, 1)))
    info = UpdateInfo(-1, None, None)
    rc_ok = rt.cudaGraphExecUpdate(x, u2, C.byref(info))
    ok_result = info.result
    call("cudaMemset", a, 0, C.c_size_t(N))
    call("cudaGraphLaunch", x, s)
    call("cudaStreamSynchronize", s)
    after_update = words(a)
    call("cudaGraphAddMemsetNode", C.byref(n3a), u3, None, C.c_size_t(0), C.byref(MemsetParams(a, 0, 9, 4, N // 4, 1)))
    call("cudaGraphAddMemsetNode", C.byref(n3b), u3, C.byref(n3a), C.c_size_t(1), C.byref(MemsetParams(b, 0, 9, 4, N // 4, 1)))
    topo = UpdateInfo(-1, None, None)
    rc_topo = rt.cudaGraphExecUpdate(x, u3, C.byref(topo))
    call("cudaGraphAddEmptyNode", C.byref(n4), u4, None, C.c_size_t(0))
    kind = UpdateInfo(-1, None, None)
    rc_kind = rt.cudaGraphExecUpdate(x, u4, C.byref(kind))
    call("cudaMemset", a, 0, C.c_size_t(N))
    call("cudaGraphLaunch", x, s)
    call("cudaStreamSynchronize", s)
    after_failures = words(a)
    call("cudaGraphExecDestroy", x)
    record(
        "cudaGraphExecUpdate",
        (rc_ok, ok_result, after_update, after_failures) == (0, 0, {7}, {7})
        and (rc_topo, topo.result) == (GRAPH_EXEC_UPDATE_FAILURE, TOPOLOGY_CHANGED)
        and (rc_kind, kind.result, kind.errorNode) == (GRAPH_EXEC_UPDATE_FAILURE, NODE_TYPE_CHANGED, n4.value),
        f"ok rc {rc_ok} result {ok_result} a {after_update}/{after_failures}; topology rc {rc_topo} result "
        f"{topo.result}; node type rc {rc_kind} result {kind.result} node {kind.errorNode} (empty {n4.value})",
    )

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "g.dot")
        rc_dot = rt.cudaGraphDebugDotPrint(g, path.encode(), 0)
        text = open(path).read() if os.path.exists(path) else ""
        rc_bad = rt.cudaGraphDebugDotPrint(g, os.path.join(tmp, "no", "g.dot").encode(), 0)
    record(
        "cudaGraphDebugDotPrint",
        rc_dot == 0 and text.lstrip().startswith("digraph") and text.count("->") >= 1 and rc_bad != 0,
        f"rc {rc_dot} bad {rc_bad} text {text[:200]!r}",
    )

    # The generic node calls: cudaGraphAddNode (CUDA 12's four arguments, CUDA 13's with edge data)
    # of a memset (a = 9) and an event record node after it; cudaGraphEventRecordNodeGetEvent;
    # cudaGraphNodeSetParams (a = 11) and cudaGraphExecNodeSetParams (a = 12, that exec only).
    gn, e1, xn, xn2 = C.c_void_p(), C.c_void_p(), C.c_void_p(), C.c_void_p()
    nm, nr, got = C.c_void_p(), C.c_void_p(), C.c_void_p()
    call("cudaGraphCreate", C.byref(gn), 0)
    call("cudaEventCreate", C.byref(e1))
    rc_m = add_node(nm, gn, None, 0, node_params(MEMSET_T, MemsetParams(a, 0, 9, 4, N // 4, 1)))
    rc_r = add_node(nr, gn, C.byref(nm), 1, node_params(EVENT_RECORD, C.c_void_p(e1.value)))
    types = [node_type(nm), node_type(nr)]
    rc_get = rt.cudaGraphEventRecordNodeGetEvent(nr, C.byref(got))
    call("cudaGraphInstantiate", C.byref(xn), gn, C.c_uint64(0))
    call("cudaGraphLaunch", xn, s)
    call("cudaStreamSynchronize", s)
    first = words(a)
    rc_set = rt.cudaGraphNodeSetParams(nm, C.byref(node_params(MEMSET_T, MemsetParams(a, 0, 11, 4, N // 4, 1))))
    rc_xset = rt.cudaGraphExecNodeSetParams(xn, nm, C.byref(node_params(MEMSET_T, MemsetParams(a, 0, 12, 4, N // 4, 1))))
    call("cudaGraphLaunch", xn, s)
    call("cudaStreamSynchronize", s)
    exec_set = words(a)
    call("cudaGraphInstantiate", C.byref(xn2), gn, C.c_uint64(0))
    call("cudaGraphLaunch", xn2, s)
    call("cudaStreamSynchronize", s)
    graph_set = words(a)
    record(
        "cudaGraphAddNode, cudaGraphEventRecordNodeGetEvent, cudaGraphNodeSetParams, cudaGraphExecNodeSetParams",
        (rc_m, rc_r, rc_get, rc_set, rc_xset) == (0, 0, 0, 0, 0)
        and types == [MEMSET_T, EVENT_RECORD]
        and got.value == e1.value
        and (first, exec_set, graph_set) == ({9}, {12}, {11}),
        f"rc {rc_m},{rc_r},{rc_get},{rc_set},{rc_xset} types {types} event {got.value} vs {e1.value} "
        f"a {first}/{exec_set}/{graph_set}",
    )
    for x in (xn, xn2):
        call("cudaGraphExecDestroy", x)
    call("cudaEventDestroy", e1)

    # A conditional IF node (cudaGraphConditionalHandleCreate, default 1 applied at each launch):
    # cudaGraphAddNode writes its body graph to phGraph_out; a memset added there runs (a = 17).
    gc, hc, nc = C.c_void_p(), C.c_uint64(0), C.c_void_p()
    call("cudaGraphCreate", C.byref(gc), 0)
    rc_h = rt.cudaGraphConditionalHandleCreate(C.byref(hc), gc, C.c_uint(1), C.c_uint(1))
    cp = node_params(CONDITIONAL_T, CondParams(hc.value, 0, 1, None))
    rc_c = add_node(nc, gc, None, 0, cp)
    body = CondParams.from_buffer(cp, NodeParams.union.offset).phGraph_out
    body_graph = C.c_void_p(body[0]) if body else C.c_void_p()
    rc_b = -1
    if body_graph.value:
        bm = C.c_void_p()
        rc_b = rt.cudaGraphAddMemsetNode(C.byref(bm), body_graph, None, C.c_size_t(0), C.byref(MemsetParams(a, 0, 17, 4, N // 4, 1)))
    call("cudaMemset", a, 0, C.c_size_t(N))
    if (rc_h, rc_c, rc_b) == (0, 0, 0):
        launch(gc, s)
    record(
        "cudaGraphConditionalHandleCreate and a conditional node from cudaGraphAddNode",
        (rc_h, rc_c, rc_b) == (0, 0, 0) and driver_node_type(nc) == CONDITIONAL_T and words(a) == {17},
        f"rc {rc_h},{rc_c},{rc_b} body {body_graph.value} type {driver_node_type(nc)} a {words(a)}",
    )
    call("cudaGraphDestroy", gc)

    for x in (ev, parent, clone, g, u1, u2, u3, u4, gn):
        call("cudaGraphDestroy", x)
    print(f"SUMMARY {sum(results)}/{len(results)}", flush=True)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
