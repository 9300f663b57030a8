// The 2026-07-17 record's gated value embeddings (layers 1, 2, 8, 9): v[t, h, :] += 2 sigmoid(z[t, h]) ve[t, h, :]
// with z[t, h] = [xn[t][0:6], ve[t][0:6]] . w[h] (w (H, 12) floatX: one slot of the gate bank), xn the
// attention input's norm and ve the value-embedding row. Backward: dve (the product's and the gate input's
// share) and dxn[:, 0:6] accumulated, dw accumulated through per-chunk partials summed in a fixed order (no
// atomics). A group of lanes handles one head in 16-byte packets.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/attention_gate.cuh"
#include "llmc/kernels/reduction.cuh"
#include "llmc/kernels/mutant.h"

namespace llmc {

constexpr int kValueGateHalf = 6;  // the gate reads 6 channels of xn and 6 of ve (kGateWidth = 12 weights per head)
constexpr int kValueGateBlock = 256;

// sigmoid(z) of one (token, head), the 12 products summed in a fixed order by each lane on its own.
template <typename Tx>
__device__ __forceinline__ float value_gate_sigmoid(const Tx* xn_row, const Tx* ve_row, const Tx* w_head) {
  float z = 0.0f;
  for (int c = 0; c < kValueGateHalf; c++) z += to_float(xn_row[c]) * to_float(w_head[c]);
  for (int c = 0; c < kValueGateHalf; c++) z += to_float(ve_row[c]) * to_float(w_head[kValueGateHalf + c]);
  return 1.0f / (1.0f + expf(-z));
}

struct ValueGateShape {
  int T = 0, H = 0, D = 0;
  int v_stride = 0, xn_stride = 0;  // rows of v (e.g. inside QKV) and of xn; ve rows are H*D contiguous
};

template <typename Tx>
__global__ void value_embed_gate_forward_kernel(Tx* v_out, const Tx* v, const Tx* ve, const Tx* xn, const Tx* w,
                                                ValueGateShape s, int group) {
  using Packet = Packed128<Tx>;
  const auto [t, h, head_row, lane, valid] = head_lane(s.T, s.H, group);
  if (!valid) return;  // no shuffles in this kernel
  const Tx* ve_row = ve + static_cast<size_t>(t) * s.H * s.D;
  const float g = 2.0f * value_gate_sigmoid(xn + static_cast<size_t>(t) * s.xn_stride, ve_row, w + h * kGateWidth);
  const size_t v_base = static_cast<size_t>(t) * s.v_stride + static_cast<size_t>(h) * s.D;
  for (int p = lane; p < s.D / Packet::size; p += group) {
    const Packet a = load128(v + v_base + p * Packet::size), e = load128(ve_row + h * s.D + p * Packet::size);
    Packet r;
    for (int j = 0; j < Packet::size; j++) r[j] = from_float<Tx>(to_float(a[j]) + g * to_float(e[j]));
    store128(v_out + v_base + p * Packet::size, r);
  }
}

// dve[t, h, :] (+)= 2 sigmoid(z) dv[t, h, :] (stored as 0 + the product, the bits a zeroed dve would get, unless
// accumulate); gate_grad[t H + h] = (ve . dv) 2 sigmoid(z) (1 - sigmoid(z)).
template <typename Tx>
__global__ void value_embed_gate_backward_kernel(Tx* dve, bool accumulate, float* gate_grad, const Tx* dv,
                                                 const Tx* ve, const Tx* xn, const Tx* w, ValueGateShape s,
                                                 int group) {
  using Packet = Packed128<Tx>;
  const auto [t, h, head_row, lane, valid] = head_lane(s.T, s.H, group);
  const Tx* ve_row = ve + static_cast<size_t>(t) * s.H * s.D;
  const float sig =
      valid ? value_gate_sigmoid(xn + static_cast<size_t>(t) * s.xn_stride, ve_row, w + h * kGateWidth) : 0.0f;
  const size_t v_base = static_cast<size_t>(t) * s.v_stride + static_cast<size_t>(h) * s.D;
  const size_t e_base = static_cast<size_t>(t) * s.H * s.D + static_cast<size_t>(h) * s.D;
  const bool add_old = LLMC_MUTANT("value_gate.store_adds_old", accumulate, true);
  float dot = 0.0f;
  for (int p = lane; valid && p < s.D / Packet::size; p += group) {
    const Packet g = load128(dv + v_base + p * Packet::size), e = load128(ve + e_base + p * Packet::size);
    const Packet old = add_old ? load128(dve + e_base + p * Packet::size) : Packet::constant(from_float<Tx>(0.0f));
    Packet r;
    for (int j = 0; j < Packet::size; j++) {
      dot += to_float(e[j]) * to_float(g[j]);
      r[j] = from_float<Tx>(to_float(old[j]) + 2.0f * sig * to_float(g[j]));
    }
    store128(dve + e_base + p * Packet::size, r);
  }
  dot = group_reduce_sum(dot, group);
  if (valid && lane == 0)
    gate_grad[head_row] = dot * LLMC_MUTANT("value_gate.no_factor_two", 2.0f, 1.0f) * sig * (1.0f - sig);
}

// Block = one chunk of rows; thread k = h * 12 + c: partials[chunk][k] = sum_t gate_grad[t, h] in_c[t] with
// in = [xn[t][0:6], ve[t][0:6]]; threads of head 0 also add the inputs' gradients, dxn[t][c] (c < 6) or
// dve[t][c - 6], += sum_h gate_grad[t, h] w[h][c], after value_embed_gate_backward_kernel's dve in stream order.
template <typename Tx>
__global__ void value_embed_gate_input_grads_kernel(Tx* dxn, int dxn_stride, Tx* dve, float* partials,
                                                    const float* gate_grad, const Tx* xn, const Tx* ve, const Tx* w,
                                                    ValueGateShape s, int rows_per_chunk) {
  const int k = threadIdx.x, h = k / kGateWidth, c = k % kGateWidth;
  const int first = blockIdx.x * rows_per_chunk;
  const int last = first + rows_per_chunk < s.T ? first + rows_per_chunk : s.T;
  if (k >= s.H * kGateWidth) return;
  auto input = [&](int t) {
    return c < kValueGateHalf ? to_float(xn[static_cast<size_t>(t) * s.xn_stride + c])
                              : to_float(ve[static_cast<size_t>(t) * s.H * s.D + c - kValueGateHalf]);
  };
  float acc = 0.0f;
  for (int t = first; t < last; t++) acc += gate_grad[static_cast<size_t>(t) * s.H + h] * input(t);
  partials[static_cast<size_t>(blockIdx.x) * s.H * kGateWidth + k] = acc;
  if (h != 0) return;
  for (int t = first; t < last; t++) {
    float sum = 0.0f;
    for (int head = 0; head < s.H; head++)
      sum += gate_grad[static_cast<size_t>(t) * s.H + head] * to_float(w[head * kGateWidth + c]);
    Tx* target = c < kValueGateHalf ? dxn + static_cast<size_t>(t) * dxn_stride + c
                                    : dve + static_cast<size_t>(t) * s.H * s.D + c - kValueGateHalf;
    *target = from_float<Tx>(to_float(*target) + sum);
  }
}

namespace detail {
inline void check_value_gate(const char* launcher, const ValueGateShape& s, int dxn_stride) {
  const std::string where = std::string(launcher) + ": ";
  if (s.H <= 0 || s.H * kGateWidth > 1024) throw std::invalid_argument(where + "H must be in [1, 85]");
  if (s.T < 0 || s.D < kValueGateHalf || s.v_stride < s.H * s.D)
    throw std::invalid_argument(where + "v rows must hold H heads of D >= 6");
  if (s.xn_stride < kValueGateHalf || dxn_stride < kValueGateHalf)
    throw std::invalid_argument(where + "xn rows must hold >= 6 values");
  require_packets<floatX>(launcher, "v_stride", s.v_stride);
}
}  // namespace detail

// v_out = v + 2 sigmoid(z) ve per (token, head); v_out may alias v (the values inside the QKV buffer).
inline void value_embed_gate_forward(floatX* v_out, const floatX* v, const floatX* ve, const floatX* xn,
                                     const floatX* w, const ValueGateShape& shape, cudaStream_t stream) {
  const int group = head_lane_group<floatX>("value_embed_gate_forward", shape.D);
  detail::check_value_gate("value_embed_gate_forward", shape, shape.xn_stride);
  require_aligned16("value_embed_gate_forward", {v_out, v, ve});
  if (shape.T == 0) return;
  // v and ve read, v_out written, the gate's 12 inputs per token; per (token, head) the gate (24 and the
  // sigmoid's 2) and 3 per value.
  const double head_rows = static_cast<double>(shape.T) * shape.H, values = head_rows * shape.D;
  const KernelCost cost{3.0 * values * sizeof(floatX) + 12.0 * shape.T * sizeof(floatX),
                        head_rows * 26.0 + 3.0 * values};
  LLMC_LAUNCH_COSTED(cost, value_embed_gate_forward_kernel<floatX>,
                     dim3(static_cast<unsigned>(ceil_div(static_cast<long long>(shape.T) * shape.H * group,
                                                         kValueGateBlock))),
                     dim3(kValueGateBlock), 0, stream, v_out, v, ve, xn, w, shape, group);
}

inline size_t value_embed_gate_backward_scratch_floats(int T, int H) {
  return attention_gate_backward_scratch_floats(T, H);
}

// From dv, the gradient of v_out (v's own gradient is dv itself and stays with the caller): dve (T, H*D)
// accumulated, or stored when accumulate_dve is false (dve's first writer: its old contents are not read),
// dxn[:, 0:6] accumulated (rows at dxn + t * dxn_stride), dw (H, 12) accumulated.
inline void value_embed_gate_backward(floatX* dve, bool accumulate_dve, floatX* dxn, int dxn_stride, floatX* dw,
                                      const floatX* dv, const floatX* ve, const floatX* xn, const floatX* w,
                                      const ValueGateShape& shape, float* scratch, size_t scratch_floats,
                                      cudaStream_t stream) {
  const char* name = "value_embed_gate_backward";
  const int group = head_lane_group<floatX>(name, shape.D);
  detail::check_value_gate(name, shape, dxn_stride);
  require_aligned16(name, {dve, dv, ve});
  if (shape.T == 0) return;
  require_scratch(name, scratch_floats, value_embed_gate_backward_scratch_floats(shape.T, shape.H));
  float* gate_grad = scratch;
  float* partials = scratch + static_cast<size_t>(shape.T) * shape.H;
  const ColumnChunking chunking = column_chunking(shape.T);
  const int K = shape.H * kGateWidth;
  // dv and ve read, dve written (and read when accumulating), the gate gradients (fp32) written; then the gates'
  // inputs (12 per token) read and their 12 gradients added, the per-chunk partials written and summed into dw.
  const double head_rows = static_cast<double>(shape.T) * shape.H, values = head_rows * shape.D;
  const double partial_bytes = 4.0 * chunking.num_chunks * K;
  const double dve_tensors = accumulate_dve ? 4.0 : 3.0;
  const KernelCost products{dve_tensors * values * sizeof(floatX) + 4.0 * head_rows, head_rows * 6.0 + 4.0 * values};
  const KernelCost inputs{4.0 * head_rows + 3.0 * kGateWidth * shape.T * sizeof(floatX) + partial_bytes,
                          4.0 * head_rows * kGateWidth};
  const KernelCost weights{partial_bytes + 2.0 * K * sizeof(floatX), static_cast<double>(chunking.num_chunks) * K};
  LLMC_LAUNCH_COSTED(products, value_embed_gate_backward_kernel<floatX>,
                     dim3(static_cast<unsigned>(ceil_div(static_cast<long long>(shape.T) * shape.H * group,
                                                         kValueGateBlock))),
                     dim3(kValueGateBlock), 0, stream, dve, accumulate_dve, gate_grad, dv, ve, xn, w, shape, group);
  LLMC_LAUNCH_COSTED(inputs, value_embed_gate_input_grads_kernel<floatX>,
                     dim3(static_cast<unsigned>(chunking.num_chunks)),
                     dim3(static_cast<unsigned>(ceil_div(K, kWarpSize)) * kWarpSize), 0, stream, dxn, dxn_stride, dve,
                     partials, static_cast<const float*>(gate_grad), xn, ve, w, shape, chunking.rows_per_chunk);
  LLMC_LAUNCH_COSTED(weights, attention_gate_weight_grads_kernel<floatX>, dim3(static_cast<unsigned>(K)),
                     dim3(kWarpSize), 0, stream, dw, static_cast<const float*>(partials), chunking.num_chunks, K);
}

}  // namespace llmc
