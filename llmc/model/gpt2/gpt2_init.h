// GPT-2 random initialization as llm.c does it: normal(0, 0.02) weights, residual projections
// (attprojw, fcprojw) scaled by 1/sqrt(2L), biases 0, LayerNorm weights 1. Deterministic from a seed
// on every platform (own Box-Muller over std::mt19937_64, not the implementation-defined
// std::normal_distribution), and independent of world_size.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "llmc/model/gpt2/gpt2_layout.h"

namespace llmc {

// Standard normal samples, reproducible everywhere from the seed (Box-Muller, both values used).
class NormalSampler {
 public:
  explicit NormalSampler(uint64_t seed) : engine_(seed) {}
  double next();

 private:
  double uniform_open_closed();  // in (0, 1], 53 random bits
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

constexpr double kInitStd = 0.02;

// layout.total_size floats: initialized parameters, with padding and the padded vocabulary rows of wte
// (rows V..Vp-1, never used as tokens) 0. Tensors are filled in layout order, so the values do not
// depend on world_size.
std::vector<float> init_gpt2_params(const GPT2Layout& layout, uint64_t seed);

}  // namespace llmc
