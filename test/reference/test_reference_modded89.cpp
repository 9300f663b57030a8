// The double-precision 2026-07-17 model (test/reference/reference_modded89.h): its tape gradient against
// central finite differences of its objective, tensor by tensor, and the published facts of its step 0
// (SPEEDRUN89.md section 9).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "llmc/base/normal_sampler.h"
#include "test/reference/gradient_check.h"
#include "test/reference/reference_modded89.h"
#include "test/reference/reference_modded89_ops.h"
#include "test/reference/reference_tape_attention.h"
#include "test/reference/reference_tape_ops.h"
#include "test/support/worst_error.h"

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
  model.bf16_parameter_copies = false;  // a rounded value is piecewise constant: no central difference sees it
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
    for (size_t i = begin; i < begin + count; i++) m = llmc::larger_magnitude(m, model.grads[view.offset + i]);
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

// The model's tape ops and the kernels' oracles (reference_modded89_ops.h) are two writings of the same
// operations: per-head norm + adjacent-pair rotary (paired positions) + key offset, XSA, the DC correction.
// Both are double; only the summation order differs (1e-13).
TEST(ReferenceModded89, TapeOpsAgreeWithTheKernelOracles) {
  const int T = 24, H = 2, D = 16, pairs = D / 4, C = H * D;
  llmc::NormalSampler normal(21);
  auto random = [&](size_t n) { return gradient_check::random_vector(n, normal); };
  std::vector<double> cos_table, sin_table;
  for (int p = 0; p < 2 * T; p++)
    for (int m = 0; m < pairs; m++) {
      cos_table.push_back(std::cos(0.3 * p / (m + 1)));
      sin_table.push_back(std::sin(0.3 * p / (m + 1)));
    }
  auto expect_close = [](const std::vector<double>& got, const std::vector<double>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); i++) ASSERT_NEAR(got[i], want[i], 1e-12) << what << " at " << i;
  };
  {  // q and k heads of the paired layout, keys offset: (T, 2H, D) with q's H heads first
    const std::vector<double> qk = random(static_cast<size_t>(T) * 2 * C);
    std::vector<double> want(qk.size());
    ref::qk_norm_pair_rope_forward(want.data(), qk.data(), cos_table.data(), sin_table.data(), T, 2 * H, D, pairs, 2,
                                   /*key_offset=*/true);
    ref::Tape t;
    const ref::NodeId x = t.leaf(qk, T, 2 * C);
    std::vector<int> position(static_cast<size_t>(T) * H);
    for (int r = 0; r < T; r++)
      for (int h = 0; h < H; h++) position[static_cast<size_t>(r) * H + h] = 2 * r + h % 2;
    auto turned = [&](int first) {
      return ref::rotary_pairs(t, ref::rms_norm(t, ref::columns(t, x, first, C), D, FLT_EPSILON), H, D, pairs,
                               cos_table, sin_table, position);
    };
    const ref::NodeId q = turned(0), k = ref::key_offset(t, turned(C), H, D);
    expect_close(t.value(ref::concat_columns(t, q, k)), want, "norm + pair rotary + key offset");
  }
  const std::vector<double> y = random(static_cast<size_t>(T) * C), q = random(y.size()), k = random(y.size()),
                            v = random(y.size()), alpha = random(static_cast<size_t>(T) * H),
                            w1 = random(alpha.size()), w2 = random(alpha.size());
  {
    std::vector<double> want(y.size());
    ref::xsa_forward(want.data(), y.data(), v.data(), alpha.data(), T, H, D);
    ref::Tape t;
    expect_close(t.value(ref::xsa(t, t.leaf(y, T, C), t.leaf(v, T, C), t.leaf(alpha, T, H), 0, H, D)), want, "xsa");
  }
  {
    const int window = 5;
    const std::vector<int> starts = {0, 9, 17};  // documents [0, 9), [9, 17), [17, 24)
    std::vector<int> doc_start(static_cast<size_t>(T)), doc_of_row(static_cast<size_t>(T));
    for (int r = 0; r < T; r++) {
      doc_of_row[static_cast<size_t>(r)] = r < 9 ? 0 : r < 17 ? 1 : 2;
      doc_start[static_cast<size_t>(r)] = starts[static_cast<size_t>(doc_of_row[static_cast<size_t>(r)])];
    }
    std::vector<double> want(y.size());
    ref::dc_forward(want.data(), y.data(), q.data(), k.data(), v.data(), w1.data(), w2.data(), doc_start.data(), T, H,
                    D, window, 0.15);
    ref::Tape t;
    const ref::NodeId got =
        ref::dc_correction(t, t.leaf(y, T, C), t.leaf(q, T, C), t.leaf(k, T, C), t.leaf(v, T, C), t.leaf(w1, T, H),
                           t.leaf(w2, T, H), H, D, doc_of_row, window, 0.15);
    expect_close(t.value(got), want, "dc");
  }
}

}  // namespace
