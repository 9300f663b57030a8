// Token + position embedding: forward out[b,t,:] = wte[token[b,t],:] + wpe[t,:] in 16-byte packets, and a
// DETERMINISTIC backward: dwte by the scatter-add by token that the speedrun's embeddings use too
// (llmc/kernels/token_scatter.cuh: positions sorted by token on the host when the batch is staged for
// upload, build_encoder_backward_plan; no float atomics, no serial per-token tail), dwpe by a sum over the
// batch per position.
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
#include "llmc/kernels/token_scatter.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

constexpr int kEncoderChunk = kTokenScatterChunk;  // sorted positions per chunk: the longest serial sum of a thread
constexpr int kEncoderBlock = 128;                 // threads (column packets) per block at most
constexpr int kEncoderWpeRows = 8;                 // positions t per block of the wpe gradient

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
// Floats of device scratch for the crossing runs' partials.
inline size_t encoder_backward_partial_floats(int max_positions, int C) {
  return token_scatter_partial_floats(max_positions, C);
}

// Builds the plan of tokens[0, positions) into table (encoder_backward_table_ints(positions) ints, laid out
// for that size: sorted positions, their tokens, the crossing runs). counts: scratch. Throws
// std::invalid_argument for a token outside [0, V). Stable: positions of one token stay in increasing order.
inline EncoderBackwardPlan build_encoder_backward_plan(const int* tokens, int positions, int V, int* table,
                                                       std::vector<int>& counts) {
  for (int i = 0; i < positions; i++)
    if (tokens[i] < 0 || tokens[i] >= V)
      throw std::invalid_argument("encoder backward: token id " + std::to_string(tokens[i]) + " at position " +
                                  std::to_string(i) + " outside [0, " + std::to_string(V) + ")");
  const TokenSortStats stats = sort_positions_by_token(tokens, positions, V, table, table + positions,
                                                       table + 2 * static_cast<size_t>(positions), counts);
  EncoderBackwardPlan plan;
  plan.positions = positions;
  plan.distinct = stats.distinct;
  plan.crossing_runs = stats.crossing_runs;
  plan.longest_run = stats.longest_run;
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

// Blocks of kEncoderWpeRows rows t of dwpe each, t < wpe_rows: dwpe[t] (+)= sum over b of dout[b, t] in b
// order for t < T, and 0 for t >= T (wpe_rows > T only when overwriting). Thread = column packet.
template <typename Tx, bool kVector>
__global__ void encoder_backward_wpe_kernel(Tx* dwpe, const Tx* dout, int B, int T, int wpe_rows, int C,
                                            bool accumulate_wpe) {
  constexpr int P = packet_size<Tx>();
  const int c = (blockIdx.y * blockDim.x + threadIdx.x) * P;
  if (c >= C) return;
  const int t0 = static_cast<int>(blockIdx.x) * kEncoderWpeRows;
  for (int t = t0; t < t0 + kEncoderWpeRows && t < wpe_rows; t++) {
    float sum[P] = {};
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

inline KernelCost encoder_backward_wpe_cost(int B, int T, int wpe_rows, int C, bool accumulate_wpe) {
  const double x = sizeof(floatX), tc = static_cast<double>(T) * C;
  return KernelCost{static_cast<double>(B) * tc * x + static_cast<double>(wpe_rows) * C * x +
                        (accumulate_wpe ? tc * x : 0.0),
                    static_cast<double>(B) * tc};
}

// dwte (V,C) += and dwpe (maxT,C) (+)= from dout (B,T,C), for the batch whose plan is `plan`, its table
// uploaded to device_table (stream-ordered before this call). dwpe accumulates when accumulate_wpe; otherwise
// all its maxT rows are overwritten (rows t >= T with 0). dwte always accumulates (the tied LM head writes it
// first). partials: encoder_backward_partial_floats(B*T, C) floats of device scratch. Two or three launches
// (the token scatter's one or two, then dwpe's).
inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* device_table,
                             const EncoderBackwardPlan& plan, int B, int T, int maxT, int C, bool accumulate_wpe,
                             float* partials, cudaStream_t stream) {
  if (plan.positions != B * T)
    throw std::invalid_argument("encoder_backward: the plan is for " + std::to_string(plan.positions) +
                                " positions, B*T = " + std::to_string(B * T));
  if (T > maxT)
    throw std::invalid_argument("encoder_backward: T = " + std::to_string(T) +
                                " exceeds maxT = " + std::to_string(maxT));
  TokenScatter<floatX> wte;
  wte.count = 1;
  wte.table_grads[0] = dwte;
  wte.douts[0] = dout;
  const TokenSortStats stats{plan.distinct, plan.crossing_runs, plan.longest_run};
  token_scatter_add(wte, device_table, device_table + plan.positions, device_table + 2 * static_cast<size_t>(plan.positions),
                    /*run_count=*/nullptr, plan.positions, stats, C, partials, stream);
  const int packets = static_cast<int>(ceil_div(C, packet_size<floatX>()));
  const unsigned column_blocks = static_cast<unsigned>(ceil_div(packets, kEncoderBlock));
  const dim3 block(
      static_cast<unsigned>(packets < kEncoderBlock ? ceil_div(packets, kWarpSize) * kWarpSize : kEncoderBlock));
  const int wpe_rows = accumulate_wpe ? T : maxT;
  const dim3 wpe_grid(static_cast<unsigned>(ceil_div(wpe_rows, kEncoderWpeRows)), column_blocks);
  const KernelCost wpe_cost = encoder_backward_wpe_cost(B, T, wpe_rows, C, accumulate_wpe);
  if (rows_are_packets<floatX>(C, dwpe, dout))
    LLMC_LAUNCH_COSTED(wpe_cost, (encoder_backward_wpe_kernel<floatX, true>), wpe_grid, block, 0, stream, dwpe, dout, B,
                       T, wpe_rows, C, accumulate_wpe);
  else
    LLMC_LAUNCH_COSTED(wpe_cost, (encoder_backward_wpe_kernel<floatX, false>), wpe_grid, block, 0, stream, dwpe, dout,
                       B, T, wpe_rows, C, accumulate_wpe);
}

}  // namespace llmc
