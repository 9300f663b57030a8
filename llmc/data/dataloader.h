// Per-rank batches from token shards, for data-parallel training: every global batch is world_size*B
// windows of T+1 tokens (inputs = first T, targets = last T), rank r takes windows r*B .. r*B+B-1.
// Optional deterministic shuffling (shard order and window order, from seed and epoch), optional
// background prefetch (same batches either way; the next shard is read ahead too), and a position that
// checkpoints can save and seek to.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "llmc/data/shards.h"

namespace llmc {

struct DataLoaderConfig {
  std::string pattern;        // shell glob of shard files, walked in sorted order
  int64_t batch_size = 0;     // B: windows per rank per batch
  int64_t seq_len = 0;        // T: tokens per window (each window reads T+1 tokens)
  int rank = 0;
  int world_size = 1;
  int vocab_size = 50257;     // every token must be < vocab_size (checked when a shard is loaded)
  bool shuffle = false;
  uint64_t seed = 0;
  bool prefetch = false;      // build the next batch on a background thread
};

// Where the loader stands: the next batch it returns is global batch `batch_in_shard` of the shard
// at `shard_order_index` in epoch `epoch`'s shard order. Save it with a checkpoint, seek() to resume.
struct DataLoaderPosition {
  int64_t epoch = 0;
  int64_t shard_order_index = 0;
  int64_t batch_in_shard = 0;
  bool operator==(const DataLoaderPosition& other) const {
    return epoch == other.epoch && shard_order_index == other.shard_order_index &&
           batch_in_shard == other.batch_in_shard;
  }
  bool operator!=(const DataLoaderPosition& other) const { return !(*this == other); }
};

// Windows are laid out with stride T, so window w of a shard covers tokens [w*T, w*T+T] and the
// shard holds (num_tokens-1)/T of them. int64 throughout: shards reach 2^31 tokens (4 GB).
constexpr int64_t window_first_token(int64_t window_index, int64_t seq_len) { return window_index * seq_len; }
constexpr int64_t windows_in_shard(int64_t num_tokens, int64_t seq_len) {
  return num_tokens > 0 ? (num_tokens - 1) / seq_len : 0;
}

// A permutation of 0..count-1 determined only by the key words: the same on every rank, every
// compiler and every standard library (std::shuffle's output is implementation-defined).
std::vector<int64_t> deterministic_permutation(int64_t count, uint64_t seed, uint64_t stream_a, uint64_t stream_b);

class DataLoader {
 public:
  // Globs the shards and validates every header (and that each holds at least one global batch).
  explicit DataLoader(const DataLoaderConfig& config);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Fills B*T inputs and B*T targets (targets[t] is the token after inputs[t]) and advances.
  void next_batch(int32_t* inputs, int32_t* targets);

  DataLoaderPosition position() const;          // position of the batch next_batch() returns next
  void seek(const DataLoaderPosition& position);  // throws std::runtime_error for a position that does not exist
  void reset() { seek(DataLoaderPosition{}); }
  // The first of this loader's batches in shard `shard_order_index` of epoch `epoch` that starts at or
  // after token `tokens_into_shard` of it, or the start of the next shard when none does (a position
  // saved by a loader with another world_size*B*T, mapped onto this one). Throws like seek().
  DataLoaderPosition position_at_tokens(int64_t epoch, int64_t shard_order_index, int64_t tokens_into_shard) const;

  int64_t epoch() const { return position().epoch; }
  const std::vector<ShardInfo>& shards() const { return shards_; }  // in glob order
  int64_t batches_in_shard(int64_t shard_file_index) const;         // global batches in that shard
  int64_t batches_per_epoch() const;
  int64_t tokens_per_rank_batch() const { return config_.batch_size * config_.seq_len; }
  const DataLoaderConfig& config() const { return config_; }

 private:
  // Everything needed to produce batches; owned by exactly one thread at a time.
  struct Cursor {
    DataLoaderPosition position;
    int64_t loaded_shard_file = -1;        // index into shards_ of `tokens`, -1 = none
    int64_t loaded_epoch = -1;             // epoch for which `window_order` was made
    std::vector<uint16_t> tokens;          // the current shard, validated
    std::vector<int64_t> window_order;     // shuffled window indices (empty when not shuffling)
    // With prefetch: the shard after the current one, being read on a background thread.
    std::future<std::vector<uint16_t>> next_shard;
    int64_t next_shard_file = -1;
  };
  struct PrefetchSlot;

  int64_t shard_file_at(int64_t epoch, int64_t shard_order_index) const;
  std::vector<uint16_t> load_validated_shard(int64_t file) const;
  void load_shard_for(Cursor& cursor) const;
  void produce_batch(Cursor& cursor, int32_t* inputs, int32_t* targets) const;
  void start_prefetch(const DataLoaderPosition& from);
  void stop_prefetch();
  void prefetch_loop();

  DataLoaderConfig config_;
  std::vector<ShardInfo> shards_;
  Cursor cursor_;                          // used directly without prefetch, by the worker with it
  DataLoaderPosition returned_position_;   // position after the last batch handed to the caller
  std::unique_ptr<PrefetchSlot> slot_;
  std::thread worker_;
};

struct ValLoaderConfig {
  std::string pattern;
  int64_t batch_size = 0;
  int64_t seq_len = 0;
  int rank = 0;
  int world_size = 1;
  int vocab_size = 50257;
  int64_t val_tokens = 0;  // must be a multiple of world_size * B * T
  bool prefetch = false;
};

// Validation: exactly the first val_tokens tokens (as inputs) of the val shards in glob order, in
// val_tokens / (world_size*B*T) steps split disjointly across ranks, as the modded-nanogpt speedrun.
class ValLoader {
 public:
  explicit ValLoader(const ValLoaderConfig& config);
  int64_t num_steps() const { return num_steps_; }
  void next_batch(int32_t* inputs, int32_t* targets);  // throws std::logic_error after num_steps() calls
  void reset();

 private:
  static DataLoaderConfig loader_config(const ValLoaderConfig& config);
  int64_t num_steps_;
  int64_t steps_taken_ = 0;
  DataLoader loader_;
};

}  // namespace llmc
