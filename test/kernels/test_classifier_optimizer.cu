// Kernel tests against the double-precision reference: the fused classifier (loss and in-place
// dlogits, padded vocabulary), the global gradient norm, and AdamW over several steps.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "llmc/kernels/adamw.cuh"
#include "llmc/kernels/classifier.cuh"
#include "llmc/kernels/global_norm.cuh"
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

TEST(GlobalNormKernel, MatchesDoubleSumAndIsDeterministic) {
  LLMC_REQUIRE_GPU();
  // More elements than one grid pass covers (512 blocks x 256 threads), so the grid-stride path runs.
  const size_t n = 140000;
  std::mt19937 rng(909);
  const std::vector<double> grads = random_values(n, rng);
  double squared_sum = 0.0;
  for (double g : grads) squared_sum += g * g;
  DeviceBuffer<floatX> d_grads(n);
  d_grads.upload(grads);
  const size_t scratch_floats = llmc::global_norm_scratch_floats(n) + 1;
  DeviceBuffer<float> d_scratch(scratch_floats);
  d_scratch.fill_zero();  // the fold's counters start at zero; every launch leaves them so
  DeviceBuffer<float> d_squared(1);
  const float norm = llmc::global_norm(d_grads.get(), n, d_scratch.get(), scratch_floats, nullptr);
  const float norm_again = llmc::global_norm(d_grads.get(), n, d_scratch.get(), scratch_floats, nullptr);
  // fp32 sums: each thread's grid-stride slice (n / (512*256) terms), a 256-term tree in the block, then
  // the fold's groups of 16 blocks and its 32 group totals (a 512-term sum in two levels).
  const double tol = tolerance(0, 2 + 8 + 9);
  EXPECT_NEAR(norm, std::sqrt(squared_sum), tol * std::sqrt(squared_sum));
  EXPECT_EQ(norm, norm_again);
  // The accumulating form adds a second buffer's squared sum to the first one's.
  llmc::global_norm_squared(d_squared.get(), d_grads.get(), n, false, d_scratch.get(), scratch_floats, nullptr);
  llmc::global_norm_squared(d_squared.get(), d_grads.get(), n / 2, true, d_scratch.get(), scratch_floats, nullptr);
  double half_sum = 0.0;
  for (size_t i = 0; i < n / 2; i++) half_sum += grads[i] * grads[i];
  EXPECT_NEAR(d_squared.download()[0], squared_sum + half_sum, tol * (squared_sum + half_sum));
  // Several segments in one launch: the same as their squared sums added.
  llmc::NormSegments<floatX> segments;
  segments.add(d_grads.get(), n / 3);
  segments.add(d_grads.get() + n / 2, n - n / 2);
  llmc::global_norm_squared(d_squared.get(), segments, false, d_scratch.get(), scratch_floats, nullptr);
  double segments_sum = 0.0;
  for (size_t i = 0; i < n / 3; i++) segments_sum += grads[i] * grads[i];
  for (size_t i = n / 2; i < n; i++) segments_sum += grads[i] * grads[i];
  EXPECT_NEAR(d_squared.download()[0], segments_sum, tol * segments_sum);
}

// The clipping factor on the device: max_norm / norm above the threshold, 1 at or below it and for a
// non-finite norm (as the host computed it before).
TEST(GlobalNormKernel, ClipScale) {
  LLMC_REQUIRE_GPU();
  DeviceBuffer<float> d_squared(1), d_scale(1);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const auto& [squared, expected] :
       std::vector<std::pair<float, float>>{{16.0f, 0.5f}, {4.0f, 1.0f}, {1.0f, 1.0f}, {inf, 1.0f}, {nan, 1.0f}}) {
    d_squared.upload_raw({squared});
    llmc::clip_scale(d_scale.get(), d_squared.get(), 2.0f, nullptr);
    EXPECT_EQ(d_scale.download_raw()[0], expected) << "squared norm " << squared;
  }
}

void run_adamw_against_reference(bool with_master) {
  const size_t n = 3000, shard_start = 1000, shard_size = 1500;  // update a shard in the middle
  const int steps = 5;
  std::mt19937 rng(1010);
  const std::vector<double> params = random_values(n, rng);
  llmc::AdamWSettings hp;
  hp.weight_decay = 0.1f;
  const float learning_rate = 1e-2f;
  const float grad_scale = 0.5f;  // a power of two: the reference sees exactly the scaled gradients
  DeviceBuffer<floatX> d_params(n), d_grads(n);
  DeviceBuffer<float> d_master(n), d_m(n), d_v(n);
  d_params.upload(params);
  d_master.upload(params);
  d_m.fill_zero();
  d_v.fill_zero();
  std::vector<double> ref_params = params, ref_m(n, 0.0), ref_v(n, 0.0);
  for (int step = 1; step <= steps; step++) {
    const std::vector<double> grads = random_values(n, rng);
    d_grads.upload(grads);
    llmc::adamw_update(d_params.get() + shard_start, with_master ? d_master.get() + shard_start : nullptr,
                       d_grads.get() + shard_start, d_m.get() + shard_start, d_v.get() + shard_start, shard_size, step,
                       learning_rate, hp, grad_scale, nullptr);
    std::vector<double> scaled(shard_size);
    for (size_t i = 0; i < shard_size; i++) scaled[i] = grads[shard_start + i] * grad_scale;
    ref::adamw_update(ref_params.data() + shard_start, scaled.data(), ref_m.data() + shard_start,
                      ref_v.data() + shard_start, shard_size, step, learning_rate, hp.beta1, hp.beta2, hp.eps,
                      hp.weight_decay);
  }
  // fp32 state: each step adds a few roundings to m, v and the master weight (~10 operations); the
  // floatX parameters are the master rounded once. Outside the shard nothing may change.
  const std::vector<double> got_params = d_params.download();
  EXPECT_TRUE(all_close(got_params, llmc::test::round_to_floatx(ref_params), tolerance(1, 10 * steps)));
  std::vector<double> got_m = d_m.download(), got_v = d_v.download();
  EXPECT_TRUE(all_close(got_m, ref_m, tolerance(0, 4 * steps)));
  EXPECT_TRUE(all_close(got_v, ref_v, tolerance(0, 4 * steps)));
  if (with_master) {
    EXPECT_TRUE(all_close(d_master.download(), ref_params, tolerance(0, 10 * steps)));
  }
  for (size_t i = 0; i < n; i++) {
    if (i >= shard_start && i < shard_start + shard_size) continue;
    ASSERT_EQ(got_params[i], params[i]) << "element " << i << " outside the shard changed";
    ASSERT_EQ(got_m[i], 0.0) << "moment " << i << " outside the shard changed";
  }
}

// One launch over a shard's weight-decay segments with the gradient scale read on the device computes
// exactly what one launch per segment with the scale from the host did (the same operations per element).
TEST(AdamWKernel, SegmentsInOneLaunchMatchOneLaunchPerSegmentBitwise) {
  LLMC_REQUIRE_GPU();
  const size_t n = 3000;
  const std::vector<std::pair<size_t, float>> segment_ends = {{700, 0.1f}, {1000, 0.0f}, {3000, 0.1f}};
  std::mt19937 rng(1011);
  const std::vector<double> params = random_values(n, rng), grads = random_values(n, rng);
  llmc::AdamWSettings hp;
  const float grad_scale = 0.37f;
  std::vector<std::vector<float>> results[2];
  for (int variant = 0; variant < 2; variant++) {
    DeviceBuffer<floatX> d_params(n), d_grads(n);
    DeviceBuffer<float> d_master(n), d_m(n), d_v(n), d_scale(1);
    d_params.upload(params);
    d_master.upload(params);
    d_grads.upload(grads);
    d_m.fill_zero();
    d_v.fill_zero();
    d_scale.upload_raw({grad_scale});
    llmc::AdamWSegments segments;
    size_t begin = 0;
    for (const auto& [end, decay] : segment_ends) {
      if (variant == 0) {  // one launch per segment, the scale from the host
        llmc::AdamWSettings segment_hp = hp;
        segment_hp.weight_decay = decay;
        llmc::adamw_update(d_params.get() + begin, d_master.get() + begin, d_grads.get() + begin, d_m.get() + begin,
                           d_v.get() + begin, end - begin, 3, 1e-2f, segment_hp, grad_scale, nullptr);
      }
      segments.add(begin, end - begin, decay);
      begin = end;
    }
    if (variant == 1)
      llmc::adamw_update(d_params.get(), d_master.get(), d_grads.get(), d_m.get(), d_v.get(), segments, 3, 1e-2f, hp,
                         1.0f, d_scale.get(), nullptr);
    const std::vector<floatX> raw_params = d_params.download_raw();
    std::vector<float> params_out(n);
    for (size_t i = 0; i < n; i++) params_out[i] = llmc::to_float(raw_params[i]);
    results[variant] = {params_out, d_master.download_raw(), d_m.download_raw(), d_v.download_raw()};
  }
  for (size_t part = 0; part < results[0].size(); part++)
    EXPECT_TRUE(bitwise_equal(results[0][part], results[1][part])) << "part " << part;
}

TEST(AdamWKernel, MasterWeightsMatchReferenceOverSteps) {
  LLMC_REQUIRE_GPU();
  run_adamw_against_reference(/*with_master=*/true);
}

#if defined(LLMC_FP32)
// Without master weights the parameters themselves carry the state: only meaningful in fp32.
TEST(AdamWKernel, InPlaceFp32ParametersMatchReferenceOverSteps) {
  LLMC_REQUIRE_GPU();
  run_adamw_against_reference(/*with_master=*/false);
}
#endif

}  // namespace
