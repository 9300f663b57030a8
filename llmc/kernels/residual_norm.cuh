// A residual stream's last update and its RMSNorm in one pass (issue 27's fusion pass), forward and backward:
// the scalar mix x = a x_in + b y, the gated token mix x += sum_k w_k[t] s_k[t] and xn = rmsnorm(x) (with 1/rms
// and optionally max |xn|), bit for bit the three kernels it replaces (mix_forward, token_mix_forward,
// rmsnorm_forward); the backward, from dxn and the gradient x has from its other readers, gives every operand's
// gradient as rmsnorm_backward, token_mix_backward and mix_backward do (the same bits; the gate columns' and the
// scalars' sums in another fixed order).
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

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
  const float a = mix_coefficient(in.scalars, in.a);
  const float b = in.y.data != nullptr ? mix_coefficient(in.scalars, in.b) : 0.0f;
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
  rmsnorm_store_row(out.xn + static_cast<size_t>(row) * C, x, r, C, row, out.rstd, out.xn_amax);
}

namespace detail {
// The extra streams of a fused pass: none, or a token mix check_token_mix accepts.
inline void check_extra_streams(const char* launcher, const TokenMix& extra, int N, int C, bool backward) {
  if (extra.count < 0 || extra.count > kTokenMixMaxStreams)
    throw std::invalid_argument(std::string(launcher) + ": 0 to " + std::to_string(kTokenMixMaxStreams) +
                                " extra streams");
  if (extra.count > 0) check_token_mix(launcher, extra, N, C, backward);
}

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
  detail::check_extra_streams(launcher, extra, N, C, false);
  if (out.xn_amax != nullptr) memset_async(out.xn_amax, 0, sizeof(float), stream);
  if (N <= 0) return;
  const int rows_per_block = kRmsNormBlock / kWarpSize;
  LLMC_LAUNCH_COSTED(detail::residual_norm_cost(out, in, extra, N, C), residual_norm_forward_kernel<floatX>,
                     dim3(static_cast<unsigned>(ceil_div(N, rows_per_block))), dim3(kRmsNormBlock), 0, stream, out, in,
                     extra, N, C);
}

// The backward's inputs: the forward's norm input x (the mixed stream), 1/rms, the gradient of xn, and the gradient
// x already has from its other readers (added; null: none).
struct ResidualNormBackwardIn {
  const floatX* dxn = nullptr;
  const floatX* x = nullptr;
  const float* rstd = nullptr;
  const floatX* arriving = nullptr;
};

// Where the scalar mix's operand gradients go, as mix_backward's arguments: d x_in (+)= a g, dy (+)= b g (either
// null: not wanted; d x_in may be the `arriving` buffer), and the scalars' gradients added into dscalars.
struct ResidualMixGrads {
  MixRows<floatX> dx_in{nullptr, 0};
  bool accumulate_dx_in = false;
  MixRows<floatX> dy{nullptr, 0};
  bool accumulate_dy = false;
  float* dscalars = nullptr;
};

namespace detail {
// target[row, offset..] (+)= coefficient g over one packet, rounded once (mix_backward's gradients); none for a
// null target.
template <typename Tx>
__device__ __forceinline__ void add_scaled_packet(MixRows<Tx> target, bool accumulate, int row, size_t offset,
                                                  float coefficient, const Packed128<Tx>& g) {
  if (target.data == nullptr) return;
  Tx* at = target.data + static_cast<size_t>(row) * target.stride + offset;
  const Packed128<Tx> before = accumulate ? load128(at) : Packed128<Tx>::zeros();
  Packed128<Tx> result;
  for (int j = 0; j < Packed128<Tx>::size; j++)
    result[j] = from_float<Tx>(to_float(before[j]) + coefficient * to_float(g[j]));
  store128(at, result);
}
}  // namespace detail

// One warp per row. g = arriving + d rmsnorm (rounded as rmsnorm_backward stores it), then per packet each extra
// stream's gradient and row dot (token_mix_backward's), then the mix's operand gradients and its two row dots
// (mix_backward's), each operand read once. The mix's dots go to per-block partials (rows of the block in order).
template <typename Tx>
__global__ void residual_norm_backward_kernel(ResidualMixGrads out, ResidualNormBackwardIn norm, TokenMix extra,
                                              ResidualMixIn mix, float* partials, int N, int C) {
  using Packet = Packed128<Tx>;
  __shared__ float warp_dots[2][kWarpSize];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + warp;
  const bool active = row < N;  // every warp reaches the block's barrier below
  float x_dot = 0.0f, y_dot = 0.0f;
  if (active) {
    const size_t at = static_cast<size_t>(row) * C;
    const int packets = C / Packet::size;
    const float r = norm.rstd[row];
    float dy_dot_x = 0.0f;
    for (int p = lane; p < packets; p += kWarpSize) {
      const Packet xv = load128(norm.x + at + p * Packet::size), dyv = load128(norm.dxn + at + p * Packet::size);
      for (int j = 0; j < Packet::size; j++) dy_dot_x += to_float(dyv[j]) * to_float(xv[j]);
    }
    const float x_coefficient = r * r * warp_reduce_sum(dy_dot_x) / C;
    const float a = mix_coefficient(mix.scalars, mix.a);
    const float b = mix.y.data != nullptr ? mix_coefficient(mix.scalars, mix.b) : 0.0f;
    float w[kTokenMixMaxStreams], dots[kTokenMixMaxStreams] = {};
    for (int k = 0; k < extra.count; k++) w[k] = detail::token_mix_weight(extra, k, row);
    for (int p = lane; p < packets; p += kWarpSize) {
      const size_t offset = static_cast<size_t>(p) * Packet::size;
      const Packet xv = load128(norm.x + at + offset), dyv = load128(norm.dxn + at + offset);
      const Packet old = norm.arriving != nullptr ? load128(norm.arriving + at + offset) : Packet::zeros();
      Packet g;
      for (int j = 0; j < Packet::size; j++)
        g[j] = from_float<Tx>(to_float(old[j]) + r * (to_float(dyv[j]) - to_float(xv[j]) * x_coefficient));
      for (int k = 0; k < extra.count; k++) {
        const TokenMixStream& stream = extra.streams[k];
        const Packet sv = load128(stream.rows + static_cast<size_t>(row) * stream.stride + offset);
        for (int j = 0; j < Packet::size; j++) dots[k] += to_float(sv[j]) * to_float(g[j]);
        const MixRows<Tx> grad{stream.grad, stream.grad_stride};
        detail::add_scaled_packet(grad, stream.accumulate, row, offset, w[k], g);
      }
      const Packet xin = load128(mix.x_in.data + static_cast<size_t>(row) * mix.x_in.stride + offset);
      const Packet yv = mix.y.data != nullptr ? load128(mix.y.data + static_cast<size_t>(row) * mix.y.stride + offset)
                                              : Packet::zeros();
      for (int j = 0; j < Packet::size; j++) {
        x_dot += to_float(xin[j]) * to_float(g[j]);
        y_dot += to_float(yv[j]) * to_float(g[j]);
      }
      detail::add_scaled_packet(out.dx_in, out.accumulate_dx_in, row, offset, a, g);
      detail::add_scaled_packet(out.dy, out.accumulate_dy, row, offset, b, g);
    }
    for (int k = 0; k < extra.count; k++) {
      const float dot = warp_reduce_sum(dots[k]);
      if (lane == 0 && extra.dgate != nullptr && extra.streams[k].gate_column >= 0)
        extra.dgate[static_cast<size_t>(row) * extra.gate_stride + extra.streams[k].gate_column] = dot;
    }
    x_dot = warp_reduce_sum(x_dot);
    y_dot = warp_reduce_sum(y_dot);
  }
  if (lane == 0) {
    warp_dots[0][warp] = x_dot;
    warp_dots[1][warp] = y_dot;
  }
  LLMC_MUTANT("residual_norm_backward.no_barrier", __syncthreads(), (void)0);  // every warp's dots stored first
  if (threadIdx.x != 0) return;
  float block_x = 0.0f, block_y = 0.0f;
  const int warps = LLMC_MUTANT("residual_norm_backward.first_warp_only", static_cast<int>(blockDim.x / kWarpSize), 1);
  for (int k = 0; k < warps; k++) {
    block_x += warp_dots[0][k];
    block_y += warp_dots[1][k];
  }
  partials[2 * blockIdx.x] = block_x;
  partials[2 * blockIdx.x + 1] = block_y;
}

// Floats of device scratch residual_norm_backward needs: two partials per block of 8 rows.
inline size_t residual_norm_backward_scratch_floats(int N) {
  return 2 * static_cast<size_t>(ceil_div(N, kRmsNormBlock / kWarpSize));
}

// Backward of residual_norm_forward: g = norm.arriving + d rmsnorm(x)/dx applied to norm.dxn, rounded to floatX
// (rmsnorm_backward with accumulate); from g, each extra stream's gradient (+)= w g and its gate column's row dot
// (token_mix_backward), and the mix's d x_in (+)= a g, dy (+)= b g and dscalars += each scalar's derivative times
// sum(x_in g), sum(y g) (mix_backward; not for kOne, nor b without y). g itself is not stored: out.dx_in with a = 1
// keeps it. Deterministic for a given (N, C).
inline void residual_norm_backward(const ResidualMixGrads& out, const ResidualNormBackwardIn& norm,
                                   const TokenMix& extra, ResidualMixIn mix, int N, int C, float* scratch,
                                   size_t scratch_floats, cudaStream_t stream) {
  const char* launcher = "residual_norm_backward";
  if (norm.dxn == nullptr || norm.x == nullptr || norm.rstd == nullptr || mix.x_in.data == nullptr ||
      mix.scalars == nullptr)
    throw std::invalid_argument("residual_norm_backward: null pointer");
  require_packets<floatX>(launcher, "C", C);
  require_aligned16(launcher, {norm.dxn, norm.x, norm.arriving});
  for (const auto& [name, view] : {std::pair{"dx_in", MixRows<const floatX>{out.dx_in.data, out.dx_in.stride}},
                                   std::pair{"dy", MixRows<const floatX>{out.dy.data, out.dy.stride}},
                                   std::pair{"x_in", mix.x_in}, std::pair{"y", mix.y}})
    detail::check_mix_rows(launcher, name, view);
  detail::check_extra_streams(launcher, extra, N, C, true);
  if (mix.y.data == nullptr) mix.b = MixCoefficient{};  // no y: no b scalar to differentiate
  if (N <= 0) return;
  const int rows_per_block = kRmsNormBlock / kWarpSize;
  const unsigned blocks = static_cast<unsigned>(ceil_div(N, rows_per_block));
  require_scratch(launcher, scratch_floats, residual_norm_backward_scratch_floats(N));
  if ((mix.a.kind != MixScalar::kOne || mix.b.kind != MixScalar::kOne) && out.dscalars == nullptr)
    throw std::invalid_argument("residual_norm_backward: a scalar coefficient needs dscalars");
  // dxn, x, x_in (and y, arriving) read once; each gradient written (and read when added); each extra stream
  // read, its gradient written (read when added), its gate read and its dot written.
  const double elements = static_cast<double>(N) * C;
  double tensors = 3.0 + (mix.y.data != nullptr) + (norm.arriving != nullptr) +
                   (out.dx_in.data != nullptr ? (out.accumulate_dx_in ? 2.0 : 1.0) : 0.0) +
                   (out.dy.data != nullptr ? (out.accumulate_dy ? 2.0 : 1.0) : 0.0);
  double flops = 11.0 * elements;
  for (int k = 0; k < extra.count; k++) {
    const TokenMixStream& stream = extra.streams[k];
    tensors += 1.0 + (stream.grad != nullptr ? (stream.accumulate ? 2.0 : 1.0) : 0.0);
    flops += 4.0 * elements;
  }
  const double gate_bytes = extra.count * static_cast<double>(N) * (sizeof(floatX) + 4.0);
  LLMC_LAUNCH_COSTED((KernelCost{tensors * elements * sizeof(floatX) + gate_bytes + 4.0 * N + 8.0 * blocks, flops}),
                     residual_norm_backward_kernel<floatX>, dim3(blocks), dim3(kRmsNormBlock), 0, stream, out, norm,
                     extra, mix, scratch, N, C);
  if (mix.a.kind == MixScalar::kOne && mix.b.kind == MixScalar::kOne) return;
  LLMC_LAUNCH_COSTED((KernelCost{8.0 * blocks, 2.0 * blocks}), mix_scalar_grads_kernel<float>, dim3(1),
                     dim3(2 * kWarpSize), 0, stream, out.dscalars, static_cast<const float*>(scratch),
                     static_cast<int>(blocks), mix.scalars, mix.a, mix.b);
}

}  // namespace llmc
