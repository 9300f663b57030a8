// A kernel argument that changes from step to step (a learning rate, a momentum, a bias-corrected step size): its
// value fixed at launch, or the place in device memory the kernel reads it from as it runs. A step captured in a
// CUDA graph takes the second kind: the host writes each step's values there before the launch
// (llmc/optim/step_values.h), and the replay reads them.
#pragma once

#include <cuda_runtime.h>

namespace llmc {

struct StepScalar {
  float value = 0.0f;
  const float* device = nullptr;  // where the value is read instead, when not null

  static StepScalar fixed(float value) { return StepScalar{value, nullptr}; }
  static StepScalar at(const float* device) { return StepScalar{0.0f, device}; }
  __device__ float get() const { return device != nullptr ? *device : value; }
};

}  // namespace llmc
