// The deterministic scatter-add by token that both embedding backwards use (GPT-2's wte, encoder.cuh; the
// speedrun model's four tables, embedding.cuh): table_grad[token] += the sum of dout over the positions of
// that token, without float atomics and without a serial per-token tail. The positions are sorted by token
// on the host, where the tokens are anyway (a stable counting sort, O(positions + V)), and the sorted list
// is cut into chunks of kTokenScatterChunk positions: a thread per (chunk, 16-byte column packet, table)
// sums its chunk's positions of each token in order and adds a token's total into its row when the
// token's run of positions lies inside the chunk; a run crossing chunk boundaries (a frequent token) leaves
// one fp32 partial per chunk instead, which a second kernel adds in chunk order. So no thread sums more
// than kTokenScatterChunk positions plus (count / kTokenScatterChunk + 2) partials, even for the most
// frequent token of real text; results are bitwise identical from run to run.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/packet_io.cuh"
#include "llmc/kernels/reduction.cuh"

namespace llmc {

constexpr int kTokenScatterChunk = 32;     // sorted positions per chunk: the longest serial sum of a thread
constexpr int kTokenScatterBlock = 128;    // threads (column packets) per block at most
constexpr int kTokenScatterMaxTables = 4;  // tables scattered with the same tokens in one launch

// ---- the host side: positions sorted by token -----------------------------------------------------------

struct TokenSortStats {
  int distinct = 0;       // distinct tokens (runs)
  int crossing_runs = 0;  // runs spanning more than one chunk
  int longest_run = 0;    // positions of the most frequent token
};

// Stable counting sort of tokens[0, positions) (each in [0, V), checked by the caller): sorted_positions and
// sorted_tokens get the positions and their tokens in (token, position) order, runs one (token, first,
// count) triple per run that crosses a chunk boundary (at most one per chunk). counts: scratch, resized to
// V + 1.
inline TokenSortStats sort_positions_by_token(const int* tokens, int positions, int V, int* sorted_positions,
                                              int* sorted_tokens, int* runs, std::vector<int>& counts) {
  counts.assign(static_cast<size_t>(V) + 1, 0);
  for (int i = 0; i < positions; i++) counts[static_cast<size_t>(tokens[i]) + 1]++;
  for (int v = 0; v < V; v++) counts[static_cast<size_t>(v) + 1] += counts[static_cast<size_t>(v)];
  for (int i = 0; i < positions; i++) {
    const int index = counts[static_cast<size_t>(tokens[i])]++;
    sorted_positions[index] = i;
    sorted_tokens[index] = tokens[i];
  }
  TokenSortStats stats;
  for (int first = 0; first < positions;) {
    int end = first + 1;
    while (end < positions && sorted_tokens[end] == sorted_tokens[first]) end++;
    stats.distinct++;
    if (end - first > stats.longest_run) stats.longest_run = end - first;
    if (first / kTokenScatterChunk != (end - 1) / kTokenScatterChunk) {
      int* run = runs + 3 * static_cast<size_t>(stats.crossing_runs++);
      run[0] = sorted_tokens[first];
      run[1] = first;
      run[2] = end - first;
    }
    first = end;
  }
  return stats;
}

// Floats of partials per table for up to `positions` positions: two per chunk (the run entering it, the run
// starting in it and leaving) and column.
inline size_t token_scatter_partial_floats(int positions, int C) {
  return 2 * static_cast<size_t>(ceil_div(positions, kTokenScatterChunk)) * C;
}

// ---- the device side ------------------------------------------------------------------------------------

// Up to four tables scattered with the same sorted positions, e.g. {embed, ve0, ve1, ve2}.
template <typename Tx>
struct TokenScatter {
  int count = 0;
  Tx* table_grads[kTokenScatterMaxTables] = {};  // [V, C], accumulated
  const Tx* douts[kTokenScatterMaxTables] = {};  // [positions, C]
};

// Thread = (chunk blockIdx.x, column packet, table blockIdx.z). Walks the chunk's sorted positions in order.
// partials: [table][2 * chunks][C].
template <typename Tx, bool kVector>
__global__ void token_scatter_chunks_kernel(TokenScatter<Tx> args, float* partials, const int* sorted_positions,
                                            const int* sorted_tokens, int positions, int C) {
  constexpr int P = packet_size<Tx>();
  const int c = (blockIdx.y * blockDim.x + threadIdx.x) * P;
  if (c >= C) return;
  const int chunk = blockIdx.x, table = blockIdx.z, num_chunks = gridDim.x;
  const int i0 = chunk * kTokenScatterChunk, i1 = i0 + kTokenScatterChunk < positions ? i0 + kTokenScatterChunk
                                                                                     : positions;
  float sum[P] = {};
  int run_start = i0;
  for (int i = i0; i < i1; i++) {
    const int token = sorted_tokens[i];
    float row[P];
    load_packet<Tx, kVector>(row, args.douts[table] + static_cast<size_t>(sorted_positions[i]) * C, c, C);
    for (int j = 0; j < P; j++) sum[j] += row[j];
    if (i + 1 < i1 && sorted_tokens[i + 1] == token) continue;
    const bool crosses_start = run_start == i0 && i0 > 0 && sorted_tokens[i0 - 1] == token;
    const bool crosses_end = LLMC_MUTANT("token_scatter.ignores_crossing_end",
                                         i + 1 == i1 && i1 < positions && sorted_tokens[i1] == token, false);
    if (!crosses_start && !crosses_end) {
      Tx* target = args.table_grads[table] + static_cast<size_t>(token) * C;
      float old[P];
      load_packet<Tx, kVector>(old, target, c, C);
      for (int j = 0; j < P; j++) old[j] += sum[j];
      store_packet<Tx, kVector>(target, c, C, old);
    } else {  // slot 2 chunk: the run entering the chunk; 2 chunk + 1: the run starting in it and leaving
      float* slot = partials + (static_cast<size_t>(table) * 2 * num_chunks + 2 * chunk + (crosses_start ? 0 : 1)) * C;
      for (int j = 0; j < P; j++)
        if (c + j < C) slot[c + j] = sum[j];
    }
    for (int j = 0; j < P; j++) sum[j] = 0.0f;
    run_start = i + 1;
  }
}

// Thread = (crossing run blockIdx.x, column packet, table blockIdx.z): the run's partials are slot 2 c0 + 1
// of its first chunk c0, then slot 2c of every later chunk up to its last, summed in chunk order. With
// run_count (device), blocks past the count of crossing runs return at once.
template <typename Tx, bool kVector>
__global__ void token_scatter_runs_kernel(TokenScatter<Tx> args, const float* partials, const int* runs,
                                          const int* run_count, int num_chunks, int C) {
  constexpr int P = packet_size<Tx>();
  const int c = (blockIdx.y * blockDim.x + threadIdx.x) * P;
  if (c >= C || (run_count != nullptr && static_cast<int>(blockIdx.x) >= *run_count)) return;
  const int table = blockIdx.z;
  const int* run = runs + 3 * static_cast<size_t>(blockIdx.x);
  const int token = run[0], c0 = run[1] / kTokenScatterChunk, c1 = (run[1] + run[2] - 1) / kTokenScatterChunk;
  const float* base = partials + static_cast<size_t>(table) * 2 * num_chunks * C;
  float sum[P] = {};
  for (int chunk = LLMC_MUTANT("token_scatter.drops_first_partial", c0, c0 + 1); chunk <= c1; chunk++) {
    const float* slot = base + static_cast<size_t>(chunk == c0 ? 2 * chunk + 1 : 2 * chunk) * C;
    for (int j = 0; j < P; j++) sum[j] += c + j < C ? slot[c + j] : 0.0f;
  }
  Tx* target = args.table_grads[table] + static_cast<size_t>(token) * C;
  float old[P];
  load_packet<Tx, kVector>(old, target, c, C);
  for (int j = 0; j < P; j++) old[j] += sum[j];
  store_packet<Tx, kVector>(target, c, C, old);
}

// Bytes and FLOPs of the two launches (llmc/base/launch_observer.h).
inline KernelCost token_scatter_chunks_cost(int tables, int positions, int distinct, int C) {
  const double x = sizeof(floatX), nc = static_cast<double>(positions) * C, chunks = ceil_div(positions, kTokenScatterChunk);
  return KernelCost{tables * (nc * x + 2.0 * distinct * C * x + 8.0 * chunks * C) + 8.0 * positions, tables * nc};
}
inline KernelCost token_scatter_runs_cost(int tables, int crossing_runs, int positions, int C) {
  const double x = sizeof(floatX), chunks = ceil_div(positions, kTokenScatterChunk);
  return KernelCost{tables * (crossing_runs * 2.0 * C * x + 8.0 * chunks * C) + 12.0 * crossing_runs,
                    tables * 2.0 * chunks * C};
}

// args.table_grads[k][token] += the sum of args.douts[k] over the positions of that token, for the positions
// sorted by sort_positions_by_token (device copies of its three arrays, stream-ordered before this call).
// partials: args.count * token_scatter_partial_floats(positions, C) floats of device scratch. Two launches
// (the second only when a run crosses a chunk boundary). With run_count (a device copy of stats.crossing_runs)
// the second always runs, over the most crossing runs `positions` can have, each block reading the count: launch
// shapes that depend on `positions` alone, which a CUDA graph captured for one batch keeps for the next; stats
// then only count the bytes.
inline void token_scatter_add(const TokenScatter<floatX>& args, const int* sorted_positions, const int* sorted_tokens,
                              const int* runs, const int* run_count, int positions, const TokenSortStats& stats, int C,
                              float* partials, cudaStream_t stream) {
  if (args.count < 1 || args.count > kTokenScatterMaxTables)
    throw std::invalid_argument("token_scatter_add: between 1 and 4 tables, got " + std::to_string(args.count));
  if (positions <= 0) return;
  const int packets = static_cast<int>(ceil_div(C, packet_size<floatX>()));
  const unsigned column_blocks = static_cast<unsigned>(ceil_div(packets, kTokenScatterBlock));
  const dim3 block(static_cast<unsigned>(packets < kTokenScatterBlock ? ceil_div(packets, kWarpSize) * kWarpSize
                                                                      : kTokenScatterBlock));
  bool vector = true;
  for (int k = 0; k < args.count; k++) vector = vector && rows_are_packets<floatX>(C, args.table_grads[k], args.douts[k]);
  const int chunks = static_cast<int>(ceil_div(positions, kTokenScatterChunk));
  const dim3 chunks_grid(static_cast<unsigned>(chunks), column_blocks, static_cast<unsigned>(args.count));
  const KernelCost chunks_cost = token_scatter_chunks_cost(args.count, positions, stats.distinct, C);
  if (vector)
    LLMC_LAUNCH_COSTED(chunks_cost, (token_scatter_chunks_kernel<floatX, true>), chunks_grid, block, 0, stream, args,
                       partials, sorted_positions, sorted_tokens, positions, C);
  else
    LLMC_LAUNCH_COSTED(chunks_cost, (token_scatter_chunks_kernel<floatX, false>), chunks_grid, block, 0, stream, args,
                       partials, sorted_positions, sorted_tokens, positions, C);
  if (run_count == nullptr && stats.crossing_runs == 0) return;
  const int run_blocks = run_count != nullptr ? chunks : stats.crossing_runs;  // at most one crossing run per chunk
  const dim3 runs_grid(static_cast<unsigned>(run_blocks), column_blocks, static_cast<unsigned>(args.count));
  const KernelCost runs_cost = token_scatter_runs_cost(args.count, stats.crossing_runs, positions, C);
  const float* const_partials = partials;
  if (vector)
    LLMC_LAUNCH_COSTED(runs_cost, (token_scatter_runs_kernel<floatX, true>), runs_grid, block, 0, stream, args,
                       const_partials, runs, run_count, chunks, C);
  else
    LLMC_LAUNCH_COSTED(runs_cost, (token_scatter_runs_kernel<floatX, false>), runs_grid, block, 0, stream, args,
                       const_partials, runs, run_count, chunks, C);
}

}  // namespace llmc
