// The double-precision 2026-07-17 model (test/reference/reference_modded89.h): its tape gradient against
// central finite differences of its objective, tensor by tensor, and the published facts of its step 0
// (SPEEDRUN89.md section 9).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "llmc/base/normal_sampler.h"
#include "test/reference/gradient_check.h"
#include "test/reference/reference_modded89.h"

namespace {

using llmc::Modded89Layout;

Modded89Layout tiny_layout() {
  return llmc::make_modded89_layout(llmc::modded89_config_from_name("modded89-tiny"), 1);
}

// A packed batch of T tokens in several documents, random bigram rows, three next-token weights and a prefix
// table in which some tokens have no prefix.
ref::Modded89Batch random_batch(const Modded89Layout& layout, unsigned seed, bool prefix) {
  const llmc::Modded89Config& c = layout.config;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> token(0, c.vocab_size - 1), row(0, c.bigram_rows - 1);
  ref::Modded89Batch batch;
  const int T = c.max_seq_len;
  for (int t = 0; t < T; t++) {
    batch.tokens.push_back(token(rng));
    batch.targets.push_back(token(rng));
    batch.bigram_hashes.push_back(row(rng));
  }
  batch.cu_seqlens = {0, 7, 30, 41, T};
  batch.weights.tokens = 3;
  batch.weights.next[1] = 0.5;
  batch.weights.next[2] = 0.25;
  if (prefix) {
    batch.weights.prefix = 0.25;
    for (int v = 0; v < c.vocab_size; v++) batch.prefix_of.push_back(v % 3 == 0 ? -1 : token(rng));
  }
  return batch;
}

ref::Modded89Reference make_model(const Modded89Layout& layout, unsigned seed) {
  ref::Modded89Reference model(layout);
  model.params = ref::init_modded89_params(layout, seed);
  model.sign_rows = 5;
  std::mt19937 rng(seed + 1);
  for (int i = 0; i < model.sign_rows * layout.config.channels(); i++)
    model.sign_table.push_back(rng() % 2 ? 1.0 : -1.0);
  model.set_windows(layout.config.window_block, 3 * layout.config.window_block);
  return model;
}

// Every tensor moved off the record's init (its zeros included), so that every path carries gradient.
void perturb(const Modded89Layout& layout, std::vector<double>& params, unsigned seed) {
  llmc::NormalSampler normal(seed);
  for (const llmc::TensorView& view : layout.tensors)
    for (size_t i = 0; i < view.numel; i++) params[view.offset + i] += 0.1 * normal.next();
}

// For each tensor, the directional derivative along a random direction inside it against the central
// difference of the objective. Step 1e-5 on an objective of ~300 (the sum over 64 rows): truncation
// ~h^2 |f'''| and rounding ~1e-16 x 300 / 1e-5 = 3e-9, so 1e-6 of the derivative's size plus 1e-7 is ample;
// a wrong term of any tensor is O(1) of its part.
TEST(ReferenceModded89, EveryTensorsGradientMatchesFiniteDifferences) {
  const Modded89Layout layout = tiny_layout();
  ref::Modded89Reference model = make_model(layout, 3);
  perturb(layout, model.params, 4);
  const ref::Modded89Batch batch = random_batch(layout, 5, /*prefix=*/true);
  model.forward(batch);
  model.backward();
  const std::vector<double> grads = model.grads, start = model.params;
  llmc::NormalSampler normal(6);
  for (const llmc::TensorView& view : layout.tensors) {
    std::vector<double> direction(layout.total_size, 0.0);
    double analytic = 0.0, size = 0.0;
    for (size_t i = view.offset; i < view.offset + view.numel; i++) {
      direction[i] = normal.next();
      analytic += grads[i] * direction[i];
      size += std::fabs(grads[i] * direction[i]);
    }
    const double h = 1e-5;
    auto objective_at = [&](double step) {
      for (size_t i = 0; i < start.size(); i++) model.params[i] = start[i] + step * direction[i];
      model.forward(batch);
      return model.objective();
    };
    const double numeric = (objective_at(h) - objective_at(-h)) / (2 * h);
    EXPECT_NEAR(analytic, numeric, 1e-6 * size + 1e-7) << view.name;
    EXPECT_GT(size, 0.0) << view.name << " has no gradient";
  }
}

// With a zero head every logit is equal: each present term costs ln V exactly, so the loss is ln V times the
// sum over rows of the present next-token weights (t + k < T) and of the prefix weight where a prefix exists.
TEST(ReferenceModded89, ZeroHeadLossIsTheActiveWeightsTimesLnV) {
  const Modded89Layout layout = tiny_layout();
  ref::Modded89Reference model = make_model(layout, 7);
  perturb(layout, model.params, 8);
  const llmc::TensorView& head = layout.find("head");
  std::fill_n(model.params.begin() + static_cast<std::ptrdiff_t>(head.offset), head.numel, 0.0);
  const ref::Modded89Batch batch = random_batch(layout, 9, /*prefix=*/true);
  const int T = static_cast<int>(batch.tokens.size());
  double weights = 0.0;
  for (int t = 0; t < T; t++) {
    for (int k = 0; k < batch.weights.tokens; k++)
      if (t + k < T) weights += batch.weights.next[k];
    if (batch.prefix_of[static_cast<size_t>(batch.targets[static_cast<size_t>(t)])] >= 0)
      weights += batch.weights.prefix;
  }
  const double expected = weights * std::log(static_cast<double>(layout.config.vocab_size));
  EXPECT_NEAR(model.forward(batch), expected, 1e-12 * expected);
}

// At the record's init c_proj, the second layers of the gate and MUDD MLPs and smear_lambda are zero, so c_fc,
// the MLPs' first layers and the smear gate get exactly zero gradient; attention, head, embeddings, value
// embeddings and the bigram table do not.
TEST(ReferenceModded89, StepZeroGradientsAreZeroExactlyWhereThePublishedFactsSay) {
  const Modded89Layout layout = tiny_layout();
  ref::Modded89Reference model = make_model(layout, 11);
  ref::Modded89Batch batch = random_batch(layout, 12, /*prefix=*/false);
  batch.weights = ref::MtpWeights{};  // the plain next-token loss
  model.forward(batch);
  model.backward();
  auto largest = [&](const std::string& name, size_t begin, size_t count) {
    const llmc::TensorView& view = layout.find(name);
    double m = 0.0;
    for (size_t i = begin; i < begin + count; i++) m = std::max(m, std::fabs(model.grads[view.offset + i]));
    return m;
  };
  auto whole = [&](const std::string& name) { return largest(name, 0, layout.find(name).numel); };
  const size_t fc = static_cast<size_t>(layout.config.mlp_hidden()) * layout.config.channels();
  for (int i = 0; i < llmc::kModded89Layers; i++) {
    const std::string prefix = "layers." + std::to_string(i) + ".";
    EXPECT_EQ(largest(prefix + "mlp", 0, fc), 0.0) << prefix << "mlp c_fc";
    EXPECT_GT(largest(prefix + "mlp", fc, fc), 0.0) << prefix << "mlp c_proj";
    if (layout.structure.layers[static_cast<size_t>(i)].attention) {
      EXPECT_GT(whole(prefix + "vo"), 0.0) << prefix << "vo";
    }
  }
  for (const char* name : {"gate0.w1", "gate1.w1", "mudd0.w1", "mudd1.w1", "smear_gate"})
    EXPECT_EQ(whole(name), 0.0) << name;
  for (const char* name : {"head", "embed", "value_embeds", "bigram_embed", "layers.0.qk", "layers.10.qk"})
    EXPECT_GT(whole(name), 0.0) << name;
}

}  // namespace
