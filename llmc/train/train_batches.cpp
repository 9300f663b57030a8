// The trainer's two sources of training micro-batches and the choice between them (see train_batches.h).
#include "llmc/train/train_batches.h"

#include <algorithm>
#include <stdexcept>

#include "llmc/data/document_packing.h"
#include "llmc/base/file_io.h"

namespace llmc {
namespace {

DataLoaderConfig window_config(const TrainBatchesConfig& c) {
  DataLoaderConfig config;
  config.pattern = c.pattern;
  config.batch_size = c.batch_size;
  config.seq_len = c.seq_len;
  config.rank = c.rank;
  config.world_size = c.world_size;
  config.vocab_size = c.vocab_size;
  config.shuffle = c.shuffle;
  config.seed = c.seed;
  config.prefetch = true;
  return config;
}

// Each of the B rows of a micro-step is one call of the loader: B times the micro-steps.
BosLoaderConfig bos_config(const TrainBatchesConfig& c) {
  if (c.batch_size < 1 || c.grad_accum < 1 || c.batch_size * c.grad_accum > INT32_MAX)
    throw std::invalid_argument("BOS loader: B = " + std::to_string(c.batch_size) + " and " +
                                std::to_string(c.grad_accum) + " micro-steps do not make a step");
  BosLoaderConfig config;
  config.pattern = c.pattern;
  config.seq_len = c.seq_len;
  config.world_size = c.world_size;
  config.rank = c.rank;
  config.grad_accum = static_cast<int>(c.batch_size * c.grad_accum);
  config.vocab_size = c.vocab_size;
  return config;  // max_document_tokens: the record's 2,048; cu_seqlens_length: the default
}

std::string step_split(int64_t world_size, int64_t grad_accum, int64_t batch_size) {
  return std::to_string(world_size * grad_accum * batch_size) + " (" + std::to_string(world_size) + " ranks x " +
         std::to_string(grad_accum) + " micro-steps x B=" + std::to_string(batch_size) + ")";
}

}  // namespace

DataLoaderPosition resumed_position(const TrainStateHeader& written, const DataLoader& loader) {
  const DataLoaderPosition& at = written.train_position;
  const int64_t tokens_per_batch = written.world_size * written.batch_size * written.seq_len;  // < 2^60 (checked)
  if (at.batch_in_shard > INT64_MAX / tokens_per_batch)
    throw std::runtime_error("checkpoint: data position batch " + std::to_string(at.batch_in_shard) +
                             " is beyond any shard");
  const int64_t tokens_into_shard = at.batch_in_shard * tokens_per_batch;
  return loader.position_at_tokens(at.epoch, at.shard_order_index, tokens_into_shard);
}

WindowBatches::WindowBatches(const TrainBatchesConfig& config)
    : loader_(window_config(config)), step_seq_len_(config.seq_len) {}

void WindowBatches::next_batch(int32_t* inputs, int32_t* targets) {
  const int64_t T = loader_.config().seq_len, B = loader_.config().batch_size;
  if (step_seq_len_ == T) return loader_.next_batch(inputs, targets);
  window_inputs_.resize(static_cast<size_t>(B * T));
  window_targets_.resize(static_cast<size_t>(B * T));
  loader_.next_batch(window_inputs_.data(), window_targets_.data());
  for (int64_t row = 0; row < B; row++) {
    std::copy_n(window_inputs_.begin() + row * T, step_seq_len_, inputs + row * step_seq_len_);
    std::copy_n(window_targets_.begin() + row * T, step_seq_len_, targets + row * step_seq_len_);
  }
}

void WindowBatches::set_step_shape(int64_t seq_len, int64_t max_document_tokens) {
  (void)max_document_tokens;
  if (seq_len < 1 || seq_len > loader_.config().seq_len)
    throw std::invalid_argument("window loader: a step of " + std::to_string(seq_len) + " tokens outside [1, " +
                                std::to_string(loader_.config().seq_len) + "] (--seq-len)");
  step_seq_len_ = seq_len;
}

void WindowBatches::save_position(TrainStateHeader& state) const {
  state.train_loader = TrainLoaderKind::kWindow;
  state.train_position = loader_.position();
}

void WindowBatches::resume(const TrainStateHeader& written, const std::string& where) {
  try {
    loader_.seek(resumed_position(written, loader_));
  } catch (const FileError&) {
    throw;
  } catch (const std::runtime_error& error) {
    throw FileError(where, error.what());
  }
}

std::string WindowBatches::describe() const {
  return std::string("window (") + (loader_.config().shuffle ? "shuffled" : "in order") + ")";
}

BosBatches::BosBatches(const TrainBatchesConfig& config, const BosLoaderPosition& start)
    : loader_config_(bos_config(config)),
      batch_size_(config.batch_size),
      loader_(std::make_unique<BosLoader>(loader_config_, start)) {}

void BosBatches::next_batch(int32_t* inputs, int32_t* targets) {
  const auto T = static_cast<size_t>(loader_->config().seq_len);
  for (int64_t row = 0; row < batch_size_; row++) {
    loader_->next(&sequence_);
    std::copy(sequence_.inputs.begin(), sequence_.inputs.end(), inputs + row * T);
    std::copy(sequence_.targets.begin(), sequence_.targets.end(), targets + row * T);
  }
}

void BosBatches::set_step_shape(int64_t seq_len, int64_t max_document_tokens) {
  loader_->set_step_shape(seq_len, max_document_tokens);
}

void BosBatches::save_position(TrainStateHeader& state) const {
  state.train_loader = TrainLoaderKind::kBos;
  state.bos_position = loader_->position();
}

void BosBatches::resume(const TrainStateHeader& written, const std::string& where) {
  const int64_t written_sequences = written.world_size * written.grad_accum * written.batch_size;
  if (written_sequences != sequences_per_step() || written.seq_len != loader_config_.seq_len) {
    const int64_t grad_accum = loader_config_.grad_accum / batch_size_;
    throw FileError(where, "its BOS loader position counts steps of " +
                               step_split(written.world_size, written.grad_accum, written.batch_size) +
                               " sequences of T=" + std::to_string(written.seq_len) + ", this run deals " +
                               step_split(loader_config_.world_size, grad_accum, batch_size_) + " of T=" +
                               std::to_string(loader_config_.seq_len) +
                               ": resume with the same tokens per step (--total-batch-tokens) and --seq-len");
  }
  loader_ = std::make_unique<BosLoader>(loader_config_, written.bos_position);  // its errors name the shards
}

std::string BosBatches::describe() const {
  return "bos (documents cut to " + std::to_string(loader_config_.max_document_tokens) + " tokens, " +
         "sequences/step=" + std::to_string(sequences_per_step()) + ")";
}

TrainLoaderKind choose_train_loader(TrainLoaderChoice option, bool family_trains_on_documents, int vocab_size,
                                    bool shuffle) {
  const bool holds_bos = vocab_size > kBosToken;
  TrainLoaderKind kind = TrainLoaderKind::kWindow;
  if (option == TrainLoaderChoice::kBos) {
    if (!holds_bos)
      throw std::invalid_argument("--train-loader bos: the model's vocabulary (" + std::to_string(vocab_size) +
                                  " tokens) has no BOS token " + std::to_string(kBosToken) +
                                  " to find documents by; use --train-loader window");
    kind = TrainLoaderKind::kBos;
  } else if (option == TrainLoaderChoice::kAuto) {
    kind = family_trains_on_documents && holds_bos ? TrainLoaderKind::kBos : TrainLoaderKind::kWindow;
  }
  if (kind == TrainLoaderKind::kBos && shuffle)
    throw std::invalid_argument(std::string("--shuffle cannot be used with --train-loader bos") +
                                (option == TrainLoaderChoice::kAuto ? " (auto's choice for a speedrun model)" : "") +
                                ": the BOS loader walks the shards in order; drop --shuffle or pass "
                                "--train-loader window");
  return kind;
}

std::unique_ptr<TrainBatches> make_train_batches(TrainLoaderKind kind, const TrainBatchesConfig& config) {
  if (kind == TrainLoaderKind::kBos) return std::make_unique<BosBatches>(config);
  return std::make_unique<WindowBatches>(config);
}

}  // namespace llmc
