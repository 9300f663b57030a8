// Kernel tests of the small MLPs' output bias and scale (llmc/kernels/gate_mlp_output.cuh) against the double
// formula s (in + b) and its gradients, with the scale read on the device (as a bf16 copy) and as a constant, in place and not,
// over rows of 41 columns (not a whole number of packets). Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "llmc/base/bf16_bits.h"
#include "llmc/kernels/gate_mlp_output.cuh"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

constexpr int kRows = 7, kColumns = 41;
// A device scale of 0.37 is used as its bf16 copy (the record's `_mudd_gate_scale.type_as(x)`), 0.369140625:
// 0.23% from the fp32 value, far outside the tolerances below.
const double kDeviceScale = llmc::bf16_bits_to_float(llmc::float_to_bf16_bits(0.37f));

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
  EXPECT_TRUE(all_close(d_out.download(), expected_output(in, bias, kDeviceScale), tolerance(1, 2)));
  llmc::GateMlpScale constant;
  constant.constant = 0.1f;
  llmc::gate_mlp_output_forward(d_in.get(), d_in.get(), d_bias.get(), constant, kRows, kColumns, nullptr);  // in place
  EXPECT_TRUE(all_close(d_in.download(), expected_output(in, bias, static_cast<double>(0.1f)), tolerance(1, 2)));
}

// The backward from an fp32 dout: din = s dout, db += s (column sums), ds += sum dout (in + b); the constant
// scale has no gradient and needs no dscale.
TEST(GateMlpOutput, BackwardMatchesTheFormula) {
  LLMC_REQUIRE_GPU();
  std::mt19937 rng(43);
  const std::vector<double> in = round_to_floatx(random_values(kRows * kColumns, rng, -3.0, 3.0));
  const std::vector<double> bias = round_to_floatx(random_values(kColumns, rng, -20.0, 20.0));
  const std::vector<double> prefill = round_to_floatx(random_values(kColumns, rng));
  std::vector<double> dout = random_values(kRows * kColumns, rng, -2.0, 2.0);
  for (double& d : dout) d = static_cast<double>(static_cast<float>(d));
  DeviceBuffer<floatX> d_in(in.size()), d_bias(bias.size()), d_din(in.size()), d_dbias(bias.size());
  DeviceBuffer<float> d_dout(dout.size()), d_scale(1), d_dscale(1);
  d_in.upload(in);
  d_bias.upload(bias);
  d_dbias.upload(prefill);
  d_dout.upload(dout);
  d_scale.upload({0.37});
  d_dscale.upload({0.5});
  llmc::GateMlpScale scale;
  scale.scale = d_scale.get();
  llmc::gate_mlp_output_backward(d_din.get(), d_dbias.get(), d_dscale.get(), d_dout.get(), d_in.get(), d_bias.get(),
                                 scale, kRows, kColumns, nullptr);
  const double s = kDeviceScale;
  std::vector<double> din(dout.size()), dbias = prefill;
  double dscale = 0.5, magnitude = 0.5;
  for (size_t i = 0; i < dout.size(); i++) {
    din[i] = s * dout[i];
    dbias[i % kColumns] += s * dout[i];
    dscale += dout[i] * (in[i] + bias[i % kColumns]);
    magnitude += std::fabs(dout[i] * (in[i] + bias[i % kColumns]));
  }
  // One product, one rounding; column sums of kRows fp32 terms; ds a sum of rows x columns fp32 terms.
  EXPECT_TRUE(all_close(d_din.download(), din, tolerance(1, 1)));
  EXPECT_TRUE(all_close(d_dbias.download(), dbias, tolerance(1, kRows + 1)));
  EXPECT_NEAR(d_dscale.download()[0], dscale, 2.0 * (kRows * kColumns + 1) * 6e-8 * magnitude);
  llmc::GateMlpScale constant;
  constant.constant = 0.1f;
  EXPECT_NO_THROW(llmc::gate_mlp_output_backward(d_din.get(), d_dbias.get(), nullptr, d_dout.get(), d_in.get(),
                                                 d_bias.get(), constant, kRows, kColumns, nullptr));
  EXPECT_THROW(llmc::gate_mlp_output_backward(d_din.get(), d_dbias.get(), nullptr, d_dout.get(), d_in.get(),
                                              d_bias.get(), scale, kRows, kColumns, nullptr),
               std::invalid_argument);  // a device scale needs its gradient's place
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
