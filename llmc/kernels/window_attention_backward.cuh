// Backward kernels of the head-128 window attention (llmc/kernels/window_attention.cuh), deterministic
// without atomics: delta = rowsum(dO * O); one block per (64-key tile, head) walks the query tiles
// that attend its keys and accumulates dK and dV; one block per (64-query tile, head) walks its key
// tiles and accumulates dQ. Both recompute P = exp2(S * scale * log2(e) - lse * log2(e)) from the
// saved log-sum-exp, stream the walked tiles through two shared buffers with cp.async, skip per warp
// the tiles it does not attend and mask only boundary tiles. dS and P are rounded to bf16 for the MMAs.
// With a NormRopeBackward the dQ and dK stores also run the 2025-10-31 attention's QK-norm and RoPE backward
// (qk_norm_rope.cuh) on the fp32 sums, so dq and dk leave as the gradients of the raw q and k. With an
// OutputGate (window_attention_forward.cuh) out and dout are the gated output and its gradient: delta is the same
// sum, the delta kernel also writes each row's gate and the gate logit's gradient, and dO = gate dout enters
// through P (dV) and dP (dS). With a ValueMixBackward the dV store runs the value mix's backward. With a
// PairNormRopeBackward the dQ store (and the dK store where it says so) runs the 2026-07-17 attention's QK-norm and
// adjacent-pair RoPE backward (qk_norm_pair_rope.cuh) and writes the raw heads' gradients in the model's rows.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/async_copies.cuh"
#include "llmc/kernels/mma_tile.cuh"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/window_attention_forward.cuh"
#include "llmc/kernels/window_attention_geometry.cuh"
#include "llmc/cuda/precision.h"

#if !defined(LLMC_FP32)

namespace llmc {
namespace window_attention {

// q and k as the attention read them are rot = R n, n = x rstd (qk_norm_rope_forward: halves of 64 rotated by
// bf16 cos, sin tables of 64 columns). The stores then write dx = rstd (dn - n mean(dn n)), dn = R^T d(rot), with
// n = R^T rot taken from the tile already in shared memory: no read of x. rstd == nullptr: plain stores.
struct NormRopeBackward {
  const float* rstd = nullptr;  // [T, 2 heads]: the q heads, then the k heads
  const bf16* cos_table = nullptr;  // [>= T, 64]
  const bf16* sin_table = nullptr;
};

// v as the attention read it is a v_raw + b ve (the 2025-10-31 model's value mix; ve absent: a v_raw), a and b fp32
// scalars on the device. The dV store then writes dv_raw = a dV, adds b dV into dve, and leaves each block's sums
// of dV v_raw and dV ve in partials (value_mix_partials_floats), which value_mix_scalars_kernel adds into
// dscalars[a_index] and dscalars[b_index] in a fixed order. scalars == nullptr: a plain store.
struct ValueMixBackward {
  const float* scalars = nullptr;
  int a_index = 0, b_index = 0;
  const bf16* v_raw = nullptr;  // [T, heads, 128] rows v_raw_stride apart
  int64_t v_raw_stride = 0;
  const bf16* ve = nullptr;     // [T, heads * 128] contiguous, or nullptr
  bf16* dve = nullptr;          // accumulated where ve is given
  float* partials = nullptr;    // 2 floats per dK/dV block
  float* dscalars = nullptr;    // accumulated
};

// The 2026-07-17 attention's q and k (qk_norm_pair_rope_forward) as the attention reads them: rot = R n, n = x rstd,
// pairs (2m, 2m+1) of dims [0, 64) rotated by bf16 tables of 32 columns, dims [64, 128) stationary. The view's row
// `row`, head `head` is the model's token row and head (row, head), or with paired_rows (the paired layers' view of
// two rows per token, each of half the heads) (token, model head) = (row / 2, (row % 2) heads + head) at position
// 2 token + model head % 2. The dQ store writes the raw q's gradient into dq_raw's rows (raw_row_stride apart, head
// h at column 128 h), the dK store the raw k's into dk_raw's where rstd_k is set (not with the key offset, whose
// stationary dims cross rows: the caller runs qk_norm_pair_rope_backward for those k). rstd_q == nullptr: plain
// stores.
struct PairNormRopeBackward {
  const float* rstd_q = nullptr;  // [row * heads + head] of the view: the model's [tokens, heads] of the q heads
  const float* rstd_k = nullptr;  // as rstd_q for k; nullptr: dK stored plain into dk
  const bf16* cos_table = nullptr;  // [positions, 32]
  const bf16* sin_table = nullptr;
  bool paired_rows = false;
  bf16* dq_raw = nullptr;
  bf16* dk_raw = nullptr;
  int64_t raw_row_stride = 0;
};

struct BackwardParams {
  bf16* dq;  // [T, heads, 128] slices with dqkv_row_stride, like q, k, v
  bf16* dk;
  bf16* dv;
  int64_t dqkv_row_stride;
  const bf16* dout;    // [T, heads, 128]
  const float* lse;    // [heads, T] from the forward
  const float* delta;  // [heads, T] from delta_kernel
  const float* gate;   // [heads, T] from delta_kernel with an OutputGate (the gated kernels read it)
  const bf16* q;
  const bf16* k;
  const bf16* v;
  int64_t qkv_row_stride;
  const int* order;  // the plan's dQ or dK/dV tile order
  Documents docs;
  int heads;
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e)
  NormRopeBackward norm_rope;
  ValueMixBackward value_mix;
  PairNormRopeBackward pair_rope;
  bool accumulate_dv;  // the plain dV store adds to dv (XSA's share stored there first) instead of overwriting it
};

constexpr int kRowTiles = kKeyTile / 8;   // 8 n-tiles across 64 keys or queries
constexpr int kDimTiles = kHeadDim / 8;   // 16 n-tiles across the head dimension
constexpr int kWarpRows = kBackwardRows / kWarps;  // 16
constexpr size_t kBackwardSharedBytes =
    static_cast<size_t>(6) * kKeyTile * kStride * sizeof(bf16) + static_cast<size_t>(6) * kBackwardRows * sizeof(float);

// delta[h, t] = sum_d dout[t, h, d] * out[t, h, d] in fp32. Half a warp per (t, h) row, 8 elements
// per lane, summed by a fixed butterfly: deterministic. With a gate g, out = g O and dout the gradient of out:
// delta is sum(dO O) with dO = g dout all the same, and d loss / d logit = sum(dout O) g (1 - g) = delta (1 - g).
template <typename Unused = void>
__global__ void delta_kernel(float* delta, const bf16* dout, const bf16* out, int T, int heads, OutputGate gate,
                             float* gate_values) {
  const int64_t rows = static_cast<int64_t>(T) * heads;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 16;
  const int part = threadIdx.x % 16;
  float sum = 0.0f;
  if (row < rows) {
    const Packed128<bf16> d = load128(dout + row * kHeadDim + part * 8);
    const Packed128<bf16> o = load128(out + row * kHeadDim + part * 8);
    for (int i = 0; i < 8; i++) sum += to_float(d[i]) * to_float(o[i]);
  }
  for (int offset = 8; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (row >= rows || part != 0) return;
  delta[(row % heads) * T + row / heads] = sum;
  if (gate.xn == nullptr) return;
  const float g = attention_gate_value(gate.xn + (row / heads) * gate.xn_stride, gate.w + (row % heads) * kGateWidth);
  gate_values[(row % heads) * T + row / heads] = g;
  gate.logit_grads[row] = sum * LLMC_MUTANT("window_attention.logit_grad_times_gate", 1.0f - g, g * (1.0f - g));
}

// ---- dK, dV ------------------------------------------------------------------------------------

// One query tile for one warp's 16 keys: P^T, dP^T = V dO^T, dS^T, dV += P^T dO, dK += dS^T Q. kGated: the tile
// holds the gated output's gradient, and the query's gate scales P (for dV) and dP.
template <bool kGated>
__device__ __forceinline__ void dkdv_tile(float (&dk)[kDimTiles][4], float (&dv)[kDimTiles][4], const bf16* k_tile,
                                          const bf16* v_tile, int row0, const bf16* q_tile, const bf16* dout_tile,
                                          const float* lse_tile, const float* delta_tile, const float* gate_tile,
                                          int q0, bool full, const int (&key)[2], const int (&last_query_of_key)[2],
                                          float scale_log2) {
  const int pair = threadIdx.x % kWarpSize % 4;
  float p[kRowTiles][4];  // P^T: element i of n-tile nt is key row i / 2, query column nt * 8 + 2 * pair + i % 2
  mma_tile::zero(p);
  mma_tile::mma_rows_by_rows<kStride, kHeadDim, 1, kRowTiles>(p, k_tile, row0, q_tile, 0);
  for (int nt = 0; nt < kRowTiles; nt++)
    for (int i = 0; i < 4; i++) {
      const int column = nt * 8 + 2 * pair + i % 2, query = q0 + column;
      const bool attended = full || (key[i / 2] <= query && query <= last_query_of_key[i / 2]);
      p[nt][i] = attended ? exp2f(p[nt][i] * scale_log2 - lse_tile[column] * kLog2e) : 0.0f;
    }
  float ds[kRowTiles][4];
  mma_tile::zero(ds);
  mma_tile::mma_rows_by_rows<kStride, kHeadDim, 1, kRowTiles>(ds, v_tile, row0, dout_tile, 0);
  for (int nt = 0; nt < kRowTiles; nt++)
    for (int i = 0; i < 4; i++) {
      const int column = nt * 8 + 2 * pair + i % 2;
      if constexpr (kGated) {
        ds[nt][i] = p[nt][i] * (ds[nt][i] * gate_tile[column] - delta_tile[column]);
        p[nt][i] *= LLMC_MUTANT("window_attention.dv_ungated", gate_tile[column], 1.0f);
      } else {
        ds[nt][i] = p[nt][i] * (ds[nt][i] - delta_tile[column]);
      }
    }
  mma_tile::mma_fragments_by_rows<kStride, kBackwardRows, 1, kDimTiles>(dv, p, dout_tile, 0);
  mma_tile::mma_fragments_by_rows<kStride, kBackwardRows, 1, kDimTiles>(dk, ds, q_tile, 0);
}

// Writes the warp's 16 rows of a [16 x 128] accumulator, times `factor`, as bf16 rows of `base`.
__device__ __forceinline__ void store_rows(bf16* base, int64_t row_stride, const float (&acc)[kDimTiles][4], int row0,
                                           int T, float factor, bool accumulate = false) {
  const int lane = threadIdx.x % kWarpSize, group = lane / 4, pair = lane % 4;
  for (int r = 0; r < 2; r++) {
    const int token = row0 + group + 8 * r;
    if (token >= T) continue;
    for (int nt = 0; nt < kDimTiles; nt++) {
      bf16* at = base + token * row_stride + nt * 8 + 2 * pair;
      float first = acc[nt][2 * r] * factor, second = acc[nt][2 * r + 1] * factor;
      if (accumulate) first += to_float(at[0]), second += to_float(at[1]);  // rounded once, with the sum
      const uint32_t packed = mma_tile::pack_bf16x2(first, second);
      memcpy(static_cast<void*>(at), &packed, 4);
    }
  }
}

// One row element pair of the QK-norm and RoPE backward: dn = R^T g and n = R^T rot for elements d and d + 64.
struct NormRopePair {
  float dn1, dn2, n1, n2;
  __device__ __forceinline__ NormRopePair(float g1, float g2, const bf16* rot, const bf16* cos_row, const bf16* sin_row,
                                          int d) {
    const float c = to_float(cos_row[d]), s = to_float(sin_row[d]);
    const float y1 = to_float(rot[d]), y2 = to_float(rot[d + kHeadDim / 2]);
    dn1 = g1 * c - g2 * s, dn2 = g1 * s + g2 * c;
    n1 = y1 * c - y2 * s, n2 = y1 * s + y2 * c;
  }
};

// store_rows with the QK-norm and RoPE backward: `tile` holds the warp's 16 rows of rot (row0 is its first row's
// token, tile_row0 its row in the tile); rstd the head's column of NormRopeBackward::rstd. Element d and d + 64 of a
// row sit in one thread (n-tiles nt and nt + 8), so the rotation is the thread's own and the dot over the row four
// lanes' shuffles. Rows past T compute on the zeros the tile holds there and are not stored.
__device__ __forceinline__ void store_norm_rope_rows(bf16* base, int64_t row_stride, const float (&acc)[kDimTiles][4],
                                                     const bf16* tile, int tile_row0, int row0, int T, float factor,
                                                     const float* rstd, int rstd_stride, const NormRopeBackward& rope) {
  constexpr int kHalf = kHeadDim / 2, kHalfTiles = kDimTiles / 2;
  const int lane = threadIdx.x % kWarpSize, group = lane / 4, pair = lane % 4;
LLMC_UNROLL
  for (int r = 0; r < 2; r++) {
    const int token = row0 + group + 8 * r, t = min(token, T - 1);
    const bf16* rot = tile + (tile_row0 + group + 8 * r) * kStride;
    const bf16* cos_row = rope.cos_table + static_cast<int64_t>(t) * kHalf;
    const bf16* sin_row = rope.sin_table + static_cast<int64_t>(t) * kHalf;
    const float row_rstd = rstd[static_cast<int64_t>(t) * rstd_stride];
    float dot = 0.0f;  // pass 1: this lane's part of sum(dn n) over the row
LLMC_UNROLL
    for (int nt = 0; nt < kHalfTiles; nt++)
LLMC_UNROLL
      for (int e = 0; e < 2; e++) {
        const NormRopePair v(acc[nt][2 * r + e] * factor, acc[nt + kHalfTiles][2 * r + e] * factor, rot, cos_row,
                             sin_row, nt * 8 + 2 * pair + e);
        dot += v.dn1 * v.n1 + v.dn2 * v.n2;
      }
    dot += __shfl_xor_sync(0xffffffffu, dot, 1);  // the row's four lanes
    dot += LLMC_MUTANT("window_attention.norm_rope_half_row_dot", __shfl_xor_sync(0xffffffffu, dot, 2), 0.0f);
    const float coefficient = row_rstd * dot / kHeadDim;  // rstd mean(dn n)
    if (token >= T) continue;
LLMC_UNROLL
    for (int nt = 0; nt < kHalfTiles; nt++) {  // pass 2: dx = rstd dn - n coefficient
      float dx1[2], dx2[2];
      for (int e = 0; e < 2; e++) {
        const NormRopePair v(acc[nt][2 * r + e] * factor, acc[nt + kHalfTiles][2 * r + e] * factor, rot, cos_row,
                             sin_row, nt * 8 + 2 * pair + e);
        dx1[e] = row_rstd * v.dn1 - v.n1 * coefficient;
        dx2[e] = row_rstd * v.dn2 - v.n2 * coefficient;
      }
      const uint32_t low = mma_tile::pack_bf16x2(dx1[0], dx1[1]), high = mma_tile::pack_bf16x2(dx2[0], dx2[1]);
      bf16* out = base + token * row_stride + nt * 8 + 2 * pair;
      memcpy(static_cast<void*>(out), &low, 4);
      memcpy(static_cast<void*>(out + kHalf), &high, 4);
    }
  }
}

// One adjacent pair (d, d + 1) of the 2026-07-17 QK-norm and RoPE backward: dn = R^T g, n = R^T rot (d < 64), or
// g and rot themselves (the stationary dims).
struct PairNormRopeValues {
  float dn0, dn1, n0, n1;
  __device__ __forceinline__ PairNormRopeValues(float g0, float g1, const bf16* rot, const bf16* cos_row,
                                                const bf16* sin_row, int d) {
    const float y0 = to_float(rot[d]), y1 = to_float(rot[d + 1]);
    if (d >= kHeadDim / 2) {
      dn0 = g0, dn1 = g1, n0 = y0, n1 = y1;
      return;
    }
    const float c = to_float(cos_row[d / 2]), s = to_float(sin_row[d / 2]);
    dn0 = g0 * c - g1 * s, dn1 = g0 * s + g1 * c;
    n0 = y0 * c - y1 * s, n1 = y0 * s + y1 * c;
  }
};

// store_rows with the 2026-07-17 QK-norm and RoPE backward (PairNormRopeBackward): the warp's 16 rows of the view
// (row0 its first, tile_row0 its row in `tile`, which holds rot) of head h of `heads`; rstd that tensor's. Both
// elements of a pair sit in one thread, so the rotation is the thread's own and the row's dot four lanes' shuffles.
// Rows past T compute on the zeros the tile holds there and are not stored.
__device__ __forceinline__ void store_pair_norm_rope_rows(bf16* raw, const float (&acc)[kDimTiles][4], const bf16* tile,
                                                          int tile_row0, int row0, int T, float factor, int h,
                                                          int heads, const float* rstd,
                                                          const PairNormRopeBackward& rope) {
  constexpr int kPairs = kHeadDim / 4;  // the tables' columns
  const int lane = threadIdx.x % kWarpSize, group = lane / 4, pair = lane % 4;
LLMC_UNROLL
  for (int r = 0; r < 2; r++) {
    const int row = row0 + group + 8 * r, t = min(row, T - 1);
    const bf16* rot = tile + (tile_row0 + group + 8 * r) * kStride;
    const int64_t position = rope.paired_rows ? (t & ~1) + (((t & 1) * heads + h) & 1) : t;  // 2 token + head % 2
    const bf16* cos_row = rope.cos_table + position * kPairs;
    const bf16* sin_row = rope.sin_table + position * kPairs;
    const float row_rstd = rstd[static_cast<int64_t>(t) * heads + h];
    float dot = 0.0f;  // pass 1: this lane's part of sum(dn n) over the row
LLMC_UNROLL
    for (int nt = 0; nt < kDimTiles; nt++) {
      const PairNormRopeValues v(acc[nt][2 * r] * factor, acc[nt][2 * r + 1] * factor, rot, cos_row, sin_row,
                                 nt * 8 + 2 * pair);
      dot += v.dn0 * v.n0 + v.dn1 * v.n1;
    }
    dot += __shfl_xor_sync(0xffffffffu, dot, 1);  // the row's four lanes
    dot += LLMC_MUTANT("window_attention.pair_rope_half_row_dot", __shfl_xor_sync(0xffffffffu, dot, 2), 0.0f);
    const float coefficient = row_rstd * dot / kHeadDim;  // rstd mean(dn n)
    if (row >= T) continue;
    const int64_t token = rope.paired_rows ? row / 2 : row;
    const int head = rope.paired_rows ? (row % 2) * heads + h : h;
    bf16* out = raw + token * rope.raw_row_stride + head * kHeadDim;
LLMC_UNROLL
    for (int nt = 0; nt < kDimTiles; nt++) {  // pass 2: dx = rstd dn - n coefficient
      const int d = nt * 8 + 2 * pair;
      const PairNormRopeValues v(acc[nt][2 * r] * factor, acc[nt][2 * r + 1] * factor, rot, cos_row, sin_row, d);
      const uint32_t packed =
          mma_tile::pack_bf16x2(row_rstd * v.dn0 - v.n0 * coefficient, row_rstd * v.dn1 - v.n1 * coefficient);
      memcpy(static_cast<void*>(out + d), &packed, 4);
    }
  }
}

// store_rows for dV with the value mix's backward (ValueMixBackward): dv_raw = a dV written, dve += b dV, and this
// thread's sums of dV v_raw and dV ve added into sums. h is the block's head of `heads`.
__device__ __forceinline__ void store_value_mix_rows(bf16* base, int64_t row_stride, const float (&acc)[kDimTiles][4],
                                                     int row0, int T, int h, int heads, const ValueMixBackward& mix,
                                                     float (&sums)[2]) {
  const int lane = threadIdx.x % kWarpSize, group = lane / 4, pair = lane % 4;
  const int64_t ve_stride = static_cast<int64_t>(heads) * kHeadDim;
  const float a = mix.scalars[mix.a_index];
  const float b =
      mix.ve != nullptr ? LLMC_MUTANT("window_attention.dve_without_b", mix.scalars[mix.b_index], 1.0f) : 0.0f;
LLMC_UNROLL
  for (int r = 0; r < 2; r++) {
    const int token = row0 + group + 8 * r;
    if (token >= T) continue;
    const bf16* x = mix.v_raw + token * mix.v_raw_stride + h * kHeadDim;
    const int64_t ve_row = token * ve_stride + h * kHeadDim;
LLMC_UNROLL
    for (int nt = 0; nt < kDimTiles; nt++) {
      const int d = nt * 8 + 2 * pair;
      const float g0 = acc[nt][2 * r], g1 = acc[nt][2 * r + 1];
      const uint32_t packed = mma_tile::pack_bf16x2(a * g0, a * g1);
      memcpy(static_cast<void*>(base + token * row_stride + d), &packed, 4);
      sums[0] += g0 * to_float(x[d]) + g1 * to_float(x[d + 1]);
      if (mix.ve == nullptr) continue;
      const bf16* y = mix.ve + ve_row + d;
      bf16* dy = mix.dve + ve_row + d;
      sums[1] += g0 * to_float(y[0]) + g1 * to_float(y[1]);
      const uint32_t added = mma_tile::pack_bf16x2(to_float(dy[0]) + b * g0, to_float(dy[1]) + b * g1);
      memcpy(static_cast<void*>(dy), &added, 4);
    }
  }
}

// The block's two sums (fixed order: each warp's butterfly, then warps in order) into partials[2 blockIdx.x + k],
// through the kernel's shared warp_sums. Every thread of the block calls it.
__device__ __forceinline__ void store_block_sums(float* partials, float (&sums)[2], float (&warp_sums)[kWarps][2]) {
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  for (int k = 0; k < 2; k++) {
    const float total = warp_reduce_sum(sums[k]);
    if (lane == 0) warp_sums[warp][k] = total;
  }
  if (LLMC_MUTANT("window_attention.value_mix_sums_no_barrier", true, false))
    __syncthreads();  // value mix: every warp's sums are in shared memory
  if (threadIdx.x >= 2) return;
  float total = 0.0f;
  for (int w = LLMC_MUTANT("window_attention.value_mix_drops_warp0", 0, 1); w < kWarps; w++)
    total += warp_sums[w][threadIdx.x];
  partials[2 * blockIdx.x + threadIdx.x] = total;
}

// dscalars[a_index] += the sum of the blocks' first partials, dscalars[b_index] (with ve) of their second: one warp,
// a fixed order.
template <typename Unused = void>
__global__ void value_mix_scalars_kernel(ValueMixBackward mix, int blocks) {
  const float a_sum = warp_ordered_sum(mix.partials, blocks, 2);
  const float b_sum =
      warp_ordered_sum(mix.partials + LLMC_MUTANT("window_attention.b_sum_from_a_partials", 1, 0), blocks, 2);
  if (threadIdx.x != 0) return;
  mix.dscalars[mix.a_index] += a_sum;
  if (mix.ve != nullptr) mix.dscalars[mix.b_index] += b_sum;
}

// Issues Q, dO, lse and delta (and kGated the gate) of the query tile at q0 into buffer `buffer` of each.
template <bool kGated>
__device__ __forceinline__ void issue_query_tile(AsyncCopies& copies, const BackwardParams& p, int h, int q0,
                                                 bf16* q_tiles, bf16* dout_tiles, float* lse_tiles,
                                                 float* delta_tiles, float* gate_tiles, int buffer) {
  const int T = p.docs.T;
  const int offset = buffer * kBackwardRows * kStride;
  issue_rows<kBackwardRows>(copies, q_tiles + offset, p.q + h * kHeadDim, p.qkv_row_stride, q0, T);
  issue_rows<kBackwardRows>(copies, dout_tiles + offset, p.dout + h * kHeadDim,
                            static_cast<int64_t>(p.heads) * kHeadDim, q0, T);
  issue_row_values<kBackwardRows>(copies, lse_tiles + buffer * kBackwardRows, p.lse + static_cast<int64_t>(h) * T, q0,
                                  T);
  issue_row_values<kBackwardRows>(copies, delta_tiles + buffer * kBackwardRows, p.delta + static_cast<int64_t>(h) * T,
                                  q0, T);
  if constexpr (kGated)
    issue_row_values<kBackwardRows>(copies, gate_tiles + buffer * kBackwardRows, p.gate + static_cast<int64_t>(h) * T,
                                    q0, T);
}

// Grid: backward_tiles(T) * heads blocks (block i: key tile order[i / heads], head i % heads),
// kThreads threads, kBackwardSharedBytes of dynamic shared memory.
template <bool kGated = false>
__global__ void __launch_bounds__(kThreads) dkdv_kernel(BackwardParams p) {
  LLMC_DYNAMIC_SHARED(bf16, shared);
  bf16* k_tile = shared;
  bf16* v_tile = k_tile + kKeyTile * kStride;
  bf16* q_tiles = v_tile + kKeyTile * kStride;             // two buffers each
  bf16* dout_tiles = q_tiles + 2 * kBackwardRows * kStride;
  float* lse_tiles = reinterpret_cast<float*>(dout_tiles + 2 * kBackwardRows * kStride);
  float* delta_tiles = lse_tiles + 2 * kBackwardRows;
  float* gate_tiles = delta_tiles + 2 * kBackwardRows;
  const int T = p.docs.T, h = blockIdx.x % p.heads;
  const int key_tile = __ldg(p.order + blockIdx.x / p.heads), k0 = key_tile * kKeyTile;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int row0 = k0 + warp * kWarpRows;
  const WarpKeys warp_key_rows = warp_keys(p.docs, row0, kWarpRows);
  int key[2], last_query_of_key[2];
  for (int r = 0; r < 2; r++) {
    key[r] = min(row0 + lane / 4 + 8 * r, T - 1);
    last_query_of_key[r] = last_query(p.docs, key[r]);
  }
  const int last_tile = last_query(p.docs, min(k0 + kKeyTile - 1, T - 1)) / kBackwardRows;

  AsyncCopies copies;
  issue_rows<kKeyTile>(copies, k_tile, p.k + h * kHeadDim, p.qkv_row_stride, k0, T);
  issue_rows<kKeyTile>(copies, v_tile, p.v + h * kHeadDim, p.qkv_row_stride, k0, T);
  issue_query_tile<kGated>(copies, p, h, key_tile * kBackwardRows, q_tiles, dout_tiles, lse_tiles, delta_tiles,
                           gate_tiles, 0);
  copies.commit();
  float dk[kDimTiles][4], dv[kDimTiles][4];
  mma_tile::zero(dk);
  mma_tile::zero(dv);
  for (int tile = key_tile, buffer = 0; tile <= last_tile; tile++, buffer ^= 1) {
    LLMC_MUTANT("window_attention.dkdv_copies_not_waited", copies.wait<0>(), (void)0);  // the query tile landed
    __syncthreads();   // dkdv: every thread's copies landed; nobody reads the other buffer any more
    if (tile < last_tile) {
      issue_query_tile<kGated>(copies, p, h, (tile + 1) * kBackwardRows, q_tiles, dout_tiles, lse_tiles, delta_tiles,
                               gate_tiles, buffer ^ 1);
    }
    copies.commit();
    const int q0 = tile * kBackwardRows;
    if (query_tile_needed(warp_key_rows, q0)) {
      dkdv_tile<kGated>(dk, dv, k_tile, v_tile, warp * kWarpRows, q_tiles + buffer * kBackwardRows * kStride,
                        dout_tiles + buffer * kBackwardRows * kStride, lse_tiles + buffer * kBackwardRows,
                        delta_tiles + buffer * kBackwardRows, gate_tiles + buffer * kBackwardRows, q0,
                        query_tile_full(warp_key_rows, q0), key, last_query_of_key, p.scale_log2);
    }
  }
  if (p.norm_rope.rstd != nullptr) {  // the k heads follow the q heads in rstd's rows
    store_norm_rope_rows(p.dk + h * kHeadDim, p.dqkv_row_stride, dk, k_tile, warp * kWarpRows, row0, T, p.scale,
                         p.norm_rope.rstd + p.heads + h, 2 * p.heads, p.norm_rope);
  } else if (p.pair_rope.rstd_k != nullptr) {
    store_pair_norm_rope_rows(p.pair_rope.dk_raw, dk, k_tile, warp * kWarpRows, row0, T, p.scale, h, p.heads,
                              p.pair_rope.rstd_k, p.pair_rope);
  } else {
    store_rows(p.dk + h * kHeadDim, p.dqkv_row_stride, dk, row0, T, p.scale);
  }
  if (p.value_mix.scalars != nullptr) {  // uniform: every thread reaches store_block_sums' barrier
    __shared__ float warp_sums[kWarps][2];
    float sums[2] = {0.0f, 0.0f};
    store_value_mix_rows(p.dv + h * kHeadDim, p.dqkv_row_stride, dv, row0, T, h, p.heads, p.value_mix, sums);
    store_block_sums(p.value_mix.partials, sums, warp_sums);
  } else {
    store_rows(p.dv + h * kHeadDim, p.dqkv_row_stride, dv, row0, T, 1.0f,
               LLMC_MUTANT("window_attention.dv_accumulate_inverted", p.accumulate_dv, !p.accumulate_dv));
  }
}

// ---- dQ ----------------------------------------------------------------------------------------

// One key tile for one warp's 16 queries: P, dP = dO V^T, dS, dQ += dS K. dO = gate dout (gate 1 without one).
__device__ __forceinline__ void dq_tile(float (&dq)[kDimTiles][4], const bf16* q_tile, const bf16* dout_tile, int row0,
                                        const bf16* k_tile, const bf16* v_tile, int k0, bool full,
                                        const int (&query)[2], const int (&first_key_of_query)[2],
                                        const float (&lse_log2)[2], const float (&delta)[2], const float (&gate)[2],
                                        float scale_log2) {
  const int pair = threadIdx.x % kWarpSize % 4;
  float p[kRowTiles][4];  // element i of n-tile nt: query row i / 2, key k0 + nt * 8 + 2 * pair + i % 2
  mma_tile::zero(p);
  mma_tile::mma_rows_by_rows<kStride, kHeadDim, 1, kRowTiles>(p, q_tile, row0, k_tile, 0);
  for (int nt = 0; nt < kRowTiles; nt++)
    for (int i = 0; i < 4; i++) {
      const int key = k0 + nt * 8 + 2 * pair + i % 2;
      const bool attended = full || (first_key_of_query[i / 2] <= key && key <= query[i / 2]);
      p[nt][i] = attended ? exp2f(p[nt][i] * scale_log2 - lse_log2[i / 2]) : 0.0f;
    }
  float ds[kRowTiles][4];
  mma_tile::zero(ds);
  mma_tile::mma_rows_by_rows<kStride, kHeadDim, 1, kRowTiles>(ds, dout_tile, row0, v_tile, 0);
  for (int nt = 0; nt < kRowTiles; nt++)
    for (int i = 0; i < 4; i++)
      ds[nt][i] = p[nt][i] * (ds[nt][i] * LLMC_MUTANT("window_attention.dq_ungated", gate[i / 2], 1.0f) - delta[i / 2]);
  mma_tile::mma_fragments_by_rows<kStride, kKeyTile, 1, kDimTiles>(dq, ds, k_tile, 0);
}

// Grid: backward_tiles(T) * heads blocks (block i: query tile order[i / heads], head i % heads),
// kThreads threads, kBackwardSharedBytes of dynamic shared memory.
template <bool kGated = false>
__global__ void __launch_bounds__(kThreads) dq_kernel(BackwardParams p) {
  LLMC_DYNAMIC_SHARED(bf16, shared);
  bf16* q_tile = shared;
  bf16* dout_tile = q_tile + kBackwardRows * kStride;
  bf16* k_tiles = dout_tile + kBackwardRows * kStride;  // two buffers each
  bf16* v_tiles = k_tiles + 2 * kKeyTile * kStride;
  const int T = p.docs.T, h = blockIdx.x % p.heads;
  const int q0 = __ldg(p.order + blockIdx.x / p.heads) * kBackwardRows;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int row0 = q0 + warp * kWarpRows;
  const WarpQueries warp_rows = warp_queries(p.docs, row0, kWarpRows);
  int query[2], first_key_of_query[2];
  float lse_log2[2], delta[2], gate[2] = {1.0f, 1.0f};  // x 1.0f: the ungated kernel's bits
  for (int r = 0; r < 2; r++) {
    query[r] = min(row0 + lane / 4 + 8 * r, T - 1);
    first_key_of_query[r] = first_key(p.docs, query[r]);
    lse_log2[r] = p.lse[static_cast<int64_t>(h) * T + query[r]] * kLog2e;
    delta[r] = p.delta[static_cast<int64_t>(h) * T + query[r]];
    if constexpr (kGated) gate[r] = p.gate[static_cast<int64_t>(h) * T + query[r]];
  }
  const int first_tile = first_key(p.docs, q0) / kKeyTile;
  const int last_tile = min(q0 + kBackwardRows - 1, T - 1) / kKeyTile;
  const bf16 *k_head = p.k + h * kHeadDim, *v_head = p.v + h * kHeadDim;

  AsyncCopies copies;
  issue_rows<kBackwardRows>(copies, q_tile, p.q + h * kHeadDim, p.qkv_row_stride, q0, T);
  issue_rows<kBackwardRows>(copies, dout_tile, p.dout + h * kHeadDim, static_cast<int64_t>(p.heads) * kHeadDim, q0, T);
  issue_rows<kKeyTile>(copies, k_tiles, k_head, p.qkv_row_stride, last_tile * kKeyTile, T);
  issue_rows<kKeyTile>(copies, v_tiles, v_head, p.qkv_row_stride, last_tile * kKeyTile, T);
  copies.commit();
  float dq[kDimTiles][4];
  mma_tile::zero(dq);
  for (int tile = last_tile, buffer = 0; tile >= first_tile; tile--, buffer ^= 1) {
    copies.wait<0>();  // dq: this thread's copies of the key tile landed
    __syncthreads();   // dq: every thread's copies landed; nobody reads the other buffer any more
    if (tile > first_tile) {
      const int next = (buffer ^ 1) * kKeyTile * kStride;
      issue_rows<kKeyTile>(copies, k_tiles + next, k_head, p.qkv_row_stride, (tile - 1) * kKeyTile, T);
      issue_rows<kKeyTile>(copies, v_tiles + next, v_head, p.qkv_row_stride, (tile - 1) * kKeyTile, T);
    }
    copies.commit();
    const int k0 = tile * kKeyTile;
    if (tile_needed(warp_rows, k0)) {
      dq_tile(dq, q_tile, dout_tile, warp * kWarpRows, k_tiles + buffer * kKeyTile * kStride,
              v_tiles + buffer * kKeyTile * kStride, k0, tile_full(warp_rows, k0), query, first_key_of_query,
              lse_log2, delta, gate, p.scale_log2);
    }
  }
  if (p.norm_rope.rstd != nullptr) {
    store_norm_rope_rows(p.dq + h * kHeadDim, p.dqkv_row_stride, dq, q_tile, warp * kWarpRows, row0, T, p.scale,
                         p.norm_rope.rstd + h, 2 * p.heads, p.norm_rope);
  } else if (p.pair_rope.rstd_q != nullptr) {
    store_pair_norm_rope_rows(p.pair_rope.dq_raw, dq, q_tile, warp * kWarpRows, row0, T, p.scale, h, p.heads,
                              p.pair_rope.rstd_q, p.pair_rope);
  } else {
    store_rows(p.dq + h * kHeadDim, p.dqkv_row_stride, dq, row0, T, p.scale);
  }
}

}  // namespace window_attention
}  // namespace llmc

#endif  // !LLMC_FP32
