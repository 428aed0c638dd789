/*
 * tests/c/dlopen_caller/loader.c - libgpupool_test_loader.so, built once with DT_RUNPATH
 * and once with DT_RPATH, both $ORIGIN, and linked against libgpupool_test_layer.so. It
 * calls dlopen / dlmopen / dlsym(RTLD_NEXT) itself, so glibc resolves them from this
 * library's point of view: that is what a dlopen hook must keep. See
 * interpose/tests/dlopen_caller.rs and program.c.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#define NEIGHBOUR "libgpupool_test_neighbour.so"

static int call_neighbour(void *h, const char *how) {
    if (h == NULL) {
        fprintf(stderr, "loader: %s(\"" NEIGHBOUR "\"): %s\n", how, dlerror());
        return -1;
    }
    int (*f)(void) = (int (*)(void))dlsym(h, "gpupool_test_neighbour");
    if (f == NULL) {
        fprintf(stderr, "loader: dlsym(gpupool_test_neighbour): %s\n", dlerror());
        return -1;
    }
    return f();
}

/* dlopen of the neighbour by bare name: found through this library's $ORIGIN. */
int gpupool_test_open_neighbour(void) { return call_neighbour(dlopen(NEIGHBOUR, RTLD_NOW | RTLD_LOCAL), "dlopen"); }

/* The same through dlmopen into namespace `lmid` (LM_ID_BASE or LM_ID_NEWLM). */
int gpupool_test_mopen_neighbour(long lmid) {
    return call_neighbour(dlmopen((Lmid_t)lmid, NEIGHBOUR, RTLD_NOW | RTLD_LOCAL), "dlmopen");
}

/* dlopen of any name, from this library. */
void *gpupool_test_open(const char *name);

/* What a dlopen of libcuda.so.1 by a path where none exists gave while this library was
   being loaded (its constructor runs inside the program's dlopen). */
static void *vendor_in_constructor;
__attribute__((constructor)) static void open_vendor_while_loading(void) {
    vendor_in_constructor = gpupool_test_open("/nonexistent/gpupool-test/libcuda.so.1");
}
void *gpupool_test_vendor_from_constructor(void) { return vendor_in_constructor; }

void *gpupool_test_open(const char *name) { return dlopen(name, RTLD_NOW | RTLD_LOCAL); }

/* Wraps the next gpupool_test_layer after this library (libgpupool_test_layer.so's). */
const char *gpupool_test_layer(void) {
    static char out[64];
    const char *(*next)(void) = (const char *(*)(void))dlsym(RTLD_NEXT, "gpupool_test_layer");
    if (next == NULL)
        return "loader>(none)";
    if (next == gpupool_test_layer)
        return "loader>(itself)";
    snprintf(out, sizeof out, "loader>%s", next());
    return out;
}
