// What a resumed run starts from: the checkpoint's manifest (its files complete, their sizes and
// checksums as written), this rank's optimizer shards -- from its own state file when the checkpoint was
// written by as many ranks as this run has, re-sharded from the files of all ranks otherwise
// (llmc/checkpoint/reshard.h; the speedrun optimizer's by llmc/optim/speedrun_state_plan.h) -- and where the
// data loader continues.
#pragma once
#include <string>
#include <vector>

#include "llmc/data/dataloader.h"
#include "llmc/family/param_layout.h"
#include "llmc/checkpoint/state_file.h"

namespace llmc {

struct ResumePoint {
  TrainStateHeader written;  // the state as the writing rank saw it (step, train time, its B, T, ranks, position)
  std::vector<float> master, adam_m, adam_v;  // zero-adamw: this rank's shards under this run's layout
  std::vector<NamedStateArray> arrays;        // speedrun: this rank's arrays as written (same world size)
  std::vector<std::vector<NamedStateArray>> old_rank_arrays;  // speedrun, another world size: every old rank's
};

// Reads checkpoint `prefix` for rank `rank` of a run laid out as `layout` (its world size and model, of
// any family) whose model describe_state_model() calls `model`. Every file is checked against the
// manifest (size and checksum) and its own checksum (a speedrun model file, which has none, is hashed
// whole); with another number of ranks each old state file is read whole by one rank (old rank r by
// rank r % M) to verify it, and in pieces by the ranks that need its elements; a speedrun state written by
// another number of ranks is read whole by every rank (old_rank_arrays: SpeedrunOptimizer re-shards it).
// Throws FileError naming the file and the problem: no manifest (incomplete checkpoint), a missing,
// truncated, corrupt or swapped file, a state for another model, of another optimizer than `optimizer` or
// of another training loader than `loader`.
ResumePoint read_resume_point(const std::string& prefix, int rank, const ParamLayout& layout,
                              const std::string& model, StateOptimizer optimizer = StateOptimizer::kZeroAdamW,
                              TrainLoaderKind loader = TrainLoaderKind::kWindow);

// Where `loader` continues after the checkpoint: the same place in the data in tokens. The checkpoint's
// position counts batches of (its ranks x its B x its T) tokens into a shard; the resumed run starts at
// its first batch that begins at or after that token (the next shard if none is left in this one). With
// the same global batch this is exactly where the writer stopped; otherwise less than one of this
// run's batches is skipped, and nothing is seen twice.
DataLoaderPosition resumed_position(const TrainStateHeader& written, const DataLoader& loader);

}  // namespace llmc
