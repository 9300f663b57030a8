// Tests of GPT-2's fused classifier (llmc/kernels/classifier.cuh) against the double-precision reference: the
// loss and the in-place dlogits (padded vocabulary), the loss-only call, bad targets and the step loss's mean.
// Built for fp32 and bf16, emulated on the CPU and natively on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "llmc/kernels/classifier.cuh"
#include "test/reference/reference_ops.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

// Vp = 256 rows are whole 16-byte packets; Vp = 254 (no multiple of 4 or 8) takes the element accesses.
struct ClassifierData {
  static constexpr int N = 12, V = 250;
  int Vp;
  std::mt19937 rng{808};
  std::vector<double> logits;
  std::vector<int> targets = std::vector<int>(N);
  explicit ClassifierData(int padded_vocab = 256)
      : Vp(padded_vocab), logits(random_values(static_cast<size_t>(N) * Vp, rng, -4.0, 4.0)) {
    std::uniform_int_distribution<int> target_distribution(0, V - 1);
    for (int& target : targets) target = target_distribution(rng);
    targets[0] = V - 1;  // the last real column
  }
};

// A ClassifierData's logits and targets uploaded, and room for the per-row losses.
struct ClassifierDeviceData {
  DeviceBuffer<floatX> logits;
  DeviceBuffer<float> losses;
  DeviceBuffer<int> targets;
  explicit ClassifierDeviceData(const ClassifierData& data)
      : logits(data.logits.size()), losses(ClassifierData::N), targets(ClassifierData::N) {
    logits.upload(data.logits);
    targets.upload(std::vector<double>(data.targets.begin(), data.targets.end()));
  }
};

TEST(ClassifierKernel, LossAndInPlaceGradientMatchReference) {
  LLMC_REQUIRE_GPU();
  for (const int padded_vocab : {256, 254}) {
    SCOPED_TRACE("Vp = " + std::to_string(padded_vocab));
    ClassifierData data(padded_vocab);
    const int N = data.N, V = data.V, Vp = data.Vp;
    ClassifierDeviceData device(data);
    const float dloss = 1.0f / N;
    llmc::fused_classifier(device.logits.get(), device.losses.get(), device.targets.get(), dloss, N, V, Vp,
                           /*write_dlogits=*/true, nullptr);

    std::vector<double> losses(N), probs(static_cast<size_t>(N) * Vp), dlogits(static_cast<size_t>(N) * Vp, 0.0),
        dlosses(N, 1.0 / N);
    ref::softmax_crossentropy_forward(losses.data(), probs.data(), data.logits.data(), data.targets.data(), N, V, Vp);
    ref::crossentropy_softmax_backward(dlogits.data(), probs.data(), data.targets.data(), dlosses.data(), N, V, Vp);
    // Loss: fp32 log-sum-exp over V terms. Each exponential is exp2(x log2(e) - max log2(e)): the argument
    // (|.| <= 8 log2(e) here) carries ~2 roundings, i.e. a relative error of at most ~24 u in the term, well
    // inside the 2 V u of the sum. dlogits: exp, a division and the product, one rounding.
    EXPECT_TRUE(all_close(device.losses.download(), losses, tolerance(0, V)));
    const std::vector<double> got = device.logits.download();
    EXPECT_TRUE(all_close(got, dlogits, tolerance(1, V)));
    for (int row = 0; row < N; row++)
      for (int column = V; column < Vp; column++)
        EXPECT_EQ(got[static_cast<size_t>(row) * Vp + column], 0.0) << "padded column " << column << " of row " << row;
  }
}

// The step loss: the mean of the per-row losses on the device, in double, bitwise repeatable.
TEST(ClassifierKernel, MeanOfLossesMatchesDoubleMean) {
  LLMC_REQUIRE_GPU();
  const size_t count = 5000;  // more than one pass of the block's 1024 threads
  std::mt19937 rng(809);
  std::uniform_real_distribution<float> loss_distribution(0.0f, 11.0f);
  std::vector<float> losses(count);
  for (float& loss : losses) loss = loss_distribution(rng);
  DeviceBuffer<float> d_losses(count);
  d_losses.upload_raw(losses);
  DeviceBuffer<double> d_mean(1);
  double expected = 0.0;
  for (float loss : losses) expected += loss;
  expected /= static_cast<double>(count);
  std::vector<double> runs;
  for (int run = 0; run < 2; run++) {
    llmc::mean_of_losses(d_mean.get(), d_losses.get(), count, nullptr);
    runs.push_back(d_mean.download_raw()[0]);
  }
  // Double sums of 5000 terms: relative error below 5000 * 2^-53.
  EXPECT_NEAR(runs[0], expected, 1e-12 * expected);
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(ClassifierKernel, LossOnlyLeavesLogitsUntouched) {
  LLMC_REQUIRE_GPU();
  ClassifierData data;
  const int N = data.N, V = data.V, Vp = data.Vp;
  ClassifierDeviceData device(data);
  const std::vector<floatX> before = device.logits.download_raw();
  llmc::fused_classifier(device.logits.get(), device.losses.get(), device.targets.get(), 1.0f, N, V, Vp,
                         /*write_dlogits=*/false, nullptr);
  EXPECT_TRUE(bitwise_equal(before, device.logits.download_raw()));
  std::vector<double> losses(N), probs(static_cast<size_t>(N) * Vp);
  ref::softmax_crossentropy_forward(losses.data(), probs.data(), data.logits.data(), data.targets.data(), N, V, Vp);
  EXPECT_TRUE(all_close(device.losses.download(), losses, tolerance(0, V)));
}

TEST(ClassifierKernel, TargetOutsideVocabularyGivesNaNLoss) {
  LLMC_REQUIRE_GPU();
  ClassifierData data;
  const int N = data.N, V = data.V, Vp = data.Vp;
  data.targets[3] = V;  // a padded column is not a valid target
  data.targets[5] = -1;
  ClassifierDeviceData device(data);
  llmc::fused_classifier(device.logits.get(), device.losses.get(), device.targets.get(), 1.0f, N, V, Vp, true, nullptr);
  const std::vector<double> losses = device.losses.download();
  EXPECT_TRUE(std::isnan(losses[3]));
  EXPECT_TRUE(std::isnan(losses[5]));
  EXPECT_TRUE(std::isfinite(losses[4]));
}

}  // namespace
