// Learning-rate schedule of the trainer: linear warmup, then cosine or linear decay (or constant)
// down to final_fraction * max_lr at the last step, or the speedrun record's multiplier times max_lr.
// Steps are 0-based, as in the training loop.
#pragma once
#include <string>

#include "llmc/base/enum_names.h"

namespace llmc {

// kSpeedrun: max_lr * SpeedrunSchedule::for_total_steps(total_steps).lr_multiplier(step) (1 for the first
// half of the scheduled steps, then linear down to 0.1; llmc/schedule/speedrun_schedule.h); kModded89: max_lr *
// Modded89Schedule::for_total_steps(total_steps).lr_multiplier(step) (the 2026-07-17 record's stage multipliers
// and cooldown to 0.15; llmc/schedule/modded89_schedule.h); final_fraction is not used by either.
enum class LrDecay { kCosine, kLinear, kConstant, kSpeedrun, kModded89 };
inline constexpr EnumName<LrDecay> kLrDecayNames[] = {
    {LrDecay::kCosine, "cosine"},     {LrDecay::kLinear, "linear"},     {LrDecay::kConstant, "constant"},
    {LrDecay::kSpeedrun, "speedrun"}, {LrDecay::kModded89, "modded89"}};

// "cosine" | "linear" | "constant" | "speedrun" | "modded89"; throws otherwise
LrDecay parse_lr_decay(const std::string& name);

struct LrSchedule {
  double max_lr = 6e-4;
  int warmup_steps = 0;
  int total_steps = 1;
  double final_fraction = 0.0;  // lr at the last step = final_fraction * max_lr
  LrDecay decay = LrDecay::kCosine;

  // Learning rate for 0-based step `step`. Warmup ramps (step+1)/warmup_steps so that step 0 already
  // trains; decay runs from the end of warmup to the last step (total_steps - 1).
  double at(int step) const;
};

}  // namespace llmc
