// Tests of GPT-2's token/position embedding (llmc/kernels/encoder.cuh) against the double-precision reference:
// the forward and the deterministic backward (text-like tokens, sorted runs at the chunk edges, the plan's
// checks). Built for fp32 and bf16, emulated on the CPU and natively on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "llmc/kernels/encoder.cuh"
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

}  // namespace
