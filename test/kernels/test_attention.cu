// Tests of GPT-2's causal self-attention (llmc/kernels/attention.cuh: GEMMs and a softmax) against the
// double-precision reference: forward and the deterministic backward, and the heads' check.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "llmc/kernels/attention.cuh"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"
#include "test/reference/reference_ops.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

struct AttentionData {
  static constexpr int B = 2, T = 24, C = 32, NH = 2;  // hs = 16
  std::mt19937 rng{707};
  std::vector<double> qkv = random_values(static_cast<size_t>(B) * T * 3 * C, rng, -1.5, 1.5);
};

TEST(AttentionKernel, ForwardMatchesReference) {
  LLMC_REQUIRE_GPU();
  AttentionData data;
  const int B = data.B, T = data.T, C = data.C, NH = data.NH;
  DeviceBuffer<floatX> d_qkv(data.qkv.size()), d_out(static_cast<size_t>(B) * T * C), d_qkvr(data.qkv.size());
  DeviceBuffer<floatX> d_att(static_cast<size_t>(B) * NH * T * T), d_scratch(static_cast<size_t>(B) * T * C);
  d_qkv.upload(data.qkv);
  llmc::MatmulContext context;
  // On a created stream: the GEMMs (host functions in the emulated build) and the kernels between them
  // must run in stream order.
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  llmc::attention_forward(context, d_out.get(), d_qkvr.get(), d_att.get(), d_scratch.get(), d_qkv.get(), B, T, C, NH,
                          stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamDestroy(stream));
  std::vector<double> out(static_cast<size_t>(B) * T * C), preatt(static_cast<size_t>(B) * NH * T * T),
      att(preatt.size());
  ref::attention_forward(out.data(), preatt.data(), att.data(), data.qkv.data(), B, T, C, NH);
  const int hs = C / NH;
  // Rounded scores, rounded probabilities, rounded output: 3 roundings; sums of hs and T terms.
  EXPECT_TRUE(all_close(d_att.download(), att, tolerance(3, hs + T)));
  EXPECT_TRUE(all_close(d_out.download(), out, tolerance(3, hs + T)));
}

TEST(AttentionKernel, BackwardMatchesReferenceAndIsDeterministic) {
  LLMC_REQUIRE_GPU();
  AttentionData data;
  const int B = data.B, T = data.T, C = data.C, NH = data.NH;
  const std::vector<double> dout = random_values(static_cast<size_t>(B) * T * C, data.rng);
  DeviceBuffer<floatX> d_qkv(data.qkv.size()), d_out(static_cast<size_t>(B) * T * C), d_qkvr(data.qkv.size());
  DeviceBuffer<floatX> d_att(static_cast<size_t>(B) * NH * T * T), d_scratch(static_cast<size_t>(B) * T * C),
      d_dout(dout.size());
  DeviceBuffer<floatX> d_dqkv(data.qkv.size()), d_dqkvr(data.qkv.size()), d_datt(d_att.size());
  DeviceBuffer<floatX> d_dvalues(static_cast<size_t>(B) * T * C);
  d_qkv.upload(data.qkv);
  d_dout.upload(dout);
  llmc::MatmulContext context;
  llmc::attention_forward(context, d_out.get(), d_qkvr.get(), d_att.get(), d_scratch.get(), d_qkv.get(), B, T, C, NH,
                          nullptr);
  std::vector<std::vector<floatX>> runs;
  for (int run = 0; run < 2; run++) {
    d_dqkv.fill_nan();
    llmc::attention_backward(context, d_dqkv.get(), d_dqkvr.get(), d_datt.get(), d_dvalues.get(), d_dout.get(),
                             d_qkvr.get(), d_att.get(), B, T, C, NH, nullptr);
    runs.push_back(d_dqkv.download_raw());
  }
  std::vector<double> out(static_cast<size_t>(B) * T * C), preatt(static_cast<size_t>(B) * NH * T * T),
      att(preatt.size());
  ref::attention_forward(out.data(), preatt.data(), att.data(), data.qkv.data(), B, T, C, NH);
  std::vector<double> dqkv(data.qkv.size(), 0.0), dpreatt(preatt.size()), datt(preatt.size());
  ref::attention_backward(dqkv.data(), dpreatt.data(), datt.data(), dout.data(), data.qkv.data(), att.data(), B, T,
                          C, NH);
  const int hs = C / NH;
  // Forward att (3 roundings) then datt, dpreatt and dq/dk/dv rounded: ~6; sums of hs, T and T terms.
  EXPECT_TRUE(all_close(d_dqkv.download(), dqkv, tolerance(6, hs + 2 * T)));
  EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << "attention backward is not deterministic";
}

TEST(AttentionKernel, RejectsHeadsNotDividingChannels) {
  LLMC_REQUIRE_GPU();
  llmc::MatmulContext context;
  EXPECT_THROW(llmc::attention_forward(context, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 4, 30, 4, nullptr),
               std::invalid_argument);
}

}  // namespace
