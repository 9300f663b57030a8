// worse_error and larger_magnitude: running maxima for checks that a NaN cannot slip past. std::max keeps its
// first argument against a NaN, so `worst = std::max(worst, error)` forgot a NaN result and the check passed.
#pragma once

#include <cmath>

namespace llmc {

// The worse of the errors so far and a new one; a NaN, once seen, stays.
inline double worse_error(double worst, double error) {
  return std::isnan(worst) || error <= worst ? worst : error;
}

// The larger of the magnitudes so far and |value|; a NaN, once seen, stays (so "all zero" fails on NaN values).
inline double larger_magnitude(double largest, double value) { return worse_error(largest, std::fabs(value)); }

}  // namespace llmc
