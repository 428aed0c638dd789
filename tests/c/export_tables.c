/*
 * tests/c/export_tables.c - the driver's private export tables as a runtime meets them, and
 * what a runtime asking for something we do not serve gets: run under `gpupool run` (the
 * libcuda.so.1 it loads is libgpupool.so). Used by pool-daemon/tests/static_runtime.rs.
 *
 * Checks (one "PASS name" / "FAIL name: detail" line each, then "SUMMARY passed/total"):
 *  - a table nobody serves (a made-up UUID) is CUDA_ERROR_NOT_SUPPORTED with the pointer NULL;
 *  - CUDART_INTERFACE (6bd5fb6c-...) is served and its slot 0 is its size (13 slots of 8 bytes);
 *  - a slot whose meaning is not established (CUDART_INTERFACE slot 3) answers
 *    CUDA_ERROR_NOT_SUPPORTED and the process goes on;
 *  - slot 2 gives device 0's primary context, which cuCtxGetDevice then reports as current;
 *  - a NULL out-pointer for a served table is CUDA_ERROR_INVALID_VALUE.
 * Exit status 1 when a check failed.
 */
#define _GNU_SOURCE
#include "gpupool_cuda.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
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

typedef CUresult (*get_export_table_fn)(const void **, const CUuuid *);
typedef CUresult (*unknown_slot_fn)(uintptr_t, uintptr_t, uintptr_t);
typedef CUresult (*primary_context_fn)(CUcontext *, CUdevice);

static CUuuid uuid_of(const unsigned char bytes[16]) {
    CUuuid u;
    memcpy(u.bytes, bytes, 16);
    return u;
}

int main(void) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) {
        printf("FAIL load: %s\n", dlerror());
        return 2;
    }
    get_export_table_fn get = (get_export_table_fn)dlsym(cuda, "cuGetExportTable");
    __typeof__(&cuInit) init = (__typeof__(&cuInit))dlsym(cuda, "cuInit");
    __typeof__(&cuCtxGetDevice) ctx_device = (__typeof__(&cuCtxGetDevice))dlsym(cuda, "cuCtxGetDevice");
    __typeof__(&cuCtxSetCurrent) set_current = (__typeof__(&cuCtxSetCurrent))dlsym(cuda, "cuCtxSetCurrent");
    if (!get || !init || !ctx_device || !set_current) {
        printf("FAIL symbols: cuGetExportTable, cuInit, cuCtxGetDevice or cuCtxSetCurrent missing\n");
        return 2;
    }
    check(init(0) == CUDA_SUCCESS, "init", "cuInit failed", 0);

    static const unsigned char made_up[16] = {0x67, 0x70, 0x75, 0x70, 0x6f, 0x6f, 0x6c, 0x2d,
                                              0x6e, 0x6f, 0x2d, 0x74, 0x61, 0x62, 0x6c, 0x65};
    CUuuid unknown = uuid_of(made_up);
    const void *table = (const void *)1;
    CUresult r = get(&table, &unknown);
    check(r == CUDA_ERROR_NOT_SUPPORTED && table == NULL, "unknown_table_not_supported",
          "cuGetExportTable(made-up uuid) did not answer NOT_SUPPORTED with NULL", r);

    static const unsigned char cudart_interface[16] = {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a,
                                                       0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9};
    CUuuid ci = uuid_of(cudart_interface);
    const uintptr_t *slots = NULL;
    r = get((const void **)&slots, &ci);
    check(r == CUDA_SUCCESS && slots != NULL, "cudart_interface_served", "cuGetExportTable failed", r);
    if (r != CUDA_SUCCESS || slots == NULL) {
        printf("SUMMARY %d/%d\n", passed, total);
        return 1;
    }
    check(slots[0] == 13 * sizeof(void *), "cudart_interface_size", "slot 0 is not the table's size",
          (long long)slots[0]);

    unknown_slot_fn slot3 = (unknown_slot_fn)slots[3];
    r = slot3(1, 2, 3);
    check(r == CUDA_ERROR_NOT_SUPPORTED, "unknown_slot_not_supported", "slot 3 did not answer NOT_SUPPORTED", r);

    primary_context_fn primary = (primary_context_fn)slots[2];
    CUcontext ctx = NULL;
    r = primary(&ctx, 0);
    check(r == CUDA_SUCCESS && ctx != NULL, "primary_context", "slot 2 gave no context", r);
    CUdevice dev = -1;
    r = set_current(ctx);
    if (r == CUDA_SUCCESS) r = ctx_device(&dev);
    check(r == CUDA_SUCCESS && dev == 0, "primary_context_is_device_0", "the context is not device 0's", r);

    r = get(NULL, &ci);
    check(r == CUDA_ERROR_INVALID_VALUE, "null_out_pointer", "a NULL table pointer was not INVALID_VALUE", r);

    printf("SUMMARY %d/%d\n", passed, total);
    return passed == total ? 0 : 1;
}
