// AdamW's hyperparameters, in one struct shared by the kernel (llmc/kernels/adamw.cuh), the ZeRO
// optimizer and the trainer's options. What changes per call (learning rate, gradient scale) is passed
// separately.
#pragma once

namespace llmc {

struct AdamWSettings {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled; the ZeRO optimizer applies it to 2-D tensors only
};

}  // namespace llmc
