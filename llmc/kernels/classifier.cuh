// Fused classifier: for each row of logits, softmax over the V real columns, the cross-entropy loss of
// the target, and the gradient dlogits = (softmax - onehot(target)) * dloss written IN PLACE over the
// logits. The probabilities are never stored: pass 1 finds the row's max and sum of exponentials
// (online), pass 2 recomputes each probability from its logit and writes the gradient.
#pragma once

#include <cfloat>
#include <cmath>

#include "llmc/cuda_common.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/precision.h"

namespace llmc {

constexpr int kClassifierBlock = 256;

// Merges two (max, sum of exp(x - max)) pairs. Symmetric in its arguments, so the xor butterfly leaves
// the same bits in every lane. Maxima start at -FLT_MAX (finite) so that exp(m_a - m) never sees
// inf - inf.
__device__ __forceinline__ void merge_softmax_stats(float& max_value, float& sum_exp, float other_max,
                                                    float other_sum) {
  const float merged_max = fmaxf(max_value, other_max);
  sum_exp = sum_exp * expf(max_value - merged_max) + other_sum * expf(other_max - merged_max);
  max_value = merged_max;
}

__device__ __forceinline__ void warp_reduce_softmax_stats(float& max_value, float& sum_exp) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float other_max = __shfl_xor_sync(0xffffffffu, max_value, offset);
    const float other_sum = __shfl_xor_sync(0xffffffffu, sum_exp, offset);
    merge_softmax_stats(max_value, sum_exp, other_max, other_sum);
  }
}

// One block per row. losses[row] = -log softmax(logits)[target] (NaN when the target is outside [0, V),
// so that a bad batch cannot go unnoticed). With write_dlogits, logits[row, :] is replaced by
// (softmax - onehot) * dloss on the first V columns and 0 on the padded columns [V, Vp).
template <typename Tx>
__global__ void fused_classifier_kernel(Tx* logits, float* losses, const int* targets, float dloss, int V, int Vp,
                                        bool write_dlogits) {
  __shared__ float warp_max[32];
  __shared__ float warp_sum[32];
  const int row = blockIdx.x;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  Tx* row_logits = logits + static_cast<size_t>(row) * Vp;
  const int target = targets[row];
  const bool target_valid = target >= 0 && target < V;
  // Read the target's logit before any thread can overwrite the row (the barriers below order it).
  const float target_logit = (threadIdx.x == 0 && target_valid) ? to_float(row_logits[target]) : 0.0f;

  float max_value = -FLT_MAX, sum_exp = 0.0f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float x = to_float(row_logits[i]);
    if (x > max_value) {
      sum_exp = sum_exp * expf(max_value - x) + 1.0f;
      max_value = x;
    } else {
      sum_exp += expf(x - max_value);
    }
  }
  warp_reduce_softmax_stats(max_value, sum_exp);
  if (lane == 0) {
    warp_max[warp] = max_value;
    warp_sum[warp] = sum_exp;
  }
  __syncthreads();
  max_value = lane < num_warps ? warp_max[lane] : -FLT_MAX;
  sum_exp = lane < num_warps ? warp_sum[lane] : 0.0f;
  warp_reduce_softmax_stats(max_value, sum_exp);  // every warp now holds the row's statistics

  if (threadIdx.x == 0)
    losses[row] = target_valid ? logf(sum_exp) + max_value - target_logit : NAN;
  if (!write_dlogits) return;
  const float inv_sum = 1.0f / sum_exp;
  for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
    float grad = 0.0f;
    if (i < V) {
      const float prob = expf(to_float(row_logits[i]) - max_value) * inv_sum;
      grad = (prob - (i == target ? 1.0f : 0.0f)) * dloss;
    }
    row_logits[i] = from_float<Tx>(grad);
  }
}

// logits (N,Vp) with V real columns, targets (N) on the device, losses (N) fp32 per-row losses.
// dloss is the derivative of the total loss w.r.t. each row's loss, e.g. 1/(B*T) for a mean over the
// batch, 1/(B*T*grad_accum_steps) with gradient accumulation. write_dlogits = false only computes losses
// (validation) and leaves the logits untouched.
inline void fused_classifier(floatX* logits, float* losses, const int* targets, float dloss, int N, int V, int Vp,
                             bool write_dlogits, cudaStream_t stream) {
  // Each row read twice (the second pass may hit L2; counted as HBM) and, with dlogits, written once;
  // ~4 operations per element and pass, an exponential counting one.
  const double x = sizeof(floatX), elements = static_cast<double>(N) * Vp;
  const KernelCost cost{(write_dlogits ? 3.0 : 1.0) * elements * x + 8.0 * N, (write_dlogits ? 10.0 : 5.0) * elements};
  LLMC_LAUNCH_COSTED(cost, fused_classifier_kernel<floatX>, dim3(static_cast<unsigned>(N)), dim3(kClassifierBlock), 0, stream,
              logits, losses, targets, dloss, V, Vp, write_dlogits);
}

}  // namespace llmc
