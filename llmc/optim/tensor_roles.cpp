// The speedrun records' tensor roles (see tensor_roles.h): from the modded44 and modded89 tensor kinds.
#include "llmc/optim/tensor_roles.h"

#include <stdexcept>
#include <string>

#include "llmc/model/modded44/speedrun_layout.h"
#include "llmc/model/modded89/modded89_layout.h"
#include "llmc/optim/modded89_param_table.h"

namespace llmc {

namespace {

TensorRole muon_role(const TensorView& view, int rows, int cols, int matrices, MuonStorage storage,
                     NorMuonShapeRules rules) {
  if (static_cast<size_t>(rows) * cols * matrices != view.numel)
    throw std::invalid_argument("speedrun optimizer: NorMuon tensor " + view.name + " is not " +
                                std::to_string(matrices) + " matrices of " + std::to_string(rows) + " x " +
                                std::to_string(cols));
  TensorRole role;
  role.rows = rows;
  role.cols = cols;
  role.matrices = matrices;
  role.storage = storage;
  role.rules = rules;
  return role;
}

int dim(const TensorView& view, size_t index) { return index < view.shape.size() ? static_cast<int>(view.shape[index]) : 0; }

TensorRole adam_role(double lr_multiplier, AdamShardedSettings adam) {
  TensorRole role;
  role.lr_multipliers = {lr_multiplier};
  role.adam = adam;
  return role;
}

// The 2025-10-31 record: the attention tensor [C, 4C] is four [C, C] matrices whose shape rules follow the
// stored parameter; the block matrices keep fp32 masters (W_fc's lr x2), the gates update in place. Adam
// (betas 0.65 / 0.95, eps 1e-8, no decay) at lr x75 for the embedding and value embeddings, x1 for the head,
// x5 for the scalars, which are fp32.
TensorRole role_2025(const TensorView& view) {
  const SpeedrunTensor kind = speedrun_kind(view);
  const NorMuonShapeRules stored = normuon_shape_rules(dim(view, 0), dim(view, 1));
  const AdamShardedSettings adam;  // the record's
  switch (kind) {
    case SpeedrunTensor::kQkvo: return muon_role(view, dim(view, 0), dim(view, 0), 4, MuonStorage::kFp32Master, stored);
    case SpeedrunTensor::kFc: {
      TensorRole role = muon_role(view, dim(view, 0), dim(view, 1), 1, MuonStorage::kFp32Master, stored);
      role.lr_multipliers = {2.0};
      return role;
    }
    case SpeedrunTensor::kProj: return muon_role(view, dim(view, 0), dim(view, 1), 1, MuonStorage::kFp32Master, stored);
    case SpeedrunTensor::kAttnGate:
    case SpeedrunTensor::kSmearGate: return muon_role(view, dim(view, 0), dim(view, 1), 1, MuonStorage::kInPlace, stored);
    case SpeedrunTensor::kScalars: {
      TensorRole role = adam_role(5.0, adam);
      role.fp32_state = role.fp32_param = true;
      return role;
    }
    case SpeedrunTensor::kEmbed:
    case SpeedrunTensor::kValueEmbed: return adam_role(75.0, adam);
    case SpeedrunTensor::kHead: return adam_role(1.0, adam);
  }
  throw std::invalid_argument("speedrun optimizer: tensor " + view.name + " has no 2025-10-31 role");
}

// The 2026-07-17 record: the banks as their matrices (Q/K [2D, C] per head pair, V/O and MLP two each), the
// shape rules of the matrix (the record's chunk shape), mantissa storage, c_proj (the MLP bank's second matrix)
// at lr x2; every Adam moment fp32 with the table's betas, rates and decay (modded89_param_settings), the fp32
// tensors (scalars, lambdas, the gate scale) updated in fp32.
TensorRole role_2026(const TensorView& view) {
  const Modded89Tensor kind = static_cast<Modded89Tensor>(view.kind);
  const int matrices = dim(view, 0), rows = dim(view, 1), cols = dim(view, 2);
  switch (kind) {
    case Modded89Tensor::kQkBank:
    case Modded89Tensor::kVoBank:
    case Modded89Tensor::kMlpBank: {
      if (view.shape.size() != 3) throw std::invalid_argument("speedrun optimizer: bank " + view.name + " is not 3-D");
      TensorRole role = muon_role(view, rows, cols, matrices, MuonStorage::kMantissa, normuon_shape_rules(rows, cols));
      if (kind == Modded89Tensor::kMlpBank) role.lr_multipliers = {1.0, 2.0};  // c_fc, c_proj
      return role;
    }
    default: {
      if (view.group != ParamGroup::kAdam)
        throw std::invalid_argument("speedrun optimizer: tensor " + view.name + " has no 2026-07-17 role");
      const Modded89ParamSettings table = modded89_param_settings(kind);
      TensorRole role = adam_role(table.lr_multiplier, table.adam());
      role.fp32_state = true;
      role.fp32_param = view.reference_dtype == ParamDtype::kFp32;
      return role;
    }
  }
}

}  // namespace

std::vector<TensorRole> speedrun_tensor_roles(SpeedrunRecipe recipe, const ParamLayout& layout) {
  std::vector<TensorRole> roles;
  for (const TensorView& view : layout.tensors) {
    TensorRole role = recipe == SpeedrunRecipe::k2025_10_31 ? role_2025(view) : role_2026(view);
    const bool muon = role.rows > 0;
    if (muon != (view.group == ParamGroup::kMuon))
      throw std::invalid_argument("speedrun optimizer: tensor " + view.name + " is in the " +
                                  param_group_name(view.group) + " group, its role is the other optimizer's");
    roles.push_back(role);
  }
  return roles;
}

}  // namespace llmc
