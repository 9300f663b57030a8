// Global gradient norm: the squared sum of a gradient buffer, or of several segments of one (a rank's
// shards of every bucket), in ONE launch with a fixed reduction order: each thread sums a fixed
// grid-stride slice of every segment in segment order, the block adds its threads in a fixed tree, and the
// blocks' partials are folded in block order inside the launch (reduction.cuh), so the result is bitwise
// reproducible. The device-side squared sum is what a sharded (multi-rank) trainer adds across ranks
// before the square root; clip_scale() then turns it into the clipping factor on the device, so that
// clipping needs no host round trip. global_norm() is the one-buffer convenience.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

constexpr int kGlobalNormBlock = 256;
constexpr int kGlobalNormMaxBlocks = 512;
// Elements per thread before a launch takes another block: a small buffer's blocks would otherwise each sum a
// few elements and pay the block's reduction and fold for them (on a GPU a little; in the emulation, where
// every barrier and shuffle switches through all of a block's threads, most of a tiny model's step).
constexpr int kGlobalNormElementsPerThread = 16;
constexpr int kMaxNormSegments = 64;  // buckets of a model: L + 2 for GPT-2 (50 for d48)

// Up to kMaxNormSegments (pointer, length) pairs, passed to the kernel by value.
template <typename Tx>
struct NormSegments {
  const Tx* data[kMaxNormSegments] = {};
  size_t length[kMaxNormSegments] = {};
  int count = 0;
  void add(const Tx* pointer, size_t n) {
    if (count == kMaxNormSegments)
      throw std::invalid_argument("NormSegments: more than " + std::to_string(kMaxNormSegments) + " segments");
    data[count] = pointer;
    length[count++] = n;
  }
  size_t total() const {
    size_t sum = 0;
    for (int s = 0; s < count; s++) sum += length[s];
    return sum;
  }
};

// Blocks for n elements in all: a fixed function of n, never of the device (at least 16 elements per thread,
// at most 512 blocks: every buffer of 2M elements or more gets 512).
inline int global_norm_num_blocks(size_t n) {
  long long blocks = ceil_div(static_cast<long long>(n), kGlobalNormBlock * kGlobalNormElementsPerThread);
  if (blocks > kGlobalNormMaxBlocks) blocks = kGlobalNormMaxBlocks;
  return blocks < 1 ? 1 : static_cast<int>(blocks);
}

// Floats of device scratch the squared sum of up to n elements needs (zero before its first use; every
// launch leaves its counters zero again). Sized for the most blocks, so any n <= the given one fits.
inline size_t global_norm_scratch_floats(size_t n) { return fold_scratch(1, global_norm_num_blocks(n), 1).floats(); }

template <typename Tx>
__global__ void squared_sum_kernel(float* out, bool accumulate, NormSegments<Tx> segments, BlockFold fold) {
  __shared__ float warp_totals[32];
  __shared__ unsigned fold_flag;
  float sum = 0.0f;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (int s = 0; s < LLMC_MUTANT("global_norm.first_segment_only", segments.count, 1); s++) {
    const Tx* data = segments.data[s];
    const size_t n = segments.length[s];
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
      const float x = to_float(data[i]);
      sum += x * x;
    }
  }
  sum = block_reduce_sum(sum, warp_totals);
  if (threadIdx.x == 0) fold.partials[blockIdx.x] = sum;
  fold_block_partials(fold, static_cast<int>(blockIdx.x), &fold_flag,
                      [&](int, float total) { out[0] = accumulate ? out[0] + total : total; });
}

// out_device[0] (+)= the sum of x^2 over every element of every segment (fp32), one launch. scratch:
// global_norm_scratch_floats(segments.total()) floats, zero before the first call.
inline void global_norm_squared(float* out_device, const NormSegments<floatX>& segments, bool accumulate,
                                float* scratch, size_t scratch_floats, cudaStream_t stream) {
  const size_t n = segments.total();
  require_scratch("global_norm_squared", scratch_floats, global_norm_scratch_floats(n));
  const int blocks = global_norm_num_blocks(n);
  const BlockFold fold = fold_in_scratch(scratch, fold_scratch(1, blocks, 1), 0, blocks, 1);
  const KernelCost cost{static_cast<double>(n) * sizeof(floatX) + 8.0 * blocks + 8.0, 2.0 * n};
  LLMC_LAUNCH_COSTED(cost, squared_sum_kernel<floatX>, dim3(static_cast<unsigned>(blocks)), dim3(kGlobalNormBlock), 0,
                     stream, out_device, accumulate, segments, fold);
}

// The one-segment form: out_device[0] (+)= sum of data[i]^2 over n elements.
inline void global_norm_squared(float* out_device, const floatX* data, size_t n, bool accumulate, float* scratch,
                                size_t scratch_floats, cudaStream_t stream) {
  NormSegments<floatX> segments;
  segments.add(data, n);
  global_norm_squared(out_device, segments, accumulate, scratch, scratch_floats, stream);
}

// sqrt(sum of data[i]^2), waiting for the stream. scratch: global_norm_scratch_floats(n) + 1 floats, zero
// before the first call.
inline float global_norm(const floatX* data, size_t n, float* scratch, size_t scratch_floats, cudaStream_t stream) {
  require_scratch("global_norm", scratch_floats, global_norm_scratch_floats(n) + 1);
  float* squared_sum_device = scratch + scratch_floats - 1;
  global_norm_squared(squared_sum_device, data, n, /*accumulate=*/false, scratch, scratch_floats - 1, stream);
  float squared_sum = 0.0f;
  CUDA_CHECK(cudaMemcpyAsync(&squared_sum, squared_sum_device, sizeof(float), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return std::sqrt(squared_sum);
}

// ---- clipping on the device ----------------------------------------------------------------------------
// scale[0] = max_norm / norm when the norm sqrt(squared[0]) is finite and above max_norm, else 1: the
// factor the optimizer multiplies the gradients by (llmc/kernels/adamw.cuh reads it on the device).
template <typename Unused>
__global__ void clip_scale_kernel(float* scale, const float* squared, float max_norm) {
  const float norm = sqrtf(squared[0]);
  // NaN and inf: no scaling.
  const bool finite = LLMC_MUTANT("clip_scale.scales_infinity", norm <= FLT_MAX, true);
  scale[0] = norm > max_norm && finite ? max_norm / norm : 1.0f;
}

inline void clip_scale(float* scale_device, const float* squared_device, float max_norm, cudaStream_t stream) {
  LLMC_LAUNCH_COSTED((KernelCost{8.0, 3.0}), clip_scale_kernel<float>, dim3(1), dim3(1), 0, stream, scale_device,
                     squared_device, max_norm);
}

}  // namespace llmc
