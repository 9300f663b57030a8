// Fused causal self-attention on tensor cores (bf16 build only), FlashAttention-2 style: the (T,T)
// score matrix is never stored. Forward: per 64-query tile, stream 64-key tiles of K and V through
// shared memory, scores and P @ V by mma.m16n8k16 (warp tile products shared with the head-128
// window attention: llmc/kernels/mma_tile.cuh), online softmax in fp32; it saves one log-sum-exp per
// query for the backward. Backward, deterministic (no atomics): one kernel per key tile
// accumulates dK and dV over the query tiles, another per query tile accumulates dQ over the key tiles,
// both recomputing P from Q, K and the saved log-sum-exp. Reads q, k, v straight from qkv (B,T,3C) and
// writes out (B,T,C) / dqkv (B,T,3C): no permutes. Head size 64 (every GPT-2 size).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/kernels/mma_tile.cuh"
#include "llmc/cuda/precision.h"

#if !defined(LLMC_FP32)

namespace llmc {
namespace flash {

constexpr int kHeadSize = 64;
constexpr int kTile = 64;                      // queries per block and keys per tile
constexpr int kWarps = 4;                      // each warp owns 16 rows of the tile
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kStride = kHeadSize + 8;         // padded shared row: 144 bytes, 16-byte aligned, fewer bank conflicts
constexpr int kNTiles = kTile / 8;             // 8-column n-tiles across a 64-wide tile

using bf16 = __nv_bfloat16;
using mma_tile::pack_bf16x2;
using mma_tile::zero;

// acc (16 x 64) += A (16 x 64, shared rows row0.. of a_tile) @ B^T, B stored [n][k] (64 x 64 rows).
__device__ __forceinline__ void mma_rows_by_rows(float (&acc)[kNTiles][4], const bf16* a_tile, int row0,
                                                 const bf16* b_tile) {
  mma_tile::mma_rows_by_rows<kStride, kHeadSize, 1, kNTiles>(acc, a_tile, row0, b_tile, 0);
}

// acc (16 x 64) += P (16 x 64, held as mma accumulators p) @ B, B stored [k][n] (64 x 64).
__device__ __forceinline__ void mma_fragments_by_rows(float (&acc)[kNTiles][4], const float (&p)[kNTiles][4],
                                                      const bf16* b_tile) {
  mma_tile::mma_fragments_by_rows<kStride, kTile, 1, kNTiles>(acc, p, b_tile, 0);
}

// Copies rows [first_row, first_row + 64) of one head (columns column0..column0+63 of rows of length
// row_length) into a padded shared tile; rows at or past T become zeros.
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* source, int first_row, int T, size_t row_length,
                                          size_t column0) {
  constexpr int kPacketsPerRow = kHeadSize / 8;
  for (int index = threadIdx.x; index < kTile * kPacketsPerRow; index += kThreads) {
    const int row = index / kPacketsPerRow, packet = index % kPacketsPerRow;
    Packed128<bf16> value = Packed128<bf16>::zeros();
    if (first_row + row < T) value = load128(source + static_cast<size_t>(first_row + row) * row_length + column0 + packet * 8);
    store128(tile + static_cast<size_t>(row) * kStride + packet * 8, value);
  }
}

// Grid (ceil(T/64), B*NH), kThreads threads. lse (B,NH,T): log-sum-exp of each query's scaled scores.
template <typename Unused = void>
__global__ void forward_kernel(bf16* out, float* lse, const bf16* qkv, int T, int NH, float scale) {
  __shared__ __align__(16) bf16 q_tile[kTile * kStride];
  __shared__ __align__(16) bf16 k_tile[kTile * kStride];
  __shared__ __align__(16) bf16 v_tile[kTile * kStride];
  const int C = NH * kHeadSize;
  const int b = blockIdx.y / NH, h = blockIdx.y % NH;
  const int query_tile = blockIdx.x, q0 = query_tile * kTile;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int group = lane / 4, pair = lane % 4;
  const int row0 = warp * 16;
  const bf16* batch_qkv = qkv + static_cast<size_t>(b) * T * 3 * C;
  load_tile(q_tile, batch_qkv, q0, T, 3 * static_cast<size_t>(C), static_cast<size_t>(h) * kHeadSize);

  float o[kNTiles][4];
  zero(o);
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  for (int key_tile = 0; key_tile <= query_tile; key_tile++) {
    const int k0 = key_tile * kTile;
    __syncthreads();  // the previous tiles are no longer read
    load_tile(k_tile, batch_qkv, k0, T, 3 * static_cast<size_t>(C), static_cast<size_t>(C) + h * kHeadSize);
    load_tile(v_tile, batch_qkv, k0, T, 3 * static_cast<size_t>(C), 2 * static_cast<size_t>(C) + h * kHeadSize);
    __syncthreads();
    float s[kNTiles][4];
    zero(s);
    mma_rows_by_rows(s, q_tile, row0, k_tile);
    // Scale and mask; accumulator element i is row (group + 8*(i/2)), column (2*pair + i%2) of n-tile nt.
    float tile_max[2] = {-INFINITY, -INFINITY};
    for (int nt = 0; nt < kNTiles; nt++)
      for (int i = 0; i < 4; i++) {
        const int query = q0 + row0 + group + 8 * (i / 2), key = k0 + nt * 8 + 2 * pair + i % 2;
        s[nt][i] = (key <= query && key < T) ? s[nt][i] * scale : -INFINITY;
        tile_max[i / 2] = fmaxf(tile_max[i / 2], s[nt][i]);
      }
    float correction[2], tile_sum[2] = {0.0f, 0.0f};
    for (int r = 0; r < 2; r++) {
      // The four lanes of a quad hold one row between them.
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float new_max = fmaxf(row_max[r], tile_max[r]);  // finite: key k0 <= every query of the tile
      correction[r] = expf(row_max[r] - new_max);
      row_max[r] = new_max;
    }
    for (int nt = 0; nt < kNTiles; nt++)
      for (int i = 0; i < 4; i++) {
        s[nt][i] = expf(s[nt][i] - row_max[i / 2]);
        tile_sum[i / 2] += s[nt][i];
        o[nt][i] *= correction[i / 2];
      }
    for (int r = 0; r < 2; r++) {
      tile_sum[r] += __shfl_xor_sync(0xffffffffu, tile_sum[r], 1);
      tile_sum[r] += __shfl_xor_sync(0xffffffffu, tile_sum[r], 2);
      row_sum[r] = row_sum[r] * correction[r] + tile_sum[r];
    }
    mma_fragments_by_rows(o, s, v_tile);
  }
  bf16* batch_out = out + static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * kHeadSize;
  for (int r = 0; r < 2; r++) {
    const int query = q0 + row0 + group + 8 * r;
    if (query >= T) continue;
    const float inv_sum = 1.0f / row_sum[r];
    for (int nt = 0; nt < kNTiles; nt++) {
      const uint32_t packed = pack_bf16x2(o[nt][2 * r] * inv_sum, o[nt][2 * r + 1] * inv_sum);
      memcpy(static_cast<void*>(batch_out + static_cast<size_t>(query) * C + nt * 8 + 2 * pair), &packed, 4);
    }
    if (pair == 0) lse[static_cast<size_t>(blockIdx.y) * T + query] = row_max[r] + logf(row_sum[r]);
  }
}

// delta[bh, t] = sum_d dout[b,t,h,d] * out[b,t,h,d] (the row term of the softmax backward), one thread
// per (bh, t).
template <typename Unused = void>
__global__ void delta_kernel(float* delta, const bf16* dout, const bf16* out, int B, int T, int NH) {
  const int C = NH * kHeadSize;
  const size_t total = static_cast<size_t>(B) * NH * T;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t index = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < total; index += stride) {
    const int t = static_cast<int>(index % T), bh = static_cast<int>(index / T);
    const int b = bh / NH, h = bh % NH;
    const size_t offset = (static_cast<size_t>(b) * T + t) * C + static_cast<size_t>(h) * kHeadSize;
    float sum = 0.0f;
    for (int d = 0; d < kHeadSize; d++) sum += to_float(dout[offset + d]) * to_float(out[offset + d]);
    delta[index] = sum;
  }
}

// Grid (ceil(T/64) key tiles, B*NH). Each warp owns 16 keys; loops over query tiles from its own
// (causal) to the last, accumulating dV = P^T dO and dK = scale * dS^T Q.
template <typename Unused = void>
__global__ void backward_dkdv_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                     const float* delta, int T, int NH, float scale) {
  __shared__ __align__(16) bf16 k_tile[kTile * kStride];
  __shared__ __align__(16) bf16 v_tile[kTile * kStride];
  __shared__ __align__(16) bf16 q_tile[kTile * kStride];
  __shared__ __align__(16) bf16 dout_tile[kTile * kStride];
  __shared__ float tile_lse[kTile];
  __shared__ float tile_delta[kTile];
  const int C = NH * kHeadSize;
  const int b = blockIdx.y / NH, h = blockIdx.y % NH;
  const int key_tile = blockIdx.x, k0 = key_tile * kTile;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int group = lane / 4, pair = lane % 4;
  const int row0 = warp * 16;
  const int num_tiles = static_cast<int>(ceil_div(T, kTile));
  const bf16* batch_qkv = qkv + static_cast<size_t>(b) * T * 3 * C;
  const bf16* batch_dout = dout + static_cast<size_t>(b) * T * C;
  load_tile(k_tile, batch_qkv, k0, T, 3 * static_cast<size_t>(C), static_cast<size_t>(C) + h * kHeadSize);
  load_tile(v_tile, batch_qkv, k0, T, 3 * static_cast<size_t>(C), 2 * static_cast<size_t>(C) + h * kHeadSize);

  float dk[kNTiles][4], dv[kNTiles][4];
  zero(dk);
  zero(dv);
  for (int query_tile = key_tile; query_tile < num_tiles; query_tile++) {
    const int q0 = query_tile * kTile;
    __syncthreads();
    load_tile(q_tile, batch_qkv, q0, T, 3 * static_cast<size_t>(C), static_cast<size_t>(h) * kHeadSize);
    load_tile(dout_tile, batch_dout, q0, T, static_cast<size_t>(C), static_cast<size_t>(h) * kHeadSize);
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
      const bool valid = q0 + i < T;
      tile_lse[i] = valid ? lse[static_cast<size_t>(blockIdx.y) * T + q0 + i] : 0.0f;
      tile_delta[i] = valid ? delta[static_cast<size_t>(blockIdx.y) * T + q0 + i] : 0.0f;
    }
    __syncthreads();
    // P^T (16 keys x 64 queries) from S^T = K Q^T; element i: key row group + 8*(i/2), query column.
    float p[kNTiles][4];
    zero(p);
    mma_rows_by_rows(p, k_tile, row0, q_tile);
    for (int nt = 0; nt < kNTiles; nt++)
      for (int i = 0; i < 4; i++) {
        const int key = k0 + row0 + group + 8 * (i / 2), column = nt * 8 + 2 * pair + i % 2, query = q0 + column;
        p[nt][i] = (key <= query && query < T) ? expf(p[nt][i] * scale - tile_lse[column]) : 0.0f;
      }
    mma_fragments_by_rows(dv, p, dout_tile);
    // dP^T = V dO^T, then dS^T = P^T * (dP^T - delta[query]).
    float ds[kNTiles][4];
    zero(ds);
    mma_rows_by_rows(ds, v_tile, row0, dout_tile);
    for (int nt = 0; nt < kNTiles; nt++)
      for (int i = 0; i < 4; i++) ds[nt][i] = p[nt][i] * (ds[nt][i] - tile_delta[nt * 8 + 2 * pair + i % 2]);
    mma_fragments_by_rows(dk, ds, q_tile);
  }
  bf16* batch_dqkv = dqkv + static_cast<size_t>(b) * T * 3 * C + static_cast<size_t>(h) * kHeadSize;
  for (int r = 0; r < 2; r++) {
    const int key = k0 + row0 + group + 8 * r;
    if (key >= T) continue;
    for (int nt = 0; nt < kNTiles; nt++) {
      const uint32_t packed_dk = pack_bf16x2(dk[nt][2 * r] * scale, dk[nt][2 * r + 1] * scale);
      const uint32_t packed_dv = pack_bf16x2(dv[nt][2 * r], dv[nt][2 * r + 1]);
      memcpy(static_cast<void*>(batch_dqkv + static_cast<size_t>(key) * 3 * C + C + nt * 8 + 2 * pair), &packed_dk, 4);
      memcpy(static_cast<void*>(batch_dqkv + static_cast<size_t>(key) * 3 * C + 2 * C + nt * 8 + 2 * pair), &packed_dv, 4);
    }
  }
}

// Grid (ceil(T/64) query tiles, B*NH). Each warp owns 16 queries; loops over key tiles up to the
// diagonal, accumulating dQ = scale * dS K.
template <typename Unused = void>
__global__ void backward_dq_kernel(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                   const float* delta, int T, int NH, float scale) {
  __shared__ __align__(16) bf16 q_tile[kTile * kStride];
  __shared__ __align__(16) bf16 dout_tile[kTile * kStride];
  __shared__ __align__(16) bf16 k_tile[kTile * kStride];
  __shared__ __align__(16) bf16 v_tile[kTile * kStride];
  const int C = NH * kHeadSize;
  const int b = blockIdx.y / NH, h = blockIdx.y % NH;
  const int query_tile = blockIdx.x, q0 = query_tile * kTile;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int group = lane / 4, pair = lane % 4;
  const int row0 = warp * 16;
  const bf16* batch_qkv = qkv + static_cast<size_t>(b) * T * 3 * C;
  load_tile(q_tile, batch_qkv, q0, T, 3 * static_cast<size_t>(C), static_cast<size_t>(h) * kHeadSize);
  load_tile(dout_tile, dout + static_cast<size_t>(b) * T * C, q0, T, static_cast<size_t>(C), static_cast<size_t>(h) * kHeadSize);
  float row_lse[2], row_delta[2];
  for (int r = 0; r < 2; r++) {
    const int query = q0 + row0 + group + 8 * r;
    row_lse[r] = query < T ? lse[static_cast<size_t>(blockIdx.y) * T + query] : 0.0f;
    row_delta[r] = query < T ? delta[static_cast<size_t>(blockIdx.y) * T + query] : 0.0f;
  }

  float dq[kNTiles][4];
  zero(dq);
  for (int key_tile = 0; key_tile <= query_tile; key_tile++) {
    const int k0 = key_tile * kTile;
    __syncthreads();
    load_tile(k_tile, batch_qkv, k0, T, 3 * static_cast<size_t>(C), static_cast<size_t>(C) + h * kHeadSize);
    load_tile(v_tile, batch_qkv, k0, T, 3 * static_cast<size_t>(C), 2 * static_cast<size_t>(C) + h * kHeadSize);
    __syncthreads();
    float p[kNTiles][4];
    zero(p);
    mma_rows_by_rows(p, q_tile, row0, k_tile);
    for (int nt = 0; nt < kNTiles; nt++)
      for (int i = 0; i < 4; i++) {
        const int query = q0 + row0 + group + 8 * (i / 2), key = k0 + nt * 8 + 2 * pair + i % 2;
        p[nt][i] = (key <= query && key < T) ? expf(p[nt][i] * scale - row_lse[i / 2]) : 0.0f;
      }
    float ds[kNTiles][4];  // dP = dO V^T, then dS = P * (dP - delta[query])
    zero(ds);
    mma_rows_by_rows(ds, dout_tile, row0, v_tile);
    for (int nt = 0; nt < kNTiles; nt++)
      for (int i = 0; i < 4; i++) ds[nt][i] = p[nt][i] * (ds[nt][i] - row_delta[i / 2]);
    mma_fragments_by_rows(dq, ds, k_tile);
  }
  bf16* batch_dqkv = dqkv + static_cast<size_t>(b) * T * 3 * C + static_cast<size_t>(h) * kHeadSize;
  for (int r = 0; r < 2; r++) {
    const int query = q0 + row0 + group + 8 * r;
    if (query >= T) continue;
    for (int nt = 0; nt < kNTiles; nt++) {
      const uint32_t packed = pack_bf16x2(dq[nt][2 * r] * scale, dq[nt][2 * r + 1] * scale);
      memcpy(static_cast<void*>(batch_dqkv + static_cast<size_t>(query) * 3 * C + nt * 8 + 2 * pair), &packed, 4);
    }
  }
}

inline void check_shape(const char* caller, int C, int NH) {
  if (NH <= 0 || C % NH != 0 || C / NH != kHeadSize)
    throw std::invalid_argument(std::string(caller) + ": needs head size " + std::to_string(kHeadSize) +
                                ", got C = " + std::to_string(C) + ", NH = " + std::to_string(NH));
}

}  // namespace flash

// out (B,T,C) = causal attention of qkv (B,T,3C); lse (B,NH,T) fp32 is saved for the backward.
// Requires C / NH == 64 and 16-byte aligned qkv (C is then a multiple of 8).
inline void flash_attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int C, int NH,
                                    cudaStream_t stream) {
  flash::check_shape("flash_attention_forward", C, NH);
  const float scale = 1.0f / std::sqrt(static_cast<float>(flash::kHeadSize));
  // qkv read, out written, lse; causal: half of the T x T scores (QK^T and PV, 2 FLOPs per multiply-add).
  const double x = static_cast<double>(sizeof(floatX)), btc = static_cast<double>(B) * T * C;
  const KernelCost cost{4 * btc * x + 4.0 * B * NH * T, 2.0 * B * NH * static_cast<double>(T) * T * (C / NH)};
  LLMC_LAUNCH_COSTED(cost, flash::forward_kernel<>, dim3(static_cast<unsigned>(ceil_div(T, flash::kTile)), static_cast<unsigned>(B * NH)),
              dim3(flash::kThreads), 0, stream, out, lse, qkv, T, NH, scale);
}

// dqkv (B,T,3C) is overwritten. dout (B,T,C); out, lse from the forward; delta_scratch: B*NH*T floats.
inline void flash_attention_backward(floatX* dqkv, float* delta_scratch, const floatX* dout, const floatX* out,
                                     const floatX* qkv, const float* lse, int B, int T, int C, int NH,
                                     cudaStream_t stream) {
  flash::check_shape("flash_attention_backward", C, NH);
  const float scale = 1.0f / std::sqrt(static_cast<float>(flash::kHeadSize));
  constexpr int kBlock = 256;
  const double x = static_cast<double>(sizeof(floatX)), btc = static_cast<double>(B) * T * C;
  const double causal_flops = 2.0 * B * NH * static_cast<double>(T) * T * (C / NH);
  const KernelCost delta_cost{2 * btc * x + 4.0 * B * NH * T, 2 * btc};
  // dK, dV: recomputes S and P, then dV += P^T dO, dP = dO V^T, dK += dS^T Q (4 products); dQ: 3 products.
  const KernelCost dkdv_cost{6 * btc * x + 8.0 * B * NH * T, 2.0 * causal_flops};
  const KernelCost dq_cost{5 * btc * x + 8.0 * B * NH * T, 1.5 * causal_flops};
  LLMC_LAUNCH_COSTED(delta_cost, flash::delta_kernel<>, dim3(elementwise_grid(static_cast<size_t>(B) * NH * T, kBlock)), dim3(kBlock), 0, stream,
              delta_scratch, dout, out, B, T, NH);
  const dim3 grid(static_cast<unsigned>(ceil_div(T, flash::kTile)), static_cast<unsigned>(B * NH));
  LLMC_LAUNCH_COSTED(dkdv_cost, flash::backward_dkdv_kernel<>, grid, dim3(flash::kThreads), 0, stream, dqkv, dout, qkv, lse,
              static_cast<const float*>(delta_scratch), T, NH, scale);
  LLMC_LAUNCH_COSTED(dq_cost, flash::backward_dq_kernel<>, grid, dim3(flash::kThreads), 0, stream, dqkv, dout, qkv, lse,
              static_cast<const float*>(delta_scratch), T, NH, scale);
}

}  // namespace llmc

#endif  // !LLMC_FP32
