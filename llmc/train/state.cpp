// Reading and writing the per-rank optimizer/loop state of a checkpoint (see train_state.h).
#include "llmc/train/state.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

#include "llmc/atomic_file.h"

namespace llmc {

namespace {
constexpr int kHeaderWords = 32;

enum HeaderField {
  kMagic, kVersion, kStep, kRank, kWorldSize, kMaxSeqLen, kVocab, kPaddedVocab, kLayers, kHeads, kChannels,
  kEpoch, kShardOrderIndex, kBatchInShard, kTrainTimeMicros, kShardElements,
};

bool file_exists(const std::string& path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}
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
    if (step > best_step && file_exists(checkpoint_state_path(prefix, 0))) best_step = step;
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
  AtomicFileWriter out(path);
  out.write(header, sizeof header);
  for (const std::vector<float>* array : {&s.master, &s.adam_m, &s.adam_v})
    out.write(array->data(), array->size() * sizeof(float));
  out.commit();
}

TrainState read_train_state(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!in) throw std::runtime_error(path + ": cannot open optimizer state: " + std::strerror(errno));
  int64_t header[kHeaderWords];
  if (std::fread(header, sizeof header, 1, in.get()) != 1)
    throw std::runtime_error(path + ": file is shorter than the optimizer-state header");
  if (header[kMagic] != kTrainStateMagic) throw std::runtime_error(path + ": not an optimizer-state file (wrong magic)");
  if (header[kVersion] != kTrainStateVersion)
    throw std::runtime_error(path + ": unsupported optimizer-state version " + std::to_string(header[kVersion]));
  TrainState s;
  s.step = header[kStep];
  s.rank = static_cast<int>(header[kRank]);
  s.world_size = static_cast<int>(header[kWorldSize]);
  s.config = GPT2Config{static_cast<int>(header[kMaxSeqLen]), static_cast<int>(header[kVocab]),
                        static_cast<int>(header[kPaddedVocab]), static_cast<int>(header[kLayers]),
                        static_cast<int>(header[kHeads]), static_cast<int>(header[kChannels])};
  s.train_position = DataLoaderPosition{header[kEpoch], header[kShardOrderIndex], header[kBatchInShard]};
  s.train_time_ms = header[kTrainTimeMicros] / 1000.0;
  const int64_t elements = header[kShardElements];
  struct stat info;
  if (::fstat(fileno(in.get()), &info) != 0) throw std::runtime_error(path + ": cannot stat: " + std::strerror(errno));
  const int64_t expected_bytes = int64_t(sizeof header) + 3 * elements * int64_t(sizeof(float));
  if (elements < 0 || info.st_size != expected_bytes)
    throw std::runtime_error(path + ": file has " + std::to_string(info.st_size) + " bytes, the header promises " +
                             std::to_string(expected_bytes) + " (truncated or corrupt)");
  for (std::vector<float>* array : {&s.master, &s.adam_m, &s.adam_v}) {
    array->resize(static_cast<size_t>(elements));
    if (elements > 0 && std::fread(array->data(), sizeof(float), array->size(), in.get()) != array->size())
      throw std::runtime_error(path + ": read failed");
  }
  return s;
}

}  // namespace llmc
