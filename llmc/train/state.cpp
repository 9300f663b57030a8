// Reading and writing the per-rank optimizer/loop state of a checkpoint (see state.h).
#include "llmc/train/state.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "llmc/checksum.h"
#include "llmc/file_io.h"

namespace llmc {

namespace {

// The words of the state file's header (the rest are zero).
enum HeaderField {
  kMagic, kVersion, kStep, kRank, kWorldSize, kMaxSeqLen, kVocab, kPaddedVocab, kLayers, kHeads, kChannels,
  kEpoch, kShardOrderIndex, kBatchInShard, kTrainTimeMicros, kShardElements,
  // The model family; the speedrun family's shape (zero for GPT-2, whose shape is in words 5..10, zero for
  // the speedrun family).
  kFamily, kSpeedrunVocab, kSpeedrunBlocks, kSpeedrunHeads, kSpeedrunHeadDim, kSpeedrunMaxSeqLen, kSpeedrunWindowBlock,
  kBatchSize, kSeqLen,
  kChecksum = kTrainStateHeaderWords - 1,
};
constexpr int64_t kHeaderBytes = kTrainStateHeaderWords * static_cast<int64_t>(sizeof(int64_t));
constexpr size_t kChunkBytes = size_t{1} << 20;

void encode_header(const TrainStateHeader& s, int64_t* header) {
  std::fill(header, header + kTrainStateHeaderWords, 0);
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
  header[kShardElements] = s.shard_elements;
  header[kFamily] = static_cast<int64_t>(s.family);
  header[kSpeedrunVocab] = s.speedrun.vocab_size;
  header[kSpeedrunBlocks] = s.speedrun.num_blocks;
  header[kSpeedrunHeads] = s.speedrun.num_heads;
  header[kSpeedrunHeadDim] = s.speedrun.head_dim;
  header[kSpeedrunMaxSeqLen] = s.speedrun.max_seq_len;
  header[kSpeedrunWindowBlock] = s.speedrun.window_block;
  header[kBatchSize] = s.batch_size;
  header[kSeqLen] = s.seq_len;
}

// Checks every field a reader relies on; the values come from a file, so nothing is trusted.
void check_header(const std::string& path, const int64_t* header, int64_t file_bytes) {
  auto require = [&](bool holds, const std::string& problem) {
    if (!holds) throw FileError(path, "corrupt optimizer-state header: " + problem);
  };
  require(header[kWorldSize] >= 1 && header[kWorldSize] <= 4096, "world size " + std::to_string(header[kWorldSize]));
  require(header[kRank] >= 0 && header[kRank] < header[kWorldSize], "rank " + std::to_string(header[kRank]));
  require(header[kStep] >= 0, "step " + std::to_string(header[kStep]));
  for (int word : {kEpoch, kShardOrderIndex, kBatchInShard, kTrainTimeMicros})
    require(header[word] >= 0, "word " + std::to_string(word) + " is negative");
  require(header[kFamily] == static_cast<int64_t>(ModelFamilyId::kGPT2) ||
              header[kFamily] == static_cast<int64_t>(ModelFamilyId::kSpeedrun),
          "unknown model family " + std::to_string(header[kFamily]));
  // The family's shape words are plausible sizes, the other family's are zero.
  const bool gpt2 = header[kFamily] == static_cast<int64_t>(ModelFamilyId::kGPT2);
  for (int word : {kMaxSeqLen, kVocab, kPaddedVocab, kLayers, kHeads, kChannels, kSpeedrunVocab, kSpeedrunBlocks,
                   kSpeedrunHeads, kSpeedrunHeadDim, kSpeedrunMaxSeqLen, kSpeedrunWindowBlock}) {
    const bool used = (word < kEpoch) == gpt2;
    require(used ? header[word] > 0 && header[word] <= (int64_t{1} << 24) : header[word] == 0,
            "model shape word " + std::to_string(word));
  }
  require(header[kBatchSize] > 0 && header[kBatchSize] <= (int64_t{1} << 24), "batch size");
  require(header[kSeqLen] > 0 && header[kSeqLen] <= (int64_t{1} << 24), "sequence length");
  const int64_t elements = header[kShardElements];
  const int64_t element_bytes = 3 * static_cast<int64_t>(sizeof(float));
  if (elements < 0 || elements > (file_bytes - kHeaderBytes) / element_bytes + 1 ||
      kHeaderBytes + elements * element_bytes != file_bytes) {
    throw FileError(path, "file has " + std::to_string(file_bytes) + " bytes, the header promises 3 x " +
                              std::to_string(elements) + " floats after its " + std::to_string(kHeaderBytes) +
                              " (truncated or corrupt)");
  }
}

TrainStateHeader decode_header(const std::string& path, const int64_t* header) {
  TrainStateHeader s;
  s.step = header[kStep];
  s.rank = static_cast<int>(header[kRank]);
  s.world_size = static_cast<int>(header[kWorldSize]);
  s.family = static_cast<ModelFamilyId>(header[kFamily]);
  try {
    if (s.family == ModelFamilyId::kGPT2) {
      s.config = GPT2Config{static_cast<int>(header[kMaxSeqLen]), static_cast<int>(header[kVocab]),
                            static_cast<int>(header[kPaddedVocab]), static_cast<int>(header[kLayers]),
                            static_cast<int>(header[kHeads]), static_cast<int>(header[kChannels])};
      validate_config(s.config);
    } else {
      s.speedrun = SpeedrunConfig{static_cast<int>(header[kSpeedrunVocab]), static_cast<int>(header[kSpeedrunBlocks]),
                                  static_cast<int>(header[kSpeedrunHeads]), static_cast<int>(header[kSpeedrunHeadDim]),
                                  static_cast<int>(header[kSpeedrunMaxSeqLen]),
                                  static_cast<int>(header[kSpeedrunWindowBlock])};
      validate_speedrun_config(s.speedrun);
    }
  } catch (const std::invalid_argument& error) {
    throw FileError(path, std::string("corrupt optimizer-state header: ") + error.what());
  }
  s.train_position = DataLoaderPosition{header[kEpoch], header[kShardOrderIndex], header[kBatchInShard]};
  s.batch_size = header[kBatchSize];
  s.seq_len = header[kSeqLen];
  s.train_time_ms = static_cast<double>(header[kTrainTimeMicros]) / 1000.0;
  s.shard_elements = header[kShardElements];
  s.checksum = static_cast<uint64_t>(header[kChecksum]);
  return s;
}

// Opens `path`, reads its header words and checks all of them (every reader, whichever part of the file it
// reads, refuses the same files); the file is left positioned after the header.
FileHandle open_state(const std::string& path, int64_t* header, TrainStateHeader* fields, int64_t* file_bytes) {
  FileHandle in = open_file(path, "rb", "optimizer state");
  struct stat info;
  if (::fstat(fileno(in.get()), &info) != 0) throw_errno_file_error(path, "cannot stat");
  *file_bytes = static_cast<int64_t>(info.st_size);
  if (std::fread(header, sizeof(int64_t), kTrainStateHeaderWords, in.get()) != kTrainStateHeaderWords)
    throw FileError(path, "file is shorter than the optimizer-state header");
  if (header[kMagic] != kTrainStateMagic) throw FileError(path, "not an optimizer-state file (wrong magic)");
  if (header[kVersion] != kTrainStateVersion)
    throw FileError(path, "unsupported optimizer-state version " + std::to_string(header[kVersion]) +
                              " (this build reads version " + std::to_string(kTrainStateVersion) + ")");
  check_header(path, header, *file_bytes);
  *fields = decode_header(path, header);
  return in;
}

// Hashes the header as the checksum covers it (its own word zero).
void hash_header(Checksum& checksum, const int64_t* header) {
  int64_t copy[kTrainStateHeaderWords];
  std::copy(header, header + kTrainStateHeaderWords, copy);
  copy[kChecksum] = 0;
  checksum.update(copy, sizeof copy);
}

void check_checksum(const std::string& path, const Checksum& checksum, uint64_t stored) {
  if (checksum.digest() != stored)
    throw FileError(path, "checksum mismatch: the file is corrupt (header says " + checksum_hex(stored) +
                              ", the contents hash to " + checksum_hex(checksum.digest()) + ")");
}

}  // namespace

std::string describe_state_model(const TrainStateHeader& state) {
  return state.family == ModelFamilyId::kSpeedrun ? "speedrun " + describe_speedrun_config(state.speedrun)
                                                  : describe_config(state.config);
}

WrittenFile write_train_state(const std::string& path, const TrainState& s) {
  if (s.adam_m.size() != s.master.size() || s.adam_v.size() != s.master.size())
    throw std::invalid_argument(path + ": optimizer state arrays differ in size");
  TrainStateHeader fields = s;
  fields.shard_elements = static_cast<int64_t>(s.master.size());
  int64_t header[kTrainStateHeaderWords];
  encode_header(fields, header);
  AtomicFileWriter out(path);
  out.write(header, sizeof header);
  for (const std::vector<float>* array : {&s.master, &s.adam_m, &s.adam_v})
    out.write(array->data(), array->size() * sizeof(float));
  const int64_t checksum = static_cast<int64_t>(out.checksum());
  out.patch(kChecksum * sizeof(int64_t), &checksum, sizeof checksum);
  return out.commit();
}

TrainStateHeader read_train_state_header(const std::string& path) {
  int64_t header[kTrainStateHeaderWords];
  int64_t file_bytes = 0;
  TrainStateHeader fields;
  open_state(path, header, &fields, &file_bytes);
  return fields;
}

TrainState read_train_state(const std::string& path) {
  int64_t header[kTrainStateHeaderWords];
  int64_t file_bytes = 0;
  TrainState s;
  const FileHandle in = open_state(path, header, &s, &file_bytes);
  Checksum checksum;
  hash_header(checksum, header);
  for (std::vector<float>* array : {&s.master, &s.adam_m, &s.adam_v}) {
    array->resize(static_cast<size_t>(s.shard_elements));
    if (std::fread(array->data(), sizeof(float), array->size(), in.get()) != array->size())
      throw FileError(path, "read failed (file changed or I/O error)");
    checksum.update(array->data(), array->size() * sizeof(float));
  }
  check_checksum(path, checksum, s.checksum);
  return s;
}

void verify_train_state(const std::string& path) {
  int64_t header[kTrainStateHeaderWords];
  int64_t file_bytes = 0;
  TrainStateHeader fields;
  const FileHandle in = open_state(path, header, &fields, &file_bytes);
  Checksum checksum;
  hash_header(checksum, header);
  std::vector<char> chunk(kChunkBytes);
  for (int64_t left = file_bytes - kHeaderBytes; left > 0;) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(chunk.size())));
    if (std::fread(chunk.data(), 1, want, in.get()) != want) throw FileError(path, "read failed (file changed or I/O error)");
    checksum.update(chunk.data(), want);
    left -= static_cast<int64_t>(want);
  }
  check_checksum(path, checksum, static_cast<uint64_t>(header[kChecksum]));
}

void read_train_state_range(const std::string& path, const TrainStateHeader& header, StateArray array, int64_t first,
                            int64_t count, float* out) {
  if (first < 0 || count < 0 || first + count > header.shard_elements)
    throw std::out_of_range(path + ": elements " + std::to_string(first) + ".." + std::to_string(first + count) +
                            " outside the shard's " + std::to_string(header.shard_elements));
  const FileHandle in = open_file(path, "rb", "optimizer state");
  const int64_t offset =
      kHeaderBytes + (static_cast<int64_t>(array) * header.shard_elements + first) * static_cast<int64_t>(sizeof(float));
  if (std::fseek(in.get(), static_cast<long>(offset), SEEK_SET) != 0) throw_errno_file_error(path, "cannot seek");
  if (std::fread(out, sizeof(float), static_cast<size_t>(count), in.get()) != static_cast<size_t>(count))
    throw FileError(path, "read failed (file changed or I/O error)");
}

}  // namespace llmc
