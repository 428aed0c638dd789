// nvcc-flags: --default-stream per-thread
// Per-thread default streams: built with --default-stream per-thread, so stream 0 (and every
// call without a stream) is the calling thread's own default stream. Several threads each
// copy, launch and synchronise on stream 0 and on cudaStreamPerThread; each checks its own
// results. The main thread also uses cudaStreamLegacy explicitly.
#include <thread>
#include <vector>

#include "check.cuh"

#if !defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
#error "build with --default-stream per-thread"
#endif

// out[i] = in[i] * k + i
__global__ void affine(const int* in, int* out, int k, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * k + i;
}

__global__ void add_one(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

static void worker(int t, int n, int rounds) {
  char name[96];
  CUDA_CHECK(cudaSetDevice(0));
  std::vector<int> in(n), out(n);
  int *d_in, *d_out;
  CUDA_CHECK(cudaMalloc(&d_in, n * sizeof(int)));
  CUDA_CHECK(cudaMalloc(&d_out, n * sizeof(int)));
  for (int r = 0; r < rounds; r++) {
    int k = t * 10 + r + 2;
    for (int i = 0; i < n; i++) in[i] = (i % 1013) - t * 7 + r;
    // stream 0: the per-thread default stream (pageable host memory, staged)
    CUDA_CHECK(cudaMemcpyAsync(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice, 0));
    affine<<<(n + 127) / 128, 128>>>(d_in, d_out, k, n);
    LAUNCH_CHECK("affine on stream 0");
    add_one<<<(n + 127) / 128, 128, 0, 0>>>(d_out, n);
    LAUNCH_CHECK("add_one on stream 0");
    CUDA_CHECK(cudaMemcpyAsync(out.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost, 0));
    CUDA_CHECK(cudaStreamSynchronize(0));
    int bad = -1;
    for (int i = 0; i < n; i++)
      if (out[i] != in[i] * k + i + 1) {
        bad = i;
        break;
      }
    std::snprintf(name, sizeof name, "thread%d.round%d.stream0", t, r);
    CHECK(bad < 0, name, "out[%d] = %d, expected %d", bad, bad < 0 ? 0 : out[bad],
          bad < 0 ? 0 : in[bad] * k + bad + 1);

    // cudaStreamPerThread, named explicitly: the same stream
    add_one<<<(n + 127) / 128, 128, 0, cudaStreamPerThread>>>(d_out, n);
    LAUNCH_CHECK("add_one on cudaStreamPerThread");
    CUDA_CHECK(cudaMemcpyAsync(out.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost, cudaStreamPerThread));
    CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    bad = -1;
    for (int i = 0; i < n; i++)
      if (out[i] != in[i] * k + i + 2) {
        bad = i;
        break;
      }
    std::snprintf(name, sizeof name, "thread%d.round%d.cudaStreamPerThread", t, r);
    CHECK(bad < 0, name, "out[%d] = %d, expected %d", bad, bad < 0 ? 0 : out[bad],
          bad < 0 ? 0 : in[bad] * k + bad + 2);
  }
  // synchronous calls also use the per-thread stream; the stream is idle afterwards
  CUDA_CHECK(cudaMemset(d_out, 0, n * sizeof(int)));
  CUDA_CHECK(cudaMemcpy(out.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost));
  bool zero = true;
  for (int i = 0; i < n; i++) zero &= out[i] == 0;
  std::snprintf(name, sizeof name, "thread%d.sync_memset_memcpy", t);
  CHECK(zero, name, "buffer not zero after cudaMemset + cudaMemcpy");
  cudaError_t q = cudaStreamQuery(0);
  rt::clear_not_ready("cudaStreamQuery(0)");
  std::snprintf(name, sizeof name, "thread%d.stream0_idle", t);
  CUDA_EXPECT(q, cudaSuccess, name);
  CUDA_CHECK(cudaFree(d_in));
  CUDA_CHECK(cudaFree(d_out));
}

int main() {
  CUDA_CHECK(cudaSetDevice(0));
  const int threads = 4, n = 50000, rounds = 3;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; t++) ts.emplace_back(worker, t, n, rounds);
  for (auto& t : ts) t.join();

  // the main thread: its own per-thread stream, then the legacy stream named explicitly
  {
    int* d;
    std::vector<int> h(n, 3), back(n, 0);
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(int)));
    CUDA_CHECK(cudaMemcpyAsync(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice, cudaStreamPerThread));
    add_one<<<(n + 255) / 256, 256, 0, cudaStreamPerThread>>>(d, n);
    LAUNCH_CHECK("add_one on cudaStreamPerThread (main)");
    CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
    add_one<<<(n + 255) / 256, 256, 0, cudaStreamLegacy>>>(d, n);
    LAUNCH_CHECK("add_one on cudaStreamLegacy");
    CUDA_CHECK(cudaMemcpyAsync(back.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, cudaStreamLegacy));
    CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    bool ok = true;
    for (int i = 0; i < n; i++) ok &= back[i] == 5;
    CHECK(ok, "main.per_thread_then_legacy", "expected 3 + 1 + 1 everywhere");
    CUDA_CHECK(cudaFree(d));
  }

  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_EXPECT(cudaGetLastError(), cudaSuccess, "error.none_at_end");
  return rt::finish();
}
