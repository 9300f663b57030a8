// Reading and writing the per-rank optimizer/loop state of a checkpoint (see state.h).
#include "llmc/train/state.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "llmc/atomic_file.h"
#include "llmc/file_io.h"

namespace llmc {

namespace {
constexpr int kHeaderWords = 32;

// The words of the state file's header.
enum HeaderField {
  kMagic, kVersion, kStep, kRank, kWorldSize, kMaxSeqLen, kVocab, kPaddedVocab, kLayers, kHeads, kChannels,
  kEpoch, kShardOrderIndex, kBatchInShard, kTrainTimeMicros, kShardElements,
  // The speedrun family (all 0 for GPT-2 and in older files).
  kFamily, kSpeedrunVocab, kSpeedrunBlocks, kSpeedrunHeads, kSpeedrunHeadDim, kSpeedrunMaxSeqLen, kSpeedrunWindowBlock,
};

}  // namespace

std::string checkpoint_model_path(const std::string& prefix) { return prefix + "_model.bin"; }
std::string checkpoint_state_path(const std::string& prefix, int rank) {
  return prefix + "_state_rank" + std::to_string(rank) + ".bin";
}
std::string checkpoint_prefix(const std::string& dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "ckpt_%06lld", static_cast<long long>(step));
  return dir + "/" + name;
}

std::string latest_checkpoint_prefix(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> listing(::opendir(dir.c_str()), ::closedir);
  if (!listing) return "";
  const std::string head = "ckpt_", tail = "_model.bin";
  long long best_step = -1;
  while (const dirent* entry = ::readdir(listing.get())) {
    const std::string name = entry->d_name;
    if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
        name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
      continue;
    const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const long long step = std::stoll(digits);
    const std::string prefix = dir + "/" + name.substr(0, name.size() - tail.size());
    if (step > best_step && is_regular_file(checkpoint_state_path(prefix, 0))) best_step = step;
  }
  return best_step < 0 ? "" : checkpoint_prefix(dir, best_step);
}

void write_train_state(const std::string& path, const TrainState& s) {
  if (s.adam_m.size() != s.master.size() || s.adam_v.size() != s.master.size())
    throw std::invalid_argument(path + ": optimizer state arrays differ in size");
  int64_t header[kHeaderWords] = {0};
  header[kMagic] = kTrainStateMagic;
  header[kVersion] = kTrainStateVersion;
  header[kStep] = s.step;
  header[kRank] = s.rank;
  header[kWorldSize] = s.world_size;
  header[kMaxSeqLen] = s.config.max_seq_len;
  header[kVocab] = s.config.vocab_size;
  header[kPaddedVocab] = s.config.padded_vocab_size;
  header[kLayers] = s.config.num_layers;
  header[kHeads] = s.config.num_heads;
  header[kChannels] = s.config.channels;
  header[kEpoch] = s.train_position.epoch;
  header[kShardOrderIndex] = s.train_position.shard_order_index;
  header[kBatchInShard] = s.train_position.batch_in_shard;
  header[kTrainTimeMicros] = static_cast<int64_t>(s.train_time_ms * 1000.0);
  header[kShardElements] = static_cast<int64_t>(s.master.size());
  header[kFamily] = static_cast<int64_t>(s.family);
  header[kSpeedrunVocab] = s.speedrun.vocab_size;
  header[kSpeedrunBlocks] = s.speedrun.num_blocks;
  header[kSpeedrunHeads] = s.speedrun.num_heads;
  header[kSpeedrunHeadDim] = s.speedrun.head_dim;
  header[kSpeedrunMaxSeqLen] = s.speedrun.max_seq_len;
  header[kSpeedrunWindowBlock] = s.speedrun.window_block;
  AtomicFileWriter out(path);
  out.write(header, sizeof header);
  for (const std::vector<float>* array : {&s.master, &s.adam_m, &s.adam_v})
    out.write(array->data(), array->size() * sizeof(float));
  out.commit();
}

std::string resume_prefix(const std::string& resume, const std::string& output_dir) {
  return resume == "latest" ? latest_checkpoint_prefix(output_dir) : resume;
}

std::string describe_state_model(const TrainState& state) {
  return state.family == ModelFamilyId::kSpeedrun ? "speedrun " + describe_speedrun_config(state.speedrun)
                                                  : describe_config(state.config);
}

TrainState read_resume_state(const std::string& prefix, int rank, int world_size, const std::string& model) {
  const std::string path = checkpoint_state_path(prefix, rank);
  // A checkpoint of another world size has more or fewer state files: say so on whichever rank notices
  // first, rather than "cannot open" on one rank and a world-size mismatch on another.
  const std::string ranks_hint = " than this run's " + std::to_string(world_size) +
                                 " (resharding is not supported: resume with the same number of ranks)";
  if (!is_regular_file(path)) throw FileError(path, "missing: the checkpoint was written by fewer ranks" + ranks_hint);
  const std::string beyond = checkpoint_state_path(prefix, world_size);
  if (is_regular_file(beyond)) throw FileError(beyond, "exists: the checkpoint was written by more ranks" + ranks_hint);
  TrainState state = read_train_state(path);
  if (state.world_size != world_size)
    throw FileError(path, "checkpoint was written by " + std::to_string(state.world_size) + " ranks, this run has " +
                              std::to_string(world_size) +
                              " (resharding is not supported: resume with the same number of ranks)");
  if (describe_state_model(state) != model)
    throw FileError(path, "optimizer state is for " + describe_state_model(state) + ", the model file is " + model);
  return state;
}

TrainState read_train_state(const std::string& path) {
  const FileHandle in = open_file(path, "rb", "optimizer state");
  int64_t header[kHeaderWords];
  if (std::fread(header, sizeof header, 1, in.get()) != 1)
    throw FileError(path, "file is shorter than the optimizer-state header");
  if (header[kMagic] != kTrainStateMagic) throw FileError(path, "not an optimizer-state file (wrong magic)");
  if (header[kVersion] != kTrainStateVersion)
    throw FileError(path, "unsupported optimizer-state version " + std::to_string(header[kVersion]));
  TrainState s;
  s.step = header[kStep];
  s.rank = static_cast<int>(header[kRank]);
  s.world_size = static_cast<int>(header[kWorldSize]);
  s.config = GPT2Config{static_cast<int>(header[kMaxSeqLen]), static_cast<int>(header[kVocab]),
                        static_cast<int>(header[kPaddedVocab]), static_cast<int>(header[kLayers]),
                        static_cast<int>(header[kHeads]), static_cast<int>(header[kChannels])};
  if (header[kFamily] != static_cast<int64_t>(ModelFamilyId::kGPT2) &&
      header[kFamily] != static_cast<int64_t>(ModelFamilyId::kSpeedrun))
    throw FileError(path, "unknown model family " + std::to_string(header[kFamily]) + " in the optimizer state");
  s.family = static_cast<ModelFamilyId>(header[kFamily]);
  s.speedrun.vocab_size = static_cast<int>(header[kSpeedrunVocab]);
  s.speedrun.num_blocks = static_cast<int>(header[kSpeedrunBlocks]);
  s.speedrun.num_heads = static_cast<int>(header[kSpeedrunHeads]);
  s.speedrun.head_dim = static_cast<int>(header[kSpeedrunHeadDim]);
  s.speedrun.max_seq_len = static_cast<int>(header[kSpeedrunMaxSeqLen]);
  s.speedrun.window_block = static_cast<int>(header[kSpeedrunWindowBlock]);
  s.train_position = DataLoaderPosition{header[kEpoch], header[kShardOrderIndex], header[kBatchInShard]};
  s.train_time_ms = header[kTrainTimeMicros] / 1000.0;
  const int64_t elements = header[kShardElements];
  struct stat info;
  if (::fstat(fileno(in.get()), &info) != 0) throw_errno_file_error(path, "cannot stat");
  const int64_t expected_bytes =
      static_cast<int64_t>(sizeof header) + 3 * elements * static_cast<int64_t>(sizeof(float));
  if (elements < 0 || info.st_size != expected_bytes)
    throw FileError(path, "file has " + std::to_string(info.st_size) + " bytes, the header promises " +
                    std::to_string(expected_bytes) + " (truncated or corrupt)");
  for (std::vector<float>* array : {&s.master, &s.adam_m, &s.adam_v}) {
    array->resize(static_cast<size_t>(elements));
    if (elements > 0 && std::fread(array->data(), sizeof(float), array->size(), in.get()) != array->size())
      throw FileError(path, "read failed");
  }
  return s;
}

}  // namespace llmc
