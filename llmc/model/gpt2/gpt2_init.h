// GPT-2 random initialization as llm.c does it: normal(0, 0.02) weights, residual projections
// (attprojw, fcprojw) scaled by 1/sqrt(2L), biases 0, LayerNorm weights 1. Deterministic from a seed
// on every platform (llmc/base/normal_sampler.h), and independent of world_size.
#pragma once

#include <cstdint>
#include <vector>

#include "llmc/base/normal_sampler.h"
#include "llmc/model/gpt2/gpt2_layout.h"

namespace llmc {

constexpr double kInitStd = 0.02;

// layout.total_size floats: initialized parameters, with padding and the padded vocabulary rows of wte
// (rows V..Vp-1, never used as tokens) 0. Tensors are filled in layout order, so the values do not
// depend on world_size.
std::vector<float> init_gpt2_params(const GPT2Layout& layout, uint64_t seed);

}  // namespace llmc
