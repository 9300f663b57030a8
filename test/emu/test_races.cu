// The race detector: in the ThreadSanitizer build (-DLLMC_TSAN=ON) each emulated thread is a TSan
// thread, ordered with the others only as CUDA orders them (barriers, __syncwarp, kernel boundaries,
// stream order, events). Each planted race must be reported; the same kernels with the missing
// synchronisation restored must not be. Other builds skip these tests (they need TSan's reports).
// Run with TSAN_OPTIONS=halt_on_error=1 (CTest sets it): a report then stops the process.
#include <gtest/gtest.h>

#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "test/support/device_buffer.h"
#include "test/support/gpu_test.h"

namespace {

using llmc::test::DeviceBuffer;

#if defined(__SANITIZE_THREAD__)
#define SKIP_UNLESS_TSAN() GTEST_FLAG_SET(death_test_style, "threadsafe")
#else
#define SKIP_UNLESS_TSAN() GTEST_SKIP() << "needs the ThreadSanitizer build (-DLLMC_TSAN=ON, make test-tsan)"
#endif

constexpr const char* kRace = "ThreadSanitizer: data race";

// Every thread writes its slot and reads its neighbour's (across warps): needs the barrier.
__global__ void neighbour_kernel(float* out, bool with_barrier) {
  __shared__ float slots[128];
  slots[threadIdx.x] = static_cast<float>(threadIdx.x);
  if (with_barrier) __syncthreads();
  out[threadIdx.x] = slots[(threadIdx.x + 1) % 128];
}

// Lanes of one warp exchange values through shared memory: needs __syncwarp (no other warp involved).
__global__ void warp_exchange_kernel(float* out, bool with_syncwarp) {
  __shared__ float slots[32];
  slots[threadIdx.x] = static_cast<float>(threadIdx.x);
  if (with_syncwarp) __syncwarp();
  out[threadIdx.x] = slots[31 - threadIdx.x];
}

// Every thread adds 1 to one shared counter: atomically, or not (a lost-update race).
__global__ void shared_counter_kernel(int* out, bool atomic) {
  __shared__ int counter;
  if (threadIdx.x == 0) counter = 0;
  __syncthreads();
  if (atomic) {
    atomicAdd(&counter, 1);
  } else {
    counter += 1;
  }
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = counter;
}

// Thread 0 of every block adds the block's index to one global total: atomically, or not.
__global__ void global_total_kernel(int* total, bool atomic) {
  if (threadIdx.x != 0) return;
  if (atomic) {
    atomicAdd(total, static_cast<int>(blockIdx.x));
  } else {
    *total += static_cast<int>(blockIdx.x);
  }
}

template <class Launch>
void run_and_sync(Launch launch) {
  launch();
  CUDA_CHECK(cudaDeviceSynchronize());
}

TEST(Races, MissingBarrierIsReported) {
  SKIP_UNLESS_TSAN();
  DeviceBuffer<float> out(128);
  run_and_sync([&] { LLMC_LAUNCH(neighbour_kernel, 1, 128, 0, nullptr, out.get(), true); });
  EXPECT_DEATH(run_and_sync([&] { LLMC_LAUNCH(neighbour_kernel, 1, 128, 0, nullptr, out.get(), false); }), kRace);
}

TEST(Races, MissingSyncwarpIsReported) {
  SKIP_UNLESS_TSAN();
  DeviceBuffer<float> out(32);
  run_and_sync([&] { LLMC_LAUNCH(warp_exchange_kernel, 1, 32, 0, nullptr, out.get(), true); });
  EXPECT_DEATH(run_and_sync([&] { LLMC_LAUNCH(warp_exchange_kernel, 1, 32, 0, nullptr, out.get(), false); }),
               kRace);
}

TEST(Races, NonAtomicSharedAccumulationIsReported) {
  SKIP_UNLESS_TSAN();
  DeviceBuffer<int> out(2);
  run_and_sync([&] { LLMC_LAUNCH(shared_counter_kernel, 2, 256, 0, nullptr, out.get(), true); });
  EXPECT_EQ(out.download_raw(), (std::vector<int>{256, 256}));
  EXPECT_DEATH(run_and_sync([&] { LLMC_LAUNCH(shared_counter_kernel, 2, 256, 0, nullptr, out.get(), false); }),
               kRace);
}

TEST(Races, NonAtomicAccumulationAcrossBlocksIsReported) {
  SKIP_UNLESS_TSAN();
  DeviceBuffer<int> total(std::vector<int>{0});
  run_and_sync([&] { LLMC_LAUNCH(global_total_kernel, 16, 64, 0, nullptr, total.get(), true); });
  EXPECT_EQ(total.download_raw()[0], 120);
  EXPECT_DEATH(run_and_sync([&] { LLMC_LAUNCH(global_total_kernel, 16, 64, 0, nullptr, total.get(), false); }),
               kRace);
}

__global__ void fill_kernel(int* data, int value) { data[blockIdx.x * blockDim.x + threadIdx.x] = value; }
__global__ void consumer_copy_kernel(const int* in, int* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
}

// A producer stream fills a buffer that a consumer stream copies: without cudaStreamWaitEvent the
// two kernels are unordered, whatever order they happen to run in.
void producer_consumer(bool wait_for_event) {
  cudaStream_t producer, consumer;
  CUDA_CHECK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
  cudaEvent_t filled;
  CUDA_CHECK(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming));
  DeviceBuffer<int> data(256), copy(256);
  CUDA_CHECK(cudaDeviceSynchronize());
  LLMC_LAUNCH(fill_kernel, 2, 128, 0, producer, data.get(), 7);
  CUDA_CHECK(cudaEventRecord(filled, producer));
  if (wait_for_event) CUDA_CHECK(cudaStreamWaitEvent(consumer, filled, 0));
  LLMC_LAUNCH(consumer_copy_kernel, 2, 128, 0, consumer, data.get(), copy.get());
  CUDA_CHECK(cudaStreamSynchronize(consumer));
  CUDA_CHECK(cudaEventDestroy(filled));
  CUDA_CHECK(cudaStreamDestroy(producer));
  CUDA_CHECK(cudaStreamDestroy(consumer));
}

TEST(Races, MissingStreamWaitEventIsReported) {
  SKIP_UNLESS_TSAN();
  producer_consumer(true);
  // Reported whichever kernel happens to run first: TSan checks the order, not the timing.
  EXPECT_DEATH(producer_consumer(false), kRace);
}

// The host rewrites a pinned staging buffer while an asynchronous copy from it may still be pending.
void reuse_pinned_staging(bool wait_for_copy) {
  int* pinned = nullptr;
  CUDA_CHECK(cudaMallocHost(&pinned, 64 * sizeof(int)));
  DeviceBuffer<int> device_copy(64);
  CUDA_CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < 64; ++i) pinned[i] = i;
  CUDA_CHECK(cudaMemcpyAsync(device_copy.get(), pinned, 64 * sizeof(int), cudaMemcpyHostToDevice, nullptr));
  if (wait_for_copy) CUDA_CHECK(cudaStreamSynchronize(nullptr));
  for (int i = 0; i < 64; ++i) pinned[i] = -i;
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaFreeHost(pinned));
}

TEST(Races, HostReusingAPinnedBufferBeforeItsCopyIsReported) {
  SKIP_UNLESS_TSAN();
  reuse_pinned_staging(true);
  EXPECT_DEATH(reuse_pinned_staging(false), kRace);
}

}  // namespace
