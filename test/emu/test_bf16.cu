// bf16 and fp16 conversions in kernels must round exactly as CUDA does (round to nearest, ties to
// even, NaN stays NaN, overflow goes to infinity). Checked in both targets against independent
// models that pick the nearer of the two neighbouring representable values in exact double
// arithmetic (fp16: by search in the table of all 2^15 non-negative fp16 values).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "test/support/device_buffer.h"

namespace {

using llmc::test::DeviceBuffer;

float float_from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

// The value of a bf16 bit pattern's magnitude, with the all-ones exponent treated as 2^128 so that
// rounding up past the largest finite bf16 can be compared as a distance.
double bf16_magnitude(uint32_t high16) {
  if ((high16 & 0x7fffu) == 0x7f80u) return std::ldexp(1.0, 128);
  return std::fabs(static_cast<double>(float_from_bits(high16 << 16)));
}

// Reference: nearest of the two bf16 values enclosing x (toward and away from zero); on a tie the
// one with an even last mantissa bit. Returns the bf16 bit pattern.
uint16_t reference_float_to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if (std::isnan(x)) return 0x7fffu;  // any NaN; the test checks NaN-ness only
  const uint32_t sign = bits & 0x80000000u;
  const uint32_t toward_zero = (bits & 0x7fffffffu) >> 16;
  if (toward_zero == 0x7f80u) return static_cast<uint16_t>((sign >> 16) | toward_zero);  // inf
  const uint32_t away = toward_zero + 1;
  const double magnitude = std::fabs(static_cast<double>(x));
  const double below = bf16_magnitude(toward_zero), above = bf16_magnitude(away);
  uint32_t chosen;
  if (magnitude - below < above - magnitude) {
    chosen = toward_zero;
  } else if (magnitude - below > above - magnitude) {
    chosen = away;
  } else {
    chosen = (toward_zero & 1u) == 0 ? toward_zero : away;
  }
  return static_cast<uint16_t>((sign >> 16) | chosen);
}

std::vector<uint32_t> test_bit_patterns() {
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                               0xffc00001u, 0x7f800001u, 0x00000001u, 0x807fffffu, 0x7f7fffffu,
                               0xff7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x3f800000u, 0x3f808000u,
                               0x3f818000u, 0x3f80ffffu, 0x3f817fffu};
  std::vector<uint32_t> patterns(std::begin(specials), std::end(specials));
  std::mt19937 random(20261129);
  for (int i = 0; i < 4096; ++i) {
    // Exact halfway cases with even and odd kept bit, and their neighbours.
    const uint32_t high = random() & 0xffff0000u;
    patterns.push_back(high | 0x8000u);
    patterns.push_back(high | 0x7fffu);
    patterns.push_back(high | 0x8001u);
  }
  for (int i = 0; i < 100000; ++i) patterns.push_back(random());
  return patterns;
}

__global__ void float_to_bf16_kernel(const float* input, __nv_bfloat16* output, float* round_trip, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    output[i] = __float2bfloat16(input[i]);
    round_trip[i] = __bfloat162float(output[i]);
  }
}

TEST(Bf16, DeviceConversionRoundsToNearestEven) {
  const std::vector<uint32_t> patterns = test_bit_patterns();
  const int n = static_cast<int>(patterns.size());
  std::vector<float> input(n);
  for (int i = 0; i < n; ++i) input[i] = float_from_bits(patterns[i]);
  DeviceBuffer<float> d_in(input), d_round_trip(n);
  DeviceBuffer<__nv_bfloat16> d_out(n);
  LLMC_LAUNCH(float_to_bf16_kernel, (n + 255) / 256, 256, 0, nullptr, d_in.get(), d_out.get(),
              d_round_trip.get(), n);
  const std::vector<__nv_bfloat16> out = d_out.download_raw();
  const std::vector<float> round_trip = d_round_trip.download_raw();
  int mismatches = 0;
  for (int i = 0; i < n && mismatches < 10; ++i) {
    const uint16_t got = __bfloat16_as_ushort(out[i]);
    const uint16_t expected = reference_float_to_bf16(input[i]);
    const bool ok = std::isnan(input[i]) ? ((got & 0x7fffu) > 0x7f80u) : got == expected;
    if (!ok) {
      ++mismatches;
      ADD_FAILURE() << std::hex << "input bits 0x" << patterns[i] << ": got 0x" << got
                    << ", expected 0x" << expected;
    }
    // bf16 -> float is exact: the float's top 16 bits are the bf16.
    uint32_t back;
    std::memcpy(&back, &round_trip[i], 4);
    if (!std::isnan(input[i])) {
      EXPECT_EQ(back, static_cast<uint32_t>(got) << 16);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Bf16, HostConversionMatchesTheModelToo) {
  // The same headers serve host code (data preparation, references): same rounding there.
  for (uint32_t bits : test_bit_patterns()) {
    const float x = float_from_bits(bits);
    if (std::isnan(x)) continue;
    ASSERT_EQ(__bfloat16_as_ushort(__float2bfloat16(x)), reference_float_to_bf16(x)) << std::hex << bits;
  }
}

// ---- fp16 -------------------------------------------------------------------------------------

// Value of a non-negative fp16 bit pattern, decoded from the IEEE binary16 definition; the
// infinity pattern counts as 2^16, the value the next exponent would give, for rounding distances.
double half_value(uint32_t bits) {
  const int exponent = static_cast<int>((bits >> 10) & 0x1f);
  const int mantissa = static_cast<int>(bits & 0x3ff);
  if (exponent == 0) return std::ldexp(static_cast<double>(mantissa), -24);  // subnormal
  return std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
}

uint16_t reference_float_to_half(float x) {
  static const std::vector<double> table = [] {
    std::vector<double> values(0x7c01);  // 0x0000 .. 0x7c00 (inf as 2^16), increasing
    for (uint32_t bits = 0; bits <= 0x7c00; ++bits) values[bits] = half_value(bits);
    return values;
  }();
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double magnitude = std::fabs(static_cast<double>(x));
  if (std::isinf(x) || magnitude >= table.back()) return sign | 0x7c00;
  // First value >= magnitude; its predecessor is the neighbour below.
  const size_t above = static_cast<size_t>(std::lower_bound(table.begin(), table.end(), magnitude) - table.begin());
  if (table[above] == magnitude) return static_cast<uint16_t>(sign | above);
  const size_t below = above - 1;
  const double to_below = magnitude - table[below], to_above = table[above] - magnitude;
  size_t chosen;
  if (to_below < to_above) {
    chosen = below;
  } else if (to_below > to_above) {
    chosen = above;
  } else {
    chosen = (below & 1u) == 0 ? below : above;
  }
  return static_cast<uint16_t>(sign | chosen);
}

__global__ void float_to_half_kernel(const float* input, __half* output, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) output[i] = __float2half(input[i]);
}

TEST(Half, DeviceConversionRoundsToNearestEven) {
  std::vector<float> input;
  std::mt19937 random(42);
  // Around every fp16 exponent (incl. subnormals and overflow), with exact ties, plus random bits.
  for (int exponent = -26; exponent <= 17; ++exponent) {
    for (int step = 0; step < 300; ++step) {
      const float base = std::ldexp(1.0f + step / 256.0f, exponent);
      input.push_back(base);
      input.push_back(-base);
      input.push_back(std::nextafter(base, 0.0f));
    }
  }
  for (uint32_t bits : {0x477fe000u, 0x477fefffu, 0x477ff000u, 0x33000000u, 0x33000001u, 0x7f800000u, 0xff800000u}) {
    input.push_back(float_from_bits(bits));
  }
  for (int i = 0; i < 50000; ++i) input.push_back(float_from_bits(random()));
  const int n = static_cast<int>(input.size());
  DeviceBuffer<float> d_in(input);
  DeviceBuffer<__half> d_out(n);
  LLMC_LAUNCH(float_to_half_kernel, (n + 255) / 256, 256, 0, nullptr, d_in.get(), d_out.get(), n);
  const std::vector<__half> out = d_out.download_raw();
  int mismatches = 0;
  for (int i = 0; i < n && mismatches < 10; ++i) {
    const uint16_t got = __half_as_ushort(out[i]);
    if (std::isnan(input[i])) {
      if ((got & 0x7fffu) <= 0x7c00u) {
        ++mismatches;
        ADD_FAILURE() << "NaN input gave a non-NaN half 0x" << std::hex << got;
      }
      continue;
    }
    const uint16_t expected = reference_float_to_half(input[i]);
    if (got != expected) {
      ++mismatches;
      ADD_FAILURE() << std::hex << "input " << input[i] << ": got 0x" << got << ", expected 0x" << expected;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
