// Tests of GELU (llmc/kernels/gelu.cuh) against the double-precision reference: the tanh approximation's
// forward and backward, the backward also in place; the exact GELU against std::erf in double and its
// derivative against central differences of it. Built for fp32 and bf16, emulated on the CPU and natively on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "llmc/kernels/gelu.cuh"
#include "test/reference/reference_ops.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

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

TEST(GeluKernel, ExactGeluMatchesErfAndItsDerivative) {
  LLMC_REQUIRE_GPU();
  for (const size_t n : {3000, 2999}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    std::mt19937 rng(405);
    const std::vector<double> inp = random_values(n, rng, -6.0, 6.0), dout = random_values(n, rng);
    DeviceBuffer<floatX> d_inp(n), d_out(n), d_dout(n), d_dinp(n);
    d_inp.upload(inp);
    d_dout.upload(dout);
    llmc::gelu_exact_forward(d_out.get(), d_inp.get(), n, nullptr);
    llmc::gelu_exact_backward(d_dinp.get(), d_inp.get(), d_dout.get(), n, nullptr);
    auto gelu = [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); };
    std::vector<double> out(n), dinp(n);
    for (size_t i = 0; i < n; i++) {
      out[i] = gelu(inp[i]);
      const double h = 1e-5;
      dinp[i] = (gelu(inp[i] + h) - gelu(inp[i] - h)) / (2 * h) * dout[i];
    }
    // erff, expf and a few fp32 operations, then one rounding.
    EXPECT_TRUE(all_close(d_out.download(), out, tolerance(1, 8)));
    EXPECT_TRUE(all_close(d_dinp.download(), dinp, tolerance(1, 8)));
    llmc::gelu_exact_backward(d_dout.get(), d_inp.get(), d_dout.get(), n, nullptr);  // in place
    EXPECT_TRUE(all_close(d_dout.download(), dinp, tolerance(1, 8)));
    // Not the tanh approximation: at x = -3 the two differ by 4.1e-4, far above the fp32 roundings of either.
    EXPECT_GT(std::abs(llmc::gelu_erf(-3.0f) - llmc::gelu_tanh(-3.0f)), 1e-4f);
  }
}

}  // namespace
