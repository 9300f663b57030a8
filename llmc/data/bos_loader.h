// The speedrun's training loader (docs/bos_loader.md): each step deals world_size * grad_accum
// sequences of T+1 tokens from whole documents (document_packing.h), and this rank's micro-step k
// takes sequence k * world_size + rank, so a run does not depend on the GPU count. Shards are walked
// in glob order, cyclically; the next shard is read and indexed on a background thread while the
// current one is used, so crossing a shard never waits for the disk. The position (shard, document,
// micro-step) is what a checkpoint saves; a loader started from it continues bit for bit.
#pragma once

#include <cstdint>
#include <future>
#include <string>
#include <vector>

#include "llmc/data/document_packing.h"

namespace llmc {

struct BosLoaderConfig {
  std::string pattern;                 // shell glob of the train shards
  int64_t seq_len = 32768;             // T: tokens per sequence (each sequence reads T+1)
  int64_t max_document_tokens = 2048;  // longer documents are cut
  int world_size = 1;
  int rank = 0;
  int grad_accum = 1;                  // micro-steps per step on each rank
  int cu_seqlens_length = 0;           // 0: default_cu_seqlens_length(seq_len)
  int vocab_size = 50257;
};

// The next micro-batch is micro-step `micro_step` of the step whose first document is `document`
// of the shard at glob index `shard`, in pass `epoch` over the shards.
struct BosLoaderPosition {
  int64_t epoch = 0;
  int64_t shard = 0;
  int64_t document = 0;
  int64_t micro_step = 0;
  bool operator==(const BosLoaderPosition& other) const {
    return epoch == other.epoch && shard == other.shard && document == other.document &&
           micro_step == other.micro_step;
  }
  bool operator!=(const BosLoaderPosition& other) const { return !(*this == other); }
};

class BosLoader {
 public:
  // Validates the config and every shard header, loads the shard of `start` and starts reading the next.
  explicit BosLoader(const BosLoaderConfig& config, const BosLoaderPosition& start = BosLoaderPosition{});
  ~BosLoader();
  BosLoader(const BosLoader&) = delete;
  BosLoader& operator=(const BosLoader&) = delete;

  // This rank's next micro-batch. Throws std::runtime_error naming the shard for a shard without
  // documents, too small for one step, or with more documents in a sequence than cu_seqlens holds.
  void next(PackedSequence* out);
  // From the next step on (at a step boundary: std::logic_error inside a step), sequences of seq_len tokens
  // (at most the config's, which sized the checks) of documents cut to max_document_tokens: the record's stages.
  // The position is the same either way, so a run resumed at any step deals what one that ran through did.
  // Throws std::invalid_argument naming the bad value.
  void set_step_shape(int64_t seq_len, int64_t max_document_tokens);
  BosLoaderPosition position() const { return position_; }  // of the micro-batch next() returns next
  const BosLoaderConfig& config() const { return config_; }
  int sequences_per_step() const { return config_.world_size * config_.grad_accum; }

 private:
  void advance_to_next_shard();
  void start_preload(int64_t shard_index);
  void deal_current_step();

  BosLoaderConfig config_;
  int64_t max_seq_len_ = 0;  // the constructor's seq_len
  std::vector<std::string> paths_;
  BosLoaderPosition position_;
  IndexedShard shard_;                  // the shard at position_.shard
  std::future<IndexedShard> preload_;   // the shard after it, being read
  bool step_dealt_ = false;             // step_ is the dealing of the step at position_
  DealtStep step_;
};

}  // namespace llmc
