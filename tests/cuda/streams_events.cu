// Streams, events, pinned memory and host callbacks: async copies and kernels on streams,
// timing with events, cross-stream ordering with cudaStreamWaitEvent, queries, priorities,
// cudaLaunchHostFunc ordering.
#include <chrono>
#include <thread>
#include <vector>

#include "check.cuh"

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One thread waits `ns` nanoseconds of device time: holds its stream without burning host CPU.
__global__ void delay(unsigned long long ns) {
  unsigned long long t0 = globaltimer();
  while (globaltimer() - t0 < ns) __nanosleep(100000);
}

// y[i] = x[i] * 2 + 1
__global__ void produce(const int* x, int* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * 2 + 1;
}

// z[i] = y[i] + 3 (reads what `produce` wrote on another stream)
__global__ void consume(const int* y, int* z, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) z[i] = y[i] + 3;
}

__global__ void fill(int* p, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}

struct Callback {
  const int* host;  // pinned result buffer the preceding D2H copy writes
  int n;
  int expect_base;  // host[i] must be (expect_base + i) * 2 + 1 + 3
  std::atomic<int> ran{0};
  std::atomic<int> correct{0};
};

static void CUDART_CB on_stream_done(void* arg) {
  Callback* cb = (Callback*)arg;
  int ok = 0;
  for (int i = 0; i < cb->n; i++)
    if (cb->host[i] == (cb->expect_base + i) * 2 + 1 + 3) ok++;
  cb->correct = ok;
  cb->ran++;
}

struct Order {
  std::mutex m;
  std::vector<int> seq;
};
struct Step {
  Order* order;
  int id;
};
static void CUDART_CB record_step(void* arg) {
  Step* s = (Step*)arg;
  std::lock_guard<std::mutex> g(s->order->m);
  s->order->seq.push_back(s->id);
}

static const unsigned long long MS = 1000000ull;

int main() {
  CUDA_CHECK(cudaSetDevice(0));
  const int n = 1 << 16;
  const size_t bytes = n * sizeof(int);

  // ---- priorities and streams
  int least = 0, greatest = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  std::printf("stream priorities: least %d, greatest %d\n", least, greatest);
  CHECK(greatest <= least, "priority.range", "greatest %d > least %d", greatest, least);

  cudaStream_t a, b, hi;
  CUDA_CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, greatest));
  unsigned int flags = 12345;
  CUDA_CHECK(cudaStreamGetFlags(a, &flags));
  CHECK(flags == cudaStreamNonBlocking, "stream.flags", "cudaStreamGetFlags gave %u", flags);
  int prio = 12345;
  CUDA_CHECK(cudaStreamGetPriority(hi, &prio));
  CHECK(prio == greatest, "stream.priority", "cudaStreamGetPriority gave %d, created with %d", prio, greatest);

  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusActive;
  CUDA_CHECK(cudaStreamIsCapturing(a, &cap));
  CHECK(cap == cudaStreamCaptureStatusNone, "stream.not_capturing", "cudaStreamIsCapturing gave %d", (int)cap);

  // ---- pinned memory, both allocators
  int *h_in, *h_out;
  CUDA_CHECK(cudaMallocHost((void**)&h_in, bytes));  // the C entry point (the C++ template is cudaHostAlloc)
  CUDA_CHECK(cudaHostAlloc(&h_out, bytes, cudaHostAllocDefault));
  for (int i = 0; i < n; i++) {
    h_in[i] = i;
    h_out[i] = -1;
  }

  int *d_x, *d_y, *d_z;
  CUDA_CHECK(cudaMalloc(&d_x, bytes));
  CUDA_CHECK(cudaMalloc(&d_y, bytes));
  CUDA_CHECK(cudaMalloc(&d_z, bytes));
  CUDA_CHECK(cudaMemset(d_y, 0, bytes));
  CUDA_CHECK(cudaDeviceSynchronize());

  cudaEvent_t start, stop, produced;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));

  // ---- stream A produces (after a 200 ms device delay), stream B consumes after waiting
  // for A's event, copies back and runs a host callback.
  Callback cb;
  cb.host = h_out;
  cb.n = n;
  cb.expect_base = 0;
  CUDA_CHECK(cudaMemcpyAsync(d_x, h_in, bytes, cudaMemcpyHostToDevice, a));
  CUDA_CHECK(cudaEventRecord(start, a));
  delay<<<1, 1, 0, a>>>(200 * MS);
  LAUNCH_CHECK("delay");
  produce<<<(n + 255) / 256, 256, 0, a>>>(d_x, d_y, n);
  LAUNCH_CHECK("produce");
  CUDA_CHECK(cudaEventRecord(stop, a));
  CUDA_CHECK(cudaEventRecord(produced, a));
  CUDA_CHECK(cudaStreamWaitEvent(b, produced, 0));

  // While A sleeps on the device, its events (and B, which waits for one) are pending.
  cudaError_t q_event = cudaEventQuery(stop);
  cudaError_t q_stream = cudaStreamQuery(b);
  rt::clear_not_ready("cudaEventQuery/cudaStreamQuery while pending");
  CUDA_EXPECT(q_event, cudaErrorNotReady, "event.query_pending");
  CUDA_EXPECT(q_stream, cudaErrorNotReady, "stream.query_pending_waits_on_event");

  auto enqueue0 = std::chrono::steady_clock::now();
  consume<<<(n + 255) / 256, 256, 0, b>>>(d_y, d_z, n);
  LAUNCH_CHECK("consume");
  CUDA_CHECK(cudaMemcpyAsync(h_out, d_z, bytes, cudaMemcpyDeviceToHost, b));
  // Information only (CUDA does not promise that enqueueing never blocks): on a GPU this takes
  // microseconds, although B cannot start for another ~200 ms.
  std::printf("enqueueing B's kernel and copy took %.3f ms\n",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - enqueue0).count());
  // The callback checks, when it runs, that the copy before it has landed.
  CUDA_CHECK(cudaLaunchHostFunc(b, on_stream_done, &cb));

  CUDA_CHECK(cudaEventSynchronize(stop));
  CUDA_EXPECT(cudaEventQuery(stop), cudaSuccess, "event.query_done");
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  std::printf("elapsed around delay+produce: %.3f ms\n", ms);
  CHECK(ms > 0.0f, "event.elapsed_positive", "%f ms", ms);
  CHECK(ms >= 150.0f && ms < 60000.0f, "event.elapsed_covers_delay", "%f ms around a 200 ms device delay", ms);

  // Poll B until it drains (cudaStreamQuery eventually cudaSuccess).
  auto t0 = std::chrono::steady_clock::now();
  cudaError_t q = cudaErrorNotReady;
  while ((q = cudaStreamQuery(b)) == cudaErrorNotReady &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  rt::clear_not_ready("cudaStreamQuery loop");
  CUDA_EXPECT(q, cudaSuccess, "stream.query_eventually_success");
  CUDA_CHECK(cudaStreamSynchronize(b));
  CHECK(cb.ran == 1, "callback.ran_once", "ran %d times", cb.ran.load());
  CHECK(cb.correct == n, "callback.saw_preceding_copy", "%d of %d results were in place when it ran", cb.correct.load(),
        n);
  {
    int bad = -1;
    for (int i = 0; i < n; i++)
      if (h_out[i] != i * 2 + 1 + 3) {
        bad = i;
        break;
      }
    CHECK(bad < 0, "wait_event.consumer_saw_producer", "h_out[%d] = %d, expected %d", bad, bad < 0 ? 0 : h_out[bad],
          bad * 2 + 4);
  }

  // ---- the high-priority stream runs work too
  {
    fill<<<(n + 255) / 256, 256, 0, hi>>>(d_z, 1000, n);
    LAUNCH_CHECK("fill on the high-priority stream");
    CUDA_CHECK(cudaMemcpyAsync(h_out, d_z, bytes, cudaMemcpyDeviceToHost, hi));
    CUDA_CHECK(cudaStreamSynchronize(hi));
    int bad = -1;
    for (int i = 0; i < n; i++)
      if (h_out[i] != 1000 + i) {
        bad = i;
        break;
      }
    CHECK(bad < 0, "priority_stream.result", "h_out[%d] = %d", bad, bad < 0 ? 0 : h_out[bad]);
  }

  // ---- host functions run in stream order, interleaved with device work
  {
    Order order;
    Step steps[4] = {{&order, 1}, {&order, 2}, {&order, 3}, {&order, 4}};
    CUDA_CHECK(cudaLaunchHostFunc(a, record_step, &steps[0]));
    delay<<<1, 1, 0, a>>>(20 * MS);
    LAUNCH_CHECK("delay");
    CUDA_CHECK(cudaLaunchHostFunc(a, record_step, &steps[1]));
    CUDA_CHECK(cudaEventRecord(produced, a));
    // B: waits for A's step 2 before its own step 3; A's step 4 comes after another delay.
    CUDA_CHECK(cudaStreamWaitEvent(b, produced, 0));
    CUDA_CHECK(cudaLaunchHostFunc(b, record_step, &steps[2]));
    delay<<<1, 1, 0, a>>>(100 * MS);
    LAUNCH_CHECK("delay");
    CUDA_CHECK(cudaLaunchHostFunc(a, record_step, &steps[3]));
    CUDA_CHECK(cudaStreamSynchronize(a));
    CUDA_CHECK(cudaStreamSynchronize(b));
    std::lock_guard<std::mutex> g(order.m);
    bool ok = order.seq.size() == 4 && order.seq[0] == 1 && order.seq[1] == 2 && order.seq[2] == 3 && order.seq[3] == 4;
    CHECK(ok, "callback.stream_order", "order %d %d %d %d (size %zu)", order.seq.size() > 0 ? order.seq[0] : -1,
          order.seq.size() > 1 ? order.seq[1] : -1, order.seq.size() > 2 ? order.seq[2] : -1,
          order.seq.size() > 3 ? order.seq[3] : -1, order.seq.size());
  }

  // ---- events: timing-disabled event cannot be timed; an event recorded on an idle stream
  {
    float t = 0;
    cudaError_t e = cudaEventElapsedTime(&t, start, produced);
    CUDA_EXPECT(e, cudaErrorInvalidResourceHandle, "event.elapsed_needs_timing");
    CUDA_EXPECT(cudaGetLastError(), cudaErrorInvalidResourceHandle, "event.elapsed_error_recorded");
    cudaEvent_t e2;
    CUDA_CHECK(cudaEventCreate(&e2));
    CUDA_CHECK(cudaEventRecord(e2, b));
    CUDA_CHECK(cudaEventSynchronize(e2));
    CUDA_EXPECT(cudaEventQuery(e2), cudaSuccess, "event.idle_stream_done");
    float t2 = -1;
    CUDA_CHECK(cudaEventElapsedTime(&t2, start, e2));
    CHECK(t2 >= ms, "event.later_event_later", "start->e2 %f ms, start->stop %f ms", t2, ms);
    CUDA_CHECK(cudaEventDestroy(e2));
  }

  // ---- the legacy default stream orders with blocking streams; device sync drains everything
  {
    cudaStream_t blocking;
    CUDA_CHECK(cudaStreamCreate(&blocking));
    fill<<<(n + 255) / 256, 256, 0, blocking>>>(d_x, 7, n);
    LAUNCH_CHECK("fill on a blocking stream");
    CUDA_CHECK(cudaMemcpy(h_out, d_x, bytes, cudaMemcpyDeviceToHost));  // legacy stream: after the fill
    int bad = -1;
    for (int i = 0; i < n; i++)
      if (h_out[i] != 7 + i) {
        bad = i;
        break;
      }
    CHECK(bad < 0, "legacy_stream.orders_after_blocking", "h_out[%d] = %d", bad, bad < 0 ? 0 : h_out[bad]);
    CUDA_CHECK(cudaStreamDestroy(blocking));
  }

  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  CUDA_CHECK(cudaEventDestroy(produced));
  CUDA_CHECK(cudaStreamDestroy(a));
  CUDA_CHECK(cudaStreamDestroy(b));
  CUDA_CHECK(cudaStreamDestroy(hi));
  CUDA_CHECK(cudaFree(d_x));
  CUDA_CHECK(cudaFree(d_y));
  CUDA_CHECK(cudaFree(d_z));
  CUDA_CHECK(cudaFreeHost(h_in));
  CUDA_CHECK(cudaFreeHost(h_out));
  CUDA_EXPECT(cudaGetLastError(), cudaSuccess, "error.none_at_end");
  return rt::finish();
}
