// The part of a checkpoint that is not the model: the step, the data loader's position and this rank's
// optimizer state (ZeRO's shard of fp32 master weights and AdamW moments, or the speedrun optimizer's
// named arrays), one file per rank, so that a resumed run continues bit for bit. The model itself goes to a model file beside it (llm.c's format for GPT-2,
// llmc/model/gpt2/gpt2_model_file.h; llmc/model/modded44/speedrun_model_file.h for the speedrun family); names and
// completeness: llmc/checkpoint/checkpoint_dir.h.
//
// Format (version 4): 32 little-endian int64 header words (see HeaderField in state.cpp: magic "LLMSTAT1",
// version, step, rank, world size, the GPT-2 shape, the loader position, train time in microseconds, the
// shard's element count, the model family and the speedrun shape, the writer's B and T, the optimizer
// (0 zero-adamw, 1 speedrun), the number of named arrays, the training loader (0 window, 1 bos), the BOS
// loader's micro-step, the writer's gradient accumulation, and in word 31 the XXH3-64 checksum of the
// whole file taken with word 31 zero), then
//   zero-adamw: the master weights, m and v, each `shard elements` fp32 values (named arrays: 0);
//   speedrun:   `named arrays` records, each 8 int64 words -- the name (48 bytes, NUL-padded, at least one
//               NUL), the element size in bytes (2 or 4), the element count -- and then its elements'
//               bytes (shard elements: 0). What the arrays are is the optimizer's business
//               (SpeedrunOptimizer::download_state); the file only keeps them.
// The loader position (words 11-13) is that of the loader word 27 names: the window loader's (epoch, shard
// order index, batch in shard) or the BOS loader's (epoch, shard, document), whose micro-step is word 28.
// Version 2 files (before the optimizer word, whose place was zero) are read as zero-adamw states; version
// 2 and 3 files (before words 27-29, whose places were zero) as window-loader states whose writer's
// gradient accumulation is unknown (0).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llmc/base/atomic_file.h"
#include "llmc/data/bos_loader.h"
#include "llmc/data/dataloader.h"
#include "llmc/model/gpt2/gpt2_config.h"
#include "llmc/model/modded44/speedrun_config.h"

namespace llmc {

constexpr int64_t kTrainStateMagic = 0x31545341544d4c4cLL;  // "LLMSTAT1" little-endian
constexpr int64_t kTrainStateVersion = 4;
constexpr int64_t kTrainStateOldestVersion = 2;  // still read
constexpr int kTrainStateHeaderWords = 32;

// Which model family a state belongs to (a header word).
enum class ModelFamilyId : int64_t { kGPT2 = 0, kSpeedrun = 1 };

// Which optimizer's state a file holds (a header word; --optimizer names them).
enum class StateOptimizer : int64_t { kZeroAdamW = 0, kSpeedrun = 1 };
const char* state_optimizer_name(StateOptimizer optimizer);  // "zero-adamw", "speedrun"

// Which loader made the training batches (a header word; --train-loader names them): llm.c's fixed windows
// (llmc/data/dataloader.h) or the speedrun's BOS-aligned documents (llmc/data/bos_loader.h).
enum class TrainLoaderKind : int64_t { kWindow = 0, kBos = 1 };
const char* train_loader_name(TrainLoaderKind kind);  // "window", "bos"

// One of the speedrun optimizer's arrays, as raw bytes (bf16 or fp32 elements).
struct NamedStateArray {
  std::string name;        // 1..47 characters
  int element_bytes = 4;   // 2 or 4
  std::vector<char> bytes; // a multiple of element_bytes
};
constexpr int kStateArrayNameBytes = 48;
constexpr int64_t kMaxNamedStateArrays = 1 << 16;

// Everything in a state file except the arrays.
struct TrainStateHeader {
  int64_t step = 0;  // optimizer steps completed
  int rank = 0;
  int world_size = 1;
  ModelFamilyId family = ModelFamilyId::kGPT2;
  GPT2Config config;          // the model, for GPT-2
  SpeedrunConfig speedrun;    // the model, for the speedrun family
  TrainLoaderKind train_loader = TrainLoaderKind::kWindow;
  DataLoaderPosition train_position;  // where the next training batch comes from (window loader)
  BosLoaderPosition bos_position;     // where the next training batch comes from (BOS loader)
  int64_t grad_accum = 1;             // the writer's micro-steps per step (0: unknown, as read from version 2-3 files)
  int64_t batch_size = 0;             // the writer's B and T: the position counts batches of world_size*B*T tokens
  int64_t seq_len = 0;
  double train_time_ms = 0;           // cumulative, so the log's train_time continues
  int64_t shard_elements = 0;         // length of each of master, m, v (zero-adamw)
  StateOptimizer optimizer = StateOptimizer::kZeroAdamW;
  int64_t named_arrays = 0;           // count of `arrays` (speedrun)
  int64_t file_bytes = 0;             // the file's size (read_* only)
  uint64_t checksum = 0;              // as stored (read_* only)
};

struct TrainState : TrainStateHeader {
  std::vector<float> master;  // this rank's shards of every bucket, concatenated in bucket order
  std::vector<float> adam_m;
  std::vector<float> adam_v;
  std::vector<NamedStateArray> arrays;  // speedrun
};

// ZeRO's three arrays, in file order.
enum class StateArray { kMaster = 0, kAdamM = 1, kAdamV = 2 };

// Atomic (temp + rename); the header's shard_elements, named_arrays and checksum are filled in here. A
// zero-adamw state has no named arrays, a speedrun state none of the three fp32 arrays.
WrittenFile write_train_state(const std::string& path, const TrainState& state);

// Reads and checks the header against the file's size. Throws FileError("<path>: <problem>"): unreadable,
// shorter than the header, wrong magic or version, an implausible field, a size that does not match.
TrainStateHeader read_train_state_header(const std::string& path);
// The whole file, its checksum verified ("<path>: checksum mismatch ...").
TrainState read_train_state(const std::string& path);
// Reads the whole file only to verify its checksum (a file whose arrays are read in pieces).
void verify_train_state(const std::string& path);
// `count` elements of `array` from element `first` on (header already read and checked; zero-adamw).
void read_train_state_range(const std::string& path, const TrainStateHeader& header, StateArray array, int64_t first,
                            int64_t count, float* out);

// The model of a state as the log names it: describe_config() for GPT-2, "speedrun " +
// describe_speedrun_config() for the speedrun family.
std::string describe_state_model(const TrainStateHeader& state);

}  // namespace llmc
