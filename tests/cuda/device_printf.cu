// Device printf through the runtime: what kernels print reaches this process's standard output
// when it synchronizes (stream, event, device), copies with a blocking cudaMemcpy or resets the
// device, and not before; after the program's own earlier printf; a kernel's many lines whole;
// a second device's too. Each step points
// file descriptor 1 at a file of its own, then puts it back before its checks print.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "check.cuh"

__global__ void say(int tag, int lines) {
  for (int i = 0; i < lines; i++) printf("tag %d thread %d line %d\n", tag, (int)threadIdx.x, i);
}

// Standard output diverted to a temporary file while a step runs.
class Diverted {
 public:
  Diverted() {
    std::fflush(stdout);
    saved_ = dup(1);
    char path[] = "/tmp/gpupool-device-printf-XXXXXX";
    file_ = mkstemp(path);
    unlink(path);
    dup2(file_, 1);
  }
  // What arrived since the last call.
  std::string fresh() {
    std::fflush(stdout);
    struct stat st;
    fstat(file_, &st);
    std::string s(st.st_size - seen_, '\0');
    ssize_t n = pread(file_, &s[0], s.size(), seen_);
    seen_ = st.st_size;
    s.resize(n < 0 ? 0 : n);
    return s;
  }
  // Puts standard output back; returns what arrived last.
  std::string restore() {
    std::string s = fresh();
    dup2(saved_, 1);
    close(saved_);
    close(file_);
    return s;
  }

 private:
  int saved_ = -1, file_ = -1;
  off_t seen_ = 0;
};

static std::vector<std::string> lines_of(const std::string& text, int tag) {
  std::vector<std::string> out;
  std::string prefix = "tag " + std::to_string(tag) + " ";
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    if (line.compare(0, prefix.size(), prefix) == 0) out.push_back(line);
    at = end + 1;
  }
  std::sort(out.begin(), out.end());
  return out;
}

static std::vector<std::string> expected(int tag, int threads, int lines) {
  std::vector<std::string> out;
  for (int t = 0; t < threads; t++)
    for (int i = 0; i < lines; i++)
      out.push_back("tag " + std::to_string(tag) + " thread " + std::to_string(t) + " line " + std::to_string(i));
  std::sort(out.begin(), out.end());
  return out;
}

int main() {
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, 64));
  CUDA_CHECK(cudaDeviceSynchronize());

  {
    Diverted out;
    say<<<1, 8, 0, s>>>(1, 1);
    while (cudaStreamQuery(s) == cudaErrorNotReady) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    rt::clear_not_ready("cudaStreamQuery");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::string early = out.fresh();
    CUDA_CHECK(cudaStreamSynchronize(s));
    std::string text = out.restore();
    rt::check(early.empty(), "nothing of a finished kernel is written before a synchronization", "%.200s",
              early.c_str());
    rt::check(lines_of(text, 1) == expected(1, 8, 1), "cudaStreamSynchronize writes every thread's line", "%.300s",
              text.c_str());
  }
  {
    Diverted out;
    say<<<1, 4>>>(2, 1);
    std::printf("host before synchronize\n");
    CUDA_CHECK(cudaDeviceSynchronize());
    std::string text = out.restore();
    bool first = text.compare(0, 24, "host before synchronize\n") == 0;
    rt::check(first && lines_of(text, 2) == expected(2, 4, 1),
              "cudaDeviceSynchronize writes it, after the program's own earlier printf", "%.300s", text.c_str());
  }
  {
    Diverted out;
    say<<<1, 4>>>(3, 1);
    int host[16];
    CUDA_CHECK(cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost));
    std::string text = out.restore();
    rt::check(lines_of(text, 3) == expected(3, 4, 1), "a blocking cudaMemcpy writes it", "%.300s", text.c_str());
  }
  {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));
    Diverted out;
    say<<<1, 4, 0, s>>>(4, 1);
    CUDA_CHECK(cudaEventRecord(e, s));
    CUDA_CHECK(cudaEventSynchronize(e));
    std::string text = out.restore();
    rt::check(lines_of(text, 4) == expected(4, 4, 1), "cudaEventSynchronize writes it", "%.300s", text.c_str());
    CUDA_CHECK(cudaEventDestroy(e));
  }
  {
    Diverted out;
    say<<<1, 64, 0, s>>>(5, 8);
    CUDA_CHECK(cudaStreamSynchronize(s));
    std::string text = out.restore();
    rt::check(lines_of(text, 5) == expected(5, 64, 8), "64 threads x 8 lines arrive whole", "%zu bytes",
              text.size());
  }
  CUDA_CHECK(cudaFree(d));
  CUDA_CHECK(cudaStreamDestroy(s));
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (rt::check(devices >= 2, "a second device", "%d device(s)", devices)) {
    Diverted out;
    CUDA_CHECK(cudaSetDevice(1));
    say<<<1, 4>>>(6, 1);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaSetDevice(0));
    std::string text = out.restore();
    rt::check(lines_of(text, 6) == expected(6, 4, 1), "the second device's kernels' output too", "%.300s",
              text.c_str());
  }
  {
    Diverted out;
    say<<<1, 4>>>(7, 1);
    CUDA_CHECK(cudaDeviceReset());
    std::string text = out.restore();
    rt::check(lines_of(text, 7) == expected(7, 4, 1), "cudaDeviceReset writes it", "%.300s", text.c_str());
  }
  return rt::finish();
}
