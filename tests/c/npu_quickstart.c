/*
 * A plain CANN client, compiled against gpupool's own headers (gpupool_acl.h, gpupool_aclnn.h,
 * gpupool_dcmi.h) and linked with -lascendcl -lnnopbase -lopapi -ldcmi, as CANN's samples link:
 * run on the simulated NPU it goes through AscendCL's quickstart sequence (aclInit -> aclrtSetDevice -> aclrtCreateStream
 * -> aclrtMalloc -> aclrtMemcpy -> aclnnAdd / aclnnMul / aclnnMatmul / aclnnSoftmax /
 * aclnnReduceSum -> aclrtSynchronizeStream -> aclrtMemcpy back -> aclrtFree -> ... ->
 * aclFinalize) checked against the CPU, then the documented errors, out of memory at the
 * device's size, the sticky fault of an out-of-range operand, and DCMI against
 * aclrtGetMemInfo.
 *
 * Prints `PASS name` / `FAIL name: detail` per check and `SUMMARY`; exits non-zero on any
 * failure. Reads GPUPOOL_SIM_NPU_DEVICES / GPUPOOL_SIM_NPU_MEMORY to know what to expect
 * (unset: 2 devices of 64 GiB).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpupool_acl.h"
#include "gpupool_aclnn.h"
#include "gpupool_dcmi.h"

static int failures = 0;
static int passes = 0;

static void pass(const char *name) {
    printf("PASS %s\n", name);
    passes++;
}

static void failf(const char *name, const char *fmt, long long a, long long b) {
    printf("FAIL %s: ", name);
    printf(fmt, a, b);
    printf("\n");
    failures++;
}

/* A call's status against what it must be. */
static int expect(const char *name, long long got, long long want) {
    if (got == want) {
        pass(name);
        return 1;
    }
    failf(name, "got %lld, want %lld", got, want);
    return 0;
}

static int check(const char *name, int ok) {
    if (ok) {
        pass(name);
    } else {
        printf("FAIL %s\n", name);
        failures++;
    }
    return ok;
}

static size_t env_size(const char *var, size_t dflt) {
    const char *v = getenv(var);
    if (!v || !*v) return dflt;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    if (!strcmp(end, "MiB")) n <<= 20;
    else if (!strcmp(end, "GiB")) n <<= 30;
    else if (!strcmp(end, "KiB")) n <<= 10;
    return (size_t)n;
}

static aclTensor *tensor(const int64_t *dims, uint64_t n, aclDataType dt, void *data) {
    int64_t strides[8];
    int64_t s = 1;
    for (int i = (int)n - 1; i >= 0; i--) {
        strides[i] = s;
        s *= dims[i];
    }
    return aclCreateTensor(dims, n, dt, strides, 0, ACL_FORMAT_ND, dims, n, data);
}

static void *dev_copy_of(const void *host, size_t bytes) {
    void *p = NULL;
    if (aclrtMalloc(&p, bytes, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS) return NULL;
    if (aclrtMemcpy(p, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE) != ACL_SUCCESS) return NULL;
    return p;
}

static int close_all(const float *got, const float *want, int n, float tol) {
    for (int i = 0; i < n; i++) {
        if (fabsf(got[i] - want[i]) > tol * (1.0f + fabsf(want[i]))) {
            printf("  element %d: got %g, want %g\n", i, got[i], want[i]);
            return 0;
        }
    }
    return 1;
}

/* The quickstart: fp32 add (alpha, broadcasting), mul, matmul, softmax, reduce-sum. */
static void quickstart(aclrtStream stream) {
    float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {10, 20, 30}, m2[12];
    for (int i = 0; i < 12; i++) m2[i] = (float)(i % 5) - 1.5f;
    int64_t d23[2] = {2, 3}, d3[1] = {3}, d34[2] = {3, 4}, d24[2] = {2, 4}, d2[1] = {2};
    void *da = dev_copy_of(a, sizeof a), *db = dev_copy_of(b, sizeof b), *dm = dev_copy_of(m2, sizeof m2);
    void *dsum = NULL, *dmul = NULL, *dmm = NULL, *dsm = NULL, *drs = NULL;
    check("quickstart.malloc_and_copy", da && db && dm);
    aclrtMalloc(&dsum, sizeof a, ACL_MEM_MALLOC_HUGE_FIRST);
    aclrtMalloc(&dmul, sizeof a, ACL_MEM_MALLOC_HUGE_FIRST);
    aclrtMalloc(&dmm, 8 * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST);
    aclrtMalloc(&dsm, sizeof a, ACL_MEM_MALLOC_HUGE_FIRST);
    aclrtMalloc(&drs, 2 * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST);
    aclTensor *ta = tensor(d23, 2, ACL_FLOAT, da), *tb = tensor(d3, 1, ACL_FLOAT, db);
    aclTensor *tm = tensor(d34, 2, ACL_FLOAT, dm), *tsum = tensor(d23, 2, ACL_FLOAT, dsum);
    aclTensor *tmul = tensor(d23, 2, ACL_FLOAT, dmul), *tmm = tensor(d24, 2, ACL_FLOAT, dmm);
    aclTensor *tsm = tensor(d23, 2, ACL_FLOAT, dsm), *trs = tensor(d2, 1, ACL_FLOAT, drs);
    float two = 2.0f;
    aclScalar *alpha = aclCreateScalar(&two, ACL_FLOAT);
    check("quickstart.create_tensors", ta && tb && tm && tsum && tmul && tmm && tsm && trs && alpha);

    uint64_t ws = 123;
    aclOpExecutor *ex = NULL;
    expect("quickstart.aclnnAddGetWorkspaceSize", aclnnAddGetWorkspaceSize(ta, tb, alpha, tsum, &ws, &ex), ACLNN_SUCCESS);
    expect("quickstart.workspace_is_zero", (long long)ws, 0);
    expect("quickstart.aclnnAdd", aclnnAdd(NULL, ws, ex, stream), ACLNN_SUCCESS);
    expect("quickstart.aclnnMulGetWorkspaceSize", aclnnMulGetWorkspaceSize(ta, tb, tmul, &ws, &ex), ACLNN_SUCCESS);
    expect("quickstart.aclnnMul", aclnnMul(NULL, ws, ex, stream), ACLNN_SUCCESS);
    expect("quickstart.aclnnMatmulGetWorkspaceSize", aclnnMatmulGetWorkspaceSize(ta, tm, tmm, 1, &ws, &ex),
           ACLNN_SUCCESS);
    expect("quickstart.aclnnMatmul", aclnnMatmul(NULL, ws, ex, stream), ACLNN_SUCCESS);
    expect("quickstart.aclnnSoftmaxGetWorkspaceSize", aclnnSoftmaxGetWorkspaceSize(ta, -1, tsm, &ws, &ex),
           ACLNN_SUCCESS);
    expect("quickstart.aclnnSoftmax", aclnnSoftmax(NULL, ws, ex, stream), ACLNN_SUCCESS);
    int64_t dim1 = 1;
    aclIntArray *dims = aclCreateIntArray(&dim1, 1);
    expect("quickstart.aclnnReduceSumGetWorkspaceSize",
           aclnnReduceSumGetWorkspaceSize(ta, dims, false, ACL_FLOAT, trs, &ws, &ex), ACLNN_SUCCESS);
    expect("quickstart.aclnnReduceSum", aclnnReduceSum(NULL, ws, ex, stream), ACLNN_SUCCESS);
    expect("quickstart.aclrtSynchronizeStream", aclrtSynchronizeStream(stream), ACL_SUCCESS);

    float sum[6], mul[6], mm[8], sm[6], rs[2];
    aclrtMemcpy(sum, sizeof sum, dsum, sizeof sum, ACL_MEMCPY_DEVICE_TO_HOST);
    aclrtMemcpy(mul, sizeof mul, dmul, sizeof mul, ACL_MEMCPY_DEVICE_TO_HOST);
    aclrtMemcpy(mm, sizeof mm, dmm, sizeof mm, ACL_MEMCPY_DEVICE_TO_HOST);
    aclrtMemcpy(sm, sizeof sm, dsm, sizeof sm, ACL_MEMCPY_DEVICE_TO_HOST);
    expect("quickstart.memcpy_back", aclrtMemcpy(rs, sizeof rs, drs, sizeof rs, ACL_MEMCPY_DEVICE_TO_HOST),
           ACL_SUCCESS);
    float want_sum[6], want_mul[6], want_mm[8] = {0}, want_sm[6], want_rs[2] = {0};
    for (int i = 0; i < 2; i++) {
        float mx = -INFINITY, tot = 0;
        for (int j = 0; j < 3; j++) {
            want_sum[i * 3 + j] = a[i * 3 + j] + 2.0f * b[j];
            want_mul[i * 3 + j] = a[i * 3 + j] * b[j];
            want_rs[i] += a[i * 3 + j];
            mx = fmaxf(mx, a[i * 3 + j]);
            for (int k = 0; k < 4; k++) want_mm[i * 4 + k] += a[i * 3 + j] * m2[j * 4 + k];
        }
        for (int j = 0; j < 3; j++) tot += expf(a[i * 3 + j] - mx);
        for (int j = 0; j < 3; j++) want_sm[i * 3 + j] = expf(a[i * 3 + j] - mx) / tot;
    }
    check("quickstart.add_matches_cpu", close_all(sum, want_sum, 6, 1e-6f));
    check("quickstart.mul_matches_cpu", close_all(mul, want_mul, 6, 1e-6f));
    check("quickstart.matmul_matches_cpu", close_all(mm, want_mm, 8, 1e-5f));
    check("quickstart.softmax_matches_cpu", close_all(sm, want_sm, 6, 1e-5f));
    check("quickstart.reducesum_matches_cpu", close_all(rs, want_rs, 2, 1e-6f));

    aclDestroyTensor(ta), aclDestroyTensor(tb), aclDestroyTensor(tm), aclDestroyTensor(tsum);
    aclDestroyTensor(tmul), aclDestroyTensor(tmm), aclDestroyTensor(tsm), aclDestroyTensor(trs);
    aclDestroyScalar(alpha), aclDestroyIntArray(dims);
    void *all[] = {da, db, dm, dsum, dmul, dmm, dsm, drs};
    int freed = 1;
    for (int i = 0; i < 8; i++) freed &= aclrtFree(all[i]) == ACL_SUCCESS;
    check("quickstart.aclrtFree", freed);
}

/* fp16: a 16x32 @ 32x8 matmul and a broadcast add, against the CPU in float. */
static void fp16_ops(aclrtStream stream) {
    enum { M = 16, K = 32, N = 8 };
    aclFloat16 ha[M * K], hb[K * N], hbias[N];
    float fa[M * K], fb[K * N], fbias[N];
    for (int i = 0; i < M * K; i++) fa[i] = aclFloat16ToFloat(ha[i] = aclFloatToFloat16((float)((i * 7) % 11) / 8.0f - 0.5f));
    for (int i = 0; i < K * N; i++) fb[i] = aclFloat16ToFloat(hb[i] = aclFloatToFloat16((float)((i * 3) % 13) / 16.0f - 0.25f));
    for (int i = 0; i < N; i++) fbias[i] = aclFloat16ToFloat(hbias[i] = aclFloatToFloat16((float)i));
    check("fp16.conversions_round_trip", aclFloat16ToFloat(aclFloatToFloat16(1.5f)) == 1.5f && aclDataTypeSize(ACL_FLOAT16) == 2);
    void *da = dev_copy_of(ha, sizeof ha), *db = dev_copy_of(hb, sizeof hb), *dbias = dev_copy_of(hbias, sizeof hbias);
    void *dc = NULL, *dd = NULL;
    aclrtMalloc(&dc, M * N * 2, ACL_MEM_MALLOC_HUGE_FIRST);
    aclrtMalloc(&dd, M * N * 2, ACL_MEM_MALLOC_HUGE_FIRST);
    int64_t dmk[2] = {M, K}, dkn[2] = {K, N}, dmn[2] = {M, N}, dn[1] = {N};
    aclTensor *ta = tensor(dmk, 2, ACL_FLOAT16, da), *tb = tensor(dkn, 2, ACL_FLOAT16, db);
    aclTensor *tc = tensor(dmn, 2, ACL_FLOAT16, dc), *tbias = tensor(dn, 1, ACL_FLOAT16, dbias);
    aclTensor *td = tensor(dmn, 2, ACL_FLOAT16, dd);
    aclFloat16 one = aclFloatToFloat16(1.0f);
    aclScalar *alpha = aclCreateScalar(&one, ACL_FLOAT16);
    uint64_t ws;
    aclOpExecutor *ex;
    expect("fp16.matmul", aclnnMatmulGetWorkspaceSize(ta, tb, tc, 0, &ws, &ex) == ACLNN_SUCCESS &&
                              aclnnMatmul(NULL, ws, ex, stream) == ACLNN_SUCCESS, 1);
    expect("fp16.add", aclnnAddGetWorkspaceSize(tc, tbias, alpha, td, &ws, &ex) == ACLNN_SUCCESS &&
                           aclnnAdd(NULL, ws, ex, stream) == ACLNN_SUCCESS, 1);
    aclrtSynchronizeStream(stream);
    aclFloat16 hd[M * N];
    aclrtMemcpy(hd, sizeof hd, dd, sizeof hd, ACL_MEMCPY_DEVICE_TO_HOST);
    float got[M * N], want[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = 0;
            for (int k = 0; k < K; k++) s += fa[i * K + k] * fb[k * N + j];
            /* the matmul's result is stored as fp16 before the add reads it */
            want[i * N + j] = aclFloat16ToFloat(aclFloatToFloat16(s)) + fbias[j];
            got[i * N + j] = aclFloat16ToFloat(hd[i * N + j]);
        }
    check("fp16.matmul_then_add_match_cpu", close_all(got, want, M * N, 2e-3f));
    aclDestroyTensor(ta), aclDestroyTensor(tb), aclDestroyTensor(tc), aclDestroyTensor(tbias), aclDestroyTensor(td);
    aclDestroyScalar(alpha);
    aclrtFree(da), aclrtFree(db), aclrtFree(dbias), aclrtFree(dc), aclrtFree(dd);
}

/* Views: a transposed operand by its strides, and a sparse view (two floats 64 MiB apart) of a
 * large allocation, written into an offset view of its output. */
static void strided_views(aclrtStream stream) {
    float a[6] = {1, 2, 3, 4, 5, 6}; /* 2x3, row-major */
    float b[6] = {1, 0, 2, 1, 0, 3}; /* 2x3, row-major */
    void *da = dev_copy_of(a, sizeof a), *db = dev_copy_of(b, sizeof b), *dout = NULL;
    aclrtMalloc(&dout, 9 * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST);
    /* a^T (3x2, strides {1, 3}) @ b (2x3) = 3x3 */
    int64_t d32[2] = {3, 2}, s32[2] = {1, 3}, d23[2] = {2, 3}, d33[2] = {3, 3}, st6[1] = {6};
    aclTensor *at = aclCreateTensor(d32, 2, ACL_FLOAT, s32, 0, ACL_FORMAT_ND, st6, 1, da);
    aclTensor *tb = tensor(d23, 2, ACL_FLOAT, db), *to = tensor(d33, 2, ACL_FLOAT, dout);
    uint64_t ws;
    aclOpExecutor *ex;
    expect("views.transposed_matmul", aclnnMatmulGetWorkspaceSize(at, tb, to, 0, &ws, &ex) == ACLNN_SUCCESS &&
                                          aclnnMatmul(NULL, ws, ex, stream) == ACLNN_SUCCESS, 1);
    aclrtSynchronizeStream(stream);
    float got[9], want[9] = {0};
    aclrtMemcpy(got, sizeof got, dout, sizeof got, ACL_MEMCPY_DEVICE_TO_HOST);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 2; k++) want[i * 3 + j] += a[k * 3 + i] * b[k * 3 + j];
    check("views.transposed_matmul_matches_cpu", close_all(got, want, 9, 1e-6f));

    size_t big_bytes = (64u << 20) + 64;
    void *big = NULL;
    expect("views.large_allocation", aclrtMalloc(&big, big_bytes, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    float x0 = 3, x1 = -4;
    aclrtMemcpy(big, 4, &x0, 4, ACL_MEMCPY_HOST_TO_DEVICE);
    aclrtMemcpy((char *)big + (64u << 20), 4, &x1, 4, ACL_MEMCPY_HOST_TO_DEVICE);
    int64_t d2[1] = {2}, sparse_stride[1] = {(int64_t)16 << 20}, sparse_storage[1] = {((int64_t)16 << 20) + 1};
    aclTensor *sparse = aclCreateTensor(d2, 1, ACL_FLOAT, sparse_stride, 0, ACL_FORMAT_ND, sparse_storage, 1, big);
    /* the output: elements 5 and 6 of dout (offset 5) */
    int64_t one[1] = {1}, nine[1] = {9};
    aclTensor *out2 = aclCreateTensor(d2, 1, ACL_FLOAT, one, 5, ACL_FORMAT_ND, nine, 1, dout);
    expect("views.sparse_mul", aclnnMulGetWorkspaceSize(sparse, sparse, out2, &ws, &ex) == ACLNN_SUCCESS &&
                                   aclnnMul(NULL, ws, ex, stream) == ACLNN_SUCCESS, 1);
    expect("views.sparse_sync", aclrtSynchronizeStream(stream), ACL_SUCCESS);
    aclrtMemcpy(got, sizeof got, dout, sizeof got, ACL_MEMCPY_DEVICE_TO_HOST);
    check("views.sparse_and_offset_views", got[5] == 9 && got[6] == 16 && got[4] == want[4] && got[7] == want[7]);
    aclDestroyTensor(at), aclDestroyTensor(tb), aclDestroyTensor(to), aclDestroyTensor(sparse), aclDestroyTensor(out2);
    aclrtFree(da), aclrtFree(db), aclrtFree(dout), aclrtFree(big);
}

/* Streams run in order and asynchronously; events time them and order other streams. */
static void streams_and_events(aclrtStream s1) {
    aclrtStream s2 = NULL;
    aclrtEvent start = NULL, end = NULL;
    expect("events.create_stream2", aclrtCreateStream(&s2), ACL_SUCCESS);
    expect("events.create", aclrtCreateEvent(&start) | aclrtCreateEvent(&end), ACL_SUCCESS);
    enum { n = 1 << 20 };
    unsigned char *host = malloc(n);
    void *d = NULL;
    aclrtMalloc(&d, n, ACL_MEM_MALLOC_NORMAL_ONLY);
    aclrtRecordEvent(start, s1);
    aclrtMemsetAsync(d, n, 0x11, n, s1);
    aclrtMemsetAsync(d, n, 0x22, n / 2, s1);
    aclrtRecordEvent(end, s1);
    expect("events.stream_wait_event", aclrtStreamWaitEvent(s2, end), ACL_SUCCESS);
    memset(host, 0, n);
    aclrtMemcpyAsync(host, n, d, n, ACL_MEMCPY_DEVICE_TO_HOST, s2);
    expect("events.synchronize_stream2", aclrtSynchronizeStream(s2), ACL_SUCCESS);
    check("events.ordered_across_streams", host[0] == 0x22 && host[n / 2 - 1] == 0x22 && host[n / 2] == 0x11 &&
                                               host[n - 1] == 0x11);
    expect("events.synchronize_event", aclrtSynchronizeEvent(end), ACL_SUCCESS);
    aclrtEventStatus st = ACL_EVENT_STATUS_RESERVED;
    aclrtQueryEvent(end, &st);
    expect("events.query_complete", st, ACL_EVENT_STATUS_COMPLETE);
    aclrtEventRecordedStatus rst = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    aclrtQueryEventStatus(end, &rst);
    expect("events.recorded_status_complete", rst, ACL_EVENT_RECORDED_STATUS_COMPLETE);
    float ms = -1;
    expect("events.elapsed_time", aclrtEventElapsedTime(&ms, start, end), ACL_SUCCESS);
    check("events.elapsed_time_is_plausible", ms >= 0 && ms < 10000);
    aclrtStreamStatus ss = ACL_STREAM_STATUS_RESERVED;
    aclrtStreamQuery(s1, &ss);
    expect("events.stream_query_idle", ss, ACL_STREAM_STATUS_COMPLETE);
    aclrtEvent fresh = NULL;
    aclrtCreateEventWithFlag(&fresh, ACL_EVENT_TIME_LINE);
    expect("events.elapsed_of_unrecorded_event", aclrtEventElapsedTime(&ms, fresh, end), ACL_ERROR_INVALID_PARAM);
    expect("events.unknown_flag", aclrtCreateEventWithFlag(&fresh, 0x80000000u), ACL_ERROR_INVALID_PARAM);
    aclrtEvent untimed = NULL;
    aclrtCreateEventWithFlag(&untimed, ACL_EVENT_SYNC);
    aclrtRecordEvent(untimed, s1);
    aclrtSynchronizeEvent(untimed);
    expect("events.elapsed_needs_time_line", aclrtEventElapsedTime(&ms, start, untimed),
           ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID);
    aclrtDestroyEvent(untimed);
    /* memcpy device to device on the stream, then a synchronous read */
    void *d2 = NULL;
    aclrtMalloc(&d2, n, ACL_MEM_MALLOC_HUGE_FIRST);
    aclrtMemcpyAsync(d2, n, d, n, ACL_MEMCPY_DEVICE_TO_DEVICE, s1);
    aclrtSynchronizeStream(s1);
    aclrtMemcpy(host, n, d2, n, ACL_MEMCPY_DEFAULT);
    check("events.device_to_device_and_default_kind", host[0] == 0x22 && host[n - 1] == 0x11);
    expect("events.destroy", aclrtDestroyEvent(start) | aclrtDestroyEvent(end) | aclrtDestroyEvent(fresh), 0);
    expect("events.destroy_twice", aclrtDestroyEvent(start), ACL_ERROR_RT_INVALID_HANDLE);
    expect("events.destroy_stream2", aclrtDestroyStream(s2), ACL_SUCCESS);
    aclrtFree(d), aclrtFree(d2);
    free(host);
}

/* The documented errors for bad handles and parameters. */
static void errors(aclrtStream stream) {
    void *p = NULL;
    char host[64];
    expect("errors.malloc_null_out", aclrtMalloc(NULL, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
    expect("errors.malloc_zero", aclrtMalloc(&p, 0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_INVALID_PARAM);
    expect("errors.malloc_bad_policy", aclrtMalloc(&p, 64, (aclrtMemMallocPolicy)99), ACL_ERROR_INVALID_PARAM);
    expect("errors.free_host_pointer", aclrtFree(host), ACL_ERROR_INVALID_PARAM);
    expect("errors.free_null", aclrtFree(NULL), ACL_ERROR_INVALID_PARAM);
    aclrtMalloc(&p, 64, ACL_MEM_MALLOC_HUGE_FIRST);
    expect("errors.memcpy_count_over_destmax", aclrtMemcpy(p, 32, host, 64, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_ERROR_INVALID_PARAM);
    expect("errors.memcpy_past_allocation", aclrtMemcpy((char *)p + 32, 64, host, 64, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_ERROR_RT_PARAM_INVALID);
    expect("errors.memcpy_h2d_to_host", aclrtMemcpy(host, 64, host + 1, 32, ACL_MEMCPY_HOST_TO_DEVICE),
           ACL_ERROR_RT_PARAM_INVALID);
    expect("errors.memcpy_d2h_kind_reversed", aclrtMemcpy(p, 64, host, 64, ACL_MEMCPY_DEVICE_TO_HOST),
           ACL_ERROR_RT_PARAM_INVALID);
    expect("errors.memcpy_bad_kind", aclrtMemcpy(p, 64, host, 64, (aclrtMemcpyKind)42), ACL_ERROR_INVALID_PARAM);
    expect("errors.memset_past_end", aclrtMemset(p, 128, 0, 128), ACL_ERROR_RT_PARAM_INVALID);
    expect("errors.memcpy_async_bad_stream", aclrtMemcpyAsync(p, 64, host, 64, ACL_MEMCPY_HOST_TO_DEVICE,
                                                              (aclrtStream)0x1234), ACL_ERROR_RT_INVALID_HANDLE);
    expect("errors.sync_bad_stream", aclrtSynchronizeStream((aclrtStream)0xdead0), ACL_ERROR_RT_INVALID_HANDLE);
    expect("errors.destroy_default_stream", aclrtDestroyStream(NULL), ACL_ERROR_INVALID_PARAM);
    expect("errors.record_bad_event", aclrtRecordEvent((aclrtEvent)0xbeef0, stream), ACL_ERROR_RT_INVALID_HANDLE);
    size_t f, t;
    expect("errors.meminfo_bad_attr", aclrtGetMemInfo((aclrtMemAttr)1000, &f, &t), ACL_ERROR_INVALID_PARAM);
    expect("errors.set_device_out_of_range", aclrtSetDevice(1000), ACL_ERROR_RT_INVALID_DEVICEID);
    expect("errors.context_of_bad_device", aclrtCreateContext(&(aclrtContext){0}, -1), ACL_ERROR_RT_INVALID_DEVICEID);
    expect("errors.set_bad_context", aclrtSetCurrentContext((aclrtContext)0x4242), ACL_ERROR_RT_INVALID_HANDLE);
    const char *msg = aclGetRecentErrMsg();
    check("errors.recent_message_names_the_refusal", msg && strstr(msg, "context"));
    expect("errors.last_error_peek", aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_RT_INVALID_HANDLE);
    expect("errors.last_error_get", aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_ERROR_RT_INVALID_HANDLE);
    expect("errors.last_error_reset", aclrtGetLastError(ACL_RT_THREAD_LEVEL), ACL_SUCCESS);

    /* aclnn: NULL operands, shapes, data types, executors */
    int64_t d4[1] = {4}, d3[1] = {3}, d22[2] = {2, 2};
    aclTensor *t4 = tensor(d4, 1, ACL_FLOAT, p), *t3 = tensor(d3, 1, ACL_FLOAT, p), *t22 = tensor(d22, 2, ACL_FLOAT, p);
    aclTensor *ti = tensor(d4, 1, ACL_INT32, p);
    float one = 1;
    aclScalar *alpha = aclCreateScalar(&one, ACL_FLOAT);
    uint64_t ws;
    aclOpExecutor *ex = NULL;
    expect("errors.aclnn_null_self", aclnnAddGetWorkspaceSize(NULL, t4, alpha, t4, &ws, &ex), ACLNN_ERR_PARAM_NULLPTR);
    expect("errors.aclnn_null_alpha", aclnnAddGetWorkspaceSize(t4, t4, NULL, t4, &ws, &ex), ACLNN_ERR_PARAM_NULLPTR);
    expect("errors.aclnn_null_executor", aclnnMulGetWorkspaceSize(t4, t4, t4, &ws, NULL), ACLNN_ERR_PARAM_NULLPTR);
    expect("errors.aclnn_no_broadcast", aclnnMulGetWorkspaceSize(t4, t3, t4, &ws, &ex), ACLNN_ERR_PARAM_INVALID);
    expect("errors.aclnn_wrong_out_shape", aclnnMulGetWorkspaceSize(t4, t4, t3, &ws, &ex), ACLNN_ERR_PARAM_INVALID);
    expect("errors.aclnn_int32_unsupported", aclnnMulGetWorkspaceSize(ti, ti, ti, &ws, &ex), ACLNN_ERR_PARAM_INVALID);
    expect("errors.aclnn_matmul_inner_dims", aclnnMatmulGetWorkspaceSize(t22, t3, t4, 0, &ws, &ex),
           ACLNN_ERR_PARAM_INVALID);
    expect("errors.aclnn_matmul_cube_math_type", aclnnMatmulGetWorkspaceSize(t22, t22, t22, 9, &ws, &ex),
           ACLNN_ERR_PARAM_INVALID);
    expect("errors.aclnn_softmax_dim", aclnnSoftmaxGetWorkspaceSize(t22, 2, t22, &ws, &ex), ACLNN_ERR_PARAM_INVALID);
    int64_t twice[2] = {0, -2};
    aclIntArray *dup = aclCreateIntArray(twice, 2);
    int64_t d1[1] = {1};
    aclTensor *t1 = tensor(d1, 1, ACL_FLOAT, p);
    expect("errors.aclnn_reducesum_dim_twice", aclnnReduceSumGetWorkspaceSize(t22, dup, false, ACL_FLOAT, t1, &ws, &ex),
           ACLNN_ERR_PARAM_INVALID);
    int64_t big_storage[1] = {2};
    int64_t stride1[1] = {1};
    aclTensor *over = aclCreateTensor(d4, 1, ACL_FLOAT, stride1, 0, ACL_FORMAT_ND, big_storage, 1, p);
    expect("errors.aclnn_view_outside_storage", aclnnMulGetWorkspaceSize(over, over, over, &ws, &ex),
           ACLNN_ERR_PARAM_INVALID);
    expect("errors.aclnn_create_tensor_negative_dim", aclCreateTensor((int64_t[]){-1}, 1, ACL_FLOAT, NULL, 0,
                                                                      ACL_FORMAT_ND, d4, 1, p) == NULL, 1);
    int64_t huge[1] = {(int64_t)1 << 29}, zero_stride[1] = {0}, one_elem[1] = {1};
    aclTensor *wide = aclCreateTensor(huge, 1, ACL_FLOAT, zero_stride, 0, ACL_FORMAT_ND, one_elem, 1, p);
    expect("errors.aclnn_too_many_elements", aclnnMulGetWorkspaceSize(wide, t1, wide, &ws, &ex), ACLNN_ERR_PARAM_INVALID);
    aclDestroyTensor(wide);
    int64_t many[100] = {0};
    expect("errors.aclnn_create_tensor_100_dims", aclCreateTensor(many, 100, ACL_FLOAT, NULL, 0, ACL_FORMAT_ND, many,
                                                                  100, p) == NULL, 1);
    expect("errors.aclnn_setup", aclnnMulGetWorkspaceSize(t4, t4, t4, &ws, &ex), ACLNN_SUCCESS);
    expect("errors.aclnn_executor_of_another_op", aclnnAdd(NULL, 0, ex, stream), ACLNN_ERR_PARAM_INVALID);
    expect("errors.aclnn_run", aclnnMul(NULL, 0, ex, stream), ACLNN_SUCCESS);
    expect("errors.aclnn_executor_runs_once", aclnnMul(NULL, 0, ex, stream), ACLNN_ERR_PARAM_INVALID);
    expect("errors.aclnn_null_executor_launch", aclnnMul(NULL, 0, NULL, stream), ACLNN_ERR_PARAM_NULLPTR);
    expect("errors.destroy_tensor_twice", aclDestroyTensor(t4) == ACLNN_SUCCESS &&
                                              aclDestroyTensor(t4) == ACLNN_ERR_PARAM_INVALID, 1);
    int64_t *shape = NULL;
    uint64_t rank = 0;
    aclGetViewShape(t22, &shape, &rank);
    check("errors.get_view_shape", rank == 2 && shape && shape[0] == 2 && shape[1] == 2);
    free(shape);
    aclDestroyTensor(t3), aclDestroyTensor(t22), aclDestroyTensor(ti), aclDestroyTensor(t1), aclDestroyTensor(over);
    aclDestroyScalar(alpha), aclDestroyIntArray(dup);
    aclrtSynchronizeStream(stream);
    aclrtFree(p);
}

/* aclrtGetMemInfo and DCMI agree with each other and with the allocations. */
static void meminfo_and_dcmi(size_t dev_mem, int devices) {
    size_t free0, total0, free1, total1;
    expect("dcmi.init", dcmi_init(), DCMI_OK);
    int cards[64], ncards = 0;
    expect("dcmi.card_list", dcmi_get_card_list(&ncards, cards, 64), DCMI_OK);
    expect("dcmi.card_count", ncards, devices);
    int per_card = 0;
    dcmi_get_device_num_in_card(0, &per_card);
    expect("dcmi.one_chip_per_card", per_card, 1);
    expect("dcmi.bad_card", dcmi_get_device_num_in_card(devices, &per_card), DCMI_ERR_CODE_INVALID_DEVICE_ID);
    struct dcmi_chip_info chip;
    expect("dcmi.chip_info", dcmi_get_device_chip_info(0, 0, &chip), DCMI_OK);
    check("dcmi.chip_name", !strcmp((char *)chip.chip_type, "Ascend") && !strcmp((char *)chip.chip_name, "910B3") &&
                                chip.aicore_cnt > 0);
    expect("meminfo.hbm", aclrtGetMemInfo(ACL_HBM_MEM, &free0, &total0), ACL_SUCCESS);
    expect("meminfo.total_is_the_device", (long long)total0, (long long)dev_mem);
    void *p = NULL;
    size_t want = 48u << 20;
    aclrtMalloc(&p, want, ACL_MEM_MALLOC_HUGE_FIRST);
    aclrtGetMemInfo(ACL_HBM_MEM, &free1, &total1);
    expect("meminfo.malloc_charges_size_rounded_plus_32", (long long)(free0 - free1), (long long)(want + 32));
    struct dcmi_get_memory_info_stru mi;
    struct dcmi_hbm_info hbm;
    expect("dcmi.memory_info_v3", dcmi_get_device_memory_info_v3(0, 0, &mi), DCMI_OK);
    expect("dcmi.hbm_info", dcmi_get_device_hbm_info(0, 0, &hbm), DCMI_OK);
    expect("dcmi.memory_size_is_total", (long long)mi.memory_size, (long long)(total1 >> 20));
    expect("dcmi.memory_available_is_free", (long long)mi.memory_available, (long long)(free1 >> 20));
    expect("dcmi.hbm_size_is_total", (long long)hbm.memory_size, (long long)(total1 >> 20));
    expect("dcmi.hbm_usage_is_used", (long long)hbm.memory_usage, (long long)((total1 - free1) >> 20));
    unsigned int hbm_rate = 999;
    expect("dcmi.hbm_utilization", dcmi_get_device_utilization_rate(0, 0, DCMI_UTILIZATION_RATE_HBM, &hbm_rate),
           DCMI_OK);
    expect("dcmi.hbm_utilization_value", hbm_rate, (unsigned int)((total1 - free1) * 100 / total1));
    expect("dcmi.unmeasured_utilization", dcmi_get_device_utilization_rate(0, 0, DCMI_UTILIZATION_RATE_DDR, &hbm_rate),
           DCMI_ERR_CODE_NOT_SUPPORT);
    expect("dcmi.null_out", dcmi_get_device_hbm_info(0, 0, NULL), DCMI_ERR_CODE_INVALID_PARAMETER);
    aclrtFree(p);
    aclrtGetMemInfo(ACL_HBM_MEM, &free1, &total1);
    expect("meminfo.free_returns_it", (long long)free1, (long long)free0);
}

/* A second of matmuls shows in DCMI's AI Core utilization of that device only. */
static void utilization(aclrtStream stream, int devices) {
    enum { n = 96 };
    void *d = NULL;
    aclrtMalloc(&d, n * n * 4, ACL_MEM_MALLOC_HUGE_FIRST);
    aclrtMemset(d, n * n * 4, 0, n * n * 4);
    int64_t dims[2] = {n, n};
    aclTensor *t = tensor(dims, 2, ACL_FLOAT, d);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double elapsed = 0;
    while (elapsed < 0.4) {
        uint64_t ws;
        aclOpExecutor *ex;
        aclnnMatmulGetWorkspaceSize(t, t, t, 0, &ws, &ex);
        aclnnMatmul(NULL, ws, ex, stream);
        aclrtSynchronizeStream(stream);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        elapsed = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    }
    unsigned int rate = 0, idle = 999;
    dcmi_get_device_utilization_rate(0, 0, DCMI_UTILIZATION_RATE_AICORE, &rate);
    check("dcmi.aicore_utilization_while_busy", rate > 0 && rate <= 100);
    if (devices > 1) {
        dcmi_get_device_utilization_rate(1, 0, DCMI_UTILIZATION_RATE_AICORE, &idle);
        expect("dcmi.aicore_utilization_of_idle_device", idle, 0);
    }
    aclDestroyTensor(t);
    aclrtFree(d);
}

/* Out of memory exactly at the device's size: ACL_ERROR_RT_MEMORY_ALLOCATION. */
static void oom(size_t dev_mem) {
    size_t free0, total;
    aclrtGetMemInfo(ACL_HBM_MEM, &free0, &total);
    void *big = NULL, *one = NULL;
    expect("oom.larger_than_the_device", aclrtMalloc(&big, dev_mem + 1, ACL_MEM_MALLOC_HUGE_FIRST),
           ACL_ERROR_RT_MEMORY_ALLOCATION);
    if (dev_mem > (1ull << 30)) return; /* filling is for the small configurations */
    expect("oom.all_of_it", aclrtMallocAlign32(&big, free0, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    size_t f, t;
    aclrtGetMemInfo(ACL_HBM_MEM, &f, &t);
    expect("oom.nothing_left", (long long)f, 0);
    expect("oom.one_more_byte", aclrtMalloc(&one, 1, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_RT_MEMORY_ALLOCATION);
    const char *msg = aclGetRecentErrMsg();
    check("oom.message", msg && strstr(msg, "207001"));
    /* the filled memory is usable at both ends */
    char x = 0x5a, y = 0;
    aclrtMemcpy((char *)big + free0 - 1, 1, &x, 1, ACL_MEMCPY_HOST_TO_DEVICE);
    aclrtMemcpy(&y, 1, (char *)big + free0 - 1, 1, ACL_MEMCPY_DEVICE_TO_HOST);
    expect("oom.last_byte_usable", y, 0x5a);
    expect("oom.free", aclrtFree(big), ACL_SUCCESS);
    expect("oom.fits_again", aclrtMalloc(&one, 1, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    aclrtFree(one);
}

/* An operand past its allocation: the context faults (507015), stickily, and writes nothing. */
static void sticky_fault(void) {
    aclrtContext main_ctx = NULL, ctx = NULL;
    aclrtGetCurrentContext(&main_ctx);
    expect("fault.create_context", aclrtCreateContext(&ctx, 0), ACL_SUCCESS);
    aclrtStream s = NULL;
    aclrtCreateStream(&s);
    void *small = NULL, *outp = NULL;
    aclrtMalloc(&small, 16, ACL_MEM_MALLOC_HUGE_FIRST); /* 4 floats */
    aclrtMalloc(&outp, 4096, ACL_MEM_MALLOC_HUGE_FIRST);
    aclrtMemset(outp, 4096, 0x7f, 4096);
    int64_t d1024[1] = {1024};
    /* a view of 1024 floats over a 16-byte allocation: the storage shape claims them all */
    aclTensor *in = tensor(d1024, 1, ACL_FLOAT, small), *out = tensor(d1024, 1, ACL_FLOAT, outp);
    uint64_t ws;
    aclOpExecutor *ex;
    expect("fault.setup_is_accepted", aclnnMulGetWorkspaceSize(in, in, out, &ws, &ex), ACLNN_SUCCESS);
    expect("fault.launch_is_accepted", aclnnMul(NULL, ws, ex, s), ACLNN_SUCCESS);
    expect("fault.synchronize_reports_aicore_exception", aclrtSynchronizeStream(s), ACL_ERROR_RT_AICORE_EXCEPTION);
    expect("fault.sticky_on_the_default_stream", aclrtSynchronizeStream(NULL), ACL_ERROR_RT_AICORE_EXCEPTION);
    void *p = NULL;
    expect("fault.sticky_malloc", aclrtMalloc(&p, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_RT_AICORE_EXCEPTION);
    char buf[16];
    expect("fault.sticky_memcpy", aclrtMemcpy(buf, 16, outp, 16, ACL_MEMCPY_DEVICE_TO_HOST),
           ACL_ERROR_RT_AICORE_EXCEPTION);
    expect("fault.sticky_device_sync", aclrtSynchronizeDevice(), ACL_ERROR_RT_AICORE_EXCEPTION);
    expect("fault.aclnn_launch_refused", aclnnMulGetWorkspaceSize(out, out, out, &ws, &ex) == ACLNN_SUCCESS &&
                                             aclnnMul(NULL, ws, ex, s) == ACLNN_ERR_RUNTIME_ERROR, 1);
    expect("fault.peek_last_error", aclrtPeekAtLastError(ACL_RT_THREAD_LEVEL), ACLNN_ERR_RUNTIME_ERROR);
    /* the other context on the same device is healthy and sees the output untouched */
    expect("fault.destroy_faulted_context", aclrtDestroyContext(ctx), ACL_SUCCESS);
    expect("fault.back_to_main_context", aclrtSetCurrentContext(main_ctx), ACL_SUCCESS);
    unsigned char got[4096];
    expect("fault.main_context_healthy", aclrtMemcpy(got, 4096, outp, 4096, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    int untouched = 1;
    for (int i = 0; i < 4096; i++) untouched &= got[i] == 0x7f;
    check("fault.nothing_written", untouched);
    aclDestroyTensor(in), aclDestroyTensor(out);
    aclrtFree(small), aclrtFree(outp);
}

/* Two threads, each with a context of its own on device 0, as a pool serves two tenants: one
 * faults, the other keeps computing right answers in a healthy context. */
struct worker {
    int faulty;
    int ok;
};

static void *worker_main(void *arg) {
    struct worker *w = arg;
    aclrtContext ctx = NULL;
    aclrtStream s = NULL;
    w->ok = aclrtCreateContext(&ctx, 0) == ACL_SUCCESS && aclrtCreateStream(&s) == ACL_SUCCESS;
    enum { n = 256 };
    float host[n], back[n];
    for (int i = 0; i < n; i++) host[i] = (float)i;
    void *d = dev_copy_of(host, sizeof host), *small = NULL;
    aclrtMalloc(&small, 16, ACL_MEM_MALLOC_HUGE_FIRST);
    int64_t dn[1] = {n};
    aclTensor *t = tensor(dn, 1, ACL_FLOAT, w->faulty ? small : d);
    float one = 1.0f;
    aclScalar *alpha = aclCreateScalar(&one, ACL_FLOAT);
    for (int round = 0; round < 20 && w->ok; round++) {
        uint64_t ws;
        aclOpExecutor *ex;
        aclnnAddGetWorkspaceSize(t, t, alpha, t, &ws, &ex); /* t = 2t */
        aclnnAdd(NULL, ws, ex, s);
        aclError e = aclrtSynchronizeStream(s);
        if (w->faulty) {
            w->ok = e == ACL_ERROR_RT_AICORE_EXCEPTION;
            break;
        }
        w->ok = e == ACL_SUCCESS &&
                aclrtMemcpy(back, sizeof back, d, sizeof back, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS;
        for (int i = 0; i < n && w->ok; i++) w->ok = back[i] == host[i] * (float)(2 << round);
    }
    aclDestroyTensor(t);
    aclDestroyScalar(alpha);
    aclrtFree(small);
    if (!w->faulty) aclrtFree(d);
    w->ok &= aclrtDestroyContext(ctx) == ACL_SUCCESS;
    return NULL;
}

static void threads(void) {
    struct worker good = {0, 0}, bad = {1, 0};
    pthread_t a, b;
    pthread_create(&a, NULL, worker_main, &good);
    pthread_create(&b, NULL, worker_main, &bad);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    check("threads.faulting_context_faults", bad.ok);
    check("threads.other_context_unaffected", good.ok);
    expect("threads.main_context_unaffected", aclrtSynchronizeDevice(), ACL_SUCCESS);
}

/* Churn: threads that each, 30 times over, make a context, streams and events, queue copies, a
 * cross-stream wait and an operator, and tear it all down in a varying order while work may still
 * be queued. Nothing may hang, fail or compute wrong. */
static void *churn_main(void *arg) {
    long seed = (long)(intptr_t)arg;
    int ok = 1;
    for (int it = 0; it < 30 && ok; it++) {
        aclrtContext ctx = NULL;
        aclrtStream s1 = NULL, s2 = NULL;
        aclrtEvent ev = NULL;
        ok &= aclrtCreateContext(&ctx, 0) == ACL_SUCCESS;
        ok &= aclrtCreateStream(&s1) == ACL_SUCCESS && aclrtCreateStream(&s2) == ACL_SUCCESS;
        ok &= aclrtCreateEvent(&ev) == ACL_SUCCESS;
        enum { n = 4096 };
        float host[n], back[n];
        for (int i = 0; i < n; i++) host[i] = (float)(i + it);
        void *d = NULL;
        ok &= aclrtMalloc(&d, sizeof host, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS;
        aclrtMemcpyAsync(d, sizeof host, host, sizeof host, ACL_MEMCPY_HOST_TO_DEVICE, s1);
        aclrtRecordEvent(ev, s1);
        aclrtStreamWaitEvent(s2, ev);
        int64_t dn[1] = {n};
        aclTensor *t = tensor(dn, 1, ACL_FLOAT, d);
        uint64_t ws;
        aclOpExecutor *ex;
        ok &= aclnnMulGetWorkspaceSize(t, t, t, &ws, &ex) == ACLNN_SUCCESS && aclnnMul(NULL, ws, ex, s2) == ACLNN_SUCCESS;
        aclrtMemcpyAsync(back, sizeof back, d, sizeof back, ACL_MEMCPY_DEVICE_TO_HOST, s2);
        if ((seed + it) % 3 == 0) {
            /* tear down with the work still queued: destroying waits for it */
            ok &= aclrtDestroyStream(s2) == ACL_SUCCESS;
        } else {
            ok &= aclrtSynchronizeStream(s2) == ACL_SUCCESS;
            ok &= aclrtDestroyStream(s2) == ACL_SUCCESS;
        }
        for (int i = 0; i < n && ok; i++) ok = back[i] == host[i] * host[i];
        aclDestroyTensor(t);
        ok &= aclrtDestroyEvent(ev) == ACL_SUCCESS;
        ok &= aclrtFree(d) == ACL_SUCCESS;
        if (it % 2) ok &= aclrtDestroyStream(s1) == ACL_SUCCESS; /* else the context takes it */
        ok &= aclrtDestroyContext(ctx) == ACL_SUCCESS;
    }
    return (void *)(intptr_t)ok;
}

static void churn(void) {
    size_t f0, f1, t;
    aclrtGetMemInfo(ACL_HBM_MEM, &f0, &t);
    pthread_t th[4];
    for (long i = 0; i < 4; i++) pthread_create(&th[i], NULL, churn_main, (void *)(intptr_t)i);
    int ok = 1;
    for (int i = 0; i < 4; i++) {
        void *r = NULL;
        pthread_join(th[i], &r);
        ok &= r != NULL;
    }
    check("churn.four_threads_thirty_rounds", ok);
    aclrtGetMemInfo(ACL_HBM_MEM, &f1, &t);
    expect("churn.memory_back", (long long)f1, (long long)f0);
}

/* aclrtSynchronizeDevice waits for the device's work in every context, not just the caller's. */
static void device_sync_covers_other_contexts(void) {
    aclrtContext main_ctx = NULL, other = NULL;
    aclrtGetCurrentContext(&main_ctx);
    aclrtCreateContext(&other, 0);
    aclrtStream s = NULL;
    aclrtEvent done = NULL;
    aclrtCreateStream(&s);
    aclrtCreateEvent(&done);
    size_t n = 64u << 20;
    void *d = NULL;
    aclrtMalloc(&d, n, ACL_MEM_MALLOC_HUGE_FIRST);
    for (int i = 0; i < 8; i++) aclrtMemsetAsync(d, n, i, n, s);
    aclrtRecordEvent(done, s);
    aclrtSetCurrentContext(main_ctx);
    expect("device_sync.other_context", aclrtSynchronizeDevice(), ACL_SUCCESS);
    aclrtEventStatus st = ACL_EVENT_STATUS_NOT_READY;
    aclrtQueryEvent(done, &st);
    expect("device_sync.waited_for_the_other_contexts_stream", st, ACL_EVENT_STATUS_COMPLETE);
    aclrtSetCurrentContext(other);
    aclrtFree(d);
    aclrtDestroyEvent(done);
    aclrtDestroyContext(other);
    aclrtSetCurrentContext(main_ctx);
}

/* The default context of a device faults and aclrtResetDevice clears it. */
static void reset_clears_fault(int device) {
    aclrtContext main_ctx = NULL;
    aclrtGetCurrentContext(&main_ctx);
    expect("reset.set_device", aclrtSetDevice(device), ACL_SUCCESS);
    void *small = NULL;
    aclrtMalloc(&small, 8, ACL_MEM_MALLOC_HUGE_FIRST);
    int64_t d[1] = {64};
    aclTensor *t = tensor(d, 1, ACL_FLOAT, small);
    uint64_t ws;
    aclOpExecutor *ex;
    aclnnSoftmaxGetWorkspaceSize(t, 0, t, &ws, &ex);
    aclnnSoftmax(NULL, ws, ex, NULL);
    expect("reset.fault", aclrtSynchronizeDevice(), ACL_ERROR_RT_AICORE_EXCEPTION);
    aclDestroyTensor(t);
    expect("reset.reset_device", aclrtResetDevice(device), ACL_SUCCESS);
    int32_t cur = -1;
    expect("reset.no_current_context_after_reset", aclrtGetDevice(&cur), ACL_ERROR_RT_CONTEXT_NULL);
    expect("reset.set_device_again", aclrtSetDevice(device), ACL_SUCCESS);
    expect("reset.healthy_again", aclrtSynchronizeDevice(), ACL_SUCCESS);
    void *p = NULL;
    expect("reset.malloc_works", aclrtMalloc(&p, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    aclrtFree(p), aclrtFree(small);
    expect("reset.last_reset", aclrtResetDevice(device), ACL_SUCCESS);
    expect("reset.restore_context", aclrtSetCurrentContext(main_ctx), ACL_SUCCESS);
}

int main(void) {
    int devices = (int)env_size("GPUPOOL_SIM_NPU_DEVICES", 2);
    size_t dev_mem = env_size("GPUPOOL_SIM_NPU_MEMORY", (size_t)64 << 30);
    uint32_t count = 0;

    expect("before_init.set_device", aclrtSetDevice(0), ACL_ERROR_UNINITIALIZE);
    expect("init.aclInit", aclInit(NULL), ACL_SUCCESS);
    expect("init.twice", aclInit(NULL), ACL_ERROR_REPEAT_INITIALIZE);
    expect("device.count_call", aclrtGetDeviceCount(&count), ACL_SUCCESS);
    expect("device.count.value", count, devices);
    int32_t dev = -1;
    expect("device.no_context_yet", aclrtGetDevice(&dev), ACL_ERROR_RT_CONTEXT_NULL);
    expect("device.set", aclrtSetDevice(0), ACL_SUCCESS);
    expect("device.get", aclrtGetDevice(&dev) == ACL_SUCCESS && dev == 0, 1);
    aclrtRunMode mode = ACL_DEVICE;
    aclrtGetRunMode(&mode);
    expect("device.run_mode_is_host", mode, ACL_HOST);
    const char *soc = aclrtGetSocName();
    check("device.soc_name", soc && !strcmp(soc, "Ascend910B3"));
    int32_t maj, min, patch;
    expect("device.version", aclrtGetVersion(&maj, &min, &patch) == ACL_SUCCESS && maj == 1 && min == 17, 1);
    aclrtStream stream = NULL;
    expect("stream.create", aclrtCreateStream(&stream), ACL_SUCCESS);

    quickstart(stream);
    fp16_ops(stream);
    strided_views(stream);
    streams_and_events(stream);
    errors(stream);
    meminfo_and_dcmi(dev_mem, devices);
    utilization(stream, devices);
    oom(dev_mem);
    sticky_fault();
    threads();
    device_sync_covers_other_contexts();
    churn();
    if (devices > 1) reset_clears_fault(1);

    expect("teardown.destroy_stream", aclrtDestroyStream(stream), ACL_SUCCESS);
    expect("teardown.destroy_stream_twice", aclrtDestroyStream(stream), ACL_ERROR_RT_INVALID_HANDLE);
    expect("teardown.reset_device", aclrtResetDevice(0), ACL_SUCCESS);
    expect("teardown.aclFinalize", aclFinalize(), ACL_SUCCESS);
    expect("teardown.aclFinalize_twice", aclFinalize(), ACL_ERROR_REPEAT_FINALIZE);
    size_t f, t;
    expect("teardown.meminfo_after_finalize", aclrtGetMemInfo(ACL_HBM_MEM, &f, &t), ACL_ERROR_UNINITIALIZE);

    printf("SUMMARY %d passed, %d failed\n", passes, failures);
    return failures ? 1 : 0;
}
