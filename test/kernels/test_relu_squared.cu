// Speedrun kernel tests of ReLU^2 (llmc/kernels/relu_squared.cuh) against the double-precision reference:
// forward and backward, also in place, and the backward from the stored activation. Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <cmath>
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

// The 2026-07-17 record's backward from post = floatX(relu(h)^2) alone: 2 sqrt(post) dout, which differs from
// 2 relu(h) dout by the rounding of post (half of it, through the square root).
TEST(ReluSquaredKernel, BackwardFromThePostActivationMatchesReference) {
  LLMC_REQUIRE_GPU();
  for (const size_t n : {3000, 2999}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    std::mt19937 rng(405);
    const std::vector<double> inp = random_values(n, rng, -3.0, 3.0), dout = random_values(n, rng);
    DeviceBuffer<floatX> d_inp(n), d_post(n), d_dout(n), d_dinp(n);
    d_inp.upload(inp);
    d_dout.upload(dout);
    llmc::relu_squared_forward(d_post.get(), d_inp.get(), n, nullptr);
    llmc::relu_squared_backward_from_post(d_dinp.get(), d_post.get(), d_dout.get(), n, nullptr);
    const std::vector<double> post = d_post.download();
    std::vector<double> want(n);
    for (size_t i = 0; i < n; i++) want[i] = 2.0 * std::sqrt(post[i]) * dout[i];
    // The square root and two products in fp32, one rounding.
    EXPECT_TRUE(all_close(d_dinp.download(), want, tolerance(1, 3)));
    // Against the pre-activation's exact slope: the post's rounding too (half a rounding through the root).
    std::vector<double> exact(n, 0.0);
    ref::relu_squared_backward(exact.data(), inp.data(), dout.data(), n);
    EXPECT_TRUE(all_close(d_dinp.download(), exact, tolerance(2, 3)));
    llmc::relu_squared_backward_from_post(d_post.get(), d_post.get(), d_dout.get(), n, nullptr);  // in place
    EXPECT_TRUE(all_close(d_post.download(), want, tolerance(1, 3)));
  }
}

}  // namespace
