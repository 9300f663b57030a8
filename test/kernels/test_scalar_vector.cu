// Speedrun kernel tests of the scalar vector (llmc/kernels/scalar_vector.cuh): its exact fp32 copy and the
// fp32 gradients added into the floatX buffer with one rounding. Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "llmc/kernels/scalar_vector.cuh"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

// The scalar vector: widened exactly to fp32; fp32 gradients added into the floatX buffer with one rounding.
TEST(ScalarVectorKernel, WidensExactlyAndAddsGradientsWithOneRounding) {
  LLMC_REQUIRE_GPU();
  std::mt19937 rng(515);
  const int n = 70;  // not a multiple of the block
  const std::vector<double> values = random_values(static_cast<size_t>(n), rng, -3.0, 3.0),
                            grads = random_values(static_cast<size_t>(n), rng);
  std::vector<double> addend(static_cast<size_t>(n));
  std::uniform_real_distribution<double> distribution(-1.0, 1.0);
  for (double& a : addend) a = static_cast<float>(distribution(rng));
  DeviceBuffer<floatX> d_values(static_cast<size_t>(n)), d_grads(static_cast<size_t>(n));
  DeviceBuffer<float> d_fp32(static_cast<size_t>(n)), d_addend(static_cast<size_t>(n));
  d_values.upload(values);
  d_grads.upload(grads);
  d_addend.upload(addend);
  llmc::scalars_to_fp32(d_fp32.get(), d_values.get(), n, nullptr);
  llmc::add_fp32_grads(d_grads.get(), d_addend.get(), n, nullptr);
  EXPECT_EQ(d_fp32.download(), values);
  std::vector<double> expected(static_cast<size_t>(n));
  for (int i = 0; i < n; i++)  // the fp32 sum of two fp32-exact values, then one rounding to floatX
    expected[i] = llmc::to_float(llmc::from_float<floatX>(static_cast<float>(grads[i]) + static_cast<float>(addend[i])));
  EXPECT_EQ(d_grads.download(), expected);
}

}  // namespace
