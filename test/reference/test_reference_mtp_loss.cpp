// The double reference of the record's multi-token loss (test/reference/reference_mtp_loss.h) against finite
// differences: its gradient is that of the loss plus, for every next-token term that falls past the last row,
// its weight times the row's logsumexp (the record's kernel keeps those weights in the softmax term); and it
// is not the plain loss's gradient in those last rows, which shows that the quirk is reproduced.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "llmc/base/normal_sampler.h"
#include "test/reference/gradient_check.h"
#include "test/reference/reference_mtp_loss.h"

namespace {

constexpr int kRows = 6, kV = 16;

struct Case {
  std::vector<double> z;
  std::vector<int> targets, prefix_of;
  ref::MtpWeights weights;
};

Case make_case() {
  Case c;
  llmc::NormalSampler normal(7);
  c.z = gradient_check::random_vector(static_cast<size_t>(kRows) * kV, normal, 4.0);
  for (int t = 0; t < kRows; t++) c.targets.push_back((5 * t + 3) % kV);
  for (int j = 0; j < kV; j++) c.prefix_of.push_back(j % 3 == 0 ? -1 : (j * 7) % kV);
  c.weights.tokens = 3;
  c.weights.next[0] = 1.0;
  c.weights.next[1] = 0.5;
  c.weights.next[2] = 0.25;
  c.weights.prefix = 0.25;
  return c;
}

std::vector<double> softcap_u(const std::vector<double>& z) {
  std::vector<double> u(z.size());
  for (size_t i = 0; i < z.size(); i++) u[i] = ref::mtp_softcap_u(z[i]);
  return u;
}

// The summed loss; with `dropped`, plus each past-the-end term's weight times its row's logsumexp.
double total_loss(const Case& c, bool dropped) {
  const std::vector<double> u = softcap_u(c.z);
  std::vector<double> losses;
  ref::mtp_cross_entropy(&losses, nullptr, u, c.targets.data(), c.prefix_of.data(), c.weights, 1.0, kRows, kV);
  double total = 0.0;
  for (int t = 0; t < kRows; t++) {
    total += losses[static_cast<size_t>(t)];
    if (!dropped) continue;
    double sum = 0.0;
    for (int j = 0; j < kV; j++) sum += std::exp(ref::kMtpSoftcapScale * u[static_cast<size_t>(t) * kV + j]);
    for (int k = 0; k < c.weights.tokens; k++)
      if (t + k >= kRows) total += c.weights.next[k] * std::log(sum);
  }
  return total;
}

std::vector<double> analytic_gradient(const Case& c) {
  std::vector<double> dz;
  ref::mtp_cross_entropy(nullptr, &dz, softcap_u(c.z), c.targets.data(), c.prefix_of.data(), c.weights, 1.0, kRows, kV);
  return dz;
}

TEST(ReferenceMtpLoss, GradientIsThatOfTheLossWithTheDroppedTermsSoftmaxWeight) {
  Case c = make_case();
  const std::vector<double> dz = analytic_gradient(c);
  gradient_check::expect_gradient_matches("dz", c.z, dz, [&] { return total_loss(c, true); },
                                          gradient_check::all_indices(c.z.size()));
}

TEST(ReferenceMtpLoss, LastRowsDifferFromThePlainLossGradientOnly) {
  Case c = make_case();
  const std::vector<double> dz = analytic_gradient(c);
  const double h = 1e-5;
  double first_rows = 0.0, last_rows = 0.0;  // largest |dz - d(plain loss)/dz| in each part
  for (size_t i = 0; i < c.z.size(); i++) {
    const double saved = c.z[i];
    c.z[i] = saved + h;
    const double up = total_loss(c, false);
    c.z[i] = saved - h;
    const double down = total_loss(c, false);
    c.z[i] = saved;
    const double miss = std::abs(dz[i] - (up - down) / (2 * h));
    double& part = static_cast<int>(i / kV) + c.weights.tokens - 1 < kRows ? first_rows : last_rows;
    part = std::max(part, miss);
  }
  EXPECT_LT(first_rows, 1e-6);  // every term present: the plain gradient
  EXPECT_GT(last_rows, 1e-3);   // the last tokens - 1 rows: the dropped terms' softmax weight stays
}

TEST(ReferenceMtpLoss, ZeroLogitsGiveTheWeightsTimesLnV) {
  // z = -5 makes every u = 1/2 and z' = 11.5 on every column: each present term is ln V.
  Case c = make_case();
  for (double& value : c.z) value = -5.0;
  std::vector<double> losses;
  ref::mtp_cross_entropy(&losses, nullptr, softcap_u(c.z), c.targets.data(), c.prefix_of.data(), c.weights, 1.0, kRows,
                         kV);
  const int last = kRows - 1;  // only the next token, and the prefix if the target has one
  const double expected = (1.0 + (c.prefix_of[static_cast<size_t>(c.targets[last])] >= 0 ? 0.25 : 0.0)) * std::log(kV);
  EXPECT_NEAR(losses[static_cast<size_t>(last)], expected, 1e-12);
}

}  // namespace
