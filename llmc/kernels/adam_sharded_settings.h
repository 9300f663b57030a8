// The speedrun's sharded Adam, host side: which rows of a tensor a rank updates, the record's constants and
// the bias-corrected step size. Host-only, so that code which configures the optimizer (the trainer) needs
// no kernel header; the kernel is llmc/kernels/adam_sharded.cuh.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>

namespace llmc {

// Rows of a tensor that one rank updates: shards of ceil(rows / world) rows (the last ones shorter or
// empty when world does not divide rows; the record's tensors divide evenly at 1, 2, 4 and 8 ranks).
struct AdamRowShard {
  int row_begin = 0, row_end = 0;
  int rows() const { return row_end - row_begin; }
};

inline AdamRowShard adam_row_shard(int rows, int world, int rank) {
  if (rows < 0 || world <= 0 || rank < 0 || rank >= world)
    throw std::invalid_argument("adam_row_shard: rows=" + std::to_string(rows) + " world=" + std::to_string(world) +
                                " rank=" + std::to_string(rank));
  const int shard = (rows + world - 1) / world;
  const int begin = rank * shard < rows ? rank * shard : rows;
  const int end = begin + shard < rows ? begin + shard : rows;
  return AdamRowShard{begin, end};
}

// The record's constants; the learning rate (0.008 x the tensor's multiplier x the schedule) changes per
// call and is an argument.
struct AdamShardedSettings {
  double beta1 = 0.65;
  double beta2 = 0.95;
  double eps = 1e-8;
  // Cautious weight decay (none in #44): p -= u + decay p where u p > 0 (strict), decay = lr^2 x
  // weight_decay x weight_decay_multiplier, in Python's order (the 2026-07-17 record couples it to lr^2).
  double weight_decay = 0.0;
  double weight_decay_multiplier = 1.0;

  // The 2026-07-17 record's Adam for one tensor (SPEEDRUN89.md section 5): its betas and wd_mul, eps 1e-10,
  // weight decay 0.005; the moments are fp32 (the caller's S).
  static AdamShardedSettings record_2026(double beta1, double beta2, double weight_decay_multiplier) {
    return AdamShardedSettings{beta1, beta2, 1e-10, 0.005, weight_decay_multiplier};
  }
};

// lr * sqrt(1 - beta2^t) / (1 - beta1^t) for the t-th update (t >= 1), in double like the reference.
inline double adam_step_size(const AdamShardedSettings& settings, double lr, long long t) {
  if (t < 1) throw std::invalid_argument("adam_step_size: update count " + std::to_string(t) + " < 1");
  const double bias1 = 1.0 - std::pow(settings.beta1, static_cast<double>(t)),
               bias2 = 1.0 - std::pow(settings.beta2, static_cast<double>(t));
  return lr * std::sqrt(bias2) / bias1;
}

// The cautious decay's coefficient for learning rate lr: lr^2 x weight_decay x the multiplier (0 in #44).
inline double adam_decay(const AdamShardedSettings& settings, double lr) {
  return lr * lr * settings.weight_decay * settings.weight_decay_multiplier;
}

// One update's arguments of the Adam kernel, rounded to fp32 from the double step size and decay: what the host
// passes or writes for the device to read (llmc/cuda/step_scalar.h).
struct AdamStepValues {
  float step_size, decay;
};

inline AdamStepValues adam_step_values(const AdamShardedSettings& settings, double lr, long long t) {
  return AdamStepValues{static_cast<float>(adam_step_size(settings, lr, t)), static_cast<float>(adam_decay(settings, lr))};
}

}  // namespace llmc
