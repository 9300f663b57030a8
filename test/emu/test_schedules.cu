// The emulation's scheduling and memory model, which make a kernel that is wrong on a GPU fail here:
// warps that drift apart (drift schedule), blocks in a random order, shared memory that starts poisoned
// in every block, ldmatrix reading its rows when a lane executes it, atomics that really contend, and
// copies that are asynchronous wherever CUDA allows. Emulation-only: the schedule is an emulation
// setting, and the outcomes tested here are undefined (or timing-dependent) on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/mma.cuh"
#include "test/support/device_buffer.h"
#include "test/support/gpu_test.h"
#include "test/support/stream_gate.h"

namespace {

using llmc::test::DeviceBuffer;
using llmc::test::Gate;

#define SKIP_WITHOUT_EMULATION_SETTING()                                                         \
  do {                                                                                  \
    if (!LLMC_IS_EMULATION) GTEST_SKIP() << "emulation-only: an emulation setting or UB"; \
  } while (0)

#if defined(LLMC_EMULATION)
// Runs `body` with the device's schedule set to `mode` (seed 1), then restores the schedule.
template <class Body>
void with_schedule(llmc::emu::ScheduleMode mode, Body body) {
  auto& device = llmc::emu::EmulatedDevice::instance();
  const llmc::emu::Schedule saved = device.schedule();
  device.set_schedule(llmc::emu::Schedule{mode, 1});
  body();
  CUDA_CHECK(cudaDeviceSynchronize());
  device.set_schedule(saved);
}
#endif

#if defined(LLMC_EMULATION)  // launched only there: the schedule is an emulation setting
// Each warp copies its own 32 values into a shared tile, then reads the values of the next warp:
// without the barrier, a warp that runs ahead reads what the next warp has not written yet. The warp
// collective in between keeps lockstep warps together (as ldmatrix/mma do in the tensor-core kernels),
// which hides the missing barrier unless warps drift.
__global__ void rotate_through_shared_kernel(const float* in, float* out, bool with_barrier) {
  __shared__ float tile[128];
  tile[threadIdx.x] = in[blockIdx.x * 128 + threadIdx.x];
  const float scale = __shfl_sync(0xffffffffu, 1.0f, 0);
  if (with_barrier) __syncthreads();
  out[blockIdx.x * 128 + threadIdx.x] = scale * tile[(threadIdx.x + 32) % 128];
}

int wrong_rotations(bool with_barrier) {
  std::vector<float> input(4 * 128);
  for (size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>(i);
  DeviceBuffer<float> in(input), out(input.size());
  LLMC_LAUNCH(rotate_through_shared_kernel, 4, 128, 0, nullptr, in.get(), out.get(), with_barrier);
  const std::vector<float> result = out.download_raw();
  int wrong = 0;
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 128; ++t) wrong += result[b * 128 + t] != input[b * 128 + (t + 32) % 128];
  return wrong;
}
#endif

TEST(Schedules, DriftingWarpsExposeAMissingBarrierThatLockstepHides) {
  SKIP_WITHOUT_EMULATION_SETTING();
  LLMC_SKIP_PLANTED_RACE_UNDER_TSAN();
#if defined(LLMC_EMULATION)
  using llmc::emu::ScheduleMode;
  with_schedule(ScheduleMode::kForward, [] {
    EXPECT_EQ(wrong_rotations(true), 0);
    EXPECT_EQ(wrong_rotations(false), 0);  // lockstep: every warp writes before any reads (hidden)
  });
  with_schedule(ScheduleMode::kDrift, [] {
    EXPECT_EQ(wrong_rotations(true), 0);
    // Every block has a warp that runs first and reads the next warp's poisoned (NaN) slots.
    EXPECT_GE(wrong_rotations(false), 4 * 32);
  });
#endif
}

// Reads its static shared array before writing it: a GPU leaves it undefined, the emulation poisons it
// (0xFF bytes: NaN) for every block, so neither zeros nor the previous block's values show through.
__global__ void read_before_write_kernel(float* out) {
  __shared__ float scratch[32];
  out[blockIdx.x * 32 + threadIdx.x] = scratch[threadIdx.x];
  scratch[threadIdx.x] = 1.0f;
}

TEST(Schedules, StaticSharedMemoryStartsPoisonedInEveryBlock) {
  SKIP_WITHOUT_EMULATION_SETTING();
  DeviceBuffer<float> out(3 * 32);
  LLMC_LAUNCH(read_before_write_kernel, 3, 32, 0, nullptr, out.get());
  for (float value : out.download_raw()) EXPECT_TRUE(std::isnan(value));
}

#if defined(LLMC_EMULATION)  // launched only there: the schedule is an emulation setting
// Block b writes out[b] and reads out[b - 1], written by another block of the same launch: only a
// fixed block order makes that read "work".
__global__ void read_previous_block_kernel(float* out) {
  if (threadIdx.x != 0) return;
  out[blockIdx.x] = static_cast<float>(blockIdx.x);
  if (blockIdx.x > 0) out[blockIdx.x] += out[blockIdx.x - 1];
}
#endif

TEST(Schedules, DriftRunsBlocksInARandomOrder) {
  SKIP_WITHOUT_EMULATION_SETTING();
  LLMC_SKIP_PLANTED_RACE_UNDER_TSAN();
#if defined(LLMC_EMULATION)
  using llmc::emu::ScheduleMode;
  auto nan_count = [] {
    DeviceBuffer<float> out(64);
    CUDA_CHECK(cudaMemset(out.get(), 0xff, 64 * sizeof(float)));
    LLMC_LAUNCH(read_previous_block_kernel, 64, 32, 0, nullptr, out.get());
    int count = 0;
    for (float value : out.download_raw()) count += std::isnan(value);
    return count;
  };
  with_schedule(ScheduleMode::kForward, [&] { EXPECT_EQ(nan_count(), 0); });
  with_schedule(ScheduleMode::kDrift, [&] { EXPECT_GT(nan_count(), 0); });
#endif
}

#if defined(LLMC_EMULATION)  // launched only there: the schedule is an emulation setting
// Warp 0 loads an 8x8 bf16 tile with ldmatrix while warp 1 (no barrier in between: a bug) overwrites
// the tile. Under the forward schedule warp 0's lanes all execute ldmatrix before warp 1 runs, so they
// must see the old values: each lane reads its row when it executes the instruction.
__global__ void ldmatrix_then_overwrite_kernel(uint32_t* out) {
  __shared__ __align__(16) uint16_t tile[16 * 16];
  for (int i = threadIdx.x; i < 256; i += 64) tile[i] = 1;
  __syncthreads();
  if (threadIdx.x < 32) {
    uint32_t r[4];
    llmc::ldmatrix_x4(r, tile + (threadIdx.x % 16) * 16 + (threadIdx.x / 16) * 8);
    out[threadIdx.x] = r[0];
  } else {
    for (int i = threadIdx.x - 32; i < 256; i += 32) tile[i] = 2;
  }
}
#endif

TEST(Schedules, LdmatrixReadsItsRowWhenTheLaneExecutesIt) {
  SKIP_WITHOUT_EMULATION_SETTING();
  LLMC_SKIP_PLANTED_RACE_UNDER_TSAN();
#if defined(LLMC_EMULATION)
  with_schedule(llmc::emu::ScheduleMode::kForward, [] {
    DeviceBuffer<uint32_t> out(32);
    LLMC_LAUNCH(ldmatrix_then_overwrite_kernel, 1, 64, 0, nullptr, out.get());
    for (uint32_t value : out.download_raw()) EXPECT_EQ(value, 0x00010001u);  // two bf16 bit patterns "1"
  });
#endif
}

// Every thread increments a counter with a compare-and-swap loop and counts its failed attempts.
__global__ void cas_increment_kernel(unsigned* counter, unsigned* retries) {
  unsigned old = atomicAdd(counter, 0u);  // an atomic read
  unsigned failed = 0;
  while (true) {
    const unsigned seen = atomicCAS(counter, old, old + 1);
    if (seen == old) break;
    old = seen;
    ++failed;
  }
  atomicAdd(retries, failed);
}

TEST(Schedules, AtomicsContendSoCompareAndSwapLoopsRetry) {
  SKIP_WITHOUT_EMULATION_SETTING();
  DeviceBuffer<unsigned> counter(std::vector<unsigned>{0}), retries(std::vector<unsigned>{0});
  LLMC_LAUNCH(cas_increment_kernel, 4, 256, 0, nullptr, counter.get(), retries.get());
  EXPECT_EQ(counter.download_raw()[0], 4u * 256u);
  EXPECT_GT(retries.download_raw()[0], 0u);  // threads of a block interleave between read and swap
}

__global__ void float_sum_kernel(float* total) { atomicAdd(total, 1.0f); }

TEST(Schedules, FloatAtomicAddIsExactForSmallIntegers) {
  SKIP_WITHOUT_EMULATION_SETTING();
  DeviceBuffer<float> total(std::vector<float>{0.0f});
  LLMC_LAUNCH(float_sum_kernel, 8, 512, 0, nullptr, total.get());
  EXPECT_EQ(total.download_raw()[0], 4096.0f);  // every partial sum is an integer below 2^24: exact
}

// cudaMemcpyAsync from pageable memory returns once the source is staged: the caller may reuse its
// buffer at once, and the device copy happens later, in stream order (here: after the gate opens).
TEST(Schedules, PageableAsyncCopyIsStagedAndRunsInStreamOrder) {
  SKIP_WITHOUT_EMULATION_SETTING();
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer<int> device_copy(std::vector<int>(16, -1));
  std::vector<int> source(16, 7);
  Gate gate;
  CUDA_CHECK(cudaLaunchHostFunc(stream, Gate::wait_callback, &gate));
  CUDA_CHECK(cudaMemcpyAsync(device_copy.get(), source.data(), 16 * sizeof(int), cudaMemcpyHostToDevice, stream));
  std::fill(source.begin(), source.end(), 9);  // allowed: the copy has its own staged data
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);
  gate.open();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(device_copy.download_raw(), std::vector<int>(16, 7));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(Schedules, MemsetIsAsynchronous) {
  SKIP_WITHOUT_EMULATION_SETTING();
  DeviceBuffer<int> buffer(std::vector<int>(16, -1));
  Gate gate;
  CUDA_CHECK(cudaLaunchHostFunc(nullptr, Gate::wait_callback, &gate));
  CUDA_CHECK(cudaMemset(buffer.get(), 0, 16 * sizeof(int)));  // returns while the stream is held
  EXPECT_EQ(cudaStreamQuery(nullptr), cudaErrorNotReady);
  gate.open();
  EXPECT_EQ(buffer.download_raw(), std::vector<int>(16, 0));
}

}  // namespace
