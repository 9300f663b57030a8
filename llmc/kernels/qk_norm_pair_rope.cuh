// Per-head RMSNorm of q and k fused with the 2026-07-17 record's rotary embedding, forward and backward: the
// first `pairs` adjacent pairs (2m, 2m+1) of each normalised head rotate by theta = position * w_m,
// y[2m] = n[2m] c + n[2m+1] s, y[2m+1] = n[2m+1] c - n[2m] s; the remaining dims are stationary. The
// position of head h in row t is t (position_step 1) or 2t + h % 2 (position_step 2: the paired-head
// layers' second table). With key_offset, each k head's stationary dims come from row t - 1 (row 0 keeps
// its own): the partial key offset of the long-window layers (k heads: the second half of each row's heads,
// or from PairRopeLayout::first_key_head on). A group of lanes handles one head in 16-byte
// packets; the tables are rope_tables_build's (rows = positions, `pairs` columns).
#pragma once

#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/kernels/rmsnorm.cuh"
#include "llmc/kernels/mutant.h"

namespace llmc {

constexpr int kPairRopeBlock = 256;

struct PairRopeLayout {
  int pairs = 0;            // rotated pairs per head (the table's columns); dims [2 pairs, D) are stationary
  int position_step = 1;    // 1: position t; 2: position 2t + h % 2
  bool key_offset = false;  // k heads take row t - 1's stationary dims
  // The row's heads from this one on are k heads; -1: the second half (rows of q heads, then k heads). 0 lets
  // a launch over k heads alone (rows of a separate k buffer) apply the key offset to all of them.
  int first_key_head = -1;
  // inp's row 0 is this row of the sequence (a KV cache's continuation): positions count from it, and from a row
  // after the first, row 0's key offset reads the row before inp. Forward only.
  int first_row = 0;
};

namespace detail {

// One head of one row: where it is, its input and its table rows.
template <typename Tx>
struct PairRopeHead {
  int t, h;
  bool offset;  // a k head whose stationary dims come from row t - 1
  const Tx* x;
  const Tx* cos_row;
  const Tx* sin_row;
  __device__ PairRopeHead(const Tx* inp, int in_stride, const Tx* cos_table, const Tx* sin_table, const HeadLane& at,
                          int heads, int D, const PairRopeLayout& layout)
      : t(at.t), h(at.h) {
    offset = layout.key_offset && h >= (layout.first_key_head < 0 ? heads / 2 : layout.first_key_head);
    x = inp + static_cast<size_t>(t) * in_stride + static_cast<size_t>(h) * D;
    const size_t position = static_cast<size_t>(t + layout.first_row) * layout.position_step + h % layout.position_step;
    cos_row = cos_table + position * layout.pairs;
    sin_row = sin_table + position * layout.pairs;
  }
};

// The sum of squares of a head's D values, over the lane group.
template <typename Tx>
__device__ float head_sum_squares(const Tx* x, int D, int lane, int group, bool active) {
  using Packet = Packed128<Tx>;
  float sum = 0.0f;
  for (int p = lane; active && p < D / Packet::size; p += group) {
    const Packet v = load128(x + p * Packet::size);
    for (int j = 0; j < Packet::size; j++) sum += to_float(v[j]) * to_float(v[j]);
  }
  return group_reduce_sum(sum, group);
}

}  // namespace detail

template <typename Tx>
__global__ void qk_norm_pair_rope_forward_kernel(Tx* out, int out_stride, const Tx* inp, int in_stride, float* rstd,
                                                 const Tx* cos_table, const Tx* sin_table, int T, int heads, int D,
                                                 PairRopeLayout layout, int group) {
  using Packet = Packed128<Tx>;
  const HeadLane at = head_lane(T, heads, group);
  const detail::PairRopeHead<Tx> head(inp, in_stride, cos_table, sin_table, at, heads, D, layout);
  const float r = rsqrtf(detail::head_sum_squares(head.x, D, at.lane, group, at.valid) / D + kRmsNormEps);
  const bool from_previous = head.offset && (head.t > 0 || layout.first_row > 0);
  const Tx* previous = from_previous ? head.x - in_stride : head.x;
  const float r_previous =
      rsqrtf(detail::head_sum_squares(previous, D, at.lane, group, at.valid && from_previous) / D + kRmsNormEps);
  if (!at.valid) return;
  Tx* y = out + static_cast<size_t>(head.t) * out_stride + static_cast<size_t>(head.h) * D;
  const int rotated = 2 * layout.pairs;
  for (int p = at.lane; p < D / Packet::size; p += group) {
    const int d0 = p * Packet::size;
    const Packet v = load128((d0 >= rotated && from_previous ? previous : head.x) + d0);
    const float scale = d0 >= rotated && from_previous ? r_previous : r;
    Packet o;
    for (int j = 0; j < Packet::size; j += 2) {
      const float n0 = to_float(v[j]) * scale, n1 = to_float(v[j + 1]) * scale;
      if (d0 + j < rotated) {
        const int m = (d0 + j) / 2;
        const float c = to_float(head.cos_row[m]), s = to_float(head.sin_row[m]);
        o[j] = from_float<Tx>(n0 * c + n1 * s);
        o[j + 1] = from_float<Tx>(n1 * c - n0 * s);
      } else {
        o[j] = from_float<Tx>(n0);
        o[j + 1] = from_float<Tx>(n1);
      }
    }
    store128(y + d0, o);
  }
  if (at.lane == 0 && rstd != nullptr) rstd[at.head_row] = r;
}

namespace detail {

// dn, the gradient of one packet of the normalised head n (row t, head h), from the output gradients: the
// transposed rotation of dy[t] on rotated dims; on stationary dims dy[t], or for an offset k head dy[t + 1]
// (if there is a row t + 1) plus, for row 0, its own dy[0].
template <typename Tx>
__device__ void pair_rope_dn(float* dn, const Tx* dy_row, int dout_stride, const PairRopeHead<Tx>& head, int T, int d0,
                             int rotated) {
  using Packet = Packed128<Tx>;
  if (d0 < rotated) {
    const Packet g = load128(dy_row + d0);
    for (int j = 0; j < Packet::size; j += 2) {
      const int m = (d0 + j) / 2;
      const float c = to_float(head.cos_row[m]), s = to_float(head.sin_row[m]);
      dn[j] = to_float(g[j]) * c - to_float(g[j + 1]) * s;
      dn[j + 1] = to_float(g[j]) * s + to_float(g[j + 1]) * c;
    }
    return;
  }
  for (int j = 0; j < Packet::size; j++) dn[j] = 0.0f;
  const bool own = !head.offset || head.t == 0,
             next = head.offset && head.t + 1 < LLMC_MUTANT("pair_rope.offset_gradient_misses_last", T, T - 1);
  if (own) {
    const Packet g = load128(dy_row + d0);
    for (int j = 0; j < Packet::size; j++) dn[j] += to_float(g[j]);
  }
  if (next) {
    const Packet g = load128(dy_row + dout_stride + d0);
    for (int j = 0; j < Packet::size; j++) dn[j] += to_float(g[j]);
  }
}

}  // namespace detail

// dx = r (dn - n mean(dn n)) per head with n = x r recomputed from the forward's input.
template <typename Tx>
__global__ void qk_norm_pair_rope_backward_kernel(Tx* dinp, int dinp_stride, const Tx* dout, int dout_stride,
                                                  const Tx* inp, int in_stride, const float* rstd, const Tx* cos_table,
                                                  const Tx* sin_table, int T, int heads, int D, PairRopeLayout layout,
                                                  int group) {
  using Packet = Packed128<Tx>;
  const HeadLane at = head_lane(T, heads, group);
  const detail::PairRopeHead<Tx> head(inp, in_stride, cos_table, sin_table, at, heads, D, layout);
  const Tx* dy_row = dout + static_cast<size_t>(head.t) * dout_stride + static_cast<size_t>(head.h) * D;
  const float r = at.valid ? rstd[at.head_row] : 0.0f;
  const int rotated = 2 * layout.pairs;
  float dn_dot_n = 0.0f;
  for (int p = at.lane; at.valid && p < D / Packet::size; p += group) {
    float dn[Packet::size];
    detail::pair_rope_dn(dn, dy_row, dout_stride, head, T, p * Packet::size, rotated);
    const Packet v = load128(head.x + p * Packet::size);
    for (int j = 0; j < Packet::size; j++) dn_dot_n += dn[j] * to_float(v[j]) * r;
  }
  const float coefficient = r * group_reduce_sum(dn_dot_n, group) / D;  // r mean(dn n)
  if (!at.valid) return;
  Tx* dx = dinp + static_cast<size_t>(head.t) * dinp_stride + static_cast<size_t>(head.h) * D;
  for (int p = at.lane; p < D / Packet::size; p += group) {
    float dn[Packet::size];
    detail::pair_rope_dn(dn, dy_row, dout_stride, head, T, p * Packet::size, rotated);
    const Packet v = load128(head.x + p * Packet::size);
    Packet g;
    for (int j = 0; j < Packet::size; j++) g[j] = from_float<Tx>(r * dn[j] - to_float(v[j]) * r * coefficient);
    store128(dx + p * Packet::size, g);
  }
}

namespace detail {
// Lanes per head (head_lane_group) after checking the layout.
template <typename Tx>
int pair_rope_lane_group(const char* launcher, int D, int heads, const PairRopeLayout& layout) {
  const int group = head_lane_group<Tx>(launcher, D);
  const std::string where = std::string(launcher) + ": ";
  if (layout.pairs < 0 || 2 * layout.pairs > D || (2 * layout.pairs) % Packed128<Tx>::size != 0)
    throw std::invalid_argument(where + "pairs = " + std::to_string(layout.pairs) +
                                " must rotate whole packets within the head");
  if (layout.position_step != 1 && layout.position_step != 2)
    throw std::invalid_argument(where + "position_step must be 1 or 2");
  if (layout.key_offset && layout.first_key_head < 0 && heads % 2 != 0)
    throw std::invalid_argument(where + "key_offset needs q and k heads (an even head count) or first_key_head");
  if (layout.first_key_head >= heads) throw std::invalid_argument(where + "first_key_head past the row's heads");
  return group;
}

// `tensors` head-sized tensors of T x heads x D read or written once, the rstd row and both tables' rows of the
// positions (2T with position_step 2); per head the norm's and the pass's per-dim work plus 6 per rotated pair.
inline KernelCost pair_rope_cost(int T, int heads, int D, const PairRopeLayout& layout, int tensors,
                                 double flops_per_head) {
  const double head_rows = static_cast<double>(T) * heads;
  const double table_rows = static_cast<double>(T) * layout.position_step;
  return KernelCost{tensors * head_rows * D * sizeof(floatX) + 4.0 * head_rows +
                        2.0 * table_rows * layout.pairs * sizeof(floatX),
                    head_rows * (flops_per_head + 6.0 * layout.pairs)};
}
}  // namespace detail

// q and k of T rows, `heads` (= 2H: q heads, then k heads) consecutive heads of D per row of inp (row stride
// in_stride), normalised and rotated into out (row stride out_stride). out may alias inp only without
// key_offset (an offset row reads the row before it). rstd (T * heads) keeps each head's 1/rms. The tables
// hold rows up to the largest position (T or 2T) and layout.pairs columns.
inline void qk_norm_pair_rope_forward(floatX* out, int out_stride, const floatX* inp, int in_stride, float* rstd,
                                      const floatX* cos_table, const floatX* sin_table, int T, int heads, int D,
                                      const PairRopeLayout& layout, cudaStream_t stream) {
  const char* name = "qk_norm_pair_rope_forward";
  const int group = detail::pair_rope_lane_group<floatX>(name, D, heads, layout);
  require_packets<floatX>(name, "out_stride", out_stride);
  require_packets<floatX>(name, "in_stride", in_stride);
  require_aligned16(name, {out, inp, cos_table, sin_table});
  if (layout.key_offset && out == inp)
    throw std::invalid_argument(std::string(name) + ": key_offset cannot run in place");
  if (T <= 0 || heads <= 0) return;
  const long long threads = static_cast<long long>(T) * heads * group;
  LLMC_LAUNCH_COSTED(detail::pair_rope_cost(T, heads, D, layout, 2, 3.0 * D), qk_norm_pair_rope_forward_kernel<floatX>,
                     dim3(static_cast<unsigned>(ceil_div(threads, kPairRopeBlock))), dim3(kPairRopeBlock), 0, stream,
                     out, out_stride, inp, in_stride, rstd, cos_table, sin_table, T, heads, D, layout, group);
}

// dinp (written) = the gradient of the forward's input from dout; inp and rstd as in the forward. dinp may
// alias dout only without key_offset (an offset row reads the gradient of the row after it).
inline void qk_norm_pair_rope_backward(floatX* dinp, int dinp_stride, const floatX* dout, int dout_stride,
                                       const floatX* inp, int in_stride, const float* rstd, const floatX* cos_table,
                                       const floatX* sin_table, int T, int heads, int D, const PairRopeLayout& layout,
                                       cudaStream_t stream) {
  const char* name = "qk_norm_pair_rope_backward";
  const int group = detail::pair_rope_lane_group<floatX>(name, D, heads, layout);
  require_packets<floatX>(name, "dinp_stride", dinp_stride);
  require_packets<floatX>(name, "dout_stride", dout_stride);
  require_packets<floatX>(name, "in_stride", in_stride);
  require_aligned16(name, {dinp, dout, inp, cos_table, sin_table});
  if (layout.key_offset && dinp == dout)
    throw std::invalid_argument(std::string(name) + ": key_offset cannot run in place");
  if (layout.first_row != 0) throw std::invalid_argument(std::string(name) + ": a continuation has no backward");
  if (T <= 0 || heads <= 0) return;
  const long long threads = static_cast<long long>(T) * heads * group;
  LLMC_LAUNCH_COSTED(detail::pair_rope_cost(T, heads, D, layout, 3, 7.0 * D),
                     qk_norm_pair_rope_backward_kernel<floatX>,
                     dim3(static_cast<unsigned>(ceil_div(threads, kPairRopeBlock))), dim3(kPairRopeBlock), 0, stream,
                     dinp, dinp_stride, dout, dout_stride, inp, in_stride, rstd, cos_table, sin_table, T, heads, D,
                     layout, group);
}

}  // namespace llmc
