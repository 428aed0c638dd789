// A runtime-API compute load: <<<1, 1>>> kernels that each spin for KERNEL_US microseconds of
// device time (%globaltimer), launched back to back for SECONDS, with a sync every 8 launches.
// Each kernel adds the time it spun to a device counter, so the device time its kernels got is
// measured on the device. Prints `share <percent of wall time> kernels <n>` and the usual
// PASS/FAIL/SUMMARY lines (the share itself is judged by the harness, which knows the quota).
// Usage: compute_share SECONDS KERNEL_US
#include "check.cuh"
#include <chrono>
#include <cstdlib>

__device__ unsigned long long globaltimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void spin(unsigned long long ns, unsigned long long *body) {
    unsigned long long t0 = globaltimer(), t = t0;
    while (t - t0 < ns) {
        t = globaltimer();
    }
    atomicAdd(body, t - t0);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s SECONDS KERNEL_US\n", argv[0]);
        return 2;
    }
    double seconds = atof(argv[1]);
    unsigned long long ns = strtoull(argv[2], nullptr, 10) * 1000ull;
    unsigned long long *body;
    CUDA_CHECK(cudaMalloc(&body, sizeof *body));
    CUDA_CHECK(cudaMemset(body, 0, sizeof *body));
    CUDA_CHECK(cudaDeviceSynchronize());
    auto t0 = std::chrono::steady_clock::now();
    double wall = 0;
    long kernels = 0;
    while (wall < seconds) {
        for (int i = 0; i < 8; i++, kernels++) {
            spin<<<1, 1>>>(ns, body);
        }
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaDeviceSynchronize());
        wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    unsigned long long spun = 0;
    CUDA_CHECK(cudaMemcpy(&spun, body, sizeof spun, cudaMemcpyDeviceToHost));
    CHECK(spun >= (unsigned long long)kernels * ns, "every_kernel_ran", "device time %llu ns < %ld kernels x %llu ns",
          spun, kernels, ns);
    printf("share %.2f kernels %ld\n", spun / 1e9 / wall * 100.0, kernels);
    return ::rt::finish();
}
