/* The lower runtime's memory calls a program (or a library beneath AscendCL) makes directly,
 * built against gpupool's CANN header and linked with -lruntime -lascendcl, run unmodified on the
 * simulated NPU and under `gpupool run --memory` (pool-daemon/tests/npu.rs): rtMemGetInfoEx shows
 * the device's memory (through the pool, the quota) as aclrtGetMemInfo does, rtMalloc of 64 MiB
 * blocks fills it exactly and then answers ACL_ERROR_RT_MEMORY_ALLOCATION (207001), the blocks
 * take AscendCL's copies, rtFree returns them, and bad arguments are ACL_ERROR_RT_PARAM_INVALID.
 *   npu_rt_client TOTAL_MIB   prints "ok <check>" lines and "held N MiB" / "freed" (each then
 *                             waits for a line on stdin, or its end), then "done"
 */
#include "gpupool_acl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB ((size_t)1 << 20)
#define BLOCKS 4096

static int failures;

#define CHECK(cond, ...)                                                                         \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                          \
            printf(__VA_ARGS__);                                                                 \
            printf("\n");                                                                        \
            failures++;                                                                          \
        }                                                                                        \
    } while (0)

#define ACL(call)                                                                                \
    do {                                                                                         \
        int e_ = (call);                                                                         \
        if (e_ != 0) {                                                                           \
            printf("FAIL %s:%d: %s = %d\n", __FILE__, __LINE__, #call, e_);                      \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static void ok(const char *check) {
    if (failures == 0) printf("ok %s\n", check);
    fflush(stdout);
}

/* Lets the caller look at the ledger before going on. */
static void pause_here(void) {
    char line[16];
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: npu_rt_client TOTAL_MIB\n");
        return 2;
    }
    size_t total_want = (size_t)strtoull(argv[1], NULL, 10) * MIB;
    ACL(aclInit(NULL));
    ACL(aclrtSetDevice(0));

    size_t free_b = 1, total_b = 1, acl_free = 0, acl_total = 0;
    ACL(rtMemGetInfoEx(RT_MEMORYINFO_HBM, &free_b, &total_b));
    ACL(aclrtGetMemInfo(ACL_HBM_MEM, &acl_free, &acl_total));
    CHECK(total_b == total_want, "rtMemGetInfoEx total %zu, want %zu", total_b, total_want);
    CHECK(free_b == acl_free && total_b == acl_total, "rt %zu/%zu, acl %zu/%zu", free_b, total_b, acl_free, acl_total);
    CHECK(free_b == total_b, "free %zu of %zu before any allocation", free_b, total_b);
    ACL(rtMemGetInfoEx(RT_MEMORYINFO_DDR, &free_b, &total_b));
    CHECK(free_b == 0 && total_b == 0, "device DDR %zu/%zu", free_b, total_b);
    CHECK(rtMemGetInfoEx(RT_MEMORYINFO_HBM, NULL, &total_b) == ACL_ERROR_RT_PARAM_INVALID, "NULL free");
    ok("rtMemGetInfoEx shows the memory as aclrtGetMemInfo does");

    /* 64 MiB blocks cost exactly 64 MiB: rtMalloc is unpadded (aclrtMalloc's 32 bytes are AscendCL's). */
    static void *blocks[BLOCKS];
    size_t n = 0;
    int refused = 0;
    while (n < BLOCKS) {
        void *p = NULL;
        refused = rtMalloc(&p, 64 * MIB, RT_MEMORY_HBM | RT_MEMORY_POLICY_HUGE_PAGE_FIRST, 0);
        if (refused != 0) break;
        blocks[n++] = p;
    }
    CHECK(refused == ACL_ERROR_RT_MEMORY_ALLOCATION, "the block past the memory: %d", refused);
    CHECK(n * 64 * MIB == total_want, "%zu blocks of 64 MiB in %zu MiB", n, total_want / MIB);
    void *one = NULL;
    CHECK(rtMalloc(&one, 1, RT_MEMORY_DEFAULT, 0) == ACL_ERROR_RT_MEMORY_ALLOCATION, "one byte more");
    ACL(rtMemGetInfoEx(RT_MEMORYINFO_HBM, &free_b, &total_b));
    CHECK(free_b == 0 && total_b == total_want, "full: free %zu, total %zu", free_b, total_b);
    ok("rtMalloc fills the memory exactly, then 207001");

    /* The blocks are device memory for AscendCL's calls. */
    static unsigned char src[4096], back[4096];
    for (size_t i = 0; i < sizeof src; i++) src[i] = (unsigned char)(i * 7 + 1);
    ACL(aclrtMemcpy(blocks[0], 64 * MIB, src, sizeof src, ACL_MEMCPY_HOST_TO_DEVICE));
    ACL(aclrtMemcpy(blocks[n - 1], 64 * MIB, blocks[0], sizeof src, ACL_MEMCPY_DEVICE_TO_DEVICE));
    ACL(aclrtMemcpy(back, sizeof back, blocks[n - 1], sizeof src, ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK(memcmp(src, back, sizeof src) == 0, "round trip through rtMalloc'd blocks");
    ok("AscendCL copies to and between rtMalloc blocks");

    printf("held %zu MiB\n", n * 64);
    pause_here();

    for (size_t i = 0; i < n; i++) ACL(rtFree(blocks[i]));
    ACL(rtMemGetInfoEx(RT_MEMORYINFO_HBM, &free_b, &total_b));
    CHECK(free_b == total_want && total_b == total_want, "after rtFree: free %zu of %zu", free_b, total_b);
    ok("rtFree returns every block");

    void *p = NULL;
    CHECK(rtFree(blocks[0]) == ACL_ERROR_RT_PARAM_INVALID, "a block freed twice");
    CHECK(rtFree(NULL) == ACL_ERROR_RT_PARAM_INVALID, "rtFree(NULL)");
    CHECK(rtMalloc(&p, 0, RT_MEMORY_HBM, 0) == ACL_ERROR_RT_PARAM_INVALID, "0 bytes");
    CHECK(rtMalloc(NULL, 64, RT_MEMORY_HBM, 0) == ACL_ERROR_RT_PARAM_INVALID, "NULL devPtr");
    CHECK(rtMalloc(&p, 64, RT_MEMORY_DDR, 0) == ACL_ERROR_RT_PARAM_INVALID, "device DDR");
    ok("bad arguments are ACL_ERROR_RT_PARAM_INVALID");

    printf("freed\n");
    pause_here();
    ACL(aclrtResetDevice(0));
    ACL(aclFinalize());
    if (failures) return 1;
    printf("done\n");
    return 0;
}
