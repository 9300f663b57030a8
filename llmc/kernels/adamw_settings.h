// AdamW's hyperparameters, in one struct shared by the kernel (llmc/kernels/adamw.cuh), the ZeRO
// optimizer and the trainer's options, and the weight-decay segments of a shard that one kernel launch
// updates. What changes per call (learning rate, gradient scale) is passed separately.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace llmc {

struct AdamWSettings {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled; the ZeRO optimizer applies it to 2-D tensors only
};

constexpr int kMaxAdamWSegments = 32;

// Runs of a shard with one weight-decay setting each: elements [begin[s], begin[s] + length[s]) decay by
// weight_decay[s]. Passed to the kernel by value, so that a whole bucket shard is one launch.
struct AdamWSegments {
  size_t begin[kMaxAdamWSegments] = {};
  size_t length[kMaxAdamWSegments] = {};
  float weight_decay[kMaxAdamWSegments] = {};
  int count = 0;
  void add(size_t first, size_t n, float decay) {
    if (count == kMaxAdamWSegments)
      throw std::invalid_argument("AdamWSegments: more than " + std::to_string(kMaxAdamWSegments) + " segments");
    begin[count] = first;
    length[count] = n;
    weight_decay[count++] = decay;
  }
  size_t elements() const {
    size_t sum = 0;
    for (int s = 0; s < count; s++) sum += length[s];
    return sum;
  }
};

}  // namespace llmc
