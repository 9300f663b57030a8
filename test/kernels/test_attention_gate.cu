// Speedrun kernel tests of the attention output gate (llmc/kernels/attention_gate.cuh) against the
// double-precision reference: forward and backward, its gate-weight gradient reduced deterministically.
// Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "llmc/kernels/attention_gate.cuh"
#include "test/reference/reference_speedrun_ops.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

TEST(AttentionGateKernel, ForwardAndBackwardMatchReference) {
  LLMC_REQUIRE_GPU();
  for (const auto& [H, D] : {std::pair{3, 32}, std::pair{2, 128}}) {
    SCOPED_TRACE("H = " + std::to_string(H) + ", D = " + std::to_string(D));
    const int T = 75, C = H * D;  // 75 rows: three chunks of the column chunking, the last one short
    std::mt19937 rng(222);
    const std::vector<double> y = random_values(static_cast<size_t>(T) * C, rng),
                              xn = random_values(static_cast<size_t>(T) * C, rng, -2.0, 2.0),
                              w = random_values(static_cast<size_t>(H) * 12, rng, -1.0, 1.0),
                              dout = random_values(static_cast<size_t>(T) * C, rng),
                              dxn_prefill = random_values(static_cast<size_t>(T) * C, rng),
                              dw_prefill = random_values(static_cast<size_t>(H) * 12, rng);
    DeviceBuffer<floatX> d_y(y.size()), d_xn(xn.size()), d_w(w.size()), d_out(y.size()), d_dout(dout.size()),
        d_dy(y.size()), d_dxn(xn.size()), d_dw(w.size());
    DeviceBuffer<float> d_scratch(llmc::attention_gate_backward_scratch_floats(T, H));
    d_y.upload(y);
    d_xn.upload(xn);
    d_w.upload(w);
    d_dout.upload(dout);
    llmc::attention_gate_forward(d_out.get(), d_y.get(), d_xn.get(), C, d_w.get(), T, H, D, nullptr);
    std::vector<double> out(y.size());
    ref::attention_gate_forward(out.data(), y.data(), xn.data(), w.data(), T, H, D);
    EXPECT_TRUE(all_close(d_out.download(), out, tolerance(1, 16)));

    std::vector<std::vector<floatX>> runs;
    for (int run = 0; run < 2; run++) {
      d_dxn.upload(dxn_prefill);
      d_dw.upload(dw_prefill);
      llmc::attention_gate_backward(d_dy.get(), d_dxn.get(), C, d_dw.get(), d_dout.get(), d_y.get(), d_xn.get(), C,
                                    d_w.get(), T, H, D, d_scratch.get(), d_scratch.size(), nullptr);
      std::vector<floatX> all = d_dy.download_raw();
      for (const auto& part : {d_dxn.download_raw(), d_dw.download_raw()})
        all.insert(all.end(), part.begin(), part.end());
      runs.push_back(all);
    }
    std::vector<double> dy(y.size(), 0.0), dxn = dxn_prefill, dw = dw_prefill;
    ref::attention_gate_backward(dy.data(), dxn.data(), dw.data(), dout.data(), y.data(), xn.data(), w.data(), T, H, D);
    // dy: the gate and one product; dxn: a D-term dot per head and H heads; dw: T rows of such terms.
    EXPECT_TRUE(all_close(d_dy.download(), dy, tolerance(1, 16)));
    EXPECT_TRUE(all_close(d_dxn.download(), dxn, tolerance(1, D + H + 16)));
    EXPECT_TRUE(all_close(d_dw.download(), dw, tolerance(1, D + T + 16)));
    const std::vector<double> dxn_got = d_dxn.download();
    for (int t = 0; t < T; t++)
      for (int c = 12; c < C; c++)
        ASSERT_EQ(dxn_got[static_cast<size_t>(t) * C + c], dxn_prefill[static_cast<size_t>(t) * C + c])
            << "column " << c;
    EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << "attention gate backward is not deterministic";
  }
}

}  // namespace
