// The speedrun schedules of speedrun_schedule.h, computed in double (and the YaRN frequencies in fp32)
// exactly as the reference's Python does, so that phase boundaries fall on the same steps.
#include "llmc/schedule/speedrun_schedule.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <string>

namespace llmc {

SpeedrunSchedule SpeedrunSchedule::record() { return SpeedrunSchedule(); }

SpeedrunSchedule SpeedrunSchedule::scaled(int scheduled_steps, int block_size) {
  if (scheduled_steps < 6)
    throw std::invalid_argument("SpeedrunSchedule::scaled: scheduled_steps " + std::to_string(scheduled_steps) +
                                " < 6 cannot hold every phase");
  SpeedrunSchedule s;
  s.scheduled_steps = scheduled_steps;
  s.extension_steps = std::max(2, scheduled_steps / 6);
  s.muon_warmup_steps = std::max(2, scheduled_steps / 6);
  s.muon_cooldown_steps = 2;
  s.validation_every = scheduled_steps / 2;
  s.block_size = block_size;
  s.validate();
  return s;
}

SpeedrunSchedule SpeedrunSchedule::for_total_steps(int total_steps, int block_size) {
  const SpeedrunSchedule record_schedule = record();
  if (total_steps < 4)
    throw std::invalid_argument("SpeedrunSchedule::for_total_steps: " + std::to_string(total_steps) +
                                " steps cannot hold three window phases and an extension step (at least 4)");
  const auto share = [&](int record_steps) {
    const double share_of_run = static_cast<double>(record_steps) * total_steps / record_schedule.total_steps();
    return static_cast<int>(std::lround(share_of_run));
  };
  SpeedrunSchedule s = record_schedule;
  s.scheduled_steps = std::min(total_steps - 1, share(record_schedule.scheduled_steps));
  s.extension_steps = total_steps - s.scheduled_steps;
  s.muon_warmup_steps = std::max(1, share(record_schedule.muon_warmup_steps));
  s.muon_cooldown_steps = std::max(1, share(record_schedule.muon_cooldown_steps));
  s.validation_every = std::max(1, share(record_schedule.validation_every));
  s.block_size = block_size;
  s.validate();
  return s;
}

void SpeedrunSchedule::validate() const {
  auto fail = [](const std::string& what) { throw std::invalid_argument("SpeedrunSchedule: " + what); };
  if (scheduled_steps < 1) fail("scheduled_steps must be >= 1");
  if (extension_steps < 0) fail("extension_steps must be >= 0");
  if (!(cooldown_fraction > 0.0 && cooldown_fraction <= 1.0)) fail("cooldown_fraction must be in (0, 1]");
  if (long_windows.empty()) fail("long_windows is empty");
  for (int w : long_windows)
    if (w < 1) fail("long_windows must be >= 1 block");
  if (final_long_window < 1 || validation_long_window < 1) fail("final windows must be >= 1 block");
  if (muon_warmup_steps < 1 || muon_cooldown_steps < 1) fail("momentum warm-up and cool-down need >= 1 step");
  if (validation_every < 0) fail("validation_every must be >= 0");
  if (block_size < 1) fail("block_size must be >= 1");
}

double SpeedrunSchedule::lr_multiplier(int step) const {
  const double x = std::min(0.9999, static_cast<double>(step) / scheduled_steps);
  if (x < 1.0 - cooldown_fraction) return 1.0;
  const double w = (1.0 - x) / cooldown_fraction;
  return w * 1.0 + (1.0 - w) * final_lr_multiplier;
}

double SpeedrunSchedule::muon_momentum(int step) const {
  const int cooldown_start = total_steps() - muon_cooldown_steps;
  if (step < muon_warmup_steps) {
    const double fraction = static_cast<double>(step) / muon_warmup_steps;
    return momentum_min + fraction * (momentum_max - momentum_min);
  }
  if (step > cooldown_start) {
    const double fraction = static_cast<double>(step - cooldown_start) / muon_cooldown_steps;
    return momentum_max - fraction * (momentum_max - momentum_min);
  }
  return momentum_max;
}

AttentionWindows SpeedrunSchedule::windows(int step) const {
  if (step < 0 || step > total_steps())
    throw std::invalid_argument("SpeedrunSchedule::windows: step " + std::to_string(step) + " outside [0, " +
                                std::to_string(total_steps()) + "]");
  if (step >= scheduled_steps) {
    const int long_blocks = step == total_steps() ? validation_long_window : final_long_window;
    return AttentionWindows{final_long_window / 2, long_blocks};
  }
  // int(len * x) with x = step / scheduled in double, as the reference: 735/2205*3 rounds to exactly 1.
  const double x = static_cast<double>(step) / scheduled_steps;
  const int index = static_cast<int>(static_cast<double>(long_windows.size()) * x);
  return AttentionWindows{long_windows[index] / 2, long_windows[index]};
}

std::vector<int> SpeedrunSchedule::window_change_steps() const { return long_window_changes(*this); }

std::vector<int> SpeedrunSchedule::warmup_steps() const {
  return steps_around_changes(window_change_steps(), total_steps());
}

std::vector<int> steps_around_changes(const std::vector<int>& changes, int total_steps) {
  std::set<int> steps = {0, 1};
  for (int change : changes)
    for (int step = change - 2; step <= change + 1; step++) steps.insert(step);
  std::vector<int> within;
  for (int step : steps)
    if (step >= 0 && step < total_steps) within.push_back(step);
  return within;
}

std::string SpeedrunSchedule::describe() const {
  std::string blocks = std::to_string(windows(0).long_blocks), steps = "0";
  for (int change : window_change_steps()) {
    blocks += "/" + std::to_string(windows(change).long_blocks);
    steps += "/" + std::to_string(change);
  }
  return std::to_string(scheduled_steps) + " scheduled + " + std::to_string(extension_steps) +
         " extension steps, long window " + blocks + " blocks from schedule steps " + steps;
}

bool SpeedrunSchedule::validates_at(int step) const {
  return step == total_steps() || (validation_every > 0 && step % validation_every == 0);
}

YarnState YarnState::initial(int head_dim) {
  if (head_dim < 8 || head_dim % 4 != 0)
    throw std::invalid_argument("YarnState: head_dim " + std::to_string(head_dim) + " must be a multiple of 4, >= 8");
  const int n = head_dim / 4;
  YarnState state;
  state.angular_frequency.assign(head_dim / 2, 0.0f);
  // torch.linspace(0, 1, n) in fp32 (from both ends), then (1/1024)^x; the power in double, rounded once.
  const float step = 1.0f / static_cast<float>(n - 1);
  for (int k = 0; k < n; k++) {
    const float x = k < n / 2 ? static_cast<float>(k) * step : 1.0f - static_cast<float>(n - 1 - k) * step;
    state.angular_frequency[k] = static_cast<float>(std::pow(2.0, -10.0 * static_cast<double>(x)));
  }
  return state;
}

void YarnState::apply(int old_window, int new_window, int block_size) {
  if (old_window < 1 || new_window < 1 || block_size < 1)
    throw std::invalid_argument("YarnState::apply: windows and block size must be >= 1");
  // PyTorch's CUDA kernels divide by a Python scalar as a multiplication by its fp32 reciprocal.
  constexpr double kPi = 3.141592653589793;  // math.pi
  constexpr float kAlpha = 1.0f, kBeta = 32.0f;
  const float inverse_two_pi = 1.0f / static_cast<float>(2.0 * kPi);
  const float inverse_span = 1.0f / (kBeta - kAlpha);
  const double scaling = static_cast<double>(old_window) / new_window;
  for (float& w : angular_frequency) {
    const float rotations = static_cast<float>(block_size * old_window) * w * inverse_two_pi;
    const float weight = std::min(1.0f, std::max(0.0f, (rotations - kAlpha) * inverse_span));
    w *= weight * static_cast<float>(1.0 - scaling) + static_cast<float>(scaling);
  }
  attention_scale *= 0.2 * std::log(static_cast<double>(new_window) / old_window) + 1.0;
}

}  // namespace llmc
