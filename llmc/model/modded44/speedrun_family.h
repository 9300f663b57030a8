// The #44 speedrun model as a model family (llmc/family/model_family.h): its registry entry.
#pragma once
#include <memory>

#include "llmc/family/model_family.h"
#include "llmc/model/modded44/speedrun_config.h"

namespace llmc {

std::unique_ptr<ModelFamily> make_speedrun_family(const SpeedrunConfig& config);

}  // namespace llmc
