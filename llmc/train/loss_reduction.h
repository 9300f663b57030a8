// --loss-reduction: which loss the backward differentiates, as a scale of each token's loss gradient (the
// dloss the models take). The logged loss is the per-token mean either way. Host-only.
#pragma once

#include <cstdint>

#include "llmc/base/enum_names.h"

namespace llmc {

// mean: the mean over every token of the step (llm.c's GPT-2). sum: the SUM over each micro-step's tokens
// (one rank's packed sequence in the speedrun record), averaged over micro-steps and ranks, which is the
// record's gradient on 8 ranks whatever ranks x micro-steps make the step. The optimizers' epsilons (Adam's
// 1e-8, Polar Express's 1e-6) are set for the record's scale, so the speedrun optimizer needs sum.
// auto: sum with the speedrun optimizer, mean with ZeRO AdamW.
enum class LossReduction { kAuto, kMean, kSum };
inline constexpr EnumName<LossReduction> kLossReductionNames[] = {
    {LossReduction::kAuto, "auto"}, {LossReduction::kMean, "mean"}, {LossReduction::kSum, "sum"}};

// d(training loss) / d(one token's loss) for a step of grad_accum micro-steps of tokens_per_micro_step
// tokens each, on every rank (the collectives average over ranks). `reduction` is mean or sum.
inline float loss_gradient_scale(LossReduction reduction, int64_t tokens_per_micro_step, int grad_accum) {
  const double micro_steps = grad_accum;
  return static_cast<float>(reduction == LossReduction::kSum
                                ? 1.0 / micro_steps
                                : 1.0 / (micro_steps * static_cast<double>(tokens_per_micro_step)));
}

}  // namespace llmc
