// Tests of warp-synchronous operations, run by both targets: shuffle reductions and scans,
// shuffles with sub-warp widths, votes, shuffles of bf16, the kernels' xor butterfly (one warp operation in the
// emulation). Expected values come from host models written from the CUDA Programming Guide's description of each
// intrinsic.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/reduction.cuh"
#include "test/support/device_buffer.h"
#include "test/support/test_helpers.h"

namespace {

using llmc::test::DeviceBuffer;
using llmc::test::float_bits;

constexpr unsigned kFullMask = 0xffffffffu;

// Butterfly (xor) reduction: every lane ends with the warp's sum. Down reduction: lane 0 does.
__global__ void warp_reductions_kernel(const int* input, int* xor_sums, int* down_sums) {
  const int global = blockIdx.x * blockDim.x + threadIdx.x;
  int butterfly = input[global];
  for (int offset = 16; offset > 0; offset /= 2) butterfly += __shfl_xor_sync(kFullMask, butterfly, offset);
  xor_sums[global] = butterfly;
  int down = input[global];
  for (int offset = 16; offset > 0; offset /= 2) down += __shfl_down_sync(kFullMask, down, offset);
  if (threadIdx.x % 32 == 0) down_sums[global / 32] = down;
}

TEST(Warp, ShuffleReductions) {
  const int block = 128, blocks = 3, n = block * blocks;
  std::vector<int> input(n);
  for (int i = 0; i < n; ++i) input[i] = (i * 131) % 97 - 40;
  DeviceBuffer<int> d_in(input), d_xor(n), d_down(n / 32);
  LLMC_LAUNCH(warp_reductions_kernel, blocks, block, 0, nullptr, d_in.get(), d_xor.get(), d_down.get());
  const std::vector<int> xor_sums = d_xor.download_raw(), down_sums = d_down.download_raw();
  for (int w = 0; w < n / 32; ++w) {
    int expected = 0;
    for (int lane = 0; lane < 32; ++lane) expected += input[32 * w + lane];
    EXPECT_EQ(down_sums[w], expected) << "warp " << w;
    for (int lane = 0; lane < 32; ++lane) EXPECT_EQ(xor_sums[32 * w + lane], expected);
  }
}

// Inclusive prefix sum over the warp with __shfl_up_sync (Hillis-Steele).
__global__ void warp_scan_kernel(const float* input, float* output) {
  const int global = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x % 32;
  float value = input[global];
  for (int offset = 1; offset < 32; offset *= 2) {
    const float from_below = __shfl_up_sync(kFullMask, value, offset);
    if (lane >= offset) value += from_below;
  }
  output[global] = value;
}

TEST(Warp, InclusiveScanWithShuffleUp) {
  const int n = 64;
  std::vector<float> input(n);
  for (int i = 0; i < n; ++i) input[i] = static_cast<float>((i * 7) % 11);  // integers: exact sums
  DeviceBuffer<float> d_in(input), d_out(n);
  LLMC_LAUNCH(warp_scan_kernel, 1, n, 0, nullptr, d_in.get(), d_out.get());
  const std::vector<float> out = d_out.download_raw();
  for (int w = 0; w < 2; ++w) {
    float running = 0.0f;
    for (int lane = 0; lane < 32; ++lane) {
      running += input[32 * w + lane];
      EXPECT_EQ(out[32 * w + lane], running) << "lane " << lane;
    }
  }
}

// All four shuffles with a sub-warp width; each lane's value is its lane index * 10.
__global__ void shuffle_width_kernel(int width, int src, int delta, int xor_mask, int* idx_out,
                                     int* up_out, int* down_out, int* xor_out) {
  const int lane = threadIdx.x;
  const int value = lane * 10;
  idx_out[lane] = __shfl_sync(kFullMask, value, src, width);
  up_out[lane] = __shfl_up_sync(kFullMask, value, delta, width);
  down_out[lane] = __shfl_down_sync(kFullMask, value, delta, width);
  xor_out[lane] = __shfl_xor_sync(kFullMask, value, xor_mask, width);
}

TEST(Warp, ShufflesWithSubWarpWidth) {
  for (int width : {32, 16, 8, 4}) {
    // xor_mask = width + 1 reaches into the neighbouring group: the later one for even groups.
    const int src = 13, delta = 3, xor_mask = width < 32 ? width + 1 : 1;
    DeviceBuffer<int> d_idx(32), d_up(32), d_down(32), d_xor(32);
    LLMC_LAUNCH(shuffle_width_kernel, 1, 32, 0, nullptr, width, src, delta, xor_mask, d_idx.get(), d_up.get(),
                d_down.get(), d_xor.get());
    const auto idx = d_idx.download_raw(), up = d_up.download_raw(), down = d_down.download_raw(), xr = d_xor.download_raw();
    for (int lane = 0; lane < 32; ++lane) {
      // Programming Guide: lanes form groups of `width`; __shfl_sync reads srcLane % width of the
      // group; up/down read lane -/+ delta, or keep their own value outside the group; xor reads
      // lane ^ laneMask, keeping its own value when that lies in a later group.
      const int group_start = lane / width * width;
      EXPECT_EQ(idx[lane], (group_start + src % width) * 10) << "width " << width;
      EXPECT_EQ(up[lane], (lane - delta >= group_start ? lane - delta : lane) * 10) << "width " << width;
      EXPECT_EQ(down[lane], (lane + delta < group_start + width ? lane + delta : lane) * 10)
          << "width " << width;
      const int xor_source = lane ^ xor_mask;
      EXPECT_EQ(xr[lane], (xor_source < group_start + width ? xor_source : lane) * 10)
          << "width " << width;
    }
  }
}

__global__ void vote_kernel(const int* predicates, unsigned* ballots, int* alls, int* anys) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int p = predicates[threadIdx.x];
  const unsigned ballot = __ballot_sync(kFullMask, p);
  const int all = __all_sync(kFullMask, p);
  const int any = __any_sync(kFullMask, p);
  if (lane == 0) {
    ballots[warp] = ballot;
    alls[warp] = all;
    anys[warp] = any;
  }
}

TEST(Warp, BallotAllAny) {
  std::vector<int> predicates(96);
  for (int i = 0; i < 32; ++i) predicates[i] = (i % 3 == 0) ? 5 : 0;  // mixed, non-1 "true"
  for (int i = 32; i < 64; ++i) predicates[i] = 1;                     // all true
  for (int i = 64; i < 96; ++i) predicates[i] = 0;                     // all false
  DeviceBuffer<int> d_pred(predicates), d_all(3), d_any(3);
  DeviceBuffer<unsigned> d_ballot(3);
  LLMC_LAUNCH(vote_kernel, 1, 96, 0, nullptr, d_pred.get(), d_ballot.get(), d_all.get(), d_any.get());
  const auto ballots = d_ballot.download_raw();
  const auto alls = d_all.download_raw(), anys = d_any.download_raw();
  for (int w = 0; w < 3; ++w) {
    unsigned expected = 0;
    for (int lane = 0; lane < 32; ++lane)
      if (predicates[32 * w + lane]) expected |= 1u << lane;
    EXPECT_EQ(ballots[w], expected);
    EXPECT_EQ(alls[w], expected == kFullMask ? 1 : 0);
    EXPECT_EQ(anys[w], expected != 0 ? 1 : 0);
  }
}

// A half-warp mask: only lanes 0-15 take part (the others skip the shuffle).
__global__ void half_warp_kernel(int* out) {
  const int lane = threadIdx.x;
  int value = lane + 1;
  if (lane < 16) {
    for (int offset = 8; offset > 0; offset /= 2) value += __shfl_xor_sync(0x0000ffffu, value, offset);
  }
  out[lane] = value;
}

TEST(Warp, PartialMaskShuffle) {
  DeviceBuffer<int> d_out(32);
  LLMC_LAUNCH(half_warp_kernel, 1, 32, 0, nullptr, d_out.get());
  const auto out = d_out.download_raw();
  for (int lane = 0; lane < 16; ++lane) EXPECT_EQ(out[lane], 136);  // 1 + ... + 16
  for (int lane = 16; lane < 32; ++lane) EXPECT_EQ(out[lane], lane + 1);
}

// Even lanes exit at once while odd lanes sum over the odd lanes of their warp: in the emulation, threads that
// exit and threads that wait alternate, so each wait hands a thread's fiber back to the scheduler in the
// middle of a run of threads that never wait (emulation.md, what is emulated).
__global__ void odd_lanes_sum_kernel(int* out) {
  const int global = blockIdx.x * blockDim.x + threadIdx.x;
  int value = global;
  if (threadIdx.x % 2 == 1) {
    for (int offset = 16; offset > 1; offset /= 2) value += __shfl_xor_sync(0xaaaaaaaau, value, offset);
  }
  out[global] = value;
}

TEST(Warp, LanesThatExitBesideLanesThatShuffle) {
  constexpr int kBlocks = 3, kThreads = 256;
  DeviceBuffer<int> d_out(kBlocks * kThreads);
  LLMC_LAUNCH(odd_lanes_sum_kernel, kBlocks, kThreads, 0, nullptr, d_out.get());
  const auto out = d_out.download_raw();
  for (int global = 0; global < kBlocks * kThreads; ++global) {
    const int warp_base = global / 32 * 32;
    int odd_sum = 0;
    for (int lane = 1; lane < 32; lane += 2) odd_sum += warp_base + lane;
    EXPECT_EQ(out[global], global % 2 == 1 ? odd_sum : global) << "thread " << global;
  }
}

// bf16 and float shuffles carry the exact bits.
__global__ void bf16_shuffle_kernel(const __nv_bfloat16* input, __nv_bfloat16* rotated, float* broadcast) {
  const int lane = threadIdx.x;
  rotated[lane] = __shfl_sync(kFullMask, input[lane], (lane + 1) % 32);
  broadcast[lane] = __shfl_sync(kFullMask, __bfloat162float(input[lane]), 7);
}

TEST(Warp, Bf16ShuffleKeepsBits) {
  std::vector<__nv_bfloat16> input(32);
  for (int i = 0; i < 32; ++i) input[i] = __float2bfloat16(0.1f * (i - 16));
  DeviceBuffer<__nv_bfloat16> d_in(input), d_rot(32);
  DeviceBuffer<float> d_b(32);
  LLMC_LAUNCH(bf16_shuffle_kernel, 1, 32, 0, nullptr, d_in.get(), d_rot.get(), d_b.get());
  const auto rotated = d_rot.download_raw();
  const auto broadcast = d_b.download_raw();
  for (int lane = 0; lane < 32; ++lane) {
    EXPECT_EQ(__bfloat16_as_ushort(rotated[lane]), __bfloat16_as_ushort(input[(lane + 1) % 32]));
    EXPECT_EQ(broadcast[lane], __bfloat162float(input[7]));
  }
}

// Block reduction in the style of the project's kernels: warp shuffle, then shared memory across
// warps, then a shuffle again.
__global__ void block_reduce_kernel(const float* input, float* output, int n) {
  __shared__ float warp_sums[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) sum += input[i];
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(kFullMask, sum, offset);
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  sum = lane < warps ? warp_sums[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(kFullMask, sum, offset);
  if (threadIdx.x == 0) *output = sum;
}

TEST(Warp, BlockReduceThroughWarpsAndSharedMemory) {
  const int n = 5000;
  std::vector<float> input(n);
  for (int i = 0; i < n; ++i) input[i] = static_cast<float>(i % 17);  // integer sum < 2^24: exact
  DeviceBuffer<float> d_in(input), d_out(1);
  LLMC_LAUNCH(block_reduce_kernel, 1, 1024, 0, nullptr, d_in.get(), d_out.get(), n);
  double expected = 0;
  for (float v : input) expected += v;
  EXPECT_EQ(d_out.download_raw()[0], static_cast<float>(expected));
}

// llmc::warp_butterfly (the reductions of llmc/kernels: warp_reduce_sum, group_reduce_sum, warp_reduce_max) and
// the __shfl_xor_sync loop it stands for, side by side in each lane, for every group size; out[2 * 32 * g + lane]
// is the butterfly's result, out[(2 * g + 1) * 32 + lane] the loop's, for group 1 << g.
template <bool kSum>
__global__ void butterfly_kernel(const float* input, float* out) {
  const int lane = threadIdx.x;
  for (int g = 0; g <= 5; ++g) {
    const int group = 1 << g;
    out[2 * 32 * g + lane] = llmc::warp_butterfly<kSum>(input[lane], group);
    float value = input[lane];
    for (int offset = group / 2; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(kFullMask, value, offset);
      value = kSum ? value + other : fmaxf(value, other);
    }
    out[(2 * g + 1) * 32 + lane] = value;
  }
}

// The host model: rounds of float operations on all lanes at once, offset = group / 2 .. 1, partner lane ^ offset.
std::vector<float> host_butterfly(const std::vector<float>& input, int group, bool sum) {
  std::vector<float> values = input;
  for (int offset = group / 2; offset > 0; offset /= 2) {
    std::vector<float> next(32);
    for (int lane = 0; lane < 32; ++lane) {
      const float other = values[lane ^ offset];
      next[lane] = sum ? values[lane] + other : std::fmax(values[lane], other);
    }
    values = next;
  }
  return values;
}

template <bool kSum>
void expect_butterfly_bits(const std::vector<float>& input) {
  DeviceBuffer<float> d_in(input), d_out(12 * 32);
  LLMC_LAUNCH(butterfly_kernel<kSum>, 1, 32, 0, nullptr, d_in.get(), d_out.get());
  const std::vector<float> out = d_out.download_raw();
  for (int g = 0; g <= 5; ++g) {
    const std::vector<float> expected = host_butterfly(input, 1 << g, kSum);
    for (int lane = 0; lane < 32; ++lane) {
      EXPECT_EQ(float_bits(out[2 * 32 * g + lane]), float_bits(expected[lane]))
          << "butterfly, group " << (1 << g) << " lane " << lane;
      EXPECT_EQ(float_bits(out[(2 * g + 1) * 32 + lane]), float_bits(expected[lane]))
          << "loop, group " << (1 << g) << " lane " << lane;
    }
  }
}

// Magnitudes far apart, so that another order of the additions gives other bits (the model's order is the only
// one that passes); an infinity and a NaN for the maxima (fmaxf takes the number). Not signed zeros: which zero
// fmaxf(-0, +0) returns differs between x86's maxss, glibc and PTX's max, and with the argument order.
TEST(Warp, ButterflyAddsAndComparesInTheShuffleLoopsOrder) {
  std::vector<float> sums(32);
  for (int lane = 0; lane < 32; ++lane)
    sums[lane] = (lane % 3 == 0 ? 1.0e8f : 1.0f) * (lane % 2 ? -1.0f : 1.0f) + 0.37f * static_cast<float>(lane);
  expect_butterfly_bits<true>(sums);
  std::vector<float> maxima(32);
  for (int lane = 0; lane < 32; ++lane) maxima[lane] = -1.0f - static_cast<float>((lane * 7) % 32);
  maxima[17] = std::numeric_limits<float>::quiet_NaN();
  maxima[30] = -std::numeric_limits<float>::infinity();
  expect_butterfly_bits<false>(maxima);
}

}  // namespace
