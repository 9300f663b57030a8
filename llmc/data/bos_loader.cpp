// The BOS-aligned training loader: configuration checks, the background preload of the next shard,
// and the walk through steps and micro-steps (see bos_loader.h).
#include "llmc/data/bos_loader.h"

#include <stdexcept>
#include <utility>

#include "llmc/data/shards.h"
#include "llmc/base/file_io.h"

namespace llmc {
namespace {

std::string position_text(const BosLoaderPosition& p) {
  return "(epoch " + std::to_string(p.epoch) + ", shard " + std::to_string(p.shard) + ", document " +
         std::to_string(p.document) + ", micro-step " + std::to_string(p.micro_step) + ")";
}

void check_config(const BosLoaderConfig& c) {
  const std::string& where = c.pattern;
  if (c.seq_len < 1 || c.seq_len >= INT32_MAX)
    throw FileError(where, "sequence length T = " + std::to_string(c.seq_len) + " must be in 1..2^31-2");
  if (c.max_document_tokens < 1)
    throw FileError(where, "the document cut must be positive, got " + std::to_string(c.max_document_tokens));
  if (c.world_size < 1) throw FileError(where, "world_size must be positive, got " + std::to_string(c.world_size));
  if (c.rank < 0 || c.rank >= c.world_size) {
    throw FileError(where, "rank " + std::to_string(c.rank) + " is outside 0.." + std::to_string(c.world_size - 1));
  }
  if (c.grad_accum < 1) throw FileError(where, "grad_accum must be positive, got " + std::to_string(c.grad_accum));
  if (c.cu_seqlens_length != 0 && c.cu_seqlens_length < 2) {
    throw FileError(where,
                    "cu_seqlens length " + std::to_string(c.cu_seqlens_length) + " must be at least 2 (or 0: default)");
  }
  if (c.vocab_size <= 0) throw FileError(where, "vocab_size must be positive, got " + std::to_string(c.vocab_size));
}

}  // namespace

BosLoader::BosLoader(const BosLoaderConfig& config, const BosLoaderPosition& start)
    : config_(config), max_seq_len_(config.seq_len), position_(start) {
  check_config(config_);
  if (config_.cu_seqlens_length == 0) config_.cu_seqlens_length = default_cu_seqlens_length(config_.seq_len);
  const int64_t step_tokens = int64_t{sequences_per_step()} * (config_.seq_len + 1);
  for (const std::string& path : glob_shards(config_.pattern)) {
    const ShardInfo info = read_shard_header(path);
    if (info.num_tokens < step_tokens) {
      throw FileError(path, "too small for one step: " + std::to_string(info.num_tokens) +
                                " tokens, but world_size * grad_accum * (T+1) = " + std::to_string(step_tokens) +
                                " are needed");
    }
    paths_.push_back(path);
  }
  const auto shards = static_cast<int64_t>(paths_.size());
  if (start.epoch < 0 || start.shard < 0 || start.shard >= shards || start.document < 0 || start.micro_step < 0 ||
      start.micro_step >= config_.grad_accum) {
    throw FileError(config_.pattern, "cannot start at " + position_text(start) + ": there are " +
                                         std::to_string(shards) + " shards and " + std::to_string(config_.grad_accum) +
                                         " micro-steps per step");
  }
  shard_ = read_indexed_shard(paths_[static_cast<size_t>(start.shard)], config_.vocab_size);
  start_preload((start.shard + 1) % shards);
}

BosLoader::~BosLoader() {
  if (preload_.valid()) preload_.wait();  // a load error nobody asked for is dropped with the loader
}

void BosLoader::start_preload(int64_t shard_index) {
  preload_ = std::async(std::launch::async, read_indexed_shard, paths_[static_cast<size_t>(shard_index)],
                        config_.vocab_size);
}

void BosLoader::advance_to_next_shard() {
  const auto shards = static_cast<int64_t>(paths_.size());
  if (!preload_.valid()) start_preload((position_.shard + 1) % shards);  // an earlier get() threw
  shard_ = preload_.get();  // rethrows what went wrong reading it
  if (++position_.shard == shards) {
    position_.shard = 0;
    ++position_.epoch;
  }
  position_.document = 0;
  start_preload((position_.shard + 1) % shards);
}

// Deals the step at position_, moving to the next shard when this one's documents run out.
void BosLoader::deal_current_step() {
  const int sequences = sequences_per_step();
  if (deal_step(shard_, position_.document, config_.seq_len, config_.max_document_tokens, sequences, &step_)) {
    step_dealt_ = true;
    return;
  }
  if (position_.micro_step != 0) {
    throw FileError(shard_.path,
                    "position " + position_text(position_) + " is inside a step that does not fit this shard");
  }
  advance_to_next_shard();
  if (!deal_step(shard_, 0, config_.seq_len, config_.max_document_tokens, sequences, &step_)) {
    throw FileError(shard_.path, "too small for one step: its " + std::to_string(shard_.document_starts.size()) +
                                     " documents, each cut to " + std::to_string(config_.max_document_tokens) +
                                     " tokens, do not fill world_size * grad_accum = " + std::to_string(sequences) +
                                     " sequences of T+1 = " + std::to_string(config_.seq_len + 1) + " tokens");
  }
  step_dealt_ = true;
}

void BosLoader::set_step_shape(int64_t seq_len, int64_t max_document_tokens) {
  if (position_.micro_step != 0)
    throw std::logic_error("BosLoader::set_step_shape inside a step " + position_text(position_));
  if (seq_len < 1 || seq_len > max_seq_len_)
    throw std::invalid_argument("BosLoader: a step of sequences of " + std::to_string(seq_len) + " tokens outside [1, " +
                                std::to_string(max_seq_len_) + "] (the loader's T)");
  if (max_document_tokens < 1)
    throw std::invalid_argument("BosLoader: the document cut must be positive, got " +
                                std::to_string(max_document_tokens));
  config_.seq_len = seq_len;
  config_.max_document_tokens = max_document_tokens;
  step_dealt_ = false;
}

void BosLoader::next(PackedSequence* out) {
  if (!step_dealt_) deal_current_step();
  const auto sequence = static_cast<size_t>(position_.micro_step * config_.world_size + config_.rank);
  pack_sequence(shard_, step_.sequences[sequence], config_.seq_len, config_.cu_seqlens_length, shard_.path, out);
  if (++position_.micro_step == config_.grad_accum) {
    position_.micro_step = 0;
    position_.document = step_.next_document;
    step_dealt_ = false;
  }
}

}  // namespace llmc
