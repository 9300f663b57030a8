// The schedule of the 2026-07-17 record (SPEEDRUN89.md sections 5-6): three stages and an extension, each with its
// lr multiplier, global batch, document cut, cu_seqlens padding, attention windows and multi-token/prefix loss
// weights; the lr cooldown, NorMuon's momentum, the untie step, validation and Adam steps, the warm-up's steps, and
// YaRN at each long-window change. Stretched to any number of steps as the 2025-10-31 schedule is. Pure functions.
#pragma once

#include <string>
#include <vector>

#include "llmc/schedule/speedrun_schedule.h"

namespace llmc {

struct Modded89Stage {
  double lr_multiplier = 1.0;     // f before the cooldown (the extension's is never used: the cooldown has ended)
  int batch_tokens = 0;           // global tokens per step
  int document_cut = 0;           // longest document the loader packs, in tokens
  int cu_seqlens_entries = 0;     // document bounds per rank, padded to this many
  AttentionWindows windows;       // in blocks
  std::vector<double> mtp_start;  // next-token weights at the stage's start ...
  std::vector<double> mtp_end;    // ... and at its end (linear in between)
  double prefix_start = 0.0, prefix_end = 0.0;  // the prefix-token weight, alike
};

// The loss weights of one step: next tokens k = 0 .. size-1, then the prefix term.
struct Modded89LossWeights {
  std::vector<double> next;
  double prefix = 0.0;
};

// Where a step falls: its stage (0..3, 3 the extension) and the fraction t of the stage behind it.
struct Modded89StagePosition {
  int stage = 0;
  double t = 0.0;
};

struct Modded89Schedule {
  int scheduled_steps = 1270;         // the three stages (boundaries round(scheduled k / 3))
  int extension_steps = 15;           // then the extension stage
  double cooldown_fraction = 0.6;     // from int(scheduled (1 - fraction)) the lr goes linearly ...
  double final_lr_multiplier = 0.15;  // ... to this at the end of the scheduled steps
  int muon_warmup_steps = 300;        // NorMuon momentum 0.85 -> 0.95 over [0, warmup)
  int muon_cooldown_steps = 50;       // and back down over the last steps
  double momentum_min = 0.85, momentum_max = 0.95;
  int validation_every = 250;       // and at the end
  int validation_long_window = 20;  // the final validation's long window (YaRN not re-applied)
  int validation_cu_seqlens = 896;  // document bounds per rank in validation
  int block_size = 128;             // tokens per window block
  std::vector<Modded89Stage> stages = record_stages();

  static std::vector<Modded89Stage> record_stages();
  static Modded89Schedule record();
  // The record's schedule stretched to a run of total_steps (the trainer's --steps): scheduled = round(1270 total /
  // 1285) (at most total - 1: at least one extension step), the extension the rest, the momentum warm-up and
  // cool-down and the validation interval their share of the run, rounded (at least 1). At total_steps == 1285 it
  // is record(). total_steps >= 4 (three stages of at least one step and an extension step).
  static Modded89Schedule for_total_steps(int total_steps);

  int total_steps() const { return scheduled_steps + extension_steps; }
  // The first step of each stage: 0, round(scheduled / 3), round(2 scheduled / 3), scheduled.
  std::vector<int> stage_starts() const;
  // Step `step`'s stage and position in it (past the last step: the extension at t = 1).
  Modded89StagePosition position(int step) const;
  const Modded89Stage& stage(int step) const { return stages[static_cast<size_t>(position(step).stage)]; }
  double lr_multiplier(int step) const;  // f(step), for both optimizers
  double muon_momentum(int step) const;
  Modded89LossWeights loss_weights(int step) const;
  // Windows of training step `step`; at step == total_steps() the final validation's (long validation_long_window).
  AttentionWindows windows(int step) const;
  std::vector<int> window_change_steps() const;  // where the long window changes (and YaRN is applied), ascending
  // The step whose update unties the embedding from the head: the third stage's first step, made odd (an Adam step).
  int untie_step() const { return stage_starts()[2] | 1; }
  bool validates_at(int step) const;  // before training step `step`; step == total_steps(): the last
  static bool adam_steps_at(int step) { return step % 2 == 1; }
  // The untimed warm-up's steps: 0, 1 and the two steps either side of each later stage's start.
  std::vector<int> warmup_steps() const;

  void validate() const;  // throws std::invalid_argument naming the bad field
  // "1270 scheduled + 15 extension steps, stages from 0/423/847/1270, untie at 847"
  std::string describe() const;
};

// yarn_state_at(schedule, step) (speedrun_schedule.h) gives the YaRN state of both rotary tables during a step.

}  // namespace llmc
