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

#include "llmc/dist/comm.h"
#include "llmc/model/modded44/speedrun_config.h"
#include "llmc/model/modded44/speedrun_layout.h"
#include "llmc/train/loss_reduction.h"
#include "llmc/train/options.h"
#include "test/support/gpu_test.h"
#include "test/support/speedrun_test_inputs.h"
#include "test/support/speedrun_trajectory.h"
#include "test/support/worst_error.h"

namespace {

using namespace llmc;
using namespace llmc::test;  // the speedrun test inputs and trajectories

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

TrajectorySetup make_setup() {
  TrajectorySetup setup;
  setup.config = speedrun_config_from_name("speedrun-tiny");
  const SpeedrunLayout layout = make_speedrun_layout(setup.config, 1);
  ref::SpeedrunParams params = test_params(setup.config, kSeed);
  setup.start = to_layout(layout, params);
  setup.steps = kSteps;
  setup.micro_steps = kMicroSteps;
  for (int i = 0; i < kSteps * kMicroSteps; i++)
    setup.batches.push_back(random_batch(setup.config.max_seq_len, setup.config.vocab_size, 300 + i));
  setup.optimizer.schedule = SpeedrunSchedule::for_total_steps(12);  // as the trainer builds it for --steps 12
  return setup;
}

// The largest update error over the tensors (see kUpdateTolerance); LLMC_TEST_VERBOSE=1 prints each.
double largest_update_error(const TrajectorySetup& setup, const std::vector<float>& got, const std::vector<float>& want,
                            const char* what) {
  const bool verbose = std::getenv("LLMC_TEST_VERBOSE") != nullptr;
  double largest = 0.0;
  for (const auto& [name, error] : update_errors(make_speedrun_layout(setup.config, 1), setup.start, got, want)) {
    if (verbose) std::printf("%s %-24s update error %.3e\n", what, name.c_str(), error);
    largest = llmc::worse_error(largest, error);
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
  const TrajectorySetup setup = make_setup();
  const int64_t tokens = setup.config.max_seq_len;
  const std::vector<float> want = reference_trajectory(setup, *comm_).params;
  const float sum = loss_gradient_scale(LossReduction::kSum, tokens, kMicroSteps);
  EXPECT_LE(largest_update_error(setup, device_trajectory(setup, *comm_, sum).params, want, "sum"), kUpdateTolerance);
  // The test tells the scales apart: with the mean the updates move by far more than the tolerance.
  const float mean = loss_gradient_scale(LossReduction::kMean, tokens, kMicroSteps);
  EXPECT_GT(largest_update_error(setup, device_trajectory(setup, *comm_, mean).params, want, "mean"),
            10 * kUpdateTolerance);
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
