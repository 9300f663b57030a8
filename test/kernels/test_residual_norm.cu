// Kernel tests of the fused residual pass (llmc/kernels/residual_norm.cuh): bit for bit the three kernels it
// replaces (mix_forward, then token_mix_forward with the mixed rows as the first stream, then rmsnorm_forward),
// each tested against double arithmetic in its own file, over rows inside wider strides, every coefficient kind the
// model uses, zero to three extra streams, a row count that leaves a block part empty, and with and without the
// maximum; plus the launcher's checks. Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "llmc/kernels/residual_norm.cuh"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;
using llmc::MixCoefficient;
using llmc::MixScalar;

struct Case {
  int T, C;
  bool with_y;
  MixCoefficient a, b;
  int extra_streams;  // gated by columns 3, 0, then ungated
  bool with_amax;
};

// The inputs of a case: x_in in rows of stride C + 8 (a packet more), y in rows of 2C, the extra streams in rows
// of C, a gate of 5 columns per token, and scalars.
struct Inputs {
  static constexpr int kGateColumns = 5;
  static constexpr int kColumns[3] = {3, 0, -1};
  int x_stride, y_stride;
  DeviceBuffer<floatX> x_in, y, gate;
  DeviceBuffer<float> scalars;
  std::vector<std::unique_ptr<DeviceBuffer<floatX>>> streams;
  Inputs(const Case& c, std::mt19937& rng)
      : x_stride(c.C + 8), y_stride(2 * c.C), x_in(static_cast<size_t>(c.T) * x_stride),
        y(static_cast<size_t>(c.T) * y_stride), gate(static_cast<size_t>(c.T) * kGateColumns), scalars(4) {
    x_in.upload(random_values(x_in.size(), rng, -3.0, 3.0));
    y.upload(random_values(y.size(), rng, -2.0, 2.0));
    gate.upload(random_values(gate.size(), rng, -1.5, 1.5));
    scalars.upload({0.913, -0.377, 1.25, 0.5});
    for (int k = 0; k < c.extra_streams; k++) {
      streams.push_back(std::make_unique<DeviceBuffer<floatX>>(static_cast<size_t>(c.T) * c.C));
      streams.back()->upload(random_values(streams.back()->size(), rng));
    }
  }
  llmc::ResidualMixIn mix_in(const Case& c) const {
    llmc::ResidualMixIn in;
    in.x_in = {x_in.get(), x_stride};
    in.y = {c.with_y ? y.get() : nullptr, y_stride};
    in.scalars = scalars.get();
    in.a = c.a, in.b = c.b;
    return in;
  }
  // The extra streams as a token mix, after `first` streams already placed (the unfused path's mixed rows).
  llmc::TokenMix token_mix(const Case& c, llmc::TokenMix mix) const {
    mix.gate = gate.get();
    mix.gate_stride = kGateColumns;
    for (int k = 0; k < c.extra_streams; k++) {
      llmc::TokenMixStream& s = mix.streams[mix.count++];
      s.rows = streams[static_cast<size_t>(k)]->get();
      s.stride = c.C;
      s.gate_column = kColumns[k];
    }
    return mix;
  }
};

struct Outputs {
  DeviceBuffer<floatX> x, xn;
  DeviceBuffer<float> rstd, amax;
  explicit Outputs(const Case& c)
      : x(static_cast<size_t>(c.T) * c.C), xn(static_cast<size_t>(c.T) * c.C), rstd(c.T), amax(1) {}
};

void expect_fused_equals_unfused(const Case& c) {
  std::mt19937 rng(static_cast<unsigned>(31 * c.T + c.C + c.extra_streams));
  const Inputs in(c, rng);
  Outputs fused(c), unfused(c);
  llmc::residual_norm_forward({fused.x.get(), fused.xn.get(), fused.rstd.get(), c.with_amax ? fused.amax.get() : nullptr},
                              in.mix_in(c), in.token_mix(c, llmc::TokenMix{}), c.T, c.C, nullptr);

  const llmc::ResidualMixIn mix = in.mix_in(c);
  llmc::mix_forward({unfused.x.get(), c.C}, mix.x_in, mix.y, mix.scalars, c.a, c.b, c.T, c.C, nullptr);
  if (c.extra_streams > 0) {
    llmc::TokenMix with_x;
    with_x.count = 1;
    with_x.streams[0].rows = unfused.x.get();
    with_x.streams[0].stride = c.C;
    llmc::token_mix_forward(unfused.x.get(), c.C, in.token_mix(c, with_x), c.T, c.C, nullptr);
  }
  llmc::rmsnorm_forward(unfused.xn.get(), unfused.rstd.get(), unfused.x.get(), c.T, c.C, nullptr,
                        c.with_amax ? unfused.amax.get() : nullptr);

  EXPECT_TRUE(bitwise_equal(fused.x.download_raw(), unfused.x.download_raw()));
  EXPECT_TRUE(bitwise_equal(fused.xn.download_raw(), unfused.xn.download_raw()));
  EXPECT_TRUE(bitwise_equal(fused.rstd.download_raw(), unfused.rstd.download_raw()));
  if (!c.with_amax) return;
  const std::vector<double> xn = fused.xn.download();
  double largest = 0.0;
  for (double value : xn) largest = std::max(largest, std::fabs(value));
  EXPECT_EQ(fused.amax.download()[0], largest);
  EXPECT_EQ(unfused.amax.download()[0], largest);
}

const MixCoefficient kBf16Copy0{MixScalar::kBf16Copy, 0}, kBf16Copy1{MixScalar::kBf16Copy, 1};

TEST(ResidualNormKernel, AttentionSublayerShapeIsTheUnfusedKernelsBitwise) {
  LLMC_REQUIRE_GPU();
  // The model's attention output: r x + p attn, then + g x0 (+ g b), its norm and the FP8 MLP's maximum.
  expect_fused_equals_unfused({37, 768, true, kBf16Copy0, kBf16Copy1, 2, true});
  expect_fused_equals_unfused({37, 768, true, kBf16Copy0, kBf16Copy1, 1, false});
}

TEST(ResidualNormKernel, EveryCoefficientKindAndStreamCountIsTheUnfusedKernelsBitwise) {
  LLMC_REQUIRE_GPU();
  const MixCoefficient kinds[] = {{MixScalar::kOne, -1}, {MixScalar::kIdentity, 2}, {MixScalar::kNegated, 3},
                                  {MixScalar::kSigmoid, 1}, kBf16Copy0};
  for (const MixCoefficient& a : kinds)
    for (int streams = 0; streams <= 3; streams++) {
      SCOPED_TRACE(::testing::Message() << "kind " << static_cast<int>(a.kind) << ", " << streams << " streams");
      expect_fused_equals_unfused({9, 64, true, a, kBf16Copy1, streams, streams % 2 == 0});
    }
  expect_fused_equals_unfused({9, 64, false, {MixScalar::kOne, -1}, {}, 2, true});  // x = x_in + token mix
}

TEST(ResidualNormKernel, LauncherRefusesWhatItCannotTake) {
  LLMC_REQUIRE_GPU();
  const Case c{4, 64, true, kBf16Copy0, kBf16Copy1, 1, false};
  std::mt19937 rng(3);
  const Inputs in(c, rng);
  Outputs out(c);
  const llmc::ResidualNormOut targets{out.x.get(), out.xn.get(), nullptr, nullptr};
  EXPECT_THROW(llmc::residual_norm_forward({nullptr, out.xn.get()}, in.mix_in(c), llmc::TokenMix{}, c.T, c.C, nullptr),
               std::invalid_argument);
  EXPECT_THROW(llmc::residual_norm_forward(targets, in.mix_in(c), llmc::TokenMix{}, c.T, 62, nullptr),
               std::invalid_argument);  // not whole packets
  llmc::TokenMix too_many = in.token_mix(c, llmc::TokenMix{});
  too_many.count = llmc::kTokenMixMaxStreams + 1;
  EXPECT_THROW(llmc::residual_norm_forward(targets, in.mix_in(c), too_many, c.T, c.C, nullptr), std::invalid_argument);
  llmc::TokenMix ungated_gate = in.token_mix(c, llmc::TokenMix{});
  ungated_gate.gate = nullptr;  // stream 0 reads gate column 3
  EXPECT_THROW(llmc::residual_norm_forward(targets, in.mix_in(c), ungated_gate, c.T, c.C, nullptr),
               std::invalid_argument);
}

}  // namespace
