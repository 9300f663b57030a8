// How an optimizer overlaps its gradient communication with the backward (--overlap), for both
// optimizers (zero.h, speedrun_optimizer.h).
#pragma once
#include <stdexcept>
#include <string>

#include "llmc/base/enum_names.h"

namespace llmc {

enum class OverlapMode {  // --overlap none | rs | full
  kNone,           // every collective and update after the whole backward (the baseline)
  kReduceScatter,  // reduce-scatters during the backward, updates + all-gathers after it, in reverse layer order
  kFull,           // reduce-scatter, update and all-gather of each bucket as soon as its gradients are final
};
inline constexpr EnumName<OverlapMode> kOverlapModeNames[] = {
    {OverlapMode::kNone, "none"}, {OverlapMode::kReduceScatter, "rs"}, {OverlapMode::kFull, "full"}};

// Throws std::invalid_argument for a name that is none of them.
inline OverlapMode parse_overlap_mode(const std::string& name) {
  if (const auto mode = value_named(name, kOverlapModeNames)) return *mode;
  throw std::invalid_argument("unknown overlap mode '" + name + "' (expected " + names_listed(kOverlapModeNames) + ")");
}

}  // namespace llmc
