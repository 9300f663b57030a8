// The speedrun model's soft-capped cross-entropy: logits l = 30 sigmoid(z / 7.5) over ALL V columns of
// the head output z (the padding columns take part in the softmax, as in the reference), loss
// logsumexp(l) - l[target] per row, and its gradient dz = dloss (softmax(l) - onehot) * 4 s (1 - s)
// (s = sigmoid(z / 7.5)) written IN PLACE over z, or for the FP8 head as its e5m2 codes (z kept).
// Probabilities are never stored. Because l < 30, the cap is a static maximum: one pass sums exp(l - 30) (no
// running max, no overflow, no underflow: every term is >= e^-30), a second pass writes the gradient. One block
// per row, 16-byte packets; the row sum is a fixed-order block reduction, so losses and gradients are bitwise
// repeatable.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/fp8.h"
#include "llmc/kernels/fp8_cast.cuh"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

constexpr float kSoftcapScale = 30.0f;
constexpr float kSoftcapDivisor = 7.5f;
constexpr int kSoftcapBlock = 512;

// s = sigmoid(z / 7.5) and its complement u = 1 - s, both to full relative precision (no 1 - s cancellation):
// l - 30 = -30 u, and ds/dz = s u / 7.5.
struct SoftcapTerms {
  float s, u;
  __device__ explicit SoftcapTerms(float z) {
    const float a = expf(-fabsf(z) / kSoftcapDivisor);  // in (0, 1]
    const float inv = 1.0f / (1.0f + a);
    s = z >= 0.0f ? inv : a * inv;
    u = z >= 0.0f ? a * inv : inv;
  }
};

namespace detail {
// One packet's gradients: floatX values, or e5m2 codes of those floatX values / grad_code_scale (what fp8_cast of
// the floatX gradient writes, bit for bit).
template <typename Tx>
__device__ __forceinline__ void store_softcap_grads(Tx* out, const Packed128<Tx>& grads, float) {
  store128(out, grads);
}
template <typename Tx>
__device__ __forceinline__ void store_softcap_grads(fp8e5m2* out, const Packed128<Tx>& grads, float grad_code_scale) {
  for (int j = 0; j < Packed128<Tx>::size; j += 2)
    reinterpret_cast<uint16_t*>(out)[j / 2] =
        fp8x2_scaled<fp8e5m2>(to_float(grads[j]), to_float(grads[j + 1]), grad_code_scale);
}
}  // namespace detail

// Row `row` of z: losses[row], and with grads (not null) the gradient into grads: Tg = Tx over z itself (in place),
// or e5m2 codes of the Tx-rounded gradient / grad_code_scale (the FP8 head's g8; z untouched).
template <typename Tx, typename Tg>
__global__ void softcap_cross_entropy_kernel(const Tx* z, Tg* grads, float* losses, const int* targets, float dloss,
                                             int V, float grad_code_scale) {
  using Packet = Packed128<Tx>;
  __shared__ float warp_sums[kWarpSize];
  const int row = blockIdx.x;
  const Tx* zr = z + static_cast<size_t>(row) * V;
  const int target = targets[row];
  const bool target_valid = target >= 0 && target < V;
  // Read before any thread can overwrite the row (block_reduce_sum's barriers order it).
  const float target_u = (threadIdx.x == 0 && target_valid) ? SoftcapTerms(to_float(zr[target])).u : 0.0f;
  const int packets = V / Packet::size;
  float sum = 0.0f;
  for (int p = threadIdx.x; p < packets; p += blockDim.x) {
    const Packet v = load128(zr + p * Packet::size);
    for (int j = 0; j < Packet::size; j++) sum += expf(-kSoftcapScale * SoftcapTerms(to_float(v[j])).u);
  }
  sum = block_reduce_sum(sum, warp_sums);
  // loss = log(sum exp(l - 30)) + 30 - l[target] = log(sum) + 30 u[target]
  if (threadIdx.x == 0) losses[row] = target_valid ? logf(sum) + kSoftcapScale * target_u : NAN;
  if (grads == nullptr) return;
  const float inv_sum = 1.0f / sum;
  Tg* gr = grads + static_cast<size_t>(row) * V;
  for (int p = threadIdx.x; p < packets; p += blockDim.x) {
    const Packet v = load128(zr + p * Packet::size);
    Packet grad;
    for (int j = 0; j < Packet::size; j++) {
      const SoftcapTerms terms(to_float(v[j]));
      const float prob = expf(-kSoftcapScale * terms.u) * inv_sum;
      const float indicator = p * Packet::size + j == target ? 1.0f : 0.0f;
      const float dlogit_dz =
          LLMC_MUTANT("softcap.no_cap_derivative", kSoftcapScale / kSoftcapDivisor * terms.s * terms.u, 1.0f);
      grad[j] = from_float<Tx>((prob - indicator) * dloss * dlogit_dz);
    }
    detail::store_softcap_grads(gr + p * Packet::size, grad, grad_code_scale);
  }
}

// One block: out[0] = scale * sum of values[0..n) in a fixed order (the per-row losses -> the step's
// SUM loss with scale 1, or the validation MEAN with scale 1/n).
template <typename T>
__global__ void sum_losses_kernel(T* out, const T* values, int n, T scale) {
  __shared__ float warp_sums[kWarpSize];
  float sum = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) sum += static_cast<float>(values[i]);
  sum = block_reduce_sum(sum, warp_sums);
  if (threadIdx.x == 0) out[0] = sum * scale;
}

namespace detail {
inline void check_softcap_args(const char* launcher, const void* z, const void* grads, int N, int V) {
  require_packets<floatX>(launcher, "V", V);
  require_aligned16(launcher, {z, grads});
  if (N < 0) throw std::invalid_argument(std::string(launcher) + ": negative row count");
}

// z read once, the gradient written once (grad_bytes per element, 0 without), the row's target and loss; per
// element the soft-cap and exp (8 operations), with the gradient 12 more (a division more for codes).
inline KernelCost softcap_cross_entropy_cost(int N, int V, double grad_bytes) {
  const double elements = static_cast<double>(N) * V;
  return KernelCost{elements * (sizeof(floatX) + grad_bytes) + 8.0 * N,
                    elements * (grad_bytes == 0.0 ? 8.0 : grad_bytes < sizeof(floatX) ? 21.0 : 20.0)};
}
}  // namespace detail

// Training: z (N, V) head outputs, targets (N) on the device. losses (N) per row in fp32 (NaN for a target
// outside [0, V)); z is overwritten by dz = dloss * dloss_row/dz (dloss = 1 for the SUM reduction, 1/k with
// k accumulation micro-steps).
inline void softcap_cross_entropy_backward(floatX* z, float* losses, const int* targets, float dloss, int N, int V,
                                           cudaStream_t stream) {
  detail::check_softcap_args("softcap_cross_entropy_backward", z, z, N, V);
  if (N == 0) return;
  LLMC_LAUNCH_COSTED(detail::softcap_cross_entropy_cost(N, V, sizeof(floatX)),
                     (softcap_cross_entropy_kernel<floatX, floatX>), dim3(static_cast<unsigned>(N)),
                     dim3(kSoftcapBlock), 0, stream, z, z, losses, targets, dloss, V, 1.0f);
}

// The same, the gradient as e5m2 codes into g8 (N, V) instead of over z (untouched): the codes fp8_cast would
// write from softcap_cross_entropy_backward's floatX dz with scale grad_code_scale (the FP8 head's g_s), bit for
// bit, without dz's round trip through memory. V a multiple of 16.
inline void softcap_cross_entropy_backward_e5m2(fp8e5m2* g8, float* losses, const floatX* z, const int* targets,
                                                float dloss, float grad_code_scale, int N, int V,
                                                cudaStream_t stream) {
  detail::check_softcap_args("softcap_cross_entropy_backward_e5m2", z, g8, N, V);
  if (V % 16 != 0)
    throw std::invalid_argument("softcap_cross_entropy_backward_e5m2: V = " + std::to_string(V) +
                                " is not a multiple of 16");
  if (!(grad_code_scale > 0.0f) || !std::isfinite(grad_code_scale))
    throw std::invalid_argument("softcap_cross_entropy_backward_e5m2: grad_code_scale must be positive and finite");
  if (N == 0) return;
  LLMC_LAUNCH_COSTED(detail::softcap_cross_entropy_cost(N, V, 1.0), (softcap_cross_entropy_kernel<floatX, fp8e5m2>),
                     dim3(static_cast<unsigned>(N)), dim3(kSoftcapBlock), 0, stream, z, g8, losses, targets, dloss, V,
                     grad_code_scale);
}

// Validation: per-row losses only, z left untouched (computed in fp32 from the floatX z, as the reference's
// fp32 validation logits); sum_losses with scale 1/N gives the MEAN.
inline void softcap_cross_entropy_forward(float* losses, const floatX* z, const int* targets, int N, int V,
                                          cudaStream_t stream) {
  detail::check_softcap_args("softcap_cross_entropy_forward", z, z, N, V);
  if (N == 0) return;
  LLMC_LAUNCH_COSTED(detail::softcap_cross_entropy_cost(N, V, 0.0), (softcap_cross_entropy_kernel<floatX, floatX>),
                     dim3(static_cast<unsigned>(N)), dim3(kSoftcapBlock), 0, stream, z,
                     static_cast<floatX*>(nullptr), losses, targets, 0.0f, V, 1.0f);
}

// out[0] (device) = scale * sum(values[0..n)), deterministic.
inline void sum_losses(float* out, const float* values, int n, float scale, cudaStream_t stream) {
  constexpr int kBlock = 1024;
  LLMC_LAUNCH(sum_losses_kernel<float>, dim3(1), dim3(kBlock), 0, stream, out, values, n, scale);
}

}  // namespace llmc
