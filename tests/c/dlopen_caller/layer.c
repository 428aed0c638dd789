/*
 * tests/c/dlopen_caller/layer.c - libgpupool_test_layer.so: a DT_NEEDED dependency of the
 * loader with a function of the same name as one of the loader's, which the loader's
 * wraps through dlsym(RTLD_NEXT, ...). See interpose/tests/dlopen_caller.rs.
 */
const char *gpupool_test_layer(void) { return "layer"; }
