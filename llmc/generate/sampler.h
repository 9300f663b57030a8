// Picks the next token from a row of fp32 logits on the host: greedy (temperature 0) or a random draw
// from softmax(logits / temperature) restricted to the top-k tokens and then to the top-p nucleus.
// Reproducible: the same seed and logits give the same tokens on every platform (std::mt19937_64 is
// fully specified; the uniform draw is its top 53 bits, not the implementation-defined distributions).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace llmc {

struct SamplingSettings {
  double temperature = 1.0;  // 0 = greedy (argmax, lowest id on ties)
  int top_k = 0;             // keep the k most likely tokens; 0 = all
  double top_p = 1.0;        // then keep the fewest most likely tokens holding >= top_p of their mass; 1 = all
  uint64_t seed = 1337;
};

// Throws std::invalid_argument naming the option (--temperature, --top-k, --top-p) that is out of range.
void validate_sampling_settings(const SamplingSettings& settings);

class Sampler {
 public:
  explicit Sampler(const SamplingSettings& settings);  // validates the settings

  // The next token id in [0, vocab_size). Throws std::runtime_error when a logit is NaN.
  int32_t sample(const float* logits, int vocab_size);

 private:
  double uniform();  // in [0, 1)
  // Reduces candidates_ (sorted or not) to the top-p nucleus of weights_, sorted most likely first.
  void keep_nucleus();
  // Most likely first; equal weights by id, so the order (and the draw) never depends on the sort used.
  auto by_likelihood() const {
    return [this](int32_t a, int32_t b) { return weights_[a] > weights_[b] || (weights_[a] == weights_[b] && a < b); };
  }

  SamplingSettings settings_;
  std::mt19937_64 engine_;
  std::vector<double> weights_;      // exp((logit - max) / temperature) per token
  std::vector<int32_t> candidates_;  // token ids still in the running
};

}  // namespace llmc
