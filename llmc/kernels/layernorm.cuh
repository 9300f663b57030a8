// LayerNorm over the last dimension (eps 1e-5): forward, forward fused with the residual add that
// precedes it in a transformer block, and backward. One warp per row for the row statistics; the
// weight and bias gradients use the deterministic chunked column sums of reduction.cuh (no atomics).
#pragma once

#include <cstddef>

#include "llmc/cuda_common.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/precision.h"

namespace llmc {

constexpr float kLayerNormEps = 1e-5f;
constexpr int kLayerNormBlock = 256;  // 8 warps = 8 rows per block

// One warp normalises one row. If `residual_b` is non-null the row is first formed as
// residual_out = residual_a + residual_b (rounded to Tx, and that rounded value is what is normalised,
// so the backward sees exactly the stored input); otherwise the row is residual_a itself.
// mean/rstd may be null (inference). Two passes for the variance (no E[x^2]-E[x]^2 cancellation).
template <typename Tx>
__global__ void layernorm_forward_kernel(Tx* out, float* mean, float* rstd, Tx* residual_out, const Tx* residual_a,
                                         const Tx* residual_b, const Tx* weight, const Tx* bias, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= N) return;  // whole warps leave together; no block-wide barrier below
  const Tx* x = residual_a + static_cast<size_t>(row) * C;
  if (residual_b != nullptr) {
    const Tx* b = residual_b + static_cast<size_t>(row) * C;
    Tx* r = residual_out + static_cast<size_t>(row) * C;
    for (int c = lane; c < C; c += kWarpSize) r[c] = from_float<Tx>(to_float(x[c]) + to_float(b[c]));
    x = r;  // each lane re-reads only the elements it wrote itself
  }
  float sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) sum += to_float(x[c]);
  const float row_mean = warp_reduce_sum(sum) / C;
  float squares = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float centered = to_float(x[c]) - row_mean;
    squares += centered * centered;
  }
  const float row_rstd = rsqrtf(warp_reduce_sum(squares) / C + kLayerNormEps);
  Tx* y = out + static_cast<size_t>(row) * C;
  for (int c = lane; c < C; c += kWarpSize) {
    const float normalized = (to_float(x[c]) - row_mean) * row_rstd;
    y[c] = from_float<Tx>(normalized * to_float(weight[c]) + to_float(bias[c]));
  }
  if (lane == 0) {
    if (mean != nullptr) mean[row] = row_mean;
    if (rstd != nullptr) rstd[row] = row_rstd;
  }
}

// out (N,C) = LayerNorm(inp) * weight + bias; mean, rstd (N) saved for the backward (may be null).
inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                              const floatX* bias, int N, int C, cudaStream_t stream) {
  const int rows_per_block = kLayerNormBlock / kWarpSize;
  const double nc = static_cast<double>(N) * C, x = sizeof(floatX);
  const KernelCost cost{2 * nc * x + 2.0 * C * x + 8.0 * N, 8 * nc};
  LLMC_LAUNCH_COSTED(cost, layernorm_forward_kernel<floatX>, dim3(static_cast<unsigned>(ceil_div(N, rows_per_block))),
              dim3(kLayerNormBlock), 0, stream, out, mean, rstd, static_cast<floatX*>(nullptr), inp,
              static_cast<const floatX*>(nullptr), weight, bias, N, C);
}

// residual (N,C) = inp1 + inp2, then out = LayerNorm(residual) * weight + bias in the same pass.
// residual must not alias out; it may alias inp1 or inp2.
inline void fused_residual_layernorm_forward(floatX* residual, floatX* out, float* mean, float* rstd,
                                             const floatX* inp1, const floatX* inp2, const floatX* weight,
                                             const floatX* bias, int N, int C, cudaStream_t stream) {
  const int rows_per_block = kLayerNormBlock / kWarpSize;
  const double nc = static_cast<double>(N) * C, x = sizeof(floatX);
  const KernelCost cost{4 * nc * x + 2.0 * C * x + 8.0 * N, 9 * nc};
  LLMC_LAUNCH_COSTED(cost, layernorm_forward_kernel<floatX>, dim3(static_cast<unsigned>(ceil_div(N, rows_per_block))),
              dim3(kLayerNormBlock), 0, stream, out, mean, rstd, residual, inp1, inp2, weight, bias, N, C);
}

// dinp (+)= rstd * (w*dout - mean_c(w*dout) - xhat * mean_c(w*dout*xhat)), one warp per row.
template <typename Tx>
__global__ void layernorm_backward_input_kernel(Tx* dinp, const Tx* dout, const Tx* inp, const Tx* weight,
                                                const float* mean, const float* rstd, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const Tx* dy = dout + static_cast<size_t>(row) * C;
  const Tx* x = inp + static_cast<size_t>(row) * C;
  const float row_mean = mean[row], row_rstd = rstd[row];
  float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float dnorm = to_float(weight[c]) * to_float(dy[c]);
    dnorm_sum += dnorm;
    dnorm_xhat_sum += dnorm * (to_float(x[c]) - row_mean) * row_rstd;
  }
  const float dnorm_mean = warp_reduce_sum(dnorm_sum) / C;
  const float dnorm_xhat_mean = warp_reduce_sum(dnorm_xhat_sum) / C;
  Tx* dx = dinp + static_cast<size_t>(row) * C;
  for (int c = lane; c < C; c += kWarpSize) {
    const float xhat = (to_float(x[c]) - row_mean) * row_rstd;
    const float dnorm = to_float(weight[c]) * to_float(dy[c]);
    dx[c] = from_float<Tx>(to_float(dx[c]) + row_rstd * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean));
  }
}

// Per (row chunk, column): partial sums of dout * xhat (for dweight) and of dout (for dbias).
// partials: [num_chunks][C] for dweight, followed by [num_chunks][C] for dbias.
template <typename Tx>
__global__ void layernorm_backward_param_partials_kernel(float* partials, const Tx* dout, const Tx* inp,
                                                         const float* mean, const float* rstd, int N, int C,
                                                         int rows_per_chunk, int num_chunks) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int chunk = blockIdx.y;
  if (c >= C) return;
  const int chunk_end = (chunk + 1) * rows_per_chunk;
  const int row_end = chunk_end < N ? chunk_end : N;
  float dweight_sum = 0.0f, dbias_sum = 0.0f;
  for (int row = chunk * rows_per_chunk; row < row_end; row++) {
    const float dy = to_float(dout[static_cast<size_t>(row) * C + c]);
    const float xhat = (to_float(inp[static_cast<size_t>(row) * C + c]) - mean[row]) * rstd[row];
    dweight_sum += dy * xhat;
    dbias_sum += dy;
  }
  partials[static_cast<size_t>(chunk) * C + c] = dweight_sum;
  partials[(static_cast<size_t>(num_chunks) + chunk) * C + c] = dbias_sum;
}

// Floats of scratch that layernorm_backward needs for N rows of C columns.
inline size_t layernorm_backward_scratch_floats(int N, int C) {
  return static_cast<size_t>(2) * column_chunking(N).num_chunks * C;
}

// Accumulates dinp (N,C) +=, dweight (C) +=, dbias (C) += (dinp accumulates because it is the gradient
// of the residual stream). inp is the LayerNorm input (for the fused form: the residual it wrote);
// mean, rstd from the forward. scratch: layernorm_backward_scratch_floats(N, C) floats of device memory.
inline void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout, const floatX* inp,
                               const floatX* weight, const float* mean, const float* rstd, int N, int C,
                               float* scratch, size_t scratch_floats, cudaStream_t stream) {
  require_scratch("layernorm_backward", scratch_floats, layernorm_backward_scratch_floats(N, C));
  const int rows_per_block = kLayerNormBlock / kWarpSize;
  const double nc = static_cast<double>(N) * C, x = sizeof(floatX);
  const ColumnChunking chunks = column_chunking(N);
  const KernelCost input_cost{4 * nc * x + C * x + 8.0 * N, 14 * nc};
  const KernelCost partials_cost{2 * nc * x + 8.0 * N + 8.0 * chunks.num_chunks * C, 5 * nc};
  LLMC_LAUNCH_COSTED(input_cost, layernorm_backward_input_kernel<floatX>, dim3(static_cast<unsigned>(ceil_div(N, rows_per_block))),
              dim3(kLayerNormBlock), 0, stream, dinp, dout, inp, weight, mean, rstd, N, C);
  const ColumnChunking chunking = column_chunking(N);
  constexpr int kColumnBlock = 128;
  LLMC_LAUNCH_COSTED(partials_cost, layernorm_backward_param_partials_kernel<floatX>,
              dim3(static_cast<unsigned>(ceil_div(C, kColumnBlock)), static_cast<unsigned>(chunking.num_chunks)),
              dim3(kColumnBlock), 0, stream, scratch, dout, inp, mean, rstd, N, C, chunking.rows_per_chunk,
              chunking.num_chunks);
  sum_column_partials(dweight, scratch, chunking.num_chunks, C, /*accumulate=*/true, stream);
  sum_column_partials(dbias, scratch + static_cast<size_t>(chunking.num_chunks) * C, chunking.num_chunks, C,
                      /*accumulate=*/true, stream);
}

}  // namespace llmc
