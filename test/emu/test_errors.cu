// Errors a GPU would hide, caught by the emulation: barriers not reached by every thread, warp
// operations naming exited lanes, misaligned 128-bit accesses (death tests naming the kernel), and
// out-of-bounds shared/global accesses under AddressSanitizer (make test-asan). These behaviours are
// undefined on a GPU, so the nvcc build skips them (compute-sanitizer is the GPU-side tool).
#include <gtest/gtest.h>

#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/reduction.cuh"
#include "test/support/device_buffer.h"
#include "test/emu/emulation_only.h"
#include "test/support/gpu_test.h"

namespace {

using llmc::test::DeviceBuffer;

__global__ void early_exit_barrier_kernel(int* out) {
  if (threadIdx.x >= 16) return;  // half the block leaves before the barrier
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x % 2 == 0) {
    out[threadIdx.x] = 1;
    __syncthreads();
  } else {
    out[threadIdx.x] = 2;
    __syncthreads();
  }
}

__global__ void shuffle_with_exited_lane_kernel(int* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

// Warp 0 waits in a shuffle for a lane that sits at the block barrier: neither can finish.
__global__ void shuffle_versus_barrier_kernel(int* out) {
  int value = threadIdx.x;
  if (threadIdx.x != 3) value = __shfl_down_sync(0xffffffffu, value, 1);
  __syncthreads();
  out[threadIdx.x] = value;
}

// Lanes reducing over different group sizes would run different numbers of shuffles.
__global__ void butterfly_group_mismatch_kernel(float* out) {
  out[threadIdx.x] = llmc::warp_butterfly<true>(1.0f, threadIdx.x < 16 ? 32 : 16);
}

__global__ void misaligned_load_kernel(const float* in, float* out) {
  const llmc::f128 packed = llmc::load128(in + 1);  // 4 bytes past a 16-byte boundary
  out[threadIdx.x] = packed[0];
}

TEST(Errors, BarrierSkippedByExitedThreadsIsReportedWithKernelName) {
  SKIP_UNLESS_EMULATION();
  EXPECT_DEATH(
      {
        DeviceBuffer<int> out(64);
        LLMC_LAUNCH(early_exit_barrier_kernel, 2, 64, 0, nullptr, out.get());
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "early_exit_barrier_kernel.*block \\([01],0,0\\).*__syncthreads not reached by all threads");
}

TEST(Errors, BarriersInDivergentBranchesAreReported) {
  SKIP_UNLESS_EMULATION();
  EXPECT_DEATH(
      {
        DeviceBuffer<int> out(64);
        LLMC_LAUNCH(divergent_barrier_kernel, 1, 64, 0, nullptr, out.get());
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "divergent_barrier_kernel.*different __syncthreads calls");
}

TEST(Errors, ShuffleNamingAnExitedLaneIsReported) {
  SKIP_UNLESS_EMULATION();
  EXPECT_DEATH(
      {
        DeviceBuffer<int> out(32);
        LLMC_LAUNCH(shuffle_with_exited_lane_kernel, 1, 32, 0, nullptr, out.get());
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "shuffle_with_exited_lane_kernel.*__shfl_xor_sync.*which has exited");
}

TEST(Errors, ShuffleWaitingForALaneAtTheBarrierIsADeadlock) {
  SKIP_UNLESS_EMULATION();
  EXPECT_DEATH(
      {
        DeviceBuffer<int> out(64);
        LLMC_LAUNCH(shuffle_versus_barrier_kernel, 1, 64, 0, nullptr, out.get());
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "shuffle_versus_barrier_kernel.*deadlock.*threads 3: waiting at __syncthreads");
}

TEST(Errors, ButterflyOverDifferentGroupSizesIsReported) {
  SKIP_UNLESS_EMULATION();
  EXPECT_DEATH(
      {
        DeviceBuffer<float> out(32);
        LLMC_LAUNCH(butterfly_group_mismatch_kernel, 1, 32, 0, nullptr, out.get());
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "butterfly_group_mismatch_kernel.*lane 16 reduces groups of 16 lanes, lane 0 groups of 32");
}

TEST(Errors, MisalignedPackedLoadIsReported) {
  SKIP_UNLESS_EMULATION();
  EXPECT_DEATH(
      {
        DeviceBuffer<float> in(64);
        DeviceBuffer<float> out(32);
        LLMC_LAUNCH(misaligned_load_kernel, 1, 32, 0, nullptr, in.get(), out.get());
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "misaligned_load_kernel.*not 16-byte aligned");
}

// ---- a missing barrier: exposed by running the block's threads in both orders -------------------
// Each thread reads its neighbour's shared-memory slot. Without the barrier the emulation's result
// depends on the fiber order (as a GPU's depends on timing); with it, both orders agree.
#if defined(LLMC_EMULATION)  // only launched there: the fiber order is an emulation setting
__global__ void neighbour_read_kernel(int* out, int generation, bool with_barrier) {
  __shared__ int values[64];
  values[threadIdx.x] = generation + static_cast<int>(threadIdx.x);
  if (with_barrier) __syncthreads();
  out[threadIdx.x] = values[(threadIdx.x + 1) % 64];
}
#endif

TEST(Errors, BothThreadOrdersExposeAMissingBarrier) {
  SKIP_UNLESS_EMULATION();
  LLMC_SKIP_PLANTED_RACE_UNDER_TSAN();
#if defined(LLMC_EMULATION)
  auto& device = llmc::emu::EmulatedDevice::instance();
  const llmc::emu::Schedule initial_schedule = device.schedule();
  int generation = 1000;
  // Number of threads whose read did not see the neighbour's value of this launch.
  auto wrong_reads = [&](llmc::emu::ScheduleMode mode, bool with_barrier) {
    device.set_schedule(llmc::emu::Schedule{mode, 1});
    generation += 1000;
    DeviceBuffer<int> out(64);
    LLMC_LAUNCH(neighbour_read_kernel, 1, 64, 0, nullptr, out.get(), generation, with_barrier);
    const std::vector<int> seen = out.download_raw();
    int wrong = 0;
    for (int t = 0; t < 64; ++t) wrong += seen[t] != generation + (t + 1) % 64;
    return wrong;
  };
  using llmc::emu::ScheduleMode;
  EXPECT_EQ(wrong_reads(ScheduleMode::kForward, true), 0);
  EXPECT_EQ(wrong_reads(ScheduleMode::kReverse, true), 0);
  EXPECT_EQ(wrong_reads(ScheduleMode::kDrift, true), 0);
  EXPECT_EQ(wrong_reads(ScheduleMode::kForward, false), 63);  // threads 0-62 read before the write
  EXPECT_EQ(wrong_reads(ScheduleMode::kReverse, false), 1);   // thread 63 reads slot 0 too early
  // Drift: one warp runs to its end before the other starts, so at least warp 0's lane 31 or warp 1's
  // lane 31 (whichever runs first) reads its neighbour in the other warp before it is written.
  EXPECT_GE(wrong_reads(ScheduleMode::kDrift, false), 1);
  device.set_schedule(initial_schedule);
#endif
}

// ---- out-of-bounds accesses: AddressSanitizer build only --------------------------------------
#if defined(__SANITIZE_ADDRESS__)
#define SKIP_UNLESS_ASAN() SKIP_UNLESS_EMULATION()
#else
#define SKIP_UNLESS_ASAN()                                                                   \
  do {                                                                                       \
    SKIP_UNLESS_EMULATION();                                                                 \
    GTEST_SKIP() << "needs the AddressSanitizer build: make test-asan (-DLLMC_ASAN=ON)";      \
  } while (0)
#endif

__global__ void static_shared_overflow_kernel(int* out) {
  __shared__ int buffer[32];
  buffer[threadIdx.x + 1] = threadIdx.x;  // thread 31 writes buffer[32]
  __syncthreads();
  out[threadIdx.x] = buffer[threadIdx.x];
}

__global__ void dynamic_shared_overflow_kernel(int* out) {
  LLMC_DYNAMIC_SHARED(int, buffer);
  buffer[threadIdx.x + 1] = threadIdx.x;  // launched with 32 ints: thread 31 overflows
  __syncthreads();
  out[threadIdx.x] = buffer[threadIdx.x];
}

__global__ void global_overflow_kernel(const int* in, int* out) {
  out[threadIdx.x] = in[threadIdx.x + 1];  // reads one past the end of `in`
}

TEST(Errors, StaticSharedMemoryOverflowCaughtByAsan) {
  SKIP_UNLESS_ASAN();
  EXPECT_DEATH(
      {
        DeviceBuffer<int> out(32);
        LLMC_LAUNCH(static_shared_overflow_kernel, 1, 32, 0, nullptr, out.get());
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "AddressSanitizer: global-buffer-overflow");
}

TEST(Errors, DynamicSharedMemoryOverflowCaughtByAsan) {
  SKIP_UNLESS_ASAN();
  EXPECT_DEATH(
      {
        DeviceBuffer<int> out(32);
        LLMC_LAUNCH(dynamic_shared_overflow_kernel, 1, 32, 32 * sizeof(int), nullptr, out.get());
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "AddressSanitizer: heap-buffer-overflow");
}

TEST(Errors, GlobalMemoryOverflowCaughtByAsan) {
  SKIP_UNLESS_ASAN();
  EXPECT_DEATH(
      {
        DeviceBuffer<int> in(32);
        DeviceBuffer<int> out(32);
        LLMC_LAUNCH(global_overflow_kernel, 1, 32, 0, nullptr, in.get(), out.get());
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "AddressSanitizer: heap-buffer-overflow");
}

}  // namespace
