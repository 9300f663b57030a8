// The 2026-07-17 record's per-tensor optimizer table (see modded89_param_table.h), transcribed from
// SPEEDRUN89.md section 5 (the record's param_table).
#include "llmc/optim/modded89_param_table.h"

#include <stdexcept>
#include <string>

namespace llmc {

namespace {
Modded89ParamSettings adam(double beta1, double beta2, double lr_multiplier, double weight_decay_multiplier) {
  return Modded89ParamSettings{Modded89Optimizer::kAdam, beta1, beta2, lr_multiplier, weight_decay_multiplier};
}
}  // namespace

Modded89ParamSettings modded89_param_settings(Modded89Tensor kind) {
  switch (kind) {
    case Modded89Tensor::kQkBank:
    case Modded89Tensor::kVoBank:
    case Modded89Tensor::kMlpBank: return Modded89ParamSettings{Modded89Optimizer::kNorMuon, 0.0, 0.0, 1.0, 1.0};
    case Modded89Tensor::kScalars: return adam(0.9, 0.99, 5.0, 0.0);
    case Modded89Tensor::kSmearGate: return adam(0.9, 0.99, 0.01, 0.0);
    case Modded89Tensor::kValueGate: return adam(0.9, 0.99, 1.0, 1.0);  // ve_gate_bank
    case Modded89Tensor::kEmbed:
    case Modded89Tensor::kHead: return adam(0.5, 0.95, 1.0, 150.0);
    case Modded89Tensor::kBigram:
    case Modded89Tensor::kValueEmbeds: return adam(0.75, 0.95, 75.0, 5.0);
    case Modded89Tensor::kPostLambdas: return adam(0.9, 0.95, 1.0, 0.0);
    case Modded89Tensor::kResidLambdas: return adam(0.9, 0.95, 5.0, 0.0);
    case Modded89Tensor::kMuddW1:
    case Modded89Tensor::kMuddW2: return adam(0.9, 0.99, 0.25, 1.0);
    case Modded89Tensor::kMuddB2: return adam(0.9, 0.99, 0.25, 0.0);
    case Modded89Tensor::kGateW1:
    case Modded89Tensor::kGateW2: return adam(0.9, 0.99, 0.1, 1.0);
    case Modded89Tensor::kGateB2:
    case Modded89Tensor::kGateScale: return adam(0.9, 0.99, 0.1, 0.0);
  }
  throw std::invalid_argument("modded89_param_settings: unknown tensor kind " +
                              std::to_string(static_cast<int>(kind)));
}

}  // namespace llmc
