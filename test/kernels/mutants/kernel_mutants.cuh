// Copies of real kernels, each with one planted bug of the kind a GPU punishes and a lenient emulation
// would not: a barrier removed, a __syncwarp removed, a non-atomic accumulation, an uninitialised
// accumulator, a misaligned float4, a read of another block's output. Mutation::kNone is the faithful
// copy (the control: it must pass with no report). test_mutants.cu proves each mutant fails.
// Copied from (keep in step): llmc/kernels/flash_attention.cuh (forward_kernel),
// llmc/kernels/reduction.cuh (block_reduce_sum), llmc/kernels/residual.cuh (residual_forward_kernel); the
// squared sum is global_norm.cuh's former two-stage form (squared_sum_partials_kernel + sum_partials_kernel,
// before issue 15 finished the sum inside one launch), kept here whole as the mutants' subject.
#pragma once

#include <cstddef>
#include <cstring>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/flash_attention.cuh"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace mutants {

enum class Mutation {
  kNone,
  kNoBarrierBeforeTileReuse,   // flash forward: the __syncthreads before K/V tiles are overwritten
  kNoBarrierAfterTileFill,     // flash forward: the __syncthreads between filling and reading the tiles
  kUninitialisedAccumulator,   // squared sum: each thread's accumulator is never zeroed
  kNoSyncwarp,                 // warp reduction through shared memory: one __syncwarp removed
  kNonAtomicAccumulation,      // squared sum: every block adds its partial to the total, non-atomically
  kReadsOtherBlocksOutput,     // squared sum: the last block sums partials other blocks of the launch write
  kMisalignedFloat4,           // residual: float4 packets one element off their 16-byte boundary
};

#if !defined(LLMC_FP32)
// llmc::flash::forward_kernel with a mutation point at each barrier. (Not zeroing its accumulator o is
// no mutant: the online softmax scales o by exp(-inf) = 0 on the first key tile, which clears any
// finite garbage, and GCC's -ftrivial-auto-var-init=pattern gives finite floats.)
template <Mutation M>
__global__ void flash_forward_kernel(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int T, int NH,
                                     float scale) {
  using namespace llmc::flash;
  __shared__ __align__(16) bf16 q_tile[kTile * kStride];
  __shared__ __align__(16) bf16 k_tile[kTile * kStride];
  __shared__ __align__(16) bf16 v_tile[kTile * kStride];
  const int C = NH * kHeadSize;
  const int b = blockIdx.y / NH, h = blockIdx.y % NH;
  const int query_tile = blockIdx.x, q0 = query_tile * kTile;
  const int warp = threadIdx.x / llmc::kWarpSize, lane = threadIdx.x % llmc::kWarpSize;
  const int group = lane / 4, pair = lane % 4;
  const int row0 = warp * 16;
  const bf16* batch_qkv = qkv + (size_t)b * T * 3 * C;
  load_tile(q_tile, batch_qkv, q0, T, 3 * (size_t)C, (size_t)h * kHeadSize);

  float o[kNTiles][4];
  zero(o);
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  for (int key_tile = 0; key_tile <= query_tile; key_tile++) {
    const int k0 = key_tile * kTile;
    if (M != Mutation::kNoBarrierBeforeTileReuse) __syncthreads();
    load_tile(k_tile, batch_qkv, k0, T, 3 * (size_t)C, (size_t)C + h * kHeadSize);
    load_tile(v_tile, batch_qkv, k0, T, 3 * (size_t)C, 2 * (size_t)C + h * kHeadSize);
    if (M != Mutation::kNoBarrierAfterTileFill) __syncthreads();
    float s[kNTiles][4];
    zero(s);
    mma_rows_by_rows(s, q_tile, row0, k_tile);
    float tile_max[2] = {-INFINITY, -INFINITY};
    for (int nt = 0; nt < kNTiles; nt++)
      for (int i = 0; i < 4; i++) {
        const int query = q0 + row0 + group + 8 * (i / 2), key = k0 + nt * 8 + 2 * pair + i % 2;
        s[nt][i] = (key <= query && key < T) ? s[nt][i] * scale : -INFINITY;
        tile_max[i / 2] = fmaxf(tile_max[i / 2], s[nt][i]);
      }
    float correction[2], tile_sum[2] = {0.0f, 0.0f};
    for (int r = 0; r < 2; r++) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float new_max = fmaxf(row_max[r], tile_max[r]);
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
  bf16* batch_out = out + (size_t)b * T * C + (size_t)h * kHeadSize;
  for (int r = 0; r < 2; r++) {
    const int query = q0 + row0 + group + 8 * r;
    if (query >= T) continue;
    const float inv_sum = 1.0f / row_sum[r];
    for (int nt = 0; nt < kNTiles; nt++) {
      const uint32_t packed = pack_bf16x2(o[nt][2 * r] * inv_sum, o[nt][2 * r + 1] * inv_sum);
      memcpy(static_cast<void*>(batch_out + (size_t)query * C + nt * 8 + 2 * pair), &packed, 4);
    }
    if (pair == 0) lse[(size_t)blockIdx.y * T + query] = row_max[r] + logf(row_sum[r]);
  }
}
#endif  // !LLMC_FP32

// The uninitialised-accumulator mutant is deliberate: GCC notices this one (-Wmaybe-uninitialized), as it
// does not notice many others (through references, helpers, shared memory), and the emulated run must
// catch it whether or not a warning was read.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// llmc::block_reduce_sum's first stage done the pre-shuffle way, through shared memory within each
// warp: every step writes a partial and reads the partner's, with __syncwarp in between.
template <Mutation M>
__device__ float warp_reduce_through_shared(float value, float* warp_slots) {
  const int lane = threadIdx.x % llmc::kWarpSize;
  for (int offset = llmc::kWarpSize / 2; offset > 0; offset /= 2) {
    warp_slots[lane] = value;
    if (M != Mutation::kNoSyncwarp || offset != 4) __syncwarp();  // the mutant drops the one at offset 4
    value += warp_slots[lane ^ offset];
    __syncwarp();  // the slots are rewritten by the next step
  }
  return value;
}

// The former second stage: one block of BlockSize threads, out[0] = (accumulate ? out[0] : 0) + the sum of
// the partials, each thread summing a fixed slice.
template <int BlockSize>
__global__ void sum_partials_kernel(float* out, const float* partials, int count, bool accumulate) {
  __shared__ float warp_totals[32];
  float sum = 0.0f;
  for (int i = threadIdx.x; i < count; i += BlockSize) sum += partials[i];
  sum = llmc::block_reduce_sum(sum, warp_totals);
  if (threadIdx.x == 0) out[0] = accumulate ? out[0] + sum : sum;
}

// The former llmc::squared_sum_partials_kernel (one partial per block), with sum_partials_kernel fused in for
// the mutants that accumulate across blocks (kUninitialisedAccumulator never zeroes the per-thread sum): kNonAtomicAccumulation adds each block's partial to
// total[0] directly, kReadsOtherBlocksOutput has the last block sum the other blocks' partials.
template <Mutation M>
__global__ void squared_sum_kernel(float* partials, float* total, const float* data, size_t n) {
  __shared__ float warp_totals[32];
  __shared__ float warp_slots[1024];
  float accumulator[1];
  if (M != Mutation::kUninitialisedAccumulator) accumulator[0] = 0.0f;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    accumulator[0] += data[i] * data[i];
  }
  float sum = warp_reduce_through_shared<M>(accumulator[0],
                                            warp_slots + (threadIdx.x / llmc::kWarpSize) * llmc::kWarpSize);
  const int lane = threadIdx.x % llmc::kWarpSize, warp = threadIdx.x / llmc::kWarpSize;
  if (lane == 0) warp_totals[warp] = sum;
  __syncthreads();
  sum = lane < (int)(blockDim.x / llmc::kWarpSize) ? warp_totals[lane] : 0.0f;
  sum = llmc::warp_reduce_sum(sum);
  if (threadIdx.x != 0) return;
  partials[blockIdx.x] = sum;
  if (M == Mutation::kNonAtomicAccumulation) total[0] += sum;  // needs atomicAdd: blocks run concurrently
  if (M == Mutation::kReadsOtherBlocksOutput && blockIdx.x == gridDim.x - 1) {
    float all = 0.0f;
    for (unsigned g = 0; g < gridDim.x; g++) all += partials[g];  // no grid-wide barrier orders these
    total[0] = all;
  }
}

#pragma GCC diagnostic pop

// llmc::residual_forward_kernel (fp32) with float4 packets; the mutant starts one element into the
// arrays, so every packet straddles a 16-byte boundary.
template <Mutation M>
__global__ void residual_float4_kernel(float* out, const float* a, const float* b, size_t packets) {
  const size_t shift = M == Mutation::kMisalignedFloat4 ? 1 : 0;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < packets; p += stride) {
    const float4 x = *reinterpret_cast<const float4*>(a + shift + 4 * p);
    const float4 y = *reinterpret_cast<const float4*>(b + shift + 4 * p);
    *reinterpret_cast<float4*>(out + shift + 4 * p) = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
}

}  // namespace mutants
