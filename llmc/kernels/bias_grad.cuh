// Bias gradient of a linear layer: dbias[oc] (+)= sum over rows of dout[row, oc], computed with the
// deterministic chunked column sums of reduction.cuh (fp32 partials, fixed-order final sum).
#pragma once

#include <cstddef>

#include "llmc/cuda_common.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/precision.h"

namespace llmc {

template <typename Tx>
__global__ void bias_grad_partials_kernel(float* partials, const Tx* dout, int N, int OC, int rows_per_chunk) {
  const int oc = blockIdx.x * blockDim.x + threadIdx.x;
  const int chunk = blockIdx.y;
  if (oc >= OC) return;
  const int chunk_end = (chunk + 1) * rows_per_chunk;
  const int row_end = chunk_end < N ? chunk_end : N;
  float sum = 0.0f;
  for (int row = chunk * rows_per_chunk; row < row_end; row++)
    sum += to_float(dout[static_cast<size_t>(row) * OC + oc]);
  partials[static_cast<size_t>(chunk) * OC + oc] = sum;
}

// Floats of scratch that bias_grad needs for N rows of OC columns.
inline size_t bias_grad_scratch_floats(int N, int OC) {
  return static_cast<size_t>(column_chunking(N).num_chunks) * OC;
}

// dbias (OC) = (accumulate ? dbias : 0) + column sums of dout (N,OC).
inline void bias_grad(floatX* dbias, const floatX* dout, int N, int OC, bool accumulate, float* scratch,
                      size_t scratch_floats, cudaStream_t stream) {
  require_scratch("bias_grad", scratch_floats, bias_grad_scratch_floats(N, OC));
  const ColumnChunking chunking = column_chunking(N);
  constexpr int kColumnBlock = 128;
  const dim3 grid(static_cast<unsigned>(ceil_div(OC, kColumnBlock)), static_cast<unsigned>(chunking.num_chunks));
  const double nc = static_cast<double>(N) * OC;
  const KernelCost cost{nc * sizeof(floatX) + 4.0 * chunking.num_chunks * OC, nc};
  LLMC_LAUNCH_COSTED(cost, bias_grad_partials_kernel<floatX>, grid, dim3(kColumnBlock), 0, stream, scratch, dout, N, OC,
              chunking.rows_per_chunk);
  sum_column_partials(dbias, scratch, chunking.num_chunks, OC, accumulate, stream);
}

}  // namespace llmc
