// Stream-ordered allocation: cudaMallocAsync / cudaFreeAsync in a loop with kernels using
// each allocation in between, an allocation freed on another stream after an event, and the
// memory given back once the streams have reached the frees.
#include <vector>

#include "check.cuh"

__global__ void fill(int* p, int base, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = base + 3 * i;
}

// dst[i] = src[src_off + i] + 1
__global__ void take(const int* src, int src_off, int* dst, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[src_off + i] + 1;
}

static const size_t MiB = 1 << 20;

int main() {
  CUDA_CHECK(cudaSetDevice(0));
  int pools = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0));
  CHECK(pools == 1, "attr.MemoryPoolsSupported", "%d", pools);

  cudaStream_t s, s2;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  CUDA_CHECK(cudaDeviceSynchronize());

  size_t free0 = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free0, &total));
  std::printf("before: free %zu of %zu\n", free0, total);

  // ---- a loop of allocate / use / free, all on one stream, synchronised once at the end.
  // Each allocation is filled by a kernel; a slice of it is copied into a long-lived buffer
  // (another kernel), then it is freed, in stream order.
  const int iters = 24, slice = 4096;
  int* d_out;
  CUDA_CHECK(cudaMalloc(&d_out, (size_t)iters * slice * sizeof(int)));
  std::vector<int> sizes(iters);
  for (int it = 0; it < iters; it++) {
    int n = (1 << 16) + it * 4099;  // 256 KiB and more, growing
    sizes[it] = n;
    int* p = nullptr;
    CUDA_CHECK(cudaMallocAsync(&p, (size_t)n * sizeof(int), s));
    if (!CHECK(p != nullptr, "malloc_async.pointer", "iteration %d: null pointer", it)) break;
    fill<<<(n + 255) / 256, 256, 0, s>>>(p, it * 1000, n);
    LAUNCH_CHECK("fill");
    take<<<(slice + 255) / 256, 256, 0, s>>>(p, n - slice, d_out + it * slice, slice);
    LAUNCH_CHECK("take");
    CUDA_CHECK(cudaFreeAsync(p, s));
  }
  CUDA_CHECK(cudaStreamSynchronize(s));
  {
    std::vector<int> h((size_t)iters * slice);
    CUDA_CHECK(cudaMemcpy(h.data(), d_out, h.size() * sizeof(int), cudaMemcpyDeviceToHost));
    int bad_it = -1, bad_i = -1;
    for (int it = 0; it < iters && bad_it < 0; it++)
      for (int i = 0; i < slice; i++) {
        int want = it * 1000 + 3 * (sizes[it] - slice + i) + 1;
        if (h[(size_t)it * slice + i] != want) {
          bad_it = it;
          bad_i = i;
          break;
        }
      }
    CHECK(bad_it < 0, "malloc_async.loop_results", "iteration %d element %d: %d", bad_it, bad_i,
          bad_it < 0 ? 0 : h[(size_t)bad_it * slice + bad_i]);
  }

  // ---- a large allocation is charged while live and given back after the free is reached
  {
    const size_t big = 96 * MiB;
    int* p = nullptr;
    CUDA_CHECK(cudaMallocAsync(&p, big, s));
    fill<<<64, 256, 0, s>>>(p, 5, 64 * 256);
    LAUNCH_CHECK("fill");
    CUDA_CHECK(cudaStreamSynchronize(s));
    size_t free1 = 0, t1 = 0;
    CUDA_CHECK(cudaMemGetInfo(&free1, &t1));
    std::printf("96 MiB live: free %zu\n", free1);
    CHECK(free1 + big <= free0 + 16 * MiB, "malloc_async.charged_while_live",
          "free %zu with 96 MiB live, %zu before", free1, free0);
    std::vector<int> h(64 * 256);
    CUDA_CHECK(cudaMemcpy(h.data(), p, h.size() * sizeof(int), cudaMemcpyDeviceToHost));
    bool ok = true;
    for (size_t i = 0; i < h.size(); i++) ok &= h[i] == 5 + 3 * (int)i;
    CHECK(ok, "malloc_async.big_results", "kernel output wrong");
    CUDA_CHECK(cudaFreeAsync(p, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
  }

  // ---- allocated on one stream, used and freed on another after an event
  {
    const int n = 1 << 16;
    int* p = nullptr;
    cudaEvent_t ready;
    CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaMallocAsync(&p, n * sizeof(int), s));
    fill<<<(n + 255) / 256, 256, 0, s>>>(p, 77, n);
    LAUNCH_CHECK("fill");
    CUDA_CHECK(cudaEventRecord(ready, s));
    CUDA_CHECK(cudaStreamWaitEvent(s2, ready, 0));
    take<<<(slice + 255) / 256, 256, 0, s2>>>(p, 0, d_out, slice);
    LAUNCH_CHECK("take");
    CUDA_CHECK(cudaFreeAsync(p, s2));
    CUDA_CHECK(cudaStreamSynchronize(s2));
    std::vector<int> h(slice);
    CUDA_CHECK(cudaMemcpy(h.data(), d_out, slice * sizeof(int), cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int i = 0; i < slice; i++) ok &= h[i] == 77 + 3 * i + 1;
    CHECK(ok, "malloc_async.cross_stream", "the consumer stream saw wrong data");
    CUDA_CHECK(cudaEventDestroy(ready));
  }

  // ---- memory returned after everything is synchronised
  CUDA_CHECK(cudaFree(d_out));
  CUDA_CHECK(cudaDeviceSynchronize());
  size_t free2 = 0, t2 = 0;
  CUDA_CHECK(cudaMemGetInfo(&free2, &t2));
  std::printf("after: free %zu of %zu\n", free2, t2);
  // The default pool's release threshold is 0: it gives memory back at synchronisation.
  CHECK(free2 + 16 * MiB >= free0, "malloc_async.memory_returned", "free %zu after, %zu before (%zd MiB short)",
        free2, free0, ((long long)free0 - (long long)free2) / (long long)MiB);
  CHECK(t2 == total, "meminfo.total_stable", "total %zu, was %zu", t2, total);

  CUDA_CHECK(cudaStreamDestroy(s));
  CUDA_CHECK(cudaStreamDestroy(s2));
  CUDA_EXPECT(cudaGetLastError(), cudaSuccess, "error.none_at_end");
  return rt::finish();
}
