// The 2026-07-17 record's per-tensor optimizer settings (SPEEDRUN89.md section 5's table), by tensor kind of
// the modded89 layout: which optimizer updates it, and for Adam its betas and lr and weight-decay multipliers.
// Pure data; the optimizer that reads it for the modded89 family comes with issue 26.
#pragma once

#include "llmc/kernels/adam_sharded_settings.h"
#include "llmc/model/modded89/modded89_layout.h"

namespace llmc {

enum class Modded89Optimizer { kNorMuon, kAdam };

struct Modded89ParamSettings {
  Modded89Optimizer optimizer = Modded89Optimizer::kAdam;
  double beta1 = 0.9, beta2 = 0.99;  // Adam's
  double lr_multiplier = 1.0;        // of Adam's 0.008 (NorMuon: 1; c_proj's x2 is per matrix of the MLP bank)
  double weight_decay_multiplier = 0.0;
  // The Adam settings these make (eps 1e-10, weight decay 0.005 x the multiplier).
  AdamShardedSettings adam() const { return AdamShardedSettings::record_2026(beta1, beta2, weight_decay_multiplier); }
};

// Throws std::invalid_argument for a value outside the enum.
Modded89ParamSettings modded89_param_settings(Modded89Tensor kind);

// The record's base learning rates (times the schedule's factor; Adam's also times the tensor's multiplier).
inline constexpr double kModded89NorMuonLr = 0.023;
inline constexpr double kModded89AdamLr = 0.008;

}  // namespace llmc
