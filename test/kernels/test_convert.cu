// Tests of llmc/kernels/convert.cuh: convert rounds once to nearest even (bf16) or copies, and add_into
// sums two buffers with one rounding, element for element as the host conversions of cuda_bf16.h do it,
// over lengths that are not multiples of the block. Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <cmath>
#include <random>
#include <vector>

#include "llmc/kernels/convert.cuh"
#include "test/support/device_buffer.h"
#include "test/support/gpu_test.h"

namespace {

using llmc::test::DeviceBuffer;

std::vector<float> wide_values(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 30);
  std::vector<float> values(n);
  for (float& value : values) value = std::ldexp(mantissa(rng), exponent(rng));
  return values;
}

TEST(Convert, RoundsOnceToNearestEvenOrCopies) {
  LLMC_REQUIRE_GPU();
  const size_t n = 1000;
  const std::vector<float> values = wide_values(n, 31);
  DeviceBuffer<float> source(values), copy(n);
  DeviceBuffer<__nv_bfloat16> rounded(n);
  llmc::convert(rounded.get(), source.get(), n, nullptr);
  llmc::convert(copy.get(), source.get(), n, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<__nv_bfloat16> got = rounded.download_raw();
  for (size_t i = 0; i < n; i++)
    ASSERT_EQ(__bfloat16_as_ushort(got[i]), __bfloat16_as_ushort(__float2bfloat16(values[i]))) << i;
  EXPECT_EQ(copy.download_raw(), values);
}

TEST(Convert, AddIntoRoundsTheSumOnce) {
  LLMC_REQUIRE_GPU();
  const size_t n = 777;
  std::vector<__nv_bfloat16> grads(n), saved(n);
  const std::vector<float> a = wide_values(n, 32), b = wide_values(n, 33);
  for (size_t i = 0; i < n; i++) {
    grads[i] = __float2bfloat16(a[i]);
    saved[i] = __float2bfloat16(b[i]);
  }
  DeviceBuffer<__nv_bfloat16> d_grads(grads), d_saved(saved);
  llmc::add_into(d_grads.get(), d_saved.get(), n, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<__nv_bfloat16> got = d_grads.download_raw();
  for (size_t i = 0; i < n; i++) {
    const __nv_bfloat16 expected = __float2bfloat16(__bfloat162float(grads[i]) + __bfloat162float(saved[i]));
    ASSERT_EQ(__bfloat16_as_ushort(got[i]), __bfloat16_as_ushort(expected)) << i;
  }
}

}  // namespace
