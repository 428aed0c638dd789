/*
 * tests/c/container_client.c - a CUDA driver-API and NVML client that runs inside a container
 * put in the pool by `gpupool oci-hook` or the CDI spec, with nothing in its environment: it
 * finds libcuda.so.1 and libnvidia-ml.so.1 as any program would (dlopen by soname), and the
 * container's loader decides what that is. pool-daemon/tests/containers.rs and
 * `gpupool-bench containers` run it.
 *
 *   cc -std=c11 -Wall -Wextra -I shim-headers/include tests/c/container_client.c -o container_client -ldl -lpthread
 *
 * Modes (argv[1]):
 *   quota       device 0's total memory (cuMemGetInfo and NVML), then allocate 16 MiB blocks
 *               until the pool refuses: "total=N nvml_total=N allocated=N oom=NAME libcuda=PATH"
 *   deepbind    the same, with libcuda.so.1 opened RTLD_DEEPBIND (a program trying to bind
 *               the vendor library before any preloaded one)
 *   quota-hold  the same as quota, then keep everything and sleep until killed
 *   hold MIB    allocate MIB MiB on device 0, print "held", then sleep until killed
 *   first-call  print "first_call_ns=N" (CLOCK_REALTIME) when cuInit and cuDeviceGetCount
 *               have returned (the benchmark's "first CUDA call")
 * Any CUDA or NVML failure prints "error <call> <code name>" and exits 3 (cuInit's refusal
 * when the daemon refuses the session included).
 */
#define _GNU_SOURCE
#include "gpupool_cuda.h"
#include "gpupool_nvml.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static __typeof__(&cuInit) p_cuInit;
static __typeof__(&cuGetErrorName) p_cuGetErrorName;
static __typeof__(&cuDeviceGetCount) p_cuDeviceGetCount;
static __typeof__(&cuDeviceGet) p_cuDeviceGet;
static __typeof__(&cuDevicePrimaryCtxRetain) p_cuDevicePrimaryCtxRetain;
static __typeof__(&cuCtxSetCurrent) p_cuCtxSetCurrent;
static __typeof__(&cuMemGetInfo_v2) p_cuMemGetInfo;
static __typeof__(&cuMemAlloc_v2) p_cuMemAlloc;

static const char *cu_name(CUresult r) {
    const char *n = NULL;
    if (p_cuGetErrorName && p_cuGetErrorName(r, &n) == CUDA_SUCCESS && n) return n;
    return "unknown";
}

#define CU(call)                                                         \
    do {                                                                 \
        CUresult r_ = (call);                                            \
        if (r_ != CUDA_SUCCESS) {                                        \
            printf("error %s %s\n", #call, cu_name(r_));                 \
            fflush(stdout);                                              \
            exit(3);                                                     \
        }                                                                \
    } while (0)

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        printf("error dlsym %s\n", name);
        exit(3);
    }
    return p;
}

static const char *load_cuda(int flags) {
    void *lib = dlopen("libcuda.so.1", flags);
    if (!lib) {
        printf("error dlopen libcuda.so.1 %s\n", dlerror());
        exit(3);
    }
    p_cuInit = sym(lib, "cuInit");
    p_cuGetErrorName = sym(lib, "cuGetErrorName");
    p_cuDeviceGetCount = sym(lib, "cuDeviceGetCount");
    p_cuDeviceGet = sym(lib, "cuDeviceGet");
    p_cuDevicePrimaryCtxRetain = sym(lib, "cuDevicePrimaryCtxRetain");
    p_cuCtxSetCurrent = sym(lib, "cuCtxSetCurrent");
    p_cuMemGetInfo = sym(lib, "cuMemGetInfo_v2");
    p_cuMemAlloc = sym(lib, "cuMemAlloc_v2");
    /* Which file the loader gave us for the vendor soname. */
    Dl_info info;
    if (dladdr((void *)p_cuInit, &info) && info.dli_fname) return info.dli_fname;
    return "?";
}

static void context(void) {
    CU(p_cuInit(0));
    CUdevice dev;
    CU(p_cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CU(p_cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(p_cuCtxSetCurrent(ctx));
}

static unsigned long long nvml_total(void) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) {
        printf("error dlopen libnvidia-ml.so.1 %s\n", dlerror());
        exit(3);
    }
    __typeof__(&nvmlInit_v2) init = sym(lib, "nvmlInit_v2");
    __typeof__(&nvmlDeviceGetHandleByIndex_v2) handle = sym(lib, "nvmlDeviceGetHandleByIndex_v2");
    __typeof__(&nvmlDeviceGetMemoryInfo) info = sym(lib, "nvmlDeviceGetMemoryInfo");
    nvmlDevice_t d;
    nvmlMemory_t m;
    nvmlReturn_t r;
    if ((r = init()) != NVML_SUCCESS || (r = handle(0, &d)) != NVML_SUCCESS || (r = info(d, &m)) != NVML_SUCCESS) {
        printf("error nvml %d\n", (int)r);
        exit(3);
    }
    return m.total;
}

static int quota(int flags, int hold) {
    const char *path = load_cuda(flags);
    context();
    size_t free_b = 0, total = 0;
    CU(p_cuMemGetInfo(&free_b, &total));
    unsigned long long nvml = nvml_total();
    size_t allocated = 0;
    CUresult r;
    for (;;) {
        CUdeviceptr p;
        r = p_cuMemAlloc(&p, 16 * MiB);
        if (r != CUDA_SUCCESS) break;
        allocated += 16 * MiB;
        if (allocated > ((size_t)64 << 30)) break; /* a runaway: reported, never looped on */
    }
    printf("total=%zu nvml_total=%llu allocated=%zu oom=%s libcuda=%s\n", total, nvml, allocated, cu_name(r), path);
    fflush(stdout);
    while (hold) pause();
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "quota";
    if (!strcmp(mode, "quota")) return quota(RTLD_NOW, 0);
    if (!strcmp(mode, "quota-hold")) return quota(RTLD_NOW, 1);
    if (!strcmp(mode, "deepbind")) return quota(RTLD_NOW | RTLD_DEEPBIND, 0);
    if (!strcmp(mode, "hold") && argc > 2) {
        load_cuda(RTLD_NOW);
        context();
        CUdeviceptr p;
        CU(p_cuMemAlloc(&p, (size_t)atoll(argv[2]) * MiB));
        printf("held\n");
        fflush(stdout);
        for (;;) pause();
    }
    if (!strcmp(mode, "first-call")) {
        load_cuda(RTLD_NOW);
        CU(p_cuInit(0));
        int n = 0;
        CU(p_cuDeviceGetCount(&n));
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        printf("first_call_ns=%lld devices=%d\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, n);
        return 0;
    }
    fprintf(stderr, "usage: %s quota|quota-hold|deepbind|hold MIB|first-call\n", argv[0]);
    return 2;
}
