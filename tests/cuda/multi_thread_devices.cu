// One host thread per device: each selects its device with cudaSetDevice, and works there on
// its own stream (alloc, copy, kernel, copy back), checking that the current device is
// per thread and that its pointers belong to its device. Usage: multi_thread_devices [N]
// where N, if given, is the number of devices the program must see.
#include <thread>
#include <vector>

#include "check.cuh"

// p[i] = p[i] * (dev + 2) + dev
__global__ void mark(int* p, int dev, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * (dev + 2) + dev;
}

struct Result {
  int* d = nullptr;  // left allocated for the cross-device checks in main
  int n = 0;
};

static void worker(int dev, Result* res) {
  char name[96];
  CUDA_CHECK(cudaSetDevice(dev));
  int cur = -1;
  CUDA_CHECK(cudaGetDevice(&cur));
  std::snprintf(name, sizeof name, "dev%d.get_device", dev);
  CHECK(cur == dev, name, "cudaGetDevice gave %d in the thread that set %d", cur, dev);

  cudaDeviceProp p;
  CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  std::printf("device %d: %s, %d SMs, %zu bytes\n", dev, p.name, p.multiProcessorCount, p.totalGlobalMem);

  const int n = 100000 + dev * 1000;
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  std::vector<int> h(n), back(n, -1);
  for (int i = 0; i < n; i++) h[i] = i % 4096;
  int* d;
  CUDA_CHECK(cudaMalloc(&d, n * sizeof(int)));
  CUDA_CHECK(cudaMemcpyAsync(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice, s));
  mark<<<(n + 255) / 256, 256, 0, s>>>(d, dev, n);
  LAUNCH_CHECK("mark");
  CUDA_CHECK(cudaMemcpyAsync(back.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  int bad = -1;
  for (int i = 0; i < n; i++)
    if (back[i] != h[i] * (dev + 2) + dev) {
      bad = i;
      break;
    }
  std::snprintf(name, sizeof name, "dev%d.kernel_result", dev);
  CHECK(bad < 0, name, "back[%d] = %d", bad, bad < 0 ? 0 : back[bad]);

  cudaPointerAttributes at;
  std::memset(&at, 0, sizeof at);
  CUDA_CHECK(cudaPointerGetAttributes(&at, d));
  std::snprintf(name, sizeof name, "dev%d.pointer_device", dev);
  CHECK(at.type == cudaMemoryTypeDevice && at.device == dev, name, "type %d, device %d", (int)at.type, at.device);

  cur = -1;
  CUDA_CHECK(cudaGetDevice(&cur));
  std::snprintf(name, sizeof name, "dev%d.still_current", dev);
  CHECK(cur == dev, name, "cudaGetDevice gave %d at the end", cur);
  CUDA_CHECK(cudaStreamDestroy(s));
  CUDA_CHECK(cudaDeviceSynchronize());
  res->d = d;
  res->n = n;
}

int main(int argc, char** argv) {
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  std::printf("%d device(s)\n", count);
  if (argc > 1) {
    int want = std::atoi(argv[1]);
    CHECK(count == want, "device_count", "cudaGetDeviceCount gave %d, expected %d", count, want);
  } else {
    CHECK(count >= 1, "device_count", "cudaGetDeviceCount gave %d", count);
  }
  CUDA_CHECK(cudaSetDevice(0));

  std::vector<Result> res(count);
  std::vector<std::thread> ts;
  for (int dev = 0; dev < count; dev++) ts.emplace_back(worker, dev, &res[dev]);
  for (auto& t : ts) t.join();

  // The main thread's device is its own: still 0.
  int cur = -1;
  CUDA_CHECK(cudaGetDevice(&cur));
  CHECK(cur == 0, "main.device_unchanged", "cudaGetDevice gave %d in main after the workers", cur);

  // With unified addressing, cudaMemcpyDefault copies from any device's memory whichever device
  // is current (here 0), and the pointer still names its own device.
  for (int dev = 0; dev < count; dev++) {
    char name[96];
    if (!res[dev].d) continue;
    std::vector<int> back(res[dev].n, -1);
    // (CUDA Programming Guide, "Unified Virtual Address Space": "When copying to or from the
    // memory of any device that uses the unified address space, the cudaMemcpyKind parameter of
    // cudaMemcpy*() can be set to cudaMemcpyDefault to determine locations from the pointers.")
    cudaError_t e = cudaMemcpy(back.data(), res[dev].d, back.size() * sizeof(int), cudaMemcpyDefault);
    bool ok = e == cudaSuccess;
    for (int i = 0; ok && i < res[dev].n; i++) ok &= back[i] == (i % 4096) * (dev + 2) + dev;
    std::snprintf(name, sizeof name, "main.copy_default_from_dev%d_with_dev0_current", dev);
    CHECK(ok, name, "cudaMemcpy(host, pointer on device %d, cudaMemcpyDefault) returned %s%s", dev,
          cudaGetErrorName(e), e == cudaSuccess ? " but the contents differ" : "");
    if (e != cudaSuccess) (void)cudaGetLastError();  // reported above; keep the later checks independent
    cudaPointerAttributes at;
    std::memset(&at, 0, sizeof at);
    CUDA_CHECK(cudaPointerGetAttributes(&at, res[dev].d));
    std::snprintf(name, sizeof name, "main.pointer_dev%d", dev);
    CHECK(at.device == dev, name, "device %d", at.device);
    CUDA_CHECK(cudaSetDevice(dev));
    CUDA_CHECK(cudaFree(res[dev].d));
    CUDA_CHECK(cudaSetDevice(0));
  }

  // Switching devices on one thread, and a device-to-device copy between them.
  if (count >= 2) {
    const int n = 4096;
    std::vector<int> h(n), back(n, 0);
    for (int i = 0; i < n; i++) h[i] = i * 5 + 1;
    int *a, *b;
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaMalloc(&a, n * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(a, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaSetDevice(1));
    CUDA_CHECK(cudaMalloc(&b, n * sizeof(int)));
    if (CUDA_EXPECT(cudaMemcpyPeer(b, 1, a, 0, n * sizeof(int)), cudaSuccess, "switch.memcpy_peer_dev0_to_dev1")) {
      mark<<<(n + 255) / 256, 256>>>(b, 1, n);
      LAUNCH_CHECK("mark on device 1");
      CUDA_CHECK(cudaMemcpy(back.data(), b, n * sizeof(int), cudaMemcpyDeviceToHost));
      bool ok = true;
      for (int i = 0; i < n; i++) ok &= back[i] == h[i] * 3 + 1;
      CHECK(ok, "switch.peer_copy_then_kernel_on_dev1", "contents differ");
    } else {
      (void)cudaGetLastError();  // reported above; keep the later checks independent
    }
    CUDA_CHECK(cudaFree(b));
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaFree(a));
    cur = -1;
    CUDA_CHECK(cudaGetDevice(&cur));
    CHECK(cur == 0, "switch.back_to_dev0", "cudaGetDevice gave %d", cur);
  }

  for (int dev = 0; dev < count; dev++) {
    CUDA_CHECK(cudaSetDevice(dev));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  CUDA_EXPECT(cudaGetLastError(), cudaSuccess, "error.none_at_end");
  return rt::finish();
}
