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

#endif
