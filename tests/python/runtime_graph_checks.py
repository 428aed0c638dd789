"""The CUDA runtime's graph calls through the pool (ctypes on libcudart.so.12, which under
`gpupool run` is the pool's runtime): run by pool-daemon/tests/graphs.rs under
`gpupool run --memory 64MiB`.

- Graph memory nodes: cudaGraphAddMemAllocNode returns the address, cudaGraphAddMemFreeNode
  frees it, cudaGraphMemAllocNodeGetParams / MemFreeNodeGetParams give the parameters back;
  cudaMemGetInfo and cudaDeviceGetGraphMemAttribute count the memory from cudaGraphInstantiate;
  after cudaGraphExecDestroy it is kept until cudaDeviceGraphMemTrim; a high-water mark resets
  with cudaDeviceSetGraphMemAttribute.
- Held to the quota: with 1/2 of it allocated, a graph allocating 3/4 of it fails
  cudaGraphInstantiate with cudaErrorMemoryAllocation, and instantiates once that is freed.
- Host functions: cudaGraphAddHostNode runs a Python function in this process at every launch,
  on a thread other than the caller's; cudaGraphHostNodeGetParams gives the parameters back,
  cudaGraphHostNodeSetParams changes the graph's node (an instantiated graph keeps its own) and
  cudaGraphExecHostNodeSetParams one instantiated graph's; cudaLaunchHostFunc in a capture is a
  host node of the captured graph, run at each of its launches and not during the capture.
- Memcpy nodes: cudaGraphAddMemcpyNode1D from page-locked memory to the device, and
  cudaGraphAddMemcpyNode (a cudaMemcpy3DParms, 2D box of 16 rows) from the device back to
  page-locked memory; the host source is read when the graph runs.
- Node parameters: cudaGraphMemcpyNodeSetParams1D gives the graph's node a new host source (an
  instantiated graph keeps the old one), cudaGraphExecMemcpyNodeSetParams1D one instantiated
  graph's, and cudaGraphExecMemcpyNodeSetParams with a 2D copy is refused (one-dimensional only);
  a memset node (the driver's cuGraphAddMemsetNode) read with cudaGraphMemsetNodeGetParams and
  changed with cudaGraphMemsetNodeSetParams and cudaGraphExecMemsetNodeSetParams; cudaGraphAddEmptyNode
  after it, and cudaGraphGetNodes lists the graph's four nodes, cudaGraphGetRootNodes the one root,
  cudaGraphNodeGetType EMPTY (5) and MEMSET (2).
- Capture into an existing graph: after an empty node (added with the driver's
  cuGraphAddEmptyNode), cudaStreamBeginCaptureToGraph captures a memset; cudaStreamGetCaptureInfo_v2
  answers the graph and the memset as the dependency; cudaStreamUpdateCaptureDependencies_v2 sets
  the empty node instead; a second memset is captured; cudaStreamEndCapture answers the same
  graph, whose launch writes both buffers; the plain cudaStreamGetCaptureInfo (CUDA 12's three
  arguments) then says the stream is not capturing.

Prints PASS/FAIL lines and SUMMARY passed/total; exits 1 on any failure.
"""

import ctypes as C
import sys
import threading

MIB = 1 << 20
PINNED, LOC_DEVICE, READWRITE = 1, 1, 3
USED_CURRENT, USED_HIGH, RESERVED_CURRENT, RESERVED_HIGH = 0, 1, 2, 3
MEMORY_ALLOCATION, INVALID_VALUE = 2, 1


class Location(C.Structure):
    _fields_ = [("type", C.c_int), ("id", C.c_int)]


class PoolProps(C.Structure):
    _fields_ = [
        ("allocType", C.c_int),
        ("handleTypes", C.c_int),
        ("location", Location),
        ("win32SecurityAttributes", C.c_void_p),
        ("maxSize", C.c_size_t),
        ("usage", C.c_ushort),
        ("reserved", C.c_ubyte * 54),
    ]


class AccessDesc(C.Structure):
    _fields_ = [("location", Location), ("flags", C.c_int)]


class AllocNodeParams(C.Structure):
    _fields_ = [
        ("poolProps", PoolProps),
        ("accessDescs", C.POINTER(AccessDesc)),
        ("accessDescCount", C.c_size_t),
        ("bytesize", C.c_size_t),
        ("dptr", C.c_void_p),
    ]


class HostNodeParams(C.Structure):
    _fields_ = [("fn", C.c_void_p), ("userData", C.c_void_p)]


HOST_FN = C.CFUNCTYPE(None, C.c_void_p)

rt = C.CDLL("libcudart.so.12")
results = []


def record(name, ok, why=""):
    results.append(ok)
    print(f"PASS {name}" if ok else f"FAIL {name}: {why}", flush=True)


def call(name, *args):
    rc = getattr(rt, name)(*args)
    if rc != 0:
        raise RuntimeError(f"{name} returned {rc}")


def free_now():
    f, t = C.c_size_t(), C.c_size_t()
    call("cudaMemGetInfo", C.byref(f), C.byref(t))
    return f.value, t.value


def attr(a):
    v = C.c_uint64()
    call("cudaDeviceGetGraphMemAttribute", 0, a, C.byref(v))
    return v.value


def alloc_params(nbytes, access):
    p = AllocNodeParams()
    p.poolProps.allocType = PINNED
    p.poolProps.location = Location(LOC_DEVICE, 0)
    p.accessDescs = C.pointer(access)
    p.accessDescCount = 1
    p.bytesize = nbytes
    return p


def graph_with_memory(nbytes, access):
    """A graph that allocates `nbytes` and frees them: (graph, alloc node, free node, address)."""
    g, na, nf = C.c_void_p(), C.c_void_p(), C.c_void_p()
    call("cudaGraphCreate", C.byref(g), 0)
    p = alloc_params(nbytes, access)
    call("cudaGraphAddMemAllocNode", C.byref(na), g, None, C.c_size_t(0), C.byref(p))
    call("cudaGraphAddMemFreeNode", C.byref(nf), g, C.byref(na), C.c_size_t(1), C.c_void_p(p.dptr))
    return g, na, nf, p.dptr


def main():
    call("cudaSetDevice", 0)
    call("cudaFree", None)
    access = AccessDesc(Location(LOC_DEVICE, 0), READWRITE)
    free0, total = free_now()

    nbytes = 8 * MIB
    g, na, nf, dptr = graph_with_memory(nbytes, access)
    got = AllocNodeParams()
    call("cudaGraphMemAllocNodeGetParams", na, C.byref(got))
    freed = C.c_void_p()
    call("cudaGraphMemFreeNodeGetParams", nf, C.byref(freed))
    record(
        "cudaGraphAddMemAllocNode returns an address; the nodes' parameters come back",
        dptr and got.dptr == dptr and got.bytesize == nbytes and freed.value == dptr and free_now()[0] == free0,
        f"dptr {dptr} got {got.dptr} {got.bytesize} freed {freed.value}",
    )
    e = C.c_void_p()
    call("cudaGraphInstantiate", C.byref(e), g, C.c_ulonglong(0))
    held = free0 - free_now()[0]
    record(
        "the graph's memory is counted from cudaGraphInstantiate",
        held == nbytes and attr(USED_CURRENT) == nbytes,
        f"held {held}, used {attr(USED_CURRENT)}",
    )
    e2 = C.c_void_p()
    rc = rt.cudaGraphInstantiate(C.byref(e2), g, C.c_ulonglong(0))
    record("a second instantiation is cudaErrorInvalidValue", rc == INVALID_VALUE, f"rc {rc}")
    rt.cudaGetLastError()
    call("cudaGraphLaunch", e, None)
    call("cudaDeviceSynchronize")
    call("cudaGraphExecDestroy", e)
    kept = free0 - free_now()[0]
    call("cudaDeviceGraphMemTrim", 0)
    record(
        "kept after cudaGraphExecDestroy, returned by cudaDeviceGraphMemTrim",
        kept == nbytes and free_now()[0] == free0 and attr(RESERVED_CURRENT) == 0 and attr(RESERVED_HIGH) == nbytes,
        f"kept {kept}, free {free_now()[0]} of {free0}",
    )
    zero = C.c_uint64(0)
    call("cudaDeviceSetGraphMemAttribute", 0, RESERVED_HIGH, C.byref(zero))
    record("cudaDeviceSetGraphMemAttribute resets a high-water mark", attr(RESERVED_HIGH) == 0, str(attr(3)))
    call("cudaGraphDestroy", g)

    big = (total * 3 // 4) & ~(2 * MIB - 1)
    hold = C.c_void_p()
    call("cudaMalloc", C.byref(hold), C.c_size_t(total // 2))
    g, _, _, _ = graph_with_memory(big, access)
    rc = rt.cudaGraphInstantiate(C.byref(e), g, C.c_ulonglong(0))
    rt.cudaGetLastError()
    call("cudaFree", hold)
    call("cudaGraphInstantiate", C.byref(e), g, C.c_ulonglong(0))
    held = free0 - free_now()[0]
    record(
        "a graph allocating past the quota is cudaErrorMemoryAllocation at cudaGraphInstantiate",
        rc == MEMORY_ALLOCATION and held == big,
        f"rc {rc}, held {held} of {big}",
    )
    call("cudaGraphExecDestroy", e)
    call("cudaGraphDestroy", g)
    call("cudaDeviceGraphMemTrim", 0)
    record("nothing left", free_now()[0] == free0, f"{free_now()[0]} of {free0}")

    host_checks()
    capture_checks()
    memcpy_checks()

    print(f"SUMMARY {sum(results)}/{len(results)}", flush=True)
    return 0 if all(results) else 1


def host_checks():
    calls, threads = [], set()

    def on_host(user):
        calls.append(user or 0)
        threads.add(threading.get_ident())

    cb = HOST_FN(on_host)
    fn = C.cast(cb, C.c_void_p).value
    g, n, s, e, e2 = C.c_void_p(), C.c_void_p(), C.c_void_p(), C.c_void_p(), C.c_void_p()
    call("cudaStreamCreate", C.byref(s))
    call("cudaGraphCreate", C.byref(g), 0)
    call("cudaGraphAddHostNode", C.byref(n), g, None, C.c_size_t(0), C.byref(HostNodeParams(fn, 1)))
    call("cudaGraphInstantiate", C.byref(e), g, C.c_ulonglong(0))
    call("cudaGraphLaunch", e, s)
    call("cudaStreamSynchronize", s)
    got = HostNodeParams()
    call("cudaGraphHostNodeGetParams", n, C.byref(got))
    record(
        "cudaGraphAddHostNode runs the function at launch, off the caller's thread; its parameters come back",
        calls == [1] and threading.get_ident() not in threads and got.fn == fn and got.userData == 1,
        f"calls {calls}, params {got.fn} {got.userData}",
    )
    call("cudaGraphHostNodeSetParams", n, C.byref(HostNodeParams(fn, 2)))
    call("cudaGraphExecHostNodeSetParams", e, n, C.byref(HostNodeParams(fn, 3)))
    call("cudaGraphInstantiate", C.byref(e2), g, C.c_ulonglong(0))
    call("cudaGraphLaunch", e, s)
    call("cudaGraphLaunch", e2, s)
    call("cudaStreamSynchronize", s)
    call("cudaGraphHostNodeGetParams", n, C.byref(got))
    record(
        "cudaGraphHostNodeSetParams changes the graph's node, cudaGraphExecHostNodeSetParams one instantiated graph's",
        calls == [1, 3, 2] and got.userData == 2,
        f"calls {calls}, params {got.userData}",
    )
    g2, e3 = C.c_void_p(), C.c_void_p()
    call("cudaStreamBeginCapture", s, 0)
    call("cudaLaunchHostFunc", s, cb, C.c_void_p(4))
    call("cudaStreamEndCapture", s, C.byref(g2))
    during = list(calls)
    call("cudaGraphInstantiate", C.byref(e3), g2, C.c_ulonglong(0))
    for _ in range(3):
        call("cudaGraphLaunch", e3, s)
    call("cudaStreamSynchronize", s)
    record(
        "cudaLaunchHostFunc in a capture is a host node of the graph, run at each launch",
        during == [1, 3, 2] and calls[3:] == [4, 4, 4] and threading.get_ident() not in threads,
        f"calls {calls}",
    )
    for x in (e, e2, e3):
        call("cudaGraphExecDestroy", x)
    for x in (g, g2):
        call("cudaGraphDestroy", x)
    call("cudaStreamDestroy", s)


def capture_checks():
    cu = C.CDLL("libcuda.so.1")
    g, empty, s = C.c_void_p(), C.c_void_p(), C.c_void_p()
    call("cudaGraphCreate", C.byref(g), 0)
    rc = cu.cuGraphAddEmptyNode(C.byref(empty), g, None, C.c_size_t(0))
    if rc != 0:
        raise RuntimeError(f"cuGraphAddEmptyNode returned {rc}")
    call("cudaStreamCreate", C.byref(s))
    nbytes = 4096
    bufs = [C.c_void_p(), C.c_void_p()]
    for b in bufs:
        call("cudaMalloc", C.byref(b), C.c_size_t(nbytes))
    relaxed = 2
    call("cudaStreamBeginCaptureToGraph", s, g, C.byref(empty), None, C.c_size_t(1), relaxed)
    call("cudaMemsetAsync", bufs[0], 7, C.c_size_t(nbytes), s)
    st, cid, cg, deps, n = C.c_int(), C.c_ulonglong(), C.c_void_p(), C.POINTER(C.c_void_p)(), C.c_size_t()
    call("cudaStreamGetCaptureInfo_v2", s, C.byref(st), C.byref(cid), C.byref(cg), C.byref(deps), C.byref(n))
    first = deps[0] if n.value else None
    record(
        "cudaStreamBeginCaptureToGraph; cudaStreamGetCaptureInfo_v2 answers the graph and the captured node",
        st.value == 1 and cid.value != 0 and cg.value == g.value and n.value == 1 and first != empty.value,
        f"status {st.value} graph {cg.value} vs {g.value} deps {n.value}",
    )
    call("cudaStreamUpdateCaptureDependencies_v2", s, C.byref(empty), None, C.c_size_t(1), C.c_uint(1))
    call("cudaStreamGetCaptureInfo_v2", s, C.byref(st), C.byref(cid), C.byref(cg), C.byref(deps), C.byref(n))
    record(
        "cudaStreamUpdateCaptureDependencies_v2 sets the dependencies",
        n.value == 1 and deps[0] == empty.value,
        f"{n.value} deps",
    )
    call("cudaMemsetAsync", bufs[1], 9, C.c_size_t(nbytes), s)
    out = C.c_void_p()
    call("cudaStreamEndCapture", s, C.byref(out))
    e = C.c_void_p()
    call("cudaGraphInstantiate", C.byref(e), g, C.c_ulonglong(0))
    call("cudaGraphLaunch", e, s)
    call("cudaStreamSynchronize", s)
    got = []
    for b in bufs:
        host = (C.c_ubyte * nbytes)()
        call("cudaMemcpy", host, b, C.c_size_t(nbytes), 2)
        got.append(set(host))
    call("cudaStreamGetCaptureInfo", s, C.byref(st), C.byref(cid))
    record(
        "cudaStreamEndCapture answers the graph captured into, which runs both memsets",
        out.value == g.value and got == [{7}, {9}] and st.value == 0,
        f"graph {out.value} vs {g.value}, bytes {got}, status {st.value}",
    )
    call("cudaGraphExecDestroy", e)
    call("cudaGraphDestroy", g)


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


def memcpy_checks():
    rows, pitch = 16, 256
    nbytes = rows * pitch
    src, back, dev = C.c_void_p(), C.c_void_p(), C.c_void_p()
    call("cudaMallocHost", C.byref(src), C.c_size_t(nbytes))
    call("cudaMallocHost", C.byref(back), C.c_size_t(nbytes))
    call("cudaMalloc", C.byref(dev), C.c_size_t(nbytes))
    C.memset(back, 0, nbytes)
    g, n1, n2 = C.c_void_p(), C.c_void_p(), C.c_void_p()
    call("cudaGraphCreate", C.byref(g), 0)
    h2d, d2h = 1, 2
    call("cudaGraphAddMemcpyNode1D", C.byref(n1), g, None, C.c_size_t(0), dev, src, C.c_size_t(nbytes), h2d)
    p = Memcpy3DParms()
    p.srcPtr = PitchedPtr(dev, pitch, pitch, rows)
    p.dstPtr = PitchedPtr(back, pitch, pitch, rows)
    p.extent = Extent(pitch, rows, 1)
    p.kind = d2h
    call("cudaGraphAddMemcpyNode", C.byref(n2), g, C.byref(n1), C.c_size_t(1), C.byref(p))
    e = C.c_void_p()
    call("cudaGraphInstantiate", C.byref(e), g, C.c_ulonglong(0))
    # Written after the node was added: the graph reads the host memory when it runs.
    pattern = bytes((i * 7 + 3) % 256 for i in range(nbytes))
    C.memmove(src, pattern, nbytes)
    call("cudaGraphLaunch", e, None)
    call("cudaDeviceSynchronize")
    record(
        "cudaGraphAddMemcpyNode1D and cudaGraphAddMemcpyNode copy when the graph runs",
        C.string_at(back, nbytes) == pattern,
        "the bytes copied back differ",
    )
    params_checks(g, e, n1, n2, src, back, dev, nbytes)
    call("cudaGraphExecDestroy", e)
    call("cudaGraphDestroy", g)
    call("cudaFree", dev)
    call("cudaFreeHost", src)
    call("cudaFreeHost", back)


class MemsetParams(C.Structure):
    _fields_ = [
        ("dst", C.c_void_p),
        ("pitch", C.c_size_t),
        ("value", C.c_uint),
        ("elementSize", C.c_uint),
        ("width", C.c_size_t),
        ("height", C.c_size_t),
    ]


def params_checks(g, e, n1, n2, src, back, dev, nbytes):
    h2d = 1
    src2, src3 = C.c_void_p(), C.c_void_p()
    call("cudaMallocHost", C.byref(src2), C.c_size_t(nbytes))
    call("cudaMallocHost", C.byref(src3), C.c_size_t(nbytes))
    old = C.string_at(src, nbytes)
    p2, p3 = bytes([0x22]) * nbytes, bytes([0x33]) * nbytes
    C.memmove(src2, p2, nbytes)
    C.memmove(src3, p3, nbytes)
    call("cudaGraphMemcpyNodeSetParams1D", n1, dev, src2, C.c_size_t(nbytes), h2d)
    e2 = C.c_void_p()
    call("cudaGraphInstantiate", C.byref(e2), g, C.c_ulonglong(0))
    call("cudaGraphLaunch", e, None)
    call("cudaDeviceSynchronize")
    kept = C.string_at(back, nbytes) == old
    call("cudaGraphLaunch", e2, None)
    call("cudaDeviceSynchronize")
    record(
        "cudaGraphMemcpyNodeSetParams1D changes the graph, not a graph instantiated before",
        kept and C.string_at(back, nbytes) == p2,
        f"kept={kept}",
    )
    call("cudaGraphExecMemcpyNodeSetParams1D", e, n1, dev, src3, C.c_size_t(nbytes), h2d)
    call("cudaGraphLaunch", e, None)
    call("cudaDeviceSynchronize")
    one = C.string_at(back, nbytes) == p3
    call("cudaGraphLaunch", e2, None)
    call("cudaDeviceSynchronize")
    p = Memcpy3DParms()
    p.srcPtr = PitchedPtr(dev, 256, 256, 16)
    p.dstPtr = PitchedPtr(back, 256, 256, 16)
    p.extent = Extent(256, 16, 1)
    p.kind = 2
    rc = rt.cudaGraphExecMemcpyNodeSetParams(e, n2, C.byref(p))
    record(
        "cudaGraphExecMemcpyNodeSetParams1D changes one instantiated graph; a 2D copy is refused there",
        one and C.string_at(back, nbytes) == p2 and rc == INVALID_VALUE,
        f"one={one} rc={rc}",
    )

    cu = C.CDLL("libcuda.so.1")
    ms, e3 = C.c_void_p(), C.c_void_p()
    mp = MemsetParams(dev, 0, 0x41, 1, nbytes, 1)
    rc = cu.cuGraphAddMemsetNode(C.byref(ms), g, C.byref(n2), C.c_size_t(1), C.byref(mp), None)
    if rc != 0:
        raise RuntimeError(f"cuGraphAddMemsetNode returned {rc}")
    got = MemsetParams()
    call("cudaGraphMemsetNodeGetParams", ms, C.byref(got))
    first = (got.dst, got.value, got.elementSize, got.width) == (dev.value, 0x41, 1, nbytes)
    call("cudaGraphMemsetNodeSetParams", ms, C.byref(MemsetParams(dev, 0, 0x42, 1, nbytes, 1)))
    call("cudaGraphInstantiate", C.byref(e3), g, C.c_ulonglong(0))
    call("cudaGraphExecMemsetNodeSetParams", e3, ms, C.byref(MemsetParams(dev, 0, 0x43, 1, nbytes, 1)))
    call("cudaGraphLaunch", e3, None)
    call("cudaDeviceSynchronize")
    out = (C.c_ubyte * nbytes)()
    call("cudaMemcpy", out, dev, C.c_size_t(nbytes), 2)
    call("cudaGraphMemsetNodeGetParams", ms, C.byref(got))
    record(
        "cudaGraphMemsetNodeGetParams/SetParams and cudaGraphExecMemsetNodeSetParams",
        first and got.value == 0x42 and bytes(out) == bytes([0x43]) * nbytes,
        f"first={first} value={got.value:#x} out={bytes(out[:4])}",
    )
    empty = C.c_void_p()
    call("cudaGraphAddEmptyNode", C.byref(empty), g, C.byref(ms), C.c_size_t(1))
    count, nodes = C.c_size_t(0), (C.c_void_p * 5)()
    call("cudaGraphGetNodes", g, None, C.byref(count))
    first = count.value
    count.value = 5
    call("cudaGraphGetNodes", g, nodes, C.byref(count))
    want = {n1.value, n2.value, ms.value, empty.value}
    record(
        "cudaGraphAddEmptyNode and cudaGraphGetNodes",
        first == 4 and count.value == 4 and set(nodes[:4]) == want and nodes[4] is None,
        f"count={first}/{count.value}",
    )
    roots, t = (C.c_void_p * 2)(), C.c_int(-1)
    count.value = 2
    call("cudaGraphGetRootNodes", g, roots, C.byref(count))
    call("cudaGraphNodeGetType", empty, C.byref(t))
    memset_t = C.c_int(-1)
    call("cudaGraphNodeGetType", ms, C.byref(memset_t))
    record(
        "cudaGraphGetRootNodes and cudaGraphNodeGetType",
        count.value == 1 and roots[0] == n1.value and t.value == 5 and memset_t.value == 2,
        f"roots={count.value} types={t.value},{memset_t.value}",
    )
    for x in (e2, e3):
        call("cudaGraphExecDestroy", x)
    call("cudaFreeHost", src2)
    call("cudaFreeHost", src3)


if __name__ == "__main__":
    sys.exit(main())
