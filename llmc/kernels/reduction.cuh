// Reduction building blocks shared by the kernels: warp and block sums/maxima that always add in the
// same order (bitwise reproducible results), launch-geometry helpers, row chunking, and the fold that
// finishes a sum over a launch's blocks inside that launch in a fixed order (parameter gradients:
// bias, LayerNorm weight/bias; the gradient norm) instead of float atomics.
// Convention for all llmc/kernels: kernels are templates on their element type (floatX in practice), so
// that a kernel defined in a header has vague linkage and including the header in several translation
// units is ODR-clean under both nvcc and g++; launchers are plain inline functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#if !defined(LLMC_EMULATION)
#include <cuda/atomic>
#endif

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/mutant.h"
#include "llmc/cuda/precision.h"

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

// Grid-stride loops whose blocks end in a block reduction and an atomic: each thread takes at least
// kReducingItemsPerThread items before the launch takes another block, so a small tensor's blocks do not each pay
// the reduction for a few items (on a GPU a little; in the emulation, where every shuffle and barrier switches
// through the block's threads, most of a tiny model's cost). A large tensor gets elementwise_grid's cap.
constexpr int kReducingItemsPerThread = 16;
inline unsigned reducing_grid(size_t n, int block) {
  return elementwise_grid(static_cast<size_t>(ceil_div(static_cast<long long>(n), kReducingItemsPerThread)), block);
}

// Threads for a block that walks one row of `items` (elements or packets), thread i taking items i, i + block,
// ...: the fewest whole warps that give each thread at most one item, at most `max_block`. The threads left out
// would only add zeros to the block's sums (block_reduce_sum), so a short row sums the same values in the same
// order as in a block of max_block, bit for bit, without the idle warps (each one a cost at every barrier, on a
// GPU and far more in the emulation, where the tiny test shapes run).
inline unsigned row_block(long long items, int max_block) {
  const long long warps = ceil_div(items < 1 ? 1 : items, kWarpSize);
  const long long block = warps * kWarpSize;
  return static_cast<unsigned>(block < max_block ? block : max_block);
}

// 16-byte alignment, the precondition of the Packed128 loads and stores (llmc/cuda/cuda_common.h).
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

// Lanes per head for the kernels that give each (row, head) a group of lanes over its D elements in 16-byte
// packets: the head's packets, capped at a warp. D must be whole packets and give a power-of-two group.
template <typename Tx>
int head_lane_group(const char* launcher, int D) {
  require_packets<Tx>(launcher, "head_dim", D);
  const int packets = D / Packed128<Tx>::size;
  const int group = packets < kWarpSize ? packets : kWarpSize;
  if ((group & (group - 1)) != 0 || packets % group != 0)
    throw std::invalid_argument(std::string(launcher) + ": head_dim " + std::to_string(D) +
                                " gives a lane group that is not a power of two");
  return group;
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

// The xor butterfly over aligned groups of `group` lanes (1, 2, 4, .., 32): in each round, offset = group / 2 down
// to 1, every lane adds (kSum) or takes the maximum of its value and lane ^ offset's. All 32 lanes must call it.
// The emulation runs the same rounds as one warp operation (llmc/emu/device_builtins.h), bit for bit.
#if defined(LLMC_EMULATION)
template <bool kSum>
__device__ __forceinline__ float warp_butterfly(float value, int group, const char* file = __builtin_FILE(),
                                                int line = __builtin_LINE()) {
  return ::llmc::emu::xor_butterfly<kSum>(value, group, file, line);
}
#else
template <bool kSum>
__device__ __forceinline__ float warp_butterfly(float value, int group) {
  for (int offset = group / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, value, offset);
    value = kSum ? value + other : fmaxf(value, other);
  }
  return value;
}
#endif

// Butterfly (xor) reduction: every lane adds the same pairs in the same order, so all 32 lanes end
// with the bitwise-identical total (fp addition is commutative).
__device__ __forceinline__ float warp_reduce_sum(float value) { return warp_butterfly<true>(value, kWarpSize); }

// The calling lane's place in a launch that gives each (row, head) of T rows of H heads a group of `group` lanes
// (head_lane_group), groups in row-major order: row t, head h, head_row = t H + h (the head's place in a
// per-head array such as a gate's or rstd's), its lane in the group, and whether the group is one of the T H (the
// launch's last lanes may fall past them; t, h and head_row are 0 there, and such lanes still reach the group sums).
struct HeadLane {
  int t, h;
  size_t head_row;
  int lane;
  bool valid;
};
__device__ __forceinline__ HeadLane head_lane(int T, int H, int group) {
  const long long thread = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long item = thread / group;
  const bool valid = item < static_cast<long long>(T) * H;
  return HeadLane{valid ? static_cast<int>(item / H) : 0, valid ? static_cast<int>(item % H) : 0,
                  valid ? static_cast<size_t>(item) : 0, static_cast<int>(thread % group), valid};
}

// Sum over aligned groups of `group` lanes (a power of two <= 32), e.g. the lanes that share one attention
// head; every lane of a group gets its group's total. All 32 lanes must call it.
__device__ __forceinline__ float group_reduce_sum(float value, int group) { return warp_butterfly<true>(value, group); }

// Softmax exponentials: exp(x - max) as exp2(x * log2(e) - max * log2(e)), with max_log2 = max * log2(e)
// computed once per row: one multiply-add and the hardware's exp2 per element.
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float exp_shifted(float x, float max_log2) {
  return exp2f(fmaf(x, LLMC_MUTANT("softmax.exp2_without_log2e", kLog2e, 1.0f), -max_log2));
}

__device__ __forceinline__ float warp_reduce_max(float value) { return warp_butterfly<false>(value, kWarpSize); }

// *target = max(*target, value) for non-negative floats (maxima of |x|): their bits compare as the floats, so
// atomicMax on them is exact and the same whatever the order.
__device__ __forceinline__ void atomic_max_nonnegative(float* target, float value) {
  atomicMax(reinterpret_cast<unsigned*>(target), __float_as_uint(value));
}

// Sum over the whole block, returned to every thread. Every thread of the block must call it;
// blockDim.x must be a multiple of 32. `warp_totals` is a __shared__ array of at least 32 floats,
// free for reuse once the function returns to all threads. Like a block barrier, it orders every thread's
// memory accesses before the call before every thread's accesses after it (callers rely on that). A one-warp
// block (row_block's short rows) needs neither warp_totals nor the barriers: its warp's sum and a __syncwarp
// give the same total (but for a zero's sign) with 6 synchronisations per thread instead of 13, which the
// emulation pays for in fiber switches.
__device__ __forceinline__ float block_reduce_sum(float value, float* warp_totals) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  value = warp_reduce_sum(value);
  if (num_warps == 1) {
    __syncwarp();
    return value;
  }
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

// ---- row chunks for deterministic column sums -------------------------------------------------------
// Rows split into `num_chunks` contiguous chunks, a fixed function of the row count only, so that
// per-chunk partial sums added in chunk order give the same bits on every run and every GPU.
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

// ---- deterministic sums across the blocks of one launch ---------------------------------------
// A kernel whose blocks each produce a vector of `length` fp32 partial sums finishes the sum over its
// blocks in the same launch: every block writes its vector to partials[block], then all its threads
// call fold_block_partials(). The last block of each group of kFoldGroup consecutive blocks to finish
// (an atomic ticket tells it) sums its group's vectors in block order into group_totals[group]; the last
// group to finish sums the group totals in group order and hands every element's total to `finish`.
// Which block finishes last never changes an addition's order, so the result is bitwise repeatable
// without float atomics, and no block sums more than kFoldGroup + groups vectors.
constexpr int kFoldGroup = 16;

struct BlockFold {
  float* partials;      // [blocks][length]
  float* group_totals;  // [groups][length]
  unsigned* counters;   // [groups + 1]: zero before the launch; the launch leaves them zero again
  int blocks;
  int length;
  __host__ __device__ int groups() const { return static_cast<int>(ceil_div(blocks, kFoldGroup)); }
};

// Floats of scratch for `folds` independent folds of `blocks` x `length` in one launch: the counters
// first (each fold's groups + 1, the region rounded up to 64 floats), then the partials, then the group
// totals. The buffer must be zero before its first use (cudaMemset once after allocating it).
struct FoldScratch {
  size_t counter_floats, partial_floats, total_floats;
  size_t floats() const { return counter_floats + partial_floats + total_floats; }
};
inline FoldScratch fold_scratch(int folds, int blocks, int length) {
  const long long groups = ceil_div(blocks, kFoldGroup);
  const size_t counters = static_cast<size_t>(folds) * static_cast<size_t>(groups + 1);
  return FoldScratch{static_cast<size_t>(ceil_div(static_cast<long long>(counters), 64)) * 64,
                     static_cast<size_t>(folds) * blocks * length, static_cast<size_t>(folds) * groups * length};
}
// Fold `index` of the scratch laid out by fold_scratch(folds, blocks, length).
inline BlockFold fold_in_scratch(float* scratch, const FoldScratch& layout, int index, int blocks, int length) {
  const int groups = static_cast<int>(ceil_div(blocks, kFoldGroup));
  return BlockFold{
      scratch + layout.counter_floats + static_cast<size_t>(index) * blocks * length,
      scratch + layout.counter_floats + layout.partial_floats + static_cast<size_t>(index) * groups * length,
      reinterpret_cast<unsigned*>(scratch) + static_cast<size_t>(index) * (groups + 1), blocks, length};
}

// The fold's ticket: counter += 1 with acquire-release order at device scope, returning the old value. The
// release publishes what the calling block wrote before it (its threads' writes are ordered before the
// ticket by a __syncthreads, and a release is cumulative), the acquire lets the block that draws the last
// ticket see every earlier block's writes (its other threads after the next __syncthreads). This is the
// pattern of a relaxed atomicAdd between two __threadfence() calls in one thread, with the order stated on
// the atomic itself: the form ThreadSanitizer follows in the emulation (it ignores fences).
__device__ __forceinline__ unsigned fold_ticket(unsigned* counter) {
#if defined(LLMC_EMULATION)
  return __atomic_fetch_add(counter, 1u, __ATOMIC_ACQ_REL);
#else
  return cuda::atomic_ref<unsigned, cuda::thread_scope_device>(*counter).fetch_add(1u, cuda::memory_order_acq_rel);
#endif
}

// Called by every thread of block `block` once the block's partials are written. `flag` is a __shared__
// word of the calling kernel. finish(i, total) runs in the one block that completes the fold. The block
// that completes a group or the fold resets its counter (atomically: other blocks' tickets touched it),
// so that the counters are zero again when the launch ends.
template <class Finish>
__device__ void fold_block_partials(const BlockFold& fold, int block, unsigned* flag, Finish&& finish) {
  const int groups = fold.groups(), group = block / kFoldGroup, first = group * kFoldGroup;
  const int members = fold.blocks - first < kFoldGroup ? fold.blocks - first : kFoldGroup;
  __syncthreads();  // every thread's partials are written before thread 0 takes the ticket
  if (threadIdx.x == 0) *flag = fold_ticket(&fold.counters[group]) == static_cast<unsigned>(members - 1);
  __syncthreads();
  if (*flag == 0) return;  // the whole block leaves: not the last of its group
  float* total = fold.group_totals + static_cast<size_t>(group) * fold.length;
  for (int i = threadIdx.x; i < fold.length; i += blockDim.x) {
    float sum = 0.0f;
    for (int b = 0; b < members; b++) sum += __ldcg(fold.partials + static_cast<size_t>(first + b) * fold.length + i);
    total[i] = sum;
  }
  if (threadIdx.x == 0 && LLMC_MUTANT("fold.keeps_group_counter", true, false)) atomicExch(&fold.counters[group], 0u);
  __syncthreads();  // the group total is written before thread 0 takes the groups' ticket
  if (threadIdx.x == 0) *flag = fold_ticket(&fold.counters[groups]) == static_cast<unsigned>(groups - 1);
  __syncthreads();
  if (*flag == 0) return;
  for (int i = threadIdx.x; i < fold.length; i += blockDim.x) {
    float sum = 0.0f;
    for (int g = 0; g < groups; g++) sum += __ldcg(fold.group_totals + static_cast<size_t>(g) * fold.length + i);
    finish(i, sum);
  }
  if (threadIdx.x == 0) atomicExch(&fold.counters[groups], 0u);
}

}  // namespace llmc
