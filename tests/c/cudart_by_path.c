/*
 * tests/c/cudart_by_path.c - a program that loads a CUDA runtime by its full path (as Python
 * packages load NVIDIA's libcudart.so.12 / .13 from their wheels) and uses it; run under
 * `gpupool run` by pool-daemon/tests/static_runtime.rs.
 *
 *   cudart_by_path RUNTIME_PATH EXPECTED_FILE QUOTA_MIB
 *
 * EXPECTED_FILE is the file that must provide cudaMalloc (dladdr): RUNTIME_PATH itself under
 * `gpupool run --cudart nvidia` (NVIDIA's runtime, over the pool's driver API), libgpupool.so
 * under the default `--cudart pool`. Checks (one "PASS name" / "FAIL name: detail" line each,
 * then "SUMMARY passed/total"): the runtime version is 13.0, devices are seen, the device's
 * memory is the quota, a 1 MiB allocation round-trips its bytes and lowers the free memory by
 * 1 MiB, an allocation past the quota is cudaErrorMemoryAllocation, and freeing gives it back.
 */
#define _GNU_SOURCE
#include "gpupool_cudart.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, total;

static void check(int ok, const char *name, const char *detail, long long value) {
    total++;
    if (ok) {
        passed++;
        printf("PASS %s\n", name);
    } else {
        printf("FAIL %s: %s (%lld)\n", name, detail, value);
    }
}

#define SYM(name)                                        \
    __typeof__(&name) p_##name = (__typeof__(&name))dlsym(rt, #name); \
    if (!p_##name) {                                     \
        printf("FAIL symbols: %s missing\n", #name);     \
        return 2;                                        \
    }

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s RUNTIME_PATH EXPECTED_FILE QUOTA_MIB\n", argv[0]);
        return 2;
    }
    void *rt = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!rt) {
        printf("FAIL load: %s\n", dlerror());
        return 2;
    }
    SYM(cudaRuntimeGetVersion);
    SYM(cudaGetDeviceCount);
    SYM(cudaMalloc);
    SYM(cudaFree);
    SYM(cudaMemcpy);
    SYM(cudaMemGetInfo);

    Dl_info info;
    memset(&info, 0, sizeof info);
    int found = dladdr((void *)p_cudaMalloc, &info) != 0 && info.dli_fname != NULL;
    const char *file = found ? info.dli_fname : "?";
    const char *want = argv[2];
    size_t fl = strlen(file), wl = strlen(want);
    int same = fl >= wl && strcmp(file + fl - wl, want) == 0;
    printf("cudaMalloc comes from %s\n", file);
    check(same, "runtime_is_the_expected_one", "cudaMalloc is not from the expected file", 0);

    int version = 0, count = 0;
    cudaError_t e = p_cudaRuntimeGetVersion(&version);
    check(e == cudaSuccess && version == 13000, "runtime_version_13", "cudaRuntimeGetVersion", e != cudaSuccess ? (long long)e : version);
    e = p_cudaGetDeviceCount(&count);
    check(e == cudaSuccess && count >= 1, "device_count", "cudaGetDeviceCount", e != cudaSuccess ? (long long)e : count);

    const size_t mib = 1 << 20, quota = (size_t)atoll(argv[3]) * mib;
    size_t free0 = 0, total0 = 0, free1 = 0, total1 = 0;
    e = p_cudaMemGetInfo(&free0, &total0);
    check(e == cudaSuccess && total0 == quota, "memory_is_the_quota", "cudaMemGetInfo total", e != cudaSuccess ? (long long)e : (long long)total0);

    unsigned char *host = malloc(mib), *back = malloc(mib);
    for (size_t i = 0; i < mib; i++) host[i] = (unsigned char)(i * 7 + 3);
    void *d = NULL;
    e = p_cudaMalloc((void **)&d, mib);
    check(e == cudaSuccess && d != NULL, "malloc", "cudaMalloc(1 MiB)", e);
    if (e == cudaSuccess) {
        p_cudaMemGetInfo(&free1, &total1);
        check(free0 - free1 == mib, "malloc_counted", "free memory did not drop by 1 MiB", (long long)(free0 - free1));
        e = p_cudaMemcpy(d, host, mib, cudaMemcpyHostToDevice);
        if (e == cudaSuccess) e = p_cudaMemcpy(back, d, mib, cudaMemcpyDeviceToHost);
        check(e == cudaSuccess && memcmp(host, back, mib) == 0, "roundtrip", "the bytes did not come back", e);
    }
    void *big = NULL;
    e = p_cudaMalloc((void **)&big, quota);
    check(e == cudaErrorMemoryAllocation && big == NULL, "over_quota_is_out_of_memory",
          "an allocation of the whole quota on top of 1 MiB", e);
    e = p_cudaFree(d);
    p_cudaMemGetInfo(&free1, &total1);
    check(e == cudaSuccess && free1 == free0, "free_gives_it_back", "free memory after cudaFree", e != cudaSuccess ? (long long)e : (long long)free1);

    printf("SUMMARY %d/%d\n", passed, total);
    return passed == total ? 0 : 1;
}
