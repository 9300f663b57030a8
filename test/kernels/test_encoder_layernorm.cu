// Kernel tests against the double-precision reference: token/position embedding (forward and the
// deterministic backward), LayerNorm (plain, fused with the residual add, backward), the bias gradient's
// column sums (the same in-launch fold as LayerNorm's), residual add and GELU. Built for fp32 and bf16,
// emulated on the CPU and natively on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "llmc/kernels/bias_grad.cuh"
#include "llmc/kernels/encoder.cuh"
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/layernorm.cuh"
#include "llmc/kernels/residual.cuh"
#include "test/reference/reference_ops.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

// Tokens with the frequency profile of text: token 0 takes ~40% of the positions (a run across many chunks
// of the sorted list), a few tokens a handful each, the rest once; V > every id.
std::vector<int> skewed_tokens(int positions, int V, std::mt19937& rng) {
  std::discrete_distribution<int> distribution({40.0, 8.0, 8.0, 4.0, 4.0, 36.0});
  std::uniform_int_distribution<int> rare(5, V - 1);
  std::vector<int> tokens(static_cast<size_t>(positions));
  for (int& token : tokens) {
    const int kind = distribution(rng);
    token = kind < 5 ? kind : rare(rng);
  }
  return tokens;
}

// One encoder backward on the device from `tokens`: the plan built on the host, its table uploaded.
struct EncoderBackwardRun {
  llmc::EncoderBackwardPlan plan;
  std::vector<floatX> dwte, dwpe;
};
EncoderBackwardRun run_encoder_backward(const std::vector<int>& tokens, const std::vector<double>& dout,
                                        const std::vector<double>& dwte_initial,
                                        const std::vector<double>& dwpe_initial, int B, int T, int maxT, int V, int C,
                                        bool accumulate_wpe) {
  const int N = B * T;
  EncoderBackwardRun run;
  std::vector<int> table(llmc::encoder_backward_table_ints(N)), counts;
  run.plan = llmc::build_encoder_backward_plan(tokens.data(), N, V, table.data(), counts);
  DeviceBuffer<int> d_table(table.size());
  d_table.upload_raw(table);
  DeviceBuffer<floatX> d_dout(dout.size()), d_dwte(dwte_initial.size()), d_dwpe(dwpe_initial.size());
  DeviceBuffer<float> d_partials(llmc::encoder_backward_partial_floats(N, C));
  d_dout.upload(dout);
  d_dwte.upload(dwte_initial);
  d_dwpe.upload(dwpe_initial);
  llmc::encoder_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_table.get(), run.plan, B, T, maxT, C,
                         accumulate_wpe, d_partials.get(), nullptr);
  run.dwte = d_dwte.download_raw();
  run.dwpe = d_dwpe.download_raw();
  return run;
}

std::vector<double> as_double(const std::vector<floatX>& values) {
  std::vector<double> result(values.size());
  for (size_t i = 0; i < values.size(); i++) result[i] = llmc::to_float(values[i]);
  return result;
}

TEST(EncoderKernel, ForwardMatchesReference) {
  LLMC_REQUIRE_GPU();
  for (const int C : {72, 70}) {  // 16-byte packets; element accesses (70 is no multiple of 4 or 8)
    SCOPED_TRACE("C = " + std::to_string(C));
    const int B = 3, T = 16, V = 20, maxT = 24;
    std::mt19937 rng(101);
    const std::vector<int> tokens = skewed_tokens(B * T, V, rng);
    const std::vector<double> wte = random_values(static_cast<size_t>(V) * C, rng),
                              wpe = random_values(static_cast<size_t>(maxT) * C, rng);
    DeviceBuffer<int> d_tokens(B * T);
    d_tokens.upload_raw(tokens);
    DeviceBuffer<floatX> d_wte(wte.size()), d_wpe(wpe.size()), d_out(static_cast<size_t>(B) * T * C);
    d_wte.upload(wte);
    d_wpe.upload(wpe);
    llmc::encoder_forward(d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), B, T, C, nullptr);
    std::vector<double> expected_out(static_cast<size_t>(B) * T * C);
    ref::encoder_forward(expected_out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    EXPECT_TRUE(all_close(d_out.download(), expected_out, tolerance(1, 2)));
  }
}

// The backward on text-like tokens: the frequent token's run crosses many chunks of the sorted list (its
// sum goes through the per-chunk partials), other runs end inside a chunk or exactly at its end.
TEST(EncoderKernel, BackwardMatchesReferenceAndIsDeterministic) {
  LLMC_REQUIRE_GPU();
  for (const int C : {72, 70}) {
    SCOPED_TRACE("C = " + std::to_string(C));
    const int B = 4, T = 75, V = 40, maxT = 90;  // B*T = 300: 10 chunks of 32 sorted positions
    std::mt19937 rng(102);
    const std::vector<int> tokens = skewed_tokens(B * T, V, rng);
    const std::vector<double> dout = random_values(static_cast<size_t>(B) * T * C, rng);
    const std::vector<double> dwte_initial = random_values(static_cast<size_t>(V) * C, rng);
    const std::vector<double> dwpe_initial = random_values(static_cast<size_t>(maxT) * C, rng);
    for (const bool accumulate_wpe : {true, false}) {
      SCOPED_TRACE(accumulate_wpe ? "dwpe accumulated" : "dwpe overwritten");
      const EncoderBackwardRun first =
          run_encoder_backward(tokens, dout, dwte_initial, dwpe_initial, B, T, maxT, V, C, accumulate_wpe);
      const EncoderBackwardRun second =
          run_encoder_backward(tokens, dout, dwte_initial, dwpe_initial, B, T, maxT, V, C, accumulate_wpe);
      EXPECT_GE(first.plan.crossing_runs, 1);
      EXPECT_GT(first.plan.longest_run, 2 * llmc::kEncoderChunk);  // token 0 spans at least three chunks
      // dwte always accumulates. dwpe: rows t >= T keep their values when accumulating, become 0 otherwise.
      std::vector<double> expected_dwte = dwte_initial, expected_dwpe = dwpe_initial;
      if (!accumulate_wpe) std::fill(expected_dwpe.begin(), expected_dwpe.end(), 0.0);
      ref::encoder_backward(expected_dwte.data(), expected_dwpe.data(), dout.data(), tokens.data(), B, T, C);
      // Up to B*T terms per dwte element (fp32, in chunks then partials: any order is within the bound),
      // B per dwpe element, and the initial value: one rounding of the sum.
      EXPECT_TRUE(all_close(as_double(first.dwte), expected_dwte, tolerance(1, B * T + 1)));
      EXPECT_TRUE(all_close(as_double(first.dwpe), expected_dwpe, tolerance(1, B + 1)));
      EXPECT_TRUE(bitwise_equal(first.dwte, second.dwte)) << "encoder backward dwte is not deterministic";
      EXPECT_TRUE(bitwise_equal(first.dwpe, second.dwpe)) << "encoder backward dwpe is not deterministic";
    }
  }
}

// Hand-made sorted runs at the chunk edges: a run filling exactly one chunk, one ending exactly at a chunk's
// end, one starting at a chunk's start and ending in the next, positions = 3 chunks + 5.
TEST(EncoderKernel, BackwardRunsAtChunkBoundaries) {
  LLMC_REQUIRE_GPU();
  constexpr int K = llmc::kEncoderChunk;
  const int B = 1, T = 3 * K + 5, V = 8, C = 16, maxT = T;
  std::vector<int> tokens;
  for (const auto& [token, count] : std::vector<std::pair<int, int>>{{1, K}, {2, K - 3}, {3, 3}, {5, K + 5}})
    tokens.insert(tokens.end(), count, token);
  std::mt19937 rng(103);
  std::shuffle(tokens.begin(), tokens.end(), rng);  // the plan's sort restores the runs
  const std::vector<double> dout = random_values(static_cast<size_t>(T) * C, rng);
  const std::vector<double> dwte_initial = random_values(static_cast<size_t>(V) * C, rng);
  const std::vector<double> dwpe_initial = random_values(static_cast<size_t>(maxT) * C, rng);
  const EncoderBackwardRun run = run_encoder_backward(tokens, dout, dwte_initial, dwpe_initial, B, T, maxT, V, C, true);
  EXPECT_EQ(run.plan.distinct, 4);
  EXPECT_EQ(run.plan.crossing_runs, 1);  // only token 5's run crosses (starting at 2K, over 3K)
  EXPECT_EQ(run.plan.longest_run, K + 5);
  std::vector<double> expected_dwte = dwte_initial, expected_dwpe = dwpe_initial;
  ref::encoder_backward(expected_dwte.data(), expected_dwpe.data(), dout.data(), tokens.data(), B, T, C);
  EXPECT_TRUE(all_close(as_double(run.dwte), expected_dwte, tolerance(1, T + 1)));
  EXPECT_TRUE(all_close(as_double(run.dwpe), expected_dwpe, tolerance(1, B + 1)));
}

TEST(EncoderKernel, PlanRejectsTokensOutsideTheVocabulary) {
  std::vector<int> table(llmc::encoder_backward_table_ints(4)), counts;
  for (const int bad : {-3, 8}) {
    const std::vector<int> tokens = {0, 1, 2, bad};
    EXPECT_THROW(llmc::build_encoder_backward_plan(tokens.data(), 4, 8, table.data(), counts), std::invalid_argument);
  }
}

TEST(EncoderKernel, BackwardRejectsAPlanOfAnotherSize) {
  LLMC_REQUIRE_GPU();
  std::vector<int> table(llmc::encoder_backward_table_ints(8)), counts;
  const std::vector<int> tokens(8, 0);
  const llmc::EncoderBackwardPlan plan = llmc::build_encoder_backward_plan(tokens.data(), 8, 4, table.data(), counts);
  EXPECT_THROW(llmc::encoder_backward(nullptr, nullptr, nullptr, nullptr, plan, 1, 4, 8, 8, true, nullptr, nullptr),
               std::invalid_argument);
  EXPECT_THROW(llmc::encoder_backward(nullptr, nullptr, nullptr, nullptr, plan, 1, 8, 4, 8, true, nullptr, nullptr),
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

// The bias gradient alone over many rows: several column slices (one is partial), enough row chunks for
// more than one fold group, overwrite and accumulate, and the counters left zero for the next call.
TEST(BiasGradKernel, ColumnSumsMatchReferenceAndAreDeterministic) {
  LLMC_REQUIRE_GPU();
  for (const auto& [N, OC] : std::vector<std::pair<int, int>>{{3000, 300}, {1100, 70}}) {  // 70: element accesses
    SCOPED_TRACE("N = " + std::to_string(N) + ", OC = " + std::to_string(OC));
    std::mt19937 rng(607);
    const std::vector<double> dout = random_values(static_cast<size_t>(N) * OC, rng);
    const std::vector<double> initial = random_values(OC, rng);
    DeviceBuffer<floatX> d_dout(dout.size()), d_dbias(OC);
    d_dout.upload(dout);
    const size_t scratch_floats = llmc::bias_grad_scratch_floats(N, OC);
    DeviceBuffer<float> d_scratch(scratch_floats);
    d_scratch.fill_zero();
    std::vector<double> sums(OC, 0.0);
    for (int row = 0; row < N; row++)
      for (int c = 0; c < OC; c++) sums[c] += dout[static_cast<size_t>(row) * OC + c];
    for (const bool accumulate : {false, true}) {
      std::vector<std::vector<floatX>> runs;
      for (int run = 0; run < 2; run++) {
        if (accumulate)
          d_dbias.upload(initial);
        else
          d_dbias.fill_nan();
        llmc::bias_grad(d_dbias.get(), d_dout.get(), N, OC, accumulate, d_scratch.get(), scratch_floats, nullptr);
        runs.push_back(d_dbias.download_raw());
      }
      std::vector<double> expected = sums;
      if (accumulate)
        for (int c = 0; c < OC; c++) expected[c] += initial[c];
      // fp32 sums of N terms (plus the initial value) in a fixed tree order, one rounding.
      EXPECT_TRUE(all_close(d_dbias.download(), expected, tolerance(1, N + 1)));
      EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << "bias gradient is not deterministic";
    }
    // Every call left its fold counters (the scratch's first words) zero.
    const llmc::ColumnSumPlan plan = llmc::column_sum_plan(N, OC);
    EXPECT_GT(plan.chunks, llmc::kFoldGroup);
    const std::vector<float> scratch = d_scratch.download_raw();
    const size_t counter_words =
        llmc::fold_scratch(plan.slices, plan.chunks, llmc::column_sum_slice<floatX>()).counter_floats;
    for (size_t i = 0; i < counter_words; i++) {
      unsigned counter = 0;
      std::memcpy(&counter, &scratch[i], sizeof counter);
      EXPECT_EQ(counter, 0u) << "fold counter " << i;
    }
  }
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
