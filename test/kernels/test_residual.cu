// Tests of the residual add (llmc/kernels/residual.cuh) against the double-precision reference, on the
// 16-byte packet path and the scalar fallback. Built for fp32 and bf16, emulated on the CPU and natively on a GPU.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "llmc/kernels/residual.cuh"
#include "test/reference/reference_ops.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

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

}  // namespace
