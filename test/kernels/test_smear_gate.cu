// Speedrun kernel tests of the smear gate (llmc/kernels/smear_gate.cuh) against the double-precision reference:
// forward and backward, its gate-weight and lambda gradients reduced deterministically. Built for fp32 and
// bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "llmc/kernels/smear_gate.cuh"
#include "test/kernels/scalar_data.h"
#include "test/reference/reference_speedrun_ops.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

TEST(SmearKernel, ForwardAndBackwardMatchReference) {
  LLMC_REQUIRE_GPU();
  const int T = 70, C = 72, kLambda = 60;  // three backward blocks of 32 rows; c < 12 spans two bf16 packets
  std::mt19937 rng(111);
  const std::vector<double> e = random_values(static_cast<size_t>(T) * C, rng), w = random_values(12, rng, -2.0, 2.0),
                            dout = random_values(static_cast<size_t>(T) * C, rng), dw_prefill = random_values(12, rng);
  ScalarData scalars(rng);
  const double lambda = scalars.values[kLambda];
  DeviceBuffer<floatX> d_e(e.size()), d_w(12), d_out(e.size()), d_dout(e.size()), d_de(e.size()), d_dw(12);
  DeviceBuffer<float> d_scratch(llmc::smear_backward_scratch_floats(T));
  d_e.upload(e);
  d_w.upload(w);
  d_dout.upload(dout);
  llmc::smear_forward(d_out.get(), d_e.get(), d_w.get(), scalars.d_values.get(), kLambda, T, C, nullptr);
  std::vector<double> out(e.size());
  ref::smear_forward(out.data(), e.data(), w.data(), lambda, T, C);
  // A 12-term fp32 dot, a sigmoid, a multiply-add, one rounding.
  EXPECT_TRUE(all_close(d_out.download(), out, tolerance(1, 16)));
  {  // a KV cache's continuation from row 33 (e's rows before it in place): the whole run's rows bitwise
    const int first = 33;
    DeviceBuffer<floatX> d_rows(e.size() - static_cast<size_t>(first) * C);
    llmc::smear_forward(d_rows.get(), d_e.get() + static_cast<size_t>(first) * C, d_w.get(), scalars.d_values.get(),
                        kLambda, T - first, C, nullptr, /*continues=*/true);
    const std::vector<floatX> rows = d_rows.download_raw(), whole = d_out.download_raw();
    for (size_t i = 0; i < rows.size(); i++)
      ASSERT_EQ(llmc::to_float(rows[i]), llmc::to_float(whole[static_cast<size_t>(first) * C + i])) << i;
  }

  std::vector<std::vector<floatX>> runs;
  std::vector<std::vector<float>> scalar_runs;
  for (int run = 0; run < 2; run++) {
    d_dw.upload(dw_prefill);
    scalars.d_grads.upload(scalars.grads);
    llmc::smear_backward(d_de.get(), d_dw.get(), scalars.d_grads.get(), d_dout.get(), d_e.get(), d_w.get(),
                         scalars.d_values.get(), kLambda, T, C, d_scratch.get(), d_scratch.size(), nullptr);
    std::vector<floatX> all = d_de.download_raw();
    const std::vector<floatX> dw_bits = d_dw.download_raw();
    all.insert(all.end(), dw_bits.begin(), dw_bits.end());
    runs.push_back(all);
    scalar_runs.push_back(scalars.d_grads.download_raw());
  }
  std::vector<double> de(e.size(), 0.0), dw = dw_prefill, dlambda = {0.0};
  ref::smear_backward(de.data(), dw.data(), dlambda.data(), dout.data(), e.data(), w.data(), lambda, T, C);
  // de: a C-term dot s_t per row, the gate, a few products; dw: T such terms summed; one rounding each.
  EXPECT_TRUE(all_close(d_de.download(), de, tolerance(1, C + 16)));
  EXPECT_TRUE(all_close(d_dw.download(), dw, tolerance(1, C + T + 16)));
  const std::vector<double> dscalars = scalars.d_grads.download();
  EXPECT_NEAR(dscalars[kLambda] - scalars.grads[kLambda], dlambda[0],
              tolerance(0, C + T + 16) * (std::fabs(dlambda[0]) + 1.0));
  for (int i = 0; i < kNumScalars; i++) {
    if (i == kLambda) continue;
    ASSERT_EQ(dscalars[i], scalars.grads[i]) << "scalar " << i << " changed";
  }
  EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << "smear backward is not deterministic";
  EXPECT_TRUE(bitwise_equal(scalar_runs[0], scalar_runs[1])) << "smear lambda gradient is not deterministic";
}

}  // namespace
