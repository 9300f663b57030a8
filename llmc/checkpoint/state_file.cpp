// Reading and writing the per-rank optimizer/loop state of a checkpoint (see state_file.h).
#include "llmc/checkpoint/state_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>

#include "llmc/base/checksum.h"
#include "llmc/base/file_io.h"

namespace llmc {

namespace {

// The words of the state file's header (the rest are zero).
enum HeaderField {
  kMagic, kVersion, kStep, kRank, kWorldSize,
  kShape,  // kShape .. kShape + 5: the model's shape words (up to version 4: a GPT-2 state's only)
  kEpoch = kShape + kStateModelShapeWords, kShardOrderIndex, kBatchInShard, kTrainTimeMicros,
  kLegacyShardElements,  // up to version 4: the count of each of a zero-adamw state's three arrays
  kFamily,
  kLegacyShape,  // kLegacyShape .. + 5: up to version 4, a speedrun-family state's shape words
  kBatchSize = kLegacyShape + kStateModelShapeWords, kSeqLen,
  kOptimizer, kNamedArrays,  // version 3 (zero in version 2 files)
  // Version 4 (zero in older files): the loader whose position words 11-13 hold (with the BOS loader: epoch,
  // shard, document), the BOS loader's micro-step, the writer's gradient accumulation.
  kTrainLoader, kBosMicroStep, kGradAccum,
  kChecksum = kTrainStateHeaderWords - 1,
};
static_assert(kEpoch == 11 && kFamily == 16 && kBatchSize == 23 && kGradAccum == 29, "the documented layout");
static_assert(kGradAccum < kChecksum, "the header's words fit before the checksum");
constexpr int64_t kHeaderBytes = kTrainStateHeaderWords * static_cast<int64_t>(sizeof(int64_t));
constexpr size_t kChunkBytes = size_t{1} << 20;
constexpr int64_t kMaxShapeWord = int64_t{1} << 24;
// A named array's record: the name's words, its element size, its element count.
constexpr int kRecordWords = 8;
constexpr int kRecordNameWords = kStateArrayNameBytes / 8;
static_assert(kRecordNameWords + 2 == kRecordWords, "a record is the name, the element size and the count");

// A header word's value of an enumerated field.
template <class Enum>
constexpr int64_t word_of(Enum value) {
  return static_cast<int64_t>(value);
}
// An enumerated field from its (checked) header word.
template <class Enum>
constexpr Enum field_of(int64_t word) {
  return static_cast<Enum>(word);
}

// Up to version 4, a zero-adamw state: three unnamed fp32 arrays instead of records.
bool is_legacy_zero(const int64_t* header) {
  return header[kVersion] < 5 && header[kOptimizer] == word_of(StateOptimizer::kZeroAdamW);
}

// Where a file of this version and family keeps the model's shape.
int shape_word(const int64_t* header) {
  return header[kVersion] < 5 && header[kFamily] != word_of(ModelFamilyId::kGPT2) ? kLegacyShape : kShape;
}

void encode_header(const TrainStateHeader& s, int64_t* header) {
  std::fill(header, header + kTrainStateHeaderWords, 0);
  header[kMagic] = kTrainStateMagic;
  header[kVersion] = kTrainStateVersion;
  header[kStep] = s.step;
  header[kRank] = s.rank;
  header[kWorldSize] = s.world_size;
  std::copy(s.model.shape.begin(), s.model.shape.end(), header + kShape);
  if (s.train_loader == TrainLoaderKind::kBos) {
    header[kEpoch] = s.bos_position.epoch;
    header[kShardOrderIndex] = s.bos_position.shard;
    header[kBatchInShard] = s.bos_position.document;
    header[kBosMicroStep] = s.bos_position.micro_step;
  } else {
    header[kEpoch] = s.train_position.epoch;
    header[kShardOrderIndex] = s.train_position.shard_order_index;
    header[kBatchInShard] = s.train_position.batch_in_shard;
  }
  header[kTrainTimeMicros] = static_cast<int64_t>(s.train_time_ms * 1000.0);
  header[kFamily] = word_of(s.model.family);
  header[kBatchSize] = s.batch_size;
  header[kSeqLen] = s.seq_len;
  header[kOptimizer] = word_of(s.optimizer);
  header[kNamedArrays] = s.named_arrays;
  header[kTrainLoader] = word_of(s.train_loader);
  header[kGradAccum] = s.grad_accum;
}

// The model's words: its family is known; its shape words are sizes where the file keeps them and zero in
// the words it does not use (a version 4 file of one family that also names the other's shape is corrupt).
void check_model_words(const int64_t* header, const std::function<void(bool, const std::string&)>& require) {
  require(header[kFamily] == word_of(ModelFamilyId::kGPT2) || header[kFamily] == word_of(ModelFamilyId::kSpeedrun) ||
              header[kFamily] == word_of(ModelFamilyId::kModded89),
          "unknown model family " + std::to_string(header[kFamily]));
  const int used = shape_word(header);
  const bool legacy = header[kVersion] < 5;
  for (int first : {kShape, kLegacyShape}) {
    for (int word = first; word < first + kStateModelShapeWords; word++) {
      const bool ok = first != used ? header[word] == 0
                      : legacy      ? header[word] > 0 && header[word] <= kMaxShapeWord
                                    : header[word] >= 0 && header[word] <= kMaxShapeWord;
      require(ok, "model shape word " + std::to_string(word));
    }
  }
}

// Checks every field a reader relies on; the values come from a file, so nothing is trusted.
void check_header(const std::string& path, const int64_t* header, int64_t file_bytes) {
  const std::function<void(bool, const std::string&)> require = [&](bool holds, const std::string& problem) {
    if (!holds) throw FileError(path, "corrupt optimizer-state header: " + problem);
  };
  require(header[kWorldSize] >= 1 && header[kWorldSize] <= 4096, "world size " + std::to_string(header[kWorldSize]));
  require(header[kRank] >= 0 && header[kRank] < header[kWorldSize], "rank " + std::to_string(header[kRank]));
  require(header[kStep] >= 0, "step " + std::to_string(header[kStep]));
  for (int word : {kEpoch, kShardOrderIndex, kBatchInShard, kTrainTimeMicros})
    require(header[word] >= 0, "word " + std::to_string(word) + " is negative");
  check_model_words(header, require);
  require(header[kBatchSize] > 0 && header[kBatchSize] <= (int64_t{1} << 24), "batch size");
  require(header[kSeqLen] > 0 && header[kSeqLen] <= (int64_t{1} << 24), "sequence length");
  require(header[kTrainLoader] == word_of(TrainLoaderKind::kWindow) ||
              header[kTrainLoader] == word_of(TrainLoaderKind::kBos),
          "unknown training loader " + std::to_string(header[kTrainLoader]));
  require(header[kBosMicroStep] >= 0 && (header[kTrainLoader] == word_of(TrainLoaderKind::kBos) ||
                                         header[kBosMicroStep] == 0),
          "BOS loader micro-step " + std::to_string(header[kBosMicroStep]));
  // 0: unknown (older files; a window position does not need it), a BOS position counts steps of it.
  const int64_t least_accum = header[kTrainLoader] == word_of(TrainLoaderKind::kBos) ? 1 : 0;
  require(header[kGradAccum] >= least_accum && header[kGradAccum] <= (int64_t{1} << 24),
          "gradient accumulation " + std::to_string(header[kGradAccum]));
  require(header[kOptimizer] == word_of(StateOptimizer::kZeroAdamW) ||
              header[kOptimizer] == word_of(StateOptimizer::kSpeedrun),
          "unknown optimizer " + std::to_string(header[kOptimizer]));
  if (!is_legacy_zero(header)) {
    require(header[kLegacyShardElements] == 0, header[kVersion] < 5 ? "a speedrun state with ZeRO shard elements"
                                                                     : "word 15 is not zero");
    require(header[kNamedArrays] >= 0 && header[kNamedArrays] <= kMaxNamedStateArrays,
            "named array count " + std::to_string(header[kNamedArrays]));
    return;  // its size: open_state walks the records
  }
  require(header[kNamedArrays] == 0, "a zero-adamw state with named arrays");
  const int64_t elements = header[kLegacyShardElements];
  const int64_t element_bytes = 3 * static_cast<int64_t>(sizeof(float));
  if (elements < 0 || elements > (file_bytes - kHeaderBytes) / element_bytes + 1 ||
      kHeaderBytes + elements * element_bytes != file_bytes) {
    throw FileError(path, "file has " + std::to_string(file_bytes) + " bytes, the header promises 3 x " +
                              std::to_string(elements) + " floats after its " + std::to_string(kHeaderBytes) +
                              " (truncated or corrupt)");
  }
}

// A named array's record (the file positioned at it): its name, element size and the byte count that
// follows, each checked, and `left` (the file's bytes after the record) large enough for them.
struct ArrayRecord {
  int64_t words[kRecordWords];
  std::string name;
  int element_bytes = 0;
  int64_t bytes = 0;
};

ArrayRecord read_record(const std::string& path, FILE* in, int64_t left) {
  ArrayRecord record;
  if (left < kRecordWords * 8 || std::fread(record.words, sizeof(int64_t), kRecordWords, in) != kRecordWords)
    throw FileError(path, "truncated optimizer state: a named array's record is cut short");
  left -= kRecordWords * 8;
  const char* name = reinterpret_cast<const char*>(record.words);
  const size_t length = strnlen(name, kStateArrayNameBytes);
  if (length == 0 || length == kStateArrayNameBytes)
    throw FileError(path, "corrupt optimizer-state array record: its name is empty or not terminated");
  record.name.assign(name, length);
  const int64_t element_bytes = record.words[kRecordNameWords], count = record.words[kRecordNameWords + 1];
  if (element_bytes != 2 && element_bytes != 4)
    throw FileError(path, "corrupt optimizer-state array " + record.name + ": element size " +
                              std::to_string(element_bytes));
  if (count < 0 || count > left / element_bytes)
    throw FileError(path, "optimizer-state array " + record.name + " promises " + std::to_string(count) +
                              " elements, the file has " + std::to_string(left) + " bytes left (truncated or corrupt)");
  record.element_bytes = static_cast<int>(element_bytes);
  record.bytes = count * element_bytes;
  return record;
}

// The records end exactly at the end of the file (the file left after the header).
void check_records(const std::string& path, FILE* in, int64_t arrays, int64_t file_bytes) {
  int64_t at = kHeaderBytes;
  for (int64_t i = 0; i < arrays; i++) {
    const ArrayRecord record = read_record(path, in, file_bytes - at);
    at += kRecordWords * 8 + record.bytes;
    if (std::fseek(in, static_cast<long>(at), SEEK_SET) != 0) throw_errno_file_error(path, "cannot seek");
  }
  if (at != file_bytes)
    throw FileError(path, "file has " + std::to_string(file_bytes) + " bytes, its " + std::to_string(arrays) +
                              " named arrays end at " + std::to_string(at) + " (trailing bytes)");
  if (std::fseek(in, static_cast<long>(kHeaderBytes), SEEK_SET) != 0) throw_errno_file_error(path, "cannot seek");
}

TrainStateHeader decode_header(const int64_t* header) {
  TrainStateHeader s;
  s.step = header[kStep];
  s.rank = static_cast<int>(header[kRank]);
  s.world_size = static_cast<int>(header[kWorldSize]);
  s.model.family = field_of<ModelFamilyId>(header[kFamily]);
  std::copy(header + shape_word(header), header + shape_word(header) + kStateModelShapeWords, s.model.shape.begin());
  s.train_loader = field_of<TrainLoaderKind>(header[kTrainLoader]);
  if (s.train_loader == TrainLoaderKind::kBos) {
    s.bos_position = BosLoaderPosition{header[kEpoch], header[kShardOrderIndex], header[kBatchInShard],
                                       header[kBosMicroStep]};
  } else {
    s.train_position = DataLoaderPosition{header[kEpoch], header[kShardOrderIndex], header[kBatchInShard]};
  }
  s.grad_accum = header[kGradAccum];
  s.batch_size = header[kBatchSize];
  s.seq_len = header[kSeqLen];
  s.train_time_ms = static_cast<double>(header[kTrainTimeMicros]) / 1000.0;
  s.optimizer = field_of<StateOptimizer>(header[kOptimizer]);
  s.named_arrays = is_legacy_zero(header) ? 3 : header[kNamedArrays];
  s.version = header[kVersion];
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
  if (header[kVersion] < kTrainStateOldestVersion || header[kVersion] > kTrainStateVersion)
    throw FileError(path, "unsupported optimizer-state version " + std::to_string(header[kVersion]) +
                              " (this build reads versions " + std::to_string(kTrainStateOldestVersion) + " to " +
                              std::to_string(kTrainStateVersion) + ")");
  if (header[kVersion] == 2 && (header[kOptimizer] != 0 || header[kNamedArrays] != 0))
    throw FileError(path, "corrupt optimizer-state header: a version 2 file with version 3 fields");
  if (header[kVersion] < 4 && (header[kTrainLoader] != 0 || header[kBosMicroStep] != 0 || header[kGradAccum] != 0))
    throw FileError(path, "corrupt optimizer-state header: a version " + std::to_string(header[kVersion]) +
                              " file with version 4 fields");
  check_header(path, header, *file_bytes);
  *fields = decode_header(header);
  fields->file_bytes = *file_bytes;
  if (!is_legacy_zero(header)) check_records(path, in.get(), header[kNamedArrays], *file_bytes);
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

const char* state_optimizer_name(StateOptimizer optimizer) {
  return optimizer == StateOptimizer::kSpeedrun ? "speedrun" : "zero-adamw";
}

const char* train_loader_name(TrainLoaderKind kind) { return kind == TrainLoaderKind::kBos ? "bos" : "window"; }

WrittenFile write_train_state(const std::string& path, const TrainState& s) {
  for (const NamedStateArray& array : s.arrays)
    if (array.name.empty() || array.name.size() >= kStateArrayNameBytes ||
        (array.element_bytes != 2 && array.element_bytes != 4) || array.bytes.size() % array.element_bytes != 0)
      throw std::invalid_argument(path + ": optimizer state array '" + array.name + "' cannot be stored");
  if (static_cast<int64_t>(s.arrays.size()) > kMaxNamedStateArrays)
    throw std::invalid_argument(path + ": more than " + std::to_string(kMaxNamedStateArrays) + " state arrays");
  TrainStateHeader fields = s;
  fields.named_arrays = static_cast<int64_t>(s.arrays.size());
  int64_t header[kTrainStateHeaderWords];
  encode_header(fields, header);
  AtomicFileWriter out(path);
  out.write(header, sizeof header);
  for (const NamedStateArray& array : s.arrays) {
    int64_t record[kRecordWords] = {};
    std::memcpy(record, array.name.data(), array.name.size());
    record[kRecordNameWords] = array.element_bytes;
    record[kRecordNameWords + 1] = static_cast<int64_t>(array.bytes.size()) / array.element_bytes;
    out.write(record, sizeof record);
    out.write(array.bytes.data(), array.bytes.size());
  }
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

namespace {

void read_exactly(const std::string& path, FILE* in, void* out, size_t bytes) {
  if (std::fread(out, 1, bytes, in) != bytes) throw FileError(path, "read failed (file changed or I/O error)");
}

// Up to version 4: a zero-adamw state's three unnamed arrays, as the named arrays they are read as.
void read_legacy_zero_arrays(const std::string& path, FILE* in, TrainState& s, Checksum& checksum) {
  const size_t elements = static_cast<size_t>((s.file_bytes - kHeaderBytes) / (3 * sizeof(float)));
  for (const char* name : kLegacyZeroArrayNames) {
    NamedStateArray array{name, 4, std::vector<char>(elements * sizeof(float))};
    read_exactly(path, in, array.bytes.data(), array.bytes.size());
    checksum.update(array.bytes.data(), array.bytes.size());
    s.arrays.push_back(std::move(array));
  }
}

}  // namespace

TrainState read_train_state(const std::string& path) {
  int64_t header[kTrainStateHeaderWords];
  int64_t file_bytes = 0;
  TrainState s;
  const FileHandle in = open_state(path, header, &s, &file_bytes);
  Checksum checksum;
  hash_header(checksum, header);
  if (is_legacy_zero(header)) {
    read_legacy_zero_arrays(path, in.get(), s, checksum);
  } else {
    int64_t at = kHeaderBytes;
    for (int64_t i = 0; i < s.named_arrays; i++) {  // sizes already checked by open_state
      const ArrayRecord record = read_record(path, in.get(), s.file_bytes - at);
      NamedStateArray array{record.name, record.element_bytes, std::vector<char>(static_cast<size_t>(record.bytes))};
      read_exactly(path, in.get(), array.bytes.data(), array.bytes.size());
      checksum.update(record.words, sizeof record.words);
      checksum.update(array.bytes.data(), array.bytes.size());
      at += kRecordWords * 8 + record.bytes;
      s.arrays.push_back(std::move(array));
    }
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
    read_exactly(path, in.get(), chunk.data(), want);
    checksum.update(chunk.data(), want);
    left -= static_cast<int64_t>(want);
  }
  check_checksum(path, checksum, static_cast<uint64_t>(header[kChecksum]));
}

namespace {

// Where array `name`'s elements start in the file, its element size and count.
struct ArrayPlace {
  int64_t offset = 0;
  int element_bytes = 0;
  int64_t count = 0;
};

ArrayPlace find_array(const std::string& path, FILE* in, const TrainStateHeader& header, const std::string& name) {
  if (header.version < 5 && header.optimizer == StateOptimizer::kZeroAdamW) {
    const int64_t elements = (header.file_bytes - kHeaderBytes) / (3 * static_cast<int64_t>(sizeof(float)));
    for (int i = 0; i < 3; i++)
      if (name == kLegacyZeroArrayNames[i]) return ArrayPlace{kHeaderBytes + i * elements * 4, 4, elements};
    throw FileError(path, "has no optimizer-state array " + name);
  }
  int64_t at = kHeaderBytes;
  for (int64_t i = 0; i < header.named_arrays; i++) {
    if (std::fseek(in, static_cast<long>(at), SEEK_SET) != 0) throw_errno_file_error(path, "cannot seek");
    const ArrayRecord record = read_record(path, in, header.file_bytes - at);
    at += kRecordWords * 8;
    if (record.name == name) return ArrayPlace{at, record.element_bytes, record.bytes / record.element_bytes};
    at += record.bytes;
  }
  throw FileError(path, "has no optimizer-state array " + name);
}

}  // namespace

int64_t train_state_array_elements(const std::string& path, const TrainStateHeader& header, const std::string& name) {
  const FileHandle in = open_file(path, "rb", "optimizer state");
  return find_array(path, in.get(), header, name).count;
}

std::vector<NamedStateArray> read_train_state_arrays_with_prefix(const std::string& path,
                                                                 const TrainStateHeader& header,
                                                                 const std::string& prefix) {
  std::vector<NamedStateArray> arrays;
  if (header.version < 5 && header.optimizer == StateOptimizer::kZeroAdamW) return arrays;  // no named arrays
  const FileHandle in = open_file(path, "rb", "optimizer state");
  int64_t at = kHeaderBytes;
  for (int64_t i = 0; i < header.named_arrays; i++) {
    if (std::fseek(in.get(), static_cast<long>(at), SEEK_SET) != 0) throw_errno_file_error(path, "cannot seek");
    const ArrayRecord record = read_record(path, in.get(), header.file_bytes - at);
    at += kRecordWords * 8 + record.bytes;
    if (record.name.rfind(prefix, 0) != 0) continue;
    NamedStateArray array{record.name, record.element_bytes, std::vector<char>(static_cast<size_t>(record.bytes))};
    read_exactly(path, in.get(), array.bytes.data(), array.bytes.size());
    arrays.push_back(std::move(array));
  }
  return arrays;
}

void read_train_state_elements(const std::string& path, const TrainStateHeader& header, const std::string& name,
                               int64_t first, int64_t count, void* out) {
  const FileHandle in = open_file(path, "rb", "optimizer state");
  const ArrayPlace place = find_array(path, in.get(), header, name);
  if (first < 0 || count < 0 || first + count > place.count)
    throw std::out_of_range(path + ": elements " + std::to_string(first) + ".." + std::to_string(first + count) +
                            " outside array " + name + "'s " + std::to_string(place.count));
  if (std::fseek(in.get(), static_cast<long>(place.offset + first * place.element_bytes), SEEK_SET) != 0)
    throw_errno_file_error(path, "cannot seek");
  read_exactly(path, in.get(), out, static_cast<size_t>(count * place.element_bytes));
}

}  // namespace llmc
