/*
 * tests/c/graph_cond_client.c - conditional graph nodes through the driver API (run by
 * tests/tests/c_client.rs on the simulator, and by pool-daemon/tests/graphs.rs under `gpupool run`):
 *
 *   cc -std=c11 -Wall -Wextra -I shim-headers/include tests/c/graph_cond_client.c -o graph_cond_client -ldl
 *
 * Kernels (PTX below) set a conditional handle's value with the device function
 * cudaGraphSetConditional, and cuGraphAddNode makes IF, WHILE and SWITCH nodes whose body graphs the
 * driver makes (phGraph_out):
 * - WHILE over a countdown kernel (counter -= 1, runs += 1, condition counter != 0), the handle made
 *   with CU_GRAPH_COND_ASSIGN_DEFAULT (1): counter 5 runs the body 5 times; a second launch with
 *   counter 3 runs it 3 more (the default is applied again at the launch's start);
 * - IF with an ELSE body, the condition a flag in device memory: flag 1 runs the first body
 *   (c = 7), flag 0 the second (c = 9);
 * - SWITCH over three bodies: flag 2 runs the third (d = 22), flag 5 none (d unchanged);
 * - the node's type is CU_GRAPH_NODE_TYPE_CONDITIONAL, a body graph cannot be destroyed on its
 *   own, a handle made for another graph and a WHILE node with two bodies are INVALID_VALUE.
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
    X(cuModuleLoadData) X(cuModuleGetFunction) X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemcpyDtoH_v2)          \
    X(cuMemsetD32_v2) X(cuStreamCreate) X(cuStreamSynchronize) X(cuGraphCreate) X(cuGraphDestroy)           \
    X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphAddNode)                   \
    X(cuGraphConditionalHandleCreate) X(cuGraphNodeGetType) X(cuGraphAddKernelNode_v2) X(cuGraphAddMemsetNode)

#define DECLARE(name) static __typeof__(name) *p_##name;
FUNCS(DECLARE)

#include "cu_check.h"

/* countdown(counter, runs, h): *counter -= 1; *runs += 1; condition = *counter != 0.
 * set_from(h, flag): condition = *flag. */
static const char k_ptx[] =
    ".version 7.8\n.target sm_52\n.address_size 64\n"
    ".extern .func cudaGraphSetConditional (.param .b64 h, .param .b32 v);\n"
    ".visible .entry countdown(.param .u64 counter, .param .u64 runs, .param .u64 h)\n{\n"
    "  .reg .pred %p<2>;\n  .reg .b32 %r<4>;\n  .reg .b64 %rd<4>;\n"
    "  ld.param.u64 %rd1, [counter];\n  ld.param.u64 %rd2, [runs];\n  ld.param.u64 %rd3, [h];\n"
    "  ld.global.u32 %r1, [%rd1];\n  sub.u32 %r1, %r1, 1;\n  st.global.u32 [%rd1], %r1;\n"
    "  ld.global.u32 %r2, [%rd2];\n  add.u32 %r2, %r2, 1;\n  st.global.u32 [%rd2], %r2;\n"
    "  setp.ne.u32 %p1, %r1, 0;\n  selp.u32 %r3, 1, 0, %p1;\n"
    "  {\n  .param .b64 param0;\n  st.param.b64 [param0+0], %rd3;\n  .param .b32 param1;\n"
    "  st.param.b32 [param1+0], %r3;\n  call.uni cudaGraphSetConditional, (param0, param1);\n  }\n"
    "  ret;\n}\n"
    ".visible .entry set_from(.param .u64 h, .param .u64 flag)\n{\n"
    "  .reg .b32 %r<2>;\n  .reg .b64 %rd<3>;\n"
    "  ld.param.u64 %rd1, [h];\n  ld.param.u64 %rd2, [flag];\n  ld.global.u32 %r1, [%rd2];\n"
    "  {\n  .param .b64 param0;\n  st.param.b64 [param0+0], %rd1;\n  .param .b32 param1;\n"
    "  st.param.b32 [param1+0], %r1;\n  call.uni cudaGraphSetConditional, (param0, param1);\n  }\n"
    "  ret;\n}\n";

static CUstream s;
static CUcontext ctx;

static uint32_t word(CUdeviceptr p) {
    uint32_t v = 0;
    CU(cuMemcpyDtoH_v2, &v, p, 4);
    return v;
}

static CUgraphNode kernel_node(CUgraph g, CUgraphNode *deps, size_t n, CUfunction f, void **args) {
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    kp.func = f;
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = args;
    CUgraphNode node;
    CU(cuGraphAddKernelNode_v2, &node, g, deps, n, &kp);
    return node;
}

static void memset_node(CUgraph g, CUdeviceptr dst, unsigned value) {
    CUDA_MEMSET_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.dst = dst, p.value = value, p.elementSize = 4, p.width = 1, p.height = 1;
    CUgraphNode node;
    CU(cuGraphAddMemsetNode, &node, g, NULL, 0, &p, ctx);
}

/* A conditional node after `dep`; its body graphs in `bodies`. */
static CUgraphNode cond_node(CUgraph g, CUgraphNode dep, CUgraphConditionalHandle h, CUgraphConditionalNodeType t,
                             unsigned size, CUgraph *bodies) {
    CUgraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    p.conditional.handle = h;
    p.conditional.type = t;
    p.conditional.size = size;
    p.conditional.ctx = ctx;
    CUgraphNode node;
    CU(cuGraphAddNode, &node, g, dep ? &dep : NULL, dep ? 1 : 0, &p);
    CHECK(p.conditional.phGraph_out != NULL, "phGraph_out written", 0, 0);
    for (unsigned i = 0; i < size; i++) bodies[i] = p.conditional.phGraph_out[i];
    return node;
}

static void launch(CUgraph g) {
    CUgraphExec e;
    CU(cuGraphInstantiateWithFlags, &e, g, 0);
    CU(cuGraphLaunch, e, s);
    CU(cuStreamSynchronize, s);
    CU(cuGraphExecDestroy, e);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    CU_LOAD_DRIVER(FUNCS)

    CUdevice dev;
    CUmodule mod;
    CUfunction countdown, set_from;
    CU(cuInit, 0);
    CU(cuDeviceGet, &dev, 0);
    CU(cuDevicePrimaryCtxRetain, &ctx, dev);
    CU(cuCtxSetCurrent, ctx);
    CU(cuStreamCreate, &s, 0);
    CU(cuModuleLoadData, &mod, k_ptx);
    CU(cuModuleGetFunction, &countdown, mod, "countdown");
    CU(cuModuleGetFunction, &set_from, mod, "set_from");
    CUdeviceptr counter, runs, flag, c, d;
    CU(cuMemAlloc_v2, &counter, 4);
    CU(cuMemAlloc_v2, &runs, 4);
    CU(cuMemAlloc_v2, &flag, 4);
    CU(cuMemAlloc_v2, &c, 4);
    CU(cuMemAlloc_v2, &d, 4);

    /* WHILE: the body runs while the countdown has not reached 0. */
    {
        CUgraph g, body;
        CUgraphConditionalHandle h;
        CU(cuGraphCreate, &g, 0);
        CU(cuGraphConditionalHandleCreate, &h, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT);
        CUgraphNode w = cond_node(g, NULL, h, CU_GRAPH_COND_TYPE_WHILE, 1, &body);
        void *args[] = {&counter, &runs, &h};
        kernel_node(body, NULL, 0, countdown, args);
        CUgraphNodeType t;
        CU(cuGraphNodeGetType, w, &t);
        CHECK(t == CU_GRAPH_NODE_TYPE_CONDITIONAL, "the node's type", t, CU_GRAPH_NODE_TYPE_CONDITIONAL);
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphDestroy, body);
        CU(cuMemsetD32_v2, counter, 5, 1);
        CU(cuMemsetD32_v2, runs, 0, 1);
        launch(g);
        CHECK(word(runs) == 5 && word(counter) == 0, "WHILE ran its body 5 times", word(runs), word(counter));
        CU(cuMemsetD32_v2, counter, 3, 1);
        launch(g);
        CHECK(word(runs) == 8, "WHILE again from the default value: 3 more", word(runs), 8);
        CUgraph other;
        CU(cuGraphCreate, &other, 0);
        CUgraphNodeParams p;
        memset(&p, 0, sizeof p);
        p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
        p.conditional.handle = h;
        p.conditional.type = CU_GRAPH_COND_TYPE_IF;
        p.conditional.size = 1;
        CUgraphNode n;
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddNode, &n, other, NULL, 0, &p); /* h is g's */
        p.conditional.type = CU_GRAPH_COND_TYPE_WHILE;
        p.conditional.size = 2;
        CU_EXPECT(CUDA_ERROR_INVALID_VALUE, cuGraphAddNode, &n, g, NULL, 0, &p);
        CU(cuGraphDestroy, other);
        CU(cuGraphDestroy, g);
        printf("ok WHILE: a kernel's cudaGraphSetConditional ends the loop; the default is applied at each launch\n");
    }

    /* IF with an ELSE body: a flag in device memory chooses. */
    {
        CUgraph g, bodies[2];
        CUgraphConditionalHandle h;
        CU(cuGraphCreate, &g, 0);
        CU(cuGraphConditionalHandleCreate, &h, g, ctx, 0, CU_GRAPH_COND_ASSIGN_DEFAULT);
        void *args[] = {&h, &flag};
        CUgraphNode k = kernel_node(g, NULL, 0, set_from, args);
        cond_node(g, k, h, CU_GRAPH_COND_TYPE_IF, 2, bodies);
        memset_node(bodies[0], c, 7);
        memset_node(bodies[1], c, 9);
        CU(cuMemsetD32_v2, flag, 1, 1);
        launch(g);
        uint32_t then_value = word(c);
        CU(cuMemsetD32_v2, flag, 0, 1);
        launch(g);
        CHECK(then_value == 7 && word(c) == 9, "IF runs its first body on non-zero, the ELSE body on 0", then_value,
              word(c));
        CU(cuGraphDestroy, g);
        printf("ok IF/ELSE on a value a kernel set\n");
    }

    /* SWITCH over three bodies. */
    {
        CUgraph g, bodies[3];
        CUgraphConditionalHandle h;
        CU(cuGraphCreate, &g, 0);
        CU(cuGraphConditionalHandleCreate, &h, g, ctx, 0, 0);
        void *args[] = {&h, &flag};
        CUgraphNode k = kernel_node(g, NULL, 0, set_from, args);
        cond_node(g, k, h, CU_GRAPH_COND_TYPE_SWITCH, 3, bodies);
        for (unsigned i = 0; i < 3; i++) memset_node(bodies[i], d, 20 + i);
        CU(cuMemsetD32_v2, d, 0, 1);
        CU(cuMemsetD32_v2, flag, 2, 1);
        launch(g);
        uint32_t picked = word(d);
        CU(cuMemsetD32_v2, d, 99, 1);
        CU(cuMemsetD32_v2, flag, 5, 1);
        launch(g);
        CHECK(picked == 22 && word(d) == 99, "SWITCH runs body n, none past its size", picked, word(d));
        CU(cuGraphDestroy, g);
        printf("ok SWITCH picks body n, and none for a value past its bodies\n");
    }

    CU(cuMemFree_v2, counter);
    CU(cuMemFree_v2, runs);
    CU(cuMemFree_v2, flag);
    CU(cuMemFree_v2, c);
    CU(cuMemFree_v2, d);
    printf("done\n");
    return 0;
}
