// The model registry (see registry.h): presets and model files of every family.
#include "llmc/model/registry.h"

#include <cstdio>
#include <stdexcept>

#include "llmc/base/file_io.h"
#include "llmc/model/gpt2/gpt2_family.h"
#include "llmc/model/gpt2/gpt2_model_file.h"
#include "llmc/model/modded44/speedrun_family.h"
#include "llmc/model/modded44/speedrun_model_file.h"
#include "llmc/model/modded89/modded89_family.h"
#include "llmc/model/modded89/modded89_model_file.h"

namespace llmc {

namespace {

ModelStart preset(const std::string& model) {
  if (!is_model_preset(model))
    throw std::invalid_argument("--model '" + model +
                                "' is neither a model file nor a preset (dN with N in 1..64, tiny, small, speedrun, "
                                "speedrun-tiny, modded89, modded89-small, modded89-tiny)");
  ModelStart start;
  if (is_speedrun_preset(model))
    start.family = make_speedrun_family(speedrun_config_from_name(model));
  else if (is_modded89_preset(model))
    start.family = make_modded89_family(modded89_config_from_name(model));
  else
    start.family = make_gpt2_family(config_from_name(model));
  return start;
}

// The first int32 of a model file tells the family.
int32_t file_magic(const std::string& path) {
  const FileHandle in = open_file(path, "rb", "model file");
  int32_t magic = 0;
  if (std::fread(&magic, sizeof magic, 1, in.get()) != 1)
    throw FileError(path, "truncated model file: shorter than its 1024-byte header");
  return magic;
}

}  // namespace

ModelStart locate_model(const std::string& model, const std::string& file, int world_size) {
  const std::string path = !file.empty() ? file : is_regular_file(model) ? model : "";
  if (path.empty()) return preset(model);
  ModelStart start;
  start.file = path;
  const int32_t magic = file_magic(path);
  if (magic == kSpeedrunModelMagic) {
    SpeedrunLayout layout;
    start.params = load_speedrun_model(path, world_size, &layout);
    start.family = make_speedrun_family(layout.config);
  } else if (magic == kModded89ModelMagic) {
    Modded89Layout layout;
    Modded89AttentionState attention;
    start.params = load_modded89_model(path, world_size, &layout, &attention);
    start.family = make_modded89_family(layout.config, attention);
  } else if (magic == kGpt2ModelMagic) {
    GPT2Layout layout;
    start.params = load_gpt2_model_file(path, world_size, &layout);
    start.family = make_gpt2_family(layout.config);
  } else {
    throw FileError(path, "not a model file: magic is " + std::to_string(magic) + ", expected " +
                              std::to_string(kGpt2ModelMagic) + " (GPT-2, llm.c), " +
                              std::to_string(kSpeedrunModelMagic) + " (speedrun) or " +
                              std::to_string(kModded89ModelMagic) + " (modded89)");
  }
  return start;
}

std::string describe_state_model(const StateModel& model) {
  switch (model.family) {
    case ModelFamilyId::kGPT2: return describe_config(gpt2_config_of(model));
    case ModelFamilyId::kSpeedrun: return "speedrun " + describe_speedrun_config(speedrun_config_of(model));
    case ModelFamilyId::kModded89: return "modded89 " + describe_modded89_config(modded89_config_of(model));
  }
  return "model family " + std::to_string(static_cast<int64_t>(model.family));
}

}  // namespace llmc
