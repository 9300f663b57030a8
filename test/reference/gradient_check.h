// Shared helpers of the reference tests: random vectors, dot products, and the central finite-difference
// check of an analytic gradient.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "llmc/base/normal_sampler.h"

namespace gradient_check {

inline std::vector<double> random_vector(size_t n, llmc::NormalSampler& normal, double scale = 1.0) {
  std::vector<double> v(n);
  for (double& x : v) x = scale * normal.next();
  return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); i++) sum += a[i] * b[i];
  return sum;
}

inline std::vector<size_t> all_indices(size_t n) {
  std::vector<size_t> indices(n);
  for (size_t i = 0; i < n; i++) indices[i] = i;
  return indices;
}

// Backward functions accumulate: start every gradient at a random prefill and subtract it afterwards.
inline std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); i++) d[i] = a[i] - b[i];
  return d;
}

// Central differences with step h have error ~h^2 |f'''| / 6 (truncation) + ~eps |f| / h (rounding),
// about 1e-10 for O(1) functions with h = 1e-5, so 1e-6 relative with a 1e-9 floor is ample for a
// correct gradient and far tighter than any wrong term would be.
struct Tolerance {
  double step = 1e-5;
  double relative = 1e-6;
  double absolute = 1e-9;
};

// Perturbs x[i] for each index, evaluates f, and compares the central difference with analytic[i].
inline void expect_gradient_matches(const std::string& name, std::vector<double>& x,
                                    const std::vector<double>& analytic, const std::function<double()>& f,
                                    const std::vector<size_t>& indices, const Tolerance& tol = Tolerance{}) {
  for (size_t i : indices) {
    const double saved = x[i];
    x[i] = saved + tol.step;
    const double up = f();
    x[i] = saved - tol.step;
    const double down = f();
    x[i] = saved;
    const double numeric = (up - down) / (2 * tol.step);
    EXPECT_NEAR(analytic[i], numeric, tol.relative * std::abs(numeric) + tol.absolute) << name << "[" << i << "]";
  }
}

// d objective / d values[i] for every i by central differences (values restored after each).
inline std::vector<double> central_differences(std::vector<double>& values, const std::function<double()>& objective,
                                               double step = 1e-6) {
  std::vector<double> out(values.size());
  for (size_t i = 0; i < values.size(); i++) {
    const double saved = values[i];
    values[i] = saved + step;
    const double up = objective();
    values[i] = saved - step;
    const double down = objective();
    values[i] = saved;
    out[i] = (up - down) / (2 * step);
  }
  return out;
}

inline std::vector<double> plus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); i++) d[i] = a[i] + b[i];
  return d;
}

}  // namespace gradient_check
