// The memory-bound pieces of the 2026-07-17 record's FP8 MLP forward (SPEEDRUN89.md section 4; the GEMMs are
// fp8_gemm's): per-tensor absolute maxima, scales made from them on the device, the ReLU^2 that also writes the
// e4m3 copy of its output and that output's maximum, and the weights' e4m3 copies. Every scale stays on the
// device, so a step never waits for the host. Maxima are exact (atomicMax on the bits of non-negative floats:
// the same bits whatever the order), so every kernel here is deterministic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/fp8.h"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/fp8_cast.cuh"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/kernels/relu_squared.cuh"

namespace llmc {

inline constexpr float kFp8MlpAmaxFloor = 1e-12f;  // the record's clamp: an all-zero tensor keeps a finite scale
inline constexpr int kFp8MlpBlock = 256;

// The block's largest value to one thread's atomicMax (values >= 0; every thread of the block calls it).
// warp_maxima: a __shared__ array of 32 floats.
__device__ __forceinline__ void block_max_to(float* target, float value, float* warp_maxima) {
  value = warp_reduce_max(value);
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (lane == 0) warp_maxima[warp] = value;
  LLMC_MUTANT("fp8_mlp.block_max_no_barrier", __syncthreads(), (void)0);  // every warp's maximum stored first
  if (warp != 0) return;
  value = lane < static_cast<int>(blockDim.x / kWarpSize) ? warp_maxima[lane] : 0.0f;
  value = warp_reduce_max(value);
  if (lane == 0) atomic_max_nonnegative(target, value);
}

template <typename Tx>
__global__ void abs_max_kernel(float* amax, const Tx* in, size_t n) {
  __shared__ float warp_maxima[kWarpSize];
  float largest = 0.0f;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    largest = fmaxf(largest, fabsf(to_float(in[i])));
  block_max_to(amax, largest, warp_maxima);
}

// *amax = max |in[i]| over n values (0 for n = 0): a zeroing memset, then one pass.
template <typename Tx>
void abs_max(float* amax, const Tx* in, size_t n, cudaStream_t stream) {
  if (amax == nullptr || (in == nullptr && n > 0)) throw std::invalid_argument("abs_max: null pointer");
  memset_async(amax, 0, sizeof(float), stream);
  if (n == 0) return;
  LLMC_LAUNCH_COSTED((KernelCost{static_cast<double>(n) * sizeof(Tx), static_cast<double>(n)}), abs_max_kernel<Tx>,
                     dim3(reducing_grid(n, kFp8MlpBlock)), dim3(kFp8MlpBlock), 0, stream, amax, in, n);
}

// The scale of a tensor whose maximum is amax, with `headroom`: max(amax, 1e-12) * (headroom / 448), the factor
// computed once in double (the record's HEADROOM / 448.0): 1 for the activations x of the up projection and
// the weights' bootstrap, 1.80 for the delayed activation scale of the down projection, 1.12 for its weights.
inline float fp8_mlp_scale_factor(double headroom) { return static_cast<float>(headroom / 448.0); }

// One thread: used (if not null) takes *scale's current value, then *scale = max(*amax, 1e-12) * factor.
// (A template only so that the header can define it in every translation unit.)
template <typename T>
__global__ void fp8_scale_from_amax_kernel(T* scale, T* used, const T* amax, T factor) {
  if (used != nullptr) *used = *scale;
  *scale = fmaxf(*amax, kFp8MlpAmaxFloor) * factor;
}

inline void fp8_scale_from_amax(float* scale, float* used, const float* amax, float factor, cudaStream_t stream) {
  if (scale == nullptr || amax == nullptr) throw std::invalid_argument("fp8_scale_from_amax: null pointer");
  LLMC_LAUNCH_COSTED((KernelCost{12.0, 1.0}), fp8_scale_from_amax_kernel<float>, dim3(1), dim3(1), 0, stream, scale,
                     used, amax, factor);
}

// One pair of the FP8 MLP's ReLU^2 (relu_squared_fp8_forward's and the wgmma up GEMM's epilogue's arithmetic, one
// formula): post = Tx(relu(pre)^2), the codes e4m3(min(post * inverse, 448)) (the first in the low byte), and the
// larger post.
template <typename Tx>
struct ReluSquaredFp8Pair {
  Tx post[2];
  uint16_t codes;
  float larger;
};

template <typename Tx>
__device__ __forceinline__ ReluSquaredFp8Pair<Tx> relu_squared_fp8_pair(float pre0, float pre1, float inverse) {
  ReluSquaredFp8Pair<Tx> pair;
  pair.post[0] = from_float<Tx>(relu_squared(pre0));
  pair.post[1] = from_float<Tx>(relu_squared(pre1));
  const float a = to_float(pair.post[0]), b = to_float(pair.post[1]);
  pair.larger = fmaxf(a, b);
  pair.codes = fp8x2_from_floats<fp8e4m3>(fminf(a * inverse, 448.0f), fminf(b * inverse, 448.0f));
  return pair;
}

// post = relu(pre)^2 in Tx, as relu_squared_forward; post8 = e4m3(min(post / s_act, 448)) with s_act read on the
// device (the record multiplies by its fp32 reciprocal); *amax (zeroed first) = max post. 16 values per thread.
template <typename Tx>
__global__ void relu_squared_fp8_kernel(Tx* post, fp8e4m3* post8, float* amax, const Tx* pre, const float* s_act,
                                        size_t packets) {
  __shared__ float warp_maxima[kWarpSize];
  using Packet = Packed128<Tx>;
  constexpr int kParts = kFp8PacketElements / Packet::size;
  const float inverse = 1.0f / *s_act;
  float largest = 0.0f;
  for (size_t p = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packets;
       p += static_cast<size_t>(gridDim.x) * blockDim.x) {
    Packed128<fp8e4m3> codes;
    for (int part = 0; part < kParts; part++) {
      const size_t at = p * kFp8PacketElements + static_cast<size_t>(part) * Packet::size;
      const Packet x = load128cs(pre + at);
      Packet y;
      for (int j = 0; j < Packet::size; j += 2) {
        const ReluSquaredFp8Pair<Tx> pair = relu_squared_fp8_pair<Tx>(to_float(x[j]), to_float(x[j + 1]), inverse);
        y[j] = pair.post[0];
        y[j + 1] = pair.post[1];
        largest = fmaxf(largest, pair.larger);
        codes[part * Packet::size + j] = fp8_from_bits<fp8e4m3>(static_cast<uint8_t>(pair.codes & 0xffu));
        codes[part * Packet::size + j + 1] = fp8_from_bits<fp8e4m3>(static_cast<uint8_t>(pair.codes >> 8));
      }
      store128(post + at, y);
    }
    store128(post8 + p * kFp8PacketElements, codes);
  }
  block_max_to(amax, largest, warp_maxima);
}

// n values, a multiple of 16, every pointer 16-byte aligned.
inline void relu_squared_fp8_forward(floatX* post, fp8e4m3* post8, float* amax, const floatX* pre,
                                     const float* s_act, size_t n, cudaStream_t stream) {
  if (post == nullptr || post8 == nullptr || amax == nullptr || pre == nullptr || s_act == nullptr)
    throw std::invalid_argument("relu_squared_fp8_forward: null pointer");
  if (n % kFp8PacketElements != 0)
    throw std::invalid_argument("relu_squared_fp8_forward: " + std::to_string(n) + " values, not a multiple of 16");
  if (!is_aligned16(post) || !is_aligned16(post8) || !is_aligned16(pre))
    throw std::invalid_argument("relu_squared_fp8_forward: pointers must be 16-byte aligned");
  memset_async(amax, 0, sizeof(float), stream);
  if (n == 0) return;
  const size_t packets = n / kFp8PacketElements;
  const double count = static_cast<double>(n);
  LLMC_LAUNCH_COSTED((KernelCost{count * (2.0 * sizeof(floatX) + 1.0), 5.0 * count}), relu_squared_fp8_kernel<floatX>,
                     dim3(elementwise_grid(packets, kFp8MlpBlock)), dim3(kFp8MlpBlock), 0, stream, post, post8, amax,
                     pre, s_act, packets);
}

// The record's refresh of the up projection's copy, in bf16 arithmetic as its eager PyTorch code:
// s = bf16(max(amax, bf16(1e-12)) / 448), W8 = e4m3(bf16(W / s)). Every thread derives s from *amax; block 0's
// first thread stores it (fp32) for the GEMM.
template <typename Tx>
__global__ void fp8_up_weights_kernel(fp8e4m3* codes, float* scale, const float* amax, const Tx* weights, size_t n) {
  const float floor = __bfloat162float(__float2bfloat16(kFp8MlpAmaxFloor));
  const float s = __bfloat162float(__float2bfloat16(fmaxf(*amax, floor) / 448.0f));
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale = s;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    codes[i] = fp8_from_float<fp8e4m3>(__bfloat162float(__float2bfloat16(__fdiv_rn(to_float(weights[i]), s))));
}

// codes (n) and *scale from weights (n) and their maximum *amax (abs_max).
inline void fp8_up_weights(fp8e4m3* codes, float* scale, const float* amax, const floatX* weights, size_t n,
                           cudaStream_t stream) {
  if (codes == nullptr || scale == nullptr || amax == nullptr || weights == nullptr)
    throw std::invalid_argument("fp8_up_weights: null pointer");
  if (n == 0) return;
  LLMC_LAUNCH_COSTED((KernelCost{static_cast<double>(n) * (sizeof(floatX) + 1.0), 3.0 * n}),
                     fp8_up_weights_kernel<floatX>, dim3(elementwise_grid(n, kFp8MlpBlock)), dim3(kFp8MlpBlock), 0,
                     stream, codes, scale, amax, weights, n);
}

}  // namespace llmc
