// Tests of the runtime's stream and event semantics, run by both targets: in-order execution,
// cross-stream event waits (and the race without them), the legacy default stream's implicit
// ordering, event queries and elapsed times. A host function blocking on a gate that the test
// opens makes every "before/after" deterministic instead of timing-dependent.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "test/support/device_buffer.h"
#include "test/support/stream_gate.h"

namespace {

using llmc::test::DeviceBuffer;

using llmc::test::Gate;

__global__ void fill_kernel(int* target, int value, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) target[i] = value;
}

__global__ void copy_kernel(const int* source, int* target, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) target[i] = source[i];
}

// x = 3x + k: not commutative across k, so the result encodes the execution order.
__global__ void affine_kernel(int* x, int k) { *x = 3 * *x + k; }

TEST(Streams, WorkOnOneStreamRunsInOrder) {
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer<int> d_x(std::vector<int>{1});
  int* pinned = nullptr;
  CUDA_CHECK(cudaMallocHost(&pinned, sizeof(int)));
  int expected = 1;
  for (int k = 0; k < 20; ++k) {
    LLMC_LAUNCH(affine_kernel, 1, 1, 0, stream, d_x.get(), k);
    expected = 3 * expected + k;  // wraps identically: both sides are int arithmetic mod 2^32
  }
  CUDA_CHECK(cudaMemcpyAsync(pinned, d_x.get(), sizeof(int), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(*pinned, expected);
  CUDA_CHECK(cudaFreeHost(pinned));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// The producer is held by a gate; the consumer is already enqueued when the gate opens.
// Returns what the consumer copied. `wait_for_event` selects cudaStreamWaitEvent or not.
std::vector<int> run_producer_consumer(bool wait_for_event) {
  const int n = 256;
  cudaStream_t producer, consumer;
  CUDA_CHECK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
  cudaEvent_t produced;
  CUDA_CHECK(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
  DeviceBuffer<int> d_data(n), d_seen(n);
  CUDA_CHECK(cudaMemset(d_data.get(), 0, n * sizeof(int)));  // "stale" contents: zeros
  // cudaMemset is asynchronous, and the non-blocking streams below are not ordered after it.
  CUDA_CHECK(cudaDeviceSynchronize());
  int* seen = nullptr;
  CUDA_CHECK(cudaMallocHost(&seen, n * sizeof(int)));

  Gate gate;
  CUDA_CHECK(cudaLaunchHostFunc(producer, Gate::wait_callback, &gate));
  LLMC_LAUNCH(fill_kernel, 1, n, 0, producer, d_data.get(), 42, n);
  CUDA_CHECK(cudaEventRecord(produced, producer));
  if (wait_for_event) CUDA_CHECK(cudaStreamWaitEvent(consumer, produced, 0));
  LLMC_LAUNCH(copy_kernel, 1, n, 0, consumer, d_data.get(), d_seen.get(), n);
  CUDA_CHECK(cudaMemcpyAsync(seen, d_seen.get(), n * sizeof(int), cudaMemcpyDeviceToHost, consumer));
  if (wait_for_event) {
    // The consumer must still be waiting: the producer cannot have run.
    EXPECT_EQ(cudaEventQuery(produced), cudaErrorNotReady);
    EXPECT_EQ(cudaStreamQuery(consumer), cudaErrorNotReady);
    gate.open();
    CUDA_CHECK(cudaStreamSynchronize(consumer));
  } else {
    // Streams are independent: the consumer finishes while the producer is still held.
    CUDA_CHECK(cudaStreamSynchronize(consumer));
    gate.open();
  }
  CUDA_CHECK(cudaStreamSynchronize(producer));
  std::vector<int> result(seen, seen + n);
  CUDA_CHECK(cudaFreeHost(seen));
  CUDA_CHECK(cudaEventDestroy(produced));
  CUDA_CHECK(cudaStreamDestroy(producer));
  CUDA_CHECK(cudaStreamDestroy(consumer));
  return result;
}

TEST(Streams, ConsumerWaitingOnEventSeesProducerWrites) {
  const std::vector<int> seen = run_producer_consumer(/*wait_for_event=*/true);
  for (int value : seen) ASSERT_EQ(value, 42);
}

TEST(Streams, WithoutTheEventWaitTheConsumerReadsStaleData) {
  const std::vector<int> seen = run_producer_consumer(/*wait_for_event=*/false);
  for (int value : seen) ASSERT_EQ(value, 0);  // the race is real: streams run concurrently
}

TEST(Streams, LegacyDefaultStreamWaitsForBlockingStreams) {
  const int n = 64;
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));  // a blocking stream: ordered with the legacy stream
  DeviceBuffer<int> d_data(n);
  CUDA_CHECK(cudaMemset(d_data.get(), 0, n * sizeof(int)));
  Gate gate;
  CUDA_CHECK(cudaLaunchHostFunc(stream, Gate::wait_callback, &gate));
  LLMC_LAUNCH(fill_kernel, 1, n, 0, stream, d_data.get(), 7, n);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.open();
  });
  std::vector<int> host(n, -1);
  // cudaMemcpy runs on the legacy default stream, which waits for `stream`'s earlier work.
  CUDA_CHECK(cudaMemcpy(host.data(), d_data.get(), n * sizeof(int), cudaMemcpyDeviceToHost));
  opener.join();
  for (int value : host) ASSERT_EQ(value, 7);
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// Enough arithmetic per thread to take measurable time on a GPU as well.
__global__ void busy_kernel(float* out, int iterations) {
  float x = threadIdx.x * 1e-3f;
  for (int i = 0; i < iterations; ++i) x = x * 0.999f + 0.001f;
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

TEST(Streams, EventElapsedTimesArePositiveAndOrdered) {
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, middle, end;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&middle));
  CUDA_CHECK(cudaEventCreate(&end));
  DeviceBuffer<float> d_out(4 * 64);
  CUDA_CHECK(cudaEventRecord(start, stream));
  LLMC_LAUNCH(busy_kernel, 4, 64, 0, stream, d_out.get(), 20000);
  CUDA_CHECK(cudaEventRecord(middle, stream));
  LLMC_LAUNCH(busy_kernel, 4, 64, 0, stream, d_out.get(), 20000);
  CUDA_CHECK(cudaEventRecord(end, stream));
  CUDA_CHECK(cudaEventSynchronize(end));
  EXPECT_EQ(cudaEventQuery(middle), cudaSuccess);
  float first = 0, total = 0;
  CUDA_CHECK(cudaEventElapsedTime(&first, start, middle));
  CUDA_CHECK(cudaEventElapsedTime(&total, start, end));
  EXPECT_GT(first, 0.0f);
  EXPECT_GT(total, first);
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(middle));
  CUDA_CHECK(cudaEventDestroy(end));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(Streams, EventWithoutTimingRefusesElapsedTime) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreateWithFlags(&a, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&b, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(a, nullptr));
  CUDA_CHECK(cudaEventRecord(b, nullptr));
  CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, a, b), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
}

// Host callbacks run in stream order between kernels.
struct CallbackLog {
  std::vector<int> order;
  int* pinned_value;
};
void CUDART_CB record_value(void* log) {
  auto* self = static_cast<CallbackLog*>(log);
  self->order.push_back(*self->pinned_value);
}

TEST(Streams, HostFunctionsRunInStreamOrder) {
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, -1));
  int least = 0, greatest = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  EXPECT_LE(greatest, least);
  DeviceBuffer<int> d_value(1);
  CallbackLog log;
  CUDA_CHECK(cudaMallocHost(&log.pinned_value, sizeof(int)));
  for (int k = 1; k <= 3; ++k) {
    LLMC_LAUNCH(fill_kernel, 1, 1, 0, stream, d_value.get(), 10 * k, 1);
    CUDA_CHECK(cudaMemcpyAsync(log.pinned_value, d_value.get(), sizeof(int), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaLaunchHostFunc(stream, record_value, &log));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(log.order, (std::vector<int>{10, 20, 30}));
  CUDA_CHECK(cudaFreeHost(log.pinned_value));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(Device, PropertiesAndMemoryInfoAreSane) {
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  EXPECT_GE(count, 1);
  CUDA_CHECK(cudaSetDevice(0));
  cudaDeviceProp properties;
  CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  EXPECT_EQ(properties.warpSize, 32);
  EXPECT_EQ(properties.maxThreadsPerBlock, 1024);
  EXPECT_GE(properties.major, 8);
  EXPECT_GE(properties.sharedMemPerBlockOptin, size_t{163} * 1024);
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  EXPECT_GT(total_bytes, size_t{0});
  EXPECT_LE(free_bytes, total_bytes);
#if defined(LLMC_EMULATION)
  EXPECT_STREQ(properties.name, "Emulated CPU device");
#endif
}

TEST(Device, BadCallsReturnErrorsAndSetLastError) {
  (void)cudaGetLastError();
  int not_device_memory = 0;
  EXPECT_NE(cudaFree(&not_device_memory), cudaSuccess);
  EXPECT_NE(cudaPeekAtLastError(), cudaSuccess);
  EXPECT_NE(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // reading it cleared it
  try {
    CUDA_CHECK(cudaSetDevice(99));
    FAIL() << "cudaSetDevice(99) succeeded";
  } catch (const llmc::CudaError& error) {
    EXPECT_NE(std::string(error.what()).find("cudaSetDevice(99)"), std::string::npos) << error.what();
  }
  (void)cudaGetLastError();
}

}  // namespace
