// Shared by the FP8 GEMM and FP8 head tests: random fp8 matrices (codes plus their exact values) and the
// error bound of an FP8 tensor-core dot product, derived below, with the tolerance of a whole FP8 GEMM.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "llmc/emu/fp8_convert.h"

namespace llmc::test {

// The accumulator the bound assumes (docs/fp8.md): in every MMA step of kMmaDepth products, each addend (the
// running sum included) is rounded in any direction to a grid no coarser than 2^(E - kFractionBits), E the
// exponent of the largest addend; with fast accumulation the running sum spans all of K, otherwise it
// restarts every kPromotionDepth and is added to an fp32 sum. This is the emulation's model
// (llmc/emu/cpu_fp8_gemm.h) and what DeepSeek-V3 measured on Hopper (about 14 significant bits).
inline constexpr int kMmaDepth = 32;
inline constexpr int kPromotionDepth = 128;
inline constexpr int kFractionBits = 13;

struct Fp8Matrix {
  std::vector<uint8_t> codes;
  std::vector<double> values;  // the codes' exact values
};

// Values N(0, sigma) (a tenth of them exactly zero), encoded (saturating) in `format`.
inline Fp8Matrix random_fp8_matrix(size_t count, llmc::emu::Fp8Format format, double sigma, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, sigma);
  std::uniform_int_distribution<int> tenth(0, 9);
  Fp8Matrix matrix;
  matrix.codes.resize(count);
  matrix.values.resize(count);
  for (size_t i = 0; i < count; i++) {
    const float value = tenth(rng) == 0 ? 0.0f : static_cast<float>(normal(rng));
    matrix.codes[i] = llmc::emu::fp8_encode(value, format);
    matrix.values[i] = llmc::emu::fp8_decode(matrix.codes[i], format);
  }
  return matrix;
}

struct DotWithBound {
  double exact;  // the exact dot product (double; products are exact, the sum has error ~K 2^-53)
  double bound;  // |computed - exact| <= bound for the accumulator above
};

// Derivation. An MMA step adds n <= kMmaDepth products p_i to the running sum s (carrying an error e so
// far). Each of the n + 1 addends moves by less than one grid step 2^(E - kFractionBits) <= 2^-kFractionBits
// * max(|s|, |p_i|), and |s| <= |S| + e with S the exact partial sum: e grows by (n + 1) 2^-kFractionBits
// max(|S| + e, max |p_i|). A promotion adds the partial sum (error e) to an fp32 sum: one more rounding,
// <= 2^-24 (|exact sum so far| + total error). The last term of the product sum (double, ~K 2^-53 sum |p|)
// is covered by adding that too.
inline DotWithBound fp8_dot_with_bound(const double* a, const double* b, int k, bool fast_accumulation) {
  const double grid = std::ldexp(1.0, -kFractionBits);
  double exact = 0.0, partial = 0.0, partial_error = 0.0, promoted_error = 0.0, absolute_sum = 0.0;
  for (int k0 = 0; k0 < k; k0 += kMmaDepth) {
    const int count = k - k0 < kMmaDepth ? k - k0 : kMmaDepth;
    double largest = std::fabs(partial) + partial_error;
    for (int i = 0; i < count; i++) {
      const double product = a[k0 + i] * b[k0 + i];
      largest = std::fmax(largest, std::fabs(product));
      partial += product;
      absolute_sum += std::fabs(product);
    }
    partial_error += (count + 1) * grid * largest;
    const bool promote = (k0 + count) % kPromotionDepth == 0 || k0 + count == k;
    if (!fast_accumulation && promote) {
      exact += partial;
      promoted_error += partial_error + std::ldexp(1.0, -24) * (std::fabs(exact) + promoted_error + partial_error);
      partial = 0.0;
      partial_error = 0.0;
    }
  }
  if (fast_accumulation) {
    exact = partial;
    promoted_error = partial_error;
  }
  return {exact, promoted_error + k * std::ldexp(1.0, -53) * absolute_sum};
}

// Tolerance of one element of D = scale * dot + addend (addend = beta * D before) after the epilogue: the
// dot's bound times |scale|, plus four fp32 roundings (alpha * a_scale * b_scale, the product, the addition)
// and the rounding to D's type (unit roundoff output_roundoff), all relative to the largest magnitude.
inline double fp8_gemm_tolerance(const DotWithBound& dot, double scale, double addend, double output_roundoff) {
  const double magnitude = std::fabs(scale) * (std::fabs(dot.exact) + dot.bound) + std::fabs(addend);
  return std::fabs(scale) * dot.bound +
         (4.0 * std::ldexp(1.0, -24) + output_roundoff) * magnitude * (1.0 + output_roundoff);
}

}  // namespace llmc::test
