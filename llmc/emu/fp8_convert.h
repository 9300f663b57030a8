// The emulation's model of the two FP8 formats of Hopper (OCP e4m3fn and e5m2): decoding every code and
// encoding a float as the GPU's cvt.rn.satfinite does (round to nearest even, saturate to the largest
// finite value, NaN to the canonical NaN 0x7f). Pure C++: host code of either build may use it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace llmc::emu {

enum class Fp8Format { kE4M3, kE5M2 };

// Bit layout of one format: 1 sign bit, `exponent_bits`, `mantissa_bits`; the code of the largest finite
// magnitude. e4m3fn has no infinity (S.1111.111 is its only NaN, so 448 = S.1111.110 is the maximum);
// e5m2 follows IEEE (S.11111.00 is infinity, 57344 = S.11110.11 the maximum).
struct Fp8Layout {
  int exponent_bits;
  int mantissa_bits;
  int bias;
  uint8_t max_finite_code;
};

constexpr Fp8Layout fp8_layout(Fp8Format format) {
  return format == Fp8Format::kE4M3 ? Fp8Layout{4, 3, 7, 0x7e} : Fp8Layout{5, 2, 15, 0x7b};
}

inline constexpr uint8_t kFp8CanonicalNan = 0x7f;  // a NaN in both formats; what cvt.rn.satfinite gives for NaN

// The value of a code (NaN and, for e5m2, +-infinity included).
inline float fp8_decode(uint8_t code, Fp8Format format) {
  const Fp8Layout layout = fp8_layout(format);
  const bool negative = (code & 0x80) != 0;
  const int exponent_field = (code & 0x7f) >> layout.mantissa_bits;
  const int mantissa = code & ((1 << layout.mantissa_bits) - 1);
  const int exponent_all_ones = (1 << layout.exponent_bits) - 1;
  float magnitude;
  if (format == Fp8Format::kE4M3 && (code & 0x7f) == 0x7f) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (format == Fp8Format::kE5M2 && exponent_field == exponent_all_ones) {
    magnitude = mantissa == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else if (exponent_field == 0) {  // subnormal: mantissa * 2^(1 - bias - mantissa_bits)
    magnitude = std::ldexp(static_cast<float>(mantissa), 1 - layout.bias - layout.mantissa_bits);
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa + (1 << layout.mantissa_bits)),
                           exponent_field - layout.bias - layout.mantissa_bits);
  }
  return negative ? -magnitude : magnitude;
}

// float -> code, round to nearest even, saturating: |x| past the largest finite value (infinity included)
// gives the largest finite value of x's sign, NaN gives kFp8CanonicalNan, a result rounded to zero keeps
// x's sign.
//
// Exact integer arithmetic on the float's bits: the float is s * 2^(e - 23) with a 24-bit significand s;
// the fp8 quantum at exponent e is 2^(max(e, e_min) - mantissa_bits), so the fp8 significand is s shifted
// right by `shift` bits, rounded to nearest even on the dropped bits. Then
// code = ((max(e, e_min) - e_min) << mantissa_bits) + rounded significand, which covers subnormals (the
// implicit bit absent), normals (the implicit bit lands in the exponent field) and a rounding carry (it
// moves into the exponent) alike.
inline uint8_t fp8_encode(float x, Fp8Format format) {
  const Fp8Layout layout = fp8_layout(format);
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t magnitude_bits = bits & 0x7fffffffu;
  if (magnitude_bits > 0x7f800000u) return kFp8CanonicalNan;
  const int min_exponent = 1 - layout.bias;
  const int max_exponent = (1 << layout.exponent_bits) - 1 - layout.bias;  // e5m2: the infinity's exponent
  const int float_exponent_field = static_cast<int>(magnitude_bits >> 23);
  if (float_exponent_field == 0) return sign;  // zero or a float subnormal (< 2^-126): rounds to zero
  const int exponent = float_exponent_field - 127;
  if (exponent > max_exponent) return static_cast<uint8_t>(sign | layout.max_finite_code);  // infinity too
  const uint32_t significand = (magnitude_bits & 0x7fffffu) | 0x800000u;
  const int quantum_exponent = exponent > min_exponent ? exponent : min_exponent;
  const int shift = 23 - layout.mantissa_bits + (quantum_exponent - exponent);
  if (shift > 24) return sign;  // below half the smallest subnormal (significand < 2^24 <= half quantum)
  uint32_t rounded = significand >> shift;
  const uint32_t dropped = significand & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (dropped > half || (dropped == half && (rounded & 1u) != 0)) rounded++;
  const uint32_t code = (static_cast<uint32_t>(quantum_exponent - min_exponent) << layout.mantissa_bits) + rounded;
  if (code > layout.max_finite_code) return static_cast<uint8_t>(sign | layout.max_finite_code);
  return static_cast<uint8_t>(sign | code);
}

// All 256 values of a format, for decoding in bulk (the CPU FP8 GEMM).
struct Fp8DecodeTable {
  float value[256];
  explicit Fp8DecodeTable(Fp8Format format) {
    for (int code = 0; code < 256; code++) value[code] = fp8_decode(static_cast<uint8_t>(code), format);
  }
};

inline const Fp8DecodeTable& fp8_decode_table(Fp8Format format) {
  static const Fp8DecodeTable e4m3(Fp8Format::kE4M3);  // immutable after construction
  static const Fp8DecodeTable e5m2(Fp8Format::kE5M2);
  return format == Fp8Format::kE4M3 ? e4m3 : e5m2;
}

}  // namespace llmc::emu
