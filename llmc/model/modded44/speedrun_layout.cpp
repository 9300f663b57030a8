// Lays out the speedrun model's parameters in one bucketed buffer (see speedrun_layout.h).
#include "llmc/model/modded44/speedrun_layout.h"

#include <stdexcept>

namespace llmc {

const char* speedrun_tensor_name(SpeedrunTensor kind) {
  switch (kind) {
    case SpeedrunTensor::kEmbed:
      return "embed";
    case SpeedrunTensor::kValueEmbed:
      return "ve";
    case SpeedrunTensor::kSmearGate:
      return "smear_gate";
    case SpeedrunTensor::kScalars:
      return "scalars";
    case SpeedrunTensor::kQkvo:
      return "qkvo";
    case SpeedrunTensor::kAttnGate:
      return "attn_gate";
    case SpeedrunTensor::kFc:
      return "fc";
    case SpeedrunTensor::kProj:
      return "proj";
    case SpeedrunTensor::kHead:
      return "head";
  }
  return "?";
}

namespace {

constexpr int kNumSpeedrunTensors = 9;

TensorSpec speedrun_spec(SpeedrunTensor kind, int layer, const SpeedrunConfig& config) {
  const size_t V = static_cast<size_t>(config.vocab_size), C = static_cast<size_t>(config.channels());
  const size_t gate = static_cast<size_t>(kSpeedrunGateWidth);
  TensorSpec spec;
  spec.kind = static_cast<int>(kind);
  spec.layer = layer;
  const bool per_block = kind == SpeedrunTensor::kQkvo || kind == SpeedrunTensor::kAttnGate ||
                         kind == SpeedrunTensor::kFc || kind == SpeedrunTensor::kProj;
  spec.name = per_block ? "blocks." + std::to_string(layer) + "." + speedrun_tensor_name(kind)
              : kind == SpeedrunTensor::kValueEmbed ? "ve" + std::to_string(layer)
                                                    : speedrun_tensor_name(kind);
  switch (kind) {
    case SpeedrunTensor::kEmbed:
    case SpeedrunTensor::kValueEmbed:
    case SpeedrunTensor::kHead:
      spec.shape = {V, C};
      break;
    case SpeedrunTensor::kSmearGate:
      spec.shape = {1, gate};
      break;
    case SpeedrunTensor::kScalars:
      spec.shape = {static_cast<size_t>(SpeedrunScalarIndex{config.num_blocks}.count())};
      break;
    case SpeedrunTensor::kAttnGate:
      spec.shape = {static_cast<size_t>(config.num_heads), gate};
      break;
    default:
      spec.shape = {C, 4 * C};
      break;  // qkvo, fc, proj
  }
  const bool adam = kind == SpeedrunTensor::kEmbed || kind == SpeedrunTensor::kValueEmbed ||
                    kind == SpeedrunTensor::kHead || kind == SpeedrunTensor::kScalars;
  spec.group = adam ? ParamGroup::kAdam : ParamGroup::kMuon;
  // The record decays exactly the Muon group (cautious weight decay); the AdamW fallback does the same.
  spec.weight_decay = !adam;
  const bool fp32 = kind == SpeedrunTensor::kScalars || kind == SpeedrunTensor::kQkvo || kind == SpeedrunTensor::kFc ||
                    kind == SpeedrunTensor::kProj;
  spec.reference_dtype = fp32 ? ParamDtype::kFp32 : ParamDtype::kBf16;
  return spec;
}

}  // namespace

const TensorView& SpeedrunLayout::tensor(SpeedrunTensor kind, int block) const {
  const int L = config.num_blocks;
  const bool indexed = kind == SpeedrunTensor::kQkvo || kind == SpeedrunTensor::kAttnGate ||
                       kind == SpeedrunTensor::kFc || kind == SpeedrunTensor::kProj ||
                       kind == SpeedrunTensor::kValueEmbed;
  if (!indexed) block = -1;
  const int index =
      block >= -1 && block < L ? tensor_index_[static_cast<size_t>(static_cast<int>(kind) * (L + 1) + block + 1)] : -1;
  if (index < 0)
    throw std::out_of_range(std::string("SpeedrunLayout::tensor: no ") + speedrun_tensor_name(kind) + " for block " +
                            std::to_string(block) + " in a model of " + std::to_string(L) + " blocks");
  return tensors[static_cast<size_t>(index)];
}

int SpeedrunLayout::block_bucket(int block) const {
  if (block < 0 || block >= config.num_blocks)
    throw std::out_of_range("SpeedrunLayout::block_bucket: block " + std::to_string(block) + " outside [0, " +
                            std::to_string(config.num_blocks) + ")");
  return block_bucket_[static_cast<size_t>(block)];
}

SpeedrunLayout make_speedrun_layout(const SpeedrunConfig& config, int world_size) {
  validate_speedrun_config(config);
  const SpeedrunStructure structure = speedrun_structure(config.num_blocks);
  const int L = config.num_blocks;
  std::vector<std::vector<TensorSpec>> buckets(1);
  buckets[0].push_back(speedrun_spec(SpeedrunTensor::kEmbed, -1, config));
  for (int k = 0; k < kSpeedrunValueEmbeds; k++)
    buckets[0].push_back(speedrun_spec(SpeedrunTensor::kValueEmbed, k, config));
  buckets[0].push_back(speedrun_spec(SpeedrunTensor::kSmearGate, -1, config));
  buckets[0].push_back(speedrun_spec(SpeedrunTensor::kScalars, -1, config));
  std::vector<int> block_bucket(static_cast<size_t>(L), -1);
  for (int i = 0; i < L; i++) {
    const SpeedrunBlock& role = structure.blocks[static_cast<size_t>(i)];
    if (!role.attention && !role.mlp) continue;
    block_bucket[static_cast<size_t>(i)] = static_cast<int>(buckets.size());
    buckets.emplace_back();
    if (role.attention) {
      buckets.back().push_back(speedrun_spec(SpeedrunTensor::kQkvo, i, config));
      buckets.back().push_back(speedrun_spec(SpeedrunTensor::kAttnGate, i, config));
    }
    if (role.mlp) {
      buckets.back().push_back(speedrun_spec(SpeedrunTensor::kFc, i, config));
      buckets.back().push_back(speedrun_spec(SpeedrunTensor::kProj, i, config));
    }
  }
  buckets.push_back({speedrun_spec(SpeedrunTensor::kHead, -1, config)});

  SpeedrunLayout layout;
  static_cast<ParamLayout&>(layout) = place_param_layout(buckets, world_size);
  layout.config = config;
  layout.structure = structure;
  layout.block_bucket_ = block_bucket;
  layout.tensor_index_.assign(static_cast<size_t>(kNumSpeedrunTensors * (L + 1)), -1);
  for (size_t t = 0; t < layout.tensors.size(); t++) {
    const TensorView& view = layout.tensors[t];
    layout.tensor_index_[static_cast<size_t>(view.kind * (L + 1) + view.layer + 1)] = static_cast<int>(t);
  }
  return layout;
}

std::vector<int> speedrun_file_order(const SpeedrunLayout& layout) {
  auto index_of = [&](SpeedrunTensor kind, int block) { return layout.index_of(layout.tensor(kind, block)); };
  std::vector<int> order = {index_of(SpeedrunTensor::kEmbed, -1)};
  for (int k = 0; k < kSpeedrunValueEmbeds; k++) order.push_back(index_of(SpeedrunTensor::kValueEmbed, k));
  order.push_back(index_of(SpeedrunTensor::kSmearGate, -1));
  for (int i = 0; i < layout.config.num_blocks; i++) {
    const SpeedrunBlock& role = layout.structure.blocks[static_cast<size_t>(i)];
    if (role.attention) {
      order.push_back(index_of(SpeedrunTensor::kQkvo, i));
      order.push_back(index_of(SpeedrunTensor::kAttnGate, i));
    }
    if (role.mlp) {
      order.push_back(index_of(SpeedrunTensor::kFc, i));
      order.push_back(index_of(SpeedrunTensor::kProj, i));
    }
  }
  order.push_back(index_of(SpeedrunTensor::kHead, -1));
  order.push_back(index_of(SpeedrunTensor::kScalars, -1));
  return order;
}

}  // namespace llmc
