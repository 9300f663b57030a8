// A run's checkpoint as one unit, the entry point of llmc/checkpoint/: save_checkpoint writes it with
// every rank, complete or not at all, and CheckpointReader opens it for one rank of a run on any number of
// ranks. A checkpoint is PREFIX_model.bin (the model, in its family's format), one state file per rank
// (state_file.h: the loop's position and the optimizer's named arrays) and PREFIX_manifest.json, written
// last (manifest.h, checkpoint_dir.h). Which arrays a rank needs from which old rank, when the world size
// changed, is the optimizer's business (llmc/optim/bucket_optimizer.h): this folder knows files, not owners.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "llmc/base/atomic_file.h"
#include "llmc/base/checksum.h"
#include "llmc/checkpoint/manifest.h"
#include "llmc/checkpoint/state_file.h"
#include "llmc/dist/rank_group.h"

namespace llmc {

// ---- saving -------------------------------------------------------------------------------------------

// Writes the model file (of whichever model family) to the given path, atomically; returns its size and
// checksum. Called on rank 0 only.
using ModelFileWriter = std::function<WrittenFile(const std::string& path)>;

struct CheckpointContents {
  const ModelFileWriter& write_model;
  const TrainState& state;  // this rank's
};

// Collective: every rank calls it with the same prefix. Rank 0 writes the model file, every rank its state;
// the ranks then agree (an all-gather of each rank's outcome) before rank 0 writes the manifest that marks
// the checkpoint complete, and agree again after it. If any rank failed (disk full, permission, I/O error),
// every rank removes what it wrote of this checkpoint and throws the same AgreedError naming the failing
// rank's file and cause: the previous checkpoint is untouched and no temporary file remains.
void save_checkpoint(const std::string& prefix, const RankGroup& ranks, const CheckpointContents& contents);

// ---- loading on N ranks -------------------------------------------------------------------------------

// What the resuming run is, for the checks: its model as its family records it in state files (and how
// to name a recorded one in a message), how its family's model file records its size and checksum, its
// optimizer and its training loader.
struct ResumeExpectations {
  StateModel model;
  std::function<std::string(const StateModel&)> describe_model;
  std::function<FileDigest(const std::string& model_path)> model_file_digest;
  StateOptimizer optimizer = StateOptimizer::kZeroAdamW;
  TrainLoaderKind loader = TrainLoaderKind::kWindow;
};

// Checkpoint `prefix` opened for rank `rank` of a run of `world_size` ranks, written by the same or another
// number of ranks. Opening checks the manifest (present: the checkpoint is complete), the model file and
// every old rank's state header against it (size and stored checksum) and against the expectations (the
// model, the optimizer, the loader); with another world size, this rank also reads whole and verifies the
// old state files r, r + world_size, ... (each old file verified by exactly one rank), so that the pieces
// read_elements reads were all verified. Throws FileError naming the file and the problem: no manifest
// (incomplete checkpoint), a missing, truncated, corrupt or swapped file, a state for another model, of
// another optimizer or of another training loader.
class CheckpointReader {
 public:
  CheckpointReader(std::string prefix, int rank, int world_size, const ResumeExpectations& expected);

  const std::string& prefix() const { return prefix_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int old_world_size() const { return static_cast<int>(headers_.size()); }
  // What the old rank wrote: its step, train time, loader position, B, T, ranks. written() is rank 0's.
  const TrainStateHeader& header(int old_rank) const { return headers_.at(static_cast<size_t>(old_rank)); }
  const TrainStateHeader& written() const { return headers_.front(); }
  std::string state_path(int old_rank) const;
  // The optimizer's arrays of old rank `old_rank`'s state file, read whole (its checksum verified): every array
  // but the model's (model_arrays).
  std::vector<NamedStateArray> arrays(int old_rank) const;
  // The model's own arrays of that file (names starting with kModelStatePrefix; TrainableModel::save_model_state).
  std::vector<NamedStateArray> model_arrays(int old_rank) const;
  // The element count of old rank `old_rank`'s array `name` (FileError if it has none).
  int64_t array_elements(int old_rank, const std::string& name) const;
  // `count` elements of old rank `old_rank`'s array `name` from element `first` on, into `out`.
  void read_elements(int old_rank, const std::string& name, int64_t first, int64_t count, void* out) const;

 private:
  std::string prefix_;
  int rank_, world_size_;
  CheckpointManifest manifest_;
  std::vector<TrainStateHeader> headers_;  // by old rank
};

}  // namespace llmc
