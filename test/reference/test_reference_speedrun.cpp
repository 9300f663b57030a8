// Tests of the double-precision reference speedrun model: every op's backward against central finite
// differences and its forward against values known independently (norms, rotations, masks, uniform
// logits); the whole model's gradient of every tensor against finite differences at random parameters;
// the record's published facts at initialisation (loss = T ln V, every gradient but the head's zero).
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/base/bf16_bits.h"
#include "llmc/base/normal_sampler.h"
#include "llmc/model/modded44/speedrun_config.h"
#include "test/reference/gradient_check.h"
#include "test/reference/reference_speedrun.h"
#include "test/reference/reference_speedrun_ops.h"
#include "test/support/worst_error.h"

using gradient_check::all_indices;
using gradient_check::dot;
using gradient_check::expect_gradient_matches;
using gradient_check::minus;
using gradient_check::random_vector;
using llmc::NormalSampler;

// ------------------------------------------------------------------------------------------------
// Per-op checks. Each backward is tested through f = sum(out * w) with random w (so dout = w).

TEST(SpeedrunReferenceOps, RmsNormForwardAndBackward) {
  NormalSampler normal(11);
  const int N = 4, C = 12;
  std::vector<double> inp = random_vector(N * C, normal, 2.0);
  for (int c = 0; c < C; c++) inp[3 * C + c] *= 1e-4;  // mean square ~4e-8: eps matters here
  std::vector<double> out(N * C), rstd(N);
  ref::rmsnorm_forward(out.data(), rstd.data(), inp.data(), N, C);
  for (int n = 0; n < N; n++) {
    double mean_square = 0, out_mean_square = 0;
    for (int c = 0; c < C; c++) mean_square += inp[n * C + c] * inp[n * C + c] / C;
    for (int c = 0; c < C; c++) out_mean_square += out[n * C + c] * out[n * C + c] / C;
    EXPECT_NEAR(out_mean_square, mean_square / (mean_square + ref::kSpeedrunNormEps), 1e-14) << "row " << n;
  }
  EXPECT_LT(std::abs(rstd[3] * std::sqrt(4e-8) - 1.0), 0.9);  // the eps row is visibly damped
  const std::vector<double> w = random_vector(out.size(), normal), prefill = random_vector(inp.size(), normal);
  std::vector<double> dinp = prefill;
  ref::rmsnorm_backward(dinp.data(), w.data(), inp.data(), rstd.data(), N, C);
  auto f = [&] {
    std::vector<double> o(N * C), r(N);
    ref::rmsnorm_forward(o.data(), r.data(), inp.data(), N, C);
    return dot(o, w);
  };
  // The eps row has gradients ~1e4: its finite difference needs a step scaled to its values.
  expect_gradient_matches("dinp", inp, minus(dinp, prefill), f, all_indices(3 * C));
  gradient_check::Tolerance tiny;
  tiny.step = 1e-10;
  tiny.relative = 1e-5;
  std::vector<size_t> eps_row;
  for (int c = 0; c < C; c++) eps_row.push_back(3 * C + c);
  expect_gradient_matches("dinp eps row", inp, minus(dinp, prefill), f, eps_row, tiny);
}

TEST(SpeedrunReferenceOps, RopeRotatesPairsAndBackwardIsTheTranspose) {
  NormalSampler normal(12);
  const int T = 5, heads = 3, D = 8, half = D / 2;
  const std::vector<double> freq = {1.0, 0.1, 0.0, 0.0};  // half-truncated: the last two pairs never rotate
  std::vector<double> cos_table(T * half), sin_table(T * half);
  ref::rope_tables(cos_table.data(), sin_table.data(), freq.data(), T, half);
  std::vector<double> inp = random_vector(T * heads * D, normal), out(inp.size());
  ref::rope_forward(out.data(), inp.data(), cos_table.data(), sin_table.data(), T, heads, D);
  for (int t = 0; t < T; t++)
    for (int h = 0; h < heads; h++) {
      const int row = (t * heads + h) * D;
      for (int k = 0; k < half; k++) {
        const double x1 = inp[row + k], x2 = inp[row + half + k], y1 = out[row + k], y2 = out[row + half + k];
        EXPECT_NEAR(y1 * y1 + y2 * y2, x1 * x1 + x2 * x2, 1e-13);  // a rotation of each pair
        if (t == 0 || freq[k] == 0.0) {
          EXPECT_EQ(y1, x1);
          EXPECT_EQ(y2, x2);
        }
      }
      // Pair 0 at position t rotates by angle t: y1 = x1 cos t + x2 sin t.
      EXPECT_NEAR(out[row], inp[row] * std::cos(t) + inp[row + half] * std::sin(t), 1e-14);
    }
  const std::vector<double> w = random_vector(out.size(), normal), prefill = random_vector(inp.size(), normal);
  std::vector<double> dinp = prefill;
  ref::rope_backward(dinp.data(), w.data(), cos_table.data(), sin_table.data(), T, heads, D);
  auto f = [&] {
    std::vector<double> o(inp.size());
    ref::rope_forward(o.data(), inp.data(), cos_table.data(), sin_table.data(), T, heads, D);
    return dot(o, w);
  };
  expect_gradient_matches("dinp", inp, minus(dinp, prefill), f, all_indices(inp.size()));
}

TEST(SpeedrunReferenceOps, ReluSquared) {
  NormalSampler normal(13);
  std::vector<double> inp = random_vector(30, normal, 2.0), out(30);
  ref::relu_squared_forward(out.data(), inp.data(), inp.size());
  for (size_t i = 0; i < inp.size(); i++) EXPECT_EQ(out[i], inp[i] > 0 ? inp[i] * inp[i] : 0.0);
  const std::vector<double> w = random_vector(30, normal), prefill = random_vector(30, normal);
  std::vector<double> dinp = prefill;
  ref::relu_squared_backward(dinp.data(), inp.data(), w.data(), inp.size());
  auto f = [&] {
    std::vector<double> o(inp.size());
    ref::relu_squared_forward(o.data(), inp.data(), inp.size());
    return dot(o, w);
  };
  expect_gradient_matches("dinp", inp, minus(dinp, prefill), f, all_indices(inp.size()));
}

TEST(SpeedrunReferenceOps, SoftcapCrossEntropy) {
  NormalSampler normal(14);
  const int N = 3, V = 10;
  const std::vector<int> targets = {0, 9, 4};
  std::vector<double> losses(N);
  // z = 0: every logit is 15, so each loss is ln V (computed as (15 + ln V) - 15: to ulp(17) / 2).
  const std::vector<double> zeros(N * V, 0.0);
  ref::softcap_cross_entropy_forward(losses.data(), zeros.data(), targets.data(), N, V);
  for (double loss : losses) EXPECT_NEAR(loss, std::log(10.0), 2e-15);
  // Huge z saturates at the cap: logits 30 vs 0, loss of the capped target -> ln(1 + (V-1) e^-30), here
  // computed as (30 + ln(sum)) - 30, so to within the rounding of the sum: ulp(30) / 2 ~ 1.8e-15.
  std::vector<double> z(N * V, -1e4);
  for (int n = 0; n < N; n++) z[n * V + targets[n]] = 1e4;
  ref::softcap_cross_entropy_forward(losses.data(), z.data(), targets.data(), N, V);
  for (double loss : losses) EXPECT_NEAR(loss, std::log1p(9 * std::exp(-30.0)), 4e-15);
  z = random_vector(N * V, normal, 8.0);
  const std::vector<double> dlosses = random_vector(N, normal), prefill = random_vector(N * V, normal);
  std::vector<double> dz = prefill;
  ref::softcap_cross_entropy_backward(dz.data(), z.data(), targets.data(), dlosses.data(), N, V);
  auto f = [&] {
    std::vector<double> l(N);
    ref::softcap_cross_entropy_forward(l.data(), z.data(), targets.data(), N, V);
    return dot(l, dlosses);
  };
  expect_gradient_matches("dz", z, minus(dz, prefill), f, all_indices(z.size()));
}

TEST(SpeedrunReferenceOps, Smear) {
  NormalSampler normal(15);
  const int T = 5, C = 14;
  std::vector<double> e = random_vector(T * C, normal), w = random_vector(12, normal), out(T * C);
  std::vector<double> lambda = {0.7};
  ref::smear_forward(out.data(), e.data(), w.data(), lambda[0], T, C);
  for (int c = 0; c < C; c++) EXPECT_EQ(out[c], e[c]);  // position 0 is never mixed
  double gate_dot = 0;
  for (int j = 0; j < 12; j++) gate_dot += e[2 * C + j] * w[j];
  EXPECT_NEAR(out[2 * C + 13], e[2 * C + 13] + 0.7 * ref::sigmoid(gate_dot) * e[C + 13], 1e-15);
  const std::vector<double> dout = random_vector(T * C, normal);
  const std::vector<double> p_e = random_vector(e.size(), normal), p_w = random_vector(12, normal);
  std::vector<double> de = p_e, dw = p_w, dlambda = {0.25};
  ref::smear_backward(de.data(), dw.data(), dlambda.data(), dout.data(), e.data(), w.data(), lambda[0], T, C);
  auto f = [&] {
    std::vector<double> o(T * C);
    ref::smear_forward(o.data(), e.data(), w.data(), lambda[0], T, C);
    return dot(o, dout);
  };
  expect_gradient_matches("de", e, minus(de, p_e), f, all_indices(e.size()));
  expect_gradient_matches("dw", w, minus(dw, p_w), f, all_indices(12));
  expect_gradient_matches("dlambda", lambda, {dlambda[0] - 0.25}, f, {0});
}

TEST(SpeedrunReferenceOps, AttentionGate) {
  NormalSampler normal(16);
  const int T = 4, H = 3, D = 6, C = H * D;
  std::vector<double> y = random_vector(T * C, normal), xn = random_vector(T * C, normal),
                      w = random_vector(H * 12, normal), out(T * C);
  ref::attention_gate_forward(out.data(), y.data(), xn.data(), w.data(), T, H, D);
  double gate_dot = 0;
  for (int j = 0; j < 12; j++) gate_dot += xn[3 * C + j] * w[2 * 12 + j];
  EXPECT_NEAR(out[3 * C + 2 * D + 5], y[3 * C + 2 * D + 5] * ref::sigmoid(gate_dot), 1e-15);
  const std::vector<double> dout = random_vector(T * C, normal);
  const std::vector<double> p_y = random_vector(y.size(), normal), p_x = random_vector(xn.size(), normal),
                            p_w = random_vector(w.size(), normal);
  std::vector<double> dy = p_y, dxn = p_x, dw = p_w;
  ref::attention_gate_backward(dy.data(), dxn.data(), dw.data(), dout.data(), y.data(), xn.data(), w.data(), T, H, D);
  auto f = [&] {
    std::vector<double> o(T * C);
    ref::attention_gate_forward(o.data(), y.data(), xn.data(), w.data(), T, H, D);
    return dot(o, dout);
  };
  expect_gradient_matches("dy", y, minus(dy, p_y), f, all_indices(y.size()));
  expect_gradient_matches("dxn", xn, minus(dxn, p_x), f, all_indices(xn.size()));  // columns >= 12 get 0
  expect_gradient_matches("dw", w, minus(dw, p_w), f, all_indices(w.size()));
}

TEST(SpeedrunReferenceOps, EmbeddingAndMix) {
  NormalSampler normal(18);
  const int T = 6, C = 3, V = 4;
  const std::vector<int> tokens = {3, 1, 3, 0, 3, 1};
  std::vector<double> table = random_vector(V * C, normal), out(T * C);
  ref::embedding_forward(out.data(), tokens.data(), table.data(), T, C);
  EXPECT_EQ(out[4 * C + 2], table[3 * C + 2]);
  const std::vector<double> dout = random_vector(T * C, normal), prefill = random_vector(V * C, normal);
  std::vector<double> dtable = prefill;
  ref::embedding_backward(dtable.data(), dout.data(), tokens.data(), T, C);
  auto f = [&] {
    std::vector<double> o(T * C);
    ref::embedding_forward(o.data(), tokens.data(), table.data(), T, C);
    return dot(o, dout);
  };
  expect_gradient_matches("dtable", table, minus(dtable, prefill), f, all_indices(table.size()));

  std::vector<double> x = random_vector(8, normal), y = random_vector(8, normal), ab = {0.3, -1.2}, mixed(8);
  const std::vector<double> w = random_vector(8, normal);
  std::vector<double> dx(8, 0.0), dy(8, 0.0), dab = {0.0, 0.0};
  ref::mix_backward(dx.data(), dy.data(), &dab[0], &dab[1], w.data(), ab[0], x.data(), ab[1], y.data(), 8);
  auto g = [&] {
    ref::mix_forward(mixed.data(), ab[0], x.data(), ab[1], y.data(), 8);
    return dot(mixed, w);
  };
  expect_gradient_matches("dx", x, dx, g, all_indices(8));
  expect_gradient_matches("dy", y, dy, g, all_indices(8));
  expect_gradient_matches("da db", ab, dab, g, {0, 1});
}

// ------------------------------------------------------------------------------------------------
// Whole model.

namespace {

// One rank's packed batch: documents of lengths 7, 23, 18 (T = 48), random tokens, a short window of
// 8 tokens (shorter than the longer documents) and a long one of 16.
struct SpeedrunBatch {
  llmc::SpeedrunConfig config = llmc::speedrun_config_from_name("speedrun-tiny");
  int T = 48, window_short = 8, window_long = 16;
  std::vector<int> tokens, targets, cu_seqlens = {0, 7, 30, 48, 48};
  SpeedrunBatch() {
    uint64_t state = 5;
    for (int i = 0; i < 2 * T; i++) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      (i < T ? tokens : targets).push_back(static_cast<int>((state >> 33) % config.vocab_size));
    }
  }
  double forward(ref::ReferenceSpeedrun& model) const {
    return model.forward(tokens.data(), targets.data(), cu_seqlens.data(), static_cast<int>(cu_seqlens.size()), T,
                         window_short, window_long);
  }
};

// The record's init plus a perturbation of every tensor (zero-initialised projections, head and gates
// included), so that every path carries gradients of ordinary size.
void randomize_params(ref::ReferenceSpeedrun& model, uint64_t seed) {
  model.params = ref::init_speedrun_params(model.config(), seed);
  NormalSampler normal(seed + 1000);
  for (ref::NamedTensor& tensor : ref::named_tensors(model.params, model.config())) {
    const bool matrix = tensor.name.find("blocks.") == 0 && tensor.name.find("gate") == std::string::npos;
    const double scale = tensor.name == "scalars" ? 0.3 : matrix ? 0.15 : 0.5;
    for (double& x : *tensor.values) x += scale * normal.next();
  }
}

}  // namespace

TEST(SpeedrunReference, FreshModelLossIsLnVAndOnlyTheHeadHasGradient) {
  SpeedrunBatch batch;
  ref::ReferenceSpeedrun model(batch.config);
  model.params = ref::init_speedrun_params(batch.config, 1);
  const double loss = batch.forward(model);
  // Zero head: z = 0, every logit is 15, each token's loss is ln V exactly (in double, to rounding).
  EXPECT_NEAR(loss / batch.T, std::log(static_cast<double>(batch.config.vocab_size)), 1e-14);
  for (double token_loss : model.losses())
    EXPECT_NEAR(token_loss, std::log(static_cast<double>(batch.config.vocab_size)), 4e-15);
  model.backward();
  for (ref::NamedTensor& tensor : ref::named_tensors(model.grads, batch.config)) {
    double max_abs = 0;
    for (double g : *tensor.values) max_abs = llmc::larger_magnitude(max_abs, g);
    if (tensor.name == "head")
      EXPECT_GT(max_abs, 1e-3) << "the head must learn at the first step";
    else
      EXPECT_EQ(max_abs, 0.0) << tensor.name << " has a gradient at initialisation";
  }
}

TEST(SpeedrunReference, InitialisationFollowsTheRecord) {
  const llmc::SpeedrunConfig config = llmc::speedrun_config_from_name("speedrun-tiny");
  ref::SpeedrunParams p = ref::init_speedrun_params(config, 7);
  const size_t C = config.channels();
  const double bound = std::sqrt(3.0) * 0.5 / std::sqrt(static_cast<double>(C));
  for (ref::NamedTensor& tensor : ref::named_tensors(p, config)) {
    const std::vector<double>& x = *tensor.values;
    double sum = 0, sum_squares = 0, max_abs = 0;
    for (double value : x) sum += value, sum_squares += value * value, max_abs = llmc::larger_magnitude(max_abs, value);
    const std::string& name = tensor.name;
    if (name == "embed" || name[0] == 'v') {  // N(0, 1): mean and variance within a few standard errors
      EXPECT_NEAR(sum / x.size(), 0.0, 5.0 / std::sqrt(static_cast<double>(x.size()))) << name;
      EXPECT_NEAR(sum_squares / x.size(), 1.0, 5.0 * std::sqrt(2.0 / x.size())) << name;
    } else if (name.find(".qkvo") != std::string::npos) {
      for (size_t i = 3 * C * C; i < x.size(); i++) ASSERT_EQ(x[i], 0.0) << name << ": W_o must start at zero";
      EXPECT_LE(max_abs, bound * (1 + 0x1p-24)) << name;  // U(-a, a), rounded to fp32
      EXPECT_GT(max_abs, 0.9 * bound) << name;
    } else if (name.find(".fc") != std::string::npos) {
      EXPECT_LE(max_abs, bound * (1 + 0x1p-24)) << name;
      EXPECT_GT(max_abs, 0.9 * bound) << name;
    } else if (name != "scalars") {
      EXPECT_EQ(max_abs, 0.0) << name << " (projection, head and gates start at zero)";
    }
    for (double value : x) {  // exactly representable in the storage dtype
      const float stored = tensor.bf16 ? llmc::bf16_bits_to_float(llmc::float_to_bf16_bits(static_cast<float>(value)))
                                       : static_cast<float>(value);
      ASSERT_EQ(value, static_cast<double>(stored)) << name;
    }
  }
  const llmc::SpeedrunScalarIndex index{config.num_blocks};
  EXPECT_EQ(p.scalars[index.skip_weight(0)], -1.5);
  EXPECT_EQ(p.scalars[index.block_lambda(3, 0)], 1.0);
  EXPECT_EQ(p.scalars[index.block_lambda(3, 1)], 0.0);
  EXPECT_EQ(p.scalars[index.sa_lambda(9, 1)], 0.5);
  EXPECT_EQ(p.scalars[index.smear_lambda()], 0.0);
  EXPECT_EQ(p.scalars[index.backout_lambda()], 0.5);
  EXPECT_EQ(p.scalars[63], 1.0);
  EXPECT_EQ(config.num_blocks, 12);
}

TEST(SpeedrunReference, GradientOfEveryTensorMatchesFiniteDifferences) {
  SpeedrunBatch batch;
  ref::ReferenceSpeedrun model(batch.config);
  randomize_params(model, 3);
  model.zero_grad();
  batch.forward(model);
  model.backward();
  auto loss = [&] { return batch.forward(model); };
  // The sum of T = 48 losses of ~5 is ~250: rounding contributes ~eps * 250 / h ~ 5e-9 to each difference.
  gradient_check::Tolerance tol;
  tol.absolute = 5e-8;
  uint64_t state = 7;
  std::vector<ref::NamedTensor> grads = ref::named_tensors(model.grads, batch.config);
  std::vector<ref::NamedTensor> params = ref::named_tensors(model.params, batch.config);
  const llmc::SpeedrunScalarIndex index{batch.config.num_blocks};
  for (size_t n = 0; n < params.size(); n++) {
    const std::vector<double>& analytic = *grads[n].values;
    std::vector<size_t> indices;
    size_t largest = 0;
    for (size_t i = 0; i < analytic.size(); i++)
      if (std::abs(analytic[i]) > std::abs(analytic[largest])) largest = i;
    indices.push_back(largest);
    for (int k = 0; k < 5; k++) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      indices.push_back((state >> 33) % analytic.size());
    }
    if (params[n].name == "scalars") {  // every used scalar, and some unused ones (gradient 0)
      indices = {static_cast<size_t>(index.skip_weight(0)),     static_cast<size_t>(index.skip_weight(4)),
                 static_cast<size_t>(index.skip_weight(5)),     static_cast<size_t>(index.block_lambda(0, 0)),
                 static_cast<size_t>(index.block_lambda(1, 0)), static_cast<size_t>(index.block_lambda(1, 1)),
                 static_cast<size_t>(index.block_lambda(7, 1)), static_cast<size_t>(index.sa_lambda(3, 0)),
                 static_cast<size_t>(index.sa_lambda(3, 1)),    static_cast<size_t>(index.sa_lambda(7, 0)),
                 static_cast<size_t>(index.sa_lambda(9, 1)),    static_cast<size_t>(index.smear_lambda()),
                 static_cast<size_t>(index.backout_lambda()),   63};
    }
    EXPECT_GT(std::abs(analytic[largest]), 1e-4) << params[n].name << " has no real gradient";
    expect_gradient_matches(params[n].name, *params[n].values, analytic, loss, indices, tol);
  }
  // Unused scalars get exactly nothing: skip weights 5.., lambdas of block 0, sa lambdas of block 7 and of
  // the ve slot of blocks without a value embedding, padding.
  const std::vector<double>& ds = model.grads.scalars;
  for (int k = 5; k < batch.config.num_blocks; k++) EXPECT_EQ(ds[index.skip_weight(k)], 0.0) << "skip " << k;
  EXPECT_EQ(ds[index.block_lambda(0, 0)], 0.0);
  EXPECT_EQ(ds[index.sa_lambda(7, 0)], 0.0);
  EXPECT_EQ(ds[index.sa_lambda(4, 1)], 0.0);
  EXPECT_EQ(ds[62], 0.0);
  EXPECT_EQ(ds[63], 0.0);
}

TEST(SpeedrunReference, GradientsScaleWithDlossAndAccumulate) {
  SpeedrunBatch batch;
  ref::ReferenceSpeedrun model(batch.config);
  randomize_params(model, 4);
  model.zero_grad();
  batch.forward(model);
  model.backward(1.0);
  const ref::SpeedrunParams once = model.grads;
  model.backward(0.5);  // accumulates: 1.5 x
  ref::SpeedrunParams once_copy = once;
  std::vector<ref::NamedTensor> a = ref::named_tensors(model.grads, batch.config),
                                b = ref::named_tensors(once_copy, batch.config);
  for (size_t n = 0; n < a.size(); n++)
    for (size_t i = 0; i < a[n].values->size(); i++)
      ASSERT_NEAR((*a[n].values)[i], 1.5 * (*b[n].values)[i], 1e-12 * (1 + std::abs((*b[n].values)[i])))
          << a[n].name << "[" << i << "]";
}

TEST(SpeedrunReference, EightBlockStructureAlsoMatchesFiniteDifferences) {
  SpeedrunBatch batch;
  batch.config.num_blocks = 8;
  batch.config.head_dim = 8;
  batch.config.num_heads = 3;  // C = 24
  ref::ReferenceSpeedrun model(batch.config);
  randomize_params(model, 5);
  model.zero_grad();
  batch.forward(model);
  model.backward();
  auto loss = [&] { return batch.forward(model); };
  gradient_check::Tolerance tol;
  tol.absolute = 5e-8;
  std::vector<ref::NamedTensor> grads = ref::named_tensors(model.grads, batch.config);
  std::vector<ref::NamedTensor> params = ref::named_tensors(model.params, batch.config);
  uint64_t state = 9;
  for (size_t n = 0; n < params.size(); n++) {
    std::vector<size_t> indices;
    for (int k = 0; k < 3; k++) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      indices.push_back((state >> 33) % params[n].values->size());
    }
    expect_gradient_matches(params[n].name, *params[n].values, *grads[n].values, loss, indices, tol);
  }
}

TEST(SpeedrunReference, RejectsBadInputs) {
  SpeedrunBatch batch;
  ref::ReferenceSpeedrun model(batch.config);
  model.params = ref::init_speedrun_params(batch.config, 2);
  EXPECT_TRUE(std::isnan(model.forward(batch.tokens.data(), nullptr, batch.cu_seqlens.data(), 5, batch.T, 8, 16)));
  EXPECT_THROW(model.backward(), std::logic_error);
  std::vector<int> bad = batch.tokens;
  bad[3] = batch.config.vocab_size;
  EXPECT_THROW(model.forward(bad.data(), batch.targets.data(), batch.cu_seqlens.data(), 5, batch.T, 8, 16),
               std::invalid_argument);
  const std::vector<int> bad_cu = {0, 30, 7, 48};
  EXPECT_THROW(model.forward(batch.tokens.data(), batch.targets.data(), bad_cu.data(), 4, batch.T, 8, 16),
               std::invalid_argument);
  const std::vector<int> short_cu = {0, 30};
  EXPECT_THROW(model.forward(batch.tokens.data(), batch.targets.data(), short_cu.data(), 2, batch.T, 8, 16),
               std::invalid_argument);
  EXPECT_THROW(model.set_rope({1.0}, 0.1), std::invalid_argument);
}
