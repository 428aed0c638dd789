// Graph memcpy nodes to and from a __device__ variable through the runtime:
// cudaGraphAddMemcpyNodeToSymbol from page-locked memory into `table` (at an offset), then
// cudaGraphAddMemcpyNodeFromSymbol of the whole table back into page-locked memory; the host
// source is read when the graph runs (changed between two launches). A copy past the variable's
// end and a wrong direction are refused.
#include "check.cuh"

__device__ int table[256];

int main() {
  CUDA_CHECK(cudaSetDevice(0));
  int *src = nullptr, *back = nullptr;
  CUDA_CHECK(cudaMallocHost(&src, 256 * sizeof(int)));
  CUDA_CHECK(cudaMallocHost(&back, 256 * sizeof(int)));
  const size_t off = 16 * sizeof(int), count = 128 * sizeof(int);
  int zero[256] = {0};
  CUDA_CHECK(cudaMemcpyToSymbol(table, zero, sizeof zero));

  cudaGraph_t g;
  CUDA_CHECK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t to, from, bad;
  CUDA_CHECK(cudaGraphAddMemcpyNodeToSymbol(&to, g, nullptr, 0, table, src, count, off, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaGraphAddMemcpyNodeFromSymbol(&from, g, &to, 1, back, table, 256 * sizeof(int), 0,
                                              cudaMemcpyDeviceToHost));
  cudaError_t past = cudaGraphAddMemcpyNodeToSymbol(&bad, g, nullptr, 0, table, src, count, 200 * sizeof(int),
                                                    cudaMemcpyHostToDevice);
  cudaError_t dir = cudaGraphAddMemcpyNodeToSymbol(&bad, g, nullptr, 0, table, src, count, 0,
                                                   cudaMemcpyDeviceToHost);
  CHECK(past == cudaErrorInvalidValue && dir == cudaErrorInvalidMemcpyDirection, "refusals", "%d %d", (int)past,
        (int)dir);
  cudaGetLastError();

  cudaGraphExec_t e;
  CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
  for (int round = 1; round <= 2; round++) {
    for (int i = 0; i < 128; i++) src[i] = round * 1000 + i;
    CUDA_CHECK(cudaGraphLaunch(e, 0));
    CUDA_CHECK(cudaDeviceSynchronize());
    bool ok = true;
    for (int i = 0; i < 256; i++) {
      int copied = (i >= 16 && i < 144) ? round * 1000 + i - 16 : 0;
      if (back[i] != copied) ok = false;
    }
    CHECK(ok, round == 1 ? "launch 1: to symbol, then from symbol" : "launch 2 reads the changed source",
          "back[16]=%d back[143]=%d", back[16], back[143]);
  }
  CUDA_CHECK(cudaGraphExecDestroy(e));
  CUDA_CHECK(cudaGraphDestroy(g));
  return rt::finish();
}
