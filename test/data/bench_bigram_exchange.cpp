// The bytes one Adam step's bigram-table gradient puts on the wire per rank (SPEEDRUN89.md section 7): the
// record's sparse exchange (each rank sends the rows its tokens touched in the step pair to their owners) against a
// dense reduce-scatter of the whole table, per stage and rank count, from a real token shard. Counts and the time
// they take at a bus bandwidth; no GPU time. Usage: bench_bigram_exchange --shard PATH [--world 1,2,4,8]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/data/bigram_hash.h"
#include "llmc/data/shards.h"

namespace {

constexpr int kRecordRanks = 8;                       // the record's tokens per rank and micro-step are for 8 GPUs
constexpr int kChannels = 768;                        // the table's width
constexpr int kGradBytes = 2;                         // bf16 gradients
constexpr int kIndexBytes = 4;                        // an int32 row index per sent row
const int kStageTokens[] = {131072, 262144, 393216};  // global tokens per step, stages 1-3

struct Exchange {
  double dense_bytes = 0;        // per rank: the ring reduce-scatter's (N - 1) / N of the table
  double sparse_max_bytes = 0;   // the busiest rank's rows (and indices) to other owners, plus the counts
  double mean_touched_rows = 0;  // distinct rows a rank's tokens of the pair read
};

// Rank r of N reads, in each step of the pair, micro-steps k = 0 .. 8 / N - 1 of T tokens: the global sequence
// (step 8 + k N + r) of the token stream, as the record's 8-rank dealing seen from fewer ranks. `tokens` holds
// the pair (print_table checks).
Exchange exchange(const std::vector<int32_t>& tokens, int world, int tokens_per_rank_micro) {
  const int micro_steps = kRecordRanks / world;
  const int64_t rows = llmc::kBigramRows, rows_per_owner = rows / world;
  Exchange result;
  std::vector<int32_t> hashes(static_cast<size_t>(tokens_per_rank_micro));
  std::vector<char> touched(static_cast<size_t>(rows));
  for (int rank = 0; rank < world; rank++) {
    std::fill(touched.begin(), touched.end(), 0);
    for (int step = 0; step < 2; step++)
      for (int k = 0; k < micro_steps; k++) {
        const int64_t sequence = int64_t{step} * kRecordRanks + int64_t{k} * world + rank;
        const int64_t first = sequence * tokens_per_rank_micro;
        llmc::bigram_hashes(hashes.data(), tokens.data() + first, tokens_per_rank_micro, llmc::kBigramRows);
        for (int32_t h : hashes) touched[static_cast<size_t>(h)] = 1;
      }
    int64_t all = 0, to_others = 0;
    for (int64_t row = 0; row < rows; row++) {
      if (!touched[static_cast<size_t>(row)]) continue;
      all++;
      if (row / rows_per_owner != rank) to_others++;
    }
    const double sent = static_cast<double>(to_others) * (kChannels * kGradBytes + kIndexBytes) + world * 4.0;
    result.sparse_max_bytes = std::max(result.sparse_max_bytes, world > 1 ? sent : 0.0);
    result.mean_touched_rows += static_cast<double>(all) / world;
  }
  result.dense_bytes = static_cast<double>(rows) * kChannels * kGradBytes * (world - 1) / world;
  return result;
}

void print_table(const std::string& shard, const std::vector<int32_t>& tokens, const std::vector<int>& worlds,
                 double busbw) {
  const int64_t needed = 2 * int64_t{kStageTokens[2]};  // the largest stage's step pair
  if (static_cast<int64_t>(tokens.size()) < needed)
    throw std::runtime_error("--shard " + shard + " holds " + std::to_string(tokens.size()) +
                             " tokens, too few for a step pair of stage 3 (" + std::to_string(needed) + ")");
  std::printf(
      "Shard %s: %zu tokens. Table %d x %d bf16 (%.1f MB); a sent row carries %d B of gradient and a %d B "
      "index; time = bytes / %.0f GB/s.\n\n",
      shard.c_str(), tokens.size(), llmc::kBigramRows, kChannels,
      static_cast<double>(llmc::kBigramRows) * kChannels * kGradBytes / 1e6, kChannels * kGradBytes, kIndexBytes,
      busbw / 1e9);
  std::printf(
      "| stage | tokens/rank/micro-step | ranks | rows touched/rank | dense MB/rank | sparse MB/rank (max) | "
      "dense ms | sparse ms | dense / sparse |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int stage = 0; stage < 3; stage++) {
    const int tokens_per_rank = kStageTokens[stage] / kRecordRanks;
    for (int world : worlds) {
      const Exchange e = exchange(tokens, world, tokens_per_rank);
      char ratio[32] = "-";
      if (e.sparse_max_bytes > 0) std::snprintf(ratio, sizeof ratio, "%.1fx", e.dense_bytes / e.sparse_max_bytes);
      std::printf("| %d | %d | %d | %.0f | %.1f | %.1f | %.3f | %.3f | %s |\n", stage + 1, tokens_per_rank, world,
                  e.mean_touched_rows, e.dense_bytes / 1e6, e.sparse_max_bytes / 1e6, e.dense_bytes / busbw * 1e3,
                  e.sparse_max_bytes / busbw * 1e3, ratio);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Bytes on the wire of the bigram table's gradient per Adam step: sparse rows vs a dense reduce-scatter");
  std::string shard;
  std::vector<int> worlds = {1, 2, 4, 8};
  double busbw = 370e9;
  app.add_option("--shard", shard, "an llm.c token shard (GPT-2 tokens), read from its start")->required();
  app.add_option("--world", worlds, "rank counts (dividing 8)")->delimiter(',')->check(CLI::IsMember({1, 2, 4, 8}));
  app.add_option("--busbw", busbw, "bus bandwidth in B/s for both exchanges (NCCL on 8xH100/H200 NVLink: ~370e9)");
  CLI11_PARSE(app, argc, argv);
  try {
    const std::vector<uint16_t> shard_tokens = llmc::read_shard_tokens(shard);
    print_table(shard, std::vector<int32_t>(shard_tokens.begin(), shard_tokens.end()), worlds, busbw);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_bigram_exchange: %s\n", error.what());
    return 1;
  }
  return 0;
}
