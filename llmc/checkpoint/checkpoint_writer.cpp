// The all-or-nothing checkpoint write (see checkpoint.h).

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "llmc/checkpoint/checkpoint.h"
#include "llmc/checkpoint/checkpoint_dir.h"

namespace llmc {

namespace {

// One rank's outcome, gathered by every rank (a fixed-size record, so one all-gather carries it).
struct Outcome {
  int32_t failed = 0;
  uint64_t model_bytes = 0, model_checksum = 0;  // rank 0 only
  uint64_t state_bytes = 0, state_checksum = 0;
  char error[480] = {};  // the failure's message, cut to fit
};

std::vector<Outcome> gather(const RankGroup& ranks, const Outcome& mine) {
  std::vector<Outcome> all(static_cast<size_t>(ranks.world_size()));
  ranks.all_gather_bytes(&mine, sizeof mine, all.data());
  return all;
}

// Throws the lowest failing rank's error on every rank, after each removed its files of `prefix`.
void stop_if_any_failed(const std::string& prefix, const RankGroup& ranks, const std::vector<Outcome>& outcomes) {
  const auto failed = std::find_if(outcomes.begin(), outcomes.end(), [](const Outcome& o) { return o.failed != 0; });
  if (failed == outcomes.end()) return;
  if (ranks.rank() == 0) {
    remove_checkpoint(prefix);  // best effort: what cannot be removed is no complete checkpoint anyway
  } else {
    std::remove(checkpoint_state_path(prefix, ranks.rank()).c_str());
  }
  const int failing_rank = static_cast<int>(failed - outcomes.begin());
  throw AgreedError(failing_rank, std::string(failed->error, strnlen(failed->error, sizeof failed->error)));
}

void record_failure(Outcome& outcome, const char* message) {
  outcome.failed = 1;
  std::strncpy(outcome.error, message, sizeof outcome.error - 1);
}

CheckpointManifest make_manifest(const std::string& prefix, int64_t step, const std::vector<Outcome>& outcomes) {
  auto name = [](const std::string& path) { return path.substr(path.find_last_of('/') + 1); };
  CheckpointManifest manifest;
  manifest.step = step;
  manifest.world_size = static_cast<int>(outcomes.size());
  manifest.files.push_back(
      ManifestFile{name(checkpoint_model_path(prefix)), outcomes[0].model_bytes, outcomes[0].model_checksum});
  for (size_t r = 0; r < outcomes.size(); r++)
    manifest.files.push_back(ManifestFile{name(checkpoint_state_path(prefix, static_cast<int>(r))),
                                          outcomes[r].state_bytes, outcomes[r].state_checksum});
  return manifest;
}

}  // namespace

void save_checkpoint(const std::string& prefix, const RankGroup& ranks, const CheckpointContents& contents) {
  // A checkpoint of this step may exist from an earlier run: it stops being complete before any of its
  // files is replaced.
  if (ranks.rank() == 0) std::remove(checkpoint_manifest_path(prefix).c_str());
  ranks.barrier();
  Outcome mine;
  try {
    if (ranks.rank() == 0) {
      const WrittenFile model = contents.write_model(checkpoint_model_path(prefix));
      mine.model_bytes = model.bytes;
      mine.model_checksum = model.checksum;
    }
    const WrittenFile state = write_train_state(checkpoint_state_path(prefix, ranks.rank()), contents.state);
    mine.state_bytes = state.bytes;
    mine.state_checksum = state.checksum;
  } catch (const std::exception& error) {
    record_failure(mine, error.what());
  }
  const std::vector<Outcome> outcomes = gather(ranks, mine);
  stop_if_any_failed(prefix, ranks, outcomes);
  Outcome manifest_outcome;
  if (ranks.rank() == 0) {
    try {
      write_manifest(checkpoint_manifest_path(prefix), make_manifest(prefix, contents.state.step, outcomes));
    } catch (const std::exception& error) {
      record_failure(manifest_outcome, error.what());
    }
  }
  stop_if_any_failed(prefix, ranks, gather(ranks, manifest_outcome));
}

}  // namespace llmc
