// The speedrun model's sigmoid attention output gate: y[t, h, :] *= sigmoid(xn[t][0:12] . w[h]) with xn the
// attention block's normalised input and w (H, 12) floatX. Backward: dy written, dxn[:, 0:12] accumulated,
// dw accumulated through per-chunk partials summed in a fixed order (no atomics, bitwise repeatable).
// A group of lanes (a power of two, up to a warp) handles one head in 16-byte packets.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

constexpr int kGateWidth = 12;
constexpr int kAttentionGateBlock = 256;

// sigmoid(xn_row[0:12] . w_head), summed in a fixed order by each lane on its own.
template <typename Tx>
__device__ __forceinline__ float attention_gate_value(const Tx* xn_row, const Tx* w_head) {
  float dot = 0.0f;
  for (int c = 0; c < kGateWidth; c++) dot += to_float(xn_row[c]) * to_float(w_head[c]);
  return 1.0f / (1.0f + expf(-dot));
}

// y and out: (T, H*D) contiguous; xn rows at xn + t * xn_stride.
template <typename Tx>
__global__ void attention_gate_forward_kernel(Tx* out, const Tx* y, const Tx* xn, int xn_stride, const Tx* w, int T,
                                              int H, int D, int group) {
  using Packet = Packed128<Tx>;
  const auto [t, h, head_row, lane, valid] = head_lane(T, H, group);
  if (!valid) return;  // no shuffles in this kernel
  const float g = attention_gate_value(xn + static_cast<size_t>(t) * xn_stride, w + h * kGateWidth);
  const size_t base = head_row * D;
  for (int p = lane; p < D / Packet::size; p += group) {
    const Packet v = load128(y + base + p * Packet::size);
    Packet result;
    for (int j = 0; j < Packet::size; j++) result[j] = from_float<Tx>(to_float(v[j]) * g);
    store128(out + base + p * Packet::size, result);
  }
}

// dy = dout g (written; may alias dout), gate_grad[t H + h] = sum_d(dout y) g (1 - g) in fp32.
template <typename Tx>
__global__ void attention_gate_backward_kernel(Tx* dy, float* gate_grad, const Tx* dout, const Tx* y, const Tx* xn,
                                               int xn_stride, const Tx* w, int T, int H, int D, int group) {
  using Packet = Packed128<Tx>;
  const auto [t, h, head_row, lane, valid] = head_lane(T, H, group);
  const size_t base = head_row * D;
  const float g = valid ? attention_gate_value(xn + static_cast<size_t>(t) * xn_stride, w + h * kGateWidth) : 0.0f;
  float dot = 0.0f;
  for (int p = lane; valid && p < D / Packet::size; p += group) {
    const Packet dv = load128(dout + base + p * Packet::size), yv = load128(y + base + p * Packet::size);
    Packet result;
    for (int j = 0; j < Packet::size; j++) {
      dot += to_float(dv[j]) * to_float(yv[j]);
      result[j] = from_float<Tx>(to_float(dv[j]) * g);
    }
    store128(dy + base + p * Packet::size, result);
  }
  dot = group_reduce_sum(dot, group);
  if (valid && lane == 0) gate_grad[head_row] = dot * g * (1.0f - g);
}

// Block = one chunk of rows; thread k = h * 12 + c: partials[chunk][k] = sum_t gate_grad[t, h] xn[t][c];
// threads k < 12 also add dxn[t][k] += sum_h gate_grad[t, h] w[h][k] for the chunk's rows.
template <typename Tx>
__global__ void attention_gate_input_grads_kernel(Tx* dxn, int dxn_stride, float* partials, const float* gate_grad,
                                                  const Tx* xn, int xn_stride, const Tx* w, int T, int H,
                                                  int rows_per_chunk) {
  const int k = threadIdx.x, h = k / kGateWidth, c = k % kGateWidth;
  const int first = blockIdx.x * rows_per_chunk;
  const int last = first + rows_per_chunk < T ? first + rows_per_chunk : T;
  if (k >= H * kGateWidth) return;
  float acc = 0.0f;
  for (int t = first; t < last; t++)
    acc += gate_grad[static_cast<size_t>(t) * H + h] * to_float(xn[static_cast<size_t>(t) * xn_stride + c]);
  partials[static_cast<size_t>(blockIdx.x) * H * kGateWidth + k] = acc;
  if (h != 0) return;
  for (int t = first; t < last; t++) {
    float sum = 0.0f;
    for (int head = 0; head < H; head++)
      sum += gate_grad[static_cast<size_t>(t) * H + head] * to_float(w[head * kGateWidth + c]);
    Tx* target = dxn + static_cast<size_t>(t) * dxn_stride + c;
    *target = from_float<Tx>(to_float(*target) + sum);
  }
}

// Block k (one warp): dw[k] += the fixed-order sum of the chunks' partials.
template <typename Tx>
__global__ void attention_gate_weight_grads_kernel(Tx* dw, const float* partials, int num_chunks, int K) {
  const int k = blockIdx.x;
  const int chunks = LLMC_MUTANT("attention_gate.drop_last_chunk", num_chunks, num_chunks - 1);
  const float total = warp_ordered_sum(partials + k, chunks, K);
  if (threadIdx.x == 0) dw[k] = from_float<Tx>(to_float(dw[k]) + total);
}

namespace detail {
inline void check_gate_shape(const char* launcher, int H, int xn_stride) {
  if (H <= 0 || H * kGateWidth > 1024)
    throw std::invalid_argument(std::string(launcher) + ": H must be in [1, 85] (one thread per gate weight)");
  if (xn_stride < kGateWidth) throw std::invalid_argument(std::string(launcher) + ": xn rows must hold >= 12 values");
}
}  // namespace detail

// out (T, H*D) = y (T, H*D) gated per (t, h) by sigmoid(xn[t][0:12] . w[h]); xn rows at xn + t * xn_stride.
// out may alias y.
inline void attention_gate_forward(floatX* out, const floatX* y, const floatX* xn, int xn_stride, const floatX* w,
                                   int T, int H, int D, cudaStream_t stream) {
  const int group = head_lane_group<floatX>("attention_gate_forward", D);
  detail::check_gate_shape("attention_gate_forward", H, xn_stride);
  require_aligned16("attention_gate_forward", {out, y});
  if (T <= 0) return;
  LLMC_LAUNCH(attention_gate_forward_kernel<floatX>,
              dim3(static_cast<unsigned>(ceil_div(static_cast<long long>(T) * H * group, kAttentionGateBlock))),
              dim3(kAttentionGateBlock), 0, stream, out, y, xn, xn_stride, w, T, H, D, group);
}

// Floats of scratch the gate's weight gradient sums through (per-chunk partials).
inline size_t attention_gate_partials_floats(int T, int H) {
  return static_cast<size_t>(column_chunking(T).num_chunks) * H * kGateWidth;
}

inline size_t attention_gate_backward_scratch_floats(int T, int H) {
  return static_cast<size_t>(T) * H + attention_gate_partials_floats(T, H);
}

// From logit_grads (T, H) fp32, the gradients of the gate logits xn[t][0:12] . w[h]: dxn[:, 0:12] and dw (H, 12)
// accumulated as attention_gate_backward does. Its second half, and the window attention's gate (whose backward
// writes logit_grads) uses it alone.
inline void attention_gate_backward_from_logit_grads(floatX* dxn, int dxn_stride, floatX* dw, const float* logit_grads,
                                                     const floatX* xn, int xn_stride, const floatX* w, int T, int H,
                                                     float* partials, size_t partials_floats, cudaStream_t stream) {
  detail::check_gate_shape("attention_gate_backward_from_logit_grads", H, xn_stride);
  detail::check_gate_shape("attention_gate_backward_from_logit_grads", H, dxn_stride);
  if (T <= 0) return;
  require_scratch("attention_gate_backward_from_logit_grads", partials_floats, attention_gate_partials_floats(T, H));
  const ColumnChunking chunking = column_chunking(T);
  const int K = H * kGateWidth;
  LLMC_LAUNCH(attention_gate_input_grads_kernel<floatX>, dim3(static_cast<unsigned>(chunking.num_chunks)),
              dim3(static_cast<unsigned>(ceil_div(K, kWarpSize)) * kWarpSize), 0, stream, dxn, dxn_stride, partials,
              logit_grads, xn, xn_stride, w, T, H, chunking.rows_per_chunk);
  LLMC_LAUNCH(attention_gate_weight_grads_kernel<floatX>, dim3(static_cast<unsigned>(K)), dim3(kWarpSize), 0, stream,
              dw, static_cast<const float*>(partials), chunking.num_chunks, K);
}

// From dout (T, H*D), the gradient of the gated output: dy (T, H*D) written (may alias dout), dxn[:, 0:12]
// accumulated (dxn rows at dxn + t * dxn_stride; add it after the QKV GEMM's backward wrote dxn, or before
// one that accumulates), dw (H, 12) accumulated. Deterministic for a given (T, H, D).
inline void attention_gate_backward(floatX* dy, floatX* dxn, int dxn_stride, floatX* dw, const floatX* dout,
                                    const floatX* y, const floatX* xn, int xn_stride, const floatX* w, int T, int H,
                                    int D, float* scratch, size_t scratch_floats, cudaStream_t stream) {
  const int group = head_lane_group<floatX>("attention_gate_backward", D);
  detail::check_gate_shape("attention_gate_backward", H, xn_stride);
  detail::check_gate_shape("attention_gate_backward", H, dxn_stride);
  require_aligned16("attention_gate_backward", {dy, dout, y});
  if (T <= 0) return;
  require_scratch("attention_gate_backward", scratch_floats, attention_gate_backward_scratch_floats(T, H));
  float* gate_grad = scratch;
  LLMC_LAUNCH(attention_gate_backward_kernel<floatX>,
              dim3(static_cast<unsigned>(ceil_div(static_cast<long long>(T) * H * group, kAttentionGateBlock))),
              dim3(kAttentionGateBlock), 0, stream, dy, gate_grad, dout, y, xn, xn_stride, w, T, H, D, group);
  attention_gate_backward_from_logit_grads(dxn, dxn_stride, dw, gate_grad, xn, xn_stride, w, T, H,
                                           scratch + static_cast<size_t>(T) * H,
                                           scratch_floats - static_cast<size_t>(T) * H, stream);
}

}  // namespace llmc
