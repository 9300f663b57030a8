// Tests of the global gradient norm (llmc/kernels/global_norm.cuh): against a double sum, deterministic, the
// accumulating and segmented forms, and the clipping factor. Built for fp32 and bf16, emulated on the CPU and
// natively on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "llmc/kernels/global_norm.cuh"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

TEST(GlobalNormKernel, MatchesDoubleSumAndIsDeterministic) {
  LLMC_REQUIRE_GPU();
  // 35 blocks of 256 threads (16 elements per thread): more elements than one grid pass covers, so the
  // grid-stride path runs, and three groups of the fold (the last one partial).
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
  // fp32 sums of non-negative terms: each thread's grid-stride slice (16 terms in turn), a 256-term tree in the
  // block (8 levels), then the fold: a group's 16 block partials in turn, the 3 group totals in turn.
  const double tol = tolerance(0, 16 + 8 + 16 + 3);
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

}  // namespace
