// Kernel tests against the double-precision reference: token/position embedding (forward and the
// deterministic backward), LayerNorm (plain, fused with the residual add, backward), residual add and
// GELU. Built for fp32 and bf16, emulated on the CPU and natively on a GPU.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "llmc/kernels/encoder.cuh"
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/layernorm.cuh"
#include "llmc/kernels/residual.cuh"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"
#include "test/reference/reference_ops.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

TEST(EncoderKernel, ForwardAndDeterministicBackwardMatchReference) {
  LLMC_REQUIRE_GPU();
  const int B = 3, T = 16, C = 72, V = 20, maxT = 24;  // V < B*T: tokens repeat, buckets hold several positions
  std::mt19937 rng(101);
  std::uniform_int_distribution<int> token_distribution(0, V - 1);
  std::vector<int> tokens(B * T);
  for (int& token : tokens) token = token_distribution(rng);
  const std::vector<double> wte = random_values(static_cast<size_t>(V) * C, rng),
                            wpe = random_values(static_cast<size_t>(maxT) * C, rng);
  const std::vector<double> dout = random_values(static_cast<size_t>(B) * T * C, rng);
  const std::vector<double> dwte_initial = random_values(static_cast<size_t>(V) * C, rng);
  const std::vector<double> dwpe_initial = random_values(static_cast<size_t>(maxT) * C, rng);

  DeviceBuffer<int> d_tokens(B * T);
  d_tokens.upload(std::vector<double>(tokens.begin(), tokens.end()));
  DeviceBuffer<floatX> d_wte(wte.size()), d_wpe(wpe.size()), d_out(static_cast<size_t>(B) * T * C), d_dout(dout.size());
  DeviceBuffer<floatX> d_dwte(wte.size()), d_dwpe(wpe.size());
  d_wte.upload(wte);
  d_wpe.upload(wpe);
  d_dout.upload(dout);
  llmc::encoder_forward(d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), B, T, C, nullptr);

  std::vector<double> expected_out(static_cast<size_t>(B) * T * C);
  ref::encoder_forward(expected_out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  EXPECT_TRUE(all_close(d_out.download(), expected_out, tolerance(1, 2)));

  // Backward accumulates: start from random gradients. Rows of dwte whose token does not occur and rows
  // t >= T of dwpe must keep their initial values (the reference leaves them alone too).
  llmc::EncoderBackwardWorkspace workspace(B * T);
  std::vector<std::vector<floatX>> runs_dwte, runs_dwpe;
  for (int run = 0; run < 2; run++) {
    d_dwte.upload(dwte_initial);
    d_dwpe.upload(dwpe_initial);
    llmc::encoder_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), tokens.data(), B, T, C, workspace, nullptr);
    runs_dwte.push_back(d_dwte.download_raw());
    runs_dwpe.push_back(d_dwpe.download_raw());
  }
  std::vector<double> expected_dwte = dwte_initial, expected_dwpe = dwpe_initial;
  ref::encoder_backward(expected_dwte.data(), expected_dwpe.data(), dout.data(), tokens.data(), B, T, C);
  // Up to B*T = 48 terms per dwte element, B per dwpe element, one rounding of the sum.
  EXPECT_TRUE(all_close(d_dwte.download(), expected_dwte, tolerance(1, B * T)));
  EXPECT_TRUE(all_close(d_dwpe.download(), expected_dwpe, tolerance(1, B)));
  EXPECT_TRUE(bitwise_equal(runs_dwte[0], runs_dwte[1])) << "encoder backward dwte is not deterministic";
  EXPECT_TRUE(bitwise_equal(runs_dwpe[0], runs_dwpe[1])) << "encoder backward dwpe is not deterministic";
}

TEST(EncoderKernel, BackwardRejectsWorkspaceTooSmall) {
  LLMC_REQUIRE_GPU();
  llmc::EncoderBackwardWorkspace workspace(4);
  std::vector<int> tokens(8, 0);
  EXPECT_THROW(llmc::encoder_backward(nullptr, nullptr, nullptr, tokens.data(), 2, 4, 8, workspace, nullptr),
               std::invalid_argument);
}

TEST(EncoderKernel, BackwardRejectsNegativeToken) {
  LLMC_REQUIRE_GPU();
  llmc::EncoderBackwardWorkspace workspace(8);
  std::vector<int> tokens = {0, 1, 2, -3};
  EXPECT_THROW(llmc::encoder_backward(nullptr, nullptr, nullptr, tokens.data(), 1, 4, 8, workspace, nullptr),
               std::invalid_argument);
}

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
  ref::layernorm_forward(out.data(), mean.data(), rstd.data(), data.inp.data(), data.weight.data(),
                         data.bias.data(), N, C);
  // mean and rstd are fp32 sums of C terms; out adds one rounding to floatX.
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

TEST(LayerNormKernel, BackwardMatchesReferenceAndIsDeterministic) {
  LLMC_REQUIRE_GPU();
  LayerNormData data;
  const int N = data.N, C = data.C;
  const std::vector<double> dout = random_values(static_cast<size_t>(N) * C, data.rng);
  const std::vector<double> dinp_initial = random_values(static_cast<size_t>(N) * C, data.rng);
  const std::vector<double> dweight_initial = random_values(C, data.rng), dbias_initial = random_values(C, data.rng);
  std::vector<double> out(static_cast<size_t>(N) * C), mean(N), rstd(N);
  ref::layernorm_forward(out.data(), mean.data(), rstd.data(), data.inp.data(), data.weight.data(),
                         data.bias.data(), N, C);

  DeviceBuffer<floatX> d_inp(static_cast<size_t>(N) * C), d_weight(C), d_bias(C), d_out(static_cast<size_t>(N) * C),
      d_dout(static_cast<size_t>(N) * C);
  DeviceBuffer<floatX> d_dinp(static_cast<size_t>(N) * C), d_dweight(C), d_dbias(C);
  DeviceBuffer<float> d_mean(N), d_rstd(N);
  const size_t scratch_floats = llmc::layernorm_backward_scratch_floats(N, C);
  DeviceBuffer<float> d_scratch(scratch_floats);
  d_inp.upload(data.inp);
  d_weight.upload(data.weight);
  d_bias.upload(data.bias);
  d_dout.upload(dout);
  llmc::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_weight.get(), d_bias.get(), N, C,
                          nullptr);
  std::vector<std::vector<floatX>> runs;
  for (int run = 0; run < 2; run++) {
    d_dinp.upload(dinp_initial);
    d_dweight.upload(dweight_initial);
    d_dbias.upload(dbias_initial);
    llmc::layernorm_backward(d_dinp.get(), d_dweight.get(), d_dbias.get(), d_dout.get(), d_inp.get(), d_weight.get(),
                             d_mean.get(), d_rstd.get(), N, C, d_scratch.get(), scratch_floats, nullptr);
    std::vector<floatX> all = d_dinp.download_raw();
    for (const auto& part : {d_dweight.download_raw(), d_dbias.download_raw()})
      all.insert(all.end(), part.begin(), part.end());
    runs.push_back(all);
  }
  std::vector<double> dinp = dinp_initial, dweight = dweight_initial, dbias = dbias_initial;
  ref::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), data.inp.data(),
                          data.weight.data(), mean.data(), rstd.data(), N, C);
  // dinp: two row sums of C terms, then one rounding; dweight/dbias: column sums over N rows.
  EXPECT_TRUE(all_close(d_dinp.download(), dinp, tolerance(1, 2 * C)));
  EXPECT_TRUE(all_close(d_dweight.download(), dweight, tolerance(1, N)));
  EXPECT_TRUE(all_close(d_dbias.download(), dbias, tolerance(1, N)));
  EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << "layernorm backward is not deterministic";
}

TEST(LayerNormKernel, BackwardRejectsSmallScratch) {
  LLMC_REQUIRE_GPU();
  const int N = 40, C = 72;
  EXPECT_THROW(llmc::layernorm_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, N, C,
                                        nullptr, llmc::layernorm_backward_scratch_floats(N, C) - 1, nullptr),
               std::invalid_argument);
}

// 3000 elements take the 16-byte packet path, 2999 the scalar fallback.
TEST(ResidualKernel, ForwardMatchesReference) {
  LLMC_REQUIRE_GPU();
  for (const size_t n : {3000, 2999}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    std::mt19937 rng(303);
    const std::vector<double> a = random_values(n, rng), b = random_values(n, rng);
    DeviceBuffer<floatX> d_a(n), d_b(n), d_out(n);
    d_a.upload(a);
    d_b.upload(b);
    llmc::residual_forward(d_out.get(), d_a.get(), d_b.get(), n, nullptr);
    std::vector<double> out(n);
    ref::residual_forward(out.data(), a.data(), b.data(), n);
    EXPECT_TRUE(all_close(d_out.download(), out, tolerance(1, 2)));
  }
}

TEST(GeluKernel, ForwardAndBackwardMatchReference) {
  LLMC_REQUIRE_GPU();
  for (const size_t n : {3000, 2999}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    std::mt19937 rng(404);
    const std::vector<double> inp = random_values(n, rng, -4.0, 4.0), dout = random_values(n, rng);
    DeviceBuffer<floatX> d_inp(n), d_out(n), d_dout(n), d_dinp(n);
    d_inp.upload(inp);
    d_dout.upload(dout);
    llmc::gelu_forward(d_out.get(), d_inp.get(), n, nullptr);
    llmc::gelu_backward(d_dinp.get(), d_inp.get(), d_dout.get(), n, nullptr);
    std::vector<double> out(n), dinp(n, 0.0);
    ref::gelu_forward(out.data(), inp.data(), n);
    ref::gelu_backward(dinp.data(), inp.data(), dout.data(), n);
    // A handful of fp32 operations including tanhf, then one rounding.
    EXPECT_TRUE(all_close(d_out.download(), out, tolerance(1, 8)));
    EXPECT_TRUE(all_close(d_dinp.download(), dinp, tolerance(1, 8)));
    // In place (dinp aliasing dout), as matmul_backward uses it.
    llmc::gelu_backward(d_dout.get(), d_inp.get(), d_dout.get(), n, nullptr);
    EXPECT_TRUE(all_close(d_dout.download(), dinp, tolerance(1, 8)));
  }
}

}  // namespace
