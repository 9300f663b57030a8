// The speedrun model's four embedding tables (embed, ve0, ve1, ve2; [V, C] floatX): one gather launch for
// all of them, and a deterministic scatter-add backward without a serial per-token tail. The backward
// sorts the positions by token once per batch on the host (stable counting sort, O(T + V); the loader
// has the tokens there anyway) and splits the sorted list into chunks of 32 positions: a thread per
// (chunk, 16-byte column packet) sums its chunk's positions of each token run in order and adds the
// total into the table row when the run lies inside the chunk; a run that crosses chunk boundaries
// leaves one fp32 partial per chunk, and a second kernel adds those partials in chunk order. The longest
// serial sum is 32 positions plus (count / 32 + 2) partials, even for the most frequent token of
// Zipf-distributed text. No float atomics; bitwise repeatable.
#pragma once

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

constexpr int kEmbeddingMaxTables = 4;
constexpr int kEmbeddingChunk = 32;  // sorted positions per chunk
constexpr int kEmbeddingBlock = 128;

// Up to four tables read or written with the same tokens, e.g. {embed, ve0, ve1, ve2}.
template <typename Tx>
struct EmbeddingGather {
  int count = 0;
  const Tx* tables[kEmbeddingMaxTables] = {};  // [V, C]
  Tx* outputs[kEmbeddingMaxTables] = {};       // [T, C]
};
template <typename Tx>
struct EmbeddingScatter {
  int count = 0;
  Tx* table_grads[kEmbeddingMaxTables] = {};  // [V, C], accumulated
  const Tx* douts[kEmbeddingMaxTables] = {};  // [T, C]
};

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
  EmbeddingBackwardPlan& operator=(const EmbeddingBackwardPlan&) = delete;

  // Sorts the T token ids of tokens_host (host memory, read before the call returns; each in [0, V)) and
  // uploads the result on `stream`. Waits for the previous upload before reusing the host buffer.
  void prepare(const int* tokens_host, int T, cudaStream_t stream);

  int tokens() const { return tokens_; }
  int chunks() const { return static_cast<int>(ceil_div(tokens_, kEmbeddingChunk)); }
  int crossing_runs() const { return crossing_runs_; }
  int channels() const { return channels_; }
  const int* sorted_positions() const { return device_table_; }
  const int* sorted_tokens() const { return device_table_ + max_tokens_; }
  const int* runs() const {
    return device_table_ + 2 * static_cast<size_t>(max_tokens_);
  }                                              // (token, first, count) triples
  float* partials() const { return partials_; }  // [table][2 * chunks][C] fp32

 private:
  int max_tokens_, vocab_size_, channels_;
  int tokens_ = 0, crossing_runs_ = 0;
  std::vector<int> counts_;      // [V] scratch of the counting sort
  std::vector<int> host_table_;  // sorted positions, sorted tokens, runs: the upload
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
  // A run crosses a chunk boundary only where one ends: at most one crossing run per chunk.
  const size_t max_chunks = static_cast<size_t>(ceil_div(max_tokens, kEmbeddingChunk));
  host_table_.resize(2 * static_cast<size_t>(max_tokens) + 3 * max_chunks);
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_table_), host_table_.size() * sizeof(int)));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&partials_),
                        static_cast<size_t>(kEmbeddingMaxTables) * 2 * max_chunks * channels * sizeof(float)));
  CUDA_CHECK(cudaEventCreateWithFlags(&upload_done_, cudaEventDisableTiming));
}

inline EmbeddingBackwardPlan::~EmbeddingBackwardPlan() {
  // A destructor must not throw: report a failure and carry on releasing.
  if (upload_pending_) CUDA_REPORT(cudaEventSynchronize(upload_done_));
  CUDA_REPORT(cudaEventDestroy(upload_done_));
  CUDA_REPORT(cudaFree(partials_));
  CUDA_REPORT(cudaFree(device_table_));
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
  // Stable counting sort: counts_[v + 1] -> first sorted index of token v.
  std::fill(counts_.begin(), counts_.end(), 0);
  for (int t = 0; t < T; t++) counts_[tokens_host[t] + 1]++;
  for (int v = 0; v < vocab_size_; v++) counts_[v + 1] += counts_[v];
  int* sorted_positions = host_table_.data();
  int* sorted_tokens = sorted_positions + max_tokens_;
  for (int t = 0; t < T; t++) {
    const int index = counts_[tokens_host[t]]++;
    sorted_positions[index] = t;
    sorted_tokens[index] = tokens_host[t];
  }
  // Runs that span more than one chunk.
  int* runs = sorted_tokens + max_tokens_;
  crossing_runs_ = 0;
  for (int first = 0; first < T;) {
    int end = first + 1;
    while (end < T && sorted_tokens[end] == sorted_tokens[first]) end++;
    if (first / kEmbeddingChunk != (end - 1) / kEmbeddingChunk) {
      runs[3 * crossing_runs_] = sorted_tokens[first];
      runs[3 * crossing_runs_ + 1] = first;
      runs[3 * crossing_runs_ + 2] = end - first;
      crossing_runs_++;
    }
    first = end;
  }
  // Sorted positions and tokens at their fixed offsets, then the runs.
  CUDA_CHECK(cudaMemcpyAsync(device_table_, host_table_.data(), static_cast<size_t>(T) * sizeof(int),
                             cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(device_table_ + max_tokens_, sorted_tokens,
                             (static_cast<size_t>(max_tokens_) + 3 * static_cast<size_t>(crossing_runs_)) * sizeof(int),
                             cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaEventRecord(upload_done_, stream));
  upload_pending_ = true;
}

// Adds an fp32 packet of sums into one table row's packet (floatX, rounded once).
template <typename Tx>
__device__ __forceinline__ void add_to_row(Tx* target, const float (&sum)[Packed128<Tx>::size]) {
  using Packet = Packed128<Tx>;
  const Packet old = load128(target);
  Packet result;
  for (int j = 0; j < Packet::size; j++) result[j] = from_float<Tx>(to_float(old[j]) + sum[j]);
  store128(target, result);
}

// Thread = (chunk blockIdx.x, packet p, table blockIdx.z). Walks the chunk's sorted positions in order.
template <typename Tx>
__global__ void embedding_backward_chunks_kernel(EmbeddingScatter<Tx> args, float* partials, const int* positions,
                                                 const int* tokens, int T, int C) {
  using Packet = Packed128<Tx>;
  constexpr int S = Packet::size;
  const int p = blockIdx.y * blockDim.x + threadIdx.x;
  if (p >= C / S) return;
  const int chunk = blockIdx.x, table = blockIdx.z, num_chunks = gridDim.x;
  const int i0 = chunk * kEmbeddingChunk, i1 = i0 + kEmbeddingChunk < T ? i0 + kEmbeddingChunk : T;
  float sum[S] = {};
  int run_start = i0;
  for (int i = i0; i < i1; i++) {
    const int token = tokens[i];
    const Packet g = load128(args.douts[table] + static_cast<size_t>(positions[i]) * C + p * S);
    for (int j = 0; j < S; j++) sum[j] += to_float(g[j]);
    if (i + 1 < i1 && tokens[i + 1] == token) continue;
    const bool crosses_start = run_start == i0 && i0 > 0 && tokens[i0 - 1] == token;
    const bool crosses_end = i + 1 == i1 && i1 < T && tokens[i1] == token;
    if (!crosses_start && !crosses_end) {
      add_to_row<Tx>(args.table_grads[table] + static_cast<size_t>(token) * C + p * S, sum);
    } else {  // slot 2c: the run that enters the chunk; 2c + 1: the one that starts in it and leaves
      const int slot = 2 * chunk + (crosses_start ? 0 : 1);
      float* target = partials + (static_cast<size_t>(table) * 2 * num_chunks + slot) * C + p * S;
      for (int q = 0; q < S; q += f128::size) {
        f128 packet;
        for (int j = 0; j < f128::size; j++) packet[j] = sum[q + j];
        store128(target + q, packet);
      }
    }
    for (int j = 0; j < S; j++) sum[j] = 0.0f;
    run_start = i + 1;
  }
}

// Thread = (crossing run blockIdx.x, packet p, table blockIdx.z): the run's partials are slot 2 c0 + 1 of its
// first chunk c0, then slot 2c of every later chunk up to c1, summed in chunk order.
template <typename Tx>
__global__ void embedding_backward_runs_kernel(EmbeddingScatter<Tx> args, const float* partials, const int* runs,
                                               int num_chunks, int C) {
  using Packet = Packed128<Tx>;
  constexpr int S = Packet::size;
  const int p = blockIdx.y * blockDim.x + threadIdx.x;
  if (p >= C / S) return;
  const int table = blockIdx.z;
  const int token = runs[3 * blockIdx.x], first = runs[3 * blockIdx.x + 1], count = runs[3 * blockIdx.x + 2];
  const int c0 = first / kEmbeddingChunk, c1 = (first + count - 1) / kEmbeddingChunk;
  const float* base = partials + static_cast<size_t>(table) * 2 * num_chunks * C + p * S;
  float sum[S] = {};
  auto add_slot = [&](int slot) {
    for (int q = 0; q < S; q += f128::size) {
      const f128 packet = load128(base + static_cast<size_t>(slot) * C + q);
      for (int j = 0; j < f128::size; j++) sum[q + j] += packet[j];
    }
  };
  if (LLMC_MUTANT("embedding.drop_first_partial", true, false)) add_slot(2 * c0 + 1);
  for (int c = c0 + 1; c <= c1; c++) add_slot(2 * c);
  add_to_row<Tx>(args.table_grads[table] + static_cast<size_t>(token) * C + p * S, sum);
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
  LLMC_LAUNCH(embedding_forward_kernel<floatX>, dim3(elementwise_grid(packets, 256)), dim3(256), 0, stream, args,
              tokens, T, C);
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
  const int packets = C / Packed128<floatX>::size;
  const unsigned column_blocks = static_cast<unsigned>(ceil_div(packets, kEmbeddingBlock));
  const unsigned block =
      static_cast<unsigned>(packets < kEmbeddingBlock ? ceil_div(packets, kWarpSize) * kWarpSize : kEmbeddingBlock);
  LLMC_LAUNCH(embedding_backward_chunks_kernel<floatX>,
              dim3(static_cast<unsigned>(plan.chunks()), column_blocks, static_cast<unsigned>(args.count)), dim3(block),
              0, stream, args, plan.partials(), plan.sorted_positions(), plan.sorted_tokens(), plan.tokens(), C);
  if (plan.crossing_runs() > 0)
    LLMC_LAUNCH(embedding_backward_runs_kernel<floatX>,
                dim3(static_cast<unsigned>(plan.crossing_runs()), column_blocks, static_cast<unsigned>(args.count)),
                dim3(block), 0, stream, args, static_cast<const float*>(plan.partials()), plan.runs(), plan.chunks(),
                C);
}

}  // namespace llmc
