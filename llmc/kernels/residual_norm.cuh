// The 2026-07-17 model's attention sublayer output in one pass (issue 27's fusion pass): the scalar mix
// x = a x_in + b y, the gated token mix x += sum_k w_k[t] s_k[t] and the RMSNorm of x into xn (with 1/rms and
// optionally max |xn|), bit for bit the three kernels it replaces (mix_forward, token_mix_forward, rmsnorm_forward)
// with the same roundings in the same places, reading each input once instead of x three more times.
#pragma once

#include <stdexcept>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/kernels/residual_mix.cuh"
#include "llmc/kernels/rmsnorm.cuh"
#include "llmc/kernels/token_mix.cuh"

namespace llmc {

// Where a fused residual pass writes: the stream x, its norm xn (rows of C), 1/rms per row, and max |xn| (null: none).
struct ResidualNormOut {
  floatX* x = nullptr;
  floatX* xn = nullptr;
  float* rstd = nullptr;
  float* xn_amax = nullptr;
};

// The scalar mix's operands and coefficients (mix_forward's): x = a x_in + b y, y optional.
struct ResidualMixIn {
  MixRows<const floatX> x_in{nullptr, 0};
  MixRows<const floatX> y{nullptr, 0};
  const float* scalars = nullptr;
  MixCoefficient a, b;
};

// One warp per row. Pass 1 computes the packets of x as the unfused kernels round them (bf16 after the mix, bf16
// after the token mix, whose first stream is x with weight 1) and stores them; pass 2 reads the warp's own stores
// back (the same thread's addresses: visible without a barrier) for the norm, as rmsnorm_forward reads its input
// twice.
template <typename Tx>
__global__ void residual_norm_forward_kernel(ResidualNormOut out, ResidualMixIn in, TokenMix extra, int N, int C) {
  using Packet = Packed128<Tx>;
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= N) return;  // whole warps leave together; no block barrier below
  const float a = mix_coefficient(in.scalars, in.a), b = in.y.data != nullptr ? mix_coefficient(in.scalars, in.b) : 0.0f;
  float w[kTokenMixMaxStreams];
  for (int k = 0; k < extra.count; k++) w[k] = detail::token_mix_weight(extra, k, row);
  Tx* x = out.x + static_cast<size_t>(row) * C;
  const int packets = C / Packet::size;
  float sum_squares = 0.0f;
  for (int p = lane; p < packets; p += kWarpSize) {
    const size_t offset = static_cast<size_t>(p) * Packet::size;
    const Packet xv = load128(in.x_in.data + static_cast<size_t>(row) * in.x_in.stride + offset);
    const Packet yv = in.y.data != nullptr ? load128(in.y.data + static_cast<size_t>(row) * in.y.stride + offset)
                                           : Packet::zeros();
    float sum[Packet::size] = {};
    for (int j = 0; j < Packet::size; j++) {
      const float mixed = to_float(from_float<Tx>(a * to_float(xv[j]) + b * to_float(yv[j])));
      sum[j] += 1.0f * mixed;
    }
    for (int k = 0; k < extra.count; k++) {
      const TokenMixStream& s = extra.streams[k];
      const Packet sv = load128(s.rows + static_cast<size_t>(row) * s.stride + offset);
      const float weight = LLMC_MUTANT("residual_norm.extra_streams_unweighted", w[k], 1.0f);
      for (int j = 0; j < Packet::size; j++) sum[j] += weight * to_float(sv[j]);
    }
    Packet result;
    for (int j = 0; j < Packet::size; j++) result[j] = from_float<Tx>(sum[j]);
    for (int j = 0; j < Packet::size; j++) sum_squares += to_float(result[j]) * to_float(result[j]);
    store128(x + offset, result);
  }
  const float r = rsqrtf(warp_reduce_sum(sum_squares) / C + kRmsNormEps);
  Tx* y = out.xn + static_cast<size_t>(row) * C;
  float largest = 0.0f;
  for (int p = lane; p < packets; p += kWarpSize) {
    const Packet v = load128(x + p * Packet::size);
    Packet normed;
    for (int j = 0; j < Packet::size; j++) {
      normed[j] = from_float<Tx>(to_float(v[j]) * r);
      largest = fmaxf(largest, fabsf(to_float(normed[j])));
    }
    store128(y + p * Packet::size, normed);
  }
  if (lane == 0 && out.rstd != nullptr) out.rstd[row] = r;
  if (out.xn_amax != nullptr) {
    largest = warp_reduce_max(largest);
    if (lane == 0) atomic_max_nonnegative(out.xn_amax, largest);
  }
}

namespace detail {
// Bytes: every input row once, the gated streams' weights, x and xn written, 1/rms. FLOPs: the mix's 3 (1 without
// y), 2 per extra stream, the norm's 3 (4 with the maximum) per element.
inline KernelCost residual_norm_cost(const ResidualNormOut& out, const ResidualMixIn& in, const TokenMix& extra, int N,
                                     int C) {
  const double elements = static_cast<double>(N) * C, inputs = in.y.data != nullptr ? 2.0 : 1.0;
  double bytes = (inputs + 2.0) * elements * sizeof(floatX) + 4.0 * N;
  double flops = (2.0 * inputs - 1.0 + (out.xn_amax != nullptr ? 4.0 : 3.0)) * elements;
  for (int k = 0; k < extra.count; k++) {
    bytes += elements * sizeof(floatX) + (extra.streams[k].gate_column >= 0 ? N * sizeof(floatX) : 0.0);
    flops += 2.0 * elements;
  }
  return KernelCost{bytes, flops};
}
}  // namespace detail

// out.x (N rows, stride C) = token mix of [a x_in + b y (weight 1), extra's streams], each stage rounded to floatX
// as mix_forward then token_mix_forward round it; out.xn = rmsnorm(out.x) as rmsnorm_forward (out.rstd may be null;
// out.xn_amax, if not null, zeroed first and set to max |xn|). extra may hold no streams (count 0). out.x must not
// alias any input; x_in and the streams are rows of C at their own strides.
inline void residual_norm_forward(const ResidualNormOut& out, const ResidualMixIn& in, const TokenMix& extra, int N,
                                  int C, cudaStream_t stream) {
  const char* launcher = "residual_norm_forward";
  if (out.x == nullptr || out.xn == nullptr || in.x_in.data == nullptr || in.scalars == nullptr)
    throw std::invalid_argument("residual_norm_forward: null pointer");
  require_packets<floatX>(launcher, "C", C);
  require_aligned16(launcher, {out.x, out.xn});
  detail::check_mix_rows(launcher, "x_in", in.x_in);
  detail::check_mix_rows(launcher, "y", in.y);
  if (extra.count < 0 || extra.count > kTokenMixMaxStreams)
    throw std::invalid_argument("residual_norm_forward: 0 to " + std::to_string(kTokenMixMaxStreams) + " extra streams");
  if (extra.count > 0) detail::check_token_mix(launcher, extra, N, C, false);
  if (out.xn_amax != nullptr) memset_async(out.xn_amax, 0, sizeof(float), stream);
  if (N <= 0) return;
  const int rows_per_block = kRmsNormBlock / kWarpSize;
  LLMC_LAUNCH_COSTED(detail::residual_norm_cost(out, in, extra, N, C), residual_norm_forward_kernel<floatX>,
                     dim3(static_cast<unsigned>(ceil_div(N, rows_per_block))), dim3(kRmsNormBlock), 0, stream, out, in,
                     extra, N, C);
}

}  // namespace llmc
