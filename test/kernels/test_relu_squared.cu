// Speedrun kernel tests of ReLU^2 (llmc/kernels/relu_squared.cuh) against the double-precision reference:
// forward and backward, also in place. Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "llmc/kernels/relu_squared.cuh"
#include "test/reference/reference_speedrun_ops.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

// 3000 elements take the 16-byte packet path, 2999 the scalar fallback.
TEST(ReluSquaredKernel, ForwardAndBackwardMatchReference) {
  LLMC_REQUIRE_GPU();
  for (const size_t n : {3000, 2999}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    std::mt19937 rng(404);
    const std::vector<double> inp = random_values(n, rng, -3.0, 3.0), dout = random_values(n, rng);
    DeviceBuffer<floatX> d_inp(n), d_out(n), d_dout(n), d_dinp(n);
    d_inp.upload(inp);
    d_dout.upload(dout);
    llmc::relu_squared_forward(d_out.get(), d_inp.get(), n, nullptr);
    llmc::relu_squared_backward(d_dinp.get(), d_inp.get(), d_dout.get(), n, nullptr);
    std::vector<double> out(n), dinp(n, 0.0);
    ref::relu_squared_forward(out.data(), inp.data(), n);
    ref::relu_squared_backward(dinp.data(), inp.data(), dout.data(), n);
    // One or two fp32 products, one rounding.
    EXPECT_TRUE(all_close(d_out.download(), out, tolerance(1, 2)));
    EXPECT_TRUE(all_close(d_dinp.download(), dinp, tolerance(1, 2)));
    llmc::relu_squared_backward(d_dout.get(), d_inp.get(), d_dout.get(), n, nullptr);  // in place
    EXPECT_TRUE(all_close(d_dout.download(), dinp, tolerance(1, 2)));
  }
}

}  // namespace
