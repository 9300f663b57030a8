// The speedrun model's initialisation (docs/recipes.md, "The model"): embeddings and value embeddings N(0,1);
// W_q, W_k, W_v and W_fc ~ U(-a, a) with a = sqrt(3) * 0.5 / sqrt(C); W_o, W_proj, head and gates zero;
// the scalar vector as the record sets it. Each value is rounded to its reference storage dtype
// (bf16 tables, fp32 matrices), so every build starts from the same numbers. Deterministic from the
// seed on every platform and independent of world_size.
#pragma once

#include <cstdint>
#include <vector>

#include "llmc/model/modded44/speedrun_layout.h"

namespace llmc {

// layout.total_size floats in layout order, padding 0. Tables are drawn in the order embed, ve0, ve1,
// ve2 (normal), then per block the W_q, W_k, W_v rows of qkvo and W_fc (uniform, from a second stream).
std::vector<float> init_speedrun_params(const SpeedrunLayout& layout, uint64_t seed);

// The scalar vector's initial values: skip weights -1.5, block lambdas (1, 0), value lambdas
// (0.5, 0.5), smear lambda 0, backout lambda 0.5, padding 1.
std::vector<float> initial_speedrun_scalars(int num_blocks);

}  // namespace llmc
