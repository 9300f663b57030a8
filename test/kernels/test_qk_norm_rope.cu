// Speedrun kernel tests of llmc/kernels/qk_norm_rope.cuh against the double-precision reference: the RoPE table
// builder (before and after YaRN), and the per-head QK RMSNorm fused with RoPE inside the QKV layout (forward and
// backward, in place). Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "llmc/kernels/qk_norm_rope.cuh"
#include "llmc/model/modded44/yarn.h"
#include "test/reference/reference_speedrun_ops.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

TEST(RopeTables, BuiltFromFp32FrequenciesAndRebuiltAfterYarn) {
  LLMC_REQUIRE_GPU();
  const int T = 2048, D = 128, half = D / 2;
  llmc::Yarn yarn(D);
  DeviceBuffer<float> d_freq(half);
  DeviceBuffer<floatX> d_cos(static_cast<size_t>(T) * half), d_sin(static_cast<size_t>(T) * half);
  for (int stage = 0; stage < 2; stage++) {
    SCOPED_TRACE(stage == 0 ? "reset" : "after YaRN 3 -> 7");
    if (stage == 1) yarn.apply(3, 7, 128);
    d_freq.upload(std::vector<double>(yarn.frequencies().begin(), yarn.frequencies().end()));
    llmc::rope_tables_build(d_cos.get(), d_sin.get(), d_freq.get(), T, half, nullptr);
    // theta = t * w in fp32 as the reference computes it; then a few-ulp cosf/sinf and one rounding.
    std::vector<double> expected_cos(static_cast<size_t>(T) * half), expected_sin(static_cast<size_t>(T) * half);
    for (int t = 0; t < T; t++)
      for (int k = 0; k < half; k++) {
        const double theta = static_cast<float>(t) * yarn.frequencies()[k];
        expected_cos[static_cast<size_t>(t) * half + k] = std::cos(theta);
        expected_sin[static_cast<size_t>(t) * half + k] = std::sin(theta);
      }
    EXPECT_TRUE(all_close(d_cos.download(), expected_cos, tolerance(1, 4)));
    EXPECT_TRUE(all_close(d_sin.download(), expected_sin, tolerance(1, 4)));
    // The half-truncated pairs never rotate: cos 1, sin 0 exactly.
    const std::vector<double> cos_values = d_cos.download(), sin_values = d_sin.download();
    for (int t = 0; t < T; t += 97)
      for (int k = half / 2; k < half; k++) {
        ASSERT_EQ(cos_values[static_cast<size_t>(t) * half + k], 1.0);
        ASSERT_EQ(sin_values[static_cast<size_t>(t) * half + k], 0.0);
      }
  }
}

// q and k inside a QKV buffer (T, 3C): heads [0, 2H) of each row, v (columns [2C, 3C)) untouched.
struct QkvData {
  int T, H, D, C;
  std::mt19937 rng{606};
  std::vector<double> qkv, cos_table, sin_table;
  QkvData(int tokens, int heads, int head_dim) : T(tokens), H(heads), D(head_dim), C(heads * head_dim) {
    qkv = random_values(static_cast<size_t>(T) * 3 * C, rng, -3.0, 3.0);
    llmc::Yarn yarn(D);
    yarn.apply(1, 2, 8);
    std::vector<double> freq(yarn.frequencies().begin(), yarn.frequencies().end());
    cos_table.resize(static_cast<size_t>(T) * D / 2);
    sin_table.resize(cos_table.size());
    ref::rope_tables(cos_table.data(), sin_table.data(), freq.data(), T, D / 2);
    cos_table = round_to_floatx(cos_table);  // the kernel reads floatX tables
    sin_table = round_to_floatx(sin_table);
  }
  // Columns [0, 2C) of qkv as (T, 2H, D).
  std::vector<double> qk() const {
    std::vector<double> out(static_cast<size_t>(T) * 2 * C);
    for (int t = 0; t < T; t++)
      for (int c = 0; c < 2 * C; c++) out[static_cast<size_t>(t) * 2 * C + c] = qkv[static_cast<size_t>(t) * 3 * C + c];
    return out;
  }
};

// Compares the first 2C columns of each 3C-row with expected (T, 2C); the last C columns must keep their NaN.
void expect_qk_columns(const std::vector<double>& got, const std::vector<double>& expected, int T, int C, double tol) {
  std::vector<double> qk(static_cast<size_t>(T) * 2 * C);
  for (int t = 0; t < T; t++) {
    for (int c = 0; c < 2 * C; c++) qk[static_cast<size_t>(t) * 2 * C + c] = got[static_cast<size_t>(t) * 3 * C + c];
    for (int c = 2 * C; c < 3 * C; c++)
      ASSERT_TRUE(std::isnan(got[static_cast<size_t>(t) * 3 * C + c])) << "v column written";
  }
  EXPECT_TRUE(all_close(qk, expected, tol));
}

TEST(QkNormRopeKernel, ForwardAndBackwardMatchReference) {
  LLMC_REQUIRE_GPU();
  for (const auto& [H, D] : {std::pair{3, 32}, std::pair{2, 128}, std::pair{2, 16}}) {
    SCOPED_TRACE("H = " + std::to_string(H) + ", D = " + std::to_string(D));
    QkvData data(24, H, D);
    const int T = data.T, C = data.C;
    DeviceBuffer<floatX> d_qkv(data.qkv.size()), d_out(data.qkv.size()), d_cos(data.cos_table.size()),
        d_sin(data.sin_table.size());
    DeviceBuffer<float> d_rstd(static_cast<size_t>(T) * 2 * H);
    d_qkv.upload(data.qkv);
    d_cos.upload(data.cos_table);
    d_sin.upload(data.sin_table);
    llmc::qk_norm_rope_forward(d_out.get(), 3 * C, d_qkv.get(), 3 * C, d_rstd.get(), d_cos.get(), d_sin.get(), T, 2 * H,
                               D, nullptr);
    const std::vector<double> qk = data.qk();
    std::vector<double> normed(qk.size()), rstd(static_cast<size_t>(T) * 2 * H), expected(qk.size());
    ref::rmsnorm_forward(normed.data(), rstd.data(), qk.data(), T * 2 * H, D);
    ref::rope_forward(expected.data(), normed.data(), data.cos_table.data(), data.sin_table.data(), T, 2 * H, D);
    // fp32 sum of D squares, rsqrt, the rotation (two products and a sum), one rounding.
    expect_qk_columns(d_out.download(), expected, T, C, tolerance(1, D + 4));
    EXPECT_TRUE(all_close(d_rstd.download(), rstd, tolerance(0, D)));

    // Backward, in place over the gradient buffer (stride 3C), twice for determinism.
    const std::vector<double> dout = random_values(data.qkv.size(), data.rng);
    std::vector<double> dqk(static_cast<size_t>(T) * 2 * C);
    for (int t = 0; t < T; t++)
      for (int c = 0; c < 2 * C; c++)
        dqk[static_cast<size_t>(t) * 2 * C + c] = dout[static_cast<size_t>(t) * 3 * C + c];
    const std::vector<double> kernel_rstd = d_rstd.download();
    std::vector<double> dnormed(qk.size(), 0.0), dinp(qk.size(), 0.0);
    ref::rope_backward(dnormed.data(), dqk.data(), data.cos_table.data(), data.sin_table.data(), T, 2 * H, D);
    ref::rmsnorm_backward(dinp.data(), dnormed.data(), qk.data(), kernel_rstd.data(), T * 2 * H, D);
    DeviceBuffer<floatX> d_grad(dout.size());
    std::vector<std::vector<floatX>> runs;
    for (int run = 0; run < 2; run++) {
      std::vector<double> upload = dout;
      for (int t = 0; t < T; t++)
        for (int c = 2 * C; c < 3 * C; c++)
          upload[static_cast<size_t>(t) * 3 * C + c] = NAN;  // v's gradient is not ours
      d_grad.upload(upload);
      llmc::qk_norm_rope_backward(d_grad.get(), 3 * C, d_grad.get(), 3 * C, d_qkv.get(), 3 * C, d_rstd.get(),
                                  d_cos.get(), d_sin.get(), T, 2 * H, D, nullptr);
      runs.push_back(d_grad.download_raw());
    }
    expect_qk_columns(d_grad.download(), dinp, T, C, tolerance(1, 2 * D + 4));
    EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << "qk_norm_rope backward is not deterministic";
  }
}

TEST(QkNormRopeKernel, RejectsHeadSizesWithoutPacketHalves) {
  LLMC_REQUIRE_GPU();
  EXPECT_THROW(llmc::qk_norm_rope_forward(nullptr, 96, nullptr, 96, nullptr, nullptr, nullptr, 4, 2, 12, nullptr),
               std::invalid_argument);
  EXPECT_THROW(llmc::qk_norm_rope_forward(nullptr, 90, nullptr, 96, nullptr, nullptr, nullptr, 4, 2, 32, nullptr),
               std::invalid_argument);
}

}  // namespace
