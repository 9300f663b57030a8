// --loss-schedule modded89: drives a model's training-loss weights (the multi-token and prefix terms,
// llmc/kernels/mtp_loss_weights.h) through the 2026-07-17 record's schedule (Modded89Schedule::loss_weights),
// step by step, and gives the log a line at each stage's start. Host-only; the model is reached through a callback
// (FamilyModel::set_loss_weights in the trainer).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "llmc/base/enum_names.h"
#include "llmc/kernels/mtp_loss_weights.h"
#include "llmc/schedule/modded89_schedule.h"

namespace llmc {

// --loss-schedule: the model's own weights throughout (fixed; the modded89 model's are its first stage's start)
// or the 2026-07-17 record's, stretched to --steps.
enum class LossScheduleKind { kFixed, kModded89 };
inline constexpr EnumName<LossScheduleKind> kLossScheduleNames[] = {{LossScheduleKind::kFixed, "fixed"},
                                                                    {LossScheduleKind::kModded89, "modded89"}};

// The schedule's weights of one step as the loss kernel takes them (tokens = the stage's next-token terms, in
// float). Throws std::invalid_argument for more terms than the kernel has (kMtpMaxTokens) or none.
MtpLossWeights mtp_loss_weights(const Modded89LossWeights& weights);

class LossWeightSchedule {
 public:
  using SetWeights = std::function<void(const MtpLossWeights& weights)>;

  LossWeightSchedule(Modded89Schedule schedule, SetWeights set_weights);

  // Before the forward of 0-based training step `step`: sets its weights (a pure function of the step, so a
  // resumed run sets what one that ran through does). Returns a log line ("# loss weights: ...") at the first
  // step it sets and at each stage's first step, none otherwise.
  std::vector<std::string> before_step(int step);

 private:
  // The line of step `step`, the first set in its stage, whose weights are `weights`.
  std::string describe(int step, int stage, const Modded89LossWeights& weights) const;

  Modded89Schedule schedule_;
  SetWeights set_weights_;
  int last_stage_ = -1;
};

}  // namespace llmc
