// Tests of the bias gradient (llmc/kernels/bias_grad.cuh): its column sums (the same in-launch fold as
// LayerNorm's) against a double sum, overwritten and accumulated, deterministic, fold counters left zero.
// Built for fp32 and bf16, emulated on the CPU and natively on a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "llmc/kernels/bias_grad.cuh"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

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

}  // namespace
