// Kernel tests of the small MLPs' output bias and scale (llmc/kernels/gate_mlp_output.cuh) against the double
// formula s (in + b), with the scale read on the device and as a constant, in place and not, over rows of 41
// columns (not a whole number of packets). Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <vector>

#include "llmc/kernels/gate_mlp_output.cuh"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

constexpr int kRows = 7, kColumns = 41;

std::vector<double> expected_output(const std::vector<double>& in, const std::vector<double>& bias, double scale) {
  std::vector<double> out(in.size());
  for (size_t i = 0; i < in.size(); i++) out[i] = scale * (in[i] + bias[i % kColumns]);
  return out;
}

TEST(GateMlpOutput, ForwardMatchesTheFormula) {
  LLMC_REQUIRE_GPU();
  std::mt19937 rng(41);
  const std::vector<double> in = round_to_floatx(random_values(kRows * kColumns, rng, -3.0, 3.0));
  const std::vector<double> bias = round_to_floatx(random_values(kColumns, rng, -20.0, 20.0));
  DeviceBuffer<floatX> d_in(in.size()), d_out(in.size()), d_bias(bias.size());
  DeviceBuffer<float> d_scale(1);
  d_in.upload(in);
  d_bias.upload(bias);
  d_scale.upload({0.37});
  llmc::GateMlpScale on_device;
  on_device.scale = d_scale.get();
  llmc::gate_mlp_output_forward(d_out.get(), d_in.get(), d_bias.get(), on_device, kRows, kColumns, nullptr);
  // One fp32 sum and product, one rounding to floatX.
  EXPECT_TRUE(all_close(d_out.download(), expected_output(in, bias, static_cast<double>(0.37f)), tolerance(1, 2)));
  llmc::GateMlpScale constant;
  constant.constant = 0.1f;
  llmc::gate_mlp_output_forward(d_in.get(), d_in.get(), d_bias.get(), constant, kRows, kColumns, nullptr);  // in place
  EXPECT_TRUE(all_close(d_in.download(), expected_output(in, bias, static_cast<double>(0.1f)), tolerance(1, 2)));
}

TEST(GateMlpOutput, LauncherRefusesBadShapes) {
  LLMC_REQUIRE_GPU();
  DeviceBuffer<floatX> d_x(kRows * kColumns), d_bias(kColumns);
  EXPECT_THROW(llmc::gate_mlp_output_forward(d_x.get(), d_x.get(), d_bias.get(), {}, kRows, 0, nullptr),
               std::invalid_argument);
  EXPECT_THROW(llmc::gate_mlp_output_forward(d_x.get(), d_x.get(), nullptr, {}, kRows, kColumns, nullptr),
               std::invalid_argument);
}

}  // namespace
