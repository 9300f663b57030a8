// The speedrun model's initialisation (see speedrun_init.h).
#include "llmc/model/modded44/speedrun_init.h"

#include <cmath>

#include "llmc/base/bf16_bits.h"
#include "llmc/base/normal_sampler.h"

namespace llmc {

std::vector<float> initial_speedrun_scalars(int num_blocks) {
  const SpeedrunScalarIndex index{num_blocks};
  std::vector<float> scalars(static_cast<size_t>(index.count()), 1.0f);  // padding 1
  for (int k = 0; k < num_blocks; k++) scalars[index.skip_weight(k)] = -1.5f;
  for (int i = 0; i < num_blocks; i++) {
    scalars[index.block_lambda(i, 0)] = 1.0f;
    scalars[index.block_lambda(i, 1)] = 0.0f;
    scalars[index.sa_lambda(i, 0)] = 0.5f;
    scalars[index.sa_lambda(i, 1)] = 0.5f;
  }
  scalars[index.smear_lambda()] = 0.0f;
  scalars[index.backout_lambda()] = 0.5f;
  return scalars;
}

std::vector<float> init_speedrun_params(const SpeedrunLayout& layout, uint64_t seed) {
  const SpeedrunConfig& config = layout.config;
  const size_t C = static_cast<size_t>(config.channels());
  std::vector<float> params(layout.total_size, 0.0f);
  NormalSampler normal(seed);
  auto fill_normal = [&](const TensorView& view) {
    for (size_t i = 0; i < view.numel; i++)
      params[view.offset + i] = bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(normal.next())));
  };
  fill_normal(layout.tensor(SpeedrunTensor::kEmbed));
  for (int k = 0; k < kSpeedrunValueEmbeds; k++) fill_normal(layout.tensor(SpeedrunTensor::kValueEmbed, k));

  // U(-a, a) from a second stream, rounded to fp32 storage.
  UniformSampler uniform_draws(seed);
  const double bound = std::sqrt(3.0) * 0.5 / std::sqrt(static_cast<double>(C));
  auto uniform = [&] { return static_cast<float>(uniform_draws.next(bound)); };
  for (int i = 0; i < config.num_blocks; i++) {
    const SpeedrunBlock& role = layout.structure.blocks[static_cast<size_t>(i)];
    if (role.attention) {  // rows 0..3C-1 of the [4C, C] view: W_q, W_k, W_v; W_o stays 0
      const TensorView& qkvo = layout.tensor(SpeedrunTensor::kQkvo, i);
      for (size_t e = 0; e < 3 * C * C; e++) params[qkvo.offset + e] = uniform();
    }
    if (role.mlp) {
      const TensorView& fc = layout.tensor(SpeedrunTensor::kFc, i);
      for (size_t e = 0; e < fc.numel; e++) params[fc.offset + e] = uniform();
    }
  }
  const std::vector<float> scalars = initial_speedrun_scalars(config.num_blocks);
  const TensorView& scalar_view = layout.tensor(SpeedrunTensor::kScalars);
  for (size_t s = 0; s < scalars.size(); s++) params[scalar_view.offset + s] = scalars[s];
  return params;
}

}  // namespace llmc
