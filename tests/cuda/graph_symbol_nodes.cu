// Graph memcpy nodes to and from a __device__ variable through the runtime:
// cudaGraphAddMemcpyNodeToSymbol from page-locked memory into `table` (at an offset), then
// cudaGraphAddMemcpyNodeFromSymbol of the whole table back into page-locked memory; the host
// source is read when the graph runs (changed between two launches). A copy past the variable's
// end and a wrong direction are refused. The nodes then change with the symbol setters:
// cudaGraphMemcpyNodeSetParamsToSymbol (a new exec copies to offset 0; the old one keeps offset 16)
// and cudaGraphExecMemcpyNodeSetParamsFromSymbol (one exec reads the table into another buffer).
// A kernel node (cudaGraphAddKernelNode, the kernel's host stub) adds k to every entry at each
// launch, and cudaGraphExecKernelNodeSetParams changes k for one instantiated graph;
// cudaGraphKernelNodeGetParams reads the node back and cudaGraphKernelNodeSetParams changes it;
// cudaGraphExecGetFlags answers each exec's instantiation flags.
#include "check.cuh"

__device__ int table[256];

__global__ void bump(int *t, int k) { t[threadIdx.x] += k; }

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

  // The symbol setters: the graph's node now copies to offset 0 (an exec made before keeps 16).
  CUDA_CHECK(cudaMemcpyToSymbol(table, zero, sizeof zero));
  for (int i = 0; i < 128; i++) src[i] = 7000 + i;
  CUDA_CHECK(cudaGraphMemcpyNodeSetParamsToSymbol(to, table, src, count, 0, cudaMemcpyHostToDevice));
  cudaGraphExec_t e2;
  CUDA_CHECK(cudaGraphInstantiate(&e2, g, 0));
  CUDA_CHECK(cudaGraphLaunch(e2, 0));
  CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(back[0] == 7000 && back[127] == 7127 && back[128] == 0, "cudaGraphMemcpyNodeSetParamsToSymbol",
        "back[0]=%d back[127]=%d back[128]=%d", back[0], back[127], back[128]);
  int *back2 = nullptr;
  CUDA_CHECK(cudaMallocHost(&back2, 256 * sizeof(int)));
  for (int i = 0; i < 256; i++) back2[i] = -1;
  CUDA_CHECK(cudaGraphExecMemcpyNodeSetParamsFromSymbol(e, from, back2, table, 256 * sizeof(int), 0,
                                                        cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpyToSymbol(table, zero, sizeof zero));
  for (int i = 0; i < 256; i++) back[i] = -1;
  CUDA_CHECK(cudaGraphLaunch(e, 0));
  CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(back2[16] == 7000 && back2[0] == 0 && back[0] == -1, "cudaGraphExecMemcpyNodeSetParamsFromSymbol",
        "back2[16]=%d back2[0]=%d back[0]=%d", back2[16], back2[0], back[0]);
  cudaError_t wrong = cudaGraphMemcpyNodeSetParamsFromSymbol(from, back, table, 16, 0, cudaMemcpyHostToDevice);
  CHECK(wrong == cudaErrorInvalidMemcpyDirection, "a wrong direction is refused", "%d", (int)wrong);
  cudaGetLastError();

  // A kernel node: every entry + k at each launch; k changed on one exec.
  CUDA_CHECK(cudaMemcpyToSymbol(table, zero, sizeof zero));
  int *t = nullptr;
  CUDA_CHECK(cudaGetSymbolAddress((void **)&t, table));
  int k = 3;
  void *args[] = {&t, &k};
  cudaKernelNodeParams kp = {};
  kp.func = (void *)bump;
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(256);
  kp.kernelParams = args;
  cudaGraph_t kg;
  cudaGraphNode_t kn;
  cudaGraphExec_t ke;
  CUDA_CHECK(cudaGraphCreate(&kg, 0));
  CUDA_CHECK(cudaGraphAddKernelNode(&kn, kg, nullptr, 0, &kp));
  k = 100;  // the parameters were copied when the node was added
  CUDA_CHECK(cudaGraphInstantiate(&ke, kg, 0));
  CUDA_CHECK(cudaGraphLaunch(ke, 0));
  CUDA_CHECK(cudaGraphLaunch(ke, 0));
  CUDA_CHECK(cudaDeviceSynchronize());
  int got[256];
  CUDA_CHECK(cudaMemcpyFromSymbol(got, table, sizeof got));
  CHECK(got[0] == 6 && got[255] == 6, "cudaGraphAddKernelNode, launched twice", "%d %d", got[0], got[255]);
  k = 10;
  CUDA_CHECK(cudaGraphExecKernelNodeSetParams(ke, kn, &kp));
  CUDA_CHECK(cudaGraphLaunch(ke, 0));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpyFromSymbol(got, table, sizeof got));
  CHECK(got[0] == 16 && got[128] == 16, "cudaGraphExecKernelNodeSetParams", "%d %d", got[0], got[128]);

  // The graph's kernel node read back (the host stub, the configuration, the k it was added with)
  // and changed: a new exec adds 20, the one made before still adds 10.
  cudaKernelNodeParams rp = {};
  CUDA_CHECK(cudaGraphKernelNodeGetParams(kn, &rp));
  CHECK(rp.func == (void *)bump && rp.blockDim.x == 256 && rp.gridDim.x == 1 && rp.kernelParams &&
            *(int **)rp.kernelParams[0] == t && *(int *)rp.kernelParams[1] == 3,
        "cudaGraphKernelNodeGetParams", "k=%d block=%u", rp.kernelParams ? *(int *)rp.kernelParams[1] : -1,
        rp.blockDim.x);
  k = 20;
  CUDA_CHECK(cudaGraphKernelNodeSetParams(kn, &kp));
  cudaGraphExec_t ke2;
  CUDA_CHECK(cudaGraphInstantiateWithFlags(&ke2, kg, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  unsigned long long flags2 = 0, flags1 = 9;
  CUDA_CHECK(cudaGraphExecGetFlags(ke2, &flags2));
  CUDA_CHECK(cudaGraphExecGetFlags(ke, &flags1));
  CHECK(flags2 == cudaGraphInstantiateFlagAutoFreeOnLaunch && flags1 == 0, "cudaGraphExecGetFlags", "%llu %llu",
        flags2, flags1);
  CUDA_CHECK(cudaGraphLaunch(ke2, 0));
  CUDA_CHECK(cudaGraphLaunch(ke, 0));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpyFromSymbol(got, table, sizeof got));
  CHECK(got[0] == 46 && got[255] == 46, "cudaGraphKernelNodeSetParams: a new exec runs it, the old keeps its own",
        "%d %d", got[0], got[255]);
  CUDA_CHECK(cudaGraphExecDestroy(ke2));

  CUDA_CHECK(cudaGraphExecDestroy(ke));
  CUDA_CHECK(cudaGraphDestroy(kg));
  CUDA_CHECK(cudaFreeHost(back2));
  CUDA_CHECK(cudaGraphExecDestroy(e2));
  CUDA_CHECK(cudaGraphExecDestroy(e));
  CUDA_CHECK(cudaGraphDestroy(g));
  return rt::finish();
}
