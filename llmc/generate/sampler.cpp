// The host sampler (see sampler.h): temperature, top-k, then top-p, then one uniform draw.
#include "llmc/generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace llmc {

void validate_sampling_settings(const SamplingSettings& settings) {
  if (!(settings.temperature >= 0.0) || !std::isfinite(settings.temperature))
    throw std::invalid_argument("--temperature " + std::to_string(settings.temperature) +
                                ": must be a finite number >= 0 (0 = greedy)");
  if (settings.top_k < 0)
    throw std::invalid_argument("--top-k " + std::to_string(settings.top_k) + ": must be >= 0 (0 = off)");
  if (!(settings.top_p > 0.0 && settings.top_p <= 1.0))
    throw std::invalid_argument("--top-p " + std::to_string(settings.top_p) + ": must be in (0, 1] (1 = off)");
}

Sampler::Sampler(const SamplingSettings& settings) : settings_(settings), engine_(settings.seed) {
  validate_sampling_settings(settings);
}

double Sampler::uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

int32_t Sampler::sample(const float* logits, int vocab_size) {
  if (vocab_size < 1) throw std::invalid_argument("sample: empty vocabulary");
  int32_t best = 0;
  for (int32_t i = 0; i < vocab_size; i++) {
    if (std::isnan(logits[i])) throw std::runtime_error("sample: the logit of token " + std::to_string(i) + " is NaN");
    if (logits[i] > logits[best]) best = i;
  }
  if (settings_.temperature == 0.0) return best;

  const double max_logit = logits[best];
  weights_.resize(vocab_size);
  for (int32_t i = 0; i < vocab_size; i++)
    weights_[i] = std::exp((static_cast<double>(logits[i]) - max_logit) / settings_.temperature);
  candidates_.resize(vocab_size);
  for (int32_t i = 0; i < vocab_size; i++) candidates_[i] = i;
  if (settings_.top_k > 0 && settings_.top_k < vocab_size) {
    std::nth_element(candidates_.begin(), candidates_.begin() + settings_.top_k, candidates_.end(), by_likelihood());
    candidates_.resize(settings_.top_k);
  }
  if (settings_.top_p < 1.0) keep_nucleus();

  double mass = 0.0;
  for (int32_t id : candidates_) mass += weights_[id];
  const double target = uniform() * mass;
  double cumulative = 0.0;
  for (int32_t id : candidates_) {
    cumulative += weights_[id];
    if (target < cumulative) return id;
  }
  return candidates_.back();  // only reached through rounding of the last partial sum
}

// Sorting all 50k candidates for every token would cost milliseconds; a trained model's nucleus is
// usually small, so sort the head only, doubling it until it holds top_p of the mass.
void Sampler::keep_nucleus() {
  double mass = 0.0;
  for (int32_t id : candidates_) mass += weights_[id];
  const double wanted = settings_.top_p * mass;
  size_t head = std::min<size_t>(64, candidates_.size());
  for (;;) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + head, candidates_.end(), by_likelihood());
    double cumulative = 0.0;
    for (size_t i = 0; i < head; i++) {
      cumulative += weights_[candidates_[i]];
      if (cumulative >= wanted) {
        candidates_.resize(i + 1);
        return;
      }
    }
    if (head == candidates_.size()) return;  // rounding: the whole set it is
    head = std::min(2 * head, candidates_.size());
  }
}

}  // namespace llmc
