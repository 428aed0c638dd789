// A host-only program built against CUDA 12's headers (no nvcc: the system C++ compiler, the
// headers of the nvidia-cuda-runtime-cu12 wheel, linked with -lcudart against that wheel's
// libcudart.so.12; gpupool_e2e::compile_cuda12_host). It therefore records
// `libcudart.so.12` as NEEDED and binds every runtime call to `...@libcudart.so.12`, as any
// program compiled with a CUDA 12 toolkit does; under `gpupool run` libgpupool.so answers those
// calls. What differs from CUDA 13 and is checked here:
//   - cudaRuntimeGetVersion must say 12.x (programs compare it with CUDART_VERSION);
//   - cudaGetDeviceProperties is #defined to cudaGetDeviceProperties_v2 and takes CUDA 12's
//     cudaDeviceProp (clockRate, computeMode, ... still present, so every field from clockRate
//     on sits at another offset than in CUDA 13's struct);
//   - cudaGetDriverEntryPoint takes the driverStatus argument (CUDA 12 signature).
// With no nvcc there is no <<<>>>: the kernel is hand-written PTX loaded and launched through
// driver entry points that the runtime hands out.
//
// Output protocol: tests/cuda/check.cuh (PASS / FAIL lines, SUMMARY, exit status).

#include "../cuda/check.cuh"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

static_assert(CUDART_VERSION >= 12000 && CUDART_VERSION < 13000, "this program must be built with CUDA 12 headers");

namespace {

char g_name[128];

// A check name with a printf-style suffix (the name buffer is reused; check() prints at once).
const char* named(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(g_name, sizeof g_name, fmt, ap);
  va_end(ap);
  return g_name;
}

int attribute(cudaDeviceAttr a, int dev) {
  int v = -12345;
  CUDA_CHECK(cudaDeviceGetAttribute(&v, a, dev));
  return v;
}

void versions() {
  int rt_version = 0, drv_version = 0;
  CUDA_CHECK(cudaRuntimeGetVersion(&rt_version));
  CUDA_CHECK(cudaDriverGetVersion(&drv_version));
  CHECK(rt_version >= 12000 && rt_version <= 12999, "runtime_version_is_cuda12",
        "cudaRuntimeGetVersion = %d, want 12000..12999 (the program loaded libcudart.so.12; built with %d)",
        rt_version, CUDART_VERSION);
  CHECK(drv_version >= rt_version, "driver_version_at_least_runtime", "driver %d < runtime %d", drv_version,
        rt_version);
}

// cudaGetDeviceProperties (the _v2 export, CUDA 12's layout) against cudaDeviceGetAttribute,
// written into a buffer larger than the struct: the bytes after sizeof(cudaDeviceProp) are a
// canary nothing may touch, the struct itself starts as 0xAB everywhere.
void properties(int dev) {
  constexpr size_t kCanary = 512;
  alignas(16) static unsigned char buf[sizeof(cudaDeviceProp) + kCanary];
  std::memset(buf, 0xAB, sizeof buf);
  auto* p = reinterpret_cast<cudaDeviceProp*>(buf);
  CUDA_CHECK(cudaGetDeviceProperties(p, dev));

  size_t bad = 0, first_bad = 0;
  for (size_t i = sizeof(cudaDeviceProp); i < sizeof buf; i++) {
    if (buf[i] != 0xAB && bad++ == 0) first_bad = i;
  }
  CHECK(bad == 0, named("dev%d_nothing_written_past_cuda12_struct", dev),
        "%zu of the %zu bytes after sizeof(cudaDeviceProp) = %zu changed, first at offset %zu", bad, kCanary,
        sizeof(cudaDeviceProp), first_bad);

  size_t reserved_bad = 0;
  for (int r : p->reserved) reserved_bad += (r != 0);
  CHECK(reserved_bad == 0, named("dev%d_reserved_zeroed", dev), "%zu of the %zu reserved ints are not 0 (first: 0x%x)",
        reserved_bad, sizeof(p->reserved) / sizeof(int), (unsigned)p->reserved[0]);

  size_t name_len = strnlen(p->name, sizeof p->name);
  CHECK(name_len > 0 && name_len < sizeof p->name && static_cast<unsigned char>(p->name[0]) != 0xAB,
        named("dev%d_name", dev), "name length %zu, first byte 0x%02x", name_len,
        static_cast<unsigned char>(p->name[0]));

#define FIELD_IS_ATTR(field, attr)                                                                           \
  do {                                                                                                       \
    long long want_ = attribute(attr, dev), got_ = static_cast<long long>(p->field);                        \
    CHECK(got_ == want_, named("dev%d_prop_%s", dev, #field), "prop.%s = %lld (0x%llx), %s = %lld", #field,   \
          got_, static_cast<unsigned long long>(got_), #attr, want_);                                        \
  } while (0)

  // Before CUDA 12's first extra field (clockRate): same offsets in both layouts.
  FIELD_IS_ATTR(sharedMemPerBlock, cudaDevAttrMaxSharedMemoryPerBlock);
  FIELD_IS_ATTR(regsPerBlock, cudaDevAttrMaxRegistersPerBlock);
  FIELD_IS_ATTR(warpSize, cudaDevAttrWarpSize);
  FIELD_IS_ATTR(maxThreadsPerBlock, cudaDevAttrMaxThreadsPerBlock);
  FIELD_IS_ATTR(maxThreadsDim[0], cudaDevAttrMaxBlockDimX);
  FIELD_IS_ATTR(maxThreadsDim[1], cudaDevAttrMaxBlockDimY);
  FIELD_IS_ATTR(maxThreadsDim[2], cudaDevAttrMaxBlockDimZ);
  FIELD_IS_ATTR(maxGridSize[0], cudaDevAttrMaxGridDimX);
  FIELD_IS_ATTR(maxGridSize[1], cudaDevAttrMaxGridDimY);
  FIELD_IS_ATTR(maxGridSize[2], cudaDevAttrMaxGridDimZ);
  // CUDA 12 only, and everything after it is where CUDA 13's layout differs.
  FIELD_IS_ATTR(clockRate, cudaDevAttrClockRate);
  FIELD_IS_ATTR(totalConstMem, cudaDevAttrTotalConstantMemory);
  FIELD_IS_ATTR(major, cudaDevAttrComputeCapabilityMajor);
  FIELD_IS_ATTR(minor, cudaDevAttrComputeCapabilityMinor);
  FIELD_IS_ATTR(textureAlignment, cudaDevAttrTextureAlignment);
  FIELD_IS_ATTR(deviceOverlap, cudaDevAttrGpuOverlap);
  FIELD_IS_ATTR(multiProcessorCount, cudaDevAttrMultiProcessorCount);
  FIELD_IS_ATTR(kernelExecTimeoutEnabled, cudaDevAttrKernelExecTimeout);
  FIELD_IS_ATTR(computeMode, cudaDevAttrComputeMode);
  FIELD_IS_ATTR(maxTexture1DLinear, cudaDevAttrMaxTexture1DLinearWidth);
  FIELD_IS_ATTR(concurrentKernels, cudaDevAttrConcurrentKernels);
  FIELD_IS_ATTR(ECCEnabled, cudaDevAttrEccEnabled);
  FIELD_IS_ATTR(pciBusID, cudaDevAttrPciBusId);
  FIELD_IS_ATTR(pciDeviceID, cudaDevAttrPciDeviceId);
  FIELD_IS_ATTR(pciDomainID, cudaDevAttrPciDomainId);
  FIELD_IS_ATTR(asyncEngineCount, cudaDevAttrAsyncEngineCount);
  FIELD_IS_ATTR(unifiedAddressing, cudaDevAttrUnifiedAddressing);
  FIELD_IS_ATTR(memoryClockRate, cudaDevAttrMemoryClockRate);
  FIELD_IS_ATTR(memoryBusWidth, cudaDevAttrGlobalMemoryBusWidth);
  FIELD_IS_ATTR(l2CacheSize, cudaDevAttrL2CacheSize);
  FIELD_IS_ATTR(persistingL2CacheMaxSize, cudaDevAttrMaxPersistingL2CacheSize);
  FIELD_IS_ATTR(maxThreadsPerMultiProcessor, cudaDevAttrMaxThreadsPerMultiProcessor);
  FIELD_IS_ATTR(sharedMemPerMultiprocessor, cudaDevAttrMaxSharedMemoryPerMultiprocessor);
  FIELD_IS_ATTR(regsPerMultiprocessor, cudaDevAttrMaxRegistersPerMultiprocessor);
  FIELD_IS_ATTR(managedMemory, cudaDevAttrManagedMemory);
  FIELD_IS_ATTR(singleToDoublePrecisionPerfRatio, cudaDevAttrSingleToDoublePrecisionPerfRatio);
  FIELD_IS_ATTR(concurrentManagedAccess, cudaDevAttrConcurrentManagedAccess);
  FIELD_IS_ATTR(cooperativeLaunch, cudaDevAttrCooperativeLaunch);
  FIELD_IS_ATTR(cooperativeMultiDeviceLaunch, cudaDevAttrCooperativeMultiDeviceLaunch);
  FIELD_IS_ATTR(sharedMemPerBlockOptin, cudaDevAttrMaxSharedMemoryPerBlockOptin);
  FIELD_IS_ATTR(maxBlocksPerMultiProcessor, cudaDevAttrMaxBlocksPerMultiprocessor);
  FIELD_IS_ATTR(accessPolicyMaxWindowSize, cudaDevAttrMaxAccessPolicyWindowSize);
  FIELD_IS_ATTR(reservedSharedMemPerBlock, cudaDevAttrReservedSharedMemoryPerBlock);
  FIELD_IS_ATTR(memoryPoolsSupported, cudaDevAttrMemoryPoolsSupported);
  FIELD_IS_ATTR(memoryPoolSupportedHandleTypes, cudaDevAttrMemoryPoolSupportedHandleTypes);
  FIELD_IS_ATTR(ipcEventSupported, cudaDevAttrIpcEventSupport);
  FIELD_IS_ATTR(clusterLaunch, cudaDevAttrClusterLaunch);
#undef FIELD_IS_ATTR

  // Values a shifted layout would not produce by accident (the simulated devices are sm_90).
  CHECK(p->major >= 7 && p->warpSize == 32 && p->maxThreadsPerBlock == 1024, named("dev%d_plausible_values", dev),
        "major %d, warpSize %d, maxThreadsPerBlock %d", p->major, p->warpSize, p->maxThreadsPerBlock);
  CHECK(p->maxBlocksPerMultiProcessor > 0 && p->clusterLaunch == 1, named("dev%d_fields_after_divergence_set", dev),
        "maxBlocksPerMultiProcessor %d, clusterLaunch %d (sm_90 has both)", p->maxBlocksPerMultiProcessor,
        p->clusterLaunch);

  // totalGlobalMem is what cudaMemGetInfo calls the device's total.
  int prev = -1;
  CUDA_CHECK(cudaGetDevice(&prev));
  CUDA_CHECK(cudaSetDevice(dev));
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  CUDA_CHECK(cudaSetDevice(prev));
  CHECK(p->totalGlobalMem == total_b && total_b > 0, named("dev%d_totalGlobalMem_is_memgetinfo_total", dev),
        "totalGlobalMem %zu, cudaMemGetInfo total %zu", p->totalGlobalMem, total_b);
}

void memory() {
  constexpr size_t kBytes = 1 << 20;
  size_t free0 = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free0, &total));
  CHECK(total > 0 && free0 <= total, "memgetinfo_sane", "free %zu total %zu", free0, total);

  void* big = nullptr;
  constexpr size_t kBig = 64u << 20;
  CUDA_CHECK(cudaMalloc(&big, kBig));
  size_t free1 = 0;
  CUDA_CHECK(cudaMemGetInfo(&free1, &total));
  CHECK(free1 + kBig <= free0, "memgetinfo_free_drops_by_allocation", "free %zu before, %zu after a %zu-byte cudaMalloc",
        free0, free1, kBig);
  CUDA_CHECK(cudaFree(big));

  std::vector<uint8_t> host(kBytes), back(kBytes, 0);
  for (size_t i = 0; i < kBytes; i++) host[i] = static_cast<uint8_t>(i * 7 + 3);
  void* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, kBytes));
  CHECK(d != nullptr, "malloc_nonnull", "cudaMalloc gave NULL");
  CUDA_CHECK(cudaMemcpy(d, host.data(), kBytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(back.data(), d, kBytes, cudaMemcpyDeviceToHost));
  CHECK(back == host, "memcpy_round_trip", "device copy differs from what was written");

  CUDA_CHECK(cudaMemset(static_cast<uint8_t*>(d) + 4096, 0x5A, 8192));
  CUDA_CHECK(cudaMemcpy(back.data(), d, kBytes, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (size_t i = 0; i < kBytes && ok; i++) {
    uint8_t want = (i >= 4096 && i < 4096 + 8192) ? 0x5A : host[i];
    if (back[i] != want) {
      CHECK(false, "memset_range", "byte %zu is 0x%02x, want 0x%02x", i, back[i], want);
      ok = false;
    }
  }
  if (ok) CHECK(true, "memset_range", "");
  CUDA_CHECK(cudaFree(d));
}

void errors() {
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  CHECK(count >= 1, "device_count", "cudaGetDeviceCount = %d", count);
  CUDA_EXPECT(cudaSetDevice(999), cudaErrorInvalidDevice, "set_device_999_invalid");
  CUDA_EXPECT(cudaPeekAtLastError(), cudaErrorInvalidDevice, "peek_last_error_keeps_it");
  CUDA_EXPECT(cudaGetLastError(), cudaErrorInvalidDevice, "last_error_is_invalid_device");
  CUDA_EXPECT(cudaGetLastError(), cudaSuccess, "last_error_reset");
  const char* name = cudaGetErrorName(cudaErrorInvalidDevice);
  CHECK(name && std::strcmp(name, "cudaErrorInvalidDevice") == 0, "error_name", "cudaGetErrorName(101) = %s",
        name ? name : "(null)");
  const char* text = cudaGetErrorString(cudaErrorInvalidDevice);
  CHECK(text && text[0] != '\0', "error_string", "cudaGetErrorString(101) is empty");
  int dev = -1;
  CUDA_CHECK(cudaGetDevice(&dev));
  CHECK(dev == 0, "device_unchanged_after_bad_set", "cudaGetDevice = %d", dev);
}

// out[i] += 1 for i < n.
const char kAddOnePtx[] =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry add_one(\n"
    "    .param .u64 data,\n"
    "    .param .u32 n\n"
    ")\n"
    "{\n"
    "    .reg .pred %p<2>;\n"
    "    .reg .b32 %r<8>;\n"
    "    .reg .b64 %rd<5>;\n"
    "    ld.param.u64 %rd1, [data];\n"
    "    ld.param.u32 %r1, [n];\n"
    "    mov.u32 %r2, %ctaid.x;\n"
    "    mov.u32 %r3, %ntid.x;\n"
    "    mov.u32 %r4, %tid.x;\n"
    "    mad.lo.s32 %r5, %r2, %r3, %r4;\n"
    "    setp.ge.u32 %p1, %r5, %r1;\n"
    "    @%p1 bra $L_done;\n"
    "    cvta.to.global.u64 %rd2, %rd1;\n"
    "    mul.wide.u32 %rd3, %r5, 4;\n"
    "    add.s64 %rd4, %rd2, %rd3;\n"
    "    ld.global.u32 %r6, [%rd4];\n"
    "    add.s32 %r7, %r6, 1;\n"
    "    st.global.u32 [%rd4], %r7;\n"
    "$L_done:\n"
    "    ret;\n"
    "}\n";

typedef CUresult (*ModuleLoadData)(CUmodule*, const void*);
typedef CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
typedef CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                 CUstream, void**, void**);
typedef CUresult (*ModuleUnload)(CUmodule);

template <typename F>
F entry_point(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = static_cast<cudaDriverEntryPointQueryResult>(-1);
  // CUDA 12's signature: the driverStatus out-argument.
  CUDA_CHECK(cudaGetDriverEntryPoint(symbol, &fn, cudaEnableDefault, &status));
  CHECK(fn != nullptr && status == cudaDriverEntryPointSuccess, named("entry_point_%s", symbol),
        "fn %p, status %d", fn, static_cast<int>(status));
  return reinterpret_cast<F>(fn);
}

void kernel() {
  auto load = entry_point<ModuleLoadData>("cuModuleLoadData");
  auto get_function = entry_point<ModuleGetFunction>("cuModuleGetFunction");
  auto launch = entry_point<LaunchKernel>("cuLaunchKernel");
  auto unload = entry_point<ModuleUnload>("cuModuleUnload");
  if (!load || !get_function || !launch || !unload) return;

  CUmodule mod = nullptr;
  CUresult r = load(&mod, kAddOnePtx);
  CHECK(r == CUDA_SUCCESS && mod, "ptx_module_loads", "cuModuleLoadData returned %d", static_cast<int>(r));
  if (r != CUDA_SUCCESS) return;
  CUfunction fn = nullptr;
  r = get_function(&fn, mod, "add_one");
  CHECK(r == CUDA_SUCCESS && fn, "ptx_function_found", "cuModuleGetFunction returned %d", static_cast<int>(r));
  if (r != CUDA_SUCCESS) return;

  constexpr unsigned kN = 5000, kBlock = 128;
  std::vector<int> host(kN), back(kN, 0);
  for (unsigned i = 0; i < kN; i++) host[i] = static_cast<int>(i * 3) - 1000;
  int* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, kN * sizeof(int)));
  CUDA_CHECK(cudaMemcpy(d, host.data(), kN * sizeof(int), cudaMemcpyHostToDevice));
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));

  CUdeviceptr data = reinterpret_cast<CUdeviceptr>(d);
  unsigned n = kN;
  void* params[] = {&data, &n};
  for (int rep = 0; rep < 2; rep++) {
    r = launch(fn, (kN + kBlock - 1) / kBlock, 1, 1, kBlock, 1, 1, 0, reinterpret_cast<CUstream>(stream), params,
               nullptr);
    CHECK(r == CUDA_SUCCESS, named("launch_on_runtime_stream_%d", rep), "cuLaunchKernel returned %d",
          static_cast<int>(r));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_EXPECT(cudaStreamQuery(stream), cudaSuccess, "stream_idle_after_sync");
  CUDA_CHECK(cudaMemcpy(back.data(), d, kN * sizeof(int), cudaMemcpyDeviceToHost));
  unsigned wrong = 0, first = 0;
  for (unsigned i = 0; i < kN; i++) {
    if (back[i] != host[i] + 2 && wrong++ == 0) first = i;
  }
  CHECK(wrong == 0, "kernel_added_two", "%u of %u elements wrong, first [%u] = %d, want %d", wrong, kN, first,
        back[first], host[first] + 2);
  CUDA_EXPECT(cudaGetLastError(), cudaSuccess, "no_error_left_after_kernel");

  CUDA_CHECK(cudaStreamDestroy(stream));
  CUDA_CHECK(cudaFree(d));
  r = unload(mod);
  CHECK(r == CUDA_SUCCESS, "ptx_module_unloads", "cuModuleUnload returned %d", static_cast<int>(r));
}

}  // namespace

int main() {
  versions();
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  for (int dev = 0; dev < count; dev++) properties(dev);
  errors();
  memory();
  kernel();
  CUDA_CHECK(cudaDeviceSynchronize());
  return rt::finish();
}
