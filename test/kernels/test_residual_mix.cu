// Speedrun kernel tests of the scalar-weighted mixes (llmc/kernels/residual_mix.cuh: block lambdas,
// value-embedding lambdas, skips, backout, the 2026-07-17 residual lambdas as bf16 copies) against the
// double-precision reference, forward and backward, with their scalar gradients reduced deterministically. Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "llmc/base/bf16_bits.h"
#include "llmc/kernels/residual_mix.cuh"
#include "test/kernels/scalar_data.h"
#include "test/reference/reference_speedrun_ops.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

// A full reduction sum_i a_i b_i in fp32 over n terms: |error| <= n u32 sum |a_i b_i| (then one more
// rounding into the fp32 result), with the factor 2 of tolerance() for the other roundings.
double reduction_tolerance(const std::vector<double>& a, const std::vector<double>& b, double scale = 1.0) {
  double magnitude = 0.0;
  for (size_t i = 0; i < a.size(); i++) magnitude += std::fabs(a[i] * b[i]);
  return 2.0 * a.size() * kFp32Roundoff * magnitude * std::fabs(scale);
}

// One mix configuration of the model: which coefficients, strides, and which gradients are written.
struct MixCase {
  const char* name;
  llmc::MixCoefficient a, b;
  bool has_y;
  int x_stride_factor;  // x (and out, dx) rows are x_stride_factor * C apart (v inside QKV: 3)
  bool accumulate_dx;
};

double coefficient_value(const llmc::MixCoefficient& c, const std::vector<double>& s) {
  switch (c.kind) {
    case llmc::MixScalar::kOne:
      return 1.0;
    case llmc::MixScalar::kIdentity:
      return s[c.index];
    case llmc::MixScalar::kNegated:
      return -s[c.index];
    case llmc::MixScalar::kSigmoid:
      return ref::sigmoid(s[c.index]);
    case llmc::MixScalar::kBf16Copy:  // the fp32 scalar rounded to the nearest bf16, ties to even
      return llmc::bf16_bits_to_float(llmc::float_to_bf16_bits(static_cast<float>(s[c.index])));
  }
  return 0.0;
}

double coefficient_derivative(const llmc::MixCoefficient& c, const std::vector<double>& s) {
  switch (c.kind) {
    case llmc::MixScalar::kOne:
      return 0.0;
    case llmc::MixScalar::kIdentity:
    case llmc::MixScalar::kBf16Copy:  // the cast passes the gradient through
      return 1.0;
    case llmc::MixScalar::kNegated:
      return -1.0;
    case llmc::MixScalar::kSigmoid:
      return ref::sigmoid(s[c.index]) * (1.0 - ref::sigmoid(s[c.index]));
  }
  return 0.0;
}

// Rows of C taken out of a strided buffer, and back.
std::vector<double> gather_rows(const std::vector<double>& buffer, int rows, int C, int stride) {
  std::vector<double> out(static_cast<size_t>(rows) * C);
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < C; c++) out[static_cast<size_t>(r) * C + c] = buffer[static_cast<size_t>(r) * stride + c];
  return out;
}

TEST(MixKernel, EveryModelMixMatchesReference) {
  LLMC_REQUIRE_GPU();
  using llmc::MixCoefficient;
  using llmc::MixScalar;
  const MixCase cases[] = {
      {"block lambdas", {MixScalar::kIdentity, 14}, {MixScalar::kIdentity, 15}, true, 1, false},
      {"sa lambdas with ve", {MixScalar::kIdentity, 38}, {MixScalar::kIdentity, 39}, true, 3, false},
      {"sa lambda without ve", {MixScalar::kIdentity, 50}, {MixScalar::kIdentity, 51}, false, 3, false},
      {"skip", {MixScalar::kOne, -1}, {MixScalar::kSigmoid, 2}, true, 1, true},
      {"backout", {MixScalar::kOne, -1}, {MixScalar::kNegated, 61}, true, 1, true},
      {"2026-07-17 residual lambdas (bf16 copies)", {MixScalar::kBf16Copy, 14}, {MixScalar::kBf16Copy, 15}, true, 1,
       false},
  };
  const int rows = 53, C = 96;
  for (const MixCase& mix : cases) {
    SCOPED_TRACE(mix.name);
    const int xs = mix.x_stride_factor * C;
    std::mt19937 rng(333);
    ScalarData scalars(rng);
    const std::vector<double> x_buffer = random_values(static_cast<size_t>(rows) * xs, rng),
                              y = random_values(static_cast<size_t>(rows) * C, rng),
                              dout_buffer = random_values(static_cast<size_t>(rows) * xs, rng),
                              dx_prefill = random_values(static_cast<size_t>(rows) * xs, rng),
                              dy_prefill = random_values(static_cast<size_t>(rows) * C, rng);
    const std::vector<double> x = gather_rows(x_buffer, rows, C, xs), dout = gather_rows(dout_buffer, rows, C, xs);
    const double a = coefficient_value(mix.a, scalars.values),
                 b = mix.has_y ? coefficient_value(mix.b, scalars.values) : 0.0;
    DeviceBuffer<floatX> d_x(x_buffer.size()), d_y(y.size()), d_out(x_buffer.size()), d_dout(dout_buffer.size()),
        d_dx(dx_prefill.size()), d_dy(y.size());
    DeviceBuffer<float> d_scratch(llmc::mix_backward_scratch_floats(rows, C));
    d_x.upload(x_buffer);
    d_y.upload(y);
    d_dout.upload(dout_buffer);
    const llmc::MixRows<const floatX> y_rows{mix.has_y ? d_y.get() : nullptr, C};
    llmc::mix_forward({d_out.get(), xs}, {d_x.get(), xs}, y_rows, scalars.d_values.get(), mix.a, mix.b, rows, C,
                      nullptr);
    std::vector<double> out(static_cast<size_t>(rows) * C);
    ref::mix_forward(out.data(), a, x.data(), b, mix.has_y ? y.data() : nullptr, out.size());
    EXPECT_TRUE(all_close(gather_rows(d_out.download(), rows, C, xs), out, tolerance(1, 4)));

    std::vector<std::vector<float>> scalar_runs;
    for (int run = 0; run < 2; run++) {
      d_dx.upload(dx_prefill);
      d_dy.upload(dy_prefill);
      scalars.d_grads.upload(scalars.grads);
      llmc::mix_backward({d_dx.get(), xs}, mix.accumulate_dx, {d_dy.get(), C}, true, scalars.d_grads.get(),
                         {d_dout.get(), xs}, {d_x.get(), xs}, y_rows, scalars.d_values.get(), mix.a, mix.b, rows, C,
                         d_scratch.get(), d_scratch.size(), nullptr);
      scalar_runs.push_back(scalars.d_grads.download_raw());
    }
    std::vector<double> dx =
        mix.accumulate_dx ? gather_rows(dx_prefill, rows, C, xs) : std::vector<double>(x.size(), 0.0);
    std::vector<double> dy = dy_prefill;
    double x_dot = 0.0, y_dot = 0.0;
    ref::mix_backward(dx.data(), mix.has_y ? dy.data() : nullptr, &x_dot, &y_dot, dout.data(), a, x.data(), b,
                      mix.has_y ? y.data() : nullptr, dout.size());
    EXPECT_TRUE(all_close(gather_rows(d_dx.download(), rows, C, xs), dx, tolerance(1, 4)));
    EXPECT_TRUE(all_close(d_dy.download(), dy, tolerance(1, 4)));
    const std::vector<double> dscalars = scalars.d_grads.download();
    std::vector<double> expected = scalars.grads;
    if (mix.a.kind != MixScalar::kOne) expected[mix.a.index] += coefficient_derivative(mix.a, scalars.values) * x_dot;
    if (mix.has_y && mix.b.kind != MixScalar::kOne)
      expected[mix.b.index] += coefficient_derivative(mix.b, scalars.values) * y_dot;
    const double tol_a = reduction_tolerance(x, dout, coefficient_derivative(mix.a, scalars.values));
    const double tol_b = reduction_tolerance(y, dout, coefficient_derivative(mix.b, scalars.values));
    for (int i = 0; i < kNumScalars; i++) {
      const bool is_a = mix.a.kind != MixScalar::kOne && i == mix.a.index;
      const bool is_b = mix.has_y && mix.b.kind != MixScalar::kOne && i == mix.b.index;
      const double tol = (is_a ? tol_a : is_b ? tol_b : 0.0) + kFp32Roundoff * std::fabs(expected[i]);
      EXPECT_NEAR(dscalars[i], expected[i], tol) << "scalar " << i;
    }
    EXPECT_TRUE(bitwise_equal(scalar_runs[0], scalar_runs[1])) << "mix scalar gradients are not deterministic";
  }
}

}  // namespace
