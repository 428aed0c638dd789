/* The file behind `libcublas.so.12` / `.13` and `libcublasLt.so.12` / `.13` under `gpupool run`:
 * it exists so that the dynamic loader finds the soname and its symbol version; cuBLAS and
 * cuBLASLt themselves are libgpupool.so, preloaded ahead of it, which forwards every call to
 * the daemon. See pool-daemon/build.rs. */
const char gpupool_cublas_stand_in[] = "cuBLAS is served by libgpupool.so and run by the pool daemon (gpupool run)";
