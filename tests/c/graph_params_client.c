/*
 * tests/c/graph_params_client.c - memset and memcpy node parameters through the driver API (run by
 * pool-daemon/tests/graphs.rs under `gpupool run`, and by tests/tests/c_client.rs on the simulator):
 *
 *   cc -std=c11 -Wall -Wextra -I shim-headers/include tests/c/graph_params_client.c -o graph_params_client -ldl
 *
 * A graph: memset a = 5 (u32), then copy a -> b. GetParams answer what the nodes were made with.
 * cuGraphMemsetNodeSetParams (a = 7) and cuGraphMemcpyNodeSetParams (a -> c) change the graph: an
 * exec made before keeps its nodes (b = 5), one made after has the new ones (c = 7).
 * cuGraphExecMemsetNodeSetParams (a = 9) and cuGraphExecMemcpyNodeSetParams (a -> d) change the first
 * exec only (d = 9; the second still writes 7 to c). Refused with CUDA_ERROR_INVALID_VALUE: the
 * other kind's GetParams, an element size of 3, a two-row memset or copy set on an instantiated
 * graph (NVIDIA: one-dimensional only), a memcpy node given memset parameters in an exec.
 * cuGraphGetEdges: one edge memset -> memcpy (the count alone with NULL lists, NULL past the end of
 * larger ones), one list NULL is CUDA_ERROR_INVALID_VALUE.
 * Editing (memset a = 11 -> copy a -> e, memset -> empty; a cloned first): cuGraphNodeFindInClone
 * answers the clone's copies (a MEMCPY node depending on the memset's copy; a node of another graph
 * is CUDA_ERROR_INVALID_VALUE); cuGraphRemoveDependencies removes memset -> copy (a second time, or
 * with edge data that is not the default, CUDA_ERROR_INVALID_VALUE); with copy -> memset added and
 * the empty node destroyed (its edge with it) the graph has 2 nodes and 1 edge and copies a's old 3
 * to e; the clone, its empty node destroyed (then not found), still sets before it copies (e = 11);
 * cuGraphRemoveDependencies_v2 with default edge data removes the last edge.
 * Parameters of nodes this program never described: a clone's memset and memcpy nodes answer the
 * original's (a = 7, a -> c), and a captured cuMemsetD32Async (a = 13), cuMemcpyDtoDAsync (a -> b)
 * and cuMemcpyHtoDAsync from page-locked memory (its host address as this process knows it) are
 * MEMSET and MEMCPY nodes whose GetParams answer what was captured.
 *
 * The generic node calls (cuGraphAddNode, _v2, cuGraphNodeSetParams, cuGraphExecNodeSetParams) and
 * event nodes' events (Get/SetEvent on a graph and an instantiated graph): see that section.
 *
 * Output: "ok <check>" per check, then "done"; a failure prints "FAIL ..." on stderr, exits 1.
 */
#define _GNU_SOURCE
#include "gpupool_cuda.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUNCS(X)                                                                                            \
    X(cuInit) X(cuGetErrorName) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent)               \
    X(cuMemAlloc_v2) X(cuMemcpyDtoH_v2) X(cuMemsetD32_v2) X(cuStreamCreate) X(cuStreamSynchronize)          \
    X(cuGraphCreate) X(cuGraphDestroy) X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphExecDestroy) \
    X(cuGraphAddMemsetNode) X(cuGraphAddMemcpyNode) X(cuGraphMemsetNodeGetParams)                          \
    X(cuGraphMemsetNodeSetParams) X(cuGraphExecMemsetNodeSetParams) X(cuGraphMemcpyNodeGetParams)          \
    X(cuGraphMemcpyNodeSetParams) X(cuGraphExecMemcpyNodeSetParams) X(cuGraphGetEdges) X(cuGraphGetNodes)        \
    X(cuGraphClone) X(cuGraphNodeFindInClone) X(cuGraphNodeGetType) X(cuGraphNodeGetDependencies)           \
    X(cuGraphAddEmptyNode) X(cuGraphAddDependencies) X(cuGraphRemoveDependencies)                           \
    X(cuGraphRemoveDependencies_v2) X(cuGraphDestroyNode) X(cuStreamBeginCapture_v2) X(cuStreamEndCapture)        \
    X(cuMemsetD32Async) X(cuMemcpyDtoDAsync_v2) X(cuMemcpyHtoDAsync_v2) X(cuMemAllocHost_v2) X(cuMemFreeHost)   \
    X(cuEventCreate) X(cuEventDestroy_v2) X(cuGraphAddNode) X(cuGraphAddNode_v2) X(cuGraphNodeSetParams)          \
    X(cuGraphExecNodeSetParams) X(cuGraphEventRecordNodeGetEvent) X(cuGraphEventWaitNodeGetEvent)                  \
    X(cuGraphEventRecordNodeSetEvent) X(cuGraphEventWaitNodeSetEvent) X(cuGraphExecEventWaitNodeSetEvent)          \
    X(cuGraphExecUpdate_v2) X(cuGraphChildGraphNodeGetGraph) X(cuGraphAddChildGraphNode)

#define DECLARE(name) static __typeof__(name) *p_##name;
FUNCS(DECLARE)

#include "cu_check.h"

enum { N = 1024 };

static CUDA_MEMSET_NODE_PARAMS set_of(CUdeviceptr dst, unsigned value) {
    CUDA_MEMSET_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.dst = dst;
    p.value = value;
    p.elementSize = 4;
    p.width = N;
    p.height = 1;
    return p;
}

static CUDA_MEMCPY3D copy_of(CUdeviceptr src, CUdeviceptr dst) {
    CUDA_MEMCPY3D p;
    memset(&p, 0, sizeof p);
    p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = src;
    p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    p.dstDevice = dst;
    p.WidthInBytes = 4 * N;
    p.Height = 1;
    p.Depth = 1;
    return p;
}

static void expect_all(CUdeviceptr d, uint32_t want, const char *what) {
    static uint32_t h[N];
    CU(cuMemcpyDtoH_v2, h, d, sizeof h);
    for (int i = 0; i < N; i++) CHECK(h[i] == want, what, i, h[i]);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    CU_LOAD_DRIVER(FUNCS)

    CUdevice dev;
    CUcontext ctx;
    CUstream s;
    CUdeviceptr a, b, c, d;
    CU(cuInit, 0);
    CU(cuDeviceGet, &dev, 0);
    CU(cuDevicePrimaryCtxRetain, &ctx, dev);
    CU(cuCtxSetCurrent, ctx);
    CU(cuStreamCreate, &s, 0);
    CU(cuMemAlloc_v2, &a, 4 * N);
    CU(cuMemAlloc_v2, &b, 4 * N);
    CU(cuMemAlloc_v2, &c, 4 * N);
    CU(cuMemAlloc_v2, &d, 4 * N);
    CU(cuMemsetD32_v2, b, 0, N);
    CU(cuMemsetD32_v2, c, 0, N);
    CU(cuMemsetD32_v2, d, 0, N);

    CUgraph g;
    CUgraphNode ms, mc;
    CU(cuGraphCreate, &g, 0);
    CUDA_MEMSET_NODE_PARAMS sp = set_of(a, 5);
    CU(cuGraphAddMemsetNode, &ms, g, NULL, 0, &sp, ctx);
    CUDA_MEMCPY3D cp = copy_of(a, b);
    CU(cuGraphAddMemcpyNode, &mc, g, &ms, 1, &cp, ctx);
    CUDA_MEMSET_NODE_PARAMS sg;
    CUDA_MEMCPY3D cg;
    CU(cuGraphMemsetNodeGetParams, ms, &sg);
    CHECK(sg.dst == a && sg.value == 5 && sg.elementSize == 4 && sg.width == N && sg.height == 1, "memset params",
          sg.value, sg.width);
    CU(cuGraphMemcpyNodeGetParams, mc, &cg);
    CHECK(cg.srcDevice == a && cg.dstDevice == b && cg.WidthInBytes == 4 * N && cg.Depth == 1, "memcpy params",
          cg.srcDevice, cg.dstDevice);
    printf("ok get params\n");

    CUgraphExec e1, e2;
    CU(cuGraphInstantiateWithFlags, &e1, g, 0);
    sp = set_of(a, 7);
    CU(cuGraphMemsetNodeSetParams, ms, &sp);
    cp = copy_of(a, c);
    CU(cuGraphMemcpyNodeSetParams, mc, &cp);
    CU(cuGraphInstantiateWithFlags, &e2, g, 0);
    CU(cuGraphLaunch, e1, s);
    CU(cuStreamSynchronize, s);
    expect_all(b, 5, "an exec made before keeps its nodes");
    expect_all(c, 0, "an exec made before does not copy to the new destination");
    CU(cuGraphLaunch, e2, s);
    CU(cuStreamSynchronize, s);
    expect_all(c, 7, "an exec made after has the new nodes");
    CU(cuGraphMemsetNodeGetParams, ms, &sg);
    CU(cuGraphMemcpyNodeGetParams, mc, &cg);
    CHECK(sg.value == 7 && cg.dstDevice == c, "params after set", sg.value, cg.dstDevice);
    printf("ok graph set params\n");

    sp = set_of(a, 9);
    CU(cuGraphExecMemsetNodeSetParams, e1, ms, &sp, ctx);
    cp = copy_of(a, d);
    CU(cuGraphExecMemcpyNodeSetParams, e1, mc, &cp, ctx);
    CU(cuGraphLaunch, e1, s);
    CU(cuStreamSynchronize, s);
    expect_all(d, 9, "the exec's changed nodes");
    expect_all(b, 5, "the exec no longer copies to its old destination");
    CU(cuGraphLaunch, e2, s);
    CU(cuStreamSynchronize, s);
    expect_all(c, 7, "the other exec is unchanged");
    expect_all(d, 9, "the other exec does not copy to d");
    CU(cuGraphMemsetNodeGetParams, ms, &sg);
    CHECK(sg.value == 7, "an exec's change leaves the graph's node", sg.value, 7);
    printf("ok exec set params\n");

    CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphMemsetNodeGetParams, mc, &sg);
    CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphMemcpyNodeGetParams, ms, &cg);
    sp = set_of(a, 1);
    sp.elementSize = 3;
    CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphMemsetNodeSetParams, ms, &sp);
    sp = set_of(a, 1);
    sp.width = N / 2;
    sp.height = 2;
    sp.pitch = 2 * N;
    CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphExecMemsetNodeSetParams, e1, ms, &sp, ctx);
    CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphExecMemsetNodeSetParams, e1, mc, &sp, ctx);
    cp = copy_of(a, d);
    cp.WidthInBytes = 2 * N;
    cp.srcPitch = cp.dstPitch = 2 * N;
    cp.Height = 2;
    CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphExecMemcpyNodeSetParams, e1, mc, &cp, ctx);
    CU(cuGraphLaunch, e1, s);
    CU(cuStreamSynchronize, s);
    expect_all(d, 9, "refused changes change nothing");
    printf("ok refused\n");

    size_t ne = 0;
    CUgraphNode from[3], to[3];
    CU(cuGraphGetEdges, g, NULL, NULL, &ne);
    CHECK(ne == 1, "edge count", ne, 1);
    ne = 3;
    CU(cuGraphGetEdges, g, from, to, &ne);
    CHECK(ne == 1 && from[0] == ms && to[0] == mc && from[1] == NULL && to[2] == NULL, "edges", ne, 1);
    CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphGetEdges, g, from, NULL, &ne);
    printf("ok edges\n");

    CUdeviceptr e;
    CU(cuMemAlloc_v2, &e, 4 * N);
    CU(cuMemsetD32_v2, a, 3, N);
    CU(cuMemsetD32_v2, e, 0, N);
    CUgraph g2, gc;
    CUgraphNode n0, n1, n2, c0, c1, c2, found;
    CU(cuGraphCreate, &g2, 0);
    sp = set_of(a, 11);
    CU(cuGraphAddMemsetNode, &n0, g2, NULL, 0, &sp, ctx);
    cp = copy_of(a, e);
    CU(cuGraphAddMemcpyNode, &n1, g2, &n0, 1, &cp, ctx);
    CU(cuGraphAddEmptyNode, &n2, g2, &n0, 1);
    CU(cuGraphClone, &gc, g2);
    CU(cuGraphNodeFindInClone, &c0, n0, gc);
    CU(cuGraphNodeFindInClone, &c1, n1, gc);
    CU(cuGraphNodeFindInClone, &c2, n2, gc);
    CHECK(c0 && c1 && c2 && c0 != n0 && c1 != n1 && c1 != c0, "clone nodes", c0 != NULL, c1 != NULL);
    CUgraphNodeType t;
    CU(cuGraphNodeGetType, c1, &t);
    CHECK(t == CU_GRAPH_NODE_TYPE_MEMCPY, "the clone's copy node is a memcpy node", t, CU_GRAPH_NODE_TYPE_MEMCPY);
    CUgraphNode dl[2];
    size_t nd = 2;
    CU(cuGraphNodeGetDependencies, c1, dl, &nd);
    CHECK(nd == 1 && dl[0] == c0, "the clone's copy depends on the clone's memset", nd, dl[0] == c0);
    CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphNodeFindInClone, &found, ms, gc);
    CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphNodeFindInClone, &found, n0, g);

    CU(cuGraphRemoveDependencies, g2, &n0, &n1, 1);
    CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphRemoveDependencies, g2, &n0, &n1, 1);
    CUgraphEdgeData ed;
    memset(&ed, 0, sizeof ed);
    ed.type = 1;
    CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphRemoveDependencies_v2, g2, &n0, &n2, &ed, 1);
    CU(cuGraphGetEdges, g2, NULL, NULL, &ne);
    CHECK(ne == 1, "one edge left after the removal", ne, 1);
    CU(cuGraphAddDependencies, g2, &n1, &n0, 1);
    CU(cuGraphDestroyNode, n2);
    size_t nn = 0;
    CU(cuGraphGetNodes, g2, NULL, &nn);
    ne = 3;
    CU(cuGraphGetEdges, g2, from, to, &ne);
    CHECK(nn == 2 && ne == 1 && from[0] == n1 && to[0] == n0, "a destroyed node leaves with its edges", nn, ne);
    CUgraphExec e3, e4;
    CU(cuGraphInstantiateWithFlags, &e3, g2, 0);
    CU(cuGraphLaunch, e3, s);
    CU(cuStreamSynchronize, s);
    expect_all(e, 3, "the copy now runs before the memset");
    expect_all(a, 11, "the memset ran after the copy");

    CU(cuGraphDestroyNode, c2);
    CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphNodeFindInClone, &found, n2, gc);
    CU(cuGraphGetNodes, gc, NULL, &nn);
    CHECK(nn == 2, "the clone's node destroyed", nn, 2);
    CU(cuMemsetD32_v2, a, 3, N);
    CU(cuMemsetD32_v2, e, 0, N);
    CU(cuGraphInstantiateWithFlags, &e4, gc, 0);
    CU(cuGraphLaunch, e4, s);
    CU(cuStreamSynchronize, s);
    expect_all(e, 11, "the clone keeps the original's edges");
    memset(&ed, 0, sizeof ed);
    CU(cuGraphRemoveDependencies_v2, g2, &n1, &n0, &ed, 1);
    CU(cuGraphGetEdges, g2, NULL, NULL, &ne);
    CHECK(ne == 0, "no edge left", ne, 0);
    printf("ok editing\n");

    CUgraph gk, cap;
    CUgraphNode kms, kmc;
    CU(cuGraphClone, &gk, g);
    CU(cuGraphNodeFindInClone, &kms, ms, gk);
    CU(cuGraphNodeFindInClone, &kmc, mc, gk);
    CU(cuGraphMemsetNodeGetParams, kms, &sg);
    CU(cuGraphMemcpyNodeGetParams, kmc, &cg);
    CHECK(sg.dst == a && sg.value == 7 && sg.elementSize == 4 && sg.width == N && sg.height == 1,
          "a clone's memset parameters", sg.value, sg.width);
    CHECK(cg.srcMemoryType == CU_MEMORYTYPE_DEVICE && cg.srcDevice == a && cg.dstDevice == c &&
              cg.WidthInBytes == 4 * N && cg.Height == 1 && cg.Depth == 1,
          "a clone's memcpy parameters", cg.srcDevice == a, cg.dstDevice == c);
    uint32_t *pinned;
    CU(cuMemAllocHost_v2, (void **)&pinned, 4 * N);
    CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_RELAXED);
    CU(cuMemsetD32Async, a, 13, N, s);
    CU(cuMemcpyDtoDAsync_v2, b, a, 4 * N, s);
    CU(cuMemcpyHtoDAsync_v2, d, pinned, 4 * N, s);
    CU(cuStreamEndCapture, s, &cap);
    CUgraphNode cn[4];
    nn = 4;
    CU(cuGraphGetNodes, cap, cn, &nn);
    CHECK(nn == 3, "three captured nodes", nn, 3);
    CUgraphNodeType t0, t1, t2;
    CU(cuGraphNodeGetType, cn[0], &t0);
    CU(cuGraphNodeGetType, cn[1], &t1);
    CU(cuGraphNodeGetType, cn[2], &t2);
    CHECK(t0 == CU_GRAPH_NODE_TYPE_MEMSET && t1 == CU_GRAPH_NODE_TYPE_MEMCPY && t2 == CU_GRAPH_NODE_TYPE_MEMCPY,
          "captured node types", t0, t1);
    CU(cuGraphMemsetNodeGetParams, cn[0], &sg);
    CHECK(sg.dst == a && sg.value == 13 && sg.elementSize == 4 && sg.width == N && sg.height == 1,
          "a captured memset's parameters", sg.value, sg.width);
    CU(cuGraphMemcpyNodeGetParams, cn[1], &cg);
    CHECK(cg.srcMemoryType == CU_MEMORYTYPE_DEVICE && cg.dstMemoryType == CU_MEMORYTYPE_DEVICE && cg.srcDevice == a &&
              cg.dstDevice == b && cg.WidthInBytes == 4 * N && cg.Height == 1 && cg.Depth == 1,
          "a captured device copy's parameters", cg.srcDevice == a, cg.dstDevice == b);
    CU(cuGraphMemcpyNodeGetParams, cn[2], &cg);
    CHECK(cg.srcMemoryType == CU_MEMORYTYPE_HOST && cg.srcHost == pinned && cg.dstMemoryType == CU_MEMORYTYPE_DEVICE &&
              cg.dstDevice == d && cg.WidthInBytes == 4 * N,
          "a captured copy from page-locked memory names its host address", cg.srcHost == pinned, cg.dstDevice == d);
    CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphMemcpyNodeGetParams, cn[0], &cg);
    printf("ok parameters of captured and cloned nodes\n");
    CU(cuGraphDestroy, cap);
    CU(cuGraphDestroy, gk);
    CU(cuMemFreeHost, pinned);

    /* The generic node calls: cuGraphAddNode (and _v2) of a memset, a memcpy, an event record, an
     * empty and an event wait node, each of its own type; cuGraphNodeSetParams changes the graph's
     * memset (a later instantiation runs it), cuGraphExecNodeSetParams an instantiated graph's; event
     * nodes answer their events, and take others on the graph and on an instantiated graph. Refused:
     * parameters of another type than the node's, a conditional node without a handle, a node type
     * the pool has not (external semaphores). */
    {
        CUgraph gn;
        CUgraphNode n[5], extra;
        CUgraphExec xn, xn2;
        CUevent e1, e2, got;
        CUgraphNodeParams p;
        CU(cuEventCreate, &e1, 0);
        CU(cuEventCreate, &e2, 0);
        CU(cuGraphCreate, &gn, 0);
        memset(&p, 0, sizeof p);
        p.type = CU_GRAPH_NODE_TYPE_MEMSET;
        p.memset.dst = a, p.memset.value = 21, p.memset.elementSize = 4, p.memset.width = N, p.memset.height = 1;
        p.memset.ctx = ctx;
        CU(cuGraphAddNode, &n[0], gn, NULL, 0, &p);
        memset(&p, 0, sizeof p);
        p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
        p.memcpy.copyCtx = ctx;
        p.memcpy.copyParams = copy_of(a, b);
        CU(cuGraphAddNode_v2, &n[1], gn, &n[0], NULL, 1, &p);
        memset(&p, 0, sizeof p);
        p.type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
        p.eventRecord.event = e1;
        CU(cuGraphAddNode, &n[2], gn, &n[1], 1, &p);
        memset(&p, 0, sizeof p);
        p.type = CU_GRAPH_NODE_TYPE_EMPTY;
        CU(cuGraphAddNode, &n[3], gn, &n[2], 1, &p);
        memset(&p, 0, sizeof p);
        p.type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
        p.eventWait.event = e1;
        CU(cuGraphAddNode, &n[4], gn, &n[3], 1, &p);
        const CUgraphNodeType want[5] = {CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_MEMCPY,
                                         CU_GRAPH_NODE_TYPE_EVENT_RECORD, CU_GRAPH_NODE_TYPE_EMPTY,
                                         CU_GRAPH_NODE_TYPE_WAIT_EVENT};
        for (int i = 0; i < 5; i++) {
            CUgraphNodeType t;
            CU(cuGraphNodeGetType, n[i], &t);
            CHECK(t == want[i], "cuGraphAddNode's node type", i, t);
        }
        CU(cuGraphEventRecordNodeGetEvent, n[2], &got);
        CHECK(got == e1, "an event record node's event", got == e1, 1);
        CU(cuGraphEventWaitNodeGetEvent, n[4], &got);
        CHECK(got == e1, "an event wait node's event", got == e1, 1);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphEventWaitNodeGetEvent, n[2], &got);
        memset(&p, 0, sizeof p);
        p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL; /* no handle */
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddNode, &extra, gn, NULL, 0, &p);
        p.type = CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL;
        CU_EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuGraphAddNode, &extra, gn, NULL, 0, &p);
        printf("ok cuGraphAddNode: memset, memcpy, event record, empty and event wait nodes\n");

        CU(cuGraphInstantiateWithFlags, &xn, gn, 0);
        CU(cuGraphLaunch, xn, s);
        CU(cuStreamSynchronize, s);
        expect_all(b, 21, "cuGraphAddNode's memset and memcpy ran");
        memset(&p, 0, sizeof p);
        p.type = CU_GRAPH_NODE_TYPE_MEMSET;
        p.memset.dst = a, p.memset.value = 22, p.memset.elementSize = 4, p.memset.width = N, p.memset.height = 1;
        CU(cuGraphNodeSetParams, n[0], &p);
        p.memset.value = 23;
        CU(cuGraphExecNodeSetParams, xn, n[0], &p);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphNodeSetParams, n[1], &p); /* a memcpy node */
        CU(cuGraphEventRecordNodeSetEvent, n[2], e2);
        CU(cuGraphEventRecordNodeGetEvent, n[2], &got);
        CHECK(got == e2, "the record node's new event", got == e2, 1);
        CU(cuGraphEventWaitNodeSetEvent, n[4], e2);
        CU(cuGraphEventWaitNodeGetEvent, n[4], &got);
        CHECK(got == e2, "the wait node's new event", got == e2, 1);
        memset(&p, 0, sizeof p);
        p.type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
        p.eventRecord.event = e2;
        CU(cuGraphExecNodeSetParams, xn, n[2], &p);
        CU(cuGraphExecEventWaitNodeSetEvent, xn, n[4], e2);
        CU(cuGraphLaunch, xn, s);
        CU(cuStreamSynchronize, s);
        expect_all(b, 23, "cuGraphExecNodeSetParams changed the instantiated graph's memset");
        CU(cuGraphInstantiateWithFlags, &xn2, gn, 0);
        CU(cuGraphLaunch, xn2, s);
        CU(cuStreamSynchronize, s);
        expect_all(b, 22, "cuGraphNodeSetParams changed the graph's memset");
        printf("ok cuGraphNodeSetParams, cuGraphExecNodeSetParams, and event nodes' events\n");

        /* cuGraphExecUpdate from a graph with an edge the instantiated one has not: TOPOLOGY_CHANGED,
         * errorNode the edge's end and errorFromNode its start. */
        CUgraph g1, g2;
        CUgraphNode m1[2], m2[2];
        CUgraphExec x1;
        CUDA_MEMSET_NODE_PARAMS s1 = set_of(a, 1), s2 = set_of(c, 2);
        CU(cuGraphCreate, &g1, 0);
        CU(cuGraphAddMemsetNode, &m1[0], g1, NULL, 0, &s1, ctx);
        CU(cuGraphAddMemsetNode, &m1[1], g1, NULL, 0, &s2, ctx);
        CU(cuGraphCreate, &g2, 0);
        CU(cuGraphAddMemsetNode, &m2[0], g2, NULL, 0, &s1, ctx);
        CU(cuGraphAddMemsetNode, &m2[1], g2, &m2[0], 1, &s2, ctx);
        CU(cuGraphInstantiateWithFlags, &x1, g1, 0);
        CUgraphExecUpdateResultInfo info;
        memset(&info, 0, sizeof info);
        CU_EXPECT(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, cuGraphExecUpdate_v2, x1, g2, &info);
        CHECK(info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED && info.errorNode == m2[1] &&
                  info.errorFromNode == m2[0],
              "cuGraphExecUpdate names the differing edge", info.result, info.errorFromNode == m2[0]);
        printf("ok cuGraphExecUpdate's errorNode and errorFromNode name an edge that differs\n");
        CU(cuGraphExecDestroy, x1);
        CU(cuGraphDestroy, g1);
        CU(cuGraphDestroy, g2);

        /* cuGraphChildGraphNodeGetGraph: the child node's own graph (a copy of the graph added), which
         * takes new nodes as the node's; it cannot be destroyed on its own and goes with its parent. */
        CUgraph child, parent, own;
        CUgraphNode cnode, inner;
        CUgraphExec px;
        CUDA_MEMSET_NODE_PARAMS sa = set_of(a, 31), sc = set_of(c, 32);
        size_t count = 0;
        CU(cuGraphCreate, &child, 0);
        CU(cuGraphAddMemsetNode, &inner, child, NULL, 0, &sa, ctx);
        CU(cuGraphCreate, &parent, 0);
        CU(cuGraphAddChildGraphNode, &cnode, parent, NULL, 0, child);
        CU(cuGraphChildGraphNodeGetGraph, cnode, &own);
        CU(cuGraphGetNodes, own, NULL, &count);
        CHECK(own != child && count == 1, "the child node's graph is its own copy", own == child, count);
        CU(cuGraphAddMemsetNode, &inner, own, NULL, 0, &sc, ctx);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphDestroy, own);
        CU(cuMemsetD32_v2, a, 0, N);
        CU(cuMemsetD32_v2, c, 0, N);
        CU(cuGraphInstantiateWithFlags, &px, parent, 0);
        CU(cuGraphLaunch, px, s);
        CU(cuStreamSynchronize, s);
        expect_all(a, 31, "the child graph's node runs with the parent");
        expect_all(c, 32, "a node added to the child node's graph runs with the parent");
        CU(cuGraphExecDestroy, px);
        CU(cuGraphDestroy, parent);
        CU(cuGraphDestroy, child);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphGetNodes, own, NULL, &count);
        printf("ok cuGraphChildGraphNodeGetGraph: the node's own graph, changed, gone with its parent\n");
        CU(cuGraphExecDestroy, xn);
        CU(cuGraphExecDestroy, xn2);
        CU(cuGraphDestroy, gn);
        CU(cuEventDestroy_v2, e1);
        CU(cuEventDestroy_v2, e2);
    }

    CU(cuGraphExecDestroy, e3);
    CU(cuGraphExecDestroy, e4);
    CU(cuGraphDestroy, gc);
    CU(cuGraphDestroy, g2);
    CU(cuGraphExecDestroy, e1);
    CU(cuGraphExecDestroy, e2);
    CU(cuGraphDestroy, g);
    printf("done\n");
    return 0;
}
