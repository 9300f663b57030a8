// Tests of cp.async (llmc/cuda/async_copies.cuh): on both targets a double-buffered pipeline, the
// zero-fill form and 4-byte copies give exact results; in the emulation a copy is poison until its wait_group covers
// it, so a missing wait, a too-weak wait or a missing barrier after the wait is observed, and misuse
// that is undefined on a GPU (exiting with copies in flight, touching a destination or source in
// flight, misaligned or non-shared addresses) stops the program naming the kernel.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/async_copies.cuh"
#include "test/support/device_buffer.h"
#include "test/emu/emulation_only.h"
#include "test/support/gpu_test.h"

namespace {

using llmc::test::DeviceBuffer;

constexpr int kThreads = 64;     // two warps
constexpr int kChunkInts = 4;    // 16 bytes
constexpr uint16_t kPoison = 0xffa5;

// Sums `tiles` tiles of kThreads x 4 ints with two shared buffers: tile t+1 is copied while tile t is
// summed. Thread i adds column i % 4 of rows written by other warps, so every copy and barrier counts.
__global__ void pipelined_sum_kernel(const int* in, int tiles, int* out) {
  __shared__ __align__(16) int buffer[2][kThreads * kChunkInts];
  llmc::AsyncCopies copies;
  const int t = threadIdx.x;
  copies.copy16(&buffer[0][t * kChunkInts], in + t * kChunkInts);
  copies.commit();
  int sum = 0;
  for (int tile = 0; tile < tiles; ++tile) {
    copies.wait<0>();
    __syncthreads();  // tile `tile` landed for every thread; the other buffer is no longer read
    if (tile + 1 < tiles) {
      copies.copy16(&buffer[(tile + 1) % 2][t * kChunkInts], in + ((tile + 1) * kThreads + t) * kChunkInts);
    }
    copies.commit();
    const int* current = buffer[tile % 2];
    for (int row = 0; row < kThreads; ++row) sum += current[((row + 32) % kThreads) * kChunkInts + t % kChunkInts];
  }
  out[t] = sum;
}

__global__ void zero_fill_kernel(const int* in, int* out) {
  __shared__ __align__(16) int buffer[kThreads * kChunkInts];
  llmc::AsyncCopies copies;
  const int t = threadIdx.x;
  copies.copy16_or_zero(&buffer[t * kChunkInts], in + t * kChunkInts, t % 2 == 0);
  copies.commit();
  copies.wait<0>();
  __syncthreads();
  for (int i = 0; i < kChunkInts; ++i) out[t * kChunkInts + i] = buffer[t * kChunkInts + i];
}

// 4-byte copies (.ca) of floats at any 4-byte alignment, zero-filled for odd threads.
__global__ void copy4_kernel(const float* in, float* out) {
  __shared__ float buffer[kThreads];
  llmc::AsyncCopies copies;
  const int t = threadIdx.x;
  copies.copy4_or_zero(&buffer[t], in + 1 + t, t % 2 == 0);  // in + 1: not 16-byte aligned
  copies.commit();
  copies.wait<0>();
  __syncthreads();
  out[t] = buffer[(t + 32) % kThreads];
}

TEST(CpAsync, FourByteCopiesAndZeroFill) {
  std::vector<float> host(kThreads + 1);
  for (size_t i = 0; i < host.size(); ++i) host[i] = 0.5f * static_cast<float>(i);
  DeviceBuffer<float> in(host), out(kThreads);
  LLMC_LAUNCH(copy4_kernel, 1, kThreads, 0, nullptr, static_cast<const float*>(in.get()), out.get());
  const std::vector<float> got = out.download_raw();
  for (int t = 0; t < kThreads; ++t) {
    const int source = (t + 32) % kThreads;
    EXPECT_EQ(got[t], source % 2 == 0 ? host[1 + source] : 0.0f) << t;
  }
}

TEST(CpAsync, PipelinedCopiesGiveExactSums) {
  constexpr int kTiles = 5;
  std::vector<int> host(kTiles * kThreads * kChunkInts);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<int>(i * 7 % 101);
  std::vector<int> expected(kThreads, 0);
  for (int tile = 0; tile < kTiles; ++tile)
    for (int t = 0; t < kThreads; ++t)
      for (int row = 0; row < kThreads; ++row) expected[t] += host[(tile * kThreads + row) * kChunkInts + t % kChunkInts];
  DeviceBuffer<int> in(host), out(kThreads);
  LLMC_LAUNCH(pipelined_sum_kernel, 1, kThreads, 0, nullptr, static_cast<const int*>(in.get()), kTiles, out.get());
  EXPECT_EQ(out.download_raw(), expected);
}

TEST(CpAsync, ZeroFillWritesZerosWithoutReading) {
  std::vector<int> host(kThreads * kChunkInts);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<int>(i) + 1;
  DeviceBuffer<int> in(host), out(host.size());
  LLMC_LAUNCH(zero_fill_kernel, 1, kThreads, 0, nullptr, static_cast<const int*>(in.get()), out.get());
  const std::vector<int> got = out.download_raw();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], (i / kChunkInts) % 2 == 0 ? host[i] : 0) << i;
}

// ---- emulation-only: what the emulation makes visible ------------------------------------------

// Each thread records the first 16-bit word of its destination after each step: right after the
// issue, after wait<1> (one newer group still allowed in flight), and after wait<0>.
__global__ void observe_groups_kernel(const int* in, uint16_t* seen) {
  __shared__ __align__(16) int buffer[2][kThreads * kChunkInts];
  llmc::AsyncCopies copies;
  const int t = threadIdx.x;
  auto first_word = [](const int* p) {
    uint16_t word;
    std::memcpy(&word, p, 2);
    return word;
  };
  copies.copy16(&buffer[0][t * kChunkInts], in + t * kChunkInts);
  seen[t * 6 + 0] = first_word(&buffer[0][t * kChunkInts]);
  copies.commit();
  copies.copy16(&buffer[1][t * kChunkInts], in + (kThreads + t) * kChunkInts);
  copies.commit();
  copies.wait<1>();
  seen[t * 6 + 1] = first_word(&buffer[0][t * kChunkInts]);
  seen[t * 6 + 2] = first_word(&buffer[1][t * kChunkInts]);
  copies.copy16(&buffer[0][t * kChunkInts], in + t * kChunkInts);  // never committed before the wait
  copies.wait<0>();
  seen[t * 6 + 3] = first_word(&buffer[1][t * kChunkInts]);
  seen[t * 6 + 4] = first_word(&buffer[0][t * kChunkInts]);
  copies.commit();
  copies.wait<0>();
  seen[t * 6 + 5] = first_word(&buffer[0][t * kChunkInts]);
}

TEST(CpAsyncEmulation, CopyIsPoisonUntilItsWaitGroup) {
  SKIP_UNLESS_EMULATION();
  std::vector<int> host(2 * kThreads * kChunkInts);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<int>(i);
  DeviceBuffer<int> in(host);
  DeviceBuffer<uint16_t> seen(kThreads * 6);
  LLMC_LAUNCH(observe_groups_kernel, 1, kThreads, 0, nullptr, static_cast<const int*>(in.get()), seen.get());
  const std::vector<uint16_t> got = seen.download_raw();
  for (int t = 0; t < kThreads; ++t) {
    const uint16_t first = static_cast<uint16_t>(t * kChunkInts), second = static_cast<uint16_t>((kThreads + t) * kChunkInts);
    EXPECT_EQ(got[t * 6 + 0], kPoison) << "thread " << t << ": visible right after the issue";
    EXPECT_EQ(got[t * 6 + 1], first) << "thread " << t << ": older group not landed by wait<1>";
    EXPECT_EQ(got[t * 6 + 2], kPoison) << "thread " << t << ": newest group landed before its wait";
    EXPECT_EQ(got[t * 6 + 3], second) << "thread " << t << ": wait<0> left a committed group in flight";
    EXPECT_EQ(got[t * 6 + 4], kPoison) << "thread " << t << ": an uncommitted copy landed at wait<0>";
    EXPECT_EQ(got[t * 6 + 5], first) << "thread " << t;
  }
}

// Every thread reads the chunk a thread of the other warp copied, with or without a barrier after
// the wait. Without it, the warp whose wait completes first reads chunks the other warp has not
// landed (or not even issued) yet.
template <bool kBarrier>
__global__ void read_other_warp_kernel(const int* in, int* out) {
  __shared__ __align__(16) int buffer[kThreads * kChunkInts];
  llmc::AsyncCopies copies;
  const int t = threadIdx.x;
  copies.copy16(&buffer[t * kChunkInts], in + t * kChunkInts);
  copies.commit();
  copies.wait<0>();
  if (kBarrier) __syncthreads();
  out[t] = buffer[((t + 32) % kThreads) * kChunkInts];
}

TEST(CpAsyncEmulation, MissingBarrierAfterTheWaitIsSeen) {
  SKIP_UNLESS_EMULATION();
  LLMC_SKIP_PLANTED_RACE_UNDER_TSAN();
  std::vector<int> host(kThreads * kChunkInts);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<int>(i) + 1;
  DeviceBuffer<int> in(host), out(kThreads);
  LLMC_LAUNCH(read_other_warp_kernel<true>, 1, kThreads, 0, nullptr, static_cast<const int*>(in.get()), out.get());
  std::vector<int> got = out.download_raw();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(got[t], ((t + 32) % kThreads) * kChunkInts + 1);
  LLMC_LAUNCH(read_other_warp_kernel<false>, 1, kThreads, 0, nullptr, static_cast<const int*>(in.get()), out.get());
  got = out.download_raw();
  int wrong = 0;
  for (int t = 0; t < kThreads; ++t) wrong += got[t] != ((t + 32) % kThreads) * kChunkInts + 1;
  EXPECT_GT(wrong, 0) << "a read of another warp's copy without a barrier went unnoticed";
}

__global__ void exit_in_flight_kernel(const int* in) {
  __shared__ __align__(16) int buffer[kThreads * kChunkInts];
  llmc::AsyncCopies copies;
  copies.copy16(&buffer[threadIdx.x * kChunkInts], in + threadIdx.x * kChunkInts);
  copies.commit();
}

__global__ void write_destination_in_flight_kernel(const int* in) {
  __shared__ __align__(16) int buffer[kThreads * kChunkInts];
  llmc::AsyncCopies copies;
  copies.copy16(&buffer[threadIdx.x * kChunkInts], in + threadIdx.x * kChunkInts);
  copies.commit();
  buffer[threadIdx.x * kChunkInts] = 1;
  copies.wait<0>();
}

__global__ void change_source_in_flight_kernel(int* in) {
  __shared__ __align__(16) int buffer[kThreads * kChunkInts];
  llmc::AsyncCopies copies;
  copies.copy16(&buffer[threadIdx.x * kChunkInts], in + threadIdx.x * kChunkInts);
  copies.commit();
  in[threadIdx.x * kChunkInts] += 1;
  copies.wait<0>();
}

__global__ void misaligned_copy_kernel(const int* in) {
  __shared__ __align__(16) int buffer[kThreads * kChunkInts + kChunkInts];
  llmc::AsyncCopies copies;
  copies.copy16(&buffer[threadIdx.x * kChunkInts + 1], in + threadIdx.x * kChunkInts);
  copies.commit();
  copies.wait<0>();
}

__global__ void copy_into_device_memory_kernel(const int* in, int* out) {
  llmc::AsyncCopies copies;
  copies.copy16(out + threadIdx.x * kChunkInts, in + threadIdx.x * kChunkInts);
  copies.commit();
  copies.wait<0>();
}

__global__ void overlapping_copies_kernel(const int* in) {
  __shared__ __align__(16) int buffer[kThreads * kChunkInts];
  llmc::AsyncCopies copies;
  copies.copy16(&buffer[threadIdx.x * kChunkInts], in + threadIdx.x * kChunkInts);
  copies.commit();
  copies.copy16(&buffer[threadIdx.x * kChunkInts], in + threadIdx.x * kChunkInts);
  copies.commit();
  copies.wait<0>();
}

class CpAsyncMisuse : public ::testing::Test {
 protected:
  void SetUp() override { SKIP_UNLESS_EMULATION(); }
  static std::vector<int> ramp() {
    std::vector<int> host(kThreads * kChunkInts);
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<int>(i);
    return host;
  }
};

TEST_F(CpAsyncMisuse, ExitWithCopiesInFlight) {
  EXPECT_DEATH(
      {
        DeviceBuffer<int> in(ramp());
        LLMC_LAUNCH(exit_in_flight_kernel, 1, kThreads, 0, nullptr, static_cast<const int*>(in.get()));
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "exit_in_flight_kernel.*never covered by a cp.async.wait_group");
}

TEST_F(CpAsyncMisuse, DestinationWrittenInFlight) {
  EXPECT_DEATH(
      {
        DeviceBuffer<int> in(ramp());
        LLMC_LAUNCH(write_destination_in_flight_kernel, 1, kThreads, 0, nullptr, static_cast<const int*>(in.get()));
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "write_destination_in_flight_kernel.*shared memory written while a cp.async copy");
}

TEST_F(CpAsyncMisuse, SourceChangedInFlight) {
  EXPECT_DEATH(
      {
        DeviceBuffer<int> in(ramp());
        LLMC_LAUNCH(change_source_in_flight_kernel, 1, kThreads, 0, nullptr, in.get());
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "change_source_in_flight_kernel.*global source changed");
}

TEST_F(CpAsyncMisuse, MisalignedDestination) {
  EXPECT_DEATH(
      {
        DeviceBuffer<int> in(ramp());
        LLMC_LAUNCH(misaligned_copy_kernel, 1, kThreads, 0, nullptr, static_cast<const int*>(in.get()));
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "misaligned_copy_kernel.*not 16-byte aligned");
}

TEST_F(CpAsyncMisuse, DestinationInDeviceMemory) {
  EXPECT_DEATH(
      {
        DeviceBuffer<int> in(ramp());
        DeviceBuffer<int> out(kThreads * kChunkInts);
        LLMC_LAUNCH(copy_into_device_memory_kernel, 1, kThreads, 0, nullptr, static_cast<const int*>(in.get()),
                    out.get());
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "copy_into_device_memory_kernel.*not shared memory");
}

TEST_F(CpAsyncMisuse, SecondCopyIntoBytesInFlight) {
  EXPECT_DEATH(
      {
        DeviceBuffer<int> in(ramp());
        LLMC_LAUNCH(overlapping_copies_kernel, 1, kThreads, 0, nullptr, static_cast<const int*>(in.get()));
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "overlapping_copies_kernel.*still in flight");
}

}  // namespace
