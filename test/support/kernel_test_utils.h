// Helpers for the kernel tests: seeded random inputs that are exactly representable in floatX (so the
// double-precision reference sees the very same numbers) and tolerance checks derived from the unit
// roundoff of the arithmetic under test. Device buffers: test/support/device_buffer.h.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "test/support/device_buffer.h"

namespace llmc::test {

using llmc::floatX;

// Unit roundoff of floatX (the relative error of one rounding to nearest) and of the fp32 arithmetic
// the kernels accumulate in.
#if defined(LLMC_FP32)
constexpr double kStorageRoundoff = 0x1p-24;  // fp32: 24-bit significand
#else
constexpr double kStorageRoundoff = 0x1p-8;  // bf16: 8-bit significand
#endif
constexpr double kFp32Roundoff = 0x1p-24;

// Tolerance for a result that went through `roundings` roundings to floatX (outputs and stored
// intermediates) and fp32 sums of up to `sum_length` terms (error bound ~ sum_length * u of the sum of
// absolute terms), with a factor 2 for the few-ulp error of expf/tanhf and for error growth through the
// other arithmetic. Errors are measured relative to |expected| + rms(expected), see expect_close.
inline double tolerance(int roundings, int sum_length) {
  return 2.0 * (roundings * kStorageRoundoff + sum_length * kFp32Roundoff);
}

// Uniform values in [low, high), rounded to floatX and returned in double.
inline std::vector<double> random_values(size_t n, std::mt19937& rng, double low = -1.0, double high = 1.0) {
  std::uniform_real_distribution<double> distribution(low, high);
  std::vector<double> values(n);
  for (double& value : values) value = llmc::to_float(llmc::from_float<floatX>(static_cast<float>(distribution(rng))));
  return values;
}

inline std::vector<double> round_to_floatx(const std::vector<double>& values) {
  std::vector<double> rounded(values.size());
  for (size_t i = 0; i < values.size(); i++)
    rounded[i] = llmc::to_float(llmc::from_float<floatX>(static_cast<float>(values[i])));
  return rounded;
}

inline double rms(const std::vector<double>& values) {
  double sum = 0.0;
  for (double value : values) sum += value * value;
  return values.empty() ? 0.0 : std::sqrt(sum / values.size());
}

// Every element of both finite and |got - expected| <= tol * (|expected| + rms(expected)) + absolute. The rms
// term keeps elements that are small by cancellation from demanding more relative accuracy than the
// arithmetic can give, while a wrong or missing element of typical size still fails. `absolute` is for
// results whose exact value cancels to ~0 in many places (the rms then understates the terms' size). The
// expected values are checked too: fmax drops a NaN, so a NaN in the reference would otherwise pass.
inline ::testing::AssertionResult all_close(const std::vector<double>& got, const std::vector<double>& expected,
                                            double tol, double absolute = 0.0) {
  if (got.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != expected " << expected.size();
  const double scale = rms(expected) > 0.0 ? rms(expected) : std::numeric_limits<double>::min();
  size_t bad = 0, worst = 0;
  double worst_error = 0.0;
  for (size_t i = 0; i < got.size(); i++) {
    const double error = std::fmax(std::fabs(got[i] - expected[i]) - absolute, 0.0) / (std::fabs(expected[i]) + scale);
    const bool finite = std::isfinite(got[i]) && std::isfinite(expected[i]);
    const bool ok = finite && error <= tol;
    if (!ok) bad++;
    if (!finite || error > worst_error || (!ok && bad == 1)) {
      worst_error = finite ? error : std::numeric_limits<double>::infinity();
      worst = i;
    }
  }
  std::ostringstream summary;
  summary << "max scaled error " << worst_error << " at [" << worst << "] (got " << got[worst] << ", expected "
          << expected[worst] << "), tolerance " << tol;
  if (absolute > 0.0) summary << " beyond an absolute " << absolute;
  summary << ", " << bad << " of " << got.size() << " elements fail";
  if (bad != 0) return ::testing::AssertionFailure() << summary.str();
  // LLMC_TEST_VERBOSE=1 shows how close passing comparisons come to their tolerance.
  if (std::getenv("LLMC_TEST_VERBOSE") != nullptr) std::printf("  all_close: %s\n", summary.str().c_str());
  return ::testing::AssertionSuccess() << summary.str();
}

template <typename T>
inline bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// ||got - want|| / ||want|| over n values (the optimizer tests' per-matrix error).
inline double relative_frobenius_error(const double* got, const double* want, size_t n) {
  double error = 0.0, norm = 0.0;
  for (size_t i = 0; i < n; i++) error += (got[i] - want[i]) * (got[i] - want[i]), norm += want[i] * want[i];
  return std::sqrt(error / norm);
}

}  // namespace llmc::test
