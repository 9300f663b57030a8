// --window-schedule speedrun|modded89: drives a model's attention windows through a record's schedule
// (SpeedrunSchedule or Modded89Schedule), step by step, with the YaRN update at each change of the long window,
// and gives the log its lines. Host-only; the model is reached through a callback
// (FamilyModel::set_attention_windows in the trainer).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "llmc/base/enum_names.h"
#include "llmc/schedule/modded89_schedule.h"
#include "llmc/schedule/speedrun_schedule.h"

namespace llmc {

// --window-schedule: a speedrun model's windows fixed at its first ones, the 2025-10-31 record's schedule or the
// 2026-07-17 record's.
enum class WindowScheduleKind { kFixed, kSpeedrun, kModded89 };
inline constexpr EnumName<WindowScheduleKind> kWindowScheduleNames[] = {{WindowScheduleKind::kFixed, "fixed"},
                                                                         {WindowScheduleKind::kSpeedrun, "speedrun"},
                                                                         {WindowScheduleKind::kModded89, "modded89"}};

// A schedule's windows at each step 0 .. total_steps() (the last: the final validation's) and the block size YaRN
// counts in.
struct WindowPlan {
  std::vector<AttentionWindows> windows;
  std::vector<int> changes;  // the schedule's window_change_steps(): each applies YaRN
  int block_size = 128;

  static WindowPlan of(const SpeedrunSchedule& schedule);
  static WindowPlan of(const Modded89Schedule& schedule);
  int total_steps() const { return static_cast<int>(windows.size()) - 1; }
  const std::vector<int>& change_steps() const { return changes; }
};

class WindowSchedule {
 public:
  // Sets the model's windows; with apply_yarn a change of the long window also applies YaRN. Returns the
  // attention scale in force afterwards (for the log).
  using SetWindows = std::function<double(const AttentionWindows& windows, bool apply_yarn)>;

  // The model starts at plan.windows[0] with the initial YaRN state (a fresh model).
  WindowSchedule(WindowPlan plan, SetWindows set_windows);

  // Before the forward of 0-based training step `step` (and before a validation between steps `step` - 1
  // and `step`, which uses step's windows): applies, in order, each change of the long window after the
  // last step set here up to and including `step`, each with YaRN (so a resumed run reaches the same RoPE
  // state as one that ran through), then step's windows. step == plan.total_steps() is the final
  // validation: its wider long window without YaRN. Steps must not decrease. Returns a log line
  // ("# windows: ...") per change, none when the windows stay.
  std::vector<std::string> before_step(int step);

 private:
  std::string describe(int step, const AttentionWindows& windows, bool yarn, double attention_scale) const;

  WindowPlan plan_;
  SetWindows set_windows_;
  int last_step_ = 0;
  AttentionWindows current_;
};

}  // namespace llmc
