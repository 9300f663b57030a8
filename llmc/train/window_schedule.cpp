// The attention-window schedule of the trainer (see window_schedule.h).
#include "llmc/train/window_schedule.h"

#include <cstdio>
#include <stdexcept>
#include <utility>

namespace llmc {

namespace {
template <class Schedule>
WindowPlan plan_of(const Schedule& schedule) {
  schedule.validate();
  WindowPlan plan;
  for (int step = 0; step <= schedule.total_steps(); step++) plan.windows.push_back(schedule.windows(step));
  plan.changes = schedule.window_change_steps();
  plan.block_size = schedule.block_size;
  return plan;
}
}  // namespace

WindowPlan WindowPlan::of(const SpeedrunSchedule& schedule) { return plan_of(schedule); }
WindowPlan WindowPlan::of(const Modded89Schedule& schedule) { return plan_of(schedule); }

WindowSchedule::WindowSchedule(WindowPlan plan, SetWindows set_windows)
    : plan_(std::move(plan)), set_windows_(std::move(set_windows)) {
  if (plan_.windows.size() < 2) throw std::invalid_argument("WindowSchedule: a plan needs at least one step");
  current_ = plan_.windows[0];
}

std::vector<std::string> WindowSchedule::before_step(int step) {
  if (step < last_step_)
    throw std::invalid_argument("WindowSchedule: step " + std::to_string(step) + " after step " +
                                std::to_string(last_step_));
  std::vector<std::string> lines;
  if (step > plan_.total_steps())
    throw std::invalid_argument("WindowSchedule: step " + std::to_string(step) + " past the plan's " +
                                std::to_string(plan_.total_steps()));
  for (int change : plan_.changes) {
    if (change <= last_step_ || change > step) continue;
    current_ = plan_.windows[static_cast<size_t>(change)];
    const double scale = set_windows_(current_, /*apply_yarn=*/true);
    lines.push_back(describe(change, current_, true, scale));
  }
  const AttentionWindows wanted = plan_.windows[static_cast<size_t>(step)];
  if (wanted.short_blocks != current_.short_blocks || wanted.long_blocks != current_.long_blocks) {
    current_ = wanted;  // only the final validation's window changes without YaRN
    const double scale = set_windows_(current_, /*apply_yarn=*/false);
    lines.push_back(describe(step, current_, false, scale));
  }
  last_step_ = step;
  return lines;
}

std::string WindowSchedule::describe(int step, const AttentionWindows& windows, bool yarn,
                                     double attention_scale) const {
  char text[160];
  const std::string when = step == plan_.total_steps()
                               ? std::string("final validation")
                               : "step " + std::to_string(step + 1) + " (schedule step " + std::to_string(step) + ")";
  std::snprintf(text, sizeof text, "# windows: %s short %d long %d blocks, attn_scale %.6f%s", when.c_str(),
                windows.short_blocks, windows.long_blocks, attention_scale, yarn ? " (YaRN)" : "");
  return text;
}

}  // namespace llmc
