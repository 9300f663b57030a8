// Whole-model tests of the device speedrun model (llmc/model/modded44/speedrun_model.cu) through the trainer's
// TrainableModel interface, against the double-precision reference (test/reference/reference_speedrun.h):
// the loss and every parameter gradient (simple attention path; in the bf16 build also the window
// attention kernel at head size 128), after a YaRN window change, gradient accumulation with the bucket
// hooks in backward order, bitwise determinism, and the record's facts at initialisation (loss ln V, no
// gradient but the head's); the same with the FP8 head (docs/fp8.md). Built for fp32 (tight) and bf16,
// emulated and on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/fp8_head.cuh"
#include "llmc/model/modded44/speedrun_init.h"
#include "llmc/model/modded44/speedrun_model.h"
#include "test/reference/reference_speedrun.h"
#include "test/support/captured_graph.h"
#include "test/support/gpu_test.h"
#include "test/support/speedrun_test_inputs.h"
#include "test/support/stream_test.h"
#include "test/support/worst_error.h"

namespace {

using namespace llmc;
using namespace llmc::test;  // the speedrun test inputs

constexpr bool kFp32 = std::is_same<floatX, float>::value;
constexpr int kBos = kSpeedrunTestBos;

// Tolerances, relative to each tensor's largest reference gradient (and to the loss). fp32: every kernel
// rounds once per stored value (u = 2^-24) and sums at most 4C = 128 (GEMMs), V = 96 (head) or T = 64
// (weight gradients) terms in fp32, so one layer's result is good to ~128 u = 8e-6; the gradient of an
// early block passes ~10 such steps per block through 11 blocks forward and back, ~200 in sequence,
// which bounds the relative error by ~2e-3 if every error adds up; 2e-3 of the largest gradient is far
// below an O(1) bug (measured: <= 0.2% of it). bf16: every stored activation and gradient is rounded to
// 8 bits (u = 2^-9); a block rounds ~13 times forward (mixes, norms, GEMMs, RoPE, attention's P, gate,
// ReLU^2) and ~27 backward, ~450 roundings in sequence through 11 blocks; with random signs they grow
// like sqrt(450) u = 4.1%; twice that (measured: up to 70% of it, in the attention gates' gradients,
// full reductions over T whose terms cancel). The record's own bf16 arithmetic, replayed at these shapes
// (test/train/speedrun_bf16_replay.py, docs/speedrun_model.md), reaches 2-4% RMS and up to 9.6%: no tighter.
constexpr double kGradTolerance = kFp32 ? 2e-3 : 8e-2;
constexpr double kLossTolerance = kFp32 ? 1e-5 : 1e-2;

// Each tensor's largest error within `tolerance` of its largest reference gradient (LLMC_TEST_VERBOSE=1 shows
// how close each comes).
void expect_grads_within(const SpeedrunLayout& layout, const std::vector<float>& got, ref::SpeedrunParams& want,
                         double scale, double tolerance) {
  for (const ref::NamedTensor& tensor : ref::named_tensors(want, layout.config)) {
    const TensorView& view = layout.find(tensor.name);
    double max_ref = 0.0, max_err = 0.0;
    for (size_t i = 0; i < view.numel; i++) {
      const double expected = scale * (*tensor.values)[i];
      max_ref = std::max(max_ref, std::fabs(expected));
      max_err = llmc::worse_error(max_err, std::fabs(got[view.offset + i] - expected));
    }
    EXPECT_LE(max_err, tolerance * max_ref + 1e-12) << view.name << " (largest reference gradient " << max_ref << ")";
    if (std::getenv("LLMC_TEST_VERBOSE") != nullptr)
      std::printf("  %-22s max error %.3g of largest gradient %.3g (%.2g%% of the tolerance)\n", view.name.c_str(),
                  max_err, max_ref, max_ref > 0 ? 100.0 * max_err / (tolerance * max_ref) : 0.0);
  }
}

// Within the bf16/fp32 tolerance, and every element outside the tensors (padding) exactly zero.
void expect_grads_close(const SpeedrunLayout& layout, const std::vector<float>& got, ref::SpeedrunParams& want,
                        double scale) {
  expect_grads_within(layout, got, want, scale, kGradTolerance);
  std::vector<bool> inside(layout.total_size, false);
  for (const ref::NamedTensor& tensor : ref::named_tensors(want, layout.config)) {
    const TensorView& view = layout.find(tensor.name);
    std::fill_n(inside.begin() + view.offset, view.numel, true);
  }
  for (size_t i = 0; i < layout.total_size; i++)
    if (!inside[i]) {
      ASSERT_EQ(got[i], 0.0f) << "padding element " << i;
    }
}

class SpeedrunModelTest : public llmc::test::StreamTest {};

// One forward + backward of the device model and of the reference on the same parameters and batch.
void expect_model_matches_reference(const SpeedrunConfig& config, int short_blocks, int long_blocks, uint64_t seed,
                                    cudaStream_t stream, FusedGemms fused_gemms = FusedGemms::kCublas) {
  SpeedrunModel model(config, 1, config.max_seq_len, 1, stream, kBos, SpeedrunHead::kBf16, fused_gemms);
  if (long_blocks != 3) model.set_attention_windows(short_blocks, long_blocks, /*apply_yarn=*/true);
  ref::SpeedrunParams params = test_params(config, seed);
  model.upload_params(to_layout(model.layout(), params));
  const SpeedrunBatch batch = random_batch(model.seq_len(), config.vocab_size, static_cast<uint32_t>(seed) + 1);

  ref::ReferenceSpeedrun reference(config);
  reference.params = params;
  use_model_rope(reference, model);
  const double ref_loss = reference_forward(reference, model, batch);
  reference.backward(1.0);

  const float dloss = 1.0f / static_cast<float>(model.seq_len());  // a mean, as the trainer passes it
  model.forward(batch.inputs.data(), batch.targets.data(), 0, true, dloss);
  model.backward(true);
  const double mean_ref_loss = ref_loss / model.seq_len();
  EXPECT_NEAR(model.mean_loss(1), mean_ref_loss, kLossTolerance * mean_ref_loss);
  expect_grads_close(model.layout(), model.download_grads(), reference.grads, dloss);
}

TEST_F(SpeedrunModelTest, LossAndEveryGradientMatchReference) {
  const SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  expect_model_matches_reference(config, 1, 3, 7, stream);
}

// The MLP's GEMMs on the wgmma kernel with ReLU^2 and its derivative in their epilogues (--wgmma-gemms): the same
// roundings as the cuBLASLt path, so the same tolerances. bf16 build on a Hopper GPU (or emulated) only.
TEST_F(SpeedrunModelTest, WgmmaGemmsLossAndEveryGradientMatchReference) {
  const SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  if (!wgmma_gemms_available_here()) {
    EXPECT_THROW(SpeedrunModel(config, 1, config.max_seq_len, 1, stream, kBos, SpeedrunHead::kBf16, FusedGemms::kWgmma),
                 std::invalid_argument);
    GTEST_SKIP() << "the wgmma GEMMs need the bf16 build and a Hopper GPU; checked that they are refused";
  }
  expect_model_matches_reference(config, 1, 3, 7, stream, FusedGemms::kWgmma);
}

// After the long window grows from 3 to 7 blocks: YaRN-adjusted tables and attention scale.
TEST_F(SpeedrunModelTest, MatchesReferenceAfterAYarnWindowChange) {
  SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  config.num_blocks = 8;  // the scaled structure
  expect_model_matches_reference(config, 3, 7, 17, stream);
}

// Head size 128: the bf16 build runs the window attention kernel here (the fp32 build the simple path).
TEST_F(SpeedrunModelTest, HeadSize128MatchesReference) {
  SpeedrunConfig config;
  config.vocab_size = 64;
  config.num_blocks = 8;
  config.num_heads = 1;
  config.head_dim = 128;
  config.max_seq_len = 80;  // more than one 64-key tile
  config.window_block = 8;
  SpeedrunModel probe(config, 1, config.max_seq_len, 1, stream, kBos);
  EXPECT_EQ(probe.uses_window_attention_kernel(), !kFp32);
  expect_model_matches_reference(config, 1, 3, 29, stream);
}

TEST_F(SpeedrunModelTest, GradientsAccumulateAndBucketsReportInBackwardOrder) {
  const SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  const int micro_steps = 2;
  SpeedrunModel model(config, 1, config.max_seq_len, micro_steps, stream, kBos);
  ref::SpeedrunParams params = test_params(config, 3);
  model.upload_params(to_layout(model.layout(), params));
  ref::ReferenceSpeedrun reference(config);
  reference.params = params;
  use_model_rope(reference, model);
  double ref_loss_sum = 0.0;
  std::vector<int> reported;
  const float dloss = 1.0f / static_cast<float>(model.seq_len() * micro_steps);
  for (int micro = 0; micro < micro_steps; micro++) {
    const SpeedrunBatch batch = random_batch(model.seq_len(), config.vocab_size, 100 + micro);
    ref_loss_sum += reference_forward(reference, model, batch);
    reference.backward(1.0);
    model.forward(batch.inputs.data(), batch.targets.data(), micro, true, dloss);
    model.backward(micro == 0, [&](int bucket) { reported.push_back(bucket); });
  }
  const double mean = ref_loss_sum / (model.seq_len() * micro_steps);
  EXPECT_NEAR(model.mean_loss(micro_steps), mean, kLossTolerance * mean);
  expect_grads_close(model.layout(), model.download_grads(), reference.grads, dloss);
  // Head, blocks L-1..1, embeddings: once per micro-step.
  std::vector<int> expected = {model.layout().head_bucket()};
  for (int i = config.num_blocks - 1; i >= 1; i--) expected.push_back(model.layout().block_bucket(i));
  expected.push_back(SpeedrunLayout::embeddings_bucket());
  ASSERT_EQ(reported.size(), expected.size() * micro_steps);
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), reported.begin()));
  EXPECT_EQ(static_cast<int>(expected.size()), model.layout().num_buckets());
}

// A training step's loss and gradients.
struct LossAndGrads {
  double loss;
  std::vector<float> grads;
};

// `run` (a training step of a fresh model) twice: the same loss and gradients, bit for bit.
template <class Run>
void expect_bitwise_repeatable(Run run) {
  const LossAndGrads first = run();
  const LossAndGrads second = run();
  EXPECT_EQ(second.loss, first.loss);
  EXPECT_TRUE(second.grads == first.grads) << "gradients differ between two identical runs";
}

TEST_F(SpeedrunModelTest, TwoRunsAreBitwiseIdenticalAndValidationGivesTheSameLoss) {
  const SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  const SpeedrunBatch batch = random_batch(config.max_seq_len, config.vocab_size, 5);
  expect_bitwise_repeatable([&] {
    SpeedrunModel model(config, 1, config.max_seq_len, 1, stream, kBos);
    ref::SpeedrunParams params = test_params(config, 9);
    model.upload_params(to_layout(model.layout(), params));
    model.forward(batch.inputs.data(), batch.targets.data(), 0, false, 0.0f);
    const double validation_loss = model.mean_loss(1);
    model.forward(batch.inputs.data(), batch.targets.data(), 0, true, 1.0f);
    EXPECT_EQ(model.mean_loss(1), validation_loss);
    model.backward(true);
    return LossAndGrads{model.mean_loss(1), model.download_grads()};
  });
}

// A training micro-step's device part, forward_uploaded and backward, captures as one CUDA graph (nothing in it
// refused) and, captured with one batch, replays each batch uploaded before a launch (other tokens, targets and
// documents, so other bounds and embedding plans) to that batch's eager loss and gradients, bit for bit
// (Modded89ModelTest.TrainingMicroStepGraphReplaysLaterUploads says why).
TEST_F(SpeedrunModelTest, TrainingMicroStepGraphReplaysLaterUploads) {
  const SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  std::vector<SpeedrunBatch> batches;
  for (uint32_t seed : {7u, 6u, 8u}) batches.push_back(random_batch(config.max_seq_len, config.vocab_size, seed));
  batches.push_back(batches[0]);
  ASSERT_LT(batches[0].cu_seqlens.size(), batches[1].cu_seqlens.size()) << "a replay with more documents than captured";
  SpeedrunModel model(config, 1, config.max_seq_len, 1, stream, kBos);
  ref::SpeedrunParams params = test_params(config, 10);
  model.upload_params(to_layout(model.layout(), params));
  const auto upload = [&](size_t i) {
    model.upload_batch(batches[i].inputs.data(), batches[i].targets.data(), /*training=*/true);
  };
  const auto observe = [&] { return std::make_pair(model.mean_loss(1), model.download_grads()); };
  const auto eager = test::micro_step_results(model, batches.size(), upload, observe, /*replayed=*/false);
  const auto replayed = test::micro_step_results(model, batches.size(), upload, observe, /*replayed=*/true);
  for (size_t i = 0; i < batches.size(); i++) {
    EXPECT_EQ(replayed[i].first, eager[i].first) << "batch " << i;
    EXPECT_TRUE(replayed[i].second == eager[i].second) << "batch " << i;
  }
}

// The two parts of a forward refuse to run apart from what they need.
TEST_F(SpeedrunModelTest, ForwardUploadedNeedsItsUpload) {
  const SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  const SpeedrunBatch batch = random_batch(config.max_seq_len, config.vocab_size, 6);
  SpeedrunModel model(config, 1, config.max_seq_len, 1, stream, kBos);
  ref::SpeedrunParams params = test_params(config, 10);
  model.upload_params(to_layout(model.layout(), params));
  EXPECT_THROW(model.forward_uploaded(0, false, 1.0f), std::logic_error);  // nothing uploaded
  EXPECT_THROW(model.upload_batch(batch.inputs.data(), nullptr, true), std::invalid_argument);
  model.upload_batch(batch.inputs.data(), batch.targets.data(), /*training=*/false);
  EXPECT_THROW(model.forward_uploaded(0, true, 1.0f), std::logic_error);  // no embedding plan for a backward
  EXPECT_THROW(model.forward_uploaded(1, false, 1.0f), std::out_of_range);
  model.forward_uploaded(0, false, 1.0f);
}

// the record (docs/recipes.md): the zero head gives uniform logits of 15, so the loss is ln V per token, and
// every gradient except the head's is exactly zero (dx = dz W_head = 0 upstream of the head).
TEST_F(SpeedrunModelTest, FreshModelLossIsLnVAndOnlyTheHeadHasGradients) {
  const SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  SpeedrunModel model(config, 1, config.max_seq_len, 1, stream, kBos);
  model.upload_params(init_speedrun_params(model.layout(), 1337));
  const SpeedrunBatch batch = random_batch(model.seq_len(), config.vocab_size, 77);
  model.forward(batch.inputs.data(), batch.targets.data(), 0, true, 1.0f);
  model.backward(true);
  // Per token: log(sum of V equal terms) in fp32: V roundings of the sum plus the log's, ~(V + 2) u32 relative.
  const double ln_v = std::log(static_cast<double>(config.vocab_size));
  EXPECT_NEAR(model.mean_loss(1), ln_v, (config.vocab_size + 2) * 0x1p-24 * ln_v);
  const std::vector<float> grads = model.download_grads();
  for (const TensorView& view : model.layout().tensors) {
    double largest = 0.0;
    for (size_t i = 0; i < view.numel; i++)
      largest = llmc::larger_magnitude(largest, grads[view.offset + i]);
    if (speedrun_kind(view) == SpeedrunTensor::kHead)
      EXPECT_GT(largest, 0.0) << view.name;
    else
      EXPECT_EQ(largest, 0.0) << view.name;
  }
}

// The plan is what the constructor allocates; at the record's shapes (T = 32,768 tokens per rank, the
// number the log header prints for --model speedrun -t 32768) it must leave an 80 GiB H100 room to spare
// for parameters, gradients and optimizer state (the reference needs ~29 GiB in all): at most half of it.
TEST_F(SpeedrunModelTest, PlannedActivationBytesAreWhatTheModelAllocates) {
  for (const SpeedrunConfig& config : {speedrun_config_from_name("speedrun-tiny"), [] {
                                         SpeedrunConfig c = speedrun_config_from_name("speedrun-tiny");
                                         c.num_blocks = 8, c.num_heads = 1, c.head_dim = 128;
                                         return c;
                                       }()}) {
    SpeedrunModel model(config, 1, 48, 3, stream);
    EXPECT_EQ(model.activation_bytes(), SpeedrunModel::planned_activation_bytes(config, 48, 3));
  }
  const size_t record = SpeedrunModel::planned_activation_bytes(speedrun_config_from_name("speedrun"), 32768, 1);
  std::printf("  activation memory of --model speedrun at T=32768 (%s): %.2f GiB\n", kFp32 ? "fp32" : "bf16",
              static_cast<double>(record) / (1 << 30));
  EXPECT_LT(static_cast<double>(record), 40.0 * (1 << 30));
}

// ---- the FP8 head (docs/fp8.md) -----------------------------------------------------------------------

// An FP8 GEMM's products carry the operands' quantisation: e4m3 keeps 3 mantissa bits (a relative half-ulp
// of 2^-4), e5m2 2 bits (2^-3); the accumulator model adds 2^-13 per MMA step and the bf16 output 2^-9. So a
// forward product (e4m3 x e4m3) is within 2^-3 + 2^-8 of the exact one, a backward product (e5m2 x e4m3)
// within 2^-3 + 2^-4 + 2^-7. A logit then moves by at most 2^-3 + 2^-8 times sum_k |x_k W_jk| <=
// sqrt(C) |W_j| (|x| = sqrt(C) after the weightless norm), and a token's loss by at most twice the largest
// logit error (sum_j |softmax_j - onehot_j| <= 2, the soft cap's slope <= 1). Gradients: the head's and,
// through dx, every other one move by the backward products' error relative to sums that do not cancel
// much, measured against each tensor's largest gradient; added to the bf16/fp32 tolerance of the rest.
constexpr double kFp8ForwardProductError = 0x1p-3 + 0x1p-8;
constexpr double kFp8BackwardProductError = 0x1p-3 + 0x1p-4 + 0x1p-7;
constexpr double kFp8GradTolerance = kGradTolerance + kFp8BackwardProductError;

// The bound above on a token's loss change from the FP8 forward, for these head weights.
double fp8_loss_bound(const SpeedrunConfig& config, const ref::SpeedrunParams& params) {
  ref::SpeedrunParams copy = params;
  double largest_row = 0.0;
  for (const ref::NamedTensor& tensor : ref::named_tensors(copy, config)) {
    if (tensor.name != "head") continue;
    const size_t C = static_cast<size_t>(config.channels());
    for (size_t row = 0; row * C < tensor.values->size(); row++) {
      double squares = 0.0;
      for (size_t k = 0; k < C; k++) squares += (*tensor.values)[row * C + k] * (*tensor.values)[row * C + k];
      largest_row = std::max(largest_row, std::sqrt(squares));
    }
  }
  return 2.0 * kFp8ForwardProductError * std::sqrt(static_cast<double>(config.channels())) * largest_row;
}

// Two micro-steps (the head's fp32 dW added into the floatX gradient twice) against the double reference.
TEST_F(SpeedrunModelTest, Fp8HeadLossAndEveryGradientMatchReference) {
  const SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  const int micro_steps = 2;
  SpeedrunModel model(config, 1, config.max_seq_len, micro_steps, stream, kBos, SpeedrunHead::kFp8);
  EXPECT_EQ(model.head(), SpeedrunHead::kFp8);
  ref::SpeedrunParams params = test_params(config, 11);
  model.upload_params(to_layout(model.layout(), params));
  ref::ReferenceSpeedrun reference(config);
  reference.params = params;
  use_model_rope(reference, model);
  double ref_loss_sum = 0.0;
  const float dloss = 1.0f / static_cast<float>(model.seq_len() * micro_steps);
  for (int micro = 0; micro < micro_steps; micro++) {
    const SpeedrunBatch batch = random_batch(model.seq_len(), config.vocab_size, 200 + micro);
    ref_loss_sum += reference_forward(reference, model, batch);
    reference.backward(1.0);
    model.forward(batch.inputs.data(), batch.targets.data(), micro, true, dloss);
    model.backward(micro == 0);
  }
  const double mean = ref_loss_sum / (model.seq_len() * micro_steps);
  const double loss_bound = fp8_loss_bound(config, params);
  if (std::getenv("LLMC_TEST_VERBOSE") != nullptr)
    std::printf("  loss %.6f, reference %.6f, FP8 bound %.3g\n", model.mean_loss(micro_steps), mean, loss_bound);
  EXPECT_NEAR(model.mean_loss(micro_steps), mean, kLossTolerance * mean + loss_bound);
  expect_grads_within(model.layout(), model.download_grads(), reference.grads, dloss, kFp8GradTolerance);
}

// g_s = fp8_head_grad_scale(dloss) keeps the e5m2 codes of the record's SUM loss: with a power-of-two dloss
// (here a mean over 2^20 tokens, whose logit gradients would mostly flush to e5m2's zero with the record's
// fixed 1/448: the mutant fp8_head.fixed_grad_scale, test/kernels/run_kernel_mutants.py)
// every gradient is exactly dloss times the SUM loss's, and the losses are equal.
TEST_F(SpeedrunModelTest, Fp8HeadGradientScaleFollowsTheLossScale) {
  EXPECT_EQ(fp8_head_grad_scale(1.0f), Fp8HeadScales::speedrun(768).grad);
  EXPECT_EQ(fp8_head_grad_scale(0x1p-15f), static_cast<float>(0x1p-15 / 448.0));
  EXPECT_THROW(fp8_head_grad_scale(0.0f), std::invalid_argument);
  const SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  const SpeedrunBatch batch = random_batch(config.max_seq_len, config.vocab_size, 13);
  ref::SpeedrunParams params = test_params(config, 13);
  std::vector<float> grads[2];
  double losses[2];
  const float dlosses[2] = {1.0f, 0x1p-20f};
  for (int run = 0; run < 2; run++) {
    SpeedrunModel model(config, 1, config.max_seq_len, 1, stream, kBos, SpeedrunHead::kFp8);
    model.upload_params(to_layout(model.layout(), params));
    model.forward(batch.inputs.data(), batch.targets.data(), 0, true, dlosses[run]);
    model.backward(true);
    grads[run] = model.download_grads();
    losses[run] = model.mean_loss(1);
  }
  EXPECT_EQ(losses[0], losses[1]);
  size_t mismatches = 0, nonzero = 0;
  for (size_t i = 0; i < grads[0].size(); i++) {
    nonzero += grads[0][i] != 0.0f;
    mismatches += grads[1][i] != grads[0][i] * 0x1p-20f;
  }
  EXPECT_GT(nonzero, grads[0].size() / 2);
  EXPECT_EQ(mismatches, 0u);
}

// Training runs the FP8 head, validation the bf16 one (the same loss as the bf16-head model's, bit for
// bit); two runs give the same losses and gradients bit for bit.
TEST_F(SpeedrunModelTest, Fp8HeadRunsAreBitwiseIdenticalAndValidationStaysBf16) {
  const SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  const SpeedrunBatch batch = random_batch(config.max_seq_len, config.vocab_size, 21);
  ref::SpeedrunParams params = test_params(config, 21);
  double bf16_validation = 0.0;
  {
    SpeedrunModel bf16_model(config, 1, config.max_seq_len, 1, stream, kBos);
    bf16_model.upload_params(to_layout(bf16_model.layout(), params));
    bf16_model.forward(batch.inputs.data(), batch.targets.data(), 0, false, 0.0f);
    bf16_validation = bf16_model.mean_loss(1);
  }
  expect_bitwise_repeatable([&] {
    SpeedrunModel model(config, 1, config.max_seq_len, 1, stream, kBos, SpeedrunHead::kFp8);
    model.upload_params(to_layout(model.layout(), params));
    model.forward(batch.inputs.data(), batch.targets.data(), 0, false, 0.0f);
    EXPECT_EQ(model.mean_loss(1), bf16_validation);
    model.forward(batch.inputs.data(), batch.targets.data(), 0, true, 1.0f / 64);
    EXPECT_NE(model.mean_loss(1), bf16_validation) << "the training forward did not run the FP8 head";
    model.backward(true);
    return LossAndGrads{model.mean_loss(1), model.download_grads()};
  });
}

// The workspace and the fp32 dW_head are part of the activations; shapes off the multiples of 16 refuse.
TEST_F(SpeedrunModelTest, Fp8HeadMemoryIsPlannedAndBadShapesRefuse) {
  const SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  SpeedrunModel model(config, 1, 48, 2, stream, kBos, SpeedrunHead::kFp8);
  EXPECT_EQ(model.activation_bytes(), SpeedrunModel::planned_activation_bytes(config, 48, 2, SpeedrunHead::kFp8));
  // The FP8 workspace only: dW_head is added straight into the gradient, no fp32 copy.
  EXPECT_EQ(model.activation_bytes() - SpeedrunModel::planned_activation_bytes(config, 48, 2),
            fp8_head_workspace_bytes(48, config.channels(), config.vocab_size));
  EXPECT_THROW(SpeedrunModel(config, 1, 40, 1, stream, kBos, SpeedrunHead::kFp8), std::invalid_argument);
  const size_t record = SpeedrunModel::planned_activation_bytes(speedrun_config_from_name("speedrun"), 32768, 1,
                                                                SpeedrunHead::kFp8);
  std::printf("  activation memory of --model speedrun --fp8-head on at T=32768 (%s): %.2f GiB\n",
              kFp32 ? "fp32" : "bf16", static_cast<double>(record) / (1 << 30));
  EXPECT_LT(static_cast<double>(record), 40.0 * (1 << 30));
}

TEST_F(SpeedrunModelTest, RejectsBadShapesAndTokens) {
  const SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  EXPECT_THROW(SpeedrunModel(config, 1, config.max_seq_len + 1, 1, stream), std::invalid_argument);
  SpeedrunModel model(config, 1, config.max_seq_len, 1, stream, kBos);
  std::vector<int> tokens(static_cast<size_t>(model.seq_len()), 1);
  tokens[5] = config.vocab_size;
  EXPECT_THROW(model.forward(tokens.data(), tokens.data(), 0, true, 1.0f), std::invalid_argument);
  EXPECT_THROW(model.set_attention_windows(0, 3, false), std::invalid_argument);
}

}  // namespace
