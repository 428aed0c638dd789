/*
 * tests/c/driver_api.c - a plain C client of the CUDA driver API, compiled against
 * gpupool's own headers (shim-headers/include) and run against whatever
 * libcuda.so.1 the dynamic loader finds (the simulator, via LD_LIBRARY_PATH).
 *
 *   cc -std=c11 -Wall -Wextra -I shim-headers/include tests/c/driver_api.c -o driver_api -ldl -lpthread
 *   LD_LIBRARY_PATH=$(scripts/sim-libdir) ./driver_api
 *
 * Like cudarc and cuda-bindings it dlopen()s libcuda.so.1 and resolves the exact
 * exported (versioned) names with dlsym; every pointer is typed from the header's
 * declaration (__typeof__), so the headers are what the calls are checked against.
 * A missing export is reported as a FAIL and calls to it return SYMBOL_MISSING.
 *
 * Output: one "PASS <name>" or "FAIL <name>: <detail>" line per check, then a
 * summary line; exit status 1 when any check failed, 2 when libcuda could not be
 * loaded at all.
 *
 * Environment read (to know what to expect; the same variables configure the sim):
 *   GPUPOOL_SIM_DEVICES (default 2), GPUPOOL_SIM_MEMORY (default 80GiB),
 *   GPUPOOL_SIM_DRIVER_VERSION (default 13.0 = 13000). When GPUPOOL_SIM_CONFIG is
 *   set, the device-identity checks (name contains "H100", 132 SMs, CC 9.0) are not
 *   made, because the TOML may describe another GPU.
 *   With a device of at most 1 GiB the "oom.fill" section fills the device to OOM.
 *
 * Memory accounting contract checked (cuMemGetInfo_v2):
 *   - total == cuDeviceTotalMem_v2, constant;
 *   - an allocation of `bytes` lowers `free` by d with bytes <= d <= round_up(bytes, 2 MiB)
 *     (2 MiB being the largest page granularity NVIDIA's driver uses for cuMemAlloc);
 *   - allocations whose size is a multiple of 2 MiB lower `free` by exactly `bytes`;
 *   - freeing restores `free` exactly; a failed allocation leaves it unchanged;
 *   - `free` is per device: allocations in any context on the device count,
 *     allocations on another device do not.
 */
#define _GNU_SOURCE
#include "gpupool_cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define GRANULE (2 * MiB)
#define SYMBOL_MISSING ((CUresult)999999)

/* ------------------------------------------------------------------------- */
/* Entry points, resolved with dlsym and typed from the header declarations.  */
#define CU_FUNCTIONS(X) \
    X(cuInit) \
    X(cuDriverGetVersion) \
    X(cuGetErrorString) \
    X(cuGetErrorName) \
    X(cuGetProcAddress) \
    X(cuGetProcAddress_v2) \
    X(cuDeviceGet) \
    X(cuDeviceGetCount) \
    X(cuDeviceGetName) \
    X(cuDeviceGetUuid) \
    X(cuDeviceGetUuid_v2) \
    X(cuDeviceTotalMem_v2) \
    X(cuDeviceGetAttribute) \
    X(cuDeviceComputeCapability) \
    X(cuDeviceGetPCIBusId) \
    X(cuDeviceGetByPCIBusId) \
    X(cuDevicePrimaryCtxRetain) \
    X(cuDevicePrimaryCtxRelease_v2) \
    X(cuDevicePrimaryCtxGetState) \
    X(cuCtxCreate_v2) \
    X(cuCtxDestroy_v2) \
    X(cuCtxPushCurrent_v2) \
    X(cuCtxPopCurrent_v2) \
    X(cuCtxSetCurrent) \
    X(cuCtxGetCurrent) \
    X(cuCtxGetDevice) \
    X(cuCtxSynchronize) \
    X(cuMemGetInfo_v2) \
    X(cuMemAlloc_v2) \
    X(cuMemAllocPitch_v2) \
    X(cuMemFree_v2) \
    X(cuMemGetAddressRange_v2) \
    X(cuMemAllocHost_v2) \
    X(cuMemHostAlloc) \
    X(cuMemFreeHost) \
    X(cuMemHostGetDevicePointer_v2) \
    X(cuMemHostGetFlags) \
    X(cuPointerGetAttribute) \
    X(cuMemcpy) \
    X(cuMemcpyHtoD_v2) \
    X(cuMemcpyDtoH_v2) \
    X(cuMemcpyDtoD_v2) \
    X(cuMemcpyHtoDAsync_v2) \
    X(cuMemcpyDtoHAsync_v2) \
    X(cuMemcpyDtoDAsync_v2) \
    X(cuMemcpy2D_v2) \
    X(cuMemsetD8_v2) \
    X(cuMemsetD16_v2) \
    X(cuMemsetD32_v2) \
    X(cuMemsetD2D8_v2) \
    X(cuMemsetD2D16_v2) \
    X(cuMemsetD2D32_v2) \
    X(cuMemsetD8Async) \
    X(cuMemsetD32Async) \
    X(cuStreamCreate) \
    X(cuStreamDestroy_v2) \
    X(cuStreamGetFlags) \
    X(cuStreamGetCtx) \
    X(cuStreamQuery) \
    X(cuStreamSynchronize) \
    X(cuStreamWaitEvent) \
    X(cuLaunchHostFunc) \
    X(cuEventCreate) \
    X(cuEventRecord) \
    X(cuEventQuery) \
    X(cuEventSynchronize) \
    X(cuEventElapsedTime) \
    X(cuEventDestroy_v2) \


#define DECLARE_PTR(name) static __typeof__(name) *p_##name;
CU_FUNCTIONS(DECLARE_PTR)

/* From here on, calls by name go through the resolved pointers. */
#define cuInit (*p_cuInit)
#define cuDriverGetVersion (*p_cuDriverGetVersion)
#define cuGetErrorString (*p_cuGetErrorString)
#define cuGetErrorName (*p_cuGetErrorName)
#define cuGetProcAddress (*p_cuGetProcAddress)
#define cuGetProcAddress_v2 (*p_cuGetProcAddress_v2)
#define cuDeviceGet (*p_cuDeviceGet)
#define cuDeviceGetCount (*p_cuDeviceGetCount)
#define cuDeviceGetName (*p_cuDeviceGetName)
#define cuDeviceGetUuid (*p_cuDeviceGetUuid)
#define cuDeviceGetUuid_v2 (*p_cuDeviceGetUuid_v2)
#define cuDeviceTotalMem_v2 (*p_cuDeviceTotalMem_v2)
#define cuDeviceGetAttribute (*p_cuDeviceGetAttribute)
#define cuDeviceComputeCapability (*p_cuDeviceComputeCapability)
#define cuDeviceGetPCIBusId (*p_cuDeviceGetPCIBusId)
#define cuDeviceGetByPCIBusId (*p_cuDeviceGetByPCIBusId)
#define cuDevicePrimaryCtxRetain (*p_cuDevicePrimaryCtxRetain)
#define cuDevicePrimaryCtxRelease_v2 (*p_cuDevicePrimaryCtxRelease_v2)
#define cuDevicePrimaryCtxGetState (*p_cuDevicePrimaryCtxGetState)
#define cuCtxCreate_v2 (*p_cuCtxCreate_v2)
#define cuCtxDestroy_v2 (*p_cuCtxDestroy_v2)
#define cuCtxPushCurrent_v2 (*p_cuCtxPushCurrent_v2)
#define cuCtxPopCurrent_v2 (*p_cuCtxPopCurrent_v2)
#define cuCtxSetCurrent (*p_cuCtxSetCurrent)
#define cuCtxGetCurrent (*p_cuCtxGetCurrent)
#define cuCtxGetDevice (*p_cuCtxGetDevice)
#define cuCtxSynchronize (*p_cuCtxSynchronize)
#define cuMemGetInfo_v2 (*p_cuMemGetInfo_v2)
#define cuMemAlloc_v2 (*p_cuMemAlloc_v2)
#define cuMemAllocPitch_v2 (*p_cuMemAllocPitch_v2)
#define cuMemFree_v2 (*p_cuMemFree_v2)
#define cuMemGetAddressRange_v2 (*p_cuMemGetAddressRange_v2)
#define cuMemAllocHost_v2 (*p_cuMemAllocHost_v2)
#define cuMemHostAlloc (*p_cuMemHostAlloc)
#define cuMemFreeHost (*p_cuMemFreeHost)
#define cuMemHostGetDevicePointer_v2 (*p_cuMemHostGetDevicePointer_v2)
#define cuMemHostGetFlags (*p_cuMemHostGetFlags)
#define cuPointerGetAttribute (*p_cuPointerGetAttribute)
#define cuMemcpy (*p_cuMemcpy)
#define cuMemcpyHtoD_v2 (*p_cuMemcpyHtoD_v2)
#define cuMemcpyDtoH_v2 (*p_cuMemcpyDtoH_v2)
#define cuMemcpyDtoD_v2 (*p_cuMemcpyDtoD_v2)
#define cuMemcpyHtoDAsync_v2 (*p_cuMemcpyHtoDAsync_v2)
#define cuMemcpyDtoHAsync_v2 (*p_cuMemcpyDtoHAsync_v2)
#define cuMemcpyDtoDAsync_v2 (*p_cuMemcpyDtoDAsync_v2)
#define cuMemcpy2D_v2 (*p_cuMemcpy2D_v2)
#define cuMemsetD8_v2 (*p_cuMemsetD8_v2)
#define cuMemsetD16_v2 (*p_cuMemsetD16_v2)
#define cuMemsetD32_v2 (*p_cuMemsetD32_v2)
#define cuMemsetD2D8_v2 (*p_cuMemsetD2D8_v2)
#define cuMemsetD2D16_v2 (*p_cuMemsetD2D16_v2)
#define cuMemsetD2D32_v2 (*p_cuMemsetD2D32_v2)
#define cuMemsetD8Async (*p_cuMemsetD8Async)
#define cuMemsetD32Async (*p_cuMemsetD32Async)
#define cuStreamCreate (*p_cuStreamCreate)
#define cuStreamDestroy_v2 (*p_cuStreamDestroy_v2)
#define cuStreamGetFlags (*p_cuStreamGetFlags)
#define cuStreamGetCtx (*p_cuStreamGetCtx)
#define cuStreamQuery (*p_cuStreamQuery)
#define cuStreamSynchronize (*p_cuStreamSynchronize)
#define cuStreamWaitEvent (*p_cuStreamWaitEvent)
#define cuLaunchHostFunc (*p_cuLaunchHostFunc)
#define cuEventCreate (*p_cuEventCreate)
#define cuEventRecord (*p_cuEventRecord)
#define cuEventQuery (*p_cuEventQuery)
#define cuEventSynchronize (*p_cuEventSynchronize)
#define cuEventElapsedTime (*p_cuEventElapsedTime)
#define cuEventDestroy_v2 (*p_cuEventDestroy_v2)

static void *g_lib;
static int g_missing_symbols;

static CUresult missing_symbol_stub(void) { return SYMBOL_MISSING; }

/* ------------------------------------------------------------------------- */
/* Reporting.                                                                */

static pthread_mutex_t g_out = PTHREAD_MUTEX_INITIALIZER;
static int g_pass, g_fail;

static void pass(const char *name) {
    pthread_mutex_lock(&g_out);
    g_pass++;
    printf("PASS %s\n", name);
    fflush(stdout);
    pthread_mutex_unlock(&g_out);
}

static void fail(const char *name, const char *fmt, ...) {
    char detail[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&g_out);
    g_fail++;
    printf("FAIL %s: %s\n", name, detail);
    fflush(stdout);
    pthread_mutex_unlock(&g_out);
}

static const char *rc_name(CUresult rc) {
    switch ((int)rc) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_DEINITIALIZED: return "CUDA_ERROR_DEINITIALIZED";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_CONTEXT_ALREADY_CURRENT: return "CUDA_ERROR_CONTEXT_ALREADY_CURRENT";
    case CUDA_ERROR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_READY: return "CUDA_ERROR_NOT_READY";
    case CUDA_ERROR_ILLEGAL_ADDRESS: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case CUDA_ERROR_CONTEXT_IS_DESTROYED: return "CUDA_ERROR_CONTEXT_IS_DESTROYED";
    case CUDA_ERROR_NOT_PERMITTED: return "CUDA_ERROR_NOT_PERMITTED";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    case CUDA_ERROR_UNKNOWN: return "CUDA_ERROR_UNKNOWN";
    case (int)SYMBOL_MISSING: return "SYMBOL_MISSING(not exported by libcuda.so.1)";
    default: return "?";
    }
}

/* Checks a call's status; evaluates to 1 when it matched. */
#define EXPECT_RC(name, expr, want)                                                                 \
    expect_rc_impl((name), (expr), (want), #expr)

static int expect_rc_impl(const char *name, CUresult got, CUresult want, const char *expr) {
    if (got == want) {
        pass(name);
        return 1;
    }
    fail(name, "%s returned %d (%s), expected %d (%s)", expr, (int)got, rc_name(got), (int)want,
         rc_name(want));
    return 0;
}

/* For set-up steps: a FAIL only when it goes wrong, nothing printed otherwise. */
#define OK(name, expr) ok_impl((name), (expr), #expr)
static int ok_impl(const char *name, CUresult got, const char *expr) {
    if (got == CUDA_SUCCESS) return 1;
    fail(name, "set-up call %s returned %d (%s)", expr, (int)got, rc_name(got));
    return 0;
}

#define CHECK(name, cond, ...)                                                                      \
    do {                                                                                            \
        if (cond) pass(name);                                                                       \
        else fail(name, __VA_ARGS__);                                                               \
    } while (0)

/* ------------------------------------------------------------------------- */
/* Helpers.                                                                  */

static uint8_t pattern_byte(uint64_t seed, size_t i) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull + 0x94D049BB133111EBull;
    x ^= x >> 31;
    x *= 0xD6E8FEB86659FD93ull;
    x ^= x >> 29;
    return (uint8_t)x;
}

static void fill(void *buf, size_t n, uint64_t seed) {
    uint8_t *b = buf;
    for (size_t i = 0; i < n; i++) b[i] = pattern_byte(seed, i);
}

/* Returns the index of the first mismatch, or (size_t)-1. */
static size_t first_mismatch_pattern(const void *buf, size_t n, uint64_t seed) {
    const uint8_t *b = buf;
    for (size_t i = 0; i < n; i++)
        if (b[i] != pattern_byte(seed, i)) return i;
    return (size_t)-1;
}

static size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

/* Parses "80GiB", "512MiB", "64KiB", "1048576" (bytes). Returns 0 when unparsable. */
static size_t parse_size(const char *s) {
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s) return 0;
    while (*end == ' ') end++;
    if (*end == 0 || strcmp(end, "B") == 0) return (size_t)v;
    if (strcmp(end, "KiB") == 0) return (size_t)v << 10;
    if (strcmp(end, "MiB") == 0) return (size_t)v << 20;
    if (strcmp(end, "GiB") == 0) return (size_t)v << 30;
    if (strcmp(end, "TiB") == 0) return (size_t)v << 40;
    return 0;
}

/* "13.0" -> 13000, "12.8" -> 12080, "13000" -> 13000. */
static int parse_driver_version(const char *s) {
    const char *dot = strchr(s, '.');
    if (!dot) return atoi(s);
    return atoi(s) * 1000 + atoi(dot + 1) * 10;
}

static int g_expected_devices = 2;
static size_t g_expected_total = 80 * GiB;
static int g_expected_driver_version = 13000;
static int g_check_identity = 1; /* H100-like identity unless GPUPOOL_SIM_CONFIG is set */

static size_t mem_free(void) {
    size_t f = 0, t = 0;
    if (cuMemGetInfo_v2(&f, &t) != CUDA_SUCCESS) return (size_t)-1;
    return f;
}

static CUcontext g_primary0; /* primary context of device 0, retained in section_contexts */

/* ------------------------------------------------------------------------- */
/* Loading.                                                                  */

static int load_driver(void) {
    g_lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!g_lib) {
        fail("load.dlopen_libcuda", "dlopen(libcuda.so.1): %s", dlerror());
        return 0;
    }
    pass("load.dlopen_libcuda");
#define RESOLVE(name)                                                                               \
    p_##name = (__typeof__(name) *)dlsym(g_lib, #name);                                             \
    if (!p_##name) {                                                                                \
        g_missing_symbols++;                                                                        \
        fail("load.symbol." #name, "libcuda.so.1 does not export %s", #name);                       \
        p_##name = (__typeof__(name) *)(void *)missing_symbol_stub;                                 \
    }
    CU_FUNCTIONS(RESOLVE)
#undef RESOLVE
    CHECK("load.all_symbols", g_missing_symbols == 0, "%d entry points missing", g_missing_symbols);
    return 1;
}

/* ------------------------------------------------------------------------- */
/* Before cuInit.                                                            */

static void section_before_init(void) {
    int n = -1;
    CUdevice d = -1;
    CUcontext c = NULL;
    CUdeviceptr p = 0;
    size_t f = 0, t = 0;
    EXPECT_RC("before_init.cuDeviceGetCount", cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_RC("before_init.cuDeviceGet", cuDeviceGet(&d, 0), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_RC("before_init.cuCtxGetCurrent", cuCtxGetCurrent(&c), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_RC("before_init.cuMemAlloc_v2", cuMemAlloc_v2(&p, 1024), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_RC("before_init.cuMemGetInfo_v2", cuMemGetInfo_v2(&f, &t), CUDA_ERROR_NOT_INITIALIZED);

    /* Usable before cuInit: the version query, error strings, and entry-point lookup
     * (cudart fetches all its entry points with cuGetProcAddress before calling cuInit). */
    int v = 0;
    if (EXPECT_RC("before_init.cuDriverGetVersion", cuDriverGetVersion(&v), CUDA_SUCCESS))
        CHECK("before_init.cuDriverGetVersion.value", v == g_expected_driver_version, "got %d, expected %d",
              v, g_expected_driver_version);
    const char *s = NULL;
    if (EXPECT_RC("before_init.cuGetErrorName", cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s), CUDA_SUCCESS))
        CHECK("before_init.cuGetErrorName.value", s && strcmp(s, "CUDA_ERROR_OUT_OF_MEMORY") == 0, "got \"%s\"",
              s ? s : "(null)");
    void *pfn = NULL;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
    if (EXPECT_RC("before_init.cuGetProcAddress_v2", cuGetProcAddress_v2("cuInit", &pfn, 12000, 0, &st),
                  CUDA_SUCCESS))
        CHECK("before_init.cuGetProcAddress_v2.value", pfn == dlsym(g_lib, "cuInit") && st == CU_GET_PROC_ADDRESS_SUCCESS,
              "pfn %p (dlsym %p), status %d", pfn, dlsym(g_lib, "cuInit"), (int)st);

    /* cuInit: "Currently, the Flags parameter must be 0." */
    EXPECT_RC("before_init.cuInit_flags_nonzero", cuInit(1), CUDA_ERROR_INVALID_VALUE);
}

/* ------------------------------------------------------------------------- */
/* Init, versions, errors.                                                   */

static int section_init(void) {
    if (!EXPECT_RC("init.cuInit", cuInit(0), CUDA_SUCCESS)) return 0;
    EXPECT_RC("init.cuInit_again", cuInit(0), CUDA_SUCCESS);
    int v = 0;
    if (EXPECT_RC("init.cuDriverGetVersion", cuDriverGetVersion(&v), CUDA_SUCCESS))
        CHECK("init.cuDriverGetVersion.value", v == g_expected_driver_version, "got %d, expected %d", v,
              g_expected_driver_version);
    EXPECT_RC("init.cuDriverGetVersion_null", cuDriverGetVersion(NULL), CUDA_ERROR_INVALID_VALUE);

    const char *s = NULL;
    if (EXPECT_RC("errors.cuGetErrorName", cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &s), CUDA_SUCCESS))
        CHECK("errors.cuGetErrorName.value", s && strcmp(s, "CUDA_ERROR_INVALID_VALUE") == 0, "got \"%s\"",
              s ? s : "(null)");
    s = NULL;
    if (EXPECT_RC("errors.cuGetErrorString", cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s), CUDA_SUCCESS))
        CHECK("errors.cuGetErrorString.value", s && strcmp(s, "out of memory") == 0, "got \"%s\"",
              s ? s : "(null)");
    s = "sentinel";
    /* "If the error code is not recognized, CUDA_ERROR_INVALID_VALUE will be returned and
     * *pStr will be set to the NULL address." */
    if (EXPECT_RC("errors.cuGetErrorName_unknown", cuGetErrorName((CUresult)123456, &s), CUDA_ERROR_INVALID_VALUE))
        CHECK("errors.cuGetErrorName_unknown.null", s == NULL, "*pStr = %p, expected NULL", (const void *)s);
    s = "sentinel";
    if (EXPECT_RC("errors.cuGetErrorString_unknown", cuGetErrorString((CUresult)123456, &s),
                  CUDA_ERROR_INVALID_VALUE))
        CHECK("errors.cuGetErrorString_unknown.null", s == NULL, "*pStr = %p, expected NULL", (const void *)s);
    return 1;
}

/* ------------------------------------------------------------------------- */
/* Devices.                                                                  */

static void section_devices(void) {
    int n = -1;
    if (EXPECT_RC("device.count", cuDeviceGetCount(&n), CUDA_SUCCESS))
        CHECK("device.count.value", n == g_expected_devices, "got %d, expected %d", n, g_expected_devices);
    EXPECT_RC("device.count_null", cuDeviceGetCount(NULL), CUDA_ERROR_INVALID_VALUE);
    CUdevice d = -1;
    EXPECT_RC("device.get_out_of_range", cuDeviceGet(&d, n), CUDA_ERROR_INVALID_DEVICE);
    EXPECT_RC("device.get_negative", cuDeviceGet(&d, -1), CUDA_ERROR_INVALID_DEVICE);
    EXPECT_RC("device.get_null", cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE);

    CUuuid uuids[16];
    int nd = n > 16 ? 16 : n;
    for (int i = 0; i < nd; i++) {
        char name[128];
        snprintf(name, sizeof name, "device%d.get", i);
        if (!EXPECT_RC(name, cuDeviceGet(&d, i), CUDA_SUCCESS)) continue;
        snprintf(name, sizeof name, "device%d.get.ordinal", i);
        CHECK(name, d == i, "cuDeviceGet(%d) gave device %d", i, d);

        char dn[256];
        memset(dn, 0x7f, sizeof dn);
        snprintf(name, sizeof name, "device%d.name", i);
        if (EXPECT_RC(name, cuDeviceGetName(dn, sizeof dn, d), CUDA_SUCCESS)) {
            size_t len = strnlen(dn, sizeof dn);
            snprintf(name, sizeof name, "device%d.name.terminated_nonempty", i);
            CHECK(name, len > 0 && len < sizeof dn, "length %zu", len);
            if (g_check_identity) {
                snprintf(name, sizeof name, "device%d.name.h100", i);
                CHECK(name, strstr(dn, "H100") != NULL, "name \"%s\" does not mention H100", dn);
            }
            char small[5];
            memset(small, 0x7f, sizeof small);
            snprintf(name, sizeof name, "device%d.name_truncated", i);
            if (EXPECT_RC(name, cuDeviceGetName(small, sizeof small, d), CUDA_SUCCESS)) {
                snprintf(name, sizeof name, "device%d.name_truncated.prefix", i);
                size_t sl = strnlen(small, sizeof small);
                CHECK(name, sl < sizeof small && strncmp(small, dn, sl) == 0,
                      "len-5 buffer not a NUL-terminated prefix of \"%s\"", dn);
            }
        }
        snprintf(name, sizeof name, "device%d.name_null", i);
        EXPECT_RC(name, cuDeviceGetName(NULL, 64, d), CUDA_ERROR_INVALID_VALUE);

        CUuuid u1, u2;
        memset(&u1, 0, sizeof u1);
        memset(&u2, 0xff, sizeof u2);
        snprintf(name, sizeof name, "device%d.uuid", i);
        int ok1 = EXPECT_RC(name, cuDeviceGetUuid(&u1, d), CUDA_SUCCESS);
        snprintf(name, sizeof name, "device%d.uuid_v2", i);
        int ok2 = EXPECT_RC(name, cuDeviceGetUuid_v2(&u2, d), CUDA_SUCCESS);
        if (ok1 && ok2) {
            static const CUuuid zero;
            snprintf(name, sizeof name, "device%d.uuid.consistent_nonzero", i);
            CHECK(name, memcmp(&u1, &u2, 16) == 0 && memcmp(&u1, &zero, 16) != 0,
                  "cuDeviceGetUuid and _v2 differ or are all zero");
            uuids[i] = u1;
        }
        snprintf(name, sizeof name, "device%d.uuid_null", i);
        EXPECT_RC(name, cuDeviceGetUuid_v2(NULL, d), CUDA_ERROR_INVALID_VALUE);

        size_t total = 0;
        snprintf(name, sizeof name, "device%d.total_mem", i);
        if (EXPECT_RC(name, cuDeviceTotalMem_v2(&total, d), CUDA_SUCCESS)) {
            snprintf(name, sizeof name, "device%d.total_mem.value", i);
            CHECK(name, total == g_expected_total, "got %zu, expected %zu", total, g_expected_total);
        }
        snprintf(name, sizeof name, "device%d.total_mem_null", i);
        EXPECT_RC(name, cuDeviceTotalMem_v2(NULL, d), CUDA_ERROR_INVALID_VALUE);

        struct {
            CUdevice_attribute a;
            const char *n;
            int want; /* -1: only > 0 */
            int identity;
        } attrs[] = {
            {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "sm_count", 132, 1},
            {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "cc_major", 9, 1},
            {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "cc_minor", 0, 1},
            {CU_DEVICE_ATTRIBUTE_WARP_SIZE, "warp_size", 32, 0},
            {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "max_threads_per_block", 1024, 0},
            {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, "unified_addressing", 1, 0},
            {CU_DEVICE_ATTRIBUTE_INTEGRATED, "integrated", 0, 0},
            {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, "shared_mem_per_block", -1, 0},
            {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "l2_cache_size", -1, 0},
            {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, "clock_rate", -1, 0},
            {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, "max_grid_dim_x", 2147483647, 0},
        };
        for (size_t k = 0; k < sizeof attrs / sizeof attrs[0]; k++) {
            if (attrs[k].identity && !g_check_identity) continue;
            int v = -12345;
            snprintf(name, sizeof name, "device%d.attr.%s", i, attrs[k].n);
            if (!EXPECT_RC(name, cuDeviceGetAttribute(&v, attrs[k].a, d), CUDA_SUCCESS)) continue;
            snprintf(name, sizeof name, "device%d.attr.%s.value", i, attrs[k].n);
            if (attrs[k].want >= 0) CHECK(name, v == attrs[k].want, "got %d, expected %d", v, attrs[k].want);
            else CHECK(name, v > 0, "got %d, expected > 0", v);
        }
        int major = -1, minor = -1, amaj = -2, amin = -2;
        snprintf(name, sizeof name, "device%d.compute_capability", i);
        if (EXPECT_RC(name, cuDeviceComputeCapability(&major, &minor, d), CUDA_SUCCESS) &&
            cuDeviceGetAttribute(&amaj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d) == CUDA_SUCCESS &&
            cuDeviceGetAttribute(&amin, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d) == CUDA_SUCCESS) {
            snprintf(name, sizeof name, "device%d.compute_capability.matches_attributes", i);
            CHECK(name, major == amaj && minor == amin, "%d.%d vs attributes %d.%d", major, minor, amaj, amin);
        }
        int v = 0;
        snprintf(name, sizeof name, "device%d.attr_invalid", i);
        EXPECT_RC(name, cuDeviceGetAttribute(&v, (CUdevice_attribute)100000, d), CUDA_ERROR_INVALID_VALUE);
        snprintf(name, sizeof name, "device%d.attr_null", i);
        EXPECT_RC(name, cuDeviceGetAttribute(NULL, CU_DEVICE_ATTRIBUTE_WARP_SIZE, d), CUDA_ERROR_INVALID_VALUE);

        char bus[64] = {0};
        snprintf(name, sizeof name, "device%d.pci_bus_id", i);
        if (EXPECT_RC(name, cuDeviceGetPCIBusId(bus, sizeof bus, d), CUDA_SUCCESS)) {
            unsigned dom = 0, b = 0, dev = 0, fn = 0;
            snprintf(name, sizeof name, "device%d.pci_bus_id.format", i);
            CHECK(name, sscanf(bus, "%x:%x:%x.%x", &dom, &b, &dev, &fn) == 4, "\"%s\" is not domain:bus:device.function",
                  bus);
            int busattr = -1;
            cuDeviceGetAttribute(&busattr, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d);
            snprintf(name, sizeof name, "device%d.pci_bus_id.matches_attribute", i);
            CHECK(name, (int)b == busattr, "bus id string \"%s\" vs CU_DEVICE_ATTRIBUTE_PCI_BUS_ID %d", bus, busattr);
            CUdevice back = -1;
            snprintf(name, sizeof name, "device%d.by_pci_bus_id", i);
            if (EXPECT_RC(name, cuDeviceGetByPCIBusId(&back, bus), CUDA_SUCCESS)) {
                snprintf(name, sizeof name, "device%d.by_pci_bus_id.roundtrip", i);
                CHECK(name, back == d, "\"%s\" gave device %d", bus, back);
            }
        }
    }
    int distinct = 1;
    for (int i = 0; i < nd; i++)
        for (int j = i + 1; j < nd; j++)
            if (memcmp(&uuids[i], &uuids[j], 16) == 0) distinct = 0;
    CHECK("device.uuids_distinct", distinct, "two devices share a UUID");
    size_t total = 0;
    EXPECT_RC("device.total_mem_bad_device", cuDeviceTotalMem_v2(&total, n + 5), CUDA_ERROR_INVALID_DEVICE);
    int v = 0;
    EXPECT_RC("device.attr_bad_device", cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, n + 5),
              CUDA_ERROR_INVALID_DEVICE);
}

/* ------------------------------------------------------------------------- */
/* Entry points.                                                             */

static void expect_proc(const char *name, const char *symbol, int version, cuuint64_t flags, const char *exported) {
    void *pfn = (void *)1;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
    if (!EXPECT_RC(name, cuGetProcAddress_v2(symbol, &pfn, version, flags, &st), CUDA_SUCCESS)) return;
    void *want = dlsym(g_lib, exported);
    char n2[160];
    snprintf(n2, sizeof n2, "%s.value", name);
    CHECK(n2, want != NULL && pfn == want && st == CU_GET_PROC_ADDRESS_SUCCESS,
          "cuGetProcAddress_v2(\"%s\", %d, flags %llu) gave %p status %d; dlsym(\"%s\") = %p", symbol, version,
          (unsigned long long)flags, pfn, (int)st, exported, want);
}

static void section_proc_address(void) {
    expect_proc("proc.cuMemAlloc@12000", "cuMemAlloc", 12000, CU_GET_PROC_ADDRESS_DEFAULT, "cuMemAlloc_v2");
    expect_proc("proc.cuMemGetInfo@12000", "cuMemGetInfo", 12000, 0, "cuMemGetInfo_v2");
    expect_proc("proc.cuDeviceTotalMem@12000", "cuDeviceTotalMem", 12000, 0, "cuDeviceTotalMem_v2");
    expect_proc("proc.cuInit@12000", "cuInit", 12000, 0, "cuInit");
    expect_proc("proc.cuGetProcAddress@12000", "cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2");
    expect_proc("proc.cuGetProcAddress@11030", "cuGetProcAddress", 11030, 0, "cuGetProcAddress");
    expect_proc("proc.cuDeviceGetUuid@12000", "cuDeviceGetUuid", 12000, 0, "cuDeviceGetUuid_v2");
    expect_proc("proc.cuDeviceGetUuid@11000", "cuDeviceGetUuid", 11000, 0, "cuDeviceGetUuid");
    expect_proc("proc.cuMemcpyHtoD@12000.ptds", "cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                "cuMemcpyHtoD_v2_ptds");
    expect_proc("proc.cuMemcpyHtoD@12000.legacy", "cuMemcpyHtoD", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                "cuMemcpyHtoD_v2");
    expect_proc("proc.cuStreamSynchronize@12000.ptsz", "cuStreamSynchronize", 12000,
                CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuStreamSynchronize_ptsz");
    expect_proc("proc.cuStreamSynchronize@12000.default", "cuStreamSynchronize", 12000, 0, "cuStreamSynchronize");

    /* "The API will return CUDA_SUCCESS and set the returned pfn to NULL if ... the driver
     * symbol is invalid", symbolStatus CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND. */
    void *pfn = (void *)1;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
    if (EXPECT_RC("proc.unknown_symbol", cuGetProcAddress_v2("cuDefinitelyNotAFunction", &pfn, 12000, 0, &st),
                  CUDA_SUCCESS))
        CHECK("proc.unknown_symbol.null_not_found", pfn == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
              "pfn %p status %d, expected NULL and CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND (1)", pfn, (int)st);
    /* Found, but introduced after the requested version (cuFuncGetParamInfo: CUDA 12.4). */
    pfn = (void *)1;
    st = (CUdriverProcAddressQueryResult)-1;
    if (EXPECT_RC("proc.version_not_sufficient", cuGetProcAddress_v2("cuFuncGetParamInfo", &pfn, 12000, 0, &st),
                  CUDA_SUCCESS))
        CHECK("proc.version_not_sufficient.null_status", pfn == NULL && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
              "pfn %p status %d, expected NULL and CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT (2)", pfn, (int)st);
    /* "If the specified CUDA version is greater than the driver version, the API will
     * return CUDA_ERROR_INVALID_VALUE." */
    pfn = NULL;
    EXPECT_RC("proc.version_newer_than_driver",
              cuGetProcAddress_v2("cuMemAlloc", &pfn, g_expected_driver_version + 1000, 0, &st),
              CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC("proc.null_symbol", cuGetProcAddress_v2(NULL, &pfn, 12000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC("proc.null_pfn", cuGetProcAddress_v2("cuMemAlloc", NULL, 12000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    /* symbolStatus is optional. */
    pfn = NULL;
    if (EXPECT_RC("proc.null_status_ok", cuGetProcAddress_v2("cuMemAlloc", &pfn, 12000, 0, NULL), CUDA_SUCCESS))
        CHECK("proc.null_status_ok.value", pfn == dlsym(g_lib, "cuMemAlloc_v2"), "pfn %p", pfn);
    /* The v1 (pre-12.0) entry point without symbolStatus. */
    pfn = NULL;
    if (EXPECT_RC("proc.v1_cuMemAlloc", cuGetProcAddress("cuMemAlloc", &pfn, 12000, 0), CUDA_SUCCESS))
        CHECK("proc.v1_cuMemAlloc.value", pfn == dlsym(g_lib, "cuMemAlloc_v2"), "pfn %p", pfn);
    /* A pointer obtained this way is callable. */
    pfn = NULL;
    if (cuGetProcAddress_v2("cuDeviceGetCount", &pfn, 12000, 0, NULL) == CUDA_SUCCESS && pfn) {
        int n = -1;
        CUresult rc = ((__typeof__(cuDeviceGetCount) *)pfn)(&n);
        CHECK("proc.call_through_pointer", rc == CUDA_SUCCESS && n == g_expected_devices, "rc %d count %d", (int)rc, n);
    } else {
        fail("proc.call_through_pointer", "cuGetProcAddress_v2(\"cuDeviceGetCount\") failed");
    }
}

/* ------------------------------------------------------------------------- */
/* Contexts.                                                                 */

struct thread_ctx_probe {
    CUcontext seen_initial;
    CUresult rc_get, rc_pop, rc_alloc, rc_set, rc_get2;
    CUcontext set_to, seen_after_set;
    CUdeviceptr alloc_ptr;
};

static void *probe_thread(void *arg) {
    struct thread_ctx_probe *p = arg;
    p->seen_initial = (CUcontext)0x1234;
    p->rc_get = cuCtxGetCurrent(&p->seen_initial);
    CUcontext popped = NULL;
    p->rc_pop = cuCtxPopCurrent_v2(&popped);
    p->alloc_ptr = 0;
    p->rc_alloc = cuMemAlloc_v2(&p->alloc_ptr, 4096);
    p->rc_set = cuCtxSetCurrent(p->set_to);
    p->rc_get2 = cuCtxGetCurrent(&p->seen_after_set);
    return NULL;
}

static void section_contexts(void) {
    CUdevice d0 = 0;
    CUcontext c = (CUcontext)0x1;
    if (EXPECT_RC("ctx.current_initially", cuCtxGetCurrent(&c), CUDA_SUCCESS))
        CHECK("ctx.current_initially.null", c == NULL, "got %p", (void *)c);
    EXPECT_RC("ctx.get_current_null", cuCtxGetCurrent(NULL), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr p = 0;
    /* No context bound to the thread. */
    EXPECT_RC("ctx.alloc_without_context", cuMemAlloc_v2(&p, 4096), CUDA_ERROR_INVALID_CONTEXT);
    size_t f, t;
    EXPECT_RC("ctx.mem_get_info_without_context", cuMemGetInfo_v2(&f, &t), CUDA_ERROR_INVALID_CONTEXT);
    CUcontext popped = (CUcontext)0x1;
    EXPECT_RC("ctx.pop_empty_stack", cuCtxPopCurrent_v2(&popped), CUDA_ERROR_INVALID_CONTEXT);

    /* Primary context. */
    unsigned flags = 99;
    int active = 99;
    if (EXPECT_RC("primary.state_before", cuDevicePrimaryCtxGetState(d0, &flags, &active), CUDA_SUCCESS))
        CHECK("primary.state_before.inactive", active == 0, "active = %d", active);
    CUcontext pc = NULL, pc2 = NULL;
    if (!EXPECT_RC("primary.retain", cuDevicePrimaryCtxRetain(&pc, d0), CUDA_SUCCESS) || !pc) {
        fail("primary.retain.nonnull", "no primary context; remaining sections need one");
        return;
    }
    g_primary0 = pc;
    if (EXPECT_RC("primary.retain_again", cuDevicePrimaryCtxRetain(&pc2, d0), CUDA_SUCCESS))
        CHECK("primary.retain_again.same", pc2 == pc, "%p vs %p", (void *)pc2, (void *)pc);
    if (EXPECT_RC("primary.state_after_retain", cuDevicePrimaryCtxGetState(d0, &flags, &active), CUDA_SUCCESS))
        CHECK("primary.state_after_retain.active", active == 1, "active = %d", active);
    EXPECT_RC("primary.retain_null", cuDevicePrimaryCtxRetain(NULL, d0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC("primary.retain_bad_device", cuDevicePrimaryCtxRetain(&pc2, 1000), CUDA_ERROR_INVALID_DEVICE);
    EXPECT_RC("primary.release_extra", cuDevicePrimaryCtxRelease_v2(d0), CUDA_SUCCESS); /* balance retain_again */
    /* The primary context is not made current by retaining it. */
    c = (CUcontext)0x1;
    cuCtxGetCurrent(&c);
    CHECK("primary.retain_does_not_bind", c == NULL, "current context %p after retain", (void *)c);

    if (EXPECT_RC("ctx.set_current_primary", cuCtxSetCurrent(pc), CUDA_SUCCESS)) {
        c = NULL;
        cuCtxGetCurrent(&c);
        CHECK("ctx.set_current_primary.current", c == pc, "current %p, expected %p", (void *)c, (void *)pc);
    }
    CUdevice dd = -1;
    if (EXPECT_RC("ctx.get_device", cuCtxGetDevice(&dd), CUDA_SUCCESS))
        CHECK("ctx.get_device.value", dd == d0, "got %d", dd);
    EXPECT_RC("ctx.synchronize", cuCtxSynchronize(), CUDA_SUCCESS);

    /* Created contexts: cuCtxCreate pushes the new context on the calling thread's stack. */
    CUcontext a = NULL;
    if (!EXPECT_RC("ctx.create", cuCtxCreate_v2(&a, 0, d0), CUDA_SUCCESS) || !a) return;
    c = NULL;
    cuCtxGetCurrent(&c);
    CHECK("ctx.create.becomes_current", c == a, "current %p, created %p", (void *)c, (void *)a);
    CHECK("ctx.create.distinct_from_primary", a != pc, "created context equals the primary context");
    popped = NULL;
    if (EXPECT_RC("ctx.pop", cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS)) {
        CHECK("ctx.pop.returns_popped", popped == a, "popped %p, expected %p", (void *)popped, (void *)a);
        c = NULL;
        cuCtxGetCurrent(&c);
        CHECK("ctx.pop.restores_previous", c == pc, "current %p, expected primary %p", (void *)c, (void *)pc);
    }
    if (EXPECT_RC("ctx.push", cuCtxPushCurrent_v2(a), CUDA_SUCCESS)) {
        c = NULL;
        cuCtxGetCurrent(&c);
        CHECK("ctx.push.current", c == a, "current %p", (void *)c);
    }
    EXPECT_RC("ctx.create_null", cuCtxCreate_v2(NULL, 0, d0), CUDA_ERROR_INVALID_VALUE);
    CUcontext junk = NULL;
    EXPECT_RC("ctx.create_bad_device", cuCtxCreate_v2(&junk, 0, 1000), CUDA_ERROR_INVALID_DEVICE);

    /* The current context is per thread. */
    struct thread_ctx_probe probe;
    memset(&probe, 0, sizeof probe);
    probe.set_to = pc;
    pthread_t th;
    if (pthread_create(&th, NULL, probe_thread, &probe) == 0) {
        pthread_join(th, NULL);
        CHECK("ctx.thread.initially_none", probe.rc_get == CUDA_SUCCESS && probe.seen_initial == NULL,
              "new thread: rc %d current %p (main thread has %p)", (int)probe.rc_get, (void *)probe.seen_initial,
              (void *)a);
        CHECK("ctx.thread.pop_empty", probe.rc_pop == CUDA_ERROR_INVALID_CONTEXT, "rc %d (%s)", (int)probe.rc_pop,
              rc_name(probe.rc_pop));
        CHECK("ctx.thread.alloc_without_context", probe.rc_alloc == CUDA_ERROR_INVALID_CONTEXT, "rc %d (%s)",
              (int)probe.rc_alloc, rc_name(probe.rc_alloc));
        CHECK("ctx.thread.set_current", probe.rc_set == CUDA_SUCCESS && probe.rc_get2 == CUDA_SUCCESS &&
                                            probe.seen_after_set == pc,
              "rc %d/%d current %p", (int)probe.rc_set, (int)probe.rc_get2, (void *)probe.seen_after_set);
        c = NULL;
        cuCtxGetCurrent(&c);
        CHECK("ctx.thread.main_unaffected", c == a, "main thread current %p, expected %p", (void *)c, (void *)a);
    } else {
        fail("ctx.thread", "pthread_create failed");
    }

    /* Second device, if any: its own primary context. */
    if (g_expected_devices > 1) {
        CUcontext p1 = NULL;
        if (EXPECT_RC("primary.device1.retain", cuDevicePrimaryCtxRetain(&p1, 1), CUDA_SUCCESS)) {
            CHECK("primary.device1.distinct", p1 && p1 != pc, "device 1 primary %p, device 0 primary %p", (void *)p1,
                  (void *)pc);
            if (OK("primary.device1.push", cuCtxPushCurrent_v2(p1))) {
                CUdevice dv = -1;
                cuCtxGetDevice(&dv);
                CHECK("primary.device1.get_device", dv == 1, "cuCtxGetDevice gave %d", dv);
                cuCtxPopCurrent_v2(&popped);
            }
            EXPECT_RC("primary.device1.release", cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
        }
    }

    /* Destroying the created context (current on this thread) leaves the primary below it. */
    if (EXPECT_RC("ctx.destroy", cuCtxDestroy_v2(a), CUDA_SUCCESS)) {
        c = (CUcontext)0x1;
        cuCtxGetCurrent(&c);
        CHECK("ctx.destroy.pops", c == pc, "current after destroying the current context: %p, expected %p", (void *)c,
              (void *)pc);
    }
    cuCtxSetCurrent(pc);
}

/* ------------------------------------------------------------------------- */
/* Memory and accounting.                                                    */

static void check_alloc_accounting(const char *label, size_t bytes) {
    char name[160];
    size_t f0 = 0, t0 = 0, f1 = 0, t1 = 0, f2 = 0, t2 = 0;
    CUdeviceptr p = 0;
    snprintf(name, sizeof name, "meminfo.%s", label);
    if (!OK(name, cuMemGetInfo_v2(&f0, &t0))) return;
    snprintf(name, sizeof name, "alloc.%s", label);
    if (!EXPECT_RC(name, cuMemAlloc_v2(&p, bytes), CUDA_SUCCESS)) return;
    cuMemGetInfo_v2(&f1, &t1);
    size_t d = f0 - f1;
    snprintf(name, sizeof name, "meminfo.%s.after_alloc", label);
    if (bytes % GRANULE == 0)
        CHECK(name, f1 <= f0 && d == bytes && t1 == t0, "free %zu -> %zu (delta %zu) for %zu bytes, expected exact",
              f0, f1, d, bytes);
    else
        CHECK(name, f1 <= f0 && d >= bytes && d <= round_up(bytes, GRANULE) && t1 == t0,
              "free %zu -> %zu (delta %zu) for %zu bytes, expected %zu..%zu", f0, f1, d, bytes, bytes,
              round_up(bytes, GRANULE));
    snprintf(name, sizeof name, "free.%s", label);
    EXPECT_RC(name, cuMemFree_v2(p), CUDA_SUCCESS);
    cuMemGetInfo_v2(&f2, &t2);
    snprintf(name, sizeof name, "meminfo.%s.after_free", label);
    CHECK(name, f2 == f0 && t2 == t0, "free %zu before alloc, %zu after free", f0, f2);
}

static void section_memory(void) {
    size_t f = 0, t = 0, total = 0;
    if (EXPECT_RC("meminfo", cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS)) {
        cuDeviceTotalMem_v2(&total, 0);
        CHECK("meminfo.total_matches_device", t == total, "cuMemGetInfo total %zu, cuDeviceTotalMem %zu", t, total);
        CHECK("meminfo.free_le_total", f > 0 && f <= t, "free %zu total %zu", f, t);
    }
    EXPECT_RC("meminfo_null", cuMemGetInfo_v2(NULL, NULL), CUDA_ERROR_INVALID_VALUE);

    check_alloc_accounting("64MiB", 64 * MiB);
    check_alloc_accounting("2MiB", 2 * MiB);
    check_alloc_accounting("3MiB_plus_1", 3 * MiB + 1);
    check_alloc_accounting("1B", 1);

    CUdeviceptr p = 0;
    /* "If bytesize is 0, cuMemAlloc() returns CUDA_ERROR_INVALID_VALUE." */
    EXPECT_RC("alloc.zero_bytes", cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC("alloc.null_dptr", cuMemAlloc_v2(NULL, 4096), CUDA_ERROR_INVALID_VALUE);

    /* Distinct, non-null, non-overlapping, aligned allocations. */
    CUdeviceptr ps[8] = {0};
    int ok = 1;
    for (int i = 0; i < 8; i++) ok &= cuMemAlloc_v2(&ps[i], 1000 + (size_t)i * 777) == CUDA_SUCCESS;
    int disjoint = ok, aligned = ok;
    for (int i = 0; i < 8 && ok; i++) {
        if (ps[i] == 0 || ps[i] % 256 != 0) aligned = 0;
        for (int j = 0; j < 8; j++)
            if (i != j && ps[i] < ps[j] + 1000 + (size_t)j * 777 && ps[j] < ps[i] + 1000 + (size_t)i * 777)
                disjoint = 0;
    }
    CHECK("alloc.many.ok", ok, "an allocation failed");
    CHECK("alloc.many.aligned_256", aligned, "some pointer is NULL or not 256-byte aligned");
    CHECK("alloc.many.disjoint", disjoint, "allocations overlap");

    /* cuMemGetAddressRange on an interior pointer. */
    CUdeviceptr base = 0;
    size_t size = 0;
    if (EXPECT_RC("addr_range", cuMemGetAddressRange_v2(&base, &size, ps[3] + 100), CUDA_SUCCESS))
        CHECK("addr_range.value", base == ps[3] && size == 1000 + 3 * 777, "base %#llx size %zu, expected %#llx %zu",
              (unsigned long long)base, size, (unsigned long long)ps[3], (size_t)(1000 + 3 * 777));
    int bogus_local;
    {
        CUresult rc = cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)(uintptr_t)&bogus_local);
        CHECK("addr_range.not_allocated", rc == CUDA_ERROR_NOT_FOUND || rc == CUDA_ERROR_INVALID_VALUE,
              "returned %d (%s) for a host stack address, expected CUDA_ERROR_NOT_FOUND or CUDA_ERROR_INVALID_VALUE",
              (int)rc, rc_name(rc));
    }

    /* Pointer attributes: device. */
    unsigned int mt = 0;
    if (EXPECT_RC("ptr_attr.device.memory_type", cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ps[0]),
                  CUDA_SUCCESS))
        CHECK("ptr_attr.device.memory_type.value", mt == CU_MEMORYTYPE_DEVICE, "got %u, expected %d", mt,
              CU_MEMORYTYPE_DEVICE);
    CUcontext pctx = NULL;
    if (EXPECT_RC("ptr_attr.device.context", cuPointerGetAttribute(&pctx, CU_POINTER_ATTRIBUTE_CONTEXT, ps[0]),
                  CUDA_SUCCESS))
        CHECK("ptr_attr.device.context.value", pctx == g_primary0, "got %p, expected %p", (void *)pctx,
              (void *)g_primary0);
    int ord = -1;
    if (EXPECT_RC("ptr_attr.device.ordinal", cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ps[0]),
                  CUDA_SUCCESS))
        CHECK("ptr_attr.device.ordinal.value", ord == 0, "got %d", ord);
    CUdeviceptr start = 0;
    if (EXPECT_RC("ptr_attr.device.range_start",
                  cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ps[2] + 10), CUDA_SUCCESS))
        CHECK("ptr_attr.device.range_start.value", start == ps[2], "got %#llx expected %#llx",
              (unsigned long long)start, (unsigned long long)ps[2]);
    /* "If ptr was not allocated by, mapped by, or registered with a CUcontext which uses
     * unified virtual addressing then CUDA_ERROR_INVALID_VALUE is returned." */
    char *plain = malloc(64);
    EXPECT_RC("ptr_attr.plain_malloc", cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                                             (CUdeviceptr)(uintptr_t)plain),
              CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC("ptr_attr.null_data", cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ps[0]),
              CUDA_ERROR_INVALID_VALUE);

    /* Frees: double free, interior pointer, never-allocated pointer. */
    for (int i = 1; i < 8; i++) cuMemFree_v2(ps[i]);
    if (EXPECT_RC("free.first", cuMemFree_v2(ps[0]), CUDA_SUCCESS))
        EXPECT_RC("free.double_free", cuMemFree_v2(ps[0]), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr q = 0;
    if (OK("free.interior.alloc", cuMemAlloc_v2(&q, 8192))) {
        EXPECT_RC("free.interior_pointer", cuMemFree_v2(q + 64), CUDA_ERROR_INVALID_VALUE);
        EXPECT_RC("free.interior_pointer.base_still_valid", cuMemFree_v2(q), CUDA_SUCCESS);
    }
    EXPECT_RC("free.host_pointer", cuMemFree_v2((CUdeviceptr)(uintptr_t)plain), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC("free.freeHost_of_malloc", cuMemFreeHost(plain), CUDA_ERROR_INVALID_VALUE);
    free(plain);

    /* Pitched allocation. */
    CUdeviceptr pp = 0;
    size_t pitch = 0;
    if (EXPECT_RC("alloc_pitch", cuMemAllocPitch_v2(&pp, &pitch, 1000, 37, 4), CUDA_SUCCESS)) {
        CHECK("alloc_pitch.value", pitch >= 1000 && pp != 0, "pitch %zu for width 1000", pitch);
        cuMemFree_v2(pp);
    }

    /* Pinned host memory. */
    void *h1 = NULL, *h2 = NULL;
    if (EXPECT_RC("host.alloc_host", cuMemAllocHost_v2(&h1, 1 << 20), CUDA_SUCCESS) && h1) {
        memset(h1, 0xab, 1 << 20); /* host-accessible */
        mt = 0;
        if (EXPECT_RC("host.alloc_host.memory_type",
                      cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h1),
                      CUDA_SUCCESS))
            CHECK("host.alloc_host.memory_type.value", mt == CU_MEMORYTYPE_HOST, "got %u, expected %d", mt,
                  CU_MEMORYTYPE_HOST);
        EXPECT_RC("host.free_host", cuMemFreeHost(h1), CUDA_SUCCESS);
        EXPECT_RC("host.free_host_twice", cuMemFreeHost(h1), CUDA_ERROR_INVALID_VALUE);
    }
    if (EXPECT_RC("host.host_alloc", cuMemHostAlloc(&h2, 65536, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE),
                  CUDA_SUCCESS) &&
        h2) {
        memset(h2, 0xcd, 65536);
        mt = 0;
        if (EXPECT_RC("host.host_alloc.memory_type",
                      cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h2),
                      CUDA_SUCCESS))
            CHECK("host.host_alloc.memory_type.value", mt == CU_MEMORYTYPE_HOST, "got %u, expected %d", mt,
                  CU_MEMORYTYPE_HOST);
        unsigned hf = 0;
        if (EXPECT_RC("host.host_alloc.get_flags", cuMemHostGetFlags(&hf, h2), CUDA_SUCCESS))
            CHECK("host.host_alloc.get_flags.value", (hf & CU_MEMHOSTALLOC_DEVICEMAP) != 0, "flags %#x", hf);
        CUdeviceptr dp = 0;
        EXPECT_RC("host.host_alloc.device_pointer", cuMemHostGetDevicePointer_v2(&dp, h2, 0), CUDA_SUCCESS);
        EXPECT_RC("host.host_alloc.free", cuMemFreeHost(h2), CUDA_SUCCESS);
    }
    EXPECT_RC("host.alloc_host_null", cuMemAllocHost_v2(NULL, 4096), CUDA_ERROR_INVALID_VALUE);
    size_t fend = 0;
    cuMemGetInfo_v2(&fend, &t);
    CHECK("meminfo.section_end_balanced", fend == f, "free %zu at section start, %zu at end", f, fend);
}

/* ------------------------------------------------------------------------- */
/* Copies and memsets.                                                       */

static void section_copies(void) {
    const size_t N = 1 << 20;
    uint8_t *src = malloc(N), *dst = malloc(N);
    CUdeviceptr a = 0, b = 0;
    if (!src || !dst || !OK("copy.alloc_a", cuMemAlloc_v2(&a, N)) || !OK("copy.alloc_b", cuMemAlloc_v2(&b, N))) {
        free(src);
        free(dst);
        return;
    }
    fill(src, N, 1);
    EXPECT_RC("copy.htod", cuMemcpyHtoD_v2(a, src, N), CUDA_SUCCESS);
    memset(dst, 0, N);
    if (EXPECT_RC("copy.dtoh", cuMemcpyDtoH_v2(dst, a, N), CUDA_SUCCESS)) {
        size_t m = first_mismatch_pattern(dst, N, 1);
        CHECK("copy.htod_dtoh.data", m == (size_t)-1, "first mismatch at byte %zu", m);
    }
    EXPECT_RC("copy.dtod", cuMemcpyDtoD_v2(b, a, N), CUDA_SUCCESS);
    memset(dst, 0, N);
    if (OK("copy.dtod.readback", cuMemcpyDtoH_v2(dst, b, N))) {
        size_t m = first_mismatch_pattern(dst, N, 1);
        CHECK("copy.dtod.data", m == (size_t)-1, "first mismatch at byte %zu", m);
    }
    /* Offsets inside allocations. */
    fill(src, 4096, 2);
    EXPECT_RC("copy.htod_offset", cuMemcpyHtoD_v2(a + 12345, src, 4096), CUDA_SUCCESS);
    EXPECT_RC("copy.dtod_offset", cuMemcpyDtoD_v2(b + 777, a + 12345, 4096), CUDA_SUCCESS);
    memset(dst, 0, N);
    if (OK("copy.offset.readback", cuMemcpyDtoH_v2(dst, b, N))) {
        size_t m1 = first_mismatch_pattern(dst + 777, 4096, 2);
        size_t m0 = first_mismatch_pattern(dst, 777, 1);
        uint8_t *ref = malloc(N);
        fill(ref, N, 1);
        int tail_ok = memcmp(dst + 777 + 4096, ref + 777 + 4096, N - 777 - 4096) == 0;
        free(ref);
        CHECK("copy.offset.data", m1 == (size_t)-1 && m0 == (size_t)-1 && tail_ok,
              "copied window mismatch at %zu, head mismatch at %zu, tail intact %d", m1, m0, tail_ok);
    }
    /* cuMemcpy (unified addressing) between device buffers. */
    fill(src, N, 3);
    cuMemcpyHtoD_v2(a, src, N);
    EXPECT_RC("copy.unified_dtod", cuMemcpy(b, a, N), CUDA_SUCCESS);
    memset(dst, 0, N);
    if (OK("copy.unified.readback", cuMemcpyDtoH_v2(dst, b, N))) {
        size_t m = first_mismatch_pattern(dst, N, 3);
        CHECK("copy.unified_dtod.data", m == (size_t)-1, "first mismatch at byte %zu", m);
    }
    /* Out of bounds and bad arguments: CUDA_ERROR_INVALID_VALUE. */
    EXPECT_RC("copy.htod_past_end", cuMemcpyHtoD_v2(a + N - 16, src, 32), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC("copy.dtoh_past_end", cuMemcpyDtoH_v2(dst, a + 1, N), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC("copy.htod_null_src", cuMemcpyHtoD_v2(a, NULL, 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC("copy.dtoh_null_dst", cuMemcpyDtoH_v2(NULL, a, 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC("copy.htod_unallocated", cuMemcpyHtoD_v2((CUdeviceptr)0x10, src, 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC("copy.htod_zero_bytes", cuMemcpyHtoD_v2(a, src, 0), CUDA_SUCCESS);

    /* Memsets, checked with their neighbourhood. */
    memset(src, 0x11, N);
    cuMemcpyHtoD_v2(a, src, N);
    EXPECT_RC("memset.d8", cuMemsetD8_v2(a + 3, 0xa5, 1001), CUDA_SUCCESS);
    EXPECT_RC("memset.d16", cuMemsetD16_v2(a + 2048, 0xbeef, 300), CUDA_SUCCESS);
    EXPECT_RC("memset.d32", cuMemsetD32_v2(a + 8192, 0xdeadbeefu, 500), CUDA_SUCCESS);
    if (OK("memset.readback", cuMemcpyDtoH_v2(dst, a, N))) {
        int ok8 = dst[2] == 0x11 && dst[3 + 1001] == 0x11, ok16 = 1, ok32 = 1;
        for (size_t i = 3; i < 3 + 1001; i++) ok8 &= dst[i] == 0xa5;
        for (size_t i = 0; i < 300; i++) {
            uint16_t v;
            memcpy(&v, dst + 2048 + 2 * i, 2);
            ok16 &= v == 0xbeef;
        }
        ok16 &= dst[2047] == 0x11 && dst[2048 + 600] == 0x11;
        for (size_t i = 0; i < 500; i++) {
            uint32_t v;
            memcpy(&v, dst + 8192 + 4 * i, 4);
            ok32 &= v == 0xdeadbeefu;
        }
        ok32 &= dst[8191] == 0x11 && dst[8192 + 2000] == 0x11;
        CHECK("memset.d8.data", ok8, "D8 region or its neighbours wrong");
        CHECK("memset.d16.data", ok16, "D16 region or its neighbours wrong");
        CHECK("memset.d32.data", ok32, "D32 region or its neighbours wrong");
    }
    EXPECT_RC("memset.d8_past_end", cuMemsetD8_v2(a + N - 10, 0, 11), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC("memset.d32_unallocated", cuMemsetD32_v2((CUdeviceptr)0x1000, 0, 4), CUDA_ERROR_INVALID_VALUE);

    /* 2D memsets: pitch 512, width W elements, height 7; padding must stay. */
    const size_t pitch = 512, H = 7;
    memset(src, 0x11, N);
    cuMemcpyHtoD_v2(a, src, N);
    EXPECT_RC("memset2d.d8", cuMemsetD2D8_v2(a, pitch, 0x5a, 100, H), CUDA_SUCCESS);
    EXPECT_RC("memset2d.d16", cuMemsetD2D16_v2(a + 8 * pitch, pitch, 0x1234, 50, H), CUDA_SUCCESS);
    EXPECT_RC("memset2d.d32", cuMemsetD2D32_v2(a + 16 * pitch, pitch, 0xcafef00du, 25, H), CUDA_SUCCESS);
    if (OK("memset2d.readback", cuMemcpyDtoH_v2(dst, a, 24 * pitch))) {
        int ok8 = 1, ok16 = 1, ok32 = 1;
        for (size_t r = 0; r < 8; r++)
            for (size_t x = 0; x < pitch; x++) {
                uint8_t want = (r < H && x < 100) ? 0x5a : 0x11;
                ok8 &= dst[r * pitch + x] == want;
            }
        for (size_t r = 0; r < 8; r++)
            for (size_t x = 0; x < pitch; x += 2) {
                uint16_t v;
                memcpy(&v, dst + (8 + r) * pitch + x, 2);
                ok16 &= v == ((r < H && x < 100) ? 0x1234 : 0x1111);
            }
        for (size_t r = 0; r < 8; r++)
            for (size_t x = 0; x < pitch; x += 4) {
                uint32_t v;
                memcpy(&v, dst + (16 + r) * pitch + x, 4);
                ok32 &= v == ((r < H && x < 100) ? 0xcafef00du : 0x11111111u);
            }
        CHECK("memset2d.d8.data", ok8, "rows or padding wrong");
        CHECK("memset2d.d16.data", ok16, "rows or padding wrong");
        CHECK("memset2d.d32.data", ok32, "rows or padding wrong");
    }

    /* cuMemcpy2D host -> device (pitched) -> host (another pitch), with offsets. */
    const size_t W = 300, HH = 20, hpitch = 400, dpitch = 512, hpitch2 = 333 + 7;
    uint8_t *h = calloc(hpitch * (HH + 2), 1), *h2 = calloc(hpitch2 * (HH + 2) + 16, 1);
    for (size_t r = 0; r < HH + 2; r++)
        for (size_t x = 0; x < hpitch; x++) h[r * hpitch + x] = (uint8_t)(r * 31 + x * 7);
    memset(src, 0xee, N);
    cuMemcpyHtoD_v2(b, src, N);
    CUDA_MEMCPY2D c;
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    c.srcHost = h;
    c.srcPitch = hpitch;
    c.srcXInBytes = 5;
    c.srcY = 1;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = b;
    c.dstPitch = dpitch;
    c.dstXInBytes = 16;
    c.dstY = 2;
    c.WidthInBytes = W;
    c.Height = HH;
    EXPECT_RC("memcpy2d.htod", cuMemcpy2D_v2(&c), CUDA_SUCCESS);
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = b;
    c.srcPitch = dpitch;
    c.srcXInBytes = 16;
    c.srcY = 2;
    c.dstMemoryType = CU_MEMORYTYPE_HOST;
    c.dstHost = h2;
    c.dstPitch = hpitch2;
    c.WidthInBytes = W;
    c.Height = HH;
    if (EXPECT_RC("memcpy2d.dtoh", cuMemcpy2D_v2(&c), CUDA_SUCCESS)) {
        int ok = 1;
        for (size_t r = 0; r < HH; r++)
            for (size_t x = 0; x < W; x++) ok &= h2[r * hpitch2 + x] == h[(r + 1) * hpitch + 5 + x];
        CHECK("memcpy2d.roundtrip.data", ok, "pitched round trip lost data");
    }
    /* The device padding around the 2D window must be untouched. */
    if (OK("memcpy2d.padding.readback", cuMemcpyDtoH_v2(dst, b, dpitch * (HH + 4)))) {
        int ok = 1;
        for (size_t r = 0; r < HH + 4; r++)
            for (size_t x = 0; x < dpitch; x++) {
                int inside = r >= 2 && r < 2 + HH && x >= 16 && x < 16 + W;
                if (!inside) ok &= dst[r * dpitch + x] == 0xee;
            }
        CHECK("memcpy2d.padding_untouched", ok, "bytes outside the 2D window changed");
    }
    /* Device-to-device 2D. */
    memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = b;
    c.srcPitch = dpitch;
    c.srcXInBytes = 16;
    c.srcY = 2;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = a;
    c.dstPitch = W;
    c.WidthInBytes = W;
    c.Height = HH;
    if (EXPECT_RC("memcpy2d.dtod", cuMemcpy2D_v2(&c), CUDA_SUCCESS) &&
        OK("memcpy2d.dtod.readback", cuMemcpyDtoH_v2(dst, a, W * HH))) {
        int ok = 1;
        for (size_t r = 0; r < HH; r++)
            for (size_t x = 0; x < W; x++) ok &= dst[r * W + x] == h[(r + 1) * hpitch + 5 + x];
        CHECK("memcpy2d.dtod.data", ok, "packed device copy wrong");
    }
    EXPECT_RC("memcpy2d.null", cuMemcpy2D_v2(NULL), CUDA_ERROR_INVALID_VALUE);
    free(h);
    free(h2);

    cuMemFree_v2(a);
    cuMemFree_v2(b);
    free(src);
    free(dst);
}

/* ------------------------------------------------------------------------- */
/* Streams and events.                                                       */

static void host_fn_set_flag(void *p) { __atomic_store_n((int *)p, 1, __ATOMIC_SEQ_CST); }

static void section_streams_events(void) {
    CUstream s = NULL, s2 = NULL;
    if (!EXPECT_RC("stream.create", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS)) return;
    OK("stream.create2", cuStreamCreate(&s2, CU_STREAM_DEFAULT));
    unsigned fl = 99;
    if (EXPECT_RC("stream.get_flags", cuStreamGetFlags(s, &fl), CUDA_SUCCESS))
        CHECK("stream.get_flags.value", fl == CU_STREAM_NON_BLOCKING, "got %u", fl);
    CUcontext sc = NULL;
    if (EXPECT_RC("stream.get_ctx", cuStreamGetCtx(s, &sc), CUDA_SUCCESS))
        CHECK("stream.get_ctx.value", sc == g_primary0, "got %p expected %p", (void *)sc, (void *)g_primary0);
    EXPECT_RC("stream.create_null", cuStreamCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);

    const size_t N = 4 << 20;
    void *hsrc = NULL, *hdst = NULL;
    CUdeviceptr a = 0, b = 0;
    if (!OK("stream.pinned_src", cuMemAllocHost_v2(&hsrc, N)) || !OK("stream.pinned_dst", cuMemAllocHost_v2(&hdst, N)) ||
        !OK("stream.alloc_a", cuMemAlloc_v2(&a, N)) || !OK("stream.alloc_b", cuMemAlloc_v2(&b, N)))
        return;
    fill(hsrc, N, 42);
    memset(hdst, 0, N);
    int flag = 0;
    EXPECT_RC("async.htod", cuMemcpyHtoDAsync_v2(a, hsrc, N, s), CUDA_SUCCESS);
    EXPECT_RC("async.dtod", cuMemcpyDtoDAsync_v2(b, a, N, s), CUDA_SUCCESS);
    EXPECT_RC("async.host_fn", cuLaunchHostFunc(s, host_fn_set_flag, &flag), CUDA_SUCCESS);
    EXPECT_RC("async.dtoh", cuMemcpyDtoHAsync_v2(hdst, b, N, s), CUDA_SUCCESS);
    if (EXPECT_RC("async.stream_synchronize", cuStreamSynchronize(s), CUDA_SUCCESS)) {
        size_t m = first_mismatch_pattern(hdst, N, 42);
        CHECK("async.data", m == (size_t)-1, "first mismatch at byte %zu", m);
        CHECK("async.host_fn_ran", __atomic_load_n(&flag, __ATOMIC_SEQ_CST) == 1, "host function did not run");
        EXPECT_RC("async.stream_query_idle", cuStreamQuery(s), CUDA_SUCCESS);
    }
    /* Stream order: the last memset wins. */
    for (unsigned i = 1; i <= 16; i++) cuMemsetD32Async(a, i, N / 4, s);
    cuMemcpyDtoHAsync_v2(hdst, a, N, s);
    if (OK("async.order.sync", cuStreamSynchronize(s))) {
        int ok = 1;
        for (size_t i = 0; i < N / 4; i++) ok &= ((uint32_t *)hdst)[i] == 16;
        CHECK("async.order.last_memset_wins", ok, "stream operations ran out of order");
    }
    /* Legacy default stream (0) and the explicit handle. */
    EXPECT_RC("async.memset_default_stream", cuMemsetD8Async(a, 7, N, NULL), CUDA_SUCCESS);
    EXPECT_RC("async.dtoh_legacy_stream", cuMemcpyDtoHAsync_v2(hdst, a, 64, CU_STREAM_LEGACY), CUDA_SUCCESS);
    EXPECT_RC("async.sync_default_stream", cuStreamSynchronize(NULL), CUDA_SUCCESS);
    CHECK("async.default_stream.data", ((uint8_t *)hdst)[0] == 7 && ((uint8_t *)hdst)[63] == 7, "got %u",
          ((uint8_t *)hdst)[0]);

    /* Events. */
    CUevent e0 = NULL, e1 = NULL, en = NULL, eu = NULL;
    if (!EXPECT_RC("event.create", cuEventCreate(&e0, CU_EVENT_DEFAULT), CUDA_SUCCESS)) return;
    OK("event.create_end", cuEventCreate(&e1, CU_EVENT_DEFAULT));
    OK("event.create_notiming", cuEventCreate(&en, CU_EVENT_DISABLE_TIMING));
    OK("event.create_unrecorded", cuEventCreate(&eu, CU_EVENT_DEFAULT));
    EXPECT_RC("event.create_null", cuEventCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    /* "cuEventQuery: CUDA_SUCCESS ... if cuEventRecord() has not been called on hEvent". */
    EXPECT_RC("event.query_unrecorded", cuEventQuery(eu), CUDA_SUCCESS);
    EXPECT_RC("event.record_start", cuEventRecord(e0, s), CUDA_SUCCESS);
    for (int i = 0; i < 8; i++) {
        cuMemsetD32Async(a, (unsigned)i, N / 4, s);
        cuMemcpyDtoDAsync_v2(b, a, N, s);
    }
    EXPECT_RC("event.record_end", cuEventRecord(e1, s), CUDA_SUCCESS);
    EXPECT_RC("event.record_notiming", cuEventRecord(en, s), CUDA_SUCCESS);
    EXPECT_RC("event.stream_wait_event", cuStreamWaitEvent(s2, e1, 0), CUDA_SUCCESS);
    cuMemcpyDtoHAsync_v2(hdst, b, 16, s2);
    EXPECT_RC("event.stream2_sync", cuStreamSynchronize(s2), CUDA_SUCCESS);
    CHECK("event.stream_wait_event.ordering", ((uint32_t *)hdst)[0] == 7, "second stream read %u before the first "
          "stream's work completed", ((uint32_t *)hdst)[0]);
    if (EXPECT_RC("event.synchronize", cuEventSynchronize(e1), CUDA_SUCCESS)) {
        EXPECT_RC("event.query_done", cuEventQuery(e1), CUDA_SUCCESS);
        float ms = -1.0f;
        if (EXPECT_RC("event.elapsed", cuEventElapsedTime(&ms, e0, e1), CUDA_SUCCESS))
            CHECK("event.elapsed.nonnegative", ms >= 0.0f && ms < 60000.0f, "elapsed %f ms", (double)ms);
        /* "If cuEventRecord() has not been called on either event then CUDA_ERROR_INVALID_HANDLE". */
        EXPECT_RC("event.elapsed_unrecorded", cuEventElapsedTime(&ms, e0, eu), CUDA_ERROR_INVALID_HANDLE);
        /* "If either event was created with the CU_EVENT_DISABLE_TIMING flag, then this
         * function will return CUDA_ERROR_INVALID_HANDLE." */
        cuEventSynchronize(en);
        EXPECT_RC("event.elapsed_disable_timing", cuEventElapsedTime(&ms, e0, en), CUDA_ERROR_INVALID_HANDLE);
        EXPECT_RC("event.elapsed_null", cuEventElapsedTime(NULL, e0, e1), CUDA_ERROR_INVALID_VALUE);
    }
    EXPECT_RC("event.record_default_stream", cuEventRecord(eu, NULL), CUDA_SUCCESS);
    EXPECT_RC("event.sync_default_stream", cuEventSynchronize(eu), CUDA_SUCCESS);

    /* Bogus handles: a valid address that is not a handle, and an arbitrary value. */
    static char not_a_handle[256];
    CUstream bs = (CUstream)(void *)not_a_handle;
    CUevent be = (CUevent)(void *)(not_a_handle + 64);
    CUstream bs2 = (CUstream)(uintptr_t)0xdead0000ull;
    CUevent be2 = (CUevent)(uintptr_t)0xdead1000ull;
    EXPECT_RC("handle.bogus_stream_synchronize", cuStreamSynchronize(bs), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC("handle.bogus_stream_query", cuStreamQuery(bs2), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC("handle.bogus_stream_copy", cuMemcpyHtoDAsync_v2(a, hsrc, 16, bs), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC("handle.bogus_stream_destroy", cuStreamDestroy_v2(bs2), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC("handle.bogus_event_record", cuEventRecord(be, s), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC("handle.bogus_event_synchronize", cuEventSynchronize(be2), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC("handle.bogus_event_query", cuEventQuery(be), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC("handle.bogus_event_destroy", cuEventDestroy_v2(be2), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_RC("handle.bogus_stream_wait_event", cuStreamWaitEvent(s, be, 0), CUDA_ERROR_INVALID_HANDLE);
    CUcontext bc = (CUcontext)(void *)(not_a_handle + 128);
    EXPECT_RC("handle.bogus_context_set_current", cuCtxSetCurrent(bc), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_RC("handle.bogus_context_push", cuCtxPushCurrent_v2(bc), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_RC("handle.bogus_context_destroy", cuCtxDestroy_v2((CUcontext)(uintptr_t)0xdead2000ull),
              CUDA_ERROR_INVALID_CONTEXT);
    CUcontext cur = NULL;
    cuCtxGetCurrent(&cur);
    CHECK("handle.bogus_context.current_unchanged", cur == g_primary0, "current context is now %p", (void *)cur);

    EXPECT_RC("event.destroy", cuEventDestroy_v2(e0), CUDA_SUCCESS);
    cuEventDestroy_v2(e1);
    cuEventDestroy_v2(en);
    cuEventDestroy_v2(eu);
    EXPECT_RC("stream.destroy", cuStreamDestroy_v2(s), CUDA_SUCCESS);
    cuStreamDestroy_v2(s2);
    cuMemFree_v2(a);
    cuMemFree_v2(b);
    cuMemFreeHost(hsrc);
    cuMemFreeHost(hdst);
}

/* ------------------------------------------------------------------------- */
/* Context isolation and per-device accounting.                              */

static void section_isolation(void) {
    CUcontext ca = NULL, cb = NULL, popped = NULL;
    if (!OK("isolation.create_a", cuCtxCreate_v2(&ca, 0, 0))) return;
    CUdeviceptr pa = 0;
    uint8_t buf[256];
    fill(buf, sizeof buf, 9);
    if (!OK("isolation.alloc_in_a", cuMemAlloc_v2(&pa, 1 << 20)) ||
        !OK("isolation.htod_in_a", cuMemcpyHtoD_v2(pa, buf, sizeof buf))) {
        cuCtxDestroy_v2(ca);
        return;
    }
    cuCtxPopCurrent_v2(&popped);
    if (!OK("isolation.create_b", cuCtxCreate_v2(&cb, 0, 0))) return;
    /* ctx A's pointer is not ctx B's to free or memset, but under unified addressing every
     * copy takes it: "cuMemcpy() may be used to perform a copy between two pointers" (driver
     * API, Unified Addressing); the copy runs on ctx B's stream. */
    EXPECT_RC("isolation.free_other_context_pointer", cuMemFree_v2(pa), CUDA_ERROR_INVALID_VALUE);
    EXPECT_RC("isolation.memset_other_context_pointer", cuMemsetD8_v2(pa, 0, 16), CUDA_ERROR_INVALID_VALUE);
    uint8_t back[256], buf2[256];
    memset(back, 0, sizeof back);
    if (EXPECT_RC("unified.dtoh_from_other_context_pointer", cuMemcpyDtoH_v2(back, pa, sizeof back), CUDA_SUCCESS))
        CHECK("unified.dtoh_from_other_context_pointer.data", memcmp(back, buf, sizeof buf) == 0,
              "ctx B read other bytes than ctx A wrote");
    fill(buf2, sizeof buf2, 10);
    EXPECT_RC("unified.htod_to_other_context_pointer", cuMemcpyHtoD_v2(pa, buf2, sizeof buf2), CUDA_SUCCESS);
    memset(back, 0, sizeof back);
    if (EXPECT_RC("unified.cuMemcpy_from_other_context_pointer",
                  cuMemcpy((CUdeviceptr)(uintptr_t)back, pa, sizeof back), CUDA_SUCCESS))
        CHECK("unified.cuMemcpy_from_other_context_pointer.data", memcmp(back, buf2, sizeof buf2) == 0,
              "cuMemcpy read other bytes than the HtoD wrote");
    CUstream sb = NULL;
    if (OK("unified.stream_in_b", cuStreamCreate(&sb, 0))) {
        memset(back, 0, sizeof back);
        EXPECT_RC("unified.dtoh_async_from_other_context_pointer",
                  cuMemcpyDtoHAsync_v2(back, pa + 64, 64, sb), CUDA_SUCCESS);
        EXPECT_RC("unified.dtoh_async.sync", cuStreamSynchronize(sb), CUDA_SUCCESS);
        CHECK("unified.dtoh_async_from_other_context_pointer.data", memcmp(back, buf2 + 64, 64) == 0,
              "the async copy read other bytes");
        cuStreamDestroy_v2(sb);
    }
    EXPECT_RC("unified.dtoh_past_the_end_of_other_context_allocation",
              cuMemcpyDtoH_v2(back, pa + (1 << 20) - 16, sizeof back), CUDA_ERROR_INVALID_VALUE);
    cuCtxPopCurrent_v2(&popped);
    /* Back in A: what ctx B's copy wrote is there, and the pointer frees. */
    if (OK("isolation.push_a", cuCtxPushCurrent_v2(ca))) {
        memset(back, 0, sizeof back);
        if (EXPECT_RC("isolation.dtoh_in_owner", cuMemcpyDtoH_v2(back, pa, sizeof back), CUDA_SUCCESS))
            CHECK("unified.owner_sees_other_context_copy", memcmp(back, buf2, sizeof buf2) == 0,
                  "ctx A does not see what ctx B's HtoD wrote");
        EXPECT_RC("isolation.free_in_owner", cuMemFree_v2(pa), CUDA_SUCCESS);
        cuCtxPopCurrent_v2(&popped);
    }

    /* free memory is per device: ctx B (same device) sees ctx A's allocations; device 1 does not. */
    if (OK("isolation.push_b", cuCtxPushCurrent_v2(cb))) {
        size_t fb0 = mem_free();
        cuCtxPopCurrent_v2(&popped);
        cuCtxPushCurrent_v2(ca);
        CUdeviceptr big = 0;
        if (OK("isolation.alloc_32MiB_in_a", cuMemAlloc_v2(&big, 32 * MiB))) {
            cuCtxPopCurrent_v2(&popped);
            cuCtxPushCurrent_v2(cb);
            size_t fb1 = mem_free();
            CHECK("accounting.same_device_other_context", fb0 - fb1 == 32 * MiB,
                  "ctx B saw free %zu -> %zu after ctx A allocated 32 MiB", fb0, fb1);
            cuCtxPopCurrent_v2(&popped);
            cuCtxPushCurrent_v2(ca);
            cuMemFree_v2(big);
        }
        cuCtxPopCurrent_v2(&popped);
    }
    if (g_expected_devices > 1) {
        CUcontext p1 = NULL;
        if (OK("accounting.device1.retain", cuDevicePrimaryCtxRetain(&p1, 1)) &&
            OK("accounting.device1.push", cuCtxPushCurrent_v2(p1))) {
            size_t f1a = mem_free();
            cuCtxPopCurrent_v2(&popped);
            cuCtxPushCurrent_v2(ca);
            size_t f0a = mem_free();
            CUdeviceptr big = 0;
            OK("accounting.device0.alloc", cuMemAlloc_v2(&big, 16 * MiB));
            size_t f0b = mem_free();
            cuCtxPopCurrent_v2(&popped);
            cuCtxPushCurrent_v2(p1);
            size_t f1b = mem_free();
            CHECK("accounting.other_device_unaffected", f1a == f1b && f0a - f0b == 16 * MiB,
                  "device1 free %zu -> %zu, device0 free %zu -> %zu", f1a, f1b, f0a, f0b);
            CUdeviceptr d1p = 0;
            int ord = -1;
            if (OK("accounting.device1.alloc", cuMemAlloc_v2(&d1p, 4096))) {
                cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d1p);
                CHECK("ptr_attr.device1.ordinal", ord == 1, "pointer allocated on device 1 reports ordinal %d", ord);
                uint8_t b1[256], r1[256];
                fill(b1, sizeof b1, 11);
                OK("unified.device1.htod", cuMemcpyHtoD_v2(d1p, b1, sizeof b1));
                /* Device 0 current: copies reach device 1's memory, as NVIDIA's runtime relies on
                 * for cudaMemcpyDefault ("copies between two devices' memories ... using the
                 * regular memory copy functions"). */
                cuCtxPopCurrent_v2(&popped);
                cuCtxPushCurrent_v2(ca);
                memset(r1, 0, sizeof r1);
                if (EXPECT_RC("unified.device0_current.cuMemcpy_from_device1",
                              cuMemcpy((CUdeviceptr)(uintptr_t)r1, d1p, sizeof r1), CUDA_SUCCESS))
                    CHECK("unified.device0_current.cuMemcpy_from_device1.data", memcmp(r1, b1, sizeof b1) == 0,
                          "read other bytes than device 1 holds");
                CUstream s0 = NULL;
                if (OK("unified.device0.stream", cuStreamCreate(&s0, 0))) {
                    fill(b1, sizeof b1, 12);
                    EXPECT_RC("unified.device0_stream.htod_async_to_device1",
                              cuMemcpyHtoDAsync_v2(d1p, b1, sizeof b1, s0), CUDA_SUCCESS);
                    EXPECT_RC("unified.device0_stream.dtod_async_device1_to_device0",
                              cuMemcpyDtoDAsync_v2(big, d1p, sizeof b1, s0), CUDA_SUCCESS);
                    EXPECT_RC("unified.device0_stream.sync", cuStreamSynchronize(s0), CUDA_SUCCESS);
                    memset(r1, 0, sizeof r1);
                    OK("unified.device0.dtoh", cuMemcpyDtoH_v2(r1, big, sizeof r1));
                    CHECK("unified.device0_stream.data", memcmp(r1, b1, sizeof b1) == 0,
                          "device 0's stream copied other bytes to or from device 1");
                    cuStreamDestroy_v2(s0);
                }
                cuCtxPopCurrent_v2(&popped);
                cuCtxPushCurrent_v2(p1);
                cuMemFree_v2(d1p);
            }
            cuCtxPopCurrent_v2(&popped);
            cuCtxPushCurrent_v2(ca);
            cuMemFree_v2(big);
            cuCtxPopCurrent_v2(&popped);
            cuDevicePrimaryCtxRelease_v2(1);
        }
    }
    EXPECT_RC("isolation.destroy_b", cuCtxDestroy_v2(cb), CUDA_SUCCESS);
    EXPECT_RC("isolation.destroy_a", cuCtxDestroy_v2(ca), CUDA_SUCCESS);
    cuCtxSetCurrent(g_primary0);
}

/* ------------------------------------------------------------------------- */
/* Out of memory.                                                            */

static void section_oom(void) {
    size_t f0 = 0, t = 0;
    if (!OK("oom.meminfo", cuMemGetInfo_v2(&f0, &t))) return;
    CUdeviceptr p = 0;
    EXPECT_RC("oom.larger_than_total", cuMemAlloc_v2(&p, t + 1), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_RC("oom.huge", cuMemAlloc_v2(&p, (size_t)1 << 62), CUDA_ERROR_OUT_OF_MEMORY);
    CHECK("oom.failed_alloc_leaves_free", mem_free() == f0, "free changed after failed allocations");
    if (t > 1 * GiB) return; /* the fill test runs on small devices (GPUPOOL_SIM_MEMORY <= 1GiB) */

    const size_t chunk = 16 * MiB;
    size_t cap = f0 / chunk + 4, n = 0;
    CUdeviceptr *ps = calloc(cap, sizeof *ps);
    CUresult rc = CUDA_SUCCESS;
    while (n < cap && (rc = cuMemAlloc_v2(&ps[n], chunk)) == CUDA_SUCCESS) n++;
    CHECK("oom.fill.error_code", rc == CUDA_ERROR_OUT_OF_MEMORY, "filling the device ended with %d (%s) after %zu chunks",
          (int)rc, rc_name(rc), n);
    CHECK("oom.fill.boundary", n == f0 / chunk, "%zu chunks of 16 MiB fitted; cuMemGetInfo free was %zu (%zu chunks)",
          n, f0, f0 / chunk);
    size_t fl = mem_free();
    CHECK("oom.fill.free_left", fl == f0 - n * chunk && fl < chunk, "free %zu after filling", fl);
    if (n > 0) {
        cuMemFree_v2(ps[n - 1]);
        EXPECT_RC("oom.fill.alloc_after_free", cuMemAlloc_v2(&ps[n - 1], chunk), CUDA_SUCCESS);
    }
    for (size_t i = 0; i < n; i++) cuMemFree_v2(ps[i]);
    free(ps);
    CHECK("oom.fill.recovered", mem_free() == f0, "free %zu after freeing everything, %zu before", mem_free(), f0);
    pass("oom.fill");
}

/* ------------------------------------------------------------------------- */
/* Many threads.                                                             */

#define MT_THREADS 8
#define MT_ITERS 40

struct mt_arg {
    int id;
    int own_context;
    int failures;
    char first_error[256];
};

static void mt_note(struct mt_arg *a, const char *fmt, ...) {
    if (a->failures++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(a->first_error, sizeof a->first_error, fmt, ap);
        va_end(ap);
    }
}

static void *mt_worker(void *p) {
    struct mt_arg *a = p;
    CUcontext ctx = NULL, popped = NULL;
    CUresult rc;
    if (a->own_context) {
        if ((rc = cuCtxCreate_v2(&ctx, 0, 0)) != CUDA_SUCCESS) {
            mt_note(a, "cuCtxCreate_v2: %d", (int)rc);
            return NULL;
        }
    } else if ((rc = cuCtxSetCurrent(g_primary0)) != CUDA_SUCCESS) {
        mt_note(a, "cuCtxSetCurrent: %d", (int)rc);
        return NULL;
    }
    CUstream s = NULL;
    if ((rc = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
        mt_note(a, "cuStreamCreate: %d", (int)rc);
        return NULL;
    }
    const size_t maxn = 256 * 1024;
    uint8_t *h = malloc(maxn), *back = malloc(maxn);
    for (int it = 0; it < MT_ITERS; it++) {
        size_t n = 4096 * (size_t)(1 + (it * 7 + a->id * 13) % 64);
        uint64_t seed = (uint64_t)a->id * 1000003u + (uint64_t)it;
        CUdeviceptr d1 = 0, d2 = 0;
        if ((rc = cuMemAlloc_v2(&d1, n)) != CUDA_SUCCESS || (rc = cuMemAlloc_v2(&d2, n)) != CUDA_SUCCESS) {
            mt_note(a, "iter %d: cuMemAlloc_v2(%zu): %d", it, n, (int)rc);
            if (d1) cuMemFree_v2(d1);
            continue;
        }
        fill(h, n, seed);
        memset(back, 0, n);
        if ((rc = cuMemcpyHtoDAsync_v2(d1, h, n, s)) != CUDA_SUCCESS ||
            (rc = cuMemcpyDtoDAsync_v2(d2, d1, n, s)) != CUDA_SUCCESS ||
            (rc = cuMemsetD8Async(d1, 0, n, s)) != CUDA_SUCCESS ||
            (rc = cuMemcpyDtoHAsync_v2(back, d2, n, s)) != CUDA_SUCCESS ||
            (rc = cuStreamSynchronize(s)) != CUDA_SUCCESS)
            mt_note(a, "iter %d: copy chain: %d", it, (int)rc);
        size_t m = first_mismatch_pattern(back, n, seed);
        if (m != (size_t)-1) mt_note(a, "iter %d: data mismatch at byte %zu of %zu", it, m, n);
        /* Synchronous path too. */
        if ((rc = cuMemcpyDtoH_v2(back, d1, 64)) != CUDA_SUCCESS) mt_note(a, "iter %d: cuMemcpyDtoH_v2: %d", it, (int)rc);
        else
            for (int i = 0; i < 64; i++)
                if (back[i] != 0) {
                    mt_note(a, "iter %d: memset result %u at %d", it, back[i], i);
                    break;
                }
        if ((rc = cuMemFree_v2(d1)) != CUDA_SUCCESS || (rc = cuMemFree_v2(d2)) != CUDA_SUCCESS)
            mt_note(a, "iter %d: cuMemFree_v2: %d", it, (int)rc);
    }
    free(h);
    free(back);
    if ((rc = cuStreamDestroy_v2(s)) != CUDA_SUCCESS) mt_note(a, "cuStreamDestroy_v2: %d", (int)rc);
    if (a->own_context) {
        CUcontext cur = NULL;
        cuCtxGetCurrent(&cur);
        if (cur != ctx) mt_note(a, "current context changed to %p under the thread", (void *)cur);
        if ((rc = cuCtxDestroy_v2(ctx)) != CUDA_SUCCESS) mt_note(a, "cuCtxDestroy_v2: %d", (int)rc);
    }
    (void)popped;
    return NULL;
}

static void run_threads(const char *name, int own_context) {
    size_t f0 = mem_free();
    pthread_t th[MT_THREADS];
    struct mt_arg args[MT_THREADS];
    for (int i = 0; i < MT_THREADS; i++) {
        memset(&args[i], 0, sizeof args[i]);
        args[i].id = i;
        args[i].own_context = own_context;
        if (pthread_create(&th[i], NULL, mt_worker, &args[i]) != 0) {
            fail(name, "pthread_create failed");
            return;
        }
    }
    int failures = 0;
    char first[300] = "";
    for (int i = 0; i < MT_THREADS; i++) {
        pthread_join(th[i], NULL);
        if (args[i].failures && !failures) snprintf(first, sizeof first, "thread %d: %s", i, args[i].first_error);
        failures += args[i].failures;
    }
    CHECK(name, failures == 0, "%d failures; first: %s", failures, first);
    char n2[128];
    snprintf(n2, sizeof n2, "%s.memory_balanced", name);
    size_t f1 = mem_free();
    CHECK(n2, f1 == f0, "free %zu before the threads, %zu after", f0, f1);
}

static void section_threads(void) {
    run_threads("threads.shared_primary_context", 0);
    run_threads("threads.own_contexts", 1);
}

/* ------------------------------------------------------------------------- */

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *e;
    if ((e = getenv("GPUPOOL_SIM_DEVICES")) && *e) g_expected_devices = atoi(e);
    if ((e = getenv("GPUPOOL_SIM_MEMORY")) && *e) {
        g_expected_total = parse_size(e);
        if (g_expected_total == 0) fail("env.GPUPOOL_SIM_MEMORY", "cannot parse \"%s\" (use N, NKiB, NMiB, NGiB)", e);
    }
    if ((e = getenv("GPUPOOL_SIM_DRIVER_VERSION")) && *e) g_expected_driver_version = parse_driver_version(e);
    if ((e = getenv("GPUPOOL_SIM_CONFIG")) && *e) g_check_identity = 0;
    printf("# expecting %d devices, %zu bytes each, driver version %d\n", g_expected_devices, g_expected_total,
           g_expected_driver_version);

    if (!load_driver()) {
        printf("SUMMARY passed=%d failed=%d\n", g_pass, g_fail);
        return 2;
    }
    section_before_init();
    if (section_init()) {
        section_devices();
        section_proc_address();
        section_contexts();
        if (g_primary0) {
            section_memory();
            section_copies();
            section_streams_events();
            section_isolation();
            section_oom();
            section_threads();
            CUcontext popped = NULL;
            cuCtxSetCurrent(NULL);
            EXPECT_RC("primary.release", cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
            unsigned flags = 0;
            int active = 1;
            if (EXPECT_RC("primary.state_after_release", cuDevicePrimaryCtxGetState(0, &flags, &active), CUDA_SUCCESS))
                CHECK("primary.state_after_release.inactive", active == 0, "active = %d", active);
            (void)popped;
        }
    }
    printf("SUMMARY passed=%d failed=%d\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
