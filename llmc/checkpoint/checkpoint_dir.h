// Where a run's checkpoints live and which of them are complete. Checkpoint PREFIX = DIR/ckpt_SSSSSS is
// the files PREFIX_model.bin (llm.c model file), PREFIX_state_rankR.bin (one per rank) and
// PREFIX_manifest.json, written last: a checkpoint is complete exactly when its manifest exists. Here:
// the names, the listing, the newest complete checkpoint (--resume latest) and the deletion of old ones
// (--keep-checkpoints).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace llmc {

std::string checkpoint_model_path(const std::string& prefix);
std::string checkpoint_state_path(const std::string& prefix, int rank);
std::string checkpoint_manifest_path(const std::string& prefix);
// PREFIX for step `step` in `dir`: DIR/ckpt_000100.
std::string checkpoint_prefix(const std::string& dir, int64_t step);

struct CheckpointEntry {
  int64_t step;
  std::string prefix;
  bool complete;  // its manifest exists
};
// Every checkpoint in `dir` that has at least one file (complete or not), by increasing step; none
// for a directory that does not exist.
std::vector<CheckpointEntry> list_checkpoints(const std::string& dir);

// The newest complete checkpoint prefix in `dir`, or "" if there is none.
std::string latest_checkpoint_prefix(const std::string& dir);
// The checkpoint prefix --resume names: `resume` itself, or for "latest" the newest complete
// checkpoint in `output_dir` ("" when there is none: the run starts fresh).
std::string resume_prefix(const std::string& resume, const std::string& output_dir);

// Removes the files of checkpoint `prefix` (manifest first, so that it never names missing files).
// Returns "<path>: <cause>" for each file that exists but could not be removed.
std::vector<std::string> remove_checkpoint(const std::string& prefix);

// Keeps the newest `keep` complete checkpoints of `dir` and removes every checkpoint (complete or not)
// older than the oldest of them; keep <= 0 keeps everything. Returns the problems, as remove_checkpoint.
std::vector<std::string> prune_checkpoints(const std::string& dir, int keep);

}  // namespace llmc
