/*
 * tests/c/churn_client.c - a CUDA driver-API client that keeps every kind of session state
 * busy until it is killed: allocations of random sizes, pageable copies larger than the
 * pool's staging area, page-locked copies on a stream, kernel launches, events, frees.
 * gpupool-bench chaos and pool-daemon/tests/churn.rs run many of these under `gpupool run`
 * and SIGKILL them at random moments (start-up, mid-copy, mid-launch) to check that the
 * daemon gives back everything a session held, its own memory included.
 *
 *   cc -std=c11 -Wall -Wextra -I shim-headers/include tests/c/churn_client.c -o churn_client -ldl -lpthread
 *   gpupool run -- ./churn_client --seed 7 --max-bytes 16777216
 *
 * Options: --seed N [1]  --max-bytes N [16 MiB, at least 1 MiB]  --rounds N [0: until killed]
 *
 * A round: allocate 64 KiB..max-bytes (up to 4 allocations live; the oldest is freed), copy
 * a pattern in from pageable memory, launch a kernel that XORs the first 16 Ki words with
 * a key, copy everything back and check it; then a 256 KiB page-locked round trip on a
 * stream ordered by an event, checked too. Prints "ready" after its first round and
 * "round N" after each; a CUDA error or a wrong byte prints "error ..." on stderr, exit 1.
 */
#define _GNU_SOURCE
#include "gpupool_cuda.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CU_FUNCTIONS(X)                                                                               \
    X(cuInit) X(cuGetErrorName) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent)        \
    X(cuModuleLoadData) X(cuModuleGetFunction) X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemcpyHtoD_v2)  \
    X(cuMemcpyDtoH_v2) X(cuMemcpyHtoDAsync_v2) X(cuMemcpyDtoHAsync_v2) X(cuMemAllocHost_v2)          \
    X(cuMemsetD8_v2) X(cuStreamCreate) X(cuStreamSynchronize) X(cuEventCreate) X(cuEventRecord)      \
    X(cuEventSynchronize) X(cuLaunchKernel)

#define DECLARE_PTR(name) static __typeof__(name) *p_##name;
CU_FUNCTIONS(DECLARE_PTR)

/* Calls an entry point through its pointer; any error ends the program. */
#define CU(name, ...) check(#name, p_##name(__VA_ARGS__))

static void check(const char *call, CUresult rc) {
    if (rc == CUDA_SUCCESS) return;
    const char *name = NULL;
    if (!p_cuGetErrorName || p_cuGetErrorName(rc, &name) != CUDA_SUCCESS || !name) name = "?";
    fflush(stdout);
    fprintf(stderr, "error %s %d %s\n", call, (int)rc, name);
    exit(1);
}

/* xor_words(p, n, key): p[i] ^= key for i < n, one thread per 32-bit word. */
static const char k_ptx[] =
    ".version 7.0\n"
    ".target sm_50\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry xor_words(\n"
    "    .param .u64 p,\n"
    "    .param .u32 n,\n"
    "    .param .u32 key\n"
    ")\n"
    "{\n"
    "    .reg .pred %p<2>;\n"
    "    .reg .b32 %r<8>;\n"
    "    .reg .b64 %rd<5>;\n"
    "    ld.param.u64 %rd1, [p];\n"
    "    ld.param.u32 %r1, [n];\n"
    "    ld.param.u32 %r2, [key];\n"
    "    mov.u32 %r3, %ctaid.x;\n"
    "    mov.u32 %r4, %ntid.x;\n"
    "    mov.u32 %r5, %tid.x;\n"
    "    mad.lo.s32 %r6, %r3, %r4, %r5;\n"
    "    setp.ge.u32 %p1, %r6, %r1;\n"
    "    @%p1 bra $L_end;\n"
    "    cvta.to.global.u64 %rd2, %rd1;\n"
    "    mul.wide.u32 %rd3, %r6, 4;\n"
    "    add.s64 %rd4, %rd2, %rd3;\n"
    "    ld.global.u32 %r7, [%rd4];\n"
    "    xor.b32 %r7, %r7, %r2;\n"
    "    st.global.u32 [%rd4], %r7;\n"
    "$L_end:\n"
    "    ret;\n"
    "}\n";

#define LIVE 4
#define KERNEL_WORDS (16u * 1024u)
#define PINNED_BYTES (256u * 1024u)

static uint64_t g_rng;

static uint64_t next_random(void) { /* xorshift64 */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static void fail_data(const char *what, size_t at, unsigned got, unsigned want) {
    fflush(stdout);
    fprintf(stderr, "error %s: byte %zu is %u, expected %u\n", what, at, got, want);
    exit(1);
}

static void usage(const char *argv0) {
    fprintf(stderr, "usage: %s [--seed N] [--max-bytes N] [--rounds N]\n", argv0);
    exit(2);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    unsigned long long seed = 1, max_bytes = 16ull << 20, rounds = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) usage(argv[0]);
        i++;
        if (strcmp(a, "--seed") == 0) seed = strtoull(v, NULL, 0);
        else if (strcmp(a, "--max-bytes") == 0) max_bytes = strtoull(v, NULL, 0);
        else if (strcmp(a, "--rounds") == 0) rounds = strtoull(v, NULL, 0);
        else usage(argv[0]);
    }
    if (max_bytes < (1u << 20)) usage(argv[0]);
    g_rng = seed * 0x9e3779b97f4a7c15ull | 1;

    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "error dlopen(libcuda.so.1) -1 %s\n", dlerror());
        return 1;
    }
#define RESOLVE(name)                                                        \
    if (!(p_##name = (__typeof__(name) *)dlsym(lib, #name))) {               \
        fprintf(stderr, "error dlsym(%s) -1 SYMBOL_MISSING\n", #name);       \
        return 1;                                                            \
    }
    CU_FUNCTIONS(RESOLVE)
#undef RESOLVE

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CUstream stream;
    CUevent done;
    void *pinned;
    CU(cuInit, 0);
    CU(cuDeviceGet, &dev, 0);
    CU(cuDevicePrimaryCtxRetain, &ctx, dev);
    CU(cuCtxSetCurrent, ctx);
    CU(cuModuleLoadData, &mod, k_ptx);
    CU(cuModuleGetFunction, &fn, mod, "xor_words");
    CU(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
    CU(cuEventCreate, &done, CU_EVENT_DISABLE_TIMING);
    CU(cuMemAllocHost_v2, &pinned, 2 * PINNED_BYTES);
    unsigned char *out = malloc(max_bytes), *back = malloc(max_bytes);
    if (!out || !back) return 1;

    CUdeviceptr live[LIVE] = {0};
    for (unsigned long long r = 0; rounds == 0 || r < rounds; r++) {
        size_t bytes = (64u << 10) + next_random() % (max_bytes - (64u << 10) + 1);
        bytes &= ~(size_t)3;
        unsigned slot = (unsigned)(r % LIVE);
        if (live[slot]) CU(cuMemFree_v2, live[slot]);
        live[slot] = 0;
        CU(cuMemAlloc_v2, &live[slot], bytes);
        CUdeviceptr d = live[slot];
        unsigned char fill = (unsigned char)next_random();
        for (size_t i = 0; i < bytes; i++) out[i] = (unsigned char)(fill + i * 7);
        CU(cuMemcpyHtoD_v2, d, out, bytes);

        unsigned n = (unsigned)(bytes / 4 < KERNEL_WORDS ? bytes / 4 : KERNEL_WORDS);
        unsigned key = (unsigned)next_random();
        void *args[] = {&d, &n, &key};
        CU(cuLaunchKernel, fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, args, NULL);
        CU(cuStreamSynchronize, stream);
        CU(cuMemcpyDtoH_v2, back, d, bytes);
        for (size_t i = 0; i < bytes; i++) {
            unsigned want = out[i];
            if (i < (size_t)n * 4) want ^= (key >> (8 * (i % 4))) & 0xff;
            if (back[i] != want) fail_data("kernel round trip", i, back[i], want);
        }

        /* Page-locked round trip on the stream: in through the first half, out to the second. */
        unsigned char *in_pl = pinned, *out_pl = (unsigned char *)pinned + PINNED_BYTES;
        for (size_t i = 0; i < PINNED_BYTES; i++) in_pl[i] = (unsigned char)(key + i * 13);
        CU(cuMemsetD8_v2, d, 0, PINNED_BYTES < bytes ? PINNED_BYTES : bytes);
        size_t pl = PINNED_BYTES < bytes ? PINNED_BYTES : bytes;
        CU(cuMemcpyHtoDAsync_v2, d, in_pl, pl, stream);
        CU(cuMemcpyDtoHAsync_v2, out_pl, d, pl, stream);
        CU(cuEventRecord, done, stream);
        CU(cuEventSynchronize, done);
        for (size_t i = 0; i < pl; i++)
            if (out_pl[i] != in_pl[i]) fail_data("page-locked round trip", i, out_pl[i], in_pl[i]);

        if (r == 0) printf("ready\n");
        printf("round %llu\n", r + 1);
    }
    return 0;
}
