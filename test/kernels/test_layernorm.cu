// Tests of LayerNorm (llmc/kernels/layernorm.cuh) against the double-precision reference: plain, fused with
// the residual add, and the backward in every accumulation mode (deterministic, its scratch left reusable).
// Built for fp32 and bf16, emulated on the CPU and natively on a GPU.
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "llmc/kernels/layernorm.cuh"
#include "test/reference/reference_ops.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

struct LayerNormData {
  static constexpr int N = 40, C = 72;  // C not a multiple of 32: exercises the partial last warp stride
  std::mt19937 rng{202};
  std::vector<double> inp = random_values(static_cast<size_t>(N) * C, rng, -2.0, 2.0);
  std::vector<double> weight = random_values(C, rng, 0.5, 1.5);
  std::vector<double> bias = random_values(C, rng);
};

TEST(LayerNormKernel, ForwardMatchesReference) {
  LLMC_REQUIRE_GPU();
  LayerNormData data;
  const int N = data.N, C = data.C;
  DeviceBuffer<floatX> d_inp(static_cast<size_t>(N) * C), d_weight(C), d_bias(C), d_out(static_cast<size_t>(N) * C);
  DeviceBuffer<float> d_mean(N), d_rstd(N);
  d_inp.upload(data.inp);
  d_weight.upload(data.weight);
  d_bias.upload(data.bias);
  llmc::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_weight.get(), d_bias.get(), N, C,
                          nullptr);
  std::vector<double> out(static_cast<size_t>(N) * C), mean(N), rstd(N);
  ref::layernorm_forward(out.data(), mean.data(), rstd.data(), data.inp.data(), data.weight.data(), data.bias.data(), N,
                         C);
  // mean and rstd are fp32 sums of C terms; out adds one rounding to floatX.
  EXPECT_TRUE(all_close(d_mean.download(), mean, 2 * tolerance(0, C)));
  EXPECT_TRUE(all_close(d_rstd.download(), rstd, 2 * tolerance(0, C)));
  EXPECT_TRUE(all_close(d_out.download(), out, tolerance(1, C)));
}

// C = 70 (no multiple of 4 or 8): the element-access form of the forward must agree with the reference too.
TEST(LayerNormKernel, ForwardWithUnalignedRowsMatchesReference) {
  LLMC_REQUIRE_GPU();
  const int N = 24, C = 70;
  std::mt19937 rng(203);
  const std::vector<double> inp = random_values(static_cast<size_t>(N) * C, rng, -2.0, 2.0);
  const std::vector<double> other = random_values(static_cast<size_t>(N) * C, rng, -2.0, 2.0);
  const std::vector<double> weight = random_values(C, rng, 0.5, 1.5), bias = random_values(C, rng);
  DeviceBuffer<floatX> d_a(inp.size()), d_b(other.size()), d_weight(C), d_bias(C), d_residual(inp.size()),
      d_out(inp.size());
  DeviceBuffer<float> d_mean(N), d_rstd(N);
  d_a.upload(inp);
  d_b.upload(other);
  d_weight.upload(weight);
  d_bias.upload(bias);
  llmc::fused_residual_layernorm_forward(d_residual.get(), d_out.get(), d_mean.get(), d_rstd.get(), d_a.get(),
                                         d_b.get(), d_weight.get(), d_bias.get(), N, C, nullptr);
  std::vector<double> residual(inp.size()), out(inp.size()), mean(N), rstd(N);
  ref::residual_forward(residual.data(), inp.data(), other.data(), residual.size());
  EXPECT_TRUE(all_close(d_residual.download(), residual, tolerance(1, 2)));
  const std::vector<double> stored_residual = llmc::test::round_to_floatx(residual);
  ref::layernorm_forward(out.data(), mean.data(), rstd.data(), stored_residual.data(), weight.data(), bias.data(), N,
                         C);
  EXPECT_TRUE(all_close(d_mean.download(), mean, 2 * tolerance(0, C)));
  EXPECT_TRUE(all_close(d_rstd.download(), rstd, 2 * tolerance(0, C)));
  EXPECT_TRUE(all_close(d_out.download(), out, tolerance(1, C)));
}

TEST(LayerNormKernel, FusedResidualForwardMatchesReference) {
  LLMC_REQUIRE_GPU();
  LayerNormData data;
  const int N = data.N, C = data.C;
  const std::vector<double> other = random_values(static_cast<size_t>(N) * C, data.rng, -2.0, 2.0);
  DeviceBuffer<floatX> d_a(static_cast<size_t>(N) * C), d_b(static_cast<size_t>(N) * C), d_weight(C), d_bias(C);
  DeviceBuffer<floatX> d_residual(static_cast<size_t>(N) * C), d_out(static_cast<size_t>(N) * C);
  DeviceBuffer<float> d_mean(N), d_rstd(N);
  d_a.upload(data.inp);
  d_b.upload(other);
  d_weight.upload(data.weight);
  d_bias.upload(data.bias);
  llmc::fused_residual_layernorm_forward(d_residual.get(), d_out.get(), d_mean.get(), d_rstd.get(), d_a.get(),
                                         d_b.get(), d_weight.get(), d_bias.get(), N, C, nullptr);
  std::vector<double> residual(static_cast<size_t>(N) * C), out(static_cast<size_t>(N) * C), mean(N), rstd(N);
  ref::residual_forward(residual.data(), data.inp.data(), other.data(), residual.size());
  EXPECT_TRUE(all_close(d_residual.download(), residual, tolerance(1, 2)));
  // The kernel normalises the residual as stored (rounded to floatX); give the reference that input.
  const std::vector<double> stored_residual = llmc::test::round_to_floatx(residual);
  ref::layernorm_forward(out.data(), mean.data(), rstd.data(), stored_residual.data(), data.weight.data(),
                         data.bias.data(), N, C);
  EXPECT_TRUE(all_close(d_mean.download(), mean, 2 * tolerance(0, C)));
  EXPECT_TRUE(all_close(d_rstd.download(), rstd, 2 * tolerance(0, C)));
  EXPECT_TRUE(all_close(d_out.download(), out, tolerance(1, C)));
}

// The backward in every accumulation mode, against the reference, twice (bitwise equal), with the scratch
// zeroed once before the first call as the model does: every call must leave its counters zero again.
// (40, 72): 5 blocks, 16-byte packets. (200, 70): 25 blocks in two fold groups, element accesses.
TEST(LayerNormKernel, BackwardMatchesReferenceAndIsDeterministic) {
  LLMC_REQUIRE_GPU();
  for (const auto& [N, C] : std::vector<std::pair<int, int>>{{40, 72}, {200, 70}}) {
    SCOPED_TRACE("N = " + std::to_string(N) + ", C = " + std::to_string(C));
    std::mt19937 rng(202);
    const std::vector<double> inp = random_values(static_cast<size_t>(N) * C, rng, -2.0, 2.0);
    const std::vector<double> weight = random_values(C, rng, 0.5, 1.5), bias = random_values(C, rng);
    const std::vector<double> dout = random_values(static_cast<size_t>(N) * C, rng);
    const std::vector<double> dinp_initial = random_values(static_cast<size_t>(N) * C, rng);
    const std::vector<double> dweight_initial = random_values(C, rng), dbias_initial = random_values(C, rng);
    std::vector<double> out(static_cast<size_t>(N) * C), mean(N), rstd(N);
    ref::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);

    DeviceBuffer<floatX> d_inp(static_cast<size_t>(N) * C), d_weight(C), d_bias(C), d_out(static_cast<size_t>(N) * C),
        d_dout(static_cast<size_t>(N) * C);
    DeviceBuffer<floatX> d_dinp(static_cast<size_t>(N) * C), d_dweight(C), d_dbias(C);
    DeviceBuffer<float> d_mean(N), d_rstd(N);
    const size_t scratch_floats = llmc::layernorm_backward_scratch_floats(N, C);
    DeviceBuffer<float> d_scratch(scratch_floats);
    d_scratch.fill_zero();
    d_inp.upload(inp);
    d_weight.upload(weight);
    d_bias.upload(bias);
    d_dout.upload(dout);
    llmc::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_weight.get(), d_bias.get(), N, C,
                            nullptr);
    for (const bool accumulate : {true, false}) {
      SCOPED_TRACE(accumulate ? "accumulating" : "overwriting");
      std::vector<std::vector<floatX>> runs;
      for (int run = 0; run < 2; run++) {
        if (accumulate) {
          d_dinp.upload(dinp_initial);
          d_dweight.upload(dweight_initial);
          d_dbias.upload(dbias_initial);
        } else {  // overwritten, never read
          d_dinp.fill_nan();
          d_dweight.fill_nan();
          d_dbias.fill_nan();
        }
        llmc::layernorm_backward(d_dinp.get(), d_dweight.get(), d_dbias.get(), d_dout.get(), d_inp.get(),
                                 d_weight.get(), d_mean.get(), d_rstd.get(), N, C, accumulate, accumulate,
                                 d_scratch.get(), scratch_floats, nullptr);
        std::vector<floatX> all = d_dinp.download_raw();
        for (const auto& part : {d_dweight.download_raw(), d_dbias.download_raw()})
          all.insert(all.end(), part.begin(), part.end());
        runs.push_back(all);
      }
      std::vector<double> dinp(static_cast<size_t>(N) * C, 0.0), dweight(C, 0.0), dbias(C, 0.0);
      if (accumulate) {
        dinp = dinp_initial;
        dweight = dweight_initial;
        dbias = dbias_initial;
      }
      ref::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                              mean.data(), rstd.data(), N, C);
      // dinp: two row sums of C terms, then one rounding; dweight/dbias: column sums over N rows (in warps,
      // blocks and fold groups: any order is within the bound) plus the initial value.
      EXPECT_TRUE(all_close(d_dinp.download(), dinp, tolerance(1, 2 * C)));
      EXPECT_TRUE(all_close(d_dweight.download(), dweight, tolerance(1, N + 1)));
      EXPECT_TRUE(all_close(d_dbias.download(), dbias, tolerance(1, N + 1)));
      EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << "layernorm backward is not deterministic";
    }
  }
}

TEST(LayerNormKernel, BackwardRejectsSmallScratch) {
  LLMC_REQUIRE_GPU();
  const int N = 40, C = 72;
  EXPECT_THROW(
      llmc::layernorm_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, N, C, false,
                               false, nullptr, llmc::layernorm_backward_scratch_floats(N, C) - 1, nullptr),
      std::invalid_argument);
}

}  // namespace
