// The schedules of the modded-nanogpt speedrun recipe (2025-10-31 record, docs/recipes.md):
// lr multiplier, Muon momentum, attention windows, validation and Adam steps, and the YaRN state of the
// RoPE frequencies and attention scale. Steps are 0-based, as in the training loop. Pure functions.
#pragma once

#include <string>
#include <vector>

namespace llmc {

struct AttentionWindows {
  int short_blocks = 0;  // window of most attention layers, in blocks of block_size tokens
  int long_blocks = 0;   // window of the long-window layers (blocks 4 and 11)
};

struct SpeedrunSchedule {
  int scheduled_steps = 2205;                  // lr and window schedules run over these
  int extension_steps = 40;                    // then this many more at the final lr and windows
  double cooldown_fraction = 0.5;              // of scheduled_steps, the lr decays linearly ...
  double final_lr_multiplier = 0.1;            // ... to this
  std::vector<int> long_windows = {3, 7, 11};  // equal thirds of the scheduled steps; short = long / 2
  int final_long_window = 13;                  // the extension steps
  int validation_long_window = 20;             // the final validation only (YaRN not re-applied)
  int muon_warmup_steps = 300;                 // momentum momentum_min -> momentum_max over [0, warmup)
  int muon_cooldown_steps = 50;                // and back down over the last steps
  double momentum_min = 0.85, momentum_max = 0.95;
  int validation_every = 250;  // and at the end
  int block_size = 128;        // tokens per window block

  // The record's values.
  static SpeedrunSchedule record();
  // The same phases in few steps, for tests (docs/optimizers.md, "Schedules"): windows change at scheduled/3 and
  // 2 scheduled/3 and at scheduled, the lr decays over the second half, momentum warms up for
  // max(2, scheduled/6) steps and cools down over the last 2; extension max(2, scheduled/6) steps,
  // validation every scheduled/2 steps. scheduled_steps >= 6.
  static SpeedrunSchedule scaled(int scheduled_steps, int block_size = 128);
  // The record's schedule stretched to a run of total_steps (the trainer's --steps): every phase keeps its
  // share of the run, rounded to whole steps: scheduled = round(2205 total / 2245) (at most total - 1, so
  // at least one extension step), extension = the rest, momentum warm-up round(300 total / 2245) and
  // cool-down round(50 total / 2245) steps (at least 1), validation every round(250 total / 2245). At
  // total_steps == 2245 it is record(). total_steps >= 4 (three window phases and an extension step).
  static SpeedrunSchedule for_total_steps(int total_steps, int block_size = 128);

  int total_steps() const { return scheduled_steps + extension_steps; }
  double lr_multiplier(int step) const;
  double muon_momentum(int step) const;
  // Windows of training step `step` (0 <= step < total_steps()); at step == total_steps() the final
  // validation's windows (the long one widened to validation_long_window).
  AttentionWindows windows(int step) const;
  // Steps at which the long window changes (and YaRN is applied), ascending.
  std::vector<int> window_change_steps() const;
  // The untimed warm-up's steps: 0, 1 and two either side of each window change (steps_around_changes).
  std::vector<int> warmup_steps() const;
  bool validates_at(int step) const;  // before training step `step`; step == total_steps(): the last
  static bool adam_steps_at(int step) { return step % 2 == 1; }  // Adam on odd steps (two steps of gradients)

  void validate() const;  // throws std::invalid_argument naming the bad field
  // "2205 scheduled + 40 extension steps, long window 3/7/11/13 blocks from schedule steps 0/735/1470/2205"
  std::string describe() const;
};

// RoPE frequencies and attention scale, adjusted by YaRN at each long-window change.
struct YarnState {
  std::vector<float> angular_frequency;  // head_dim / 2: head_dim / 4 frequencies (1/1024)^(k/(n-1)), then zeros
  double attention_scale = 0.1;

  static YarnState initial(int head_dim = 128);
  // The long window grows from old_window to new_window blocks: frequencies that turn fewer than 32
  // times over the old window are interpolated (rot = block_size * old * w / 2pi, g = clamp((rot-1)/31, 0, 1),
  // w *= old/new + g (1 - old/new)) and attention_scale *= 1 + 0.2 ln(new/old). fp32 like the reference.
  void apply(int old_window, int new_window, int block_size);
};

// The training steps at which a schedule's long window changes (each applies YaRN), ascending: for any schedule
// with windows(step) and total_steps() (SpeedrunSchedule, Modded89Schedule).
template <class Schedule>
std::vector<int> long_window_changes(const Schedule& schedule) {
  std::vector<int> changes;
  for (int step = 1; step < schedule.total_steps(); step++)
    if (schedule.windows(step).long_blocks != schedule.windows(step - 1).long_blocks) changes.push_back(step);
  return changes;
}

// An untimed warm-up's steps: 0, 1 and the two steps either side of each of `changes` (both parities of the Adam
// pairs on each side of a change of the step's shape), those below total_steps, ascending.
std::vector<int> steps_around_changes(const std::vector<int>& changes, int total_steps);

// The YaRN state in force during training step `step` of such a schedule (every change up to and including `step`
// applied); the final validation (step == total_steps()) uses the last one.
template <class Schedule>
YarnState yarn_state_at(const Schedule& schedule, int step, int head_dim = 128) {
  YarnState state = YarnState::initial(head_dim);
  for (int change : long_window_changes(schedule)) {
    if (change > step) break;
    state.apply(schedule.windows(change - 1).long_blocks, schedule.windows(change).long_blocks, schedule.block_size);
  }
  return state;
}

}  // namespace llmc
