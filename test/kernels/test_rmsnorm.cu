// Speedrun kernel tests of the weightless RMSNorm (llmc/kernels/rmsnorm.cuh) against the double-precision
// reference: forward, backward written, accumulated and in place, the packet checks. Built for fp32 and bf16,
// emulated and on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/kernels/rmsnorm.cuh"
#include "test/reference/reference_speedrun_ops.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"
#include "test/support/worst_error.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

struct RmsNormData {
  int N, C;
  std::mt19937 rng{505};
  std::vector<double> inp;
  RmsNormData(int rows, int channels) : N(rows), C(channels) {
    inp = random_values(static_cast<size_t>(N) * C, rng, -2.0, 2.0);
    // A row of tiny values (mean square ~3e-9): FLT_EPSILON changes its scale by a factor ~6.
    for (int c = 0; c < C; c++) inp[c] = inp[c] * 5e-5;
    inp = round_to_floatx(inp);
  }
};

TEST(RmsNormKernel, ForwardMatchesReference) {
  LLMC_REQUIRE_GPU();
  for (const int C : {72, 768}) {  // 9 packets (lanes idle) and 96 (three per lane) in bf16
    SCOPED_TRACE("C = " + std::to_string(C));
    RmsNormData data(37, C);
    DeviceBuffer<floatX> d_inp(data.inp.size()), d_out(data.inp.size());
    DeviceBuffer<float> d_rstd(data.N);
    d_inp.upload(data.inp);
    llmc::rmsnorm_forward(d_out.get(), d_rstd.get(), d_inp.get(), data.N, C, nullptr);
    std::vector<double> out(data.inp.size()), rstd(data.N);
    ref::rmsnorm_forward(out.data(), rstd.data(), data.inp.data(), data.N, C);
    // An fp32 sum of C squares, a few-ulp rsqrt, then one rounding to floatX (rstd: none).
    EXPECT_TRUE(all_close(d_out.download(), out, tolerance(1, C)));
    EXPECT_TRUE(all_close(d_rstd.download(), rstd, tolerance(0, C)));
    // With the FP8 MLP's maximum (over a stale value: the launcher zeroes it): max |out| exactly, and the same
    // output and rstd bits as without it.
    DeviceBuffer<floatX> d_out2(data.inp.size());
    DeviceBuffer<float> d_rstd2(data.N), d_amax(std::vector<float>{1e30f});
    llmc::rmsnorm_forward(d_out2.get(), d_rstd2.get(), d_inp.get(), data.N, C, nullptr, d_amax.get());
    const std::vector<double> got = d_out2.download();
    double largest = 0.0;
    for (double v : got) largest = llmc::larger_magnitude(largest, v);
    EXPECT_EQ(d_amax.download_raw()[0], static_cast<float>(largest));
    EXPECT_EQ(got, d_out.download());
    EXPECT_EQ(d_rstd2.download(), d_rstd.download());
  }
}

TEST(RmsNormKernel, BackwardMatchesReferenceWrittenAndAccumulated) {
  LLMC_REQUIRE_GPU();
  RmsNormData data(37, 136);
  const int N = data.N, C = data.C;
  const std::vector<double> dout = random_values(static_cast<size_t>(N) * C, data.rng),
                            prefill = random_values(static_cast<size_t>(N) * C, data.rng);
  std::vector<double> out(static_cast<size_t>(N) * C), rstd(N);
  ref::rmsnorm_forward(out.data(), rstd.data(), data.inp.data(), N, C);
  DeviceBuffer<floatX> d_inp(static_cast<size_t>(N) * C), d_dout(static_cast<size_t>(N) * C),
      d_dinp(static_cast<size_t>(N) * C), d_out(static_cast<size_t>(N) * C);
  DeviceBuffer<float> d_rstd(N);
  d_inp.upload(data.inp);
  d_dout.upload(dout);
  llmc::rmsnorm_forward(d_out.get(), d_rstd.get(), d_inp.get(), N, C, nullptr);
  // The kernel uses its own fp32 rstd; give the reference the same one (the forward test checks it).
  const std::vector<double> kernel_rstd = d_rstd.download();
  for (const bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulate" : "write");
    std::vector<double> expected = accumulate ? prefill : std::vector<double>(static_cast<size_t>(N) * C, 0.0);
    ref::rmsnorm_backward(expected.data(), dout.data(), data.inp.data(), kernel_rstd.data(), N, C);
    std::vector<std::vector<floatX>> runs;
    for (int run = 0; run < 2; run++) {
      d_dinp.upload(accumulate ? prefill : std::vector<double>(static_cast<size_t>(N) * C, NAN));
      llmc::rmsnorm_backward(d_dinp.get(), d_dout.get(), d_inp.get(), d_rstd.get(), N, C, accumulate, nullptr);
      runs.push_back(d_dinp.download_raw());
    }
    // A row sum of C products, then r (dy - x coefficient) and, accumulated, one addition; one rounding.
    EXPECT_TRUE(all_close(d_dinp.download(), expected, tolerance(1, 2 * C)));
    EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << "rmsnorm backward is not deterministic";
  }
  // In place over dout (written mode).
  std::vector<double> expected(static_cast<size_t>(N) * C, 0.0);
  ref::rmsnorm_backward(expected.data(), dout.data(), data.inp.data(), kernel_rstd.data(), N, C);
  llmc::rmsnorm_backward(d_dout.get(), d_dout.get(), d_inp.get(), d_rstd.get(), N, C, false, nullptr);
  EXPECT_TRUE(all_close(d_dout.download(), expected, tolerance(1, 2 * C)));
}

TEST(RmsNormKernel, RejectsRowsThatAreNotWholePackets) {
  LLMC_REQUIRE_GPU();
  EXPECT_THROW(llmc::rmsnorm_forward(nullptr, nullptr, nullptr, 4, 10, nullptr), std::invalid_argument);
  DeviceBuffer<floatX> buffer(64);
  EXPECT_THROW(llmc::rmsnorm_forward(buffer.get() + 1, nullptr, buffer.get(), 2, 16, nullptr), std::invalid_argument);
}

}  // namespace
