// The 2026-07-17 record's XSA (layers 1, 3, 4, 7): each head's attention output loses a per-token share of
// its component along the head's value, y' = y - tanh(alpha) (y . v / max(|v|^2, 1e-8)) v, forward and
// backward (docs/kernels.md#xsa). A group of lanes handles one (token, head) in 16-byte packets; the dot
// products are fixed-order group sums, so results are bitwise repeatable.
#pragma once

#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/kernels/mutant.h"

namespace llmc {

constexpr float kXsaNormFloor = 1e-8f;
constexpr int kXsaBlock = 256;

// Where the operands of one (token, head) live: row t of y (stride y_stride), of v (v_stride) and of the
// strengths alpha (alpha_stride, one per head), H heads of D.
struct XsaShape {
  int T = 0, H = 0, D = 0;
  int y_stride = 0, v_stride = 0, alpha_stride = 0;
  int dalpha_stride = 0;  // the backward's dalpha rows (fp32, e.g. columns of a gate gradient); 0: H (dense)
};

namespace detail {

// The lane group's sums of a.b over its head for up to three pairs (fixed order).
template <typename Tx, int kPairs>
__device__ void xsa_dots(float* dots, const Tx* const* a, const Tx* const* b, int D, int lane, int group, bool active) {
  using Packet = Packed128<Tx>;
  for (int k = 0; k < kPairs; k++) dots[k] = 0.0f;
  for (int p = lane; active && p < D / Packet::size; p += group)
    for (int k = 0; k < kPairs; k++) {
      const Packet x = load128(a[k] + p * Packet::size), y = load128(b[k] + p * Packet::size);
      for (int j = 0; j < Packet::size; j++) dots[k] += to_float(x[j]) * to_float(y[j]);
    }
  for (int k = 0; k < kPairs; k++) dots[k] = group_reduce_sum(dots[k], group);
}

}  // namespace detail

// out (T, H, D; stride y_stride; may alias y) = y - tanh(alpha) (y . v / max(|v|^2, 1e-8)) v.
template <typename Tx>
__global__ void xsa_forward_kernel(Tx* out, const Tx* y, const Tx* v, const Tx* alpha, XsaShape s, int group) {
  using Packet = Packed128<Tx>;
  const auto [t, h, head_row, lane, valid] = head_lane(s.T, s.H, group);
  const Tx* yr = y + static_cast<size_t>(t) * s.y_stride + static_cast<size_t>(h) * s.D;
  const Tx* vr = v + static_cast<size_t>(t) * s.v_stride + static_cast<size_t>(h) * s.D;
  const Tx* a_pairs[2] = {yr, vr};
  const Tx* b_pairs[2] = {vr, vr};
  float dots[2];  // y . v, |v|^2
  detail::xsa_dots<Tx, 2>(dots, a_pairs, b_pairs, s.D, lane, group, valid);
  if (!valid) return;
  const float strength = tanhf(to_float(alpha[static_cast<size_t>(t) * s.alpha_stride + h]));
  const float coefficient = strength * dots[0] / fmaxf(dots[1], kXsaNormFloor);
  Tx* o = out + static_cast<size_t>(t) * s.y_stride + static_cast<size_t>(h) * s.D;
  for (int p = lane; p < s.D / Packet::size; p += group) {
    const Packet yv = load128(yr + p * Packet::size), vv = load128(vr + p * Packet::size);
    Packet r;
    for (int j = 0; j < Packet::size; j++) r[j] = from_float<Tx>(to_float(yv[j]) - coefficient * to_float(vv[j]));
    store128(o + p * Packet::size, r);
  }
}

// With g = dout, a = tanh(alpha), c = y . v, q = max(|v|^2, 1e-8), e = v . g:
//   dy = g - (a e / q) v;  dv = -(a / q) (e y + c g) + [|v|^2 > 1e-8] (2 a c e / q^2) v;
//   dalpha = -(1 - a^2) c e / q.
template <typename Tx>
__global__ void xsa_backward_kernel(Tx* dy, Tx* dv, float* dalpha, const Tx* dout, const Tx* y, const Tx* v,
                                    const Tx* alpha, XsaShape s, int group) {
  using Packet = Packed128<Tx>;
  const auto [t, h, head_row, lane, valid] = head_lane(s.T, s.H, group);
  const size_t y_offset = static_cast<size_t>(t) * s.y_stride + static_cast<size_t>(h) * s.D;
  const size_t v_offset = static_cast<size_t>(t) * s.v_stride + static_cast<size_t>(h) * s.D;
  const Tx *yr = y + y_offset, *vr = v + v_offset, *gr = dout + y_offset;
  const Tx* a_pairs[3] = {yr, vr, vr};
  const Tx* b_pairs[3] = {vr, vr, gr};
  float dots[3];  // c = y . v, |v|^2, e = v . g
  detail::xsa_dots<Tx, 3>(dots, a_pairs, b_pairs, s.D, lane, group, valid);
  if (!valid) return;
  const float a = tanhf(to_float(alpha[static_cast<size_t>(t) * s.alpha_stride + h]));
  const float q = fmaxf(dots[1], kXsaNormFloor), c = dots[0], e = dots[2];
  const float along_v =
      dots[1] > kXsaNormFloor ? LLMC_MUTANT("xsa.no_norm_derivative", 2.0f * a * c * e / (q * q), 0.0f) : 0.0f;
  for (int p = lane; p < s.D / Packet::size; p += group) {
    const Packet yv = load128(yr + p * Packet::size), vv = load128(vr + p * Packet::size);
    const Packet gv = load128(gr + p * Packet::size);
    Packet new_dy, new_dv;
    for (int j = 0; j < Packet::size; j++) {
      const float yj = to_float(yv[j]), vj = to_float(vv[j]), gj = to_float(gv[j]);
      new_dy[j] = from_float<Tx>(gj - a * e / q * vj);
      new_dv[j] = from_float<Tx>(-a / q * (e * yj + c * gj) + along_v * vj);
    }
    store128(dy + y_offset + p * Packet::size, new_dy);
    store128(dv + v_offset + p * Packet::size, new_dv);
  }
  const int dalpha_stride = s.dalpha_stride > 0 ? s.dalpha_stride : s.H;
  if (lane == 0) dalpha[static_cast<size_t>(t) * dalpha_stride + h] = -(1.0f - a * a) * c * e / q;
}

namespace detail {
inline void check_xsa_shape(const char* launcher, const XsaShape& s) {
  if (s.T < 0 || s.H <= 0 || s.y_stride < s.H * s.D || s.v_stride < s.H * s.D || s.alpha_stride < s.H)
    throw std::invalid_argument(std::string(launcher) + ": strides must hold H heads of D (and H strengths) per row");
  require_packets<floatX>(launcher, "y_stride", s.y_stride);
  require_packets<floatX>(launcher, "v_stride", s.v_stride);
}
}  // namespace detail

// out = XSA(y, v, alpha); out may alias y.
inline void xsa_forward(floatX* out, const floatX* y, const floatX* v, const floatX* alpha, const XsaShape& shape,
                        cudaStream_t stream) {
  const int group = head_lane_group<floatX>("xsa_forward", shape.D);
  detail::check_xsa_shape("xsa_forward", shape);
  require_aligned16("xsa_forward", {out, y, v});
  if (shape.T == 0) return;
  const long long threads = static_cast<long long>(shape.T) * shape.H * group;
  // y and v read, out written, the strengths; per (token, head) two dots and the update (6 per value).
  const double head_rows = static_cast<double>(shape.T) * shape.H, values = head_rows * shape.D;
  const KernelCost cost{3.0 * values * sizeof(floatX) + head_rows * sizeof(floatX), 6.0 * values + 8.0 * head_rows};
  LLMC_LAUNCH_COSTED(cost, xsa_forward_kernel<floatX>, dim3(static_cast<unsigned>(ceil_div(threads, kXsaBlock))),
                     dim3(kXsaBlock), 0, stream, out, y, v, alpha, shape, group);
}

// From dout (the gradient of out, stride y_stride): dy written (stride y_stride; may alias dout), XSA's share of
// dv written (stride v_stride; the columns past H D of a row untouched: the caller adds the attention's own dv,
// which the attention backward computes from dy), dalpha (T rows of H, dalpha_stride) written.
inline void xsa_backward(floatX* dy, floatX* dv, float* dalpha, const floatX* dout, const floatX* y, const floatX* v,
                         const floatX* alpha, const XsaShape& shape, cudaStream_t stream) {
  const int group = head_lane_group<floatX>("xsa_backward", shape.D);
  detail::check_xsa_shape("xsa_backward", shape);
  require_aligned16("xsa_backward", {dy, dv, dout, y, v});
  if (shape.T == 0) return;
  const long long threads = static_cast<long long>(shape.T) * shape.H * group;
  // dout, y, v read, dv and dy written, the strengths read and their gradients written (fp32); per (token, head)
  // three dots and the two gradients (13 per value).
  const double head_rows = static_cast<double>(shape.T) * shape.H, values = head_rows * shape.D;
  const KernelCost cost{5.0 * values * sizeof(floatX) + head_rows * (sizeof(floatX) + 4.0),
                        13.0 * values + 16.0 * head_rows};
  LLMC_LAUNCH_COSTED(cost, xsa_backward_kernel<floatX>, dim3(static_cast<unsigned>(ceil_div(threads, kXsaBlock))),
                     dim3(kXsaBlock), 0, stream, dy, dv, dalpha, dout, y, v, alpha, shape, group);
}

}  // namespace llmc
