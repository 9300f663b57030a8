// Warp-level tile products on tensor cores for the attention kernels (head sizes 64 and 128): a
// warp multiplies 16-row slices of bf16 tiles held row-major in padded shared memory, with fp32
// accumulators in the mma.m16n8k16 fragment layout (llmc/cuda/mma.cuh). A warp may own several
// 16-row m-tiles: each B fragment it loads from shared memory then serves all of them.
#pragma once

#include <cstdint>
#include <cstring>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/mma.cuh"
#include "llmc/kernels/reduction.cuh"

namespace llmc {
namespace mma_tile {

using bf16 = __nv_bfloat16;

// Two floats rounded to bf16 in one 32-bit register, `low` in the low half (an MMA A/B element pair).
__device__ __forceinline__ uint32_t pack_bf16x2(float low, float high) {
  const bf16 low_bf16 = __float2bfloat16(low), high_bf16 = __float2bfloat16(high);
  uint16_t low_bits, high_bits;
  memcpy(&low_bits, &low_bf16, 2);
  memcpy(&high_bits, &high_bf16, 2);
  return static_cast<uint32_t>(low_bits) | (static_cast<uint32_t>(high_bits) << 16);
}

// A operand (16 x 16) from a row-major shared tile of row stride kStride elements: rows row0..+15,
// columns col0..+15.
template <int kStride>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* tile, int row0, int col0) {
  const int lane = threadIdx.x % kWarpSize;
  ldmatrix_x4(a, tile + static_cast<size_t>(row0 + lane % 16) * kStride + col0 + (lane / 16) * 8);
}

// B operands of two n-tiles from a tile stored [k][n] (k = rows): b[0..1] for columns n0..n0+7,
// b[2..3] for n0+8..n0+15, k from k0 to k0+15.
template <int kStride>
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], const bf16* tile, int k0, int n0) {
  const int lane = threadIdx.x % kWarpSize;
  ldmatrix_x4_trans(b, tile + static_cast<size_t>(k0 + lane % 16) * kStride + n0 + (lane / 16) * 8);
}

// B operands of two n-tiles from a tile stored [n][k] (B = tile^T, e.g. K for Q K^T): b[0..1] for
// n0..n0+7, b[2..3] for n0+8..n0+15, k from k0 to k0+15.
template <int kStride>
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], const bf16* tile, int n0, int k0) {
  const int lane = threadIdx.x % kWarpSize;
  ldmatrix_x4(b, tile + static_cast<size_t>(n0 + lane % 8 + (lane / 16) * 8) * kStride + k0 + ((lane / 8) % 2) * 8);
}

// acc (16 kMTiles x 8 kNTiles; fragment [m * kNTiles + n]) += A @ B^T, where A is rows a_row0.. of
// a_tile (16 kMTiles rows, kDepth columns) and B is rows b_row0.. of b_tile (8 kNTiles rows, kDepth
// columns), both row-major: e.g. S = Q K^T.
template <int kStride, int kDepth, int kMTiles, int kNTiles>
__device__ __forceinline__ void mma_rows_by_rows(float (&acc)[kMTiles * kNTiles][4], const bf16* a_tile, int a_row0,
                                                 const bf16* b_tile, int b_row0) {
  static_assert(kDepth % 16 == 0 && kNTiles % 2 == 0, "16-deep k-steps, n-tiles loaded in pairs");
  const bf16* b_rows = b_tile + static_cast<size_t>(b_row0) * kStride;
  for (int ks = 0; ks < kDepth / 16; ks++) {
    uint32_t a[kMTiles][4];
    for (int mt = 0; mt < kMTiles; mt++) load_a<kStride>(a[mt], a_tile, a_row0 + 16 * mt, ks * 16);
    for (int nt = 0; nt < kNTiles; nt += 2) {
      uint32_t b[4];
      load_b_nk<kStride>(b, b_rows, nt * 8, ks * 16);
      const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
      for (int mt = 0; mt < kMTiles; mt++) {
        mma_m16n8k16_bf16(acc[mt * kNTiles + nt], a[mt], b0, acc[mt * kNTiles + nt]);
        mma_m16n8k16_bf16(acc[mt * kNTiles + nt + 1], a[mt], b1, acc[mt * kNTiles + nt + 1]);
      }
    }
  }
}

// acc (16 kMTiles x 8 kNTiles) += P @ B, where P (16 kMTiles x kDepth) is held as mma accumulators
// (fragment [m * kDepth/8 + k/8]), rounded to bf16 here, and B is rows b_row0.. of b_tile stored
// [k][n] (kDepth rows, columns 0..8 kNTiles): e.g. O += P V. The accumulator layout of two adjacent
// n-tiles is exactly the A-operand layout of one k-step.
template <int kStride, int kDepth, int kMTiles, int kNTiles>
__device__ __forceinline__ void mma_fragments_by_rows(float (&acc)[kMTiles * kNTiles][4],
                                                      const float (&p)[kMTiles * (kDepth / 8)][4],
                                                      const bf16* b_tile, int b_row0) {
  static_assert(kDepth % 16 == 0 && kNTiles % 2 == 0, "16-deep k-steps, n-tiles loaded in pairs");
  constexpr int kPTiles = kDepth / 8;
  const bf16* b_rows = b_tile + static_cast<size_t>(b_row0) * kStride;
  for (int ks = 0; ks < kDepth / 16; ks++) {
    uint32_t a[kMTiles][4];
    for (int mt = 0; mt < kMTiles; mt++) {
      const float(&low)[4] = p[mt * kPTiles + 2 * ks];
      const float(&high)[4] = p[mt * kPTiles + 2 * ks + 1];
      a[mt][0] = pack_bf16x2(low[0], low[1]);
      a[mt][1] = pack_bf16x2(low[2], low[3]);
      a[mt][2] = pack_bf16x2(high[0], high[1]);
      a[mt][3] = pack_bf16x2(high[2], high[3]);
    }
    for (int nt = 0; nt < kNTiles; nt += 2) {
      uint32_t b[4];
      load_b_kn<kStride>(b, b_rows, ks * 16, nt * 8);
      const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
      for (int mt = 0; mt < kMTiles; mt++) {
        mma_m16n8k16_bf16(acc[mt * kNTiles + nt], a[mt], b0, acc[mt * kNTiles + nt]);
        mma_m16n8k16_bf16(acc[mt * kNTiles + nt + 1], a[mt], b1, acc[mt * kNTiles + nt + 1]);
      }
    }
  }
}

template <int kFragments>
__device__ __forceinline__ void zero(float (&acc)[kFragments][4]) {
  for (int f = 0; f < kFragments; f++)
    for (int i = 0; i < 4; i++) acc[f][i] = 0.0f;
}

}  // namespace mma_tile
}  // namespace llmc
