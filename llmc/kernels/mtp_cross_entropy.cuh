// The 2026-07-17 record's fused cross-entropy (docs/kernels.md#multi-token-cross-entropy): soft-capped
// logits z' = 23 u with u = bf16(sigmoid((z + 5) / 7.5)) over ALL V columns, a loss per row that sums the
// weighted terms of the next n tokens (multi-token prediction) and of the target's prefix token, and, in the
// same pass, the logit gradient (floatX over z, or e5m2 codes for the FP8 head). One block per row, 16-byte
// packets, fixed-order block sums: bitwise repeatable.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/fp8.h"
#include "llmc/kernels/fp8_cast.cuh"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/packet_io.cuh"
#include "llmc/kernels/reduction.cuh"
#include "llmc/kernels/mtp_loss_weights.h"
#include "llmc/kernels/mutant.h"

namespace llmc {

constexpr float kMtpSoftcapScale = 23.0f;  // z' = 23 u, in (0, 23): a static maximum for the softmax
constexpr float kMtpSoftcapShift = 5.0f;
constexpr float kMtpSoftcapDivisor = 7.5f;
constexpr int kMtpBlock = 512;

namespace detail {

// u = bf16(0.5 + 0.5 tanh(x / 2)), x = (z + 5) / 7.5: the sigmoid as the record's kernel evaluates it, rounded
// to bf16 as it stores it (in both builds).
__device__ __forceinline__ float mtp_softcap_u(float z) {
  const float x = (z + kMtpSoftcapShift) / kMtpSoftcapDivisor;
  return __bfloat162float(__float2bfloat16(0.5f + 0.5f * tanhf(0.5f * x)));
}

// The row's terms: up to kMtpMaxTokens next-token targets and the prefix target, -1 where a term is absent
// (past the rank's last row, or a target without a prefix token), with their weights; and S, the softmax's
// weight in the gradient: every next-token weight (the absent ones too, as the record's kernel) plus the
// prefix weight when that term is present.
struct MtpRowTerms {
  int target[kMtpMaxTokens + 1];
  float weight[kMtpMaxTokens + 1];
  float softmax_weight;
  __device__ MtpRowTerms(const int* targets, const int* prefix_of, const MtpLossWeights& w, int row, int rows) {
    softmax_weight = 0.0f;
    for (int k = 0; k < kMtpMaxTokens; k++) {
      const bool present = k < w.tokens && row + k < rows;
      target[k] = present ? targets[row + k] : -1;
      weight[k] = k < w.tokens ? w.next[k] : 0.0f;
      if (LLMC_MUTANT("mtp.softmax_weight_present_only", k < w.tokens, present)) softmax_weight += w.next[k];
    }
    const int prefix = prefix_of != nullptr && w.prefix != 0.0f ? prefix_of[targets[row]] : -1;
    target[kMtpMaxTokens] = prefix;
    weight[kMtpMaxTokens] = w.prefix;
    if (prefix >= 0) softmax_weight += w.prefix;
  }
  // The weights of the present terms whose target is column j.
  __device__ float onehot_weight(int j) const {
    float sum = 0.0f;
    for (int k = 0; k <= kMtpMaxTokens; k++)
      if (target[k] == j) sum += weight[k];
    return sum;
  }
};

// One packet's gradients, as floatX values or as e5m2 codes of gradient / grad_code_scale.
__device__ __forceinline__ void store_mtp_grads(floatX* out, const float* grads, int n, float) {
  Packed128<floatX> packet;
  for (int j = 0; j < n; j++) packet[j] = from_float<floatX>(grads[j]);
  store128(out, packet);
}
__device__ __forceinline__ void store_mtp_grads(fp8e5m2* out, const float* grads, int n, float grad_code_scale) {
  for (int j = 0; j < n; j += 2)
    reinterpret_cast<uint16_t*>(out)[j / 2] = fp8x2_scaled<fp8e5m2>(grads[j], grads[j + 1], grad_code_scale);
}

}  // namespace detail

// Row `row` of z (T, V): losses[row] = sum over the present terms of weight (lse - z'[target]); with grads, the
// gradient grad_scale * d(loss + dropped terms' weight * lse)/dz into grads (floatX: may be z itself; e5m2:
// codes of gradient / grad_code_scale). `round_u` false: the validation's fp32 sigmoid, unrounded.
// weights_at: where the device holds the weights, read instead of `weights` when not null (a step captured in a
// CUDA graph reads the weights in force at each launch).
template <typename Tg>
__global__ void mtp_cross_entropy_kernel(const floatX* z, Tg* grads, float* losses, const int* targets,
                                         const int* prefix_of, MtpLossWeights weights, const MtpLossWeights* weights_at,
                                         int rows, int V, float grad_scale, float grad_code_scale, bool round_u) {
  using Packet = Packed128<floatX>;
  __shared__ float warp_sums[kWarpSize];
  const int row = blockIdx.x;
  const floatX* zr = z + static_cast<size_t>(row) * V;
  const detail::MtpRowTerms terms(targets, prefix_of, weights_at != nullptr ? *weights_at : weights, row, rows);
  // u of one head output; z' = 23 u.
  auto softcap_u = [round_u](float value) {
    return round_u ? detail::mtp_softcap_u(value)
                   : 1.0f / (1.0f + expf(-(value + kMtpSoftcapShift) / kMtpSoftcapDivisor));
  };
  // The target logits, read before any thread overwrites the row (block_reduce_sum's barriers order it).
  float target_term = 0.0f;
  if (threadIdx.x == 0)
    for (int k = 0; k <= kMtpMaxTokens; k++)
      if (terms.target[k] >= 0)
        target_term += terms.weight[k] * kMtpSoftcapScale * softcap_u(to_float(zr[terms.target[k]]));
  float sum = 0.0f;
  const int packets = V / Packet::size;
  for (int p = threadIdx.x; p < packets; p += blockDim.x) {
    const Packet v = load128(zr + p * Packet::size);
    for (int j = 0; j < Packet::size; j++) sum += expf(kMtpSoftcapScale * (softcap_u(to_float(v[j])) - 1.0f));
  }
  sum = block_reduce_sum(sum, warp_sums);
  const float lse = kMtpSoftcapScale + logf(sum);
  if (threadIdx.x == 0) {
    float present_weight = 0.0f;
    for (int k = 0; k <= kMtpMaxTokens; k++)
      if (terms.target[k] >= 0) present_weight += terms.weight[k];
    losses[row] = present_weight * lse - target_term;
  }
  if (grads == nullptr) return;
  const float inv_sum = 1.0f / sum;
  constexpr float kDlogitDu = kMtpSoftcapScale / kMtpSoftcapDivisor;  // dz'/dz = 23 u (1 - u) / 7.5
  Tg* gr = grads + static_cast<size_t>(row) * V;
  for (int p = threadIdx.x; p < packets; p += blockDim.x) {
    const Packet v = load128(zr + p * Packet::size);
    float g[Packet::size];
    for (int j = 0; j < Packet::size; j++) {
      const float u = softcap_u(to_float(v[j]));
      const float prob = expf(kMtpSoftcapScale * (u - 1.0f)) * inv_sum;
      const float dlogit = terms.softmax_weight * prob - terms.onehot_weight(p * Packet::size + j);
      g[j] = grad_scale * kDlogitDu * dlogit * u * (1.0f - u);
    }
    detail::store_mtp_grads(gr + p * Packet::size, g, Packet::size, grad_code_scale);
  }
}

namespace detail {
inline void check_mtp_args(const char* launcher, const floatX* z, const void* grads, const MtpLossWeights& w, int rows,
                           int V) {
  require_packets<floatX>(launcher, "V", V);
  require_aligned16(launcher, {z, grads});
  if (rows < 0) throw std::invalid_argument(std::string(launcher) + ": negative row count");
  if (w.tokens < 1 || w.tokens > kMtpMaxTokens)
    throw std::invalid_argument(std::string(launcher) + ": tokens = " + std::to_string(w.tokens) + " must be 1 to " +
                                std::to_string(kMtpMaxTokens));
}

// z read once, the gradient written once (grad_bytes per element, 0 for the forward), the row's targets and
// loss; per element the soft-cap and exp (9 operations), with the gradient 15 more.
inline KernelCost mtp_cross_entropy_cost(int rows, int V, double grad_bytes) {
  const double elements = static_cast<double>(rows) * V;
  return KernelCost{elements * (sizeof(floatX) + grad_bytes) + 4.0 * rows * (kMtpMaxTokens + 2),
                    elements * (grad_bytes > 0.0 ? 24.0 : 9.0)};
}
}  // namespace detail

// Training: z (rows, V) head outputs; targets (rows, every one in [0, V)): targets[t] is token t + 1, so row
// t's k-th term predicts targets[t + k] (terms past the last row are dropped from the loss, not from the
// softmax weight); prefix_of (V) the token prefix table (-1: none) or null. losses (rows) without grad_scale;
// the gradient grad_scale * d/dz, written over z (floatX). weights_at: the same weights in device memory, read by the
// kernel instead (a captured step's), or null.
inline void mtp_cross_entropy_backward(floatX* z, float* losses, const int* targets, const int* prefix_of,
                                       const MtpLossWeights& weights, float grad_scale, int rows, int V,
                                       cudaStream_t stream, const MtpLossWeights* weights_at = nullptr) {
  detail::check_mtp_args("mtp_cross_entropy_backward", z, z, weights, rows, V);
  if (rows == 0) return;
  LLMC_LAUNCH_COSTED(detail::mtp_cross_entropy_cost(rows, V, sizeof(floatX)), mtp_cross_entropy_kernel<floatX>,
                     dim3(static_cast<unsigned>(rows)), dim3(kMtpBlock), 0, stream, z, z, losses, targets, prefix_of,
                     weights, weights_at, rows, V, grad_scale, 1.0f, true);
}

// The same, the gradient as e5m2 codes of gradient / grad_code_scale into g8 (rows, V) (the FP8 head's g_s; z
// untouched). Codes round to nearest even and saturate.
inline void mtp_cross_entropy_backward_e5m2(fp8e5m2* g8, float* losses, const floatX* z, const int* targets,
                                            const int* prefix_of, const MtpLossWeights& weights, float grad_scale,
                                            float grad_code_scale, int rows, int V, cudaStream_t stream,
                                            const MtpLossWeights* weights_at = nullptr) {
  detail::check_mtp_args("mtp_cross_entropy_backward_e5m2", z, g8, weights, rows, V);
  if (!(grad_code_scale > 0.0f) || !std::isfinite(grad_code_scale))
    throw std::invalid_argument("mtp_cross_entropy_backward_e5m2: grad_code_scale must be positive and finite");
  if (rows == 0) return;
  LLMC_LAUNCH_COSTED(detail::mtp_cross_entropy_cost(rows, V, 1.0), mtp_cross_entropy_kernel<fp8e5m2>,
                     dim3(static_cast<unsigned>(rows)), dim3(kMtpBlock), 0, stream, z, g8, losses, targets, prefix_of,
                     weights, weights_at, rows, V, grad_scale, grad_code_scale, true);
}

// Validation: the next-token loss per row on the fp32 sigmoid (u not rounded), z untouched.
inline void mtp_cross_entropy_forward(float* losses, const floatX* z, const int* targets, int rows, int V,
                                      cudaStream_t stream) {
  const MtpLossWeights next_token;
  detail::check_mtp_args("mtp_cross_entropy_forward", z, nullptr, next_token, rows, V);
  if (rows == 0) return;
  LLMC_LAUNCH_COSTED(detail::mtp_cross_entropy_cost(rows, V, 0.0), mtp_cross_entropy_kernel<floatX>,
                     dim3(static_cast<unsigned>(rows)), dim3(kMtpBlock), 0, stream, z, static_cast<floatX*>(nullptr),
                     losses, targets, nullptr, next_token, static_cast<const MtpLossWeights*>(nullptr), rows, V, 1.0f,
                     1.0f, false);
}

}  // namespace llmc
