// Kernel tests of the 2026-07-17 record's XSA (llmc/kernels/xsa.cuh): the forward against the double
// reference (test/reference/reference_modded89_ops.h), the backward (dy, the accumulated dv, dalpha) against
// central differences of that reference, a head whose value is zero (the 1e-8 floor), in place, and the
// launchers' checks. Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <stdexcept>
#include <vector>

#include "llmc/kernels/xsa.cuh"
#include "test/reference/gradient_check.h"
#include "test/reference/reference_modded89_ops.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using gradient_check::central_differences;
using llmc::floatX;

// y (T, H, D) attention outputs, v inside a wider row (a QKV-like stride), alpha (T, H) strengths inside the
// gate's columns; head (0, 1)'s value is zero.
struct XsaData {
  static constexpr int T = 5, H = 3, D = 32, kVStride = 4 * H * D, kAlphaStride = 8;
  std::mt19937 rng{17};
  std::vector<double> y = random_values(static_cast<size_t>(T) * H * D, rng, -1.0, 1.0);
  std::vector<double> v_rows = random_values(static_cast<size_t>(T) * kVStride, rng, -1.0, 1.0);
  std::vector<double> alpha_rows = random_values(static_cast<size_t>(T) * kAlphaStride, rng, -2.0, 2.0);
  XsaData() {
    for (int d = 0; d < D; d++) v_rows[D + d] = 0.0;
  }
  llmc::XsaShape shape() const { return {T, H, D, H * D, kVStride, kAlphaStride}; }
  std::vector<double> v() const {  // packed (T, H, D)
    std::vector<double> out;
    for (int t = 0; t < T; t++)
      out.insert(out.end(), v_rows.begin() + static_cast<long>(t) * kVStride,
                 v_rows.begin() + static_cast<long>(t) * kVStride + H * D);
    return out;
  }
  std::vector<double> alpha() const {
    std::vector<double> out;
    for (int t = 0; t < T; t++)
      for (int h = 0; h < H; h++) out.push_back(alpha_rows[static_cast<size_t>(t) * kAlphaStride + h]);
    return out;
  }
};

std::vector<double> reference(const std::vector<double>& y, const std::vector<double>& v,
                              const std::vector<double>& alpha) {
  std::vector<double> out(y.size());
  ref::xsa_forward(out.data(), y.data(), v.data(), alpha.data(), XsaData::T, XsaData::H, XsaData::D);
  return out;
}

TEST(XsaKernel, ForwardMatchesReferenceAlsoInPlace) {
  LLMC_REQUIRE_GPU();
  XsaData data;
  DeviceBuffer<floatX> d_y(data.y.size()), d_out(data.y.size()), d_v(data.v_rows.size()),
      d_alpha(data.alpha_rows.size());
  d_y.upload(data.y);
  d_v.upload(data.v_rows);
  d_alpha.upload(data.alpha_rows);
  const std::vector<double> want = reference(data.y, data.v(), data.alpha());
  llmc::xsa_forward(d_out.get(), d_y.get(), d_v.get(), d_alpha.get(), data.shape(), nullptr);
  // Two sums of D products in fp32, tanh, one product, one rounding.
  EXPECT_TRUE(all_close(d_out.download(), want, tolerance(1, 2 * data.D + 8)));
  llmc::xsa_forward(d_y.get(), d_y.get(), d_v.get(), d_alpha.get(), data.shape(), nullptr);
  EXPECT_TRUE(bitwise_equal(d_y.download_raw(), d_out.download_raw()));
}

TEST(XsaKernel, BackwardMatchesCentralDifferencesOfTheReference) {
  LLMC_REQUIRE_GPU();
  XsaData data;
  const std::vector<double> g = random_values(data.y.size(), data.rng);
  // dv's rows hold stale values first: XSA's share overwrites the H D columns, the stride's padding stays.
  const std::vector<double> dv_prefill = random_values(data.v_rows.size(), data.rng, -0.1, 0.1);
  DeviceBuffer<floatX> d_y(data.y.size()), d_v(data.v_rows.size()), d_alpha(data.alpha_rows.size());
  DeviceBuffer<floatX> d_g(g.size()), d_dy(g.size()), d_dv(dv_prefill.size());
  DeviceBuffer<float> d_dalpha(static_cast<size_t>(data.T) * data.H);
  d_y.upload(data.y);
  d_v.upload(data.v_rows);
  d_alpha.upload(data.alpha_rows);
  d_g.upload(g);
  d_dv.upload(dv_prefill);
  llmc::xsa_backward(d_dy.get(), d_dv.get(), d_dalpha.get(), d_g.get(), d_y.get(), d_v.get(), d_alpha.get(),
                     data.shape(), nullptr);
  std::vector<double> y = data.y, v = data.v(), alpha = data.alpha();
  auto objective = [&] {
    const std::vector<double> out = reference(y, v, alpha);
    double sum = 0.0;
    for (size_t i = 0; i < out.size(); i++) sum += g[i] * out[i];
    return sum;
  };
  const std::vector<double> dy = central_differences(y, objective), dv = central_differences(v, objective),
                            dalpha = central_differences(alpha, objective);
  // dy, dv: three sums of D products in fp32, a few products, one rounding; dalpha in fp32.
  EXPECT_TRUE(all_close(d_dy.download(), dy, tolerance(1, 3 * data.D + 8)));
  std::vector<double> dv_rows = dv_prefill;
  const std::vector<double> got_rows = d_dv.download();
  for (int t = 0; t < data.T; t++)
    for (int i = 0; i < data.H * data.D; i++) {
      const size_t row = static_cast<size_t>(t) * data.kVStride + i;
      dv_rows[row] = dv[static_cast<size_t>(t) * data.H * data.D + i];
    }
  EXPECT_TRUE(all_close(got_rows, dv_rows, tolerance(1, 3 * data.D + 8)));
  EXPECT_TRUE(all_close(d_dalpha.download(), dalpha, tolerance(0, 3 * data.D + 8)));
}

TEST(XsaKernel, LaunchersRefuseBadShapes) {
  LLMC_REQUIRE_GPU();
  XsaData data;
  DeviceBuffer<floatX> d_y(data.y.size()), d_v(data.v_rows.size()), d_alpha(data.alpha_rows.size());
  llmc::XsaShape shape = data.shape();
  shape.D = data.D - 1;
  EXPECT_THROW(llmc::xsa_forward(d_y.get(), d_y.get(), d_v.get(), d_alpha.get(), shape, nullptr),
               std::invalid_argument);
  shape = data.shape();
  shape.v_stride = data.H * data.D - 8;
  EXPECT_THROW(llmc::xsa_forward(d_y.get(), d_y.get(), d_v.get(), d_alpha.get(), shape, nullptr),
               std::invalid_argument);
}

}  // namespace
