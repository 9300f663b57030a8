// float <-> bfloat16 conversion on raw 16-bit patterns, for host code that must not depend on CUDA
// headers (checkpoint files). Rounds to nearest, ties to even, like __float2bfloat16; NaN stays NaN.
#pragma once

#include <cstdint>
#include <cstring>

namespace llmc {

inline uint16_t float_to_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  // Adding 0x7fff plus the lowest kept bit rounds to nearest and breaks ties toward an even result;
  // overflow past the largest finite value correctly carries into infinity.
  const uint32_t lowest_kept_bit = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7fffu + lowest_kept_bit) >> 16);
}

inline float bf16_bits_to_float(uint16_t half_bits) {
  const uint32_t bits = static_cast<uint32_t>(half_bits) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace llmc
