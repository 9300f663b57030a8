// Per-token weighted sums of residual streams, the 2026-07-17 record's dense connections and gates: out[t] =
// sum over k of w_k[t] s_k[t] over rows of C, each weight a column of a per-token gate matrix (the MUDD and
// gate MLPs' outputs) or 1. The backward gives each stream w_k[t] dout[t] (written or added) and each gate
// column the row dot s_k[t] . dout[t]. One block per row; the dots are fixed-order block sums (no atomics).
#pragma once

#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/packet_io.cuh"
#include "llmc/kernels/reduction.cuh"
#include "llmc/kernels/mutant.h"

namespace llmc {

constexpr int kTokenMixMaxStreams = 6;
constexpr int kTokenMixBlock = 128;

struct TokenMixStream {
  const floatX* rows = nullptr;  // row t at rows + t * stride
  int stride = 0;
  int gate_column = -1;    // w[t] = gate[t * gate_stride + gate_column]; -1: w = 1
  floatX* grad = nullptr;  // backward: the stream's gradient (row stride grad_stride); null: none
  int grad_stride = 0;
  bool accumulate = false;  // grad += w dout, else grad = w dout
};

struct TokenMix {
  TokenMixStream streams[kTokenMixMaxStreams];
  int count = 0;
  const floatX* gate = nullptr;  // (T, gate_stride) per-token weights
  int gate_stride = 0;
  float* dgate = nullptr;  // backward: (T, gate_stride) fp32, the used columns written; null: none
};

namespace detail {
__device__ __forceinline__ float token_mix_weight(const TokenMix& mix, int k, int t) {
  const int column = mix.streams[k].gate_column;
  return column < 0 ? 1.0f : to_float(mix.gate[static_cast<size_t>(t) * mix.gate_stride + column]);
}
}  // namespace detail

template <typename Tx>
__global__ void token_mix_forward_kernel(Tx* out, int out_stride, TokenMix mix, int C) {
  using Packet = Packed128<Tx>;
  const int t = blockIdx.x;
  float w[kTokenMixMaxStreams];
  for (int k = 0; k < mix.count; k++) w[k] = detail::token_mix_weight(mix, k, t);
  for (int p = threadIdx.x; p < C / Packet::size; p += blockDim.x) {
    float sum[Packet::size] = {};
    for (int k = 0; k < mix.count; k++) {
      const Packet s = load128(mix.streams[k].rows + static_cast<size_t>(t) * mix.streams[k].stride + p * Packet::size);
      for (int j = 0; j < Packet::size; j++) sum[j] += w[k] * to_float(s[j]);
    }
    Packet o;
    for (int j = 0; j < Packet::size; j++) o[j] = from_float<Tx>(sum[j]);
    store128(out + static_cast<size_t>(t) * out_stride + p * Packet::size, o);
  }
}

template <typename Tx>
__global__ void token_mix_backward_kernel(const Tx* dout, int dout_stride, TokenMix mix, int C) {
  using Packet = Packed128<Tx>;
  __shared__ float warp_sums[kWarpSize];
  const int t = blockIdx.x;
  float w[kTokenMixMaxStreams], dots[kTokenMixMaxStreams] = {};
  for (int k = 0; k < mix.count; k++) w[k] = detail::token_mix_weight(mix, k, t);
  // Each thread reads dout, the streams and the gradients only at its own packets, so a stream's gradient
  // may be dout itself (the residual's own term).
  for (int p = threadIdx.x; p < C / Packet::size; p += blockDim.x) {
    const Packet g = load128(dout + static_cast<size_t>(t) * dout_stride + p * Packet::size);
    Packet grads[kTokenMixMaxStreams];
    for (int k = 0; k < mix.count; k++) {
      const TokenMixStream& stream = mix.streams[k];
      const Packet s = load128(stream.rows + static_cast<size_t>(t) * stream.stride + p * Packet::size);
      for (int j = 0; j < Packet::size; j++) dots[k] += to_float(s[j]) * to_float(g[j]);
      if (stream.grad == nullptr) continue;
      const Packet old = stream.accumulate
                             ? load128(stream.grad + static_cast<size_t>(t) * stream.grad_stride + p * Packet::size)
                             : Packet{};
      for (int j = 0; j < Packet::size; j++)
        grads[k][j] = from_float<Tx>((stream.accumulate ? to_float(old[j]) : 0.0f) + w[k] * to_float(g[j]));
    }
    for (int k = 0; k < mix.count; k++)
      if (mix.streams[k].grad != nullptr)
        store128(mix.streams[k].grad + static_cast<size_t>(t) * mix.streams[k].grad_stride + p * Packet::size,
                 grads[k]);
  }
  if (mix.dgate == nullptr) return;
  for (int k = 0; k < mix.count; k++) {
    const float dot = block_reduce_sum(dots[k], warp_sums);
    if (threadIdx.x == 0 && mix.streams[k].gate_column >= 0)
      mix.dgate[static_cast<size_t>(t) * mix.gate_stride + mix.streams[k].gate_column] =
          LLMC_MUTANT("token_mix.gate_dot_times_weight", dot, dot * w[k]);
  }
}

namespace detail {
inline void check_token_mix(const char* launcher, const TokenMix& mix, int T, int C, bool backward) {
  const std::string where = std::string(launcher) + ": ";
  if (mix.count < 1 || mix.count > kTokenMixMaxStreams)
    throw std::invalid_argument(where + "1 to " + std::to_string(kTokenMixMaxStreams) + " streams");
  if (T < 0) throw std::invalid_argument(where + "negative row count");
  require_packets<floatX>(launcher, "C", C);
  for (int k = 0; k < mix.count; k++) {
    const TokenMixStream& s = mix.streams[k];
    if (s.rows == nullptr || s.stride < C)
      throw std::invalid_argument(where + "stream " + std::to_string(k) + " has no rows of C");
    require_packets<floatX>(launcher, "a stream's stride", s.stride);
    require_aligned16(launcher, {s.rows, s.grad});
    if (s.gate_column >= 0 && (mix.gate == nullptr || s.gate_column >= mix.gate_stride))
      throw std::invalid_argument(where + "stream " + std::to_string(k) + "'s gate column is outside the gate");
    if (backward && s.grad != nullptr) require_packets<floatX>(launcher, "a gradient's stride", s.grad_stride);
  }
}

// One block per token, a thread per packet of its row (kTokenMixBlock at most).
inline unsigned token_mix_block(int C) { return row_block(C / Packed128<floatX>::size, kTokenMixBlock); }

// Forward: each stream's rows and each gated stream's weight read, out written; 2 operations per stream and
// element. Backward: dout and every stream read, each gradient written (read too when added), each gated
// stream's dot.
inline KernelCost token_mix_cost(const TokenMix& mix, int T, int C, bool backward) {
  const double elements = static_cast<double>(T) * C;
  double bytes = elements * sizeof(floatX), flops = 0.0;
  for (int k = 0; k < mix.count; k++) {
    const TokenMixStream& s = mix.streams[k];
    const bool gated = s.gate_column >= 0;
    bytes += elements * sizeof(floatX) + (gated ? T * (backward ? sizeof(floatX) + 4.0 : sizeof(floatX)) : 0.0);
    flops += 2.0 * elements;
    if (!backward || s.grad == nullptr) continue;
    bytes += elements * sizeof(floatX) * (s.accumulate ? 2.0 : 1.0);
    flops += elements * (s.accumulate ? 2.0 : 1.0);
  }
  return KernelCost{bytes, flops};
}

}  // namespace detail

// out (T rows, out_stride) = sum_k w_k[t] s_k[t]. out may be one of the streams' rows (same stride).
inline void token_mix_forward(floatX* out, int out_stride, const TokenMix& mix, int T, int C, cudaStream_t stream) {
  detail::check_token_mix("token_mix_forward", mix, T, C, false);
  require_packets<floatX>("token_mix_forward", "out_stride", out_stride);
  require_aligned16("token_mix_forward", {out});
  if (T == 0) return;
  LLMC_LAUNCH_COSTED(detail::token_mix_cost(mix, T, C, false), token_mix_forward_kernel<floatX>,
                     dim3(static_cast<unsigned>(T)), dim3(detail::token_mix_block(C)), 0, stream, out, out_stride, mix,
                     C);
}

// From dout (the gradient of out): each stream's grad (+)= w_k dout, and dgate[t, column_k] = s_k[t] . dout[t]
// for the gated streams. The streams' rows must still hold the forward's inputs. A gradient may alias dout.
inline void token_mix_backward(const floatX* dout, int dout_stride, const TokenMix& mix, int T, int C,
                               cudaStream_t stream) {
  detail::check_token_mix("token_mix_backward", mix, T, C, true);
  require_packets<floatX>("token_mix_backward", "dout_stride", dout_stride);
  require_aligned16("token_mix_backward", {dout});
  if (T == 0) return;
  LLMC_LAUNCH_COSTED(detail::token_mix_cost(mix, T, C, true), token_mix_backward_kernel<floatX>,
                     dim3(static_cast<unsigned>(T)), dim3(detail::token_mix_block(C)), 0, stream, dout, dout_stride,
                     mix, C);
}

}  // namespace llmc
