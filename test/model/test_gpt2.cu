// Whole-model tests of the device GPT-2 (llmc/model/gpt2/gpt2.cu) against the double-precision reference: the
// loss and every parameter gradient on a tiny config, gradient accumulation over micro-steps, and
// bitwise determinism. Built for fp32 (tight tolerances) and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/model/gpt2/gpt2.h"
#include "llmc/model/gpt2/gpt2_config.h"
#include "llmc/model/gpt2/gpt2_init.h"
#include "test/support/gpu_test.h"
#include "test/support/stream_test.h"
#include "test/support/worst_error.h"
#include "test/reference/reference_gpt2.h"

namespace {

using namespace llmc;

constexpr bool kFp32 = std::is_same<floatX, float>::value;
// fp32: every kernel rounds to ~1e-7 relative and the GEMMs sum at most a few hundred terms, so 1e-4 of a
// tensor's largest gradient leaves two orders of headroom while any real bug is O(1). bf16 stores every
// activation and gradient with 8 mantissa bits (0.4% per rounding) through ~20 roundings per layer.
constexpr double kGradTolerance = kFp32 ? 1e-4 : 6e-2;
constexpr double kLossTolerance = kFp32 ? 1e-5 : 1e-2;

struct Batch {
  std::vector<int> inputs, targets;
};

Batch random_batch(int B, int T, int V, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> token(0, V - 1);
  Batch batch;
  for (int i = 0; i < B * T; i++) {
    batch.inputs.push_back(token(rng));
    batch.targets.push_back(token(rng));
  }
  return batch;
}

// Larger weights than the 0.02 init so that every path (attention pattern, GELU curvature) matters.
std::vector<float> test_params(const GPT2Layout& layout, uint64_t seed) {
  std::vector<float> params = init_gpt2_params(layout, seed);
  for (const TensorView& view : layout.tensors) {
    const bool is_norm_weight = gpt2_kind(view) == TensorKind::kLn1w || gpt2_kind(view) == TensorKind::kLn2w || gpt2_kind(view) == TensorKind::kLnfw;
    for (size_t i = 0; i < view.numel; i++) {
      float& p = params[view.offset + i];
      p = is_norm_weight ? 1.0f + 5.0f * (p - 1.0f) : 5.0f * p;
    }
  }
  if (!kFp32)  // the device model computes with bf16 parameters: give the reference the same values
    for (float& p : params) p = __bfloat162float(__float2bfloat16(p));
  return params;
}

void expect_grads_close(const GPT2Layout& layout, const std::vector<float>& got, const std::vector<double>& want) {
  for (const TensorView& view : layout.tensors) {
    double max_ref = 0.0, max_err = 0.0;
    for (size_t i = 0; i < view.numel; i++) {
      max_ref = std::max(max_ref, std::fabs(want[view.offset + i]));
      max_err = llmc::worse_error(max_err, std::fabs(got[view.offset + i] - want[view.offset + i]));
    }
    EXPECT_LE(max_err, kGradTolerance * max_ref + 1e-9) << view.name << " (largest reference gradient " << max_ref << ")";
  }
  // Padding between tensors and at the end of buckets must stay exactly zero.
  std::vector<bool> inside(layout.total_size, false);
  for (const TensorView& view : layout.tensors) std::fill_n(inside.begin() + view.offset, view.numel, true);
  for (size_t i = 0; i < layout.total_size; i++)
    if (!inside[i]) {
      ASSERT_EQ(got[i], 0.0f) << "padding element " << i;
    }
}

class GPT2Model : public llmc::test::StreamTest {};

// One forward + backward of the device model and of the reference on the same parameters and batch.
void expect_model_matches_reference(const GPT2Config& config, int B, uint64_t param_seed, uint32_t batch_seed,
                                    cudaStream_t stream) {
  const int T = config.max_seq_len;
  GPT2 model(config, 1, B, T, 1, stream);
  const std::vector<float> params = test_params(model.layout(), param_seed);
  model.upload_params(params);
  const Batch batch = random_batch(B, T, config.vocab_size, batch_seed);

  ref::ReferenceGPT2 reference(model.layout());
  reference.set_params(params);
  const double ref_loss = reference.forward(batch.inputs.data(), batch.targets.data(), B, T);
  reference.zero_grad();
  reference.backward();

  model.forward(batch.inputs.data(), batch.targets.data(), 0, true, 1.0f / (B * T));
  model.backward(true);
  EXPECT_NEAR(model.mean_loss(1), ref_loss, kLossTolerance * ref_loss);
  expect_grads_close(model.layout(), model.download_grads(), reference.grads);
}

TEST_F(GPT2Model, LossAndEveryGradientMatchReference) {
  expect_model_matches_reference(config_from_name("tiny"), 2, 7, 11, stream);
}

// Head size 64, the shape of every GPT-2: the bf16 build takes the fused flash-attention path here.
TEST_F(GPT2Model, HeadSize64LossAndGradientsMatchReference) {
  GPT2Config config;
  config.max_seq_len = 80;  // more than one 64-row tile, and not a multiple of it
  config.vocab_size = 100;
  config.padded_vocab_size = 128;
  config.num_layers = 1;
  config.num_heads = 2;
  config.channels = 128;
  expect_model_matches_reference(config, 1, 21, 23, stream);
}

TEST_F(GPT2Model, GradientsAccumulateOverMicroStepsAndBucketsReportInOrder) {
  const GPT2Config config = config_from_name("tiny");
  const int B = 2, T = 8, micro_steps = 2;
  GPT2 model(config, 1, B, T, micro_steps, stream);
  const std::vector<float> params = test_params(model.layout(), 3);
  model.upload_params(params);
  ref::ReferenceGPT2 reference(model.layout());
  reference.set_params(params);
  reference.zero_grad();
  double ref_loss_sum = 0.0;
  std::vector<int> reported;
  for (int micro = 0; micro < micro_steps; micro++) {
    const Batch batch = random_batch(B, T, config.vocab_size, 100 + micro);
    ref_loss_sum += reference.forward(batch.inputs.data(), batch.targets.data(), B, T);
    reference.backward();
    model.forward(batch.inputs.data(), batch.targets.data(), micro, true, 1.0f / (B * T * micro_steps));
    model.backward(micro == 0, [&](int bucket) { reported.push_back(bucket); });
  }
  // The reference sums per-micro-step mean-loss gradients; the model scales each by 1/micro_steps.
  for (double& g : reference.grads) g /= micro_steps;
  EXPECT_NEAR(model.mean_loss(micro_steps), ref_loss_sum / micro_steps, kLossTolerance * ref_loss_sum);
  expect_grads_close(model.layout(), model.download_grads(), reference.grads);
  // Final LayerNorm first, then layers L-1..0, then the embeddings: once per micro-step.
  const int L = config.num_layers;
  std::vector<int> expected_order = {L + 1};
  for (int l = L - 1; l >= 0; l--) expected_order.push_back(GPT2Layout::layer_bucket(l));
  expected_order.push_back(0);
  ASSERT_EQ(reported.size(), expected_order.size() * micro_steps);
  EXPECT_TRUE(std::equal(expected_order.begin(), expected_order.end(), reported.begin()));
}

TEST_F(GPT2Model, TwoRunsAreBitwiseIdentical) {
  const GPT2Config config = config_from_name("tiny");
  const int B = 2, T = 16;
  const Batch batch = random_batch(B, T, config.vocab_size, 5);
  std::vector<float> first_grads;
  double first_loss = 0.0;
  for (int run = 0; run < 2; run++) {
    GPT2 model(config, 1, B, T, 1, stream);
    model.upload_params(test_params(model.layout(), 9));
    model.forward(batch.inputs.data(), batch.targets.data(), 0, true, 1.0f / (B * T));
    model.backward(true);
    const std::vector<float> grads = model.download_grads();
    if (run == 0) {
      first_grads = grads;
      first_loss = model.mean_loss(1);
    } else {
      EXPECT_EQ(model.mean_loss(1), first_loss);
      EXPECT_TRUE(grads == first_grads) << "gradients differ between two identical runs";
    }
  }
}

// The first micro-step overwrites every gradient (no zeroing pass): a step after another step on a different
// batch leaves exactly the gradients of a fresh model (padding and the wpe rows past T included), and two
// loss results can be in flight at once.
TEST_F(GPT2Model, FirstMicroStepOverwritesEveryGradient) {
  const GPT2Config config = config_from_name("tiny");
  const int B = 2, T = 16;
  const Batch first = random_batch(B, T, config.vocab_size, 21), second = random_batch(B, T, config.vocab_size, 22);
  GPT2 fresh(config, 1, B, T, 1, stream);
  fresh.upload_params(test_params(fresh.layout(), 23));
  fresh.forward(second.inputs.data(), second.targets.data(), 0, true, 1.0f / (B * T));
  fresh.backward(true);
  const double fresh_loss = fresh.mean_loss(1);

  GPT2 model(config, 1, B, T, 1, stream);
  model.upload_params(test_params(model.layout(), 23));
  model.forward(first.inputs.data(), first.targets.data(), 0, true, 1.0f / (B * T));
  model.backward(true);
  model.enqueue_mean_loss(1, 0);
  model.forward(second.inputs.data(), second.targets.data(), 0, true, 1.0f / (B * T));
  model.backward(true);
  model.enqueue_mean_loss(1, 1);
  EXPECT_NE(model.read_mean_loss(0), model.read_mean_loss(1));
  EXPECT_EQ(model.read_mean_loss(1), fresh_loss);
  EXPECT_TRUE(model.download_grads() == fresh.download_grads());
}

TEST_F(GPT2Model, BackwardNeedsATrainingForward) {
  const GPT2Config config = config_from_name("tiny");
  const int B = 1, T = 8;
  GPT2 model(config, 1, B, T, 1, stream);
  model.upload_params(test_params(model.layout(), 29));
  const Batch batch = random_batch(B, T, config.vocab_size, 31);
  model.forward(batch.inputs.data(), batch.targets.data(), 0, false, 0.0f);
  EXPECT_THROW(model.backward(true), std::logic_error);
  EXPECT_THROW(model.enqueue_mean_loss(1, 2), std::out_of_range);
}

TEST_F(GPT2Model, ValidationForwardLeavesLogitsAndGivesTheSameLoss) {
  const GPT2Config config = config_from_name("tiny");
  const int B = 2, T = 16;
  GPT2 model(config, 1, B, T, 2, stream);
  model.upload_params(test_params(model.layout(), 13));
  const Batch batch = random_batch(B, T, config.vocab_size, 17);
  model.forward(batch.inputs.data(), batch.targets.data(), 0, false, 0.0f);
  const double val_loss = model.mean_loss(1);
  model.forward(batch.inputs.data(), batch.targets.data(), 0, true, 1.0f / (B * T));
  EXPECT_EQ(model.mean_loss(1), val_loss);
}

TEST_F(GPT2Model, RejectsSequencesLongerThanTheModel) {
  const GPT2Config config = config_from_name("tiny");
  EXPECT_THROW(GPT2(config, 1, 1, config.max_seq_len + 1, 1, stream), std::invalid_argument);
}

}  // namespace
