// Lays out the 2026-07-17 record's parameters in one bucketed buffer (see modded89_layout.h).
#include "llmc/model/modded89/modded89_layout.h"

#include <string>

namespace llmc {

const char* modded89_tensor_name(Modded89Tensor kind) {
  switch (kind) {
    case Modded89Tensor::kEmbed: return "embed";
    case Modded89Tensor::kValueEmbeds: return "value_embeds";
    case Modded89Tensor::kBigram: return "bigram_embed";
    case Modded89Tensor::kSmearGate: return "smear_gate";
    case Modded89Tensor::kScalars: return "scalars";
    case Modded89Tensor::kResidLambdas: return "resid_lambdas";
    case Modded89Tensor::kPostLambdas: return "post_lambdas";
    case Modded89Tensor::kGateScale: return "mudd_gate_scale";
    case Modded89Tensor::kGateW1: return "gate_w1";
    case Modded89Tensor::kGateW2: return "gate_w2";
    case Modded89Tensor::kGateB2: return "gate_b2";
    case Modded89Tensor::kQkBank: return "qk";
    case Modded89Tensor::kVoBank: return "vo";
    case Modded89Tensor::kMlpBank: return "mlp";
    case Modded89Tensor::kValueGate: return "ve_gate";
    case Modded89Tensor::kMuddW1: return "mudd_w1";
    case Modded89Tensor::kMuddW2: return "mudd_w2";
    case Modded89Tensor::kMuddB2: return "mudd_b2";
    case Modded89Tensor::kHead: return "head";
  }
  return "?";
}

namespace {

constexpr size_t kScalarCount = 24;

// A tensor of `kind` for layer `layer` (-1: none) with its name ("layers.3.qk", "gate0.w1", "mudd1.w2").
TensorSpec spec(Modded89Tensor kind, int layer, std::vector<size_t> shape, ParamGroup group, ParamDtype dtype,
                const std::string& name) {
  TensorSpec s;
  s.kind = static_cast<int>(kind);
  s.layer = layer;
  s.shape = std::move(shape);
  s.group = group;
  s.reference_dtype = dtype;
  s.name = name;
  return s;
}

TensorSpec adam(Modded89Tensor kind, std::vector<size_t> shape, ParamDtype dtype, int layer = -1,
                std::string name = "") {
  return spec(kind, layer, std::move(shape), ParamGroup::kAdam, dtype,
              name.empty() ? modded89_tensor_name(kind) : name);
}

// A gate MLP (index 0 or 1) or MUDD (0 or 1): w1 [m, C], w2 [n, m], b2 [n].
void add_small_mlp(std::vector<TensorSpec>& bucket, bool mudd, int index, int layer, size_t columns,
                   const Modded89Config& c) {
  const size_t m = static_cast<size_t>(c.mudd_hidden), C = static_cast<size_t>(c.channels());
  const std::string prefix = std::string(mudd ? "mudd" : "gate") + std::to_string(index) + ".";
  bucket.push_back(
      adam(mudd ? Modded89Tensor::kMuddW1 : Modded89Tensor::kGateW1, {m, C}, ParamDtype::kBf16, layer, prefix + "w1"));
  bucket.push_back(adam(mudd ? Modded89Tensor::kMuddW2 : Modded89Tensor::kGateW2, {columns, m}, ParamDtype::kBf16,
                        layer, prefix + "w2"));
  bucket.push_back(adam(mudd ? Modded89Tensor::kMuddB2 : Modded89Tensor::kGateB2, {columns}, ParamDtype::kBf16, layer,
                        prefix + "b2"));
}

std::vector<TensorSpec> embeddings_bucket(const Modded89Config& c) {
  const size_t V = static_cast<size_t>(c.vocab_size), C = static_cast<size_t>(c.channels());
  const size_t L = static_cast<size_t>(kModded89Layers);
  std::vector<TensorSpec> b;
  b.push_back(adam(Modded89Tensor::kEmbed, {V, C}, ParamDtype::kBf16));
  b.push_back(adam(Modded89Tensor::kValueEmbeds, {kModded89ValueEmbeds * V, C}, ParamDtype::kBf16));
  b.push_back(adam(Modded89Tensor::kSmearGate, {1, 12}, ParamDtype::kBf16));
  b.push_back(adam(Modded89Tensor::kScalars, {kScalarCount}, ParamDtype::kFp32));
  b.push_back(adam(Modded89Tensor::kResidLambdas, {L, 2}, ParamDtype::kFp32));
  b.push_back(adam(Modded89Tensor::kPostLambdas, {L, 2}, ParamDtype::kFp32));
  b.push_back(adam(Modded89Tensor::kGateScale, {1}, ParamDtype::kFp32));
  add_small_mlp(b, /*mudd=*/false, 0, -1, kModded89GateColumns, c);  // the pre gate, from x0
  return b;
}

std::vector<TensorSpec> layer_bucket(const Modded89Config& c, const Modded89Layer& layer, int i) {
  const size_t H = static_cast<size_t>(c.num_heads), D = static_cast<size_t>(c.head_dim),
               C = static_cast<size_t>(c.channels());
  const std::string prefix = "layers." + std::to_string(i) + ".";
  std::vector<TensorSpec> b;
  if (layer.attention) {
    b.push_back(spec(Modded89Tensor::kQkBank, i, {H, 2 * D, C}, ParamGroup::kMuon, ParamDtype::kBf16, prefix + "qk"));
    b.push_back(spec(Modded89Tensor::kVoBank, i, {2, C, C}, ParamGroup::kMuon, ParamDtype::kBf16, prefix + "vo"));
  }
  b.push_back(spec(Modded89Tensor::kMlpBank, i, {2, static_cast<size_t>(c.mlp_hidden()), C}, ParamGroup::kMuon,
                   ParamDtype::kBf16, prefix + "mlp"));
  if (layer.value_embed >= 0)
    b.push_back(adam(Modded89Tensor::kValueGate, {H, 12}, ParamDtype::kBf16, i, prefix + "ve_gate"));
  if (i == modded89_structure().post_gate_layer) add_small_mlp(b, /*mudd=*/false, 1, i, kModded89GateColumns, c);
  if (layer.mudd) add_small_mlp(b, /*mudd=*/true, 0, i, kModded89MuddColumns, c);
  return b;
}

}  // namespace

Modded89Layout make_modded89_layout(const Modded89Config& config, int world_size) {
  validate_modded89_config(config);
  const Modded89Structure structure = modded89_structure();
  std::vector<std::vector<TensorSpec>> buckets;
  buckets.push_back(
      {adam(Modded89Tensor::kBigram, {static_cast<size_t>(config.bigram_rows), static_cast<size_t>(config.channels())},
            ParamDtype::kBf16)});
  buckets.push_back(embeddings_bucket(config));
  for (int i = 0; i < kModded89Layers; i++)
    buckets.push_back(layer_bucket(config, structure.layers[static_cast<size_t>(i)], i));
  std::vector<TensorSpec> head;
  head.push_back(adam(Modded89Tensor::kHead,
                      {static_cast<size_t>(config.channels()), static_cast<size_t>(config.vocab_size)},
                      ParamDtype::kBf16));
  add_small_mlp(head, /*mudd=*/true, 1, -1, kModded89MuddColumns, config);  // after the loop: final first
  buckets.push_back(head);
  Modded89Layout layout;
  static_cast<ParamLayout&>(layout) = place_param_layout(buckets, world_size);
  layout.config = config;
  layout.structure = structure;
  return layout;
}

}  // namespace llmc
