// cudaDeviceReset and what the runtime keeps per context: after a reset the primary context
// is new, the runtime's state for the old one is gone (NVIDIA's runtime keeps it in the
// driver's context-local storage, whose destructor the reset runs) and kernels, __device__
// variables and allocations work again in the new context; memory held before the reset is
// given back.
#include <vector>

#include "check.cuh"

__device__ int d_counter;

__global__ void add_to(int* out, int n, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i + k;
  if (i == 0) atomicAdd(&d_counter, k);
}

// Runs add_to once with `k`; checks the output and that d_counter went from `before` to before + k.
static void round_trip(const char* name, int k, int before) {
  const int n = 1000;
  int* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, n * sizeof(int)));
  add_to<<<(n + 127) / 128, 128>>>(d, n, k);
  LAUNCH_CHECK("add_to");
  std::vector<int> h(n, -1);
  CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  int counter = -1;
  CUDA_CHECK(cudaMemcpyFromSymbol(&counter, d_counter, sizeof counter));
  bool ok = true;
  for (int i = 0; i < n; i++) ok &= h[i] == i + k;
  char check_name[64];
  std::snprintf(check_name, sizeof check_name, "%s.kernel", name);
  CHECK(ok, check_name, "wrong output after add_to(%d)", k);
  std::snprintf(check_name, sizeof check_name, "%s.device_symbol", name);
  CHECK(counter == before + k, check_name, "d_counter %d, expected %d", counter, before + k);
  CUDA_CHECK(cudaFree(d));
}

int main() {
  CUDA_CHECK(cudaSetDevice(0));
  round_trip("before_reset", 5, 0);
  size_t free_before = 0, total = 0, free_held = 0, free_after = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  void* held = nullptr;
  CUDA_CHECK(cudaMalloc(&held, 64 << 20));
  CUDA_CHECK(cudaMemGetInfo(&free_held, &total));
  CHECK(free_before - free_held >= (64u << 20), "held_is_counted", "free %zu -> %zu", free_before, free_held);

  CUDA_CHECK(cudaDeviceReset());
  // The new context starts from the module's initial values: d_counter is 0 again.
  round_trip("after_reset", 7, 0);
  CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  CHECK(free_after == free_before, "reset_gives_memory_back", "free %zu after the reset, %zu before", free_after,
        free_before);
  round_trip("again", 2, 7);
  CUDA_CHECK(cudaDeviceReset());
  return rt::finish();
}
