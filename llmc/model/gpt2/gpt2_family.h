// GPT-2 as a model family (llmc/family/model_family.h): its registry entry.
#pragma once
#include <memory>

#include "llmc/family/model_family.h"
#include "llmc/model/gpt2/gpt2_config.h"

namespace llmc {

std::unique_ptr<ModelFamily> make_gpt2_family(const GPT2Config& config);

}  // namespace llmc
