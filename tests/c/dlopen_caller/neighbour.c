/*
 * tests/c/dlopen_caller/neighbour.c - libgpupool_test_neighbour.so: the library that
 * loader.c dlopens by bare name. It lies only next to the loader, on no search path, so
 * only the loader's own RUNPATH / RPATH ($ORIGIN) finds it. See interpose/tests/dlopen_caller.rs.
 */
int gpupool_test_neighbour(void) { return 4242; }
