// Kernel tests of the fused residual pass (llmc/kernels/residual_norm.cuh). Forward: bit for bit the three kernels
// it replaces (mix_forward, then token_mix_forward with the mixed rows as the first stream, then rmsnorm_forward),
// each tested against double arithmetic in its own file, over rows inside wider strides, every coefficient kind the
// model uses, zero to three extra streams, a row count that leaves a block part empty, and with and without the
// maximum. Backward: the gradients bit for bit those of rmsnorm_backward, token_mix_backward and mix_backward, the
// gate columns' and scalars' sums (in another order) within an fp32 sum's bound of their double value, in the
// models' four uses. Plus the launchers' checks. Built for fp32 and bf16, emulated and on a GPU.
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
#include "test/support/worst_error.h"

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
  float* amax = c.with_amax ? fused.amax.get() : nullptr;
  llmc::residual_norm_forward({fused.x.get(), fused.xn.get(), fused.rstd.get(), amax}, in.mix_in(c),
                              in.token_mix(c, llmc::TokenMix{}), c.T, c.C, nullptr);

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
  for (double value : xn) largest = llmc::larger_magnitude(largest, value);
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

// ---- backward ----------------------------------------------------------------------------------------------

struct BackwardCase {
  const char* name;
  int T, C;
  bool arriving;           // x has a gradient from other readers (added), kept in the buffer d x_in overwrites
  MixCoefficient a, b;     // b ignored without y
  bool with_y, accumulate_dy;
  int extra_streams;       // gated by columns 3, 0, 1, 4, 2 (accumulating, written, accumulating, ...)
};

constexpr int kBackwardGateColumns = 6;
constexpr int kBackwardColumns[5] = {3, 0, 1, 4, 2};

// The device state of one backward: inputs, and outputs pre-filled with the same values for both paths.
struct BackwardState {
  DeviceBuffer<floatX> dxn, x, x_in, y, gate, dx, dy;
  DeviceBuffer<float> rstd, dgate, dscalars, scalars, scratch;
  std::vector<std::unique_ptr<DeviceBuffer<floatX>>> rows, grads;
  BackwardState(const BackwardCase& c, unsigned seed)
      : dxn(size(c)), x(size(c)), x_in(size(c)), y(size(c)), gate(static_cast<size_t>(c.T) * kBackwardGateColumns),
        dx(size(c)), dy(size(c)), rstd(c.T), dgate(static_cast<size_t>(c.T) * kBackwardGateColumns), dscalars(4),
        scalars(4), scratch(4096) {
    std::mt19937 rng(seed);
    for (DeviceBuffer<floatX>* buffer : {&dxn, &x, &x_in, &y, &dx, &dy}) buffer->upload(random_values(size(c), rng));
    gate.upload(random_values(gate.size(), rng, -1.5, 1.5));
    rstd.upload(random_values(rstd.size(), rng, 0.5, 2.0));
    dgate.upload(std::vector<double>(dgate.size(), 7.0));
    dscalars.upload({0.25, -0.5, 0.125, 1.0});
    scalars.upload({0.913, -0.377, 1.25, 0.5});
    for (int k = 0; k < c.extra_streams; k++) {
      rows.push_back(std::make_unique<DeviceBuffer<floatX>>(size(c)));
      rows.back()->upload(random_values(size(c), rng));
      grads.push_back(std::make_unique<DeviceBuffer<floatX>>(size(c)));
      grads.back()->upload(random_values(size(c), rng));
    }
  }
  static size_t size(const BackwardCase& c) { return static_cast<size_t>(c.T) * c.C; }
  llmc::TokenMix extra(const BackwardCase& c) const {
    llmc::TokenMix mix;
    mix.count = c.extra_streams;
    mix.gate = gate.get();
    mix.gate_stride = kBackwardGateColumns;
    mix.dgate = dgate.get();
    for (int k = 0; k < c.extra_streams; k++) {
      llmc::TokenMixStream& s = mix.streams[k];
      s.rows = rows[static_cast<size_t>(k)]->get();
      s.stride = c.C;
      s.gate_column = kBackwardColumns[k];
      s.grad = grads[static_cast<size_t>(k)]->get();
      s.grad_stride = c.C;
      s.accumulate = k % 2 == 0;
    }
    return mix;
  }
  llmc::ResidualMixIn mix(const BackwardCase& c) const {
    llmc::ResidualMixIn in;
    in.x_in = {x_in.get(), c.C};
    in.y = {c.with_y ? y.get() : nullptr, c.C};
    in.scalars = scalars.get();
    in.a = c.a, in.b = c.b;
    return in;
  }
};

// The fused call: d x_in into dx (over the arriving gradient where there is one).
void fused_backward(const BackwardCase& c, BackwardState& s) {
  const llmc::ResidualMixGrads out{{s.dx.get(), c.C}, false, {c.with_y ? s.dy.get() : nullptr, c.C}, c.accumulate_dy,
                                   s.dscalars.get()};
  const llmc::ResidualNormBackwardIn norm{s.dxn.get(), s.x.get(), s.rstd.get(), c.arriving ? s.dx.get() : nullptr};
  llmc::residual_norm_backward(out, norm, s.extra(c), s.mix(c), c.T, c.C, s.scratch.get(), s.scratch.size(), nullptr);
}

// The three kernels in the models' former order: g into dx (added to the arriving gradient or written), the token
// mix's gradients and dots from it, then the mix's d x_in over g (dout aliased, as the models did).
void unfused_backward(const BackwardCase& c, BackwardState& s) {
  llmc::rmsnorm_backward(s.dx.get(), s.dxn.get(), s.x.get(), s.rstd.get(), c.T, c.C, c.arriving, nullptr);
  if (c.extra_streams > 0) llmc::token_mix_backward(s.dx.get(), c.C, s.extra(c), c.T, c.C, nullptr);
  const llmc::ResidualMixIn mix = s.mix(c);
  llmc::mix_backward({s.dx.get(), c.C}, false, {c.with_y ? s.dy.get() : nullptr, c.C}, c.accumulate_dy,
                     s.dscalars.get(), {s.dx.get(), c.C}, mix.x_in, mix.y, mix.scalars, c.a, c.b, c.T, c.C,
                     s.scratch.get(), s.scratch.size(), nullptr);
}

// got[i] within an fp32 sum's bound of sum_j terms(i, j) over n terms, computed in double: 2 n u sum |terms|.
template <class Terms>
::testing::AssertionResult sums_within_bound(const std::vector<double>& got, const std::vector<size_t>& at, int n,
                                             Terms terms, const std::vector<double>& offset) {
  for (size_t e = 0; e < at.size(); e++) {
    double exact = offset[e], magnitude = std::fabs(offset[e]);
    for (int j = 0; j < n; j++) {
      const double term = terms(e, j);
      exact += term;
      magnitude += std::fabs(term);
    }
    const double bound = 2.0 * (n + 2) * std::ldexp(1.0, -24) * magnitude;
    if (!(std::fabs(got[at[e]] - exact) <= bound))
      return ::testing::AssertionFailure() << "sum " << e << ": got " << got[at[e]] << ", exact " << exact
                                           << ", bound " << bound;
  }
  return ::testing::AssertionSuccess();
}

void expect_backward_equals_unfused(const BackwardCase& c) {
  SCOPED_TRACE(c.name);
  BackwardState fused(c, 77), unfused(c, 77);
  fused_backward(c, fused);
  unfused_backward(c, unfused);
  EXPECT_TRUE(bitwise_equal(fused.dx.download_raw(), unfused.dx.download_raw())) << "d x_in";
  EXPECT_TRUE(bitwise_equal(fused.dy.download_raw(), unfused.dy.download_raw())) << "dy";
  for (int k = 0; k < c.extra_streams; k++)
    EXPECT_TRUE(bitwise_equal(fused.grads[static_cast<size_t>(k)]->download_raw(),
                              unfused.grads[static_cast<size_t>(k)]->download_raw()))
        << "stream " << k;
  // g itself: the unfused path's dx before the mix, i.e. d x_in / a; recomputed here from the unfused run with a = 1.
  BackwardCase plain = c;
  plain.a = MixCoefficient{};
  BackwardState reference(plain, 77);
  llmc::rmsnorm_backward(reference.dx.get(), reference.dxn.get(), reference.x.get(), reference.rstd.get(), c.T, c.C,
                         c.arriving, nullptr);
  const std::vector<double> g = reference.dx.download();
  const int T = c.T, C = c.C;
  // The gate columns: row dots of each stream's rows with g, written over the 7.0 prefill, the others untouched.
  const std::vector<double> gate = fused.dgate.download();
  std::vector<size_t> at;
  std::vector<double> zero;
  std::vector<std::vector<double>> rows;
  for (int k = 0; k < c.extra_streams; k++) rows.push_back(fused.rows[static_cast<size_t>(k)]->download());
  for (int t = 0; t < T; t++)
    for (int column = 0; column < kBackwardGateColumns; column++) {
      const size_t index = static_cast<size_t>(t) * kBackwardGateColumns + column;
      bool used = false;
      for (int k = 0; k < c.extra_streams; k++) used = used || kBackwardColumns[k] == column;
      if (!used) {
        EXPECT_EQ(gate[index], 7.0);
      }
    }
  for (int k = 0; k < c.extra_streams; k++) {
    at.clear();
    zero.clear();
    for (int t = 0; t < T; t++) {
      at.push_back(static_cast<size_t>(t) * kBackwardGateColumns + kBackwardColumns[k]);
      zero.push_back(0.0);
    }
    const std::vector<double>& s = rows[static_cast<size_t>(k)];
    EXPECT_TRUE(sums_within_bound(gate, at, C, [&](size_t t, int j) { return s[t * C + j] * g[t * C + j]; }, zero))
        << "gate dots of stream " << k;
  }
  // The scalars: dscalars[index] += derivative * sum(x_in g) (and y's): the models' kinds have derivative +-1.
  const std::vector<double> x_in = fused.x_in.download(), y = fused.y.download(), got = fused.dscalars.download();
  const std::vector<double> initial = {0.25, -0.5, 0.125, 1.0};
  auto derivative = [](MixCoefficient k) { return k.kind == MixScalar::kNegated ? -1.0 : 1.0; };
  for (const auto& [coefficient, operand_pointer] : {std::pair{c.a, &x_in}, std::pair{c.b, &y}}) {
    const std::vector<double>* operand = operand_pointer;
    if (coefficient.kind == MixScalar::kOne || (operand == &y && !c.with_y)) continue;
    const double sign = derivative(coefficient);
    EXPECT_TRUE(sums_within_bound(got, {static_cast<size_t>(coefficient.index)}, T * C,
                                  [&](size_t, int j) { return sign * (*operand)[j] * g[j]; },
                                  {initial[static_cast<size_t>(coefficient.index)]}))
        << "scalar " << coefficient.index;
  }
}

TEST(ResidualNormKernel, BackwardIsTheUnfusedKernelsGradientsInTheModelsUses) {
  LLMC_REQUIRE_GPU();
  const MixCoefficient one{}, l0{MixScalar::kIdentity, 0}, l1{MixScalar::kIdentity, 1};
  const MixCoefficient r{MixScalar::kBf16Copy, 2}, p{MixScalar::kBf16Copy, 3}, backout{MixScalar::kNegated, 1};
  expect_backward_equals_unfused({"#44 block: x_mix = l0 x_in + l1 x0", 37, 768, true, l0, l1, true, true, 0});
  expect_backward_equals_unfused(
      {"#44 head: x_final = last - lambda kept", 37, 768, false, one, backout, true, true, 0});
  expect_backward_equals_unfused({"#89 attention: r x + p attn + g x0 + g' b", 37, 768, true, r, p, true, false, 2});
  expect_backward_equals_unfused({"#89 final: x + 5 gated streams", 37, 768, false, one, one, false, false, 5});
  expect_backward_equals_unfused({"narrow rows", 9, 64, true, r, p, true, true, 3});
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

  const BackwardCase b{"refusals", 9, 64, true, {MixScalar::kIdentity, 0}, {}, true, false, 1};
  BackwardState s(b, 5);
  const llmc::ResidualNormBackwardIn norm{s.dxn.get(), s.x.get(), s.rstd.get(), nullptr};
  const llmc::ResidualMixGrads grads{{s.dx.get(), b.C}, false, {nullptr, b.C}, false, s.dscalars.get()};
  EXPECT_THROW(llmc::residual_norm_backward(grads, norm, s.extra(b), s.mix(b), b.T, b.C, s.scratch.get(), 2, nullptr),
               std::invalid_argument);  // scratch for one block of rows, two needed
  llmc::ResidualMixGrads no_scalars = grads;
  no_scalars.dscalars = nullptr;  // coefficient a is a scalar's
  EXPECT_THROW(llmc::residual_norm_backward(no_scalars, norm, s.extra(b), s.mix(b), b.T, b.C, s.scratch.get(),
                                            s.scratch.size(), nullptr),
               std::invalid_argument);
  EXPECT_EQ(llmc::residual_norm_backward_scratch_floats(9), 4u);
}

}  // namespace
