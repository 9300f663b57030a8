// Polar Express (llmc/optim/polar_express.h) against the float64 numpy oracle test/optim/optim_reference.py:
// one step against a first-order running error bound, five steps against the rounding-noise model, the
// singular values of the result against the band the polynomial maps the input's into, repeatability.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "llmc/optim/polar_express.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"
#include "test/support/python_oracle.h"

namespace {

using namespace llmc::test;  // random_values, DeviceBuffer, kStorageRoundoff
using llmc::floatX;

struct Shape {
  int batch, rows, cols;
};

std::string shape_name(const Shape& s) {
  return std::to_string(s.batch) + "x" + std::to_string(s.rows) + "x" + std::to_string(s.cols);
}

std::vector<double> steps_flat(const std::vector<llmc::PolarExpressStep>& steps) {
  std::vector<double> flat;
  for (const auto& s : steps) flat.insert(flat.end(), {s.a, s.b, s.c});
  return flat;
}

// The device result and the oracle's answers for one input.
struct PolarExpressRun {
  std::vector<double> input, got, want, tolerance, bound, band;
};

// The suite's fixture: each test's own temporary directory for the oracle's files.
class PolarExpress : public llmc::test::OracleTest {};

std::vector<double> run_device(const Shape& s, const std::vector<double>& input,
                               const std::vector<llmc::PolarExpressStep>& steps) {
  const size_t n = static_cast<size_t>(s.batch) * s.rows * s.cols;
  DeviceBuffer<floatX> in(n), out(n);
  in.upload(input);
  DeviceBuffer<char> workspace(llmc::PolarExpress::workspace_bytes(s.rows, s.cols, s.batch));
  llmc::PolarExpress polar(s.rows, s.cols, s.batch, workspace.get(), workspace.size(), steps);
  llmc::MatmulContext context;
  polar.run(context, in.get(), out.get(), s.batch, nullptr);
  return out.download();
}

PolarExpressRun run_both(const llmc::test::PythonOracle& oracle, const Shape& s,
                         const std::vector<llmc::PolarExpressStep>& steps, unsigned seed) {
  PolarExpressRun run;
  std::mt19937 rng(seed);
  run.input = random_values(static_cast<size_t>(s.batch) * s.rows * s.cols, rng);
  run.got = run_device(s, run.input, steps);
  oracle.put("g", {static_cast<size_t>(s.batch), static_cast<size_t>(s.rows), static_cast<size_t>(s.cols)}, run.input);
  oracle.put("steps", {steps.size(), 3}, steps_flat(steps));
  oracle.config("{\"storage_roundoff\": " + std::to_string(kStorageRoundoff) + "}");
  oracle.run("polar_express");
  run.want = oracle.get("x");
  run.tolerance = oracle.get("tolerance");
  run.band = oracle.get("band");
  if (steps.size() == 1) run.bound = oracle.get("bound");
  return run;
}

double frobenius(const double* x, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) sum += x[i] * x[i];
  return std::sqrt(sum);
}

// One step with the record's first (largest) coefficients: every element within the oracle's first-order
// running error bound (absolute values of every product, the storage roundoff at each stored value).
TEST_F(PolarExpress, OneStepWithinRunningErrorBound) {
  LLMC_REQUIRE_GPU();
  const std::vector<llmc::PolarExpressStep> first = {llmc::polar_express_record_steps()[0]};
  for (const Shape& s : {Shape{3, 24, 40}, Shape{2, 40, 24}, Shape{2, 32, 32}}) {
    const PolarExpressRun run = run_both(oracle(), s, first, 700 + s.rows);
    size_t bad = 0, worst = 0;
    double worst_ratio = 0.0;
    for (size_t i = 0; i < run.got.size(); i++) {
      const double ratio = std::fabs(run.got[i] - run.want[i]) / run.bound[i];
      if (!(ratio <= 1.0)) bad++;
      if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = i;
    }
    EXPECT_EQ(bad, 0u) << shape_name(s) << ": worst |error| / bound " << worst_ratio << " at " << worst << " (got "
                       << run.got[worst] << ", want " << run.want[worst] << ")";
  }
}

// Five record steps: per matrix, ||got - want||_F / ||want||_F within the largest of the oracle's noisy
// replicas (every stored value perturbed by up to the storage roundoff). The shapes: an attention tensor's
// four square matrices, an MLP pair (wide), a tall matrix (transposed path) and the ten [6,12] gates.
TEST_F(PolarExpress, FiveStepsMatchFloat64WithinRoundingModel) {
  LLMC_REQUIRE_GPU();
  const auto steps = llmc::polar_express_record_steps();
  for (const Shape& s : {Shape{4, 32, 32}, Shape{2, 32, 128}, Shape{1, 96, 24}, Shape{10, 6, 12}}) {
    const PolarExpressRun run = run_both(oracle(), s, steps, 710 + s.rows);
    const size_t n = static_cast<size_t>(s.rows) * s.cols;
    for (int b = 0; b < s.batch; b++) {
      std::vector<double> difference(n);
      for (size_t i = 0; i < n; i++) difference[i] = run.got[b * n + i] - run.want[b * n + i];
      const double error = frobenius(difference.data(), n) / frobenius(run.want.data() + b * n, n);
      EXPECT_LE(error, run.tolerance[b]) << shape_name(s) << " matrix " << b;
      if (std::getenv("LLMC_TEST_VERBOSE"))
        std::printf("  %s[%d]: relative error %.3g, tolerance %.3g\n", shape_name(s).c_str(), b, error,
                    run.tolerance[b]);
    }
  }
}

// Orthogonality: the result's singular values lie in the band [min, max] of the five-step polynomial
// over the normalised input's singular values (Weyl: each moves by at most ||error||_2 <= ||error||_F, the
// tolerance above times ||want||_F). For these well-conditioned (wide, tall) inputs the band is within
// [0.8, 1.2]: what five steps reach.
TEST_F(PolarExpress, SingularValuesInTheBandFiveStepsReach) {
  LLMC_REQUIRE_GPU();
  const auto steps = llmc::polar_express_record_steps();
  for (const Shape& s : {Shape{2, 24, 96}, Shape{1, 96, 24}, Shape{10, 6, 12}}) {
    const PolarExpressRun run = run_both(oracle(), s, steps, 720 + s.rows);
    const llmc::test::PythonOracle svd = oracle();
    svd.put("y", {static_cast<size_t>(s.batch), static_cast<size_t>(s.rows), static_cast<size_t>(s.cols)}, run.got);
    svd.run("singular_values");
    const std::vector<double> sv = svd.get("sv");
    const size_t n = static_cast<size_t>(s.rows) * s.cols, k = sv.size() / s.batch;
    for (int b = 0; b < s.batch; b++) {
      const double low = run.band[2 * b], high = run.band[2 * b + 1];
      EXPECT_GE(low, 0.8) << shape_name(s);
      EXPECT_LE(high, 1.2) << shape_name(s);
      const double margin = run.tolerance[b] * frobenius(run.want.data() + b * n, n);
      for (size_t i = 0; i < k; i++) {
        EXPECT_GE(sv[b * k + i], low - margin) << shape_name(s) << " matrix " << b << " singular value " << i;
        EXPECT_LE(sv[b * k + i], high + margin) << shape_name(s) << " matrix " << b << " singular value " << i;
      }
    }
  }
}

// The smear gate's single row: the polynomial is steep at sigma = 1/1.02 (relative condition ~100 over the
// five steps), so bf16 rounding moves the result's norm by up to ~25%, in the reference as here. Checked:
// finite, the input's direction (rounding never amplifies a direction error here: every step scales the
// row by a scalar; 16 stores of relative error <= u turn it by at most 16 u), and a norm in the band
// [0.85887, 1.14113] into which the five steps map every sigma in [1e-3, 1] (computed from the
// coefficients), widened by the last stores' 4 u.
TEST_F(PolarExpress, SingleRowKeepsDirectionAndReachesTheBand) {
  LLMC_REQUIRE_GPU();
  const Shape s{1, 1, 12};
  const PolarExpressRun run = run_both(oracle(), s, llmc::polar_express_record_steps(), 730);
  double dot = 0.0;
  for (size_t i = 0; i < run.got.size(); i++) {
    ASSERT_TRUE(std::isfinite(run.got[i]));
    dot += run.got[i] * run.input[i];
  }
  const double norm = frobenius(run.got.data(), run.got.size());
  const double cosine = dot / (norm * frobenius(run.input.data(), run.input.size()));
  EXPECT_GT(cosine, 1.0 - 0.5 * std::pow(16 * kStorageRoundoff, 2)) << "the row must keep its direction";
  EXPECT_GT(norm, 0.85887 * (1.0 - 4 * kStorageRoundoff));
  EXPECT_LT(norm, 1.14113 * (1.0 + 4 * kStorageRoundoff));
}

TEST_F(PolarExpress, BitwiseRepeatableAndInPlace) {
  LLMC_REQUIRE_GPU();
  const Shape s{2, 32, 64};
  const size_t n = static_cast<size_t>(s.batch) * s.rows * s.cols;
  std::mt19937 rng(740);
  const std::vector<double> input = random_values(n, rng);
  DeviceBuffer<floatX> in(n), out(n);
  in.upload(input);
  DeviceBuffer<char> workspace(llmc::PolarExpress::workspace_bytes(s.rows, s.cols, s.batch));
  llmc::PolarExpress polar(s.rows, s.cols, s.batch, workspace.get(), workspace.size());
  llmc::MatmulContext context;
  polar.run(context, in.get(), out.get(), s.batch, nullptr);
  const std::vector<floatX> first = out.download_raw();
  polar.run(context, in.get(), out.get(), s.batch, nullptr);
  EXPECT_TRUE(bitwise_equal(out.download_raw(), first)) << "two runs differ";
  polar.run(context, in.get(), in.get(), s.batch, nullptr);
  EXPECT_TRUE(bitwise_equal(in.download_raw(), first)) << "in place differs from out of place";
  // An even number of steps ends in the other buffer of the ping-pong: in place must work there too.
  const auto record = llmc::polar_express_record_steps();
  llmc::PolarExpress four(s.rows, s.cols, s.batch, workspace.get(), workspace.size(),
                          {record[0], record[1], record[2], record[3]});
  in.upload(input);
  four.run(context, in.get(), out.get(), s.batch, nullptr);
  const std::vector<floatX> four_steps = out.download_raw();
  four.run(context, in.get(), in.get(), s.batch, nullptr);
  EXPECT_TRUE(bitwise_equal(in.download_raw(), four_steps)) << "four steps: in place differs";
}

// The split update (the 2026-07-17 record's MLP bank) rounds B X (tall: X B) first and then adds a X in one
// fused multiply-add: bit for bit bf16(fma(a, X, bf16(product))), with X the normalised input (a step
// (1, 0, 0) gives it exactly) and the product what a fused step with a = 0 gives; unlike the fused update.
TEST_F(PolarExpress, SplitUpdateRoundsTheProductFirst) {
  LLMC_REQUIRE_GPU();
  const Shape s{2, 48, 16};
  const size_t n = static_cast<size_t>(s.batch) * s.rows * s.cols;
  std::mt19937 rng(750);
  DeviceBuffer<floatX> in(n), out(n);
  in.upload(random_values(n, rng));
  DeviceBuffer<char> workspace(llmc::PolarExpress::workspace_bytes(s.rows, s.cols, s.batch));
  llmc::MatmulContext context;
  const llmc::PolarExpressStep k = llmc::polar_express_record_steps()[0];
  auto run = [&](llmc::PolarExpressStep step, llmc::PolarExpressUpdate update) {
    llmc::PolarExpress polar(s.rows, s.cols, s.batch, workspace.get(), workspace.size(), {step}, update);
    polar.run(context, in.get(), out.get(), s.batch, nullptr);
    return out.download_raw();
  };
  const std::vector<floatX> x = run({1.0, 0.0, 0.0}, llmc::PolarExpressUpdate::kFused),
                            product = run({0.0, k.b, k.c}, llmc::PolarExpressUpdate::kFused),
                            split = run(k, llmc::PolarExpressUpdate::kSplit),
                            fused = run(k, llmc::PolarExpressUpdate::kFused);
  for (size_t i = 0; i < n; i++) {
    const floatX want = llmc::from_float<floatX>(
        std::fmaf(static_cast<float>(k.a), llmc::to_float(x[i]), llmc::to_float(product[i])));
    ASSERT_EQ(llmc::to_float(split[i]), llmc::to_float(want)) << "element " << i;
  }
#if !defined(LLMC_FP32)
  EXPECT_FALSE(bitwise_equal(split, fused)) << "the case must tell the two roundings apart";
#endif
}

TEST_F(PolarExpress, RejectsBadWorkspaceAndBatch) {
  LLMC_REQUIRE_GPU();
  const size_t bytes = llmc::PolarExpress::workspace_bytes(8, 16, 2);
  DeviceBuffer<char> workspace(bytes);
  EXPECT_THROW(llmc::PolarExpress(8, 16, 2, workspace.get(), bytes - 1), std::invalid_argument);
  EXPECT_THROW(llmc::PolarExpress(0, 16, 2, workspace.get(), bytes), std::invalid_argument);
  llmc::PolarExpress polar(8, 16, 2, workspace.get(), bytes);
  llmc::MatmulContext context;
  DeviceBuffer<floatX> x(3 * 8 * 16);
  EXPECT_THROW(polar.run(context, x.get(), x.get(), 3, nullptr), std::invalid_argument);
}

}  // namespace
