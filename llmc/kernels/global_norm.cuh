// Global gradient norm for clipping: squared sum of a gradient buffer with a fixed reduction order
// (each block sums a fixed grid-stride slice, block partials summed in block order by one block), so
// the result is bitwise reproducible. The device-side squared sum is what a sharded (multi-rank)
// trainer adds across ranks before the square root; global_norm() is the one-buffer convenience.
#pragma once

#include <cmath>
#include <cstddef>
#include <stdexcept>

#include "llmc/cuda_common.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/precision.h"

namespace llmc {

constexpr int kGlobalNormBlock = 256;
constexpr int kGlobalNormMaxBlocks = 512;

// Number of partial sums for n elements: a fixed function of n, never of the device.
inline int global_norm_num_blocks(size_t n) {
  long long blocks = ceil_div(static_cast<long long>(n), kGlobalNormBlock);
  if (blocks > kGlobalNormMaxBlocks) blocks = kGlobalNormMaxBlocks;
  return blocks < 1 ? 1 : static_cast<int>(blocks);
}

// Floats of device scratch global_norm_squared needs (the block partials).
inline size_t global_norm_scratch_floats(size_t n) { return static_cast<size_t>(global_norm_num_blocks(n)); }

template <typename Tx>
__global__ void squared_sum_partials_kernel(float* partials, const Tx* data, size_t n) {
  __shared__ float warp_totals[32];
  float sum = 0.0f;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = to_float(data[i]);
    sum += x * x;
  }
  sum = block_reduce_sum(sum, warp_totals);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// One block of BlockSize threads: out[0] = (accumulate ? out[0] : 0) + sum of partials, each thread
// summing a fixed slice.
template <int BlockSize>
__global__ void sum_partials_kernel(float* out, const float* partials, int count, bool accumulate) {
  __shared__ float warp_totals[32];
  float sum = 0.0f;
  for (int i = threadIdx.x; i < count; i += BlockSize) sum += partials[i];
  sum = block_reduce_sum(sum, warp_totals);
  if (threadIdx.x == 0) out[0] = accumulate ? out[0] + sum : sum;
}

// out_device[0] (+)= sum of data[i]^2 over n elements (fp32). accumulate adds to the previous value, so
// several buffers can be combined in a fixed order. scratch: global_norm_scratch_floats(n) floats.
inline void global_norm_squared(float* out_device, const floatX* data, size_t n, bool accumulate, float* scratch,
                                size_t scratch_floats, cudaStream_t stream) {
  require_scratch("global_norm_squared", scratch_floats, global_norm_scratch_floats(n));
  const int blocks = global_norm_num_blocks(n);
  const KernelCost partials_cost{static_cast<double>(n) * sizeof(floatX) + 4.0 * blocks, 2.0 * n};
  LLMC_LAUNCH_COSTED(partials_cost, squared_sum_partials_kernel<floatX>, dim3(static_cast<unsigned>(blocks)), dim3(kGlobalNormBlock), 0,
              stream, scratch, data, n);
  LLMC_LAUNCH_COSTED((KernelCost{4.0 * blocks + 8.0, 1.0 * blocks}), sum_partials_kernel<kGlobalNormBlock>, dim3(1), dim3(kGlobalNormBlock), 0, stream, out_device, scratch,
              blocks, accumulate);
}

// sqrt(sum of data[i]^2), waiting for the stream. scratch: global_norm_scratch_floats(n) + 1 floats.
inline float global_norm(const floatX* data, size_t n, float* scratch, size_t scratch_floats, cudaStream_t stream) {
  require_scratch("global_norm", scratch_floats, global_norm_scratch_floats(n) + 1);
  float* squared_sum_device = scratch + global_norm_scratch_floats(n);
  global_norm_squared(squared_sum_device, data, n, /*accumulate=*/false, scratch, scratch_floats - 1, stream);
  float squared_sum = 0.0f;
  CUDA_CHECK(cudaMemcpyAsync(&squared_sum, squared_sum_device, sizeof(float), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return std::sqrt(squared_sum);
}

}  // namespace llmc
