// The training-loss weight schedule of the trainer (see loss_schedule.h).
#include "llmc/train/loss_schedule.h"

#include <cstdio>
#include <stdexcept>
#include <utility>

namespace llmc {

namespace {
// "1 0.5 0.25": weights as the log prints them.
std::string list(const std::vector<double>& values) {
  std::string text;
  char number[32];
  for (double value : values) {
    std::snprintf(number, sizeof number, "%.4g", value);
    text += (text.empty() ? "" : " ") + std::string(number);
  }
  return text;
}
}  // namespace

MtpLossWeights mtp_loss_weights(const Modded89LossWeights& weights) {
  const size_t tokens = weights.next.size();
  if (tokens < 1 || tokens > static_cast<size_t>(kMtpMaxTokens))
    throw std::invalid_argument("mtp_loss_weights: " + std::to_string(tokens) + " next-token terms (1.." +
                                std::to_string(kMtpMaxTokens) + ")");
  MtpLossWeights out;
  out.tokens = static_cast<int>(tokens);
  for (size_t k = 0; k < tokens; k++) out.next[k] = static_cast<float>(weights.next[k]);
  out.prefix = static_cast<float>(weights.prefix);
  return out;
}

LossWeightSchedule::LossWeightSchedule(Modded89Schedule schedule, SetWeights set_weights)
    : schedule_(std::move(schedule)), set_weights_(std::move(set_weights)) {
  schedule_.validate();
}

std::vector<std::string> LossWeightSchedule::before_step(int step) {
  if (step < 0 || step >= schedule_.total_steps())
    throw std::invalid_argument("LossWeightSchedule: step " + std::to_string(step) + " outside [0, " +
                                std::to_string(schedule_.total_steps()) + ")");
  const Modded89LossWeights weights = schedule_.loss_weights(step);
  set_weights_(mtp_loss_weights(weights));
  const int stage = schedule_.position(step).stage;
  if (stage == last_stage_) return {};
  last_stage_ = stage;
  return {describe(step, stage, weights)};
}

// "# loss weights: step 424 (schedule step 423) stage 2: next tokens 1 0.5 -> 1 0, prefix 0.25 -> 0"
std::string LossWeightSchedule::describe(int step, int stage, const Modded89LossWeights& weights) const {
  const Modded89Stage& s = schedule_.stages[static_cast<size_t>(stage)];
  return "# loss weights: step " + std::to_string(step + 1) + " (schedule step " + std::to_string(step) + ") " +
         (stage == 3 ? std::string("extension") : "stage " + std::to_string(stage + 1)) + ": next tokens " +
         list(weights.next) + " -> " + list(s.mtp_end) + ", prefix " + list({weights.prefix}) + " -> " +
         list({s.prefix_end}) +
         (step == schedule_.stage_starts()[static_cast<size_t>(stage)] ? "" : " (resumed mid-stage)");
}

}  // namespace llmc
