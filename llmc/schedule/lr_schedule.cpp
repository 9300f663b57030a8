// Learning-rate schedule: warmup then cosine/linear/constant decay (see lr_schedule.h).
#include "llmc/schedule/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "llmc/schedule/modded89_schedule.h"
#include "llmc/schedule/speedrun_schedule.h"

namespace llmc {

LrDecay parse_lr_decay(const std::string& name) {
  if (const auto decay = value_named(name, kLrDecayNames)) return *decay;
  throw std::invalid_argument("unknown learning-rate schedule '" + name + "' (expected " + names_listed(kLrDecayNames) +
                              ")");
}

double LrSchedule::at(int step) const {
  if (step < warmup_steps) return max_lr * (step + 1) / warmup_steps;
  const double min_lr = final_fraction * max_lr;
  const int decay_steps = total_steps - 1 - warmup_steps;
  if (decay == LrDecay::kConstant) return max_lr;
  if (decay == LrDecay::kSpeedrun) return max_lr * SpeedrunSchedule::for_total_steps(total_steps).lr_multiplier(step);
  if (decay == LrDecay::kModded89) return max_lr * Modded89Schedule::for_total_steps(total_steps).lr_multiplier(step);
  if (decay_steps <= 0) return min_lr;
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / decay_steps);
  const double weight = decay == LrDecay::kCosine ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
  return min_lr + weight * (max_lr - min_lr);
}

}  // namespace llmc
