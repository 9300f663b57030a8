// The model registry: the one place that knows every model family. It tells what a --model argument names
// (a preset of a family, or a model file of any family, told apart by the file's magic) and names the
// model a checkpoint's state file records. The trainer and generate_gpt2 ask it and see only ModelFamily
// and TrainableModel (llmc/family/).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "llmc/checkpoint/state_file.h"
#include "llmc/family/model_family.h"
#include "llmc/model/presets.h"

namespace llmc {

// Where the model starts: a checkpoint being resumed, a model file (--model FILE) or a preset
// initialised from the seed.
struct ModelStart {
  std::unique_ptr<ModelFamily> family;
  std::string file;           // "" for a fresh initialisation
  std::vector<float> params;  // layout order for `world_size`; empty until initialised
};

// `model`: a preset (dN, tiny, small; speedrun, speedrun-tiny; modded89, modded89-small, modded89-tiny) or, when it names a regular file, a model
// file of either family. `file` overrides it when non-empty (a checkpoint's model file). Throws
// std::invalid_argument for an unknown preset, FileError for a bad file.
ModelStart locate_model(const std::string& model, const std::string& file, int world_size);

// The model a state file records, as its family describes it ("L=12 NH=12 ..." or "speedrun V=...").
std::string describe_state_model(const StateModel& model);

}  // namespace llmc
