// Tests of the host sampler (llmc/generate/sampler.h): greedy choice and its tie rule; the same seed
// gives the same tokens; the drawn frequencies match the exact distributions that temperature, top-k
// and top-p define (checked within 5 binomial standard deviations, so a correct sampler passes for
// essentially any seed and a wrong probability of a few percent fails); bad settings are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "llmc/generate/sampler.h"

namespace {

using llmc::Sampler;
using llmc::SamplingSettings;

std::vector<float> log_probs(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)) + 3.0f);  // an offset changes nothing
  return logits;
}

SamplingSettings settings(double temperature, int top_k = 0, double top_p = 1.0, uint64_t seed = 1) {
  SamplingSettings s;
  s.temperature = temperature;
  s.top_k = top_k;
  s.top_p = top_p;
  s.seed = seed;
  return s;
}

// Draws `draws` tokens and checks each token's count against `expected` probabilities (which sum to 1).
void expect_frequencies(const SamplingSettings& s, const std::vector<float>& logits,
                        const std::vector<double>& expected, int draws = 100000) {
  Sampler sampler(s);
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; i++) counts[sampler.sample(logits.data(), static_cast<int>(logits.size()))]++;
  for (size_t token = 0; token < logits.size(); token++) {
    const double mean = draws * expected[token];
    const double sigma = std::sqrt(draws * expected[token] * (1.0 - expected[token]));
    EXPECT_LE(std::fabs(counts[token] - mean), 5.0 * sigma + 1e-9)
        << "token " << token << ": " << counts[token] << " draws, expected " << mean;
  }
}

const std::vector<double> kProbs = {0.5, 0.25, 0.125, 0.125};

TEST(Sampler, GreedyTakesTheLargestLogitAndTheLowestIdOnTies) {
  Sampler sampler(settings(0.0));
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(sampler.sample(logits.data(), 4), 1);
  EXPECT_EQ(sampler.sample(logits.data(), 3), 1);
}

TEST(Sampler, TheSameSeedGivesTheSameTokens) {
  const std::vector<float> logits(50, 0.0f);  // uniform: every draw depends on the random numbers
  auto draw = [&](uint64_t seed) {
    Sampler sampler(settings(1.0, 0, 1.0, seed));
    std::vector<int> tokens;
    for (int i = 0; i < 200; i++) tokens.push_back(sampler.sample(logits.data(), 50));
    return tokens;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
}

TEST(Sampler, TemperatureOneDrawsTheSoftmax) { expect_frequencies(settings(1.0), log_probs(kProbs), kProbs); }

TEST(Sampler, TemperatureTwoDrawsTheSquareRootsRenormalised) {
  std::vector<double> flat;
  double sum = 0.0;
  for (double p : kProbs) sum += std::sqrt(p);
  for (double p : kProbs) flat.push_back(std::sqrt(p) / sum);
  expect_frequencies(settings(2.0, 0, 1.0, 2), log_probs(kProbs), flat);
}

TEST(Sampler, TopKKeepsTheKMostLikely) {
  expect_frequencies(settings(1.0, 2, 1.0, 3), log_probs(kProbs), {2.0 / 3, 1.0 / 3, 0.0, 0.0});
}

TEST(Sampler, TopPKeepsTheFewestTokensHoldingThatMass) {
  // 0.5 < 0.7 <= 0.5 + 0.25: the nucleus is the first two tokens; at exactly 0.5 the first one suffices.
  expect_frequencies(settings(1.0, 0, 0.7, 4), log_probs(kProbs), {2.0 / 3, 1.0 / 3, 0.0, 0.0});
  expect_frequencies(settings(1.0, 0, 0.5, 5), log_probs(kProbs), {1.0, 0.0, 0.0, 0.0}, 1000);
  // After top-k = 3 the masses are 4/7, 2/7, 1/7: 0.9 needs all three.
  expect_frequencies(settings(1.0, 3, 0.9, 6), log_probs(kProbs), {4.0 / 7, 2.0 / 7, 1.0 / 7, 0.0});
}

// A flat distribution over 200 tokens: the nucleus of 0.5 is 100 tokens (past the first sorted head of
// 64), the lowest ids among equals, each drawn with probability 1/100.
TEST(Sampler, TopPOfAFlatDistributionKeepsHalfTheTokensByIdOrder) {
  const int V = 200;
  std::vector<double> expected(V, 0.0);
  for (int i = 0; i < V / 2; i++) expected[i] = 2.0 / V;
  expect_frequencies(settings(1.0, 0, 0.5, 7), std::vector<float>(V, 1.5f), expected, 40000);
}

TEST(Sampler, RefusesNanLogitsAndBadSettings) {
  Sampler sampler(settings(1.0));
  const std::vector<float> logits = {0.0f, std::nanf(""), 1.0f};
  EXPECT_THROW(sampler.sample(logits.data(), 3), std::runtime_error);
  EXPECT_THROW(Sampler(settings(-0.5)), std::invalid_argument);
  EXPECT_THROW(Sampler(settings(1.0, -1)), std::invalid_argument);
  EXPECT_THROW(Sampler(settings(1.0, 0, 0.0)), std::invalid_argument);
  EXPECT_THROW(Sampler(settings(1.0, 0, 1.5)), std::invalid_argument);
  try {
    Sampler bad(settings(1.0, 0, 2.0));
    FAIL() << "no exception";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("--top-p"), std::string::npos) << error.what();
  }
}

}  // namespace
