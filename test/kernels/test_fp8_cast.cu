// The FP8 head's cast kernels, llmc/kernels/fp8_cast.cuh and fp8_cast_transpose.cuh (one file for both: each test
// checks both kernels' codes for the same inputs), fp32 and bf16 inputs, e4m3 and e5m2 outputs: fp8_cast and
// fp8_cast_transpose (with and without its straight copy, tiles cut at the edges) give exactly the codes of the
// emulation's conversion model (llmc/emu/fp8_convert.h, itself checked against ml_dtypes in test_fp8_format.cu)
// applied to in / scale with IEEE division, for values from underflow to saturation, the scale given by value or
// read on the device; fp8_transpose copies codes exactly; misuse is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "llmc/cuda/fp8.h"
#include "llmc/kernels/fp8_cast.cuh"
#include "llmc/kernels/fp8_cast_transpose.cuh"
#include "test/support/device_buffer.h"
#include "test/support/gpu_test.h"

namespace {

using llmc::test::DeviceBuffer;

// Values v with |v / scale| log-uniform from far below the smallest subnormal to 4x past saturation, a few
// exact zeros, each representable in In.
template <class In, class Fp8>
std::vector<double> cast_inputs(size_t n, float scale, std::mt19937& rng) {
  const double max_finite = llmc::Fp8Traits<Fp8>::kMaxFinite;
  const double smallest = llmc::emu::fp8_decode(1, llmc::Fp8Traits<Fp8>::kFormat);
  std::uniform_real_distribution<double> log2_magnitude(std::log2(smallest) - 3.0, std::log2(max_finite) + 2.0);
  std::vector<double> values(n);
  for (size_t i = 0; i < n; i++) {
    const double magnitude = i % 37 == 0 ? 0.0 : scale * std::exp2(log2_magnitude(rng));
    const float value = static_cast<float>(rng() % 2 == 0 ? magnitude : -magnitude);
    values[i] = llmc::to_float(llmc::from_float<In>(value));
  }
  return values;
}

template <class Fp8>
uint8_t expected_code(double value, float scale) {
  return llmc::emu::fp8_encode(static_cast<float>(value) / scale, llmc::Fp8Traits<Fp8>::kFormat);
}

template <class In, class Fp8>
void check_casts(int rows, int cols, float scale, unsigned seed) {
  std::mt19937 rng(seed);
  const size_t n = static_cast<size_t>(rows) * cols;
  const std::vector<double> values = cast_inputs<In, Fp8>(n, scale, rng);
  DeviceBuffer<In> d_in(n);
  d_in.upload(values);
  DeviceBuffer<Fp8> d_straight(n), d_transposed(n), d_cast(n), d_transposed_only(n);
  // The straight cast and the transpose-only cast read the scale on the device (the FP8 MLP's), the other
  // one takes it by value (the head's); a wrong host value (2 scale) shows where the device's was ignored.
  const DeviceBuffer<float> d_scale(std::vector<float>{scale});
  llmc::fp8_cast(d_cast.get(), d_in.get(), n, 2.0f * scale, nullptr, d_scale.get());
  llmc::fp8_cast_transpose(d_transposed.get(), d_straight.get(), d_in.get(), rows, cols, scale, nullptr);
  llmc::fp8_cast_transpose(d_transposed_only.get(), static_cast<Fp8*>(nullptr), d_in.get(), rows, cols, 2.0f * scale,
                           nullptr, d_scale.get());
  const std::vector<Fp8> cast = d_cast.download_raw(), straight = d_straight.download_raw(),
                         transposed = d_transposed.download_raw(), transposed_only = d_transposed_only.download_raw();
  int failures = 0;
  for (int r = 0; r < rows && failures < 5; r++) {
    for (int c = 0; c < cols && failures < 5; c++) {
      const size_t index = static_cast<size_t>(r) * cols + c, transposed_index = static_cast<size_t>(c) * rows + r;
      const int expected = expected_code<Fp8>(values[index], scale);
      const int got[] = {cast[index].__x, straight[index].__x, transposed[transposed_index].__x,
                         transposed_only[transposed_index].__x};
      const char* names[] = {"fp8_cast", "fp8_cast_transpose straight", "fp8_cast_transpose", "transpose only"};
      for (int k = 0; k < 4; k++) {
        if (got[k] != expected) {
          ADD_FAILURE() << names[k] << " " << llmc::Fp8Traits<Fp8>::kName << " " << rows << "x" << cols << " at (" << r
                        << "," << c << "): input " << values[index] << " / " << scale << " gave 0x" << std::hex
                        << got[k] << ", expected 0x" << expected;
          failures++;
        }
      }
    }
  }
}

template <class In, class Fp8>
void check_all_shapes(float scale, unsigned seed) {
  const int shapes[][2] = {{16, 16}, {80, 144}, {192, 64}, {64, 208}, {144, 272}};
  for (const auto& shape : shapes) check_casts<In, Fp8>(shape[0], shape[1], scale, seed++);
}

// The head's scales: x_s = sqrt(768)/448 (not a power of two: the division rounds), w_s = 2^-9, g_s = 1/448.
TEST(Fp8Cast, Fp32ToE4M3) {
  LLMC_REQUIRE_GPU();
  check_all_shapes<float, llmc::fp8e4m3>(0.0618589f, 8100);
}
TEST(Fp8Cast, Bf16ToE4M3) {
  LLMC_REQUIRE_GPU();
  check_all_shapes<__nv_bfloat16, llmc::fp8e4m3>(0.001953125f, 8200);
}
TEST(Fp8Cast, Bf16ToE5M2) {
  LLMC_REQUIRE_GPU();
  check_all_shapes<__nv_bfloat16, llmc::fp8e5m2>(1.0f / 448.0f, 8300);
}
TEST(Fp8Cast, Fp32ToE5M2) {
  LLMC_REQUIRE_GPU();
  check_all_shapes<float, llmc::fp8e5m2>(1.0f / 448.0f, 8400);
}

// Every byte value (NaN and infinity patterns too) lands transposed, unchanged, tiles cut at the edges.
TEST(Fp8Cast, TransposeCopiesCodesExactly) {
  LLMC_REQUIRE_GPU();
  const int shapes[][2] = {{16, 16}, {80, 144}, {192, 64}, {64, 208}};
  std::mt19937 rng(8500);
  for (const auto& shape : shapes) {
    const int rows = shape[0], cols = shape[1];
    const size_t n = static_cast<size_t>(rows) * cols;
    std::vector<llmc::fp8e5m2> codes(n);
    for (llmc::fp8e5m2& code : codes) code.__x = static_cast<uint8_t>(rng() & 0xffu);
    const DeviceBuffer<llmc::fp8e5m2> d_in(codes);
    DeviceBuffer<llmc::fp8e5m2> d_out(n);
    llmc::fp8_transpose(d_out.get(), d_in.get(), rows, cols, nullptr);
    const std::vector<llmc::fp8e5m2> transposed = d_out.download_raw();
    int failures = 0;
    for (int r = 0; r < rows && failures < 5; r++)
      for (int c = 0; c < cols && failures < 5; c++) {
        const int got = transposed[static_cast<size_t>(c) * rows + r].__x;
        const int expected = codes[static_cast<size_t>(r) * cols + c].__x;
        if (got != expected) {
          ADD_FAILURE() << rows << "x" << cols << " at (" << r << "," << c << "): 0x" << std::hex << got
                        << ", expected 0x" << expected;
          failures++;
        }
      }
  }
}

TEST(Fp8Cast, RefusesSizesAndAlignmentTheVectorAccessCannotTake) {
  LLMC_REQUIRE_GPU();
  DeviceBuffer<float> d_in(64 * 64);
  DeviceBuffer<llmc::fp8e4m3> d_out(64 * 64), d_out_t(64 * 64);
  EXPECT_THROW(llmc::fp8_cast(d_out.get(), d_in.get(), 40, 1.0f, nullptr), std::invalid_argument);
  EXPECT_THROW(llmc::fp8_cast(d_out.get() + 1, d_in.get(), 32, 1.0f, nullptr), std::invalid_argument);
  EXPECT_THROW(llmc::fp8_cast(d_out.get(), d_in.get() + 1, 32, 1.0f, nullptr), std::invalid_argument);
  EXPECT_THROW(llmc::fp8_cast_transpose(d_out_t.get(), d_out.get(), d_in.get(), 64, 40, 1.0f, nullptr),
               std::invalid_argument);
  EXPECT_THROW(llmc::fp8_cast_transpose(d_out_t.get(), d_out.get(), d_in.get(), 8, 64, 1.0f, nullptr),
               std::invalid_argument);
  EXPECT_THROW(llmc::fp8_cast_transpose(d_out_t.get() + 8, d_out.get(), d_in.get(), 64, 64, 1.0f, nullptr),
               std::invalid_argument);
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
