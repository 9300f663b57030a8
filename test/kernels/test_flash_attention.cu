// Tests of the fused tensor-core attention (llmc/kernels/flash_attention.cuh, bf16 build only) against
// the double-precision reference: output, saved log-sum-exp and dqkv, with T not a multiple of the
// 64-row tile, and the backward run twice for bitwise determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "llmc/kernels/flash_attention.cuh"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"
#include "test/reference/reference_ops.h"

#if !defined(LLMC_FP32)
namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

struct FlashData {
  static constexpr int B = 2, C = 128, NH = 2;  // head size 64
  int T;
  std::mt19937 rng{1111};
  std::vector<double> qkv = random_values(static_cast<size_t>(B) * T * 3 * C, rng, -1.5, 1.5);
  std::vector<double> dout = random_values(static_cast<size_t>(B) * T * C, rng);
};

// T = 100: one full and one partial 64-row tile; 64: exactly one; 17: one partial.
class FlashAttentionTest : public ::testing::TestWithParam<int> {};

TEST_P(FlashAttentionTest, ForwardAndBackwardMatchReference) {
  LLMC_REQUIRE_GPU();
  FlashData data{GetParam()};
  const int B = data.B, T = data.T, C = data.C, NH = data.NH, hs = C / NH;
  DeviceBuffer<floatX> d_qkv(data.qkv.size()), d_out(static_cast<size_t>(B) * T * C), d_dout(data.dout.size());
  DeviceBuffer<floatX> d_dqkv(data.qkv.size());
  DeviceBuffer<float> d_lse(static_cast<size_t>(B) * NH * T), d_delta(static_cast<size_t>(B) * NH * T);
  d_qkv.upload(data.qkv);
  d_dout.upload(data.dout);
  llmc::flash_attention_forward(d_out.get(), d_lse.get(), d_qkv.get(), B, T, C, NH, nullptr);

  std::vector<double> out(static_cast<size_t>(B) * T * C), preatt(static_cast<size_t>(B) * NH * T * T),
      att(preatt.size());
  ref::attention_forward(out.data(), preatt.data(), att.data(), data.qkv.data(), B, T, C, NH);
  std::vector<double> lse(static_cast<size_t>(B) * NH * T);
  for (size_t row = 0; row < lse.size(); row++) {
    const int t = static_cast<int>(row % T);
    double max_score = -INFINITY, sum = 0.0;
    for (int key = 0; key <= t; key++) max_score = std::fmax(max_score, preatt[row * T + key]);
    for (int key = 0; key <= t; key++) sum += std::exp(preatt[row * T + key] - max_score);
    lse[row] = max_score + std::log(sum);
  }
  // Scores in fp32 over hs terms; probabilities rounded to bf16 for P @ V (T terms); output rounded.
  EXPECT_TRUE(all_close(d_out.download(), out, tolerance(2, hs + T)));
  EXPECT_TRUE(all_close(d_lse.download(), lse, 2 * tolerance(0, hs + T)));

  std::vector<std::vector<floatX>> runs;
  for (int run = 0; run < 2; run++) {
    d_dqkv.fill_nan();
    llmc::flash_attention_backward(d_dqkv.get(), d_delta.get(), d_dout.get(), d_out.get(), d_qkv.get(), d_lse.get(),
                                   B, T, C, NH, nullptr);
    runs.push_back(d_dqkv.download_raw());
  }
  std::vector<double> dqkv(data.qkv.size(), 0.0), dpreatt(preatt.size()), datt(preatt.size());
  ref::attention_backward(dqkv.data(), dpreatt.data(), datt.data(), data.dout.data(), data.qkv.data(), att.data(), B,
                          T, C, NH);
  // The forward's rounded output enters delta; P and dS are rounded to bf16 for the MMAs; dq, dk, dv rounded.
  EXPECT_TRUE(all_close(d_dqkv.download(), dqkv, tolerance(6, hs + 2 * T)));
  EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << "flash attention backward is not deterministic";
}

INSTANTIATE_TEST_SUITE_P(SequenceLengths, FlashAttentionTest, ::testing::Values(100, 64, 17));

TEST(FlashAttentionKernel, RejectsHeadSizeOtherThan64) {
  LLMC_REQUIRE_GPU();
  EXPECT_THROW(llmc::flash_attention_forward(nullptr, nullptr, nullptr, 1, 64, 96, 3, nullptr), std::invalid_argument);
}

}  // namespace
#endif  // !LLMC_FP32
