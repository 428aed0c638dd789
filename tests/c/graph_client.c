/*
 * tests/c/graph_client.c - stream capture and CUDA graphs through the driver API, checked
 * against the same work done eagerly. Built with gpupool's own headers and run against
 * whatever libcuda.so.1 the loader finds (the simulator, or the pool under gpupool run):
 *
 *   cc -std=c11 -Wall -Wextra -I shim-headers/include tests/c/graph_client.c -o graph_client -ldl -lpthread
 *
 * One replay of the captured graph: copy x from page-locked host memory (read when the graph
 * runs: the host buffer changes between replays), y = 3*y + x + k (a kernel whose result
 * depends on the order of its launches), z = y (device to device), w = 0x5a5a5a5a (memset),
 * w[i] += y[i] (a second kernel), an event record. The graph is replayed --replays times
 * [1000]; the eager run does the same calls one by one on other buffers; both must equal the
 * CPU's result, bit for bit (integer arithmetic, wrapping). The captured step kernel's node is then
 * read back (cuGraphKernelNodeGetParams, _v2 and v1: the function handle, configuration, readable
 * parameters) and its k changed with cuGraphKernelNodeSetParams: a new instantiation runs the new k,
 * the instantiation made before keeps K; cuGraphExecGetFlags answers each instantiation's flags, and
 * cuGraphExecUpdate of a captured memset's exec from a captured kernel names the kernel node.
 *
 * Then the capture rules: cuStreamIsCapturing / cuStreamGetCaptureInfo_v2 during and after a
 * capture; the legacy stream cannot be captured; a copy from pageable memory and, in global
 * mode, cuMemAlloc are refused with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the
 * capture (cuStreamEndCapture: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, NULL graph); in relaxed
 * mode cuMemAlloc is allowed; the stream works normally afterwards; forged handles are refused;
 * a graph built node by node (memset, kernel, child graph, event record; dependencies; parameter
 * change, update from a clone, DOT text) runs as the CPU says; a host node without a function is
 * refused; a graph of memcpy (page-locked host to device), memset, kernel, a 2D device-to-device
 * memcpy and a memcpy back to page-locked memory runs as the CPU says, and a memcpy node from
 * pageable memory is refused.
 *
 * Host functions: a capture of kernel -> memcpy to page-locked `hin` -> cuLaunchHostFunc(relay)
 * -> memcpy from page-locked `hout` -> kernel, where relay reads hin and writes hout; replayed
 * --host-replays times [100], every result checked against the CPU (which it only matches if
 * each host call ran after the copy before it and before the copy after it) and every call
 * counted, on a thread other than main's, where a CUDA call is CUDA_ERROR_NOT_PERMITTED;
 * cuStreamAddCallback on a capturing stream is refused and invalidates the capture; an explicit
 * host node's parameters read back, changed on the graph (instantiated graphs keep theirs) and
 * on an instantiated graph; a forked child (a session of its own) runs a host node of its own
 * graph, and the parent's graph still runs its host node after the child exited.
 *
 * Output: "ok <check>" per check, "replays <n> ms <t>", "done"; a failure prints
 * "FAIL <check>: ..." on stderr and exits 1.
 */
#define _GNU_SOURCE
#include "gpupool_cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH 1 /* CUgraphInstantiate_flags */

#define FUNCS(X)                                                                                            \
    X(cuInit) X(cuGetErrorName) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent)               \
    X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleGetFunction) X(cuMemAlloc_v2) X(cuMemFree_v2)         \
    X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2) X(cuMemcpyHtoDAsync_v2)        \
    X(cuMemcpyDtoDAsync_v2) X(cuMemsetD32Async) X(cuStreamCreate) X(cuStreamDestroy_v2)                     \
    X(cuStreamSynchronize) X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize) X(cuEventDestroy_v2)     \
    X(cuLaunchKernel) X(cuStreamBeginCapture_v2) X(cuStreamEndCapture) X(cuStreamIsCapturing)              \
    X(cuStreamGetCaptureInfo_v2) X(cuGraphCreate) X(cuGraphDestroy) X(cuGraphInstantiateWithFlags)         \
    X(cuGraphUpload) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphAddEmptyNode) X(cuMemGetInfo_v2)          \
    X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuGraphAddKernelNode_v2) X(cuGraphAddMemsetNode)                        \
    X(cuGraphAddChildGraphNode) X(cuGraphAddEventRecordNode) X(cuGraphAddDependencies)                            \
    X(cuGraphExecKernelNodeSetParams_v2) X(cuGraphClone) X(cuGraphExecUpdate_v2) X(cuGraphDebugDotPrint)       \
    X(cuGraphAddHostNode) X(cuGraphAddMemcpyNode) X(cuLaunchHostFunc) X(cuStreamAddCallback)                 \
    X(cuGraphHostNodeGetParams) X(cuGraphHostNodeSetParams) X(cuGraphExecHostNodeSetParams) X(cuMemcpyDtoHAsync_v2) \
    X(cuGraphGetNodes) X(cuGraphNodeGetType) X(cuGraphKernelNodeGetParams_v2) X(cuGraphKernelNodeSetParams_v2)        \
    X(cuGraphKernelNodeGetParams) X(cuGraphExecGetFlags) X(cuGraphMemAllocNodeGetParams)                        \
    X(cuGraphMemFreeNodeGetParams) X(cuDeviceGraphMemTrim) X(cuThreadExchangeStreamCaptureMode)

#define DECLARE(name) static __typeof__(name) *p_##name;
FUNCS(DECLARE)

static const char *err_name(CUresult rc) {
    const char *n = NULL;
    if (!p_cuGetErrorName || p_cuGetErrorName(rc, &n) != CUDA_SUCCESS || !n) n = "?";
    return n;
}

static void fail(const char *check, const char *fmt, long a, long b) {
    fflush(stdout);
    fprintf(stderr, "FAIL %s: ", check);
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    exit(1);
}

/* A call that must succeed. */
#define CU(name, ...)                                                                                        \
    do {                                                                                                     \
        CUresult rc_ = p_##name(__VA_ARGS__);                                                                \
        if (rc_ != CUDA_SUCCESS) {                                                                           \
            fflush(stdout);                                                                                  \
            fprintf(stderr, "FAIL %s:%d %s: %d %s\n", __FILE__, __LINE__, #name, (int)rc_, err_name(rc_));   \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

/* A call that must fail with `want`. */
#define CU_EXPECT(want, name, ...)                                                                           \
    do {                                                                                                     \
        CUresult rc_ = p_##name(__VA_ARGS__);                                                                \
        if (rc_ != (want)) fail(#name, "returned %ld, expected %ld", (long)rc_, (long)(want));              \
    } while (0)

static void ok(const char *check) { printf("ok %s\n", check); }

/* step(y, x, k, n): y[i] = 3*y[i] + x[i] + k.  addto(w, y, n): w[i] += y[i]. (u32, wrapping) */
static const char k_ptx[] =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry step(.param .u64 y, .param .u64 x, .param .u32 k, .param .u32 n)\n{\n"
    "  .reg .pred %p<2>;\n  .reg .b32 %r<10>;\n  .reg .b64 %rd<8>;\n"
    "  ld.param.u64 %rd1, [y];\n  ld.param.u64 %rd2, [x];\n  ld.param.u32 %r1, [k];\n  ld.param.u32 %r2, [n];\n"
    "  mov.u32 %r3, %ctaid.x;\n  mov.u32 %r4, %ntid.x;\n  mov.u32 %r5, %tid.x;\n  mad.lo.s32 %r6, %r3, %r4, %r5;\n"
    "  setp.ge.u32 %p1, %r6, %r2;\n  @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd1, %rd1;\n  cvta.to.global.u64 %rd2, %rd2;\n"
    "  mul.wide.u32 %rd3, %r6, 4;\n  add.s64 %rd4, %rd1, %rd3;\n  add.s64 %rd5, %rd2, %rd3;\n"
    "  ld.global.u32 %r7, [%rd4];\n  ld.global.u32 %r8, [%rd5];\n"
    "  mad.lo.s32 %r9, %r7, 3, %r8;\n  add.s32 %r9, %r9, %r1;\n  st.global.u32 [%rd4], %r9;\n"
    "DONE:\n  ret;\n}\n"
    ".visible .entry addto(.param .u64 w, .param .u64 y, .param .u32 n)\n{\n"
    "  .reg .pred %p<2>;\n  .reg .b32 %r<10>;\n  .reg .b64 %rd<8>;\n"
    "  ld.param.u64 %rd1, [w];\n  ld.param.u64 %rd2, [y];\n  ld.param.u32 %r2, [n];\n"
    "  mov.u32 %r3, %ctaid.x;\n  mov.u32 %r4, %ntid.x;\n  mov.u32 %r5, %tid.x;\n  mad.lo.s32 %r6, %r3, %r4, %r5;\n"
    "  setp.ge.u32 %p1, %r6, %r2;\n  @%p1 bra DONE2;\n"
    "  cvta.to.global.u64 %rd1, %rd1;\n  cvta.to.global.u64 %rd2, %rd2;\n"
    "  mul.wide.u32 %rd3, %r6, 4;\n  add.s64 %rd4, %rd1, %rd3;\n  add.s64 %rd5, %rd2, %rd3;\n"
    "  ld.global.u32 %r7, [%rd4];\n  ld.global.u32 %r8, [%rd5];\n"
    "  add.s32 %r9, %r7, %r8;\n  st.global.u32 [%rd4], %r9;\n"
    "DONE2:\n  ret;\n}\n";

enum { N = 1000, K = 7 };
static CUfunction f_step, f_addto;
static CUstream s;
static CUevent ev;
static uint32_t *pinned; /* x's host copy, page-locked */

/* One round of the work on (x, y, z, w), on stream s. */
static void round_on(CUdeviceptr x, CUdeviceptr y, CUdeviceptr z, CUdeviceptr w) {
    uint32_t k = K, n = N;
    void *a1[] = {&y, &x, &k, &n};
    void *a2[] = {&w, &y, &n};
    CU(cuMemcpyHtoDAsync_v2, x, pinned, N * 4, s);
    CU(cuLaunchKernel, f_step, (N + 127) / 128, 1, 1, 128, 1, 1, 0, s, a1, NULL);
    CU(cuMemcpyDtoDAsync_v2, z, y, N * 4, s);
    CU(cuMemsetD32Async, w, 0x5a5a5a5au, N, s);
    CU(cuLaunchKernel, f_addto, (N + 127) / 128, 1, 1, 128, 1, 1, 0, s, a2, NULL);
    CU(cuEventRecord, ev, s);
}

static void set_x(int r) {
    for (int i = 0; i < N; i++) pinned[i] = (uint32_t)(i * 2654435761u) ^ (uint32_t)r;
}

static void read_back(uint32_t *dst, CUdeviceptr src) { CU(cuMemcpyDtoH_v2, dst, src, N * 4); }

/* ---- host functions ---- */
static pthread_t main_thread;
static uint32_t *hin, *hout; /* page-locked */
static int relay_calls, relay_on_main, relay_cuda_rc;

/* hout = 2 * hin + (calls so far): what the next copy sends to the device. */
static void relay(void *user) {
    (void)user;
    if (pthread_equal(pthread_self(), main_thread)) relay_on_main++;
    for (int i = 0; i < N; i++) hout[i] = 2u * hin[i] + (uint32_t)relay_calls;
    relay_cuda_rc = (int)p_cuCtxSynchronize();
    relay_calls++;
}

/* Counts into the int it is given. */
static void mark(void *user) {
    if (pthread_equal(pthread_self(), main_thread)) relay_on_main++;
    ++*(int *)user;
}

static void a_callback(CUstream hs, CUresult status, void *user) {
    (void)hs, (void)status;
    ++*(int *)user;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int replays = 1000, host_replays = 100;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--replays") == 0) replays = atoi(argv[i + 1]);
        if (strcmp(argv[i], "--host-replays") == 0) host_replays = atoi(argv[i + 1]);
    }
    main_thread = pthread_self();
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "FAIL dlopen: %s\n", dlerror());
        return 1;
    }
#define RESOLVE(name)                                                                                        \
    if (!(p_##name = (__typeof__(name) *)dlsym(lib, #name))) {                                               \
        fprintf(stderr, "FAIL dlsym %s\n", #name);                                                           \
        return 1;                                                                                            \
    }
    FUNCS(RESOLVE)

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CU(cuInit, 0);
    CU(cuDeviceGet, &dev, 0);
    CU(cuDevicePrimaryCtxRetain, &ctx, dev);
    CU(cuCtxSetCurrent, ctx);
    CU(cuModuleLoadData, &mod, k_ptx);
    CU(cuModuleGetFunction, &f_step, mod, "step");
    CU(cuModuleGetFunction, &f_addto, mod, "addto");
    CU(cuStreamCreate, &s, 0);
    CU(cuEventCreate, &ev, 0);
    CU(cuMemHostAlloc, (void **)&pinned, N * 4, CU_MEMHOSTALLOC_PORTABLE);
    CUdeviceptr g[4], e[4]; /* graph's and eager run's x, y, z, w */
    for (int i = 0; i < 4; i++) {
        CU(cuMemAlloc_v2, &g[i], N * 4);
        CU(cuMemAlloc_v2, &e[i], N * 4);
    }
    static uint32_t zero[N];
    for (int i = 0; i < 4; i++) {
        CU(cuMemcpyHtoD_v2, g[i], zero, sizeof zero);
        CU(cuMemcpyHtoD_v2, e[i], zero, sizeof zero);
    }

    /* ---- capture ---- */
    CUstreamCaptureStatus st;
    cuuint64_t id1 = 0, id2 = 0;
    CU(cuStreamIsCapturing, s, &st);
    if (st != CU_STREAM_CAPTURE_STATUS_NONE) fail("not capturing before", "status %ld %ld", st, 0);
    CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
    CU(cuStreamIsCapturing, s, &st);
    if (st != CU_STREAM_CAPTURE_STATUS_ACTIVE) fail("capturing", "status %ld %ld", st, 0);
    CU(cuStreamGetCaptureInfo_v2, s, &st, &id1, NULL, NULL, NULL);
    CU(cuStreamGetCaptureInfo_v2, s, &st, &id2, NULL, NULL, NULL);
    if (st != CU_STREAM_CAPTURE_STATUS_ACTIVE || id1 == 0 || id1 != id2)
        fail("capture info", "id %ld then %ld", (long)id1, (long)id2);
    round_on(g[0], g[1], g[2], g[3]);
    CUgraph graph = NULL;
    CU(cuStreamEndCapture, s, &graph);
    if (!graph) fail("end capture", "NULL graph %ld %ld", 0, 0);
    CU(cuStreamIsCapturing, s, &st);
    if (st != CU_STREAM_CAPTURE_STATUS_NONE) fail("not capturing after", "status %ld %ld", st, 0);
    CU(cuStreamSynchronize, s);
    uint32_t got[N], want[N], eager[N];
    read_back(got, g[1]);
    for (int i = 0; i < N; i++)
        if (got[i] != 0) fail("capture does not run the work", "y[%ld] = %ld", i, got[i]);
    ok("capture records without running");

    CUgraphExec exec = NULL;
    CU(cuGraphInstantiateWithFlags, &exec, graph, 0);
    CU(cuGraphUpload, exec, s);

    /* ---- replay against eager and the CPU ---- */
    static uint32_t cy[N], cw[N];
    memset(cy, 0, sizeof cy);
    uint64_t graph_ns = 0;
    for (int r = 0; r < replays; r++) {
        set_x(r);
        uint64_t t = now_ns();
        CU(cuGraphLaunch, exec, s);
        CU(cuStreamSynchronize, s); /* the pinned buffer is rewritten for the next replay */
        graph_ns += now_ns() - t;
        round_on(e[0], e[1], e[2], e[3]);
        CU(cuStreamSynchronize, s);
        for (int i = 0; i < N; i++) {
            cy[i] = 3u * cy[i] + pinned[i] + K;
            cw[i] = 0x5a5a5a5au + cy[i];
        }
    }
    CU(cuEventSynchronize, ev);
    for (int b = 1; b < 4; b++) {
        read_back(got, g[b]);
        read_back(eager, e[b]);
        const uint32_t *cpu = b == 3 ? cw : cy;
        memcpy(want, cpu, sizeof want);
        for (int i = 0; i < N; i++) {
            if (got[i] != eager[i]) fail("graph equals eager", "index %ld differs (buffer %ld)", i, b);
            if (got[i] != want[i]) fail("graph equals the CPU", "index %ld differs (buffer %ld)", i, b);
        }
    }
    printf("replays %d ms %.1f\n", replays, graph_ns / 1e6);
    ok("graph replays equal the eager run and the CPU");

    /* The captured step kernel's node read back (the function handle this program holds, its
     * configuration, parameters it can read), its k changed with cuGraphKernelNodeSetParams: a new
     * instantiation runs the new k, the one made before keeps K (instantiated graphs keep theirs). */
    {
        CUgraphNode nodes[16], nk = NULL;
        size_t count = 16;
        CUDA_KERNEL_NODE_PARAMS kp;
        CUDA_KERNEL_NODE_PARAMS_v1 k1;
        CU(cuGraphGetNodes, graph, nodes, &count);
        for (size_t i = 0; i < count && !nk; i++) {
            CUgraphNodeType t;
            CU(cuGraphNodeGetType, nodes[i], &t);
            if (t != CU_GRAPH_NODE_TYPE_KERNEL) continue;
            memset(&kp, 0, sizeof kp);
            CU(cuGraphKernelNodeGetParams_v2, nodes[i], &kp);
            if (kp.func == f_step) nk = nodes[i];
        }
        if (!nk) fail("captured kernel node", "no node runs step among %ld nodes %ld", (long)count, 0);
        if (kp.gridDimX != (N + 127) / 128 || kp.gridDimY != 1 || kp.blockDimX != 128 || kp.blockDimZ != 1 ||
            kp.sharedMemBytes != 0 || !kp.kernelParams || kp.extra)
            fail("kernel node configuration", "grid %ld block %ld", (long)kp.gridDimX, (long)kp.blockDimX);
        if (*(CUdeviceptr *)kp.kernelParams[0] != g[1] || *(CUdeviceptr *)kp.kernelParams[1] != g[0] ||
            *(uint32_t *)kp.kernelParams[2] != K || *(uint32_t *)kp.kernelParams[3] != N)
            fail("kernel node parameters", "k %ld n %ld", (long)*(uint32_t *)kp.kernelParams[2],
                 (long)*(uint32_t *)kp.kernelParams[3]);
        CU(cuGraphKernelNodeGetParams, nk, &k1);
        if (k1.func != f_step || *(uint32_t *)k1.kernelParams[2] != K)
            fail("kernel node parameters (v1)", "k %ld %ld", (long)*(uint32_t *)k1.kernelParams[2], 0);
        uint32_t k_new = 1000003u;
        void *args[4] = {kp.kernelParams[0], kp.kernelParams[1], &k_new, kp.kernelParams[3]};
        kp.kernelParams = args;
        CU(cuGraphKernelNodeSetParams_v2, nk, &kp);
        CUDA_KERNEL_NODE_PARAMS back;
        CU(cuGraphKernelNodeGetParams_v2, nk, &back);
        if (*(uint32_t *)back.kernelParams[2] != k_new)
            fail("kernel node parameters after set", "k %ld %ld", (long)*(uint32_t *)back.kernelParams[2], 0);
        CUgraphExec xk = NULL;
        cuuint64_t flags = 99;
        CU(cuGraphInstantiateWithFlags, &xk, graph, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
        CU(cuGraphExecGetFlags, xk, &flags);
        if (flags != CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) fail("cuGraphExecGetFlags", "%ld %ld", (long)flags, 1);
        CU(cuGraphExecGetFlags, exec, &flags);
        if (flags != 0) fail("cuGraphExecGetFlags", "%ld %ld", (long)flags, 0);
        for (int pass = 0; pass < 2; pass++) {
            set_x(1000 + pass);
            CU(cuGraphLaunch, pass == 0 ? xk : exec, s);
            CU(cuStreamSynchronize, s);
            for (int i = 0; i < N; i++) cy[i] = 3u * cy[i] + pinned[i] + (pass == 0 ? k_new : (uint32_t)K);
            read_back(got, g[1]);
            for (int i = 0; i < N; i++)
                if (got[i] != cy[i]) fail("kernel node set params", "index %ld differs (pass %ld)", i, pass);
        }
        CU(cuGraphExecDestroy, xk);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphExecGetFlags, xk, &flags);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphKernelNodeGetParams_v2, nodes[0] == nk ? nodes[1] : nodes[0], &back);
        ok("a captured kernel node's parameters read back and changed: the new instantiation runs them");

        /* cuGraphExecUpdate from a captured graph whose one node is a kernel where the exec's is a
         * memset: NODE_TYPE_CHANGED, errorNode the captured kernel node (a handle that works). */
        CUgraph gm1 = NULL, gk1 = NULL;
        CUgraphExec xm1 = NULL;
        uint32_t kk = K, nn = N;
        CUdeviceptr yy = g[1], xx = g[0];
        void *a1[] = {&yy, &xx, &kk, &nn};
        CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
        CU(cuMemsetD32Async, g[2], 1u, N, s);
        CU(cuStreamEndCapture, s, &gm1);
        CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
        CU(cuLaunchKernel, f_step, (N + 127) / 128, 1, 1, 128, 1, 1, 0, s, a1, NULL);
        CU(cuStreamEndCapture, s, &gk1);
        CU(cuGraphInstantiateWithFlags, &xm1, gm1, 0);
        CUgraphExecUpdateResultInfo info;
        memset(&info, 0, sizeof info);
        CU_EXPECT(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, cuGraphExecUpdate_v2, xm1, gk1, &info);
        CUgraphNodeType et = CU_GRAPH_NODE_TYPE_EMPTY;
        if (info.result != CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED || !info.errorNode)
            fail("cuGraphExecUpdate errorNode", "result %ld node %ld", (long)info.result, (long)(info.errorNode != NULL));
        CU(cuGraphNodeGetType, info.errorNode, &et);
        CU(cuGraphKernelNodeGetParams_v2, info.errorNode, &back);
        if (et != CU_GRAPH_NODE_TYPE_KERNEL || back.func != f_step) fail("cuGraphExecUpdate errorNode", "type %ld %ld", et, 0);
        CU(cuGraphExecDestroy, xm1);
        CU(cuGraphDestroy, gm1);
        CU(cuGraphDestroy, gk1);
        ok("cuGraphExecGetFlags, and cuGraphExecUpdate's errorNode for a captured graph");
    }

    /* A page-locked buffer freed while a graph copies from it: the daemon keeps its mapping until
     * the graph goes (the copy reads what was there) and keeps serving. */
    {
        uint32_t *tmp = NULL;
        CUgraph g2 = NULL;
        CUgraphExec x2 = NULL;
        CU(cuMemHostAlloc, (void **)&tmp, N * 4, CU_MEMHOSTALLOC_PORTABLE);
        for (int i = 0; i < N; i++) tmp[i] = 0xabc00000u + (uint32_t)i;
        CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_RELAXED);
        CU(cuMemcpyHtoDAsync_v2, g[0], tmp, N * 4, s);
        CU(cuStreamEndCapture, s, &g2);
        CU(cuGraphInstantiateWithFlags, &x2, g2, 0);
        CU(cuMemFreeHost, tmp);
        CU(cuMemcpyHtoD_v2, g[0], zero, sizeof zero);
        CU(cuGraphLaunch, x2, s);
        CU(cuStreamSynchronize, s);
        read_back(got, g[0]);
        if (got[7] != 0xabc00007u) fail("freed page-locked source", "got %ld at %ld", (long)got[7], 7);
        CU(cuGraphExecDestroy, x2);
        CU(cuGraphDestroy, g2);
        ok("a page-locked buffer freed under a graph stays readable by it");
    }

    /* Graph memory: cuMemAllocAsync and cuMemFreeAsync captured are allocation and free nodes of
     * the graph, as in CUDA. Through the pool the memory is mapped, and counted against the
     * tenant's quota, when the allocation is captured (what is captured after it names it), so
     * past the quota the captured allocation fails; the address is the same at every launch; the
     * memory stays with the graph's instantiation and then in the graph memory kept for reuse,
     * until cuDeviceGraphMemTrim gives it back. */
    {
        size_t free0 = 0, free1 = 0, free2 = 0, total = 0, count = 16;
        const size_t big = 8u << 20;
        CUdeviceptr tmpd = 0, huge = 0;
        CUgraph gm = NULL;
        CUgraphExec xm = NULL;
        CUgraphNode nodes[16];
        CU(cuMemGetInfo_v2, &free0, &total);
        CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
        CU(cuMemAllocAsync, &tmpd, big, s);
        CU_EXPECT(CUDA_ERROR_OUT_OF_MEMORY, cuMemAllocAsync, &huge, free0, s);
        CU(cuMemsetD32Async, tmpd, 0x77u, N, s);
        CU(cuMemcpyDtoDAsync_v2, g[2], tmpd, N * 4, s);
        CU(cuMemFreeAsync, tmpd, s);
        CU(cuStreamEndCapture, s, &gm);
        CU(cuGraphGetNodes, gm, nodes, &count);
        if (count != 4) fail("captured graph memory nodes", "%ld nodes, not %ld", (long)count, 4);
        int allocs = 0, frees = 0;
        for (size_t i = 0; i < count; i++) {
            CUgraphNodeType t;
            CU(cuGraphNodeGetType, nodes[i], &t);
            if (t == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
                CUDA_MEM_ALLOC_NODE_PARAMS ap;
                CU(cuGraphMemAllocNodeGetParams, nodes[i], &ap);
                if (ap.dptr != tmpd || ap.bytesize != big || ap.poolProps.location.id != 0)
                    fail("captured allocation node", "dptr %#lx, bytesize %ld", (long)ap.dptr, (long)ap.bytesize);
                allocs++;
            }
            if (t == CU_GRAPH_NODE_TYPE_MEM_FREE) {
                CUdeviceptr fp = 0;
                CU(cuGraphMemFreeNodeGetParams, nodes[i], &fp);
                if (fp != tmpd) fail("captured free node", "frees %#lx, not %#lx", (long)fp, (long)tmpd);
                frees++;
            }
        }
        if (allocs != 1 || frees != 1) fail("captured graph memory nodes", "%ld allocation and %ld free nodes", allocs, frees);
        CU(cuMemGetInfo_v2, &free1, &total);
        if (free1 + big > free0) fail("graph memory counted", "free %ld MiB, was %ld MiB", free1 >> 20, free0 >> 20);
        CU(cuGraphInstantiateWithFlags, &xm, gm, 0);
        CU(cuMemcpyHtoD_v2, g[2], zero, sizeof zero);
        for (int r = 0; r < 2; r++) CU(cuGraphLaunch, xm, s);
        CU(cuStreamSynchronize, s);
        read_back(got, g[2]);
        for (int i = 0; i < N; i++)
            if (got[i] != 0x77u) fail("graph memory", "index %ld is %ld", i, got[i]);
        CU(cuGraphDestroy, gm); /* the instantiated graph still holds it */
        CU(cuMemGetInfo_v2, &free2, &total);
        if (free2 != free1) fail("graph memory held by the exec", "free %ld, was %ld", (long)free2, (long)free1);
        CU(cuGraphExecDestroy, xm);
        CU(cuMemGetInfo_v2, &free2, &total);
        if (free2 != free1) fail("graph memory kept for reuse", "free %ld, was %ld", (long)free2, (long)free1);
        CU(cuDeviceGraphMemTrim, dev);
        CU(cuMemGetInfo_v2, &free2, &total);
        if (free2 != free0) fail("graph memory returned", "free %ld, was %ld", (long)free2, (long)free0);
        /* A captured free must free a graph allocation (CUDA documents it). */
        CUdeviceptr plain = 0;
        CU(cuMemAlloc_v2, &plain, 4096);
        CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_RELAXED);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuMemFreeAsync, plain, s);
        CU(cuStreamEndCapture, s, &gm);
        CU(cuGraphDestroy, gm);
        CU(cuMemFree_v2, plain);
        ok("captured graph memory is nodes, counted while held and returned by trim");
    }

    /* ---- capture rules ---- */
    CUgraph bad = (CUgraph)0x1;
    CU_EXPECT(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuStreamBeginCapture_v2, NULL, CU_STREAM_CAPTURE_MODE_GLOBAL);
    ok("the legacy stream cannot be captured");

    static uint32_t pageable[N];
    CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
    CU_EXPECT(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuMemcpyHtoDAsync_v2, g[0], pageable, sizeof pageable, s);
    CU(cuStreamIsCapturing, s, &st);
    if (st != CU_STREAM_CAPTURE_STATUS_INVALIDATED) fail("pageable copy invalidates", "status %ld %ld", st, 0);
    CU_EXPECT(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture, s, &bad);
    if (bad != NULL) fail("invalidated capture", "graph not NULL %ld %ld", 0, 0);
    ok("a pageable copy invalidates the capture");

    CUdeviceptr extra = 0;
    CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
    CU_EXPECT(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuMemAlloc_v2, &extra, 4096);
    bad = (CUgraph)0x1;
    CU_EXPECT(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture, s, &bad);
    ok("cuMemAlloc during a global capture is refused and invalidates it");

    /* The thread's interaction mode (what PyTorch's allocator does around its cudaMalloc during a
     * capture): relaxed lets it allocate during its own global capture; swapped back, it is
     * forbidden again; an unknown mode is refused. */
    {
        CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
        CUgraph ok_graph = NULL;
        CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
        CU(cuThreadExchangeStreamCaptureMode, &m);
        if (m != CU_STREAM_CAPTURE_MODE_GLOBAL) fail("interaction mode", "previous %ld, not global %ld", m, 0);
        CU(cuMemAlloc_v2, &extra, 4096);
        CU(cuMemFree_v2, extra);
        CU(cuThreadExchangeStreamCaptureMode, &m);
        if (m != CU_STREAM_CAPTURE_MODE_RELAXED) fail("interaction mode", "previous %ld, not relaxed %ld", m, 2);
        CU(cuStreamEndCapture, s, &ok_graph);
        CU(cuGraphDestroy, ok_graph);
        CUstreamCaptureMode unknown = (CUstreamCaptureMode)7;
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuThreadExchangeStreamCaptureMode, &unknown);
        CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
        CU_EXPECT(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuMemAlloc_v2, &extra, 4096);
        bad = (CUgraph)0x1;
        CU_EXPECT(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture, s, &bad);
        ok("cuThreadExchangeStreamCaptureMode: relaxed, the thread allocates during its global capture");
    }

    CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_RELAXED);
    CU(cuMemAlloc_v2, &extra, 4096);
    CUgraph empty = NULL;
    CU(cuStreamEndCapture, s, &empty);
    CU(cuMemFree_v2, extra);
    ok("cuMemAlloc during a relaxed capture is allowed");

    /* An empty graph (captured or created) launches and does nothing. */
    CUgraph created = NULL;
    CUgraphExec e2 = NULL, e3 = NULL;
    CU(cuGraphCreate, &created, 0);
    CU(cuGraphInstantiateWithFlags, &e2, empty, 0);
    CU(cuGraphInstantiateWithFlags, &e3, created, 0);
    CU(cuGraphLaunch, e2, s);
    CU(cuGraphLaunch, e3, s);
    CU(cuStreamSynchronize, s);
    ok("empty graphs launch");

    /* The stream works normally after all this. */
    set_x(12345);
    CU(cuMemcpyHtoDAsync_v2, g[0], pinned, N * 4, s);
    CU(cuStreamSynchronize, s);
    read_back(got, g[0]);
    if (got[5] != pinned[5]) fail("stream after captures", "%ld vs %ld", got[5], pinned[5]);
    ok("the stream works after captures");

    /* Forged handles. */
    CUgraphExec forged = (CUgraphExec)(uintptr_t)0x7777779e;
    CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphDestroy, (CUgraph)(uintptr_t)0x1234);
    CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphExecDestroy, forged);
    ok("forged handles are refused");

    /* Graphs built node by node: y = 0x5a (memset), then fill... as nodes added out of order and
     * ordered by cuGraphAddDependencies: memset -> step(k) -> child(addto) -> event record. */
    {
        CUgraph gb = NULL, child = NULL, cl = NULL, g9 = NULL;
        CUgraphExec xb = NULL;
        CUgraphNode nm = NULL, ns = NULL, nc = NULL, ne = NULL, na = NULL, n9 = NULL, bad = NULL;
        CUdeviceptr x = g[0], y = g[1], w = g[3];
        uint32_t k = 5, n = N, k2 = 11;
        void *sa[] = {&y, &x, &k, &n};
        void *aa[] = {&w, &y, &n};
        CUDA_KERNEL_NODE_PARAMS kp;
        memset(&kp, 0, sizeof kp);
        kp.func = f_step;
        kp.gridDimX = (N + 127) / 128, kp.gridDimY = kp.gridDimZ = 1;
        kp.blockDimX = 128, kp.blockDimY = kp.blockDimZ = 1;
        kp.kernelParams = sa;
        CUDA_MEMSET_NODE_PARAMS mp = {.dst = y, .pitch = 0, .value = 2, .elementSize = 4, .width = N, .height = 1};
        set_x(77);
        CU(cuMemcpyHtoD_v2, x, pinned, N * 4);
        CU(cuMemcpyHtoD_v2, w, zero, sizeof zero);
        CU(cuGraphCreate, &gb, 0);
        CU(cuGraphAddKernelNode_v2, &ns, gb, NULL, 0, &kp);
        CU(cuGraphAddMemsetNode, &nm, gb, NULL, 0, &mp, ctx);
        CU(cuGraphAddDependencies, gb, &nm, &ns, 1);
        CU(cuGraphCreate, &child, 0);
        CUDA_KERNEL_NODE_PARAMS ap = kp;
        ap.func = f_addto;
        ap.kernelParams = aa;
        CU(cuGraphAddKernelNode_v2, &na, child, NULL, 0, &ap);
        CU(cuGraphAddChildGraphNode, &nc, gb, &ns, 1, child);
        CU(cuGraphAddEventRecordNode, &ne, gb, &nc, 1, ev);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddDependencies, gb, &nm, &na, 1); /* a node of another graph */
        CUDA_HOST_NODE_PARAMS hp = {0};
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddHostNode, &bad, gb, NULL, 0, &hp); /* no function */
        CU(cuGraphClone, &cl, gb);
        CU(cuGraphInstantiateWithFlags, &xb, gb, 0);
        CU(cuGraphLaunch, xb, s);
        CU(cuEventSynchronize, ev);
        read_back(got, w);
        for (int i = 0; i < N; i++)
            if (got[i] != 3u * 2u + pinned[i] + 5u) fail("node graph", "index %ld: %ld", i, got[i]);
        /* New parameters for the step node of the instantiated graph: w += 3*2 + x + 11. */
        void *sb[] = {&y, &x, &k2, &n};
        kp.kernelParams = sb;
        CU(cuGraphExecKernelNodeSetParams_v2, xb, ns, &kp);
        CU(cuGraphLaunch, xb, s);
        CU(cuStreamSynchronize, s);
        read_back(got, w);
        for (int i = 0; i < N; i++)
            if (got[i] != 2u * (3u * 2u + pinned[i]) + 5u + 11u) fail("set params", "index %ld: %ld", i, got[i]);
        /* An update from the clone (made before, with k = 5) puts k = 5 back. */
        CUgraphExecUpdateResultInfo info;
        CU(cuGraphExecUpdate_v2, xb, cl, &info);
        if (info.result != CU_GRAPH_EXEC_UPDATE_SUCCESS) fail("exec update", "result %ld %ld", info.result, 0);
        CU(cuMemcpyHtoD_v2, w, zero, sizeof zero);
        CU(cuGraphLaunch, xb, s);
        CU(cuStreamSynchronize, s);
        read_back(got, w);
        if (got[3] != 3u * 2u + pinned[3] + 5u) fail("exec update applied", "%ld %ld", got[3], 0);
        /* Another topology cannot update it. */
        CU(cuGraphCreate, &g9, 0);
        CU(cuGraphAddEmptyNode, &n9, g9, NULL, 0);
        CU_EXPECT(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, cuGraphExecUpdate_v2, xb, g9, &info);
        if (info.result != CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED) fail("update refused", "result %ld %ld", info.result, 0);
        const char *dot = "/tmp/gpupool-graph-client.dot";
        CU(cuGraphDebugDotPrint, gb, dot, 0);
        FILE *fd = fopen(dot, "r");
        char text[8192] = {0};
        size_t got_n = fd ? fread(text, 1, sizeof text - 1, fd) : 0;
        if (fd) fclose(fd);
        remove(dot);
        if (got_n == 0 || !strstr(text, "digraph") || !strstr(text, "MEMSET") || !strstr(text, "step"))
            fail("dot", "%ld bytes %ld", (long)got_n, 0);
        CU(cuGraphExecDestroy, xb);
        CU(cuGraphDestroy, gb);
        CU(cuGraphDestroy, child);
        CU(cuGraphDestroy, cl);
        CU(cuGraphDestroy, g9);
        (void)ne;
        ok("graphs built node by node: dependencies, child graph, set params, update, clone, dot");
    }

    /* Memcpy nodes: x = pinned (HtoD node, read when the graph runs), y = 2 (memset), then
     * y = 3*y + x + 3 (kernel), rows 5..14 of y seen as 20 rows of 50 words go to rows 0..9 of z
     * (a 2D device-to-device node), z goes back to page-locked `out` (DtoH node). */
    {
        enum { W = 50 };
        CUgraph gm = NULL;
        CUgraphExec xm = NULL;
        CUgraphNode nh = NULL, nm = NULL, nk = NULL, nd = NULL, no = NULL, bad = NULL;
        CUdeviceptr x = g[0], y = g[1], z = g[2];
        uint32_t k = 3, n = N, *out = NULL;
        void *sa[] = {&y, &x, &k, &n};
        CU(cuMemHostAlloc, (void **)&out, N * 4, CU_MEMHOSTALLOC_PORTABLE);
        memset(out, 0xee, N * 4);
        CU(cuMemcpyHtoD_v2, x, zero, sizeof zero);
        CU(cuMemcpyHtoD_v2, z, zero, sizeof zero);
        CU(cuGraphCreate, &gm, 0);
        CUDA_MEMCPY3D h2d;
        memset(&h2d, 0, sizeof h2d);
        h2d.srcMemoryType = CU_MEMORYTYPE_HOST, h2d.srcHost = pinned;
        h2d.dstMemoryType = CU_MEMORYTYPE_DEVICE, h2d.dstDevice = x;
        h2d.WidthInBytes = N * 4, h2d.Height = 1, h2d.Depth = 1;
        CU(cuGraphAddMemcpyNode, &nh, gm, NULL, 0, &h2d, ctx);
        CUDA_MEMSET_NODE_PARAMS mp = {.dst = y, .pitch = 0, .value = 2, .elementSize = 4, .width = N, .height = 1};
        CU(cuGraphAddMemsetNode, &nm, gm, NULL, 0, &mp, ctx);
        CUDA_KERNEL_NODE_PARAMS kp;
        memset(&kp, 0, sizeof kp);
        kp.func = f_step;
        kp.gridDimX = (N + 127) / 128, kp.gridDimY = kp.gridDimZ = 1;
        kp.blockDimX = 128, kp.blockDimY = kp.blockDimZ = 1;
        kp.kernelParams = sa;
        CUgraphNode before[2] = {nh, nm};
        CU(cuGraphAddKernelNode_v2, &nk, gm, before, 2, &kp);
        CUDA_MEMCPY3D d2d;
        memset(&d2d, 0, sizeof d2d);
        d2d.srcMemoryType = CU_MEMORYTYPE_DEVICE, d2d.srcDevice = y, d2d.srcY = 5, d2d.srcPitch = W * 4;
        d2d.dstMemoryType = CU_MEMORYTYPE_DEVICE, d2d.dstDevice = z, d2d.dstPitch = W * 4;
        d2d.WidthInBytes = W * 4, d2d.Height = 10, d2d.Depth = 1;
        CU(cuGraphAddMemcpyNode, &nd, gm, &nk, 1, &d2d, ctx);
        CUDA_MEMCPY3D d2h;
        memset(&d2h, 0, sizeof d2h);
        d2h.srcMemoryType = CU_MEMORYTYPE_DEVICE, d2h.srcDevice = z;
        d2h.dstMemoryType = CU_MEMORYTYPE_HOST, d2h.dstHost = out;
        d2h.WidthInBytes = N * 4, d2h.Height = 1, d2h.Depth = 1;
        CU(cuGraphAddMemcpyNode, &no, gm, &nd, 1, &d2h, ctx);
        /* The daemon cannot read pageable memory when the graph runs. */
        CUDA_MEMCPY3D pg = h2d;
        pg.srcHost = zero;
        CU_EXPECT(CUDA_ERROR_NOT_SUPPORTED, cuGraphAddMemcpyNode, &bad, gm, NULL, 0, &pg, ctx);
        /* Past the end of y. */
        CUDA_MEMCPY3D past = d2d;
        past.srcY = 15;
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemcpyNode, &bad, gm, NULL, 0, &past, ctx);
        CU(cuGraphInstantiateWithFlags, &xm, gm, 0);
        set_x(4242);
        CU(cuGraphLaunch, xm, s);
        CU(cuStreamSynchronize, s);
        for (int i = 0; i < N; i++) {
            uint32_t want = i < 10 * W ? 3u * 2u + pinned[i + 5 * W] + 3u : 0u;
            if (out[i] != want) fail("memcpy nodes", "index %ld: %ld", i, out[i]);
        }
        CU(cuGraphExecDestroy, xm);
        CU(cuGraphDestroy, gm);
        CU(cuMemFreeHost, out);
        ok("memcpy nodes: page-locked host to device, 2D device to device, device to page-locked host");
    }

    /* Host functions in a capture: y = 3y + x + k; hin = y; relay: hout = 2 hin + c; x = hout;
     * y = 3y + x + k; the CPU follows, replay by replay. */
    {
        CUgraph gh = NULL;
        CUgraphExec xh = NULL;
        CUdeviceptr x = g[0], y = g[1];
        uint32_t k = 9, n = N, cx[N], cyy[N], res[N];
        void *sa[] = {&y, &x, &k, &n};
        CU(cuMemHostAlloc, (void **)&hin, N * 4, CU_MEMHOSTALLOC_PORTABLE);
        CU(cuMemHostAlloc, (void **)&hout, N * 4, CU_MEMHOSTALLOC_PORTABLE);
        set_x(99);
        for (int i = 0; i < N; i++) cx[i] = pinned[i], cyy[i] = 0;
        CU(cuMemcpyHtoD_v2, x, pinned, N * 4);
        CU(cuMemcpyHtoD_v2, y, zero, sizeof zero);
        CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
        CU(cuLaunchKernel, f_step, (N + 127) / 128, 1, 1, 128, 1, 1, 0, s, sa, NULL);
        CU(cuMemcpyDtoHAsync_v2, hin, y, N * 4, s);
        CU(cuLaunchHostFunc, s, relay, NULL);
        CU(cuMemcpyHtoDAsync_v2, x, hout, N * 4, s);
        CU(cuLaunchKernel, f_step, (N + 127) / 128, 1, 1, 128, 1, 1, 0, s, sa, NULL);
        CU(cuStreamEndCapture, s, &gh);
        if (relay_calls != 0) fail("captured host function", "ran %ld times during capture %ld", relay_calls, 0);
        CU(cuGraphInstantiateWithFlags, &xh, gh, 0);
        for (int r = 0; r < host_replays; r++) {
            CU(cuGraphLaunch, xh, s);
            CU(cuStreamSynchronize, s);
            if (relay_calls != r + 1) fail("host function once per replay", "replay %ld: %ld calls", r, relay_calls);
            read_back(res, y);
            for (int i = 0; i < N; i++) {
                cyy[i] = 3u * cyy[i] + cx[i] + k;
                cx[i] = 2u * cyy[i] + (uint32_t)r;
                cyy[i] = 3u * cyy[i] + cx[i] + k;
                if (res[i] != cyy[i]) fail("host function in order", "replay %ld index %ld", r, i);
            }
        }
        if (relay_on_main) fail("host function thread", "%ld calls on the main thread %ld", relay_on_main, 0);
        if (relay_cuda_rc != CUDA_ERROR_NOT_PERMITTED)
            fail("CUDA in a host function", "returned %ld, expected %ld", relay_cuda_rc, CUDA_ERROR_NOT_PERMITTED);
        CU(cuGraphExecDestroy, xh);
        CU(cuGraphDestroy, gh);
        printf("host replays %d\n", host_replays);
        ok("host functions in a capture run in order, once per replay, off the main thread");

        int cb_calls = 0;
        CUgraph gi = NULL;
        CU(cuStreamBeginCapture_v2, s, CU_STREAM_CAPTURE_MODE_GLOBAL);
        CU_EXPECT(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuStreamAddCallback, s, a_callback, &cb_calls, 0);
        CU_EXPECT(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cuStreamEndCapture, s, &gi);
        if (gi != NULL || cb_calls != 0) fail("callback in a capture", "graph %ld calls %ld", gi != NULL, cb_calls);
        ok("cuStreamAddCallback on a capturing stream is refused and invalidates the capture");

        /* An explicit host node: its parameters read back, changed on the graph (an instantiated
         * graph keeps its own) and on an instantiated graph. */
        int a = 0, b = 0, c = 0;
        CUgraph gn = NULL;
        CUgraphExec x1 = NULL, x2 = NULL;
        CUgraphNode hn = NULL, en = NULL;
        CUDA_HOST_NODE_PARAMS hp = {.fn = mark, .userData = &a}, got_p;
        CU(cuGraphCreate, &gn, 0);
        CU(cuGraphAddEmptyNode, &en, gn, NULL, 0);
        CU(cuGraphAddHostNode, &hn, gn, &en, 1, &hp);
        CU(cuGraphInstantiateWithFlags, &x1, gn, 0);
        CU(cuGraphLaunch, x1, s);
        CU(cuStreamSynchronize, s);
        CU(cuGraphHostNodeGetParams, hn, &got_p);
        if (got_p.fn != mark || got_p.userData != &a || a != 1) fail("host node", "params read back %ld, a = %ld", got_p.userData == &a, a);
        hp.userData = &b;
        CU(cuGraphHostNodeSetParams, hn, &hp);
        CU(cuGraphLaunch, x1, s);
        CU(cuGraphInstantiateWithFlags, &x2, gn, 0);
        CU(cuGraphLaunch, x2, s);
        CU(cuStreamSynchronize, s);
        if (a != 2 || b != 1) fail("host node set params", "a = %ld, b = %ld", a, b);
        hp.userData = &c;
        CU(cuGraphExecHostNodeSetParams, x1, hn, &hp);
        for (int r = 0; r < 3; r++) CU(cuGraphLaunch, x1, s);
        CU(cuStreamSynchronize, s);
        CU(cuGraphHostNodeGetParams, hn, &got_p);
        if (a != 2 || b != 1 || c != 3 || got_p.userData != &b)
            fail("exec host node set params", "a = %ld, c = %ld", a, c);
        ok("host nodes: parameters read back and changed on the graph and on an instantiated graph");
        /* A forked child has its own session and host-function channel. */
        pid_t child = fork();
        if (child == 0) {
            int mine = 0;
            CUdevice cd;
            CUcontext cc;
            CUstream cs;
            CUgraph cg;
            CUgraphExec cx;
            CUgraphNode cn;
            CUDA_HOST_NODE_PARAMS cp = {.fn = mark, .userData = &mine};
            main_thread = pthread_self();
            if (p_cuInit(0) || p_cuDeviceGet(&cd, 0) || p_cuDevicePrimaryCtxRetain(&cc, cd) || p_cuCtxSetCurrent(cc) ||
                p_cuStreamCreate(&cs, 0) || p_cuGraphCreate(&cg, 0) || p_cuGraphAddHostNode(&cn, cg, NULL, 0, &cp) ||
                p_cuGraphInstantiateWithFlags(&cx, cg, 0) || p_cuGraphLaunch(cx, cs) || p_cuStreamSynchronize(cs))
                _exit(2);
            _exit(mine == 1 && relay_on_main == 0 ? 0 : 3);
        }
        int wst = 0;
        if (child < 0 || waitpid(child, &wst, 0) != child || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0)
            fail("host node in a forked child", "child status %ld %ld", (long)wst, (long)child);
        CU(cuGraphLaunch, x1, s);
        CU(cuStreamSynchronize, s);
        if (c != 4) fail("host node after fork", "c = %ld %ld", c, 0);
        hp.fn = NULL;
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphHostNodeSetParams, hn, &hp);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphHostNodeGetParams, en, &got_p); /* not a host node */
        if (relay_on_main) fail("host node thread", "%ld calls on the main thread %ld", relay_on_main, 0);
        CU(cuGraphExecDestroy, x1);
        CU(cuGraphExecDestroy, x2);
        CU(cuGraphDestroy, gn);
        CU(cuMemFreeHost, hin);
        CU(cuMemFreeHost, hout);
        ok("a forked child runs host nodes of its own; the parent's still run");
    }

    CU(cuGraphExecDestroy, exec);
    CU(cuGraphExecDestroy, e2);
    CU(cuGraphExecDestroy, e3);
    CU(cuGraphDestroy, graph);
    CU(cuGraphDestroy, empty);
    CU(cuGraphDestroy, created);
    CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphDestroy, graph);
    ok("graphs destroyed once");
    CU(cuMemFreeHost, pinned);
    CU(cuStreamDestroy_v2, s);
    CU(cuEventDestroy_v2, ev);
    printf("done\n");
    return 0;
}
