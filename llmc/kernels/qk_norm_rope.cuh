// Per-head RMSNorm of q and k fused with the speedrun model's half-truncated RoPE, forward and backward,
// and the kernel that (re)builds the cos/sin tables from the frequencies (at start and after each YaRN
// update). A head of D is rotated in halves: x1 = x[0:D/2], x2 = x[D/2:D], y1 = n1 c + n2 s,
// y2 = -n1 s + n2 c with n = x / rms(x) (eps FLT_EPSILON) and c, s = cos, sin(t w_k) from the tables.
// A group of lanes (a power of two, up to a warp) handles one head in 16-byte packets.
#pragma once

#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/kernels/rmsnorm.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

constexpr int kQkNormRopeBlock = 256;

// cos_table, sin_table (T, half) = cos, sin(t * freq[k]): theta in fp32 as the reference computes it,
// then rounded to Tx (bf16 in the bf16 build).
template <typename Tx>
__global__ void rope_tables_kernel(Tx* cos_table, Tx* sin_table, const float* freq, int T, int half) {
  const size_t total = static_cast<size_t>(T) * half;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int t = LLMC_MUTANT("rope_tables.next_position", static_cast<int>(i / half), static_cast<int>(i / half) + 1);
    const float theta = static_cast<float>(t) * freq[i % half];
    cos_table[i] = from_float<Tx>(cosf(theta));
    sin_table[i] = from_float<Tx>(sinf(theta));
  }
}

// Heads: `heads` consecutive heads of D per row (q heads then k heads: 2H), row t at inp + t * in_stride.
// Lanes of head rows past the end still take part in the shuffles, with no memory access.
template <typename Tx>
__global__ void qk_norm_rope_forward_kernel(Tx* out, int out_stride, const Tx* inp, int in_stride, float* rstd,
                                            const Tx* cos_table, const Tx* sin_table, int T, int heads, int D,
                                            int group) {
  using Packet = Packed128<Tx>;
  const auto [t, h, head_row, lane, valid] = head_lane(T, heads, group);
  const int half = D / 2, packets = half / Packet::size;
  const Tx* x = inp + static_cast<size_t>(t) * in_stride + static_cast<size_t>(h) * D;
  float sum_squares = 0.0f;
  for (int p = lane; valid && p < packets; p += group) {
    const Packet x1 = load128(x + p * Packet::size), x2 = load128(x + half + p * Packet::size);
    for (int j = 0; j < Packet::size; j++)
      sum_squares += to_float(x1[j]) * to_float(x1[j]) + to_float(x2[j]) * to_float(x2[j]);
  }
  const int reduce_group = LLMC_MUTANT("qk_norm_rope.partial_group", group, group / 2 > 0 ? group / 2 : 1);
  const float r = rsqrtf(group_reduce_sum(sum_squares, reduce_group) / D + kRmsNormEps);
  if (!valid) return;
  Tx* y = out + static_cast<size_t>(t) * out_stride + static_cast<size_t>(h) * D;
  for (int p = lane; p < packets; p += group) {
    const Packet x1 = load128(x + p * Packet::size), x2 = load128(x + half + p * Packet::size);
    const Packet c = load128(cos_table + static_cast<size_t>(t) * half + p * Packet::size);
    const Packet s = load128(sin_table + static_cast<size_t>(t) * half + p * Packet::size);
    Packet y1, y2;
    for (int j = 0; j < Packet::size; j++) {
      const float n1 = to_float(x1[j]) * r, n2 = to_float(x2[j]) * r;
      y1[j] = from_float<Tx>(n1 * to_float(c[j]) + n2 * to_float(s[j]));
      y2[j] = from_float<Tx>(-n1 * to_float(s[j]) + n2 * to_float(c[j]));
    }
    store128(y + p * Packet::size, y1);
    store128(y + half + p * Packet::size, y2);
  }
  if (lane == 0 && rstd != nullptr) rstd[head_row] = r;
}

// One packet pair of the backward: dn = R^T dy (the rotation transposed) and n = x r, for both halves.
template <typename Tx>
struct RopeBackwardPacket {
  float dn1[Packed128<Tx>::size], dn2[Packed128<Tx>::size], n1[Packed128<Tx>::size], n2[Packed128<Tx>::size];

  __device__ RopeBackwardPacket(const Tx* dy, const Tx* x, const Tx* cos_row, const Tx* sin_row, int half, int p,
                                float r) {
    using Packet = Packed128<Tx>;
    const Packet dy1 = load128(dy + p * Packet::size), dy2 = load128(dy + half + p * Packet::size);
    const Packet x1 = load128(x + p * Packet::size), x2 = load128(x + half + p * Packet::size);
    const Packet c = load128(cos_row + p * Packet::size), s = load128(sin_row + p * Packet::size);
    const float sin_sign = LLMC_MUTANT("qk_norm_rope.forward_rotation", 1.0f, -1.0f);
    for (int j = 0; j < Packet::size; j++) {
      const float cj = to_float(c[j]), sj = sin_sign * to_float(s[j]);
      dn1[j] = to_float(dy1[j]) * cj - to_float(dy2[j]) * sj;
      dn2[j] = to_float(dy1[j]) * sj + to_float(dy2[j]) * cj;
      n1[j] = to_float(x1[j]) * r;
      n2[j] = to_float(x2[j]) * r;
    }
  }
};

// dx = r (dn - n mean(dn n)) with n recomputed from the forward's input x. Pass 1 sums dn n over the
// head, pass 2 writes dx; each lane reads and writes only its own packets, so dinp may alias dout.
template <typename Tx>
__global__ void qk_norm_rope_backward_kernel(Tx* dinp, int dinp_stride, const Tx* dout, int dout_stride, const Tx* inp,
                                             int in_stride, const float* rstd, const Tx* cos_table, const Tx* sin_table,
                                             int T, int heads, int D, int group) {
  using Packet = Packed128<Tx>;
  const auto [t, h, head_row, lane, valid] = head_lane(T, heads, group);
  const int half = D / 2, packets = half / Packet::size;
  const Tx* x = inp + static_cast<size_t>(t) * in_stride + static_cast<size_t>(h) * D;
  const Tx* dy = dout + static_cast<size_t>(t) * dout_stride + static_cast<size_t>(h) * D;
  const Tx* cos_row = cos_table + static_cast<size_t>(t) * half;
  const Tx* sin_row = sin_table + static_cast<size_t>(t) * half;
  const float r = valid ? rstd[head_row] : 0.0f;
  float dn_dot_n = 0.0f;
  for (int p = lane; valid && p < packets; p += group) {
    const RopeBackwardPacket<Tx> v(dy, x, cos_row, sin_row, half, p, r);
    for (int j = 0; j < Packet::size; j++) dn_dot_n += v.dn1[j] * v.n1[j] + v.dn2[j] * v.n2[j];
  }
  const float coefficient = r * group_reduce_sum(dn_dot_n, group) / D;  // r mean(dn n)
  if (!valid) return;
  Tx* dx = dinp + static_cast<size_t>(t) * dinp_stride + static_cast<size_t>(h) * D;
  for (int p = lane; p < packets; p += group) {
    const RopeBackwardPacket<Tx> v(dy, x, cos_row, sin_row, half, p, r);
    Packet dx1, dx2;
    for (int j = 0; j < Packet::size; j++) {
      dx1[j] = from_float<Tx>(r * v.dn1[j] - v.n1[j] * coefficient);
      dx2[j] = from_float<Tx>(r * v.dn2[j] - v.n2[j] * coefficient);
    }
    store128(dx + p * Packet::size, dx1);
    store128(dx + half + p * Packet::size, dx2);
  }
}

namespace detail {
// Lanes per head: the packets of one half-head, capped at a warp; must be a power of two.
template <typename Tx>
int rope_lane_group(const char* launcher, int D) {
  constexpr int kPacket = Packed128<Tx>::size;
  if (D <= 0 || D % (2 * kPacket) != 0)
    throw std::invalid_argument(std::string(launcher) + ": head_dim " + std::to_string(D) + " must be a multiple of " +
                                std::to_string(2 * kPacket) + " (two halves of 16-byte packets)");
  const int packets = D / 2 / kPacket;
  const int group = packets < kWarpSize ? packets : kWarpSize;
  if ((group & (group - 1)) != 0 || packets % group != 0)
    throw std::invalid_argument(std::string(launcher) + ": head_dim " + std::to_string(D) +
                                " gives a lane group that is not a power of two");
  return group;
}
}  // namespace detail

// Builds cos_table, sin_table (T, half), floatX, from freq (half fp32 values on the device, e.g. an upload
// of llmc::Yarn::frequencies()). Run at start and again after every Yarn::apply.
inline void rope_tables_build(floatX* cos_table, floatX* sin_table, const float* freq, int T, int half,
                              cudaStream_t stream) {
  if (T <= 0 || half <= 0) throw std::invalid_argument("rope_tables_build: T and half must be positive");
  constexpr int kBlock = 256;
  const double entries = static_cast<double>(T) * half;  // both tables written; a product, cos and sin each
  LLMC_LAUNCH_COSTED((KernelCost{2.0 * entries * sizeof(floatX) + 4.0 * half, 3.0 * entries}),
                     rope_tables_kernel<floatX>, dim3(elementwise_grid(static_cast<size_t>(T) * half, kBlock)),
                     dim3(kBlock), 0, stream, cos_table, sin_table, freq, T, half);
}

// q and k of T rows: `heads` (= 2H) consecutive heads of D in each row of inp (row stride in_stride, e.g.
// 3C inside the QKV GEMM output), normalised and rotated into out (row stride out_stride; may alias inp).
// rstd (T * heads) keeps each head's 1/rms for the backward. Tables (>= T rows, D/2 columns).
inline void qk_norm_rope_forward(floatX* out, int out_stride, const floatX* inp, int in_stride, float* rstd,
                                 const floatX* cos_table, const floatX* sin_table, int T, int heads, int D,
                                 cudaStream_t stream) {
  const int group = detail::rope_lane_group<floatX>("qk_norm_rope_forward", D);
  require_packets<floatX>("qk_norm_rope_forward", "out_stride", out_stride);
  require_packets<floatX>("qk_norm_rope_forward", "in_stride", in_stride);
  require_aligned16("qk_norm_rope_forward", {out, inp, cos_table, sin_table});
  if (T <= 0 || heads <= 0) return;
  const long long threads = static_cast<long long>(T) * heads * group;
  LLMC_LAUNCH(qk_norm_rope_forward_kernel<floatX>, dim3(static_cast<unsigned>(ceil_div(threads, kQkNormRopeBlock))),
              dim3(kQkNormRopeBlock), 0, stream, out, out_stride, inp, in_stride, rstd, cos_table, sin_table, T, heads,
              D, group);
}

// dinp (written) = gradient of the forward's input from dout (the gradient of its output); inp and rstd as
// in the forward. dinp may alias dout when their strides match.
inline void qk_norm_rope_backward(floatX* dinp, int dinp_stride, const floatX* dout, int dout_stride, const floatX* inp,
                                  int in_stride, const float* rstd, const floatX* cos_table, const floatX* sin_table,
                                  int T, int heads, int D, cudaStream_t stream) {
  const int group = detail::rope_lane_group<floatX>("qk_norm_rope_backward", D);
  require_packets<floatX>("qk_norm_rope_backward", "dinp_stride", dinp_stride);
  require_packets<floatX>("qk_norm_rope_backward", "dout_stride", dout_stride);
  require_packets<floatX>("qk_norm_rope_backward", "in_stride", in_stride);
  require_aligned16("qk_norm_rope_backward", {dinp, dout, inp, cos_table, sin_table});
  if (T <= 0 || heads <= 0) return;
  const long long threads = static_cast<long long>(T) * heads * group;
  LLMC_LAUNCH(qk_norm_rope_backward_kernel<floatX>, dim3(static_cast<unsigned>(ceil_div(threads, kQkNormRopeBlock))),
              dim3(kQkNormRopeBlock), 0, stream, dinp, dinp_stride, dout, dout_stride, inp, in_stride, rstd, cos_table,
              sin_table, T, heads, D, group);
}

}  // namespace llmc
