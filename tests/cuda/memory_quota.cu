// Memory quota through the runtime API. Usage: memory_quota QUOTA_MIB
// Allocates in 64 MiB steps until cudaMalloc fails, and checks: the failure is
// cudaErrorMemoryAllocation; what was allocated lies in [quota - 64 MiB, quota]; the device
// reports the quota as its size (cudaMemGetInfo total, cudaGetDeviceProperties); the error is
// recorded once (cudaGetLastError) and is not sticky: the context keeps working.
#include <vector>

#include "check.cuh"

__global__ void fill(unsigned int* p, unsigned int seed, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = seed ^ (unsigned int)(i * 2654435761u);
}

static const size_t MiB = 1 << 20;
static const size_t STEP = 64 * MiB;

// Fills `count` words at the start and at the end of the block and reads them back.
static bool use_block(void* block, size_t bytes, unsigned int seed) {
  const int count = 1 << 16;
  unsigned int* words = (unsigned int*)block;
  size_t total_words = bytes / sizeof(unsigned int);
  unsigned int* parts[2] = {words, words + total_words - count};
  std::vector<unsigned int> back(count);
  for (unsigned int* part : parts) {
    fill<<<count / 256, 256>>>(part, seed, count);
    LAUNCH_CHECK("fill");
    CUDA_CHECK(cudaMemcpy(back.data(), part, count * sizeof(unsigned int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < count; i++)
      if (back[i] != (seed ^ (unsigned int)(i * 2654435761u))) return false;
  }
  return true;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s QUOTA_MIB\n", argv[0]);
    return 2;
  }
  const size_t quota = (size_t)std::atoll(argv[1]) * MiB;
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaFree(0));  // the usual idiom to create the context

  size_t free0 = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free0, &total));
  std::printf("quota %zu MiB; cudaMemGetInfo: free %zu, total %zu\n", quota / MiB, free0, total);
  CHECK(total == quota, "meminfo.total_is_quota", "total %zu bytes, quota %zu", total, quota);
  CHECK(free0 <= total, "meminfo.free_le_total", "free %zu, total %zu", free0, total);
  cudaDeviceProp p;
  CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  CHECK(p.totalGlobalMem == quota, "props.totalGlobalMem_is_quota", "%zu bytes", p.totalGlobalMem);

  // More than the quota at once: refused, recorded, not sticky.
  {
    void* big = nullptr;
    cudaError_t e = cudaMalloc(&big, quota + STEP);
    CUDA_EXPECT(e, cudaErrorMemoryAllocation, "over_quota.single_allocation");
    CUDA_EXPECT(cudaGetLastError(), cudaErrorMemoryAllocation, "over_quota.single_recorded");
    if (e == cudaSuccess) CUDA_CHECK(cudaFree(big));
  }

  // Fill the quota in 64 MiB steps.
  std::vector<void*> blocks;
  cudaError_t last = cudaSuccess;
  const size_t max_steps = quota / STEP + 64;  // a quota that is not enforced still ends
  for (size_t i = 0; i < max_steps; i++) {
    void* ptr = nullptr;
    last = cudaMalloc(&ptr, STEP);
    if (last != cudaSuccess) break;
    blocks.push_back(ptr);
  }
  size_t allocated = blocks.size() * STEP;
  std::printf("allocated %zu blocks (%zu MiB) before %s\n", blocks.size(), allocated / MiB, cudaGetErrorName(last));
  CUDA_EXPECT(last, cudaErrorMemoryAllocation, "fill.fails_with_memory_allocation");
  CHECK(allocated <= quota, "fill.within_quota", "allocated %zu MiB over a %zu MiB quota", allocated / MiB,
        quota / MiB);
  CHECK(allocated + STEP >= quota, "fill.reaches_quota", "allocated only %zu MiB of a %zu MiB quota", allocated / MiB,
        quota / MiB);
  CUDA_EXPECT(cudaPeekAtLastError(), cudaErrorMemoryAllocation, "fill.error_peek");
  CUDA_EXPECT(cudaGetLastError(), cudaErrorMemoryAllocation, "fill.error_recorded_once");
  CUDA_EXPECT(cudaGetLastError(), cudaSuccess, "fill.error_cleared");

  size_t free1 = 0, total1 = 0;
  CUDA_CHECK(cudaMemGetInfo(&free1, &total1));
  std::printf("full: free %zu, total %zu\n", free1, total1);
  CHECK(free1 < STEP, "full.free_below_step", "free %zu bytes while a %zu-byte allocation fails", free1, STEP);
  CHECK(total1 == total, "full.total_unchanged", "total %zu, was %zu", total1, total);
  CHECK(free0 - free1 == allocated, "full.free_accounts_allocations", "free went from %zu to %zu with %zu allocated",
        free0, free1, allocated);

  // The context still works at the limit: free one block, allocate it again, use it.
  if (!blocks.empty()) {
    CUDA_CHECK(cudaFree(blocks.back()));
    blocks.pop_back();
    void* again = nullptr;
    CUDA_EXPECT(cudaMalloc(&again, STEP), cudaSuccess, "after_free.allocate_again");
    if (again) {
      blocks.push_back(again);
      CHECK(use_block(again, STEP, 0x1234abcdu), "after_free.kernel_on_new_block", "wrong contents");
    }
    CHECK(use_block(blocks.front(), STEP, 0x0badf00du), "after_free.kernel_on_first_block", "wrong contents");
    void* more = nullptr;
    CUDA_EXPECT(cudaMalloc(&more, STEP), cudaErrorMemoryAllocation, "after_free.full_again");
    CUDA_EXPECT(cudaGetLastError(), cudaErrorMemoryAllocation, "after_free.full_again_recorded");
    if (more) CUDA_CHECK(cudaFree(more));
  }

  // Small allocations still fit in what is left below the quota (if anything is).
  size_t free2 = 0, total2 = 0;
  CUDA_CHECK(cudaMemGetInfo(&free2, &total2));
  if (free2 >= MiB) {
    void* small = nullptr;
    CUDA_EXPECT(cudaMalloc(&small, MiB), cudaSuccess, "remainder.small_allocation");
    if (small) CUDA_CHECK(cudaFree(small));
  }

  for (void* b : blocks) CUDA_CHECK(cudaFree(b));
  CUDA_CHECK(cudaDeviceSynchronize());
  size_t free3 = 0, total3 = 0;
  CUDA_CHECK(cudaMemGetInfo(&free3, &total3));
  std::printf("after freeing: free %zu, total %zu\n", free3, total3);
  CHECK(free3 == free0, "freed.all_returned", "free %zu, %zu at the start", free3, free0);
  CUDA_EXPECT(cudaGetLastError(), cudaSuccess, "error.none_at_end");
  return rt::finish();
}
