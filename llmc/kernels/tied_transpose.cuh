// The tied embed/head pair of the 2026-07-17 record (SPEEDRUN89.md section 5): until the untie the head
// [C, V] absorbs the embedding's gradient transposed (transpose_add), the embedding becomes the updated head
// transposed (transpose_copy), and at the untie the head's Adam moments move to the embedding transposed.
// One kernel for all three: a 32 x 32 tile read row-wise, staged in shared memory, written row-wise.
#pragma once

#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"

namespace llmc {

inline constexpr int kTransposeTile = 32;
inline constexpr int kTransposeRowsPerPass = 8;  // block (32, 8): each thread moves 4 elements

// dst (cols x rows, leading dimension ld_dst) = src^T (src: rows x cols, leading dimension ld_src), or
// dst + src^T with `add` (summed in fp32, rounded once to T). Grid (ceil(cols / 32), ceil(rows / 32)).
template <typename T>
__global__ void transpose_kernel(T* dst, int ld_dst, const T* src, int ld_src, int rows, int cols, bool add) {
  __shared__ float tile[kTransposeTile][kTransposeTile + 1];  // +1: a column read hits 32 different banks
  const int row0 = blockIdx.y * kTransposeTile, col0 = blockIdx.x * kTransposeTile;
  for (int i = threadIdx.y; i < kTransposeTile; i += kTransposeRowsPerPass) {
    const int row = row0 + i, col = col0 + threadIdx.x;
    if (row < rows && col < cols) tile[i][threadIdx.x] = to_float(src[static_cast<size_t>(row) * ld_src + col]);
  }
  LLMC_MUTANT("tied_transpose.no_barrier", __syncthreads(), (void)0);  // a tile column spans 32 threads' loads
  for (int i = threadIdx.y; i < kTransposeTile; i += kTransposeRowsPerPass) {
    const int dst_row = col0 + i, dst_col = row0 + threadIdx.x;  // dst[dst_row][dst_col] = src[dst_col][dst_row]
    if (dst_row < cols && dst_col < rows) {
      T& out = dst[static_cast<size_t>(dst_row) * ld_dst + dst_col];
      const float value = tile[threadIdx.x][i];
      out = from_float<T>(add ? to_float(out) + value : value);
    }
  }
}

template <typename T>
void transpose_into(T* dst, int ld_dst, const T* src, int ld_src, int rows, int cols, bool add, cudaStream_t stream) {
  if (rows < 0 || cols < 0 || ld_src < cols || ld_dst < rows)
    throw std::invalid_argument("transpose: bad shape " + std::to_string(rows) + " x " + std::to_string(cols) +
                                " (leading dimensions " + std::to_string(ld_src) + ", " + std::to_string(ld_dst) +
                                ")");
  if (rows == 0 || cols == 0) return;
  if (ceil_div(rows, kTransposeTile) > 65535) throw std::invalid_argument("transpose: too many rows for the grid");
  const double elements = static_cast<double>(rows) * cols;
  const KernelCost cost{elements * sizeof(T) * (add ? 3.0 : 2.0), add ? elements : 0.0};
  LLMC_LAUNCH_COSTED(cost, transpose_kernel<T>,
                     dim3(static_cast<unsigned>(ceil_div(cols, kTransposeTile)),
                          static_cast<unsigned>(ceil_div(rows, kTransposeTile))),
                     dim3(kTransposeTile, kTransposeRowsPerPass), 0, stream, dst, ld_dst, src, ld_src, rows, cols,
                     add);
}

// dst = src^T: src rows x cols (leading dimension ld_src), dst cols x rows (ld_dst). Exact.
template <typename T>
void transpose_copy(T* dst, int ld_dst, const T* src, int ld_src, int rows, int cols, cudaStream_t stream) {
  transpose_into(dst, ld_dst, src, ld_src, rows, cols, /*add=*/false, stream);
}

// dst += src^T, each sum in fp32 rounded once to T (the tied head's gradient: head_grad += embed_grad^T).
template <typename T>
void transpose_add(T* dst, int ld_dst, const T* src, int ld_src, int rows, int cols, cudaStream_t stream) {
  transpose_into(dst, ld_dst, src, ld_src, rows, cols, /*add=*/true, stream);
}

}  // namespace llmc
