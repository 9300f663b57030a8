// The trainer's loss scale (llmc/train/loss_reduction.h) against the record's: two optimizer steps of the
// device speedrun model and the speedrun optimizer through train_step() (two micro-steps each, the second
// step an Adam step) against the same optimizer fed the double-precision reference's gradients of the SUM
// over each micro-batch's tokens, averaged over the micro-steps. With the mean instead the optimizers'
// epsilons weigh 64 times more and the updates move off the record's. fp32, emulated (the trainer's GPU
// library is bf16 only).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/dist/comm.h"
#include "llmc/dist/trace.h"
#include "llmc/model/modded44/speedrun_config.h"
#include "llmc/model/modded44/speedrun_model.h"
#include "llmc/optim/speedrun_optimizer.h"
#include "llmc/schedule/speedrun_schedule.h"
#include "llmc/train/loss_reduction.h"
#include "llmc/train/options.h"
#include "llmc/train/train_step.h"
#include "test/reference/reference_speedrun.h"
#include "test/support/gpu_test.h"
#include "test/support/speedrun_test_inputs.h"
#include "test/support/stand_in_speedrun_model.h"

namespace {

using namespace llmc;
using namespace llmc::test;  // the speedrun test inputs and the stand-in model

constexpr int kSteps = 2;       // step 2 is the first Adam step (0-based odd), on two steps' gradients
constexpr int kMicroSteps = 2;  // the micro-steps' gradients are averaged: the loss is not a plain sum
constexpr uint64_t kSeed = 11;

// Update error of a tensor after the two steps: RMS(got - want) over RMS(want - start). The device's fp32
// gradients are within 2e-3 of each tensor's largest (test_speedrun_model's bound: ~200 fp32 roundings in
// sequence through the blocks); NorMuon's update is a normalised function of its gradient and moves by
// about as much; Adam's first updates are m / (sqrt(v) + eps), ~sign(g) where |g| >> eps, and move less.
// So 2e-3 of the update (measured: <= 1e-5; with the mean instead of the sum: up to 7e-2, value embeddings
// and gates, whose gradients are smallest next to the epsilons).
constexpr double kUpdateTolerance = 2e-3;

// The training batches of the test: the given micro-batches in order.
class FixedBatches : public TrainBatches {
 public:
  explicit FixedBatches(std::vector<SpeedrunBatch> batches) : batches_(std::move(batches)) {}
  TrainLoaderKind kind() const override { return TrainLoaderKind::kBos; }
  void next_batch(int32_t* inputs, int32_t* targets) override {
    const SpeedrunBatch& batch = batches_.at(next_++);
    std::copy(batch.inputs.begin(), batch.inputs.end(), inputs);
    std::copy(batch.targets.begin(), batch.targets.end(), targets);
  }
  void save_position(TrainStateHeader&) const override {}
  void resume(const TrainStateHeader&, const std::string&) override {}
  std::string describe() const override { return "the test's fixed batches"; }

 private:
  std::vector<SpeedrunBatch> batches_;
  size_t next_ = 0;
};

SpeedrunOptimizerSettings optimizer_settings() {
  SpeedrunOptimizerSettings settings;
  settings.schedule = SpeedrunSchedule::for_total_steps(12);  // as the trainer builds it for --steps 12
  return settings;
}

struct Case {
  SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  std::vector<float> start;              // the layout's buffer
  std::vector<SpeedrunBatch> batches;    // kSteps x kMicroSteps
};

Case make_case() {
  Case c;
  const SpeedrunLayout layout = make_speedrun_layout(c.config, 1);
  ref::SpeedrunParams params = test_params(c.config, kSeed);
  c.start = to_layout(layout, params);
  for (int i = 0; i < kSteps * kMicroSteps; i++)
    c.batches.push_back(random_batch(c.config.max_seq_len, c.config.vocab_size, 300 + i));
  return c;
}

// The parameters after kSteps steps of train_step() with each token's loss gradient scaled by `dloss`.
std::vector<float> train(const Case& c, CommContext& comm, float dloss) {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  std::vector<float> out;
  {
    SpeedrunModel model(c.config, 1, c.config.max_seq_len, kMicroSteps, stream, kSpeedrunTestBos);
    model.upload_params(c.start);
    SpeedrunOptimizer optimizer(model, comm, optimizer_settings());
    optimizer.init_master(c.start);
    FixedBatches batches(c.batches);
    Tracer tracer(false, 0);
    StepParts parts{model, optimizer, batches, tracer, comm, kMicroSteps, dloss};
    Batch host(static_cast<size_t>(c.config.max_seq_len));
    for (int step = 1; step <= kSteps; step++) train_step(parts, step, 1.0f, host);
    optimizer.wait_for_all_params();
    out = model.download_params();
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
  return out;
}

ref::SpeedrunParams from_layout(const SpeedrunLayout& layout, const std::vector<float>& buffer) {
  ref::SpeedrunParams params = ref::zero_speedrun_params(layout.config);
  for (const ref::NamedTensor& tensor : ref::named_tensors(params, layout.config)) {
    const TensorView& view = layout.find(tensor.name);
    for (size_t i = 0; i < view.numel; i++) (*tensor.values)[i] = buffer[view.offset + i];
  }
  return params;
}

// The record's: the same optimizer on the stand-in model, fed at each step the reference's gradient of the
// SUM loss of each micro-batch, averaged over the micro-steps (in double, one rounding to floatX), at the
// parameters this run has reached.
std::vector<float> record(const Case& c, CommContext& comm) {
  StandInModel stand_in(c.config, 1);
  stand_in.upload_params(c.start);
  SpeedrunOptimizer optimizer(stand_in, comm, optimizer_settings());
  optimizer.init_master(c.start);
  // The windows, RoPE tables and attention scale the device model starts with.
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  auto probe = std::make_unique<SpeedrunModel>(c.config, 1, c.config.max_seq_len, 1, stream, kSpeedrunTestBos);
  ref::ReferenceSpeedrun reference(c.config);
  use_model_rope(reference, *probe);
  const SpeedrunLayout& layout = probe->layout();
  for (int step = 1; step <= kSteps; step++) {
    reference.params = from_layout(layout, stand_in.download_params());
    reference.grads = ref::zero_speedrun_params(c.config);
    for (int micro = 0; micro < kMicroSteps; micro++) {
      reference_forward(reference, *probe, c.batches[static_cast<size_t>((step - 1) * kMicroSteps + micro)]);
      reference.backward(1.0 / kMicroSteps);
    }
    stand_in.set_grads(to_layout(layout, reference.grads));
    stand_in.forward(nullptr, nullptr, 0, true, 1.0f, optimizer.before_bucket_use());
    optimizer.before_first_backward();
    optimizer.begin_step(step, 1.0f);
    stand_in.backward(true, optimizer.on_bucket_ready());
    optimizer.finish_step();
    optimizer.wait_for_all_params();
  }
  probe.reset();
  CUDA_CHECK(cudaStreamDestroy(stream));
  return stand_in.download_params();
}

// The largest update error over the tensors (see kUpdateTolerance); LLMC_TEST_VERBOSE=1 prints each.
double largest_update_error(const SpeedrunLayout& layout, const std::vector<float>& start,
                            const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  const bool verbose = std::getenv("LLMC_TEST_VERBOSE") != nullptr;
  double largest = 0.0;
  for (const TensorView& view : layout.tensors) {
    double error = 0.0, update = 0.0;
    for (size_t i = view.offset; i < view.offset + view.numel; i++) {
      error += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
      update += (static_cast<double>(want[i]) - start[i]) * (static_cast<double>(want[i]) - start[i]);
    }
    const double relative = update > 0.0 ? std::sqrt(error / update) : std::sqrt(error);
    if (verbose) std::printf("%s %-24s update error %.3e\n", what, view.name.c_str(), relative);
    largest = std::max(largest, relative);
  }
  return largest;
}

class LossScale : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (gpu_available()) comm_ = std::make_unique<CommContext>();
  }
  static void TearDownTestSuite() { comm_.reset(); }
  void SetUp() override { LLMC_REQUIRE_GPU(); }
  static std::unique_ptr<CommContext> comm_;
};
std::unique_ptr<CommContext> LossScale::comm_;

TEST_F(LossScale, SpeedrunStepsEqualTheRecordsSumScaledUpdate) {
  static_assert(std::is_same<floatX, float>::value, "fp32 only: the tolerance is fp32's");
  const Case c = make_case();
  const SpeedrunLayout layout = make_speedrun_layout(c.config, 1);
  const int64_t tokens = c.config.max_seq_len;
  const std::vector<float> want = record(c, *comm_);
  const std::vector<float> sum = train(c, *comm_, loss_gradient_scale(LossReduction::kSum, tokens, kMicroSteps));
  EXPECT_LE(largest_update_error(layout, c.start, sum, want, "sum"), kUpdateTolerance);
  // The test tells the scales apart: with the mean the updates move by far more than the tolerance.
  const std::vector<float> mean = train(c, *comm_, loss_gradient_scale(LossReduction::kMean, tokens, kMicroSteps));
  EXPECT_GT(largest_update_error(layout, c.start, mean, want, "mean"), 10 * kUpdateTolerance);
}

TEST(LossReductionChoice, AutoIsSumForTheSpeedrunOptimizerAndMeanForAdamW) {
  TrainOptions options;
  EXPECT_EQ(options.effective_loss_reduction(/*speedrun_optimizer=*/true), LossReduction::kSum);
  EXPECT_EQ(options.effective_loss_reduction(/*speedrun_optimizer=*/false), LossReduction::kMean);
  options.loss_reduction = LossReduction::kMean;
  EXPECT_EQ(options.effective_loss_reduction(true), LossReduction::kMean);
  // 2 micro-steps of 64 tokens: the mean's dloss is 1/128, the sum's 1/2 (averaged over the micro-steps).
  EXPECT_EQ(loss_gradient_scale(LossReduction::kMean, 64, 2), 1.0f / 128);
  EXPECT_EQ(loss_gradient_scale(LossReduction::kSum, 64, 2), 0.5f);
}

}  // namespace
