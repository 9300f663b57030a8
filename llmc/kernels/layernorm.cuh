// LayerNorm over the last dimension (eps 1e-5): forward, forward fused with the residual add that
// precedes it in a transformer block, and backward in one launch. One warp per row for the row statistics,
// rows read in 16-byte packets (packet_io.cuh); the weight and bias gradients are summed over the rows in a
// fixed order, finished inside the backward's launch by the fold of reduction.cuh (no atomics).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/packet_io.cuh"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

constexpr float kLayerNormEps = 1e-5f;
constexpr int kLayerNormBlock = 256;  // forward: 8 warps = 8 rows per block

// One warp normalises one row, lane l taking the 16-byte packets l, l+32, ... of it. If `residual_b` is
// non-null the row is first formed as residual_out = residual_a + residual_b (rounded to Tx, and that
// rounded value is what is normalised, so the backward sees exactly the stored input); otherwise the row
// is residual_a itself. mean/rstd may be null (inference). Two passes for the variance (no
// E[x^2]-E[x]^2 cancellation); each lane re-reads only packets it read (or wrote) itself.
template <typename Tx, bool kVector>
__global__ void layernorm_forward_kernel(Tx* out, float* mean, float* rstd, Tx* residual_out, const Tx* residual_a,
                                         const Tx* residual_b, const Tx* weight, const Tx* bias, int N, int C) {
  constexpr int P = packet_size<Tx>();
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= N) return;  // whole warps leave together; no block-wide barrier below
  const int packets = static_cast<int>(ceil_div(C, P));
  const Tx* x = residual_a + static_cast<size_t>(row) * C;
  if (residual_b != nullptr) {
    const Tx* b = residual_b + static_cast<size_t>(row) * C;
    Tx* r = residual_out + static_cast<size_t>(row) * C;
    for (int p = lane; p < packets; p += kWarpSize) {
      float xa[P], xb[P];
      load_packet<Tx, kVector>(xa, x, p * P, C);
      load_packet<Tx, kVector>(xb, b, p * P, C);
      for (int j = 0; j < P; j++) xa[j] += xb[j];
      store_packet<Tx, kVector>(r, p * P, C, xa);
    }
    x = r;
  }
  float sum = 0.0f;
  for (int p = lane; p < packets; p += kWarpSize) {
    float v[P];
    load_packet<Tx, kVector>(v, x, p * P, C);
    for (int j = 0; j < P; j++) sum += v[j];
  }
  const float row_mean = warp_reduce_sum(sum) / C;
  float squares = 0.0f;
  for (int p = lane; p < packets; p += kWarpSize) {
    float v[P];
    load_packet<Tx, kVector>(v, x, p * P, C);
    for (int j = 0; j < P && p * P + j < C; j++) squares += (v[j] - row_mean) * (v[j] - row_mean);
  }
  const float row_rstd = rsqrtf(warp_reduce_sum(squares) / C + kLayerNormEps);
  Tx* y = out + static_cast<size_t>(row) * C;
  for (int p = lane; p < packets; p += kWarpSize) {
    float v[P], w[P], b[P];
    load_packet<Tx, kVector>(v, x, p * P, C);
    load_packet<Tx, kVector>(w, weight, p * P, C);
    load_packet<Tx, kVector>(b, bias, p * P, C);
    for (int j = 0; j < P; j++) v[j] = (v[j] - row_mean) * row_rstd * w[j] + b[j];
    store_packet<Tx, kVector>(y, p * P, C, v);
  }
  if (lane == 0) {
    if (mean != nullptr) mean[row] = row_mean;
    if (rstd != nullptr) rstd[row] = row_rstd;
  }
}

// Bytes and FLOPs of a forward over N rows of C (fused: also reads the second input, writes the residual).
inline KernelCost layernorm_forward_cost(int N, int C, bool fused) {
  const double nc = static_cast<double>(N) * C, x = sizeof(floatX);
  return KernelCost{(fused ? 4.0 : 2.0) * nc * x + 2.0 * C * x + 8.0 * N, (fused ? 9.0 : 8.0) * nc};
}

inline void launch_layernorm_forward(floatX* out, float* mean, float* rstd, floatX* residual, const floatX* a,
                                     const floatX* b, const floatX* weight, const floatX* bias, int N, int C,
                                     cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ceil_div(N, kLayerNormBlock / kWarpSize)));
  const KernelCost cost = layernorm_forward_cost(N, C, b != nullptr);
  if (rows_are_packets<floatX>(C, out, residual, a, b, weight, bias))
    LLMC_LAUNCH_COSTED(cost, (layernorm_forward_kernel<floatX, true>), grid, dim3(kLayerNormBlock), 0, stream, out,
                       mean, rstd, residual, a, b, weight, bias, N, C);
  else
    LLMC_LAUNCH_COSTED(cost, (layernorm_forward_kernel<floatX, false>), grid, dim3(kLayerNormBlock), 0, stream, out,
                       mean, rstd, residual, a, b, weight, bias, N, C);
}

// out (N,C) = LayerNorm(inp) * weight + bias; mean, rstd (N) saved for the backward (may be null).
inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                              const floatX* bias, int N, int C, cudaStream_t stream) {
  launch_layernorm_forward(out, mean, rstd, nullptr, inp, nullptr, weight, bias, N, C, stream);
}

// residual (N,C) = inp1 + inp2, then out = LayerNorm(residual) * weight + bias in the same pass.
// residual must not alias out; it may alias inp1 or inp2.
inline void fused_residual_layernorm_forward(floatX* residual, floatX* out, float* mean, float* rstd,
                                             const floatX* inp1, const floatX* inp2, const floatX* weight,
                                             const floatX* bias, int N, int C, cudaStream_t stream) {
  launch_layernorm_forward(out, mean, rstd, residual, inp1, inp2, weight, bias, N, C, stream);
}

// ---- backward: one launch ---------------------------------------------------------------------------
// A block of W warps takes a chunk of rows, each warp every W-th row of it: the warp computes the row's
// dinp (+)= rstd * (w*dout - mean_c(w*dout) - xhat * mean_c(w*dout*xhat)) and adds dout*xhat and dout
// into its own shared-memory accumulators for dweight and dbias (each lane only its own columns: no
// races, no atomics). The block then adds its warps' accumulators in warp order into one fp32 partial per
// column, and the blocks fold their partials in block order inside the launch (reduction.cuh).
constexpr int kLayerNormBackwardMaxWarps = 8;
constexpr int kLayerNormBackwardMaxBlocks = 256;
// Dynamic shared memory of a block at most (above 48 KiB by opt-in; an A100 block may have 163 KiB, an
// H100/H200 block 227 KiB): 8 warps up to C = 1536.
constexpr size_t kLayerNormBackwardShared = 96 * 1024;

struct LayerNormBackwardPlan {
  int warps, blocks, rows_per_block;
  size_t shared_bytes(int C) const { return static_cast<size_t>(warps) * 2 * C * sizeof(float); }
};
// Warps per block: as many (up to 8) as fit their 2 x C fp32 accumulators in kLayerNormBackwardShared;
// blocks: a fixed function of N, so that every run adds in the same order.
inline LayerNormBackwardPlan layernorm_backward_plan(int N, int C) {
  long long warps =
      static_cast<long long>(kLayerNormBackwardShared) / (2LL * C * static_cast<long long>(sizeof(float)));
  if (warps > kLayerNormBackwardMaxWarps) warps = kLayerNormBackwardMaxWarps;
  if (warps < 1)
    throw std::invalid_argument("layernorm_backward: C = " + std::to_string(C) + " needs more than " +
                                std::to_string(kLayerNormBackwardShared) + " bytes of accumulators per warp");
  long long blocks = ceil_div(N, warps);
  if (blocks > kLayerNormBackwardMaxBlocks) blocks = kLayerNormBackwardMaxBlocks;
  if (blocks < 1) blocks = 1;
  const long long rows_per_block = N > 0 ? ceil_div(N, blocks) : 1;
  return LayerNormBackwardPlan{static_cast<int>(warps), static_cast<int>(ceil_div(N, rows_per_block)),
                               static_cast<int>(rows_per_block)};
}

// The row's two means of the backward, over its packets (lane-strided), reduced across the warp.
template <typename Tx, bool kVector>
__device__ void layernorm_backward_row_means(const Tx* dy_row, const Tx* x_row, const Tx* weight, float row_mean,
                                             float row_rstd, int C, float& dnorm_mean, float& dnorm_xhat_mean) {
  constexpr int P = packet_size<Tx>();
  const int packets = static_cast<int>(ceil_div(C, P));
  float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
  for (int p = threadIdx.x % kWarpSize; p < packets; p += kWarpSize) {
    float dy[P], x[P], w[P];
    load_packet<Tx, kVector>(dy, dy_row, p * P, C);
    load_packet<Tx, kVector>(x, x_row, p * P, C);
    load_packet<Tx, kVector>(w, weight, p * P, C);
    for (int j = 0; j < P; j++) {
      const float dnorm = w[j] * dy[j];
      dnorm_sum += dnorm;
      dnorm_xhat_sum += dnorm * (x[j] - row_mean) * row_rstd;
    }
  }
  dnorm_mean = warp_reduce_sum(dnorm_sum) / C;
  dnorm_xhat_mean = warp_reduce_sum(dnorm_xhat_sum) / C;
}

template <typename Tx, bool kVector>
__global__ void layernorm_backward_kernel(Tx* dinp, Tx* dweight, Tx* dbias, const Tx* dout, const Tx* inp,
                                          const Tx* weight, const float* mean, const float* rstd, int N, int C,
                                          int rows_per_block, bool accumulate_dinp, bool accumulate_params,
                                          BlockFold fold) {
  constexpr int P = packet_size<Tx>();
  LLMC_DYNAMIC_SHARED(float, accumulators);  // [warps][2][C]: dweight then dbias
  __shared__ unsigned fold_flag;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize, warps = blockDim.x / kWarpSize;
  const int packets = static_cast<int>(ceil_div(C, P));
  float* own = accumulators + static_cast<size_t>(warp) * 2 * C;
  if (LLMC_MUTANT("layernorm_backward.uninitialised_accumulators", true, false))
    for (int p = lane; p < packets; p += kWarpSize)
      for (int j = 0; j < P && p * P + j < C; j++) own[p * P + j] = own[C + p * P + j] = 0.0f;
  const int block = static_cast<int>(blockIdx.x);
  const int row_end = (block + 1) * rows_per_block < N ? (block + 1) * rows_per_block : N;
  for (int row = block * rows_per_block + warp; row < row_end; row += warps) {
    const Tx* dy_row = dout + static_cast<size_t>(row) * C;
    const Tx* x_row = inp + static_cast<size_t>(row) * C;
    Tx* dx_row = dinp + static_cast<size_t>(row) * C;
    const float row_mean = mean[row], row_rstd = rstd[row];
    float dnorm_mean, dnorm_xhat_mean;
    layernorm_backward_row_means<Tx, kVector>(dy_row, x_row, weight, row_mean, row_rstd, C, dnorm_mean,
                                              dnorm_xhat_mean);
    for (int p = lane; p < packets; p += kWarpSize) {
      float dy[P], x[P], w[P], dx[P] = {};
      load_packet<Tx, kVector>(dy, dy_row, p * P, C);
      load_packet<Tx, kVector>(x, x_row, p * P, C);
      load_packet<Tx, kVector>(w, weight, p * P, C);
      if (accumulate_dinp) load_packet<Tx, kVector>(dx, dx_row, p * P, C);
      for (int j = 0; j < P; j++) {
        const float xhat = (x[j] - row_mean) * row_rstd;
        dx[j] += row_rstd * (w[j] * dy[j] - dnorm_mean - xhat * dnorm_xhat_mean);
        if (p * P + j < C) {
          own[p * P + j] += dy[j] * xhat;
          own[C + p * P + j] += dy[j];
        }
      }
      store_packet<Tx, kVector>(dx_row, p * P, C, dx);
    }
  }
  __syncthreads();
  float* partial = fold.partials + static_cast<size_t>(block) * 2 * C;
  for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) {
    float block_sum = 0.0f;
    for (int w = 0; w < warps; w++) block_sum += accumulators[static_cast<size_t>(w) * 2 * C + i];
    partial[i] = block_sum;
  }
  fold_block_partials(fold, block, &fold_flag, [&](int i, float total) {
    Tx* target = i < C ? dweight + i : dbias + (i - C);
    *target = from_float<Tx>(accumulate_params ? to_float(*target) + total : total);
  });
}

// Floats of scratch that layernorm_backward needs for N rows of C columns (zero before its first use).
inline size_t layernorm_backward_scratch_floats(int N, int C) {
  return fold_scratch(1, layernorm_backward_plan(N, C).blocks, 2 * C).floats();
}

// Bytes and FLOPs of one layernorm_backward call (llmc/base/launch_observer.h): dout and inp read once (the
// second pass over a row hits L1), dinp written (and read when accumulated), the block partials.
inline KernelCost layernorm_backward_cost(int N, int C, bool accumulate_dinp) {
  const double nc = static_cast<double>(N) * C, x = sizeof(floatX);
  const double partials = 4.0 * layernorm_backward_plan(N, C).blocks * 2.0 * C;
  return KernelCost{(accumulate_dinp ? 4.0 : 3.0) * nc * x + 8.0 * N + 2 * partials + 5.0 * C * x, 18 * nc};
}

// dinp (N,C) (+)= the input gradient, dweight (C) (+)= and dbias (C) (+)= the parameter gradients, in one
// launch. dinp accumulates when accumulate_dinp (it is the gradient of the residual stream), the parameter
// gradients when accumulate_params (later micro-steps). inp is the LayerNorm input (for the fused form:
// the residual it wrote); mean, rstd from the forward. scratch: layernorm_backward_scratch_floats(N, C)
// floats, zero before the first call (every call leaves its counters zero again).
inline void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, const floatX* dout, const floatX* inp,
                               const floatX* weight, const float* mean, const float* rstd, int N, int C,
                               bool accumulate_dinp, bool accumulate_params, float* scratch, size_t scratch_floats,
                               cudaStream_t stream) {
  require_scratch("layernorm_backward", scratch_floats, layernorm_backward_scratch_floats(N, C));
  const LayerNormBackwardPlan plan = layernorm_backward_plan(N, C);
  const BlockFold fold = fold_in_scratch(scratch, fold_scratch(1, plan.blocks, 2 * C), 0, plan.blocks, 2 * C);
  const size_t shared = plan.shared_bytes(C);
  const KernelCost cost = layernorm_backward_cost(N, C, accumulate_dinp);
  const dim3 grid(static_cast<unsigned>(plan.blocks)), block(static_cast<unsigned>(plan.warps * kWarpSize));
  // Both forms opt in to the block's dynamic shared memory: 8 warps at C = 768 take exactly 48 KiB, which
  // with the kernel's static flag is over the default limit.
  if (rows_are_packets<floatX>(C, dinp, dout, inp, weight)) {
    CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel<floatX, true>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
    LLMC_LAUNCH_COSTED(cost, (layernorm_backward_kernel<floatX, true>), grid, block, shared, stream, dinp, dweight,
                       dbias, dout, inp, weight, mean, rstd, N, C, plan.rows_per_block, accumulate_dinp,
                       accumulate_params, fold);
  } else {
    CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel<floatX, false>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
    LLMC_LAUNCH_COSTED(cost, (layernorm_backward_kernel<floatX, false>), grid, block, shared, stream, dinp, dweight,
                       dbias, dout, inp, weight, mean, rstd, N, C, plan.rows_per_block, accumulate_dinp,
                       accumulate_params, fold);
  }
}

}  // namespace llmc
