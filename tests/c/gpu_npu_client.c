/* One process using a GPU and an NPU through the pool (pool-daemon/tests/npu.rs): built against
 * gpupool's CUDA and CANN headers and linked with -lcuda -lascendcl -lopapi, as a program using
 * both vendors' libraries is, and run unmodified under `gpupool run`. On GPU 0: an allocation,
 * cuMemsetD32 and a host round trip; on NPU 0: allocations, copies and aclnnAdd; each checked
 * against the CPU. Then it prints "holding GPU_BYTES NPU_BYTES" and waits for a line on stdin
 * (the test reads both devices' usage in the tenant's ledger meanwhile), frees everything and
 * prints "done". A failing call prints "FAIL ..." and exits 1.
 */
#define _POSIX_C_SOURCE 200809L
#include "gpupool_acl.h"
#include "gpupool_aclnn.h"
#include "gpupool_cuda.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CU(call)                                                                                 \
    do {                                                                                         \
        CUresult r_ = (call);                                                                    \
        if (r_ != CUDA_SUCCESS) {                                                                \
            printf("FAIL %s:%d: %s = %d\n", __FILE__, __LINE__, #call, (int)r_);                 \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

#define ACL(call)                                                                                \
    do {                                                                                         \
        aclError e_ = (call);                                                                    \
        if (e_ != ACL_SUCCESS) {                                                                 \
            printf("FAIL %s:%d: %s = %d\n", __FILE__, __LINE__, #call, (int)e_);                 \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

#define EXPECT(cond, ...)                                                                        \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                          \
            printf(__VA_ARGS__);                                                                 \
            printf("\n");                                                                        \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

enum { GPU_WORDS = 1 << 18, NPU_N = 1 << 16 };

int main(void) {
    /* The GPU: memset a MiB to a pattern, read it back, overwrite half from the host. */
    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext cuctx;
    CU(cuCtxCreate_v2(&cuctx, 0, dev));
    CUdeviceptr g;
    size_t gbytes = GPU_WORDS * sizeof(uint32_t);
    CU(cuMemAlloc_v2(&g, gbytes));
    uint32_t *words = malloc(gbytes);
    CU(cuMemsetD32_v2(g, 0xabcd1234u, GPU_WORDS));
    CU(cuMemcpyDtoH_v2(words, g, gbytes));
    for (int i = 0; i < GPU_WORDS; i++) EXPECT(words[i] == 0xabcd1234u, "GPU word %d is %#x", i, words[i]);
    for (int i = 0; i < GPU_WORDS / 2; i++) words[i] = (uint32_t)i * 2654435761u;
    CU(cuMemcpyHtoD_v2(g, words, gbytes / 2));
    memset(words, 0, gbytes);
    CU(cuMemcpyDtoH_v2(words, g, gbytes));
    for (int i = 0; i < GPU_WORDS; i++) {
        uint32_t want = i < GPU_WORDS / 2 ? (uint32_t)i * 2654435761u : 0xabcd1234u;
        EXPECT(words[i] == want, "GPU word %d is %#x, want %#x", i, words[i], want);
    }
    printf("ok GPU memset and copies match the CPU\n");

    /* The NPU: out = a + 2 b with aclnnAdd. */
    ACL(aclInit(NULL));
    ACL(aclrtSetDevice(0));
    aclrtStream stream;
    ACL(aclrtCreateStream(&stream));
    size_t nbytes = NPU_N * sizeof(float);
    float *a = malloc(nbytes), *b = malloc(nbytes), *out = malloc(nbytes);
    for (int i = 0; i < NPU_N; i++) a[i] = (float)(i % 101) - 50.0f, b[i] = (float)(i % 13) * 0.25f;
    void *da, *db, *dout;
    ACL(aclrtMalloc(&da, nbytes, ACL_MEM_MALLOC_HUGE_FIRST));
    ACL(aclrtMalloc(&db, nbytes, ACL_MEM_MALLOC_HUGE_FIRST));
    ACL(aclrtMalloc(&dout, nbytes, ACL_MEM_MALLOC_HUGE_FIRST));
    ACL(aclrtMemcpy(da, nbytes, a, nbytes, ACL_MEMCPY_HOST_TO_DEVICE));
    ACL(aclrtMemcpy(db, nbytes, b, nbytes, ACL_MEMCPY_HOST_TO_DEVICE));
    int64_t shape[1] = {NPU_N}, strides[1] = {1};
    aclTensor *ta = aclCreateTensor(shape, 1, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, shape, 1, da);
    aclTensor *tb = aclCreateTensor(shape, 1, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, shape, 1, db);
    aclTensor *tout = aclCreateTensor(shape, 1, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, shape, 1, dout);
    float two = 2.0f;
    aclScalar *alpha = aclCreateScalar(&two, ACL_FLOAT);
    EXPECT(ta && tb && tout && alpha, "tensor descriptions");
    uint64_t ws = 0;
    aclOpExecutor *ex = NULL;
    ACL(aclnnAddGetWorkspaceSize(ta, tb, alpha, tout, &ws, &ex));
    EXPECT(ws == 0, "aclnnAdd workspace %llu", (unsigned long long)ws);
    ACL(aclnnAdd(NULL, 0, ex, stream));
    ACL(aclrtSynchronizeStream(stream));
    ACL(aclrtMemcpy(out, nbytes, dout, nbytes, ACL_MEMCPY_DEVICE_TO_HOST));
    for (int i = 0; i < NPU_N; i++) EXPECT(out[i] == a[i] + 2.0f * b[i], "NPU out[%d] = %g", i, out[i]);
    printf("ok NPU copies and aclnnAdd match the CPU\n");

    /* The GPU's memory is untouched by the NPU's work. */
    CU(cuMemcpyDtoH_v2(words, g, sizeof(uint32_t) * 4));
    EXPECT(words[1] == 2654435761u, "GPU word 1 is %#x after the NPU's work", words[1]);

    /* aclrtMalloc costs the size rounded up to 32 bytes plus 32, as CANN documents. */
    printf("holding %zu %zu\n", gbytes, 3 * ((nbytes + 31) / 32 * 32 + 32));
    fflush(stdout);
    char line[8];
    EXPECT(fgets(line, sizeof line, stdin) != NULL, "stdin closed");

    aclDestroyTensor(ta), aclDestroyTensor(tb), aclDestroyTensor(tout), aclDestroyScalar(alpha);
    ACL(aclrtFree(da));
    ACL(aclrtFree(db));
    ACL(aclrtFree(dout));
    ACL(aclrtDestroyStream(stream));
    ACL(aclrtResetDevice(0));
    ACL(aclFinalize());
    CU(cuMemFree_v2(g));
    CU(cuCtxDestroy_v2(cuctx));
    free(words), free(a), free(b), free(out);
    printf("done\n");
    return 0;
}
