// Batched Frobenius normalisation of contiguous matrices, deterministic: per-chunk sums of squares in a
// fixed chunking (a function of the matrix size only), then each block of the scaling kernel adds its
// matrix's partials in chunk order. Used by Polar Express: X = G / (||G||_F * scale + eps).
#pragma once

#include <cstddef>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

// How one matrix of `elements` values is split for the sum of squares.
struct FrobeniusChunking {
  int chunks;
  size_t chunk_elements;
};

inline FrobeniusChunking frobenius_chunking(size_t elements) {
  if (elements == 0) return FrobeniusChunking{1, 1};  // one empty chunk: the sum is 0
  constexpr size_t kMinChunkElements = 4096;          // 16 per thread of a 256-thread block
  constexpr long long kMaxChunks = 64;                // the scaling kernel adds these serially
  long long chunks = ceil_div(static_cast<long long>(elements), static_cast<long long>(kMinChunkElements));
  if (chunks > kMaxChunks) chunks = kMaxChunks;
  if (chunks < 1) chunks = 1;
  const size_t chunk_elements = static_cast<size_t>(ceil_div(static_cast<long long>(elements), chunks));
  return FrobeniusChunking{
      static_cast<int>(ceil_div(static_cast<long long>(elements), static_cast<long long>(chunk_elements))),
      chunk_elements};
}

// partials[matrix * chunks + chunk] = sum of x^2 over the chunk. Grid (chunks, batch).
template <typename Tx>
__global__ void frobenius_partials_kernel(const Tx* x, size_t elements, size_t chunk_elements, int chunks,
                                          float* partials) {
  __shared__ float warp_totals[kWarpSize];
  const Tx* matrix = x + static_cast<size_t>(blockIdx.y) * elements;
  const size_t begin = static_cast<size_t>(blockIdx.x) * chunk_elements;
  const size_t end = begin + chunk_elements < elements ? begin + chunk_elements : elements;
  float sum = 0.0f;
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float value = to_float(matrix[i]);
    sum += value * value;
  }
  sum = block_reduce_sum(sum, warp_totals);
  if (threadIdx.x == 0) partials[static_cast<size_t>(blockIdx.y) * chunks + blockIdx.x] = sum;
}

// out = in / (sqrt(sum of the matrix's partials) * scale + eps), rounded to Tx. Grid (blocks, batch).
// `out` may be `in` (each element is read and written by the same thread). Every thread adds the partials
// itself, in chunk order (the same bits in each): at most 64 loads of one address per warp, where one thread's
// sum shared through a barrier would hold the whole block there (and cost every emulated thread two fiber
// switches).
template <typename Tx>
__global__ void frobenius_scale_kernel(const Tx* in, Tx* out, size_t elements, int chunks, const float* partials,
                                       float scale, float eps) {
  float total = 0.0f;
  for (int g = 0; g < chunks; g++) total += partials[static_cast<size_t>(blockIdx.y) * chunks + g];
  const float divisor = sqrtf(total) * scale + eps;
  const size_t offset = static_cast<size_t>(blockIdx.y) * elements;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < elements; i += stride)
    out[offset + i] = from_float<Tx>(to_float(in[offset + i]) / divisor);
}

// Floats of scratch frobenius_normalize needs for `batch` matrices of `elements` values.
inline size_t frobenius_scratch_floats(size_t elements, int batch) {
  return static_cast<size_t>(frobenius_chunking(elements).chunks) * batch;
}

// out[b] = in[b] / (||in[b]||_F * scale + eps) for `batch` contiguous matrices of `elements` values each.
inline void frobenius_normalize(const floatX* in, floatX* out, size_t elements, int batch, float scale, float eps,
                                float* scratch, size_t scratch_floats, cudaStream_t stream) {
  require_scratch("frobenius_normalize", scratch_floats, frobenius_scratch_floats(elements, batch));
  const FrobeniusChunking chunking = frobenius_chunking(elements);
  constexpr int kBlock = 256;
  const double n = static_cast<double>(elements) * batch;  // the sum of squares reads once, the scaling twice
  LLMC_LAUNCH_COSTED((KernelCost{n * sizeof(floatX), 2.0 * n}), frobenius_partials_kernel<floatX>,
                     dim3(static_cast<unsigned>(chunking.chunks), static_cast<unsigned>(batch)), dim3(kBlock), 0,
                     stream, in, elements, chunking.chunk_elements, chunking.chunks, scratch);
  const unsigned blocks = elementwise_grid(elements, kBlock) < 1024 ? elementwise_grid(elements, kBlock) : 1024;
  LLMC_LAUNCH_COSTED((KernelCost{2.0 * n * sizeof(floatX), n}), frobenius_scale_kernel<floatX>,
                     dim3(blocks, static_cast<unsigned>(batch)), dim3(kBlock), 0, stream, in, out, elements,
                     chunking.chunks, static_cast<const float*>(scratch), scale, eps);
}

}  // namespace llmc
