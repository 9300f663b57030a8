// Learning-rate schedule of the trainer: linear warmup, then cosine or linear decay (or constant)
// down to final_fraction * max_lr at the last step. Steps are 0-based, as in the training loop.
#pragma once
#include <string>

namespace llmc {

enum class LrDecay { kCosine, kLinear, kConstant };

LrDecay parse_lr_decay(const std::string& name);  // "cosine" | "linear" | "constant"; throws otherwise

struct LrSchedule {
  double max_lr = 6e-4;
  int warmup_steps = 0;
  int total_steps = 1;
  double final_fraction = 0.0;  // lr at the last step = final_fraction * max_lr
  LrDecay decay = LrDecay::kCosine;

  // Learning rate for 0-based step `step`. Warmup ramps (step+1)/warmup_steps so that step 0 already
  // trains; decay runs from the end of warmup to the last step (total_steps - 1).
  double at(int step) const;
};

}  // namespace llmc
