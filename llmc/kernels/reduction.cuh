// Reduction building blocks shared by the kernels: warp and block sums/maxima that always add in the
// same order (bitwise reproducible results), launch-geometry helpers, and the deterministic
// "per-chunk column partial sums, then a fixed-order sum over chunks" scheme used for parameter
// gradients (bias, LayerNorm weight/bias) instead of float atomics.
// Convention for all llmc/kernels: kernels are templates on their element type (floatX in practice), so
// that a kernel defined in a header has vague linkage and including the header in several translation
// units is ODR-clean under both nvcc and g++; launchers are plain inline functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "llmc/cuda_common.h"
#include "llmc/precision.h"

namespace llmc {

constexpr int kWarpSize = 32;

__host__ __device__ constexpr long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

// Grid-stride loops: the grid is capped so that huge tensors do not launch millions of blocks.
inline unsigned elementwise_grid(size_t n, int block) {
  constexpr long long kMaxBlocks = 8192;
  long long blocks = ceil_div(static_cast<long long>(n), block);
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return blocks < 1 ? 1u : static_cast<unsigned>(blocks);
}

// 16-byte alignment, the precondition of the Packed128 loads and stores (llmc/cuda_common.h).
inline bool is_aligned16(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

// Launcher preconditions of the packet-only kernels: `count` (a row length or stride) is a positive whole
// number of 16-byte packets of Tx, and every non-null pointer is 16-byte aligned. Throw std::invalid_argument.
template <typename Tx>
void require_packets(const char* launcher, const char* what, long long count) {
  constexpr int kPacket = Packed128<Tx>::size;
  if (count <= 0 || count % kPacket != 0)
    throw std::invalid_argument(std::string(launcher) + ": " + what + " = " + std::to_string(count) +
                                " must be a positive multiple of " + std::to_string(kPacket) + " (16-byte packets)");
}
inline void require_aligned16(const char* launcher, std::initializer_list<const void*> pointers) {
  for (const void* pointer : pointers)
    if (pointer != nullptr && !is_aligned16(pointer))
      throw std::invalid_argument(std::string(launcher) + ": every pointer must be 16-byte aligned");
}

// Launch plan for an elementwise kernel pair over n elements of Tx: the packed kernel (one 16-byte packet
// per thread and grid-stride step, given the packet count) when n is a whole number of packets and every
// pointer is 16-byte aligned; otherwise the scalar kernel (given n).
struct ElementwiseLaunch {
  bool packed;   // launch the packed kernel
  size_t count;  // its length argument: packets if packed, else elements
  dim3 grid;
  dim3 block;
};

template <typename Tx, typename... Pointers>
ElementwiseLaunch plan_elementwise_launch(size_t n, const Pointers*... pointers) {
  constexpr int kBlock = 256;
  constexpr size_t kPacket = Packed128<Tx>::size;
  const bool packed = n % kPacket == 0 && (is_aligned16(pointers) && ...);
  const size_t count = packed ? n / kPacket : n;
  return ElementwiseLaunch{packed, count, dim3(elementwise_grid(count, kBlock)), dim3(kBlock)};
}

// Butterfly (xor) reduction: every lane adds the same pairs in the same order, so all 32 lanes end
// with the bitwise-identical total (fp addition is commutative).
__device__ __forceinline__ float warp_reduce_sum(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// Sum over aligned groups of `group` lanes (a power of two <= 32), e.g. the lanes that share one attention
// head; every lane of a group gets its group's total. All 32 lanes must call it.
__device__ __forceinline__ float group_reduce_sum(float value, int group) {
  for (int offset = group / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ __forceinline__ float warp_reduce_max(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// Sum over the whole block, returned to every thread. Every thread of the block must call it;
// blockDim.x must be a multiple of 32. `warp_totals` is a __shared__ array of at least 32 floats,
// free for reuse once the function returns to all threads.
__device__ __forceinline__ float block_reduce_sum(float value, float* warp_totals) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  value = warp_reduce_sum(value);
  __syncthreads();  // a previous call may still be reading warp_totals
  if (lane == 0) warp_totals[warp] = value;
  __syncthreads();
  float total = lane < num_warps ? warp_totals[lane] : 0.0f;
  return warp_reduce_sum(total);
}

// Sum of values[g * stride] over g < count, in an order fixed by `count` alone: lane l adds g = l, l+32, ...
// in increasing g, then the warp's butterfly combines the lanes. Every lane of the calling warp gets the
// same bits. For the last step of the fixed-order scalar reductions (per-block partials -> one value).
__device__ __forceinline__ float warp_ordered_sum(const float* values, int count, size_t stride) {
  const int lane = threadIdx.x % kWarpSize;
  float sum = 0.0f;
  for (int g = lane; g < count; g += kWarpSize) sum += values[static_cast<size_t>(g) * stride];
  return warp_reduce_sum(sum);
}

// ---- deterministic column sums: out[c] (+)= sum over rows of values(row, c) ----------------------
// Rows are split into `num_chunks` contiguous chunks (a fixed function of the row count only); a first
// kernel writes one fp32 partial per (chunk, column), a second sums the partials of each column in
// chunk order. The result is bitwise identical from run to run and independent of scheduling.
struct ColumnChunking {
  int num_chunks;
  int rows_per_chunk;
};

inline ColumnChunking column_chunking(int rows) {
  constexpr long long kMinRowsPerChunk = 32;  // enough work per thread to amortise the partial write
  constexpr long long kMaxChunks = 256;       // times (columns / 256) blocks: fills a large GPU
  long long chunks = ceil_div(rows, kMinRowsPerChunk);
  if (chunks > kMaxChunks) chunks = kMaxChunks;
  if (chunks < 1) chunks = 1;
  const long long rows_per_chunk = rows > 0 ? ceil_div(rows, chunks) : 1;
  // Recount with the rounded-up chunk size so that no chunk is empty.
  return ColumnChunking{static_cast<int>(ceil_div(rows, rows_per_chunk)), static_cast<int>(rows_per_chunk)};
}

// Throws when a caller-provided scratch buffer is smaller than a launcher needs.
inline void require_scratch(const char* launcher, size_t have_floats, size_t need_floats) {
  if (have_floats < need_floats)
    throw std::invalid_argument(std::string(launcher) + ": scratch buffer holds " + std::to_string(have_floats) +
                                " floats, needs " + std::to_string(need_floats));
}

// out[c] = (accumulate ? out[c] : 0) + sum_{g < num_chunks} partials[g * C + c], summed in g order
// in fp32 and rounded to floatX once.
template <typename Tx>
__global__ void sum_column_partials_kernel(Tx* out, const float* partials, int num_chunks, int C,
                                           bool accumulate) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sum = accumulate ? to_float(out[c]) : 0.0f;
  float chunk_total = 0.0f;
  for (int g = 0; g < num_chunks; g++) chunk_total += partials[static_cast<size_t>(g) * C + c];
  out[c] = from_float<Tx>(sum + chunk_total);
}

inline void sum_column_partials(floatX* out, const float* partials, int num_chunks, int C, bool accumulate,
                                cudaStream_t stream) {
  constexpr int kBlock = 256;
  const KernelCost cost{4.0 * num_chunks * C + (accumulate ? 2.0 : 1.0) * C * sizeof(floatX), 1.0 * num_chunks * C};
  LLMC_LAUNCH_COSTED(cost, sum_column_partials_kernel<floatX>, dim3(static_cast<unsigned>(ceil_div(C, kBlock))), dim3(kBlock), 0,
              stream, out, partials, num_chunks, C, accumulate);
}

}  // namespace llmc
