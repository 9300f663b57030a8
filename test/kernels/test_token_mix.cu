// Kernel tests of the per-token stream mix (llmc/kernels/token_mix.cuh) against double arithmetic: the
// forward with gated and ungated streams inside wider rows; the backward's stream gradients (written, added,
// and one aliasing dout) and the gate columns' row dots, the other columns untouched; and the launchers'
// checks. Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "llmc/kernels/token_mix.cuh"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

// Four streams of T rows of C, each inside a row of stride kStride; a gate of kGateColumns per token.
// Weights: stream 0 gate column 2, stream 1 column 0, stream 2 none (1), stream 3 column 5.
struct MixData {
  static constexpr int T = 6, C = 64, kStride = 2 * C, kStreams = 4, kGateColumns = 8;
  static constexpr int kColumn[kStreams] = {2, 0, -1, 5};
  std::mt19937 rng{85};
  std::vector<std::vector<double>> streams;
  std::vector<double> gate = random_values(static_cast<size_t>(T) * kGateColumns, rng, -2.0, 2.0);
  MixData() {
    for (int k = 0; k < kStreams; k++) streams.push_back(random_values(static_cast<size_t>(T) * kStride, rng));
  }
  double weight(int k, int t) const {
    return kColumn[k] < 0 ? 1.0 : gate[static_cast<size_t>(t) * kGateColumns + kColumn[k]];
  }
  double at(int k, int t, int c) const { return streams[static_cast<size_t>(k)][static_cast<size_t>(t) * kStride + c]; }
};

struct DeviceMix {
  std::vector<std::unique_ptr<DeviceBuffer<floatX>>> streams;
  DeviceBuffer<floatX> gate;
  llmc::TokenMix mix;
  explicit DeviceMix(const MixData& data) : gate(data.gate.size()) {
    gate.upload(data.gate);
    for (int k = 0; k < data.kStreams; k++) {
      streams.push_back(std::make_unique<DeviceBuffer<floatX>>(data.streams[static_cast<size_t>(k)].size()));
      streams.back()->upload(data.streams[static_cast<size_t>(k)]);
    }
    mix.count = data.kStreams;
    mix.gate = gate.get();
    mix.gate_stride = data.kGateColumns;
    for (int k = 0; k < data.kStreams; k++) {
      mix.streams[k].rows = streams[static_cast<size_t>(k)]->get();
      mix.streams[k].stride = data.kStride;
      mix.streams[k].gate_column = data.kColumn[k];
    }
  }
};

TEST(TokenMixKernel, ForwardIsThePerTokenWeightedSum) {
  LLMC_REQUIRE_GPU();
  MixData data;
  DeviceMix device(data);
  DeviceBuffer<floatX> d_out(static_cast<size_t>(data.T) * data.C);
  llmc::token_mix_forward(d_out.get(), data.C, device.mix, data.T, data.C, nullptr);
  std::vector<double> want(static_cast<size_t>(data.T) * data.C, 0.0);
  for (int t = 0; t < data.T; t++)
    for (int c = 0; c < data.C; c++)
      for (int k = 0; k < data.kStreams; k++)
        want[static_cast<size_t>(t) * data.C + c] += data.weight(k, t) * data.at(k, t, c);
  // Four fp32 products and sums, one rounding.
  EXPECT_TRUE(all_close(d_out.download(), want, tolerance(1, data.kStreams + 2)));
}

TEST(TokenMixKernel, BackwardGivesStreamGradientsAndGateDots) {
  LLMC_REQUIRE_GPU();
  MixData data;
  DeviceMix device(data);
  const int T = data.T, C = data.C;
  const std::vector<double> dout = random_values(static_cast<size_t>(T) * C, data.rng);
  const std::vector<double> prefill = random_values(static_cast<size_t>(T) * C, data.rng);
  DeviceBuffer<floatX> d_dout(dout.size()), d_grad0(dout.size()), d_grad1(dout.size());
  DeviceBuffer<float> d_dgate(data.gate.size());
  d_dout.upload(dout);
  d_grad1.upload(prefill);
  d_dgate.upload(std::vector<double>(data.gate.size(), -7.0));  // untouched where no stream's gate is
  llmc::TokenMix& mix = device.mix;
  mix.dgate = d_dgate.get();
  mix.streams[0].grad = d_grad0.get(), mix.streams[0].grad_stride = C;  // written
  mix.streams[1].grad = d_grad1.get(), mix.streams[1].grad_stride = C, mix.streams[1].accumulate = true;
  mix.streams[2].grad = d_dout.get(), mix.streams[2].grad_stride = C;  // the residual's term, over dout
  llmc::token_mix_backward(d_dout.get(), C, mix, T, C, nullptr);
  std::vector<double> grad0(dout.size()), grad1(dout.size()), grad2(dout.size()), dgate(data.gate.size(), -7.0);
  for (int t = 0; t < T; t++)
    for (int c = 0; c < C; c++) {
      const size_t i = static_cast<size_t>(t) * C + c;
      grad0[i] = data.weight(0, t) * dout[i];
      grad1[i] = prefill[i] + data.weight(1, t) * dout[i];
      grad2[i] = dout[i];
    }
  for (int t = 0; t < T; t++)
    for (int k = 0; k < data.kStreams; k++) {
      if (data.kColumn[k] < 0) continue;
      double dot = 0.0;
      for (int c = 0; c < C; c++) dot += data.at(k, t, c) * dout[static_cast<size_t>(t) * C + c];
      dgate[static_cast<size_t>(t) * data.kGateColumns + data.kColumn[k]] = dot;
    }
  EXPECT_TRUE(all_close(d_grad0.download(), grad0, tolerance(1, 2)));
  EXPECT_TRUE(all_close(d_grad1.download(), grad1, tolerance(1, 2)));
  EXPECT_TRUE(all_close(d_dout.download(), grad2, tolerance(1, 2)));
  // Row dots of C products in fp32 (not rounded to floatX).
  EXPECT_TRUE(all_close(d_dgate.download(), dgate, tolerance(0, C + 8)));
}

TEST(TokenMixKernel, LaunchersRefuseBadMixes) {
  LLMC_REQUIRE_GPU();
  MixData data;
  DeviceMix device(data);
  DeviceBuffer<floatX> d_out(static_cast<size_t>(data.T) * data.C);
  llmc::TokenMix mix = device.mix;
  mix.count = 0;
  EXPECT_THROW(llmc::token_mix_forward(d_out.get(), data.C, mix, data.T, data.C, nullptr), std::invalid_argument);
  mix = device.mix;
  mix.streams[1].gate_column = data.kGateColumns;  // past the gate's columns
  EXPECT_THROW(llmc::token_mix_forward(d_out.get(), data.C, mix, data.T, data.C, nullptr), std::invalid_argument);
  mix = device.mix;
  mix.streams[0].stride = data.C - 8;
  EXPECT_THROW(llmc::token_mix_forward(d_out.get(), data.C, mix, data.T, data.C, nullptr), std::invalid_argument);
}

}  // namespace
