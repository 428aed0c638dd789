/* An AscendCL program built against gpupool's CANN header and linked with -lascendcl, run
 * unmodified under `gpupool run` (pool-daemon/tests/npu.rs): the quickstart's runtime sequence
 * (devices, a context, a stream, memory, copies both ways, device to device, memset, async
 * copies) and the operators aclnnAdd, aclnnMul, aclnnMatmul, aclnnSoftmax and aclnnReduceSum (fp32
 * and fp16) checked against the CPU, an operand past its allocation faulting its context (never
 * run), aclrtGetMemInfo equal to the tenant's quota, out of memory
 * exactly at the quota with ACL_ERROR_RT_MEMORY_ALLOCATION, and handles this process never
 * made refused.
 *   npu_pool_client QUOTA_MIB            the checks; prints "ok <check>" lines, then "done"
 *   npu_pool_client --matmuls SECONDS    runs 96x96 fp32 aclnnMatmuls back to back on NPU 0 for
 *                                        SECONDS, then prints "matmuls N"
 *   npu_pool_client --copy-forever MIB   allocates MIB, prints "copying PID" and copies to and
 *                                        from it until killed
 */
#define _POSIX_C_SOURCE 200809L
#include "gpupool_acl.h"
#include "gpupool_aclnn.h"
#include "gpupool_dcmi.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

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
        aclError e_ = (call);                                                                    \
        if (e_ != ACL_SUCCESS) {                                                                 \
            printf("FAIL %s:%d: %s = %d\n", __FILE__, __LINE__, #call, e_);                      \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static void ok(const char *check) {
    if (failures == 0) printf("ok %s\n", check);
    fflush(stdout);
}

/* What aclrtMalloc costs, as CANN documents: the size rounded up to 32 bytes, plus 32. */
static size_t charge(size_t n) { return (n + 31) / 32 * 32 + 32; }

/* IEEE half bits of a float that fp16 holds exactly (normal values, no rounding needed). */
static uint16_t half_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) == 0) return (uint16_t)(x >> 16);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    int exp = (int)((x >> 23) & 0xff) - 127 + 15;
    return (uint16_t)(sign | (exp << 10) | ((x >> 13) & 0x3ffu));
}

static int copy_forever(size_t mib) {
    ACL(aclInit(NULL));
    ACL(aclrtSetDevice(0));
    void *dev = NULL;
    size_t n = mib * MIB;
    ACL(aclrtMalloc(&dev, n, ACL_MEM_MALLOC_HUGE_FIRST));
    unsigned char *host = malloc(n);
    memset(host, 7, n);
    printf("copying %d\n", (int)getpid());
    fflush(stdout);
    for (;;) {
        ACL(aclrtMemcpy(dev, n, host, n, ACL_MEMCPY_HOST_TO_DEVICE));
        ACL(aclrtMemcpy(host, n, dev, n, ACL_MEMCPY_DEVICE_TO_HOST));
    }
}

/* Matmuls back to back for `seconds`: the load a compute quota holds. */
static int matmuls(double seconds) {
    enum { N = 96 };
    ACL(aclInit(NULL));
    ACL(aclrtSetDevice(0));
    aclrtStream stream = NULL;
    ACL(aclrtCreateStream(&stream));
    void *d = NULL;
    ACL(aclrtMalloc(&d, N * N * 4, ACL_MEM_MALLOC_HUGE_FIRST));
    ACL(aclrtMemset(d, N * N * 4, 0, N * N * 4));
    int64_t dims[2] = {N, N}, strides[2] = {N, 1}, storage[1] = {N * N};
    aclTensor *t = aclCreateTensor(dims, 2, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, storage, 1, d);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long n = 0;
    for (double elapsed = 0; elapsed < seconds && failures == 0; n++) {
        uint64_t ws = 0;
        aclOpExecutor *ex = NULL;
        ACL(aclnnMatmulGetWorkspaceSize(t, t, t, 0, &ws, &ex));
        ACL(aclnnMatmul(NULL, ws, ex, stream));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        elapsed = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    }
    ACL(aclrtSynchronizeStream(stream));
    aclDestroyTensor(t);
    ACL(aclrtFree(d));
    ACL(aclrtDestroyStream(stream));
    ACL(aclrtResetDevice(0));
    ACL(aclFinalize());
    printf("matmuls %ld\n", n);
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--copy-forever") == 0) return copy_forever((size_t)atol(argv[2]));
    if (argc == 3 && strcmp(argv[1], "--matmuls") == 0) return matmuls(atof(argv[2]));
    if (argc != 2) {
        fprintf(stderr, "usage: npu_pool_client QUOTA_MIB | --matmuls SECONDS | --copy-forever MIB\n");
        return 2;
    }
    size_t quota = (size_t)atol(argv[1]) * MIB;

    ACL(aclInit(NULL));
    CHECK(aclInit(NULL) == ACL_ERROR_REPEAT_INITIALIZE, "a second aclInit");
    uint32_t count = 0;
    ACL(aclrtGetDeviceCount(&count));
    CHECK(count == 2, "%u NPUs, want 2", count);
    ACL(aclrtSetDevice(0));
    aclrtContext ctx = NULL;
    ACL(aclrtCreateContext(&ctx, 0));
    aclrtContext cur = NULL;
    ACL(aclrtGetCurrentContext(&cur));
    CHECK(cur == ctx, "the new context is current");
    int32_t dev_id = -1;
    ACL(aclrtGetDevice(&dev_id));
    CHECK(dev_id == 0, "device %d", dev_id);
    const char *soc = aclrtGetSocName();
    CHECK(soc != NULL && strstr(soc, "Ascend") != NULL, "SoC name %s", soc ? soc : "(null)");
    aclrtRunMode mode;
    ACL(aclrtGetRunMode(&mode));
    CHECK(mode == ACL_HOST, "run mode %d", (int)mode);
    ok("devices, contexts and the SoC name through the pool");

    size_t free_b = 0, total_b = 0;
    ACL(aclrtGetMemInfo(ACL_HBM_MEM, &free_b, &total_b));
    CHECK(total_b == quota && free_b == quota, "free %zu total %zu, quota %zu", free_b, total_b, quota);
    int cards = 0, card_list[8];
    CHECK(dcmi_init() == 0, "dcmi_init");
    CHECK(dcmi_get_card_num_list(&cards, card_list, 8) == 0 && cards == 2, "%d cards", cards);
    int chips = 0;
    CHECK(dcmi_get_device_num_in_card(0, &chips) == 0 && chips == 1, "%d chips", chips);
    struct dcmi_get_memory_info_stru mi;
    memset(&mi, 0, sizeof mi);
    CHECK(dcmi_get_device_memory_info_v3(0, 0, &mi) == 0, "memory info v3");
    CHECK(mi.memory_size == quota >> 20 && mi.memory_available == quota >> 20, "DCMI %llu MB, %llu available",
          (unsigned long long)mi.memory_size, (unsigned long long)mi.memory_available);
    CHECK(dcmi_get_device_memory_info_v3(5, 0, &mi) == DCMI_ERR_CODE_INVALID_DEVICE_ID, "card 5");
    ok("aclrtGetMemInfo and DCMI show the quota");

    aclrtStream stream = NULL;
    ACL(aclrtCreateStream(&stream));
    /* The quickstart's runtime sequence: x and y to the device, y <- x (device to device) then
     * x <- 3 bytes everywhere, both back; a large buffer both ways through the staging area. */
    const size_t n = 1 << 16;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float)), *back = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)i * 0.5f - 7.0f, y[i] = 1.0f;
    void *dx = NULL, *dy = NULL;
    ACL(aclrtMalloc(&dx, n * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST));
    ACL(aclrtMalloc(&dy, n * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST));
    ACL(aclrtMemcpy(dx, n * sizeof(float), x, n * sizeof(float), ACL_MEMCPY_HOST_TO_DEVICE));
    ACL(aclrtMemcpy(dy, n * sizeof(float), y, n * sizeof(float), ACL_MEMCPY_HOST_TO_DEVICE));
    ACL(aclrtMemcpy(dy, n * sizeof(float), dx, n * sizeof(float), ACL_MEMCPY_DEVICE_TO_DEVICE));
    ACL(aclrtMemset(dx, n * sizeof(float), 3, n * sizeof(float)));
    ACL(aclrtMemcpy(back, n * sizeof(float), dy, n * sizeof(float), ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK(memcmp(back, x, n * sizeof(float)) == 0, "device-to-device copy differs from the CPU's x");
    unsigned char *bytes = (unsigned char *)back;
    ACL(aclrtMemcpy(back, n * sizeof(float), dx, n * sizeof(float), ACL_MEMCPY_DEVICE_TO_HOST));
    int all3 = 1;
    for (size_t i = 0; i < n * sizeof(float); i++) all3 &= bytes[i] == 3;
    CHECK(all3, "aclrtMemset did not set every byte");
    ok("copies both ways, device to device and memset match the CPU");

    /* Stream-ordered: x doubled on the CPU, to the device on the stream, device to device,
     * back on the stream; right after aclrtSynchronizeStream. */
    for (size_t i = 0; i < n; i++) x[i] *= 2.0f;
    ACL(aclrtMemcpyAsync(dx, n * sizeof(float), x, n * sizeof(float), ACL_MEMCPY_HOST_TO_DEVICE, stream));
    ACL(aclrtMemcpyAsync(dy, n * sizeof(float), dx, n * sizeof(float), ACL_MEMCPY_DEVICE_TO_DEVICE, stream));
    ACL(aclrtMemsetAsync(dx, n * sizeof(float), 0, n * sizeof(float), stream));
    ACL(aclrtMemcpyAsync(back, n * sizeof(float), dy, n * sizeof(float), ACL_MEMCPY_DEVICE_TO_HOST, stream));
    ACL(aclrtSynchronizeStream(stream));
    CHECK(memcmp(back, x, n * sizeof(float)) == 0, "stream-ordered copies differ from the CPU");
    ok("stream-ordered copies and memset match the CPU");

    /* Operators: out = a + 0.5 * b, prod = a * b, c = A @ B, against the CPU. */
    {
        enum { M = 4, K = 5, N = 3 };
        float a[M * K], b[M * K], mb[K * N], out[M * K], prod[M * K], mc[M * N];
        for (int i = 0; i < M * K; i++) a[i] = (float)(i % 7) - 2.5f, b[i] = (float)(i * 3 % 11) * 0.25f;
        for (int i = 0; i < K * N; i++) mb[i] = (float)((i * 5) % 9) - 4.0f;
        void *da, *db2, *dout, *dprod, *dmb, *dmc;
        ACL(aclrtMalloc(&da, sizeof a, ACL_MEM_MALLOC_HUGE_FIRST));
        ACL(aclrtMalloc(&db2, sizeof b, ACL_MEM_MALLOC_HUGE_FIRST));
        ACL(aclrtMalloc(&dout, sizeof out, ACL_MEM_MALLOC_HUGE_FIRST));
        ACL(aclrtMalloc(&dprod, sizeof prod, ACL_MEM_MALLOC_HUGE_FIRST));
        ACL(aclrtMalloc(&dmb, sizeof mb, ACL_MEM_MALLOC_HUGE_FIRST));
        ACL(aclrtMalloc(&dmc, sizeof mc, ACL_MEM_MALLOC_HUGE_FIRST));
        ACL(aclrtMemcpy(da, sizeof a, a, sizeof a, ACL_MEMCPY_HOST_TO_DEVICE));
        ACL(aclrtMemcpy(db2, sizeof b, b, sizeof b, ACL_MEMCPY_HOST_TO_DEVICE));
        ACL(aclrtMemcpy(dmb, sizeof mb, mb, sizeof mb, ACL_MEMCPY_HOST_TO_DEVICE));
        int64_t mk[2] = {M, K}, kn[2] = {K, N}, mn[2] = {M, N};
        int64_t s_mk[2] = {K, 1}, s_kn[2] = {N, 1}, s_mn[2] = {N, 1};
        int64_t st_mk[1] = {M * K}, st_kn[1] = {K * N}, st_mn[1] = {M * N};
        aclTensor *ta = aclCreateTensor(mk, 2, ACL_FLOAT, s_mk, 0, ACL_FORMAT_ND, st_mk, 1, da);
        aclTensor *tb = aclCreateTensor(mk, 2, ACL_FLOAT, s_mk, 0, ACL_FORMAT_ND, st_mk, 1, db2);
        aclTensor *tout = aclCreateTensor(mk, 2, ACL_FLOAT, s_mk, 0, ACL_FORMAT_ND, st_mk, 1, dout);
        aclTensor *tprod = aclCreateTensor(mk, 2, ACL_FLOAT, s_mk, 0, ACL_FORMAT_ND, st_mk, 1, dprod);
        aclTensor *tmb = aclCreateTensor(kn, 2, ACL_FLOAT, s_kn, 0, ACL_FORMAT_ND, st_kn, 1, dmb);
        aclTensor *tmc = aclCreateTensor(mn, 2, ACL_FLOAT, s_mn, 0, ACL_FORMAT_ND, st_mn, 1, dmc);
        float half = 0.5f;
        aclScalar *alpha = aclCreateScalar(&half, ACL_FLOAT);
        CHECK(ta && tb && tout && tprod && tmb && tmc && alpha, "tensor descriptions");
        uint64_t ws = 0;
        aclOpExecutor *ex = NULL;
        ACL(aclnnAddGetWorkspaceSize(ta, tb, alpha, tout, &ws, &ex));
        CHECK(ws == 0, "aclnnAdd workspace %llu", (unsigned long long)ws);
        ACL(aclnnAdd(NULL, 0, ex, stream));
        CHECK(aclnnAdd(NULL, 0, ex, stream) == ACLNN_ERR_PARAM_INVALID, "an executor runs once");
        ACL(aclnnMulGetWorkspaceSize(ta, tb, tprod, &ws, &ex));
        ACL(aclnnMul(NULL, 0, ex, stream));
        ACL(aclnnMatmulGetWorkspaceSize(ta, tmb, tmc, 0, &ws, &ex));
        ACL(aclnnMatmul(NULL, 0, ex, stream));
        ACL(aclrtSynchronizeStream(stream));
        ACL(aclrtMemcpy(out, sizeof out, dout, sizeof out, ACL_MEMCPY_DEVICE_TO_HOST));
        ACL(aclrtMemcpy(prod, sizeof prod, dprod, sizeof prod, ACL_MEMCPY_DEVICE_TO_HOST));
        ACL(aclrtMemcpy(mc, sizeof mc, dmc, sizeof mc, ACL_MEMCPY_DEVICE_TO_HOST));
        int add_ok = 1, mul_ok = 1, mm_ok = 1;
        for (int i = 0; i < M * K; i++) {
            add_ok &= fabsf(out[i] - (a[i] + 0.5f * b[i])) < 1e-5f;
            mul_ok &= fabsf(prod[i] - a[i] * b[i]) < 1e-5f;
        }
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float want = 0;
                for (int k = 0; k < K; k++) want += a[i * K + k] * mb[k * N + j];
                mm_ok &= fabsf(mc[i * N + j] - want) < 1e-4f;
            }
        /* Softmax over the last dimension of a, into out. */
        ACL(aclnnSoftmaxGetWorkspaceSize(ta, -1, tout, &ws, &ex));
        ACL(aclnnSoftmax(NULL, 0, ex, stream));
        ACL(aclrtSynchronizeStream(stream));
        ACL(aclrtMemcpy(out, sizeof out, dout, sizeof out, ACL_MEMCPY_DEVICE_TO_HOST));
        int sm_ok = 1;
        for (int i = 0; i < M; i++) {
            float mx = a[i * K], sum = 0;
            for (int k = 1; k < K; k++) mx = a[i * K + k] > mx ? a[i * K + k] : mx;
            for (int k = 0; k < K; k++) sum += expf(a[i * K + k] - mx);
            for (int k = 0; k < K; k++) sm_ok &= fabsf(out[i * K + k] - expf(a[i * K + k] - mx) / sum) < 1e-5f;
        }
        CHECK(add_ok && mul_ok && mm_ok && sm_ok, "add %d mul %d matmul %d softmax %d", add_ok, mul_ok, mm_ok, sm_ok);
        ok("aclnnAdd, aclnnMul, aclnnMatmul and aclnnSoftmax through the pool match the CPU");

        /* ReduceSum: fp32 over dimension 0 into K values, over dimension -1 keeping it into Mx1,
         * and fp16 over both dimensions (an empty list) into one value; dimensions out of range or
         * twice refused. */
        int64_t d0[1] = {0}, dlast[1] = {-1}, dup[2] = {1, -1}, d2[1] = {2};
        aclIntArray *l0 = aclCreateIntArray(d0, 1), *llast = aclCreateIntArray(dlast, 1);
        aclIntArray *ldup = aclCreateIntArray(dup, 2), *l2 = aclCreateIntArray(d2, 1), *lall = aclCreateIntArray(NULL, 0);
        CHECK(l0 && llast && ldup && l2 && lall, "int arrays");
        int64_t k1[1] = {K}, m1[2] = {M, 1}, s_m1[2] = {1, 1}, st_m[1] = {M}, st_k[1] = {K}, s1[1] = {1};
        aclTensor *tk = aclCreateTensor(k1, 1, ACL_FLOAT, s1, 0, ACL_FORMAT_ND, st_k, 1, dprod);
        aclTensor *tm1 = aclCreateTensor(m1, 2, ACL_FLOAT, s_m1, 0, ACL_FORMAT_ND, st_m, 1, dmc);
        ACL(aclnnReduceSumGetWorkspaceSize(ta, l0, false, ACL_FLOAT, tk, &ws, &ex));
        ACL(aclnnReduceSum(NULL, ws, ex, stream));
        ACL(aclnnReduceSumGetWorkspaceSize(ta, llast, true, ACL_FLOAT, tm1, &ws, &ex));
        ACL(aclnnReduceSum(NULL, ws, ex, stream));
        ACL(aclrtSynchronizeStream(stream));
        float rk[K], rm[M];
        ACL(aclrtMemcpy(rk, sizeof rk, dprod, sizeof rk, ACL_MEMCPY_DEVICE_TO_HOST));
        ACL(aclrtMemcpy(rm, sizeof rm, dmc, sizeof rm, ACL_MEMCPY_DEVICE_TO_HOST));
        int rs_ok = 1;
        for (int k = 0; k < K; k++) {
            float want = 0;
            for (int i = 0; i < M; i++) want += a[i * K + k];
            rs_ok &= fabsf(rk[k] - want) < 1e-5f;
        }
        for (int i = 0; i < M; i++) {
            float want = 0;
            for (int k = 0; k < K; k++) want += a[i * K + k];
            rs_ok &= fabsf(rm[i] - want) < 1e-5f;
        }
        CHECK(rs_ok, "fp32 reduce-sum differs from the CPU");
        /* fp16: a[i] = i / 4 - 2 (exact in fp16), built bit by bit for the small values used. */
        uint16_t h[M * K], hsum = 0;
        float hwant = 0;
        for (int i = 0; i < M * K; i++) {
            float v = (float)i / 4.0f - 2.0f;
            hwant += v;
            h[i] = half_bits(v);
        }
        ACL(aclrtMemcpy(db2, sizeof h, h, sizeof h, ACL_MEMCPY_HOST_TO_DEVICE));
        aclTensor *th = aclCreateTensor(mk, 2, ACL_FLOAT16, s_mk, 0, ACL_FORMAT_ND, st_mk, 1, db2);
        aclTensor *th0 = aclCreateTensor(NULL, 0, ACL_FLOAT16, NULL, 0, ACL_FORMAT_ND, s1, 1, dout);
        ACL(aclnnReduceSumGetWorkspaceSize(th, lall, false, ACL_FLOAT16, th0, &ws, &ex));
        ACL(aclnnReduceSum(NULL, ws, ex, stream));
        ACL(aclrtSynchronizeStream(stream));
        ACL(aclrtMemcpy(&hsum, 2, dout, 2, ACL_MEMCPY_DEVICE_TO_HOST));
        CHECK(hsum == half_bits(hwant), "fp16 reduce-sum %#x, want %#x (%g)", hsum, half_bits(hwant), hwant);
        CHECK(aclnnReduceSumGetWorkspaceSize(ta, ldup, false, ACL_FLOAT, tk, &ws, &ex) == ACLNN_ERR_PARAM_INVALID,
              "a dimension twice");
        CHECK(aclnnReduceSumGetWorkspaceSize(ta, l2, false, ACL_FLOAT, tk, &ws, &ex) == ACLNN_ERR_PARAM_INVALID,
              "a dimension out of range");
        CHECK(aclnnReduceSumGetWorkspaceSize(ta, l0, false, ACL_FLOAT, tm1, &ws, &ex) == ACLNN_ERR_PARAM_INVALID,
              "the wrong output shape");
        CHECK(aclnnReduceSumGetWorkspaceSize(ta, NULL, false, ACL_FLOAT, tk, &ws, &ex) == ACLNN_ERR_PARAM_NULLPTR,
              "NULL dimensions");
        aclDestroyTensor(tk), aclDestroyTensor(tm1), aclDestroyTensor(th), aclDestroyTensor(th0);
        aclDestroyIntArray(l0), aclDestroyIntArray(llast), aclDestroyIntArray(ldup), aclDestroyIntArray(l2);
        aclDestroyIntArray(lall);
        ok("aclnnReduceSum through the pool matches the CPU in fp32 and fp16");

        /* A storage reaching past its allocation is accepted (CANN cannot see an allocation's end)
         * and faults its context when it runs, which the daemon never lets it do: in a context of
         * its own, the launch is accepted, the synchronize is ACL_ERROR_RT_AICORE_EXCEPTION, and
         * the output is untouched. A view past its storage and a tensor this process never made
         * are refused before anything runs. */
        int64_t st_big[1] = {M * K * 4};
        aclTensor *past = aclCreateTensor(mk, 2, ACL_FLOAT, s_mk, 0, ACL_FORMAT_ND, st_big, 1, da);
        aclrtContext main_ctx = NULL, fctx = NULL;
        ACL(aclrtGetCurrentContext(&main_ctx));
        ACL(aclrtCreateContext(&fctx, 0));
        float before[M * K], after[M * K];
        ACL(aclrtMemcpy(before, sizeof before, dout, sizeof before, ACL_MEMCPY_DEVICE_TO_HOST));
        CHECK(aclnnAddGetWorkspaceSize(past, tb, alpha, tout, &ws, &ex) == ACLNN_SUCCESS, "past: prepared");
        CHECK(aclnnAdd(NULL, ws, ex, NULL) == ACLNN_SUCCESS, "past: launched");
        CHECK(aclrtSynchronizeDevice() == ACL_ERROR_RT_AICORE_EXCEPTION, "past: the context faults");
        CHECK(aclrtMalloc(&(void *){NULL}, 64, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_ERROR_RT_AICORE_EXCEPTION, "sticky");
        ACL(aclrtDestroyContext(fctx));
        ACL(aclrtSetCurrentContext(main_ctx));
        ACL(aclrtMemcpy(after, sizeof after, dout, sizeof after, ACL_MEMCPY_DEVICE_TO_HOST));
        CHECK(memcmp(before, after, sizeof after) == 0, "past: the output was written");
        int64_t far[2] = {M, K * 2};
        aclTensor *wide = aclCreateTensor(far, 2, ACL_FLOAT, s_mk, 0, ACL_FORMAT_ND, st_mk, 1, da);
        CHECK(aclnnMulGetWorkspaceSize(wide, tb, tprod, &ws, &ex) == ACLNN_ERR_PARAM_INVALID, "a view past its storage");
        CHECK(aclnnMulGetWorkspaceSize((aclTensor *)(uintptr_t)0x4000, tb, tprod, &ws, &ex) == ACLNN_ERR_PARAM_INVALID,
              "a foreign tensor");
        CHECK(aclnnMulGetWorkspaceSize(ta, tb, tprod, NULL, &ex) == ACLNN_ERR_PARAM_NULLPTR, "NULL workspace size");
        ok("an operand past its memory faults its context; views past storage and foreign tensors are refused");
        aclDestroyTensor(past), aclDestroyTensor(wide);
        aclDestroyTensor(ta), aclDestroyTensor(tb), aclDestroyTensor(tout), aclDestroyTensor(tprod);
        aclDestroyTensor(tmb), aclDestroyTensor(tmc), aclDestroyScalar(alpha);
        void *bufs[] = {da, db2, dout, dprod, dmb, dmc};
        for (int i = 0; i < 6; i++) ACL(aclrtFree(bufs[i]));
    }

    /* Events: a second stream waits for an event recorded after a copy on the first; elapsed
     * time between two recorded events is non-negative; a foreign event is refused. */
    {
        aclrtStream s2 = NULL;
        ACL(aclrtCreateStream(&s2));
        aclrtEvent e0 = NULL, e1 = NULL;
        ACL(aclrtCreateEvent(&e0));
        ACL(aclrtCreateEvent(&e1));
        for (size_t i = 0; i < n; i++) x[i] = (float)i * 3.0f;
        ACL(aclrtRecordEvent(e0, stream));
        ACL(aclrtMemcpyAsync(dx, n * sizeof(float), x, n * sizeof(float), ACL_MEMCPY_HOST_TO_DEVICE, stream));
        ACL(aclrtRecordEvent(e1, stream));
        ACL(aclrtStreamWaitEvent(s2, e1));
        ACL(aclrtMemcpyAsync(dy, n * sizeof(float), dx, n * sizeof(float), ACL_MEMCPY_DEVICE_TO_DEVICE, s2));
        ACL(aclrtSynchronizeStream(s2));
        ACL(aclrtSynchronizeEvent(e1));
        aclrtEventRecordedStatus st = ACL_EVENT_RECORDED_STATUS_NOT_READY;
        ACL(aclrtQueryEventStatus(e1, &st));
        CHECK(st == ACL_EVENT_RECORDED_STATUS_COMPLETE, "the event completed");
        float ms = -1.0f;
        ACL(aclrtEventElapsedTime(&ms, e0, e1));
        CHECK(ms >= 0.0f, "elapsed %f ms", (double)ms);
        ACL(aclrtMemcpy(back, n * sizeof(float), dy, n * sizeof(float), ACL_MEMCPY_DEVICE_TO_HOST));
        CHECK(memcmp(back, x, n * sizeof(float)) == 0, "the waiting stream's copy differs");
        CHECK(aclrtSynchronizeEvent((aclrtEvent)(uintptr_t)0x6000) == (aclError)ACL_ERROR_RT_INVALID_HANDLE, "foreign event");
        ACL(aclrtDestroyEvent(e0));
        ACL(aclrtDestroyEvent(e1));
        ACL(aclrtDestroyStream(s2));
        ok("events order two streams and time them");
    }

    const size_t big = 24 * MIB;
    unsigned char *h = malloc(big), *hb = malloc(big);
    for (size_t i = 0; i < big; i++) h[i] = (unsigned char)(i * 131 + (i >> 12));
    void *db = NULL;
    ACL(aclrtMalloc(&db, big, ACL_MEM_MALLOC_HUGE_FIRST));
    ACL(aclrtMemcpy(db, big, h, big, ACL_MEMCPY_HOST_TO_DEVICE));
    ACL(aclrtMemcpy(hb, big, db, big, ACL_MEMCPY_DEVICE_TO_HOST));
    CHECK(memcmp(h, hb, big) == 0, "a 24 MiB round trip differs");
    ok("a 24 MiB round trip is byte-exact");

    /* The quota: what is held, then exactly the rest fits, and one more MiB does not. */
    size_t held = 2 * charge(n * sizeof(float)) + charge(big);
    ACL(aclrtGetMemInfo(ACL_HBM_MEM, &free_b, &total_b));
    CHECK(total_b == quota && free_b == quota - held, "free %zu total %zu after %zu held", free_b, total_b, held);
    void *rest = NULL;
    /* aclrtMallocAlign32 adds no padding: exactly the rest. */
    aclError e = aclrtMallocAlign32(&rest, quota - held, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK(e == ACL_SUCCESS, "the rest of the quota: %d", e);
    void *more = NULL;
    e = aclrtMalloc(&more, MIB, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK(e == ACL_ERROR_RT_MEMORY_ALLOCATION, "one MiB past the quota: %d, want 207001", e);
    const char *msg = aclGetRecentErrMsg();
    CHECK(msg != NULL && strstr(msg, "aclrtMalloc") != NULL, "error message %s", msg ? msg : "(null)");
    ACL(aclrtGetMemInfo(ACL_HBM_MEM, &free_b, &total_b));
    CHECK(free_b == 0, "free %zu at the quota", free_b);
    struct dcmi_hbm_info hbm;
    CHECK(dcmi_get_device_hbm_info(0, 0, &hbm) == 0 && hbm.memory_size == quota >> 20 && hbm.memory_usage == quota >> 20,
          "DCMI HBM %llu MB, %llu used at the quota", (unsigned long long)hbm.memory_size,
          (unsigned long long)hbm.memory_usage);
    ACL(aclrtFree(rest));
    e = aclrtMalloc(&more, MIB, ACL_MEM_MALLOC_HUGE_FIRST);
    CHECK(e == ACL_SUCCESS, "one MiB once freed: %d", e);
    ACL(aclrtFree(more));
    ok("out of memory exactly at the quota with 207001");

    /* Handles this process never made: refused, nothing sent for them. */
    CHECK(aclrtDestroyStream((aclrtStream)(uintptr_t)0x5000) == (aclError)ACL_ERROR_RT_INVALID_HANDLE, "foreign stream");
    CHECK(aclrtFree((void *)(uintptr_t)0x7f0000001000) == ACL_ERROR_INVALID_PARAM, "foreign pointer");
    CHECK(aclrtSetCurrentContext((aclrtContext)(uintptr_t)0x9000) == (aclError)ACL_ERROR_RT_INVALID_HANDLE,
          "foreign context");
    /* Past the allocation's end: refused (107000) as CANN refuses it, before the daemon, which
     * would refuse it too (it is not this session's memory). */
    e = aclrtMemcpy(back, 2 * n * sizeof(float), dx, 2 * n * sizeof(float), ACL_MEMCPY_DEVICE_TO_HOST);
    CHECK(e == (aclError)ACL_ERROR_RT_PARAM_INVALID, "a copy past the allocation: %d", e);
    CHECK(aclrtSetDevice(7) == (aclError)ACL_ERROR_RT_INVALID_DEVICEID, "device 7");
    ok("handles and memory not this process's are refused");

    ACL(aclrtFree(dx));
    ACL(aclrtFree(dy));
    ACL(aclrtFree(db));
    ACL(aclrtDestroyStream(stream));
    ACL(aclrtSynchronizeDevice());
    ACL(aclrtDestroyContext(ctx));
    ACL(aclrtResetDevice(0));
    ACL(aclFinalize());
    CHECK(aclFinalize() == ACL_ERROR_REPEAT_FINALIZE, "a second aclFinalize");
    ok("teardown");
    free(x), free(y), free(back), free(h), free(hb);
    printf(failures ? "FAILED %d\n" : "done\n", failures);
    return failures != 0;
}
