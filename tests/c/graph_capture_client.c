/*
 * tests/c/graph_capture_client.c - capture into an existing graph and a capture's dependencies
 * through the driver API (run by pool-daemon/tests/graphs.rs under `gpupool run`, and by
 * tests/tests/c_client.rs on the simulator):
 *
 *   cc -std=c11 -Wall -Wextra -I shim-headers/include tests/c/graph_capture_client.c -o graph_capture_client -ldl
 *
 * A graph gets an explicit kernel node fill(a, 5); cuStreamBeginCaptureToGraph captures after it
 * K1: b += a; cuStreamGetCaptureInfo_v2 answers the graph and K1 as the one dependency;
 * cuStreamUpdateCaptureDependencies sets the dependencies to the fill node, K2: c += a is captured
 * after it, then adds K1 back, and K3: d += b is captured after both (two dependencies);
 * cuStreamEndCapture answers the same graph. Two launches give a = 5, b = c = 10, d = 15.
 * Errors: a node of another graph is CUDA_ERROR_INVALID_VALUE, a stream not capturing
 * CUDA_ERROR_ILLEGAL_STATE and status NONE. Topology queries on the result: four nodes (a
 * larger array gets NULL past them), the fill node the one root with two dependents, one node
 * with two dependencies, node types KERNEL and EMPTY. Capture modes: cuMemAlloc in a global-mode
 * capture is CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates it, allowed in relaxed interaction
 * mode (cuThreadExchangeStreamCaptureMode), and a relaxed capture forbids nothing.
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
    X(cuModuleLoadData) X(cuModuleGetFunction) X(cuMemAlloc_v2) X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2)       \
    X(cuStreamCreate) X(cuStreamSynchronize) X(cuLaunchKernel) X(cuGraphCreate) X(cuGraphDestroy)           \
    X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphAddKernelNode_v2)        \
    X(cuGraphAddEmptyNode) X(cuStreamBeginCaptureToGraph) X(cuStreamGetCaptureInfo_v2)                     \
    X(cuStreamUpdateCaptureDependencies) X(cuStreamEndCapture) X(cuGraphGetNodes) X(cuGraphGetRootNodes)        \
    X(cuGraphNodeGetType) X(cuGraphNodeGetDependencies) X(cuGraphNodeGetDependentNodes)                    \
    X(cuStreamBeginCapture_v2) X(cuThreadExchangeStreamCaptureMode) X(cuMemFree_v2)

#define DECLARE(name) static __typeof__(name) *p_##name;
FUNCS(DECLARE)

#include "cu_check.h"

#include "addto_fill_ptx.h"

enum { N = 1024 };

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    CU_LOAD_DRIVER(FUNCS)

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f_addto, f_fill;
    CUstream s;
    CU(cuInit, 0);
    CU(cuDeviceGet, &dev, 0);
    CU(cuDevicePrimaryCtxRetain, &ctx, dev);
    CU(cuCtxSetCurrent, ctx);
    CU(cuModuleLoadData, &mod, k_ptx);
    CU(cuModuleGetFunction, &f_addto, mod, "addto");
    CU(cuModuleGetFunction, &f_fill, mod, "fill");
    CU(cuStreamCreate, &s, 0);
    static uint32_t host[N];
    CUdeviceptr a, b, c, d;
    CUdeviceptr *bufs[] = {&a, &b, &c, &d};
    for (int i = 0; i < 4; i++) {
        CU(cuMemAlloc_v2, bufs[i], sizeof host);
        CU(cuMemcpyHtoD_v2, *bufs[i], host, sizeof host);
    }
    uint32_t n = N, five = 5;

    CUgraph g, other;
    CUgraphNode nfill, nother;
    CU(cuGraphCreate, &g, 0);
    CU(cuGraphCreate, &other, 0);
    CU(cuGraphAddEmptyNode, &nother, other, NULL, 0);
    void *fargs[] = {&a, &five, &n};
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    kp.func = f_fill;
    kp.gridDimX = N / 128, kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = 128, kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = fargs;
    CU(cuGraphAddKernelNode_v2, &nfill, g, NULL, 0, &kp);

    CUstreamCaptureStatus st;
    cuuint64_t id = 0;
    CUgraph cg = NULL;
    const CUgraphNode *deps = NULL;
    size_t ndeps = 7;
    CU(cuStreamGetCaptureInfo_v2, s, &st, &id, &cg, &deps, &ndeps);
    CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE, "not capturing yet", st, 0);
    CU_EXPECT(CUDA_ERROR_ILLEGAL_STATE, cuStreamUpdateCaptureDependencies, s, &nfill, 1, 0);

    CU(cuStreamBeginCaptureToGraph, s, g, &nfill, NULL, 1, CU_STREAM_CAPTURE_MODE_RELAXED);
    void *k1[] = {&b, &a, &n};
    CU(cuLaunchKernel, f_addto, N / 128, 1, 1, 128, 1, 1, 0, s, k1, NULL);
    CU(cuStreamGetCaptureInfo_v2, s, &st, &id, &cg, &deps, &ndeps);
    CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && id != 0, "capturing", st, id);
    CHECK(cg == g, "the capture's graph is the graph captured into", (long long)(uintptr_t)cg, (long long)(uintptr_t)g);
    CHECK(ndeps == 1 && deps && deps[0] != nfill, "one dependency: the captured kernel", ndeps, 0);
    CUgraphNode n1 = deps[0];
    printf("ok cuStreamBeginCaptureToGraph after an explicit node; cuStreamGetCaptureInfo_v2 names the graph and its dependency\n");

    CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuStreamUpdateCaptureDependencies, s, &nother, 1, 0);
    CU(cuStreamUpdateCaptureDependencies, s, &nfill, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES);
    CU(cuStreamGetCaptureInfo_v2, s, &st, &id, &cg, &deps, &ndeps);
    CHECK(ndeps == 1 && deps[0] == nfill, "set: the fill node alone", ndeps, 0);
    void *k2[] = {&c, &a, &n};
    CU(cuLaunchKernel, f_addto, N / 128, 1, 1, 128, 1, 1, 0, s, k2, NULL);
    CU(cuStreamUpdateCaptureDependencies, s, &n1, 1, CU_STREAM_ADD_CAPTURE_DEPENDENCIES);
    CU(cuStreamGetCaptureInfo_v2, s, &st, &id, &cg, &deps, &ndeps);
    CHECK(ndeps == 2, "add: K2 and K1", ndeps, 2);
    void *k3[] = {&d, &b, &n};
    CU(cuLaunchKernel, f_addto, N / 128, 1, 1, 128, 1, 1, 0, s, k3, NULL);
    CUgraph ended = NULL;
    CU(cuStreamEndCapture, s, &ended);
    CHECK(ended == g, "cuStreamEndCapture answers the graph captured into", 0, 0);
    printf("ok cuStreamUpdateCaptureDependencies sets and adds dependencies; a node of another graph is refused\n");

    CUgraphNode all[6];
    size_t count = 0;
    CU(cuGraphGetNodes, g, NULL, &count);
    CHECK(count == 4, "four nodes", count, 4);
    count = 6;
    CU(cuGraphGetNodes, g, all, &count);
    CHECK(count == 4 && all[4] == NULL && all[5] == NULL, "the rest NULL", count, 4);
    CUgraphNode roots[2];
    size_t nroots = 2;
    CU(cuGraphGetRootNodes, g, roots, &nroots);
    CHECK(nroots == 1 && roots[0] == nfill, "one root, the fill node", nroots, 1);
    size_t ndeps2 = 0;
    CU(cuGraphNodeGetDependentNodes, nfill, NULL, &ndeps2);
    CHECK(ndeps2 == 2, "the fill node has two dependents", ndeps2, 2);
    int with_two = 0;
    for (int i = 0; i < 4; i++) {
        size_t k = 0;
        CU(cuGraphNodeGetDependencies, all[i], NULL, &k);
        with_two += k == 2;
    }
    CHECK(with_two == 1, "one node depends on two", with_two, 1);
    CUgraphNodeType t1, t2;
    CU(cuGraphNodeGetType, n1, &t1);
    CU(cuGraphNodeGetType, nother, &t2);
    CHECK(t1 == CU_GRAPH_NODE_TYPE_KERNEL && t2 == CU_GRAPH_NODE_TYPE_EMPTY, "node types", t1, t2);
    printf("ok topology: cuGraphGetNodes, GetRootNodes, NodeGetDependencies, NodeGetDependentNodes, NodeGetType\n");

    CUgraphExec e;
    CU(cuGraphInstantiateWithFlags, &e, g, 0);
    CU(cuGraphLaunch, e, s);
    CU(cuGraphLaunch, e, s);
    CU(cuStreamSynchronize, s);
    uint32_t want[] = {5, 10, 10, 15};
    for (int k = 0; k < 4; k++) {
        CU(cuMemcpyDtoH_v2, host, *bufs[k], sizeof host);
        for (int i = 0; i < N; i++) CHECK(host[i] == want[k], "replayed result", host[i], want[k]);
    }
    printf("ok the graph replays the explicit node and the captured kernels in dependency order\n");
    CU(cuGraphExecDestroy, e);
    CU(cuGraphDestroy, g);
    CU(cuGraphDestroy, other);

    /* Capture modes: cuMemAlloc during the thread's own global-mode capture is refused and
     * invalidates it; in relaxed interaction mode (cuThreadExchangeStreamCaptureMode) the thread
     * may allocate; a relaxed capture forbids nothing. */
    {
        CUdeviceptr extra = 0;
        CUgraph got = (CUgraph)0x1;
        CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
        CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
        CU_EXPECT(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuMemAlloc_v2, &extra, 4096);
        CU_EXPECT(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture, s, &got);
        CHECK(got == NULL, "an invalidated capture ends without a graph", got == NULL, 1);
        CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
        CU(cuThreadExchangeStreamCaptureMode, &m);
        CU(cuMemAlloc_v2, &extra, 4096);
        CU(cuThreadExchangeStreamCaptureMode, &m);
        CHECK(m == CU_STREAM_CAPTURE_MODE_RELAXED, "the previous interaction mode comes back", m, 2);
        CU(cuStreamEndCapture, s, &got);
        CU(cuGraphDestroy, got);
        CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_RELAXED);
        CU(cuMemFree_v2, extra);
        CU(cuStreamEndCapture, s, &got);
        CU(cuGraphDestroy, got);
        printf("ok capture modes: an allocation in a global capture is refused, allowed when relaxed\n");
    }
    printf("done\n");
    return 0;
}
