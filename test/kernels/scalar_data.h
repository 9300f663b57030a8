// Shared by the speedrun kernel tests of the smear gate and the residual mixes (test_smear_gate.cu,
// test_residual_mix.cu): the model's scalar vector on the device, random fp32 values with a prefilled
// gradient buffer, which those kernels read by index and add their scalar gradients into.
#pragma once

#include <cstddef>
#include <random>
#include <vector>

#include "test/support/device_buffer.h"

namespace llmc::test {

inline constexpr int kNumScalars = 64;

// Scalars on the device (random, fp32) and their gradient buffer (prefilled, random).
struct ScalarData {
  std::vector<double> values, grads;
  DeviceBuffer<float> d_values{static_cast<size_t>(kNumScalars)}, d_grads{static_cast<size_t>(kNumScalars)};
  explicit ScalarData(std::mt19937& rng) {
    std::uniform_real_distribution<double> distribution(-1.5, 1.5);
    for (int i = 0; i < kNumScalars; i++) {
      values.push_back(static_cast<float>(distribution(rng)));
      grads.push_back(static_cast<float>(distribution(rng)));
    }
    d_values.upload(values);
    d_grads.upload(grads);
  }
};

}  // namespace llmc::test
