// What the CUDA runtime front-end of libgpupool.so adds to the driver-API forwarding
// path, measured in one process against one daemon: the same empty kernel launched with
// <<<>>> and with cuLaunchKernel, and the same 4-byte host-to-device copy with cudaMemcpy
// and with cuMemcpyHtoD. The driver functions come from cudaGetDriverEntryPoint, i.e.
// the interposer's own driver exports, so both paths end in the same forwarding code.
// Rounds alternate the paths; each prints one line:
//   round <i> launch_rt <launches/s> launch_drv <launches/s> copy_rt_ns <ns> copy_drv_ns <ns>
// Usage: runtime_cost ROUNDS LAUNCHES COPIES
#include <cuda.h>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <chrono>
#include <vector>

__global__ void empty(int *p) {
    if (p == nullptr) {
        return;
    }
}

#define CHECK(x) do { auto rc_ = (x); if ((int)rc_ != 0) { fprintf(stderr, "%s failed: %d\n", #x, (int)rc_); exit(1); } } while (0)

typedef CUresult (*LaunchFn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
typedef CUresult (*HtoDFn)(CUdeviceptr, const void *, size_t);
typedef CUresult (*SyncFn)(void);

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s ROUNDS LAUNCHES COPIES\n", argv[0]);
        return 2;
    }
    int rounds = atoi(argv[1]), launches = atoi(argv[2]), copies = atoi(argv[3]);
    LaunchFn launch;
    HtoDFn htod;
    SyncFn sync;
    cudaDriverEntryPointQueryResult q;
    CHECK(cudaGetDriverEntryPointByVersion("cuLaunchKernel", (void **)&launch, 13000, cudaEnableDefault, &q));
    CHECK(cudaGetDriverEntryPointByVersion("cuMemcpyHtoD", (void **)&htod, 13000, cudaEnableDefault, &q));
    CHECK(cudaGetDriverEntryPointByVersion("cuCtxSynchronize", (void **)&sync, 13000, cudaEnableDefault, &q));
    cudaFunction_t f;
    CHECK(cudaGetFuncBySymbol(&f, (const void *)empty));
    int *d;
    CHECK(cudaMalloc(&d, 4));
    int h = 7;
    void *args[] = {&d};
    // Warm up both paths (module load, first launch).
    for (int i = 0; i < 100; i++) {
        empty<<<1, 1>>>(d);
        CHECK(launch((CUfunction)f, 1, 1, 1, 1, 1, 1, 0, 0, args, nullptr));
    }
    CHECK(cudaDeviceSynchronize());
    // Odd rounds run the driver path first, so neither path always follows the other.
    for (int r = 0; r < rounds; r++) {
        double launch_rt = 0, launch_drv = 0, copy_rt = 0, copy_drv = 0;
        for (int k = 0; k < 2; k++) {
            bool runtime = (k == 0) == (r % 2 == 0);
            double t0 = now_s();
            if (runtime) {
                for (int i = 0; i < launches; i++) {
                    empty<<<1, 1>>>(d);
                }
                CHECK(cudaDeviceSynchronize());
            } else {
                for (int i = 0; i < launches; i++) {
                    CHECK(launch((CUfunction)f, 1, 1, 1, 1, 1, 1, 0, 0, args, nullptr));
                }
                CHECK(sync());
            }
            double t1 = now_s();
            (runtime ? launch_rt : launch_drv) = launches / (t1 - t0);
        }
        // Sync copies are round trips whose time swings with how each side is woken, so
        // the two paths alternate in short blocks and each path's figure is the median of
        // its blocks.
        const int block = 250;
        int blocks = copies / block;
        std::vector<double> rt, drv;
        for (int b = 0; b < 2 * blocks; b++) {
            bool runtime = (b % 2 == 0) == (r % 2 == 0);
            double t0 = now_s();
            if (runtime) {
                for (int i = 0; i < block; i++) {
                    CHECK(cudaMemcpy(d, &h, 4, cudaMemcpyHostToDevice));
                }
            } else {
                for (int i = 0; i < block; i++) {
                    CHECK(htod((CUdeviceptr)d, &h, 4));
                }
            }
            (runtime ? rt : drv).push_back((now_s() - t0) * 1e9 / block);
        }
        copy_rt = median(rt);
        copy_drv = median(drv);
        CHECK(cudaGetLastError());
        printf("round %d launch_rt %.0f launch_drv %.0f copy_rt_ns %.0f copy_drv_ns %.0f\n", r, launch_rt, launch_drv,
               copy_rt, copy_drv);
        fflush(stdout);
    }
    return 0;
}
