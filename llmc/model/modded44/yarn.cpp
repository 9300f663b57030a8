// RoPE frequencies and YaRN updates of the speedrun model (see yarn.h).
#include "llmc/model/modded44/yarn.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace llmc {

Yarn::Yarn(int head_dim) : head_dim_(head_dim) {
  if (head_dim <= 0 || head_dim % 4 != 0)
    throw std::invalid_argument("Yarn: head_dim must be a positive multiple of 4, got " + std::to_string(head_dim));
  reset();
}

void Yarn::reset() {
  const int rotated = head_dim_ / 4;
  frequencies_.assign(head_dim_ / 2, 0.0f);
  for (int k = 0; k < rotated; k++) {
    // Exponent k/(n-1) of torch.linspace(0, 1, n); the power in double, rounded to fp32 once.
    const double exponent = rotated > 1 ? static_cast<double>(k) / (rotated - 1) : 0.0;
    frequencies_[k] = static_cast<float>(std::pow(1.0 / 1024.0, exponent));
  }
  attn_scale_ = 0.1;
}

void Yarn::apply(int old_blocks, int new_blocks, int window_block) {
  if (old_blocks <= 0 || new_blocks <= 0 || window_block <= 0)
    throw std::invalid_argument("Yarn::apply: window sizes must be positive (old " + std::to_string(old_blocks) +
                                ", new " + std::to_string(new_blocks) + ", block " + std::to_string(window_block) +
                                ")");
  // fp32 arithmetic in the order of the reference: Python scalars meet an fp32 tensor.
  const float tokens = static_cast<float>(window_block * old_blocks);
  const float two_pi = static_cast<float>(2.0 * 3.14159265358979323846);
  const double ratio = static_cast<double>(old_blocks) / new_blocks;
  const float scaling = static_cast<float>(ratio), one_minus_scaling = static_cast<float>(1.0 - ratio);
  constexpr float kAlpha = 1.0f, kBeta = 32.0f;
  for (float& w : frequencies_) {
    const float rotations = tokens * w / two_pi;
    const float weight = std::min(std::max((rotations - kAlpha) / (kBeta - kAlpha), 0.0f), 1.0f);
    w *= scaling + weight * one_minus_scaling;
  }
  attn_scale_ *= 0.2 * std::log(static_cast<double>(new_blocks) / old_blocks) + 1.0;
}

}  // namespace llmc
