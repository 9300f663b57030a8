// worse_error: a running maximum of errors for a tolerance check that a NaN cannot slip past. std::max keeps its
// first argument against a NaN, so `worst = std::max(worst, error)` forgot a NaN result and the check passed.
#pragma once

#include <cmath>

namespace llmc {

// The worse of the errors so far and a new one; a NaN, once seen, stays.
inline double worse_error(double worst, double error) {
  return std::isnan(worst) || error <= worst ? worst : error;
}

}  // namespace llmc
