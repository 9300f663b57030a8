// The attention-window schedule of the trainer (see window_schedule.h).
#include "llmc/train/window_schedule.h"

#include <cstdio>
#include <stdexcept>
#include <utility>

namespace llmc {

WindowSchedule::WindowSchedule(const SpeedrunSchedule& schedule, SetWindows set_windows)
    : schedule_(schedule), set_windows_(std::move(set_windows)), current_(schedule.windows(0)) {
  schedule_.validate();
}

std::vector<std::string> WindowSchedule::before_step(int step) {
  if (step < last_step_)
    throw std::invalid_argument("WindowSchedule: step " + std::to_string(step) + " after step " +
                                std::to_string(last_step_));
  std::vector<std::string> lines;
  for (int change : schedule_.window_change_steps()) {
    if (change <= last_step_ || change > step) continue;
    current_ = schedule_.windows(change);
    const double scale = set_windows_(current_, /*apply_yarn=*/true);
    lines.push_back(describe(change, current_, true, scale));
  }
  const AttentionWindows wanted = schedule_.windows(step);
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
  const std::string when = step == schedule_.total_steps()
                               ? std::string("final validation")
                               : "step " + std::to_string(step + 1) + " (schedule step " + std::to_string(step) + ")";
  std::snprintf(text, sizeof text, "# windows: %s short %d long %d blocks, attn_scale %.6f%s", when.c_str(),
                windows.short_blocks, windows.long_blocks, attention_scale, yarn ? " (YaRN)" : "");
  return text;
}

}  // namespace llmc
