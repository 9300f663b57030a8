// Speedrun kernel tests of the soft-capped cross-entropy (llmc/kernels/softcap_cross_entropy.cuh) against the
// double-precision reference: loss and in-place gradient over every column, the fresh-model value ln V, the
// validation variant and the deterministic loss sum; the FP8 head's e5m2 variant bit for bit the cast of the
// in-place gradient. Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/kernels/fp8_cast.cuh"
#include "llmc/kernels/softcap_cross_entropy.cuh"
#include "test/reference/reference_speedrun_ops.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

// V = 136 columns, all in the softmax (the record's 47 padding columns are ordinary columns here), z wide
// enough to saturate the cap on both sides.
struct SoftcapData {
  static constexpr int N = 12, V = 136;
  std::mt19937 rng{909};
  std::vector<double> z = random_values(static_cast<size_t>(N) * V, rng, -40.0, 40.0);
  std::vector<int> targets = std::vector<int>(N);
  SoftcapData() {
    std::uniform_int_distribution<int> target_distribution(0, V - 1);
    for (int& target : targets) target = target_distribution(rng);
    targets[0] = V - 1;  // the last column
  }
};

TEST(SoftcapCrossEntropyKernel, LossAndInPlaceGradientMatchReference) {
  LLMC_REQUIRE_GPU();
  SoftcapData data;
  const int N = data.N, V = data.V;
  DeviceBuffer<floatX> d_z(data.z.size());
  DeviceBuffer<float> d_losses(N);
  DeviceBuffer<int> d_targets(N);
  d_targets.upload(std::vector<double>(data.targets.begin(), data.targets.end()));
  for (const float dloss : {1.0f, 0.25f}) {
    SCOPED_TRACE("dloss = " + std::to_string(dloss));
    std::vector<std::vector<floatX>> runs;
    for (int run = 0; run < 2; run++) {
      d_z.upload(data.z);
      llmc::softcap_cross_entropy_backward(d_z.get(), d_losses.get(), d_targets.get(), dloss, N, V, nullptr);
      runs.push_back(d_z.download_raw());
    }
    std::vector<double> losses(N), dz(data.z.size(), 0.0);
    const std::vector<double> dlosses(N, dloss);
    ref::softcap_cross_entropy_forward(losses.data(), data.z.data(), data.targets.data(), N, V);
    ref::softcap_cross_entropy_backward(dz.data(), data.z.data(), data.targets.data(), dlosses.data(), N, V);
    // Loss: an fp32 sum of V exponentials (each a few ulp) and a log; gradient: exp, products, one rounding.
    EXPECT_TRUE(all_close(d_losses.download(), losses, tolerance(0, V + 8)));
    EXPECT_TRUE(all_close(d_z.download(), dz, tolerance(1, V + 8)));
    EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << "softcap cross-entropy is not deterministic";
  }
}

TEST(SoftcapCrossEntropyKernel, ZeroHeadGivesLnVAndUniformGradient) {
  LLMC_REQUIRE_GPU();
  const int N = 3, V = 136;
  DeviceBuffer<floatX> d_z(static_cast<size_t>(N) * V);
  DeviceBuffer<float> d_losses(N);
  DeviceBuffer<int> d_targets(N);
  d_z.fill_zero();
  d_targets.upload({5, 0, 135});
  llmc::softcap_cross_entropy_backward(d_z.get(), d_losses.get(), d_targets.get(), 1.0f, N, V, nullptr);
  // Logits all 15: loss ln V; dlogits = 1/V - onehot, times dl/dz = 30/7.5 * 1/4 = 1.
  EXPECT_TRUE(
      all_close(d_losses.download(), std::vector<double>(N, std::log(static_cast<double>(V))), tolerance(0, V)));
  std::vector<double> expected(static_cast<size_t>(N) * V, 1.0 / V);
  expected[5] -= 1.0, expected[V + 0] -= 1.0, expected[2 * V + 135] -= 1.0;
  EXPECT_TRUE(all_close(d_z.download(), expected, tolerance(1, V)));
}

TEST(SoftcapCrossEntropyKernel, ValidationLeavesLogitsAndGivesTheMean) {
  LLMC_REQUIRE_GPU();
  SoftcapData data;
  const int N = data.N, V = data.V;
  DeviceBuffer<floatX> d_z(data.z.size());
  DeviceBuffer<float> d_losses(N), d_train_losses(N), d_mean(1), d_sum(1);
  DeviceBuffer<int> d_targets(N);
  d_targets.upload(std::vector<double>(data.targets.begin(), data.targets.end()));
  d_z.upload(data.z);
  const std::vector<floatX> before = d_z.download_raw();
  llmc::softcap_cross_entropy_forward(d_losses.get(), d_z.get(), d_targets.get(), N, V, nullptr);
  EXPECT_TRUE(bitwise_equal(d_z.download_raw(), before)) << "validation must not write the logits";
  llmc::softcap_cross_entropy_backward(d_z.get(), d_train_losses.get(), d_targets.get(), 1.0f, N, V, nullptr);
  EXPECT_TRUE(bitwise_equal(d_losses.download_raw(), d_train_losses.download_raw()));
  llmc::sum_losses(d_mean.get(), d_losses.get(), N, 1.0f / N, nullptr);
  llmc::sum_losses(d_sum.get(), d_losses.get(), N, 1.0f, nullptr);
  std::vector<double> losses(N);
  ref::softcap_cross_entropy_forward(losses.data(), data.z.data(), data.targets.data(), N, V);
  double total = 0;
  for (double loss : losses) total += loss;
  // Per-row errors as above, plus an fp32 sum of N rows.
  EXPECT_NEAR(d_sum.download()[0], total, tolerance(0, V + N + 8) * total);
  EXPECT_NEAR(d_mean.download()[0], total / N, tolerance(0, V + N + 8) * total / N);
}

// The FP8 head's variant: codes equal to fp8_cast of the floatX gradient (the unfused path), bit for bit, at the
// record's g_s and at one small enough that codes saturate; the same losses; z untouched.
TEST(SoftcapCrossEntropyKernel, E5m2CodesAreTheCastOfTheInPlaceGradient) {
  LLMC_REQUIRE_GPU();
  SoftcapData data;
  const int N = data.N, V = 128;  // a multiple of 16 (the FP8 GEMMs')
  std::vector<double> z(static_cast<size_t>(N) * V);
  for (int t = 0; t < N; t++)
    for (int v = 0; v < V; v++) z[static_cast<size_t>(t) * V + v] = data.z[static_cast<size_t>(t) * data.V + v];
  std::vector<double> targets(N);
  for (int t = 0; t < N; t++) targets[t] = data.targets[t] % V;
  DeviceBuffer<floatX> d_z(z.size()), d_dz(z.size());
  DeviceBuffer<llmc::fp8e5m2> d_codes(z.size()), d_cast(z.size());
  DeviceBuffer<float> d_losses(N), d_fused_losses(N);
  DeviceBuffer<int> d_targets(N);
  d_targets.upload(targets);
  d_z.upload(z);
  d_dz.upload(z);
  for (const float scale : {1.0f / 448.0f, 1e-6f}) {
    SCOPED_TRACE("g_s = " + std::to_string(scale));
    llmc::softcap_cross_entropy_backward(d_dz.get(), d_losses.get(), d_targets.get(), 0.5f, N, V, nullptr);
    llmc::fp8_cast(d_cast.get(), d_dz.get(), z.size(), scale, nullptr);
    llmc::softcap_cross_entropy_backward_e5m2(d_codes.get(), d_fused_losses.get(), d_z.get(), d_targets.get(), 0.5f,
                                              scale, N, V, nullptr);
    EXPECT_TRUE(bitwise_equal(d_codes.download_raw(), d_cast.download_raw()));
    EXPECT_TRUE(bitwise_equal(d_fused_losses.download_raw(), d_losses.download_raw()));
    d_dz.upload(z);
  }
  EXPECT_EQ(d_z.download(), d_dz.download()) << "the e5m2 variant must leave z as it was";
  EXPECT_THROW(llmc::softcap_cross_entropy_backward_e5m2(d_codes.get(), d_fused_losses.get(), d_z.get(),
                                                         d_targets.get(), 1.0f, 0.0f, N, V, nullptr),
               std::invalid_argument);
  EXPECT_THROW(llmc::softcap_cross_entropy_backward_e5m2(d_codes.get(), d_fused_losses.get(), d_z.get(),
                                                         d_targets.get(), 1.0f, 1.0f, 1, 120, nullptr),
               std::invalid_argument);  // V not a multiple of 16
}

TEST(SoftcapCrossEntropyKernel, TargetOutsideVocabularyGivesNaN) {
  LLMC_REQUIRE_GPU();
  const int N = 2, V = 16;
  DeviceBuffer<floatX> d_z(static_cast<size_t>(N) * V);
  DeviceBuffer<float> d_losses(N);
  DeviceBuffer<int> d_targets(N);
  d_z.fill_zero();
  d_targets.upload({-1, 16});
  llmc::softcap_cross_entropy_forward(d_losses.get(), d_z.get(), d_targets.get(), N, V, nullptr);
  for (double loss : d_losses.download()) EXPECT_TRUE(std::isnan(loss));
  EXPECT_THROW(llmc::softcap_cross_entropy_forward(d_losses.get(), d_z.get(), d_targets.get(), N, 15, nullptr),
               std::invalid_argument);
}

}  // namespace
