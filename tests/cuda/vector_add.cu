// The CUDA runtime API basics, end to end: device queries, memory (linear, pitched, pinned,
// symbols), <<<>>> launches, error reporting, function attributes and occupancy.
#include <cmath>
#include <cstdint>
#include <vector>

#include "check.cuh"

__constant__ float c_scale[16];
__device__ unsigned int d_count;
__device__ float d_table[64];

__global__ void vadd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

// out[i] = in[i] * c_scale[i % 16] + d_table[i % 64]; counts the threads that wrote.
__global__ void scale_by_symbols(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = in[i] * c_scale[i % 16] + d_table[i % 64];
    atomicAdd(&d_count, 1u);
  }
}

// Pitched 2D: m[y][x] = m[y][x] * 2 + y.
__global__ void pitched_update(float* base, size_t pitch, int width, int height) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < width && y < height) {
    float* row = (float*)((char*)base + y * pitch);
    row[x] = row[x] * 2.0f + (float)y;
  }
}

static bool vadd_case(int n, int block, const char* name) {
  std::vector<float> a(n), b(n), c(n, -1.0f);
  for (int i = 0; i < n; i++) {
    a[i] = (float)(i % 1000) * 0.5f;
    b[i] = (float)((i * 7) % 333) - 100.0f;
  }
  float *da, *db, *dc;
  size_t bytes = (size_t)n * sizeof(float);
  CUDA_CHECK(cudaMalloc(&da, bytes));
  CUDA_CHECK(cudaMalloc(&db, bytes));
  CUDA_CHECK(cudaMalloc(&dc, bytes));
  CUDA_CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset(dc, 0, bytes));
  int grid = (n + block - 1) / block;
  vadd<<<grid, block>>>(da, db, dc, n);
  LAUNCH_CHECK("vadd");
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(da));
  CUDA_CHECK(cudaFree(db));
  CUDA_CHECK(cudaFree(dc));
  int bad = -1;
  for (int i = 0; i < n; i++)
    if (c[i] != a[i] + b[i]) {
      bad = i;
      break;
    }
  return CHECK(bad < 0, name, "n=%d block=%d: c[%d] = %f, expected %f", n, block, bad, bad < 0 ? 0.0 : c[bad],
               bad < 0 ? 0.0 : a[bad] + b[bad]);
}

int main() {
  // ---- versions, devices, properties
  int driver = 0, runtime = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  std::printf("driver version %d, runtime version %d\n", driver, runtime);
  CHECK(driver > 0, "driver_version", "cudaDriverGetVersion gave %d", driver);
  CHECK(runtime > 0, "runtime_version", "cudaRuntimeGetVersion gave %d", runtime);

  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  std::printf("%d device(s)\n", count);
  CHECK(count >= 1, "device_count", "cudaGetDeviceCount gave %d", count);
  CUDA_CHECK(cudaSetDevice(0));
  int cur = -1;
  CUDA_CHECK(cudaGetDevice(&cur));
  CHECK(cur == 0, "get_device", "cudaGetDevice gave %d after cudaSetDevice(0)", cur);

  cudaDeviceProp p;
  std::memset(&p, 0, sizeof p);
  CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  std::printf("device 0: \"%s\", %zu bytes, %d SMs, cc %d.%d, warp %d, max threads/block %d\n", p.name,
              p.totalGlobalMem, p.multiProcessorCount, p.major, p.minor, p.warpSize, p.maxThreadsPerBlock);
  CHECK(p.name[0] != '\0', "props.name", "empty device name");
  CHECK(p.major >= 7, "props.major", "compute capability major %d < 7", p.major);
  CHECK(p.warpSize == 32, "props.warpSize", "warpSize %d", p.warpSize);
  CHECK(p.multiProcessorCount > 0, "props.multiProcessorCount", "%d", p.multiProcessorCount);
  CHECK(p.totalGlobalMem > 0, "props.totalGlobalMem", "%zu", p.totalGlobalMem);
  CHECK(p.maxThreadsPerBlock >= 1024, "props.maxThreadsPerBlock", "%d", p.maxThreadsPerBlock);
  CHECK(p.unifiedAddressing == 1, "props.unifiedAddressing", "%d", p.unifiedAddressing);

  struct {
    cudaDeviceAttr attr;
    int want;
    const char* name;
  } attrs[] = {
      {cudaDevAttrComputeCapabilityMajor, p.major, "attr.ComputeCapabilityMajor"},
      {cudaDevAttrComputeCapabilityMinor, p.minor, "attr.ComputeCapabilityMinor"},
      {cudaDevAttrMultiProcessorCount, p.multiProcessorCount, "attr.MultiProcessorCount"},
      {cudaDevAttrWarpSize, p.warpSize, "attr.WarpSize"},
      {cudaDevAttrMaxThreadsPerBlock, p.maxThreadsPerBlock, "attr.MaxThreadsPerBlock"},
      {cudaDevAttrMaxSharedMemoryPerBlock, (int)p.sharedMemPerBlock, "attr.MaxSharedMemoryPerBlock"},
      {cudaDevAttrMaxGridDimX, p.maxGridSize[0], "attr.MaxGridDimX"},
      {cudaDevAttrMaxBlockDimX, p.maxThreadsDim[0], "attr.MaxBlockDimX"},
      {cudaDevAttrUnifiedAddressing, p.unifiedAddressing, "attr.UnifiedAddressing"},
  };
  for (auto& a : attrs) {
    int v = -12345;
    CUDA_CHECK(cudaDeviceGetAttribute(&v, a.attr, 0));
    CHECK(v == a.want, a.name, "cudaDeviceGetAttribute gave %d, cudaGetDeviceProperties %d", v, a.want);
  }

  size_t free0 = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free0, &total));
  std::printf("cudaMemGetInfo: free %zu, total %zu\n", free0, total);
  CHECK(free0 <= total && free0 > 0, "meminfo.free_le_total", "free %zu, total %zu", free0, total);
  CHECK(total == p.totalGlobalMem, "meminfo.total_is_props", "total %zu, props.totalGlobalMem %zu", total,
        p.totalGlobalMem);

  // ---- vector add, several sizes and block shapes
  vadd_case(1 << 20, 256, "vadd.1M.block256");
  vadd_case(100003, 64, "vadd.100003.block64");
  vadd_case(100003, 96, "vadd.100003.block96");
  vadd_case(65536 + 1, 1024, "vadd.65537.block1024");
  vadd_case(1, 32, "vadd.1.block32");

  // ---- memset, cudaMemcpyDefault (unified addressing) both ways
  {
    const size_t n = 4096;
    unsigned char* d;
    CUDA_CHECK(cudaMalloc(&d, n));
    CUDA_CHECK(cudaMemset(d, 0x5A, n));
    CUDA_CHECK(cudaMemset(d + 100, 0x00, 50));
    std::vector<unsigned char> h(n, 0);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n, cudaMemcpyDefault));
    bool ok = true;
    for (size_t i = 0; i < n; i++) ok &= h[i] == ((i >= 100 && i < 150) ? 0x00 : 0x5A);
    CHECK(ok, "memset", "bytes differ from the cudaMemset pattern");
    for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(i * 31 + 7);
    CUDA_CHECK(cudaMemcpy(d, h.data(), n, cudaMemcpyDefault));
    std::vector<unsigned char> back(n, 0);
    unsigned char* d2;
    CUDA_CHECK(cudaMalloc(&d2, n));
    CUDA_CHECK(cudaMemcpy(d2, d, n, cudaMemcpyDefault));  // device to device
    CUDA_CHECK(cudaMemcpy(back.data(), d2, n, cudaMemcpyDefault));
    CHECK(back == h, "memcpy_default.roundtrip", "H2D, D2D, D2H with cudaMemcpyDefault changed the bytes");
    CUDA_CHECK(cudaFree(d));
    CUDA_CHECK(cudaFree(d2));
  }

  // ---- pointer attributes: device memory, pinned host memory
  {
    float* d;
    CUDA_CHECK(cudaMalloc(&d, 1024));
    cudaPointerAttributes at;
    std::memset(&at, 0, sizeof at);
    CUDA_CHECK(cudaPointerGetAttributes(&at, d));
    CHECK(at.type == cudaMemoryTypeDevice, "ptrattr.device.type", "type %d", (int)at.type);
    CHECK(at.device == 0, "ptrattr.device.device", "device %d", at.device);
    CHECK(at.devicePointer == d, "ptrattr.device.devicePointer", "%p, expected %p", at.devicePointer, (void*)d);
    std::memset(&at, 0, sizeof at);
    CUDA_CHECK(cudaPointerGetAttributes(&at, d + 100));  // interior pointer
    CHECK(at.type == cudaMemoryTypeDevice && at.devicePointer == d + 100, "ptrattr.device.interior",
          "type %d, devicePointer %p", (int)at.type, at.devicePointer);
    CUDA_CHECK(cudaFree(d));

    float* h;
    CUDA_CHECK(cudaMallocHost((void**)&h, 1 << 16));  // the C entry point, not the cudaHostAlloc template
    std::memset(&at, 0, sizeof at);
    CUDA_CHECK(cudaPointerGetAttributes(&at, h));
    CHECK(at.type == cudaMemoryTypeHost, "ptrattr.host.type", "type %d", (int)at.type);
    CHECK(at.hostPointer == h, "ptrattr.host.hostPointer", "%p, expected %p", at.hostPointer, (void*)h);
    // pinned memory works with plain copies and cudaMemcpyDefault
    for (int i = 0; i < (1 << 14); i++) h[i] = (float)i;
    float* d2;
    CUDA_CHECK(cudaMalloc(&d2, 1 << 16));
    CUDA_CHECK(cudaMemcpy(d2, h, 1 << 16, cudaMemcpyDefault));
    std::memset(h, 0, 1 << 16);
    CUDA_CHECK(cudaMemcpy(h, d2, 1 << 16, cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int i = 0; i < (1 << 14); i++) ok &= h[i] == (float)i;
    CHECK(ok, "pinned.roundtrip", "pinned buffer changed through the device");
    CUDA_CHECK(cudaFree(d2));
    CUDA_CHECK(cudaFreeHost(h));

    // plain malloc'd memory is not known to CUDA: since CUDA 11, success and cudaMemoryTypeUnregistered
    std::vector<char> plain(64);
    std::memset(&at, 0xff, sizeof at);
    cudaError_t e = cudaPointerGetAttributes(&at, plain.data());
    CHECK(e == cudaSuccess && at.type == cudaMemoryTypeUnregistered, "ptrattr.pageable.unregistered",
          "returned %s, type %d", cudaGetErrorName(e), (int)at.type);
    if (e != cudaSuccess) (void)cudaGetLastError();  // reported above; keep the later checks independent
  }

  // ---- pitched 2D memory
  {
    const int width = 100, height = 37;
    float* d;
    size_t pitch = 0;
    CUDA_CHECK(cudaMallocPitch((void**)&d, &pitch, width * sizeof(float), height));
    std::printf("cudaMallocPitch: pitch %zu for %zu-byte rows\n", pitch, width * sizeof(float));
    CHECK(pitch >= width * sizeof(float), "pitch.at_least_width", "pitch %zu", pitch);
    std::vector<float> h(width * height), back(width * height, -1.0f);
    for (int i = 0; i < width * height; i++) h[i] = (float)(i % 977);
    CUDA_CHECK(cudaMemcpy2D(d, pitch, h.data(), width * sizeof(float), width * sizeof(float), height,
                            cudaMemcpyHostToDevice));
    dim3 block(32, 8), grid((width + 31) / 32, (height + 7) / 8);
    pitched_update<<<grid, block>>>(d, pitch, width, height);
    LAUNCH_CHECK("pitched_update");
    CUDA_CHECK(cudaMemcpy2D(back.data(), width * sizeof(float), d, pitch, width * sizeof(float), height,
                            cudaMemcpyDeviceToHost));
    int bad = -1;
    for (int y = 0; y < height && bad < 0; y++)
      for (int x = 0; x < width; x++)
        if (back[y * width + x] != h[y * width + x] * 2.0f + (float)y) {
          bad = y * width + x;
          break;
        }
    CHECK(bad < 0, "memcpy2d.pitched_kernel", "element %d: %f", bad, bad < 0 ? 0.0 : back[bad]);
    CUDA_CHECK(cudaFree(d));
  }

  // ---- symbols: __constant__ and __device__ variables
  {
    float scale[16], scale_back[16];
    for (int i = 0; i < 16; i++) scale[i] = 0.25f * (float)(i + 1);
    float table[64];
    for (int i = 0; i < 64; i++) table[i] = (float)(i * i) - 10.0f;
    unsigned int zero = 0;
    CUDA_CHECK(cudaMemcpyToSymbol(c_scale, scale, sizeof scale));
    CUDA_CHECK(cudaMemcpyToSymbol(d_table, table, sizeof table));
    CUDA_CHECK(cudaMemcpyToSymbol(d_count, &zero, sizeof zero));
    CUDA_CHECK(cudaMemcpyFromSymbol(scale_back, c_scale, sizeof scale_back));
    CHECK(std::memcmp(scale, scale_back, sizeof scale) == 0, "symbol.constant_roundtrip",
          "cudaMemcpyFromSymbol(c_scale) differs from what was written");
    // offset form: the second half of d_table
    float half[32];
    CUDA_CHECK(cudaMemcpyFromSymbol(half, d_table, sizeof half, 32 * sizeof(float)));
    CHECK(std::memcmp(half, table + 32, sizeof half) == 0, "symbol.offset_read", "d_table[32..64] differs");
    void* addr = nullptr;
    size_t size = 0;
    CUDA_CHECK(cudaGetSymbolAddress(&addr, d_table));
    CUDA_CHECK(cudaGetSymbolSize(&size, d_table));
    CHECK(addr != nullptr && size == sizeof table, "symbol.address_size", "address %p, size %zu", addr, size);

    const int n = 5000;
    std::vector<float> in(n), out(n);
    for (int i = 0; i < n; i++) in[i] = (float)(i % 50) - 3.0f;
    float *din, *dout;
    CUDA_CHECK(cudaMalloc(&din, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dout, n * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(din, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    scale_by_symbols<<<(n + 127) / 128, 128>>>(din, dout, n);
    LAUNCH_CHECK("scale_by_symbols");
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
    int bad = -1;
    for (int i = 0; i < n; i++)
      if (out[i] != in[i] * scale[i % 16] + table[i % 64]) {
        bad = i;
        break;
      }
    CHECK(bad < 0, "symbol.kernel_reads_symbols", "out[%d] = %f", bad, bad < 0 ? 0.0 : out[bad]);
    unsigned int counted = 0;
    CUDA_CHECK(cudaMemcpyFromSymbol(&counted, d_count, sizeof counted));
    CHECK(counted == (unsigned)n, "symbol.kernel_writes_device_var", "d_count = %u, expected %d", counted, n);
    CUDA_CHECK(cudaFree(din));
    CUDA_CHECK(cudaFree(dout));
  }

  // ---- errors: a deliberate one is returned, named, recorded once
  {
    CUDA_EXPECT(cudaGetLastError(), cudaSuccess, "error.none_pending");
    cudaError_t e = cudaSetDevice(9999);
    CUDA_EXPECT(e, cudaErrorInvalidDevice, "error.set_device_9999");
    const char* name = cudaGetErrorName(e);
    const char* text = cudaGetErrorString(e);
    std::printf("cudaSetDevice(9999): %s: %s\n", name ? name : "(null)", text ? text : "(null)");
    CHECK(name && std::strcmp(name, "cudaErrorInvalidDevice") == 0, "error.name", "cudaGetErrorName gave %s",
          name ? name : "(null)");
    CHECK(text && text[0] && std::strcmp(text, name) != 0, "error.string", "cudaGetErrorString gave \"%s\"",
          text ? text : "(null)");
    CUDA_EXPECT(cudaPeekAtLastError(), cudaErrorInvalidDevice, "error.peek_keeps");
    CUDA_EXPECT(cudaGetLastError(), cudaErrorInvalidDevice, "error.last_error_recorded");
    CUDA_EXPECT(cudaGetLastError(), cudaSuccess, "error.last_error_cleared");
    CHECK(std::strcmp(cudaGetErrorName(cudaSuccess), "cudaSuccess") == 0, "error.success_name", "%s",
          cudaGetErrorName(cudaSuccess));
    cur = -1;
    CUDA_CHECK(cudaGetDevice(&cur));
    CHECK(cur == 0, "error.device_unchanged", "cudaGetDevice gave %d after the failed cudaSetDevice", cur);
    // a launch with too many threads per block: reported by cudaGetLastError, not sticky
    vadd<<<1, 2048>>>(nullptr, nullptr, nullptr, 0);
    CUDA_EXPECT(cudaGetLastError(), cudaErrorInvalidConfiguration, "error.launch_block_too_large");
    CUDA_EXPECT(cudaGetLastError(), cudaSuccess, "error.launch_error_cleared");
    CUDA_EXPECT(cudaDeviceSynchronize(), cudaSuccess, "error.launch_error_not_sticky");
    // the context still works after the (non-sticky) errors
    vadd_case(1000, 128, "error.context_still_works");
  }

  // ---- function attributes and occupancy
  {
    cudaFuncAttributes fa;
    std::memset(&fa, 0, sizeof fa);
    CUDA_CHECK(cudaFuncGetAttributes(&fa, vadd));
    std::printf("vadd: maxThreadsPerBlock %d, numRegs %d, ptxVersion %d, binaryVersion %d\n", fa.maxThreadsPerBlock,
                fa.numRegs, fa.ptxVersion, fa.binaryVersion);
    CHECK(fa.maxThreadsPerBlock > 0 && fa.maxThreadsPerBlock <= p.maxThreadsPerBlock, "funcattr.maxThreadsPerBlock",
          "%d", fa.maxThreadsPerBlock);
    int min_grid = 0, block = 0;
    CUDA_CHECK(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, vadd, 0, 0));
    std::printf("occupancy: min grid %d, block %d\n", min_grid, block);
    CHECK(block > 0 && block <= fa.maxThreadsPerBlock && min_grid > 0, "occupancy.max_potential_block_size",
          "min grid %d, block %d", min_grid, block);
    int blocks_per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, vadd, 256, 0));
    CHECK(blocks_per_sm > 0, "occupancy.max_active_blocks", "%d blocks of 256 per SM", blocks_per_sm);
    // the suggested block size launches
    if (block > 0) vadd_case(12345, block, "vadd.occupancy_block");
  }

  // ---- cudaLaunchKernelEx (CUDA 12+'s extensible launch: config plus attributes) and the
  // capture query allocators make before they allocate
  {
    const int n = 4099;
    std::vector<float> a(n), b(n), c(n, -1.f);
    for (int i = 0; i < n; i++) {
      a[i] = 0.5f * i;
      b[i] = 3.0f - i;
    }
    float *da, *db, *dc;
    CUDA_CHECK(cudaMalloc(&da, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&db, n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dc, n * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusActive;
    unsigned long long id = 0;
    CUDA_CHECK(cudaStreamGetCaptureInfo(s, &cap, &id));
    CHECK(cap == cudaStreamCaptureStatusNone, "capture_info.none", "status %d", (int)cap);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributePriority;
    attr[0].val.priority = 0;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((n + 127) / 128);
    cfg.blockDim = dim3(128);
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, vadd, (const float*)da, (const float*)db, dc, n));
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaMemcpy(c.data(), dc, n * sizeof(float), cudaMemcpyDeviceToHost));
    int bad = -1;
    for (int i = 0; i < n && bad < 0; i++)
      if (c[i] != a[i] + b[i]) bad = i;
    CHECK(bad < 0, "launch_kernel_ex", "c[%d] = %f", bad, bad < 0 ? 0.0 : c[bad]);
    cfg.blockDim = dim3(2048);
    CUDA_EXPECT(cudaLaunchKernelEx(&cfg, vadd, (const float*)da, (const float*)db, dc, n),
                cudaErrorInvalidConfiguration, "launch_kernel_ex.too_many_threads");
    CUDA_EXPECT(cudaGetLastError(), cudaErrorInvalidConfiguration, "launch_kernel_ex.error_recorded");
    CUDA_CHECK(cudaStreamDestroy(s));
    CUDA_CHECK(cudaFree(da));
    CUDA_CHECK(cudaFree(db));
    CUDA_CHECK(cudaFree(dc));
  }

  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_EXPECT(cudaGetLastError(), cudaSuccess, "error.none_at_end");
  return rt::finish();
}
