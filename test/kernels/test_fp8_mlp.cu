// The FP8 MLP's memory-bound kernels (llmc/kernels/fp8_mlp.cuh) against host formulas, bit for bit: the
// absolute maximum (exact, order-free), scales from a maximum, ReLU^2 with its e4m3 copy and maximum, and the up
// projection's weight copy in the record's bf16 arithmetic. The codes come from the emulation's conversion model
// (llmc/emu/fp8_convert.h, checked against ml_dtypes in test_fp8_format.cu). Built for fp32 and bf16 activations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "llmc/base/bf16_bits.h"
#include "llmc/cuda/fp8.h"
#include "llmc/emu/fp8_convert.h"
#include "llmc/kernels/fp8_mlp.cuh"
#include "test/support/device_buffer.h"
#include "test/support/gpu_test.h"

namespace {

using llmc::floatX;
using llmc::test::DeviceBuffer;

float round_to_floatx(double value) { return llmc::to_float(llmc::from_float<floatX>(static_cast<float>(value))); }
float round_to_bf16(float value) { return llmc::bf16_bits_to_float(llmc::float_to_bf16_bits(value)); }
uint8_t e4m3_code(float value) { return llmc::emu::fp8_encode(value, llmc::emu::Fp8Format::kE4M3); }

// n values N(0, sigma) rounded to floatX, a few exact zeros.
std::vector<double> normal_values(size_t n, double sigma, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, sigma);
  std::vector<double> values(n);
  for (size_t i = 0; i < n; i++) values[i] = i % 29 == 0 ? 0.0 : round_to_floatx(normal(rng));
  return values;
}

float device_value(const DeviceBuffer<float>& buffer) { return buffer.download_raw()[0]; }

TEST(Fp8MlpKernels, AbsMaxIsExactAndTheSameEveryRun) {
  LLMC_REQUIRE_GPU();
  std::mt19937 rng(9100);
  for (size_t n : {size_t{1}, size_t{1000}, size_t{100003}}) {
    const std::vector<double> values = normal_values(n, 3.0, rng);
    DeviceBuffer<floatX> d_in(n);
    d_in.upload(values);
    DeviceBuffer<float> d_amax(std::vector<float>{-7.0f});  // stale contents: the launcher zeroes it first
    double largest = 0.0;
    for (double v : values) largest = std::max(largest, std::fabs(v));
    for (int run = 0; run < 2; run++) {
      llmc::abs_max(d_amax.get(), d_in.get(), n, nullptr);
      EXPECT_EQ(device_value(d_amax), static_cast<float>(largest)) << n << " values, run " << run;
    }
  }
  DeviceBuffer<float> d_amax(std::vector<float>{5.0f});
  llmc::abs_max(d_amax.get(), static_cast<const floatX*>(nullptr), 0, nullptr);
  EXPECT_EQ(device_value(d_amax), 0.0f) << "no values: 0";
}

TEST(Fp8MlpKernels, ScaleFromAmaxKeepsTheOldOneWhenAsked) {
  LLMC_REQUIRE_GPU();
  const float factor = llmc::fp8_mlp_scale_factor(1.80);
  EXPECT_EQ(factor, static_cast<float>(1.80 / 448.0));
  for (float amax : {0.0f, 1e-20f, 3.5f, 1234.5f}) {
    DeviceBuffer<float> d_amax(std::vector<float>{amax}), d_scale(std::vector<float>{0.25f}), d_used(1);
    llmc::fp8_scale_from_amax(d_scale.get(), d_used.get(), d_amax.get(), factor, nullptr);
    EXPECT_EQ(device_value(d_scale), std::max(amax, 1e-12f) * factor) << "amax " << amax;
    EXPECT_EQ(device_value(d_used), 0.25f) << "the scale before the update";
  }
}

// post = relu(pre)^2 rounded to floatX; codes = e4m3(min(post * (1 / s), 448)); the maximum of post. Activation
// scales from one that saturates most values to one that leaves most subnormal.
TEST(Fp8MlpKernels, ReluSquaredWritesPostItsCodesAndItsMaximum) {
  LLMC_REQUIRE_GPU();
  std::mt19937 rng(9200);
  const size_t n = 16 * 1037;
  for (float s_act : {1.0f, 0.004f, 37.0f}) {
    const std::vector<double> pre = normal_values(n, 2.0, rng);
    DeviceBuffer<floatX> d_pre(n), d_post(n);
    d_pre.upload(pre);
    DeviceBuffer<llmc::fp8e4m3> d_codes(n);
    DeviceBuffer<float> d_amax(std::vector<float>{-1.0f}), d_scale(std::vector<float>{s_act});
    llmc::relu_squared_fp8_forward(d_post.get(), d_codes.get(), d_amax.get(), d_pre.get(), d_scale.get(), n, nullptr);
    const std::vector<double> post = d_post.download();
    const std::vector<llmc::fp8e4m3> codes = d_codes.download_raw();
    const float inverse = 1.0f / s_act;
    double largest = 0.0;
    int failures = 0;
    for (size_t i = 0; i < n && failures < 5; i++) {
      const float p = static_cast<float>(pre[i]);
      const float expected_post = round_to_floatx(p > 0.0f ? p * p : 0.0f);
      largest = std::max(largest, static_cast<double>(expected_post));
      const int expected_code = e4m3_code(std::fmin(expected_post * inverse, 448.0f));
      if (post[i] != expected_post || codes[i].__x != expected_code) {
        ADD_FAILURE() << "s_act " << s_act << " at " << i << ": pre " << p << " gave post " << post[i] << " code 0x"
                      << std::hex << int{codes[i].__x} << ", expected " << expected_post << " 0x" << expected_code;
        failures++;
      }
    }
    EXPECT_EQ(device_value(d_amax), static_cast<float>(largest)) << "s_act " << s_act;
  }
}

// s = bf16(max(amax, bf16(1e-12)) / 448) and codes = e4m3(bf16(w / s)), as the record's eager bf16 code; an
// all-zero matrix keeps a finite scale and zero codes.
TEST(Fp8MlpKernels, UpWeightsAreQuantisedInBf16Arithmetic) {
  LLMC_REQUIRE_GPU();
  std::mt19937 rng(9300);
  const size_t n = 64 * 256;
  for (double sigma : {0.02, 0.0}) {
    const std::vector<double> weights = normal_values(n, sigma, rng);
    DeviceBuffer<floatX> d_weights(n);
    d_weights.upload(weights);
    DeviceBuffer<float> d_amax(1), d_scale(1);
    DeviceBuffer<llmc::fp8e4m3> d_codes(n);
    llmc::abs_max(d_amax.get(), d_weights.get(), n, nullptr);
    llmc::fp8_up_weights(d_codes.get(), d_scale.get(), d_amax.get(), d_weights.get(), n, nullptr);
    double largest = 0.0;
    for (double w : weights) largest = std::max(largest, std::fabs(w));
    const float scale = round_to_bf16(std::fmax(static_cast<float>(largest), round_to_bf16(1e-12f)) / 448.0f);
    EXPECT_EQ(device_value(d_scale), scale) << "sigma " << sigma;
    const std::vector<llmc::fp8e4m3> codes = d_codes.download_raw();
    int failures = 0;
    for (size_t i = 0; i < n && failures < 5; i++) {
      const int expected = e4m3_code(round_to_bf16(static_cast<float>(weights[i]) / scale));
      if (codes[i].__x != expected) {
        ADD_FAILURE() << "at " << i << ": w " << weights[i] << " gave 0x" << std::hex << int{codes[i].__x}
                      << ", expected 0x" << expected;
        failures++;
      }
    }
  }
}

TEST(Fp8MlpKernels, LaunchersRefuseWhatTheVectorAccessCannotTake) {
  LLMC_REQUIRE_GPU();
  DeviceBuffer<floatX> d_pre(64), d_post(64);
  DeviceBuffer<llmc::fp8e4m3> d_codes(64);
  DeviceBuffer<float> d_amax(1), d_scale(std::vector<float>{1.0f});
  EXPECT_THROW(llmc::relu_squared_fp8_forward(d_post.get(), d_codes.get(), d_amax.get(), d_pre.get(), d_scale.get(),
                                              40, nullptr),
               std::invalid_argument);
  EXPECT_THROW(llmc::relu_squared_fp8_forward(d_post.get(), d_codes.get() + 1, d_amax.get(), d_pre.get(),
                                              d_scale.get(), 32, nullptr),
               std::invalid_argument);
  EXPECT_THROW(llmc::relu_squared_fp8_forward(d_post.get(), d_codes.get(), d_amax.get(), d_pre.get(), nullptr, 32,
                                              nullptr),
               std::invalid_argument);
  EXPECT_THROW(llmc::abs_max(static_cast<float*>(nullptr), d_pre.get(), 64, nullptr), std::invalid_argument);
}

}  // namespace
