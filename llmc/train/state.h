// The part of a checkpoint that is not the model: the step, the data loader's position and this rank's
// optimizer shard (fp32 master weights and AdamW moments), one file per rank, so that a resumed run
// continues bit for bit. The model itself goes to an llm.c model file beside it (llmc/model/checkpoint.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "llmc/data/dataloader.h"
#include "llmc/model/model_config.h"
#include "llmc/model/speedrun_config.h"

namespace llmc {

constexpr int64_t kTrainStateMagic = 0x31545341544d4c4cLL;  // "LLMSTAT1" little-endian
constexpr int64_t kTrainStateVersion = 1;

// Which model family a state belongs to (a header word; 0 in files written before the speedrun family).
enum class ModelFamilyId : int64_t { kGPT2 = 0, kSpeedrun = 1 };

struct TrainState {
  int64_t step = 0;  // optimizer steps completed
  int rank = 0;
  int world_size = 1;
  ModelFamilyId family = ModelFamilyId::kGPT2;
  GPT2Config config;          // the model, for GPT-2
  SpeedrunConfig speedrun;    // the model, for the speedrun family
  DataLoaderPosition train_position;  // where the next training batch comes from
  double train_time_ms = 0;           // cumulative, so the log's train_time continues
  std::vector<float> master;          // this rank's shards of every bucket, concatenated in bucket order
  std::vector<float> adam_m;
  std::vector<float> adam_v;
};

// Names of a checkpoint's files: PREFIX_model.bin and PREFIX_state_rankR.bin.
std::string checkpoint_model_path(const std::string& prefix);
std::string checkpoint_state_path(const std::string& prefix, int rank);
// PREFIX for step `step` in `dir`: DIR/ckpt_000100.
std::string checkpoint_prefix(const std::string& dir, int64_t step);
// The newest complete checkpoint prefix in `dir` (its model file and rank-0 state exist), or "" if none.
std::string latest_checkpoint_prefix(const std::string& dir);

void write_train_state(const std::string& path, const TrainState& state);  // atomic (temp + rename)
// Throws FileError("<path>: <problem>"): unreadable, wrong magic or version, truncated or trailing bytes.
TrainState read_train_state(const std::string& path);

// The checkpoint prefix --resume names: `resume` itself, or for "latest" the newest complete
// checkpoint in `output_dir` ("" when there is none: the run starts fresh).
std::string resume_prefix(const std::string& resume, const std::string& output_dir);

// The model of a state as the log names it: describe_config() for GPT-2, "speedrun " +
// describe_speedrun_config() for the speedrun family.
std::string describe_state_model(const TrainState& state);

// This rank's state of checkpoint `prefix`, checked against the run that resumes from it: the checkpoint
// must have been written by `world_size` ranks (a file for this rank, none for rank `world_size`) for
// the model `model` (describe_state_model's words). Throws FileError naming the file and the mismatch
// (resharding is not supported).
TrainState read_resume_state(const std::string& prefix, int rank, int world_size, const std::string& model);

}  // namespace llmc
