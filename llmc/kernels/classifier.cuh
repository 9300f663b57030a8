// Fused classifier: for each row of logits, softmax over the V real columns, the cross-entropy loss of
// the target, and the gradient dlogits = (softmax - onehot(target)) * dloss written IN PLACE over the
// logits. The probabilities are never stored: pass 1 finds the row's max and sum of exponentials
// (online), pass 2 recomputes each probability from its logit and writes the gradient. Rows are read and
// written in 16-byte packets (packet_io.cuh); exponentials are exp2 with log2(e) folded into one
// multiply-add per element. Also the step loss: the mean of the per-row losses, summed on the device.
#pragma once

#include <cfloat>
#include <cmath>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/packet_io.cuh"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

constexpr int kClassifierBlock = 256;

// Maxima start at this finite value, finite also times log2(e), so that exp_shifted(m_a, m * log2(e)) of
// two empty pairs never sees inf - inf (-FLT_MAX * log2(e) would overflow to -inf).
constexpr float kSoftmaxEmptyMax = -FLT_MAX / 4;

// Merges two (max, sum of exp(x - max)) pairs. Symmetric in its arguments, so the xor butterfly leaves
// the same bits in every lane.
__device__ __forceinline__ void merge_softmax_stats(float& max_value, float& sum_exp, float other_max,
                                                    float other_sum) {
  const float merged_max = fmaxf(max_value, other_max);
  const float merged_log2 = merged_max * kLog2e;
  sum_exp = sum_exp * exp_shifted(max_value, merged_log2) + other_sum * exp_shifted(other_max, merged_log2);
  max_value = merged_max;
}

__device__ __forceinline__ void warp_reduce_softmax_stats(float& max_value, float& sum_exp) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float other_max = __shfl_xor_sync(0xffffffffu, max_value, offset);
    const float other_sum = __shfl_xor_sync(0xffffffffu, sum_exp, offset);
    merge_softmax_stats(max_value, sum_exp, other_max, other_sum);
  }
}

// One block per row, thread i taking the packets i, i + blockDim, ... of the row. losses[row] = -log
// softmax(logits)[target] (NaN when the target is outside [0, V), so that a bad batch cannot go unnoticed).
// With write_dlogits, logits[row, :] is replaced by (softmax - onehot) * dloss on the first V columns and 0
// on the padded columns [V, Vp).
template <typename Tx, bool kVector>
__global__ void fused_classifier_kernel(Tx* logits, float* losses, const int* targets, float dloss, int V, int Vp,
                                        bool write_dlogits) {
  constexpr int P = packet_size<Tx>();
  __shared__ float warp_max[32];
  __shared__ float warp_sum[32];
  const int row = blockIdx.x;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  const int packets = static_cast<int>(ceil_div(Vp, P));
  Tx* row_logits = logits + static_cast<size_t>(row) * Vp;
  const int target = targets[row];
  const bool target_valid = target >= 0 && target < V;
  // Read the target's logit before any thread can overwrite the row (the barriers below order it).
  const float target_logit = (threadIdx.x == 0 && target_valid) ? to_float(row_logits[target]) : 0.0f;

  float max_value = kSoftmaxEmptyMax, sum_exp = 0.0f;
  for (int p = threadIdx.x; p < packets; p += blockDim.x) {
    float x[P];
    load_packet<Tx, kVector>(x, row_logits, p * P, Vp);
    for (int j = 0; j < P && p * P + j < V; j++) {
      if (x[j] > max_value) {
        sum_exp = sum_exp * exp_shifted(max_value, x[j] * kLog2e) + 1.0f;
        max_value = x[j];
      } else {
        sum_exp += exp_shifted(x[j], max_value * kLog2e);
      }
    }
  }
  warp_reduce_softmax_stats(max_value, sum_exp);
  if (lane == 0) {
    warp_max[warp] = max_value;
    warp_sum[warp] = sum_exp;
  }
  __syncthreads();
  max_value = lane < num_warps ? warp_max[lane] : kSoftmaxEmptyMax;
  sum_exp = lane < num_warps ? warp_sum[lane] : 0.0f;
  warp_reduce_softmax_stats(max_value, sum_exp);  // every warp now holds the row's statistics

  if (threadIdx.x == 0) losses[row] = target_valid ? logf(sum_exp) + max_value - target_logit : NAN;
  if (!write_dlogits) return;
  const float inv_sum = 1.0f / sum_exp, max_log2 = max_value * kLog2e;
  for (int p = threadIdx.x; p < packets; p += blockDim.x) {
    float x[P];
    load_packet<Tx, kVector>(x, row_logits, p * P, Vp);
    for (int j = 0; j < P; j++) {
      const int i = p * P + j;
      x[j] = i < V ? (exp_shifted(x[j], max_log2) * inv_sum - (i == target ? 1.0f : 0.0f)) * dloss : 0.0f;
    }
    store_packet<Tx, kVector>(row_logits, p * P, Vp, x);
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
  // A short row (a test model's vocabulary) gets the fewest warps that cover its packets (row_block): the threads
  // left out would only merge empty statistics at every shuffle and barrier.
  const dim3 grid(static_cast<unsigned>(N)), block(row_block(ceil_div(Vp, packet_size<floatX>()), kClassifierBlock));
  if (rows_are_packets<floatX>(Vp, logits))
    LLMC_LAUNCH_COSTED(cost, (fused_classifier_kernel<floatX, true>), grid, block, 0, stream, logits, losses, targets,
                       dloss, V, Vp, write_dlogits);
  else
    LLMC_LAUNCH_COSTED(cost, (fused_classifier_kernel<floatX, false>), grid, block, 0, stream, logits, losses, targets,
                       dloss, V, Vp, write_dlogits);
}

// ---- the step loss ------------------------------------------------------------------------------------
constexpr int kMeanLossBlock = 1024;

// One block: out[0] = mean of losses[0, count), in double, in an order fixed by count alone (thread i adds
// i, i + 1024, ... in turn; the lanes by the xor butterfly; the warps' totals in warp order), so the
// reported loss is bitwise repeatable.
template <typename Tloss>
__global__ void mean_of_losses_kernel(double* out, const Tloss* losses, size_t count) {
  __shared__ double warp_totals[kMeanLossBlock / kWarpSize];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  double sum = 0.0;
  for (size_t i = threadIdx.x; i < count; i += kMeanLossBlock) sum += static_cast<double>(losses[i]);
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) warp_totals[warp] = sum;
  __syncthreads();
  if (threadIdx.x != 0) return;
  constexpr int kWarps = kMeanLossBlock / kWarpSize;
  double total = 0.0;
  for (int w = 0; w < LLMC_MUTANT("mean_of_losses.drops_last_warp", kWarps, kWarps - 1); w++) total += warp_totals[w];
  out[0] = total / static_cast<double>(count);
}

// out_device[0] = mean of the count fp32 losses (count > 0). One launch.
inline void mean_of_losses(double* out_device, const float* losses, size_t count, cudaStream_t stream) {
  const KernelCost cost{4.0 * count + 8.0, 1.0 * count};
  LLMC_LAUNCH_COSTED(cost, mean_of_losses_kernel<float>, dim3(1), dim3(kMeanLossBlock), 0, stream, out_device, losses,
                     count);
}

}  // namespace llmc
