// The 2026-07-17 schedule of modded89_schedule.h, in double as the record's Python computes it, so that stage
// boundaries, the cooldown's start and the loss weights fall on the same steps and values.
#include "llmc/schedule/modded89_schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace llmc {

namespace {
constexpr int kRecordTotalSteps = 1285;
}  // namespace

std::vector<Modded89Stage> Modded89Schedule::record_stages() {
  // lr, global batch, document cut, cu_seqlens entries, windows (short, long), next-token weights, prefix weight.
  return {
      {1.0, 131072, 896, 64, {1, 3}, {1.0, 0.5, 0.25}, {1.0, 0.5, 0.0}, 0.25, 0.25},
      {1.52, 262144, 2048, 96, {3, 7}, {1.0, 0.5}, {1.0, 0.0}, 0.25, 0.0},
      {1.73, 393216, 2048, 128, {5, 11}, {1.0}, {1.0}, 0.0, 0.0},
      {1.0, 393216, 2048, 128, {6, 13}, {1.0}, {1.0}, 0.0, 0.0},  // the extension
  };
}

Modded89Schedule Modded89Schedule::record() {
  return Modded89Schedule();
}

Modded89Schedule Modded89Schedule::for_total_steps(int total_steps) {
  if (total_steps < 4)
    throw std::invalid_argument("Modded89Schedule::for_total_steps: " + std::to_string(total_steps) +
                                " steps cannot hold three stages and an extension step (at least 4)");
  Modded89Schedule s = record();
  const auto share = [&](int record_steps) {
    return static_cast<int>(std::lround(static_cast<double>(record_steps) * total_steps / kRecordTotalSteps));
  };
  s.scheduled_steps = std::min(total_steps - 1, share(s.scheduled_steps));
  s.extension_steps = total_steps - s.scheduled_steps;
  s.muon_warmup_steps = std::max(1, share(s.muon_warmup_steps));
  s.muon_cooldown_steps = std::max(1, share(s.muon_cooldown_steps));
  s.validation_every = std::max(1, share(s.validation_every));
  s.validate();
  return s;
}

void Modded89Schedule::validate() const {
  auto fail = [](const std::string& what) { throw std::invalid_argument("Modded89Schedule: " + what); };
  if (scheduled_steps < 3) fail("scheduled_steps must be >= 3 (a step per stage)");
  if (extension_steps < 0) fail("extension_steps must be >= 0");
  if (!(cooldown_fraction > 0.0 && cooldown_fraction <= 1.0)) fail("cooldown_fraction must be in (0, 1]");
  if (muon_warmup_steps < 1 || muon_cooldown_steps < 1) fail("momentum warm-up and cool-down need >= 1 step");
  if (validation_every < 0) fail("validation_every must be >= 0");
  if (validation_long_window < 1 || block_size < 1) fail("windows and blocks must be >= 1");
  if (stages.size() != 4) fail("there must be three stages and the extension (4 stages)");
  for (const Modded89Stage& stage : stages) {
    if (stage.batch_tokens < 1 || stage.document_cut < 1 || stage.cu_seqlens_entries < 2)
      fail("stage batch, document cut and cu_seqlens entries must be positive");
    if (stage.windows.short_blocks < 1 || stage.windows.long_blocks < 1) fail("stage windows must be >= 1 block");
    if (stage.mtp_start.empty() || stage.mtp_start.size() != stage.mtp_end.size())
      fail("a stage's next-token weights need as many end values as start values");
  }
}

std::vector<int> Modded89Schedule::stage_starts() const {
  const int third = static_cast<int>(std::lround(scheduled_steps / 3.0));
  const int two_thirds = static_cast<int>(std::lround(2.0 * scheduled_steps / 3.0));
  return {0, third, two_thirds, scheduled_steps};
}

Modded89StagePosition Modded89Schedule::position(int step) const {
  std::vector<int> ends = stage_starts();
  ends.push_back(total_steps());
  for (int i = 0; i + 1 < static_cast<int>(ends.size()); i++)
    if (step < ends[i + 1]) return {i, static_cast<double>(step - ends[i]) / (ends[i + 1] - ends[i])};
  return {static_cast<int>(stages.size()) - 1, 1.0};
}

double Modded89Schedule::lr_multiplier(int step) const {
  double f = stage(step).lr_multiplier;
  const int cooldown_start = static_cast<int>(scheduled_steps * (1.0 - cooldown_fraction));
  if (step >= cooldown_start) {
    const double t = std::min(1.0, static_cast<double>(step - cooldown_start) / (scheduled_steps - cooldown_start));
    f = f * (1.0 - t) + final_lr_multiplier * t;
  }
  return f;
}

double Modded89Schedule::muon_momentum(int step) const {
  const int cooldown_start = total_steps() - muon_cooldown_steps;
  if (step < muon_warmup_steps)
    return momentum_min + static_cast<double>(step) / muon_warmup_steps * (momentum_max - momentum_min);
  if (step > cooldown_start)
    return momentum_max -
           static_cast<double>(step - cooldown_start) / muon_cooldown_steps * (momentum_max - momentum_min);
  return momentum_max;
}

Modded89LossWeights Modded89Schedule::loss_weights(int step) const {
  const Modded89StagePosition at = position(step);
  const Modded89Stage& s = stages[static_cast<size_t>(at.stage)];
  Modded89LossWeights weights;
  for (size_t k = 0; k < s.mtp_start.size(); k++)
    weights.next.push_back(s.mtp_start[k] + (s.mtp_end[k] - s.mtp_start[k]) * at.t);
  weights.prefix = s.prefix_start + (s.prefix_end - s.prefix_start) * at.t;
  return weights;
}

AttentionWindows Modded89Schedule::windows(int step) const {
  if (step < 0 || step > total_steps())
    throw std::invalid_argument("Modded89Schedule::windows: step " + std::to_string(step) + " outside [0, " +
                                std::to_string(total_steps()) + "]");
  if (step == total_steps()) return AttentionWindows{stages.back().windows.short_blocks, validation_long_window};
  return stage(step).windows;
}

std::vector<int> Modded89Schedule::window_change_steps() const { return long_window_changes(*this); }

bool Modded89Schedule::validates_at(int step) const {
  return step == total_steps() || (validation_every > 0 && step % validation_every == 0);
}

std::vector<int> Modded89Schedule::warmup_steps() const {
  const std::vector<int> starts = stage_starts();
  return steps_around_changes(std::vector<int>(starts.begin() + 1, starts.end()), total_steps());
}

std::string Modded89Schedule::describe() const {
  const std::vector<int> starts = stage_starts();
  return std::to_string(scheduled_steps) + " scheduled + " + std::to_string(extension_steps) +
         " extension steps, stages from " + std::to_string(starts[0]) + "/" + std::to_string(starts[1]) + "/" +
         std::to_string(starts[2]) + "/" + std::to_string(starts[3]) + ", untie at " + std::to_string(untie_step());
}

}  // namespace llmc
