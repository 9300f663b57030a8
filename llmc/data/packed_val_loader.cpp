// The validation loader over contiguous chunks (see packed_val_loader.h).
#include "llmc/data/packed_val_loader.h"

#include <algorithm>
#include <stdexcept>

#include "llmc/data/shards.h"
#include "llmc/base/file_io.h"

namespace llmc {
namespace {

}  // namespace

PackedValLoader::PackedValLoader(const PackedValConfig& config) : config_(config) {
  const std::string& where = config_.pattern;
  if (config_.seq_len < 1 || config_.seq_len >= INT32_MAX)
    throw FileError(where, "chunk length T = " + std::to_string(config_.seq_len) + " must be in 1..2^31-2");
  if (config_.world_size < 1 || config_.rank < 0 || config_.rank >= config_.world_size) {
    throw FileError(where, "rank " + std::to_string(config_.rank) + " of world_size " +
                               std::to_string(config_.world_size) + " is not a valid rank");
  }
  const int64_t per_call = int64_t{config_.world_size} * config_.seq_len;
  if (config_.val_tokens <= 0 || config_.val_tokens % per_call != 0) {
    throw FileError(where, "val_tokens " + std::to_string(config_.val_tokens) +
                               " must be a positive multiple of world_size * T = " + std::to_string(per_call));
  }
  if (config_.cu_seqlens_length == 0) config_.cu_seqlens_length = default_cu_seqlens_length(config_.seq_len);
  if (config_.cu_seqlens_length < 2) throw FileError(where, "cu_seqlens length must be at least 2");
  num_calls_ = config_.val_tokens / per_call;
  const int64_t needed = config_.val_tokens + 1;
  for (const std::string& path : glob_shards(config_.pattern)) {
    if (static_cast<int64_t>(tokens_.size()) >= needed) break;
    const ShardInfo info = read_shard_header(path);
    const int64_t take = std::min(info.num_tokens, needed - static_cast<int64_t>(tokens_.size()));
    const std::vector<uint16_t> part = read_shard_token_range(path, 0, take);
    for (size_t i = 0; i < part.size(); ++i) {
      if (part[i] >= config_.vocab_size) {
        throw FileError(path, "token at index " + std::to_string(i) + " has value " + std::to_string(part[i]) +
                                  ", not below vocab_size " + std::to_string(config_.vocab_size));
      }
    }
    tokens_.insert(tokens_.end(), part.begin(), part.end());
  }
  if (static_cast<int64_t>(tokens_.size()) < needed) {
    throw FileError(where, "the val shards hold " + std::to_string(tokens_.size()) +
                               " tokens, but validation reads val_tokens + 1 = " + std::to_string(needed));
  }
}

void PackedValLoader::next(PackedSequence* out) {
  if (calls_taken_ >= num_calls_) {
    throw std::logic_error("validation loader: all " + std::to_string(num_calls_) + " chunks were read; call reset() first");
  }
  const int64_t T = config_.seq_len;
  const int64_t chunk = calls_taken_ * config_.world_size + config_.rank;
  const uint16_t* source = tokens_.data() + chunk * T;
  out->inputs.assign(source, source + T);
  out->targets.assign(source + 1, source + T + 1);
  out->cu_seqlens = cu_seqlens_from_bos(out->inputs.data(), T, config_.cu_seqlens_length,
                                        config_.pattern + " (validation chunk " + std::to_string(chunk) + ")",
                                        &out->num_documents);
  ++calls_taken_;
}

}  // namespace llmc
