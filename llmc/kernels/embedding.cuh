// The speedrun model's four embedding tables (embed, ve0, ve1, ve2; [V, C] floatX): one gather launch for
// all of them, and their backward by the deterministic scatter-add by token of llmc/kernels/token_scatter.cuh
// (the positions sorted by token once per batch on the host: the loader has the tokens there anyway), all
// four tables in each of its launches. The sorted table goes up from pinned memory: an asynchronous copy that a
// CUDA graph can hold.
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/kernels/token_scatter.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

constexpr int kEmbeddingMaxTables = kTokenScatterMaxTables;
constexpr int kEmbeddingChunk = kTokenScatterChunk;  // sorted positions per chunk

// Up to four tables read or written with the same tokens, e.g. {embed, ve0, ve1, ve2}.
template <typename Tx>
struct EmbeddingGather {
  int count = 0;
  const Tx* tables[kEmbeddingMaxTables] = {};  // [V, C]
  Tx* outputs[kEmbeddingMaxTables] = {};       // [T, C]
};
// Up to four table gradients accumulated from their douts [T, C] with the same tokens.
template <typename Tx>
using EmbeddingScatter = TokenScatter<Tx>;

template <typename Tx>
__global__ void embedding_forward_kernel(EmbeddingGather<Tx> args, const int* tokens, int T, int C) {
  using Packet = Packed128<Tx>;
  const int per_row = C / Packet::size;
  const size_t total = static_cast<size_t>(args.count) * T * per_row;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int table = static_cast<int>(i / (static_cast<size_t>(T) * per_row));
    const size_t within = i % (static_cast<size_t>(T) * per_row);
    const int t = static_cast<int>(within / per_row), p = static_cast<int>(within % per_row);
    const int token = tokens[LLMC_MUTANT("embedding.previous_token", t, t > 0 ? t - 1 : 0)];
    const Packet row = load128(args.tables[table] + static_cast<size_t>(token) * C + p * Packet::size);
    store128(args.outputs[table] + static_cast<size_t>(t) * C + p * Packet::size, row);
  }
}

// Positions grouped by token for one batch, on the device (see the file comment). Sized for up to
// max_tokens positions, vocab_size tokens and rows of `channels`; create once, prepare() every batch.
class EmbeddingBackwardPlan {
 public:
  EmbeddingBackwardPlan(int max_tokens, int vocab_size, int channels);
  ~EmbeddingBackwardPlan();
  EmbeddingBackwardPlan(const EmbeddingBackwardPlan&) = delete;
  // Device bytes a plan for max_tokens positions of rows of `channels` allocates (its table and partials).
  static size_t device_bytes(int max_tokens, int channels) {
    return table_ints(max_tokens) * sizeof(int) + partial_floats(max_tokens, channels) * sizeof(float);
  }
  EmbeddingBackwardPlan& operator=(const EmbeddingBackwardPlan&) = delete;

  // Sorts the T token ids of tokens_host (host memory, read before the call returns; each in [0, V)) and
  // uploads the result on `stream`. Waits for the previous upload before reusing the host buffer.
  void prepare(const int* tokens_host, int T, cudaStream_t stream);

  int tokens() const { return tokens_; }
  int chunks() const { return static_cast<int>(ceil_div(tokens_, kEmbeddingChunk)); }
  int crossing_runs() const { return stats_.crossing_runs; }
  const TokenSortStats& stats() const { return stats_; }
  int channels() const { return channels_; }
  const int* sorted_positions() const { return device_table_; }
  const int* sorted_tokens() const { return device_table_ + max_tokens_; }
  // The batch's distinct token ids, ascending, from the sort prepare() made (on the host, until the next prepare).
  std::vector<int> distinct_tokens() const;
  // The crossing runs' (token, first, count) triples and, on the device, their count.
  const int* runs() const { return device_table_ + 2 * static_cast<size_t>(max_tokens_); }
  const int* run_count() const { return device_table_ + table_ints(max_tokens_) - 1; }
  float* partials() const { return partials_; }  // [table][2 * chunks][C] fp32

 private:
  // A run crosses a chunk boundary only where one ends: at most one crossing run per chunk.
  static size_t max_chunks(int max_tokens) { return static_cast<size_t>(ceil_div(max_tokens, kEmbeddingChunk)); }
  // Sorted positions, sorted tokens, the runs' triples, their count (the last int).
  static size_t table_ints(int max_tokens) {
    return 2 * static_cast<size_t>(max_tokens) + 3 * max_chunks(max_tokens) + 1;
  }
  static size_t partial_floats(int max_tokens, int channels) {
    return static_cast<size_t>(kEmbeddingMaxTables) * 2 * max_chunks(max_tokens) * channels;
  }

  int max_tokens_, vocab_size_, channels_;
  int tokens_ = 0;
  TokenSortStats stats_;
  std::vector<int> counts_;      // [V] scratch of the counting sort
  int* host_table_ = nullptr;  // pinned: sorted positions, sorted tokens, runs (the upload)
  int* device_table_ = nullptr;
  float* partials_ = nullptr;
  cudaEvent_t upload_done_ = nullptr;
  bool upload_pending_ = false;
};

inline EmbeddingBackwardPlan::EmbeddingBackwardPlan(int max_tokens, int vocab_size, int channels)
    : max_tokens_(max_tokens), vocab_size_(vocab_size), channels_(channels) {
  if (max_tokens <= 0 || vocab_size <= 0 || channels <= 0)
    throw std::invalid_argument("EmbeddingBackwardPlan: max_tokens, vocab_size and channels must be positive");
  counts_.assign(static_cast<size_t>(vocab_size) + 1, 0);
  const size_t ints = table_ints(max_tokens);
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_table_), ints * sizeof(int)));
  std::fill_n(host_table_, ints, 0);  // the whole table goes up each batch, its unused tail too
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_table_), ints * sizeof(int)));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&partials_), partial_floats(max_tokens, channels) * sizeof(float)));
  CUDA_CHECK(cudaEventCreateWithFlags(&upload_done_, cudaEventDisableTiming));
}

inline EmbeddingBackwardPlan::~EmbeddingBackwardPlan() {
  // A destructor must not throw: report a failure and carry on releasing.
  if (upload_pending_) CUDA_REPORT(cudaEventSynchronize(upload_done_));
  CUDA_REPORT(cudaEventDestroy(upload_done_));
  CUDA_REPORT(cudaFree(partials_));
  CUDA_REPORT(cudaFree(device_table_));
  CUDA_REPORT(cudaFreeHost(host_table_));
}

inline std::vector<int> EmbeddingBackwardPlan::distinct_tokens() const {
  const int* sorted = host_table_ + max_tokens_;
  std::vector<int> distinct;
  std::unique_copy(sorted, sorted + tokens_, std::back_inserter(distinct));
  return distinct;
}

inline void EmbeddingBackwardPlan::prepare(const int* tokens_host, int T, cudaStream_t stream) {
  if (T <= 0 || T > max_tokens_)
    throw std::invalid_argument("EmbeddingBackwardPlan::prepare: T = " + std::to_string(T) + " outside [1, " +
                                std::to_string(max_tokens_) + "]");
  for (int t = 0; t < T; t++)
    if (tokens_host[t] < 0 || tokens_host[t] >= vocab_size_)
      throw std::invalid_argument("EmbeddingBackwardPlan::prepare: token id " + std::to_string(tokens_host[t]) +
                                  " at position " + std::to_string(t) + " outside [0, " + std::to_string(vocab_size_) +
                                  ")");
  if (upload_pending_) CUDA_CHECK(cudaEventSynchronize(upload_done_));
  tokens_ = T;
  int* sorted_positions = host_table_;
  int* sorted_tokens = sorted_positions + max_tokens_;
  stats_ = sort_positions_by_token(tokens_host, T, vocab_size_, sorted_positions, sorted_tokens,
                                   sorted_tokens + max_tokens_, counts_);
  // Sorted positions and tokens at their fixed offsets, the runs, their count: the whole table in one copy of a
  // size that does not depend on the batch (what a CUDA graph captured for one batch copies for the next).
  const size_t ints = table_ints(max_tokens_);
  host_table_[ints - 1] = stats_.crossing_runs;
  CUDA_CHECK(cudaMemcpyAsync(device_table_, host_table_, ints * sizeof(int), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaEventRecord(upload_done_, stream));
  upload_pending_ = true;
}

namespace detail {
template <typename Tx>
void check_embedding_args(const char* launcher, int count, int C, const Tx* const* a, const void* const* b) {
  if (count < 1 || count > kEmbeddingMaxTables)
    throw std::invalid_argument(std::string(launcher) + ": between 1 and 4 tables, got " + std::to_string(count));
  require_packets<Tx>(launcher, "C", C);
  for (int k = 0; k < count; k++) require_aligned16(launcher, {a[k], b[k]});
}
}  // namespace detail

// outputs[k] (T, C) = tables[k][tokens[t]] for each of the args.count tables; tokens (T) on the device.
inline void embedding_forward(const EmbeddingGather<floatX>& args, const int* tokens, int T, int C,
                              cudaStream_t stream) {
  detail::check_embedding_args<floatX>("embedding_forward", args.count, C, args.tables,
                                       reinterpret_cast<const void* const*>(args.outputs));
  if (T <= 0) return;
  const size_t packets = static_cast<size_t>(args.count) * T * (C / Packed128<floatX>::size);
  const double rows = static_cast<double>(args.count) * T;  // each gathered row read once and written, the tokens
  LLMC_LAUNCH_COSTED((KernelCost{2.0 * rows * C * sizeof(floatX) + 4.0 * T, 0.0}), embedding_forward_kernel<floatX>,
                     dim3(elementwise_grid(packets, 256)), dim3(256), 0, stream, args, tokens, T, C);
}

// table_grads[k][token] += sum of douts[k] over the positions of that token, for the batch the plan was
// prepared with (stream-ordered after plan.prepare). Deterministic; no atomics.
inline void embedding_backward(const EmbeddingScatter<floatX>& args, const EmbeddingBackwardPlan& plan, int C,
                               cudaStream_t stream) {
  detail::check_embedding_args<floatX>("embedding_backward", args.count, C, args.douts,
                                       reinterpret_cast<const void* const*>(args.table_grads));
  if (C != plan.channels())
    throw std::invalid_argument("embedding_backward: C = " + std::to_string(C) + " but the plan was made for " +
                                std::to_string(plan.channels()));
  if (plan.tokens() == 0) throw std::logic_error("embedding_backward: the plan was never prepared");
  token_scatter_add(args, plan.sorted_positions(), plan.sorted_tokens(), plan.runs(), plan.run_count(), plan.tokens(),
                    plan.stats(), C, plan.partials(), stream);
}

}  // namespace llmc
