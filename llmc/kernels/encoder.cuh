// Token + position embedding: forward out[b,t,:] = wte[token[b,t],:] + wpe[t,:] in 16-byte packets, and a
// DETERMINISTIC backward without a serial per-token tail. The backward's plan groups the positions by
// token on the host, where the tokens are anyway (a stable counting sort, O(B*T + V), built when the batch
// is staged for upload: build_encoder_backward_plan). Its sorted list is cut into chunks of
// kEncoderChunk positions; a thread per (chunk, 16-byte column packet) sums its chunk's positions of each
// token in order and adds a token's total into dwte when the token's run of positions lies inside the
// chunk. A run crossing chunk boundaries (a frequent token) leaves one fp32 partial per chunk instead,
// which a second kernel adds in chunk order. So no thread sums more than kEncoderChunk positions plus
// (count / kEncoderChunk + 2) partials, even for the most frequent token of real text (thousands of
// positions per batch); no float atomics, bitwise-identical results from run to run. (The speedrun's
// embedding kernels use the same scheme.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/packet_io.cuh"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

constexpr int kEncoderChunk = 32;   // sorted positions per chunk: the longest serial sum of a thread
constexpr int kEncoderBlock = 128;  // threads (column packets) per block at most
constexpr int kEncoderWpeRows = 8;  // positions t per block of the wpe gradient

template <typename Tx, bool kVector>
__global__ void encoder_forward_kernel(Tx* out, const int* tokens, const Tx* wte, const Tx* wpe, int B, int T, int C) {
  constexpr int P = packet_size<Tx>();
  const int packets = static_cast<int>(ceil_div(C, P));
  const size_t total = static_cast<size_t>(B) * T * packets;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const size_t position = i / packets;  // b * T + t
    const int c = static_cast<int>(i % packets) * P;
    const int t = static_cast<int>(position % T);
    float token_row[P], position_row[P];
    load_packet<Tx, kVector>(token_row, wte + static_cast<size_t>(tokens[position]) * C, c, C);
    load_packet<Tx, kVector>(position_row, wpe + static_cast<size_t>(t) * C, c, C);
    for (int j = 0; j < P; j++) token_row[j] += position_row[j];
    store_packet<Tx, kVector>(out + position * C, c, C, token_row);
  }
}

inline KernelCost encoder_forward_cost(int B, int T, int C) {
  const double btc = static_cast<double>(B) * T * C;
  return KernelCost{3 * btc * sizeof(floatX) + 4.0 * B * T, btc};
}

// out (B,T,C) from tokens (B,T) on the device, wte (V,C), wpe (maxT,C). Token ids must be in [0, V).
inline void encoder_forward(floatX* out, const int* tokens, const floatX* wte, const floatX* wpe, int B, int T, int C,
                            cudaStream_t stream) {
  constexpr int kBlock = 256;
  const size_t packets = static_cast<size_t>(B) * T * ceil_div(C, packet_size<floatX>());
  const dim3 grid(elementwise_grid(packets, kBlock));
  if (rows_are_packets<floatX>(C, out, wte, wpe))
    LLMC_LAUNCH_COSTED(encoder_forward_cost(B, T, C), (encoder_forward_kernel<floatX, true>), grid, dim3(kBlock), 0,
                       stream, out, tokens, wte, wpe, B, T, C);
  else
    LLMC_LAUNCH_COSTED(encoder_forward_cost(B, T, C), (encoder_forward_kernel<floatX, false>), grid, dim3(kBlock), 0,
                       stream, out, tokens, wte, wpe, B, T, C);
}

// ---- backward -----------------------------------------------------------------------------------------

// The host side of a batch's backward plan. Its table (ints, uploaded with the batch's tokens) holds the
// positions sorted by (token, position), the token of each sorted entry, then one (token, first, count)
// triple per run of a token that crosses a chunk boundary.
struct EncoderBackwardPlan {
  int positions = 0;      // B*T
  int distinct = 0;       // distinct tokens (runs)
  int crossing_runs = 0;  // runs spanning more than one chunk
  int longest_run = 0;    // positions of the most frequent token
  int chunks() const { return static_cast<int>(ceil_div(positions, kEncoderChunk)); }
};

// Ints of the table for up to max_positions tokens (a run crosses a boundary only where one ends: at most
// one crossing run per chunk).
inline size_t encoder_backward_table_ints(int max_positions) {
  return 2 * static_cast<size_t>(max_positions) + 3 * static_cast<size_t>(ceil_div(max_positions, kEncoderChunk));
}
// Floats of device scratch for the crossing runs' partials: two per chunk (the run entering it, the run
// starting in it and leaving) and column.
inline size_t encoder_backward_partial_floats(int max_positions, int C) {
  return 2 * static_cast<size_t>(ceil_div(max_positions, kEncoderChunk)) * C;
}

// Builds the plan of tokens[0, positions) into table (encoder_backward_table_ints(positions) ints, laid out
// for that size). counts: scratch of at least V + 1 ints. Throws std::invalid_argument for a token outside
// [0, V). Stable counting sort: positions of one token stay in increasing order.
inline EncoderBackwardPlan build_encoder_backward_plan(const int* tokens, int positions, int V, int* table,
                                                       std::vector<int>& counts) {
  counts.assign(static_cast<size_t>(V) + 1, 0);
  for (int i = 0; i < positions; i++) {
    if (tokens[i] < 0 || tokens[i] >= V)
      throw std::invalid_argument("encoder backward: token id " + std::to_string(tokens[i]) + " at position " +
                                  std::to_string(i) + " outside [0, " + std::to_string(V) + ")");
    counts[static_cast<size_t>(tokens[i]) + 1]++;
  }
  for (int v = 0; v < V; v++) counts[static_cast<size_t>(v) + 1] += counts[static_cast<size_t>(v)];
  int* sorted_positions = table;
  int* sorted_tokens = table + positions;
  for (int i = 0; i < positions; i++) {
    const int index = counts[static_cast<size_t>(tokens[i])]++;
    sorted_positions[index] = i;
    sorted_tokens[index] = tokens[i];
  }
  EncoderBackwardPlan plan;
  plan.positions = positions;
  int* runs = table + 2 * static_cast<size_t>(positions);
  for (int first = 0; first < positions;) {
    int end = first + 1;
    while (end < positions && sorted_tokens[end] == sorted_tokens[first]) end++;
    plan.distinct++;
    if (end - first > plan.longest_run) plan.longest_run = end - first;
    if (first / kEncoderChunk != (end - 1) / kEncoderChunk) {
      int* run = runs + 3 * static_cast<size_t>(plan.crossing_runs++);
      run[0] = sorted_tokens[first];
      run[1] = first;
      run[2] = end - first;
    }
    first = end;
  }
  return plan;
}

// The longest chain of dependent additions of one thread (positions, then partials): what bounds the
// backward's time when one token is frequent. The per-token scheme this replaced summed longest_run.
inline int encoder_backward_serial_adds(const EncoderBackwardPlan& plan) {
  const int spanned =
      plan.longest_run > kEncoderChunk ? static_cast<int>(ceil_div(plan.longest_run, kEncoderChunk)) + 1 : 0;
  return (plan.positions < kEncoderChunk ? plan.positions : kEncoderChunk) + spanned;
}

// Ints of the table that plan uses (what to upload).
inline size_t encoder_backward_table_used(const EncoderBackwardPlan& plan) {
  return 2 * static_cast<size_t>(plan.positions) + 3 * static_cast<size_t>(plan.crossing_runs);
}

// Thread = (chunk blockIdx.x, column packet). Walks the chunk's sorted positions in order.
template <typename Tx, bool kVector>
__global__ void encoder_backward_chunks_kernel(Tx* dwte, float* partials, const Tx* dout, const int* table,
                                               int positions, int C) {
  constexpr int P = packet_size<Tx>();
  const int c = (blockIdx.y * blockDim.x + threadIdx.x) * P;
  if (c >= C) return;
  const int* sorted_positions = table;
  const int* sorted_tokens = table + positions;
  const int chunk = blockIdx.x;
  const int i0 = chunk * kEncoderChunk, i1 = i0 + kEncoderChunk < positions ? i0 + kEncoderChunk : positions;
  float sum[P] = {};
  int run_start = i0;
  for (int i = i0; i < i1; i++) {
    const int token = sorted_tokens[i];
    float row[P];
    load_packet<Tx, kVector>(row, dout + static_cast<size_t>(sorted_positions[i]) * C, c, C);
    for (int j = 0; j < P; j++) sum[j] += row[j];
    if (i + 1 < i1 && sorted_tokens[i + 1] == token) continue;
    const bool crosses_start = run_start == i0 && i0 > 0 && sorted_tokens[i0 - 1] == token;
    const bool crosses_end = LLMC_MUTANT("encoder_backward.ignores_crossing_end",
                                         i + 1 == i1 && i1 < positions && sorted_tokens[i1] == token, false);
    if (!crosses_start && !crosses_end) {
      Tx* target = dwte + static_cast<size_t>(token) * C;
      float old[P];
      load_packet<Tx, kVector>(old, target, c, C);
      for (int j = 0; j < P; j++) old[j] += sum[j];
      store_packet<Tx, kVector>(target, c, C, old);
    } else {  // slot 2 chunk: the run entering the chunk; 2 chunk + 1: the run starting in it and leaving
      float* slot = partials + static_cast<size_t>(2 * chunk + (crosses_start ? 0 : 1)) * C;
      for (int j = 0; j < P; j++)
        if (c + j < C) slot[c + j] = sum[j];
    }
    for (int j = 0; j < P; j++) sum[j] = 0.0f;
    run_start = i + 1;
  }
}

// Blocks [0, crossing_runs): one crossing run each (its partials: slot 2 c0 + 1 of its first chunk c0, then
// slot 2c of every later chunk up to its last, in chunk order). Blocks from crossing_runs on: kEncoderWpeRows
// rows t of dwpe each, t < wpe_rows: dwpe[t] (+)= sum over b of dout[b, t] in b order for t < T, and 0 for
// t >= T (wpe_rows > T only when overwriting). Thread = column packet.
template <typename Tx, bool kVector>
__global__ void encoder_backward_runs_wpe_kernel(Tx* dwte, Tx* dwpe, const float* partials, const Tx* dout,
                                                 const int* runs, int crossing_runs, int B, int T, int wpe_rows, int C,
                                                 bool accumulate_wpe) {
  constexpr int P = packet_size<Tx>();
  const int c = (blockIdx.y * blockDim.x + threadIdx.x) * P;
  if (c >= C) return;
  float sum[P] = {};
  if (static_cast<int>(blockIdx.x) < crossing_runs) {
    const int* run = runs + 3 * static_cast<size_t>(blockIdx.x);
    const int token = run[0], c0 = run[1] / kEncoderChunk, c1 = (run[1] + run[2] - 1) / kEncoderChunk;
    for (int chunk = c0; chunk <= c1; chunk++) {
      const float* slot = partials + static_cast<size_t>(chunk == c0 ? 2 * chunk + 1 : 2 * chunk) * C;
      for (int j = 0; j < P; j++) sum[j] += c + j < C ? slot[c + j] : 0.0f;
    }
    Tx* target = dwte + static_cast<size_t>(token) * C;
    float old[P];
    load_packet<Tx, kVector>(old, target, c, C);
    for (int j = 0; j < P; j++) old[j] += sum[j];
    store_packet<Tx, kVector>(target, c, C, old);
    return;
  }
  const int t0 = (static_cast<int>(blockIdx.x) - crossing_runs) * kEncoderWpeRows;
  for (int t = t0; t < t0 + kEncoderWpeRows && t < wpe_rows; t++) {
    for (int j = 0; j < P; j++) sum[j] = 0.0f;
    for (int b = 0; b < B && t < T; b++) {
      float row[P];
      load_packet<Tx, kVector>(row, dout + (static_cast<size_t>(b) * T + t) * C, c, C);
      for (int j = 0; j < P; j++) sum[j] += row[j];
    }
    Tx* target = dwpe + static_cast<size_t>(t) * C;
    if (accumulate_wpe) {
      float old[P];
      load_packet<Tx, kVector>(old, target, c, C);
      for (int j = 0; j < P; j++) sum[j] += old[j];
    }
    store_packet<Tx, kVector>(target, c, C, sum);
  }
}

// Bytes and FLOPs of the two launches (llmc/base/launch_observer.h).
inline KernelCost encoder_backward_chunks_cost(const EncoderBackwardPlan& plan, int C) {
  const double x = sizeof(floatX), nc = static_cast<double>(plan.positions) * C;
  return KernelCost{nc * x + 2.0 * plan.distinct * C * x + 8.0 * plan.positions + 8.0 * plan.chunks() * C, nc};
}
inline KernelCost encoder_backward_runs_wpe_cost(const EncoderBackwardPlan& plan, int B, int T, int wpe_rows, int C,
                                                 bool accumulate_wpe) {
  const double x = sizeof(floatX), tc = static_cast<double>(T) * C;
  const double written = static_cast<double>(wpe_rows) * C * x;
  return KernelCost{static_cast<double>(B) * tc * x + written + (accumulate_wpe ? tc * x : 0.0) +
                        plan.crossing_runs * (2.0 * C * x + 12.0) + 8.0 * plan.chunks() * C,
                    static_cast<double>(B) * tc + 2.0 * plan.chunks() * C};
}

// dwte (V,C) += and dwpe (maxT,C) (+)= from dout (B,T,C), for the batch whose plan is `plan`, its table
// uploaded to device_table (stream-ordered before this call). dwpe accumulates when accumulate_wpe; otherwise
// all its maxT rows are overwritten (rows t >= T with 0). dwte always accumulates (the tied LM head writes it
// first). partials: encoder_backward_partial_floats(B*T, C) floats of device scratch. Two launches.
inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* device_table,
                             const EncoderBackwardPlan& plan, int B, int T, int maxT, int C, bool accumulate_wpe,
                             float* partials, cudaStream_t stream) {
  if (plan.positions != B * T)
    throw std::invalid_argument("encoder_backward: the plan is for " + std::to_string(plan.positions) +
                                " positions, B*T = " + std::to_string(B * T));
  if (T > maxT)
    throw std::invalid_argument("encoder_backward: T = " + std::to_string(T) +
                                " exceeds maxT = " + std::to_string(maxT));
  const int packets = static_cast<int>(ceil_div(C, packet_size<floatX>()));
  const unsigned column_blocks = static_cast<unsigned>(ceil_div(packets, kEncoderBlock));
  const dim3 block(
      static_cast<unsigned>(packets < kEncoderBlock ? ceil_div(packets, kWarpSize) * kWarpSize : kEncoderBlock));
  const bool vector = rows_are_packets<floatX>(C, dwte, dwpe, dout);
  const dim3 chunks_grid(static_cast<unsigned>(plan.chunks()), column_blocks);
  const KernelCost chunks_cost = encoder_backward_chunks_cost(plan, C);
  if (vector)
    LLMC_LAUNCH_COSTED(chunks_cost, (encoder_backward_chunks_kernel<floatX, true>), chunks_grid, block, 0, stream, dwte,
                       partials, dout, device_table, plan.positions, C);
  else
    LLMC_LAUNCH_COSTED(chunks_cost, (encoder_backward_chunks_kernel<floatX, false>), chunks_grid, block, 0, stream,
                       dwte, partials, dout, device_table, plan.positions, C);
  const int* runs = device_table + 2 * static_cast<size_t>(plan.positions);
  const int wpe_rows = accumulate_wpe ? T : maxT;
  const dim3 runs_grid(static_cast<unsigned>(plan.crossing_runs + ceil_div(wpe_rows, kEncoderWpeRows)), column_blocks);
  const KernelCost runs_cost = encoder_backward_runs_wpe_cost(plan, B, T, wpe_rows, C, accumulate_wpe);
  const float* const_partials = partials;
  if (vector)
    LLMC_LAUNCH_COSTED(runs_cost, (encoder_backward_runs_wpe_kernel<floatX, true>), runs_grid, block, 0, stream, dwte,
                       dwpe, const_partials, dout, runs, plan.crossing_runs, B, T, wpe_rows, C, accumulate_wpe);
  else
    LLMC_LAUNCH_COSTED(runs_cost, (encoder_backward_runs_wpe_kernel<floatX, false>), runs_grid, block, 0, stream, dwte,
                       dwpe, const_partials, dout, runs, plan.crossing_runs, B, T, wpe_rows, C, accumulate_wpe);
}

}  // namespace llmc
