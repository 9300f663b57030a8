// Kernel tests of the 2026-07-17 record's multi-token soft-capped cross-entropy
// (llmc/kernels/mtp_cross_entropy.cuh) against the double reference (test/reference/reference_mtp_loss.h):
// losses and the in-place floatX gradient with each stage's weights (next-token terms past the last row
// included), the e5m2 gradient codes with and without saturation, the validation loss, determinism and the
// launcher's checks. Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/cuda/fp8.h"
#include "llmc/kernels/mtp_cross_entropy.cuh"
#include "test/reference/reference_mtp_loss.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

double bf16_round(double x) {
  return llmc::to_float(llmc::from_float<__nv_bfloat16>(static_cast<float>(x)));
}

// Rows x V head outputs in floatX, spread over the cap's range, each chosen so that its u = sigmoid((z+5)/7.5)
// is not within 1e-6 of a bf16 rounding boundary: the kernel's fp32 sigmoid then rounds to the same bf16 u as
// the exact one on any GPU, and the reference can start from the exact u rounded.
struct MtpData {
  static constexpr int kRows = 12, kV = 96;
  std::mt19937 rng{2026};
  std::vector<double> z, u_rounded, u_exact;
  std::vector<int> targets, prefix_of;
  MtpData() {
    std::uniform_real_distribution<double> head(-30.0, 20.0);
    while (z.size() < static_cast<size_t>(kRows) * kV) {
      const double value = llmc::to_float(llmc::from_float<floatX>(static_cast<float>(head(rng))));
      const double u = ref::mtp_softcap_u(value);
      if (bf16_round(u * (1 + 1e-6)) != bf16_round(u * (1 - 1e-6))) continue;
      z.push_back(value);
      u_exact.push_back(u);
      u_rounded.push_back(bf16_round(u));
    }
    std::uniform_int_distribution<int> token(0, kV - 1);
    for (int t = 0; t < kRows; t++) targets.push_back(token(rng));
    targets[0] = kV - 1;  // the last column
    for (int j = 0; j < kV; j++) prefix_of.push_back(j % 4 == 0 ? -1 : token(rng));
  }
};

struct Stage {
  const char* name;
  llmc::MtpLossWeights device;
  bool prefix_table;
};

ref::MtpWeights reference_weights(const llmc::MtpLossWeights& w) {
  ref::MtpWeights out;
  out.tokens = w.tokens;
  for (int k = 0; k < 3; k++) out.next[k] = w.next[k];
  out.prefix = w.prefix;
  return out;
}

// The three stages of the schedule, at some point inside each: (1, 0.5, 0.25) with the prefix term, (1, 0.3)
// with a smaller prefix weight, then the next token alone and no prefix table.
std::vector<Stage> stages() {
  return {{"stage 1", {3, {1.0f, 0.5f, 0.25f}, 0.25f}, true},
          {"stage 2", {2, {1.0f, 0.3f, 0.0f}, 0.1f}, true},
          {"stage 3", {1, {1.0f, 0.0f, 0.0f}, 0.0f}, false}};
}

class MtpCrossEntropyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LLMC_REQUIRE_GPU();
    d_targets_.upload(std::vector<double>(data_.targets.begin(), data_.targets.end()));
    d_prefix_.upload(std::vector<double>(data_.prefix_of.begin(), data_.prefix_of.end()));
  }
  const int* prefix(const Stage& stage) const { return stage.prefix_table ? d_prefix_.get() : nullptr; }
  MtpData data_;
  DeviceBuffer<int> d_targets_{MtpData::kRows}, d_prefix_{MtpData::kV};
};

TEST_F(MtpCrossEntropyTest, LossAndInPlaceGradientMatchReferenceInEveryStage) {
  const int rows = data_.kRows, V = data_.kV;
  const float grad_scale = 0.5f;
  for (const Stage& stage : stages()) {
    SCOPED_TRACE(stage.name);
    DeviceBuffer<floatX> d_z(data_.z.size());
    DeviceBuffer<float> d_losses(rows);
    d_z.upload(data_.z);
    llmc::mtp_cross_entropy_backward(d_z.get(), d_losses.get(), d_targets_.get(), prefix(stage), stage.device,
                                     grad_scale, rows, V, nullptr);
    std::vector<double> losses, dz;
    ref::mtp_cross_entropy(&losses, &dz, data_.u_rounded, data_.targets.data(),
                           stage.prefix_table ? data_.prefix_of.data() : nullptr, reference_weights(stage.device),
                           grad_scale, rows, V);
    // Loss: an fp32 sum of V exponentials and a log, a few weighted terms; gradient: exp and products in fp32,
    // one rounding to floatX.
    EXPECT_TRUE(all_close(d_losses.download(), losses, tolerance(0, V + 8)));
    EXPECT_TRUE(all_close(d_z.download(), dz, tolerance(1, V + 8)));
  }
}

// Half the spacing of e5m2 values around |x| (normal: 2 mantissa bits; subnormal below 2^-14: 2^-16).
double e5m2_half_spacing(double x) {
  const double magnitude = std::fabs(x);
  if (magnitude < 0x1p-14) return 0x1p-17;
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(magnitude))) - 3);
}

TEST_F(MtpCrossEntropyTest, E5m2CodesAreTheGradientOverTheCodeScaleRoundedAndSaturated) {
  const int rows = data_.kRows, V = data_.kV;
  const Stage stage = stages()[0];
  const float grad_scale = 1.0f;
  std::vector<double> dz;
  ref::mtp_cross_entropy(nullptr, &dz, data_.u_rounded, data_.targets.data(), data_.prefix_of.data(),
                         reference_weights(stage.device), grad_scale, rows, V);
  // The record's g_s (0.75 / 448 times the loss scale), and one so small that the large gradients saturate.
  for (const float code_scale : {0.75f / 448.0f, 1e-6f}) {
    SCOPED_TRACE("grad_code_scale = " + std::to_string(code_scale));
    DeviceBuffer<floatX> d_z(data_.z.size());
    DeviceBuffer<float> d_losses(rows);
    DeviceBuffer<llmc::fp8e5m2> d_g8(dz.size());
    d_z.upload(data_.z);
    const std::vector<floatX> z_before = d_z.download_raw();
    llmc::mtp_cross_entropy_backward_e5m2(d_g8.get(), d_losses.get(), d_z.get(), d_targets_.get(), d_prefix_.get(),
                                          stage.device, grad_scale, code_scale, rows, V, nullptr);
    EXPECT_TRUE(bitwise_equal(d_z.download_raw(), z_before)) << "the e5m2 variant must not write z";
    const std::vector<llmc::fp8e5m2> codes = d_g8.download_raw();
    size_t saturated = 0, bad = 0;
    for (size_t i = 0; i < dz.size(); i++) {
      const double got = llmc::fp8_to_float(codes[i]), want = dz[i] / code_scale;
      // The kernel's fp32 gradient is within ~1e-5 of the exact one; the code is the nearest e5m2 to it.
      const bool saturates = std::fabs(want) > 57344.0 * (1 + 1e-5);
      if (saturates) saturated++;
      const bool ok = saturates ? got == std::copysign(57344.0, want)
                                : std::fabs(got - want) <= e5m2_half_spacing(want) + 1e-5 * std::fabs(want);
      if (!ok && bad++ < 5) ADD_FAILURE() << "code " << i << ": " << got << " for " << want;
    }
    EXPECT_EQ(bad, 0u);
    EXPECT_EQ(saturated > 0, code_scale < 1e-3f) << saturated << " saturated codes";
  }
}

TEST_F(MtpCrossEntropyTest, ValidationIsTheNextTokenLossOnTheUnroundedSigmoid) {
  const int rows = data_.kRows, V = data_.kV;
  DeviceBuffer<floatX> d_z(data_.z.size());
  DeviceBuffer<float> d_losses(rows);
  d_z.upload(data_.z);
  const std::vector<floatX> before = d_z.download_raw();
  llmc::mtp_cross_entropy_forward(d_losses.get(), d_z.get(), d_targets_.get(), rows, V, nullptr);
  EXPECT_TRUE(bitwise_equal(d_z.download_raw(), before)) << "validation must not write the logits";
  std::vector<double> losses;
  ref::mtp_cross_entropy(&losses, nullptr, data_.u_exact, data_.targets.data(), nullptr, ref::MtpWeights{}, 1.0, rows,
                         V);
  EXPECT_TRUE(all_close(d_losses.download(), losses, tolerance(0, V + 8)));
}

TEST_F(MtpCrossEntropyTest, RunsAreBitwiseIdentical) {
  const int rows = data_.kRows, V = data_.kV;
  std::vector<std::vector<floatX>> grads;
  std::vector<std::vector<float>> losses;
  for (int run = 0; run < 2; run++) {
    DeviceBuffer<floatX> d_z(data_.z.size());
    DeviceBuffer<float> d_losses(rows);
    d_z.upload(data_.z);
    llmc::mtp_cross_entropy_backward(d_z.get(), d_losses.get(), d_targets_.get(), d_prefix_.get(), stages()[0].device,
                                     1.0f, rows, V, nullptr);
    grads.push_back(d_z.download_raw());
    losses.push_back(d_losses.download_raw());
  }
  EXPECT_TRUE(bitwise_equal(grads[0], grads[1]));
  EXPECT_TRUE(bitwise_equal(losses[0], losses[1]));
}

TEST_F(MtpCrossEntropyTest, LaunchersRefuseBadArguments) {
  DeviceBuffer<floatX> d_z(data_.z.size());
  DeviceBuffer<float> d_losses(data_.kRows);
  DeviceBuffer<llmc::fp8e5m2> d_g8(data_.z.size());
  llmc::MtpLossWeights weights;
  for (const int tokens : {0, 4}) {
    weights.tokens = tokens;
    EXPECT_THROW(llmc::mtp_cross_entropy_backward(d_z.get(), d_losses.get(), d_targets_.get(), nullptr, weights, 1.0f,
                                                  data_.kRows, data_.kV, nullptr),
                 std::invalid_argument);
  }
  weights.tokens = 1;
  EXPECT_THROW(llmc::mtp_cross_entropy_backward(d_z.get(), d_losses.get(), d_targets_.get(), nullptr, weights, 1.0f,
                                                data_.kRows, data_.kV - 1, nullptr),
               std::invalid_argument);
  EXPECT_THROW(llmc::mtp_cross_entropy_backward_e5m2(d_g8.get(), d_losses.get(), d_z.get(), d_targets_.get(), nullptr,
                                                     weights, 1.0f, 0.0f, data_.kRows, data_.kV, nullptr),
               std::invalid_argument);
}

}  // namespace
