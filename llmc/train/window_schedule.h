// --window-schedule speedrun: drives a model's attention windows through SpeedrunSchedule::windows,
// step by step, with the YaRN update at each change of the long window, and gives the log its lines.
// Host-only; the model is reached through a callback (TrainableModel::set_attention_windows in the trainer).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "llmc/base/enum_names.h"
#include "llmc/schedule/speedrun_schedule.h"

namespace llmc {

// --window-schedule: a speedrun model's windows fixed at the record's first ones, or the record's schedule.
enum class WindowScheduleKind { kFixed, kSpeedrun };
inline constexpr EnumName<WindowScheduleKind> kWindowScheduleNames[] = {
    {WindowScheduleKind::kFixed, "fixed"}, {WindowScheduleKind::kSpeedrun, "speedrun"}};

class WindowSchedule {
 public:
  // Sets the model's windows; with apply_yarn a change of the long window also applies YaRN. Returns the
  // attention scale in force afterwards (for the log).
  using SetWindows = std::function<double(const AttentionWindows& windows, bool apply_yarn)>;

  // The model starts at schedule.windows(0) with the initial YaRN state (a fresh SpeedrunModel).
  WindowSchedule(const SpeedrunSchedule& schedule, SetWindows set_windows);

  // Before the forward of 0-based training step `step` (and before a validation between steps `step` - 1
  // and `step`, which uses step's windows): applies, in order, each change of the long window after the
  // last step set here up to and including `step`, each with YaRN (so a resumed run reaches the same RoPE
  // state as one that ran through), then step's windows. step == schedule.total_steps() is the final
  // validation: its wider long window without YaRN. Steps must not decrease. Returns a log line
  // ("# windows: ...") per change, none when the windows stay.
  std::vector<std::string> before_step(int step);

  const SpeedrunSchedule& schedule() const { return schedule_; }

 private:
  std::string describe(int step, const AttentionWindows& windows, bool yarn, double attention_scale) const;

  SpeedrunSchedule schedule_;
  SetWindows set_windows_;
  int last_step_ = 0;
  AttentionWindows current_;
};

}  // namespace llmc
