// The NorMuon tests' comparison with the float64 oracle's step (test/optim/optim_reference.py, save_step): per
// matrix, the update of the weights (parameters or masters), the momentum and the variance buffer, each as a
// relative Frobenius error within the oracle's tolerance for that matrix.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "test/support/kernel_test_utils.h"
#include "test/support/python_oracle.h"

namespace llmc::test {

// What the device made of one step of `count` matrices of `matrix` elements with `stats` variance values each.
struct NorMuonStepOutcome {
  std::vector<double> weights_before, weights_after, momentum, variance;
};

// `weights`: the oracle's name of the updated values ("params" or "master", read as weights + "_out").
inline void expect_step_matches_oracle(const PythonOracle& oracle, const std::string& name, const std::string& weights,
                                       int count, size_t matrix, size_t stats, const NorMuonStepOutcome& got) {
  const std::vector<double> want = oracle.get(weights + "_out"), momentum = oracle.get("momentum_out"),
                            variance = oracle.get("variance_out");
  const std::vector<double> update_tol = oracle.get("update_tolerance"),
                            momentum_tol = oracle.get("momentum_tolerance"),
                            variance_tol = oracle.get("variance_tolerance");
  for (int b = 0; b < count; b++) {
    std::vector<double> got_update(matrix), want_update(matrix);
    for (size_t i = 0; i < matrix; i++) {
      got_update[i] = got.weights_after[b * matrix + i] - got.weights_before[b * matrix + i];
      want_update[i] = want[b * matrix + i] - got.weights_before[b * matrix + i];
    }
    const double update_error = relative_frobenius_error(got_update.data(), want_update.data(), matrix);
    const double momentum_error = relative_frobenius_error(&got.momentum[b * matrix], &momentum[b * matrix], matrix);
    const double variance_error = relative_frobenius_error(&got.variance[b * stats], &variance[b * stats], stats);
    EXPECT_LE(update_error, update_tol[b]) << name << " matrix " << b << ": " << weights << " update";
    EXPECT_LE(momentum_error, momentum_tol[b]) << name << " matrix " << b << ": momentum";
    EXPECT_LE(variance_error, variance_tol[b]) << name << " matrix " << b << ": variance";
    if (std::getenv("LLMC_TEST_VERBOSE"))
      std::printf("  %s[%d]: update %.3g (tol %.3g), momentum %.3g (%.3g), variance %.3g (%.3g)\n", name.c_str(), b,
                  update_error, update_tol[b], momentum_error, momentum_tol[b], variance_error, variance_tol[b]);
  }
}

}  // namespace llmc::test
