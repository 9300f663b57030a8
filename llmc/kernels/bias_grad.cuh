// Bias gradient of a linear layer: dbias[oc] (+)= sum over rows of dout[row, oc], in one launch. A block
// sums one slice of 32 packets of columns (16-byte loads) over one chunk of rows, its 8 warps taking every
// 8th row and their sums added in warp order; the blocks of a slice then fold their fp32 partials in chunk
// order inside the same launch (reduction.cuh). No float atomics: the result is bitwise repeatable.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/packet_io.cuh"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

constexpr int kColumnSumWarps = 8;
constexpr int kColumnSumTargetBlocks = 256;  // slices x chunks: enough blocks to fill a large GPU
constexpr int kColumnSumMinRows = 64;        // rows per chunk at least, to amortise the partial's write

template <typename Tx>
constexpr int column_sum_slice() {
  return kWarpSize * packet_size<Tx>();  // columns per block
}

// The launch geometry: a fixed function of (N, OC), so that every run adds in the same order.
struct ColumnSumPlan {
  int slices, chunks, rows_per_chunk;
};
inline ColumnSumPlan column_sum_plan(int N, int OC) {
  const int slices = static_cast<int>(ceil_div(OC, column_sum_slice<floatX>()));
  long long chunks = ceil_div(N, kColumnSumMinRows);
  const long long most = kColumnSumTargetBlocks / slices > 1 ? kColumnSumTargetBlocks / slices : 1;
  if (chunks > most) chunks = most;
  if (chunks < 1) chunks = 1;
  const long long rows_per_chunk = N > 0 ? ceil_div(N, chunks) : 1;
  return ColumnSumPlan{slices, static_cast<int>(ceil_div(N, rows_per_chunk)), static_cast<int>(rows_per_chunk)};
}

// Block (slice blockIdx.x, chunk blockIdx.y), kColumnSumWarps warps; lane l sums the packet of columns
// slice * 32P + l * P .. + P over the warp's rows of the chunk.
template <typename Tx, bool kVector>
__global__ void column_sums_kernel(Tx* out, const Tx* in, int N, int C, int rows_per_chunk, bool accumulate,
                                   BlockFold fold) {
  constexpr int P = packet_size<Tx>();
  constexpr int kSlice = column_sum_slice<Tx>();
  __shared__ float warp_sums[kColumnSumWarps][kSlice];
  __shared__ unsigned fold_flag;
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int slice = blockIdx.x, chunk = blockIdx.y, chunks = gridDim.y;
  const int c = slice * kSlice + lane * P;
  const int row_end = (chunk + 1) * rows_per_chunk < N ? (chunk + 1) * rows_per_chunk : N;
  float sum[P] = {};
  if (c < C) {
    for (int row = chunk * rows_per_chunk + warp; row < row_end; row += kColumnSumWarps) {
      float values[P];
      load_packet_streaming<Tx, kVector>(values, in + static_cast<size_t>(row) * C, c, C);
      for (int j = 0; j < P; j++) sum[j] += values[j];
    }
  }
  for (int j = 0; j < P; j++) warp_sums[warp][lane * P + j] = sum[j];
  if (LLMC_MUTANT("column_sums.no_barrier", true, false)) __syncthreads();
  // This slice's fold: its partials, group totals and counters follow the previous slices'.
  BlockFold slice_fold = fold;
  slice_fold.partials += static_cast<size_t>(slice) * chunks * kSlice;
  slice_fold.group_totals += static_cast<size_t>(slice) * fold.groups() * kSlice;
  slice_fold.counters += static_cast<size_t>(slice) * (fold.groups() + 1);
  float* partial = slice_fold.partials + static_cast<size_t>(chunk) * kSlice;
  for (int i = threadIdx.x; i < kSlice; i += blockDim.x) {
    float block_sum = 0.0f;
    for (int w = 0; w < kColumnSumWarps; w++) block_sum += warp_sums[w][i];
    partial[i] = block_sum;
  }
  fold_block_partials(slice_fold, chunk, &fold_flag, [&](int i, float total) {
    const int column = slice * kSlice + i;
    if (column < C) out[column] = from_float<Tx>(accumulate ? to_float(out[column]) + total : total);
  });
}

// Floats of scratch that bias_grad needs for N rows of OC columns (zero before its first use).
inline size_t bias_grad_scratch_floats(int N, int OC) {
  const ColumnSumPlan plan = column_sum_plan(N, OC);
  return fold_scratch(plan.slices, plan.chunks, column_sum_slice<floatX>()).floats();
}

// Bytes and FLOPs of one bias_grad call (llmc/base/launch_observer.h).
inline KernelCost bias_grad_cost(int N, int OC, bool accumulate) {
  const ColumnSumPlan plan = column_sum_plan(N, OC);
  const double nc = static_cast<double>(N) * OC,
               partials = 4.0 * plan.chunks * plan.slices * column_sum_slice<floatX>();
  return KernelCost{nc * sizeof(floatX) + 2 * partials + (accumulate ? 2.0 : 1.0) * OC * sizeof(floatX), nc};
}

// dbias (OC) = (accumulate ? dbias : 0) + column sums of dout (N,OC). scratch: bias_grad_scratch_floats(N, OC)
// floats, zero before the first call (every call leaves its counters zero again).
inline void bias_grad(floatX* dbias, const floatX* dout, int N, int OC, bool accumulate, float* scratch,
                      size_t scratch_floats, cudaStream_t stream) {
  require_scratch("bias_grad", scratch_floats, bias_grad_scratch_floats(N, OC));
  const ColumnSumPlan plan = column_sum_plan(N, OC);
  const FoldScratch layout = fold_scratch(plan.slices, plan.chunks, column_sum_slice<floatX>());
  const BlockFold fold = fold_in_scratch(scratch, layout, 0, plan.chunks, column_sum_slice<floatX>());
  const dim3 grid(static_cast<unsigned>(plan.slices), static_cast<unsigned>(plan.chunks));
  const dim3 block(kColumnSumWarps * kWarpSize);
  const KernelCost cost = bias_grad_cost(N, OC, accumulate);
  if (rows_are_packets<floatX>(OC, dout))
    LLMC_LAUNCH_COSTED(cost, (column_sums_kernel<floatX, true>), grid, block, 0, stream, dbias, dout, N, OC,
                       plan.rows_per_chunk, accumulate, fold);
  else
    LLMC_LAUNCH_COSTED(cost, (column_sums_kernel<floatX, false>), grid, block, 0, stream, dbias, dout, N, OC,
                       plan.rows_per_chunk, accumulate, fold);
}

}  // namespace llmc
