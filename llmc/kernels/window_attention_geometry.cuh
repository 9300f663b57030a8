// Which keys each query attends to in the head-128 window attention (llmc/kernels/window_attention.cuh):
// documents packed into one sequence (cu_seqlens), causal, and a sliding window of W tokens (query q
// sees key k iff k and q are in the same document and q - W <= k <= q, FlashAttention's
// window_size=(W, 0)). Tile constants, the per-warp tile tests that let kernels skip tiles and mask
// only boundary tiles, cp.async tile loads, and the plan kernel that orders tiles longest first.
#pragma once

#include <cstdint>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/async_copies.cuh"
#include "llmc/kernels/reduction.cuh"

#if !defined(LLMC_FP32)

namespace llmc {
namespace window_attention {

using bf16 = __nv_bfloat16;

constexpr int kHeadDim = 128;
constexpr int kStride = kHeadDim + 8;  // padded shared row (272 bytes): the 8 rows of an ldmatrix hit distinct banks
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kKeyTile = 64;       // keys per K/V tile (forward, dq) and per dK/dV block
constexpr int kForwardRows = 128;  // queries per forward block, 32 per warp: each K/V fragment serves two m-tiles
constexpr int kBackwardRows = 64;  // queries per dQ block and per query tile of the dK/dV loop, 16 per warp
constexpr int kMaxTokens = 1 << 19;  // the plan keeps one 16-bit work count per tile in shared memory
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

constexpr int ceil_div_int(int a, int b) { return (a + b - 1) / b; }
constexpr int forward_tiles(int T) { return ceil_div_int(T, kForwardRows); }
constexpr int backward_tiles(int T) { return ceil_div_int(T, kBackwardRows); }

// The packed sequence: cu_seqlens[0] = 0 <= ... <= cu_seqlens[num_docs] = T; entries of a padded
// array past the last document repeat T (empty documents). window = W, at most T.
struct Documents {
  const int* cu_seqlens;
  int num_docs;
  int T;
  int window;
};

// The last document index i with cu_seqlens[i] <= t, for 0 <= t < T (binary search; cu_seqlens[num_docs] = T > t).
__device__ __forceinline__ int document_of(const Documents& docs, int t) {
  int low = 0, high = docs.num_docs;
  while (high - low > 1) {
    const int middle = (low + high) / 2;
    if (__ldg(docs.cu_seqlens + middle) <= t) low = middle; else high = middle;
  }
  return low;
}

// First key query q (0 <= q < T) attends to.
__device__ __forceinline__ int first_key(const Documents& docs, int q) {
  return max(__ldg(docs.cu_seqlens + document_of(docs, q)), q - docs.window);
}

// Last query that attends to key k (0 <= k < T).
__device__ __forceinline__ int last_query(const Documents& docs, int k) {
  return min(__ldg(docs.cu_seqlens + document_of(docs, k) + 1) - 1, k + docs.window);
}

// The query rows one warp owns in the forward or dQ kernel, clamped to the sequence: rows past T
// (a partial last tile) compute as copies of row T-1 and are never stored.
struct WarpQueries {
  bool active;  // some row of the warp is inside the sequence
  int first, last;
  int first_key_of_first, first_key_of_last;
};

__device__ __forceinline__ WarpQueries warp_queries(const Documents& docs, int row0, int rows) {
  WarpQueries w;
  w.active = row0 < docs.T;
  w.first = min(row0, docs.T - 1);
  w.last = min(row0 + rows - 1, docs.T - 1);
  w.first_key_of_first = first_key(docs, w.first);
  w.first_key_of_last = first_key(docs, w.last);
  return w;
}

// Some (query, key) pair of the warp's rows and the key tile at k0 is attended (the smallest
// query >= k0 has the smallest first key).
__device__ __forceinline__ bool tile_needed(const WarpQueries& w, int k0) {
  return w.active && k0 <= w.last && (k0 > w.first || w.first_key_of_first <= k0 + kKeyTile - 1);
}

// Every pair of the warp's rows and the key tile at k0 is attended: no masking needed.
__device__ __forceinline__ bool tile_full(const WarpQueries& w, int k0) {
  return k0 + kKeyTile - 1 <= w.first && w.first_key_of_last <= k0;
}

// The 16 keys one warp owns in the dK/dV kernel, clamped like WarpQueries.
struct WarpKeys {
  bool active;
  int first, last;
  int last_query_of_first, last_query_of_last;
};

__device__ __forceinline__ WarpKeys warp_keys(const Documents& docs, int row0, int rows) {
  WarpKeys w;
  w.active = row0 < docs.T;
  w.first = min(row0, docs.T - 1);
  w.last = min(row0 + rows - 1, docs.T - 1);
  w.last_query_of_first = last_query(docs, w.first);
  w.last_query_of_last = last_query(docs, w.last);
  return w;
}

// For query tiles at q0 >= the warp's key tile: some pair attended, every pair attended.
__device__ __forceinline__ bool query_tile_needed(const WarpKeys& w, int q0) {
  return w.active && w.last_query_of_last >= q0;
}
__device__ __forceinline__ bool query_tile_full(const WarpKeys& w, int q0) {
  return w.last <= q0 && q0 + kBackwardRows - 1 <= w.last_query_of_first;
}

// Issues the cp.async copies of rows first_row.. (kRows of them) of one head into a padded shared
// tile; `head` points at element 0 of the head in row 0 and rows are row_stride elements apart.
// Rows at or past T are zero-filled without reading.
template <int kRows>
__device__ __forceinline__ void issue_rows(AsyncCopies& copies, bf16* tile, const bf16* head, int64_t row_stride,
                                           int first_row, int T) {
  constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  for (int index = threadIdx.x; index < kRows * kChunks; index += kThreads) {
    const int row = index / kChunks, chunk = index % kChunks, token = first_row + row;
    const bool inside = token < T;
    copies.copy16_or_zero(tile + row * kStride + chunk * 8, head + (inside ? token : 0) * row_stride + chunk * 8,
                          inside);
  }
}

// Issues the copies of values[first_row .. first_row + kRows) (fp32, one per row; any alignment)
// into shared memory, zeros past T.
template <int kRows>
__device__ __forceinline__ void issue_row_values(AsyncCopies& copies, float* tile, const float* values, int first_row,
                                                 int T) {
  for (int row = threadIdx.x; row < kRows; row += kThreads) {
    const int token = first_row + row;
    copies.copy4_or_zero(tile + row, values + (token < T ? token : 0), token < T);
  }
}

// ---- the plan: tiles ordered longest first ---------------------------------------------------
// plan = [forward query tiles | dQ query tiles | dK/dV key tiles], each list sorted by the number
// of 64-wide tiles its block walks, descending, ties by index: the GPU starts blocks in index order,
// so the longest start first and the short ones fill the tail.
__device__ __forceinline__ int forward_tile_work(const Documents& docs, int tile, int rows) {
  const int q0 = tile * rows, q_last = min(q0 + rows - 1, docs.T - 1);
  return q_last / kKeyTile - first_key(docs, q0) / kKeyTile + 1;
}
__device__ __forceinline__ int key_tile_work(const Documents& docs, int tile) {
  const int k_last = min(tile * kKeyTile + kKeyTile - 1, docs.T - 1);
  return last_query(docs, k_last) / kBackwardRows - tile + 1;
}

// Rank of item i: items with more work, or as much work and a smaller index, come first.
__device__ __forceinline__ void write_longest_first(int* order, const uint16_t* work, int count) {
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    int rank = 0;
    for (int j = 0; j < count; j++) rank += work[j] > work[i] || (work[j] == work[i] && j < i);
    order[rank] = i;
  }
}

// One block; dynamic shared memory: 2 * (forward_tiles + 2 * backward_tiles) bytes.
template <typename Unused = void>
__global__ void plan_kernel(int* plan, Documents docs) {
  LLMC_DYNAMIC_SHARED(uint16_t, work);
  const int forward_count = forward_tiles(docs.T), backward_count = backward_tiles(docs.T);
  uint16_t* forward_work = work;
  uint16_t* dq_work = work + forward_count;
  uint16_t* dkdv_work = dq_work + backward_count;
  for (int i = threadIdx.x; i < forward_count; i += blockDim.x)
    forward_work[i] = static_cast<uint16_t>(forward_tile_work(docs, i, kForwardRows));
  for (int i = threadIdx.x; i < backward_count; i += blockDim.x) {
    dq_work[i] = static_cast<uint16_t>(forward_tile_work(docs, i, kBackwardRows));
    dkdv_work[i] = static_cast<uint16_t>(key_tile_work(docs, i));
  }
  __syncthreads();
  write_longest_first(plan, forward_work, forward_count);
  write_longest_first(plan + forward_count, dq_work, backward_count);
  write_longest_first(plan + forward_count + backward_count, dkdv_work, backward_count);
}

}  // namespace window_attention
}  // namespace llmc

#endif  // !LLMC_FP32
