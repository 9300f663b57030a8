// Kernel tests of the per-head output gates (llmc/kernels/head_gate.cuh): forward and backward against double
// arithmetic inside wider rows (the gates a window of a gate MLP's columns; the gradient's other columns untouched),
// in place, with lanes looping over a long head; the same values as the one-stream token mix per head they replace
// (llmc/kernels/token_mix.cuh); and the launchers' checks. Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <vector>

#include "llmc/kernels/head_gate.cuh"
#include "llmc/kernels/token_mix.cuh"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

// y (T rows of stride 2 H D, H heads of D in front), the gates (T rows of kGateStride, head h's at kColumn + h),
// dout as y.
struct HeadGateData {
  static constexpr int T = 5, H = 3, kGateStride = 8, kColumn = 3;
  const int D, y_stride;
  std::mt19937 rng{27};
  std::vector<double> y, dout, gate;
  explicit HeadGateData(int head_dim)
      : D(head_dim),
        y_stride(2 * H * head_dim),
        y(random_values(static_cast<size_t>(T) * y_stride, rng)),
        dout(random_values(y.size(), rng)),
        gate(random_values(static_cast<size_t>(T) * kGateStride, rng, -2.0, 2.0)) {}
  llmc::HeadGateShape shape() const { return {T, H, D, y_stride, kGateStride}; }
  double g(int t, int h) const { return gate[static_cast<size_t>(t) * kGateStride + kColumn + h]; }
  size_t at(int t, int h, int d) const { return static_cast<size_t>(t) * y_stride + static_cast<size_t>(h) * D + d; }
  std::vector<double> zeros() const { return std::vector<double>(y.size(), 0.0); }
  // A (T, y_stride) operand: value(t, h, d) in the heads, base's values between them.
  template <typename F>
  std::vector<double> per_value(const std::vector<double>& base, F value) const {
    std::vector<double> out = base;
    for (int t = 0; t < T; t++)
      for (int h = 0; h < H; h++)
        for (int d = 0; d < D; d++) out[at(t, h, d)] = value(t, h, d);
    return out;
  }
};

struct DeviceHeadGate {
  DeviceBuffer<floatX> y, dout, gate;
  explicit DeviceHeadGate(const HeadGateData& data) : y(data.y.size()), dout(data.dout.size()), gate(data.gate.size()) {
    y.upload(data.y);
    dout.upload(data.dout);
    gate.upload(data.gate);
  }
  const floatX* gates(const HeadGateData& data) const { return gate.get() + data.kColumn; }
};

void expect_head_gate_forward_matches(int D) {
  HeadGateData data(D);
  DeviceHeadGate device(data);
  DeviceBuffer<floatX> d_out(data.y.size());
  d_out.upload(data.zeros());
  llmc::head_gate_forward(d_out.get(), device.y.get(), device.gates(data), data.shape(), nullptr);
  const std::vector<double> out = d_out.download();
  const std::vector<double> want =
      data.per_value(data.zeros(), [&](int t, int h, int d) { return data.g(t, h) * data.y[data.at(t, h, d)]; });
  EXPECT_TRUE(all_close(out, want, tolerance(1, 1)));  // one product, one rounding; nothing between the heads
  // In place: the same values in the heads, y's own between them.
  llmc::head_gate_forward(device.y.get(), device.y.get(), device.gates(data), data.shape(), nullptr);
  EXPECT_EQ(device.y.download(), data.per_value(data.y, [&](int t, int h, int d) { return out[data.at(t, h, d)]; }));
}

TEST(HeadGateKernel, ForwardMatchesReferenceAlsoInPlace) {
  LLMC_REQUIRE_GPU();
  expect_head_gate_forward_matches(128);  // the record's heads: one packet per lane
  expect_head_gate_forward_matches(512);  // lanes loop over the head
}

void expect_head_gate_backward_matches(int D) {
  HeadGateData data(D);
  DeviceHeadGate device(data);
  DeviceBuffer<floatX> d_dy(data.y.size());
  DeviceBuffer<float> d_dgate(data.gate.size());
  d_dy.upload(data.zeros());
  d_dgate.upload(std::vector<double>(data.gate.size(), -7.0));  // untouched outside the H columns
  llmc::head_gate_backward(d_dy.get(), d_dgate.get() + data.kColumn, device.dout.get(), device.y.get(),
                           device.gates(data), data.shape(), nullptr);
  std::vector<double> dgate(data.gate.size(), -7.0);
  for (int t = 0; t < data.T; t++)
    for (int h = 0; h < data.H; h++) {
      double dot = 0.0;
      for (int d = 0; d < D; d++) dot += data.y[data.at(t, h, d)] * data.dout[data.at(t, h, d)];
      dgate[static_cast<size_t>(t) * data.kGateStride + data.kColumn + h] = dot;
    }
  const std::vector<double> dy = d_dy.download();
  const std::vector<double> want_dy =
      data.per_value(data.zeros(), [&](int t, int h, int d) { return data.g(t, h) * data.dout[data.at(t, h, d)]; });
  EXPECT_TRUE(all_close(dy, want_dy, tolerance(1, 1)));
  EXPECT_TRUE(all_close(d_dgate.download(), dgate, tolerance(0, D + 8)));  // D fp32 products summed
  // dy over dout: the same values in the heads, dout's own between them.
  llmc::head_gate_backward(device.dout.get(), d_dgate.get() + data.kColumn, device.dout.get(), device.y.get(),
                           device.gates(data), data.shape(), nullptr);
  EXPECT_EQ(device.dout.download(),
            data.per_value(data.dout, [&](int t, int h, int d) { return dy[data.at(t, h, d)]; }));
}

TEST(HeadGateKernel, BackwardMatchesReferenceAlsoInPlace) {
  LLMC_REQUIRE_GPU();
  expect_head_gate_backward_matches(128);
  expect_head_gate_backward_matches(512);
}

// At the record's head size the gates give the values of the one-stream token mix per head (block sums over the
// head's packets, the same order as the group sums); compared as values (a signed zero may differ).
TEST(HeadGateKernel, SameValuesAsOneTokenMixPerHead) {
  LLMC_REQUIRE_GPU();
  HeadGateData data(128);
  DeviceHeadGate device(data);
  const int T = data.T, D = data.D, stride = data.y_stride;
  DeviceBuffer<floatX> d_out(data.y.size()), d_mixed(data.y.size()), d_dy(data.y.size()), d_mixed_dy(data.y.size());
  DeviceBuffer<float> d_dgate(data.gate.size()), d_mixed_dgate(data.gate.size());
  for (auto* buffer : {&d_out, &d_mixed, &d_dy, &d_mixed_dy}) buffer->upload(data.zeros());
  for (auto* buffer : {&d_dgate, &d_mixed_dgate}) buffer->upload(std::vector<double>(data.gate.size(), 0.0));
  llmc::head_gate_forward(d_out.get(), device.y.get(), device.gates(data), data.shape(), nullptr);
  llmc::head_gate_backward(d_dy.get(), d_dgate.get() + data.kColumn, device.dout.get(), device.y.get(),
                           device.gates(data), data.shape(), nullptr);
  for (int h = 0; h < data.H; h++) {
    llmc::TokenMix mix;
    mix.count = 1;
    mix.gate = device.gate.get(), mix.gate_stride = data.kGateStride, mix.dgate = d_mixed_dgate.get();
    mix.streams[0] = {device.y.get() + h * D, stride, data.kColumn + h, d_mixed_dy.get() + h * D, stride, false};
    llmc::token_mix_forward(d_mixed.get() + h * D, stride, mix, T, D, nullptr);
    llmc::token_mix_backward(device.dout.get() + h * D, stride, mix, T, D, nullptr);
  }
  EXPECT_EQ(d_out.download(), d_mixed.download());
  EXPECT_EQ(d_dy.download(), d_mixed_dy.download());
  EXPECT_EQ(d_dgate.download(), d_mixed_dgate.download());
}

TEST(HeadGateKernel, LaunchersRefuseBadShapes) {
  LLMC_REQUIRE_GPU();
  HeadGateData data(128);
  DeviceHeadGate device(data);
  DeviceBuffer<float> d_dgate(data.gate.size());
  llmc::HeadGateShape shape = data.shape();
  shape.D = 129;  // not whole packets
  EXPECT_THROW(llmc::head_gate_forward(device.y.get(), device.y.get(), device.gates(data), shape, nullptr),
               std::invalid_argument);
  shape = data.shape();
  shape.y_stride = data.H * data.D - 8;  // rows shorter than the heads
  EXPECT_THROW(llmc::head_gate_forward(device.y.get(), device.y.get(), device.gates(data), shape, nullptr),
               std::invalid_argument);
  shape = data.shape();
  shape.gate_stride = data.H - 1;  // fewer gates per row than heads
  EXPECT_THROW(llmc::head_gate_backward(device.dout.get(), d_dgate.get(), device.dout.get(), device.y.get(),
                                        device.gates(data), shape, nullptr),
               std::invalid_argument);
}

}  // namespace
