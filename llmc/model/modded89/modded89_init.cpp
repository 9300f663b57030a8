// The 2026-07-17 record's initialisation (see modded89_init.h).
#include "llmc/model/modded89/modded89_init.h"

#include <cmath>
#include <string>

#include "llmc/base/bf16_bits.h"
#include "llmc/base/normal_sampler.h"

namespace llmc {

namespace {

constexpr float kMuddScale = 0.1f;  // the small MLPs' outputs are 0.1 (... + b): b is stored as effective / 0.1

float round_bf16(double value) {
  return bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(value)));
}

// The stored bias of a gate column whose effective initial value is `effective`.
void set_bias(std::vector<float>& params, const TensorView& b2, int column, double effective) {
  params[b2.offset + static_cast<size_t>(column)] = round_bf16(effective / kMuddScale);
}

void init_gate_biases(std::vector<float>& params, const Modded89Layout& layout) {
  const TensorView* biases[2] = {&layout.find("gate0.b2"), &layout.find("gate1.b2")};
  auto set_columns = [&](const GateColumn& first, int count, double effective) {
    if (!first.present()) return;
    for (int c = 0; c < count; c++) set_bias(params, *biases[first.gate], first.column + c, effective);
  };
  const int H = layout.config.num_heads;
  for (const Modded89Layer& layer : layout.structure.layers) {
    set_columns(layer.output_gate, H, 0.25);  // the linear output gates, one column per head
    set_columns(layer.bigram_gate, 1, 0.05);  // x0 gates and XSA strengths start at 0
  }
  set_columns(layout.structure.skip_gate, 1, 0.5);
  set_columns(GateColumn{1, kModded89DcW1Column}, H, 1.0);  // DC's first mixing weights; the second start at 0
}

// MUDD0 (14 columns) and MUDD1 (5): the effective initial values of SPEEDRUN89.md section 1.
void init_mudd_biases(std::vector<float>& params, const Modded89Layout& layout) {
  const TensorView& mudd0 = layout.find("mudd0.b2");
  set_bias(params, mudd0, 6, 2.0);  // mu6, mu7: the value-embedding gates of layer 10's two head halves
  set_bias(params, mudd0, 7, 2.0);
  set_bias(params, mudd0, 8, std::sqrt(1.1));  // mu8, mu12: the residual's weights (10.5 once stored in bf16)
  set_bias(params, mudd0, 12, std::sqrt(1.1));
  set_bias(params, mudd0, 9, 1.0);  // mu9, mu13: the attention's and the MLP's weights
  set_bias(params, mudd0, 13, 1.0);
  set_bias(params, mudd0, 11, 0.05);                   // mu11: the bigram term
  set_bias(params, layout.find("mudd1.b2"), 1, -0.5);  // mu'1: the backout of cache7
}

void init_scalars(std::vector<float>& params, const Modded89Layout& layout) {
  const size_t scalars = layout.find("scalars").offset, resid = layout.find("resid_lambdas").offset,
               post = layout.find("post_lambdas").offset;
  for (size_t i = 0; i < static_cast<size_t>(kModded89Layers); i++) {
    params[scalars + 2 * i] = 0.5f;  // the attention's sa lambdas
    params[scalars + 2 * i + 1] = 1.0f;
    params[resid + 2 * i] = params[resid + 2 * i + 1] = static_cast<float>(std::sqrt(1.1));
    params[post + 2 * i] = params[post + 2 * i + 1] = 1.0f;
  }
  params[scalars + kModded89SmearLambda] = 0.0f;
  params[scalars + kModded89SkipLambda] = -1.5f;
  params[layout.find("mudd_gate_scale").offset] = kMuddScale;
}

}  // namespace

std::vector<float> init_modded89_params(const Modded89Layout& layout, uint64_t seed) {
  const Modded89Config& config = layout.config;
  const size_t C = static_cast<size_t>(config.channels()), V = static_cast<size_t>(config.vocab_size);
  std::vector<float> params(layout.total_size, 0.0f);
  NormalSampler normal(seed);
  const TensorView &head = layout.find("head"), &embed = layout.find("embed");
  for (size_t i = 0; i < head.numel; i++) params[head.offset + i] = round_bf16(0.005 * normal.next());
  for (size_t v = 0; v < V; v++)  // tied: embed [V, C] = head^T
    for (size_t c = 0; c < C; c++) params[embed.offset + v * C + c] = params[head.offset + c * V + v];
  const TensorView& ve = layout.find("value_embeds");
  for (size_t i = 0; i < ve.numel; i++) params[ve.offset + i] = round_bf16(0.01 * normal.next());

  UniformSampler uniform(seed);
  auto fill_uniform = [&](const TensorView& view, size_t count, double bound) {
    for (size_t i = 0; i < count; i++) params[view.offset + i] = round_bf16(uniform.next(bound));
  };
  const double a = std::sqrt(3.0) * 0.5 / std::sqrt(static_cast<double>(C));
  for (int i = 0; i < kModded89Layers; i++) {
    const std::string prefix = "layers." + std::to_string(i) + ".";
    if (layout.structure.layers[static_cast<size_t>(i)].attention) {
      fill_uniform(layout.find(prefix + "qk"), layout.find(prefix + "qk").numel, a);
      fill_uniform(layout.find(prefix + "vo"), layout.find(prefix + "vo").numel, a);
    }
    fill_uniform(layout.find(prefix + "mlp"), static_cast<size_t>(config.mlp_hidden()) * C, a);  // c_proj stays 0
  }
  for (const char* name : {"gate0.w1", "gate1.w1", "mudd0.w1", "mudd1.w1"})
    fill_uniform(layout.find(name), layout.find(name).numel, 1.0 / std::sqrt(static_cast<double>(C)));
  init_gate_biases(params, layout);
  init_mudd_biases(params, layout);
  init_scalars(params, layout);
  return params;
}

std::vector<float> modded89_sign_table(int channels) {
  constexpr size_t kRows = 8192;         // llmc/kernels/bigram_sign.cuh's kBigramSignRows
  constexpr uint64_t kSeed = 20260717;  // fixed: the table is part of the model's definition here
  NormalSampler normal(kSeed);
  std::vector<float> signs(kRows * static_cast<size_t>(channels));
  for (float& sign : signs) sign = normal.next() >= 0.0 ? 1.0f : -1.0f;
  return signs;
}

}  // namespace llmc
