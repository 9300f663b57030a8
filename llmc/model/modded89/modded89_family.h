// The 2026-07-17 record's model as a model family (llmc/family/model_family.h): its registry entry.
#pragma once
#include <memory>

#include "llmc/family/model_family.h"
#include "llmc/model/modded89/modded89_attention_state.h"
#include "llmc/model/modded89/modded89_config.h"

namespace llmc {

// `attention`: what its decoders attend with (a model file's state; the record's first state without one).
// Training ignores it: a run starts from the first state and its window schedule replays the changes.
std::unique_ptr<ModelFamily> make_modded89_family(const Modded89Config& config);
std::unique_ptr<ModelFamily> make_modded89_family(const Modded89Config& config,
                                                  const Modded89AttentionState& attention);

}  // namespace llmc
