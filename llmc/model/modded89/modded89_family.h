// The 2026-07-17 record's model as a model family (llmc/family/model_family.h): its registry entry.
#pragma once
#include <memory>

#include "llmc/family/model_family.h"
#include "llmc/model/modded89/modded89_config.h"

namespace llmc {

std::unique_ptr<ModelFamily> make_modded89_family(const Modded89Config& config);

}  // namespace llmc
