// Tests of the double-precision reference GPT-2: every op's backward against central finite
// differences (and its forward against independently known values), the whole model's gradient of
// every parameter tensor against finite differences, loss at init ~ ln(V), AdamW against its closed
// form, gradient accumulation, and a single batch overfitted to near-zero loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "llmc/model/gpt2/gpt2_init.h"
#include "test/reference/gradient_check.h"
#include "test/reference/reference_gpt2.h"
#include "test/reference/reference_ops.h"

using llmc::NormalSampler;
using llmc::TensorKind;

using gradient_check::all_indices;
using gradient_check::dot;
using gradient_check::expect_gradient_matches;
using gradient_check::minus;
using gradient_check::random_vector;

// ------------------------------------------------------------------------------------------------
// Per-op checks. Each backward is tested through f = sum(out * w) with random w (so dout = w).

TEST(ReferenceOps, EncoderForwardAndBackward) {
  NormalSampler normal(1);
  const int B = 2, T = 3, C = 4, V = 5;
  const std::vector<int> tokens = {4, 0, 4, 2, 2, 1};
  std::vector<double> wte = random_vector(V * C, normal), wpe = random_vector(T * C, normal);
  std::vector<double> out(B * T * C);
  ref::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  EXPECT_EQ(out[(1 * T + 2) * C + 3], wte[1 * C + 3] + wpe[2 * C + 3]);
  const std::vector<double> w = random_vector(out.size(), normal);
  const std::vector<double> prefill_te = random_vector(wte.size(), normal), prefill_pe = random_vector(wpe.size(), normal);
  std::vector<double> dwte = prefill_te, dwpe = prefill_pe;
  ref::encoder_backward(dwte.data(), dwpe.data(), w.data(), tokens.data(), B, T, C);
  auto f = [&] {
    ref::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, w);
  };
  expect_gradient_matches("dwte", wte, minus(dwte, prefill_te), f, all_indices(wte.size()));
  expect_gradient_matches("dwpe", wpe, minus(dwpe, prefill_pe), f, all_indices(wpe.size()));
}

TEST(ReferenceOps, LayerNormForwardAndBackward) {
  NormalSampler normal(2);
  const int N = 3, C = 8;
  std::vector<double> inp = random_vector(N * C, normal, 2.0), weight = random_vector(C, normal),
                      bias = random_vector(C, normal);
  for (int c = 0; c < C; c++) inp[c] += 5.0;  // a row far from zero mean
  std::vector<double> out(N * C), mean(N), rstd(N);
  // Forward: with weight 1 and bias 0 each row has mean 0 and variance var / (var + 1e-5).
  const std::vector<double> ones(C, 1.0), zeros(C, 0.0);
  ref::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), ones.data(), zeros.data(), N, C);
  for (int n = 0; n < N; n++) {
    double m = 0, var = 0, out_mean = 0, out_var = 0;
    for (int c = 0; c < C; c++) m += inp[n * C + c] / C;
    for (int c = 0; c < C; c++) var += (inp[n * C + c] - m) * (inp[n * C + c] - m) / C;
    for (int c = 0; c < C; c++) out_mean += out[n * C + c] / C;
    for (int c = 0; c < C; c++) out_var += out[n * C + c] * out[n * C + c] / C;
    EXPECT_NEAR(mean[n], m, 1e-12);
    EXPECT_NEAR(out_mean, 0.0, 1e-12);
    EXPECT_NEAR(out_var, var / (var + 1e-5), 1e-12);
  }
  const std::vector<double> w = random_vector(out.size(), normal);
  const std::vector<double> p_in = random_vector(inp.size(), normal), p_w = random_vector(C, normal),
                            p_b = random_vector(C, normal);
  std::vector<double> dinp = p_in, dweight = p_w, dbias = p_b;
  ref::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
  ref::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(), weight.data(), mean.data(),
                          rstd.data(), N, C);
  auto f = [&] {
    std::vector<double> o(N * C), m(N), r(N);
    ref::layernorm_forward(o.data(), m.data(), r.data(), inp.data(), weight.data(), bias.data(), N, C);
    return dot(o, w);
  };
  expect_gradient_matches("dinp", inp, minus(dinp, p_in), f, all_indices(inp.size()));
  expect_gradient_matches("dweight", weight, minus(dweight, p_w), f, all_indices(C));
  expect_gradient_matches("dbias", bias, minus(dbias, p_b), f, all_indices(C));
}

TEST(ReferenceOps, MatmulForwardAndBackward) {
  // Forward on a 1x2 @ (3x2)^T example worked by hand: [1,2] . rows [1,0],[0,1],[3,-1] + [0.5,0,-1].
  const double x[] = {1, 2}, weight_small[] = {1, 0, 0, 1, 3, -1}, bias_small[] = {0.5, 0, -1};
  double y[3];
  ref::matmul_forward(y, x, weight_small, bias_small, 1, 2, 3);
  EXPECT_EQ(y[0], 1.5);
  EXPECT_EQ(y[1], 2.0);
  EXPECT_EQ(y[2], 0.0);
  ref::matmul_forward(y, x, weight_small, nullptr, 1, 2, 3);
  EXPECT_EQ(y[0], 1.0);

  NormalSampler normal(3);
  const int N = 3, C = 5, OC = 4;
  std::vector<double> inp = random_vector(N * C, normal), weight = random_vector(OC * C, normal),
                      bias = random_vector(OC, normal);
  const std::vector<double> w = random_vector(N * OC, normal);
  for (bool with_bias : {true, false}) {
    const std::vector<double> p_in = random_vector(inp.size(), normal), p_w = random_vector(weight.size(), normal),
                              p_b = random_vector(OC, normal);
    std::vector<double> dinp = p_in, dweight = p_w, dbias = p_b;
    ref::matmul_backward(dinp.data(), dweight.data(), with_bias ? dbias.data() : nullptr, w.data(), inp.data(),
                         weight.data(), N, C, OC);
    auto f = [&] {
      std::vector<double> o(N * OC);
      ref::matmul_forward(o.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr, N, C, OC);
      return dot(o, w);
    };
    expect_gradient_matches("dinp", inp, minus(dinp, p_in), f, all_indices(inp.size()));
    expect_gradient_matches("dweight", weight, minus(dweight, p_w), f, all_indices(weight.size()));
    if (with_bias) expect_gradient_matches("dbias", bias, minus(dbias, p_b), f, all_indices(OC));
    else EXPECT_EQ(dbias, p_b);
  }
}

TEST(ReferenceOps, AttentionForwardAndBackward) {
  NormalSampler normal(4);
  const int B = 2, T = 4, C = 8, NH = 2, hs = C / NH;
  std::vector<double> qkv = random_vector(B * T * 3 * C, normal);
  std::vector<double> out(B * T * C), preatt(B * NH * T * T), att(B * NH * T * T);
  ref::attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), B, T, C, NH);
  // Causal softmax rows: sum to 1 over t2 <= t, zero above the diagonal.
  for (int row = 0; row < B * NH * T; row++) {
    const int t = row % T;
    double sum = 0;
    for (int t2 = 0; t2 < T; t2++) {
      if (t2 > t) {
        EXPECT_EQ(att[row * T + t2], 0.0);
      }
      sum += att[row * T + t2];
    }
    EXPECT_NEAR(sum, 1.0, 1e-14);
  }
  // Position 0 attends only to itself: its output is its own v.
  for (int h = 0; h < NH; h++)
    for (int i = 0; i < hs; i++) EXPECT_NEAR(out[h * hs + i], qkv[2 * C + h * hs + i], 1e-14);
  // With q = 0 every prefix is weighted uniformly: out[t] = mean of v[0..t].
  std::vector<double> zero_q = qkv;
  for (int bt = 0; bt < B * T; bt++)
    for (int c = 0; c < C; c++) zero_q[bt * 3 * C + c] = 0.0;
  ref::attention_forward(out.data(), preatt.data(), att.data(), zero_q.data(), B, T, C, NH);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++) {
        double mean_v = 0;
        for (int t2 = 0; t2 <= t; t2++) mean_v += zero_q[(b * T + t2) * 3 * C + 2 * C + c] / (t + 1);
        EXPECT_NEAR(out[(b * T + t) * C + c], mean_v, 1e-14);
      }

  const std::vector<double> w = random_vector(out.size(), normal);
  ref::attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), B, T, C, NH);
  const std::vector<double> prefill = random_vector(qkv.size(), normal);
  std::vector<double> dqkv = prefill, dpreatt(att.size(), 123.0), datt(att.size(), 456.0);
  ref::attention_backward(dqkv.data(), dpreatt.data(), datt.data(), w.data(), qkv.data(), att.data(), B, T, C, NH);
  auto f = [&] {
    std::vector<double> o(out.size()), p(att.size()), a(att.size());
    ref::attention_forward(o.data(), p.data(), a.data(), qkv.data(), B, T, C, NH);
    return dot(o, w);
  };
  expect_gradient_matches("dqkv", qkv, minus(dqkv, prefill), f, all_indices(qkv.size()));
}

TEST(ReferenceOps, GeluForwardAndBackward) {
  NormalSampler normal(5);
  std::vector<double> inp = random_vector(40, normal, 3.0);
  inp.push_back(0.0);
  std::vector<double> out(inp.size());
  ref::gelu_forward(out.data(), inp.data(), inp.size());
  EXPECT_EQ(out.back(), 0.0);
  // The tanh form approximates the exact GELU x * Phi(x) to within ~5e-4 everywhere.
  for (size_t i = 0; i < inp.size(); i++)
    EXPECT_NEAR(out[i], inp[i] * 0.5 * std::erfc(-inp[i] / std::sqrt(2.0)), 1e-3) << inp[i];
  const std::vector<double> w = random_vector(inp.size(), normal), prefill = random_vector(inp.size(), normal);
  std::vector<double> dinp = prefill;
  ref::gelu_backward(dinp.data(), inp.data(), w.data(), inp.size());
  auto f = [&] {
    std::vector<double> o(inp.size());
    ref::gelu_forward(o.data(), inp.data(), inp.size());
    return dot(o, w);
  };
  expect_gradient_matches("dinp", inp, minus(dinp, prefill), f, all_indices(inp.size()));
}

TEST(ReferenceOps, ResidualForward) {
  const double a[] = {1, 2, 3}, b[] = {0.5, -2, 4};
  double out[3];
  ref::residual_forward(out, a, b, 3);
  EXPECT_EQ(out[0], 1.5);
  EXPECT_EQ(out[1], 0.0);
  EXPECT_EQ(out[2], 7.0);
}

TEST(ReferenceOps, SoftmaxCrossEntropyForwardAndBackward) {
  NormalSampler normal(6);
  const int N = 3, V = 7, Vp = 9;
  const std::vector<int> targets = {0, 6, 3};
  std::vector<double> logits = random_vector(N * Vp, normal, 2.0);
  std::vector<double> losses(N), probs(N * Vp);
  // Equal logits: every loss is ln V, padded columns ignored even when huge.
  std::vector<double> flat(N * Vp, 0.25);
  for (int n = 0; n < N; n++) flat[n * Vp + 8] = 1e6;
  ref::softmax_crossentropy_forward(losses.data(), probs.data(), flat.data(), targets.data(), N, V, Vp);
  for (int n = 0; n < N; n++) {
    EXPECT_NEAR(losses[n], std::log(7.0), 1e-14);
    EXPECT_EQ(probs[n * Vp + 7], 0.0);
    EXPECT_EQ(probs[n * Vp + 8], 0.0);
  }
  const std::vector<double> dlosses = random_vector(N, normal), prefill = random_vector(N * Vp, normal);
  ref::softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V, Vp);
  std::vector<double> dlogits = prefill;
  ref::crossentropy_softmax_backward(dlogits.data(), probs.data(), targets.data(), dlosses.data(), N, V, Vp);
  auto f = [&] {
    std::vector<double> l(N), p(N * Vp);
    ref::softmax_crossentropy_forward(l.data(), p.data(), logits.data(), targets.data(), N, V, Vp);
    return dot(l, dlosses);
  };
  const std::vector<double> grad = minus(dlogits, prefill);
  expect_gradient_matches("dlogits", logits, grad, f, all_indices(logits.size()));
  for (int n = 0; n < N; n++) {
    EXPECT_EQ(grad[n * Vp + 7], 0.0);
    EXPECT_EQ(grad[n * Vp + 8], 0.0);
  }
}

TEST(ReferenceOps, AdamWMatchesClosedForm) {
  // Two steps with constant gradient g from m = v = 0: mhat = g and vhat = g^2 at every step, so each
  // step moves by lr * (g / (|g| + eps) + wd * param).
  const double lr = 0.01, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  std::vector<double> param = {1.0, -2.0, 0.5}, grad = {0.3, -4.0, 0.0}, m(3, 0.0), v(3, 0.0);
  std::vector<double> expected = param;
  for (int step = 1; step <= 2; step++) {
    ref::adamw_update(param.data(), grad.data(), m.data(), v.data(), 3, step, lr, b1, b2, eps, wd);
    for (int i = 0; i < 3; i++) expected[i] -= lr * (grad[i] / (std::abs(grad[i]) + eps) + wd * expected[i]);
    for (int i = 0; i < 3; i++) EXPECT_NEAR(param[i], expected[i], 1e-15) << "step " << step << " element " << i;
  }
  // Moments after two steps: m = (1 - b1^2) g, v = (1 - b2^2) g^2.
  EXPECT_NEAR(m[1], (1 - b1 * b1) * -4.0, 1e-15);
  EXPECT_NEAR(v[1], (1 - b2 * b2) * 16.0, 1e-13);
}

// ------------------------------------------------------------------------------------------------
// Whole model.

namespace {

struct TinySetup {
  llmc::GPT2Layout layout = llmc::make_param_layout(llmc::config_from_name("tiny"), 2);
  std::vector<int> tokens, targets;
  int B = 2, T = 16;
  TinySetup() {
    uint64_t state = 99;
    for (int i = 0; i < B * T + 1; i++) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      tokens.push_back(static_cast<int>((state >> 33) % 100));
    }
    targets.assign(tokens.begin() + 1, tokens.end());
    tokens.pop_back();
  }
};

// GPT-2 init plus a broad perturbation of every real parameter (biases and LayerNorms included), so
// that every path carries gradients of ordinary size; padding stays 0.
void randomize_params(ref::ReferenceGPT2& model, uint64_t seed) {
  model.set_params(llmc::init_gpt2_params(model.layout(), seed));
  NormalSampler normal(seed + 1000);
  const llmc::GPT2Config& cfg = model.layout().config;
  for (const llmc::TensorView& view : model.layout().tensors) {
    size_t n = view.numel;
    if (gpt2_kind(view) == TensorKind::kWte) n = static_cast<size_t>(cfg.vocab_size) * cfg.channels;
    for (size_t i = 0; i < n; i++) model.params[view.offset + i] += 0.2 * normal.next();
  }
}

}  // namespace

TEST(ReferenceGPT2, LossAtInitIsNearLnV) {
  TinySetup s;
  ref::ReferenceGPT2 model(s.layout);
  model.set_params(llmc::init_gpt2_params(s.layout, 1));
  const double loss = model.forward(s.tokens.data(), s.targets.data(), s.B, s.T);
  EXPECT_NEAR(loss, std::log(100.0), 0.1);
  // Without targets: logits only.
  EXPECT_TRUE(std::isnan(model.forward(s.tokens.data(), nullptr, s.B, s.T)));
  EXPECT_THROW(model.backward(), std::logic_error);
  std::vector<int> bad = s.tokens;
  bad[3] = 100;
  EXPECT_THROW(model.forward(bad.data(), s.targets.data(), s.B, s.T), std::invalid_argument);
  EXPECT_THROW(model.forward(s.tokens.data(), s.targets.data(), 1, 17), std::invalid_argument);
}

TEST(ReferenceGPT2, GradientOfEveryTensorMatchesFiniteDifferences) {
  TinySetup s;
  ref::ReferenceGPT2 model(s.layout);
  randomize_params(model, 3);
  model.zero_grad();
  model.forward(s.tokens.data(), s.targets.data(), s.B, s.T);
  model.backward();
  const std::vector<double> analytic = model.grads;
  auto loss = [&] { return model.forward(s.tokens.data(), s.targets.data(), s.B, s.T); };

  // Padding never receives gradient (nor do the padded vocabulary rows of wte).
  std::vector<bool> is_real(s.layout.total_size, false);
  for (const llmc::TensorView& view : s.layout.tensors)
    for (size_t i = 0; i < view.numel; i++) is_real[view.offset + i] = true;
  for (size_t i = 0; i < s.layout.total_size; i++) {
    if (!is_real[i]) {
      ASSERT_EQ(analytic[i], 0.0) << "padding element " << i;
    }
  }
  const llmc::TensorView& wte = s.layout.tensor(TensorKind::kWte);
  for (size_t i = 100 * 32; i < wte.numel; i++) ASSERT_EQ(analytic[wte.offset + i], 0.0) << "padded vocab row";

  // Per tensor: its largest-gradient element plus 5 random ones (wte: also rows of used tokens).
  uint64_t state = 7;
  for (const llmc::TensorView& view : s.layout.tensors) {
    size_t real = view.numel;
    if (gpt2_kind(view) == TensorKind::kWte) real = 100 * 32;
    std::vector<size_t> indices;
    size_t largest = 0;
    for (size_t i = 0; i < real; i++)
      if (std::abs(analytic[view.offset + i]) > std::abs(analytic[view.offset + largest])) largest = i;
    indices.push_back(view.offset + largest);
    for (int k = 0; k < 5; k++) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      indices.push_back(view.offset + (state >> 33) % real);
    }
    if (gpt2_kind(view) == TensorKind::kWte)
      for (int k = 0; k < 3; k++) indices.push_back(view.offset + static_cast<size_t>(s.tokens[k]) * 32 + 5);
    EXPECT_GT(std::abs(analytic[view.offset + largest]), 1e-4) << view.name << " has no real gradient";
    expect_gradient_matches(view.name, model.params, analytic, loss, indices);
  }
}

TEST(ReferenceGPT2, GradientAccumulationOverMicroBatches) {
  // Loss is a mean per micro-batch, so the full batch's gradient is the average of two halves' gradients.
  TinySetup s;
  ref::ReferenceGPT2 model(s.layout);
  randomize_params(model, 4);
  model.zero_grad();
  model.forward(s.tokens.data(), s.targets.data(), 2, s.T);
  model.backward();
  const std::vector<double> full = model.grads;
  model.zero_grad();
  for (int half = 0; half < 2; half++) {
    model.forward(s.tokens.data() + half * s.T, s.targets.data() + half * s.T, 1, s.T);
    model.backward();
  }
  for (size_t i = 0; i < full.size(); i++)
    ASSERT_NEAR(model.grads[i] / 2, full[i], 1e-12 * (1 + std::abs(full[i]))) << "element " << i;
}

TEST(ReferenceGPT2, WeightDecayOnlyOnMatrices) {
  TinySetup s;
  ref::ReferenceGPT2 model(s.layout);
  randomize_params(model, 5);
  const std::vector<double> before = model.params;
  model.zero_grad();  // zero gradient: AdamW moves nothing but the decay, param *= (1 - lr * wd)
  ref::AdamWSettings settings;
  settings.lr = 0.01;
  settings.weight_decay = 0.5;
  model.adamw_step(1, settings);
  for (const llmc::TensorView& view : s.layout.tensors) {
    const double factor = view.weight_decay ? 1.0 - 0.01 * 0.5 : 1.0;
    for (size_t i = 0; i < view.numel; i += 7)
      ASSERT_NEAR(model.params[view.offset + i], before[view.offset + i] * factor, 1e-15) << view.name;
  }
}

TEST(ReferenceGPT2, OverfitsOneBatch) {
  TinySetup s;
  ref::ReferenceGPT2 model(s.layout);
  model.set_params(llmc::init_gpt2_params(s.layout, 8));
  ref::AdamWSettings settings;
  settings.lr = 3e-3;
  settings.weight_decay = 0.0;
  double first = 0, loss = 0;
  int step = 1;
  for (; step <= 300; step++) {
    model.zero_grad();
    loss = model.forward(s.tokens.data(), s.targets.data(), s.B, s.T);
    if (step == 1) first = loss;
    if (loss < 0.05) break;
    model.backward();
    model.adamw_step(step, settings);
  }
  std::printf("overfit: loss %.4f -> %.4f after %d steps\n", first, loss, step - 1);
  EXPECT_LT(loss, 0.05);
}
