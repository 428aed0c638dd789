/*
 * tests/c/graph_mem_client.c - graph memory nodes through the driver API, under a memory quota
 * (run by pool-daemon/tests/graphs.rs under `gpupool run --memory 64MiB`):
 *
 *   cc -std=c11 -Wall -Wextra -I shim-headers/include tests/c/graph_mem_client.c -o graph_mem_client -ldl
 *
 * An allocation node's address is returned when the node is added and is the same for every
 * instantiation; its memory is counted (cuMemGetInfo, the graph memory attributes) from
 * instantiation, kept for reuse after the instantiated graph is destroyed, and returned by
 * cuDeviceGraphMemTrim. A memset node and a kernel reading the allocation run at each launch.
 * A graph whose allocation would take the tenant past its quota fails to instantiate with
 * CUDA_ERROR_OUT_OF_MEMORY, and instantiates once memory is freed. CUDA's rules: one
 * instantiation at a time, no clone, no child-graph use, a free node frees an allocation node's
 * address once. An allocation not freed in its graph is the application's after a launch and is
 * freed with cuMemFree or cuMemFreeAsync. Capture into a graph with an allocation node
 * (cuStreamBeginCaptureToGraph after it): a captured memset fills the allocation and a captured
 * kernel adds it to a buffer, a free node follows; the graph holds its memory while instantiated,
 * runs, and trim returns it; through the pool the memory is mapped (and counted) when the capture
 * begins, and past the quota that is CUDA_ERROR_OUT_OF_MEMORY.
 *
 * Through the pool the memory is mapped when the graph is instantiated (pool-daemon's
 * daemon/graph_mem.rs says why); with --sim (the simulator, as NVIDIA documents) when it is
 * uploaded or launched, and a memset node naming it takes nothing when added.
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
    X(cuModuleLoadData) X(cuModuleGetFunction) X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemcpyHtoD_v2)          \
    X(cuMemcpyDtoH_v2) X(cuStreamCreate) X(cuStreamSynchronize) X(cuMemGetInfo_v2) X(cuGraphCreate)        \
    X(cuGraphDestroy) X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphUpload) X(cuGraphExecDestroy)                 \
    X(cuGraphAddKernelNode_v2) X(cuGraphAddMemsetNode) X(cuGraphAddChildGraphNode) X(cuGraphClone)          \
    X(cuGraphAddMemAllocNode) X(cuGraphAddMemFreeNode) X(cuGraphMemAllocNodeGetParams)                      \
    X(cuGraphMemFreeNodeGetParams) X(cuDeviceGraphMemTrim) X(cuDeviceGetGraphMemAttribute)                  \
    X(cuDeviceSetGraphMemAttribute) X(cuMemFreeAsync) X(cuGraphNodeGetType) X(cuStreamBeginCaptureToGraph)   \
    X(cuStreamEndCapture) X(cuStreamGetCaptureInfo_v2) X(cuMemsetD32Async) X(cuLaunchKernel) X(cuMemsetD32_v2)  \
    X(cuStreamBeginCapture_v2) X(cuMemAllocAsync) X(cuGraphGetNodes)

#define DECLARE(name) static __typeof__(name) *p_##name;
FUNCS(DECLARE)

#include "cu_check.h"

#include "addto_fill_ptx.h"

enum { N = 4096 };
static const size_t MiB = 1 << 20;
static CUdevice dev;
static CUfunction f_addto, f_fill;
static CUstream s;
static int sim; /* --sim: memory at upload or launch */

static size_t free_now(void) {
    size_t f, t;
    CU(cuMemGetInfo_v2, &f, &t);
    return f;
}

static uint64_t graph_attr(CUgraphMem_attribute a) {
    uint64_t v = 0;
    CU(cuDeviceGetGraphMemAttribute, dev, a, &v);
    return v;
}

static CUDA_MEM_ALLOC_NODE_PARAMS alloc_params(size_t bytes) {
    static CUmemAccessDesc rw;
    rw.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    rw.location.id = (int)dev;
    rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = (int)dev;
    p.accessDescs = &rw;
    p.accessDescCount = 1;
    p.bytesize = bytes;
    return p;
}

/* alloc(bytes) -> fill(alloc, 0x11111111) -> out += alloc -> [free] (kernel nodes: the memory is
 * mapped at instantiation). Returns the allocation node. */
static CUgraphNode build(CUgraph g, size_t bytes, CUdeviceptr out, int with_free, CUdeviceptr *dptr,
                         CUgraphNode *free_node) {
    CUDA_MEM_ALLOC_NODE_PARAMS ap = alloc_params(bytes);
    CUgraphNode na, nm, nk;
    CU(cuGraphAddMemAllocNode, &na, g, NULL, 0, &ap);
    CHECK(ap.dptr != 0, "the allocation node returns its address", ap.dptr, 0);
    *dptr = ap.dptr;
    uint32_t n = N, v = 0x11111111u;
    CUdeviceptr y = ap.dptr;
    void *fargs[] = {&y, &v, &n};
    void *args[] = {&out, &y, &n};
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    kp.func = f_fill;
    kp.gridDimX = N / 128, kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = 128, kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = fargs;
    CU(cuGraphAddKernelNode_v2, &nm, g, &na, 1, &kp);
    kp.func = f_addto;
    kp.kernelParams = args;
    CU(cuGraphAddKernelNode_v2, &nk, g, &nm, 1, &kp);
    if (with_free) CU(cuGraphAddMemFreeNode, free_node, g, &nk, 1, ap.dptr);
    return na;
}

static uint32_t out_host[N];

static void expect_out(CUdeviceptr out, uint32_t want, const char *what) {
    CU(cuStreamSynchronize, s);
    CU(cuMemcpyDtoH_v2, out_host, out, sizeof out_host);
    for (int i = 0; i < N; i++) CHECK(out_host[i] == want, what, out_host[i], want);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    sim = argc > 1 && strcmp(argv[1], "--sim") == 0;
    CU_LOAD_DRIVER(FUNCS)

    CUcontext ctx;
    CUmodule mod;
    CU(cuInit, 0);
    CU(cuDeviceGet, &dev, 0);
    CU(cuDevicePrimaryCtxRetain, &ctx, dev);
    CU(cuCtxSetCurrent, ctx);
    CU(cuModuleLoadData, &mod, k_ptx);
    CU(cuModuleGetFunction, &f_addto, mod, "addto");
    CU(cuModuleGetFunction, &f_fill, mod, "fill");
    CU(cuStreamCreate, &s, 0);
    static const uint32_t zero[N];
    CUdeviceptr out;
    CU(cuMemAlloc_v2, &out, sizeof zero);
    CU(cuMemcpyHtoD_v2, out, zero, sizeof zero);
    size_t total;
    size_t free0;
    CU(cuMemGetInfo_v2, &free0, &total);

    /* 1. Address at add time, memory at instantiation, reuse, trim. */
    {
        const size_t bytes = 16 * MiB;
        CUgraph g;
        CUgraphExec e, e2;
        CUdeviceptr p;
        CUgraphNode fnode;
        CU(cuGraphCreate, &g, 0);
        CUgraphNode na = build(g, bytes, out, 1, &p, &fnode);
        CHECK(free_now() == free0, "adding an allocation node takes no memory", free_now(), free0);
        CUDA_MEM_ALLOC_NODE_PARAMS got;
        CU(cuGraphMemAllocNodeGetParams, na, &got);
        CHECK(got.dptr == p && got.bytesize == bytes, "cuGraphMemAllocNodeGetParams", got.dptr, got.bytesize);
        CHECK(got.poolProps.location.id == (int)dev && got.accessDescCount == 1, "pool props", got.accessDescCount, 1);
        CUdeviceptr fp = 0;
        CU(cuGraphMemFreeNodeGetParams, fnode, &fp);
        CHECK(fp == p, "cuGraphMemFreeNodeGetParams", fp, p);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphMemFreeNodeGetParams, na, &fp);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphMemAllocNodeGetParams, fnode, &got);
        CUgraphNodeType ta, tf;
        CU(cuGraphNodeGetType, na, &ta);
        CU(cuGraphNodeGetType, fnode, &tf);
        CHECK(ta == CU_GRAPH_NODE_TYPE_MEM_ALLOC && tf == CU_GRAPH_NODE_TYPE_MEM_FREE, "memory node types", ta, tf);
        printf("ok allocation nodes: the address when added, the parameters back\n");

        CU(cuGraphInstantiateWithFlags, &e, g, 0);
        if (!sim) CHECK(free0 - free_now() == bytes, "instantiation maps the graph's memory", free0 - free_now(), bytes);
        if (sim) CHECK(free_now() == free0, "instantiation takes nothing yet", free_now(), free0);
        CU(cuGraphUpload, e, s);
        CU(cuStreamSynchronize, s);
        CHECK(free0 - free_now() == bytes, "the memory is the graph's by its upload", free0 - free_now(), bytes);
        CHECK(graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == bytes, "used", graph_attr(0), bytes);
        CHECK(graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == bytes, "reserved", graph_attr(2), bytes);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphInstantiateWithFlags, &e2, g, 0);
        CU(cuGraphLaunch, e, s);
        CU(cuGraphLaunch, e, s);
        expect_out(out, 2 * 0x11111111u, "two launches: fill then addto through graph memory");
        printf("ok graph memory is counted from instantiation and the graph runs in it\n");

        CU(cuGraphExecDestroy, e);
        CHECK(free0 - free_now() == bytes, "a destroyed instantiation's memory is kept", free0 - free_now(), bytes);
        CHECK(graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == 0, "used after destroy", graph_attr(0), 0);
        CHECK(graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == bytes, "kept", graph_attr(2), bytes);
        CU(cuGraphInstantiateWithFlags, &e, g, 0);
        CU(cuGraphLaunch, e, s);
        expect_out(out, 3 * 0x11111111u, "a launch of the second instantiation");
        CHECK(free0 - free_now() == bytes, "reinstantiation reuses the kept memory", free0 - free_now(), bytes);
        CU(cuGraphExecDestroy, e);
        CU(cuDeviceGraphMemTrim, dev);
        CHECK(free_now() == free0, "trim returns the memory", free_now(), free0);
        CHECK(graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == 0, "reserved after trim", graph_attr(2), 0);
        CHECK(graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) == bytes, "high", graph_attr(3), bytes);
        uint64_t zero64 = 0, one = 1;
        CU(cuDeviceSetGraphMemAttribute, dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &zero64);
        CHECK(graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) == 0, "high reset", graph_attr(3), 0);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuDeviceSetGraphMemAttribute, dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &one);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuDeviceSetGraphMemAttribute, dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT,
                  &zero64);

        /* CUDA's rules for graphs with memory nodes. */
        CUgraph c, parent;
        CUgraphNode nn;
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphClone, &c, g);
        CU(cuGraphCreate, &parent, 0);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddChildGraphNode, &nn, parent, NULL, 0, g);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemFreeNode, &nn, g, NULL, 0, p);     /* twice */
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemFreeNode, &nn, g, NULL, 0, out);   /* not a node's */
        CUDA_MEM_ALLOC_NODE_PARAMS bad = alloc_params(0);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemAllocNode, &nn, g, NULL, 0, &bad);
        bad = alloc_params(MiB);
        bad.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_INVALID;
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemAllocNode, &nn, g, NULL, 0, &bad);
        CU(cuGraphDestroy, parent);
        CU(cuGraphDestroy, g);
        CHECK(free_now() == free0, "nothing left after the graph", free_now(), free0);
        printf("ok graph memory is kept after its instantiation, reused, and trimmed back; CUDA's rules\n");
    }

    /* 2. Held to the quota: an allocation past it fails the instantiation. */
    {
        size_t big = (total * 3 / 4) & ~(2 * MiB - 1), held = total / 2;
        CUdeviceptr hold, p;
        CUgraph g;
        CUgraphExec e;
        CUgraphNode fnode;
        CU(cuMemAlloc_v2, &hold, held);
        size_t before = free_now();
        CU(cuGraphCreate, &g, 0);
        build(g, big, out, 1, &p, &fnode);
        if (sim) {
            CU(cuGraphInstantiateWithFlags, &e, g, 0);
            CU_EXPECT(CUDA_ERROR_OUT_OF_MEMORY, cuGraphUpload, e, s);
            CU(cuGraphExecDestroy, e);
        } else {
            CU_EXPECT(CUDA_ERROR_OUT_OF_MEMORY, cuGraphInstantiateWithFlags, &e, g, 0);
        }
        CHECK(free_now() == before, "a refused allocation holds nothing", free_now(), before);
        CU(cuMemFree_v2, hold);
        CU(cuGraphInstantiateWithFlags, &e, g, 0);
        CU(cuGraphLaunch, e, s);
        expect_out(out, 4 * 0x11111111u, "the graph runs once memory was freed");
        CHECK(free0 - free_now() == big, "the graph holds its memory", free0 - free_now(), big);
        CU(cuGraphExecDestroy, e);
        CU(cuGraphDestroy, g);
        CU(cuDeviceGraphMemTrim, dev);
        CHECK(free_now() == free0, "trim returns it", free_now(), free0);
        printf("ok a graph with a memory node is held to the quota\n");
    }

    /* 3. An allocation not freed in its graph is the application's after a launch. */
    {
        CUdeviceptr p;
        CUgraph g;
        CUgraphExec e;
        CU(cuGraphCreate, &g, 0);
        CUgraphNode na = build(g, 4 * MiB, out, 0, &p, NULL), nm;
        CHECK(free_now() == free0, "kernel nodes map nothing", free_now(), free0);
        /* A memset node naming the allocation maps it when added (the backend checks its memory). */
        CUDA_MEMSET_NODE_PARAMS mp = {.dst = p + 4 * N, .pitch = 0, .value = 0x22u, .elementSize = 1, .width = 4 * N,
                                      .height = 1};
        CU(cuGraphAddMemsetNode, &nm, g, &na, 1, &mp, NULL);
        size_t want = sim ? 0 : 4 * MiB;
        CHECK(free0 - free_now() == want, "a memset node maps graph memory", free0 - free_now(), want);
        CU(cuGraphInstantiateWithFlags, &e, g, 0);
        CU(cuGraphLaunch, e, s);
        CU(cuStreamSynchronize, s);
        CHECK(free0 - free_now() == 4 * MiB, "mapped once", free0 - free_now(), 4 * MiB);
        static uint32_t two[2 * N];
        CU(cuMemcpyDtoH_v2, two, p, sizeof two);
        CHECK(two[7] == 0x11111111u, "the allocation outlives the launch", two[7], 0x11111111u);
        CHECK(two[N + 7] == 0x22222222u, "the memset node ran", two[N + 7], 0x22222222u);
        CU(cuMemFree_v2, p);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemFree_v2, p);
        CU(cuGraphLaunch, e, s);
        CU(cuMemFreeAsync, p, s);
        CU(cuGraphExecDestroy, e);
        CU(cuGraphDestroy, g);
        CU(cuDeviceGraphMemTrim, dev);
        CHECK(free_now() == free0, "freed and trimmed", free_now(), free0);
        printf("ok an allocation not freed in its graph is freed by cuMemFree and cuMemFreeAsync\n");
    }

    /* 4. Capture into a graph with a memory node. */
    {
        CUgraph g, ended;
        CUgraphExec e;
        CUgraphNode na, nf, last;
        CUDA_MEM_ALLOC_NODE_PARAMS ap = alloc_params(4 * MiB);
        CU(cuGraphCreate, &g, 0);
        CU(cuGraphAddMemAllocNode, &na, g, NULL, 0, &ap);
        CU(cuStreamBeginCaptureToGraph, s, g, &na, NULL, 1, CU_STREAM_CAPTURE_MODE_RELAXED);
        size_t want = sim ? 0 : 4 * MiB;
        CHECK(free0 - free_now() == want, "the capture maps the graph's memory", free0 - free_now(), want);
        CU(cuMemsetD32Async, ap.dptr, 0x33u, N, s);
        CUdeviceptr y = ap.dptr;
        uint32_t n = N;
        void *args[] = {&out, &y, &n};
        CU(cuLaunchKernel, f_addto, N / 128, 1, 1, 128, 1, 1, 0, s, args, NULL);
        CUstreamCaptureStatus st;
        const CUgraphNode *deps = NULL;
        size_t nd = 0;
        CU(cuStreamGetCaptureInfo_v2, s, &st, NULL, NULL, &deps, &nd);
        CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && nd == 1, "the capture's last node", st, nd);
        last = deps[0];
        CU(cuStreamEndCapture, s, &ended);
        CHECK(ended == g, "the capture ends in the graph", ended == g, 1);
        CU(cuGraphAddMemFreeNode, &nf, g, &last, 1, ap.dptr);
        CU(cuGraphInstantiateWithFlags, &e, g, 0);
        CHECK(free0 - free_now() == want, "the instantiated graph holds its memory", free0 - free_now(), want);
        CU(cuMemsetD32_v2, out, 0, N);
        CU(cuGraphLaunch, e, s);
        expect_out(out, 0x33u, "the captured memset and kernel ran in the graph's memory");
        CHECK(free0 - free_now() == 4 * MiB, "the graph holds its memory", free0 - free_now(), 4 * MiB);
        CU(cuGraphExecDestroy, e);
        CU(cuGraphDestroy, g);
        CU(cuDeviceGraphMemTrim, dev);
        CHECK(free_now() == free0, "trim returns it", free_now(), free0);
        if (!sim) {
            size_t held = total / 2, big = (total * 3 / 4) & ~(2 * MiB - 1);
            CUdeviceptr hold;
            CU(cuMemAlloc_v2, &hold, held);
            size_t before = free_now();
            ap = alloc_params(big);
            CU(cuGraphCreate, &g, 0);
            CU(cuGraphAddMemAllocNode, &na, g, NULL, 0, &ap);
            CU_EXPECT(CUDA_ERROR_OUT_OF_MEMORY, cuStreamBeginCaptureToGraph, s, g, &na, NULL, 1,
                      CU_STREAM_CAPTURE_MODE_RELAXED);
            CHECK(free_now() == before, "a refused capture holds nothing", free_now(), before);
            CU(cuMemFree_v2, hold);
            CU(cuGraphDestroy, g);
        }
        printf("ok capture into a graph with a memory node\n");
    }
    /* Stream-ordered allocation captured: cuMemAllocAsync and cuMemFreeAsync on a capturing stream
     * are allocation and free nodes (the address at capture, the same at every launch); a
     * captured free must free a graph allocation. The memory is the graph's from its launch
     * (--sim) or from the capture (through the pool: the captured work names it), kept after the
     * instantiated graph, trimmed back. */
    {
        CUgraph g;
        CUgraphExec e;
        CUdeviceptr p = 0;
        CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
        CU(cuMemAllocAsync, &p, 4 * MiB, s);
        CHECK(p != 0, "a captured allocation has its address", p, 0);
        size_t want = sim ? 0 : 4 * MiB;
        CHECK(free0 - free_now() == want, "a captured allocation's memory", free0 - free_now(), want);
        CU(cuMemsetD32Async, p, 0x44u, N, s);
        CUdeviceptr y = p;
        uint32_t n = N;
        void *args[] = {&out, &y, &n};
        CU(cuLaunchKernel, f_addto, N / 128, 1, 1, 128, 1, 1, 0, s, args, NULL);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemFreeAsync, out, s); /* not a graph allocation */
        CU(cuMemFreeAsync, p, s);
        CU(cuStreamEndCapture, s, &g);
        CUgraphNode nodes[8];
        size_t count = 8;
        CU(cuGraphGetNodes, g, nodes, &count);
        CHECK(count == 4, "alloc, memset, kernel, free", count, 4);
        CUgraphNodeType first, last;
        CU(cuGraphNodeGetType, nodes[0], &first);
        CU(cuGraphNodeGetType, nodes[3], &last);
        CHECK(first == CU_GRAPH_NODE_TYPE_MEM_ALLOC && last == CU_GRAPH_NODE_TYPE_MEM_FREE, "captured node types",
              first, last);
        CUDA_MEM_ALLOC_NODE_PARAMS got;
        CU(cuGraphMemAllocNodeGetParams, nodes[0], &got);
        CHECK(got.dptr == p && got.bytesize == 4 * MiB, "the captured node's parameters", got.dptr, got.bytesize);
        CU(cuGraphInstantiateWithFlags, &e, g, 0);
        CU(cuMemsetD32_v2, out, 0, N);
        CU(cuGraphLaunch, e, s);
        CU(cuGraphLaunch, e, s);
        expect_out(out, 2 * 0x44u, "two launches of the captured graph in its memory");
        CHECK(free0 - free_now() == 4 * MiB, "the launched graph holds its memory", free0 - free_now(), 4 * MiB);
        CU(cuGraphExecDestroy, e);
        CU(cuGraphDestroy, g);
        CHECK(free0 - free_now() == 4 * MiB, "kept for reuse after the graph", free0 - free_now(), 4 * MiB);
        CU(cuDeviceGraphMemTrim, dev);
        CHECK(free_now() == free0, "trim returns the captured allocation", free_now(), free0);
        printf("ok captured stream-ordered allocation: nodes, the graph's memory, trimmed back\n");
    }
    CU(cuMemFree_v2, out);
    printf("done\n");
    return 0;
}
