/*
 * tests/c/gemm_client.c - times cuBLAS GEMMs for gpupool-bench blas. The same program runs under
 * `gpupool run` (libcublas.so.13 is libgpupool.so, which forwards each call to the daemon, which
 * runs the simulator's cuBLAS) and with the simulator's libdir on LD_LIBRARY_PATH (its
 * libcublas.so.13 and libcuda.so.1 in this process, no pool), so both sides pay exactly the
 * same client work.
 *
 *   cc -std=c11 -Wall -Wextra -I shim-headers/include tests/c/gemm_client.c -o gemm_client -ldl -lpthread
 *   gpupool run -- ./gemm_client          (or LD_LIBRARY_PATH=$(scripts/sim-libdir) ./gemm_client)
 *
 * Commands on stdin, one a line: `sgemm N REPS` or `hgemm N REPS` (square N x N x N, column-major,
 * no transposes, alpha 1, beta 0). The first command of a shape allocates A, B, C on the device,
 * fills A and B from the host and runs one GEMM untimed (page faults and first-use costs stay
 * out); every command then times REPS GEMMs, each from the cuBLAS call to the return of
 * cuCtxSynchronize, and answers `times OP N NS NS ...`. Before answering it checks C: 64
 * elements spread over the matrix against the host's dot products in double precision. A CUDA
 * or cuBLAS error or a wrong element prints `error ...` on stderr and exits 1. Prints `ready`
 * once the context and the cuBLAS handle exist.
 */
#define _GNU_SOURCE
#include "gpupool_cublas.h"
#include "gpupool_cuda.h"

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CU_FUNCTIONS(X)                                                                            \
    X(cuInit) X(cuGetErrorName) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuCtxSetCurrent)     \
    X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2) X(cuMemsetD8_v2)       \
    X(cuCtxSynchronize)

#define DECLARE_PTR(name) static __typeof__(name) *p_##name;
CU_FUNCTIONS(DECLARE_PTR)

/* NVIDIA declares cublasHgemm for C++ only (__half is a class there); its ABI passes and points
 * to 2-byte values, spelled here as uint16_t bit patterns. */
typedef cublasStatus_t hgemm_fn(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                const uint16_t *, const uint16_t *, int, const uint16_t *, int,
                                const uint16_t *, uint16_t *, int);
static __typeof__(cublasCreate_v2) *p_cublasCreate_v2;
static __typeof__(cublasSgemm_v2) *p_cublasSgemm_v2;
static hgemm_fn *p_cublasHgemm;

static void die(const char *what, long code) {
    fflush(stdout);
    fprintf(stderr, "error %s %ld\n", what, code);
    exit(1);
}

static void cu(const char *call, CUresult rc) {
    if (rc == CUDA_SUCCESS) return;
    const char *name = NULL;
    if (!p_cuGetErrorName || p_cuGetErrorName(rc, &name) != CUDA_SUCCESS || !name) name = "?";
    fflush(stdout);
    fprintf(stderr, "error %s %d %s\n", call, (int)rc, name);
    exit(1);
}

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "error dlsym %s: %s\n", name, dlerror());
        exit(1);
    }
    return p;
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Element (i, j) of A or B: a multiple of 1/8 in [-1, 1], exact in fp16 and fp32. */
static float element(int which, size_t i, size_t j) {
    return (float)((int)((i * 7 + j * 3 + (size_t)which * 5) % 17) - 8) / 8.0f;
}

/* fp32 -> fp16 bits, round to nearest even; the operands are exact and the results are normal
 * or zero (|C| <= N), so subnormals and overflow never occur here. */
static uint16_t to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, mag = x & 0x7fffffffu;
    if (mag < 0x38800000u) return (uint16_t)sign; /* below fp16's smallest normal: zero */
    uint32_t m = mag - 0x38000000u;                /* rebias the exponent 127 -> 15 */
    uint32_t h = m >> 13, rest = m & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

static float from_half(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t x = e == 0 ? sign : sign | ((e + 112u) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

struct shape {
    int half; /* 1: hgemm (fp16), 0: sgemm (fp32) */
    size_t n;
    CUdeviceptr a, b, c;
};

static cublasHandle_t g_handle;

static void gemm(const struct shape *s) {
    int n = (int)s->n;
    if (s->half) {
        const uint16_t one = 0x3c00, zero = 0;
        cublasStatus_t st = p_cublasHgemm(g_handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one,
                                          (const uint16_t *)(uintptr_t)s->a, n, (const uint16_t *)(uintptr_t)s->b,
                                          n, &zero, (uint16_t *)(uintptr_t)s->c, n);
        if (st != CUBLAS_STATUS_SUCCESS) die("cublasHgemm", st);
    } else {
        const float one = 1.0f, zero = 0.0f;
        cublasStatus_t st = p_cublasSgemm_v2(g_handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one,
                                             (const float *)(uintptr_t)s->a, n, (const float *)(uintptr_t)s->b, n,
                                             &zero, (float *)(uintptr_t)s->c, n);
        if (st != CUBLAS_STATUS_SUCCESS) die("cublasSgemm_v2", st);
    }
    cu("cuCtxSynchronize", p_cuCtxSynchronize());
}

static void release(struct shape *s) {
    if (s->n == 0) return;
    cu("cuMemFree_v2", p_cuMemFree_v2(s->a));
    cu("cuMemFree_v2", p_cuMemFree_v2(s->b));
    cu("cuMemFree_v2", p_cuMemFree_v2(s->c));
    s->n = 0;
}

static void prepare(struct shape *s, int half, size_t n) {
    release(s);
    size_t es = half ? 2 : 4, bytes = n * n * es;
    s->half = half;
    s->n = n;
    cu("cuMemAlloc_v2", p_cuMemAlloc_v2(&s->a, bytes));
    cu("cuMemAlloc_v2", p_cuMemAlloc_v2(&s->b, bytes));
    cu("cuMemAlloc_v2", p_cuMemAlloc_v2(&s->c, bytes));
    unsigned char *host = malloc(bytes);
    if (!host) die("malloc", (long)bytes);
    for (int which = 0; which < 2; which++) {
        for (size_t j = 0; j < n; j++) {
            for (size_t i = 0; i < n; i++) {
                float v = element(which, i, j);
                if (half) ((uint16_t *)host)[i + j * n] = to_half(v);
                else ((float *)host)[i + j * n] = v;
            }
        }
        cu("cuMemcpyHtoD_v2", p_cuMemcpyHtoD_v2(which ? s->b : s->a, host, bytes));
    }
    free(host);
    cu("cuMemsetD8_v2", p_cuMemsetD8_v2(s->c, 0, bytes));
    gemm(s); /* warm-up, untimed */
}

/* C (column-major) against the host's dot products at 64 spread positions. */
static void check_result(const struct shape *s) {
    size_t n = s->n, es = s->half ? 2 : 4;
    unsigned char *c = malloc(n * n * es);
    if (!c) die("malloc", (long)(n * n * es));
    cu("cuMemcpyDtoH_v2", p_cuMemcpyDtoH_v2(c, s->c, n * n * es));
    for (size_t t = 0; t < 64; t++) {
        size_t i = (t * 37 + 3) % n, j = (t * 53 + 11) % n;
        double want = 0, scale = 0;
        for (size_t k = 0; k < n; k++) {
            double p = (double)element(0, i, k) * (double)element(1, k, j);
            want += p;
            scale += fabs(p);
        }
        double got = s->half ? from_half(((uint16_t *)c)[i + j * n]) : ((float *)c)[i + j * n];
        /* fp32 accumulation over N terms, then (hgemm) one rounding to fp16's 11 bits. */
        double tol = 1e-5 * scale + (s->half ? fabs(want) / 1024.0 : 0) + 1e-6;
        if (fabs(got - want) > tol) {
            fflush(stdout);
            fprintf(stderr, "error %s %zu: C[%zu,%zu] = %.6g, expected %.6g\n", s->half ? "hgemm" : "sgemm", n,
                    i, j, got, want);
            exit(1);
        }
    }
    free(c);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!cuda) die(dlerror(), 0);
#define LOAD(name) p_##name = (__typeof__(p_##name))sym(cuda, #name);
    CU_FUNCTIONS(LOAD)
    void *blas = dlopen("libcublas.so.13", RTLD_NOW | RTLD_GLOBAL);
    if (!blas) die(dlerror(), 0);
    p_cublasCreate_v2 = (__typeof__(p_cublasCreate_v2))sym(blas, "cublasCreate_v2");
    p_cublasSgemm_v2 = (__typeof__(p_cublasSgemm_v2))sym(blas, "cublasSgemm_v2");
    p_cublasHgemm = (hgemm_fn *)sym(blas, "cublasHgemm");

    CUdevice dev;
    CUcontext ctx;
    cu("cuInit", p_cuInit(0));
    cu("cuDeviceGet", p_cuDeviceGet(&dev, 0));
    cu("cuDevicePrimaryCtxRetain", p_cuDevicePrimaryCtxRetain(&ctx, dev));
    cu("cuCtxSetCurrent", p_cuCtxSetCurrent(ctx));
    cublasStatus_t st = p_cublasCreate_v2(&g_handle);
    if (st != CUBLAS_STATUS_SUCCESS) die("cublasCreate_v2", st);
    printf("ready\n");

    struct shape s = {0};
    char line[128], op[16];
    size_t n, reps;
    while (fgets(line, sizeof line, stdin)) {
        if (sscanf(line, "%15s %zu %zu", op, &n, &reps) != 3 || n == 0 || reps == 0 ||
            (strcmp(op, "sgemm") != 0 && strcmp(op, "hgemm") != 0)) {
            fprintf(stderr, "error bad command: %s", line);
            return 2;
        }
        int half = op[0] == 'h';
        if (s.n != n || s.half != half) prepare(&s, half, n);
        uint64_t *times = calloc(reps, sizeof *times);
        if (!times) die("calloc", (long)reps);
        for (size_t r = 0; r < reps; r++) {
            uint64_t t0 = now_ns();
            gemm(&s);
            times[r] = now_ns() - t0;
        }
        check_result(&s);
        printf("times %s %zu", op, n);
        for (size_t r = 0; r < reps; r++) printf(" %llu", (unsigned long long)times[r]);
        printf("\n");
        free(times);
    }
    release(&s);
    return 0;
}
