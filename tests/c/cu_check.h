/* The checks the C graph clients share: each call through its `p_<name>` pointer (declared by the
 * including file, `p_cuGetErrorName` among them) must succeed (CU), fail with one code (CU_EXPECT),
 * or a condition must hold (CHECK); the first failure prints FAIL with file and line and exits 1. */
#ifndef GPUPOOL_TESTS_CU_CHECK_H
#define GPUPOOL_TESTS_CU_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static const char *err_name(CUresult rc) {
    const char *n = NULL;
    if (!p_cuGetErrorName || p_cuGetErrorName(rc, &n) != CUDA_SUCCESS || !n) n = "?";
    return n;
}

#define CU(name, ...)                                                                                        \
    do {                                                                                                     \
        CUresult rc_ = p_##name(__VA_ARGS__);                                                                \
        if (rc_ != CUDA_SUCCESS) {                                                                           \
            fflush(stdout);                                                                                  \
            fprintf(stderr, "FAIL %s:%d %s: %d %s\n", __FILE__, __LINE__, #name, (int)rc_, err_name(rc_));   \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

#define CU_EXPECT(want, name, ...)                                                                           \
    do {                                                                                                     \
        CUresult rc_ = p_##name(__VA_ARGS__);                                                                \
        if (rc_ != (want)) {                                                                                 \
            fflush(stdout);                                                                                  \
            fprintf(stderr, "FAIL %s:%d %s returned %d, expected %d\n", __FILE__, __LINE__, #name, (int)rc_, \
                    (int)(want));                                                                            \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

#define CHECK(cond, what, a, b)                                                                              \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fflush(stdout);                                                                                  \
            fprintf(stderr, "FAIL %s:%d %s (%lld, %lld)\n", __FILE__, __LINE__, what, (long long)(a),        \
                    (long long)(b));                                                                         \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

/* Loads libcuda.so.1 (the simulator, or libgpupool.so under `gpupool run`) and resolves each
 * function the including file's X-macro list names into its p_<name>; on failure prints FAIL and
 * returns 1 from the calling function (main). Needs <dlfcn.h>. */
#define CU_RESOLVE_ONE_(name)                                                                                \
    if (!(p_##name = (__typeof__(name) *)dlsym(cu_lib_, #name))) {                                           \
        fprintf(stderr, "FAIL dlsym %s\n", #name);                                                           \
        return 1;                                                                                            \
    }
#define CU_LOAD_DRIVER(LIST)                                                                                 \
    void *cu_lib_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);                                          \
    if (!cu_lib_) {                                                                                          \
        fprintf(stderr, "FAIL dlopen: %s\n", dlerror());                                                     \
        return 1;                                                                                            \
    }                                                                                                        \
    LIST(CU_RESOLVE_ONE_)

#endif
