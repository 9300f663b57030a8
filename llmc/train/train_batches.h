// The trainer's training micro-batches (--train-loader): one interface over llm.c's fixed windows
// (llmc/data/dataloader.h) and the speedrun's BOS-aligned documents (llmc/data/bos_loader.h), each
// filling B*T inputs and targets per micro-step and saving its place in a checkpoint's state header so
// that a resumed run continues bit for bit (docs/bos_loader.md "In the trainer").
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "llmc/base/enum_names.h"
#include "llmc/data/bos_loader.h"
#include "llmc/data/dataloader.h"
#include "llmc/checkpoint/state_file.h"

namespace llmc {

struct TrainBatchesConfig {
  std::string pattern;     // shell glob of the train shards
  int64_t batch_size = 1;  // B: sequences per rank and micro-step
  int64_t seq_len = 0;     // T (set by the caller)
  int rank = 0;
  int world_size = 1;
  int grad_accum = 1;      // micro-steps per optimizer step
  int vocab_size = 50257;
  bool shuffle = false;    // window only
  uint64_t seed = 0;       // of the shuffle
};

class TrainBatches {
 public:
  virtual ~TrainBatches() = default;
  virtual TrainLoaderKind kind() const = 0;
  // This rank's next micro-batch: B*T inputs and the B*T targets (each the token after its input), T the step's
  // sequence length (set_step_shape; --seq-len until then).
  virtual void next_batch(int32_t* inputs, int32_t* targets) = 0;
  // From the next step on, sequences of seq_len tokens (at most --seq-len) of documents cut to
  // max_document_tokens (--batch-schedule). At a step boundary; the saved position does not depend on it.
  virtual void set_step_shape(int64_t seq_len, int64_t max_document_tokens) = 0;
  // The kind and the position of the next micro-batch, into a state about to be saved.
  virtual void save_position(TrainStateHeader& state) const = 0;
  // Continues where the writer of `written` (a state of this kind) stopped. Throws FileError naming
  // `where` when this run cannot continue that position.
  virtual void resume(const TrainStateHeader& written, const std::string& where) = 0;
  // For the log header: "window" or "bos (documents cut to 2048 tokens, 8 sequences per step)".
  virtual std::string describe() const = 0;
};

// Where `loader` continues after a checkpoint: the same place in the data in tokens. The checkpoint's
// position counts batches of (its ranks x its B x its T) tokens into a shard; the resumed run starts at
// its first batch that begins at or after that token (the next shard if none is left in this one). With
// the same global batch this is exactly where the writer stopped; otherwise less than one of this run's
// batches is skipped, and nothing is seen twice.
DataLoaderPosition resumed_position(const TrainStateHeader& written, const DataLoader& loader);

// llm.c's loader: rank r takes windows r*B .. r*B+B-1 of each global batch (with a background prefetch).
// A checkpoint of another world_size*B*T continues at the same token (resumed_position).
class WindowBatches final : public TrainBatches {
 public:
  explicit WindowBatches(const TrainBatchesConfig& config);
  TrainLoaderKind kind() const override { return TrainLoaderKind::kWindow; }
  void next_batch(int32_t* inputs, int32_t* targets) override;
  // The windows stay --seq-len long (their positions are the checkpoint's); a step of fewer tokens trains on the
  // first seq_len of each. No documents: the cut is not used.
  void set_step_shape(int64_t seq_len, int64_t max_document_tokens) override;
  void save_position(TrainStateHeader& state) const override;
  void resume(const TrainStateHeader& written, const std::string& where) override;
  std::string describe() const override;

 private:
  DataLoader loader_;
  int64_t step_seq_len_;
  std::vector<int32_t> window_inputs_, window_targets_;  // whole windows, for steps of fewer tokens
};

// The speedrun's loader with B rows per micro-step: a BosLoader dealing world_size * grad_accum * B
// sequences per step, called B times per micro-step, so that rank r's micro-step k, row b is sequence
// (k*B + b) * world_size + r of the step. Which sequences a step trains on therefore depends only on
// world_size * grad_accum * B, not on how it splits into ranks, micro-steps and rows; a position saved at
// a step boundary continues on any split with the same product (and T), and is refused otherwise.
class BosBatches final : public TrainBatches {
 public:
  explicit BosBatches(const TrainBatchesConfig& config, const BosLoaderPosition& start = BosLoaderPosition{});
  TrainLoaderKind kind() const override { return TrainLoaderKind::kBos; }
  void next_batch(int32_t* inputs, int32_t* targets) override;
  void set_step_shape(int64_t seq_len, int64_t max_document_tokens) override;  // BosLoader::set_step_shape
  void save_position(TrainStateHeader& state) const override;
  void resume(const TrainStateHeader& written, const std::string& where) override;
  std::string describe() const override;
  int64_t sequences_per_step() const { return loader_->sequences_per_step(); }
  BosLoaderPosition position() const { return loader_->position(); }

 private:
  BosLoaderConfig loader_config_;
  int64_t batch_size_;
  std::unique_ptr<BosLoader> loader_;  // replaced by resume()
  PackedSequence sequence_;
};

// --train-loader `option` (auto, window, bos) for a model with `vocab_size` tokens of a family that does or
// does not train on documents (ModelFamily::trains_on_documents): auto is bos for such a family (the
// speedrun model) when the vocabulary holds the BOS token it finds documents by, window otherwise (GPT-2:
// llm.c's behaviour; the speedrun-tiny test preset, V = 96). Throws std::invalid_argument naming the
// options: bos for a vocabulary without the BOS token, bos (chosen or auto's) with --shuffle.
enum class TrainLoaderChoice { kAuto, kWindow, kBos };
inline constexpr EnumName<TrainLoaderChoice> kTrainLoaderChoiceNames[] = {
    {TrainLoaderChoice::kAuto, "auto"}, {TrainLoaderChoice::kWindow, "window"}, {TrainLoaderChoice::kBos, "bos"}};
TrainLoaderKind choose_train_loader(TrainLoaderChoice option, bool family_trains_on_documents, int vocab_size,
                                    bool shuffle);

std::unique_ptr<TrainBatches> make_train_batches(TrainLoaderKind kind, const TrainBatchesConfig& config);

}  // namespace llmc
