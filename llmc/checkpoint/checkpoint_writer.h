// Writing one checkpoint with every rank so that it ends up complete or not at all. Rank 0 writes the
// model file, every rank its optimizer state; the ranks then agree (an all-gather of each rank's outcome)
// before rank 0 writes the manifest that marks the checkpoint complete, and agree again after it. If any
// rank failed (disk full, permission, I/O error), every rank removes what it wrote of this checkpoint and
// throws the same AgreedError naming the failing rank's file and cause: the previous checkpoint is
// untouched, no temporary file remains, and no rank is killed in the middle of a write.
#pragma once
#include <functional>
#include <string>

#include "llmc/base/atomic_file.h"
#include "llmc/dist/rank_group.h"
#include "llmc/checkpoint/state_file.h"

namespace llmc {

// Writes the model file (of whichever model family) to the given path, atomically; returns its size and
// checksum. Called on rank 0 only.
using ModelFileWriter = std::function<WrittenFile(const std::string& path)>;

struct CheckpointContents {
  const ModelFileWriter& write_model;
  const TrainState& state;  // this rank's
};

// Collective: every rank calls it with the same prefix. Throws AgreedError on any rank's failure.
void write_checkpoint_files(const std::string& prefix, const RankGroup& ranks, const CheckpointContents& contents);

}  // namespace llmc
