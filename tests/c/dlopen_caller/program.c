/*
 * tests/c/dlopen_caller/program.c - dlopens a loader library (loader.c) by path and runs one
 * check of how glibc resolves dlopen / dlmopen / dlsym(RTLD_NEXT) calls made by a library,
 * which must be the same with libgpupool.so preloaded (gpupool run) as without it.
 *
 *   program LOADER MODE        prints "PASS MODE" or "FAIL MODE: why", exits 0 or 1
 *
 * The loader is loaded with RTLD_GLOBAL. Modes (one per process: once a library is loaded, a second dlopen of its soname finds it
 * loaded whatever the search path):
 *   control        this program (no RUNPATH) cannot dlopen the neighbour by bare name, so
 *                  only the loader's $ORIGIN can find it
 *   dlopen         the loader dlopens the neighbour by bare name
 *   dlmopen-base   the same with dlmopen(LM_ID_BASE, ...)
 *   dlmopen-new    the same with dlmopen(LM_ID_NEWLM, ...)
 *   next           the loader's gpupool_test_layer wraps the next one (libgpupool_test_layer.so)
 *                  through dlsym(RTLD_NEXT, ...)
 *   next-cuinit    (under gpupool run) dlsym(RTLD_NEXT, "cuInit") from this program is the
 *                  first cuInit after it: the preloaded libgpupool.so's
 *   vendor         (under gpupool run) a dlopen of libcuda.so.1 by a path where none exists,
 *                  from this program, from the loader, from the loader's constructor (inside
 *                  this program's dlopen of it), and dlmopen(LM_ID_BASE) of it, all give
 *                  libgpupool.so's handle
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static const char *mode;

static int fail(const char *why, const char *detail) {
    printf("FAIL %s: %s%s%s\n", mode, why, detail ? ": " : "", detail ? detail : "");
    return 1;
}

static int pass(void) {
    printf("PASS %s\n", mode);
    return 0;
}

static int expect_answer(int got) {
    if (got != 4242) {
        char buf[64];
        snprintf(buf, sizeof buf, "got %d, wanted 4242 (the loader's stderr says why)", got);
        return fail("the neighbour did not load through the loader's $ORIGIN", buf);
    }
    return pass();
}

/* The file name of the object holding `addr`, or "?". */
static const char *object_of(void *addr) {
    Dl_info info;
    if (addr == NULL || dladdr(addr, &info) == 0 || info.dli_fname == NULL)
        return "?";
    return info.dli_fname;
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && strcmp(s + n - m, tail) == 0;
}

static int check_next_cuinit(void) {
    void *next = dlsym(RTLD_NEXT, "cuInit");
    void *first = dlsym(RTLD_DEFAULT, "cuInit");
    if (next == NULL || next != first)
        return fail("dlsym(RTLD_NEXT, \"cuInit\") from the program is not the first cuInit after it", dlerror());
    if (!ends_with(object_of(next), "/libgpupool.so"))
        return fail("the next cuInit is not in libgpupool.so but in", object_of(next));
    return pass();
}

static int check_vendor(void *loader) {
    void *(*open_from_loader)(const char *) = (void *(*)(const char *))dlsym(loader, "gpupool_test_open");
    const char *nowhere = "/nonexistent/gpupool-test/libcuda.so.1";
    void *h1 = dlopen(nowhere, RTLD_NOW);
    void *h2 = open_from_loader(nowhere);
    void *h3 = dlmopen(LM_ID_BASE, nowhere, RTLD_NOW);
    void *h4 = ((void *(*)(void))dlsym(loader, "gpupool_test_vendor_from_constructor"))();
    if (h1 == NULL || h1 != h2 || h1 != h3 || h1 != h4)
        return fail("dlopen / dlmopen of a vendor name did not all give libgpupool.so's handle", dlerror());
    void *init = dlsym(h1, "cuInit");
    if (init == NULL || !ends_with(object_of(init), "/libgpupool.so"))
        return fail("dlsym(libcuda.so.1's handle, \"cuInit\") is not libgpupool.so's but in", object_of(init));
    return pass();
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s LOADER MODE\n", argv[0]);
        return 2;
    }
    mode = argv[2];
    if (strcmp(mode, "control") == 0) {
        if (dlopen("libgpupool_test_neighbour.so", RTLD_NOW) != NULL)
            return fail("the program found the neighbour without the loader's $ORIGIN: the test proves nothing", NULL);
        return pass();
    }
    /* RTLD_GLOBAL: the loader and its dependency join the global scope after the program
       and what LD_PRELOAD put there, which is where RTLD_NEXT from the loader looks. */
    void *loader = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (loader == NULL)
        return fail("loading the loader", dlerror());
    if (strcmp(mode, "dlopen") == 0)
        return expect_answer(((int (*)(void))dlsym(loader, "gpupool_test_open_neighbour"))());
    if (strcmp(mode, "dlmopen-base") == 0)
        return expect_answer(((int (*)(long))dlsym(loader, "gpupool_test_mopen_neighbour"))(LM_ID_BASE));
    if (strcmp(mode, "dlmopen-new") == 0)
        return expect_answer(((int (*)(long))dlsym(loader, "gpupool_test_mopen_neighbour"))(LM_ID_NEWLM));
    if (strcmp(mode, "next") == 0) {
        const char *got = ((const char *(*)(void))dlsym(loader, "gpupool_test_layer"))();
        if (strcmp(got, "loader>layer") != 0)
            return fail("the loader's RTLD_NEXT did not find libgpupool_test_layer.so's function; it got", got);
        return pass();
    }
    if (strcmp(mode, "next-cuinit") == 0)
        return check_next_cuinit();
    if (strcmp(mode, "vendor") == 0)
        return check_vendor(loader);
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
