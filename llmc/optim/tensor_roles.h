// How the speedrun optimizer treats each tensor of a layout: a NorMuon tensor as a stack of matrices with the
// storage of its update, an Adam tensor with the types of its state and parameter, and each its lr multipliers
// and Adam constants. The two speedrun records' recipes as data, one role per layout tensor: the 2025-10-31
// record's (the modded44 layout) and the 2026-07-17 record's (the modded89 layout, SPEEDRUN89.md section 5).
#pragma once

#include <vector>

#include "llmc/family/param_layout.h"
#include "llmc/kernels/adam_sharded_settings.h"
#include "llmc/optim/normuon_shape.h"

namespace llmc {

// Which record's recipe an optimizer follows (its roles, schedule and per-tensor rates).
enum class SpeedrunRecipe { k2025_10_31, k2026_07_17 };

enum class MuonStorage {
  kFp32Master,  // #44's block matrices: an fp32 master on the owner, fp32 momentum and variance, floatX copy
  kInPlace,     // #44's gates: the floatX parameter updated in place, floatX momentum and variance
  kMantissa,    // the 2026-07-17 banks: the floatX parameter and a 16-bit mantissa, fp32 momentum and variance
};

struct TensorRole {
  // NorMuon tensors (ParamGroup::kMuon): `matrices` stacked matrices of rows x cols.
  int rows = 0, cols = 0, matrices = 1;
  MuonStorage storage = MuonStorage::kFp32Master;
  NorMuonShapeRules rules{false, 1.0};
  // Adam tensors (ParamGroup::kAdam).
  bool fp32_state = false;  // fp32 moments, else floatX
  bool fp32_param = false;  // updated in the model's fp32 copy of its fp32 tensors (take_fp32_params)
  AdamShardedSettings adam;  // betas, eps, weight decay
  // Both: multipliers of the optimizer's base lr, one for the whole tensor or one per matrix of the stack.
  std::vector<double> lr_multipliers = {1.0};
  double lr_multiplier(int matrix) const {
    return lr_multipliers.size() == 1 ? lr_multipliers[0] : lr_multipliers.at(static_cast<size_t>(matrix));
  }
};

// One role per tensor of `layout` (a modded44 or a modded89 layout). Throws std::invalid_argument for a tensor
// the recipe has no role for, or a NorMuon tensor whose shape is not its stack of matrices.
std::vector<TensorRole> speedrun_tensor_roles(SpeedrunRecipe recipe, const ParamLayout& layout);

}  // namespace llmc
