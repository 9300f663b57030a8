// Speedrun kernel tests against the double-precision reference: the smear gate, the attention output gate
// and the scalar-weighted mixes (block lambdas, value-embedding lambdas, skips, backout), forward and
// backward, with their scalar and gate-weight gradients reduced deterministically; the scalar vector's
// fp32 copy and gradient add. Built for fp32 and bf16,
// emulated and on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "llmc/kernels/attention_gate.cuh"
#include "llmc/kernels/residual_mix.cuh"
#include "llmc/kernels/scalar_vector.cuh"
#include "llmc/kernels/smear_gate.cuh"
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

constexpr int kNumScalars = 64;

// Scalars on the device (random, fp32) and their gradient buffer (prefilled, random).
struct ScalarData {
  std::vector<double> values, grads;
  DeviceBuffer<float> d_values{static_cast<size_t>(kNumScalars)}, d_grads{static_cast<size_t>(kNumScalars)};
  explicit ScalarData(std::mt19937& rng) {
    std::uniform_real_distribution<double> distribution(-1.5, 1.5);
    for (int i = 0; i < kNumScalars; i++) {
      values.push_back(static_cast<float>(distribution(rng)));
      grads.push_back(static_cast<float>(distribution(rng)));
    }
    d_values.upload(values);
    d_grads.upload(grads);
  }
};

TEST(SmearKernel, ForwardAndBackwardMatchReference) {
  LLMC_REQUIRE_GPU();
  const int T = 70, C = 72, kLambda = 60;  // three backward blocks of 32 rows; c < 12 spans two bf16 packets
  std::mt19937 rng(111);
  const std::vector<double> e = random_values(static_cast<size_t>(T) * C, rng), w = random_values(12, rng, -2.0, 2.0),
                            dout = random_values(static_cast<size_t>(T) * C, rng), dw_prefill = random_values(12, rng);
  ScalarData scalars(rng);
  const double lambda = scalars.values[kLambda];
  DeviceBuffer<floatX> d_e(e.size()), d_w(12), d_out(e.size()), d_dout(e.size()), d_de(e.size()), d_dw(12);
  DeviceBuffer<float> d_scratch(llmc::smear_backward_scratch_floats(T));
  d_e.upload(e);
  d_w.upload(w);
  d_dout.upload(dout);
  llmc::smear_forward(d_out.get(), d_e.get(), d_w.get(), scalars.d_values.get(), kLambda, T, C, nullptr);
  std::vector<double> out(e.size());
  ref::smear_forward(out.data(), e.data(), w.data(), lambda, T, C);
  // A 12-term fp32 dot, a sigmoid, a multiply-add, one rounding.
  EXPECT_TRUE(all_close(d_out.download(), out, tolerance(1, 16)));

  std::vector<std::vector<floatX>> runs;
  std::vector<std::vector<float>> scalar_runs;
  for (int run = 0; run < 2; run++) {
    d_dw.upload(dw_prefill);
    scalars.d_grads.upload(scalars.grads);
    llmc::smear_backward(d_de.get(), d_dw.get(), scalars.d_grads.get(), d_dout.get(), d_e.get(), d_w.get(),
                         scalars.d_values.get(), kLambda, T, C, d_scratch.get(), d_scratch.size(), nullptr);
    std::vector<floatX> all = d_de.download_raw();
    const std::vector<floatX> dw_bits = d_dw.download_raw();
    all.insert(all.end(), dw_bits.begin(), dw_bits.end());
    runs.push_back(all);
    scalar_runs.push_back(scalars.d_grads.download_raw());
  }
  std::vector<double> de(e.size(), 0.0), dw = dw_prefill, dlambda = {0.0};
  ref::smear_backward(de.data(), dw.data(), dlambda.data(), dout.data(), e.data(), w.data(), lambda, T, C);
  // de: a C-term dot s_t per row, the gate, a few products; dw: T such terms summed; one rounding each.
  EXPECT_TRUE(all_close(d_de.download(), de, tolerance(1, C + 16)));
  EXPECT_TRUE(all_close(d_dw.download(), dw, tolerance(1, C + T + 16)));
  const std::vector<double> dscalars = scalars.d_grads.download();
  EXPECT_NEAR(dscalars[kLambda] - scalars.grads[kLambda], dlambda[0],
              tolerance(0, C + T + 16) * (std::fabs(dlambda[0]) + 1.0));
  for (int i = 0; i < kNumScalars; i++) {
    if (i == kLambda) continue;
    ASSERT_EQ(dscalars[i], scalars.grads[i]) << "scalar " << i << " changed";
  }
  EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << "smear backward is not deterministic";
  EXPECT_TRUE(bitwise_equal(scalar_runs[0], scalar_runs[1])) << "smear lambda gradient is not deterministic";
}

TEST(AttentionGateKernel, ForwardAndBackwardMatchReference) {
  LLMC_REQUIRE_GPU();
  for (const auto& [H, D] : {std::pair{3, 32}, std::pair{2, 128}}) {
    SCOPED_TRACE("H = " + std::to_string(H) + ", D = " + std::to_string(D));
    const int T = 75, C = H * D;  // 75 rows: three chunks of the column chunking, the last one short
    std::mt19937 rng(222);
    const std::vector<double> y = random_values(static_cast<size_t>(T) * C, rng),
                              xn = random_values(static_cast<size_t>(T) * C, rng, -2.0, 2.0),
                              w = random_values(static_cast<size_t>(H) * 12, rng, -1.0, 1.0),
                              dout = random_values(static_cast<size_t>(T) * C, rng),
                              dxn_prefill = random_values(static_cast<size_t>(T) * C, rng),
                              dw_prefill = random_values(static_cast<size_t>(H) * 12, rng);
    DeviceBuffer<floatX> d_y(y.size()), d_xn(xn.size()), d_w(w.size()), d_out(y.size()), d_dout(dout.size()),
        d_dy(y.size()), d_dxn(xn.size()), d_dw(w.size());
    DeviceBuffer<float> d_scratch(llmc::attention_gate_backward_scratch_floats(T, H));
    d_y.upload(y);
    d_xn.upload(xn);
    d_w.upload(w);
    d_dout.upload(dout);
    llmc::attention_gate_forward(d_out.get(), d_y.get(), d_xn.get(), C, d_w.get(), T, H, D, nullptr);
    std::vector<double> out(y.size());
    ref::attention_gate_forward(out.data(), y.data(), xn.data(), w.data(), T, H, D);
    EXPECT_TRUE(all_close(d_out.download(), out, tolerance(1, 16)));

    std::vector<std::vector<floatX>> runs;
    for (int run = 0; run < 2; run++) {
      d_dxn.upload(dxn_prefill);
      d_dw.upload(dw_prefill);
      llmc::attention_gate_backward(d_dy.get(), d_dxn.get(), C, d_dw.get(), d_dout.get(), d_y.get(), d_xn.get(), C,
                                    d_w.get(), T, H, D, d_scratch.get(), d_scratch.size(), nullptr);
      std::vector<floatX> all = d_dy.download_raw();
      for (const auto& part : {d_dxn.download_raw(), d_dw.download_raw()})
        all.insert(all.end(), part.begin(), part.end());
      runs.push_back(all);
    }
    std::vector<double> dy(y.size(), 0.0), dxn = dxn_prefill, dw = dw_prefill;
    ref::attention_gate_backward(dy.data(), dxn.data(), dw.data(), dout.data(), y.data(), xn.data(), w.data(), T, H, D);
    // dy: the gate and one product; dxn: a D-term dot per head and H heads; dw: T rows of such terms.
    EXPECT_TRUE(all_close(d_dy.download(), dy, tolerance(1, 16)));
    EXPECT_TRUE(all_close(d_dxn.download(), dxn, tolerance(1, D + H + 16)));
    EXPECT_TRUE(all_close(d_dw.download(), dw, tolerance(1, D + T + 16)));
    const std::vector<double> dxn_got = d_dxn.download();
    for (int t = 0; t < T; t++)
      for (int c = 12; c < C; c++)
        ASSERT_EQ(dxn_got[static_cast<size_t>(t) * C + c], dxn_prefill[static_cast<size_t>(t) * C + c])
            << "column " << c;
    EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << "attention gate backward is not deterministic";
  }
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
  }
  return 0.0;
}

double coefficient_derivative(const llmc::MixCoefficient& c, const std::vector<double>& s) {
  switch (c.kind) {
    case llmc::MixScalar::kOne:
      return 0.0;
    case llmc::MixScalar::kIdentity:
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
