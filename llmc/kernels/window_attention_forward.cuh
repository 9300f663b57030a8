// Forward kernel of the head-128 window attention (llmc/kernels/window_attention.cuh): one block per
// (128-query tile, head), 4 warps of 32 query rows. K/V tiles of 64 keys stream through two shared
// buffers with cp.async, from the diagonal tile back to the first tile any row of the block needs;
// each warp skips the tiles none of its rows attends and masks only its boundary tiles. Scores in
// log2 units (scale * log2(e) folded into one multiply, exp2), online softmax in fp32, P rounded to
// bf16 for P @ V; saves the log-sum-exp (natural log) of each query for the backward. With an OutputGate
// the store multiplies each head's row by the 2025-10-31 attention's sigmoid gate (attention_gate.cuh).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/async_copies.cuh"
#include "llmc/kernels/attention_gate.cuh"
#include "llmc/kernels/mma_tile.cuh"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/window_attention_geometry.cuh"

#if !defined(LLMC_FP32)

namespace llmc {
namespace window_attention {

// The sigmoid gate on each head's output, g = sigmoid(xn[t][0:12] . w[h]) (attention_gate_value): the forward
// writes g O, the backward takes the gated output and its gradient and leaves d loss / d(gate logit) in logit_grads.
// xn == nullptr: no gate.
struct OutputGate {
  const bf16* xn = nullptr;  // [T, xn_stride]: the gate reads columns 0..11
  int64_t xn_stride = 0;
  const bf16* w = nullptr;   // [heads, 12]
  float* logit_grads = nullptr;  // backward: [T, heads], written by the delta kernel
};

struct ForwardParams {
  bf16* out;    // [T, heads, 128]
  float* lse;   // [heads, T]
  const bf16* q;
  const bf16* k;
  const bf16* v;
  int64_t qkv_row_stride;  // elements from one token's row of q (k, v) to the next
  const int* order;        // the plan's forward tile order
  Documents docs;
  int heads;
  float scale_log2;  // softmax scale * log2(e)
  OutputGate gate;
};

constexpr int kForwardMTiles = kForwardRows / kWarps / 16;  // 2
constexpr int kOutTiles = kHeadDim / 8;                    // 16 n-tiles of the output row
constexpr int kScoreTiles = kKeyTile / 8;                  // 8 n-tiles of a score row
constexpr size_t kForwardSharedBytes = static_cast<size_t>(kForwardRows + 4 * kKeyTile) * kStride * sizeof(bf16);

// Per thread: its four query rows (fragment row r = group + 8 * (r % 2) + 16 * (r / 2) of the warp)
// and the state of their online softmax, in log2 units.
struct ForwardRows {
  int query[4];
  int first_key[4];
  float max[4];
  float sum[4];
};

// One key tile for one warp: S = Q K^T, mask (boundary tiles only), online softmax, O += P V.
__device__ __forceinline__ void forward_tile(float (&o)[kForwardMTiles * kOutTiles][4], ForwardRows& rows,
                                             const bf16* q_tile, int row0, const bf16* k_tile, const bf16* v_tile,
                                             int k0, bool full, float scale_log2) {
  const int pair = threadIdx.x % kWarpSize % 4;
  float s[kForwardMTiles * kScoreTiles][4];
  mma_tile::zero(s);
  mma_tile::mma_rows_by_rows<kStride, kHeadDim, kForwardMTiles, kScoreTiles>(s, q_tile, row0, k_tile, 0);
  // Fragment f = mt * 8 + nt, element i: row (mt * 2 + i / 2), key k0 + nt * 8 + 2 * pair + i % 2.
  float tile_max[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  for (int f = 0; f < kForwardMTiles * kScoreTiles; f++)
    for (int i = 0; i < 4; i++) {
      const int r = (f / kScoreTiles) * 2 + i / 2;
      float score = s[f][i] * scale_log2;
      if (!full) {
        const int key = k0 + (f % kScoreTiles) * 8 + 2 * pair + i % 2;
        if (key < rows.first_key[r] || key > rows.query[r]) score = -INFINITY;
      }
      s[f][i] = score;
      tile_max[r] = fmaxf(tile_max[r], score);
    }
  float correction[4], tile_sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int r = 0; r < 4; r++) {
    // The four lanes of a quad hold one row between them.
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    // Finite: a warp's first tile holds each row's own key (see tile_needed), so max never stays -inf.
    const float new_max = fmaxf(rows.max[r], tile_max[r]);
    correction[r] = exp2f(rows.max[r] - new_max);
    rows.max[r] = new_max;
  }
  for (int f = 0; f < kForwardMTiles * kScoreTiles; f++)
    for (int i = 0; i < 4; i++) {
      const int r = (f / kScoreTiles) * 2 + i / 2;
      s[f][i] = exp2f(s[f][i] - rows.max[r]);
      tile_sum[r] += s[f][i];
    }
  for (int f = 0; f < kForwardMTiles * kOutTiles; f++)
    for (int i = 0; i < 4; i++) o[f][i] *= correction[(f / kOutTiles) * 2 + i / 2];
  for (int r = 0; r < 4; r++) {
    tile_sum[r] += __shfl_xor_sync(0xffffffffu, tile_sum[r], 1);
    tile_sum[r] += __shfl_xor_sync(0xffffffffu, tile_sum[r], 2);
    rows.sum[r] = rows.sum[r] * correction[r] + tile_sum[r];
  }
  mma_tile::mma_fragments_by_rows<kStride, kKeyTile, kForwardMTiles, kOutTiles>(o, s, v_tile, 0);
}

// out = O / sum (bf16; times the gate with one), lse = (max + log2(sum)) * ln 2, for the rows inside the sequence.
__device__ __forceinline__ void forward_store(const ForwardParams& p, int h,
                                              const float (&o)[kForwardMTiles * kOutTiles][4],
                                              const ForwardRows& rows, int row0) {
  const int lane = threadIdx.x % kWarpSize, group = lane / 4, pair = lane % 4;
  const int64_t out_row_stride = static_cast<int64_t>(p.heads) * kHeadDim;
  for (int r = 0; r < 4; r++) {
    const int query = row0 + group + 8 * (r % 2) + 16 * (r / 2);
    if (query >= p.docs.T) continue;
    const float gate = p.gate.xn == nullptr ? 1.0f
                                            : attention_gate_value(p.gate.xn + query * p.gate.xn_stride,
                                                                   p.gate.w + h * kGateWidth);
    const float inverse_sum = LLMC_MUTANT("window_attention.forward_ungated", gate, 1.0f) / rows.sum[r];
    bf16* out_row = p.out + query * out_row_stride + h * kHeadDim;
    for (int nt = 0; nt < kOutTiles; nt++) {
      const float(&fragment)[4] = o[(r / 2) * kOutTiles + nt];
      const uint32_t packed = mma_tile::pack_bf16x2(fragment[2 * (r % 2)] * inverse_sum,
                                                    fragment[2 * (r % 2) + 1] * inverse_sum);
      memcpy(static_cast<void*>(out_row + nt * 8 + 2 * pair), &packed, 4);
    }
    if (pair == 0) p.lse[static_cast<int64_t>(h) * p.docs.T + query] = (rows.max[r] + log2f(rows.sum[r])) * kLn2;
  }
}

// Grid: forward_tiles(T) * heads blocks (block i: tile order[i / heads], head i % heads), kThreads
// threads, kForwardSharedBytes of dynamic shared memory.
template <typename Unused = void>
__global__ void __launch_bounds__(kThreads) forward_kernel(ForwardParams p) {
  LLMC_DYNAMIC_SHARED(bf16, shared);
  bf16* q_tile = shared;
  bf16* k_tiles = q_tile + kForwardRows * kStride;  // two buffers of kKeyTile rows
  bf16* v_tiles = k_tiles + 2 * kKeyTile * kStride;
  const int T = p.docs.T, h = blockIdx.x % p.heads;
  const int q0 = __ldg(p.order + blockIdx.x / p.heads) * kForwardRows;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int row0 = q0 + warp * (kForwardRows / kWarps);
  const WarpQueries warp_rows = warp_queries(p.docs, row0, kForwardRows / kWarps);
  ForwardRows rows;
  for (int r = 0; r < 4; r++) {
    rows.query[r] = min(row0 + lane / 4 + 8 * (r % 2) + 16 * (r / 2), T - 1);
    rows.first_key[r] = first_key(p.docs, rows.query[r]);
    rows.max[r] = -INFINITY;
    rows.sum[r] = 0.0f;
  }
  const int first_tile = first_key(p.docs, q0) / kKeyTile;
  const int last_tile = min(q0 + kForwardRows - 1, T - 1) / kKeyTile;
  const bf16 *q_head = p.q + h * kHeadDim, *k_head = p.k + h * kHeadDim, *v_head = p.v + h * kHeadDim;

  AsyncCopies copies;
  issue_rows<kForwardRows>(copies, q_tile, q_head, p.qkv_row_stride, q0, T);
  issue_rows<kKeyTile>(copies, k_tiles, k_head, p.qkv_row_stride, last_tile * kKeyTile, T);
  issue_rows<kKeyTile>(copies, v_tiles, v_head, p.qkv_row_stride, last_tile * kKeyTile, T);
  copies.commit();
  float o[kForwardMTiles * kOutTiles][4];
  mma_tile::zero(o);
  for (int tile = last_tile, buffer = 0; tile >= first_tile; tile--, buffer ^= 1) {
    copies.wait<0>();  // forward: this thread's copies of the key tile landed
    // every thread's copies landed; nobody reads the other buffer any more
    LLMC_MUTANT("window_attention.forward_copies_no_barrier", __syncthreads(), (void)0);
    if (tile > first_tile) {
      const int next = (buffer ^ 1) * kKeyTile * kStride;
      issue_rows<kKeyTile>(copies, k_tiles + next, k_head, p.qkv_row_stride, (tile - 1) * kKeyTile, T);
      issue_rows<kKeyTile>(copies, v_tiles + next, v_head, p.qkv_row_stride, (tile - 1) * kKeyTile, T);
    }
    copies.commit();
    const int k0 = tile * kKeyTile;
    if (tile_needed(warp_rows, k0)) {
      forward_tile(o, rows, q_tile, warp * (kForwardRows / kWarps), k_tiles + buffer * kKeyTile * kStride,
                   v_tiles + buffer * kKeyTile * kStride, k0, tile_full(warp_rows, k0), p.scale_log2);
    }
  }
  forward_store(p, h, o, rows, row0);
}

}  // namespace window_attention
}  // namespace llmc

#endif  // !LLMC_FP32
