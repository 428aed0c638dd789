/* The file behind `libcudart.so.12` / `.13` under `gpupool run`: it exists so that the
 * dynamic loader finds the soname and its symbol version; the CUDA runtime itself is
 * libgpupool.so, preloaded ahead of it. See pool-daemon/build.rs. */
const char gpupool_cudart_stand_in[] = "the CUDA runtime is served by libgpupool.so (gpupool run)";
