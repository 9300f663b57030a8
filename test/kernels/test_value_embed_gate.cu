// Kernel tests of the 2026-07-17 record's gated value embeddings (llmc/kernels/value_embed_gate.cuh): the
// forward against double arithmetic, in place inside a QKV-like row, and the backward (dxn and dw accumulated,
// dve accumulated or stored over NaN contents) against central differences of that forward; the launchers'
// checks. Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "llmc/kernels/value_embed_gate.cuh"
#include "test/reference/gradient_check.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using gradient_check::central_differences;
using gradient_check::plus;
using llmc::floatX;

struct GateData {
  static constexpr int T = 9, H = 3, D = 16, C = H * D, kVStride = 3 * C;
  std::mt19937 rng{1212};
  std::vector<double> v = random_values(static_cast<size_t>(T) * kVStride, rng);
  std::vector<double> ve = random_values(static_cast<size_t>(T) * C, rng);
  std::vector<double> xn = random_values(static_cast<size_t>(T) * C, rng, -2.0, 2.0);
  std::vector<double> w = random_values(static_cast<size_t>(H) * llmc::kGateWidth, rng);
  llmc::ValueGateShape shape() const { return {T, H, D, kVStride, C}; }
};

// The gated values (T, H, D) from double inputs.
std::vector<double> reference(const GateData& d, const std::vector<double>& ve, const std::vector<double>& xn,
                              const std::vector<double>& w) {
  std::vector<double> out(static_cast<size_t>(d.T) * d.C);
  for (int t = 0; t < d.T; t++)
    for (int h = 0; h < d.H; h++) {
      double z = 0.0;
      for (int c = 0; c < 6; c++)
        z += xn[static_cast<size_t>(t) * d.C + c] * w[static_cast<size_t>(h) * 12 + c] +
             ve[static_cast<size_t>(t) * d.C + c] * w[static_cast<size_t>(h) * 12 + 6 + c];
      const double gate = 2.0 / (1.0 + std::exp(-z));
      for (int e = 0; e < d.D; e++) {
        const size_t i = static_cast<size_t>(t) * d.C + h * d.D + e;
        out[i] = d.v[static_cast<size_t>(t) * d.kVStride + h * d.D + e] + gate * ve[i];
      }
    }
  return out;
}

std::vector<double> values_of(const std::vector<double>& rows, int T, int stride, int width) {
  std::vector<double> out;
  for (int t = 0; t < T; t++)
    out.insert(out.end(), rows.begin() + static_cast<long>(t) * stride,
               rows.begin() + static_cast<long>(t) * stride + width);
  return out;
}

TEST(ValueEmbedGateKernel, ForwardMatchesDoubleArithmeticInPlace) {
  LLMC_REQUIRE_GPU();
  GateData d;
  DeviceBuffer<floatX> d_v(d.v.size()), d_ve(d.ve.size()), d_xn(d.xn.size()), d_w(d.w.size());
  d_v.upload(d.v), d_ve.upload(d.ve), d_xn.upload(d.xn), d_w.upload(d.w);
  llmc::value_embed_gate_forward(d_v.get(), d_v.get(), d_ve.get(), d_xn.get(), d_w.get(), d.shape(), nullptr);
  const std::vector<double> got = d_v.download();
  // 12 products, a sigmoid, one product and add in fp32, one rounding.
  EXPECT_TRUE(all_close(values_of(got, d.T, d.kVStride, d.C), reference(d, d.ve, d.xn, d.w), tolerance(1, 16)));
  // The rest of each row (k and q of a QKV buffer) untouched.
  for (int t = 0; t < d.T; t++)
    for (int i = d.C; i < d.kVStride; i++)
      ASSERT_EQ(got[static_cast<size_t>(t) * d.kVStride + i], d.v[static_cast<size_t>(t) * d.kVStride + i]);
}

// accumulate_dve: dve starts with random values the kernel adds to; otherwise with NaN, which it must not read.
void expect_backward_matches_central_differences(bool accumulate_dve) {
  GateData d;
  const std::vector<double> dv_rows = random_values(d.v.size(), d.rng);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> dve0 =
      accumulate_dve ? random_values(d.ve.size(), d.rng, -0.1, 0.1) : std::vector<double>(d.ve.size(), nan);
  const std::vector<double> dxn0 = random_values(d.xn.size(), d.rng, -0.1, 0.1);
  const std::vector<double> dw0 = random_values(d.w.size(), d.rng, -0.1, 0.1);
  DeviceBuffer<floatX> d_dv(dv_rows.size()), d_ve(d.ve.size()), d_xn(d.xn.size()), d_w(d.w.size());
  DeviceBuffer<floatX> d_dve(dve0.size()), d_dxn(dxn0.size()), d_dw(dw0.size());
  d_dv.upload(dv_rows), d_ve.upload(d.ve), d_xn.upload(d.xn), d_w.upload(d.w);
  d_dve.upload(dve0), d_dxn.upload(dxn0), d_dw.upload(dw0);
  const size_t scratch_floats = llmc::value_embed_gate_backward_scratch_floats(d.T, d.H);
  DeviceBuffer<float> d_scratch(scratch_floats);
  llmc::value_embed_gate_backward(d_dve.get(), accumulate_dve, d_dxn.get(), d.C, d_dw.get(), d_dv.get(), d_ve.get(),
                                  d_xn.get(), d_w.get(), d.shape(), d_scratch.get(), scratch_floats, nullptr);
  const std::vector<double> g = values_of(dv_rows, d.T, d.kVStride, d.C);
  std::vector<double> ve = d.ve, xn = d.xn, w = d.w;
  auto objective = [&] {
    const std::vector<double> out = reference(d, ve, xn, w);
    double sum = 0.0;
    for (size_t i = 0; i < out.size(); i++) sum += g[i] * out[i];
    return sum;
  };
  const std::vector<double> dve = central_differences(ve, objective), dxn = central_differences(xn, objective),
                            dw = central_differences(w, objective);
  // Sums over a head (D), the heads and the 12 weights, or the rows (T), in fp32; one or two roundings.
  const double tol = tolerance(2, d.D + d.T + 16);
  EXPECT_TRUE(all_close(d_dve.download(), accumulate_dve ? plus(dve0, dve) : dve, tol));
  EXPECT_TRUE(all_close(d_dxn.download(), plus(dxn0, dxn), tol));
  EXPECT_TRUE(all_close(d_dw.download(), plus(dw0, dw), tol));
}

TEST(ValueEmbedGateKernel, BackwardMatchesCentralDifferencesAccumulated) {
  LLMC_REQUIRE_GPU();
  expect_backward_matches_central_differences(/*accumulate_dve=*/true);
}

TEST(ValueEmbedGateKernel, BackwardMatchesCentralDifferencesStored) {
  LLMC_REQUIRE_GPU();
  expect_backward_matches_central_differences(/*accumulate_dve=*/false);
}

TEST(ValueEmbedGateKernel, LaunchersRefuseBadShapes) {
  LLMC_REQUIRE_GPU();
  GateData d;
  DeviceBuffer<floatX> d_v(d.v.size()), d_ve(d.ve.size()), d_xn(d.xn.size()), d_w(d.w.size());
  llmc::ValueGateShape shape = d.shape();
  shape.v_stride = d.C - 8;
  EXPECT_THROW(llmc::value_embed_gate_forward(d_v.get(), d_v.get(), d_ve.get(), d_xn.get(), d_w.get(), shape, nullptr),
               std::invalid_argument);
  shape = d.shape();
  shape.xn_stride = 4;
  EXPECT_THROW(llmc::value_embed_gate_forward(d_v.get(), d_v.get(), d_ve.get(), d_xn.get(), d_w.get(), shape, nullptr),
               std::invalid_argument);
}

}  // namespace
