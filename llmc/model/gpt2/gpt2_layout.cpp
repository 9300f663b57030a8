// Lays out all GPT-2 parameters in one buffer, bucket by bucket (see gpt2_layout.h).
#include "llmc/model/gpt2/gpt2_layout.h"

#include <stdexcept>

namespace llmc {

namespace {

const TensorKind kLayerKinds[] = {TensorKind::kLn1w,     TensorKind::kLn1b,     TensorKind::kQkvw, TensorKind::kQkvb,
                                  TensorKind::kAttprojw, TensorKind::kAttprojb, TensorKind::kLn2w, TensorKind::kLn2b,
                                  TensorKind::kFcw,      TensorKind::kFcb,      TensorKind::kFcprojw,
                                  TensorKind::kFcprojb};

bool decays(TensorKind kind) {
  return kind == TensorKind::kWte || kind == TensorKind::kWpe || kind == TensorKind::kQkvw ||
         kind == TensorKind::kAttprojw || kind == TensorKind::kFcw || kind == TensorKind::kFcprojw;
}

}  // namespace

const char* tensor_kind_name(TensorKind kind) {
  switch (kind) {
    case TensorKind::kWte: return "wte";
    case TensorKind::kWpe: return "wpe";
    case TensorKind::kLn1w: return "ln1w";
    case TensorKind::kLn1b: return "ln1b";
    case TensorKind::kQkvw: return "qkvw";
    case TensorKind::kQkvb: return "qkvb";
    case TensorKind::kAttprojw: return "attprojw";
    case TensorKind::kAttprojb: return "attprojb";
    case TensorKind::kLn2w: return "ln2w";
    case TensorKind::kLn2b: return "ln2b";
    case TensorKind::kFcw: return "fcw";
    case TensorKind::kFcb: return "fcb";
    case TensorKind::kFcprojw: return "fcprojw";
    case TensorKind::kFcprojb: return "fcprojb";
    case TensorKind::kLnfw: return "lnfw";
    case TensorKind::kLnfb: return "lnfb";
  }
  return "?";
}

bool is_layer_tensor(TensorKind kind) {
  return kind != TensorKind::kWte && kind != TensorKind::kWpe && kind != TensorKind::kLnfw && kind != TensorKind::kLnfb;
}

std::vector<size_t> tensor_kind_shape(TensorKind kind, const GPT2Config& config) {
  const size_t C = static_cast<size_t>(config.channels);
  switch (kind) {
    case TensorKind::kWte: return {static_cast<size_t>(config.padded_vocab_size), C};
    case TensorKind::kWpe: return {static_cast<size_t>(config.max_seq_len), C};
    case TensorKind::kQkvw: return {3 * C, C};
    case TensorKind::kQkvb: return {3 * C};
    case TensorKind::kAttprojw: return {C, C};
    case TensorKind::kFcw: return {4 * C, C};
    case TensorKind::kFcb: return {4 * C};
    case TensorKind::kFcprojw: return {C, 4 * C};
    default: return {C};  // LayerNorm weights and biases, attprojb, fcprojb
  }
}

const TensorView& GPT2Layout::tensor(TensorKind kind, int layer) const {
  const int L = config.num_layers;
  if (!is_layer_tensor(kind)) layer = -1;
  else if (layer < 0 || layer >= L)
    throw std::out_of_range(std::string("ParamLayout::tensor: ") + tensor_kind_name(kind) + " of layer " +
                            std::to_string(layer) + " requested, model has " + std::to_string(L) + " layers");
  const int index = tensor_index_.at(static_cast<size_t>(static_cast<int>(kind) * (L + 1) + layer + 1));
  return tensors.at(static_cast<size_t>(index));
}

GPT2Layout make_param_layout(const GPT2Config& config, int world_size) {
  validate_config(config);
  if (world_size < 1 || world_size > 4096)
    throw std::invalid_argument("make_param_layout: world_size must be in 1..4096, got " + std::to_string(world_size));
  const int L = config.num_layers;
  auto spec = [&](TensorKind kind, int layer) {
    TensorSpec tensor;
    tensor.name = layer >= 0 ? "h" + std::to_string(layer) + "." + tensor_kind_name(kind) : tensor_kind_name(kind);
    tensor.kind = static_cast<int>(kind);
    tensor.layer = layer;
    tensor.shape = tensor_kind_shape(kind, config);
    tensor.weight_decay = decays(kind);
    return tensor;
  };
  std::vector<std::vector<TensorSpec>> buckets;
  buckets.push_back({spec(TensorKind::kWte, -1), spec(TensorKind::kWpe, -1)});
  for (int layer = 0; layer < L; layer++) {
    buckets.emplace_back();
    for (TensorKind kind : kLayerKinds) buckets.back().push_back(spec(kind, layer));
  }
  buckets.push_back({spec(TensorKind::kLnfw, -1), spec(TensorKind::kLnfb, -1)});

  GPT2Layout layout;
  static_cast<ParamLayout&>(layout) = place_param_layout(buckets, world_size);
  layout.config = config;
  layout.tensor_index_.assign(static_cast<size_t>(kNumTensorKinds * (L + 1)), -1);
  for (size_t t = 0; t < layout.tensors.size(); t++) {
    const TensorView& view = layout.tensors[t];
    layout.tensor_index_[static_cast<size_t>(view.kind * (L + 1) + view.layer + 1)] = static_cast<int>(t);
  }
  return layout;
}

}  // namespace llmc
