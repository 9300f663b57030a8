// The part of a checkpoint that is not the model: the step, the data loader's position and this rank's
// optimizer state as named arrays, one file per rank, so that a resumed run continues bit for bit. The
// file keeps the arrays; what they are is their optimizer's business (each optimizer saves, restores and
// re-shards its own: llmc/optim/bucket_optimizer.h). The model goes to a model file beside it, in its
// family's format; names and completeness: llmc/checkpoint/checkpoint_dir.h.
//
// Format (version 5): 32 little-endian int64 header words (see HeaderField in state_file.cpp: magic
// "LLMSTAT1", version, step, rank, world size, the model's shape words 5-10, the loader position, train
// time in microseconds, a word that is zero since version 5, the model family, six zero words, the
// writer's B and T, the optimizer (0 zero-adamw, 1 speedrun), the number of named arrays, the training
// loader (0 window, 1 bos), the BOS loader's micro-step, the writer's gradient accumulation, and in word
// 31 the XXH3-64 checksum of the whole file taken with word 31 zero), then `named arrays` records, each 8
// int64 words -- the name (48 bytes, NUL-padded, at least one NUL), the element size in bytes (2 or 4),
// the element count -- and then its elements' bytes.
// The model is its family's id (0 GPT-2, 1 the #44 speedrun model) and six shape words that the family
// writes and reads (llmc/family/model_family.h). The loader position (words 11-13) is that of the loader
// word 27 names: the window loader's (epoch, shard order index, batch in shard) or the BOS loader's
// (epoch, shard, document), whose micro-step is word 28.
// Older versions, still read: up to version 4 a speedrun-family state kept its shape in words 17-22 (words
// 5-10 zero), and a zero-adamw state held no records but three unnamed arrays of word 15's count of fp32
// values each, read as the arrays ZeroOptimizer names master, adam_m and adam_v; version 2 files (before
// the optimizer word, whose place was zero) are zero-adamw states; version 2 and 3 files (before words
// 27-29, whose places were zero) window-loader states whose writer's gradient accumulation is unknown (0).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "llmc/base/atomic_file.h"
#include "llmc/data/bos_loader.h"
#include "llmc/data/dataloader.h"

namespace llmc {

constexpr int64_t kTrainStateMagic = 0x31545341544d4c4cLL;  // "LLMSTAT1" little-endian
constexpr int64_t kTrainStateVersion = 5;
constexpr int64_t kTrainStateOldestVersion = 2;  // still read
constexpr int kTrainStateHeaderWords = 32;

// Which model family a state belongs to (a header word; llmc/model/registry.h maps it to its family).
enum class ModelFamilyId : int64_t { kGPT2 = 0, kSpeedrun = 1, kModded89 = 2 };

// A model as a state file records it: its family and the six words of its shape that the family chose.
constexpr int kStateModelShapeWords = 6;
struct StateModel {
  ModelFamilyId family = ModelFamilyId::kGPT2;
  std::array<int64_t, kStateModelShapeWords> shape{};  // each in 0..2^24
  bool operator==(const StateModel& other) const { return family == other.family && shape == other.shape; }
  bool operator!=(const StateModel& other) const { return !(*this == other); }
};

// Which optimizer's state a file holds (a header word; --optimizer names them).
enum class StateOptimizer : int64_t { kZeroAdamW = 0, kSpeedrun = 1 };
const char* state_optimizer_name(StateOptimizer optimizer);  // "zero-adamw", "speedrun"

// Which loader made the training batches (a header word; --train-loader names them): llm.c's fixed windows
// (llmc/data/dataloader.h) or the speedrun's BOS-aligned documents (llmc/data/bos_loader.h).
enum class TrainLoaderKind : int64_t { kWindow = 0, kBos = 1 };
const char* train_loader_name(TrainLoaderKind kind);  // "window", "bos"

// One of an optimizer's arrays, as raw bytes (bf16 or fp32 elements).
struct NamedStateArray {
  std::string name;        // 1..47 characters
  int element_bytes = 4;   // 2 or 4
  std::vector<char> bytes; // a multiple of element_bytes
};
constexpr int kStateArrayNameBytes = 48;
// Arrays whose names start so are the model's state (the 2026-07-17 model's FP8 scales), not the optimizer's.
constexpr const char* kModelStatePrefix = "model.";
constexpr int64_t kMaxNamedStateArrays = 1 << 16;

// The names a version 2-4 zero-adamw file's three unnamed arrays are read under, in file order.
constexpr const char* kLegacyZeroArrayNames[3] = {"master", "adam_m", "adam_v"};

// Everything in a state file except the arrays.
struct TrainStateHeader {
  int64_t step = 0;  // optimizer steps completed
  int rank = 0;
  int world_size = 1;
  StateModel model;
  TrainLoaderKind train_loader = TrainLoaderKind::kWindow;
  DataLoaderPosition train_position;  // where the next training batch comes from (window loader)
  BosLoaderPosition bos_position;     // where the next training batch comes from (BOS loader)
  int64_t grad_accum = 1;             // the writer's micro-steps per step (0: unknown, as read from version 2-3 files)
  int64_t batch_size = 0;             // the writer's B and T: the position counts batches of world_size*B*T tokens
  int64_t seq_len = 0;
  double train_time_ms = 0;           // cumulative, so the log's train_time continues
  StateOptimizer optimizer = StateOptimizer::kZeroAdamW;
  int64_t named_arrays = 0;           // count of `arrays`
  int64_t version = kTrainStateVersion;  // as read (read_* only)
  int64_t file_bytes = 0;             // the file's size (read_* only)
  uint64_t checksum = 0;              // as stored (read_* only)
};

struct TrainState : TrainStateHeader {
  std::vector<NamedStateArray> arrays;  // the optimizer's, as it saved them
};

// Atomic (temp + rename); the header's named_arrays and checksum are filled in here. Throws
// std::invalid_argument naming the array that cannot be stored.
WrittenFile write_train_state(const std::string& path, const TrainState& state);

// Reads and checks the header against the file's size. Throws FileError("<path>: <problem>"): unreadable,
// shorter than the header, wrong magic or version, an implausible field, a size that does not match.
TrainStateHeader read_train_state_header(const std::string& path);
// The whole file, its checksum verified ("<path>: checksum mismatch ...").
TrainState read_train_state(const std::string& path);
// Reads the whole file only to verify its checksum (a file whose arrays are read in pieces).
void verify_train_state(const std::string& path);
// The element count of the array named `name` (the header already read and checked). Throws FileError for
// a name the file lacks.
int64_t train_state_array_elements(const std::string& path, const TrainStateHeader& header, const std::string& name);
// `count` elements of the array named `name` from element `first` on, into `out` (count x its element
// size bytes); the header already read and checked. Throws FileError for a name the file lacks and
// std::out_of_range for elements outside the array.
void read_train_state_elements(const std::string& path, const TrainStateHeader& header, const std::string& name,
                               int64_t first, int64_t count, void* out);
// The arrays whose names start with `prefix`, read alone (the others skipped, not read); the header already
// read and checked. Verifying the whole file's checksum is read_train_state's or verify_train_state's.
std::vector<NamedStateArray> read_train_state_arrays_with_prefix(const std::string& path,
                                                                 const TrainStateHeader& header,
                                                                 const std::string& prefix);

}  // namespace llmc
