// The 2026-07-17 record's attention output gates (layers 3 and 10): each head's output times a per-token linear
// gate, out[t, h] = g[t, h] y[t, h], and its backward (dy = g dout, dg = y . dout per (token, head)), every head in
// one launch. A group of lanes handles one (token, head) as XSA's kernels do; the gate's gradient is a fixed-order
// group sum, the bits a one-stream token mix per head gives (docs/kernels.md#fused-passes).
#pragma once

#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"

namespace llmc {

constexpr int kHeadGateBlock = 256;

// Row t of y (and of out, dout, dy) at t * y_stride, H heads of D; the gates' row t at t * gate_stride from the
// pointer given (its first column: head 0's gate), the same stride for their fp32 gradients.
struct HeadGateShape {
  int T = 0, H = 0, D = 0;
  int y_stride = 0, gate_stride = 0;
};

namespace detail {
// Where the lane group's head row of y (and out, dout, dy) starts, and its gate.
struct HeadGateOffsets {
  size_t y, gate;
};
__device__ __forceinline__ HeadGateOffsets head_gate_offsets(const HeadGateShape& s, const HeadLane& at) {
  return HeadGateOffsets{static_cast<size_t>(at.t) * s.y_stride + static_cast<size_t>(at.h) * s.D,
                         static_cast<size_t>(at.t) * s.gate_stride + LLMC_MUTANT("head_gate.first_head_gate", at.h, 0)};
}
}  // namespace detail

// out (may alias y) = g y per head.
template <typename Tx>
__global__ void head_gate_forward_kernel(Tx* out, const Tx* y, const Tx* gate, HeadGateShape s, int group) {
  using Packet = Packed128<Tx>;
  const HeadLane at = head_lane(s.T, s.H, group);
  if (!at.valid) return;  // no group sums below
  const detail::HeadGateOffsets offset = detail::head_gate_offsets(s, at);
  const float g = to_float(gate[offset.gate]);
  for (int p = at.lane; p < s.D / Packet::size; p += group) {
    const Packet x = load128(y + offset.y + p * Packet::size);
    Packet r;
    for (int j = 0; j < Packet::size; j++) r[j] = from_float<Tx>(g * to_float(x[j]));
    store128(out + offset.y + p * Packet::size, r);
  }
}

// dy (may alias dout) = g dout, dgate = y . dout per head. Every lane of the warp reaches the group sum.
template <typename Tx>
__global__ void head_gate_backward_kernel(Tx* dy, float* dgate, const Tx* dout, const Tx* y, const Tx* gate,
                                          HeadGateShape s, int group) {
  using Packet = Packed128<Tx>;
  const HeadLane at = head_lane(s.T, s.H, group);
  const detail::HeadGateOffsets offset = detail::head_gate_offsets(s, at);
  const float g = at.valid ? to_float(gate[offset.gate]) : 0.0f;
  float dot = 0.0f;
  for (int p = at.lane; at.valid && p < s.D / Packet::size; p += group) {
    const Packet yv = load128(y + offset.y + p * Packet::size), gv = load128(dout + offset.y + p * Packet::size);
    Packet d;
    for (int j = 0; j < Packet::size; j++) {
      dot += to_float(yv[j]) * to_float(gv[j]);
      d[j] = from_float<Tx>(g * to_float(gv[j]));
    }
    store128(dy + offset.y + p * Packet::size, d);
  }
  dot = group_reduce_sum(dot, LLMC_MUTANT("head_gate.half_group_dot", group, group / 2 > 0 ? group / 2 : 1));
  if (at.valid && at.lane == 0) dgate[offset.gate] = dot;
}

namespace detail {
inline void check_head_gate_shape(const char* launcher, const HeadGateShape& s) {
  if (s.T < 0 || s.H <= 0 || s.y_stride < s.H * s.D || s.gate_stride < s.H)
    throw std::invalid_argument(std::string(launcher) + ": strides must hold H heads of D (and H gates) per row");
  require_packets<floatX>(launcher, "y_stride", s.y_stride);
}

inline dim3 head_gate_grid(const HeadGateShape& s, int group) {
  return dim3(static_cast<unsigned>(ceil_div(static_cast<long long>(s.T) * s.H * group, kHeadGateBlock)));
}
}  // namespace detail

// out = g y per (token, head): y read, out written, one gate per head row; a product per value.
inline void head_gate_forward(floatX* out, const floatX* y, const floatX* gate, const HeadGateShape& shape,
                              cudaStream_t stream) {
  const int group = head_lane_group<floatX>("head_gate_forward", shape.D);
  detail::check_head_gate_shape("head_gate_forward", shape);
  require_aligned16("head_gate_forward", {out, y});
  if (shape.T == 0) return;
  const double head_rows = static_cast<double>(shape.T) * shape.H, values = head_rows * shape.D;
  const KernelCost cost{2.0 * values * sizeof(floatX) + head_rows * sizeof(floatX), values};
  LLMC_LAUNCH_COSTED(cost, head_gate_forward_kernel<floatX>, detail::head_gate_grid(shape, group),
                     dim3(kHeadGateBlock), 0, stream, out, y, gate, shape, group);
}

// From dout (the gradient of out): dy = g dout (written; may alias dout), dgate (fp32, the gates' columns of its
// rows) written: dout and y read, dy written, the gates read and their gradients written; three operations per
// value (the dot's multiply-add, the product).
inline void head_gate_backward(floatX* dy, float* dgate, const floatX* dout, const floatX* y, const floatX* gate,
                               const HeadGateShape& shape, cudaStream_t stream) {
  const int group = head_lane_group<floatX>("head_gate_backward", shape.D);
  detail::check_head_gate_shape("head_gate_backward", shape);
  require_aligned16("head_gate_backward", {dy, dout, y});
  if (shape.T == 0) return;
  const double head_rows = static_cast<double>(shape.T) * shape.H, values = head_rows * shape.D;
  const KernelCost cost{3.0 * values * sizeof(floatX) + head_rows * (sizeof(floatX) + 4.0), 3.0 * values};
  LLMC_LAUNCH_COSTED(cost, head_gate_backward_kernel<floatX>, detail::head_gate_grid(shape, group),
                     dim3(kHeadGateBlock), 0, stream, dy, dgate, dout, y, gate, shape, group);
}

}  // namespace llmc
