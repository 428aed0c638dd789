// Shared by the CUDA runtime-API test programs in tests/cuda (built with NVIDIA's nvcc by
// gpupool_e2e::compile_cu and run under `gpupool run` by pool-daemon/tests/runtime.rs).
//
// Output protocol, one line each, thread-safe:
//   PASS <check>
//   FAIL <check>: <detail>
//   SUMMARY <passed>/<total>
// and the program exits non-zero if any check failed. Every CUDA call goes through
// CUDA_CHECK, which on failure prints the call, the error's name and string, and ends the
// program (a failed call leaves nothing meaningful to check after it).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace rt {

inline std::mutex& out_mutex() {
  static std::mutex m;
  return m;
}
inline std::atomic<int>& n_passed() {
  static std::atomic<int> n{0};
  return n;
}
inline std::atomic<int>& n_total() {
  static std::atomic<int> n{0};
  return n;
}

// Records one check: `PASS name`, or `FAIL name: detail` (printf-style) when !ok.
inline bool check(bool ok, const char* name, const char* fmt = nullptr, ...) {
  std::lock_guard<std::mutex> g(out_mutex());
  n_total()++;
  if (ok) {
    n_passed()++;
    std::printf("PASS %s\n", name);
  } else {
    std::printf("FAIL %s: ", name);
    if (fmt) {
      va_list ap;
      va_start(ap, fmt);
      std::vprintf(fmt, ap);
      va_end(ap);
    } else {
      std::printf("check failed");
    }
    std::printf("\n");
  }
  std::fflush(stdout);
  return ok;
}

// Prints the summary line and returns the exit code (0 only if every check passed).
inline int finish() {
  std::lock_guard<std::mutex> g(out_mutex());
  int p = n_passed(), t = n_total();
  std::printf("SUMMARY %d/%d\n", p, t);
  std::fflush(stdout);
  return (p == t && t > 0) ? 0 : 1;
}

// A failed CUDA call: one FAIL line naming the call, then the summary, then _Exit(1) (other
// threads may still be in CUDA calls: no exit handlers, no runtime teardown under them).
[[noreturn]] inline void cuda_failed(cudaError_t e, const char* call, const char* file, int line) {
  check(false, "cuda_call", "%s at %s:%d returned %s (%d): %s", call, file, line, cudaGetErrorName(e), (int)e,
        cudaGetErrorString(e));
  finish();
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(1);
}

// Checks that `got` is exactly `want`, naming both.
inline bool check_error(cudaError_t got, cudaError_t want, const char* name, const char* call) {
  return check(got == want, name, "%s returned %s (%d: %s), expected %s (%d)", call, cudaGetErrorName(got), (int)got,
               cudaGetErrorString(got), cudaGetErrorName(want), (int)want);
}

// Clears the thread's last error after a query that may have said cudaErrorNotReady (whether
// the runtime records that "not really an error" status is not something these tests judge);
// any other recorded error is a failure.
inline void clear_not_ready(const char* where) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess && e != cudaErrorNotReady) cuda_failed(e, where, __FILE__, __LINE__);
}

}  // namespace rt

#define CUDA_CHECK(call)                                                        \
  do {                                                                          \
    cudaError_t rt_e_ = (call);                                                 \
    if (rt_e_ != cudaSuccess) ::rt::cuda_failed(rt_e_, #call, __FILE__, __LINE__); \
  } while (0)

// After a <<<>>> launch: the launch itself was accepted (cudaGetLastError).
#define LAUNCH_CHECK(what)                                                          \
  do {                                                                              \
    cudaError_t rt_e_ = cudaGetLastError();                                         \
    if (rt_e_ != cudaSuccess)                                                       \
      ::rt::cuda_failed(rt_e_, "cudaGetLastError() after launching " what, __FILE__, __LINE__); \
  } while (0)

// Expects `call` to return exactly `want` (a PASS/FAIL line named `name`).
#define CUDA_EXPECT(call, want, name) ::rt::check_error((call), (want), (name), #call)

// CHECK(cond, "name", "detail printf format", args...): the detail is printed on failure.
#define CHECK(cond, name, ...) ::rt::check((cond), (name), __VA_ARGS__)
