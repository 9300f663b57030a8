// The 2026-07-17 record's initialisation (SPEEDRUN89.md section 1; docs/recipes.md#the-2026-07-17-model-being-ported):
// the head N(0, 0.005) and embed its transpose (tied), value embeddings 0.01 N(0, 1), the bigram table zero;
// Q, K, V, O and c_fc U(-a, a), a = sqrt(3) 0.5 / sqrt(C), c_proj zero; the small MLPs' first layers
// U(+-1/sqrt(C)), their second layers zero and their biases the record's effective values / 0.1; the scalars
// and lambdas as the record sets them. bf16 tensors are rounded to bf16 (the record draws them in bf16), so
// every build starts from the same numbers. Deterministic from the seed and independent of world_size.
#pragma once

#include <cstdint>
#include <vector>

#include "llmc/model/modded89/modded89_layout.h"

namespace llmc {

// layout.total_size floats in layout order, padding 0. Normal draws in the order head (row-major [C, V]),
// value embeddings; uniform draws from a second stream, per layer qk, vo, c_fc, then the gate and MUDD
// first layers in layout order.
std::vector<float> init_modded89_params(const Modded89Layout& layout, uint64_t seed);

// The bigram sign table, kBigramSignRows (8192) x C values of +-1: the signs of normal draws from a fixed seed.
// The record draws its table with torch at startup and keeps it out of the model; a fixed table here keeps a
// model file complete without it (the same table in every run, every rank count and every build).
std::vector<float> modded89_sign_table(int channels);

}  // namespace llmc
