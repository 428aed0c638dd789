/*
 * tests/c/host_fn_hang.c - a client whose graph's host function never returns: it holds 16 MiB of
 * device memory, launches a graph (memset -> host node) on a stream of its own and waits for it
 * with cuStreamSynchronize, while the host function (on the library's thread) prints
 * "in host function" and sleeps for ever. The test kills it there with SIGKILL
 * (pool-daemon/tests/graphs.rs, a_client_killed_in_its_host_function_leaves_nothing_behind).
 *
 *   cc -std=c11 -Wall -Wextra -I shim-headers/include tests/c/host_fn_hang.c -o host_fn_hang -ldl -lpthread
 *
 * Output: "launched", then "in host function"; a failing call prints "FAIL ..." and exits 1.
 */
#define _GNU_SOURCE
#include "gpupool_cuda.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define FUNCS(X)                                                                                            \
    X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent) X(cuMemAlloc_v2)                \
    X(cuStreamCreate) X(cuStreamSynchronize) X(cuGraphCreate) X(cuGraphAddMemsetNode) X(cuGraphAddHostNode)  \
    X(cuGraphInstantiateWithFlags) X(cuGraphLaunch)

#define DECLARE(name) static __typeof__(name) *p_##name;
FUNCS(DECLARE)

#define CU(name, ...)                                                                                        \
    do {                                                                                                     \
        CUresult rc_ = p_##name(__VA_ARGS__);                                                                \
        if (rc_ != CUDA_SUCCESS) {                                                                           \
            fprintf(stderr, "FAIL %s: %d\n", #name, (int)rc_);                                               \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

static void hang(void *user) {
    (void)user;
    printf("in host function\n");
    for (;;) pause();
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
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
    CUdeviceptr buf;
    CUstream s;
    CUgraph g;
    CUgraphExec x;
    CUgraphNode nm, nh;
    CU(cuInit, 0);
    CU(cuDeviceGet, &dev, 0);
    CU(cuDevicePrimaryCtxRetain, &ctx, dev);
    CU(cuCtxSetCurrent, ctx);
    CU(cuMemAlloc_v2, &buf, 16u << 20);
    CU(cuStreamCreate, &s, 0);
    CU(cuGraphCreate, &g, 0);
    CUDA_MEMSET_NODE_PARAMS mp = {.dst = buf, .pitch = 0, .value = 1, .elementSize = 4, .width = 1024, .height = 1};
    CU(cuGraphAddMemsetNode, &nm, g, NULL, 0, &mp, ctx);
    CUDA_HOST_NODE_PARAMS hp = {.fn = hang, .userData = NULL};
    CU(cuGraphAddHostNode, &nh, g, &nm, 1, &hp);
    CU(cuGraphInstantiateWithFlags, &x, g, 0);
    CU(cuGraphLaunch, x, s);
    printf("launched\n");
    CU(cuStreamSynchronize, s);
    fprintf(stderr, "FAIL cuStreamSynchronize returned while the host function hangs\n");
    return 1;
}
