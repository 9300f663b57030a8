// The speedrun's validation loader (docs/bos_loader.md): the first val_tokens tokens of the val
// shards (in glob order) in chunks of T contiguous tokens (T+1 read: the last is a target only), not
// aligned to documents; call c of rank r takes chunk c * world_size + rank, so every GPU count sees
// the same chunks. cu_seqlens splits each chunk at its BOS tokens. 10,485,760 tokens in chunks of
// 262,144 on 8 ranks is the reference's 5 passes; fewer ranks make more calls.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llmc/data/document_packing.h"

namespace llmc {

struct PackedValConfig {
  std::string pattern;               // shell glob of the val shards
  int64_t seq_len = 262144;          // T: tokens per chunk
  int64_t val_tokens = 10485760;     // a multiple of world_size * T
  int world_size = 1;
  int rank = 0;
  int cu_seqlens_length = 0;         // 0: default_cu_seqlens_length(seq_len)
  int vocab_size = 50257;
};

class PackedValLoader {
 public:
  // Reads the first val_tokens + 1 tokens; throws std::runtime_error if the shards hold fewer.
  explicit PackedValLoader(const PackedValConfig& config);
  int64_t num_calls() const { return num_calls_; }  // next() calls per validation on each rank
  // This rank's next chunk; throws std::logic_error after num_calls() calls (reset() starts over).
  void next(PackedSequence* out);
  void reset() { calls_taken_ = 0; }

 private:
  PackedValConfig config_;
  std::vector<uint16_t> tokens_;  // the first val_tokens + 1 tokens
  int64_t num_calls_ = 0;
  int64_t calls_taken_ = 0;
};

}  // namespace llmc
